"""The sampler's options: accepted names, the paper's presets, and the argument checks.

Every :class:`~plr_gym.sampler.LevelSampler` argument is checked here, at construction, with a message
that names the argument and what it accepts (SB3's habit). The level index (level id -> position in
``levels``) lives here too: it is how every argument naming a level is checked.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable
from typing import Any

import numpy as np
import numpy.typing as npt

from plr_gym._levels import check_level_ids, refuse_masked
from plr_gym._sizes import allocating
from plr_gym.scoring import STRATEGY_SPECS
from plr_gym.transforms import transform_names

IntArray = npt.NDArray[np.int64]

#: Strategies understood by :class:`LevelSampler` (``random`` and ``sequential`` ignore scores).
STRATEGIES: tuple[str, ...] = tuple(STRATEGY_SPECS)
#: The transform parameters a :class:`LevelSampler` passes (see :mod:`plr_gym.transforms`).
_TRANSFORM_PARAMS = ("temperature", "eps")
#: Score transforms ``h`` for ``P_S``: the names in :data:`plr_gym.transforms.TRANSFORMS` that
#: :class:`LevelSampler` accepts (taken at import; a transform registered later is accepted too).
SCORE_TRANSFORMS: tuple[str, ...] = transform_names(_TRANSFORM_PARAMS)
#: Staleness transforms ``g`` for ``P_C`` (same family as the score transforms).
STALENESS_TRANSFORMS: tuple[str, ...] = SCORE_TRANSFORMS
#: Replay schedules (see :mod:`plr_gym.sampler.schedule`).
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


#: The smallest positive normal float: a temperature or half-life below it is a subnormal whose
#: reciprocal overflows to inf (issue 43, D13: ``temperature=1e-320``).
_SMALLEST_DIVISOR = float(np.finfo(np.float64).tiny)


def _check_positive(name: str, value: Any) -> float:
    """A finite number > 0 that something is divided by (a temperature, a half-life): a subnormal value
    is refused, since ``1/value`` would overflow."""
    out = _check_real(name, value)
    if out <= 0.0:
        raise ValueError(f"{name} must be > 0, got {value!r}")
    if out < _SMALLEST_DIVISOR:
        raise ValueError(
            f"{name} must be at least {_SMALLEST_DIVISOR:.4g} (1/{name} must be finite), got {value!r}"
        )
    return out


def _check_seed(seed: Any) -> int | None:
    """``seed=`` as an int or ``None``: a non-negative ``int`` (numpy's too), never a bool."""
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (numbers.Integral, np.integer))):
        raise TypeError(f"seed must be an int or None, got {type(seed).__name__} {seed!r}")
    if seed is not None and int(seed) < 0:
        raise ValueError(f"seed must be non-negative, got {seed!r}")
    return None if seed is None else int(seed)


def _check_progress(name: str, progress: Any) -> float:
    """A share of training done: a real number in ``[0, 1]`` (``name`` is how the message calls it)."""
    if (
        isinstance(progress, (bool, np.bool_))
        or not isinstance(progress, (numbers.Real, np.floating))
        or not 0.0 <= float(progress) <= 1.0
    ):
        raise ValueError(f"{name} must be a number in [0, 1], got {progress!r}")
    return float(progress)


def _is_int(value: Any) -> bool:
    return isinstance(value, (numbers.Integral, np.integer)) and not isinstance(value, (bool, np.bool_))


def _max_samples(num_levels: int) -> int:
    """See :attr:`LevelSampler.max_samples`."""
    return min(2**53, (2**63 - 1) // max(num_levels, 1))


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


def _check_power_offset(power_offset: Any, score_transform: str) -> float:
    """``power_offset``: a finite number >= 0, non-zero only with the ``power`` score transform."""
    out = _check_real("power_offset", power_offset)
    if out < 0.0:
        raise ValueError(f"power_offset must be a finite number >= 0, got {power_offset!r}")
    if out and score_transform != "power":
        raise ValueError(
            f"power_offset={power_offset!r} applies to score_transform='power' only, got "
            f"score_transform={score_transform!r}"
        )
    return out
