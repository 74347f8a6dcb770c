"""The state record of :class:`~plr_gym.prompts.PromptCurriculum`: its version, its arrays, the checks that
:meth:`~plr_gym.prompts.PromptCurriculum.load_state_dict` runs before it assigns anything, and its ``.npz``
file (arrays + JSON, never unpickled)."""

from __future__ import annotations

import json
import numbers
import os
from typing import Any

import numpy as np

from plr_gym.checkpoint import load_npz, save_npz

_STATE_VERSION = 3
#: the per-prompt arrays of the state, each of shape ``(num_prompts,)``
_ARRAYS = (
    "posterior_a",
    "posterior_b",
    "draws",
    "groups",
    "reward_mean",
    "reward_variance",
    "success_rate",
    "measured_at",
)
_INT_ARRAYS = ("draws", "groups", "measured_at")
_COUNTERS = ("num_batches", "num_groups", "num_filtered", "num_completions", "clock")


def _is_int(value: Any) -> bool:
    return isinstance(value, (numbers.Integral, np.integer)) and not isinstance(value, (bool, np.bool_))


def check_header(state: Any, keys: Any) -> None:
    """Refuse anything but a state of this version that holds every key of ``keys``."""
    if isinstance(state, dict) and state.get("version") in (1, 2):
        raise ValueError(
            f"this PromptCurriculum state has version {state['version']}, written by an older plr_gym; "
            f"this version reads version {_STATE_VERSION} (it adds the clock of evidence_half_life): "
            "restart the curriculum, or resume with the plr_gym that wrote it"
        )
    if not isinstance(state, dict) or state.get("version") != _STATE_VERSION:
        raise ValueError(f"not a PromptCurriculum state (version {_STATE_VERSION}): {type(state).__name__}")
    missing = [k for k in keys if k not in state]
    if missing:
        raise ValueError(f"PromptCurriculum state lacks {', '.join(missing)}")


def check_config(mine: dict[str, Any], theirs: Any) -> dict[str, Any]:
    """The state's config (``theirs``), refused unless it matches the curriculum's (``mine``) but its seed."""
    if not isinstance(theirs, dict):
        raise ValueError("state 'config' must be a dict")
    # options added after a state version: a state written before them was written with their default
    later = {"reward_noise": 0.0}
    diff = sorted(k for k in mine if k != "seed" and mine[k] != theirs.get(k, later.get(k)))
    if diff:
        details = ", ".join(
            f"{k}: state has {theirs.get(k, later.get(k))!r}, curriculum has {mine[k]!r}" for k in diff
        )
        raise ValueError(f"state was saved with a different configuration ({details})")
    return theirs


def checked_arrays(state: dict[str, Any], n: int) -> dict[str, Any]:
    """The state's per-prompt arrays (:data:`_ARRAYS`), each checked and cast to its dtype."""
    arrays: dict[str, Any] = {}
    for key in _ARRAYS:
        dtype = np.int64 if key in _INT_ARRAYS else np.float64
        arr = np.asarray(state[key])
        if arr.shape != (n,) or not (np.issubdtype(arr.dtype, np.number) and arr.dtype != np.bool_):
            raise ValueError(f"state '{key}' must be {n} numbers, got {arr.dtype} {arr.shape}")
        if not np.isfinite(arr).all():
            raise ValueError(f"state '{key}' must be finite")
        arrays[key] = arr.astype(dtype)
    if (arrays["posterior_a"] <= 0).any() or (arrays["posterior_b"] <= 0).any():
        raise ValueError("state 'posterior_a'/'posterior_b' must be finite and positive")
    for key in ("draws", "groups", "reward_variance", "measured_at"):
        if (arrays[key] < 0).any():
            raise ValueError(f"state '{key}' must be non-negative")
    if ((arrays["success_rate"] < 0) | (arrays["success_rate"] > 1)).any():
        raise ValueError("state 'success_rate' must lie in [0, 1]")
    return arrays


def checked_counters(state: dict[str, Any], arrays: dict[str, Any]) -> dict[str, int]:
    """The state's counters (:data:`_COUNTERS`), checked against each other and ``measured_at``."""
    counters = {}
    for key in _COUNTERS:
        if not _is_int(state[key]) or int(state[key]) < 0:
            raise ValueError(f"state '{key}' must be a non-negative int, got {state[key]!r}")
        counters[key] = int(state[key])
    if counters["num_filtered"] > counters["num_groups"]:
        raise ValueError("state 'num_filtered' exceeds 'num_groups'")
    if (arrays["measured_at"] > counters["clock"]).any():
        raise ValueError("state 'measured_at' exceeds 'clock'")
    return counters


def checked_seed(seed: Any) -> int | None:
    """The seed of a state's config."""
    if seed is not None and (not _is_int(seed) or int(seed) < 0):
        raise ValueError(f"state config 'seed' must be a non-negative int or None, got {seed!r}")
    return None if seed is None else int(seed)


def save_state(path: str | os.PathLike[str], state: dict[str, Any], extra: dict[str, Any] | None) -> None:
    """Write a state (and ``extra``, JSON-compatible) to ``path`` as ``.npz``, atomically."""
    sampler = state.pop("sampler")
    arrays = {k: state.pop(k) for k in _ARRAYS}
    sampler_arrays = {
        f"sampler.{k}": sampler.pop(k) for k in list(sampler) if isinstance(sampler[k], np.ndarray)
    }
    meta = {"state": state, "sampler": sampler, "extra": extra}
    try:
        text = json.dumps(meta)
    except TypeError as exc:
        raise TypeError(f"extra must be JSON-compatible: {exc}") from exc
    save_npz(path, {"meta": np.array(text), **arrays, **sampler_arrays})


def load_state(path: str | os.PathLike[str]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The state and the ``extra`` that :func:`save_state` wrote to ``path`` (the state not yet checked;
    ``extra`` checked here, so that a bad one is refused before anything is assigned)."""
    npz = load_npz(path)
    try:
        meta = json.loads(str(npz["meta"]))
        state = dict(meta["state"])
        sampler = dict(meta["sampler"])
        for k in _ARRAYS:
            state[k] = npz[k]
        for k in npz:
            if k.startswith("sampler."):
                sampler[k[len("sampler.") :]] = npz[k]
        state["sampler"] = sampler
        extra = meta.get("extra")
    except (KeyError, ValueError, TypeError, AttributeError) as exc:
        raise ValueError(f"{os.fspath(path)} is not a PromptCurriculum checkpoint: {exc}") from exc
    if extra is not None and not isinstance(extra, dict):
        raise ValueError(
            f"{os.fspath(path)} is not a PromptCurriculum checkpoint: its 'extra' must be a JSON object "
            f"or null, got {type(extra).__name__}"
        )
    return state, extra
