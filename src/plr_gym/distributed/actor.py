"""The actor that hosts a level source: :class:`LevelSourceActor` and :func:`host_level_source`.

The actor runs the hosted source's protocol for every client, applies each client's score pushes once
(by client id and sequence number, through restarts), joins episodes scored in parts, and writes
checkpoints that a restarted actor loads. Its methods are the wire protocol of
:class:`RemoteLevelSource`.
"""

from __future__ import annotations

import copy
import os
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import ray

from plr_gym._levels import load_values, save_values
from plr_gym._sizes import allocating
from plr_gym.checkpoint import checkpoint_files, write_checkpoint_dir
from plr_gym.distributed.options import _actor_options, _check_count, _check_seconds, _check_source
from plr_gym.distributed.wire import _checked_push, _portable, _wire
from plr_gym.episode_parts import EpisodeJoiner
from plr_gym.sampler import LevelSampler

#: The actor's own file in a checkpoint directory (which score pushes the checkpoint holds, counters).
REMOTE_FILE = "plr_remote.npz"


# ------------------------------------------------------------------------------------------------ actor
class _Applied:
    """The score pushes of one client that the source holds: all up to ``upto``, plus ``extra`` above it."""

    __slots__ = ("extra", "upto")

    def __init__(self, upto: int = 0, extra: Iterable[int] = ()) -> None:
        self.upto = upto
        self.extra = set(extra)

    def __contains__(self, seq: int) -> bool:
        return seq <= self.upto or seq in self.extra

    def add(self, seq: int) -> None:
        self.extra.add(seq)
        while self.upto + 1 in self.extra:
            self.upto += 1
            self.extra.discard(self.upto)

    def copy(self) -> _Applied:
        return _Applied(self.upto, self.extra)

    def to_json(self) -> list[Any]:
        return [self.upto, sorted(self.extra)]


