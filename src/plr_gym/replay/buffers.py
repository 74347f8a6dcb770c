"""Prioritized experience replay (Schaul et al., 2015) as drop-in Stable-Baselines3 replay buffers.

The buffers here adapt SB3's storage (``ReplayBuffer``/``DictReplayBuffer`` arrays, tensors, VecNormalize)
to the torch-free cores: :class:`~plr_gym.replay.priorities.ReplayPriorities` keeps the priorities and
draws the slots, :mod:`plr_gym.replay.sequences` picks the slots of sequences. What remains here is
storing transitions, gathering a batch's data (n-step returns included) and checkpoints.
"""

from __future__ import annotations

import json
import os
import warnings
from typing import Any, NamedTuple

import numpy as np
import torch as th
from gymnasium import spaces
from numpy.typing import ArrayLike, NDArray
from stable_baselines3.common.buffers import DictReplayBuffer, ReplayBuffer
from stable_baselines3.common.type_aliases import TensorDict
from stable_baselines3.common.vec_env import VecNormalize

from plr_gym._levels import check_level_id
from plr_gym._sizes import allocating
from plr_gym.checkpoint import load_npz, save_npz
from plr_gym.replay.priorities import PRIORITIZATIONS as PRIORITIZATIONS  # re-exported
from plr_gym.replay.priorities import ReplayPriorities, check_fraction, is_int
from plr_gym.replay.sequences import RewardRebalancedEnds, SequenceSamples, check_length, sequence_slots
from plr_gym.replay.sum_tree import SumTree

__all__ = [
    "PrioritizedDictReplayBuffer",
    "PrioritizedDictReplayBufferSamples",
    "PrioritizedReplayBuffer",
    "PrioritizedReplayBufferSamples",
    "SequenceSamples",
]

_FORMAT_VERSION = 2  # 2: per-transition levels


class PrioritizedReplayBufferSamples(NamedTuple):
    """
    A batch from :class:`PrioritizedReplayBuffer`: SB3's ``ReplayBufferSamples`` fields, in the same
    order, followed by ``discounts``, ``weights``, ``indices`` and ``levels``.

    :param observations: shape ``(batch, *obs_shape)``
    :param actions: shape ``(batch, action_dim)``
    :param next_observations: observation ``k`` steps later, ``k`` = steps summed in ``rewards``,
        shape ``(batch, *obs_shape)``
    :param dones: 1 where the episode truly terminated within those ``k`` steps (timeouts excluded
        when ``handle_timeout_termination``), shape ``(batch, 1)``
    :param rewards: discounted sum of the ``k`` rewards, shape ``(batch, 1)``
    :param discounts: ``gamma ** k`` to bootstrap with, shape ``(batch, 1)``; ``None`` when
        ``n_steps == 1`` so the algorithm uses its own ``gamma`` (as SB3's ``ReplayBuffer``)
    :param weights: importance-sampling weights, at most 1, shape ``(batch, 1)``
    :param indices: flat slot index of each sample, for ``update_priorities``, shape ``(batch,)``
    :param levels: level id of each sample's episode (``infos[i]["level"]`` when it was added, as set by
        :class:`~plr_gym.PrioritizedLevelReplay`; ``-1`` when the env reported none), int64 numpy
        array of shape ``(batch,)``

    Example:
        >>> PrioritizedReplayBufferSamples._fields[-4:]
        ('discounts', 'weights', 'indices', 'levels')
    """

    observations: th.Tensor
    actions: th.Tensor
    next_observations: th.Tensor
    dones: th.Tensor
    rewards: th.Tensor
    discounts: th.Tensor | None
    weights: th.Tensor
    indices: NDArray[np.int64]
    levels: NDArray[np.int64] | None = None


class PrioritizedDictReplayBufferSamples(NamedTuple):
    """
    :class:`PrioritizedReplayBufferSamples` for ``Dict`` observation spaces: ``observations`` and
    ``next_observations`` map each key to a tensor of shape ``(batch, *obs_shape[key])``.

    Example:
        >>> PrioritizedDictReplayBufferSamples._fields == PrioritizedReplayBufferSamples._fields
        True
    """

    observations: TensorDict
    actions: th.Tensor
    next_observations: TensorDict
    dones: th.Tensor
    rewards: th.Tensor
    discounts: th.Tensor | None
    weights: th.Tensor
    indices: NDArray[np.int64]
    levels: NDArray[np.int64] | None = None


# Settings that live in the priority core (ReplayPriorities); the buffer exposes them read-only.
_CORE_SETTINGS = (
    "prioritization",
    "alpha",
    "beta0",
    "eps",
    "replacement",
    "recent_data_ratio",
    "recent_data_steps",
    "rank_refresh_interval",
)


