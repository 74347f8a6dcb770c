"""The run directory's lock: one trainer per directory.

The lock is an exclusive ``flock`` on the run directory itself (on platforms that cannot lock a
directory, on ``.plr-lock``): deleting or replacing ``.plr-lock`` never lets a second trainer in, and the
kernel drops the lock when its holder dies, even by ``SIGKILL``. ``.plr-lock`` records the holder's pid
for the message a second trainer gets (:class:`~plr_gym.run.RunLockedError`).
"""

from __future__ import annotations

import os
from pathlib import Path

from plr_gym.checkpoint import atomic_open
from plr_gym.run.layout import LOCK_FILE, RunDirectoryError, RunLockedError, reason

__all__ = ["acquire_lock"]


def acquire_lock(path: Path) -> int:
    """Lock the run directory ``path`` (created if missing), record this process's pid, check that the
    directory takes new files; return the locked descriptor (closing it releases the lock).

    :raises RunLockedError: another live process holds it (its pid is named).
    :raises RunDirectoryError: the directory cannot be created, locked or written (read-only, a file...).
    """
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd = _open_lock_target(path)
    except OSError as exc:
        raise RunDirectoryError(f"cannot use run directory {path}: {reason(exc)}") from None
    try:
        try:
            locked = _try_lock(fd)
        except OSError as exc:  # e.g. no lock support on this filesystem
            raise RunDirectoryError(f"cannot lock run directory {path}: {reason(exc)}") from None
        if not locked:
            raise RunLockedError(path, _read_pid(path / LOCK_FILE))
        _write_pid(path)
        _probe_writable(path)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _write_pid(path: Path) -> None:
    """The holder's pid in ``.plr-lock``, for the :class:`RunLockedError` of a second trainer."""
    try:
        with atomic_open(path / LOCK_FILE) as f:
            f.write(f"{os.getpid()}\n".encode())
    except OSError as exc:
        raise RunDirectoryError(f"cannot write in run directory {path}: {reason(exc)}") from None


def _probe_writable(path: Path) -> None:
    """Fail now, not hours into training, when the directory cannot take new files."""
    try:
        with atomic_open(path / ".plr-write-probe") as f:
            f.write(b"ok")
        os.unlink(path / ".plr-write-probe")
    except OSError as exc:
        raise RunDirectoryError(f"cannot write in run directory {path}: {reason(exc)}") from None


def _try_lock(fd: int) -> bool:
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        import msvcrt

        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)  # type: ignore[attr-defined]
        except OSError:
            return False
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _open_lock_target(path: Path) -> int:
    """A descriptor to ``flock``: the directory itself where it can be opened (POSIX), else ``.plr-lock``."""
    flags = getattr(os, "O_CLOEXEC", 0)
    if hasattr(os, "O_DIRECTORY"):
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | flags)
    return os.open(path / LOCK_FILE, os.O_RDWR | os.O_CREAT | flags, 0o666)  # pragma: no cover - Windows


def _read_pid(path: Path) -> int | None:
    try:
        text = path.read_text()[:32].strip()
        return int(text) if text.isdigit() else None
    except (OSError, UnicodeDecodeError, ValueError):
        return None
