"""RunDirectory: the one object of a training run's directory (lock, checkpoints, logs, resume).

It decides what a run's checkpoint holds and when the directory is consistent; the rooms beside it do
the work: :mod:`~plr_gym.run.lock` (the lock), :mod:`~plr_gym.run.manifest` (generations, manifests,
verifying), :mod:`~plr_gym.run.save` and :mod:`~plr_gym.run.restore` (one checkpoint's parts, from
:mod:`~plr_gym.run.parts`), :mod:`~plr_gym.run.logs` (logs and TensorBoard event files).
"""

from __future__ import annotations

import json
import os
import shutil
import warnings
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, NoReturn

from plr_gym.checkpoint import CURRENT_LINK, atomic_open
from plr_gym.run.layout import (
    CONFIG_FILE,
    DEFAULT_KEEP,
    LOCK_FILE,
    MANIFEST,
    MODEL_ZIP,
    PLR_DIR,
    Checkpoint,
    RunDirectoryError,
    plain_relative,
    read_json_object,
)
from plr_gym.run.lock import acquire_lock
from plr_gym.run.logs import cut_event_logs, put_logs_back
from plr_gym.run.manifest import TORN_PREFIX, Generations, RunDirectoryWarning
from plr_gym.run.restore import restore_checkpoint
from plr_gym.run.save import write_checkpoint

__all__ = ["RunDirectory"]


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
            if not isinstance(name, str) or not plain_relative(name):
                raise ValueError(f"logs must be file names relative to the run directory, got {name!r}")
        for name in self.event_logs:
            if not isinstance(name, str) or not plain_relative(name):
                raise ValueError(
                    f"event_logs must be folder names relative to the run directory, got {name!r}"
                )
        self._lock_fd: int | None = None
        self._resuming: tuple[Path, dict[str, Any]] | None = None  # begin(resume=True) -> restore()
        self._generations = Generations(self.path)

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
        if self._lock_fd is None:
            self._lock_fd = acquire_lock(self.path)
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
                    for torn in self.path.glob(TORN_PREFIX + "*"):  # saves cut short, set aside earlier
                        shutil.rmtree(torn, ignore_errors=True)
                self.write_config(config)
                return None
            return self._continue(config, frozenset(mutable), files)
        except BaseException:
            self.release()
            raise

    def _continue(
        self, config: Mapping[str, Any], mutable: frozenset[str], run_files: tuple[str, ...]
    ) -> Checkpoint | None:
        """:meth:`begin` with ``resume=True``, the lock held: the checkpoint to restore, or ``None`` (a
        fresh start)."""
        self._generations.relink_dereferenced_copy()
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
            _check_same_run(self.path, previous, config, mutable)
        if ckpt is None:  # nothing to continue from: a fresh start, without the logs of the lost one
            self._set_aside_torn()
            self.clear(run_files)
            self.write_config(config)
            return None
        self._generations.protected = self._generations.newer_than(ckpt)  # never pruned by this run
        resumed = previous.get("resumed_at", []) if previous is not None else []
        if not isinstance(resumed, list):
            raise RunDirectoryError(f"{self.path / CONFIG_FILE}: resumed_at must be a list of steps")
        if not os.path.lexists(self.path / CURRENT_LINK):
            self._generations.relink(ckpt)
        # written by restore() once the checkpoint is restored: a failed resume records nothing
        self._resuming = (ckpt.path, {**config, "resumed_at": [*resumed, ckpt.timestep]})
        return ckpt

    def _set_aside_torn(self) -> None:
        """A run killed while writing its first checkpoint: its torn generations (no manifest) renamed
        ``.plr-torn-<N>`` for inspection, named in a :class:`~plr_gym.run.manifest.RunDirectoryWarning`."""
        moved = self._generations.set_aside_torn()
        if moved:
            warnings.warn(
                f"{self.path}: no checkpoint was completed (a save cut short: "
                f"{', '.join(p.name for p in moved)} kept aside for inspection); the run starts again "
                "from step 0",
                RunDirectoryWarning,
                stacklevel=3,
            )

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
        return read_json_object(path)

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
        return self._generations.current()

    def checkpoints(self) -> list[Path]:
        """The generation directories kept, oldest first."""
        return self._generations.paths()

    def _verifies(self, gen: Path) -> bool:
        """Whether ``gen`` verifies (as :meth:`current` checks it); see :meth:`Generations.verifies
        <plr_gym.run.manifest.Generations.verifies>`."""
        return self._generations.verifies(gen)

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
        return write_checkpoint(
            self._generations,
            model,
            plr_callback=plr_callback,
            files=files,
            replay_buffer=replay_buffer,
            logs=self.logs,
            keep=self.keep,
        )

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
        restore_checkpoint(ckpt, model, plr_callback=plr_callback, replay_buffer=replay_buffer)
        put_logs_back(self.path, self.logs, ckpt)
        for name in self.event_logs:
            cut_event_logs(self.path / name, ckpt.timestep)
        if self._resuming is not None and self._resuming[0] == ckpt.path:
            self.write_config(self._resuming[1])  # the resume succeeded: record it
        self._resuming = None
        return ckpt


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