class LevelSourceActor:
    """What a level source actor runs: the hosted source plus checkpoints and per-client bookkeeping.

    Create it with :func:`host_level_source` (which wraps it in ``ray.remote``) and talk to it through a
    :class:`RemoteLevelSource`; the methods below are the wire protocol between the two. It is a plain
    class, so it can also be used in-process (tests, debugging).

    :param source: the hosted :class:`~plr_gym.source.LevelSource`.
    :param checkpoint_dir: where to write checkpoints (``None``: never; a restarted actor then starts
        from ``source`` as it was given). If it already holds a checkpoint, the actor starts from it.
    :param checkpoint_every: write a checkpoint after this many absorbed scores (episodes)...
    :param max_restarts: how the actor was hosted (clients give up at once on a dead actor hosted with 0).
    :param checkpoint_interval: ... but at most one every this many seconds (a checkpoint is ``fsync``-ed
        files: tens of milliseconds).
    :param part_timeout: seconds an episode scored in parts (:meth:`push` with ``parts``) waits for its
        next part before it is given up unscored (counted in ``parts_unscored``): wall-clock seconds,
        which run on while training is paused, so a pause longer than this gives up the episodes whose
        first parts arrived before it (see :func:`host_level_source`).

    Example:
        >>> import numpy as np
        >>> from plr_gym import LevelSampler
        >>> actor = LevelSourceActor(LevelSampler(range(8), seed=0))
        >>> incarnation, levels = actor.draw(3)
        >>> reply = actor.push("client-a", 1, [(levels, [0.2, 0.4, float("nan")])])
        >>> ((batch, error),) = reply["errors"]             # refused, nothing of the batch kept
        >>> type(error).__name__, actor.stats()["scores_absorbed"]
        ('ValueError', 0)
    """

    def __init__(
        self,
        source: Any,
        checkpoint_dir: str | None = None,
        checkpoint_every: int = 100,
        max_restarts: int | None = None,
        checkpoint_interval: float = 5.0,
        part_timeout: float = 600.0,
    ) -> None:
        _check_source(source, "LevelSourceActor")
        # Ray hands the actor read-only views of the arrays it received: work on writable copies
        self.source = copy.deepcopy(source)
        self.checkpoint_dir = None if checkpoint_dir is None else os.path.abspath(os.fspath(checkpoint_dir))
        self.checkpoint_every = _check_count("checkpoint_every", checkpoint_every, low=1)
        self.checkpoint_interval = _check_seconds("checkpoint_interval", checkpoint_interval)
        self._last_checkpoint = time.monotonic()
        self.incarnation = uuid.uuid4().hex
        self.max_restarts = max_restarts  # as hosted (told to clients: 0 means a dead actor stays dead)
        self._applied: dict[str, _Applied] = {}  # per client: pushes the source holds
        self._committed: dict[str, _Applied] = {}  # per client: pushes the last checkpoint holds
        self.counters = {
            "levels_served": 0,
            "scores_absorbed": 0,
            "batches_refused": 0,
            "pushes_duplicate": 0,
            "checkpoints": 0,
            "restores": 0,
        }
        self._since_checkpoint = 0
        self.restored_from: str | None = None
        self.part_timeout = _check_seconds("part_timeout", part_timeout)
        self._joiner: EpisodeJoiner | None = None  # made on the first episode parts (push(parts=...))
        self._reported: set[str] = set()  # episodes reported joined before a restart (push(reported=...))
        if self.checkpoint_dir is not None and _has_checkpoint(self.checkpoint_dir, self._file_names()):
            self._restore(self.checkpoint_dir)

    # ------------------------------------------------------------------ description
    def _file_names(self) -> list[str]:
        return [*self.source.checkpoint_files(), REMOTE_FILE]

    def describe(self) -> dict[str, Any]:
        """What a client caches: strategy, level dtype, whether rollouts are planned, file names..."""
        source = self.source
        return {
            "incarnation": self.incarnation,
            "strategy": source.strategy,
            "strategy_info": source.strategy_info,
            "level_dtype": np.dtype(source.level_dtype),
            "plans_rollouts": bool(source.plans_rollouts),
            "num_levels": int(source.num_levels),
            "files": list(source.checkpoint_files()),
            "n_envs": getattr(source, "n_envs", None),
            "rollout_mode": source.rollout_mode,
            "last_rollout_mode": source.last_rollout_mode,
            "checkpoint_dir": self.checkpoint_dir,
            "max_restarts": self.max_restarts,
        }

    def stats(self) -> dict[str, Any]:
        """The actor's counters (levels served, scores absorbed, refused batches, checkpoints, restores),
        its incarnation (a new one after each restart), the number of clients it has heard from and the
        CPU time its process has used (``cpu_seconds``)."""
        return {
            **self.counters,
            "incarnation": self.incarnation,
            "clients": len(self._applied),
            "restored_from": self.restored_from,
            "cpu_seconds": time.process_time(),
            **self._joiner_stats(),
        }

    def _joiner_stats(self) -> dict[str, int]:
        joiner = self._joiner
        if joiner is None:
            return {"episodes_joined": 0, "parts_received": 0, "parts_unscored": 0, "parts_pending": 0}
        return {
            "episodes_joined": joiner.episodes_joined,
            "parts_received": joiner.parts_received,
            "parts_unscored": joiner.parts_unscored,
            "parts_pending": joiner.parts_pending,
        }

    # ------------------------------------------------------------------ levels
    def draw(self, n: int) -> tuple[str, Any]:
        """``n`` levels of a per-episode source (each counted as sampled now), for a client's queue."""
        n = _check_count("n", n, 0)
        with allocating("n", n, "draw the levels in smaller batches"):
            envs = np.arange(n, dtype=np.int64)
        levels = self.source.next_levels(envs)
        self.counters["levels_served"] += n
        return self.incarnation, _wire(levels)

    def plan(self, envs: Any) -> tuple[str, Any]:
        """The levels of ``envs`` in the open plan of a source that plans rollouts."""
        envs = _env_indices(envs)
        levels = self.source.next_levels(envs)
        self.counters["levels_served"] += int(envs.size)
        return self.incarnation, levels

    def begin_rollout(self, envs: Any = None) -> tuple[str, bool, str, str, Any]:
        """``source.begin_rollout()``; with ``envs``, also the plan's levels of those envs."""
        restart = bool(self.source.begin_rollout())
        levels = None if envs is None else self.plan(envs)[1]
        return self.incarnation, restart, self.source.rollout_mode, self.source.last_rollout_mode, levels

    def end_rollout(self) -> tuple[str, str]:
        self.source.end_rollout()
        return self.source.rollout_mode, self.source.last_rollout_mode

    def discard_unplayed(self) -> None:
        self.source.discard_unplayed()

    def set_progress(self, progress: float) -> None:
        self.source.set_progress(progress)

    # ------------------------------------------------------------------ scores
    def push(
        self,
        client: str,
        seq: int,
        batches: Any,
        draw: int = 0,
        parts: Any = None,
        reported: Any = None,
        rollout: bool | None = None,
    ) -> dict[str, Any]:
        """Apply a client's score batches, each with the source's all-or-nothing ``update_batch``, then draw
        ``draw`` levels for the client's queue (one round trip for both, as :meth:`draw` would).

        ``batches`` is a list of ``(levels, scores)`` or the same packed by :func:`pack_batches`.

        A push already applied (same ``client`` and ``seq``, sent again after a restart) is skipped.
        Refused batches are returned as ``errors`` (``(index, exception)``), never raised: the actor
        stays up for the other clients.

        ``parts`` (optional) are :class:`~plr_gym.episode_parts.EpisodePart` s of episodes scored in parts
        (RLlib with several learners): the actor's :class:`~plr_gym.episode_parts.EpisodeJoiner` joins
        them by episode id and applies the score of each episode they complete, once (the push's sequence
        number makes a resent push a no-op; the checkpoint holds the parts still waiting).

        ``reported`` (with ``parts``, on a push sent again after a restart): the ids of the episodes whose
        completion an earlier reply to this push already reported to the client. Such an episode, joined
        again by the restarted actor (its checkpoint predates the push), is applied to the source (which
        lost it) but not reported again, whichever client's push completes it: a client that counts the
        episodes it is told were scored (RLlib's ``plr/episodes_scored``) counts each once.

        ``rollout`` (``full`` of :meth:`rollout_stats`): then also close the source's rollout, read its
        statistics and open the next (:meth:`RemoteLevelSource.next_rollout`: a learner's step in one call).

        :return: ``{"incarnation", "errors", "committed", "levels"}``; ``committed``: every push of this
            client up to that number is held by the last checkpoint (or applied, without checkpoints);
            ``levels``: the ``draw`` levels drawn after the scores were applied (``None`` if ``draw`` is 0).
            With ``rollout``, also ``"rollout"``: :meth:`rollout_stats` of the rollout it closed.
            With ``parts``, also ``"parts"``: ``{"joined": [(level, score, episode id)...], "unscored":
            parts given up, "errors": [(index, exception)...]}`` (``None`` for a push already applied).
        """
        client, seq, batches, draw = _checked_push(client, seq, batches, draw)  # all before applying any
        if rollout is not None and not isinstance(rollout, (bool, np.bool_)):
            raise TypeError(f"rollout must be None or a bool (rollout_stats' full), got {rollout!r}")
        applied = self._applied.setdefault(client, _Applied())
        errors: list[tuple[int, BaseException]] = []
        part_report: dict[str, Any] | None = None  # what the parts did (None: a push already applied)
        if seq in applied:
            self.counters["pushes_duplicate"] += 1
        else:
            errors, part_report, absorbed, received = self._apply_push(batches, parts, reported)
            applied.add(seq)
            self._absorbed(absorbed, received)
        held = self._committed.get(str(client)) if self.checkpoint_dir is not None else applied
        levels = self.draw(draw)[1] if draw else None
        reply = {
            "incarnation": self.incarnation,
            "errors": errors,
            "committed": held.upto if held else 0,
            "levels": levels,
        }
        if parts is not None:
            reply["parts"] = part_report
        if rollout is not None:
            self.source.end_rollout()
            reply["rollout"] = dict(self.source.rollout_stats(bool(rollout)))
            self.source.begin_rollout()
        return reply

    def _apply_push(
        self, batches: list[tuple[Any, Any]], parts: Any, reported: Any
    ) -> tuple[list[tuple[int, BaseException]], dict[str, Any] | None, int, int]:
        """Apply a new push: ``(errors, part report, scores absorbed, parts received)``."""
        errors: list[tuple[int, BaseException]] = []
        absorbed = self._apply_joined(batches)
        if absorbed is None:  # one by one, so that a refused batch is refused alone
            absorbed, errors = self._apply_each(batches)
        part_report: dict[str, Any] | None = None
        received = 0  # episode parts (a checkpoint is due after checkpoint_every scores or parts)
        if parts is not None:
            if reported:
                self._reported.update(str(e) for e in reported)
            joined, part_report = self._join_parts(parts)
            absorbed += joined
            received = len(parts) - len(part_report["errors"])
        return errors, part_report, absorbed, received

    def _apply_each(self, batches: list[tuple[Any, Any]]) -> tuple[int, list[tuple[int, BaseException]]]:
        """Apply the batches one by one: ``(scores absorbed, refused batches as (index, exception))``."""
        absorbed = 0
        errors: list[tuple[int, BaseException]] = []
        for k, (levels, scores) in enumerate(batches):
            try:
                self.source.update_batch(levels, scores)
            except Exception as exc:  # refused: nothing of this batch was stored
                errors.append((k, _portable(exc)))
                self.counters["batches_refused"] += 1
            else:
                absorbed += len(scores)
        return absorbed, errors

    def _absorbed(self, absorbed: int, received: int) -> None:
        """Count a push's absorbed scores; write a checkpoint if one is due."""
        self.counters["scores_absorbed"] += absorbed
        self._since_checkpoint += max(absorbed, received)
        if (
            self.checkpoint_dir is not None
            and self._since_checkpoint >= self.checkpoint_every
            and time.monotonic() - self._last_checkpoint >= self.checkpoint_interval
        ):
            self.checkpoint()

    def _join_parts(self, parts: Any) -> tuple[int, dict[str, Any]]:
        """Join episode parts; apply the completed episodes' scores (all at once, else one by one)."""
        if self._joiner is None:
            try:
                self._joiner = EpisodeJoiner(self.source.strategy_info, self.part_timeout)
            except ValueError as exc:  # the hosted strategy has no parts (learnability, random...)
                return 0, {"joined": [], "unscored": 0, "errors": [(0, exc)]}
        if not isinstance(parts, (list, tuple)):
            parts = []
            refused: list[tuple[int, BaseException]] = [(0, TypeError("parts must be a list of EpisodePart"))]
        else:
            refused = []
        result = self._joiner.add(parts)
        refused.extend((k, _portable(exc)) for k, exc in result.refused)
        joined: list[tuple[Any, float, str]] = []
        try:
            if result.levels:
                self.source.update_batch(result.levels, result.scores)
            joined = list(zip(result.levels, result.scores, result.episodes))
        except Exception:  # one by one: a refused episode (unknown level) is refused alone
            for level, score, episode in zip(result.levels, result.scores, result.episodes):
                try:
                    self.source.update_batch([level], [score])
                except Exception as exc:
                    refused.append((-1, _portable(exc)))
                    self.counters["batches_refused"] += 1
                else:
                    joined.append((level, score, episode))
        if self._reported:  # joined again after a restart: applied, but reported once only
            again = [j for j in joined if str(j[2]) in self._reported]
            self._reported.difference_update(str(j[2]) for j in again)
            again_ids = {str(j[2]) for j in again}  # by episode id: levels may be arrays
            joined = [j for j in joined if str(j[2]) not in again_ids]
            report = {"joined": joined, "unscored": result.unscored, "errors": refused}
            return len(joined) + len(again), report
        return len(joined), {"joined": joined, "unscored": result.unscored, "errors": refused}

    def _apply_joined(self, batches: list[tuple[Any, Any]]) -> int | None:
        """Apply several batches to a :class:`~plr_gym.LevelSampler` as one ``update_batch`` call (the
        same result: it applies its pairs in order), or return ``None`` to apply them one by one (one
        batch, another kind of source, or a refusal: then nothing was stored)."""
        if len(batches) < 2 or not isinstance(self.source, LevelSampler):
            return None
        try:
            levels = np.concatenate([np.asarray(b[0]).reshape(-1) for b in batches])
            scores = np.concatenate([np.asarray(b[1], dtype=np.float64).reshape(-1) for b in batches])
            if levels.size != scores.size:
                return None
            self.source.update_batch(levels, scores)
        except Exception:
            return None
        return int(scores.size)

    # ------------------------------------------------------------------ forwarded protocol
    def rollout_stats(self, full: bool) -> dict[str, Any]:
        return dict(self.source.rollout_stats(full))

    def retained_levels(self) -> list[Any] | None:
        kept: list[Any] | None = self.source.retained_levels()
        return kept

    def has_scores(self) -> bool:
        return bool(self.source.has_scores)

    def refused(self, exc: BaseException, levels: list[Any]) -> Exception | None:
        explained: Exception | None = self.source.refused(exc, levels)
        return explained

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = self.source.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.source.load_state_dict(copy.deepcopy(state))  # writable copies of Ray's read-only arrays

    def call(self, method: str, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None) -> Any:
        """``source.<method>(*args, **kwargs)`` (e.g. ``sample_weights``), or the attribute's value."""
        value = getattr(self.source, method)
        return value(*args, **(kwargs or {})) if callable(value) else value

    # ------------------------------------------------------------------ checkpoints
    def checkpoint(self, directory: str | None = None) -> str:
        """Write a checkpoint of the source and of the pushes it holds, atomically.

        :param directory: where (default: the actor's ``checkpoint_dir``).
        :return: the directory written.
        """
        target = self.checkpoint_dir if directory is None else os.path.abspath(os.fspath(directory))
        if target is None:
            raise ValueError(
                "this level source actor has no checkpoint_dir: pass checkpoint(directory=...) or host it "
                "with host_level_source(..., checkpoint_dir=...)"
            )
        writers: dict[str, Callable[[Path], None]] = {
            name: save for name, (save, _) in self.source.checkpoint_files().items()
        }
        counters = {**self.counters, "checkpoints": self.counters["checkpoints"] + 1}
        clients = {c: a.to_json() for c, a in self._applied.items()}
        meta: dict[str, Any] = {"clients": clients, "counters": counters}
        if self._joiner is not None:  # the episode parts waiting for the rest (and max_mc's best returns)
            meta["joiner"] = self._joiner.state_dict()
        if self._reported:  # episodes reported before a restart, not joined again yet
            meta["reported"] = sorted(self._reported)
        writers[REMOTE_FILE] = lambda p: save_values(p, meta)
        write_checkpoint_dir(target, writers)
        self.counters["checkpoints"] += 1
        if directory is None or target == self.checkpoint_dir:
            self._committed = {c: a.copy() for c, a in self._applied.items()}
            self._since_checkpoint = 0
            self._last_checkpoint = time.monotonic()
        return target

    def _restore(self, directory: str) -> None:
        path = checkpoint_files(directory)
        meta = load_values(path / REMOTE_FILE)
        if not isinstance(meta, dict) or not isinstance(meta.get("clients"), dict):
            raise ValueError(f"{path / REMOTE_FILE} is not a plr_gym level source actor file")
        for name, (_, load) in self.source.checkpoint_files().items():
            load(path / name)
        self._applied = {c: _Applied(int(v[0]), (int(s) for s in v[1])) for c, v in meta["clients"].items()}
        self._committed = {c: a.copy() for c, a in self._applied.items()}
        self.counters.update({k: int(v) for k, v in meta.get("counters", {}).items() if k in self.counters})
        self._reported = {str(e) for e in meta.get("reported", [])}
        if "joiner" in meta:
            self._joiner = EpisodeJoiner(self.source.strategy_info, self.part_timeout)
            self._joiner.load_state_dict(meta["joiner"])
        self.counters["restores"] += 1
        self.restored_from = directory

    def snapshot_files(self) -> dict[str, bytes]:
        """The bytes of each of the source's checkpoint files, written now (one consistent snapshot)."""
        out = {}
        with tempfile.TemporaryDirectory() as tmp:
            for name, (save, _) in self.source.checkpoint_files().items():
                save(Path(tmp) / name)
                out[name] = (Path(tmp) / name).read_bytes()
        return out

    def load_files(self, files: dict[str, bytes]) -> None:
        """Load some of the source's checkpoint files from their bytes; all or nothing."""
        known = self.source.checkpoint_files()
        unknown = sorted(set(files) - set(known))
        if unknown:
            raise ValueError(f"not files of the hosted source: {unknown}; its files are {sorted(known)}")
        state = self.source.state_dict()
        try:
            with tempfile.TemporaryDirectory() as tmp:
                for name, data in files.items():
                    (Path(tmp) / name).write_bytes(data)
                    known[name][1](Path(tmp) / name)
        except BaseException:
            self.source.load_state_dict(state)
            raise


