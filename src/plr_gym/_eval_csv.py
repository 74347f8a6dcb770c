"""``eval.csv``, one row per held-out evaluation and split: appended atomically, read without its torn tail.

An append rewrites the file through :func:`plr_gym.checkpoint.atomic_open` (a temporary file, ``fsync``,
one :func:`os.replace`): a full disk or a kill leaves the file as it was, never half a row (issue 43, M4).
A file written by an older plr-gym may still end in half a row: :func:`read_rows` drops it with a warning,
so every reader (``plr-gym compare``, plotting, a resume) sees whole rows only.
"""

from __future__ import annotations

import csv
import io
import os
import warnings
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from plr_gym.checkpoint import atomic_open

__all__ = ["TornRowWarning", "append_rows", "read_rows"]


class TornRowWarning(RuntimeWarning):
    """A CSV file ends in half a row (or holds a malformed one): the row is ignored."""


def append_rows(
    path: str | os.PathLike[str], rows: Iterable[Mapping[str, Any]], fields: Sequence[str]
) -> None:
    """Append ``rows`` to the CSV file ``path`` (its header first if it is new), atomically."""
    path = Path(path)
    old = path.read_bytes() if path.exists() else b""
    old = _whole_lines(old, path)
    text = io.StringIO(newline="")
    writer = csv.DictWriter(text, fieldnames=list(fields))
    if not old:
        writer.writeheader()
    writer.writerows(rows)
    with atomic_open(path) as f:
        f.write(old + text.getvalue().encode())


def read_rows(path: str | os.PathLike[str]) -> list[dict[str, str]]:
    """The rows of the CSV file ``path`` as dicts, without a torn last row (warned about, not raised)."""
    path = Path(path)
    data = _whole_lines(path.read_bytes(), path)
    rows = list(csv.DictReader(io.StringIO(data.decode(), newline="")))
    whole = [r for r in rows if None not in r.values() and None not in r]
    if len(whole) < len(rows):  # a row with too few or too many fields
        warnings.warn(
            f"{path}: {len(rows) - len(whole)} malformed row(s) ignored", RuntimeWarning, stacklevel=2
        )
    return whole


def _whole_lines(data: bytes, path: Path) -> bytes:
    """``data`` up to its last line end: a last line without one is half a row, written by an append that
    was cut short (an older plr-gym, a full disk); it is dropped with a warning."""
    if not data or data.endswith(b"\n"):
        return data
    cut = data.rfind(b"\n") + 1
    warnings.warn(
        f"{path}: its last row is torn (an append cut short, e.g. by a full disk): ignored",
        TornRowWarning,
        stacklevel=3,
    )
    return data[:cut]
