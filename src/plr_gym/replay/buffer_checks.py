"""Checks of one step before a prioritized buffer stores it (the "storing transitions" seam of
:mod:`plr_gym.replay.buffers`).

SB3's ``ReplayBuffer.add`` writes its arrays one after the other, so a step that fails part-way would
leave a half-stored row; and it broadcasts or casts silently. :class:`StepChecks` refuses such a step
before anything is written: observations of the wrong shape or dtype, NaN or infinite rewards, masked
arrays, malformed ``infos`` (levels and ``TimeLimit.truncated`` flags). :func:`timeout_flags` and
:func:`_real_array` are shared with :mod:`plr_gym.replay.shared`.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from numpy.typing import NDArray
from stable_baselines3.common.buffers import ReplayBuffer

from plr_gym._levels import check_level_id
from plr_gym.replay.priorities import is_int

__all__ = ["StepChecks", "timeout_flags"]


class StepChecks(ReplayBuffer):
    """The checks :meth:`~plr_gym.replay.PrioritizedReplayBuffer.add` runs before storing a step; a base
    of the prioritized buffers (subclasses override :meth:`_check_observations` for their own storage)."""

    def _check_observations(self, obs: Any, next_obs: Any) -> None:
        """Refuse observations that SB3's ``add`` would store part of before failing, or would broadcast
        or cast silently: each must be an array of shape ``(n_envs, *obs_shape)`` (any shape of that
        size for ``Discrete`` spaces, which SB3 reshapes) with a real (bool, int or float) dtype; for
        ``Dict`` spaces, a dict with exactly the space's keys."""
        space = self.observation_space
        n = self.n_envs
        for name, value in (("obs", obs), ("next_obs", next_obs)):
            if isinstance(space, spaces.Dict):
                shapes: dict[str, tuple[int, ...]] = self.obs_shape  # type: ignore[assignment]
                if not isinstance(value, dict) or set(value) != set(shapes):
                    got = sorted(value) if isinstance(value, dict) else type(value).__name__
                    raise ValueError(f"{name} must be a dict with the keys {sorted(shapes)}, got {got}")
                for key, shape in shapes.items():
                    _check_obs_array(f"{name}[{key!r}]", value[key], (n, *shape), space[key])
            else:
                _check_obs_array(name, value, (n, *self.obs_shape), space)

    def _check_step(self, action: Any, reward: Any, done: Any, infos: list[dict[str, Any]]) -> None:
        """Refuse a step that SB3's ``add`` would fail on part-way (after writing some arrays), or store
        wrongly: NaN/infinite or complex rewards, masked arrays, a non-numeric action."""
        self._levels_of(infos)
        if self.handle_timeout_termination and not all(isinstance(info, dict) for info in infos):
            raise ValueError(f"infos must be a list of {self.n_envs} dicts (one per env), got {infos!r}")
        if self.handle_timeout_termination:
            timeout_flags(infos, self.n_envs)
        if np.size(action) != self.n_envs * self.action_dim:
            raise ValueError(
                f"action must hold n_envs * action_dim = {self.n_envs * self.action_dim} values, "
                f"got shape {np.shape(action)}"
            )
        for name, value in (("action", action), ("reward", reward), ("done", done)):
            array = _real_array(name, value)
            if name != "action":
                try:
                    ok = np.broadcast_shapes(array.shape, (self.n_envs,)) == (self.n_envs,)
                except ValueError:
                    ok = False
                if not ok:
                    raise ValueError(
                        f"{name} must have shape (n_envs,) = ({self.n_envs},), got {array.shape}"
                    )
            if array.dtype.kind == "f" and not np.isfinite(array).all():
                raise ValueError(f"{name} must be finite, got {array.reshape(-1).tolist()}")

    def _levels_of(self, infos: list[dict[str, Any]]) -> NDArray[np.int64]:
        """Each env's level id from ``infos[i]["level"]``: ``-1`` (unknown) when absent or not an int
        level id (``None`` after an unseeded reset, a generator's dict or array level, a string); an int
        outside ``[-1, 2**63 - 1]`` is refused."""
        if not isinstance(infos, (list, tuple)) or len(infos) != self.n_envs:
            raise ValueError(f"infos must be a list of {self.n_envs} dicts (one per env), got {infos!r}")
        out = np.full(self.n_envs, -1, dtype=np.int64)
        for i, info in enumerate(infos):
            level: Any = info.get("level") if isinstance(info, dict) else None
            if is_int(level):
                if int(level) != -1:  # -1 marks an unknown level
                    check_level_id(level, f'infos[{i}]["level"] (or -1 for an unknown level)')
                out[i] = int(level)
            elif level is not None and not getattr(self, "_warned_level", False):
                self._warned_level = True
                warnings.warn(
                    f'infos[{i}]["level"] is a {type(level).__name__}, not an int level id: such transitions '
                    "are stored with level -1 (unknown), as for envs without levels. Shown once per buffer.",
                    UserWarning,
                    stacklevel=3,
                )
        return out


def timeout_flags(infos: Any, n_envs: int) -> NDArray[np.bool_]:
    """Each env's ``infos[i]["TimeLimit.truncated"]`` (``False`` when absent), checked before any step is
    stored: a bool (Python's or numpy's, also as a 0-d array) or the int 0 or 1; anything else (a string,
    ``None``, a list, an array of several values, another number) raises ``ValueError`` naming the env."""
    out = np.zeros(n_envs, dtype=bool)
    for i in range(n_envs):
        value = infos[i].get("TimeLimit.truncated", False)
        flag = value.item() if isinstance(value, np.ndarray) and value.ndim == 0 else value
        if isinstance(flag, (bool, np.bool_)):
            out[i] = bool(flag)
        elif isinstance(flag, (int, np.integer)) and flag in (0, 1):
            out[i] = flag == 1
        else:
            raise ValueError(
                f'infos[{i}]["TimeLimit.truncated"] must be a bool (or the int 0 or 1), got {value!r} '
                f"({type(value).__name__})"
            )
    return out


def _real_array(name: str, value: Any) -> NDArray[Any]:
    """``value`` as an array of bools, ints or floats, else ``TypeError`` (masked, complex, objects...)."""
    if isinstance(value, np.ma.MaskedArray):
        raise TypeError(
            f"{name} must not be a numpy masked array (its mask would be ignored); pass a plain array"
        )
    if isinstance(value, th.Tensor):
        value = value.detach().cpu().numpy()
    try:
        array = np.asarray(value)
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f"{name} must be an array of real numbers, got {type(value).__name__}: {exc}"
        ) from None
    if array.dtype.kind not in "biuf":
        raise TypeError(f"{name} must hold real numbers (bool, int or float), got dtype {array.dtype}")
    return array


def _check_obs_array(name: str, value: Any, shape: tuple[int, ...], space: spaces.Space[Any]) -> None:
    array = _real_array(name, value)
    if isinstance(space, spaces.Discrete):
        ok = array.size == int(np.prod(shape))
    else:
        ok = array.shape == shape
    if not ok:
        raise ValueError(f"{name} must have shape (n_envs, *obs_shape) = {shape}, got {array.shape}")
