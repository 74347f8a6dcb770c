"""Atomic checkpoint files and directories: the one writer behind every ``save`` of plr_gym.

A save that fails part-way (disk full, file-size limit, ``SIGKILL``, power loss) must never destroy the
previous checkpoint. Every file is therefore written to a temporary file in the *same* directory,
flushed and ``fsync``-ed, then moved over the target with :func:`os.replace` (atomic on POSIX and
Windows), and the directory entry is ``fsync``-ed: a reader sees the old file or the new one, never a
truncated mix.

A checkpoint made of several files (:class:`~plr_gym.PLRCallback`: sampler or buffer, generator plan,
scorer) is written as one *generation*: a new hidden sub-directory ``.plr-gen-<N>`` holding every file,
after which one symbolic link, ``.plr-current``, is atomically switched to it. The visible names
(``plr_sampler.npz``, ...) are links through ``.plr-current``, so they all change at once; readers that
load several files resolve ``.plr-current`` once (:func:`checkpoint_files`) and read one generation.

Files are ``.npz`` archives of plain arrays plus JSON metadata; :func:`load_npz` never unpickles, so
loading a file runs no code (see the Reliability page of the docs for what that covers).

Example:
    >>> import tempfile, pathlib, numpy as np
    >>> from plr_gym.checkpoint import load_npz, save_npz
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "state.npz"
    >>> save_npz(path, {"x": np.arange(3)})
    >>> load_npz(path)["x"].tolist()
    [0, 1, 2]
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import re
import secrets
import shutil
import stat
import struct
import tokenize
import zipfile
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import numpy as np

__all__ = [
    "CURRENT_LINK",
    "atomic_open",
    "checkpoint_files",
    "commit_generation",
    "generations",
    "load_npz",
    "new_generation",
    "save_npz",
    "write_checkpoint_dir",
]

#: Name of the link that points at the current generation of a checkpoint directory.
CURRENT_LINK = ".plr-current"
_GEN_PREFIX = ".plr-gen-"
_GEN_RE = re.compile(r"^\.plr-gen-(\d+)$")


def _fsync_dir(directory: Path) -> None:
    """Make a rename or a new entry in ``directory`` durable (no-op where directories cannot be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # pragma: no cover - e.g. Windows
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover - some filesystems refuse fsync on directories
        pass
    finally:
        os.close(fd)


def _create_temporary(directory: Path, name: str) -> tuple[int, str]:
    """Create a new, empty file ``.<name>.<random>.tmp`` in ``directory`` and open it for writing.

    Unlike :func:`tempfile.mkstemp` (always mode ``0600``), the file is created with mode ``0666``
    filtered by the process umask, as :func:`open` creates files, so a checkpoint that replaces its
    target gets the permissions a plain write would have given it.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0) | getattr(os, "O_NOFOLLOW", 0)
    for _ in range(100):
        tmp = os.path.join(directory, f".{name}.{secrets.token_hex(6)}.tmp")
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:  # pragma: no cover - a 48-bit random name already taken
            continue
    raise FileExistsError(  # pragma: no cover
        f"could not create a temporary file next to {name!r} in {directory}"
    )


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike[str]) -> Iterator[IO[bytes]]:
    """Open a temporary file next to ``path`` for writing; on success it replaces ``path`` atomically.

    The data is flushed and ``fsync``-ed before :func:`os.replace`, and the directory after it. If the
    body raises (or the write fails: disk full, file-size limit), the temporary file is removed and
    ``path`` is untouched.
    """
    target = Path(path)
    _refuse_directory(target)
    directory = target.parent if str(target.parent) else Path(".")
    fd, tmp = _create_temporary(directory, target.name)
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(directory)


def save_npz(path: str | os.PathLike[str], arrays: Mapping[str, Any]) -> None:
    """Write ``arrays`` as an ``.npz`` archive at exactly ``path`` (no suffix added), atomically."""
    npy_format: Any = np.lib.format  # looked up at call time (untyped in numpy 1.x stubs)
    with atomic_open(path) as f, zipfile.ZipFile(f, mode="w", compression=zipfile.ZIP_STORED) as archive:
        # numpy's savez layout (one ``.npy`` member per array), closed even when a write fails
        for name, value in arrays.items():
            with archive.open(f"{name}.npy", "w", force_zip64=True) as member:
                npy_format.write_array(member, np.asanyarray(value), allow_pickle=False)


#: What ``zipfile`` and ``numpy`` raise on a corrupt archive: a flipped bit can name an unsupported
#: compression method (``NotImplementedError``) or set the encryption flag (``RuntimeError``), a size
#: field can overflow or ask for absurd memory, a flipped ``.npy`` header (a Python literal) fails to
#: tokenize or parse (``TokenError``, ``SyntaxError``); all of them mean "not a readable checkpoint".
_CORRUPT = (
    ValueError,
    OSError,
    EOFError,
    KeyError,
    IndexError,
    TypeError,
    zipfile.BadZipFile,
    NotImplementedError,
    RuntimeError,
    OverflowError,
    MemoryError,
    struct.error,
    zlib.error,
    SyntaxError,
    tokenize.TokenError,
)


def load_npz(path: str | os.PathLike[str], required: Sequence[str] = ()) -> dict[str, np.ndarray[Any, Any]]:
    """Read every array of an ``.npz`` archive into memory, never unpickling.

    A visible name of a checkpoint directory (``DIR/plr_sampler.npz``, a link through ``.plr-current``)
    is read from the generation :func:`checkpoint_files` resolves and checks: never through a generation
    that is a link (or holds links) to somewhere outside ``DIR``.

    :raises FileNotFoundError: if ``path`` does not exist.
    :raises IsADirectoryError: if ``path`` is a directory.
    :raises ValueError: if the file is not a readable ``.npz`` archive of plain arrays (truncated,
        corrupt, or holding pickled objects), or a visible name whose generation is not a real
        directory of the checkpoint directory, or if it lacks one of the arrays named in ``required``.
    """
    path = _through_generation(Path(path))
    _refuse_directory(path)
    with open(path, "rb") as f:
        data = f.read()
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
    except _CORRUPT as exc:
        raise ValueError(f"{os.fspath(path)} is not a readable plr_gym checkpoint: {exc}") from exc
    missing = [k for k in required if k not in arrays]
    if missing:
        raise ValueError(f"{os.fspath(path)} lacks the arrays {', '.join(missing)} (it has {sorted(arrays)})")
    return arrays


def _refuse_directory(path: Path) -> None:
    """Name the argument when a file's ``path`` is a directory (``os.replace`` and ``open`` would not)."""
    if path.is_dir():
        raise IsADirectoryError(errno.EISDIR, "path must name a file, not a directory", os.fspath(path))


def _through_generation(path: Path) -> Path:
    """``DIR/name`` linked as ``.plr-current/name`` (a visible name of :func:`write_checkpoint_dir`): the
    file in the generation that :func:`checkpoint_files` resolves and checks; any other path as it is."""
    if not path.is_symlink():
        return path
    parts = Path(os.readlink(path)).parts
    if len(parts) < 2 or parts[0] != CURRENT_LINK:
        return path
    return checkpoint_files(path.parent).joinpath(*parts[1:])


# --------------------------------------------------------------------------------------------------
# multi-file checkpoints
# --------------------------------------------------------------------------------------------------
def generations(directory: str | os.PathLike[str]) -> list[tuple[int, Path]]:
    """The checkpoint generations in ``directory``, oldest first: ``(number, path)`` of every real
    ``.plr-gen-<N>`` sub-directory (links and files of that name are not generations)."""
    base = Path(directory)
    out = []
    for entry in base.iterdir() if base.is_dir() else []:
        m = _GEN_RE.match(entry.name)
        if m and entry.is_dir() and not entry.is_symlink():
            out.append((int(m.group(1)), entry))
    return sorted(out)


def _check_generation(gen: Path) -> None:
    """Refuse a generation that is not a real directory of real files (a link could lead anywhere)."""
    if not stat.S_ISDIR(os.lstat(gen).st_mode):
        raise ValueError(f"{gen} is not a directory inside the checkpoint directory (a link, or a file)")
    for root, dirs, files in os.walk(gen):
        for name in [*dirs, *files]:
            mode = os.lstat(os.path.join(root, name)).st_mode
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                raise ValueError(
                    f"{os.path.join(root, name)} is not a regular file (a link or a device): a checkpoint "
                    "generation holds only the files its save wrote"
                )


def checkpoint_files(directory: str | os.PathLike[str]) -> Path:
    """The directory to read a checkpoint's files from: the current generation, resolved once.

    For a directory written by :func:`write_checkpoint_dir` this is the generation ``.plr-current``
    points at (so every file read comes from the same save); for a plain directory (older plr_gym
    versions, or files copied by hand) it is ``directory`` itself.

    :raises ValueError: ``.plr-current`` names something other than a generation of ``directory``, or the
        generation is itself a link or holds links (which could lead outside the checkpoint).
    """
    base = Path(directory)
    link = base / CURRENT_LINK
    if link.is_symlink():
        target = os.readlink(link)
        if not _GEN_RE.match(target):
            raise ValueError(f"{link} points at {target!r}, not at a checkpoint generation")
        gen = base / target
        if not os.path.lexists(gen):
            raise ValueError(f"{link} points at {target!r}, which does not exist")
        _check_generation(gen)
        return gen
    return base


def new_generation(directory: str | os.PathLike[str]) -> Path:
    """Create and return a new, empty generation directory ``.plr-gen-<N>`` in ``directory``.

    ``N`` is one more than the largest number any entry named ``.plr-gen-*`` has (a link or a file of
    that name included), so a name taken by something else is never reused.
    """
    base = Path(directory)
    base.mkdir(parents=True, exist_ok=True)
    numbers = [int(m.group(1)) for m in map(_GEN_RE.match, os.listdir(base)) if m]
    number = max(numbers, default=0) + 1
    while True:
        gen = base / f"{_GEN_PREFIX}{number:08d}"
        try:
            gen.mkdir()
            return gen
        except FileExistsError:  # pragma: no cover - created by another writer in between
            number += 1


def _replace_link(link: Path, target: str) -> None:
    """Make ``link`` a symbolic link to ``target`` with one atomic :func:`os.replace`."""
    if link.is_symlink() and os.readlink(link) == target:
        return
    tmp = link.with_name(f".{link.name}.{os.getpid()}.{secrets.token_hex(4)}.link")
    os.symlink(target, tmp)
    try:
        os.replace(tmp, link)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def commit_generation(
    directory: str | os.PathLike[str],
    gen: Path,
    visible: Iterable[str],
    keep: int = 1,
    complete: Callable[[Path], bool] | None = None,
    protect: Iterable[Path] = (),
) -> None:
    """Make ``gen`` the current generation of ``directory``: one atomic switch of ``.plr-current``.

    Each name in ``visible`` becomes a link ``directory/name -> .plr-current/name`` *before* the switch,
    so every visible name changes at the same instant. Then older generations are removed, keeping the
    ``keep - 1`` newest that ``complete(path)`` accepts (all, without ``complete``): a generation left
    unfinished by a killed save, or one that no longer verifies, never takes the place of a good one, and a
    generation ``complete`` accepts is removed only when newer ones it accepts are kept (``gen`` among them).
    ``complete`` is asked newest first, and only until ``keep - 1`` generations are accepted. A generation
    in ``protect`` is never removed (nor counted towards ``keep``).
    """
    base = Path(directory)
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
        raise ValueError(f"keep must be a positive int, got {keep!r}")
    _fsync_dir(gen)
    for name in visible:
        _replace_link(base / name, os.path.join(CURRENT_LINK, name))
    _replace_link(base / CURRENT_LINK, gen.name)
    _fsync_dir(base)
    protected = set(protect)
    others = [path for _, path in generations(base) if path != gen and path not in protected]
    kept: set[Path] = set()
    for path in reversed(others):  # newest first
        if len(kept) >= keep - 1:
            break
        if complete is None or complete(path):
            kept.add(path)
    for old in others:
        if old not in kept:
            shutil.rmtree(old, ignore_errors=True)


def write_checkpoint_dir(
    directory: str | os.PathLike[str], writers: Mapping[str, Callable[[Path], None]], keep: int = 1
) -> Path:
    """Write several files as one atomic checkpoint generation in ``directory``; return the generation.

    :param directory: created if missing; files of other programs in it are left alone.
    :param writers: ``{file name: fn(path)}``; each ``fn`` writes its file at ``path``.
    :param keep: generations kept after the switch (the new one included).

    Every file is written into a new ``.plr-gen-<N>`` directory and ``fsync``-ed; each visible name
    becomes a link through ``.plr-current``, and ``.plr-current`` is switched to the new generation with
    one :func:`os.replace`. A failure or a kill at any point leaves the previous generation current and
    complete; older generations beyond ``keep`` are removed after the switch.
    """
    for name in writers:
        if not name or "/" in name or os.sep in name or name.startswith("."):
            raise ValueError(f"checkpoint file names must be plain visible names, got {name!r}")
    gen = new_generation(directory)
    try:
        for name, write in writers.items():
            write(gen / name)
        commit_generation(directory, gen, visible=list(writers), keep=keep)
    except BaseException:
        if (
            os.path.lexists(Path(directory) / CURRENT_LINK)
            and os.readlink(Path(directory) / CURRENT_LINK) == gen.name
        ):
            raise  # the switch happened: the new generation is the checkpoint now
        shutil.rmtree(gen, ignore_errors=True)
        raise
    return gen
