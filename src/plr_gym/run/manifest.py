"""A run directory's checkpoint generations: the manifest, verifying a generation against it, and the
links that make one generation current.

Each checkpoint is a generation ``.plr-gen-<N>`` whose manifest ``checkpoint.json`` (written last) names
its timestep and every file with its size and SHA-256; ``.plr-current`` links to the current one, and the
visible names (``checkpoint.json``, ``model.zip``, ``plr``, the caller's files) link through it. The
atomic pieces (new generations, the switch of ``.plr-current``, pruning) are :mod:`plr_gym.checkpoint`'s;
this module decides whether a generation is a complete checkpoint.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from plr_gym.checkpoint import CURRENT_LINK, atomic_open, checkpoint_files, commit_generation, generations
from plr_gym.run.layout import (
    FORMAT,
    MANIFEST,
    MAX_STEP,
    MODEL_ZIP,
    STATE,
    Checkpoint,
    RunDirectoryError,
    plain_relative,
    read_json_object,
    reason,
    visible_names,
)

__all__ = [
    "GEN_PREFIX",
    "TORN_PREFIX",
    "Generations",
    "RunDirectoryWarning",
    "UnreadableCheckpointError",
    "file_entries",
    "stat_signature",
    "write_manifest",
]

#: The name of a generation is ``GEN_PREFIX + <N>`` (:mod:`plr_gym.checkpoint`); a torn one set aside at
#: a resume (a save killed before its manifest) is renamed ``TORN_PREFIX + <N>``.
GEN_PREFIX = ".plr-gen-"
TORN_PREFIX = ".plr-torn-"


class UnreadableCheckpointError(RunDirectoryError):
    """A checkpoint file exists but cannot be read by this process (owned by another user, a read error):
    not a corrupt checkpoint, so a resume never passes over it to an older one."""


class RunDirectoryWarning(UserWarning):
    """A resume passed over a newer generation that is not a checkpoint (torn or corrupt)."""


def generation_number(gen: Path) -> int:
    """``N`` of ``.plr-gen-<N>``."""
    return int(gen.name[len(GEN_PREFIX) :])


class Generations:
    """The checkpoint generations of the run directory ``path``: the current one, whether each verifies
    against its manifest, the links that make one current.

    Verifying a generation hashes its files; one verified before (or written by this process, see
    :meth:`remember`) is not hashed again while its files' sizes, times and inodes are unchanged.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._known_good: dict[Path, tuple[Any, ...]] = {}  # generations verified: their files' stat
        #: generations newer than the one a resume chose (see :meth:`newer_than`): never pruned
        self.protected: set[Path] = set()

    def paths(self) -> list[Path]:
        """The generation directories, oldest first."""
        return [path for _, path in generations(self.path)]

    # ------------------------------------------------------------------ which is current
    def current(self) -> Checkpoint | None:
        """The checkpoint ``.plr-current`` names, verified; without the link, the newest generation that
        verifies (see :meth:`RunDirectory.current <plr_gym.run.RunDirectory.current>`)."""
        link = self.path / CURRENT_LINK
        if not os.path.lexists(link):
            return self.newest_verified()
        if not link.is_symlink():
            raise RunDirectoryError(
                f"{link} is a {'directory' if link.is_dir() else 'file'}, not a symbolic link: "
                f"{self.path} was copied with its links dereferenced (cp -rL, rsync -L, an archive tool "
                "without links); copy the run directory again keeping links (cp -a, rsync -a) and resume "
                "the copy"
            )
        try:
            gen = checkpoint_files(self.path)
        except (ValueError, OSError) as exc:
            raise RunDirectoryError(f"{self.path}: {reason(exc)}") from None
        return self.verified(gen)

    def newest_verified(self) -> Checkpoint | None:
        """Without ``.plr-current``: the newest generation that verifies; ``None`` without generations, or
        when every generation is torn (a save killed before its manifest: no step was ever completed).

        A newer generation that exists but cannot be read (a file another user owns, a read error) is never
        passed over: :class:`UnreadableCheckpointError` names the file. One passed over because it is
        torn or corrupt is named in a :class:`RunDirectoryWarning`.
        """
        gens = self.paths()
        reasons = []
        for gen in reversed(gens):
            try:
                ckpt = self.verified(gen, hint=False)
            except UnreadableCheckpointError as exc:
                raise UnreadableCheckpointError(
                    f"{exc}; without a {CURRENT_LINK} link the run resumes from its newest checkpoint "
                    f"({gen.name} or newer), never from an older one: make the file readable (its owner, "
                    "permissions, the file system) and resume again; nothing was changed"
                ) from None
            except RunDirectoryError as exc:
                reasons.append(str(exc))
                continue
            for reason_ in reasons:
                warnings.warn(
                    f"{self.path}: resuming from {gen.name} (step {ckpt.timestep}), a newer generation "
                    f"is not a checkpoint: {reason_}",
                    RunDirectoryWarning,
                    stacklevel=2,
                )
            return ckpt
        if not gens or all(self.torn(gen) for gen in gens):
            return None  # no save ever completed: the run starts again from step 0
        raise RunDirectoryError(
            f"{self.path} has no {CURRENT_LINK} link and none of its {len(gens)} checkpoint generations "
            f"verifies (the newest: {reasons[0]}); nothing was changed"
        )

    def torn(self, gen: Path) -> bool:
        """Whether ``gen`` is a save cut short before its manifest (never a checkpoint). A manifest that
        exists but cannot be looked up raises :class:`UnreadableCheckpointError`."""
        try:
            os.lstat(gen / MANIFEST)
        except FileNotFoundError:
            return True
        except OSError as exc:
            raise UnreadableCheckpointError(f"{gen / MANIFEST} is unreadable: {reason(exc)}") from None
        return False

    def set_aside_torn(self) -> list[Path]:
        """Rename every torn generation ``.plr-gen-<N>`` to ``.plr-torn-<N>`` (kept for inspection, no
        longer a generation); returns the new paths. Only the latest cut save is kept: those set aside by
        an earlier resume are removed first (a run killed in its first save again and again, under a
        requeue loop, keeps one, and its ``.plr-gen-<N>`` may reuse a number set aside before)."""
        torn = [gen for gen in self.paths() if self.torn(gen)]
        if not torn:
            return []
        for old in self.path.glob(TORN_PREFIX + "*"):
            if old.is_dir() and not old.is_symlink():
                shutil.rmtree(old)
            else:
                old.unlink()
        moved = []
        for gen in torn:
            aside = gen.with_name(TORN_PREFIX + gen.name[len(GEN_PREFIX) :])
            os.rename(gen, aside)
            moved.append(aside)
        return moved

    def newer_than(self, ckpt: Checkpoint) -> set[Path]:
        """The generations newer than ``ckpt`` that claim to be checkpoints (they have a manifest): a run
        resumed from ``ckpt`` never prunes them (they may be intact and unreadable to this process only)."""
        number = generation_number(ckpt.path)
        newer = set()
        for gen in self.paths():
            if generation_number(gen) > number:
                with contextlib.suppress(UnreadableCheckpointError):
                    if self.torn(gen):
                        continue
                newer.add(gen)
        return newer

    # ------------------------------------------------------------------ verifying
    def verified(self, gen: Path, hint: bool = True) -> Checkpoint:
        """``gen`` as a checkpoint, once every file matches the manifest and ``state.json`` its step.

        :param hint: a failure's message says how to resume from an older generation.
        :raises RunDirectoryError: naming the file that does not match, and why.
        """
        signature = stat_signature(gen)  # before hashing: a file changed meanwhile is hashed again later

        def older() -> str:  # how to resume from an older generation, for a failure's message
            return self._older_hint(gen) if hint else ""

        step, manifest = read_manifest(gen)
        _check_files(gen, manifest["files"], older)
        if STATE in manifest["files"]:  # the manifest itself is not hashed: its step must be the files'
            saved = read_json_object(gen / STATE).get("num_timesteps")
            if saved != step:
                raise RunDirectoryError(
                    f"checkpoint {gen}: {STATE} says step {saved!r}, {MANIFEST} says {step}: the manifest "
                    "does not describe its files" + older()
                )
        if signature:
            self._known_good[gen] = signature  # a resume's generation is not hashed again at the next save
        return Checkpoint(path=gen, timestep=step, manifest=manifest)

    def verifies(self, gen: Path) -> bool:
        """Whether ``gen`` verifies (as :meth:`current` checks it), for pruning: only a generation that
        verifies counts towards ``keep``, so a torn or corrupt one never takes the place of a good one (N1).
        A generation verified before (or written by this object) is not hashed again while its files'
        sizes, times and inodes are unchanged."""
        signature = stat_signature(gen)
        if self._known_good.get(gen) == signature:
            return True
        try:
            self.verified(gen, hint=False)
        except RunDirectoryError:
            return False
        return True

    def remember(self, gen: Path) -> None:
        """``gen`` was just written and its files hashed for its manifest: it verifies as it is now."""
        self._known_good[gen] = stat_signature(gen)

    def _older_hint(self, gen: Path) -> str:
        older = [p.name for p in self.paths() if p != gen]
        if not older:
            return ""
        return (
            f"; older checkpoints are kept: 'ln -sfn {older[-1]} {self.path / CURRENT_LINK}' resumes from one"
        )

    # ------------------------------------------------------------------ links
    def relink_dereferenced_copy(self) -> None:
        """Undo ``cp -rL``: replace ``.plr-current`` and the visible names, copies of one generation, by
        the links they were, if every copy is identical to that generation and it verifies. Anything else
        is left as it is (and :meth:`current` refuses it, naming the cause)."""
        link = self.path / CURRENT_LINK
        if not link.is_dir() or link.is_symlink() or not (link / MANIFEST).is_file():
            return
        manifest = (link / MANIFEST).read_bytes()
        matches = [gen for gen in self.paths() if _same_bytes(gen / MANIFEST, manifest)]
        if not matches:
            return
        try:
            ckpt = self.verified(matches[-1], hint=False)
        except RunDirectoryError:
            return
        visible = visible_names(ckpt)
        copies = [n for n in visible if os.path.lexists(self.path / n) and not (self.path / n).is_symlink()]
        if not _same_tree(link, ckpt.path) or not all(
            _same_tree(self.path / n, ckpt.path / n) for n in copies
        ):
            return
        for name in copies:  # the visible names first: a kill part-way leaves .plr-current to repair again
            _remove(self.path / name)
        _remove(link)  # then the link: a kill here leaves none, and current() finds the generation
        commit_generation(self.path, ckpt.path, visible, keep=len(self.paths()) + 1)

    def relink(self, ckpt: Checkpoint) -> None:
        """Make ``ckpt`` current again after ``.plr-current`` was lost (a copy that skipped links): the
        link and the visible names that are missing (``checkpoint.json``, ``model.zip``, ``plr``, extra
        files); nothing is removed, and a visible name that exists as a file is left alone."""
        missing = [name for name in visible_names(ckpt) if not os.path.lexists(self.path / name)]
        commit_generation(self.path, ckpt.path, missing, keep=len(self.paths()) + 1)