class _PrioritizedBufferBase(ReplayBuffer):
    """Prioritized sampling shared by the array and ``Dict`` observation buffers: SB3's storage, with
    the priorities and the choice of slots delegated to :attr:`replay_priorities`."""

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
        prioritization: str = "proportional",
        alpha: float | None = None,
        beta: float | None = None,
        eps: float = 1e-6,
        n_steps: int = 1,
        gamma: float = 0.99,
        replacement: bool = True,
        recent_data_ratio: float = 0.0,
        recent_data_steps: int | None = None,
        rank_refresh_interval: int = 1000,
        seed: int | None = None,
    ) -> None:
        if optimize_memory_usage:
            raise ValueError(
                f"{type(self).__name__} does not support optimize_memory_usage=True (it stores next "
                "observations separately to gather n-step targets and sequences); pass "
                "optimize_memory_usage=False."
            )
        if not is_int(n_steps) or n_steps < 1:
            raise ValueError(f"n_steps must be an int >= 1, got {n_steps!r}")
        check_fraction("gamma", gamma)
        if not is_int(n_envs) or n_envs < 1:
            raise ValueError(f"n_envs must be an int >= 1, got {n_envs!r}")
        if not is_int(buffer_size) or buffer_size < 1:
            raise ValueError(f"buffer_size must be an int >= 1, got {buffer_size!r}")
        if isinstance(observation_space, spaces.Dict) and not isinstance(self, DictReplayBuffer):
            raise TypeError(
                f"{type(self).__name__} stores array observations, got a Dict observation space; use "
                "PrioritizedDictReplayBuffer (PERDQN/PERSAC/PERTD3 pick it for a Dict space themselves)"
            )
        if not isinstance(observation_space, spaces.Space) or not isinstance(action_space, spaces.Space):
            raise TypeError(
                "observation_space and action_space must be gymnasium spaces, got "
                f"{type(observation_space).__name__} and {type(action_space).__name__}"
            )
        with allocating("buffer_size", buffer_size):
            # Checks every priority setting before SB3 allocates the storage.
            priorities = ReplayPriorities(
                max(int(buffer_size) // int(n_envs), 1),  # SB3's rows per env
                int(n_envs),
                prioritization=prioritization,
                alpha=alpha,
                beta=beta,
                eps=eps,
                replacement=replacement,
                recent_data_ratio=recent_data_ratio,
                recent_data_steps=recent_data_steps,
                rank_refresh_interval=rank_refresh_interval,
                seed=seed,
            )
            super().__init__(
                buffer_size,
                observation_space,
                action_space,
                device=device,
                n_envs=n_envs,
                optimize_memory_usage=False,
                handle_timeout_termination=handle_timeout_termination,
            )
        assert priorities.capacity == self.buffer_size * self.n_envs
        #: The torch-free priority core: raw priorities, sum tree, sampling and importance weights.
        self.replay_priorities = priorities
        self.n_steps = int(n_steps)
        self.gamma = float(gamma)
        self.capacity = self.buffer_size * self.n_envs
        # Level id of each transition's episode (infos[i]["level"] at add time), -1 when unknown.
        self.levels: NDArray[np.int64] = np.full((self.buffer_size, self.n_envs), -1, dtype=np.int64)
        self._reward_ends: RewardRebalancedEnds | None = None  # built by the first reward-sequence draw
        self._warned_no_update = False

    # ------------------------------------------------------------------ state and hyper-parameters

    @property
    def prioritization(self) -> str:
        """``"proportional"`` or ``"rank"``."""
        return self.replay_priorities.prioritization

    @property
    def alpha(self) -> float:
        """Priority exponent (0 = uniform)."""
        return self.replay_priorities.alpha

    @property
    def beta0(self) -> float:
        """Initial importance-sampling exponent."""
        return self.replay_priorities.beta0

    @property
    def eps(self) -> float:
        """Added to ``|TD error|`` so that no transition gets probability 0."""
        return self.replay_priorities.eps

    @property
    def replacement(self) -> bool:
        """Whether a batch may hold one transition several times."""
        return self.replay_priorities.replacement

    @property
    def recent_data_ratio(self) -> float:
        """Share of each batch drawn uniformly from the newest steps."""
        return self.replay_priorities.recent_data_ratio

    @property
    def recent_data_steps(self) -> int | None:
        """Number of newest steps (per env) for that share."""
        return self.replay_priorities.recent_data_steps

    @property
    def rank_refresh_interval(self) -> int:
        """Rank mode: samples between full re-sorts."""
        return self.replay_priorities.rank_refresh_interval

    @property
    def beta(self) -> float:
        """Current importance-sampling exponent (annealed from ``beta0`` to 1 by :meth:`anneal_beta`)."""
        return self.replay_priorities.beta

    @beta.setter
    def beta(self, value: float) -> None:
        self.replay_priorities.beta = value

    def anneal_beta(self, progress: float) -> None:
        """
        Set ``beta = beta0 + progress * (1 - beta0)`` (linear annealing to 1, Schaul et al. 2015).

        :param progress: fraction of training done, in ``[0, 1]``
        """
        self.replay_priorities.anneal_beta(progress)

    @property
    def n_transitions(self) -> int:
        """Number of stored transitions over all envs (``size() * n_envs``)."""
        return self.size() * self.n_envs

    @property
    def priorities(self) -> NDArray[np.float64]:
        """Copy of the raw priorities ``|delta| + eps`` (0 when empty), shape ``(buffer_size, n_envs)``."""
        return self.replay_priorities.raw.reshape(self.buffer_size, self.n_envs).copy()

    @property
    def max_priority(self) -> float:
        """Largest raw priority seen so far (at least 1); new transitions enter with it."""
        return self.replay_priorities.max_priority

    @property
    def _tree(self) -> SumTree:
        return self.replay_priorities.tree

    @property
    def _rng(self) -> np.random.Generator:
        return self.replay_priorities.rng

    @property
    def _priorities(self) -> NDArray[np.float64]:
        return self.replay_priorities.raw

    def sampling_probabilities(self) -> NDArray[np.float64]:
        """
        :return: the probability ``P(i)`` that one prioritized draw picks each slot,
            shape ``(buffer_size, n_envs)`` (ignores ``recent_data_ratio``)
        """
        return self.replay_priorities.probabilities().reshape(self.buffer_size, self.n_envs)

    def __setstate__(self, state: dict[str, Any]) -> None:
        # Buffers pickled before per-transition levels existed load with every level unknown (-1), and
        # buffers pickled before the priority core existed get one built from their fields.
        state = dict(state)
        if "replay_priorities" not in state and "_tree" in state:
            state["replay_priorities"] = _core_from_old_state(state)
        state.pop("_reward_trees", None)
        state.setdefault("_reward_ends", None)
        self.__dict__.update(state)
        if "levels" not in state:
            self.levels = np.full((self.buffer_size, self.n_envs), -1, dtype=np.int64)

    def reset(self) -> None:
        super().reset()
        self.replay_priorities.reset()
        self.levels[:] = -1
        self._reward_ends = None

    # ------------------------------------------------------------------ adding and priorities

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
        Store one step of every env (SB3's ``add``), each at the maximum priority seen so far.

        :param obs: observations, shape ``(n_envs, *obs_shape)``
        :param next_obs: next observations, shape ``(n_envs, *obs_shape)``
        :param action: actions, shape ``(n_envs, action_dim)``
        :param reward: rewards, shape ``(n_envs,)``
        :param done: episode ended (terminated or truncated), shape ``(n_envs,)``
        :param infos: one info dict per env; ``"TimeLimit.truncated"`` marks timeouts
        """
        # Everything is checked before anything is stored: never a half-stored step, and a refused step
        # leaves the buffer exactly as it was.
        self._check_observations(obs, next_obs)
        self._check_step(action, reward, done, infos)
        row = self.pos
        super().add(obs, next_obs, action, reward, done, infos)  # type: ignore[arg-type]
        self._after_add(row, infos)

    def _check_observations(self, obs: Any, next_obs: Any) -> None:
        """Refuse observations that SB3's ``add`` would store part of before failing, or would broadcast
        or cast silently: each must be an array of shape ``(n_envs, *obs_shape)`` (any shape of that
        size for ``Discrete`` spaces, which SB3 reshapes) with a real (bool, int or float) dtype; for
        ``Dict`` spaces, a dict with exactly the space's keys."""
        space = self.observation_space
        n = self.n_envs
        for name, value in (("obs", obs), ("next_obs", next_obs)):
            if isinstance(space, spaces.Dict):
                shapes: dict[str, tuple[int, ...]] = self.obs_shape  # type: ignore[assignment]
                if not isinstance(value, dict) or set(value) != set(shapes):
                    got = sorted(value) if isinstance(value, dict) else type(value).__name__
                    raise ValueError(f"{name} must be a dict with the keys {sorted(shapes)}, got {got}")
                for key, shape in shapes.items():
                    _check_obs_array(f"{name}[{key!r}]", value[key], (n, *shape), space[key])
            else:
                _check_obs_array(name, value, (n, *self.obs_shape), space)

    def _check_step(self, action: Any, reward: Any, done: Any, infos: list[dict[str, Any]]) -> None:
        """Refuse a step that SB3's ``add`` would fail on part-way (after writing some arrays), or store
        wrongly: NaN/infinite or complex rewards, masked arrays, a non-numeric action."""
        self._levels_of(infos)
        if self.handle_timeout_termination and not all(isinstance(info, dict) for info in infos):
            raise ValueError(f"infos must be a list of {self.n_envs} dicts (one per env), got {infos!r}")
        if self.handle_timeout_termination:
            timeout_flags(infos, self.n_envs)
        if np.size(action) != self.n_envs * self.action_dim:
            raise ValueError(
                f"action must hold n_envs * action_dim = {self.n_envs * self.action_dim} values, "
                f"got shape {np.shape(action)}"
            )
        for name, value in (("action", action), ("reward", reward), ("done", done)):
            array = _real_array(name, value)
            if name != "action":
                try:
                    ok = np.broadcast_shapes(array.shape, (self.n_envs,)) == (self.n_envs,)
                except ValueError:
                    ok = False
                if not ok:
                    raise ValueError(
                        f"{name} must have shape (n_envs,) = ({self.n_envs},), got {array.shape}"
                    )
            if array.dtype.kind == "f" and not np.isfinite(array).all():
                raise ValueError(f"{name} must be finite, got {array.reshape(-1).tolist()}")

    def _levels_of(self, infos: list[dict[str, Any]]) -> NDArray[np.int64]:
        """Each env's level id from ``infos[i]["level"]``: ``-1`` (unknown) when absent or not an int
        level id (``None`` after an unseeded reset, a generator's dict or array level, a string); an int
        outside ``[-1, 2**63 - 1]`` is refused."""
        if not isinstance(infos, (list, tuple)) or len(infos) != self.n_envs:
            raise ValueError(f"infos must be a list of {self.n_envs} dicts (one per env), got {infos!r}")
        out = np.full(self.n_envs, -1, dtype=np.int64)
        for i, info in enumerate(infos):
            level: Any = info.get("level") if isinstance(info, dict) else None
            if is_int(level):
                if int(level) != -1:  # -1 marks an unknown level
                    check_level_id(level, f'infos[{i}]["level"] (or -1 for an unknown level)')
                out[i] = int(level)
            elif level is not None and not getattr(self, "_warned_level", False):
                self._warned_level = True
                warnings.warn(
                    f'infos[{i}]["level"] is a {type(level).__name__}, not an int level id: such transitions '
                    "are stored with level -1 (unknown), as for envs without levels. Shown once per buffer.",
                    UserWarning,
                    stacklevel=3,
                )
        return out

    def _after_add(self, row: int, infos: list[dict[str, Any]]) -> None:
        """Give the slots of row ``row`` their initial priority and record each env's level
        (``infos[i]["level"]``, ``-1`` if absent or not an int). Subclasses may also store per-env data
        taken from ``infos`` here (one entry per env)."""
        self.levels[row] = self._levels_of(infos)
        slots = self.replay_priorities.add(row)
        if self._reward_ends is not None:
            self._reward_ends.add(slots, self.rewards[row])

    def update_priorities(self, indices: ArrayLike | th.Tensor, priorities: ArrayLike | th.Tensor) -> None:
        """
        Set the priority of sampled transitions, typically to their absolute TD error.

        Each slot then gets raw priority ``p = priority + eps``, stored in the tree as ``p ** alpha``
        (proportional) or ``rank(p) ** -alpha`` (rank; see the class docstring).

        :param indices: flat slot indices from ``samples.indices``, shape ``(batch,)``
        :param priorities: non-negative finite priorities, shape ``(batch,)`` (or ``(batch, 1)``)
        :raises ValueError: on a NaN, infinite or negative priority, a shape mismatch, or an index
            that is out of range or points at an empty slot
        """
        if isinstance(indices, th.Tensor):
            indices = indices.detach().cpu().numpy()
        if isinstance(priorities, th.Tensor):
            priorities = priorities.detach().cpu().numpy()
        self.replay_priorities.update(indices, priorities, rows=self.size())

    def refresh_ranks(self) -> None:
        """
        Rank-based mode: sort all stored priorities (``O(N log N)``) and give every slot the exact leaf
        ``rank ** -alpha`` (rank 1 = largest priority, ties broken by slot order). Called automatically
        every ``rank_refresh_interval`` samples and whenever the buffer has doubled since the last sort.
        """
        self.replay_priorities.refresh_ranks(self.size())

    # ------------------------------------------------------------------ sampling

    def sample_indices(self, batch_size: int) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
        """
        Draw slots by priority, without gathering their data.

        The prioritized part of the batch is stratified: the total priority is cut into as many equal
        segments as draws and one value is drawn uniformly in each, then all values descend the tree
        together. A share ``recent_data_ratio`` of the batch is drawn uniformly from the
        ``recent_data_steps`` newest steps of all envs instead.

        :param batch_size: number of slots to draw
        :return: flat slot indices, shape ``(batch_size,)``, and importance weights
            ``(N · P(i)) ** -beta / max_j (N · P(j)) ** -beta``, shape ``(batch_size,)``
        """
        with allocating("batch_size", batch_size):
            indices, weights = self.replay_priorities.sample(batch_size, rows=self.size(), pos=self.pos)
        if self.replay_priorities.samples_since_update == 2 and not self._warned_no_update:
            self._warned_no_update = True
            warnings.warn(
                f"{type(self).__name__}.sample() was called twice without update_priorities(): priorities "
                "are never updated, so every transition keeps the same priority and sampling is uniform "
                "with all importance weights 1. Use plr_gym's PERDQN / PERSAC / PERTD3 (or call "
                "update_priorities(samples.indices, td_errors) after each sample).",
                UserWarning,
                stacklevel=2,
            )
        return indices, weights

    def sample(  # type: ignore[override]
        self, batch_size: int, env: VecNormalize | None = None
    ) -> PrioritizedReplayBufferSamples | PrioritizedDictReplayBufferSamples:
        """
        Sample a prioritized batch; each sample's env comes from the tree, not from a random draw.

        :param batch_size: number of transitions
        :param env: VecNormalize to normalise observations and rewards with, as in SB3
        :return: SB3's sample fields plus ``discounts``, ``weights`` and ``indices``
        """
        indices, weights = self.sample_indices(batch_size)
        return self._get_prioritized_samples(indices, weights, env)

    def _get_prioritized_samples(
        self, slots: NDArray[np.int64], weights: NDArray[np.float64], env: VecNormalize | None
    ) -> PrioritizedReplayBufferSamples | PrioritizedDictReplayBufferSamples:
        rewards_f = self.rewards.reshape(-1)
        dones_f = self.dones.reshape(-1)
        timeouts_f = self.timeouts.reshape(-1)
        discounts: th.Tensor | None = None
        if self.n_steps == 1:
            last = slots
            rewards = self._normalize_reward(rewards_f.take(slots).reshape(-1, 1), env)
        else:
            steps = np.arange(self.n_steps)
            rows, envs = np.divmod(slots, self.n_envs)
            t = (rows[:, None] + steps) % self.buffer_size
            window = t * self.n_envs + envs[:, None]  # (batch, n_steps)
            # Stop at an episode end, or at the newest step (the next slot is older data or empty).
            stop = (dones_f[window] > 0) | (timeouts_f[window] > 0) | (t == (self.pos - 1) % self.buffer_size)
            k = np.where(stop.any(axis=1), stop.argmax(axis=1), self.n_steps - 1)
            mask = steps <= k[:, None]
            step_rewards = self._normalize_reward(rewards_f[window], env)
            pows = self.gamma ** steps.astype(np.float64)
            rewards = (step_rewards * pows * mask).sum(axis=1, keepdims=True).astype(np.float32)
            last = window[np.arange(slots.size), k]
            discounts = self._own_tensor((self.gamma ** (k + 1.0)).reshape(-1, 1).astype(np.float32))
        dones = dones_f.take(last)
        timeouts = timeouts_f.take(last)
        if timeouts.any():  # else dones * (1 - timeouts) == dones
            dones *= 1.0 - timeouts
        actions = self.actions.reshape(self.capacity, self.action_dim).take(slots, axis=0)
        return self._make_samples(
            observations=self._gather_obs(slots, False, env),
            actions=self._own_tensor(actions),
            next_observations=self._gather_obs(last, True, env),
            dones=self._own_tensor(dones.reshape(-1, 1)),
            rewards=self._own_tensor(np.asarray(rewards, dtype=np.float32)),
            discounts=discounts,
            weights=self._own_tensor(weights.astype(np.float32).reshape(-1, 1)),
            indices=slots,
            levels=self.levels.reshape(-1).take(slots),
        )

    def _own_tensor(self, array: NDArray[Any]) -> th.Tensor:
        """``to_torch`` for an array made for this batch alone (never a view of the storage): on the CPU
        the tensor shares its memory instead of copying it."""
        if self.device.type == "cpu" and array.flags.writeable:
            try:
                return th.from_numpy(array)
            except TypeError:  # a dtype torch has no type for: let to_torch raise or convert
                pass
        return self.to_torch(array)

    def _gather_obs(self, slots: NDArray[np.int64], next_obs: bool, env: VecNormalize | None) -> Any:
        source = self.next_observations if next_obs else self.observations
        data = source.reshape(self.capacity, *self.obs_shape).take(slots, axis=0)
        # `data` is a fresh array, and VecNormalize returns a new one: never a view of the storage.
        return self._own_tensor(np.asarray(self._normalize_obs(data, env)))

    def _make_samples(
        self, **fields: Any
    ) -> PrioritizedReplayBufferSamples | PrioritizedDictReplayBufferSamples:
        return PrioritizedReplayBufferSamples(**fields)

    # ------------------------------------------------------------------ sequences
    def sample_sequences(
        self,
        batch_size: int,
        batch_length: int,
        env: VecNormalize | None = None,
        allow_episode_crossing: bool = False,
    ) -> SequenceSamples:
        """
        Sample contiguous sequences of one env's steps, for recurrent or auxiliary losses.

        The first step of each sequence is drawn exactly as :meth:`sample_indices` draws transitions
        (priorities, stratification, recent share), and ``weights``/``indices`` refer to it. A sequence
        runs ``batch_length`` steps forward from there; steps after its episode ended (or after the
        newest step) are padding, see :class:`SequenceSamples` and
        :func:`~plr_gym.replay.sequences.sequence_slots`.

        :param batch_size: number of sequences
        :param batch_length: steps per sequence
        :param env: VecNormalize to normalise observations and rewards with
        :param allow_episode_crossing: let sequences run on into the env's next episode (use
            ``dones``/``timeouts`` to reset recurrent state); the newest step still ends a sequence
        :return: fields shaped ``(batch_size, batch_length, ...)``
        """
        length = check_length(batch_length)
        indices, weights = self.sample_indices(batch_size)
        return self._gather_sequences(indices, weights, length, False, allow_episode_crossing, env)

    def sample_reward_sequences(
        self,
        batch_size: int,
        batch_length: int,
        nonzero_reward_prob: float = 0.5,
        env: VecNormalize | None = None,
    ) -> SequenceSamples:
        """
        Reward-rebalanced sequences (UNREAL's reward prediction): each sequence ends at a step whose
        reward is non-zero with probability ``nonzero_reward_prob``, and at a zero-reward step
        otherwise; within each group the last step is uniform
        (:class:`~plr_gym.replay.sequences.RewardRebalancedEnds`). Steps before the episode start are
        padding. Priorities are not used and ``weights`` are all 1. If one group is empty, every
        sequence comes from the other.

        :param batch_size: number of sequences
        :param batch_length: steps per sequence, the last one being the (non-)rewarding step
        :param nonzero_reward_prob: probability that a sequence ends in a non-zero reward
        :param env: VecNormalize to normalise observations and rewards with
        :return: fields shaped ``(batch_size, batch_length, ...)``; ``indices`` are the last steps
        """
        length = check_length(batch_length)
        prob = check_fraction("nonzero_reward_prob", nonzero_reward_prob)
        if not is_int(batch_size) or batch_size < 1:
            raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}")
        if self.n_transitions == 0:
            raise ValueError("cannot sample from an empty buffer: add transitions first")
        if self._reward_ends is None:
            self._reward_ends = RewardRebalancedEnds(self.capacity)
            self._reward_ends.build(self.rewards.reshape(-1), self.n_transitions)
        indices = self._reward_ends.draw(batch_size, prob, self.replay_priorities.rng)
        return self._gather_sequences(indices, np.ones(batch_size), length, True, False, env)

    def _gather_sequences(
        self,
        anchors: NDArray[np.int64],
        weights: NDArray[np.float64],
        length: int,
        anchor_at_end: bool,
        allow_episode_crossing: bool,
        env: VecNormalize | None,
    ) -> SequenceSamples:
        slots, mask = sequence_slots(
            anchors,
            length,
            n_rows=self.buffer_size,
            n_envs=self.n_envs,
            pos=self.pos,
            full=self.full,
            dones=None if allow_episode_crossing else self.dones.reshape(-1),
            anchor_at_end=anchor_at_end,
        )
        rewards = self._normalize_reward(self.rewards.reshape(-1)[slots], env) * mask
        dones_raw = self.dones.reshape(-1)[slots]
        timeouts_raw = self.timeouts.reshape(-1)[slots]
        return SequenceSamples(
            observations=self._gather_obs(slots, False, env),
            actions=self.to_torch(self.actions.reshape(self.capacity, self.action_dim)[slots]),
            next_observations=self._gather_obs(slots, True, env),
            rewards=self.to_torch(np.asarray(rewards, dtype=np.float32)),
            dones=self.to_torch((dones_raw * (1.0 - timeouts_raw) * mask).astype(np.float32)),
            timeouts=self.to_torch((timeouts_raw * mask).astype(np.float32)),
            mask=self.to_torch(mask),
            weights=self.to_torch(weights.astype(np.float32).reshape(-1, 1)),
            indices=anchors,
        )

    # ------------------------------------------------------------------ save / load

    def _config(self) -> dict[str, Any]:
        return {
            "class": type(self).__name__,
            "buffer_size": self.buffer_size,
            "n_envs": self.n_envs,
            "action_dim": self.action_dim,
            "handle_timeout_termination": self.handle_timeout_termination,
            "n_steps": self.n_steps,
            "gamma": self.gamma,
            **self.replay_priorities.config(),
        }

    def _obs_arrays(self) -> dict[str, NDArray[Any]]:
        return {"observations": self.observations, "next_observations": self.next_observations}

    def save(self, path: str | os.PathLike[str]) -> None:
        """
        Save the buffer, its priorities and its RNG state to an ``.npz`` file (no pickle: loading it
        runs no code). A buffer loaded from it samples exactly what this one would have sampled next.

        The file is written atomically (:mod:`plr_gym.checkpoint`): a save that fails part-way leaves
        the previous file intact.

        :param path: file path, used exactly as given (no suffix is added)
        """
        arrays: dict[str, Any] = {
            "config": np.array(json.dumps(self._config(), sort_keys=True)),
            "format_version": np.array(_FORMAT_VERSION),
            "rng_state": np.array(json.dumps(self.replay_priorities.rng.bit_generator.state)),
            "pos": np.array(self.pos),
            "full": np.array(self.full),
            **self.replay_priorities.state_arrays(),
            "actions": self.actions,
            "rewards": self.rewards,
            "dones": self.dones,
            "timeouts": self.timeouts,
            "levels": self.levels,
        }
        arrays.update(self._obs_arrays())
        save_npz(path, arrays)

    def load(self, path: str | os.PathLike[str]) -> None:
        """
        Restore a buffer saved by :meth:`save` into this one, which must have been built with the same
        spaces and settings.

        Every member is checked before anything is assigned (settings, array shapes and dtypes,
        ``0 <= pos < buffer_size``, finite non-negative priorities and leaves, empty slots beyond the
        stored data, counters, RNG state): a refused file leaves this buffer exactly as it was.

        :param path: path of the ``.npz`` file
        :raises ValueError: if the file is not a valid checkpoint of a buffer with this one's settings
        """
        self._load_data(load_npz(path), os.fspath(path))

    def _load_data(self, data: dict[str, NDArray[Any]], name: str) -> None:
        """Validate the arrays of a saved buffer (:meth:`_validated_file`), then assign them."""
        checked = self._validated_file(data, name)
        targets = self._load_targets()
        for key, value in checked["arrays"].items():
            targets[key][...] = value
        self.pos = checked["pos"]
        self.full = checked["full"]
        self.replay_priorities.set_state(checked["priorities"])
        self.replay_priorities.rng = checked["rng"]
        self._reward_ends = None

    def _validated_file(self, data: dict[str, NDArray[Any]], name: str) -> dict[str, Any]:
        """Check a saved buffer's arrays against this buffer; return the values to assign."""
        from plr_gym.sampler import _state_rng

        def scalar(key: str) -> Any:
            if key not in data:
                raise ValueError(f"cannot load {name!r}: it has no {key!r} (not a prioritized buffer file)")
            if data[key].shape != ():
                raise ValueError(
                    f"cannot load {name!r}: {key!r} must be a scalar, got shape {data[key].shape}"
                )
            return data[key].item()

        try:
            version = scalar("format_version")
            if not is_int(version) or version not in (1, _FORMAT_VERSION):
                raise ValueError(
                    f"unsupported buffer file format {version!r} (expected 1 or {_FORMAT_VERSION})"
                )
            saved = json.loads(str(scalar("config")))
            rng_state = json.loads(str(scalar("rng_state")))
        except json.JSONDecodeError as exc:
            raise ValueError(f"cannot load {name!r}: bad JSON metadata ({exc})") from exc
        mine = self._config()
        if not isinstance(saved, dict):
            raise ValueError(f"cannot load {name!r}: its config is not a JSON object")
        differ = sorted(k for k in set(saved) | set(mine) if saved.get(k) != mine.get(k))
        if differ:
            detail = ", ".join(f"{k}: file {saved.get(k)!r} vs buffer {mine.get(k)!r}" for k in differ)
            raise ValueError(f"cannot load {name!r} into this buffer, settings differ: {detail}")
        arrays: dict[str, NDArray[Any]] = {}
        for key, target in self._load_targets().items():
            if key == "levels" and version < 2:
                continue
            if key not in data:
                raise ValueError(f"cannot load {name!r}: array {key!r} is missing")
            value = data[key]
            if value.shape != target.shape:
                raise ValueError(f"array {key!r} has shape {value.shape} in the file, {target.shape} here")
            if not np.can_cast(value.dtype, target.dtype, casting="same_kind") or value.dtype == object:
                raise ValueError(f"array {key!r} has dtype {value.dtype} in the file, {target.dtype} here")
            arrays[key] = value
        if version < 2:  # format 1 predates per-transition levels
            arrays["levels"] = np.full_like(self.levels, -1)
        if (arrays["levels"] < -1).any():
            raise ValueError(f"cannot load {name!r}: 'levels' holds ids below -1 (-1 marks unknown)")
        pos, full = scalar("pos"), scalar("full")
        if not is_int(pos) or not 0 <= pos < self.buffer_size:
            raise ValueError(f"cannot load {name!r}: pos={pos!r} must be an int in [0, {self.buffer_size})")
        if not isinstance(full, (bool, np.bool_)):
            raise ValueError(f"cannot load {name!r}: full={full!r} must be a bool")
        try:
            priorities = self.replay_priorities.checked_state(data, self.buffer_size if full else int(pos))
            rng = _state_rng(rng_state)
        except ValueError as exc:
            raise ValueError(f"cannot load {name!r}: {exc}") from exc
        return {"arrays": arrays, "pos": int(pos), "full": bool(full), "priorities": priorities, "rng": rng}

    def _load_targets(self) -> dict[str, NDArray[Any]]:
        """The arrays :meth:`load` fills in place, by their name in the file (the priorities are the
        core's: :meth:`ReplayPriorities.checked_state`)."""
        return {
            "actions": self.actions,
            "rewards": self.rewards,
            "dones": self.dones,
            "timeouts": self.timeouts,
            "levels": self.levels,
            **self._obs_arrays(),
        }


def timeout_flags(infos: Any, n_envs: int) -> NDArray[np.bool_]:
    """Each env's ``infos[i]["TimeLimit.truncated"]`` (``False`` when absent), checked before any step is
    stored: a bool (Python's or numpy's, also as a 0-d array) or the int 0 or 1; anything else (a string,
    ``None``, a list, an array of several values, another number) raises ``ValueError`` naming the env."""
    out = np.zeros(n_envs, dtype=bool)
    for i in range(n_envs):
        value = infos[i].get("TimeLimit.truncated", False)
        flag = value.item() if isinstance(value, np.ndarray) and value.ndim == 0 else value
        if isinstance(flag, (bool, np.bool_)):
            out[i] = bool(flag)
        elif isinstance(flag, (int, np.integer)) and flag in (0, 1):
            out[i] = flag == 1
        else:
            raise ValueError(
                f'infos[{i}]["TimeLimit.truncated"] must be a bool (or the int 0 or 1), got {value!r} '
                f"({type(value).__name__})"
            )
    return out


def _real_array(name: str, value: Any) -> NDArray[Any]:
    """``value`` as an array of bools, ints or floats, else ``TypeError`` (masked, complex, objects...)."""
    if isinstance(value, np.ma.MaskedArray):
        raise TypeError(
            f"{name} must not be a numpy masked array (its mask would be ignored); pass a plain array"
        )
    if isinstance(value, th.Tensor):
        value = value.detach().cpu().numpy()
    try:
        array = np.asarray(value)
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f"{name} must be an array of real numbers, got {type(value).__name__}: {exc}"
        ) from None
    if array.dtype.kind not in "biuf":
        raise TypeError(f"{name} must hold real numbers (bool, int or float), got dtype {array.dtype}")
    return array


