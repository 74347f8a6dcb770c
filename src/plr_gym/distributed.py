"""One level source for many processes and machines: a Ray actor hosting it, and a client for each process.

A :class:`~plr_gym.source.LevelSource` (a :class:`~plr_gym.LevelSampler`, a
:class:`~plr_gym.source.BufferLevelSource`, your own) lives in one process. To share it between the env
processes of a cluster, host it in a Ray actor with :func:`host_level_source` and give every process a
:class:`RemoteLevelSource`, a client that implements the same protocol, so every front end takes it
unchanged: ``PrioritizedLevelReplay(venv, sampler=RemoteLevelSource(handle))``.

The client never makes one blocking round-trip per reset, and makes few calls of any kind:

- **Levels** are drawn ahead, in blocks. The client keeps ready, in a FIFO queue, ``prefetch`` levels per
  env it serves, or as many levels as its envs take in ``prefetch_seconds`` (default 20 s; the rate is
  measured by the client) if that is more, or, for envs that reset too rarely to take ``min_refill``
  (default 128) levels in ``prefetch_seconds``, ``8/7 × min_refill`` levels (but never more than
  ``3 × prefetch_seconds`` of resets). It refills the queue with one non-blocking call
  (``actor.draw.remote(n)``, checked with ``ray.wait(timeout=0)``) when an eighth is left (half, for the
  ``prefetch`` levels per env): one call per about ``7/8 × prefetch_seconds`` seconds, bringing at least
  ``min_refill`` levels, however often the envs reset, so the actor's fixed cost per call
  (≈ 0.6 ms of CPU) is shared by all the levels of a block. It blocks only when the queue cannot serve a
  request (the first one).
- **Scores** are buffered and pushed with the client's next refill (one call for both), at the latest once
  the oldest buffered score is as old as the queue's horizon (``prefetch_seconds``, or longer where
  ``min_refill`` sets the queue; checked when the client is used), and at
  :meth:`~RemoteLevelSource.end_rollout` / :meth:`~RemoteLevelSource.flush` /
  :meth:`~RemoteLevelSource.next_rollout` (a learner's step: its scores, ``end_rollout``,
  ``rollout_stats`` and ``begin_rollout`` in one call); ``push_every=k`` pushes every ``k``
  :meth:`~RemoteLevelSource.update_batch` calls instead.

**The lag drawing ahead introduces.** The actor counts a level as sampled (staleness, replay counters) when
it draws it for a client, and draws it from the distribution at that moment: the scores it holds then.
A level served from the queue was therefore drawn up to one queue's worth of that client's draws earlier
than a local sampler would have drawn it (``max(prefetch × n_envs, rate × prefetch_seconds,
min(8/7 × min_refill, rate × 3 × prefetch_seconds))``, at most 4,096), which at a steady reset rate is at
most about ``prefetch_seconds`` earlier, or ``8/7 × min_refill / rate`` (at most
``3 × prefetch_seconds``) for envs resetting fewer than ``8/7 × min_refill / prefetch_seconds`` times a
second (longer while the envs pause), without the scores that reached the actor in between. The draws
themselves are the hosted sampler's: drawn one after another, each counted as sampled before the next.
``prefetch_seconds=0`` keeps ``prefetch`` levels per env ready and nothing more (the earlier behaviour: one
call per ``prefetch × n_envs / 2`` resets); with ``prefetch=1`` the lag is one level per env, as large as
(and on top of) the one-episode lead the SB3 wrapper already has locally; with ``prefetch=0`` every
:meth:`~RemoteLevelSource.next_levels` call is one blocking call and the actor draws exactly when a
local sampler would. For one client the levels served are exactly the hosted sampler's sequence of draws
(the queue is FIFO and Ray runs one caller's calls in order); with many clients the actor interleaves
their draws, as one sampler shared by all their envs would.

**Fault tolerance.**

- The actor writes a checkpoint (:func:`plr_gym.checkpoint.write_checkpoint_dir`: the hosted source's
  :meth:`~plr_gym.source.LevelSource.checkpoint_files` plus ``plr_remote.npz``, the actor's bookkeeping)
  every ``checkpoint_every`` scores (at most one every ``checkpoint_interval`` seconds) and on request
  (:meth:`RemoteLevelSource.checkpoint`); a new or restarted actor (``max_restarts``) loads the last one
  in its constructor.
- Each score push carries the client's id and a sequence number. The actor applies a push once (it
  remembers which pushes it applied, and the checkpoint remembers which it held); the client keeps the
  pushes no checkpoint holds yet and sends them again after a restart. So a restart loses nothing a live
  client reported and counts nothing twice. A client that dies loses only the scores it had not pushed.
- Calls that meet a dead or unreachable actor wait and retry (up to ``retry_timeout`` seconds, then
  :class:`LevelSourceUnavailable`).
- A refused batch (NaN score, unknown level, wrong lengths) changes nothing in the hosted source (its
  ``update_batch`` is all or nothing) and the error is raised at the client that sent it: at once when
  the client can tell (lengths, non-finite scores), else at its next ``update_batch``, ``end_rollout``
  or ``flush``. The actor keeps serving every other client.

Example (one process here; in a cluster the handle or the actor's name travels to the env processes):
    >>> import numpy as np, ray
    >>> from plr_gym import LevelSampler
    >>> from plr_gym.distributed import RemoteLevelSource, host_level_source
    >>> _ = ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    >>> actor = host_level_source(LevelSampler(range(20), seed=0))
    >>> source = RemoteLevelSource(actor, prefetch=1)
    >>> levels = source.next_levels(np.arange(4))        # one blocking call; later calls hit the queue
    >>> source.update_batch(levels, [0.5, 0.1, 0.9, 0.3])
    >>> source.flush()                                   # push and wait (end_rollout pushes without waiting)
    >>> source.rollout_stats(full=False)["num_seen"]
    4
    >>> ray.shutdown()
"""

from __future__ import annotations

import collections
import copy
import math
import os
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import ray
from ray.exceptions import GetTimeoutError, RayActorError

from plr_gym._levels import load_values, save_values
from plr_gym.checkpoint import atomic_open, checkpoint_files, write_checkpoint_dir
from plr_gym.episode_parts import EpisodeJoiner, EpisodePart
from plr_gym.sampler import LevelSampler
from plr_gym.scoring import Strategy
from plr_gym.source import FileIO, LevelSource

