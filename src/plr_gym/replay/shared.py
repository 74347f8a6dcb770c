"""A replay buffer in shared memory that processes other than the learner's can fill."""

from __future__ import annotations

import multiprocessing
import os
import shutil
import sys
import tempfile
import threading
import weakref
from multiprocessing import shared_memory
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np
import torch as th
from gymnasium import spaces
from numpy.typing import NDArray
from stable_baselines3.common.buffers import BaseBuffer, ReplayBuffer
from stable_baselines3.common.type_aliases import ReplayBufferSamples
from stable_baselines3.common.vec_env import VecNormalize

from plr_gym._sizes import allocating
from plr_gym.replay.buffers import _real_array, timeout_flags

__all__ = ["ReplayWriterWrapper", "SharedReplayBuffer", "SharedReplayWriter"]

_ALIGN = 64
_FIELDS = (
    "observations",
    "next_observations",
    "actions",
    "rewards",
    "dones",
    "timeouts",
    "counts",
    "writing",
)
Layout = list[tuple[str, tuple[int, ...], str, int]]  # (field, shape, dtype string, byte offset)


def _layout(fields: list[tuple[str, tuple[int, ...], Any]]) -> tuple[Layout, int]:
    layout: Layout = []
    offset = 0
    for name, shape, dtype in fields:
        dt = np.dtype(dtype)
        layout.append((name, shape, dt.str, offset))
        size = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
        offset += -(-size // _ALIGN) * _ALIGN
    return layout, max(offset, 1)


def _views(buf: Any, layout: Layout) -> dict[str, NDArray[Any]]:
    return {
        name: np.ndarray(shape, dtype=np.dtype(dtype), buffer=buf, offset=offset)
        for name, shape, dtype, offset in layout
    }


def _attach(name: str) -> shared_memory.SharedMemory:
    """Attach to an existing segment without handing it to this process's resource tracker (which
    would unlink it when this process exits, although the learner still uses it)."""
    if sys.version_info >= (3, 13):  # pragma: no cover - depends on the interpreter
        return shared_memory.SharedMemory(name=name, track=False)  # type: ignore[call-arg,unused-ignore]
    from multiprocessing import resource_tracker

    register = resource_tracker.register
    resource_tracker.register = lambda *args, **kwargs: None
    try:
        return shared_memory.SharedMemory(name=name)
    finally:
        resource_tracker.register = register


def _release(segment: shared_memory.SharedMemory, owner_pid: int, lock_dir: str | None = None) -> None:
    segment.close()
    if os.getpid() != owner_pid:  # a forked child: the segment is the learner's
        return
    try:
        segment.unlink()
    except FileNotFoundError:  # pragma: no cover - already removed
        pass
    if lock_dir is not None:
        shutil.rmtree(lock_dir, ignore_errors=True)


try:  # POSIX: locks the kernel releases when their holder dies
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

#: Every :class:`_ColumnLock` with a file open in this process (a forked child closes the copies).
_OPEN_LOCKS: weakref.WeakSet[_ColumnLock] = weakref.WeakSet()


def _forget_inherited_locks() -> None:  # pragma: no cover - runs in forked children
    for lock in list(_OPEN_LOCKS):
        lock._forget()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_inherited_locks)


