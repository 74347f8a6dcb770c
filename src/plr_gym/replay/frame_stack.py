"""Frames stored once, stacked at sample time: a replay buffer for frame-stacked image observations."""

from __future__ import annotations

import os
import warnings
from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from numpy.typing import ArrayLike, NDArray
from stable_baselines3.common.preprocessing import is_image_space, is_image_space_channels_first
from stable_baselines3.common.vec_env import VecNormalize

from plr_gym.checkpoint import load_npz
from plr_gym.replay.buffers import PrioritizedReplayBuffer, _real_array
from plr_gym.replay.episodic import EpisodicInfoMixin

__all__ = ["FrameStackReplayBuffer"]

PADDINGS = ("zeros", "first")
CHANNELS_ORDERS = (None, "first", "last")


class FrameStackReplayBuffer(EpisodicInfoMixin, PrioritizedReplayBuffer):
    """
    :class:`~plr_gym.replay.PrioritizedReplayBuffer` for frame-stacked observations that stores every
    frame once and rebuilds the stacks of ``n_stack`` frames for ``observations`` and
    ``next_observations`` when sampling.

    The env still stacks frames for the policy (``VecFrameStack(venv, n_stack)``, whose stacked
    observations SB3 passes to :meth:`add`); the buffer keeps only the newest frame of each step, the
    frame after an episode's last step (the terminal observation), and per step the number of steps
    since its episode began. A stack never mixes two episodes: frames before the episode's first step
    are padding, as the env wrapper pads at a reset:

    - ``padding="zeros"``: zero frames, exactly what SB3's ``VecFrameStack`` shows after a reset
      (``StackedObservations.reset`` zeroes the stack and writes the first frame last).
    - ``padding="first"``: the episode's first frame repeated (Gymnasium's
      ``FrameStackObservation(padding_type="reset")``; DeepMind/Dopamine Atari stacks).

    :meth:`add` checks every step against the frames it already holds: the next observation must be
    the observation shifted by one frame, and an observation that does not continue the previous
    step's next observation must start with ``n_stack - 1`` padding frames (an episode start; SB3's
    ``learn()`` resets the envs without a ``done``, which is handled as a new episode). So a stack the
    buffer returns is always the one the policy saw. The very first step after construction or
    :meth:`reset` may be in the middle of an episode: its older frames are stored from the stack.

    Memory: one frame per stored step (``buffer_size + n_stack`` frames per env, allocated up front)
    plus one per episode end, instead of ``2 * n_stack`` frames per step in SB3's ``ReplayBuffer``
    behind ``VecFrameStack`` (``n_stack + 1`` with ``optimize_memory_usage``). :attr:`observations` and
    :attr:`next_observations` are empty placeholders; use :meth:`observations_at` to read stacks.

    Everything else is :class:`~plr_gym.replay.PrioritizedReplayBuffer`'s (proportional or rank PER,
    n-step returns, sequences, levels, ``save``/``load``); ``alpha=0`` gives uniform replay (then the
    warning about missing ``update_priorities`` calls is not raised, so SB3's plain ``DQN`` can use
    it). With ``episodic_info=True`` each batch also carries each step's steps-to-episode-end and
    discounted return-to-go (see :class:`~plr_gym.replay.EpisodicReplayBuffer`).

    Recipe (Atari-style DQN; pass ``n_stack`` equal to ``VecFrameStack``'s)::

        env = VecFrameStack(make_atari_env("BreakoutNoFrameskip-v4", n_envs=4), n_stack=4)
        model = PERDQN("CnnPolicy", env, buffer_size=1_000_000,
                       replay_buffer_class=FrameStackReplayBuffer,
                       replay_buffer_kwargs=dict(n_stack=4))

    :param buffer_size: maximum number of transitions (split evenly over envs, as in SB3)
    :param observation_space: the *stacked* observation space (``VecFrameStack``'s, possibly
        transposed to channels-first by SB3's ``VecTransposeImage``); a ``Box``
    :param action_space: action space
    :param device: PyTorch device of the sampled tensors
    :param n_envs: number of parallel environments
    :param optimize_memory_usage: must be ``False`` (frames are already stored once)
    :param handle_timeout_termination: treat ``TimeLimit.truncated`` ends as non-terminal (bootstrap)
    :param n_stack: frames per stack, ``>= 1`` (the ``n_stack`` of ``VecFrameStack``)
    :param channels_order: axis frames are stacked on: ``"first"``, ``"last"``, or ``None`` to detect
        it as ``VecFrameStack`` does (images: the smallest axis is the channel axis; other spaces: last)
    :param padding: ``"zeros"`` (``VecFrameStack``) or ``"first"`` (first frame repeated)
    :param kwargs: :class:`~plr_gym.replay.PrioritizedReplayBuffer` keyword arguments (``alpha``,
        ``n_steps``, ``gamma``, ``seed``, ...) and ``episodic_info``/``value_fn``

    Example:
        >>> import numpy as np
        >>> from gymnasium import spaces
        >>> space = spaces.Box(0, 255, (2, 3, 3), np.uint8)  # channels-first stacks of 2 frames
        >>> buffer = FrameStackReplayBuffer(10, space, spaces.Discrete(2), device="cpu", n_stack=2, seed=0)
        >>> frame = lambda v: np.full((1, 1, 3, 3), v, np.uint8)  # (n_envs, channels, H, W)
        >>> stack = lambda a, b: np.concatenate([frame(a), frame(b)], axis=1)
        >>> buffer.add(stack(0, 1), stack(1, 2), np.zeros(1), np.ones(1), np.zeros(1), [{}])
        >>> buffer.add(stack(1, 2), stack(2, 3), np.zeros(1), np.ones(1), np.ones(1), [{}])  # episode ends
        >>> buffer.add(stack(0, 9), stack(9, 8), np.zeros(1), np.ones(1), np.zeros(1), [{}])  # zero padding
        >>> buffer.observations_at(np.array([1]), next_obs=True)[0, :, 0, 0].tolist()
        [2, 3]
        >>> buffer.observations_at(np.array([2]))[0, :, 0, 0].tolist()
        [0, 9]
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
        n_stack: int = 4,
        channels_order: str | None = None,
        padding: str = "zeros",
        **kwargs: Any,
    ) -> None:
        shape, channels_first, axis = _stack_layout(observation_space, n_stack, channels_order, padding)
        assert isinstance(observation_space, spaces.Box)  # checked by _stack_layout
        self.n_stack = int(n_stack)
        self.padding = padding
        self.channels_first = channels_first
        self._stack_axis = axis
        self._frame_shape = (*shape[:axis], shape[axis] // n_stack, *shape[axis + 1 :])
        placeholder = spaces.Box(0, 1, (0,), observation_space.dtype)  # type: ignore[arg-type, unused-ignore]
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*not have apparently enough memory.*")
            super().__init__(
                buffer_size,
                placeholder,
                action_space,
                device,
                n_envs,
                optimize_memory_usage,
                handle_timeout_termination,
                **kwargs,
            )
        self._allocate_frames(observation_space, shape)
        if self.alpha == 0.0:
            self._warned_no_update = True  # uniform replay: no priorities to update

    # ------------------------------------------------------------------ frames

    def _allocate_frames(self, observation_space: spaces.Box, shape: tuple[int, ...]) -> None:
        """The frame storage (one frame per step and env, plus the stacking bookkeeping), allocated up
        front after SB3 allocated its placeholders."""
        # SB3 allocated (buffer_size, n_envs, 0) placeholders for observations; restore the real space.
        self.observation_space = observation_space
        self.obs_shape = shape
        self._empty_obs = np.zeros((self.n_envs, 0), dtype=observation_space.dtype)
        dtype = observation_space.dtype
        self._n_frame_rows = self.buffer_size + self.n_stack
        # _frames[step % _n_frame_rows, env]: the newest frame of the observation of global step `step`;
        # at row (step + 1) % rows also the frame after it, unless that one is detached (below).
        self._frames = np.zeros((self._n_frame_rows, self.n_envs, *self._frame_shape), dtype=dtype)
        # Steps since the episode's first step, capped at n_stack - 1 (so frames older than that are padding).
        self._offsets = np.zeros((self.buffer_size, self.n_envs), dtype=np.uint8)
        # Index in _pool of the next observation's newest frame when it is not the next step's frame
        # (episode end, or an env reset without done), else -1.
        self._detached = np.full((self.buffer_size, self.n_envs), -1, dtype=np.int64)
        self._pool = np.zeros((0, *self._frame_shape), dtype=dtype)
        self._free: list[int] = []
        self._counter = np.zeros(1, dtype=np.int64)  # global steps added (add() calls)
        self._last_next = np.zeros((self.n_envs, *shape), dtype=dtype)  # previous next_obs, per env
        self._starts = np.ones(self.n_envs, dtype=bool)  # which envs' last added step began an episode

    def _frames_of(self, stacks: NDArray[Any]) -> NDArray[Any]:
        """``(m, *obs_shape)`` stacks -> ``(m, n_stack, *frame_shape)`` frames, oldest first."""
        m = stacks.shape[0]
        if self.channels_first:
            return stacks.reshape(m, self.n_stack, *self._frame_shape)
        c = self._frame_shape[-1]
        split = stacks.reshape(m, *self._frame_shape[:-1], self.n_stack, c)
        return np.moveaxis(split, -2, 1)

    def _stacks_of(self, frames: NDArray[Any]) -> NDArray[Any]:
        """``(*batch, n_stack, *frame_shape)`` frames -> ``(*batch, *obs_shape)`` stacks."""
        batch = frames.shape[: frames.ndim - len(self._frame_shape) - 1]
        if not self.channels_first:
            frames = np.moveaxis(frames, len(batch), -2)
        return frames.reshape(*batch, *self.obs_shape)

    def _alloc(self, frame: NDArray[Any]) -> int:
        if not self._free:
            old = self._pool.shape[0]
            grown = np.zeros((max(16, 2 * old), *self._frame_shape), dtype=self._pool.dtype)
            grown[:old] = self._pool
            self._pool = grown
            self._free = list(range(grown.shape[0] - 1, old - 1, -1))
        index = self._free.pop()
        self._pool[index] = frame
        return index

    def _check_observations(self, obs: Any, next_obs: Any) -> None:
        """The stacks are checked by :meth:`_check_stack` (the base class only sees empty rows)."""

    def _check_stack(self, name: str, value: Any) -> NDArray[Any]:
        array = _real_array(name, value)
        if array.shape != (self.n_envs, *self.obs_shape):
            raise ValueError(
                f"{name} must have shape (n_envs, *observation_space.shape) = "
                f"{(self.n_envs, *self.obs_shape)}, got {array.shape}"
            )
        return array

    def add(
        self,
        obs: NDArray[Any] | dict[str, NDArray[Any]],
        next_obs: NDArray[Any] | dict[str, NDArray[Any]],
        action: NDArray[Any],
        reward: NDArray[Any],
        done: NDArray[Any],
        infos: list[dict[str, Any]],
    ) -> None:
        """
        Store one step of every env: the newest frame of ``obs`` (and the other frames when they
        cannot be rebuilt), the newest frame of ``next_obs`` and the rest of the transition.

        :param obs: stacked observations, shape ``(n_envs, *obs_shape)``
        :param next_obs: stacked next observations (``terminal_observation`` at an episode end, as
            SB3 passes it), shape ``(n_envs, *obs_shape)``
        :param action: actions, shape ``(n_envs, action_dim)``
        :param reward: rewards, shape ``(n_envs,)``
        :param done: episode ended (terminated or truncated), shape ``(n_envs,)``
        :param infos: one info dict per env; ``"TimeLimit.truncated"`` marks timeouts
        :raises ValueError: if an observation is not a stack of ``n_stack`` frames consistent with the
            previous steps and the ``padding`` setting
        """
        # Every check first, so a refused step leaves the buffer exactly as it was.
        obs_a = self._check_stack("obs", obs)
        next_a = self._check_stack("next_obs", next_obs)
        self._check_step(action, reward, done, infos)
        done_a = np.asarray(np.broadcast_to(np.asarray(done), (self.n_envs,)))
        obs_frames = self._frames_of(obs_a)
        next_frames = self._frames_of(next_a)
        continues = self._continuations(obs_a, obs_frames, next_frames)
        if self.episodic_info:
            self._pending_bootstrap = self._truncation_bootstrap(next_a, done, infos)
        try:
            self._store(obs_frames, next_frames, done_a, continues, next_a)
            super().add(self._empty_obs, self._empty_obs, action, reward, done, infos)
        finally:
            self._pending_bootstrap = None

    def _continuations(
        self, obs_a: NDArray[Any], obs_frames: NDArray[Any], next_frames: NDArray[Any]
    ) -> NDArray[np.bool_]:
        """Which envs' step continues the previous one (else it is the buffer's first step or starts a
        new episode, whose older frames must be padding); refuses stacks that are not consistent."""
        k = self.n_stack
        if k > 1 and not np.array_equal(next_frames[:, :-1], obs_frames[:, 1:]):
            bad = [
                e for e in range(self.n_envs) if not np.array_equal(next_frames[e, :-1], obs_frames[e, 1:])
            ]
            raise ValueError(
                f"next_obs of env(s) {bad} is not obs shifted by one frame: pass VecFrameStack's stacked "
                f"observations with its n_stack ({k}) and stacking axis (channels_order)"
            )
        step, prev_row = int(self._counter[0]), (self.pos - 1) % self.buffer_size
        # Per env: the step continues the previous one, or the buffer's first step, or a new episode.
        continues = np.zeros(self.n_envs, dtype=bool)
        for e in range(self.n_envs):
            if step > 0 and not self.dones[prev_row, e] and np.array_equal(obs_a[e], self._last_next[e]):
                continues[e] = True
            elif step > 0:
                older = obs_frames[e, :-1]
                expected = (
                    np.zeros_like(older)
                    if self.padding == "zeros"
                    else np.broadcast_to(obs_frames[e, -1], older.shape)
                )
                if not np.array_equal(older, expected):
                    raise ValueError(
                        f"the observation of env {e} starts a new episode but its {k - 1} older frames are "
                        f"not {self.padding!r} padding; use padding='zeros' with SB3's VecFrameStack and "
                        "padding='first' with a wrapper that repeats the first frame"
                    )
        return continues

    def _store(
        self,
        obs_frames: NDArray[Any],
        next_frames: NDArray[Any],
        done_a: NDArray[Any],
        continues: NDArray[np.bool_],
        next_a: NDArray[Any],
    ) -> None:
        """Write the frames of a checked step (no check fails from here on)."""
        row, step, rows, k = self.pos, int(self._counter[0]), self._n_frame_rows, self.n_stack
        prev_row = (row - 1) % self.buffer_size
        old = self._detached[row]
        self._free.extend(int(i) for i in old[old >= 0])
        self._detached[row] = -1
        offsets = np.zeros(self.n_envs, dtype=np.uint8)
        for e in range(self.n_envs):
            if continues[e]:
                offsets[e] = min(int(self._offsets[prev_row, e]) + 1, k - 1)
            elif step == 0:  # nothing stored yet: keep the older frames as given
                for age in range(1, k):
                    self._frames[(step - age) % rows, e] = obs_frames[e, k - 1 - age]
                offsets[e] = k - 1
            elif not self.dones[prev_row, e]:  # reset without done: keep the previous next frame aside
                self._detached[prev_row, e] = self._alloc(self._frames[step % rows, e])
        self._starts = ~continues
        self._offsets[row] = offsets
        self._frames[step % rows] = obs_frames[:, -1]
        for e in range(self.n_envs):
            if done_a[e]:
                self._detached[row, e] = self._alloc(next_frames[e, -1])
            else:
                self._frames[(step + 1) % rows, e] = next_frames[e, -1]
        self._last_next[...] = next_a
        self._counter[0] = step + 1

    def _episode_starts(self, row: int) -> NDArray[np.bool_]:
        return self._starts

    def _frame_steps(self, slots: NDArray[np.int64]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        rows, envs = np.divmod(np.asarray(slots, dtype=np.int64), self.n_envs)
        step = int(self._counter[0]) - 1 - (self.pos - 1 - rows) % self.buffer_size
        return step, envs

    def observations_at(self, indices: ArrayLike, next_obs: bool = False) -> NDArray[Any]:
        """
        Rebuild the stacked observations (or next observations) of stored transitions.

        :param indices: flat slot indices (``row * n_envs + env``, as ``samples.indices``), any shape
        :param next_obs: rebuild the next observations instead
        :return: stacks of shape ``(*indices.shape, *obs_shape)``, exactly as the env wrapper built them
        """
        slots = np.asarray(indices, dtype=np.int64)
        n = self.n_transitions
        if slots.size and (slots.min() < 0 or slots.max() >= n):
            raise ValueError(
                f"indices must point at stored transitions, in [0, {n}); got {slots.min()}..{slots.max()}"
            )
        step, envs = self._frame_steps(slots)
        rows = slots // self.n_envs
        offsets = self._offsets[rows, envs].astype(np.int64)[..., None]
        ages = np.arange(self.n_stack - 1, -1, -1, dtype=np.int64) - (1 if next_obs else 0)  # oldest first
        source = step[..., None] - np.minimum(ages, offsets)  # padding "first": clamped to the first frame
        flat = (source % self._n_frame_rows) * self.n_envs + envs[..., None]
        storage = self._frames.reshape(self._n_frame_rows * self.n_envs, -1)
        frames = np.take(storage, flat.reshape(-1), axis=0).reshape(*flat.shape, *self._frame_shape)
        if next_obs:
            detached = self._detached[rows, envs]
            hit = detached >= 0
            if hit.any():
                frames[hit, -1] = self._pool[detached[hit]]
        if self.padding == "zeros" and self.n_stack > 1:
            pad = ages > offsets
            if pad.any():
                frames[pad] = 0
        return self._stacks_of(frames)

    def _gather_obs(self, slots: NDArray[np.int64], next_obs: bool, env: VecNormalize | None) -> Any:
        data = np.asarray(self._normalize_obs(self.observations_at(slots, next_obs), env))
        # `data` is a fresh array (never a view of the storage), so the tensor may share its memory.
        return th.as_tensor(np.ascontiguousarray(data)).to(self.device)

    # ------------------------------------------------------------------ state

    @property
    def nbytes(self) -> int:
        """Bytes held by the buffer's arrays (frames, terminal frames, per-step data and priorities)."""
        arrays = [*self._obs_arrays().values(), self.actions, self.rewards, self.dones, self.timeouts]
        arrays += [self.levels, self._priorities]
        return int(sum(a.nbytes for a in arrays))

    def reset(self) -> None:
        super().reset()
        self._frames[...] = 0
        self._offsets[...] = 0
        self._detached[...] = -1
        self._pool = np.zeros((0, *self._frame_shape), dtype=self._pool.dtype)
        self._free = []
        self._counter[0] = 0
        self._last_next[...] = 0

    def _config(self) -> dict[str, Any]:
        config = super()._config()
        config.update(n_stack=self.n_stack, padding=self.padding, channels_first=self.channels_first)
        return config

    def _obs_arrays(self) -> dict[str, NDArray[Any]]:
        arrays = super()._obs_arrays()
        arrays.update(
            {
                "frames": self._frames,
                "frame_offsets": self._offsets,
                "frame_detached": self._detached,
                "frame_pool": self._pool,
                "frame_counter": self._counter,
                "frame_last_next": self._last_next,
            }
        )
        return arrays

    def load(self, path: str | os.PathLike[str]) -> None:
        """
        Restore a buffer saved by :meth:`save` (frames, terminal frames, priorities, RNG state).

        Every member is checked before anything is assigned (as :meth:`PrioritizedReplayBuffer.load`
        does, plus the frame bookkeeping: terminal-frame indices, the step counter, episode offsets): a
        refused file leaves this buffer exactly as it was.

        :param path: path of the ``.npz`` file
        :raises ValueError: if the file is not a valid checkpoint of a buffer with this one's settings
        """
        name = os.fspath(path)
        data = load_npz(path)
        pool_data = data.get("frame_pool")
        if pool_data is None or pool_data.ndim < 1 or pool_data.shape[1:] != self._frame_shape:
            raise ValueError(
                f"cannot load {name!r}: 'frame_pool' must be an array of frames of shape "
                f"(n, *{self._frame_shape})"
            )
        n_pool = int(pool_data.shape[0])
        pool = self._pool
        self._pool = np.zeros((n_pool, *self._frame_shape), dtype=pool.dtype)  # the shape load checks
        try:
            self._load_data(data, name)
        except BaseException:
            self._pool = pool
            raise
        used = set(self._detached[self._detached >= 0].tolist())
        self._free = [i for i in range(n_pool - 1, -1, -1) if i not in used]

    def _validated_file(self, data: dict[str, NDArray[Any]], name: str) -> dict[str, Any]:
        checked = super()._validated_file(data, name)
        arrays = checked["arrays"]
        n_pool = self._pool.shape[0]
        detached = np.asarray(arrays["frame_detached"])
        held = detached[detached != -1]
        if ((held < 0) | (held >= n_pool)).any():
            raise ValueError(
                f"cannot load {name!r}: 'frame_detached' holds indices outside [0, {n_pool}) "
                "(the terminal-frame pool) other than -1"
            )
        if np.unique(held).size != held.size:
            raise ValueError(f"cannot load {name!r}: 'frame_detached' uses a terminal frame twice")
        if (np.asarray(arrays["frame_offsets"]) >= self.n_stack).any():
            raise ValueError(f"cannot load {name!r}: 'frame_offsets' must be < n_stack={self.n_stack}")
        counter = int(np.asarray(arrays["frame_counter"]).reshape(-1)[0])
        pos, full = checked["pos"], checked["full"]
        if counter < pos or counter % self.buffer_size != pos or full != (counter >= self.buffer_size):
            raise ValueError(
                f"cannot load {name!r}: 'frame_counter'={counter} disagrees with pos={pos} and "
                f"full={full} (steps added: pos when not full, else k * buffer_size + pos, k >= 1)"
            )
        return checked


