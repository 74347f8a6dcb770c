"""The client of a hosted level source: :class:`RemoteLevelSource`, itself a level source.

Three concerns, in sections of the class: the connection (the actor looked up by name, calls retried
while it is dead or restarting, pushes sent again after a restart), the prefetch queue (levels drawn
ahead in blocks, refilled without blocking; how many, and when, is its base class ``_QueueRules`` in
``options.py``), and the score pushes (buffered, batched, riding on refills, applied exactly once). The
package's docstring (:mod:`plr_gym.distributed`) explains the numbers.
"""

from __future__ import annotations

import collections
import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt
import ray
from ray.exceptions import RayActorError

from plr_gym.checkpoint import atomic_open
from plr_gym.distributed import options
from plr_gym.distributed.options import _MAX_AHEAD, _check_count, _check_seconds, _QueueRules
from plr_gym.distributed.wire import (
    _GONE,
    ActorUnavailableError,
    LevelSourceUnavailable,
    _as_list,
    _portable,
    _writable,
    pack_batches,
)
from plr_gym.episode_parts import EpisodePart
from plr_gym.scoring import Strategy
from plr_gym.source import FileIO


class RemoteLevelSource(_QueueRules):
    """A client of a level source actor; a :class:`~plr_gym.source.LevelSource` for any front end.

    ``PrioritizedLevelReplay(venv, sampler=RemoteLevelSource(actor))`` with ``PLRCallback()`` trains as
    with a local sampler; the state lives in the actor, which every client shares. See the package
    docstring for the prefetch queue, its lag, score pushes and fault tolerance.

    The client pickles (Ray, cloudpickle): each unpickled copy is a new client with an empty queue that
    connects on first use. A client is meant for one thread.

    :param actor: the handle :func:`host_level_source` returned, or the actor's name.
    :param namespace: the Ray namespace of a named actor.
    :param prefetch: levels kept ready per env of this client, at least (``0``: no queue, one blocking call
        per :meth:`next_levels`, exact; at most 4,096). Ignored for sources that plan rollouts (their
        levels are fixed per rollout and fetched once per rollout).
    :param prefetch_seconds: also keep ready as many levels as this client's envs take in this many
        seconds (measured; at most 4,096), refilled when an eighth is left, so that a refill call comes
        about every ``7/8 × prefetch_seconds`` seconds whatever the reset rate. A level is then drawn up
        to about this many seconds before it is played (see the package's note on the lag). ``0``:
        ``prefetch`` per env only (the old behaviour; ``min_refill`` is then unused).
    :param min_refill: with ``prefetch_seconds``, a refill call brings at least this many levels (the
        queue keeps ``8/7 × min_refill`` ready) where the envs reset too rarely for ``prefetch_seconds``
        to fill one, but never more than ``3 × prefetch_seconds`` of resets: the actor's fixed cost per
        call (≈ 0.6 ms) is shared by at least this many levels, at the price of a longer lag for such
        envs (up to ``8/7 × min_refill / rate`` seconds). ``0``: no floor; at most 4,096.
    :param push_every: push the buffered scores every this many :meth:`update_batch` calls; ``None``
        (default): with the next refill, or once the oldest is as old as the time the queue lasts
        (``prefetch_seconds``, or up to ``3 × prefetch_seconds`` where ``min_refill`` sets the queue).
        Always at :meth:`end_rollout` and :meth:`flush` (so a very large ``push_every`` is accepted: it
        pushes there only).
    :param retry_timeout: seconds to keep retrying while the actor is dead or restarting before
        :class:`LevelSourceUnavailable` is raised (``math.inf``: retry for ever, accepted on purpose).

    Example:
        >>> import numpy as np, ray
        >>> from plr_gym import LevelSampler
        >>> from plr_gym.distributed import host_level_source
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

    #: a client, not a source to host: ``host_level_source`` refuses it (read by ``options._check_source``,
    #: which cannot import this module: this one imports it)
    is_remote_client: ClassVar[bool] = True

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
        self.prefetch = _check_count("prefetch", prefetch, low=0, high=_MAX_AHEAD)
        self.prefetch_seconds = _check_seconds("prefetch_seconds", prefetch_seconds)
        self.min_refill = _check_count("min_refill", min_refill, low=0, high=_MAX_AHEAD)
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

    def _missing(self) -> int:
        """Levels the queue (with the refills in flight) lacks to hold its target (:meth:`_target`)."""
        if not self.prefetch or self.plans_rollouts:
            return 0
        return max(0, self._target() - len(self._pool) - self._inflight)

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
            self._pending_since = options._clock()  # options._clock: tests replace it
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
