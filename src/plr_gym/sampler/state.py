"""The checkpoint record: what ``LevelSampler.state_dict()`` holds, how it is checked and written.

One record, every field with its type and shape (``N`` = number of levels; arrays aligned with
``levels``). :meth:`_Checkpoints._validated_state` checks the fields in this order, each by a short
function, and refuses the first bad one with a ``ValueError`` naming it; nothing is assigned until every
field passed. ``save`` writes the arrays as ``.npz`` members and the rest as one JSON ``meta`` member.

=================  ==================  ==============================================================
field              type, shape         check
=================  ==================  ==============================================================
``version``        int                 ``1``
``config``         dict                the constructor's options; equal to the sampler's except
                                       ``seed`` (options added later take their old behaviour)
``levels``         int64 ``(N,)``      equal to the sampler's levels
``order``          int64 ``(N,)``      a permutation of ``0 .. N−1``: seen positions first
``scores``         float64 ``(N,)``    finite (``>= 0`` on seen levels for ``power``-like transforms)
``num_seen``       int                 in ``[0, N]``
``num_samples``    int                 in ``[0, max_samples]``
``last_sampled``   int64 ``(N,)``      in ``[0, num_samples]``
``next_index``     int                 in ``[0, N−1]``
``num_replay``     int                 in ``[0, num_samples]``
``num_explore``    int                 in ``[0, num_samples − num_replay]``
``softmax_shift``  float               finite
``progress``       float               in ``[0, 1]``; optional (older states: 0)
``success_rate``   float64 ``(N,)``    ``learnability`` only: in ``[0, 1]``, and
                                       ``scores == success_rate·(1 − success_rate)``
``outcomes``       int64 ``(N,)``      ``learnability`` only: ``>= 0``
``rng``            dict                a numpy ``bit_generator.state`` of a known bit generator
=================  ==================  ==============================================================
"""

from __future__ import annotations

import inspect
import json
import math
import numbers
import os
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from plr_gym.checkpoint import load_npz, save_npz
from plr_gym.sampler.options import _check_progress, _is_int, _max_samples
from plr_gym.sampler.record import FloatArray, IntArray, _SamplerRecord

_STATE_VERSION = 1
_ARRAY_KEYS = ("levels", "scores", "last_sampled", "order")
_OUTCOME_KEYS = ("success_rate", "outcomes")  # learnability only
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


class _Checkpoints(_SamplerRecord):
    """``state_dict``/``load_state_dict`` (a part of :class:`~plr_gym.sampler.LevelSampler`)."""

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

    def _state_record(self) -> dict[str, Any]:
        """The record of the table above, copied from the live fields."""
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

    def _assign_state(self, checked: dict[str, Any]) -> None:
        """Assign a record :meth:`_validated_state` returned, then rebuild what derives from it."""
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
        _check_header(state)
        levels = _state_array(state, "levels", np.int64)
        if not np.array_equal(levels, self._levels):
            raise ValueError("state levels differ from this sampler's levels")
        seed = self._checked_config(state)
        arrays = self._checked_arrays(state)
        counters = _checked_counters(state, self._levels.size, arrays["num_samples"])
        rate, outcomes = self._checked_outcomes(state, arrays["scores"])
        pos = np.empty(self._levels.size, dtype=np.int64)
        pos[arrays["order"]] = np.arange(self._levels.size)
        return {
            "progress": counters.pop("progress"),
            "success_rate": None if rate is None else rate.copy(),
            "outcomes": None if outcomes is None else outcomes.copy(),
            "seed": seed,
            "rng": _state_rng(state["rng"]),
            "scores": arrays["scores"].copy(),
            "last_sampled": arrays["last_sampled"].copy(),
            "order": arrays["order"].copy(),
            "pos": pos,
            "num_seen": arrays["num_seen"],
            "num_samples": arrays["num_samples"],
            **counters,
        }

    def _checked_config(self, state: dict[str, Any]) -> int | None:
        """``config`` equal to this sampler's (``seed`` aside); returns the saved seed."""
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
        return None if seed is None else int(seed)

    def _checked_arrays(self, state: dict[str, Any]) -> dict[str, Any]:
        """``order``, ``scores``, ``num_seen``, ``num_samples`` and ``last_sampled``, in that order."""
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
        return {
            "order": order,
            "scores": scores,
            "num_seen": num_seen,
            "num_samples": num_samples,
            "last_sampled": last,
        }

    def _checked_outcomes(
        self, state: dict[str, Any], scores: FloatArray
    ) -> tuple[FloatArray | None, IntArray | None]:
        """``success_rate`` and ``outcomes`` of a ``learnability`` sampler (``None`` for the others)."""
        if not self.learns_outcomes:
            return None, None
        n = self._levels.size
        if "success_rate" not in state or "outcomes" not in state:
            raise ValueError("state of a learnability sampler must hold 'success_rate' and 'outcomes'")
        rate = _state_array(state, "success_rate", np.float64)
        outcomes = _state_array(state, "outcomes", np.int64)
        if rate.shape != (n,) or outcomes.shape != (n,):
            raise ValueError(f"state 'success_rate'/'outcomes' must be {n} values aligned with levels")
        if not (np.isfinite(rate).all() and (rate >= 0).all() and (rate <= 1).all()) or (outcomes < 0).any():
            raise ValueError("state 'success_rate' must lie in [0, 1] and 'outcomes' be non-negative")
        if not np.allclose(scores, rate * (1.0 - rate), rtol=0.0, atol=1e-12):
            raise ValueError(
                "state 'scores' of a learnability sampler must equal success_rate * (1 - success_rate)"
            )
        return rate, outcomes


