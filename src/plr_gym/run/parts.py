"""The parts of a run's checkpoint, each written, read and checked, then applied: the model (weights,
optimizer state, counters, episode statistics), the RNG states, the level source, VecNormalize's
statistics and an off-policy model's replay buffer.

Every reader checks its part against the live objects and returns what it will apply (a value or a
function) without changing anything, so that :func:`plr_gym.run.restore.restore_checkpoint` changes
nothing until every part has been checked. Nothing is unpickled: weights load with
``torch.load(weights_only=True)``, the rest is JSON and npz.
"""

from __future__ import annotations

import io
import json
import math
import random
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from plr_gym.checkpoint import load_npz, save_npz
from plr_gym.run.layout import (
    MAX_STEP,
    PARAMETERS,
    PLR_DIR,
    RNG,
    STATE,
    VECNORMALIZE,
    Checkpoint,
    RunDirectoryError,
    read_json_object,
    reason,
)


# model --------------------------------------------------------------------------------------------
def save_model_state(model: Any, gen: Path) -> None:
    """Write the model's weights and optimizer state (``parameters.pt``) and its counters and episode
    statistics (``state.json``)."""
    import torch as th

    # serialised in memory, then written with one Python write: a full disk raises OSError naming the file
    # (torch writing to the file itself raises its RuntimeError "unexpected pos" on a short write)
    buffer = io.BytesIO()
    th.save(model.get_parameters(), buffer)
    try:
        with open(gen / PARAMETERS, "wb") as f:
            f.write(buffer.getbuffer())
    except OSError as exc:  # a failed write names no file: name it
        if exc.filename is not None:
            raise
        raise OSError(exc.errno, exc.strerror, str(gen / PARAMETERS)) from None
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


def load_parameters(ckpt: Checkpoint, model: Any) -> dict[str, Any]:
    """The checkpoint's weights (``weights_only``), checked against ``model``'s names and shapes; finite."""
    import torch as th

    path = ckpt.file(PARAMETERS)
    try:
        params = th.load(path, map_location=model.device, weights_only=True)
    except Exception as exc:  # torch raises many types for a damaged file
        raise RunDirectoryError(f"{path} is not a readable set of weights: {reason(exc)}") from None
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


def load_model_state(ckpt: Checkpoint) -> dict[str, Any]:
    """The checkpoint's ``state.json``: step counters and episode statistics, checked."""
    path = ckpt.file(STATE)
    state = read_json_object(path)
    for key in ("num_timesteps", "n_updates", "episode_num"):
        value = state.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_STEP:
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


def apply_model_state(model: Any, state: Mapping[str, Any]) -> None:
    """Set ``model``'s step counters and episode statistics from a checked ``state.json``."""
    model.num_timesteps = state["num_timesteps"]
    model._n_updates = state["n_updates"]
    model._episode_num = state["episode_num"]
    window = int(getattr(model, "_stats_window_size", 100))
    model.ep_info_buffer = deque(state["ep_info_buffer"], maxlen=window)
    model.ep_success_buffer = deque(state["ep_success_buffer"], maxlen=window)


# RNG ----------------------------------------------------------------------------------------------
def rng_arrays() -> dict[str, Any]:
    """The numpy (legacy global), Python and torch (CPU, and CUDA if in use) RNG states as arrays."""
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


def checked_rng(data: Mapping[str, Any], ckpt: Checkpoint) -> dict[str, Any]:
    """The checkpoint's RNG states, each checked for shape, dtype and a valid generator state."""
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


def apply_rng(data: Mapping[str, Any]) -> None:
    """Set the numpy, Python and torch RNG states from checked arrays."""
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


def write_level_source(model: Any, plr_callback: Any, directory: Path) -> bool:
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


def level_source_loader(model: Any, plr_callback: Any, ckpt: Checkpoint) -> Callable[[], None]:
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
def find_vecnormalize(env: Any) -> Any:
    """The ``VecNormalize`` in a chain of vec env wrappers, or ``None``."""
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


def vecnormalize_arrays(vn: Any) -> dict[str, Any]:
    """VecNormalize's running statistics (returns, obs and return mean/var/count) as float64 arrays."""
    arrays: dict[str, Any] = {"returns": np.asarray(vn.returns, dtype=np.float64)}
    for name, rms in _rms_items(vn).items():
        arrays[f"{name}.mean"] = np.asarray(rms.mean, dtype=np.float64)
        arrays[f"{name}.var"] = np.asarray(rms.var, dtype=np.float64)
        arrays[f"{name}.count"] = np.asarray(rms.count, dtype=np.float64)
    return arrays


def checked_vecnormalize(data: Mapping[str, Any], vn: Any, ckpt: Checkpoint) -> Callable[[], None]:
    """Check the checkpoint's VecNormalize statistics against ``vn``; return the function applying them."""
    where = ckpt.file(VECNORMALIZE)
    live = vecnormalize_arrays(vn)
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


def save_replay_buffer(model: Any, path: Path) -> None:
    """Write an off-policy model's replay buffer (plr_gym's prioritized buffers in their own format, SB3's as
    npz)."""
    buffer = getattr(model, "replay_buffer", None)
    if buffer is None:
        raise ValueError(f"replay_buffer=True: {type(model).__name__} has no replay buffer")
    if callable(getattr(buffer, "save", None)):  # plr_gym's prioritized buffers: their own safe format
        buffer.save(path)
        return
    save_npz(path, {**_replay_arrays(buffer), "pos": np.array(buffer.pos), "full": np.array(buffer.full)})


def load_replay_buffer(model: Any, path: Path) -> None:
    """Load the replay buffer saved by :func:`save_replay_buffer` into ``model``'s, checked first
    (``ValueError``)."""
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