# --------------------------------------------------------------------------------------------------
# the manifest
# --------------------------------------------------------------------------------------------------
def write_manifest(gen: Path, manifest: dict[str, Any]) -> None:
    """Write ``checkpoint.json`` into ``gen``: last, since a generation without it is not a checkpoint."""
    with atomic_open(gen / MANIFEST) as f:
        f.write((json.dumps(manifest, indent=2) + "\n").encode())


def read_manifest(gen: Path) -> tuple[int, dict[str, Any]]:
    """The step and the manifest of ``gen``, its shape checked (not yet its files)."""
    where = gen / MANIFEST
    try:
        manifest = json.loads(where.read_bytes())
    except FileNotFoundError:
        raise RunDirectoryError(f"{where} is missing: the checkpoint is incomplete") from None
    except OSError as exc:  # it exists: another user's file, a read error (not a corrupt checkpoint)
        raise UnreadableCheckpointError(f"{where} is unreadable: {reason(exc)}") from None
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise RunDirectoryError(f"{where} is not a valid manifest ({reason(exc)})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise RunDirectoryError(f"{where} is not a plr-gym checkpoint manifest of format {FORMAT!r}")
    step = manifest.get("timestep")
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= MAX_STEP:
        raise RunDirectoryError(f"{where}: timestep must be an int in [0, 2**63 - 1], got {step!r}")
    files = manifest.get("files")
    if not isinstance(files, dict) or MODEL_ZIP not in files:
        raise RunDirectoryError(f"{where}: 'files' must list the checkpoint's files, {MODEL_ZIP} among them")
    return step, manifest


def _check_files(gen: Path, files: dict[Any, Any], older: Callable[[], str]) -> None:
    """Every file the manifest names exists in ``gen`` with the recorded size and SHA-256."""
    where = gen / MANIFEST
    for name, entry in files.items():
        if not isinstance(name, str) or not plain_relative(name) or name == MANIFEST:
            raise RunDirectoryError(f"{where}: {name!r} is not a file name inside the checkpoint")
        if (
            not isinstance(entry, dict)
            or not isinstance(entry.get("bytes"), int)
            or not isinstance(entry.get("sha256"), str)
        ):
            raise RunDirectoryError(f"{where}: the entry of {name} must be {{'bytes': int, 'sha256': str}}")
        path = gen / name
        try:
            size = os.lstat(path).st_size
            digest = sha256(path)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError) as exc:  # missing: incomplete
            raise RunDirectoryError(f"checkpoint file {path} is unreadable: {reason(exc)}") from None
        except OSError as exc:  # it exists: another user's file, a read error
            raise UnreadableCheckpointError(f"checkpoint file {path} is unreadable: {reason(exc)}") from None
        if size != entry["bytes"] or digest != entry["sha256"]:
            raise RunDirectoryError(
                f"checkpoint file {path} is corrupt: {size} bytes with SHA-256 {digest[:12]}..., the "
                f"manifest says {entry['bytes']} bytes, {str(entry['sha256'])[:12]}..." + older()
            )


