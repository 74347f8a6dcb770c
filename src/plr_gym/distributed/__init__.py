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

from plr_gym.distributed.actor import REMOTE_FILE, LevelSourceActor, host_level_source
from plr_gym.distributed.client import RemoteLevelSource
from plr_gym.distributed.wire import LevelSourceUnavailable
from plr_gym.distributed.wire import pack_batches as pack_batches
from plr_gym.distributed.wire import unpack_batches as unpack_batches

__all__ = [
    "REMOTE_FILE",
    "LevelSourceActor",
    "LevelSourceUnavailable",
    "RemoteLevelSource",
    "host_level_source",
]
