"""LevelBuffer: Prioritized Level Replay over open-ended level generators (Robust PLR, ACCEL).

When levels come from a generator (a fresh seed out of 2^31, a random maze layout) there is no finite
level set to score. Robust PLR (Jiang, Dennis, Parker-Holder, Foerster, Grefenstette & Rocktäschel,
NeurIPS 2021) keeps a bounded buffer of the most useful levels found so far; ACCEL (Parker-Holder et al.,
ICML 2022) adds mutations of replayed levels. The API follows JaxUED's ``LevelSampler``.

Replay distribution over the ``size`` stored levels::

    P = (1 − staleness_coef) · P_S + staleness_coef · P_C
    P_S: "rank"  ∝ 1 / rank(S_i)^(1/temperature)      "topk": uniform over the ``topk`` best scores
         "max": uniform over the levels tied for the best score      (see :mod:`plr_gym.transforms`)
    P_C ∝ c − C_i   (c: level-episode counter, C_i: when level i was last inserted or replayed)

The counter ``c`` ticks once per inserted level and once per replayed level.
"""

from __future__ import annotations

import json
import numbers
import os
from collections.abc import Iterable
from typing import Any

import numpy as np
import numpy.typing as npt

from plr_gym._levels import _decode, _encode, as_sequence, level_key
from plr_gym._sizes import allocating
from plr_gym._structures import LinearStalenessTree
from plr_gym.checkpoint import load_npz, save_npz
from plr_gym.sampler.options import _check_positive, _check_real, _check_unit, _is_int
from plr_gym.sampler.state import _state_array, _state_int, _state_rng
from plr_gym.transforms import TRANSFORMS, OrderedTransform, transform_names

__all__ = ["LevelBuffer", "buffer_transforms"]

FloatArray = npt.NDArray[np.float64]
_STATE_VERSION = 1

#: The transform parameters a :class:`LevelBuffer` passes (see :mod:`plr_gym.transforms`).
_TRANSFORM_PARAMS = ("temperature", "topk")


def buffer_transforms() -> tuple[str, ...]:
    """The score transforms :class:`LevelBuffer` accepts: the registered transforms that need only the
    order of the scores (:class:`~plr_gym.transforms.OrderedTransform`) and read only ``temperature`` and
    ``topk``.

    Example:
        >>> buffer_transforms()
        ('rank', 'max', 'topk')
    """
    return transform_names(_TRANSFORM_PARAMS, OrderedTransform)


