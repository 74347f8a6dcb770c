"""One check for sizes a user asks for (capacities, numbers of levels or draws): a size the machine
cannot allocate is a ``ValueError`` naming the argument, never a bare ``MemoryError``/``OverflowError``."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

__all__ = ["allocating"]


@contextlib.contextmanager
def allocating(name: str, value: Any, what: str = "") -> Iterator[None]:
    """Run an allocation sized by the argument ``name``; if it cannot be made (``MemoryError``, or numpy's
    ``ValueError``/``OverflowError`` for an array beyond the address space), raise ``ValueError`` saying
    that ``name=value`` is too large.

    >>> import numpy as np
    >>> try:
    ...     with allocating("capacity", 2**70):
    ...         np.zeros(2**70)
    ... except ValueError as exc:
    ...     print(str(exc).split(":")[0])
    capacity=1180591620717411303424 is too large
    """
    try:
        yield
    except (MemoryError, OverflowError, ValueError) as exc:
        if isinstance(exc, ValueError) and not _is_size_error(exc):
            raise
        detail = str(exc) or type(exc).__name__
        raise ValueError(
            f"{name}={value!r} is too large: {what or 'the memory it needs cannot be allocated'} ({detail})"
        ) from None


def _is_size_error(exc: ValueError) -> bool:
    text = str(exc)
    return any(s in text for s in ("too big", "Maximum allowed dimension", "maximum possible size"))
