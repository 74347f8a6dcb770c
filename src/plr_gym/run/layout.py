"""The names in a run directory, its errors, and the record of one verified checkpoint.

Every other module of :mod:`plr_gym.run` reads its file names from here, so the layout of a run directory
(see :class:`~plr_gym.run.RunDirectory`) is written down once.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
#: The largest step a checkpoint may record (``num_timesteps`` is an int64 in SB3's logs).
MAX_STEP = 2**63 - 1


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
    """One verified checkpoint of a run directory (see
    :meth:`RunDirectory.current <plr_gym.run.RunDirectory.current>`).

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


#: Names a checkpoint writes itself; the caller's extra files (``save(files=)``) take other names.
RESERVED = frozenset(
    {MANIFEST, MODEL_ZIP, PARAMETERS, STATE, RNG, PLR_DIR, VECNORMALIZE, REPLAY_BUFFER, LOGS_DIR}
)


def visible_names(ckpt: Checkpoint) -> list[str]:
    """The names linked at the top of the run directory for ``ckpt``: the manifest, ``model.zip``,
    ``plr`` and the caller's extra files."""
    top = {name.split("/")[0] for name in ckpt.manifest["files"]}
    return [MANIFEST, *sorted(top - (RESERVED - {MODEL_ZIP, PLR_DIR}))]


def plain_relative(name: str) -> bool:
    """Whether ``name`` is a relative path that stays inside its directory (no ``..``, no absolute)."""
    parts = name.split("/")
    return (
        bool(name)
        and not name.startswith("/")
        and all(p not in ("", ".", "..") for p in parts)
        and ("\\" not in name and "\0" not in name)
    )


def read_json_object(path: Path) -> dict[str, Any]:
    """The JSON object in ``path``; :class:`RunDirectoryError` naming the file if it is unreadable, not
    JSON, or not an object."""
    try:
        value = json.loads(path.read_bytes())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise RunDirectoryError(f"{path} is not valid JSON ({reason(exc)})") from None
    if not isinstance(value, dict):
        raise RunDirectoryError(f"{path} does not hold a JSON object (got {type(value).__name__})")
    return value


def reason(exc: BaseException) -> str:
    """The one-line cause of ``exc`` for a message (``strerror`` and the file of an ``OSError``)."""
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror}" + (f" ({exc.filename})" if exc.filename else "")
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