def _env_indices(envs: Any) -> Any:
    """``envs`` of :meth:`LevelSourceActor.plan` as a 1-D int64 array (float or bool indices refused)."""
    arr = np.asarray(envs)
    if arr.ndim != 1 or (arr.size and (arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer))):
        raise TypeError(f"envs must be a 1-D array of int env indices, got {arr.dtype} {arr.shape}")
    if arr.size and int(arr.min()) < 0:
        raise ValueError(f"envs must be env indices >= 0, got {int(arr.min())}")
    return arr.astype(np.int64)


def _has_checkpoint(directory: str, names: list[str]) -> bool:
    path = checkpoint_files(directory) if os.path.isdir(directory) else Path(directory)
    present = [n for n in names if (path / n).exists()]
    if present and len(present) != len(names):
        missing = sorted(set(names) - set(present))
        raise FileNotFoundError(f"{directory} holds a partial level source checkpoint: {missing} missing")
    return bool(present)


# ------------------------------------------------------------------------------------------------ hosting
def host_level_source(
    source: Any,
    *,
    name: str | None = None,
    namespace: str | None = None,
    checkpoint_dir: str | os.PathLike[str] | None = None,
    checkpoint_every: int = 100,
    checkpoint_interval: float = 5.0,
    max_restarts: int = -1,
    num_cpus: float = 0.0,
    detached: bool = False,
    part_timeout: float = 600.0,
    task_events: bool = False,
) -> Any:
    """Host ``source`` in a Ray actor shared by every :class:`RemoteLevelSource` that connects to it.

    Call after ``ray.init()`` (one machine) or ``ray.init(address=...)`` (a cluster). The actor is owned
    by the calling process (it ends with it) unless ``detached``.

    :param source: any :class:`~plr_gym.source.LevelSource` (a :class:`~plr_gym.LevelSampler`, a
        :class:`~plr_gym.source.BufferLevelSource`...); it is copied into the actor.
    :param name: a name to find the actor by from other processes (``RemoteLevelSource("name")``).
    :param namespace: the Ray namespace of ``name``.
    :param checkpoint_dir: directory for the actor's checkpoints (a path every node that may run the
        actor can reach). If it holds a checkpoint already, the actor resumes from it. ``None``: no
        checkpoints, and a restarted actor starts from ``source`` as given.
    :param checkpoint_every: write a checkpoint after this many absorbed scores (episodes)...
    :param checkpoint_interval: ... but at most one every this many seconds (default 5: a checkpoint is
        ``fsync``-ed files, tens of milliseconds, and a busy actor absorbs thousands of scores a second).
        A restarted actor loses nothing a live client pushed since (see :class:`RemoteLevelSource`).
    :param max_restarts: how often Ray restarts the actor after it dies (``-1``: always, ``0``: never).
    :param num_cpus: CPUs reserved for the actor (``0``: none, it mostly waits).
    :param detached: the actor outlives the process that created it (a restarted learner finds it by
        ``name``, which is then required); end it with ``ray.kill(handle)``.
    :param part_timeout: seconds an episode scored in parts (RLlib with several learners) waits for its
        next part before the actor gives it up unscored (``parts_unscored``, RLlib's
        ``plr/chunks_unscored``). These are wall-clock seconds, which run on while training is paused:
        a pause longer than this (a debugger, a long evaluation, a paused Tune trial, a slow restore of
        the learners) gives up every episode that was live in the env runners and had a chunk scored
        before it. Set it above your longest pause (the default, 600, is ten minutes).
    :param task_events: record the actor's calls as Ray task events (Ray's dashboard and ``ray list
        tasks`` show them). Off by default: the events cost the actor CPU on every call, and its calls
        are many and alike (its own :meth:`LevelSourceActor.stats` counts them).
    :return: the actor handle (picklable; pass it to :class:`RemoteLevelSource`).

    Example:
        >>> import ray
        >>> from plr_gym import LevelSampler
        >>> _ = ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
        >>> from plr_gym.distributed import RemoteLevelSource
        >>> actor = host_level_source(LevelSampler(range(100), seed=0), name="plr")
        >>> RemoteLevelSource("plr").num_levels
        100
        >>> ray.shutdown()
    """
    owner = "host_level_source"
    if not ray.is_initialized():
        raise RuntimeError(
            f"{owner}: Ray is not running; call ray.init() (this machine) or ray.init(address=...) "
            "(a cluster)"
        )
    options, args = _actor_options(
        owner,
        source,
        name=name,
        namespace=namespace,
        checkpoint_dir=checkpoint_dir,
        checkpoint_every=checkpoint_every,
        checkpoint_interval=checkpoint_interval,
        max_restarts=max_restarts,
        num_cpus=num_cpus,
        detached=detached,
        part_timeout=part_timeout,
        task_events=task_events,
    )
    actor_class: Any = ray.remote(LevelSourceActor)
    return actor_class.options(**options).remote(source, *args)