def _check_header(state: Any) -> None:
    """A dict of this version holding every required member."""
    if not isinstance(state, dict) or state.get("version") != _STATE_VERSION:
        raise ValueError(f"not a LevelSampler state (version {_STATE_VERSION}): {type(state).__name__}")
    missing = [k for k in _STATE_KEYS if k not in state]
    if missing:
        raise ValueError(f"LevelSampler state lacks {', '.join(missing)}")


def _checked_counters(state: dict[str, Any], n: int, num_samples: int) -> dict[str, Any]:
    """``next_index``, ``num_replay``, ``num_explore``, ``softmax_shift`` and ``progress``, in that order."""
    next_index = _state_int(state, "next_index", 0, n - 1)
    num_replay = _state_int(state, "num_replay", 0, num_samples)
    num_explore = _state_int(state, "num_explore", 0, num_samples - num_replay)
    shift = state["softmax_shift"]
    if isinstance(shift, bool) or not isinstance(shift, numbers.Real) or not math.isfinite(float(shift)):
        raise ValueError(f"state 'softmax_shift' must be a finite float, got {shift!r}")
    # states written before schedules existed: the start
    progress = _check_progress("state 'progress'", state.get("progress", 0.0))
    return {
        "next_index": next_index,
        "num_replay": num_replay,
        "num_explore": num_explore,
        "softmax_shift": float(shift),
        "progress": progress,
    }


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


# -------------------------------------------------------------------------------------- files
def _write_state(state: dict[str, Any], path: str | os.PathLike[str]) -> None:
    """A :meth:`state_dict` as ``.npz``: the arrays as members, the rest as JSON (never pickled)."""
    arrays = {k: state.pop(k) for k in (*_ARRAY_KEYS, *_OUTCOME_KEYS) if k in state}
    save_npz(path, {"meta": np.array(json.dumps(state)), **arrays})


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


def _saved_config(
    state: dict[str, Any],
    path: str | os.PathLike[str],
    init: Callable[..., Any],
    strategy: Callable[..., float] | str | None,
) -> dict[str, Any]:
    """The constructor keywords of a saved sampler (``levels`` aside), with the callable ``strategy`` put
    back where the file names one (code is never stored in the file). ``init`` is the constructor."""
    if not isinstance(state.get("config"), dict):
        raise ValueError(f"{os.fspath(path)} is not a LevelSampler checkpoint: no 'config' object")
    config = dict(state["config"])
    known = [k for k in inspect.signature(init).parameters if k not in ("self", "levels")]
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
    return config
