"""Prioritized Level Replay over a finite set of levels.

:class:`LevelSampler` reproduces the level sampler of Prioritized Level Replay (PLR; Jiang, Grefenstette &
Rocktäschel, ICML 2021, arXiv 2010.03934) and of its reference code (``level_replay/level_sampler.py`` in
facebookresearch/level-replay), with the reference's known bugs fixed and every draw in ``O(log N)``.

The paper's notation, and where it lives here:

=====================  ===============================  ===============================================
paper                  reference code                   ``LevelSampler``
=====================  ===============================  ===============================================
scoring function       ``strategy``                     ``strategy`` (see :mod:`plr_gym.scoring`)
``S_i`` level score    ``seed_scores``                  :attr:`LevelSampler.scores`
``h``, ``β``           ``score_transform, temperature``  ``score_transform``, ``temperature``
``C_i`` (``c − C_i``)  ``seed_staleness``               :attr:`LevelSampler.staleness`
``ρ`` staleness coef   ``staleness_coef``               ``staleness_coef``
EWA of scores          ``alpha``                        ``alpha``
—                      ``rho``                          ``min_seen_ratio``
—                      ``1 − nu``                       ``replay_prob``
=====================  ===============================  ===============================================

.. note::
   **The two rhos.** In the paper ``ρ`` is the *staleness coefficient* (``staleness_coef`` here). In the
   reference code ``rho`` is something else: the fraction of levels that must have been seen before any
   replay (``min_seen_ratio`` here), and ``nu`` is the probability of *not* replaying under the fixed
   schedule (``replay_prob = 1 − nu`` here). This library never uses the names ``rho``/``nu``.

Replay distribution over the seen levels (unseen levels have weight 0)::

    P_replay = (1 − staleness_coef) · P_S + staleness_coef · P_C
    P_S(i) = h(S_i)^(1/β) / Σ_j h(S_j)^(1/β)      (h by ``score_transform``)
    P_C(i) = g(c − C_i) / Σ_j g(c − C_j)           (g by ``staleness_transform``)

where ``c`` is the number of levels sampled so far and ``C_i`` the draw at which level ``i`` was last
sampled. Each :meth:`LevelSampler.sample` first decides between *replaying* a seen level (drawn from
``P_replay``) and *exploring* an unseen one (drawn uniformly).

Differences from the reference code, all deliberate:

- ``max`` transform: the reference writes ``-inf`` into the stored scores of unseen levels (``scores[:]``
  is a view in numpy). Here stored scores are never touched by a transform.
- ``rank`` transform: levels are ranked among *seen* levels only (the reference also ranks unseen levels,
  with score 0, which only matters when replay starts before every level was seen and some seen score is
  negative; ``unseen_rank="zero"`` does as the reference). Ties are broken by
  the order of ``levels`` (earlier first), where the reference's ``argsort`` breaks them arbitrarily.
- ``power`` transform: ``S^(1/β)`` as in the paper; the reference adds ``1e-3`` to every score when
  ``staleness_coef == 0`` (``power_offset=1e-3`` does the same). Negative scores are rejected for ``power``
  (their fractional powers are NaN).
- ``eps_greedy`` spreads ``eps`` uniformly over the seen levels (the reference over all levels before
  zeroing the unseen ones and renormalising; identical once every level is seen).
- The first score of a level is stored as is; later scores are mixed in with ``alpha`` (the reference
  mixes the first score with its zero initial value, ``S = α·score``; identical for the default α = 1).
- When a component has no mass (e.g. every seen level has staleness 0, or every ``power`` weight is 0)
  that component is uniform over the seen levels instead of leaving a distribution that does not sum to 1.
- Staleness is counted for every sampled level whatever ``staleness_coef`` is (the reference stops
  counting when the coefficient is 0), so :attr:`LevelSampler.staleness` is always meaningful.
"""

from __future__ import annotations

import functools
import inspect
import json
import math
import numbers
import os
from collections.abc import Callable, Iterable
from typing import Any, Union

import numpy as np
import numpy.typing as npt

from plr_gym._levels import as_sequence, check_level_ids, refuse_masked
from plr_gym._sizes import allocating
from plr_gym._structures import LinearStalenessTree, OrderedKeys, SumTree
from plr_gym.checkpoint import load_npz, save_npz
from plr_gym.scoring import STRATEGY_SPECS, strategy_spec
from plr_gym.scoring import Strategy as StrategyInfo
from plr_gym.transforms import (
    TRANSFORMS,
    ExponentialTransform,
    OrderedTransform,
    ScoreTransform,
    UniformTransform,
    transform_names,
)

__all__ = [
    "PAPER_PRESETS",
    "REPLAY_SCHEDULES",
    "SCORE_TRANSFORMS",
    "STALENESS_TRANSFORMS",
    "STRATEGIES",
    "UNSEEN_RANKS",
    "LevelSampler",
    "sampler_defaults",
]

#: Strategies understood by :class:`LevelSampler` (``random`` and ``sequential`` ignore scores).
STRATEGIES: tuple[str, ...] = tuple(STRATEGY_SPECS)
#: The transform parameters a :class:`LevelSampler` passes (see :mod:`plr_gym.transforms`).
_TRANSFORM_PARAMS = ("temperature", "eps")
#: Score transforms ``h`` for ``P_S``: the names in :data:`plr_gym.transforms.TRANSFORMS` that
#: :class:`LevelSampler` accepts (taken at import; a transform registered later is accepted too).
SCORE_TRANSFORMS: tuple[str, ...] = transform_names(_TRANSFORM_PARAMS)
#: Staleness transforms ``g`` for ``P_C`` (same family as the score transforms).
STALENESS_TRANSFORMS: tuple[str, ...] = SCORE_TRANSFORMS
#: Replay schedules.
REPLAY_SCHEDULES: tuple[str, ...] = ("proportionate", "fixed")
#: How ``rank`` ranks a seen level while some levels are unseen: ``"seen"`` (among the seen levels only, the
#: default) or ``"zero"`` (level-replay: among all levels, the unseen ones at score 0).
UNSEEN_RANKS: tuple[str, ...] = ("seen", "zero")
#: The PLR paper's settings (Jiang et al. 2021, appendix): L1 value loss, rank transform, β = 0.1, and the
#: staleness coefficient ρ = 0.1 on Procgen, 0.3 on MiniGrid. ``LevelSampler.paper_defaults`` uses them.
PAPER_PRESETS: dict[str, dict[str, Any]] = {
    "paper-procgen": {
        "strategy": "value_l1",
        "score_transform": "rank",
        "temperature": 0.1,
        "staleness_coef": 0.1,
        "uniform_mass": 0.0,
    },
    "paper-minigrid": {
        "strategy": "value_l1",
        "score_transform": "rank",
        "temperature": 0.1,
        "staleness_coef": 0.3,
        "uniform_mass": 0.0,
    },
}

