"""Sampling: scores and staleness in, the replay distribution and its ``O(log N)`` draws out.

The replay distribution over the seen levels (unseen levels have weight 0)::

    P_replay = (1 − λ)·[(1 − staleness_coef) · P_S + staleness_coef · P_C] + λ·U
    P_S(i) = h(S_i)^(1/β) / Σ_j h(S_j)^(1/β)      (h by ``score_transform``)
    P_C(i) = g(c − C_i) / Σ_j g(c − C_j)           (g by ``staleness_transform``)

with ``λ = uniform_mass`` and ``U`` uniform over the seen levels. :meth:`_Sampling._replay_weights`
computes it densely (``sample_weights``); a draw picks one component (``U`` with probability ``λ``, then
``P_C`` with probability ``staleness_coef``, else ``P_S``) and draws from that component's structure:

- an ordered transform (``rank``, ``max``, ``eps_greedy``...): :class:`~plr_gym._structures.OrderedKeys`
  over the keys ``−S_i`` (scores) or ``C_i`` (staleness);
- an exponential one (``power``, ``softmax``) of the scores: a :class:`~plr_gym._structures.SumTree` of
  ``exp((h(S_i) − shift)/β)``, re-anchored when the weights leave float range;
- ``power`` with ``staleness_temperature=1`` over staleness: a
  :class:`~plr_gym._structures.LinearStalenessTree` (``Σ (c − C_i)`` without touching every leaf);
- any other (``power`` with another temperature, ``softmax`` over staleness): ``O(N)`` from the
  transform's dense definition.

Staleness lives here too: :meth:`_Sampling._mark_sampled` moves a level's ``C_i`` to the current draw.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from plr_gym._structures import LinearStalenessTree, OrderedKeys, SumTree
from plr_gym.sampler.record import FloatArray, IntArray, _SamplerRecord
from plr_gym.sampler.schedule import replay_decision
from plr_gym.transforms import (
    TRANSFORMS,
    ExponentialTransform,
    OrderedTransform,
    ScoreTransform,
    UniformTransform,
)

# exp() overflows above ~709.78; keep exponents of stored weights at most this far above 0.
_EXP_HEADROOM = 600.0
_MIN_TOTAL = math.exp(-_EXP_HEADROOM)


class _Sampling(_SamplerRecord):
    """Draws and the structures behind them (a part of :class:`~plr_gym.sampler.LevelSampler`)."""

    # ------------------------------------------------------------------ sampling structures
    def _build_structures(self, reanchor: bool = False) -> None:
        n = self._levels.size
        seen_idx = self._perm[: self._n_seen]
        self._score_keys = None
        self._score_tree = None
        self._stale_keys = None
        self._stale_tree = None
        if not self.uses_scores:
            return
        h, g = self._h, self._g
        if isinstance(h, OrderedTransform):
            self._score_keys = h.structure(n)
            self._score_keys.rebuild(seen_idx, -self._scores[seen_idx])
        elif isinstance(h, ExponentialTransform):
            self._score_tree = SumTree(n)
            self._rebuild_score_tree(None if reanchor or not self._n_seen else self._softmax_shift)
        if self.staleness_coef > 0:
            if isinstance(g, OrderedTransform):
                self._stale_keys = g.structure(n)
                self._stale_keys.rebuild(seen_idx, self._last[seen_idx])
            elif isinstance(g, ExponentialTransform) and g.linear:
                self._stale_tree = LinearStalenessTree(n)
                self._stale_tree.rebuild(self.seen, self._last)

    def _rebuild_score_tree(self, shift: float | None = None) -> None:
        """Recompute every leaf of an exponential transform (``power``, ``softmax``), anchored at ``shift``
        (default: the exponent of the best seen score)."""
        h = self._h
        assert self._score_tree is not None and isinstance(h, ExponentialTransform)
        seen_idx = self._perm[: self._n_seen]
        weights = np.zeros(self._levels.size)
        if seen_idx.size:
            if shift is None:
                top = h.exponent(float(self._scores[seen_idx].max()))
                shift = top if math.isfinite(top) else 0.0
            self._softmax_shift = shift
            scores = self._scores[seen_idx].tolist()
            weights[seen_idx] = [h.leaf_weight(sc, shift) for sc in scores]
        self._score_tree.rebuild(weights)

    def _set_score_weight(self, i: int, score: float) -> None:
        h = self._h
        assert self._score_tree is not None and isinstance(h, ExponentialTransform)
        z = (h.exponent(score) - self._softmax_shift) / self.temperature
        if z > _EXP_HEADROOM:  # a new best score far above the reference point: re-anchor everything
            self._rebuild_score_tree()
            return
        self._score_tree.set(i, h.leaf_weight(score, self._softmax_shift))
        if self._n_seen and self._score_tree.total < _MIN_TOTAL:
            # every weight is tiny (the best score dropped far below the reference point): denormal or
            # zero leaves would distort the ratios, so re-anchor on the current best score
            self._rebuild_score_tree()

    def _apply_progress(self, progress: float) -> None:
        """Anneal ``β`` to ``progress`` (with ``temperature_end``): a new ``h``, the structures rebuilt."""
        if self.temperature_end is not None:
            temperature = self.temperature_start + (self.temperature_end - self.temperature_start) * progress
            if temperature != self.temperature:
                old = (self.temperature, self._h, self._softmax_shift)
                self.temperature = temperature
                self._h = self._score_transform_object(temperature)
                try:  # re-anchored: exp((g − shift)/β) must stay finite at the new, lower β
                    self._build_structures(reanchor=True)
                except BaseException:
                    self.temperature, self._h, self._softmax_shift = old
                    self._build_structures()
                    raise
        self._progress = progress

    # ------------------------------------------------------------------ draws
    def _sample_index(self, journal: list[tuple[int, int]] | None = None) -> int:
        """One draw; the counters change only once the level is marked sampled (an interrupt before
        that leaves them consistent with ``num_samples``). ``journal`` records ``(i, old last_sampled)``."""
        replay = explore = False
        if self.strategy == "random":
            i = int(self._rng.integers(self._levels.size))
        elif self.strategy == "sequential":
            i = self._next_index
        elif replay_decision(
            self._n_seen,
            self._levels.size,
            self.replay_schedule,
            self.replay_prob,
            self.min_seen_ratio,
            self._rng,
        ):
            replay = True
            i = self._sample_replay_index()
        else:
            explore = True
            i = int(self._perm[self._n_seen + int(self._rng.integers(self._levels.size - self._n_seen))])
        if journal is not None:
            journal.append((i, int(self._last[i])))
        self._mark_sampled(i)
        if self.strategy == "sequential":
            self._next_index = (i + 1) % self._levels.size
        self._num_replay += replay
        self._num_explore += explore
        return i

    def _sample_replay_index(self) -> int:
        if self.uniform_mass > 0.0 and (self.uniform_mass == 1.0 or self._rng.random() < self.uniform_mass):
            return self._uniform_seen()
        if self.staleness_coef > 0.0 and (
            self.staleness_coef == 1.0 or self._rng.random() < self.staleness_coef
        ):
            return self._sample_staleness_index()
        return self._sample_score_index()

    def _uniform_seen(self) -> int:
        return int(self._perm[int(self._rng.integers(self._n_seen))])

    def _sample_ordered(self, transform: ScoreTransform, keys: OrderedKeys) -> int:
        assert isinstance(transform, OrderedTransform)
        i = transform.draw(keys, self._n_seen, self._rng)
        return self._uniform_seen() if i is None else i

    def _sample_dense(self, transform: ScoreTransform, values: Callable[[IntArray], npt.NDArray[Any]]) -> int:
        """``O(N)`` draw from ``transform``'s definition over ``values(seen positions)``."""
        seen_idx = np.flatnonzero(self.seen)
        return int(seen_idx[transform.draw_position(values(seen_idx), self._rng)])

    def _score_transform_object(self, temperature: float) -> ScoreTransform:
        """``h`` at ``temperature`` (with :attr:`power_offset` for ``power``)."""
        h = TRANSFORMS[self.score_transform](temperature=temperature, eps=self.eps)
        if self.power_offset:
            h.offset = self.power_offset  # type: ignore[attr-defined]  # Power (checked in __init__)
        return h

    def _ranks_unseen_at_zero(self) -> bool:
        """``unseen_rank="zero"`` changes the rank weights now: some level unseen, some seen score < 0."""
        return (
            self.unseen_rank == "zero"
            and self.score_transform == "rank"
            and 0 < self._n_seen < self._levels.size
            and bool((self._scores[self._perm[: self._n_seen]] < 0.0).any())
        )

    def _score_weights(self, seen_idx: IntArray) -> FloatArray:
        """``P_S`` over the seen levels ``seen_idx`` (in level order)."""
        values = self._scores[seen_idx]
        if not self._ranks_unseen_at_zero():
            return self._h.weights(values)
        # level-replay's ranks: the unseen levels (score 0) rank above every negative seen score
        order = np.argsort(-values, kind="stable")
        ranks = np.empty(values.size, dtype=np.float64)
        ranks[order] = np.arange(1, values.size + 1, dtype=np.float64)
        ranks += (self._levels.size - self._n_seen) * (values < 0.0)
        w = ranks ** (-1.0 / self.temperature)
        out: FloatArray = w / w.sum()
        return out

    def _sample_score_index(self) -> int:
        if self._ranks_unseen_at_zero():  # O(N): the unseen levels' count shifts the negative scores' ranks
            seen_idx = np.flatnonzero(self.seen)
            cdf = np.cumsum(self._score_weights(seen_idx))
            k = int(np.searchsorted(cdf, self._rng.random() * cdf[-1], side="right"))
            return int(seen_idx[min(k, seen_idx.size - 1)])
        if self._score_keys is not None:
            return self._sample_ordered(self._h, self._score_keys)
        if self._score_tree is not None:
            total = self._score_tree.total
            if total > 0.0:
                return self._score_tree.find(self._rng.random() * total)
            return self._uniform_seen()  # a component with no mass
        if isinstance(self._h, UniformTransform):
            return self._uniform_seen()
        return self._sample_dense(self._h, lambda seen_idx: self._scores[seen_idx])

    def _sample_staleness_index(self) -> int:
        if self._stale_keys is not None:
            return self._sample_ordered(self._g, self._stale_keys)
        if self._stale_tree is not None:
            total = self._stale_tree.total(self._t)
            if total > 0:
                return self._stale_tree.find(int(self._rng.integers(total)), self._t)
            return self._uniform_seen()
        if isinstance(self._g, UniformTransform):
            return self._uniform_seen()
        # O(N) fallback: e.g. power with a non-unit temperature, or softmax, over staleness.
        return self._sample_dense(self._g, lambda seen_idx: self._t - self._last[seen_idx])

    def _mark_sampled(self, i: int) -> None:
        old_last, old_t = int(self._last[i]), self._t
        try:
            self._t += 1
            self._last[i] = self._t
            if self._pos[i] < self._n_seen:
                if self._stale_tree is not None:
                    self._stale_tree.move(i, old_last, self._t)
                elif self._stale_keys is not None:
                    self._stale_keys.replace(i, old_last, self._t)
        except BaseException:  # interrupted: undo, and rebuild the staleness structures from the arrays
            self._t, self._last[i] = old_t, old_last
            self._build_structures()
            raise

    # ------------------------------------------------------------------ weights
    def _replay_weights(self) -> FloatArray:
        """``P_replay`` over ``levels``, dense (see :meth:`LevelSampler.sample_weights`)."""
        n = self._levels.size
        out = np.zeros(n, dtype=np.float64)
        if self.strategy == "random":
            return np.full(n, 1.0 / n)
        if self.strategy == "sequential":
            out[self._next_index] = 1.0
            return out
        if self._n_seen == 0:
            return out
        seen_idx = np.flatnonzero(self.seen)
        p = self._score_weights(seen_idx)
        if self.staleness_coef > 0.0:
            stale = (self._t - self._last[seen_idx]).astype(np.float64)
            pc = self._g.weights(stale)
            p = (1.0 - self.staleness_coef) * p + self.staleness_coef * pc
        if self.uniform_mass > 0.0:
            p = (1.0 - self.uniform_mass) * p + self.uniform_mass / seen_idx.size
        out[seen_idx] = p
        return out