def _check_obs_array(name: str, value: Any, shape: tuple[int, ...], space: spaces.Space[Any]) -> None:
    array = _real_array(name, value)
    if isinstance(space, spaces.Discrete):
        ok = array.size == int(np.prod(shape))
    else:
        ok = array.shape == shape
    if not ok:
        raise ValueError(f"{name} must have shape (n_envs, *obs_shape) = {shape}, got {array.shape}")


def _core_from_old_state(state: dict[str, Any]) -> ReplayPriorities:
    """The priority core of a buffer pickled before :class:`ReplayPriorities` existed (its fields were
    the buffer's own attributes)."""
    core = ReplayPriorities.__new__(ReplayPriorities)
    n_rows, n_envs = int(state["buffer_size"]), int(state["n_envs"])
    core.n_rows, core.n_envs, core.capacity = n_rows, n_envs, n_rows * n_envs
    for name in _CORE_SETTINGS:
        setattr(core, name, state.pop(name))
    core._beta = state.pop("_beta")
    core.rng = state.pop("_rng")
    core.tree = state.pop("_tree")
    core.raw = state.pop("_priorities")
    core.max_priority = state.pop("_max_priority")
    core.rank_snapshot = state.pop("_rank_snapshot")
    core.samples_since_refresh = state.pop("_samples_since_refresh")
    core.size_at_refresh = state.pop("_size_at_refresh")
    core.samples_since_update = state.pop("_samples_since_update")
    return core


