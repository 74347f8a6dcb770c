"""Saving one checkpoint: every part into a new generation, the manifest last, one atomic switch.

A save that fails or is killed at any point leaves the previous checkpoint current and complete: the new
generation is not a checkpoint until its manifest is written, and becomes the current one only with the
switch of ``.plr-current`` (:func:`plr_gym.checkpoint.commit_generation`).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from plr_gym.checkpoint import CURRENT_LINK, commit_generation, new_generation, save_npz
from plr_gym.run.layout import (
    FORMAT,
    MANIFEST,
    MODEL_ZIP,
    PLR_DIR,
    REPLAY_BUFFER,
    RESERVED,
    RNG,
    VECNORMALIZE,
    Checkpoint,
    plain_relative,
)
from plr_gym.run.logs import copy_logs
from plr_gym.run.manifest import Generations, file_entries, write_manifest
from plr_gym.run.parts import (
    find_vecnormalize,
    rng_arrays,
    save_model_state,
    save_replay_buffer,
    vecnormalize_arrays,
    write_level_source,
)

__all__ = ["write_checkpoint"]


def write_checkpoint(
    generations: Generations,
    model: Any,
    *,
    plr_callback: Any,
    files: Mapping[str, Callable[[Path], Any]] | None,
    replay_buffer: bool,
    logs: Sequence[str],
    keep: int,
) -> Checkpoint:
    """Write one checkpoint of ``model`` as a new generation of the run directory and make it current;
    keep ``keep`` generations (see :meth:`RunDirectory.save <plr_gym.run.RunDirectory.save>`)."""
    extra = _checked_extra_files(files)
    path = generations.path
    step = int(model.num_timesteps)
    gen = new_generation(path)
    try:
        visible = _write_parts(gen, model, plr_callback, extra, replay_buffer)
        saved_logs = copy_logs(path, logs, gen)
        manifest = {
            "format": FORMAT,
            "timestep": step,
            "algo": type(model).__name__,
            "files": file_entries(gen),
            "logs": saved_logs,
        }
        write_manifest(gen, manifest)  # last: a generation without it is not a checkpoint
        generations.remember(gen)  # its files were hashed for the manifest just now
        commit_generation(
            path,
            gen,
            [MANIFEST, MODEL_ZIP, *visible, *extra],
            keep=keep,
            complete=generations.verifies,
            protect=generations.protected,
        )
    except BaseException:
        _discard(path, gen)
        raise
    return Checkpoint(path=gen, timestep=step, manifest=manifest)


def _checked_extra_files(
    files: Mapping[str, Callable[[Path], Any]] | None,
) -> dict[str, Callable[[Path], Any]]:
    extra = dict(files or {})
    for name in extra:
        if not plain_relative(name) or "/" in name or name in RESERVED:
            raise ValueError(f"files: {name!r} must be a plain file name other than {sorted(RESERVED)}")
    return extra


def _write_parts(
    gen: Path, model: Any, plr_callback: Any, extra: Mapping[str, Callable[[Path], Any]], replay_buffer: bool
) -> list[str]:
    """Every part of the checkpoint into ``gen``: the model, its counters, the RNG states, the level
    source, VecNormalize's statistics, the replay buffer (opt in), the caller's files. Returns the parts
    linked at the top of the run directory besides ``model.zip`` and the caller's files (``plr``)."""
    with open(gen / MODEL_ZIP, "wb") as f:  # closed here even if the write fails (no GC warning)
        model.save(f)
    save_model_state(model, gen)
    save_npz(gen / RNG, rng_arrays())
    visible = [PLR_DIR] if write_level_source(model, plr_callback, gen / PLR_DIR) else []
    vecnormalize = find_vecnormalize(model.get_env())
    if vecnormalize is not None:
        save_npz(gen / VECNORMALIZE, vecnormalize_arrays(vecnormalize))
    if replay_buffer:
        save_replay_buffer(model, gen / REPLAY_BUFFER)
    for name, write in extra.items():
        write(gen / name)
    return visible


def _discard(path: Path, gen: Path) -> None:
    """After a failed save: remove its generation, unless the switch to it happened (it is current)."""
    link = path / CURRENT_LINK
    if not (link.is_symlink() and os.readlink(link) == gen.name):
        shutil.rmtree(gen, ignore_errors=True)