def _stack_layout(
    observation_space: spaces.Space[Any], n_stack: Any, channels_order: Any, padding: Any
) -> tuple[tuple[int, ...], bool, int]:
    """Check :class:`FrameStackReplayBuffer`'s arguments; return the stacked shape, whether frames are
    stacked on the first axis, and that axis."""
    if not isinstance(observation_space, spaces.Box):
        raise TypeError(
            "FrameStackReplayBuffer needs a gymnasium.spaces.Box observation space (stacked frames), "
            f"got {type(observation_space).__name__}"
        )
    if not isinstance(n_stack, (int, np.integer)) or not 1 <= n_stack <= 255:
        raise ValueError(f"n_stack must be an int in [1, 255], got {n_stack!r}")
    if channels_order not in CHANNELS_ORDERS:
        raise ValueError(f"channels_order must be one of {CHANNELS_ORDERS}, got {channels_order!r}")
    if padding not in PADDINGS:
        raise ValueError(f"padding must be one of {PADDINGS}, got {padding!r}")
    shape = tuple(int(s) for s in observation_space.shape)
    if not shape:
        raise ValueError("FrameStackReplayBuffer needs an observation space with at least one axis")
    if channels_order is None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # SB3's heuristic warns on an ambiguous middle axis
            channels_first = is_image_space(observation_space) and is_image_space_channels_first(
                observation_space
            )
    else:
        channels_first = channels_order == "first"
    axis = 0 if channels_first else len(shape) - 1
    if shape[axis] % n_stack:
        raise ValueError(
            f"the observation space's stacking axis ({'first' if channels_first else 'last'}) has size "
            f"{shape[axis]}, not a multiple of n_stack={n_stack}; pass the stacked space and "
            "VecFrameStack's n_stack (and channels_order if detection picks the wrong axis)"
        )
    return shape, channels_first, axis