try:  # Ray >= 2.10
    from ray.exceptions import ActorUnavailableError
except ImportError:  # pragma: no cover - older Ray
    ActorUnavailableError = RayActorError  # type: ignore[misc,assignment]

__all__ = [
    "REMOTE_FILE",
    "LevelSourceActor",
    "LevelSourceUnavailable",
    "RemoteLevelSource",
    "host_level_source",
]

#: The actor's own file in a checkpoint directory (which score pushes the checkpoint holds, counters).
REMOTE_FILE = "plr_remote.npz"
#: At most this many levels kept ready per client however fast its envs reset (``prefetch_seconds``).
_MAX_AHEAD = 4096
#: Seconds over which a client measures how fast its envs take levels (``prefetch_seconds``).
_RATE_WINDOW = 1.0
#: ``min_refill`` never makes a client keep more than this many times ``prefetch_seconds`` of resets ready.
_MAX_LAG_FACTOR = 3
#: The client's clock for reset rates and score ages (tests replace it).
_clock = time.monotonic
#: Errors meaning "the actor is dead, restarting or unreachable": wait and retry.
_GONE = (RayActorError, ActorUnavailableError, GetTimeoutError)


class LevelSourceUnavailable(RuntimeError):
    """The level source actor stayed dead or unreachable for longer than the client's ``retry_timeout``."""


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
        levels = self.source.next_levels(np.arange(n, dtype=np.int64))
        self.counters["levels_served"] += n
        return self.incarnation, _wire(levels)

    def plan(self, envs: Any) -> tuple[str, Any]:
        """The levels of ``envs`` in the open plan of a source that plans rollouts."""
        envs = np.asarray(envs, dtype=np.int64)
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
            absorbed = self._apply_joined(batches)
            if absorbed is None:  # one by one, so that a refused batch is refused alone
                absorbed = 0
                for k, (levels, scores) in enumerate(batches):
                    try:
                        self.source.update_batch(levels, scores)
                    except Exception as exc:  # refused: nothing of this batch was stored
                        errors.append((k, _portable(exc)))
                        self.counters["batches_refused"] += 1
                    else:
                        absorbed += len(scores)
            received = 0  # episode parts (a checkpoint is due after checkpoint_every scores or parts)
            if parts is not None:
                if reported:
                    self._reported.update(str(e) for e in reported)
                joined, part_report = self._join_parts(parts)
                absorbed += joined
                received = len(parts) - len(part_report["errors"])
            applied.add(seq)
            self.counters["scores_absorbed"] += absorbed
            self._since_checkpoint += max(absorbed, received)
            if (
                self.checkpoint_dir is not None
                and self._since_checkpoint >= self.checkpoint_every
                and time.monotonic() - self._last_checkpoint >= self.checkpoint_interval
            ):
                self.checkpoint()
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


def pack_batches(batches: list[tuple[Any, Any]]) -> Any:
    """Score batches as three flat arrays (levels, scores, batch sizes) when every batch's levels are a
    numeric array: one message of three arrays is much cheaper for Ray to send than many small ones."""
    if len(batches) < 2 or not all(
        isinstance(levels, np.ndarray) and levels.dtype != object for levels, _ in batches
    ):
        return batches
    sizes = np.fromiter((len(scores) for _, scores in batches), dtype=np.int64, count=len(batches))
    levels = np.concatenate([levels for levels, _ in batches])
    scores = np.concatenate([np.asarray(scores, dtype=np.float64) for _, scores in batches])
    return ("packed", levels, scores, sizes)


def unpack_batches(batches: Any) -> list[tuple[Any, Any]]:
    """The list of ``(levels, scores)`` batches :func:`pack_batches` packed (a list is returned as is).

    :raises ValueError: if ``batches`` is neither a packed message whose sizes add up to its levels and
        scores nor a list of ``(levels, scores)`` pairs of equal lengths (then nothing may be applied)
    """
    if isinstance(batches, tuple) and len(batches) == 4 and isinstance(batches[0], str):
        if batches[0] != "packed":
            raise ValueError(f"batches: unknown message kind {batches[0]!r} (expected 'packed')")
        _, levels, scores, sizes = batches
        levels, scores, sizes = np.asarray(levels), np.asarray(scores), np.asarray(sizes)
        if (
            levels.ndim != 1
            or scores.ndim != 1
            or sizes.ndim != 1
            or sizes.dtype.kind not in "iu"
            or (sizes < 0).any()
            or not int(sizes.sum()) == levels.size == scores.size
        ):
            raise ValueError(
                "batches: a packed message needs 1-D levels and scores of equal length and non-negative "
                f"int sizes adding up to it; got {levels.shape} levels, {scores.shape} scores and sizes "
                f"{sizes.tolist() if sizes.size <= 8 else sizes.shape}"
            )
        bounds = np.concatenate([[0], np.cumsum(sizes)]).tolist()
        return [(levels[a:b], scores[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]
    if isinstance(batches, (str, bytes, dict)) or not isinstance(batches, (list, tuple)):
        raise ValueError(f"batches must be a list of (levels, scores) pairs, got {type(batches).__name__}")
    out = []
    for k, batch in enumerate(batches):
        if not isinstance(batch, (list, tuple)) or len(batch) != 2:
            raise ValueError(f"batches[{k}] must be a (levels, scores) pair, got {type(batch).__name__}")
        levels, scores = batch
        try:
            n_levels, n_scores = len(levels), len(scores)
        except TypeError:
            raise ValueError(f"batches[{k}]: levels and scores must be sequences") from None
        if n_levels != n_scores:
            raise ValueError(f"batches[{k}] has {n_levels} levels but {n_scores} scores")
        out.append((levels, scores))
    return out


def _checked_push(
    client: Any, seq: Any, batches: Any, draw: Any
) -> tuple[str, int, list[tuple[Any, Any]], int]:
    """The arguments of :meth:`LevelSourceActor.push`, checked whole (``TypeError``/``ValueError``)."""
    if not isinstance(client, str) or not client:
        raise TypeError(f"client must be a non-empty str (the client's id), got {client!r}")
    return client, _check_count("seq", seq, 1), unpack_batches(batches), _check_count("draw", draw, 0)


def _has_checkpoint(directory: str, names: list[str]) -> bool:
    path = checkpoint_files(directory) if os.path.isdir(directory) else Path(directory)
    present = [n for n in names if (path / n).exists()]
    if present and len(present) != len(names):
        missing = sorted(set(names) - set(present))
        raise FileNotFoundError(f"{directory} holds a partial level source checkpoint: {missing} missing")
    return bool(present)


def _portable(exc: Exception) -> BaseException:
    """``exc`` if it survives pickling (it goes back to the client), else a RuntimeError with its text."""
    import pickle

    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}")
    return exc


def _check_source(source: Any, owner: str) -> None:
    if isinstance(source, RemoteLevelSource):
        raise TypeError(f"{owner}: source is already a RemoteLevelSource; host the LevelSampler itself")
    if isinstance(source, type) or not isinstance(source, LevelSource):
        raise TypeError(
            f"{owner}: source must be a plr_gym level source (LevelSampler, BufferLevelSource or any "
            f"plr_gym.source.LevelSource), got {type(source).__name__}"
        )


def _check_seconds(name: str, value: Any) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float)) or not value >= 0:
        raise ValueError(f"{name} must be a number of seconds >= 0, got {value!r}")
    return float(value)