class PrioritizedReplayBuffer(_PrioritizedBufferBase):
    """
    Prioritized experience replay (Schaul et al., 2015) as an SB3 ``ReplayBuffer``.

    Every (position, env) slot is a leaf of one sum tree (with a min tree beside it), so a sample's env
    comes from its priority. A batch of ``B`` draws is stratified: the total priority is cut into ``B``
    equal segments and one value is drawn in each; all values then descend the tree together, one numpy
    operation per level. New transitions enter with the largest raw priority seen so far (at least 1).
    :meth:`update_priorities` takes ``|TD error|`` and stores ``p = |delta| + eps``.

    Prioritization (``prioritization=``):

    - ``"proportional"`` (default ``alpha=0.6``, ``beta=0.4``): ``P(i) = p_i^alpha / sum_k p_k^alpha``,
      exact.
    - ``"rank"`` (default ``alpha=0.7``, ``beta=0.5``): ``P(i) ∝ rank(i)^-alpha``, rank 1 = largest
      ``p``. Exact right after :meth:`refresh_ranks`, which sorts all priorities and runs every
      ``rank_refresh_interval`` samples and whenever the buffer has doubled since the last sort. In
      between, an updated priority gets its rank within the last sorted snapshot (binary search) and a new
      transition gets rank 1; other slots keep their snapshot rank. So ranks are approximate between
      sorts (Schaul et al. also re-sort only periodically), while sampling given the ranks is exact.
      Rank-based PER is less sensitive to outliers and to the scale of the TD errors.

    Importance weights are ``w_i = (N · P(i))^-beta / max_j (N · P(j))^-beta`` with the max taken over
    all stored transitions (via the min tree), so ``w <= 1``. ``beta`` is annealed from ``beta`` to 1 by
    :meth:`anneal_beta` (the PER algorithms call it with their training progress).

    Other options:

    - ``n_steps``/``gamma``: n-step returns in the buffer (SB3 disables its own for custom buffer
      classes). ``rewards`` is the discounted sum of up to ``n_steps`` rewards, cut at the episode's end
      (termination or timeout) and at the newest step; ``next_observations`` is the observation after the
      last step summed; ``dones`` is true termination; ``discounts = gamma ** k`` for the ``k`` steps
      summed, which SB3's (>= 2.7) DQN/SAC/TD3 ``train()`` use in place of ``gamma``. Same semantics as SB3's
      ``NStepReplayBuffer``. ``gamma`` must match the algorithm's.
    - ``replacement=False``: a batch holds distinct transitions (for small buffers or large batches where
      repeats waste compute). Duplicates of a stratified draw are redrawn from the remaining priority mass
      until the batch is distinct; weights still use the single-draw ``P(i)``.
    - ``recent_data_ratio``/``recent_data_steps``: that share of each batch is drawn uniformly from the
      ``recent_data_steps`` newest steps of all envs (as ALF's ``recent_data_ratio``), to keep learning
      from fresh on-policy-ish data. Weights use the mixture probability.
    - :meth:`sample_sequences`: contiguous sequences (``batch_length``) for recurrent or auxiliary losses,
      kept within one episode unless ``allow_episode_crossing=True``.
    - :meth:`sample_reward_sequences`: sequences ending in a non-zero reward with a set probability
      (UNREAL's reward prediction task; btgym).

    Randomness comes from one ``np.random.Generator`` seeded by ``seed=`` (or, when ``None``, from numpy's
    global RNG, which SB3 seeds from the algorithm's ``seed``). :meth:`save`/:meth:`load` keep data,
    priorities, levels and RNG state in an ``.npz`` file; SB3's pickle-based ``save_replay_buffer`` also
    works.

    Levels: each transition's level id (``infos[i]["level"]``, set on every step by
    :class:`~plr_gym.PrioritizedLevelReplay`; ``-1`` when an env reports none) is kept in :attr:`levels`,
    shape ``(buffer_size, n_envs)``, and returned in each batch's ``levels`` field.
    :class:`~plr_gym.OffPolicyPLRCallback` uses it to check which episode a slot holds.

    :param buffer_size: maximum number of transitions (split evenly over envs, as in SB3)
    :param observation_space: observation space
    :param action_space: action space
    :param device: PyTorch device of the sampled tensors
    :param n_envs: number of parallel environments
    :param optimize_memory_usage: must be ``False`` (not supported)
    :param handle_timeout_termination: treat ``TimeLimit.truncated`` ends as non-terminal (bootstrap)
    :param prioritization: ``"proportional"`` or ``"rank"``
    :param alpha: priority exponent (0 = uniform); default 0.6 (proportional) or 0.7 (rank)
    :param beta: initial importance-sampling exponent, annealed to 1; default 0.4 or 0.5
    :param eps: added to ``|TD error|`` so no transition gets probability 0
    :param n_steps: steps summed per target (1 = one-step transitions)
    :param gamma: discount for n-step sums
    :param replacement: allow one transition several times in a batch
    :param recent_data_ratio: share of each batch drawn uniformly from the newest steps
    :param recent_data_steps: number of newest steps (per env) for that share
    :param rank_refresh_interval: rank mode: samples between full re-sorts
    :param seed: seed of the buffer's random generator

    Example:
        >>> import numpy as np
        >>> from gymnasium import spaces
        >>> buffer = PrioritizedReplayBuffer(
        ...     100, spaces.Box(-1, 1, (3,)), spaces.Discrete(2), device="cpu", n_envs=2, seed=0
        ... )
        >>> for _ in range(10):
        ...     buffer.add(np.zeros((2, 3)), np.zeros((2, 3)), np.zeros(2), np.ones(2), np.zeros(2), [{}, {}])
        >>> batch = buffer.sample(4)
        >>> tuple(batch.weights.shape), batch.indices.shape
        ((4, 1), (4,))
        >>> buffer.update_priorities(batch.indices, np.array([0.5, 2.0, 0.1, 3.0]))
        >>> buffer.max_priority
        3.000001
    """

    observations: NDArray[Any]
    next_observations: NDArray[Any]

    def sample(self, batch_size: int, env: VecNormalize | None = None) -> PrioritizedReplayBufferSamples:  # type: ignore[override]
        """
        Sample a prioritized batch; each sample's env comes from the tree, not from a random draw.

        :param batch_size: number of transitions
        :param env: VecNormalize to normalise observations and rewards with, as in SB3
        :return: SB3's ``ReplayBufferSamples`` fields plus ``discounts``, ``weights``, ``indices``
        """
        samples = super().sample(batch_size, env)
        assert isinstance(samples, PrioritizedReplayBufferSamples)
        return samples


