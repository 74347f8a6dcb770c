"""A training run's directory: one object for its lock, checkpoints, logs and resume.

:class:`RunDirectory` owns the layout of a run directory, as rl_zoo3's ``ExperimentManager`` owns its log
folder. ``plr-gym train`` only parses arguments and hands them to it; a library user drives the same
object from their own script:

- **one trainer per directory**: :meth:`RunDirectory.acquire` takes an exclusive ``flock`` on the run
  directory itself (deleting a file in it never frees the lock) and records its pid in ``.plr-lock``. A
  second trainer gets :class:`RunLockedError` naming that pid. The kernel drops the lock when its
  holder dies, even by ``SIGKILL``, so a stale lock is never in the way and never has to be guessed at.
- **one consistent checkpoint**: :meth:`RunDirectory.save` writes the model (its weights and optimizer
  state, ``parameters.pt``, and SB3's ``model.zip``), the level source and the scorer's open episodes
  (``plr/``), the RNG states (numpy, torch, Python's ``random``), VecNormalize statistics where the
  env has them, the run's logs as of this step (``logs/eval.csv``), extra files of the caller and, opt
  in, the replay buffer, all into a new generation ``.plr-gen-<N>``. The generation's manifest
  ``checkpoint.json`` (its timestep, and every file with its size and SHA-256) is written last, then one
  atomic switch of ``.plr-current`` makes the generation current. ``checkpoint.json``, ``model.zip``
  and ``plr`` at the top of the directory are links through ``.plr-current``: they change together, at
  that one instant. The new generation and the ``keep - 1`` newest older ones that verify are kept (a torn
  or corrupt generation never takes a good one's place).
- **resume reads the manifest only**: :meth:`RunDirectory.restore` checks every file against the
  manifest (size and hash) and every part against the live objects before changing anything, loads the
  weights with ``torch.load(weights_only=True)`` into a model built from the run's configuration (no
  unpickling), and cuts the logs (``eval.csv``, TensorBoard's event files) back to the checkpoint's
  step. Without ``.plr-current`` (a copy that skipped links) it resumes the newest generation that
  verifies; it never removes one.
- **when to save**: :class:`~plr_gym.RunCheckpointCallback` (:mod:`plr_gym.callbacks`, above this
  package: the run directory never imports it) saves every ``save_freq`` steps (at the first rollout
  boundary after them, when the model has trained on every step it counts), at the end of training,
  and at the current step when :class:`StopOnSignals` reports ``SIGTERM``, ``SIGINT`` or ``SIGUSR1``
  (SLURM's ``--signal``).

Example:
    >>> import tempfile
    >>> from stable_baselines3 import PPO
    >>> from stable_baselines3.common.env_util import make_vec_env
    >>> from minigrid.wrappers import FlatObsWrapper
    >>> from plr_gym import LevelWrapper, PLRCallback, PrioritizedLevelReplay, RunCheckpointCallback
    >>> from plr_gym.run import RunDirectory
    >>> def build():
    ...     venv = make_vec_env("MiniGrid-Empty-5x5-v0", n_envs=2, seed=0,
    ...                         wrapper_class=lambda e: LevelWrapper(FlatObsWrapper(e)))
    ...     venv = PrioritizedLevelReplay(venv, levels=range(10), seed=0)
    ...     return PPO("MlpPolicy", venv, n_steps=64, batch_size=64, n_epochs=1, seed=0), PLRCallback()
    >>> path = tempfile.mkdtemp()
    >>> with RunDirectory(path) as run:
    ...     model, plr = build()
    ...     saver = RunCheckpointCallback(run, save_freq=128, plr_callback=plr)
    ...     model = model.learn(256, callback=[plr, saver])
    >>> RunDirectory(path).current().timestep
    256
    >>> with RunDirectory(path) as run:           # later, in a new process: the same two objects,
    ...     model, plr = build()                  # then one call restores both
    ...     run.restore(model, plr_callback=plr).timestep
    ...     saver = RunCheckpointCallback(run, save_freq=128, plr_callback=plr)
    ...     model = model.learn(128, callback=[plr, saver], reset_num_timesteps=False)
    256
    >>> RunDirectory(path).current().timestep
    384
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import random
import shutil
import signal
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, NoReturn

import numpy as np

from plr_gym.checkpoint import (
    CURRENT_LINK,
    atomic_open,
    checkpoint_files,
    commit_generation,
    generations,
    load_npz,
    new_generation,
    save_npz,
)

__all__ = [
    "CONFIG_FILE",
    "DEFAULT_KEEP",
    "DEFAULT_SAVE_FREQ",
    "FORMAT",
    "LOCK_FILE",
    "MANIFEST",
    "Checkpoint",
    "RunDirectory",
    "RunDirectoryError",
    "RunLockedError",
    "StopOnSignals",
    "cut_event_logs",
]

#: The manifest of a checkpoint: written last in its generation, linked at the top of the run directory.
MANIFEST = "checkpoint.json"
#: The file holding the pid of a run directory's lock holder (the lock is an ``flock`` on the directory).
LOCK_FILE = ".plr-lock"
#: The run's configuration (``plr-gym train`` writes its arguments there when it starts).
CONFIG_FILE = "config.json"
#: ``format`` of the manifests this version writes and reads.
FORMAT = "plr-gym-run-checkpoint/1"
#: Default of ``save_freq`` (``plr-gym train --save-freq``), in environment steps.
DEFAULT_SAVE_FREQ = 50_000
#: Default number of generations kept (``plr-gym train --keep-checkpoints``).
DEFAULT_KEEP = 2

MODEL_ZIP = "model.zip"
PARAMETERS = "parameters.pt"
STATE = "state.json"
RNG = "rng.npz"
PLR_DIR = "plr"
VECNORMALIZE = "vecnormalize.npz"
REPLAY_BUFFER = "replay_buffer.npz"
LOGS_DIR = "logs"
_MAX_STEP = 2**63 - 1
_SIGNALS = ("SIGTERM", "SIGINT", "SIGUSR1")


class RunDirectoryError(ValueError):
    """A run directory cannot be used as asked (unwritable, corrupt, or a checkpoint that disagrees with
    the run being resumed); the message says which file and why, in one line."""


class RunLockedError(RunDirectoryError):
    """Another live process holds the run directory's lock.

    :param path: the run directory.
    :param pid: the holder's pid, as it recorded it (``None`` if unreadable).
    """

    def __init__(self, path: Path, pid: int | None) -> None:
        who = f"pid {pid}" if pid is not None else "another process"
        super().__init__(
            f"run directory {path} is in use by another trainer ({who}): one trainer per run directory; "
            "wait for it to finish or stop it first"
        )
        self.path = path
        self.pid = pid


@dataclass(frozen=True)
class Checkpoint:
    """One verified checkpoint of a run directory (see :meth:`RunDirectory.current`).

    :param path: its generation directory (``RUN/.plr-gen-<N>``).
    :param timestep: the model's ``num_timesteps`` when it was saved.
    :param manifest: the parsed ``checkpoint.json``.
    """

    path: Path
    timestep: int
    manifest: Mapping[str, Any] = field(repr=False)

    def file(self, name: str) -> Path:
        """The path of file ``name`` (e.g. ``"plr/plr_sampler.npz"``) in this checkpoint.

        :raises RunDirectoryError: the manifest lists no such file.
        """
        if name not in self.manifest["files"]:
            raise RunDirectoryError(f"checkpoint {self.path} has no {name} (its files: {self.names()})")
        return self.path / name

    def has(self, name: str) -> bool:
        """Whether the checkpoint holds file ``name``, or files under the folder ``name``."""
        return any(f == name or f.startswith(name + "/") for f in self.manifest["files"])

    def names(self) -> str:
        return ", ".join(sorted(self.manifest["files"]))


# --------------------------------------------------------------------------------------------------
# the directory
# --------------------------------------------------------------------------------------------------
class RunDirectory:
    """The directory of one training run: lock, checkpoints (generations + manifest), logs, resume.

    :param path: the run directory (created by :meth:`acquire` if missing).
    :param keep: checkpoint generations kept (the current one included); after each save, older ones are
        removed except the ``keep - 1`` newest that verify against their manifests.
    :param logs: append-only log files of the run directory (names relative to it) that are part of
        the checkpoint: :meth:`save` copies each into the generation, :meth:`restore` puts the copy back,
        so a resumed run continues each log from the checkpoint's step, with no duplicated rows.
    :param event_logs: folders of TensorBoard event files (e.g. ``("tb",)``, SB3's ``tensorboard_log``):
        :meth:`restore` cuts every event file under them back to the checkpoint's step
        (:func:`cut_event_logs`), so a resumed run's curves continue without duplicated points.

    Use it as a context manager (``with RunDirectory(path) as run:``), or call :meth:`acquire` and
    :meth:`release`. Saving and restoring need the lock; :meth:`current` and :meth:`read_config` do not.

    Layout (``plr-gym train`` adds ``eval.csv``, ``evaluation.json``, ``curriculum.png``, ``tb/``)::

        RUN/.plr-lock             the lock holder's pid (the lock: an flock on RUN itself)
        RUN/config.json           the run's configuration (write_config)
        RUN/.plr-gen-<N>/         one checkpoint generation: checkpoint.json (written last), model.zip,
                                  parameters.pt, state.json, rng.npz, plr/, logs/, [vecnormalize.npz,
                                  replay_buffer.npz, the caller's files]
        RUN/.plr-current          -> .plr-gen-<N>, switched atomically by each save
        RUN/checkpoint.json       -> .plr-current/checkpoint.json  (likewise model.zip, plr, extra files)

    Example (the module's docstring trains, saves and resumes):
        >>> import tempfile
        >>> run = RunDirectory(tempfile.mkdtemp(), keep=3)
        >>> with run:
        ...     run.write_config({"seed": 0})
        ...     run.current() is None, run.locked
        (True, True)
        >>> run.read_config(), run.locked
        ({'seed': 0}, False)
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        keep: int = DEFAULT_KEEP,
        logs: Iterable[str] = ("eval.csv",),
        event_logs: Iterable[str] = (),
    ) -> None:
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
            raise ValueError(f"keep must be a positive int, got {keep!r}")
        self.path = Path(path)
        self.keep = keep
        self.logs = tuple(logs)
        self.event_logs = tuple(event_logs)
        for name in self.logs:
            if not isinstance(name, str) or not _plain_relative(name):
                raise ValueError(f"logs must be file names relative to the run directory, got {name!r}")
        for name in self.event_logs:
            if not isinstance(name, str) or not _plain_relative(name):
                raise ValueError(
                    f"event_logs must be folder names relative to the run directory, got {name!r}"
                )
        self._lock_fd: int | None = None
        self._resuming: tuple[Path, dict[str, Any]] | None = None  # begin(resume=True) -> restore()
        self._known_good: dict[Path, tuple[Any, ...]] = {}  # generations verified: their files' stat

    def __repr__(self) -> str:
        return f"RunDirectory({str(self.path)!r}, keep={self.keep})"

    # ------------------------------------------------------------------ lock
    def acquire(self) -> RunDirectory:
        """Take the run directory's lock (creating the directory if needed) and check it is writable.

        The lock is an exclusive ``flock`` on the directory itself (on platforms that cannot lock a
        directory, on ``.plr-lock``): deleting or replacing ``.plr-lock`` never lets a second trainer in.
        ``.plr-lock`` records the holder's pid for the message a second trainer gets.

        :raises RunLockedError: another live process holds it (its pid is named).
        :raises RunDirectoryError: the directory cannot be created or written (read-only, a file...).
        """
        if self._lock_fd is not None:
            return self
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            fd = _open_lock_target(self.path)
        except OSError as exc:
            raise RunDirectoryError(f"cannot use run directory {self.path}: {_reason(exc)}") from None
        try:
            try:
                locked = _try_lock(fd)
            except OSError as exc:  # e.g. no lock support on this filesystem
                raise RunDirectoryError(f"cannot lock run directory {self.path}: {_reason(exc)}") from None
            if not locked:
                raise RunLockedError(self.path, _read_pid(self.path / LOCK_FILE))
            try:
                with atomic_open(self.path / LOCK_FILE) as f:  # the holder's pid, for RunLockedError
                    f.write(f"{os.getpid()}\n".encode())
            except OSError as exc:
                raise RunDirectoryError(
                    f"cannot write in run directory {self.path}: {_reason(exc)}"
                ) from None
            self._probe_writable()
        except BaseException:
            os.close(fd)
            raise
        self._lock_fd = fd
        return self

    def release(self) -> None:
        """Release the lock (the kernel also does when the process dies)."""
        self._resuming = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    @property
    def locked(self) -> bool:
        """Whether this object holds the lock."""
        return self._lock_fd is not None

    def __enter__(self) -> RunDirectory:
        return self.acquire()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()

    def _probe_writable(self) -> None:
        """Fail now, not hours into training, when the directory cannot take new files."""
        try:
            with atomic_open(self.path / ".plr-write-probe") as f:
                f.write(b"ok")
            os.unlink(self.path / ".plr-write-probe")
        except OSError as exc:
            raise RunDirectoryError(f"cannot write in run directory {self.path}: {_reason(exc)}") from None

    def _require_lock(self, what: str) -> None:
        if self._lock_fd is None:
            raise RuntimeError(
                f"RunDirectory.{what} needs the lock: use 'with RunDirectory(...)' or acquire()"
            )

    # ------------------------------------------------------------------ starting a run
    def begin(
        self,
        config: Mapping[str, Any],
        *,
        resume: bool = False,
        overwrite: bool = False,
        mutable: Iterable[str] = (),
        run_files: Iterable[str] = (),
    ) -> Checkpoint | None:
        """Start or continue the run in this directory: take the lock, check, write ``config.json``.

        - A new run (``resume=False``) needs an empty directory, or ``overwrite`` (which removes the
          checkpoints and ``run_files``, nothing else).
        - ``resume=True`` continues from the current checkpoint, after checking that ``config`` agrees
          with the run's ``config.json`` on every key both hold except those in ``mutable`` (e.g. the
          total budget). A directory without a checkpoint (missing, empty, or a run killed before its
          first save) starts again from step 0. When :meth:`restore` has restored the checkpoint,
          ``config.json`` gets ``config`` and ``resumed_at``, the step of each resume; a resume that
          fails (or a finished run that is not restored) leaves ``config.json`` as it was.
        - Without ``.plr-current`` the newest generation that verifies is resumed (see :meth:`current`);
          a verified generation is never removed. A copy made with its links dereferenced (``cp -rL``:
          ``.plr-current``, ``plr``, ``model.zip``... are copies) gets its links back when every copy is
          identical to the generation whose manifest ``.plr-current`` holds, and that generation
          verifies; otherwise it is refused (:meth:`current`).

        :return: the checkpoint to :meth:`restore` from, or ``None`` for a run starting at step 0.
        :raises RunLockedError: another trainer holds the directory.
        :raises RunDirectoryError: a non-empty directory without ``overwrite``, another configuration,
            a corrupt checkpoint, or a directory that cannot be written. The lock is released.
        """
        files = tuple(run_files)
        if not resume and not overwrite and self._has_entries():
            raise RunDirectoryError(
                f"{self.path} is not empty: replace the run in it (plr-gym train --overwrite), continue it "
                "(--resume) or choose another directory"
            )
        self.acquire()
        try:
            if not resume:
                if overwrite:
                    self.clear(files)
                self.write_config(config)
                return None
            self._relink_dereferenced_copy()
            ckpt = self.current()
            previous = self.read_config()
            if ckpt is not None and previous is None:
                raise RunDirectoryError(
                    f"{self.path} has a checkpoint but no {CONFIG_FILE}: cannot check the run"
                )
            if ckpt is None and self._has_legacy_run():
                raise RunDirectoryError(
                    f"{self.path} holds a run without {MANIFEST} (written by an older plr-gym): it cannot be "
                    "resumed; start it again with --overwrite"
                )
            if previous is not None:
                _check_same_run(self.path, previous, config, frozenset(mutable))
            if ckpt is None:  # nothing to continue from: a fresh start, without the logs of the lost one
                self.clear(files)
                self.write_config(config)
                return None
            resumed = previous.get("resumed_at", []) if previous is not None else []
            if not isinstance(resumed, list):
                raise RunDirectoryError(f"{self.path / CONFIG_FILE}: resumed_at must be a list of steps")
            if not os.path.lexists(self.path / CURRENT_LINK):
                self._relink(ckpt)
            # written by restore() once the checkpoint is restored: a failed resume records nothing
            self._resuming = (ckpt.path, {**config, "resumed_at": [*resumed, ckpt.timestep]})
            return ckpt
        except BaseException:
            self.release()
            raise

    def _relink_dereferenced_copy(self) -> None:
        """Undo ``cp -rL``: replace ``.plr-current`` and the visible names, copies of one generation, by
        the links they were, if every copy is identical to that generation and it verifies. Anything else
        is left as it is (and :meth:`current` refuses it, naming the cause)."""
        link = self.path / CURRENT_LINK
        if not link.is_dir() or link.is_symlink() or not (link / MANIFEST).is_file():
            return
        manifest = (link / MANIFEST).read_bytes()
        gens = [gen for gen in self.checkpoints() if (gen / MANIFEST).is_file()]
        matches = [gen for gen in gens if (gen / MANIFEST).read_bytes() == manifest]
        if not matches:
            return
        try:
            ckpt = self._verified(matches[-1], hint=False)
        except RunDirectoryError:
            return
        top = {name.split("/")[0] for name in ckpt.manifest["files"]}
        visible = [MANIFEST, *sorted(top - (_RESERVED - {MODEL_ZIP, PLR_DIR}))]
        copies = [n for n in visible if os.path.lexists(self.path / n) and not (self.path / n).is_symlink()]
        if not _same_tree(link, ckpt.path) or not all(
            _same_tree(self.path / n, ckpt.path / n) for n in copies
        ):
            return
        for name in copies:  # the visible names first: a kill part-way leaves .plr-current to repair again
            _remove(self.path / name)
        _remove(link)  # then the link: a kill here leaves none, and current() finds the generation
        commit_generation(self.path, ckpt.path, visible, keep=len(self.checkpoints()) + 1)

    def _relink(self, ckpt: Checkpoint) -> None:
        """Make ``ckpt`` current again after ``.plr-current`` was lost (a copy that skipped links): the
        link and the visible names that are missing (``checkpoint.json``, ``model.zip``, ``plr``, extra
        files); nothing is removed, and a visible name that exists as a file is left alone."""
        top = {name.split("/")[0] for name in ckpt.manifest["files"]}
        visible = [MANIFEST, *sorted(top - (_RESERVED - {MODEL_ZIP, PLR_DIR}))]
        missing = [name for name in visible if not os.path.lexists(self.path / name)]
        commit_generation(self.path, ckpt.path, missing, keep=len(self.checkpoints()) + 1)

    def clear(self, run_files: Iterable[str] = ()) -> None:
        """Remove the checkpoints (generations and their links) and ``run_files``; nothing else."""
        self._require_lock("clear")
        names = [MANIFEST, MODEL_ZIP, PLR_DIR, CURRENT_LINK, *run_files]
        names += [p.name for p in self.path.iterdir() if p.name.startswith(".plr-gen-")]
        for name in names:
            path = self.path / name
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            elif os.path.lexists(path):
                path.unlink()

    def _has_entries(self) -> bool:
        return self.path.is_dir() and any(p.name != LOCK_FILE for p in self.path.iterdir())

    def _has_legacy_run(self) -> bool:
        return any(
            os.path.lexists(self.path / name) and not (self.path / name).is_symlink()
            for name in (MODEL_ZIP, PLR_DIR)
        )

    # ------------------------------------------------------------------ configuration
    def write_config(self, config: Mapping[str, Any]) -> None:
        """Write the run's configuration (``config.json``, atomically; values JSON cannot hold as str)."""
        self._require_lock("write_config")
        text = json.dumps(dict(config), indent=2, default=str) + "\n"
        with atomic_open(self.path / CONFIG_FILE) as f:
            f.write(text.encode())

    def read_config(self) -> dict[str, Any] | None:
        """The run's configuration, or ``None`` without ``config.json``.

        :raises RunDirectoryError: it is not a JSON object.
        """
        path = self.path / CONFIG_FILE
        if not path.exists():
            return None
        return _read_json_object(path)

    # ------------------------------------------------------------------ reading checkpoints
    def current(self) -> Checkpoint | None:
        """The current checkpoint, verified against its manifest; ``None`` if the directory has none.

        Reads ``.plr-current`` once and the generation's ``checkpoint.json``; every file the manifest
        names must exist inside the generation with the recorded size and SHA-256, and ``state.json`` must
        hold the manifest's step. Without ``.plr-current`` (a copy made by a tool that skips symbolic
        links, or a link removed by hand) it is the newest generation that verifies; a generation is
        never skipped silently when ``.plr-current`` names it.

        :raises RunDirectoryError: a corrupt or incomplete checkpoint (the message names the file), a
            directory whose generations all fail to verify, or a ``.plr-current`` that is not a link (the
            run was copied with its links dereferenced).
        """
        link = self.path / CURRENT_LINK
        if not os.path.lexists(link):
            return self._newest_verified()
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
            raise RunDirectoryError(f"{self.path}: {_reason(exc)}") from None
        return self._verified(gen)

    def _newest_verified(self) -> Checkpoint | None:
        """Without ``.plr-current``: the newest generation that verifies; ``None`` without generations."""
        gens = self.checkpoints()
        reasons = []
        for gen in reversed(gens):
            try:
                return self._verified(gen, hint=False)
            except RunDirectoryError as exc:
                reasons.append(str(exc))
        if not gens:
            return None
        raise RunDirectoryError(
            f"{self.path} has no {CURRENT_LINK} link and none of its {len(gens)} checkpoint generations "
            f"verifies (the newest: {reasons[0]}); nothing was changed"
        )

    def checkpoints(self) -> list[Path]:
        """The generation directories kept, oldest first."""
        return [path for _, path in generations(self.path)]

    def _verified(self, gen: Path, hint: bool = True) -> Checkpoint:
        signature = _stat_signature(gen)  # before hashing: a file changed meanwhile is hashed again later
        where = gen / MANIFEST
        try:
            manifest = json.loads(where.read_bytes())
        except FileNotFoundError:
            raise RunDirectoryError(f"{where} is missing: the checkpoint is incomplete") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
            raise RunDirectoryError(f"{where} is not a valid manifest ({_reason(exc)})") from None
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
            raise RunDirectoryError(f"{where} is not a plr-gym checkpoint manifest of format {FORMAT!r}")
        step = manifest.get("timestep")
        if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= _MAX_STEP:
            raise RunDirectoryError(f"{where}: timestep must be an int in [0, 2**63 - 1], got {step!r}")
        files = manifest.get("files")
        if not isinstance(files, dict) or MODEL_ZIP not in files:
            raise RunDirectoryError(
                f"{where}: 'files' must list the checkpoint's files, {MODEL_ZIP} among them"
            )
        for name, entry in files.items():
            if not isinstance(name, str) or not _plain_relative(name) or name == MANIFEST:
                raise RunDirectoryError(f"{where}: {name!r} is not a file name inside the checkpoint")
            if (
                not isinstance(entry, dict)
                or not isinstance(entry.get("bytes"), int)
                or not isinstance(entry.get("sha256"), str)
            ):
                raise RunDirectoryError(
                    f"{where}: the entry of {name} must be {{'bytes': int, 'sha256': str}}"
                )
            path = gen / name
            try:
                size = os.lstat(path).st_size
                digest = _sha256(path)
            except OSError as exc:
                raise RunDirectoryError(f"checkpoint file {path} is unreadable: {_reason(exc)}") from None
            if size != entry["bytes"] or digest != entry["sha256"]:
                raise RunDirectoryError(
                    f"checkpoint file {path} is corrupt: {size} bytes with SHA-256 {digest[:12]}..., the "
                    f"manifest says {entry['bytes']} bytes, {str(entry['sha256'])[:12]}..."
                    + (self._older_hint(gen) if hint else "")
                )
        if STATE in files:  # the manifest itself is not hashed: its step must be the one the files hold
            saved = _read_json_object(gen / STATE).get("num_timesteps")
            if saved != step:
                raise RunDirectoryError(
                    f"checkpoint {gen}: {STATE} says step {saved!r}, {MANIFEST} says {step}: the manifest "
                    "does not describe its files" + (self._older_hint(gen) if hint else "")
                )
        if signature:
            self._known_good[gen] = signature  # a resume's generation is not hashed again at the next save
        return Checkpoint(path=gen, timestep=step, manifest=manifest)

    def _verifies(self, gen: Path) -> bool:
        """Whether ``gen`` verifies (as :meth:`current` checks it), for pruning: only a generation that
        verifies counts towards ``keep``, so a torn or corrupt one never takes the place of a good one (N1).
        A generation verified before (or written by this object) is not hashed again while its files'
        sizes, times and inodes are unchanged."""
        signature = _stat_signature(gen)
        if self._known_good.get(gen) == signature:
            return True
        try:
            self._verified(gen, hint=False)
        except RunDirectoryError:
            return False
        return True

    def _older_hint(self, gen: Path) -> str:
        older = [p.name for p in self.checkpoints() if p != gen]
        if not older:
            return ""
        return (
            f"; older checkpoints are kept: 'ln -sfn {older[-1]} {self.path / CURRENT_LINK}' resumes from one"
        )

    # ------------------------------------------------------------------ saving
    def save(
        self,
        model: Any,
        *,
        plr_callback: Any = None,
        files: Mapping[str, Callable[[Path], Any]] | None = None,
        replay_buffer: bool = False,
    ) -> Checkpoint:
        """Write one checkpoint of ``model`` (and of the level source it trains on) as a new generation.

        :param model: an SB3 model (its ``num_timesteps`` is the checkpoint's timestep).
        :param plr_callback: the run's :class:`~plr_gym.PLRCallback`: its level source and its scorer's
            open episodes are saved under ``plr/``. Without it, the level source of a
            :class:`~plr_gym.PrioritizedLevelReplay` in the model's env (if any) is saved alone.
        :param files: extra files, ``{name: fn(path)}``; each ``fn`` writes its file at ``path`` (e.g.
            ``{"curriculum.npz": curriculum.save}``). They are linked at the top of the run directory.
        :param replay_buffer: also save an off-policy model's replay buffer (``replay_buffer.npz``;
            large).
        :return: the new checkpoint. A save that fails or is killed leaves the previous one current and
            complete.
        """
        self._require_lock("save")
        extra = dict(files or {})
        for name in extra:
            if not _plain_relative(name) or "/" in name or name in _RESERVED:
                raise ValueError(f"files: {name!r} must be a plain file name other than {sorted(_RESERVED)}")
        step = int(model.num_timesteps)
        gen = new_generation(self.path)
        try:
            with open(gen / MODEL_ZIP, "wb") as f:  # closed here even if the write fails (no GC warning)
                model.save(f)
            _save_model_state(model, gen)
            save_npz(gen / RNG, _rng_arrays())
            if _write_level_source(model, plr_callback, gen / PLR_DIR):
                extra_visible = [PLR_DIR]
            else:
                extra_visible = []
            vecnormalize = _find_vecnormalize(model.get_env())
            if vecnormalize is not None:
                save_npz(gen / VECNORMALIZE, _vecnormalize_arrays(vecnormalize))
            if replay_buffer:
                _save_replay_buffer(model, gen / REPLAY_BUFFER)
            for name, write in extra.items():
                write(gen / name)
            log_dir = gen / LOGS_DIR
            for name in self.logs:
                source = self.path / name
                if source.is_file():
                    (log_dir / name).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(source, log_dir / name)
            manifest = {
                "format": FORMAT,
                "timestep": step,
                "algo": type(model).__name__,
                "files": _file_entries(gen),
                "logs": sorted(n for n in self.logs if (log_dir / n).is_file()),
            }
            with atomic_open(gen / MANIFEST) as f:  # last: a generation without it is not a checkpoint
                f.write((json.dumps(manifest, indent=2) + "\n").encode())
            self._known_good[gen] = _stat_signature(gen)  # its files were hashed for the manifest just now
            commit_generation(
                self.path,
                gen,
                [MANIFEST, MODEL_ZIP, *extra_visible, *extra],
                keep=self.keep,
                complete=self._verifies,
            )
        except BaseException:
            link = self.path / CURRENT_LINK
            if not (link.is_symlink() and os.readlink(link) == gen.name):
                shutil.rmtree(gen, ignore_errors=True)
            raise
        return Checkpoint(path=gen, timestep=step, manifest=manifest)

    @property
    def callback(self) -> NoReturn:
        """Removed: build ``plr_gym.RunCheckpointCallback(run, save_freq, plr_callback=..., ...)``.

        The run directory does not know the callback that saves into it (the callback imports the run
        directory, never the other way round). Reading the attribute raises :class:`AttributeError`, as
        for an attribute that is gone (``hasattr(run, "callback")`` is ``False``), with a message naming
        the replacement.
        """
        raise AttributeError(
            "RunDirectory.callback(...) was removed: use plr_gym.RunCheckpointCallback(run, save_freq, "
            "plr_callback=..., files=..., replay_buffer=..., stop=..., save_seconds=...)"
        )

    # ------------------------------------------------------------------ restoring
    def restore(
        self,
        model: Any,
        *,
        plr_callback: Any = None,
        replay_buffer: bool = False,
        checkpoint: Checkpoint | None = None,
    ) -> Checkpoint | None:
        """Restore ``model`` and its level source from the current checkpoint; ``None`` if there is none.

        ``model`` is a freshly built model of the run's algorithm and configuration (on its training
        env); its weights and optimizer state are loaded with ``torch.load(weights_only=True)`` (no
        unpickling), then its step counters, episode statistics, the RNG states, VecNormalize statistics
        and (with ``replay_buffer``) the replay buffer. The level source is restored now; the scorer's
        open episodes when training starts (``plr_callback.resume_from``, which also restarts the envs
        on levels drawn by the restored source). The logs are put back as they were at the checkpoint.
        Continue with ``model.learn(total - model.num_timesteps, reset_num_timesteps=False, ...)``.

        Everything is checked before anything changes: a checkpoint whose files disagree with the
        manifest, with each other or with ``model`` (another algorithm, other network shapes, a
        VecNormalize present in one and not the other) raises :class:`RunDirectoryError` and leaves
        ``model`` and the level source as they were.
        """
        self._require_lock("restore")
        ckpt = checkpoint if checkpoint is not None else self.current()
        if ckpt is None:
            return None
        algo = ckpt.manifest.get("algo")
        if algo != type(model).__name__:
            raise RunDirectoryError(
                f"checkpoint {ckpt.path} holds a {algo} model, this run builds a {type(model).__name__}"
            )
        params = _load_parameters(ckpt, model)
        state = _load_model_state(ckpt)
        if state["num_timesteps"] != ckpt.timestep:
            raise RunDirectoryError(
                f"checkpoint {ckpt.path}: {STATE} says step {state['num_timesteps']}, the manifest "
                f"{ckpt.timestep}: the parts disagree"
            )
        rng = _checked_rng(load_npz(ckpt.file(RNG)), ckpt)
        vecnormalize = _find_vecnormalize(model.get_env())
        if (vecnormalize is not None) != ckpt.has(VECNORMALIZE):
            raise RunDirectoryError(
                f"checkpoint {ckpt.path} was saved {'with' if ckpt.has(VECNORMALIZE) else 'without'} "
                f"VecNormalize statistics, this run's env {'has' if vecnormalize is not None else 'has no'} "
                "VecNormalize"
            )
        vn_state = (
            _checked_vecnormalize(load_npz(ckpt.file(VECNORMALIZE)), vecnormalize, ckpt)
            if vecnormalize is not None
            else None
        )
        if replay_buffer and not ckpt.has(REPLAY_BUFFER):
            raise RunDirectoryError(f"checkpoint {ckpt.path} holds no replay buffer (saved without it)")
        restore_source = _level_source_loader(model, plr_callback, ckpt)
        # every part is read and checked: now change things, the level source first (all or nothing)
        try:
            restore_source()
        except (ValueError, OSError) as exc:
            raise RunDirectoryError(f"checkpoint {ckpt.path}/{PLR_DIR}: {_reason(exc)}") from None
        if replay_buffer:
            try:
                _load_replay_buffer(model, ckpt.file(REPLAY_BUFFER))
            except (ValueError, OSError) as exc:
                raise RunDirectoryError(f"{ckpt.file(REPLAY_BUFFER)}: {_reason(exc)}") from None
        model.set_parameters(params, exact_match=True, device=model.device)
        _apply_model_state(model, state)
        _apply_rng(rng)
        if vn_state is not None:
            vn_state()
        for name in ckpt.manifest.get("logs", []):
            if isinstance(name, str) and name in self.logs:
                with open(ckpt.file(f"{LOGS_DIR}/{name}"), "rb") as src, atomic_open(self.path / name) as dst:
                    shutil.copyfileobj(src, dst)
        for name in self.logs:  # a log that did not exist at the checkpoint was written after it
            if name not in ckpt.manifest.get("logs", []):
                (self.path / name).unlink(missing_ok=True)
        for name in self.event_logs:
            cut_event_logs(self.path / name, ckpt.timestep)
        if self._resuming is not None and self._resuming[0] == ckpt.path:
            self.write_config(self._resuming[1])  # the resume succeeded: record it
        self._resuming = None
        return ckpt


_RESERVED = frozenset(
    {MANIFEST, MODEL_ZIP, PARAMETERS, STATE, RNG, PLR_DIR, VECNORMALIZE, REPLAY_BUFFER, LOGS_DIR}
)


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


# --------------------------------------------------------------------------------------------------
# signals
# --------------------------------------------------------------------------------------------------
class StopOnSignals:
    """Turn ``SIGTERM``, ``SIGINT`` and ``SIGUSR1`` into a request to stop training after the current step.

    While :meth:`installed`, the first of these signals sets :attr:`signal` (its number) and returns; a
    :class:`RunCheckpointCallback` given this object then saves at the current step and stops training
    (its ``on_step`` returns ``False``), so a signal never lands inside a checkpoint write, a sampler
    update or a logger. A second ``SIGINT`` (Ctrl-C twice) raises ``KeyboardInterrupt`` at once; repeated
    ``SIGTERM``/``SIGUSR1`` keep the request. Outside the main thread nothing is installed (Python
    delivers signals to the main thread only).

    :param signals: names of the signals to handle (default ``SIGTERM``, ``SIGINT``, ``SIGUSR1``; those
        this platform lacks are skipped).
    :param on_request: called (in the main thread, from the signal handler) when the first one arrives.

    Example:
        >>> import os, signal
        >>> stop = StopOnSignals()
        >>> with stop.installed():
        ...     os.kill(os.getpid(), signal.SIGTERM)
        >>> stop.requested, stop.signal == signal.SIGTERM, stop.exit_code
        (True, True, 143)
    """

    def __init__(
        self, signals: Iterable[str] = _SIGNALS, on_request: Callable[[], None] | None = None
    ) -> None:
        self.names = tuple(s for s in signals if hasattr(signal, s))
        self.on_request = on_request
        self.signal: int | None = None

    @property
    def requested(self) -> bool:
        """Whether a stop was requested."""
        return self.signal is not None

    @property
    def exit_code(self) -> int:
        """``128 + the signal's number`` (the shell's convention: 130 for SIGINT, 143 for SIGTERM)."""
        return 128 + int(self.signal or 0)

    @property
    def signal_name(self) -> str:
        return signal.Signals(self.signal).name if self.signal is not None else "none"

    @contextlib.contextmanager
    def installed(self) -> Iterator[StopOnSignals]:
        """Install the handlers for the duration of the ``with`` block (the previous ones come back)."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        numbers = [getattr(signal, name) for name in self.names]
        previous = {num: signal.getsignal(num) for num in numbers}

        def handler(signum: int, frame: Any) -> None:
            if self.signal is not None:
                if signum == signal.SIGINT:
                    raise KeyboardInterrupt
                return
            self.signal = signum
            with contextlib.suppress(OSError, ValueError):  # a raw write: no reentrant buffered print
                name = signal.Signals(signum).name
                os.write(
                    sys.stderr.fileno(),
                    f"\n{name}: saving at this step and stopping (Ctrl-C again: at once)\n".encode(),
                )
            if self.on_request is not None:
                self.on_request()

        for num in numbers:
            signal.signal(num, handler)
        try:
            yield self
        finally:
            for num, old in previous.items():
                signal.signal(num, old)


# --------------------------------------------------------------------------------------------------
# parts of a checkpoint
# --------------------------------------------------------------------------------------------------
def _plain_relative(name: str) -> bool:
    parts = name.split("/")
    return (
        bool(name)
        and not name.startswith("/")
        and all(p not in ("", ".", "..") for p in parts)
        and ("\\" not in name and "\0" not in name)
    )


def _check_same_run(
    path: Path, previous: Mapping[str, Any], config: Mapping[str, Any], mutable: frozenset[str]
) -> None:
    """Refuse to resume with another configuration (keys both hold, except ``mutable`` ones)."""
    differ = [
        k for k in config if k in previous and k not in mutable and _json_value(config[k]) != previous[k]
    ]
    if differ:
        shown = ", ".join(f"{k}={previous[k]!r} (now {_json_value(config[k])!r})" for k in differ[:3])
        more = f" and {len(differ) - 3} more" if len(differ) > 3 else ""
        raise RunDirectoryError(
            f"cannot resume {path}: the run was trained with {shown}{more}; repeat the run's command"
        )


def _json_value(value: Any) -> Any:
    """``value`` as it reads back from ``config.json``."""
    return json.loads(json.dumps(value, default=str))


def _read_json_object(path: Path) -> dict[str, Any]:
    """The JSON object in ``path``; :class:`RunDirectoryError` naming the file if it is unreadable, not
    JSON, or not an object."""
    try:
        value = json.loads(path.read_bytes())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise RunDirectoryError(f"{path} is not valid JSON ({_reason(exc)})") from None
    if not isinstance(value, dict):
        raise RunDirectoryError(f"{path} does not hold a JSON object (got {type(value).__name__})")
    return value


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror}" + (f" ({exc.filename})" if exc.filename else "")
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


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


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


def _same_tree(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` hold the same regular files (names and bytes) and directories, no links."""
    if a.is_symlink() or b.is_symlink():
        return False
    if a.is_file() and b.is_file():
        return a.stat().st_size == b.stat().st_size and _sha256(a) == _sha256(b)
    if a.is_dir() and b.is_dir():
        names = sorted(os.listdir(a))
        return names == sorted(os.listdir(b)) and all(_same_tree(a / n, b / n) for n in names)
    return False


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


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _stat_signature(gen: Path) -> tuple[Any, ...]:
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


def _file_entries(gen: Path) -> dict[str, dict[str, Any]]:
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


# model --------------------------------------------------------------------------------------------
def _save_model_state(model: Any, gen: Path) -> None:
    import torch as th

    # through a Python file: a failed write (disk full) raises OSError, not torch's RuntimeError
    with open(gen / PARAMETERS, "wb") as f:
        th.save(model.get_parameters(), f)
    state = {
        "num_timesteps": int(model.num_timesteps),
        "n_updates": int(getattr(model, "_n_updates", 0)),
        "episode_num": int(getattr(model, "_episode_num", 0)),
        "ep_info_buffer": [
            {k: float(v) for k, v in info.items() if isinstance(v, (int, float, np.number))}
            for info in (model.ep_info_buffer or [])
        ],
        "ep_success_buffer": [bool(x) for x in (model.ep_success_buffer or [])],
    }
    with open(gen / STATE, "w") as f:
        json.dump(state, f)


def _load_parameters(ckpt: Checkpoint, model: Any) -> dict[str, Any]:
    import torch as th

    path = ckpt.file(PARAMETERS)
    try:
        params = th.load(path, map_location=model.device, weights_only=True)
    except Exception as exc:  # torch raises many types for a damaged file
        raise RunDirectoryError(f"{path} is not a readable set of weights: {_reason(exc)}") from None
    expected = model.get_parameters()
    if not isinstance(params, dict) or set(params) != set(expected):
        got = sorted(params) if isinstance(params, dict) else type(params).__name__
        raise RunDirectoryError(f"{path} holds {got}, this model has {sorted(expected)}")
    for name, live in expected.items():
        saved = params[name]
        if not isinstance(saved, dict):
            raise RunDirectoryError(f"{path}: {name} is not a state dict")
        if name == "policy":
            if set(saved) != set(live):
                raise RunDirectoryError(
                    f"{path}: the saved network has other layers than this run's "
                    f"({', '.join(sorted(set(saved) ^ set(live))[:3])}...)"
                )
            for key, tensor in live.items():
                other = saved[key]
                if not isinstance(other, th.Tensor) or tuple(other.shape) != tuple(tensor.shape):
                    shape = tuple(other.shape) if isinstance(other, th.Tensor) else type(other).__name__
                    raise RunDirectoryError(
                        f"{path}: {key} has shape {shape}, this run's network {tuple(tensor.shape)}: the "
                        "checkpoint belongs to another configuration"
                    )
                if other.is_floating_point() and not bool(th.isfinite(other).all()):
                    raise RunDirectoryError(f"{path}: {key} holds NaN or infinite weights")
        elif set(saved) != set(live):
            raise RunDirectoryError(f"{path}: {name} has keys {sorted(saved)}, expected {sorted(live)}")
    return params


def _load_model_state(ckpt: Checkpoint) -> dict[str, Any]:
    path = ckpt.file(STATE)
    state = _read_json_object(path)
    for key in ("num_timesteps", "n_updates", "episode_num"):
        value = state.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _MAX_STEP:
            raise RunDirectoryError(f"{path}: {key} must be an int in [0, 2**63 - 1], got {value!r}")
    infos = state.get("ep_info_buffer")
    if not isinstance(infos, list) or not all(
        isinstance(i, dict) and all(isinstance(v, (int, float)) and math.isfinite(v) for v in i.values())
        for i in infos
    ):
        raise RunDirectoryError(f"{path}: ep_info_buffer must be a list of objects of finite numbers")
    successes = state.get("ep_success_buffer")
    if not isinstance(successes, list) or not all(isinstance(s, bool) for s in successes):
        raise RunDirectoryError(f"{path}: ep_success_buffer must be a list of booleans")
    return state


def _apply_model_state(model: Any, state: Mapping[str, Any]) -> None:
    model.num_timesteps = state["num_timesteps"]
    model._n_updates = state["n_updates"]
    model._episode_num = state["episode_num"]
    window = int(getattr(model, "_stats_window_size", 100))
    model.ep_info_buffer = deque(state["ep_info_buffer"], maxlen=window)
    model.ep_success_buffer = deque(state["ep_success_buffer"], maxlen=window)


# RNG ----------------------------------------------------------------------------------------------
def _rng_arrays() -> dict[str, Any]:
    import torch as th

    # the legacy global generator: what np.random.* functions (and some envs) draw from
    _, keys, pos, has_gauss, cached = np.random.get_state()  # noqa: NPY002
    version, internal, gauss_next = random.getstate()
    arrays: dict[str, Any] = {
        "numpy_keys": np.asarray(keys, dtype=np.uint32),
        "numpy_rest": np.array([pos, has_gauss, cached], dtype=np.float64),
        "python_state": np.asarray(internal, dtype=np.int64),
        "python_rest": np.array([version, np.nan if gauss_next is None else gauss_next], dtype=np.float64),
        "torch": th.get_rng_state().numpy(),
    }
    if th.cuda.is_available() and th.cuda.is_initialized():  # type: ignore[no-untyped-call]
        arrays["torch_cuda"] = np.stack([s.numpy() for s in th.cuda.get_rng_state_all()])
    return arrays


def _checked_rng(data: Mapping[str, Any], ckpt: Checkpoint) -> dict[str, Any]:
    import torch as th

    where = ckpt.file(RNG)
    expected = {
        "numpy_keys": ((624,), np.uint32),
        "numpy_rest": ((3,), np.float64),
        "python_state": ((625,), np.int64),
        "python_rest": ((2,), np.float64),
        "torch": ((th.get_rng_state().numel(),), np.uint8),
    }
    for key, (shape, dtype) in expected.items():
        value = data.get(key)
        if not isinstance(value, np.ndarray) or value.shape != shape or value.dtype != dtype:
            got = (value.shape, value.dtype) if isinstance(value, np.ndarray) else value
            raise RunDirectoryError(
                f"{where}: {key} must be an array of shape {shape} and {dtype}, got {got}"
            )
    rest = data["numpy_rest"]
    if not (0 <= rest[0] <= 624 and rest[1] in (0, 1) and math.isfinite(rest[2])):
        raise RunDirectoryError(f"{where}: numpy_rest holds no valid position / gaussian cache")
    internal = data["python_state"]
    if internal.min() < 0 or internal[:624].max() >= 2**32 or not 1 <= internal[624] <= 624:
        raise RunDirectoryError(f"{where}: python_state is not a Mersenne Twister state")
    return dict(data)


def _apply_rng(data: Mapping[str, Any]) -> None:
    import torch as th

    rest = data["numpy_rest"]
    numpy_state = ("MT19937", data["numpy_keys"], int(rest[0]), int(rest[1]), float(rest[2]))
    np.random.set_state(numpy_state)  # noqa: NPY002
    gauss = float(data["python_rest"][1])
    random.setstate(
        (
            int(data["python_rest"][0]),
            tuple(int(x) for x in data["python_state"]),
            None if math.isnan(gauss) else gauss,
        )
    )
    th.set_rng_state(th.from_numpy(np.array(data["torch"], dtype=np.uint8)))
    cuda = data.get("torch_cuda")
    if cuda is not None and th.cuda.is_available() and len(cuda) == th.cuda.device_count():
        th.cuda.set_rng_state_all([th.from_numpy(np.array(s, dtype=np.uint8)) for s in cuda])


# level source -------------------------------------------------------------------------------------
def _plr_wrapper(model: Any) -> Any:
    from stable_baselines3.common.vec_env import VecEnvWrapper

    from plr_gym.wrappers.sb3 import PrioritizedLevelReplay

    current = model.get_env()
    while current is not None:
        if isinstance(current, PrioritizedLevelReplay):
            return current
        current = current.venv if isinstance(current, VecEnvWrapper) else None
    return None


def _write_level_source(model: Any, plr_callback: Any, directory: Path) -> bool:
    """Write the level source (and the callback's scorer) as plain files in ``directory``."""
    writers: dict[str, Callable[[Path], Any]]
    if getattr(plr_callback, "wrapper", None) is not None and hasattr(plr_callback, "checkpoint_writers"):
        writers = plr_callback.checkpoint_writers()  # PLRCallback: the source and the scorer
    else:
        wrapper = _plr_wrapper(model)
        if wrapper is None:
            return False
        writers = {name: save for name, (save, _) in wrapper.source.checkpoint_files().items()}
    directory.mkdir()
    for name, write in writers.items():
        write(directory / name)
    return True


def _level_source_loader(model: Any, plr_callback: Any, ckpt: Checkpoint) -> Callable[[], None]:
    """Check the checkpoint's level source against the run's; return the function that restores it."""
    wrapper = _plr_wrapper(model)
    if (wrapper is not None) != ckpt.has(PLR_DIR):
        raise RunDirectoryError(
            f"checkpoint {ckpt.path} was saved {'with' if ckpt.has(PLR_DIR) else 'without'} a level source, "
            f"this run's env {'has' if wrapper is not None else 'has no'} PrioritizedLevelReplay"
        )
    if wrapper is None:
        return lambda: None
    source = wrapper.source
    files = source.checkpoint_files()
    for name in files:
        ckpt.file(f"{PLR_DIR}/{name}")

    def restore() -> None:
        saved = source.state_dict()
        try:
            for name, (_, load) in files.items():
                load(ckpt.path / PLR_DIR / name)
        except BaseException:
            source.load_state_dict(saved)
            raise
        if hasattr(plr_callback, "resume_from"):
            # the scorer exists once training starts: PLRCallback restores it (and the source, again,
            # after SB3's first reset drew levels) and restarts the envs on levels of the restored source
            plr_callback.resume_from = ckpt.path / PLR_DIR

    return restore


# VecNormalize -------------------------------------------------------------------------------------
def _find_vecnormalize(env: Any) -> Any:
    from stable_baselines3.common.vec_env import VecEnvWrapper, VecNormalize

    current = env
    while current is not None:
        if isinstance(current, VecNormalize):
            return current
        current = current.venv if isinstance(current, VecEnvWrapper) else None
    return None


def _rms_items(vn: Any) -> dict[str, Any]:
    # VecNormalize(norm_obs=False), as --normalize-reward builds it, has no obs_rms (and an attribute it
    # lacks would be looked up in the envs it wraps): only the return statistics then
    rms = vars(vn).get("obs_rms")
    items: dict[str, Any] = {}
    if isinstance(rms, dict):
        items.update({f"obs.{key}": value for key, value in rms.items()})
    elif rms is not None:
        items["obs"] = rms
    items["ret"] = vn.ret_rms
    return items


def _vecnormalize_arrays(vn: Any) -> dict[str, Any]:
    arrays: dict[str, Any] = {"returns": np.asarray(vn.returns, dtype=np.float64)}
    for name, rms in _rms_items(vn).items():
        arrays[f"{name}.mean"] = np.asarray(rms.mean, dtype=np.float64)
        arrays[f"{name}.var"] = np.asarray(rms.var, dtype=np.float64)
        arrays[f"{name}.count"] = np.asarray(rms.count, dtype=np.float64)
    return arrays


def _checked_vecnormalize(data: Mapping[str, Any], vn: Any, ckpt: Checkpoint) -> Callable[[], None]:
    where = ckpt.file(VECNORMALIZE)
    live = _vecnormalize_arrays(vn)
    if set(data) != set(live):
        raise RunDirectoryError(f"{where} holds {sorted(data)}, this run's VecNormalize {sorted(live)}")
    for key, value in live.items():
        saved = data[key]
        if saved.shape != value.shape or saved.dtype != np.float64 or not np.isfinite(saved).all():
            raise RunDirectoryError(f"{where}: {key} must be finite float64 of shape {value.shape}")
        if (key.endswith(".var") or key.endswith(".count")) and (saved < 0).any():
            raise RunDirectoryError(f"{where}: {key} must be >= 0")

    def apply() -> None:
        vn.returns = data["returns"].copy()
        for name, rms in _rms_items(vn).items():
            rms.mean = data[f"{name}.mean"].copy()
            rms.var = data[f"{name}.var"].copy()
            rms.count = float(data[f"{name}.count"])

    return apply


# replay buffer ------------------------------------------------------------------------------------
_REPLAY_FIELDS = ("observations", "next_observations", "actions", "rewards", "dones", "timeouts")


def _replay_arrays(buffer: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in _REPLAY_FIELDS:
        value = getattr(buffer, name, None)
        if isinstance(value, dict):
            out.update({f"{name}.{key}": array for key, array in value.items()})
        elif value is not None:
            out[name] = value
    return out


def _save_replay_buffer(model: Any, path: Path) -> None:
    buffer = getattr(model, "replay_buffer", None)
    if buffer is None:
        raise ValueError(f"replay_buffer=True: {type(model).__name__} has no replay buffer")
    if callable(getattr(buffer, "save", None)):  # plr_gym's prioritized buffers: their own safe format
        buffer.save(path)
        return
    save_npz(path, {**_replay_arrays(buffer), "pos": np.array(buffer.pos), "full": np.array(buffer.full)})


def _load_replay_buffer(model: Any, path: Path) -> None:
    buffer = model.replay_buffer
    if callable(getattr(buffer, "load", None)):
        buffer.load(path)
        return
    data = load_npz(path)
    live = _replay_arrays(buffer)
    if set(data) != {*live, "pos", "full"}:
        raise ValueError(f"holds {sorted(data)}, this model's replay buffer {sorted(live)}")
    for key, array in live.items():
        if data[key].shape != array.shape or data[key].dtype != array.dtype:
            raise ValueError(
                f"{key} has shape {data[key].shape} {data[key].dtype}, expected {array.shape} {array.dtype}"
            )
    pos, full = int(data["pos"]), bool(data["full"])
    if not 0 <= pos < buffer.buffer_size:
        raise ValueError(f"pos {pos} is outside [0, {buffer.buffer_size})")
    for key, array in live.items():
        array[...] = data[key]
    buffer.pos, buffer.full = pos, full
