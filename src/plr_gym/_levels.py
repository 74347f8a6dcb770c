"""Levels: the accepted range of int level ids (one check for every path that takes one), and the value
identity of levels (ints, arrays, dicts of arrays...), shared by the scorer and the level buffer."""

from __future__ import annotations

import json
import numbers
import os
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = [
    "MAX_LEVEL_ID",
    "check_level_id",
    "check_level_ids",
    "is_level_id",
    "level_key",
    "load_values",
    "refuse_masked",
    "save_values",
]

#: Largest int level id. A level id is a reset seed (``env.reset(seed=level)``): Gymnasium takes any
#: non-negative int, and plr_gym stores ids as ``int64``, so ids lie in ``[0, 2**63 - 1]``. Envs with a
#: narrower seed range check their own bound on top (Procgen: ``[0, 2**31 - 1]``).
MAX_LEVEL_ID = 2**63 - 1


def _bound(high: int) -> str:
    return {2**63 - 1: "2**63 - 1", 2**31 - 1: "2**31 - 1"}.get(high, str(high))


def is_level_id(value: Any) -> bool:
    """Whether ``value`` is an int (Python or numpy; not ``bool``), i.e. could be a level id."""
    return isinstance(value, (numbers.Integral, np.integer)) and not isinstance(value, (bool, np.bool_))


def check_level_id(value: Any, name: str = "level", *, high: int = MAX_LEVEL_ID, what: str = "") -> int:
    """``value`` as an int level id in ``[0, high]``, else ``TypeError``/``ValueError`` naming ``name``.

    :param what: what the bound is, for the message (e.g. ``"a Procgen level seed"``)

    >>> check_level_id(np.int64(7))
    7
    >>> check_level_id(-1)
    Traceback (most recent call last):
    ...
    ValueError: level must be an int level id in [0, 2**63 - 1] (a reset seed), got -1
    """
    if not is_level_id(value):
        raise TypeError(
            f"{name} must be an int level id in [0, {_bound(high)}], got {value!r} ({type(value).__name__})"
        )
    level = int(value)
    if not 0 <= level <= high:
        raise ValueError(
            f"{name} must be an int level id in [0, {_bound(high)}] ({what or 'a reset seed'}), got {level}"
        )
    return level


def refuse_masked(name: str, value: Any) -> None:
    """Refuse numpy masked arrays (and the masked constant): their masks would be silently dropped."""
    if isinstance(value, np.ma.MaskedArray) or value is np.ma.masked:
        raise TypeError(
            f"{name} must not be a numpy masked array (its mask would be ignored); pass a plain array "
            "holding only the valid entries (e.g. arr.compressed())"
        )


def as_sequence(name: str, value: Any, what: str) -> Any:
    """``value`` as a list (a numpy array as it is), else ``TypeError`` naming ``name``: a scalar, a string
    or a mapping where a sequence of ``what`` is expected (``update_batch(levels, 0.5)``)."""
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, (str, bytes, dict)) or not hasattr(value, "__iter__"):
        raise TypeError(f"{name} must be a sequence of {what}, got {type(value).__name__} {value!r}")
    return list(value)


def check_level_ids(values: Any, name: str = "levels", *, high: int = MAX_LEVEL_ID) -> npt.NDArray[np.int64]:
    """``values`` (a ``range``, an int array or a collection of ints) as a new ``int64`` array of level
    ids in ``[0, high]``, else ``TypeError``/``ValueError`` naming ``name`` and the accepted range. No
    id is wrapped or truncated: a ``range`` or an unsigned array beyond ``int64`` is refused, not cast.

    >>> check_level_ids(range(3)).tolist()
    [0, 1, 2]
    >>> check_level_ids(range(2**63 - 2, 2**63 + 2))
    Traceback (most recent call last):
    ...
    ValueError: levels must be int level ids in [0, 2**63 - 1] (reset seeds), got 9223372036854775809
    """
    refuse_masked(name, values)
    if isinstance(values, range):
        if len(values):
            for end in (values[0], values[-1]):
                if not 0 <= end <= high:
                    raise ValueError(
                        f"{name} must be int level ids in [0, {_bound(high)}] (reset seeds), got {end}"
                    )
            return np.arange(values.start, values.stop, values.step, dtype=np.int64)
        return np.zeros(0, dtype=np.int64)
    arr = np.asarray(values)
    if arr.dtype == object:
        items = arr.reshape(-1).tolist()
        for v in items:
            if not is_level_id(v):
                raise TypeError(f"{name} must be int level ids, got {type(v).__name__} {v!r}")
        bad = [int(v) for v in items if not 0 <= int(v) <= high]
        if bad:
            raise ValueError(
                f"{name} must be int level ids in [0, {_bound(high)}] (reset seeds), got {bad[0]}"
            )
        return np.asarray([int(v) for v in items], dtype=np.int64).reshape(arr.shape)
    if arr.size and (arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer)):
        raise TypeError(f"{name} must be integers (int level ids / reset seeds), got dtype {arr.dtype}")
    if arr.size:
        lo, hi = int(arr.min()), int(arr.max())
        if lo < 0 or hi > high:
            raise ValueError(
                f"{name} must be int level ids in [0, {_bound(high)}] (reset seeds), "
                f"got {lo if lo < 0 else hi}"
            )
    return arr.astype(np.int64, copy=True)


