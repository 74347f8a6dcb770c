"""The prioritized buffer's body, shared by the array and ``Dict`` observation buffers of
:mod:`plr_gym.replay.buffers`: construction, the priority core's settings, adding transitions,
updating priorities, drawing slots and gathering a batch's data (n-step returns and sequences included).

:class:`_PrioritizedBufferBase` is SB3's storage (``ReplayBuffer``) with the priorities and the choice
of slots delegated to :class:`~plr_gym.replay.priorities.ReplayPriorities`, the step checks of
:class:`~plr_gym.replay.buffer_checks.StepChecks` and the files of
:class:`~plr_gym.replay.buffer_files.BufferFiles`.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

import numpy as np
import torch as th
from gymnasium import spaces
from numpy.typing import ArrayLike, NDArray
from stable_baselines3.common.buffers import DictReplayBuffer
from stable_baselines3.common.vec_env import VecNormalize

from plr_gym._sizes import allocating
from plr_gym.replay.buffer_checks import StepChecks
from plr_gym.replay.buffer_files import BufferFiles
from plr_gym.replay.priorities import ReplayPriorities, check_fraction, is_int
from plr_gym.replay.sequences import RewardRebalancedEnds, SequenceSamples, check_length, sequence_slots
from plr_gym.replay.sum_tree import SumTree

if TYPE_CHECKING:
    from plr_gym.replay.buffers import PrioritizedDictReplayBufferSamples, PrioritizedReplayBufferSamples

__all__: list[str] = []  # private: the public buffers are plr_gym.replay.buffers'


class _PrioritizedBufferBase(StepChecks, BufferFiles):
    """Prioritized sampling shared by the array and ``Dict`` observation buffers: SB3's storage, with
    the priorities and the choice of slots delegated to :attr:`replay_priorities`, the checks of a step
    to :class:`~plr_gym.replay.buffer_checks.StepChecks` and ``save``/``load`` and old pickles to
    :class:`~plr_gym.replay.buffer_files.BufferFiles`. The concrete buffers
    (:mod:`plr_gym.replay.buffers`) say which record a batch is (:meth:`_make_samples`) and how
    observations are gathered."""

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
        self._check_storage_arguments(
            buffer_size, observation_space, action_space, n_envs, optimize_memory_usage, n_steps, gamma
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

    def _check_storage_arguments(
        self,
        buffer_size: Any,
        observation_space: Any,
        action_space: Any,
        n_envs: Any,
        optimize_memory_usage: bool,
        n_steps: Any,
        gamma: Any,
    ) -> None:
        """Refuse the arguments SB3's ``ReplayBuffer`` would accept wrongly or fail on late (the priority
        settings are :class:`ReplayPriorities`' to check)."""
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
        _check_array_spaces(type(self).__name__, observation_space)

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
        """The batch record of the concrete buffer (:mod:`plr_gym.replay.buffers` defines them)."""
        raise NotImplementedError

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


#: The observation spaces SB3's buffers store as arrays (a Dict buffer: a flat Dict of these).
_ARRAY_SPACES = (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)


def _check_array_spaces(owner: str, observation_space: spaces.Space[Any]) -> None:
    """Refuse, naming ``observation_space``, a space SB3's storage would fail on late or unclearly (a
    nested Dict: "'str' object cannot be interpreted as an integer"; a Tuple: NotImplementedError)."""
    accepted = "Box, Discrete, MultiDiscrete or MultiBinary"
    if isinstance(observation_space, spaces.Dict):
        for key, sub in observation_space.spaces.items():
            if not isinstance(sub, _ARRAY_SPACES):
                raise TypeError(
                    f"observation_space: {owner} stores a flat Dict of {accepted} spaces, got a "
                    f"{type(sub).__name__} under {key!r}; flatten the nested space (e.g. gymnasium's "
                    "FlattenObservation, or a Dict whose values are arrays)"
                )
    elif not isinstance(observation_space, _ARRAY_SPACES):
        raise TypeError(
            f"observation_space must be a {accepted} space (a flat Dict of them for "
            f"PrioritizedDictReplayBuffer), got {type(observation_space).__name__}"
        )
