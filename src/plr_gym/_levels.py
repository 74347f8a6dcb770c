"""Value identity of levels (ints, arrays, dicts of arrays...), shared by the scorer and the level buffer."""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

__all__ = ["level_key", "load_values", "save_values"]


def level_key(level: Any) -> Any:
    """A hashable key equal for levels equal by value (ints, floats, str, arrays, dicts, lists, tuples).

    >>> import numpy as np
    >>> level_key(np.array([[1, 0], [0, 1]])) == level_key(np.array([[1, 0], [0, 1]]))
    True
    >>> level_key({"walls": np.zeros(3), "goal": 2}) == level_key({"goal": 2, "walls": np.zeros(3)})
    True
    """
    if isinstance(level, np.ndarray):
        return ("ndarray", level.dtype.str, level.shape, np.ascontiguousarray(level).tobytes())
    if isinstance(level, dict):
        return (
            "dict",
            tuple(sorted(((str(k), level_key(v)) for k, v in level.items()), key=lambda kv: kv[0])),
        )
    if isinstance(level, (list, tuple)):
        return (type(level).__name__, tuple(level_key(v) for v in level))
    if isinstance(level, np.generic):
        return level_key(level.item())
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
