"""Sequence sampling and reward-rebalanced sequence sampling over a ring of replay slots.

Which slots make up each sequence, and where the padding lies, is computed here with numpy only (no
PyTorch, no Stable-Baselines3); :class:`~plr_gym.replay.PrioritizedReplayBuffer` gathers the data of
those slots into a :class:`SequenceSamples`. The layout is that of SB3's replay buffers: slot
``row * n_envs + env`` in a ring of ``n_rows`` rows, ``pos`` the row written next.

- :func:`sequence_slots`: ``length`` consecutive steps of one env from each anchor slot, forward
  (:meth:`~plr_gym.replay.PrioritizedReplayBuffer.sample_sequences`) or ending at the anchor
  (:meth:`~plr_gym.replay.PrioritizedReplayBuffer.sample_reward_sequences`), cut at episode ends and
  at the newest data.
- :class:`RewardRebalancedEnds`: draws anchor slots whose reward is non-zero with a set probability
  (UNREAL's reward prediction task).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

from plr_gym.replay.sum_tree import SumTree

if TYPE_CHECKING:
    import torch as th
    from stable_baselines3.common.type_aliases import TensorDict

__all__ = ["RewardRebalancedEnds", "SequenceSamples", "sequence_slots"]


class SequenceSamples(NamedTuple):
    """
    A batch of contiguous sequences of one env's steps, all fields shaped ``(batch, length, ...)``.

    Steps outside the sampled episode (past its end, before its start, or past the newest data) are
    padding: they repeat the nearest step of the episode, with ``mask``, ``rewards``, ``dones`` and
    ``timeouts`` set to 0, so no data from another episode appears in a sequence.

    :param observations: shape ``(batch, length, *obs_shape)`` (a dict of such for ``Dict`` spaces)
    :param actions: shape ``(batch, length, action_dim)``
    :param next_observations: shape ``(batch, length, *obs_shape)``
    :param rewards: one-step rewards, shape ``(batch, length)``
    :param dones: 1 where the episode truly terminated at that step, shape ``(batch, length)``
    :param timeouts: 1 where the episode was truncated at that step, shape ``(batch, length)``
    :param mask: 1 for real steps, 0 for padding, shape ``(batch, length)``
    :param weights: importance-sampling weights of the anchor step, shape ``(batch, 1)``
    :param indices: flat slot index of each anchor step, shape ``(batch,)``

    Example:
        >>> SequenceSamples._fields[-3:]
        ('mask', 'weights', 'indices')
    """

    observations: th.Tensor | TensorDict
    actions: th.Tensor
    next_observations: th.Tensor | TensorDict
    rewards: th.Tensor
    dones: th.Tensor
    timeouts: th.Tensor
    mask: th.Tensor
    weights: th.Tensor
    indices: NDArray[np.int64]


def check_length(batch_length: object) -> int:
    """``batch_length`` as an int >= 1, else ``ValueError`` naming it."""
    if isinstance(batch_length, bool) or not isinstance(batch_length, (int, np.integer)) or batch_length < 1:
        raise ValueError(f"batch_length must be an int >= 1, got {batch_length!r}")
    return int(batch_length)


def sequence_slots(
    anchors: NDArray[np.int64],
    length: int,
    *,
    n_rows: int,
    n_envs: int,
    pos: int,
    full: bool,
    dones: NDArray[np.floating[Any]] | None,
    anchor_at_end: bool = False,
) -> tuple[NDArray[np.int64], NDArray[np.float32]]:
    """
    Slots of ``length``-step sequences of one env through each anchor slot, and their padding mask.

    A sequence runs forward from its anchor (or, with ``anchor_at_end``, ends at it). It breaks where
    the next row does not continue the same stream: after the newest row (``pos - 1``), after the last
    row written before the ring first wrapped, and, when ``dones`` is given, after a step whose episode
    ended. Steps beyond a break are padding: they repeat the nearest valid step and have mask 0.

    :param anchors: flat anchor slots, shape ``(batch,)``
    :param length: steps per sequence
    :param n_rows: rows of the ring
    :param n_envs: slots per row
    :param pos: row written next
    :param full: whether the ring has wrapped
    :param dones: flat episode-end flags (terminated or truncated) per slot, shape ``(n_rows * n_envs,)``;
        ``None`` lets sequences run on into the env's next episode
    :param anchor_at_end: the anchor is the last step instead of the first
    :return: slots, shape ``(batch, length)``, and mask (1 real step, 0 padding), float32, same shape

    Example:
        >>> done = np.zeros(8); done[2] = 1  # one env: the episode ends at row 2
        >>> slots, mask = sequence_slots(np.array([1, 5]), 3, n_rows=8, n_envs=1, pos=7, full=False,
        ...                              dones=done)
        >>> slots.tolist(), mask.tolist()
        ([[1, 2, 2], [5, 6, 6]], [[1.0, 1.0, 0.0], [1.0, 1.0, 0.0]])
    """
    rows, envs = np.divmod(anchors, n_envs)
    offsets = np.arange(length) - (length - 1 if anchor_at_end else 0)
    t = (rows[:, None] + offsets) % n_rows
    slots = t * n_envs + envs[:, None]  # (batch, length)
    # breaks[:, j]: step j + 1 does not follow step j in the same stream (or episode).
    last_rows = t[:, :-1]
    breaks = last_rows == (pos - 1) % n_rows
    if not full:
        breaks |= last_rows == n_rows - 1
    if dones is not None:
        breaks |= dones[slots[:, :-1]] > 0
    cut = np.zeros((anchors.size, length), dtype=bool)
    if anchor_at_end:  # step j is valid when no break lies in [j, length - 1)
        cut[:, :-1] = np.cumsum(breaks[:, ::-1], axis=1)[:, ::-1] > 0
        first_valid = cut.sum(axis=1)  # cut is True on a prefix
        source_col = np.maximum(np.arange(length), first_valid[:, None])
    else:  # step j is valid when no break lies in [0, j)
        cut[:, 1:] = np.cumsum(breaks, axis=1) > 0
        last_valid = (~cut).sum(axis=1) - 1
        source_col = np.minimum(np.arange(length), last_valid[:, None])
    slots = np.take_along_axis(slots, source_col, axis=1)
    return slots.astype(np.int64), (~cut).astype(np.float32)


class RewardRebalancedEnds:
    """
    Draws slots so that a set share of them hold a non-zero reward (UNREAL's reward prediction; btgym).

    Two sum trees over the slots, one marking non-zero rewards and one zero rewards (empty slots in
    neither), so one draw within either group is uniform and costs ``O(log n)``. Build it once from the
    stored rewards (:meth:`build`) and keep it current with :meth:`add` as rows are written.

    :param capacity: number of slots

    Example:
        >>> ends = RewardRebalancedEnds(6)
        >>> ends.build(np.array([0.0, 1.0, 0.0, 0.0, 0.0, 0.0]), stored=4)
        >>> ends.draw(5, nonzero_reward_prob=1.0, rng=np.random.default_rng(0)).tolist()
        [1, 1, 1, 1, 1]
    """

    def __init__(self, capacity: int) -> None:
        self.rewarding = SumTree(capacity)
        self.plain = SumTree(capacity)
        self.capacity = self.rewarding.capacity

    def build(self, rewards: NDArray[np.floating[Any]], stored: int) -> None:
        """
        Mark every slot from the rewards.

        :param rewards: flat reward of each slot, shape ``(capacity,)``
        :param stored: slots ``[0, stored)`` hold data; the others belong to neither group
        """
        nonzero = np.zeros(self.capacity)
        nonzero[:stored] = rewards[:stored] != 0
        zero = np.zeros(self.capacity)
        zero[:stored] = 1.0 - nonzero[:stored]
        self.rewarding.build(nonzero)
        self.plain.build(zero)

    def add(self, slots: NDArray[np.int64], rewards: NDArray[np.floating[Any]]) -> None:
        """Mark freshly written slots by their rewards (same shape as ``slots``)."""
        nonzero = (np.asarray(rewards) != 0).astype(np.float64)
        self.rewarding.update(slots, nonzero)
        self.plain.update(slots, 1.0 - nonzero)

    def draw(
        self, batch_size: int, nonzero_reward_prob: float, rng: np.random.Generator
    ) -> NDArray[np.int64]:
        """
        Draw ``batch_size`` slots: ``Binomial(batch_size, nonzero_reward_prob)`` of them uniformly among the
        non-zero-reward slots (first), the rest among the zero-reward ones; all from one group when the
        other is empty.

        :return: flat slots, shape ``(batch_size,)``
        """
        n_rewarding = int(rng.binomial(batch_size, nonzero_reward_prob))
        if self.rewarding.total == 0:
            n_rewarding = 0
        elif self.plain.total == 0:
            n_rewarding = batch_size
        ends = [
            tree.find(rng.random(count) * tree.total)
            for tree, count in ((self.rewarding, n_rewarding), (self.plain, batch_size - n_rewarding))
            if count > 0
        ]
        return np.concatenate(ends).astype(np.int64)