def _check_count(name: str, value: Any, low: int) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < low:
        raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
    return int(value)


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
    _check_source(source, owner)
    if name is not None and (not isinstance(name, str) or not name):
        raise ValueError(f"{owner}: name must be a non-empty str or None, got {name!r}")
    if namespace is not None and not isinstance(namespace, str):
        raise ValueError(f"{owner}: namespace must be a str or None, got {namespace!r}")
    every = _check_count("checkpoint_every", checkpoint_every, low=1)
    interval = _check_seconds("checkpoint_interval", checkpoint_interval)
    timeout = _check_seconds("part_timeout", part_timeout)
    restarts = _check_count("max_restarts", max_restarts, low=-1)
    if isinstance(num_cpus, bool) or not isinstance(num_cpus, (int, float)) or not num_cpus >= 0:
        raise ValueError(f"{owner}: num_cpus must be a number >= 0, got {num_cpus!r}")
    directory = None if checkpoint_dir is None else os.path.abspath(os.fspath(checkpoint_dir))
    if not isinstance(detached, bool):
        raise TypeError(f"{owner}: detached must be a bool, got {detached!r}")
    if detached and name is None:
        raise ValueError(f"{owner}: a detached actor needs a name= to be found again")
    if not isinstance(task_events, bool):
        raise TypeError(f"{owner}: task_events must be a bool, got {task_events!r}")
    options: dict[str, Any] = {
        "max_restarts": restarts,
        "max_task_retries": 0,
        "num_cpus": float(num_cpus),
        "enable_task_events": task_events,
    }
    if detached:
        options["lifetime"] = "detached"
    if name is not None:
        options["name"] = name
        if namespace is not None:
            options["namespace"] = namespace
    actor_class: Any = ray.remote(LevelSourceActor)
    return actor_class.options(**options).remote(source, directory, every, restarts, interval, timeout)


