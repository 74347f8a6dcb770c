"""Prioritized experience replay (Schaul et al., 2015) as drop-in Stable-Baselines3 replay buffers.

The buffers here adapt SB3's storage (``ReplayBuffer``/``DictReplayBuffer`` arrays, tensors, VecNormalize)
to the torch-free cores: :class:`~plr_gym.replay.priorities.ReplayPriorities` keeps the priorities and
draws the slots, :mod:`plr_gym.replay.sequences` picks the slots of sequences. What remains is storing
transitions, gathering a batch's data (n-step returns included) and checkpoints, one module each:

- this module: the public buffers, :class:`PrioritizedReplayBuffer` (array observations) and
  :class:`PrioritizedDictReplayBuffer` (``Dict`` observations), and the batches they return;
- :mod:`plr_gym.replay.buffer_base`: their shared body (construction, settings, adding, priorities,
  drawing slots, gathering a batch, n-step returns and sequences);
- :mod:`plr_gym.replay.buffer_checks`: the checks of a step before it is stored;
- :mod:`plr_gym.replay.buffer_files`: ``save``/``load`` (``.npz``) and pickles of older versions.

Every name this module defined before that split is still importable from it.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import torch as th
from gymnasium import spaces
from numpy.typing import NDArray
from stable_baselines3.common.buffers import DictReplayBuffer
from stable_baselines3.common.type_aliases import TensorDict
from stable_baselines3.common.vec_env import VecNormalize

from plr_gym.replay.buffer_base import _PrioritizedBufferBase as _PrioritizedBufferBase  # re-exported
from plr_gym.replay.buffer_checks import _check_obs_array as _check_obs_array  # re-exported
from plr_gym.replay.buffer_checks import _real_array as _real_array  # re-exported
from plr_gym.replay.buffer_checks import timeout_flags as timeout_flags  # re-exported
from plr_gym.replay.buffer_files import _CORE_SETTINGS as _CORE_SETTINGS  # re-exported
from plr_gym.replay.buffer_files import _FORMAT_VERSION as _FORMAT_VERSION  # re-exported
from plr_gym.replay.buffer_files import _core_from_old_state as _core_from_old_state  # re-exported
from plr_gym.replay.priorities import PRIORITIZATIONS as PRIORITIZATIONS  # re-exported
from plr_gym.replay.sequences import SequenceSamples

__all__ = [
    "PrioritizedDictReplayBuffer",
    "PrioritizedDictReplayBufferSamples",
    "PrioritizedReplayBuffer",
    "PrioritizedReplayBufferSamples",
    "SequenceSamples",
]


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

    def _make_samples(
        self, **fields: Any
    ) -> PrioritizedReplayBufferSamples | PrioritizedDictReplayBufferSamples:
        return PrioritizedReplayBufferSamples(**fields)


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
