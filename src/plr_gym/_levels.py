"""Value identity of levels (ints, arrays, dicts of arrays...), shared by the scorer and the level buffer."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["level_key"]


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