class _ColumnLock:
    """
    The lock of one column of a :class:`SharedReplayBuffer`, robust to a holder that dies.

    It is an exclusive ``flock`` on a file of its own (POSIX), taken through a file descriptor that
    each process opens for itself, plus a thread lock for the threads of one process. The kernel drops
    a ``flock`` when its holder's descriptors close, so a writer killed with ``SIGKILL`` while it holds
    the lock (a ``multiprocessing.Lock`` stays taken forever then) no longer blocks the learner's
    :meth:`SharedReplayBuffer.sample`. A forked child closes the copies of its parent's descriptors
    (they would keep a dead parent's lock alive) and opens its own on first use. Picklable: hand it to
    a process as a ``multiprocessing`` argument.

    :param path: the lock file (created by the buffer)
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._pid = -1
        self._fd = -1
        self._thread_lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.path = state["path"]
        self._pid, self._fd = -1, -1
        self._thread_lock = threading.Lock()

    def _forget(self) -> None:
        """In a forked child: close the inherited descriptor (never unlock: the lock is the parent's)."""
        if self._fd >= 0:
            try:
                os.close(self._fd)
            except OSError:  # pragma: no cover
                pass
        self._pid, self._fd = -1, -1
        self._thread_lock = threading.Lock()

    def _descriptor(self) -> int:
        if self._pid != os.getpid():
            self._forget()
            try:
                self._fd = os.open(self.path, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
            except FileNotFoundError:
                raise RuntimeError(
                    f"the lock file {self.path} is gone: the SharedReplayBuffer was closed; writers must "
                    "not add after the buffer's close()"
                ) from None
            self._pid = os.getpid()
            _OPEN_LOCKS.add(self)
        return self._fd

    def acquire(self) -> bool:
        fd = self._descriptor()
        self._thread_lock.acquire()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except BaseException:
            self._thread_lock.release()
            raise
        return True

    def release(self) -> None:
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        self._thread_lock.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()

    def close(self) -> None:
        """Close this process's descriptor (not while holding the lock)."""
        if self._pid == os.getpid():
            self._forget()


def _checked(name: str, value: Any, shape: tuple[int, ...], discrete: bool = False) -> NDArray[Any]:
    """``value`` as a real array of ``shape`` (of that size, for ``Discrete`` observations), else
    ``TypeError``/``ValueError`` naming ``name``: checked before the row is touched."""
    array = _real_array(name, value)
    if array.shape != shape and not (discrete and array.size == int(np.prod(shape))):
        raise ValueError(f"{name} must have shape {shape}, got {array.shape}")
    if array.dtype.kind == "f" and not np.isfinite(array).all() and name in ("reward", "action"):
        raise ValueError(f"{name} must be finite, got {array.reshape(-1).tolist()}")
    return array.reshape(shape)


def _write_row(arrays: dict[str, NDArray[Any]], e: int, rows: int, fields: dict[str, Any]) -> None:
    """Write one checked transition into column ``e`` (the caller holds the column's lock).

    ``writing[e]`` is set to the row's number before the first byte and ``counts[e]`` moves past it after
    the last: while ``writing[e] == counts[e]`` the row is torn (its writer died part-way) and
    :meth:`SharedReplayBuffer.sample` leaves it out until the next write of that column replaces it.
    """
    count = int(arrays["counts"][e])
    row = count % rows
    arrays["writing"][e] = count
    for name, value in fields.items():
        arrays[name][row, e] = value
    arrays["counts"][e] = count + 1  # published last: the row is complete


def _torn(counts: NDArray[np.int64], writing: NDArray[np.int64], rows: int) -> NDArray[np.bool_]:
    """Columns whose next row was being written by a writer that died (or raised) part-way, and
    which held a transition before (a torn row of a column not yet full is not counted anyway)."""
    return np.asarray((writing == counts) & (counts >= rows))


class SharedReplayWriter:
    """
    A handle for one env column of a :class:`SharedReplayBuffer`, to add transitions from another
    process. Pass it to the process when it starts (as a ``multiprocessing.Process`` argument or inside
    a ``SubprocVecEnv`` env factory); it attaches to the shared memory on first use.

    Each :meth:`add` writes one whole transition under the column's lock and only then counts it, so
    the learner never samples a half-written transition.

    :param name: the shared memory segment's name
    :param layout: the arrays' layout in it
    :param env_index: the column this writer owns
    :param lock: the column's lock
    :param buffer_size: rows per column
    :param handle_timeout_termination: store truncations as timeouts (bootstrapped); ``False``: a
        truncation is stored as a plain episode end, as :meth:`SharedReplayBuffer.add` does with this
        setting (:meth:`SharedReplayBuffer.writer` passes the buffer's)

    Example:
        >>> import numpy as np
        >>> from gymnasium import spaces
        >>> buffer = SharedReplayBuffer(8, spaces.Box(-1, 1, (2,)), spaces.Discrete(2), device="cpu", seed=0)
        >>> writer = buffer.writer(0)  # picklable: hand it to a worker process
        >>> writer.add(np.zeros(2), np.ones(2), action=1, reward=0.5, terminated=False, truncated=False)
        >>> buffer.n_transitions
        1
        >>> buffer.close()
    """

    def __init__(
        self,
        name: str,
        layout: Layout,
        env_index: int,
        lock: Any,
        buffer_size: int,
        handle_timeout_termination: bool = True,
    ) -> None:
        self.name = name
        self.layout = layout
        self.env_index = env_index
        self.lock = lock
        self.buffer_size = buffer_size
        self.handle_timeout_termination = bool(handle_timeout_termination)
        self._segment: shared_memory.SharedMemory | None = None
        self._arrays: dict[str, NDArray[Any]] = {}

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_segment"], state["_arrays"] = None, {}
        return state

    def _open(self) -> dict[str, NDArray[Any]]:
        if self._segment is None:
            self._segment = _attach(self.name)
            self._arrays = _views(self._segment.buf, self.layout)
        return self._arrays

    def add(
        self,
        obs: NDArray[Any],
        next_obs: NDArray[Any],
        action: Any,
        reward: SupportsFloat,
        terminated: bool,
        truncated: bool,
    ) -> None:
        """
        Store one transition of this writer's env.

        :param obs: observation, shape ``obs_shape``
        :param next_obs: next observation (the final one when the episode ended), shape ``obs_shape``
        :param action: action as stored by SB3 (for ``Box`` action spaces: scaled to ``[-1, 1]``)
        :param reward: reward
        :param terminated: the episode terminated at this step
        :param truncated: the episode was truncated at this step (a timeout; bootstrapped)
        """
        arrays = self._open()
        obs_shape = arrays["observations"].shape[2:]
        discrete = obs_shape == (1,)
        act_dim = arrays["actions"].shape[2]
        for name, flag in (("terminated", terminated), ("truncated", truncated)):
            if not isinstance(flag, (bool, np.bool_, int, np.integer)) or flag not in (0, 1):
                raise TypeError(f"{name} must be a bool, got {type(flag).__name__} {flag!r}")
        timeout = bool(truncated) and not bool(terminated) and self.handle_timeout_termination
        fields = {  # every field checked before the lock is taken and the row touched
            "observations": _checked("obs", obs, obs_shape, discrete),
            "next_observations": _checked("next_obs", next_obs, obs_shape, discrete),
            "actions": _checked("action", action, (act_dim,), True),
            "rewards": float(_checked("reward", reward, (), True)),
            "dones": float(bool(terminated) or bool(truncated)),
            "timeouts": float(timeout),
        }
        with self.lock:
            _write_row(arrays, self.env_index, self.buffer_size, fields)

    def close(self) -> None:
        """Detach from the shared memory (the learner's buffer owns and removes it)."""
        if self._segment is not None:
            self._arrays = {}
            self._segment.close()
            self._segment = None


class SharedReplayBuffer(ReplayBuffer):
    """
    SB3 ``ReplayBuffer`` (uniform sampling) whose arrays live in one shared memory segment, so env
    processes can write transitions directly while the learner samples (ALF's ``allow_multiprocess``).

    Each env has its own column and ring position (writers fill at their own pace). A transition is
    written under its column's lock and counted only once complete; :meth:`sample` holds the column
    locks while it picks and copies a batch, so a batch never contains a torn (half-overwritten)
    transition. Sampling is uniform over all stored transitions of all columns.

    Writers: :meth:`writer` returns a picklable :class:`SharedReplayWriter` for one column; wrap the
    env of a ``SubprocVecEnv`` worker in :class:`ReplayWriterWrapper` to store every step there, and
    build the buffer with ``local_add=False`` so the algorithm's own :meth:`add` calls (made with the
    same data, after it came through the pipe) are skipped. With ``local_add=True`` (default) :meth:`add`
    stores as SB3's ``ReplayBuffer`` does, and the buffer is a drop-in replacement.

    The buffer owns the segment: :meth:`close` (also run when the buffer is garbage-collected) removes
    it. Pickling (SB3's ``save_replay_buffer``) copies the data; the copy gets its own segment.

    Recipe (DQN with ``SubprocVecEnv`` workers writing into the buffer)::

        buffer = SharedReplayBuffer(100_000, obs_space, act_space, n_envs=4, local_add=False)
        writers = [buffer.writer(i) for i in range(4)]
        venv = SubprocVecEnv([partial(make_writer_env, w) for w in writers])  # ReplayWriterWrapper inside
        model = DQN("MlpPolicy", venv, buffer_size=100_000)
        model.replay_buffer = buffer

    :param buffer_size: maximum number of transitions (split evenly over envs, as in SB3)
    :param observation_space: observation space (a ``Box`` or ``Discrete``)
    :param action_space: action space
    :param device: PyTorch device of the sampled tensors
    :param n_envs: number of env columns (writers)
    :param optimize_memory_usage: must be ``False``
    :param handle_timeout_termination: treat timeouts as non-terminal (bootstrap)
    :param local_add: whether :meth:`add` stores transitions (``False`` when writers do)
    :param seed: seed of the sampling random generator

    Example:
        >>> import numpy as np
        >>> from gymnasium import spaces
        >>> space = spaces.Box(-1, 1, (2,))
        >>> buffer = SharedReplayBuffer(8, space, spaces.Discrete(2), device="cpu", n_envs=2, seed=0)
        >>> buffer.add(np.zeros((2, 2)), np.ones((2, 2)), np.array([0, 1]), np.ones(2), np.zeros(2), [{}, {}])
        >>> tuple(buffer.sample(4).observations.shape)
        (4, 2)
        >>> buffer.close()
    """

    def __init__(
        self,
        buffer_size: int,
        observation_space: spaces.Space[Any],
        action_space: spaces.Space[Any],
        device: th.device | str = "auto",
        n_envs: int = 1,
        optimize_memory_usage: bool = False,
        handle_timeout_termination: bool = True,
        *,
        local_add: bool = True,
        seed: int | None = None,
    ) -> None:
        if optimize_memory_usage:
            raise ValueError("SharedReplayBuffer does not support optimize_memory_usage=True; pass False")
        if not isinstance(observation_space, (spaces.Box, spaces.Discrete)):
            raise TypeError(
                "SharedReplayBuffer supports Box and Discrete observation spaces, got "
                f"{type(observation_space).__name__}"
            )
        if not isinstance(buffer_size, (int, np.integer)) or buffer_size < 1:
            raise ValueError(f"buffer_size must be an int >= 1, got {buffer_size!r}")
        if not isinstance(n_envs, (int, np.integer)) or n_envs < 1:
            raise ValueError(f"n_envs must be an int >= 1, got {n_envs!r}")
        BaseBuffer.__init__(self, buffer_size, observation_space, action_space, device, n_envs=n_envs)
        self.buffer_size = max(buffer_size // n_envs, 1)
        self.optimize_memory_usage = False
        self.handle_timeout_termination = handle_timeout_termination
        self.local_add = bool(local_add)
        if seed is None:
            seed = int(np.random.randint(0, 2**31 - 1))  # noqa: NPY002 - follows SB3's seeding
        self._rng = np.random.default_rng(seed)
        with allocating("buffer_size", buffer_size):
            self._allocate()

    def _allocate(self) -> None:
        rows, n = self.buffer_size, self.n_envs
        obs_dtype = self.observation_space.dtype
        act_dtype = self._maybe_cast_dtype(self.action_space.dtype)
        self._layout, nbytes = _layout(
            [
                ("observations", (rows, n, *self.obs_shape), obs_dtype),
                ("next_observations", (rows, n, *self.obs_shape), obs_dtype),
                ("actions", (rows, n, self.action_dim), act_dtype),
                ("rewards", (rows, n), np.float32),
                ("dones", (rows, n), np.float32),
                ("timeouts", (rows, n), np.float32),
                ("counts", (n,), np.int64),
                ("writing", (n,), np.int64),  # row number being written per column (see _write_row)
            ]
        )
        self._segment = shared_memory.SharedMemory(create=True, size=nbytes)
        lock_dir = tempfile.mkdtemp(prefix="plr_gym_shared_") if fcntl is not None else None
        self._finalizer = weakref.finalize(self, _release, self._segment, os.getpid(), lock_dir)
        arrays = _views(self._segment.buf, self._layout)
        for value in arrays.values():
            value[...] = 0
        arrays["writing"][...] = -1
        self._arrays = arrays
        self.observations = arrays["observations"]
        self.next_observations = arrays["next_observations"]
        self.actions = arrays["actions"]
        self.rewards = arrays["rewards"]
        self.dones = arrays["dones"]
        self.timeouts = arrays["timeouts"]
        self.counts = arrays["counts"]
        self.writing = arrays["writing"]
        if lock_dir is not None:  # one lock file per column (see _ColumnLock)
            self._locks: list[Any] = []
            for e in range(self.n_envs):
                path = os.path.join(lock_dir, f"column-{e}.lock")
                with open(path, "wb"):
                    pass
                self._locks.append(_ColumnLock(path))
        else:  # pragma: no cover - no fcntl (Windows): a writer that dies holding its lock blocks sample()
            # Spawn-context locks can be handed to spawned, forkserver and forked processes alike.
            ctx = multiprocessing.get_context("spawn")
            self._locks = [ctx.Lock() for _ in range(self.n_envs)]

    @property
    def name(self) -> str:
        """Name of the shared memory segment."""
        return str(self._segment.name)

    @property
    def nbytes(self) -> int:
        """Size of the shared memory segment in bytes."""
        return int(self._segment.size)

    def _column_sizes(self) -> NDArray[np.int64]:
        """Sampleable rows per column: stored rows, less a row torn by a writer that died part-way."""
        counts = self.counts.copy()
        torn = _torn(counts, self.writing, self.buffer_size)
        return np.asarray(np.minimum(counts, self.buffer_size) - torn, dtype=np.int64)

    @property
    def n_transitions(self) -> int:
        """Transitions stored over all columns (a row torn by a dead writer not counted)."""
        return int(self._column_sizes().sum())

    def size(self) -> int:
        """Rows in use in the fullest column (SB3's ``size()``)."""
        return int(self._column_sizes().max())

    def writer(self, env_index: int) -> SharedReplayWriter:
        """
        :param env_index: the env column the writer fills, in ``[0, n_envs)``
        :return: a picklable writer for that column
        """
        if not isinstance(env_index, (int, np.integer)) or not 0 <= env_index < self.n_envs:
            raise ValueError(f"env_index must be an int in [0, {self.n_envs}), got {env_index!r}")
        return SharedReplayWriter(
            self.name,
            self._layout,
            int(env_index),
            self._locks[env_index],
            self.buffer_size,
            handle_timeout_termination=self.handle_timeout_termination,
        )

    def add(
        self,
        obs: NDArray[Any],
        next_obs: NDArray[Any],
        action: NDArray[Any],
        reward: NDArray[Any],
        done: NDArray[Any],
        infos: list[dict[str, Any]],
    ) -> None:
        """
        Store one step of every env (SB3's ``add``), or nothing when ``local_add=False``.

        :param obs: observations, shape ``(n_envs, *obs_shape)``
        :param next_obs: next observations, shape ``(n_envs, *obs_shape)``
        :param action: actions, shape ``(n_envs, action_dim)``
        :param reward: rewards, shape ``(n_envs,)``
        :param done: episode ended, shape ``(n_envs,)``
        :param infos: one info dict per env; ``"TimeLimit.truncated"`` marks timeouts
        """
        if not self.local_add:
            return
        n = self.n_envs
        discrete = isinstance(self.observation_space, spaces.Discrete)
        if (
            not isinstance(infos, (list, tuple))
            or len(infos) != n
            or not all(isinstance(i, dict) for i in infos)
        ):
            raise ValueError(f"infos must be a list of {n} dicts (one per env), got {infos!r}")
        # every argument checked before any column is touched: a refused step stores nothing
        obs_a = _checked("obs", obs, (n, *self.obs_shape), discrete)
        next_a = _checked("next_obs", next_obs, (n, *self.obs_shape), discrete)
        act = _checked("action", action, (n, self.action_dim), True)
        rew = _checked("reward", reward, (n,))
        done_a = _checked("done", done, (n,))
        timeouts = timeout_flags(infos, n) & self.handle_timeout_termination
        for e in range(n):
            timeout = bool(timeouts[e])
            fields = {
                "observations": obs_a[e],
                "next_observations": next_a[e],
                "actions": act[e],
                "rewards": rew[e],
                "dones": done_a[e],
                "timeouts": float(timeout),
            }
            with self._locks[e]:
                _write_row(self._arrays, e, self.buffer_size, fields)

    def sample(self, batch_size: int, env: VecNormalize | None = None) -> ReplayBufferSamples:
        """
        Sample transitions uniformly over all stored ones, consistently with concurrent writers.

        :param batch_size: number of transitions
        :param env: VecNormalize to normalise observations and rewards with, as in SB3
        :return: SB3's ``ReplayBufferSamples``
        """
        if not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}")
        for lock in self._locks:
            lock.acquire()
        try:
            counts = self.counts.copy()
            # a torn row (its writer died holding the lock, part-way through it) is left out
            torn = _torn(counts, self.writing, self.buffer_size)
            sizes: NDArray[np.int64] = np.minimum(counts, self.buffer_size) - torn
            total = int(sizes.sum())
            if total == 0:
                raise ValueError("cannot sample from an empty buffer: add transitions first")
            picks = self._rng.integers(0, total, batch_size)
            envs = np.searchsorted(np.cumsum(sizes), picks, side="right")
            rows = picks - (np.cumsum(sizes) - sizes)[envs]  # age order within the column is irrelevant
            rows += torn[envs] & (rows >= (counts % self.buffer_size)[envs])  # skip the torn row
            obs = self.observations[rows, envs]
            next_obs = self.next_observations[rows, envs]
            actions = self.actions[rows, envs]
            dones = self.dones[rows, envs] * (1.0 - self.timeouts[rows, envs])
            rewards = self.rewards[rows, envs]
        finally:
            for lock in self._locks:
                lock.release()
        data = (
            self._normalize_obs(obs, env),
            actions,
            self._normalize_obs(next_obs, env),
            dones.reshape(-1, 1),
            self._normalize_reward(rewards.reshape(-1, 1), env),
        )
        return ReplayBufferSamples(*tuple(map(self.to_torch, data)))

    def reset(self) -> None:
        for lock in self._locks:
            lock.acquire()
        try:
            self.counts[...] = 0
            self.writing[...] = -1
        finally:
            for lock in self._locks:
                lock.release()
        self.pos, self.full = 0, False

    def close(self) -> None:
        """Remove the shared memory segment (writers must not add afterwards)."""
        self._finalizer()

    def __getstate__(self) -> dict[str, Any]:
        skip = ("_segment", "_finalizer", "_locks", "_arrays")
        state = {k: v for k, v in self.__dict__.items() if k not in skip}
        for key in _FIELDS:
            state[key] = np.array(state[key])  # copies out of shared memory
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        copies = {key: state[key] for key in _FIELDS if key in state}  # "writing": since 0.1 (issue 24)
        self._allocate()
        for key, value in copies.items():
            getattr(self, key)[...] = value


class ReplayWriterWrapper(gym.Wrapper[Any, Any, Any, Any]):
    """
    Stores every step of the wrapped env through a :class:`SharedReplayWriter`, as SB3 would store it:
    the observation before the step, the action (scaled to ``[-1, 1]`` for ``Box`` action spaces, as
    SB3's off-policy algorithms store it), reward, next observation (the final one at an episode's
    end), ``done`` and the timeout flag. Use it inside ``SubprocVecEnv`` workers.

    :param env: the env (its observations must match the buffer's observation space)
    :param writer: the writer of this env's column

    Example:
        >>> import gymnasium as gym
        >>> buffer = SharedReplayBuffer(100, gym.make("CartPole-v1").observation_space,
        ...                             gym.make("CartPole-v1").action_space, device="cpu", seed=0)
        >>> env = ReplayWriterWrapper(gym.make("CartPole-v1"), buffer.writer(0))
        >>> _ = env.reset(seed=0)
        >>> for _ in range(3):
        ...     _ = env.step(0)
        >>> buffer.n_transitions
        3
        >>> buffer.close()
    """

    def __init__(self, env: gym.Env[Any, Any], writer: SharedReplayWriter) -> None:
        super().__init__(env)
        if not isinstance(writer, SharedReplayWriter):
            raise TypeError(f"writer must be a SharedReplayWriter, got {type(writer).__name__}")
        self.writer = writer
        self._obs: NDArray[Any] | None = None

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(**kwargs)
        self._obs = np.array(obs)
        return obs, info

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        if self._obs is None:
            raise RuntimeError("call reset() before step()")
        obs, reward, terminated, truncated, info = self.env.step(action)
        stored = action
        space = self.action_space
        if isinstance(space, spaces.Box):
            stored = 2.0 * (np.asarray(action) - space.low) / (space.high - space.low) - 1.0
        self.writer.add(self._obs, obs, stored, reward, terminated, truncated)
        self._obs = np.array(obs)
        return obs, reward, terminated, truncated, info

    def close(self) -> None:
        self.writer.close()
        super().close()  # type: ignore[no-untyped-call, unused-ignore]  # gymnasium 1.2
