"""A gamut of MiniGrid DoorKey levels: the seed chooses the level *and* its difficulty.

PLR's paper measures on *gamut* tasks (ObstructedMazeGamut), where the training levels range from easy
to hard and a curriculum has something to find: which levels the agent can learn from now. Here level
``s`` is MiniGrid's ``DoorKey-<size>x<size>`` level ``s`` with ``size = sizes[s % len(sizes)]``; the
default ``sizes=(5, 6, 8)`` mixes easy and harder levels; the evidence study uses ``(5, 8, 10)``, where
the 10×10 levels are mostly out of reach of a small budget. The egocentric 7×7 view has the same shape
at every size, so one policy plays them all. Each size keeps MiniGrid's own step limit (``10·size²``).

Example:
    >>> import gymnasium as gym
    >>> import plr_gym.envs
    >>> env = gym.make("plr_gym/MiniGrid-DoorKeyGamut-v0")
    >>> obs, info = env.reset(seed=4)      # 4 % 3 == 1: a 6x6 DoorKey level
    >>> info["size"], obs["image"].shape
    (6, (7, 7, 3))
    >>> env.reset(seed=4)[1]["size"] == env.reset(seed=7)[1]["size"]
    True
"""

from __future__ import annotations

from typing import Any, SupportsFloat

import gymnasium as gym
from minigrid.envs.doorkey import DoorKeyEnv

__all__ = ["DoorKeyGamutEnv"]


class DoorKeyGamutEnv(gym.Env[Any, Any]):
    """MiniGrid DoorKey levels of mixed sizes; ``reset(seed=s)`` plays level ``s`` at size ``sizes[s % k]``.

    :param sizes: grid sizes (each >= 5), chosen by ``seed % len(sizes)``.
    :param render_mode: passed to MiniGrid.

    ``info["size"]`` is the grid size of the current level. A ``reset()`` without a seed draws one from
    the env's own seeded RNG (so the env also works outside a level sampler).
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}  # noqa: RUF012  (as gymnasium.Env)

    def __init__(self, sizes: tuple[int, ...] = (5, 6, 8), render_mode: str | None = None) -> None:
        sizes = tuple(sizes)
        if not sizes or any(isinstance(s, bool) or not isinstance(s, int) or s < 5 for s in sizes):
            raise ValueError(f"sizes must be a non-empty tuple of ints >= 5, got {sizes!r}")
        self.sizes = sizes
        self.render_mode = render_mode
        self._envs: dict[int, Any] = {
            s: DoorKeyEnv(size=s, render_mode=render_mode) for s in dict.fromkeys(sizes)
        }
        first = self._envs[sizes[0]]
        self.observation_space = first.observation_space
        self.action_space = first.action_space
        self._current: Any = first

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        if seed is None:
            seed = int(self.np_random.integers(2**31 - 1))
        size = self.sizes[int(seed) % len(self.sizes)]
        self._current = self._envs[size]
        obs, info = self._current.reset(seed=int(seed), options=options)
        return obs, {**info, "size": size}

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self._current.step(action)
        return obs, reward, terminated, truncated, {**info, "size": self._current.width}

    def render(self) -> Any:
        return self._current.render()

    def close(self) -> None:
        for env in self._envs.values():
            env.close()
