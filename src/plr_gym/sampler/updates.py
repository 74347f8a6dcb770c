"""Updates: episode scores in, each level's score ``S_i`` (and the sampling structures) out.

``S_i ← (1 − α)·S_i + α·score`` for a seen level; an unseen level takes its first score as is and becomes
*seen* (moves into ``_perm[:_n_seen]``). For ``strategy="learnability"`` an update is an episode outcome:
the level's running success rate ``p ← p + max(1/n, success_rate_alpha)·(outcome − p)`` and
``S_i = p·(1 − p)``.

Every update is all or nothing: inputs are checked before anything is stored, and an interrupt
(``KeyboardInterrupt``) part way restores the record and rebuilds the sampling structures from it. A batch
of scores takes one of three paths with the same result: one by one (``O(log N)`` each), or on the arrays
with the structures rebuilt once, for many distinct levels (``_BULK_UPDATE``) or, with an ordered score
transform, for a batch that is a sizeable share of the levels.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import numpy.typing as npt

from plr_gym._levels import as_sequence, refuse_masked
from plr_gym.sampler.options import _check_real
from plr_gym.sampler.record import FloatArray, IntArray, _SamplerRecord

# update_batch with at least this many distinct levels rebuilds the structures instead of updating each.
_BULK_UPDATE = 4096
# ... and, with an ordered score transform (rank...), any batch of at least max(_ORDERED_BULK_MIN,
# levels / _ORDERED_BULK_RATIO) scores, repeated levels included (rebuild O(N log N), update O(block)).
_ORDERED_BULK_MIN = 32
_ORDERED_BULK_RATIO = 16


class _Updates(_SamplerRecord):
    """Score updates (a part of :class:`~plr_gym.sampler.LevelSampler`)."""

    def _update_batch(self, levels: Any, scores: Any) -> None:
        """:meth:`LevelSampler.update_batch`: check everything, then take the cheapest equal path."""
        checked = self._checked_batch(levels, scores)
        if checked is None:
            return
        idx, scf = checked
        if idx.size >= _BULK_UPDATE and np.unique(idx).size == idx.size:
            self._update_distinct_then_rebuild(idx, scf)
        elif self._score_keys is not None and idx.size >= max(
            _ORDERED_BULK_MIN, self._levels.size // _ORDERED_BULK_RATIO
        ):
            self._update_then_rebuild(idx, scf)
        else:
            for i, s in zip(idx.tolist(), scf.tolist()):
                self._update_index(i, s)

    def _checked_batch(
        self, levels: Iterable[int] | npt.NDArray[Any], scores: Iterable[float] | npt.NDArray[Any]
    ) -> tuple[IntArray, FloatArray] | None:
        """The positions and float scores of a batch, every pair checked; ``None`` for an empty batch."""
        refuse_masked("levels", levels)
        refuse_masked("scores", scores)
        lv = np.asarray(as_sequence("levels", levels, "level ids (one per score)"))
        sc = np.asarray(as_sequence("scores", scores, "numbers (one per level)"))
        if lv.ndim != 1 or sc.ndim != 1 or lv.shape != sc.shape:
            raise ValueError(f"levels and scores must be 1-D of equal length, got {lv.shape} and {sc.shape}")
        if lv.size == 0:
            return None
        idx = self._index.indices(lv)
        if self.learns_outcomes and sc.dtype == np.bool_:
            sc = sc.astype(np.float64)
        if sc.dtype == np.bool_ or not (
            np.issubdtype(sc.dtype, np.floating) or np.issubdtype(sc.dtype, np.integer)
        ):
            raise TypeError(f"scores must be real numbers, got dtype {sc.dtype}")
        scf = sc.astype(np.float64)
        bad = ~np.isfinite(scf)
        if bad.any():
            k = int(np.argmax(bad))
            raise ValueError(f"score for level {int(lv[k])} must be finite, got {scf[k]!r}")
        if (self.learns_outcomes or self._h.nonnegative) and self.uses_scores:
            bad_outcome = (scf < 0) | (scf > 1) if self.learns_outcomes else scf < 0
            if bad_outcome.any():
                k = int(np.argmax(bad_outcome))
                self._check_score(float(scf[k]), int(lv[k]))
        return idx, scf

    def _saved_scores(self) -> tuple[Any, ...]:
        """What a batch update changes, copied, for :meth:`_restore_scores`."""
        return (
            self._scores.copy(),
            self._perm.copy(),
            self._pos.copy(),
            self._n_seen,
            self._softmax_shift,
            None if self._success_rate is None else self._success_rate.copy(),
            None if self._outcomes is None else self._outcomes.copy(),
        )

    def _restore_scores(self, saved: tuple[Any, ...]) -> None:
        """Undo a batch update (after an interrupt): the saved fields back, the structures rebuilt."""
        (
            self._scores,
            self._perm,
            self._pos,
            self._n_seen,
            self._softmax_shift,
            self._success_rate,
            self._outcomes,
        ) = saved
        self._build_structures()

    def _update_distinct_then_rebuild(self, idx: IntArray, scf: FloatArray) -> None:
        """Distinct levels ``idx``: the updates one by one would give, vectorised, then the structures
        rebuilt once. All or nothing."""
        saved = self._saved_scores()
        try:
            was_seen = self._pos[idx] < self._n_seen
            if self._success_rate is not None and self._outcomes is not None:
                self._outcomes[idx] += 1
                step = np.maximum(1.0 / self._outcomes[idx], self.success_rate_alpha)
                rate = self._success_rate[idx] + step * (scf - self._success_rate[idx])
                self._success_rate[idx] = rate
                self._scores[idx] = rate * (1.0 - rate)
            else:
                self._scores[idx] = np.where(
                    was_seen, (1.0 - self.alpha) * self._scores[idx] + self.alpha * scf, scf
                )
            for i in idx[~was_seen].tolist():
                self._mark_seen(i)
            self._build_structures(reanchor=True)
        except BaseException:  # interrupted: nothing of the batch is kept
            self._restore_scores(saved)
            raise

    def _update_then_rebuild(self, idx: IntArray, scores: FloatArray) -> None:
        """The loop of :meth:`_apply_update` over the pairs in order (the same arithmetic, repeated levels
        included), on the arrays only, then the sampling structures rebuilt once. For an ordered score
        transform the rebuilt structures are the ones the updates one by one would leave: they are fixed
        by the scores, the seen levels and their last draws (ties by index). All or nothing."""
        saved = self._saved_scores()
        try:
            values, pos, alpha = self._scores, self._pos, self.alpha
            rates, counts = self._success_rate, self._outcomes
            for i, score in zip(idx.tolist(), scores.tolist()):
                was_seen = pos[i] < self._n_seen
                if rates is not None and counts is not None:
                    count = int(counts[i]) + 1
                    rate = float(rates[i])
                    rate += max(1.0 / count, self.success_rate_alpha) * (score - rate)
                    counts[i] = count
                    rates[i] = rate
                    values[i] = rate * (1.0 - rate)
                else:
                    values[i] = (1.0 - alpha) * float(values[i]) + alpha * score if was_seen else score
                if not was_seen:
                    self._mark_seen(i)
            self._build_structures()
        except BaseException:  # interrupted: nothing of the batch is kept
            self._restore_scores(saved)
            raise

    def _replace_seen_scores(self, idx: IntArray, scores: FloatArray) -> None:
        """Set the scores of seen levels (positions ``idx``, distinct) to ``scores`` (finite, >= 0, checked by
        the caller) and rebuild the sampling structures once: ``O(N)``. Package-internal, for
        :class:`~plr_gym.prompts.PromptCurriculum`, whose decayed estimates change every score at once."""
        if not (self._pos[idx] < self._n_seen).all():
            raise ValueError("only the scores of seen levels can be replaced")
        saved = (self._scores.copy(), self._softmax_shift)
        try:
            self._scores[idx] = scores
            self._build_structures(reanchor=True)
        except BaseException:  # interrupted: the old scores and structures
            self._scores, self._softmax_shift = saved
            self._build_structures()
            raise

    def _check_score(self, score: Any, level: Any) -> float:
        if self.learns_outcomes:
            if isinstance(score, (bool, np.bool_)):
                return float(score)
            s = _check_real(f"score (level {level})", score)
            if not 0.0 <= s <= 1.0:
                raise ValueError(
                    f"strategy='learnability' takes episode outcomes in [0, 1] (1 = success, 0 = failure), "
                    f"got {s!r} for level {level}"
                )
            return s
        s = _check_real(f"score (level {level})", score)
        if s < 0.0 and self._h.nonnegative and self.uses_scores:
            raise ValueError(
                f"score_transform={self.score_transform!r} needs non-negative scores, got {s!r} for level "
                f"{level}; use score_transform='rank' or 'softmax' for signed scores (e.g. strategy='gae')"
            )
        return s

    def _update_index(self, i: int, score: float) -> None:
        """Apply one score; if interrupted (e.g. ``KeyboardInterrupt``) the update is undone completely."""
        p, q = int(self._pos[i]), self._n_seen
        j = int(self._perm[q]) if q < self._levels.size else i
        snapshot = (float(self._scores[i]), self._softmax_shift)
        outcome_snapshot = (
            None if self._success_rate is None else float(self._success_rate[i]),
            None if self._outcomes is None else int(self._outcomes[i]),
        )
        try:
            self._apply_update(i, score)
        except BaseException:
            self._scores[i], self._softmax_shift = snapshot
            if self._success_rate is not None and self._outcomes is not None:
                self._success_rate[i], self._outcomes[i] = outcome_snapshot
            self._n_seen = q
            self._perm[p], self._pos[i] = i, p
            if j != i:
                self._perm[q], self._pos[j] = j, q
            self._build_structures()
            raise

    def _apply_update(self, i: int, score: float) -> None:
        was_seen = self._pos[i] < self._n_seen
        old = float(self._scores[i])
        if self._success_rate is not None and self._outcomes is not None:
            # learnability: the update is an outcome; the score is p(1 - p) of the running success rate
            count = int(self._outcomes[i]) + 1
            rate = float(self._success_rate[i])
            rate += max(1.0 / count, self.success_rate_alpha) * (score - rate)
            self._outcomes[i] = count
            self._success_rate[i] = rate
            new = rate * (1.0 - rate)
        else:
            new = (1.0 - self.alpha) * old + self.alpha * score if was_seen else score
        self._scores[i] = new
        if not was_seen:
            self._mark_seen(i)
        if self._score_keys is not None:
            if was_seen:
                self._score_keys.replace(i, -old, -new)
            else:
                self._score_keys.add(i, -new)
        elif self._score_tree is not None:
            self._set_score_weight(i, new)
        if not was_seen:
            if self._stale_tree is not None:
                self._stale_tree.set(i, True, int(self._last[i]))
            elif self._stale_keys is not None:
                self._stale_keys.add(i, int(self._last[i]))

    def _mark_seen(self, i: int) -> None:
        p, q = int(self._pos[i]), self._n_seen
        j = int(self._perm[q])
        self._perm[p], self._perm[q] = j, i
        self._pos[j], self._pos[i] = p, q
        self._n_seen += 1
