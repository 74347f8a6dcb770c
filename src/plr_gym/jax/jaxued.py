"""A drop-in for JaxUED's ``LevelSampler`` (``jaxued.level_sampler``), on :class:`plr_gym.jax.LevelBuffer`.

Change one import and a JaxUED script (``maze_plr.py``: Robust PLR and ACCEL) runs on plr_gym's buffer::

    # from jaxued.level_sampler import LevelSampler
    from plr_gym.jax.jaxued import LevelSampler

The constructor takes JaxUED's names (``capacity``, ``replay_prob``, ``staleness_coeff``,
``minimum_fill_ratio``, ``prioritization``, ``prioritization_params``, ``duplicate_check``) and the
sampler state is JaxUED's dict (``levels``, ``scores``, ``timestamps``, ``size``, ``episode_count`` and,
with a placeholder extra, ``levels_extra``); the methods are JaxUED's, with its signatures and return
shapes. What differs from JaxUED 0.0.1, each selectable:

- ``prioritization="topk"`` is uniform over the ``k`` best levels, as Robust PLR defines it (JaxUED 0.0.1
  took a softmax of their scores, and fails on current JAX); ``topk_softmax=True`` gives the old weights.
- The clock (``episode_count``, the ``c`` of staleness ``c − C_i``) is JaxUED 0.0.1's by default
  (``clock="jaxued"``): it ticks on every insert, a rejected one and a duplicate re-insert (whose timestamp
  it refreshes) included, and per replayed level, so that the one-line import change keeps JaxUED's
  curriculum. ``clock="plr_gym"`` is plr_gym's :class:`~plr_gym.LevelBuffer` clock (Robust PLR's): it ticks
  once per stored level and per replayed level only.
- An empty buffer is never replayed: :meth:`LevelSampler.sample_replay_decision` is False while the
  buffer is empty, and a replay from an empty buffer returns index ``-1`` (JaxUED 0.0.1 computes NaN
  weights and may hand out the placeholder level).
- A non-finite score is never stored: the insert returns ``-1`` (JaxUED stores nothing either, but its
  clock ticks), an update leaves the level's score as it was.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from plr_gym.jax.buffer import BufferState, LevelBuffer

__all__ = ["LevelSampler"]

Sampler = dict[str, Any]
_PRIORITIZATIONS = ("rank", "topk")


class LevelSampler:
    """JaxUED's ``LevelSampler`` interface on :class:`plr_gym.jax.LevelBuffer` (see the module docstring).

    :param capacity: the most levels stored.
    :param replay_prob: probability of a replay step once the buffer is ``minimum_fill_ratio`` full.
    :param staleness_coeff: weight of the staleness distribution.
    :param minimum_fill_ratio: no replay below this fill ratio (nor from an empty buffer).
    :param prioritization: ``"rank"`` (``params["temperature"]``, default 1.0) or ``"topk"``
        (``params["k"]``, default 1; uniform over the ``k`` best).
    :param prioritization_params: as JaxUED's.
    :param duplicate_check: a level already stored gets its score updated instead of a copy.
    :param topk_softmax: ``True``: JaxUED 0.0.1's softmax over the top ``k`` scores.
    :param clock: ``"jaxued"`` (default: JaxUED 0.0.1's clock) or ``"plr_gym"`` (plr_gym's
        :class:`~plr_gym.LevelBuffer` clock; see the module docstring).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from plr_gym.jax.jaxued import LevelSampler
        >>> level_sampler = LevelSampler(4, prioritization="topk", prioritization_params={"k": 2})
        >>> sampler = level_sampler.initialize(jnp.zeros(3, int), {"max_return": -jnp.inf})
        >>> levels = jnp.arange(12).reshape(4, 3)
        >>> sampler, idx = level_sampler.insert_batch(sampler, levels, jnp.array([2.0, 1.0, 0.5, 0.1]),
        ...                                           {"max_return": jnp.zeros(4)})
        >>> sorted(sampler), int(sampler["size"]), int(sampler["episode_count"])
        (['episode_count', 'levels', 'levels_extra', 'scores', 'size', 'timestamps'], 4, 4)
        >>> level_sampler.score_weights(sampler).tolist()         # uniform over the top 2
        [0.5, 0.5, 0.0, 0.0]
    """

    def __init__(
        self,
        capacity: int,
        replay_prob: float = 0.95,
        staleness_coeff: float = 0.5,
        minimum_fill_ratio: float = 1.0,
        prioritization: str = "rank",
        prioritization_params: dict[str, Any] | None = None,
        duplicate_check: bool = False,
        *,
        topk_softmax: bool = False,
        clock: str = "jaxued",
    ) -> None:
        if prioritization not in _PRIORITIZATIONS:
            raise ValueError(f"prioritization={prioritization!r} is not supported; choose rank or topk")
        if prioritization_params is None:
            prioritization_params = {"temperature": 1.0} if prioritization == "rank" else {"k": 1}
        self.capacity = capacity
        self.replay_prob = replay_prob
        self.staleness_coeff = staleness_coeff
        self.minimum_fill_ratio = minimum_fill_ratio
        self.prioritization = prioritization
        self.prioritization_params = dict(prioritization_params)
        self.duplicate_check = duplicate_check
        self.buffer = self._buffer(prioritization, self.prioritization_params, topk_softmax, clock)

    def _buffer(
        self,
        prioritization: str,
        params: dict[str, Any],
        topk_softmax: bool = False,
        clock: str | None = None,
    ) -> LevelBuffer:
        # as JaxUED: "rank" reads params["temperature"], "topk" params["k"] (scripts pass both)
        if prioritization == "rank":
            transform: dict[str, Any] = {
                "score_transform": "rank",
                "temperature": params.get("temperature", 1.0),
            }
        elif prioritization == "topk":
            transform = {"score_transform": "topk", "topk": params.get("k", 1)}
        else:
            raise ValueError(f"prioritization={prioritization!r} is not supported; choose rank or topk")
        if hasattr(self, "buffer"):  # another prioritization for level_weights/score_weights
            return dataclasses.replace(self.buffer, **{"temperature": 1.0, "topk": 1, **transform})
        return LevelBuffer(
            capacity=self.capacity,
            replay_prob=self.replay_prob,
            staleness_coef=self.staleness_coeff,
            min_fill_ratio=self.minimum_fill_ratio,
            duplicate_check=self.duplicate_check,
            topk_softmax=topk_softmax,
            clock=clock or "jaxued",
            **transform,
        )

    # ------------------------------------------------------------------ the dict state
    @staticmethod
    def _state(sampler: Sampler) -> BufferState:
        return BufferState(
            levels=sampler["levels"],
            scores=sampler["scores"],
            timestamps=sampler["timestamps"],
            size=jnp.asarray(sampler["size"]),
            count=jnp.asarray(sampler["episode_count"]),
            extras=sampler.get("levels_extra", {}),
            num_rejected=jnp.zeros((), jnp.asarray(sampler["size"]).dtype),
        )

    @staticmethod
    def _dict(state: BufferState, like: Sampler) -> Sampler:
        out = {
            "levels": state.levels,
            "scores": state.scores,
            "timestamps": state.timestamps,
            "size": state.size,
            "episode_count": state.count,
        }
        if "levels_extra" in like:
            out["levels_extra"] = state.extras
        return out

    def initialize(self, pholder_level: Any, pholder_level_extra: dict[str, Any] | None = None) -> Sampler:
        """An empty sampler dict for levels shaped like ``pholder_level`` (extras like
        ``pholder_level_extra``)."""
        state = self.buffer.init(pholder_level, pholder_level_extra)
        like = {} if pholder_level_extra is None else {"levels_extra": None}
        return self._dict(state, like)

    # ------------------------------------------------------------------ replay
    def sample_replay_decision(self, sampler: Sampler, rng: Any) -> Any:
        """True for a replay step: the buffer is at least ``minimum_fill_ratio`` full (and not empty), with
        probability ``replay_prob``."""
        return self.buffer.sample_replay_decision(self._state(sampler), rng)

    def sample_replay_level(self, sampler: Sampler, rng: Any) -> tuple[Sampler, tuple[Any, Any]]:
        """``(sampler, (index, level))``: a level drawn from :meth:`level_weights`, marked as replayed."""
        state, idx, level = self.buffer.sample_replay_level(self._state(sampler), rng)
        return self._dict(state, sampler), (idx, level)

    def sample_replay_levels(self, sampler: Sampler, rng: Any, num: int) -> tuple[Sampler, tuple[Any, Any]]:
        """``num`` consecutive replays: ``(sampler, (indices, levels))``."""
        state, idx, levels = self.buffer.sample_replay_levels(self._state(sampler), rng, num)
        return self._dict(state, sampler), (idx, levels)

    # ------------------------------------------------------------------ insert / update
    def insert(
        self, sampler: Sampler, level: Any, score: Any, level_extra: dict[str, Any] | None = None
    ) -> tuple[Sampler, Any]:
        """Insert one level; ``(sampler, index)``, index -1 if it was not stored."""
        state, idx = self.buffer.insert(self._state(sampler), level, score, level_extra)
        return self._dict(state, sampler), idx

    def insert_batch(
        self, sampler: Sampler, levels: Any, scores: Any, level_extras: dict[str, Any] | None = None
    ) -> tuple[Sampler, Any]:
        """Insert a batch of levels (leading axis), in order; ``(sampler, indices)``."""
        state, idx = self.buffer.insert_batch(self._state(sampler), levels, scores, level_extras)
        return self._dict(state, sampler), idx

    def find(self, sampler: Sampler, level: Any) -> Any:
        """Index of ``level`` in the buffer, or -1."""
        return self.buffer.find(self._state(sampler), level)

    def get_levels(self, sampler: Sampler, level_idx: Any) -> Any:
        """The level(s) at ``level_idx``."""
        return jax.tree.map(lambda x: x[level_idx], sampler["levels"])

    def get_levels_extra(self, sampler: Sampler, level_idx: Any) -> Any:
        """The extras of the level(s) at ``level_idx``."""
        return jax.tree.map(lambda x: x[level_idx], sampler["levels_extra"])

    def update(
        self, sampler: Sampler, idx: Any, score: Any, level_extra: dict[str, Any] | None = None
    ) -> Sampler:
        """Set the score (and extras) of the level at ``idx``."""
        return self._dict(self.buffer.update(self._state(sampler), idx, score, level_extra), sampler)

    def update_batch(
        self, sampler: Sampler, level_inds: Any, scores: Any, level_extras: dict[str, Any] | None = None
    ) -> Sampler:
        """Set the scores (and extras) of the levels at ``level_inds``, in order."""
        state = self.buffer.update_batch(self._state(sampler), level_inds, scores, level_extras)
        return self._dict(state, sampler)

    # ------------------------------------------------------------------ weights
    def _weights_buffer(self, prioritization: str | None, params: dict[str, Any] | None) -> LevelBuffer:
        if prioritization is None and params is None:
            return self.buffer
        prioritization = prioritization or self.prioritization
        if params is None:
            params = self.prioritization_params if prioritization == self.prioritization else {}
        return self._buffer(prioritization, params)

    def level_weights(
        self,
        sampler: Sampler,
        prioritization: str | None = None,
        prioritization_params: dict[str, Any] | None = None,
    ) -> Any:
        """The replay distribution over the ``capacity`` slots (0 beyond ``size``)."""
        return self._weights_buffer(prioritization, prioritization_params).weights(self._state(sampler))

    def score_weights(
        self,
        sampler: Sampler,
        prioritization: str | None = None,
        prioritization_params: dict[str, Any] | None = None,
    ) -> Any:
        """The score part of :meth:`level_weights`."""
        return self._weights_buffer(prioritization, prioritization_params).score_weights(self._state(sampler))

    def staleness_weights(self, sampler: Sampler) -> Any:
        """The staleness part of :meth:`level_weights` (uniform when every staleness is 0)."""
        return self.buffer.staleness_weights(self._state(sampler))

    def freshness_weights(self, sampler: Sampler) -> Any:
        """Weights ``∝ C_i − min_j C_j`` over the stored levels (uniform when all are equal; zeros when
        the buffer is empty)."""
        mask = jnp.arange(self.capacity) < sampler["size"]
        stamps = jnp.asarray(sampler["timestamps"])
        earliest = jnp.where(mask, stamps, jnp.iinfo(stamps.dtype).max).min()
        w = jnp.where(mask, stamps - earliest, 0).astype(sampler["scores"].dtype)
        total = w.sum()
        uniform = mask / jnp.maximum(jnp.asarray(sampler["size"]), 1)
        return jnp.where(total > 0, w / jnp.where(total > 0, total, 1), uniform)

    def flush(self, sampler: Sampler) -> Sampler:
        """The sampler emptied (the clock keeps going)."""
        return self._dict(self.buffer.flush(self._state(sampler)), sampler)
