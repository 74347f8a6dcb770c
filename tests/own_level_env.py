"""A user's own level env, as a module ``plr-gym --gym-packages own_level_env`` imports (issue #42).

``OwnLevels/Corridor-v0``: ``reset(seed=s)`` plays level ``s``, a corridor of ``3 + s % 5`` cells (at most
``max_length``, a constructor argument) with the goal at the left or right end (``s // 5 % 2``). The agent
starts in the middle; actions 0/1 step left/right; reaching the goal ends the episode with reward 1, the
other end with 0 (20 steps truncate it). The observation shows the corridor (1 = cell, 2 = goal, 3 = agent),
so different levels have different first observations.

``OwnLevels/IgnoresSeed-v0`` is the same env with the usual mistake: its reset draws the level from an
unseeded generator, so the seed does not choose it.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class Corridor(gym.Env[np.ndarray, int]):
    metadata = {"render_modes": ["rgb_array"]}  # noqa: RUF012  (SB3's make_vec_env asks for rgb_array)

    def __init__(
        self, max_length: int = 7, ignore_seed: bool = False, render_mode: str | None = None
    ) -> None:
        self.render_mode = render_mode
        self.max_length = int(max_length)
        self.ignore_seed = ignore_seed
        self.observation_space = spaces.Box(0.0, 3.0, (self.max_length,), np.float32)
        self.action_space = spaces.Discrete(2)
        self._rng = np.random.default_rng()  # the mistake of IgnoresSeed: never seeded

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        level = int(self._rng.integers(1000)) if self.ignore_seed else int(self.np_random.integers(2**31))
        if seed is not None and not self.ignore_seed:
            level = seed
        self.length = min(3 + level % 5, self.max_length)
        self.goal = 0 if (level // 5) % 2 == 0 else self.length - 1
        self.pos = self.length // 2
        return self._obs(), {}

    def _obs(self) -> np.ndarray:
        obs = np.zeros(self.max_length, np.float32)
        obs[: self.length] = 1.0
        obs[self.goal] = 2.0
        obs[self.pos] = 3.0
        return obs

    def step(self, action: int) -> Any:
        self.pos += 1 if int(action) == 1 else -1
        self.pos = max(0, min(self.length - 1, self.pos))
        at_end = self.pos in (0, self.length - 1)
        reward = 1.0 if self.pos == self.goal else 0.0
        return self._obs(), reward, at_end, False, {}


for _id, _kwargs in (("OwnLevels/Corridor-v0", {}), ("OwnLevels/IgnoresSeed-v0", {"ignore_seed": True})):
    if _id not in gym.registry:
        gym.register(_id, entry_point=Corridor, kwargs=_kwargs, max_episode_steps=20)
