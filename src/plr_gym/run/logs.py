"""A run's logs in its checkpoints: append-only log files copied into each checkpoint and put back on
restore, and TensorBoard event files cut back to the checkpoint's step.

A run killed after its checkpoint kept logging; the resumed run logs those steps again. Putting the
checkpoint's copy of each log back (``eval.csv``) and cutting every event file to the checkpoint's step
lets the resumed run continue each log and curve without duplicated rows or points.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from plr_gym.checkpoint import atomic_open
from plr_gym.run.layout import LOGS_DIR, Checkpoint

__all__ = ["copy_logs", "cut_event_logs", "put_logs_back"]


def copy_logs(run_path: Path, logs: Sequence[str], gen: Path) -> list[str]:
    """Copy each log of the run directory that exists into ``gen/logs``; return their names, sorted."""
    log_dir = gen / LOGS_DIR
    for name in logs:
        source = run_path / name
        if source.is_file():
            (log_dir / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, log_dir / name)
    return sorted(n for n in logs if (log_dir / n).is_file())


def put_logs_back(run_path: Path, logs: Sequence[str], ckpt: Checkpoint) -> None:
    """Each log as it was at ``ckpt`` (atomically); a log the checkpoint has no copy of was written after
    it, and is removed."""
    saved = ckpt.manifest.get("logs", [])
    for name in saved:
        if isinstance(name, str) and name in logs:
            with open(ckpt.file(f"{LOGS_DIR}/{name}"), "rb") as src, atomic_open(run_path / name) as dst:
                shutil.copyfileobj(src, dst)
    for name in logs:
        if name not in saved:
            (run_path / name).unlink(missing_ok=True)


# --------------------------------------------------------------------------------------------------
# TensorBoard event files
# --------------------------------------------------------------------------------------------------
_EVENT_FILE = "events.out.tfevents."


def cut_event_logs(directory: str | os.PathLike[str], step: int) -> int:
    """Cut every TensorBoard event file under ``directory`` back to ``step``; return the events removed.

    A run killed after its checkpoint at ``step`` kept logging; its resumed run logs those steps again
    (SB3 continues the same TensorBoard run). Each event file (TFRecord: a length, its CRC, the event,
    its CRC) keeps the events whose ``step`` is at most ``step``, bytes unchanged; a record torn by the
    kill at the end of a file is dropped; a file is rewritten atomically, and only if something goes.
    Events are parsed without TensorBoard: only the step (field 2 of the ``Event`` message) is read.
    """
    removed = 0
    base = Path(directory)
    if not base.is_dir():
        return 0
    for path in sorted(base.rglob(_EVENT_FILE + "*")):
        if not path.is_file() or path.is_symlink():
            continue
        data = path.read_bytes()
        kept, dropped = _events_up_to(data, step)
        if dropped:
            with atomic_open(path) as f:
                f.write(kept)
            removed += dropped
    return removed


def _events_up_to(data: bytes, step: int) -> tuple[bytes, int]:
    """The records of an event file whose step is at most ``step`` (and how many others there were)."""
    out = bytearray()
    pos = dropped = 0
    while pos < len(data):
        if pos + 12 > len(data):
            return bytes(out), dropped + 1  # a torn header
        length = int.from_bytes(data[pos : pos + 8], "little")
        end = pos + 12 + length + 4
        if end > len(data):
            return bytes(out), dropped + 1  # a torn record
        if _event_step(data[pos + 12 : pos + 12 + length]) <= step:
            out += data[pos:end]
        else:
            dropped += 1
        pos = end
    return bytes(out), dropped


def _event_step(event: bytes) -> int:
    """``Event.step`` of a serialized TensorBoard event (0 when absent; kept when unreadable)."""
    pos = 0
    try:
        while pos < len(event):
            key, pos = _varint(event, pos)
            field, wire = key >> 3, key & 7
            if wire == 0:
                value, pos = _varint(event, pos)
                if field == 2:
                    return value - (1 << 64) if value >= 1 << 63 else value
            elif wire == 1:
                pos += 8
            elif wire == 2:
                length, pos = _varint(event, pos)
                pos += length
            elif wire == 5:
                pos += 4
            else:
                return 0
    except IndexError:
        return 0
    return 0


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80 or shift > 63:
            return value, pos
        shift += 7