Strategy = Union[str, Callable[..., float]]
FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

_STATE_VERSION = 1
# exp() overflows above ~709.78; keep exponents of stored weights at most this far above 0.
_EXP_HEADROOM = 600.0
_MIN_TOTAL = math.exp(-_EXP_HEADROOM)
_ARRAY_KEYS = ("levels", "scores", "last_sampled", "order")
_OUTCOME_KEYS = ("success_rate", "outcomes")  # learnability only
# update_batch with at least this many distinct levels rebuilds the structures instead of updating each.
_BULK_UPDATE = 4096
# ... and, with an ordered score transform (rank...), any batch of at least max(_ORDERED_BULK_MIN,
# levels / _ORDERED_BULK_RATIO) scores, repeated levels included (rebuild O(N log N), update O(block)).
_ORDERED_BULK_MIN = 32
_ORDERED_BULK_RATIO = 16


# --------------------------------------------------------------------------------------------------
# argument checks
# --------------------------------------------------------------------------------------------------
def _check_choice(name: str, value: Any, choices: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name}={value!r} is not supported; choose one of {', '.join(choices)}")
    return value


def _check_real(name: str, value: Any) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__} {value!r}")
    try:
        out = float(value)
    except OverflowError:  # an int beyond float64
        raise ValueError(
            f"{name} must be finite, got an int beyond the float range ({len(str(value))} digits)"
        ) from None
    if not math.isfinite(out):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return out


def _check_unit(name: str, value: Any, *, open_low: bool = False) -> float:
    out = _check_real(name, value)
    if not (0.0 < out <= 1.0 if open_low else 0.0 <= out <= 1.0):
        interval = "(0, 1]" if open_low else "[0, 1]"
        raise ValueError(f"{name} must lie in {interval}, got {value!r}")
    return out


def _check_positive(name: str, value: Any) -> float:
    out = _check_real(name, value)
    if out <= 0.0:
        raise ValueError(f"{name} must be > 0, got {value!r}")
    return out


def _as_levels(levels: Any) -> IntArray:
    if not isinstance(levels, range) and (
        isinstance(levels, (str, bytes)) or not isinstance(levels, (Iterable, np.ndarray))
    ):
        raise TypeError(f"levels must be a 1-D collection of int level ids, got {type(levels).__name__}")
    refuse_masked("levels", levels)
    if not isinstance(levels, (range, np.ndarray)):
        levels = list(levels)
    if not isinstance(levels, range) and np.ndim(levels) != 1:
        raise ValueError(f"levels must be 1-D, got an array of shape {np.shape(levels)}")
    with allocating("levels", levels if isinstance(levels, range) else f"<{len(levels)} ids>"):
        arr = check_level_ids(levels, "levels")
    if arr.size == 0:
        raise ValueError("levels must not be empty")
    uniq, counts = np.unique(arr, return_counts=True)
    if uniq.size != arr.size:
        dups = uniq[counts > 1][:5].tolist()
        raise ValueError(f"levels must be unique; duplicated level ids: {dups}")
    return arr


class _LevelIndex:
    """Maps level ids to positions in ``levels`` (arithmetic for a contiguous range, else binary search)."""

    def __init__(self, levels: IntArray) -> None:
        self.levels = levels
        n = levels.size
        self.start = int(levels[0])
        self.contiguous = bool(np.array_equal(levels, np.arange(self.start, self.start + n)))
        if not self.contiguous:
            self.sorter = np.argsort(levels, kind="stable")
            self.sorted = levels[self.sorter]

    def index(self, level: Any) -> int:
        if isinstance(level, (bool, np.bool_)) or not isinstance(level, (numbers.Integral, np.integer)):
            raise TypeError(f"level must be an int level id, got {type(level).__name__} {level!r}")
        lvl = int(level)
        if self.contiguous:
            i = lvl - self.start
            if 0 <= i < self.levels.size:
                return i
        else:
            pos = int(np.searchsorted(self.sorted, lvl))
            if pos < self.sorted.size and int(self.sorted[pos]) == lvl:
                return int(self.sorter[pos])
        raise KeyError(f"level {lvl} is not one of this sampler's levels")

    def indices(self, levels: npt.NDArray[Any]) -> IntArray:
        if levels.dtype == np.bool_ or not np.issubdtype(levels.dtype, np.integer):
            raise TypeError(f"levels must be int level ids, got dtype {levels.dtype}")
        if levels.size and levels.dtype.kind == "u" and int(levels.max()) > np.iinfo(np.int64).max:
            raise KeyError(f"level {int(levels.max())} is not one of this sampler's levels")
        lv = levels.astype(np.int64)
        if self.contiguous:
            idx = lv - self.start
            bad = (idx < 0) | (idx >= self.levels.size)
        else:
            pos = np.minimum(np.searchsorted(self.sorted, lv), self.sorted.size - 1)
            bad = self.sorted[pos] != lv
            idx = self.sorter[pos]
        if bad.any():
            raise KeyError(f"level {int(lv[np.argmax(bad)])} is not one of this sampler's levels")
        return np.asarray(idx, dtype=np.int64)