class LevelBuffer:
    """A bounded buffer of levels with PLR scores, for open-ended level generators.

    :param capacity: maximum number of stored levels (>= 1).
    :param replay_prob: probability of replaying from the buffer (instead of trying new levels) once the
        buffer is ``min_fill_ratio`` full, in ``[0, 1]``. Default 0.95 (JaxUED / ACCEL).
    :param staleness_coef: weight of the staleness distribution ``P_C``, in ``[0, 1]``. Default 0.5.
    :param min_fill_ratio: fraction of ``capacity`` that must be filled before any replay, in ``[0, 1]``.
    :param score_transform: ``"rank"`` (``1/rank^(1/temperature)``), ``"topk"`` (uniform over the
        ``topk`` highest scores) or ``"max"`` (uniform over the levels tied for the highest score); any
        transform of :func:`buffer_transforms`.
    :param temperature: temperature of the rank transform (> 0). Default 1.0 (Robust PLR uses 0.3).
    :param topk: ``k`` of the top-k transform (>= 1).
    :param duplicate_check: if True, inserting a level already stored (equal by value) updates that
        entry's score instead of adding a copy.
    :param seed: seed of the buffer's own random generator.

    Levels are any Python value (ints, numpy arrays, dicts of arrays); :meth:`find` and ``duplicate_check``
    compare them by value. Each stored level has a score and an ``extra`` dict (e.g. ``max_return`` for
    the MaxMC strategy).

    **Cost.** :meth:`sample_replay_level` is ``O(log capacity)``; :meth:`insert` into a full buffer
    computes the full weight vector to find the lowest-weighted level, ``O(capacity log capacity)``.

    Example:
        >>> from plr_gym import LevelBuffer
        >>> buf = LevelBuffer(capacity=2, seed=0)
        >>> buf.insert(101, score=0.5), buf.insert(202, score=0.1)
        (0, 1)
        >>> buf.insert(303, score=0.05)     # full, and does not beat the lowest-weighted level
        -1
        >>> buf.insert(404, score=0.9)      # replaces the lowest-weighted level (202)
        1
        >>> buf.levels, buf.find(202)
        ([101, 404], -1)
        >>> index, level = buf.sample_replay_level()
        >>> level in (101, 404)
        True
    """

    def __init__(
        self,
        capacity: int,
        replay_prob: float = 0.95,
        staleness_coef: float = 0.5,
        min_fill_ratio: float = 1.0,
        score_transform: str = "rank",
        temperature: float = 1.0,
        topk: int = 1,
        duplicate_check: bool = False,
        seed: int | None = None,
    ) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, (numbers.Integral, np.integer)):
            raise TypeError(f"capacity must be an int, got {type(capacity).__name__} {capacity!r}")
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity: int = int(capacity)
        self.replay_prob: float = _check_unit("replay_prob", replay_prob)
        self.staleness_coef: float = _check_unit("staleness_coef", staleness_coef)
        self.min_fill_ratio: float = _check_unit("min_fill_ratio", min_fill_ratio)
        choices = buffer_transforms()
        if not isinstance(score_transform, str) or score_transform not in choices:
            raise ValueError(
                f"score_transform={score_transform!r} is not supported; choose one of {', '.join(choices)}"
            )
        self.score_transform: str = score_transform
        self.temperature: float = _check_positive("temperature", temperature)
        if isinstance(topk, bool) or not isinstance(topk, (numbers.Integral, np.integer)) or topk < 1:
            raise ValueError(f"topk must be an int >= 1, got {topk!r}")
        self.topk: int = int(topk)
        transform = TRANSFORMS[score_transform](temperature=self.temperature, topk=self.topk)
        assert isinstance(transform, OrderedTransform)
        self._transform: OrderedTransform = transform
        self.duplicate_check: bool = bool(duplicate_check)
        if seed is not None and (
            isinstance(seed, bool) or not isinstance(seed, (numbers.Integral, np.integer))
        ):
            raise TypeError(f"seed must be an int or None, got {type(seed).__name__} {seed!r}")
        if seed is not None and int(seed) < 0:
            raise ValueError(f"seed must be a non-negative int or None, got {seed!r}")
        self.seed: int | None = None if seed is None else int(seed)
        self._rng: np.random.Generator = np.random.default_rng(self.seed)
        with allocating("capacity", capacity):
            self.flush()

    # ------------------------------------------------------------------ state
    def flush(self) -> None:
        """Remove every level (the RNG and the counter keep going)."""
        c = self.capacity
        self._levels: list[Any] = [None] * c
        self._keys: list[Any] = [None] * c
        self._extras: list[dict[str, Any]] = [{} for _ in range(c)]
        self._scores = np.zeros(c, dtype=np.float64)
        self._timestamps = np.zeros(c, dtype=np.int64)
        self._size = 0
        self._index: dict[Any, int] = {}
        if not hasattr(self, "_count"):
            self._count = 0
        self._order = self._transform.structure(c)
        self._stale = LinearStalenessTree(c)

    @property
    def size(self) -> int:
        """Number of stored levels."""
        return self._size

    def __len__(self) -> int:
        return self._size

    @property
    def levels(self) -> list[Any]:
        """The stored levels, by index."""
        return self._levels[: self._size]

    @property
    def scores(self) -> FloatArray:
        """Scores of the stored levels (a copy)."""
        return self._scores[: self._size].copy()

    @property
    def extras(self) -> list[dict[str, Any]]:
        """Per-level extra data (e.g. ``{"max_return": ...}``), by index."""
        return self._extras[: self._size]

    @property
    def staleness(self) -> npt.NDArray[np.int64]:
        """Level episodes since each level was last inserted or replayed."""
        return self._count - self._timestamps[: self._size]

    # ------------------------------------------------------------------ weights
    def score_weights(self) -> FloatArray:
        """``P_S`` over the stored levels."""
        if self._size == 0:
            return np.zeros(0)
        return self._transform.weights(self._scores[: self._size])

    def staleness_weights(self) -> FloatArray:
        """``P_C`` over the stored levels (uniform if every staleness is 0)."""
        n = self._size
        if n == 0:
            return np.zeros(0)
        s = self.staleness.astype(np.float64)
        total = s.sum()
        out: FloatArray = s / total if total > 0 else np.full(n, 1.0 / n)
        return out

    def sample_weights(self) -> FloatArray:
        """The replay distribution ``(1 − staleness_coef)·P_S + staleness_coef·P_C`` over stored levels."""
        if self._size == 0:
            return np.zeros(0)
        out: FloatArray = (1.0 - self.staleness_coef) * self.score_weights()
        if self.staleness_coef > 0:
            out = out + self.staleness_coef * self.staleness_weights()
        return out

    # ------------------------------------------------------------------ insert / update
    def _check_score(self, score: Any) -> float:
        return _check_real("score", score)

    def find(self, level: Any) -> int:
        """Index of a stored level equal (by value) to ``level``, or -1."""
        return self._index.get(level_key(level), -1)

    def insert(self, level: Any, score: float, extra: dict[str, Any] | None = None) -> int:
        """Add a level; return its index, or -1 if it was not added.

        While the buffer has room the level is always added. When full, it replaces the lowest-weighted
        stored level if its score is higher than that level's score, and is rejected (-1) otherwise. With
        ``duplicate_check``, a level already stored gets its score (and extra) updated instead.
        """
        s = self._check_score(score)
        key = level_key(level)
        if extra is not None and not isinstance(extra, dict):
            raise TypeError(f"extra must be a dict or None, got {type(extra).__name__}")
        if self.duplicate_check and key in self._index:
            idx = self._index[key]
            self.update(idx, s, extra)
            return idx
        if self._size < self.capacity:
            idx = self._size
        else:
            idx = int(np.argmin(self.sample_weights()))
            if not s > self._scores[idx]:
                return -1
        slot = (self._levels[idx], self._keys[idx], self._extras[idx], float(self._scores[idx]))
        counters = (self._size, self._count, int(self._timestamps[idx]))
        try:
            if self._size < self.capacity:
                self._size += 1
            else:
                self._remove(idx)
            self._count += 1
            self._store(idx, level, key, s, extra or {}, self._count)
        except BaseException:  # interrupted between statements: put the evicted level back
            self._levels[idx], self._keys[idx], self._extras[idx], self._scores[idx] = slot
            self._size, self._count, self._timestamps[idx] = counters
            self._rebuild_derived()
            raise
        return idx

    def _rebuild_derived(self) -> None:
        """Recompute the index, order and staleness structures from the stored arrays."""
        n = self._size
        self._index = {}
        for i in range(n):
            self._index.setdefault(self._keys[i], i)
        self._order = self._transform.structure(self.capacity)
        self._order.rebuild(np.arange(n, dtype=np.int64), -self._scores[:n])
        self._stale = LinearStalenessTree(self.capacity)
        seen = np.zeros(self.capacity, dtype=bool)
        seen[:n] = True
        self._stale.rebuild(seen, self._timestamps)

    def insert_batch(
        self,
        levels: Iterable[Any],
        scores: Iterable[float],
        extras: Iterable[dict[str, Any] | None] | None = None,
    ) -> npt.NDArray[np.int64]:
        """:meth:`insert` each level in order; returns the indices (-1 where rejected)."""
        lv, sc = list(levels), list(scores)
        ex = [None] * len(lv) if extras is None else list(extras)
        if not len(lv) == len(sc) == len(ex):
            raise ValueError(
                f"levels, scores and extras must have equal lengths: {len(lv)}, {len(sc)}, {len(ex)}"
            )
        for s in sc:
            self._check_score(s)
        return np.array([self.insert(lvl, s, e) for lvl, s, e in zip(lv, sc, ex)], dtype=np.int64)

    def update(self, index: int, score: float, extra: dict[str, Any] | None = None) -> None:
        """Set the score (and merge ``extra`` into the extras) of the level at ``index``."""
        s = self._check_score(score)
        idx = self._check_index(index)
        if extra is not None and not isinstance(extra, dict):
            raise TypeError(f"extra must be a dict or None, got {type(extra).__name__}")
        old, old_extra = float(self._scores[idx]), dict(self._extras[idx])
        try:
            self._order.replace(idx, -old, -s)
            self._scores[idx] = s
            if extra:
                self._extras[idx].update(extra)
        except BaseException:  # interrupted: leave the level as it was
            self._scores[idx], self._extras[idx] = old, old_extra
            self._rebuild_derived()
            raise

    def update_batch(
        self,
        indices: Iterable[int],
        scores: Iterable[float],
        extras: Iterable[dict[str, Any] | None] | None = None,
    ) -> None:
        """:meth:`update` each ``(index, score)`` pair; everything is validated first."""
        idx = list(as_sequence("indices", indices, "buffer indices (one per score)"))
        sc = list(as_sequence("scores", scores, "numbers (one per level)"))
        ex = [None] * len(idx) if extras is None else list(as_sequence("extras", extras, "dicts or None"))
        if not len(idx) == len(sc) == len(ex):
            raise ValueError(
                f"indices, scores and extras must have equal lengths: {len(idx)}, {len(sc)}, {len(ex)}"
            )
        for i, s in zip(idx, sc):
            self._check_index(i)
            self._check_score(s)
        for i, s, e in zip(idx, sc, ex):
            self.update(i, s, e)

    def _check_index(self, index: Any) -> int:
        if isinstance(index, bool) or not isinstance(index, (numbers.Integral, np.integer)):
            raise TypeError(f"index must be an int, got {type(index).__name__} {index!r}")
        if not 0 <= int(index) < self._size:
            raise IndexError(f"index {index} is out of range for a buffer holding {self._size} levels")
        return int(index)

    def _store(self, idx: int, level: Any, key: Any, score: float, extra: dict[str, Any], stamp: int) -> None:
        self._levels[idx] = level
        self._keys[idx] = key
        self._extras[idx] = dict(extra)
        self._scores[idx] = score
        self._timestamps[idx] = stamp
        self._index.setdefault(key, idx)
        self._order.add(idx, -score)
        self._stale.set(idx, True, stamp)

    def _remove(self, idx: int) -> None:
        key = self._keys[idx]
        if self._index.get(key) == idx:
            del self._index[key]
            dup = next((j for j in range(self._size) if j != idx and self._keys[j] == key), None)
            if dup is not None:
                self._index[key] = dup
        self._order.remove(idx, -float(self._scores[idx]))
        self._stale.set(idx, False, 0)

    # ------------------------------------------------------------------ sampling
    def sample_replay_decision(self) -> bool:
        """True to replay a stored level, False to try a new one; never True below ``min_fill_ratio``."""
        if self._size == 0 or self._size < self.min_fill_ratio * self.capacity:
            return False
        return bool(self._rng.random() < self.replay_prob)

    def sample_replay_level(self) -> tuple[int, Any]:
        """Draw ``(index, level)`` from :meth:`sample_weights` and mark it as just replayed."""
        if self._size == 0:
            raise RuntimeError("cannot replay from an empty LevelBuffer")
        if self.staleness_coef > 0 and (
            self.staleness_coef == 1.0 or self._rng.random() < self.staleness_coef
        ):
            total = self._stale.total(self._count)
            if total > 0:
                idx = self._stale.find(int(self._rng.integers(total)), self._count)
            else:
                idx = int(self._rng.integers(self._size))
        else:
            drawn = self._transform.draw(self._order, self._size, self._rng)
            idx = int(self._rng.integers(self._size)) if drawn is None else drawn
        self._count += 1
        self._stale.move(idx, int(self._timestamps[idx]), self._count)
        self._timestamps[idx] = self._count
        return idx, self._levels[idx]

    def sample_replay_levels(self, n: int) -> tuple[npt.NDArray[np.int64], list[Any]]:
        """``n`` consecutive :meth:`sample_replay_level` draws: ``(indices, levels)``."""
        if isinstance(n, bool) or not isinstance(n, (numbers.Integral, np.integer)) or n < 0:
            raise ValueError(f"n must be an int >= 0, got {n!r}")
        with allocating("n", n, "draw the levels in smaller batches"):
            indices = np.empty(int(n), dtype=np.int64)
            levels: list[Any] = [None] * int(n)
        for k in range(indices.size):
            indices[k], levels[k] = self.sample_replay_level()
        return indices, levels

    # ------------------------------------------------------------------ checkpoints
    def _config(self) -> dict[str, Any]:
        return {
            "capacity": self.capacity,
            "replay_prob": self.replay_prob,
            "staleness_coef": self.staleness_coef,
            "min_fill_ratio": self.min_fill_ratio,
            "score_transform": self.score_transform,
            "temperature": self.temperature,
            "topk": self.topk,
            "duplicate_check": self.duplicate_check,
            "seed": self.seed,
        }

    def state_dict(self) -> dict[str, Any]:
        """Config, levels, scores, extras, timestamps, counter and RNG state."""
        return {
            "version": _STATE_VERSION,
            "config": self._config(),
            "levels": list(self.levels),
            "extras": [dict(e) for e in self.extras],
            "scores": self.scores,
            "timestamps": self._timestamps[: self._size].copy(),
            "count": self._count,
            "rng": self._rng.bit_generator.state,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict` saved with the same configuration (the seed may differ).

        Every member is checked first (equal lengths within ``capacity``, finite scores, timestamps in
        ``[0, count]``, extras dicts, levels hashable by value, RNG state); a refused state
        (``ValueError``) leaves the buffer exactly as it was.
        """
        levels, keys, scores, stamps, extras, count, rng, seed = self._validated_state(state)
        self.flush()
        self.seed = seed
        self._count = count
        for i, (lvl, key, s, t, e) in enumerate(zip(levels, keys, scores.tolist(), stamps.tolist(), extras)):
            self._size = i + 1
            self._store(i, lvl, key, float(s), e, int(t))
        self._rng = rng

    def _validated_state(self, state: Any) -> tuple[Any, ...]:
        if not isinstance(state, dict) or state.get("version") != _STATE_VERSION:
            raise ValueError("not a LevelBuffer state")
        missing = [
            k
            for k in ("config", "levels", "extras", "scores", "timestamps", "count", "rng")
            if k not in state
        ]
        if missing:
            raise ValueError(f"LevelBuffer state lacks {', '.join(missing)}")
        if not isinstance(state["config"], dict):
            raise ValueError("LevelBuffer state 'config' must be a dict")
        mine, theirs = self._config(), dict(state["config"])
        diff = sorted(k for k in mine if k != "seed" and mine[k] != theirs.get(k))
        if diff:
            raise ValueError(f"state was saved with a different configuration: {diff}")
        seed = theirs.get("seed")
        if seed is not None and (not _is_int(seed) or int(seed) < 0):
            raise ValueError(f"state config 'seed' must be a non-negative int or None, got {seed!r}")
        if not isinstance(state["levels"], (list, tuple)) or not isinstance(state["extras"], (list, tuple)):
            raise ValueError("state 'levels' and 'extras' must be lists")
        levels, extras = list(state["levels"]), list(state["extras"])
        scores = _state_array(state, "scores", np.float64)
        stamps = _state_array(state, "timestamps", np.int64)
        if not len(levels) == len(extras) == scores.size == stamps.size <= self.capacity:
            raise ValueError(
                "state levels, extras, scores and timestamps must have equal lengths <= capacity "
                f"({self.capacity}), got {len(levels)}, {len(extras)}, {scores.size}, {stamps.size}"
            )
        if not np.isfinite(scores).all():
            raise ValueError("state 'scores' must be finite")
        count = _state_int(state, "count", 0, None)
        if (stamps < 0).any() or (stamps > count).any():
            raise ValueError(f"state 'timestamps' must lie in [0, count={count}]")
        if not all(isinstance(e, dict) for e in extras):
            raise ValueError("state 'extras' must be a list of dicts")
        try:
            keys = [level_key(lvl) for lvl in levels]
        except TypeError as exc:
            raise ValueError(f"state 'levels': {exc}") from exc
        rng = _state_rng(state["rng"])
        return (
            levels,
            keys,
            scores,
            stamps,
            [dict(e) for e in extras],
            count,
            rng,
            (None if seed is None else int(seed)),
        )

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the buffer as ``.npz`` (arrays + JSON). Levels and extras must be ints, floats, strings,
        numpy arrays, or lists/tuples/str-keyed dicts of them; loading never unpickles."""
        state = self.state_dict()
        arrays: dict[str, Any] = {}
        meta = {
            **{k: state[k] for k in ("version", "config", "count", "rng")},
            "levels": _encode(state["levels"], arrays),
            "extras": _encode(state["extras"], arrays),
        }
        save_npz(
            path,
            {
                "meta": np.array(json.dumps(meta)),
                "scores": state["scores"],
                "timestamps": state["timestamps"],
                **arrays,
            },
        )

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> LevelBuffer:
        """Build a buffer from a file written by :meth:`save`."""
        state = _read_state(path)
        config = state.get("config")
        if not isinstance(config, dict):
            raise ValueError(f"{os.fspath(path)} is not a LevelBuffer checkpoint: no 'config' object")
        try:
            buf = cls(**config)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{os.fspath(path)} holds an invalid LevelBuffer configuration: {exc}") from exc
        buf.load_state_dict(state)
        return buf

    def load_from(self, path: str | os.PathLike[str]) -> None:
        """Restore this buffer's state from a file written by :meth:`save` (same configuration)."""
        self.load_state_dict(_read_state(path))

    def __repr__(self) -> str:
        return (
            f"LevelBuffer(capacity={self.capacity}, size={self._size}, "
            f"score_transform={self.score_transform!r}, staleness_coef={self.staleness_coef}, "
            f"replay_prob={self.replay_prob})"
        )


def _read_state(path: str | os.PathLike[str]) -> dict[str, Any]:
    npz = load_npz(path)
    try:
        meta = json.loads(str(npz["meta"]))
        if not isinstance(meta, dict):
            raise ValueError("its metadata is not a JSON object")
        return {
            **meta,
            "levels": _decode(meta["levels"], npz),
            "extras": _decode(meta["extras"], npz),
            "scores": npz["scores"],
            "timestamps": npz["timestamps"],
        }
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ValueError(f"{os.fspath(path)} is not a LevelBuffer checkpoint: {exc!r}") from exc
