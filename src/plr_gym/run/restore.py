"""Restoring one checkpoint into a freshly built model: every part read and checked first, then applied.

A checkpoint whose files disagree with each other or with the live model (another algorithm, other
network shapes, a VecNormalize present in one and not the other) raises
:class:`~plr_gym.run.RunDirectoryError` before anything changes; then the level source is restored
first (all or nothing), and the rest cannot fail on a checked part.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from plr_gym.checkpoint import load_npz
from plr_gym.run.layout import (
    PLR_DIR,
    REPLAY_BUFFER,
    RNG,
    STATE,
    VECNORMALIZE,
    Checkpoint,
    RunDirectoryError,
    reason,
)
from plr_gym.run.parts import (
    apply_model_state,
    apply_rng,
    checked_rng,
    checked_vecnormalize,
    find_vecnormalize,
    level_source_loader,
    load_model_state,
    load_parameters,
    load_replay_buffer,
)

__all__ = ["restore_checkpoint"]


@dataclass
class _CheckedParts:
    """A checkpoint's parts, read and checked against the live objects; nothing applied yet."""

    params: dict[str, Any]  # the model's weights and optimizer state (torch state dicts)
    state: dict[str, Any]  # its counters and episode statistics (state.json)
    rng: dict[str, Any]  # numpy, Python and torch RNG states
    vecnormalize: Callable[[], None] | None  # applies VecNormalize's statistics (None: no VecNormalize)
    level_source: Callable[[], None]  # restores the level source, all or nothing


def restore_checkpoint(ckpt: Checkpoint, model: Any, *, plr_callback: Any, replay_buffer: bool) -> None:
    """Restore ``model``, its level source, the RNG states and VecNormalize's statistics (and, with
    ``replay_buffer``, the replay buffer) from ``ckpt``: everything is checked before anything changes
    (see :meth:`RunDirectory.restore <plr_gym.run.RunDirectory.restore>`)."""
    parts = _read_parts(ckpt, model, plr_callback, replay_buffer)
    # every part is read and checked: now change things, the level source first (all or nothing)
    try:
        parts.level_source()
    except (ValueError, OSError) as exc:
        raise RunDirectoryError(f"checkpoint {ckpt.path}/{PLR_DIR}: {reason(exc)}") from None
    if replay_buffer:
        try:
            load_replay_buffer(model, ckpt.file(REPLAY_BUFFER))
        except (ValueError, OSError) as exc:
            raise RunDirectoryError(f"{ckpt.file(REPLAY_BUFFER)}: {reason(exc)}") from None
    model.set_parameters(parts.params, exact_match=True, device=model.device)
    apply_model_state(model, parts.state)
    apply_rng(parts.rng)
    if parts.vecnormalize is not None:
        parts.vecnormalize()


def _read_parts(ckpt: Checkpoint, model: Any, plr_callback: Any, replay_buffer: bool) -> _CheckedParts:
    """Read every part of ``ckpt`` and check it against ``model`` and each other; change nothing."""
    algo = ckpt.manifest.get("algo")
    if algo != type(model).__name__:
        raise RunDirectoryError(
            f"checkpoint {ckpt.path} holds a {algo} model, this run builds a {type(model).__name__}"
        )
    params = load_parameters(ckpt, model)
    state = load_model_state(ckpt)
    if state["num_timesteps"] != ckpt.timestep:
        raise RunDirectoryError(
            f"checkpoint {ckpt.path}: {STATE} says step {state['num_timesteps']}, the manifest "
            f"{ckpt.timestep}: the parts disagree"
        )
    rng = checked_rng(load_npz(ckpt.file(RNG)), ckpt)
    vecnormalize = _read_vecnormalize(ckpt, model)
    if replay_buffer and not ckpt.has(REPLAY_BUFFER):
        raise RunDirectoryError(f"checkpoint {ckpt.path} holds no replay buffer (saved without it)")
    level_source = level_source_loader(model, plr_callback, ckpt)
    return _CheckedParts(params, state, rng, vecnormalize, level_source)


def _read_vecnormalize(ckpt: Checkpoint, model: Any) -> Callable[[], None] | None:
    """VecNormalize's statistics, checked; ``None`` when neither the run nor the checkpoint has them."""
    vecnormalize = find_vecnormalize(model.get_env())
    if (vecnormalize is not None) != ckpt.has(VECNORMALIZE):
        raise RunDirectoryError(
            f"checkpoint {ckpt.path} was saved {'with' if ckpt.has(VECNORMALIZE) else 'without'} "
            f"VecNormalize statistics, this run's env {'has' if vecnormalize is not None else 'has no'} "
            "VecNormalize"
        )
    if vecnormalize is None:
        return None
    return checked_vecnormalize(load_npz(ckpt.file(VECNORMALIZE)), vecnormalize, ckpt)