class LevelSampler:
    """Prioritized Level Replay over a finite set of level ids.

    :param levels: the training levels: any 1-D collection of distinct ``int`` level ids (seeds), e.g.
        ``range(200)``. ``sampler.levels`` keeps their order; all per-level arrays align with it.
    :param strategy: how episodes are scored (see :mod:`plr_gym.scoring`): ``"value_l1"`` (default, the
        paper's L1 value loss), ``"positive_value_loss"``, ``"gae"``, ``"max_mc"``, ``"policy_entropy"``,
        ``"least_confidence"``, ``"min_margin"``, ``"one_step_td_error"``, a callable
        ``fn(episode: EpisodeData) -> float``, or the baselines ``"random"`` (uniform over all levels) and
        ``"sequential"`` (levels in order, cycling). The sampler itself only stores the scores it is given.
    :param score_transform: ``h`` in the paper: ``"rank"`` (``1/rank(S_i)^(1/β)``, default), ``"power"``
        (``S_i^(1/β)``, non-negative scores only), ``"softmax"`` (``exp(S_i/β)``), ``"eps_greedy"``
        (``1 − eps`` on the best level plus ``eps`` spread uniformly), ``"constant"`` (uniform) or
        ``"max"`` (uniform over the levels tied for the best score); or a transform added with
        :func:`plr_gym.transforms.register_transform`.
    :param temperature: ``β`` in the paper (> 0); lower is greedier. Default 1.0 (the paper: 0.1).
    :param staleness_coef: ``ρ`` in the paper, in ``[0, 1]``: weight of the staleness distribution
        ``P_C`` in the replay mixture. Default 0.3 (the paper: 0.1 on Procgen, 0.3 on MiniGrid). (Not the
        reference code's ``rho``: see below.)
    :param staleness_transform: transform applied to the staleness counts ``c − C_i`` (same choices as
        ``score_transform``). Default ``"power"``, which with ``staleness_temperature=1`` is the paper's
        ``P_C ∝ c − C_i``.
    :param staleness_temperature: temperature of the staleness transform (> 0). Default 1.
    :param replay_schedule: when to replay a seen level instead of exploring an unseen one.
        ``"proportionate"`` (default): replay with probability = fraction of levels seen.
        ``"fixed"``: replay with probability ``replay_prob``. Either way no replay happens before a
        fraction ``min_seen_ratio`` of the levels has been seen, and replay is certain once all are.
    :param replay_prob: probability of a replay under the ``"fixed"`` schedule, in ``[0, 1]``
        (the reference's ``1 − nu``). Default 0.5.
    :param min_seen_ratio: fraction of levels, in ``[0, 1]``, that must have a score before any replay
        (the reference's ``rho``). Default 1.0, the paper's Procgen setting.
    :param alpha: step size of the exponentially weighted average of a level's scores, in ``(0, 1]``:
        ``S_i ← (1 − α)·S_i + α·score`` (the first score is stored as is). Default 1.0 (keep the latest).
    :param eps: exploration mass of the ``eps_greedy`` transform, in ``[0, 1]``. Default 0.05.
    :param uniform_mass: ``λ`` in ``[0, 1]``, a floor of uniform mass in the replay distribution:
        ``P_replay = (1 − λ)·((1 − ρ)·P_S + ρ·P_C) + λ·U``, ``U`` uniform over the seen levels (all levels
        once every level has been seen). Every seen level keeps at least ``λ/N_seen`` of the replay mass,
        so prioritisation can never starve a level. Default 0.5 (the paper has no floor: 0).
    :param success_rate_alpha: ``strategy="learnability"`` only: step size, in ``(0, 1]``, of each level's
        running success rate ``p ← p + max(1/n, success_rate_alpha)·(outcome − p)`` (``n`` = the level's
        episodes so far: the plain mean of the first ``1/success_rate_alpha`` outcomes, then an
        exponentially weighted one). The level's score is ``p·(1 − p)``. Default 0.1.
    :param seed: seed of the sampler's own ``numpy.random.Generator``; same seed, same draws.
    :param unseen_rank: ``score_transform="rank"`` while some levels are unseen: ``"seen"`` (default) ranks
        a seen level among the seen levels; ``"zero"`` ranks it among all levels with the unseen ones at
        score 0, as level-replay does (a seen level with a negative score, e.g. ``strategy="gae"``, then
        ranks below every unseen one; ties at 0: seen levels first). ``O(N)`` per score draw in that case.
    :param power_offset: ``score_transform="power"`` only: ``(S_i + power_offset)^(1/β)``. Default 0 (the
        paper's ``S_i^(1/β)``); level-replay adds ``1e-3`` when ``staleness_coef`` is 0.
    :param temperature_end: anneal ``β`` linearly from ``temperature`` (at the start of training) to this
        value (at its end), following :meth:`set_progress`, which :class:`~plr_gym.PLRCallback` calls at
        every rollout with the share of ``total_timesteps`` done (your own loop calls it yourself).
        ``None`` (default): ``β`` stays ``temperature``. The current ``β`` is :attr:`temperature`.

    **Defaults** were chosen by the pre-registered rule of the evidence study (``docs/study.md``):
    ``value_l1``, ``rank`` with ``β = 1``, ``ρ = 0.3``, ``uniform_mass = 0.5``, proportionate schedule,
    ``min_seen_ratio = 1``, ``alpha = 1``. The paper's settings (``β = 0.1``, ``ρ = 0.1``, no floor) put
    ~90% of the replay mass on one level once scores settle; they are one call away for reproductions:
    :meth:`LevelSampler.paper_defaults` (``preset="paper-procgen"`` or ``"paper-minigrid"``).

    .. note:: **The two rhos.** The paper's ``ρ`` is ``staleness_coef``. The reference code's ``rho`` is
       ``min_seen_ratio`` and its ``nu`` is ``1 − replay_prob``.

    **Cost.** :meth:`sample` and :meth:`update` are ``O(log N)`` for every score transform and for the
    staleness transforms ``power`` with ``staleness_temperature=1`` (the default), ``rank``, ``max``,
    ``eps_greedy`` and ``constant``. ``power`` with another temperature, and ``softmax``, change every
    level's staleness weight at every draw; with ``staleness_coef > 0`` they cost ``O(N)`` per replay
    draw. :meth:`sample_weights` always computes the full distribution in ``O(N log N)``.

    **Seen levels.** A level becomes *seen* when its first score arrives through :meth:`update`, not when
    it is sampled: until then it can be drawn again as an unseen level (e.g. by another env).

    Example:
        >>> from plr_gym import LevelSampler
        >>> sampler = LevelSampler(levels=range(4), seed=0)
        >>> paper = LevelSampler.paper_defaults(levels=range(4), seed=0)
        >>> for s in (sampler, paper):
        ...     first = [s.sample() for _ in range(4)]        # nothing seen yet: uniform over unseen
        ...     for level, score in zip(range(4), [0.1, 0.9, 0.5, 0.3]):
        ...         s.update(level, score)
        >>> sampler.sample_weights().round(3)   # rank ** -1, staleness 0.3, half of the mass uniform
        array([0.242, 0.293, 0.228, 0.237])
        >>> paper.sample_weights().round(3)     # the paper's rank ** -10, staleness 0.1
        array([0.05 , 0.899, 0.013, 0.038])
        >>> int(sampler.sample()) in range(4)
        True
    """

    def __init__(
        self,
        levels: Iterable[int] | npt.NDArray[np.integer[Any]] = range(200),
        strategy: Strategy = "value_l1",
        score_transform: str = "rank",
        temperature: float = 1.0,
        staleness_coef: float = 0.3,
        staleness_transform: str = "power",
        staleness_temperature: float = 1.0,
        replay_schedule: str = "proportionate",
        replay_prob: float = 0.5,
        min_seen_ratio: float = 1.0,
        alpha: float = 1.0,
        eps: float = 0.05,
        uniform_mass: float = 0.5,
        success_rate_alpha: float = 0.1,
        seed: int | None = None,
        temperature_end: float | None = None,
        unseen_rank: str = "seen",
        power_offset: float = 0.0,
    ) -> None:
        if callable(strategy):
            self.strategy: Strategy = strategy
        else:
            self.strategy = _check_choice("strategy", strategy, STRATEGIES)
        choices = transform_names(_TRANSFORM_PARAMS)
        self.score_transform = _check_choice("score_transform", score_transform, choices)
        self.staleness_transform = _check_choice("staleness_transform", staleness_transform, choices)
        self.replay_schedule = _check_choice("replay_schedule", replay_schedule, REPLAY_SCHEDULES)
        self.temperature = _check_positive("temperature", temperature)
        self.temperature_start = self.temperature
        self.temperature_end = (
            None if temperature_end is None else _check_positive("temperature_end", temperature_end)
        )
        self._progress = 0.0
        self.staleness_temperature = _check_positive("staleness_temperature", staleness_temperature)
        self.staleness_coef = _check_unit("staleness_coef", staleness_coef)
        self.replay_prob = _check_unit("replay_prob", replay_prob)
        self.min_seen_ratio = _check_unit("min_seen_ratio", min_seen_ratio)
        self.alpha = _check_unit("alpha", alpha, open_low=True)
        self.eps = _check_unit("eps", eps)
        self.uniform_mass = _check_unit("uniform_mass", uniform_mass)
        self.success_rate_alpha = _check_unit("success_rate_alpha", success_rate_alpha, open_low=True)
        self.unseen_rank = _check_choice("unseen_rank", unseen_rank, UNSEEN_RANKS)
        self.power_offset = _check_real("power_offset", power_offset)
        if not (math.isfinite(self.power_offset) and self.power_offset >= 0.0):
            raise ValueError(f"power_offset must be a finite number >= 0, got {power_offset!r}")
        if self.power_offset and self.score_transform != "power":
            raise ValueError(
                f"power_offset={power_offset!r} applies to score_transform='power' only, got "
                f"score_transform={self.score_transform!r}"
            )
        # h and g: the transform objects behind P_S and P_C (definition + fast sampling)
        self._h: ScoreTransform = self._score_transform_object(self.temperature)
        self._g: ScoreTransform = TRANSFORMS[self.staleness_transform](
            temperature=self.staleness_temperature, eps=self.eps
        )
        if self.learns_outcomes and self.alpha != 1.0:
            raise ValueError(
                f"alpha={alpha!r} is the step size of score averages; strategy='learnability' scores a level "
                "by its running success rate p as p*(1 - p): set its averaging with success_rate_alpha "
                "and leave alpha=1.0"
            )
        if seed is not None and (
            isinstance(seed, bool) or not isinstance(seed, (numbers.Integral, np.integer))
        ):
            raise TypeError(f"seed must be an int or None, got {type(seed).__name__} {seed!r}")
        if seed is not None and int(seed) < 0:
            raise ValueError(f"seed must be non-negative, got {seed!r}")
        self.seed = None if seed is None else int(seed)

        self._levels = _as_levels(levels)
        self._levels.flags.writeable = False
        self._index = _LevelIndex(self._levels)
        n = self._levels.size
        self._rng = np.random.default_rng(self.seed)
        self._scores = np.zeros(n, dtype=np.float64)
        self._last = np.zeros(n, dtype=np.int64)  # C_i: draw count when level i was last sampled
        self._t = 0  # c: number of levels sampled so far
        # perm[:n_seen] are the seen levels' indices, perm[n_seen:] the unseen ones; pos is its inverse.
        self._perm = np.arange(n, dtype=np.int64)
        self._pos = np.arange(n, dtype=np.int64)
        self._n_seen = 0
        self._next_index = 0  # sequential strategy
        self._num_replay = 0
        self._num_explore = 0
        self._softmax_shift = 0.0
        # learnability: running success rate and number of outcomes per level (None for other strategies)
        self._success_rate: FloatArray | None = np.zeros(n) if self.learns_outcomes else None
        self._outcomes: IntArray | None = np.zeros(n, dtype=np.int64) if self.learns_outcomes else None
        self._build_structures()

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

    @classmethod
    def paper_defaults(
        cls,
        levels: Iterable[int] | npt.NDArray[np.integer[Any]] = range(200),
        preset: str = "paper-procgen",
        **overrides: Any,
    ) -> LevelSampler:
        """A sampler with the PLR paper's settings, for reproductions (see :data:`PAPER_PRESETS`).

        :param preset: ``"paper-procgen"`` (``value_l1``, rank, ``β = 0.1``, ``ρ = 0.1``) or
            ``"paper-minigrid"`` (the same with ``ρ = 0.3``).
        :param overrides: any other :class:`LevelSampler` keyword (``seed``, ``min_seen_ratio``, ...).

        Example:
            >>> s = LevelSampler.paper_defaults(range(200), seed=0)
            >>> (s.strategy, s.score_transform, s.temperature, s.staleness_coef, s.uniform_mass)
            ('value_l1', 'rank', 0.1, 0.1, 0.0)
        """
        if not isinstance(preset, str) or preset not in PAPER_PRESETS:
            raise ValueError(f"preset={preset!r} is not supported; choose one of {', '.join(PAPER_PRESETS)}")
        return cls(levels=levels, **{**PAPER_PRESETS[preset], **overrides})

    # ------------------------------------------------------------------ public read-only state
    @property
    def levels(self) -> IntArray:
        """Level ids, in the order given at construction (read-only)."""
        return self._levels

    @property
    def scores(self) -> FloatArray:
        """Current score ``S_i`` of every level (0 for unseen levels); a copy."""
        return self._scores.copy()

    @property
    def staleness(self) -> IntArray:
        """Number of levels sampled since each level was last sampled (``c − C_i``); a copy."""
        return self._t - self._last

    @property
    def seen(self) -> npt.NDArray[np.bool_]:
        """Boolean mask of levels that have received at least one score; a copy."""
        mask = np.zeros(self._levels.size, dtype=bool)
        mask[self._perm[: self._n_seen]] = True
        return mask

    @property
    def num_levels(self) -> int:
        return int(self._levels.size)

    @property
    def num_seen(self) -> int:
        return self._n_seen

    @property
    def proportion_seen(self) -> float:
        return self._n_seen / self._levels.size

    @property
    def num_samples(self) -> int:
        """Number of levels sampled so far (the paper's episode count ``c``)."""
        return self._t

    @property
    def num_replay_samples(self) -> int:
        """How many samples replayed a seen level (PLR strategies only)."""
        return self._num_replay

    @property
    def num_explore_samples(self) -> int:
        """How many samples explored an unseen level (PLR strategies only)."""
        return self._num_explore

    @property
    def uses_scores(self) -> bool:
        """False for the ``random`` and ``sequential`` baselines, which ignore scores."""
        return self.strategy_info.uses_scores

    @functools.cached_property
    def strategy_info(self) -> StrategyInfo:
        """What the strategy needs (:class:`plr_gym.scoring.Strategy`, from the one registry)."""
        return strategy_spec(self.strategy)

    @property
    def learns_outcomes(self) -> bool:
        """True for ``strategy="learnability"``: updates are episode outcomes, scores are ``p·(1 − p)``."""
        return self.strategy_info.outcome

    @property
    def success_rate(self) -> FloatArray:
        """``strategy="learnability"``: each level's running success rate ``p`` (0 for unseen levels)."""
        if self._success_rate is None:
            raise AttributeError(
                f"success_rate is tracked for strategy='learnability', not {self.strategy!r}"
            )
        return self._success_rate.copy()

    def __len__(self) -> int:
        return int(self._levels.size)

    def __repr__(self) -> str:
        strat = getattr(self.strategy, "__name__", self.strategy)
        return (
            f"LevelSampler(num_levels={self.num_levels}, strategy={strat!r}, score_transform="
            f"{self.score_transform!r}, temperature={self.temperature}, staleness_coef={self.staleness_coef},"
            f" replay_schedule={self.replay_schedule!r}, seen={self._n_seen})"
        )

    # ------------------------------------------------------------------ sampling structures
    def _build_structures(self, reanchor: bool = False) -> None:
        n = self._levels.size
        seen_idx = self._perm[: self._n_seen]
        self._score_keys: OrderedKeys | None = None
        self._score_tree: SumTree | None = None
        self._stale_keys: OrderedKeys | None = None
        self._stale_tree: LinearStalenessTree | None = None
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

    # ------------------------------------------------------------------ sampling
    def sample(self, n: int | None = None) -> Any:
        """Draw the level for the next episode, or an array of ``n`` levels.

        ``sample(n)`` is exactly ``n`` consecutive calls to ``sample()``: each draw updates staleness.

        :param n: number of levels to draw; ``None`` (default) returns one ``int``.
        :return: a level id (``int``) or an ``np.ndarray`` of ``n`` level ids.
        """
        if n is None:
            self._check_draws_left(1)
            return int(self._levels[self._sample_index()])
        if isinstance(n, (bool, np.bool_)) or not isinstance(n, (numbers.Integral, np.integer)):
            raise TypeError(f"n must be an int or None, got {type(n).__name__} {n!r}")
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        self._check_draws_left(int(n))
        with allocating("n", n, "draw the levels in smaller batches"):
            idx = np.empty(int(n), dtype=np.int64)
        rng = self._rng.bit_generator
        saved = (rng.state, self._t, self._next_index, self._num_replay, self._num_explore)
        journal: list[tuple[int, int]] = []  # (level position, its last_sampled before this call)
        try:
            for k in range(idx.size):
                idx[k] = self._sample_index(journal)
        except BaseException:  # interrupted: undo every draw of this call
            rng_state, self._t, self._next_index, self._num_replay, self._num_explore = saved
            self._rng.bit_generator.state = rng_state
            for i, last in reversed(journal):
                self._last[i] = last
            self._build_structures()
            raise
        return self._levels[idx]

    @property
    def max_samples(self) -> int:
        """The most levels this sampler can draw in its life: the draw counter and the staleness sums
        (``num_levels`` times the counter) must stay exact (``2**53``, ``int64``)."""
        return _max_samples(self._levels.size)

    def _check_draws_left(self, n: int) -> None:
        if self._t + n > self.max_samples:
            raise ValueError(
                f"n={n} draws would take num_samples from {self._t} beyond {self.max_samples}, the most a "
                f"sampler of {self._levels.size} levels can count exactly; nothing was drawn"
            )

    def _sample_index(self, journal: list[tuple[int, int]] | None = None) -> int:
        """One draw; the counters change only once the level is marked sampled (an interrupt before
        that leaves them consistent with ``num_samples``). ``journal`` records ``(i, old last_sampled)``."""
        replay = explore = False
        if self.strategy == "random":
            i = int(self._rng.integers(self._levels.size))
        elif self.strategy == "sequential":
            i = self._next_index
        elif self._replay_decision():
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

    def _replay_decision(self) -> bool:
        n_seen, n = self._n_seen, self._levels.size
        if n_seen == 0:
            return False
        if n_seen == n:
            return True
        proportion = n_seen / n
        if proportion < self.min_seen_ratio:
            return False
        p = proportion if self.replay_schedule == "proportionate" else self.replay_prob
        return bool(self._rng.random() < p)

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
    def sample_weights(self) -> FloatArray:
        """The replay distribution ``P_replay`` over ``levels`` (zero on unseen levels).

        For the ``random`` strategy this is uniform over all levels and for ``sequential`` it is one-hot
        on the next level. With no level seen yet, it is all zeros (the next draw explores).
        """
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

    def replay_probability(self) -> float:
        """Probability that the next :meth:`sample` replays a seen level (PLR strategies)."""
        n_seen, n = self._n_seen, self._levels.size
        if n_seen == 0 or not self.uses_scores:
            return 0.0
        if n_seen == n:
            return 1.0
        if n_seen / n < self.min_seen_ratio:
            return 0.0
        return n_seen / n if self.replay_schedule == "proportionate" else self.replay_prob

    # ------------------------------------------------------------------ updates
    def update(self, level: int, score: float) -> None:
        """Record the score of one completed episode on ``level``.

        ``S ← (1 − alpha)·S + alpha·score`` for a seen level; an unseen level takes ``score`` and becomes
        seen. NaN/inf scores raise ``ValueError`` and leave the sampler unchanged.
        """
        i = self._index.index(level)
        self._update_index(i, self._check_score(score, level))

    def update_batch(
        self, levels: Iterable[int] | npt.NDArray[Any], scores: Iterable[float] | npt.NDArray[Any]
    ) -> None:
        """Apply :meth:`update` to each ``(level, score)`` pair, in order.

        All inputs are validated before anything is stored: one bad pair leaves the sampler unchanged.
        """
        refuse_masked("levels", levels)
        refuse_masked("scores", scores)
        lv = np.asarray(as_sequence("levels", levels, "level ids (one per score)"))
        sc = np.asarray(as_sequence("scores", scores, "numbers (one per level)"))
        if lv.ndim != 1 or sc.ndim != 1 or lv.shape != sc.shape:
            raise ValueError(f"levels and scores must be 1-D of equal length, got {lv.shape} and {sc.shape}")
        if lv.size == 0:
            return
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
        if idx.size >= _BULK_UPDATE and np.unique(idx).size == idx.size:
            # Same result as the loop below, with the sampling structures rebuilt once.
            saved = (
                self._scores.copy(),
                self._perm.copy(),
                self._pos.copy(),
                self._n_seen,
                self._softmax_shift,
                None if self._success_rate is None else self._success_rate.copy(),
                None if self._outcomes is None else self._outcomes.copy(),
            )
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
                raise
            return
        if self._score_keys is not None and idx.size >= max(
            _ORDERED_BULK_MIN, self._levels.size // _ORDERED_BULK_RATIO
        ):
            self._update_then_rebuild(idx, scf)
            return
        for i, s in zip(idx.tolist(), scf.tolist()):
            self._update_index(i, s)

    def _update_then_rebuild(self, idx: IntArray, scores: FloatArray) -> None:
        """The loop of :meth:`_apply_update` over the pairs in order (the same arithmetic, repeated levels
        included), on the arrays only, then the sampling structures rebuilt once. For an ordered score
        transform the rebuilt structures are the ones the updates one by one would leave: they are fixed
        by the scores, the seen levels and their last draws (ties by index). All or nothing."""
        saved = (
            self._scores.copy(),
            self._perm.copy(),
            self._pos.copy(),
            self._n_seen,
            None if self._success_rate is None else self._success_rate.copy(),
            None if self._outcomes is None else self._outcomes.copy(),
        )
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
            self._scores, self._perm, self._pos, self._n_seen, self._success_rate, self._outcomes = saved
            self._build_structures()
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

    # ------------------------------------------------------------------ checkpoints
    def _config(self) -> dict[str, Any]:
        strategy = self.strategy
        if callable(strategy):
            strategy = "callable:" + getattr(strategy, "__qualname__", type(strategy).__name__)
        return {
            "strategy": strategy,
            "score_transform": self.score_transform,
            "temperature": self.temperature_start,
            "temperature_end": self.temperature_end,
            "staleness_coef": self.staleness_coef,
            "staleness_transform": self.staleness_transform,
            "staleness_temperature": self.staleness_temperature,
            "replay_schedule": self.replay_schedule,
            "replay_prob": self.replay_prob,
            "min_seen_ratio": self.min_seen_ratio,
            "alpha": self.alpha,
            "eps": self.eps,
            "uniform_mass": self.uniform_mass,
            "success_rate_alpha": self.success_rate_alpha,
            "seed": self.seed,
            "unseen_rank": self.unseen_rank,
            "power_offset": self.power_offset,
        }

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue exactly where this sampler is: config, scores, staleness, RNG.

        Values are numpy arrays and JSON-compatible Python objects (no pickling needed).
        """
        state: dict[str, Any] = {
            "version": _STATE_VERSION,
            "config": self._config(),
            "levels": self._levels.copy(),
            "scores": self._scores.copy(),
            "last_sampled": self._last.copy(),
            "order": self._perm.copy(),
            "num_seen": self._n_seen,
            "num_samples": self._t,
            "next_index": self._next_index,
            "num_replay": self._num_replay,
            "num_explore": self._num_explore,
            "softmax_shift": self._softmax_shift,
            "rng": self._rng.bit_generator.state,
            "progress": self._progress,
        }
        if self._success_rate is not None and self._outcomes is not None:
            state["success_rate"] = self._success_rate.copy()
            state["outcomes"] = self._outcomes.copy()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict`. The levels and configuration must match this sampler's.

        Every member is checked (shapes, dtypes, ranges, consistency of the counters, the RNG state)
        before anything is assigned: a state that is refused (``ValueError``) leaves the sampler exactly
        as it was.
        """
        checked = self._validated_state(state)
        self.seed = checked["seed"]
        self._rng = checked["rng"]
        self._scores = checked["scores"]
        self._last = checked["last_sampled"]
        self._perm = checked["order"]
        self._pos = checked["pos"]
        self._n_seen = checked["num_seen"]
        self._t = checked["num_samples"]
        self._next_index = checked["next_index"]
        self._num_replay = checked["num_replay"]
        self._num_explore = checked["num_explore"]
        self._softmax_shift = checked["softmax_shift"]
        if checked["success_rate"] is not None:
            self._success_rate, self._outcomes = checked["success_rate"], checked["outcomes"]
        self._apply_progress(checked["progress"])  # β of a schedule (rebuilds if it changed)
        self._build_structures()

    def _validated_state(self, state: Any) -> dict[str, Any]:
        """Check every member of a :meth:`state_dict` against this sampler; return the values to assign.

        Raises ``ValueError`` naming the first bad member; assigns nothing.
        """
        if not isinstance(state, dict) or state.get("version") != _STATE_VERSION:
            raise ValueError(f"not a LevelSampler state (version {_STATE_VERSION}): {type(state).__name__}")
        missing = [k for k in _STATE_KEYS if k not in state]
        if missing:
            raise ValueError(f"LevelSampler state lacks {', '.join(missing)}")
        levels = _state_array(state, "levels", np.int64)
        if not np.array_equal(levels, self._levels):
            raise ValueError("state levels differ from this sampler's levels")
        if not isinstance(state["config"], dict):
            raise ValueError(f"state 'config' must be a dict, got {type(state['config']).__name__}")
        mine, theirs = self._config(), dict(state["config"])
        # the seed only initialises the RNG, whose exact state is restored below; options added after a
        # state was written take their (behaviour-preserving) defaults
        theirs.setdefault("uniform_mass", 0.0)
        theirs.setdefault("success_rate_alpha", 0.1)
        theirs.setdefault("temperature_end", None)
        theirs.setdefault("unseen_rank", "seen")
        theirs.setdefault("power_offset", 0.0)
        diff = sorted(k for k in mine if k != "seed" and mine[k] != theirs.get(k))
        if diff:
            details = ", ".join(f"{k}: state has {theirs.get(k)!r}, sampler has {mine[k]!r}" for k in diff)
            raise ValueError(f"state was saved with a different configuration ({details})")
        seed = theirs.get("seed")
        if seed is not None and (not _is_int(seed) or int(seed) < 0):
            raise ValueError(f"state config 'seed' must be a non-negative int or None, got {seed!r}")
        n = self._levels.size
        order = _state_array(state, "order", np.int64)
        if order.shape != (n,) or not np.array_equal(np.sort(order), np.arange(n)):
            raise ValueError("state 'order' is not a permutation of the level positions")
        scores = _state_array(state, "scores", np.float64)
        if scores.shape != (n,) or not np.isfinite(scores).all():
            raise ValueError(f"state 'scores' must be {n} finite floats aligned with levels")
        num_seen = _state_int(state, "num_seen", 0, n)
        num_samples = _state_int(state, "num_samples", 0, _max_samples(n))
        last = _state_array(state, "last_sampled", np.int64)
        if last.shape != (n,) or (last < 0).any() or (last > num_samples).any():
            raise ValueError(
                f"state 'last_sampled' must be {n} ints in [0, num_samples={num_samples}] aligned with levels"
            )
        if self._h.nonnegative and self.uses_scores and (scores[order[:num_seen]] < 0).any():
            raise ValueError(
                f"state 'scores' has negative scores, which score_transform={self.score_transform!r} refuses"
            )
        next_index = _state_int(state, "next_index", 0, n - 1)
        num_replay = _state_int(state, "num_replay", 0, num_samples)
        num_explore = _state_int(state, "num_explore", 0, num_samples - num_replay)
        shift = state["softmax_shift"]
        if isinstance(shift, bool) or not isinstance(shift, numbers.Real) or not math.isfinite(float(shift)):
            raise ValueError(f"state 'softmax_shift' must be a finite float, got {shift!r}")
        progress = state.get("progress", 0.0)  # states written before schedules existed: the start
        if (
            isinstance(progress, (bool, np.bool_))
            or not isinstance(progress, (numbers.Real, np.floating))
            or not 0.0 <= float(progress) <= 1.0
        ):
            raise ValueError(f"state 'progress' must be a number in [0, 1], got {progress!r}")
        rate = outcomes = None
        if self.learns_outcomes:
            if "success_rate" not in state or "outcomes" not in state:
                raise ValueError("state of a learnability sampler must hold 'success_rate' and 'outcomes'")
            rate = _state_array(state, "success_rate", np.float64)
            outcomes = _state_array(state, "outcomes", np.int64)
            if rate.shape != (n,) or outcomes.shape != (n,):
                raise ValueError(f"state 'success_rate'/'outcomes' must be {n} values aligned with levels")
            if (
                not (np.isfinite(rate).all() and (rate >= 0).all() and (rate <= 1).all())
                or (outcomes < 0).any()
            ):
                raise ValueError("state 'success_rate' must lie in [0, 1] and 'outcomes' be non-negative")
            if not np.allclose(scores, rate * (1.0 - rate), rtol=0.0, atol=1e-12):
                raise ValueError(
                    "state 'scores' of a learnability sampler must equal success_rate * (1 - success_rate)"
                )
        pos = np.empty(n, dtype=np.int64)
        pos[order] = np.arange(n)
        return {
            "progress": float(progress),
            "success_rate": None if rate is None else rate.copy(),
            "outcomes": None if outcomes is None else outcomes.copy(),
            "seed": None if seed is None else int(seed),
            "rng": _state_rng(state["rng"]),
            "scores": scores.copy(),
            "last_sampled": last.copy(),
            "order": order.copy(),
            "pos": pos,
            "num_seen": num_seen,
            "num_samples": num_samples,
            "next_index": next_index,
            "num_replay": num_replay,
            "num_explore": num_explore,
            "softmax_shift": float(shift),
        }

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write :meth:`state_dict` to ``path`` as ``.npz`` (arrays + JSON; loading never unpickles)."""
        state = self.state_dict()
        arrays = {k: state.pop(k) for k in (*_ARRAY_KEYS, *_OUTCOME_KEYS) if k in state}
        save_npz(path, {"meta": np.array(json.dumps(state)), **arrays})

    @classmethod
    def load(cls, path: str | os.PathLike[str], strategy: Strategy | None = None) -> LevelSampler:
        """Build a sampler from a file written by :meth:`save`; it draws what the saved one would have.

        :param strategy: the callable, if the sampler was saved with a callable strategy (code is
            never stored in the file).
        """
        state = _read_state(path)
        if not isinstance(state.get("config"), dict):
            raise ValueError(f"{os.fspath(path)} is not a LevelSampler checkpoint: no 'config' object")
        config = dict(state["config"])
        known = [k for k in inspect.signature(cls.__init__).parameters if k not in ("self", "levels")]
        unknown = sorted(set(config) - set(known))
        if unknown or "strategy" not in config:
            raise ValueError(
                f"{os.fspath(path)}: config has unknown keys {unknown} or lacks 'strategy'; keys are "
                f"{', '.join(known)}"
            )
        saved = config.pop("strategy")
        if isinstance(saved, str) and saved.startswith("callable:"):
            if strategy is None or not callable(strategy):
                raise ValueError(
                    f"{os.fspath(path)} was saved with strategy {saved!r}; pass strategy=<the callable>"
                )
            if "callable:" + getattr(strategy, "__qualname__", type(strategy).__name__) != saved:
                raise ValueError(f"strategy {strategy!r} does not match the saved {saved!r}")
            config["strategy"] = strategy
        else:
            config["strategy"] = saved
        try:
            sampler = cls(levels=state["levels"], **config)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{os.fspath(path)} holds an invalid LevelSampler configuration: {exc}") from exc
        sampler.load_state_dict(state)
        return sampler

    def load_from(self, path: str | os.PathLike[str]) -> None:
        """Restore this sampler's state from a file written by :meth:`save`."""
        self.load_state_dict(_read_state(path))

    def set_progress(self, progress: float) -> None:
        """Tell the sampler how far training is, ``progress`` in ``[0, 1]`` (share of the budget done).

        With ``temperature_end``, ``β`` becomes ``temperature + (temperature_end − temperature)·progress``
        and the sampling structures are rebuilt (``O(N log N)``, once per call: call it per rollout, not
        per episode). Without it, only the progress is recorded. Part of the level-source protocol;
        saved in :meth:`state_dict`.

        Example:
            >>> s = LevelSampler(range(4), temperature=1.0, temperature_end=0.1)
            >>> s.set_progress(0.5)
            >>> round(s.temperature, 2)
            0.55
        """
        if (
            isinstance(progress, (bool, np.bool_))
            or not isinstance(progress, (numbers.Real, np.floating))
            or not 0.0 <= float(progress) <= 1.0
        ):
            raise ValueError(f"progress must be a number in [0, 1], got {progress!r}")
        self._apply_progress(float(progress))

    def _apply_progress(self, progress: float) -> None:
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

    @property
    def progress(self) -> float:
        """The last :meth:`set_progress` value (0 before any)."""
        return self._progress

    # The level-source protocol (:class:`plr_gym.source.LevelSource`), through which the wrappers and
    # callbacks use a sampler: a level per episode, no rollout plan.
    level_dtype: np.dtype[Any] = np.dtype(np.int64)
    plans_rollouts = False
    rollout_mode = "none"
    last_rollout_mode = "none"

    @property
    def has_scores(self) -> bool:
        """True once a score has been recorded (a level is seen)."""
        return self._n_seen > 0

    def begin_rollout(self) -> bool:
        """Level source: start a rollout (remembers the sample counters for ``replay_fraction``).

        :return: ``False``: levels are drawn per episode, the envs never need to restart.
        """
        self._rollout_counts = (self._num_replay, self._num_explore)
        return False

    def next_levels(self, envs: npt.NDArray[np.int64]) -> IntArray:
        """Level source: one freshly sampled level per env of ``envs``, as an ``int64`` array."""
        n = int(np.asarray(envs).size)
        levels = np.asarray(self.sample(n))
        if levels.shape != (n,):  # a subclass overriding sample()
            raise ValueError(
                f"sampler.sample({n}) must return {n} level ids, got an array of shape {levels.shape}"
            )
        if type(self).sample is not LevelSampler.sample:  # only an overriding sample() can stray
            try:
                self._index.indices(levels)
            except (KeyError, TypeError) as exc:
                msg = exc.args[0] if exc.args else str(exc)
                raise ValueError(f"the sampler returned a level it does not hold: {msg}") from exc
        return levels.astype(np.int64, copy=False)

    def end_rollout(self) -> None:
        """Level source: nothing to close (levels are drawn per episode)."""

    def discard_unplayed(self) -> None:
        """Level source: nothing to forget (each level is drawn when its episode starts)."""

    def retained_levels(self) -> None:
        """Level source: ``None``, a sampler keeps every level."""
        return None

    def refused(self, exc: BaseException, levels: list[Any]) -> Exception | None:
        """Level source: an env refusing a level id is the env's error, re-raised as it is."""
        return None

    def rollout_stats(self, full: bool) -> dict[str, Any]:
        """Level source: ``replay_fraction`` (of the episodes started since :meth:`begin_rollout`),
        ``num_seen``, ``score_mean``, ``score_max`` and, with ``full`` (``O(N log N)``),
        ``weight_entropy`` of the replay distribution and the ``scores`` of the seen levels."""
        replay0, explore0 = getattr(self, "_rollout_counts", (self._num_replay, self._num_explore))
        replays = self._num_replay - replay0
        started = replays + self._num_explore - explore0
        stats: dict[str, Any] = {"num_seen": self.num_seen}
        if started:
            stats["replay_fraction"] = replays / started
        if self.num_seen:
            scores = self.scores[self.seen]
            stats["score_mean"] = float(scores.mean())
            stats["score_max"] = float(scores.max())
            if full:
                w = self.sample_weights()
                w = w[w > 0]
                stats["weight_entropy"] = float(-(w * np.log(w)).sum())
                stats["scores"] = scores
        return stats

    def checkpoint_files(self) -> dict[str, tuple[Callable[[Any], None], Callable[[Any], None]]]:
        """Level source: ``plr_sampler.npz`` in a checkpoint directory."""
        return {"plr_sampler.npz": (self.save, self.load_from)}


