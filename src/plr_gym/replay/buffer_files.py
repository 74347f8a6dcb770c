"""A prioritized buffer's files: the ``.npz`` checkpoint (:meth:`save`/:meth:`load`) and pickles of
older versions (the "checkpoints" seam of :mod:`plr_gym.replay.buffers`).

:class:`BufferFiles` writes the SB3 storage, the levels and the priority core's state
(:meth:`ReplayPriorities.state_arrays <plr_gym.replay.priorities.ReplayPriorities.state_arrays>`) to
one ``.npz`` file with :mod:`plr_gym.checkpoint` (no pickle), and checks every member of a file against
the buffer before assigning anything. Subclasses add their arrays through :meth:`_config`,
:meth:`_obs_arrays` and :meth:`_load_targets`.
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np
from numpy.typing import NDArray
from stable_baselines3.common.buffers import ReplayBuffer

from plr_gym.checkpoint import load_npz, save_npz
from plr_gym.replay.priorities import ReplayPriorities, is_int
from plr_gym.replay.sequences import RewardRebalancedEnds

__all__ = ["BufferFiles"]

_FORMAT_VERSION = 2  # 2: per-transition levels

# Settings that live in the priority core (ReplayPriorities); the buffer exposes them read-only.
_CORE_SETTINGS = (
    "prioritization",
    "alpha",
    "beta0",
    "eps",
    "replacement",
    "recent_data_ratio",
    "recent_data_steps",
    "rank_refresh_interval",
)


class BufferFiles(ReplayBuffer):
    """Saving and loading of a prioritized buffer (``.npz``, checked before assigning) and unpickling of
    buffers pickled by older versions; a base of the prioritized buffers."""

    # Set by the prioritized buffer's constructor.
    replay_priorities: ReplayPriorities
    levels: NDArray[np.int64]
    n_steps: int
    gamma: float
    _reward_ends: RewardRebalancedEnds | None

    # ------------------------------------------------------------------ pickles (SB3's save_replay_buffer)

    def __setstate__(self, state: dict[str, Any]) -> None:
        # Buffers pickled before per-transition levels existed load with every level unknown (-1), and
        # buffers pickled before the priority core existed get one built from their fields.
        state = dict(state)
        if "replay_priorities" not in state and "_tree" in state:
            state["replay_priorities"] = _core_from_old_state(state)
        state.pop("_reward_trees", None)
        state.setdefault("_reward_ends", None)
        self.__dict__.update(state)
        if "levels" not in state:
            self.levels = np.full((self.buffer_size, self.n_envs), -1, dtype=np.int64)

    # ------------------------------------------------------------------ .npz files (save / load)

    def _config(self) -> dict[str, Any]:
        return {
            "class": type(self).__name__,
            "buffer_size": self.buffer_size,
            "n_envs": self.n_envs,
            "action_dim": self.action_dim,
            "handle_timeout_termination": self.handle_timeout_termination,
            "n_steps": self.n_steps,
            "gamma": self.gamma,
            **self.replay_priorities.config(),
        }

    def _obs_arrays(self) -> dict[str, NDArray[Any]]:
        return {"observations": self.observations, "next_observations": self.next_observations}

    def save(self, path: str | os.PathLike[str]) -> None:
        """
        Save the buffer, its priorities and its RNG state to an ``.npz`` file (no pickle: loading it
        runs no code). A buffer loaded from it samples exactly what this one would have sampled next.

        The file is written atomically (:mod:`plr_gym.checkpoint`): a save that fails part-way leaves
        the previous file intact.

        :param path: file path, used exactly as given (no suffix is added)
        """
        arrays: dict[str, Any] = {
            "config": np.array(json.dumps(self._config(), sort_keys=True)),
            "format_version": np.array(_FORMAT_VERSION),
            "rng_state": np.array(json.dumps(self.replay_priorities.rng.bit_generator.state)),
            "pos": np.array(self.pos),
            "full": np.array(self.full),
            **self.replay_priorities.state_arrays(),
            "actions": self.actions,
            "rewards": self.rewards,
            "dones": self.dones,
            "timeouts": self.timeouts,
            "levels": self.levels,
        }
        arrays.update(self._obs_arrays())
        save_npz(path, arrays)

    def load(self, path: str | os.PathLike[str]) -> None:
        """
        Restore a buffer saved by :meth:`save` into this one, which must have been built with the same
        spaces and settings.

        Every member is checked before anything is assigned (settings, array shapes and dtypes,
        ``0 <= pos < buffer_size``, finite non-negative priorities and leaves, empty slots beyond the
        stored data, counters, RNG state): a refused file leaves this buffer exactly as it was.

        :param path: path of the ``.npz`` file
        :raises ValueError: if the file is not a valid checkpoint of a buffer with this one's settings
        """
        self._load_data(load_npz(path), os.fspath(path))

    def _load_data(self, data: dict[str, NDArray[Any]], name: str) -> None:
        """Validate the arrays of a saved buffer (:meth:`_validated_file`), then assign them."""
        checked = self._validated_file(data, name)
        targets = self._load_targets()
        for key, value in checked["arrays"].items():
            targets[key][...] = value
        self.pos = checked["pos"]
        self.full = checked["full"]
        self.replay_priorities.set_state(checked["priorities"])
        self.replay_priorities.rng = checked["rng"]
        self._reward_ends = None

    def _validated_file(self, data: dict[str, NDArray[Any]], name: str) -> dict[str, Any]:
        """Check a saved buffer's arrays against this buffer; return the values to assign."""
        from plr_gym.sampler import _state_rng

        def scalar(key: str) -> Any:
            if key not in data:
                raise ValueError(f"cannot load {name!r}: it has no {key!r} (not a prioritized buffer file)")
            if data[key].shape != ():
                raise ValueError(
                    f"cannot load {name!r}: {key!r} must be a scalar, got shape {data[key].shape}"
                )
            return data[key].item()

        try:
            version = scalar("format_version")
            if not is_int(version) or version not in (1, _FORMAT_VERSION):
                raise ValueError(
                    f"unsupported buffer file format {version!r} (expected 1 or {_FORMAT_VERSION})"
                )
            saved = json.loads(str(scalar("config")))
            rng_state = json.loads(str(scalar("rng_state")))
        except json.JSONDecodeError as exc:
            raise ValueError(f"cannot load {name!r}: bad JSON metadata ({exc})") from exc
        mine = self._config()
        if not isinstance(saved, dict):
            raise ValueError(f"cannot load {name!r}: its config is not a JSON object")
        differ = sorted(k for k in set(saved) | set(mine) if saved.get(k) != mine.get(k))
        if differ:
            detail = ", ".join(f"{k}: file {saved.get(k)!r} vs buffer {mine.get(k)!r}" for k in differ)
            raise ValueError(f"cannot load {name!r} into this buffer, settings differ: {detail}")
        arrays: dict[str, NDArray[Any]] = {}
        for key, target in self._load_targets().items():
            if key == "levels" and version < 2:
                continue
            if key not in data:
                raise ValueError(f"cannot load {name!r}: array {key!r} is missing")
            value = data[key]
            if value.shape != target.shape:
                raise ValueError(f"array {key!r} has shape {value.shape} in the file, {target.shape} here")
            if not np.can_cast(value.dtype, target.dtype, casting="same_kind") or value.dtype == object:
                raise ValueError(f"array {key!r} has dtype {value.dtype} in the file, {target.dtype} here")
            arrays[key] = value
        if version < 2:  # format 1 predates per-transition levels
            arrays["levels"] = np.full_like(self.levels, -1)
        if (arrays["levels"] < -1).any():
            raise ValueError(f"cannot load {name!r}: 'levels' holds ids below -1 (-1 marks unknown)")
        pos, full = scalar("pos"), scalar("full")
        if not is_int(pos) or not 0 <= pos < self.buffer_size:
            raise ValueError(f"cannot load {name!r}: pos={pos!r} must be an int in [0, {self.buffer_size})")
        if not isinstance(full, (bool, np.bool_)):
            raise ValueError(f"cannot load {name!r}: full={full!r} must be a bool")
        try:
            priorities = self.replay_priorities.checked_state(data, self.buffer_size if full else int(pos))
            rng = _state_rng(rng_state)
        except ValueError as exc:
            raise ValueError(f"cannot load {name!r}: {exc}") from exc
        return {"arrays": arrays, "pos": int(pos), "full": bool(full), "priorities": priorities, "rng": rng}

    def _load_targets(self) -> dict[str, NDArray[Any]]:
        """The arrays :meth:`load` fills in place, by their name in the file (the priorities are the
        core's: :meth:`ReplayPriorities.checked_state`)."""
        return {
            "actions": self.actions,
            "rewards": self.rewards,
            "dones": self.dones,
            "timeouts": self.timeouts,
            "levels": self.levels,
            **self._obs_arrays(),
        }


def _core_from_old_state(state: dict[str, Any]) -> ReplayPriorities:
    """The priority core of a buffer pickled before :class:`ReplayPriorities` existed (its fields were
    the buffer's own attributes)."""
    core = ReplayPriorities.__new__(ReplayPriorities)
    n_rows, n_envs = int(state["buffer_size"]), int(state["n_envs"])
    core.n_rows, core.n_envs, core.capacity = n_rows, n_envs, n_rows * n_envs
    for name in _CORE_SETTINGS:
        setattr(core, name, state.pop(name))
    core._beta = state.pop("_beta")
    core.rng = state.pop("_rng")
    core.tree = state.pop("_tree")
    core.raw = state.pop("_priorities")
    core.max_priority = state.pop("_max_priority")
    core.rank_snapshot = state.pop("_rank_snapshot")
    core.samples_since_refresh = state.pop("_samples_since_refresh")
    core.size_at_refresh = state.pop("_size_at_refresh")
    core.samples_since_update = state.pop("_samples_since_update")
    return core