def level_key(level: Any) -> Any:
    """A hashable key equal for levels equal by value (ints, floats, str, arrays, dicts, lists, tuples).

    A level holding NaN is refused (``ValueError``): NaN is not equal to itself, so such a level could
    never be found again. Masked arrays are refused (``TypeError``): their mask would be ignored.

    >>> import numpy as np
    >>> level_key(np.array([[1, 0], [0, 1]])) == level_key(np.array([[1, 0], [0, 1]]))
    True
    >>> level_key({"walls": np.zeros(3), "goal": 2}) == level_key({"goal": 2, "walls": np.zeros(3)})
    True
    """
    if isinstance(level, np.ndarray):
        refuse_masked("level", level)
        if level.dtype.kind in "fc" and np.isnan(level).any():
            raise ValueError(
                "a level must not hold NaN (NaN is not equal to itself: the level could not be found)"
            )
        if level.dtype == object:
            return ("ndarray-object", level.shape, tuple(level_key(v) for v in level.reshape(-1).tolist()))
        return ("ndarray", level.dtype.str, level.shape, np.ascontiguousarray(level).tobytes())
    if isinstance(level, dict):
        return (
            "dict",
            tuple(sorted(((str(k), level_key(v)) for k, v in level.items()), key=lambda kv: kv[0])),
        )
    if isinstance(level, (list, tuple)):
        return (type(level).__name__, tuple(level_key(v) for v in level))
    if level is np.ma.masked:
        refuse_masked("level", level)
    if isinstance(level, np.generic):
        return level_key(level.item())
    if isinstance(level, (float, complex)) and level != level:
        raise ValueError("a level must not be NaN (NaN is not equal to itself: the level could not be found)")
    if isinstance(level, (bool, int, float, str, bytes)) or level is None:
        return (type(level).__name__, level)
    try:
        hash(level)
    except TypeError:
        raise TypeError(
            "levels must be ints, floats, strings, numpy arrays or dicts/lists/tuples of those; "
            f"got {type(level)}"
        ) from None
    return ("object", level)


def _encode(obj: Any, arrays: dict[str, Any]) -> Any:
    if isinstance(obj, np.ndarray):
        key = f"arr{len(arrays)}"
        arrays[key] = obj
        return {"__ndarray__": key}
    if isinstance(obj, dict):
        if not all(isinstance(k, str) for k in obj):
            raise TypeError("only dicts with str keys can be saved")
        return {"__dict__": {k: _encode(v, arrays) for k, v in obj.items()}}
    if isinstance(obj, tuple):
        return {"__tuple__": [_encode(v, arrays) for v in obj]}
    if isinstance(obj, list):
        return [_encode(v, arrays) for v in obj]
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, (bool, int, float, str)) or obj is None:
        return obj
    raise TypeError(f"cannot save a level or extra of type {type(obj).__name__} (no pickling)")


def _decode(obj: Any, arrays: Any) -> Any:
    if isinstance(obj, dict):
        if "__ndarray__" in obj:
            return np.array(arrays[obj["__ndarray__"]])
        if "__tuple__" in obj:
            return tuple(_decode(v, arrays) for v in obj["__tuple__"])
        return {k: _decode(v, arrays) for k, v in obj["__dict__"].items()}
    if isinstance(obj, list):
        return [_decode(v, arrays) for v in obj]
    return obj


def save_values(path: str | os.PathLike[str], value: Any) -> None:
    """Write a JSON-able structure with numpy arrays inside (levels, RNG states) as ``.npz``, no pickle.

    The file is replaced atomically (:mod:`plr_gym.checkpoint`): a failed save leaves the previous one.
    """
    from plr_gym.checkpoint import save_npz

    arrays: dict[str, Any] = {}
    meta = json.dumps(_encode(value, arrays))
    save_npz(path, {"meta": np.array(meta), **arrays})


def load_values(path: str | os.PathLike[str]) -> Any:
    """Read a file written by :func:`save_values` (``ValueError`` if it is not one)."""
    from plr_gym.checkpoint import load_npz

    npz = load_npz(path)
    try:
        return _decode(json.loads(str(npz["meta"])), npz)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ValueError(f"{os.fspath(path)} is not a plr_gym values file: {exc!r}") from exc