def _read_state(path: str | os.PathLike[str]) -> dict[str, Any]:
    npz = load_npz(path)
    try:
        state = json.loads(str(npz["meta"]))
        if not isinstance(state, dict):
            raise ValueError("its metadata is not a JSON object")
        for k in _ARRAY_KEYS:
            state[k] = npz[k]
        for k in _OUTCOME_KEYS:  # learnability samplers only
            if k in npz:
                state[k] = npz[k]
    except (KeyError, ValueError) as exc:
        raise ValueError(f"{os.fspath(path)} is not a LevelSampler checkpoint: {exc}") from exc
    return state


_STATE_KEYS = (
    "config",
    "levels",
    "scores",
    "last_sampled",
    "order",
    "num_seen",
    "num_samples",
    "next_index",
    "num_replay",
    "num_explore",
    "softmax_shift",
    "rng",
)


def _is_int(value: Any) -> bool:
    return isinstance(value, (numbers.Integral, np.integer)) and not isinstance(value, (bool, np.bool_))


def _max_samples(num_levels: int) -> int:
    """See :attr:`LevelSampler.max_samples`."""
    return min(2**53, (2**63 - 1) // max(num_levels, 1))


def _state_int(state: dict[str, Any], key: str, low: int, high: int | None) -> int:
    """``state[key]`` as an int in ``[low, high]`` (``high=None``: no upper bound), else ``ValueError``."""
    value = state[key]
    if not _is_int(value) or int(value) < low or (high is not None and int(value) > high):
        bound = f"[{low}, {high}]" if high is not None else f">= {low}"
        raise ValueError(f"state '{key}' must be an int {bound}, got {value!r}")
    return int(value)


def _state_array(state: dict[str, Any], key: str, dtype: Any) -> npt.NDArray[Any]:
    """``state[key]`` as a 1-D array of ``dtype`` (ints for ints, reals for floats), else ``ValueError``."""
    try:
        arr = np.asarray(state[key])
    except (TypeError, ValueError) as exc:  # ragged lists
        raise ValueError(f"state '{key}' is not an array: {exc}") from exc
    kind = "iu" if np.dtype(dtype).kind in "iu" else "iuf"
    if arr.ndim != 1 or (arr.size and arr.dtype.kind not in kind):
        raise ValueError(
            f"state '{key}' must be a 1-D array of {np.dtype(dtype).name}, got {arr.dtype} {arr.shape}"
        )
    if arr.dtype.kind == "u" and arr.size and int(arr.max()) > np.iinfo(np.int64).max:
        raise ValueError(f"state '{key}' holds values beyond int64")
    return arr.astype(dtype)


def _state_rng(rng_state: Any) -> np.random.Generator:
    """A generator restored from a ``bit_generator.state`` dict, else ``ValueError`` naming ``rng``."""
    if not isinstance(rng_state, dict) or not isinstance(rng_state.get("bit_generator"), str):
        raise ValueError(
            f"state 'rng' must be a numpy bit_generator state dict, got {type(rng_state).__name__}"
        )
    name = rng_state["bit_generator"]
    cls = getattr(np.random, name, None)
    if name not in ("PCG64", "PCG64DXSM", "MT19937", "Philox", "SFC64") or cls is None:
        raise ValueError(f"state 'rng' has an unknown bit generator {name!r}")
    try:
        bit_generator = cls()
        bit_generator.state = rng_state
    except Exception as exc:  # numpy raises TypeError, ValueError, KeyError, IndexError, OverflowError...
        raise ValueError(f"state 'rng' is not a valid {name} state: {exc!r}") from exc
    return np.random.Generator(bit_generator)


def sampler_defaults() -> dict[str, Any]:
    """:class:`LevelSampler`'s keyword defaults (``levels`` excluded): the one place the CLI reads them from.

    Example:
        >>> sampler_defaults()["replay_schedule"]
        'proportionate'
    """
    params = inspect.signature(LevelSampler.__init__).parameters
    return {
        name: p.default
        for name, p in params.items()
        if name not in ("self", "levels") and p.default is not inspect.Parameter.empty
    }
