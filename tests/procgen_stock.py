"""The reference of the Procgen tests: a freshly built *stock* env of the installed Procgen build.

It is driven through that package's own public API (``procgen.ProcgenGym3Env``'s ``act``/``observe`` on
procgen-mirror, ``procgen_gym.ProcgenVecEnv``'s ``reset``/``step`` on procgen-gym), never through plr_gym's
binding of the C library, so the exactness tests compare plr_gym with Procgen itself on either build.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from plr_gym.envs import ProcgenBackend, procgen_backend


def require_backend() -> ProcgenBackend:
    """The installed Procgen build; skips the calling test module where none is installed."""
    try:
        return procgen_backend()
    except ImportError as exc:
        pytest.skip(f"no Procgen build installed ({exc})", allow_module_level=True)
        raise  # unreachable: skip raises


class StockEnv:
    """A stock Procgen env that only plays ``level`` (``num_levels=1, start_level=level``), one game."""

    def __init__(self, game: str, level: int, distribution_mode: str = "easy", **options: Any) -> None:
        self.backend = procgen_backend()
        kwargs = {"num_levels": 1, "start_level": level, "distribution_mode": distribution_mode, **options}
        if self.backend.name == "procgen-mirror":
            self.env = self.backend.module.ProcgenGym3Env(num=1, env_name=game, **kwargs)
        else:
            self.env = self.backend.module.ProcgenVecEnv(num_envs=1, env_name=game, **kwargs)

    def first_obs(self) -> np.ndarray:
        """The current observation (after construction: the level's first frame)."""
        if self.backend.name == "procgen-mirror":
            _, ob, _ = self.env.observe()
            return np.asarray(ob["rgb"][0])
        obs, _ = self.env.reset()
        return np.asarray(obs[0])

    def step(self, action: int) -> tuple[np.ndarray, float, bool]:
        """``(observation, reward, first)``: ``first`` is Procgen's "the game was reset in this step"."""
        if self.backend.name == "procgen-mirror":
            self.env.act(np.array([action], dtype=np.int32))
            reward, ob, first = self.env.observe()
            return ob["rgb"][0], float(reward[0]), bool(first[0])
        obs, reward, terminated, _, _ = self.env.step(np.array([action], dtype=np.int32))
        return obs[0], float(reward[0]), bool(terminated[0])  # procgen-gym reports first as terminated

    def get_state(self) -> bytes:
        """Procgen's serialized state of the game."""
        if self.backend.name == "procgen-mirror":
            state: bytes = self.env.get_state()[0]
        else:
            state = self.env.get_state()[0]
        return state

    def close(self) -> None:
        self.env.close()
