"""The options of a hosted level source and of its clients: their checks and what they decide.

- :func:`_actor_options`: :func:`~plr_gym.distributed.host_level_source`'s arguments checked and turned
  into Ray's actor options (restarts, CPUs, a detached lifetime, a name, task events) and the
  :class:`~plr_gym.distributed.LevelSourceActor`'s constructor arguments (checkpoints, part timeout).
- :class:`_QueueRules`: how many levels a :class:`~plr_gym.distributed.RemoteLevelSource` keeps ready, when
  it refills and when its buffered scores must go, from ``prefetch``, ``prefetch_seconds``, ``min_refill``
  and ``push_every`` and the reset rate it measures (the numbers the package's docstring explains).
"""

from __future__ import annotations

import math
import os
import time
from typing import Any

import numpy as np

from plr_gym.source import LevelSource

#: At most this many levels kept ready per client however fast its envs reset (``prefetch_seconds``).
_MAX_AHEAD = 4096
#: Seconds over which a client measures how fast its envs take levels (``prefetch_seconds``).
_RATE_WINDOW = 1.0
#: ``min_refill`` never makes a client keep more than this many times ``prefetch_seconds`` of resets ready.
_MAX_LAG_FACTOR = 3
#: The client's clock for reset rates and score ages (tests replace it).
_clock = time.monotonic


# ------------------------------------------------------------------------------------------------ checks
def _check_source(source: Any, owner: str) -> None:
    if getattr(type(source), "is_remote_client", False) is True:  # a RemoteLevelSource
        raise TypeError(f"{owner}: source is already a RemoteLevelSource; host the LevelSampler itself")
    if isinstance(source, type) or not isinstance(source, LevelSource):
        raise TypeError(
            f"{owner}: source must be a plr_gym level source (LevelSampler, BufferLevelSource or any "
            f"plr_gym.source.LevelSource), got {type(source).__name__}"
        )


def _check_seconds(name: str, value: Any) -> float:
    """A finite number of seconds >= 0 (``inf`` would overflow the sizes and times computed from it)."""
    if (
        isinstance(value, (bool, np.bool_))
        or not isinstance(value, (int, float))
        or not 0 <= value < math.inf
    ):
        raise ValueError(f"{name} must be a number of seconds >= 0 (and finite), got {value!r}")
    return float(value)


def _check_count(name: str, value: Any, low: int, high: int | None = None) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < low:
        raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
    if high is not None and value > high:
        raise ValueError(f"{name} must be an int in [{low}, {high}], got {value!r}")
    return int(value)


# ------------------------------------------------------------------------------------------------ hosting
def _actor_options(
    owner: str,
    source: Any,
    *,
    name: str | None,
    namespace: str | None,
    checkpoint_dir: str | os.PathLike[str] | None,
    checkpoint_every: int,
    checkpoint_interval: float,
    max_restarts: int,
    num_cpus: float,
    detached: bool,
    part_timeout: float,
    task_events: bool,
) -> tuple[dict[str, Any], tuple[Any, ...]]:
    """:func:`~plr_gym.distributed.host_level_source`'s arguments, checked in order: Ray's actor options
    and the actor's constructor arguments after ``source`` (directory, every, restarts, interval, timeout).
    """
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
    return options, (directory, every, restarts, interval, timeout)


# ------------------------------------------------------------------------------------------------ client
class _QueueRules:
    """The sizing of a :class:`~plr_gym.distributed.RemoteLevelSource`'s prefetch queue and the timing of
    its score pushes (a base class of the client: these are its methods, on its hot path, and read its
    attributes below)."""

    prefetch: int
    prefetch_seconds: float
    min_refill: int
    push_every: int | None
    _n_envs: int  # envs this client serves (the highest index seen + 1)
    _rate: float | None  # levels/s this client's envs take (measured; None: not yet)
    _rate_since: float  # start of the current rate window (monotonic seconds; 0: not started)
    _rate_count: int  # levels served in it
    _calls: int  # update_batch calls buffered since the last push
    _pending_since: float  # when the oldest buffered batch was buffered

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
        ahead = math.ceil(min(rate * self.prefetch_seconds, _MAX_AHEAD))
        if self.min_refill:
            floor = math.ceil(8 * self.min_refill / 7)
            lag = math.ceil(min(rate * _MAX_LAG_FACTOR * self.prefetch_seconds, _MAX_AHEAD))
            ahead = max(ahead, min(floor, lag))
        return max(base, min(_MAX_AHEAD, ahead))

    def _refill_at(self, target: int) -> int:
        """Refill when the queue lacks this many levels: half of ``prefetch`` per env, or, for a target set
        by the reset rate, seven eighths of it (the eighth left lasts ``prefetch_seconds / 8``, ample for
        the call's round trip, and each call brings seven eighths of the target); half of it while the
        first rate is measured."""
        if target > self.prefetch * self._n_envs and self._rate is not None:
            return max(1, (7 * target) // 8)
        return max(1, target // 2)

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