# ------------------------------------------------------------------------------------------------ client
class RemoteLevelSource:
    """A client of a level source actor; a :class:`~plr_gym.source.LevelSource` for any front end.

    ``PrioritizedLevelReplay(venv, sampler=RemoteLevelSource(actor))`` with ``PLRCallback()`` trains as
    with a local sampler; the state lives in the actor, which every client shares. See the module
    docstring for the prefetch queue, its lag, score pushes and fault tolerance.

    The client pickles (Ray, cloudpickle): each unpickled copy is a new client with an empty queue that
    connects on first use. A client is meant for one thread.

    :param actor: the handle :func:`host_level_source` returned, or the actor's name.
    :param namespace: the Ray namespace of a named actor.
    :param prefetch: levels kept ready per env of this client, at least (``0``: no queue, one blocking call
        per :meth:`next_levels`, exact). Ignored for sources that plan rollouts (their levels are fixed per
        rollout and fetched once per rollout).
    :param prefetch_seconds: also keep ready as many levels as this client's envs take in this many
        seconds (measured; at most 4,096), refilled when an eighth is left, so that a refill call comes
        about every ``7/8 × prefetch_seconds`` seconds whatever the reset rate. A level is then drawn up
        to about this many seconds before it is played (see the module's note on the lag). ``0``:
        ``prefetch`` per env only (the old behaviour; ``min_refill`` is then unused).
    :param min_refill: with ``prefetch_seconds``, a refill call brings at least this many levels (the
        queue keeps ``8/7 × min_refill`` ready) where the envs reset too rarely for ``prefetch_seconds``
        to fill one, but never more than ``3 × prefetch_seconds`` of resets: the actor's fixed cost per
        call (≈ 0.6 ms) is shared by at least this many levels, at the price of a longer lag for such
        envs (up to ``8/7 × min_refill / rate`` seconds). ``0``: no floor.
    :param push_every: push the buffered scores every this many :meth:`update_batch` calls; ``None``
        (default): with the next refill, or once the oldest is as old as the time the queue lasts
        (``prefetch_seconds``, or up to ``3 × prefetch_seconds`` where ``min_refill`` sets the queue).
        Always at :meth:`end_rollout` and :meth:`flush`.
    :param retry_timeout: seconds to keep retrying while the actor is dead or restarting before
        :class:`LevelSourceUnavailable` is raised.

    Example:
        >>> import numpy as np, ray
        >>> from plr_gym import LevelSampler
        >>> _ = ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
        >>> source = RemoteLevelSource(host_level_source(LevelSampler(range(10), seed=0)), prefetch=2)
        >>> source.next_levels(np.arange(2)).tolist() == LevelSampler(range(10), seed=0).sample(2).tolist()
        True
        >>> source.update_batch([3, 4], [0.5, float("nan")])
        Traceback (most recent call last):
        ...
        ValueError: RemoteLevelSource.update_batch: scores must be finite, got nan at position 1
        >>> ray.shutdown()
    """

    def __init__(
        self,
        actor: Any,
        *,
        namespace: str | None = None,
        prefetch: int = 2,
        prefetch_seconds: float = 20.0,
        push_every: int | None = None,
        retry_timeout: float = 60.0,
        min_refill: int = 128,
    ) -> None:
        owner = "RemoteLevelSource"
        if isinstance(actor, str):
            if not actor:
                raise ValueError(f"{owner}: actor name must not be empty")
        elif not isinstance(actor, ray.actor.ActorHandle):
            raise TypeError(
                f"{owner}: actor must be the handle host_level_source() returned or the actor's name, got "
                f"{type(actor).__name__}"
            )
        if namespace is not None and not isinstance(namespace, str):
            raise ValueError(f"{owner}: namespace must be a str or None, got {namespace!r}")
        self.prefetch = _check_count("prefetch", prefetch, low=0)
        self.prefetch_seconds = _check_seconds("prefetch_seconds", prefetch_seconds)
        self.min_refill = _check_count("min_refill", min_refill, low=0)
        self.push_every = None if push_every is None else _check_count("push_every", push_every, low=1)
        if (
            isinstance(retry_timeout, bool)
            or not isinstance(retry_timeout, (int, float))
            or not retry_timeout > 0
        ):
            raise ValueError(f"{owner}: retry_timeout must be a number of seconds > 0, got {retry_timeout!r}")
        self.retry_timeout = float(retry_timeout)
        self._name = actor if isinstance(actor, str) else None
        self._namespace = namespace
        self._handle: Any = None if isinstance(actor, str) else actor
        self._info: dict[str, Any] | None = None
        self._reset_client()

    def _reset_client(self) -> None:
        """The per-process state (a fresh client: new id, empty queue, nothing pending)."""
        self.client_id = uuid.uuid4().hex
        self._incarnation: str | None = None
        self._pool: collections.deque[Any] = collections.deque()
        # refills in flight: (reference, levels, whether the call is a score push that also draws)
        self._refills: collections.deque[tuple[Any, int, bool]] = collections.deque()
        self._inflight = 0
        self._n_envs = 0
        self._plan: dict[int, Any] = {}
        self._mode = "none"
        self._last_mode = "none"
        self._pending: list[tuple[Any, Any]] = []
        self._pending_since = 0.0  # when the oldest buffered batch was buffered (monotonic seconds)
        self._calls = 0
        self._rate: float | None = None  # levels/s this client's envs take (measured; None: not yet)
        self._rate_since = 0.0  # start of the current rate window (monotonic seconds; 0: not started)
        self._rate_count = 0  # levels served in it
        self._seq = 0
        self._pushes: collections.deque[tuple[int, Any]] = collections.deque()
        self._log: dict[int, list[tuple[Any, Any]]] = {}
        self._parts: list[EpisodePart] = []  # episode parts buffered for the next push
        self._log_parts: dict[int, list[EpisodePart]] = {}  # ... and those of the pushes in _log
        self._log_joined: dict[int, set[str]] = {}  # ... and the episodes their replies reported joined
        self._joined: list[tuple[Any, float, str]] = []  # episodes the actor joined from our parts
        self._parts_unscored = 0  # parts the actor gave up while answering our pushes
        self._errors: list[BaseException] = []
        self._scored = False
        self._progress: float | None = None  # the last progress sent
        self._dtype: np.dtype[Any] | None = None  # the hosted source's level dtype, once known
        self._plans: bool | None = None  # whether the hosted source plans rollouts, once known
        self._rollout: dict[str, Any] | None = None  # the stats a next_rollout push brought back
        self.levels_requested = 0  # levels this client asked the actor to draw (queue included)
        self.levels_topped_up = 0  # ... of which came with score pushes (drawn after their scores)
        self.pushes = 0  # score pushes sent (resends after an actor restart not counted)
        self.draw_calls = 0  # calls that only drew levels (refills and blocking pulls)
        self.blocking_calls = 0  # next_levels calls that had to wait for the actor

    # ------------------------------------------------------------------ pickling
    def __getstate__(self) -> dict[str, Any]:
        return {
            "actor": self._handle,
            "name": self._name,
            "namespace": self._namespace,
            "prefetch": self.prefetch,
            "prefetch_seconds": self.prefetch_seconds,
            "min_refill": self.min_refill,
            "push_every": self.push_every,
            "retry_timeout": self.retry_timeout,
            "info": self._info,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._handle, self._name, self._namespace = state["actor"], state["name"], state["namespace"]
        self.prefetch, self.push_every = state["prefetch"], state["push_every"]
        self.prefetch_seconds = state.get("prefetch_seconds", 0.0)
        self.min_refill = state.get("min_refill", 0)
        self.retry_timeout, self._info = state["retry_timeout"], state["info"]
        self._reset_client()

    # ------------------------------------------------------------------ connection
    @property
    def actor(self) -> Any:
        """The actor handle (looked up by name on first use)."""
        if self._handle is None:
            self._handle = self._lookup()
        return self._handle

    def _lookup(self) -> Any:
        deadline = time.monotonic() + self.retry_timeout
        while True:
            try:
                return ray.get_actor(str(self._name), namespace=self._namespace)
            except ValueError as exc:
                if time.monotonic() > deadline:
                    raise LevelSourceUnavailable(
                        f"RemoteLevelSource: no level source actor named {self._name!r} (namespace "
                        f"{self._namespace!r}) after {self.retry_timeout:.0f} s: {exc}"
                    ) from exc
                time.sleep(0.1)

    @property
    def info(self) -> dict[str, Any]:
        """What the actor told this client about the hosted source (fetched once)."""
        if self._info is None:
            self._info = self._call("describe")
        return self._info

    def _call(self, method: str, *args: Any) -> Any:
        """A blocking call with retries while the actor is dead, restarting or unreachable."""
        deadline = time.monotonic() + self.retry_timeout
        while True:
            try:
                reply = ray.get(getattr(self.actor, method).remote(*args))
            except _GONE as exc:
                self._wait_for_actor(deadline, exc)
                continue
            if method == "describe":
                self._seen_incarnation(reply["incarnation"])
            return reply

    def _wait_for_actor(self, deadline: float, exc: BaseException) -> None:
        """Sleep a little before a retry; give up with a clear error after the deadline."""
        if getattr(exc, "actor_init_failed", False):
            raise LevelSourceUnavailable(
                f"RemoteLevelSource: the level source actor failed to start (its constructor raised; with "
                f"Ray, is plr_gym >= this version importable on every node?): {exc}"
            ) from exc
        restarts = None if self._info is None else self._info.get("max_restarts")
        if restarts == 0 and isinstance(exc, RayActorError) and not isinstance(exc, ActorUnavailableError):
            raise LevelSourceUnavailable(
                "RemoteLevelSource: the level source actor is dead and will not restart (it was hosted with "
                f"max_restarts=0): {exc}"
            ) from exc
        if time.monotonic() > deadline:
            raise LevelSourceUnavailable(
                f"RemoteLevelSource: the level source actor has been dead or unreachable for "
                f"{self.retry_timeout:.0f} s ({type(exc).__name__}: {exc}). It restarts only if hosted with "
                "max_restarts != 0 (see `ray status` and the actor's log)"
            ) from exc
        time.sleep(0.05)
        if self._name is not None and isinstance(exc, RayActorError):
            self._handle = None  # a named actor may have been created anew: look it up again

    def _seen_incarnation(self, incarnation: str) -> None:
        """Note the actor instance that answered; after a restart, send the pushes it may have lost."""
        if self._incarnation is None:
            self._incarnation = incarnation
        elif incarnation != self._incarnation:
            self._incarnation = incarnation
            self._resend()

    def _resend(self) -> None:
        self._pushes.clear()
        for seq in sorted(self._log):
            parts = self._log_parts.get(seq)
            extra = () if parts is None else (0, parts, sorted(self._log_joined.get(seq, ())))
            self._pushes.append(
                (seq, self.actor.push.remote(self.client_id, seq, pack_batches(self._log[seq]), *extra))
            )

    def _recover(self, exc: BaseException) -> None:
        """The actor died under an in-flight call: wait until it answers, resend pushes, drop refills."""
        deadline = time.monotonic() + self.retry_timeout
        while True:
            try:
                reply = ray.get(self.actor.describe.remote())
                break
            except _GONE as again:
                self._wait_for_actor(deadline, again)
        self._refills.clear()
        self._inflight = 0
        if reply["incarnation"] != self._incarnation:
            self._incarnation = reply["incarnation"]
        self._resend()

    # ------------------------------------------------------------------ protocol: attributes
    @property
    def strategy(self) -> Any:
        return self.info["strategy"]

    @property
    def strategy_info(self) -> Strategy:
        info: Strategy = self.info["strategy_info"]
        return info

    @property
    def level_dtype(self) -> np.dtype[Any]:
        dtype = self._dtype
        if dtype is None:
            dtype = self._dtype = np.dtype(self.info["level_dtype"])
        return dtype

    @property
    def plans_rollouts(self) -> bool:
        plans = self._plans
        if plans is None:
            plans = self._plans = bool(self.info["plans_rollouts"])
        return plans

    @property
    def num_levels(self) -> int:
        return int(self.info["num_levels"])

    @property
    def rollout_mode(self) -> str:
        return self._mode

    @property
    def last_rollout_mode(self) -> str:
        return self._last_mode

    @property
    def has_scores(self) -> bool:
        """True once the hosted source holds a score (from any client)."""
        if self._scored:
            return True
        self._push()
        self._scored = bool(self._call("has_scores"))
        return self._scored

    # ------------------------------------------------------------------ protocol: levels
    def next_levels(self, envs: npt.NDArray[np.int64]) -> Any:
        """The level of the next episode of each env in ``envs``, mostly from the local queue.

        Blocks only when the queue (and the refills in flight) cannot serve the request.
        """
        envs = np.asarray(envs, dtype=np.int64).reshape(-1)
        n = int(envs.size)
        if self.plans_rollouts:
            return self._plan_levels(envs)
        if n == 0:
            return self._as_levels([])
        self._n_envs = max(self._n_envs, n, int(envs.max()) + 1)
        self._measure_rate(n)
        target = self._target()
        pool = self._pool
        if len(pool) < n:
            waited = self._harvest(need=n)
            if len(pool) < n:
                waited = True
                self._pull(n - len(pool) + target)
            self.blocking_calls += waited
        out = [pool.popleft() for _ in range(n)]
        missing = self._missing()
        if missing >= self._refill_at(target):
            if self._pending:
                self._push(top_up=True)  # the buffered scores ride along: one round trip for both
            else:
                self._refill(missing)
        elif self._pending and self._push_due():
            self._push(top_up=True)
        return self._as_levels(out)

    def _measure_rate(self, n: int) -> None:
        """Count ``n`` levels served; every second or more, fold the window's rate into ``_rate``."""
        if not self.prefetch_seconds:
            return
        now = _clock()
        if not self._rate_since:
            self._rate_since = now  # the window starts at the first request: its levels are not counted
            return
        self._rate_count += n
        elapsed = now - self._rate_since
        if elapsed >= _RATE_WINDOW:
            rate = self._rate_count / elapsed
            self._rate = rate if self._rate is None else 0.5 * (self._rate + rate)
            self._rate_since, self._rate_count = now, 0

    def _target(self) -> int:
        """Levels to keep ready (queue and refills in flight): ``prefetch`` per env, or, if more, what this
        client's envs take in ``prefetch_seconds`` at the measured rate, or ``8/7 × min_refill`` (a refill
        of at least ``min_refill``) if the envs take that in at most ``3 × prefetch_seconds``, else what
        they take in ``3 × prefetch_seconds``; at most ``_MAX_AHEAD``. Until the first rate is measured
        (the client's first second), four times the levels taken so far in it: the blocks about double,
        so a client whose envs reset often makes a few calls in that second, not one per reset."""
        base = self.prefetch * self._n_envs
        rate = self._rate
        if not self.prefetch or not self.prefetch_seconds:
            return base
        if rate is None:
            return max(base, min(_MAX_AHEAD, 4 * self._rate_count))
        ahead = math.ceil(rate * self.prefetch_seconds)
        if self.min_refill:
            floor = math.ceil(8 * self.min_refill / 7)
            ahead = max(ahead, min(floor, math.ceil(rate * _MAX_LAG_FACTOR * self.prefetch_seconds)))
        return max(base, min(_MAX_AHEAD, ahead))

    def _refill_at(self, target: int) -> int:
        """Refill when the queue lacks this many levels: half of ``prefetch`` per env, or, for a target set
        by the reset rate, seven eighths of it (the eighth left lasts ``prefetch_seconds / 8``, ample for
        the call's round trip, and each call brings seven eighths of the target); half of it while the
        first rate is measured."""
        if target > self.prefetch * self._n_envs and self._rate is not None:
            return max(1, (7 * target) // 8)
        return max(1, target // 2)

    def _missing(self) -> int:
        """Levels the queue (with the refills in flight) lacks to hold its target (:meth:`_target`)."""
        if not self.prefetch or self.plans_rollouts:
            return 0
        return max(0, self._target() - len(self._pool) - self._inflight)

    def _push_due(self) -> bool:
        """Whether the buffered scores must go now: ``push_every`` calls buffered, or (``push_every=None``)
        the oldest buffered for the queue's horizon (:meth:`_horizon`)."""
        if self.push_every is not None:
            return self._calls >= self.push_every
        return _clock() - self._pending_since >= self._horizon()

    def _horizon(self) -> float:
        """Seconds of resets the queue holds at the measured rate: ``prefetch_seconds``, or longer where
        ``min_refill`` sets the target (at most ``3 × prefetch_seconds``). Buffered scores wait at most
        this long for a refill to ride on."""
        rate, horizon = self._rate, self.prefetch_seconds
        if rate and self.min_refill and self.prefetch:
            horizon = max(horizon, min(_MAX_LAG_FACTOR * horizon, 8 * self.min_refill / (7 * rate)))
        return horizon

    def _as_levels(self, levels: list[Any]) -> Any:
        dtype = self.level_dtype
        if dtype.kind == "O":
            return levels
        return np.array(levels, dtype=dtype)

    def _refill(self, n: int) -> None:
        self.levels_requested += n
        self.draw_calls += 1
        self._refills.append((self.actor.draw.remote(n), n, False))
        self._inflight += n

    def _harvest(self, need: int) -> bool:
        """Move finished refills into the queue, in order; wait for them while the queue lacks ``need``.

        :return: whether it waited.
        """
        waited = False
        while self._refills:
            ref, n, from_push = self._refills[0]
            ready, _ = ray.wait([ref], timeout=0)
            if not ready:
                if len(self._pool) >= need:
                    return waited
                waited = True
            try:
                reply = ray.get(ref)
            except _GONE as exc:
                self._recover(exc)  # drops the refills; the caller pulls what it lacks
                return True
            except Exception:
                # The call itself raised (a bug or a failed checkpoint in the actor, not a refusal): its
                # levels never come. Drop it; a plain refill raises here, once; a push in _check_pushes.
                self._refills.popleft()
                self._inflight -= n
                if from_push:
                    continue
                raise
            self._refills.popleft()
            self._inflight -= n
            if isinstance(reply, dict):  # a push that also drew levels
                # its incarnation is checked where its reply (refusals included) is read: _check_pushes
                levels = reply["levels"]
            else:
                incarnation, levels = reply
                self._seen_incarnation(incarnation)
            self._pool.extend(_as_list(levels))
        return waited

    def _pull(self, n: int) -> None:
        """Draw ``n`` levels with one blocking call, into the queue."""
        self.levels_requested += n
        self.draw_calls += 1
        incarnation, levels = self._call("draw", n)
        self._seen_incarnation(incarnation)
        self._pool.extend(_as_list(levels))

    def _plan_levels(self, envs: npt.NDArray[np.int64]) -> Any:
        missing = [e for e in envs.tolist() if e not in self._plan]
        if missing:
            n_envs = self.info["n_envs"]
            ask = list(range(int(n_envs))) if n_envs else sorted(set(missing))
            _, levels = self._call("plan", np.asarray(ask, dtype=np.int64))
            self._plan.update(zip(ask, _as_list(levels)))
        return self._as_levels([self._plan[e] for e in envs.tolist()])

    def begin_rollout(self) -> bool:
        """Start a rollout. A source that plans rollouts decides here (one blocking call); otherwise the
        call is sent without waiting and ``False`` returned."""
        if not self.plans_rollouts:
            self.actor.begin_rollout.remote()
            return False
        self._push()
        n_envs = self.info["n_envs"]
        envs = None if not n_envs else np.arange(int(n_envs), dtype=np.int64)
        _, restart, self._mode, self._last_mode, levels = self._call("begin_rollout", envs)
        self._plan = {} if levels is None else dict(enumerate(_as_list(levels)))
        return bool(restart)

    def end_rollout(self) -> None:
        """Push the buffered scores (without waiting) and close the rollout; raises a refusal of an
        earlier push (see :meth:`update_batch`)."""
        self._push()
        if self.plans_rollouts:
            self._mode, self._last_mode = self._call("end_rollout")
            self._plan = {}
        else:
            self.actor.end_rollout.remote()
        self._check_pushes(block=False)

    def next_rollout(self, full: bool = False) -> dict[str, Any]:
        """Push the buffered scores, close the rollout, return :meth:`rollout_stats` and open the next
        rollout: :meth:`end_rollout`, :meth:`rollout_stats` and :meth:`begin_rollout` in one round trip
        (a learner's step; see :func:`plr_gym.source.next_rollout`). Waits for this client's pushes and
        raises a refusal of one of them, as :meth:`flush` does."""
        if self.plans_rollouts:
            self.end_rollout()
            planned = self.rollout_stats(full)
            self.begin_rollout()
            return planned
        self._rollout = None
        self._push(rollout=bool(full))
        self._check_pushes(block=True)
        reply, self._rollout = self._rollout, None
        if reply is None:  # the actor restarted under the call (a resent push carries no rollout)
            self.actor.end_rollout.remote()
            reply = self._call("rollout_stats", bool(full))
            self.actor.begin_rollout.remote()
        stats: dict[str, Any] = _writable(reply)
        return stats

    def set_progress(self, progress: float) -> None:
        """Tell the hosted source how far training is (``progress`` in ``[0, 1]``; schedules such as
        ``LevelSampler(temperature_end=...)`` follow it). Sent without waiting, and only when it changed;
        the last client to send it wins."""
        if isinstance(progress, (bool, np.bool_)) or not isinstance(progress, (int, float, np.floating)):
            raise ValueError(f"progress must be a number in [0, 1], got {progress!r}")
        if not 0.0 <= float(progress) <= 1.0:
            raise ValueError(f"progress must be a number in [0, 1], got {progress!r}")
        if float(progress) != self._progress:
            self._progress = float(progress)
            self.actor.set_progress.remote(self._progress)

    def discard_unplayed(self) -> None:
        """Forget the queued levels (drawn before a restore) and, for a planning source, the open plan."""
        self._pool.clear()
        self._refills.clear()
        self._inflight = 0
        self._plan = {}
        if self.plans_rollouts:
            self._call("discard_unplayed")
            self._mode = "none"

    # ------------------------------------------------------------------ protocol: scores
    def update_batch(self, levels: Any, scores: Any) -> None:
        """Buffer the scores of completed episodes; push them every ``push_every`` calls.

        Lengths and finiteness are checked here (``ValueError`` at once); what only the hosted source can
        check (an unknown level, a score out of its range) is refused by the actor, all or nothing per
        call, and raised here at the next ``update_batch``, ``end_rollout`` or ``flush``.
        """
        self._raise_refused()
        owner = "RemoteLevelSource.update_batch"
        try:
            values = np.array(scores, dtype=np.float64)  # a copy: the caller may reuse its array
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{owner}: scores must be real numbers ({exc})") from exc
        numeric = self.level_dtype.kind != "O"
        if numeric:
            batch_levels: Any = np.asarray(levels if isinstance(levels, np.ndarray) else list(levels))
            if batch_levels.size and batch_levels.dtype.kind not in "iu":
                raise TypeError(
                    f"{owner}: levels must be int level ids, got an array of dtype {batch_levels.dtype}"
                )
            n_levels = batch_levels.size if batch_levels.ndim == 1 else -1
        else:
            batch_levels = levels.tolist() if isinstance(levels, np.ndarray) else list(levels)
            n_levels = len(batch_levels)
        if values.ndim != 1 or n_levels != values.size:
            raise ValueError(
                f"{owner}: levels and scores must be 1-D of equal length, got levels of shape "
                f"{np.shape(levels)} and scores of shape {values.shape}"
            )
        if not np.isfinite(values).all():
            k = int(np.argmax(~np.isfinite(values)))
            raise ValueError(f"{owner}: scores must be finite, got {float(values[k])!r} at position {k}")
        if not values.size:
            return
        if numeric:
            try:
                batch_levels = batch_levels.astype(self.level_dtype)  # a copy
            except OverflowError as exc:  # pragma: no cover - uint64 beyond int64
                raise TypeError(f"{owner}: levels must be {self.level_dtype} level ids ({exc})") from exc
        if not self._pending:
            self._pending_since = _clock()
        self._pending.append((batch_levels, values))
        self._calls += 1
        if self._push_due():
            self._push(top_up=True)
            self._check_pushes(block=False, keep=1)  # the push just sent cannot have been answered yet

    def _push(self, top_up: bool = False, rollout: bool | None = None) -> None:
        """Send the buffered batches (one non-blocking call); with ``top_up``, the same call also draws
        the levels the queue lacks (a refill that costs no extra round trip); with ``rollout``, it also
        closes the source's rollout and opens the next (sent even with nothing buffered)."""
        self._calls = 0
        if not self._pending and not self._parts and rollout is None:
            return
        batches, self._pending = self._pending, []
        self._seq += 1
        self._log[self._seq] = batches
        packed = pack_batches(batches)
        draw = self._missing() if top_up else 0
        parts: tuple[Any, ...] = ()
        if self._parts:  # episode parts ride on the push: the same sequence number, resent alike
            self._log_parts[self._seq], self._parts = self._parts, []
            parts = (self._log_parts[self._seq],)
        if rollout is not None:
            parts = (parts[0] if parts else None, None, rollout)
        ref = self.actor.push.remote(self.client_id, self._seq, packed, draw, *parts)
        self._pushes.append((self._seq, ref))
        self.pushes += 1
        if draw:
            self.levels_requested += draw
            self.levels_topped_up += draw
            self._refills.append((ref, draw, True))
            self._inflight += draw

    def _check_pushes(self, block: bool, keep: int = 0) -> None:
        """Read the replies of finished pushes (all of them with ``block``; without, not the newest
        ``keep``); refusals are raised here."""
        while len(self._pushes) > keep:
            seq, ref = self._pushes[0]
            if not block:
                ready, _ = ray.wait([ref], timeout=0)
                if not ready:
                    break
            try:
                reply = ray.get(ref)
            except _GONE as exc:
                self._recover(exc)  # resends every push not yet in a checkpoint
                continue
            except Exception:  # the actor's push itself raised (a bug, not a refusal): raise it once
                self._pushes.popleft()
                self._log.pop(seq, None)
                raise
            self._pushes.popleft()
            self._seen_incarnation(reply["incarnation"])
            self._scored = True
            batches = self._log.get(seq)
            refused = {k for k, _ in reply["errors"]}
            if batches is not None and refused:  # never sent again
                self._log[seq] = [b for k, b in enumerate(batches) if k not in refused]
            self._errors.extend(error for _, error in reply["errors"])
            self._read_parts_reply(seq, reply.get("parts"))
            if "rollout" in reply:
                self._rollout = reply["rollout"]
            for old in [s for s in self._log if s <= reply["committed"]]:
                del self._log[old]
                self._log_parts.pop(old, None)
                self._log_joined.pop(old, None)
        self._raise_refused()

    def _read_parts_reply(self, seq: int, report: dict[str, Any] | None) -> None:
        if report is None:
            return
        self._joined.extend(report["joined"])
        self._parts_unscored += int(report["unscored"])
        if seq in self._log and report["joined"]:  # told again after a restart: not reported twice
            self._log_joined.setdefault(seq, set()).update(str(e) for _, _, e in report["joined"])
        parts = self._log_parts.get(seq)
        refused = {k for k, _ in report["errors"]}
        if parts is not None and refused:  # never sent again
            self._log_parts[seq] = [p for k, p in enumerate(parts) if k not in refused]
        self._errors.extend(error for _, error in report["errors"])

    def update_parts(self, parts: Any) -> None:
        """Send parts of episodes scored piecewise (:class:`~plr_gym.episode_parts.EpisodePart`, e.g. by
        one of several RLlib learners) to the actor, which joins them by episode id and applies the score
        of each episode once, when its last part arrives. Buffered and pushed with the next push (at the
        latest at :meth:`end_rollout` or :meth:`flush`); :meth:`take_joined` reports what they completed."""
        parts = list(parts)
        for part in parts:
            if not isinstance(part, EpisodePart):
                raise TypeError(
                    f"RemoteLevelSource.update_parts: parts must be EpisodePart, got {type(part).__name__}"
                )
        self._raise_refused()
        self._parts.extend(parts)

    def take_joined(self) -> tuple[list[tuple[Any, float, str]], int]:
        """Push, wait for every push of this client, and return (then forget) the episodes the actor
        completed from this client's parts since the last call, as ``(level, score, episode id)``, and the
        number of parts the actor gave up unscored while answering this client (an episode whose next part
        did not arrive within the actor's ``part_timeout``).

        :raises ValueError: (or the hosted source's error type) if the actor refused a part or a score.
        """
        self.flush()
        joined, self._joined = self._joined, []
        unscored, self._parts_unscored = self._parts_unscored, 0
        return joined, unscored

    def _raise_refused(self) -> None:
        if not self._errors:
            return
        errors, self._errors = self._errors, []
        first = errors[0]
        more = f" (and {len(errors) - 1} more refused batches)" if len(errors) > 1 else ""
        msg = (
            f"RemoteLevelSource: the level source actor refused scores this client pushed, nothing of that "
            f"update_batch call was stored: {type(first).__name__}: {first}{more}"
        )
        kind = type(first) if isinstance(first, (ValueError, TypeError, KeyError)) else RuntimeError
        raise kind(msg) from first

    def push(self) -> None:
        """Send the buffered scores now, without waiting (a refusal is raised at a later
        :meth:`update_batch`, :meth:`end_rollout` or :meth:`flush`). :class:`plr_gym.rllib.PLREnv` calls it
        when its env runner closes the env, so that the outcomes it buffered are not lost."""
        self._push()

    def flush(self) -> None:
        """Push the buffered scores and wait until the actor has applied every push of this client.

        :raises ValueError: (or the hosted source's error type) if the actor refused a batch.
        """
        self._push()
        self._check_pushes(block=True)

    # ------------------------------------------------------------------ protocol: forwarded
    def rollout_stats(self, full: bool) -> dict[str, Any]:
        """The hosted source's statistics (after this client's buffered scores)."""
        self._push()
        stats: dict[str, Any] = _writable(self._call("rollout_stats", bool(full)))
        return stats

    def retained_levels(self) -> list[Any] | None:
        kept: list[Any] | None = self._call("retained_levels")
        return kept

    def refused(self, exc: BaseException, levels: list[Any]) -> Exception | None:
        try:
            explained: Exception | None = self._call("refused", _portable(exc), list(levels))  # type: ignore[arg-type]
        except Exception:
            return None
        return explained

    def state_dict(self) -> dict[str, Any]:
        """The hosted source's state (after this client's buffered scores)."""
        self._push()
        state: dict[str, Any] = _writable(self._call("state_dict"))
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the hosted source (for every client); this client's queued levels are dropped."""
        self._push()
        self._call("load_state_dict", state)
        self.discard_unplayed()

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """``source.<method>(*args, **kwargs)`` in the actor (after this client's buffered scores), e.g.
        ``call("sample_weights")``; an attribute's value for a non-callable attribute."""
        self._push()
        return _writable(self._call("call", method, args, kwargs))

    def sample_weights(self) -> npt.NDArray[np.float64]:
        """The hosted :class:`~plr_gym.LevelSampler`'s replay distribution (after buffered scores)."""
        weights: npt.NDArray[np.float64] = self.call("sample_weights")
        return weights

    def actor_stats(self) -> dict[str, Any]:
        """The actor's counters (:meth:`LevelSourceActor.stats`), after this client's buffered scores."""
        self._push()
        stats: dict[str, Any] = self._call("stats")
        return stats

    def checkpoint(self, directory: str | os.PathLike[str] | None = None) -> str:
        """Make the actor write a checkpoint now (to its ``checkpoint_dir`` or ``directory``, a path on the
        actor's machine), after this client's buffered scores; returns the directory."""
        self._push()
        path: str = self._call("checkpoint", None if directory is None else os.fspath(directory))
        return path

    def checkpoint_files(self) -> dict[str, FileIO]:
        """The hosted source's files, written and read by *this* process (e.g. ``PLRCallback.save``): one
        snapshot of the actor's state serves the files of one save."""
        snapshot: dict[str, bytes] = {}

        def saver(name: str) -> Callable[[Any], None]:
            def save(path: Any) -> None:
                if name not in snapshot:
                    self._push()
                    snapshot.clear()
                    snapshot.update(self._call("snapshot_files"))
                with atomic_open(path) as f:
                    f.write(snapshot.pop(name))

            return save

        def loader(name: str) -> Callable[[Any], None]:
            def load(path: Any) -> None:
                self._push()
                self._call("load_files", {name: Path(path).read_bytes()})
                self.discard_unplayed()

            return load

        return {name: (saver(name), loader(name)) for name in self.info["files"]}

    def close(self) -> None:
        """Push and wait for the buffered scores (the queued levels are dropped)."""
        self.flush()
        self.discard_unplayed()

    def __repr__(self) -> str:
        target = self._name if self._name is not None else "actor"
        return (
            f"RemoteLevelSource({target!r}, prefetch={self.prefetch}, prefetch_seconds="
            f"{self.prefetch_seconds:g}, min_refill={self.min_refill}, push_every={self.push_every})"
        )


def _writable(value: Any) -> Any:
    """``value`` with writable copies of the read-only arrays Ray hands out (e.g. for torch)."""
    if isinstance(value, np.ndarray):
        return value if value.flags.writeable else value.copy()
    if isinstance(value, dict):
        return {k: _writable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_writable(v) for v in value]
    return value


def _wire(levels: Any) -> Any:
    """Drawn levels as a client receives them: a numeric array as a list of Python scalars (Ray sends a
    list of ints for less of the actor's CPU than a small array), anything else as it is."""
    if isinstance(levels, np.ndarray) and levels.dtype.kind in "iub":
        return levels.tolist()
    return levels


def _as_list(levels: Any) -> list[Any]:
    return levels.tolist() if isinstance(levels, np.ndarray) else list(levels)