# --------------------------------------------------------------------------------------------------
# files
# --------------------------------------------------------------------------------------------------
def sha256(path: Path) -> str:
    """The SHA-256 of the file ``path``, in hex."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def stat_signature(gen: Path) -> tuple[Any, ...]:
    """Every entry under ``gen`` with its kind, size, modification time and inode (changes if a file does)."""
    out: list[Any] = []
    for root, dirs, names in os.walk(gen):
        dirs.sort()
        for name in sorted([*dirs, *names]):
            try:
                st = os.lstat(os.path.join(root, name))
            except OSError:
                return ()
            out.append((os.path.join(root, name), st.st_mode, st.st_size, st.st_mtime_ns, st.st_ino))
    return tuple(out)


def file_entries(gen: Path) -> dict[str, dict[str, Any]]:
    """Every file under ``gen`` with its size and hash, each ``fsync``-ed (durable before the commit)."""
    entries = {}
    for root, dirs, names in os.walk(gen):
        dirs.sort()
        for name in sorted(names):
            path = Path(root) / name
            rel = path.relative_to(gen).as_posix()
            with open(path, "rb") as f:
                digest = hashlib.sha256()
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    digest.update(chunk)
                with contextlib.suppress(OSError):
                    os.fsync(f.fileno())
            entries[rel] = {"bytes": path.stat().st_size, "sha256": digest.hexdigest()}
        for name in dirs:
            with contextlib.suppress(OSError):
                fd = os.open(Path(root) / name, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
    return entries


def _same_bytes(path: Path, data: bytes) -> bool:
    return path.is_file() and path.read_bytes() == data


def _same_tree(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` hold the same regular files (names and bytes) and directories, no links."""
    if a.is_symlink() or b.is_symlink():
        return False
    if a.is_file() and b.is_file():
        return a.stat().st_size == b.stat().st_size and sha256(a) == sha256(b)
    if a.is_dir() and b.is_dir():
        names = sorted(os.listdir(a))
        return names == sorted(os.listdir(b)) and all(_same_tree(a / n, b / n) for n in names)
    return False


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()