class PrioritizedDictReplayBuffer(_PrioritizedBufferBase, DictReplayBuffer):
    """
    :class:`PrioritizedReplayBuffer` for ``Dict`` observation spaces (SB3's ``DictReplayBuffer``),
    with the same arguments, options and sampling; observations are dicts of arrays.

    Example:
        >>> import numpy as np
        >>> from gymnasium import spaces
        >>> space = spaces.Dict({"pos": spaces.Box(-1, 1, (2,)), "goal": spaces.Discrete(3)})
        >>> buffer = PrioritizedDictReplayBuffer(50, space, spaces.Discrete(2), device="cpu", seed=0)
        >>> obs = {"pos": np.zeros((1, 2)), "goal": np.array([1])}
        >>> for _ in range(5):
        ...     buffer.add(obs, obs, np.zeros(1), np.ones(1), np.zeros(1), [{}])
        >>> batch = buffer.sample(3)
        >>> sorted(batch.observations), tuple(batch.observations["pos"].shape)
        (['goal', 'pos'], (3, 2))
    """

    observations: dict[str, NDArray[Any]]
    next_observations: dict[str, NDArray[Any]]
    observation_space: spaces.Dict
    obs_shape: dict[str, tuple[int, ...]]

    def __init__(
        self,
        buffer_size: int,
        observation_space: spaces.Dict,
        action_space: spaces.Space[Any],
        device: th.device | str = "auto",
        n_envs: int = 1,
        optimize_memory_usage: bool = False,
        handle_timeout_termination: bool = True,
        **kwargs: Any,
    ) -> None:
        if not isinstance(observation_space, spaces.Dict):
            raise TypeError(
                f"PrioritizedDictReplayBuffer needs a gymnasium.spaces.Dict observation space, got "
                f"{type(observation_space).__name__}; use PrioritizedReplayBuffer instead"
            )
        super().__init__(
            buffer_size,
            observation_space,
            action_space,
            device,
            n_envs,
            optimize_memory_usage,
            handle_timeout_termination,
            **kwargs,
        )

    def sample(  # type: ignore[override]
        self, batch_size: int, env: VecNormalize | None = None
    ) -> PrioritizedDictReplayBufferSamples:
        """
        Sample a prioritized batch of dict observations.

        :param batch_size: number of transitions
        :param env: VecNormalize to normalise observations and rewards with, as in SB3
        :return: SB3's ``DictReplayBufferSamples`` fields plus ``discounts``, ``weights``, ``indices``
        """
        samples = super().sample(batch_size, env)
        assert isinstance(samples, PrioritizedDictReplayBufferSamples)
        return samples

    def _gather_obs(self, slots: NDArray[np.int64], next_obs: bool, env: VecNormalize | None) -> Any:
        source = self.next_observations if next_obs else self.observations
        data = {
            key: arr.reshape(self.capacity, *self.obs_shape[key]).take(slots, axis=0)
            for key, arr in source.items()
        }
        normalized = self._normalize_obs(data, env)
        assert isinstance(normalized, dict)
        # Fresh arrays (VecNormalize returns new ones): the tensors may share their memory.
        return {key: self._own_tensor(np.asarray(value)) for key, value in normalized.items()}

    def _make_samples(
        self, **fields: Any
    ) -> PrioritizedReplayBufferSamples | PrioritizedDictReplayBufferSamples:
        return PrioritizedDictReplayBufferSamples(**fields)

    def _obs_arrays(self) -> dict[str, NDArray[Any]]:
        arrays = {f"observations.{key}": value for key, value in self.observations.items()}
        arrays.update({f"next_observations.{key}": value for key, value in self.next_observations.items()})
        return arrays
