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

:class:`DoorKeyMixedEnv` (``plr_gym/MiniGrid-DoorKeyMixed-v0``) is the other kind of mixed training set,
the one a random level generator produces: level ``s`` is trivial, normal or unsolvable by ``s % 3``.
"""

from __future__ import annotations

from typing import Any, SupportsFloat

import gymnasium as gym
from minigrid.core.world_object import Key
from minigrid.envs.doorkey import DoorKeyEnv

__all__ = ["MIXED_KINDS", "DoorKeyGamutEnv", "DoorKeyMixedEnv"]

#: The kinds of :class:`DoorKeyMixedEnv` levels, indexed by ``seed % 3``.
MIXED_KINDS: tuple[str, str, str] = ("trivial", "normal", "unsolvable")


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


class DoorKeyMixedEnv(DoorKeyEnv):
    """DoorKey levels of three kinds, as a random level generator produces them: ``reset(seed=s)`` plays
    level ``s`` of kind ``MIXED_KINDS[s % 3]``.

    Every level starts as MiniGrid's ``DoorKey-<size>x<size>`` level ``s`` (the same grid, door and key as
    ``MiniGrid-DoorKey-<size>x<size>-v0`` with that seed); then, by ``s % 3``:

    - ``0``, ``"trivial"``: the agent starts on the cell above the goal (in the goal's room, facing a
      direction drawn from the level's RNG): at most two turns and one step forward reach the goal.
    - ``1``, ``"normal"``: the DoorKey level unchanged (pick up the key, open the locked door, reach the
      goal).
    - ``2``, ``"unsolvable"``: the key is removed, so the locked door can never be opened and the return is
      always 0; every episode lasts the full step limit.

    A curriculum has something to find here that uniform sampling wastes steps on: the unsolvable third eats
    the most steps and teaches nothing, the trivial third is learned at once. The observation (egocentric
    7×7 view, mission) has the same shape for every kind, and the step limit is MiniGrid's ``10·size²``.
    ``info["kind"]`` names the current level's kind. A ``reset()`` without a seed draws one from the env's
    RNG, so the env also works outside a level sampler.

    :param size: grid size (an int >= 5; the goal room is at least one column wide).
    :param max_steps: step limit per episode (a positive int); ``None`` for MiniGrid's ``10 * size**2``.
    :param render_mode: passed to MiniGrid.

    Example:
        >>> import gymnasium as gym
        >>> import plr_gym.envs
        >>> env = gym.make("plr_gym/MiniGrid-DoorKeyMixed-v0")   # size 5
        >>> [env.reset(seed=s)[1]["kind"] for s in (0, 1, 2, 3)]
        ['trivial', 'normal', 'unsolvable', 'trivial']
        >>> obs, info = env.reset(seed=2)
        >>> obs["image"].shape, env.unwrapped.has_key()
        ((7, 7, 3), False)
    """

    def __init__(self, size: int = 5, max_steps: int | None = None, render_mode: str | None = None) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 5:
            raise ValueError(f"size must be an int >= 5, got {size!r}")
        bad_steps = isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1
        if max_steps is not None and bad_steps:
            raise ValueError(f"max_steps must be a positive int or None, got {max_steps!r}")
        super().__init__(size=size, max_steps=max_steps, render_mode=render_mode)
        self.kind: str = MIXED_KINDS[1]

    @staticmethod
    def kind_of(seed: int) -> str:
        """The kind of level ``seed``: ``"trivial"``, ``"normal"`` or ``"unsolvable"`` (``seed % 3``)."""
        return MIXED_KINDS[int(seed) % 3]

    def has_key(self) -> bool:
        """Whether the current grid holds a key (False on unsolvable levels, until the next reset)."""
        return any(isinstance(obj, Key) for obj in self.grid.grid) or isinstance(self.carrying, Key)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        if seed is None:
            seed = int(self.np_random.integers(2**31 - 1))
        self.kind = self.kind_of(seed)
        obs: Any
        obs, info = super().reset(seed=int(seed), options=options)
        return obs, {**info, "kind": self.kind}

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs: Any
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, reward, terminated, truncated, {**info, "kind": self.kind}

    def _gen_grid(self, width: int, height: int) -> None:
        # MiniGrid's DoorKey level first: the same RNG draws (grid, door, key) for every kind
        super()._gen_grid(width, height)  # type: ignore[no-untyped-call]
        if self.kind == "trivial":
            # the column right of the splitting wall (at most width - 3) is the goal's room; the goal is at
            # (width - 2, height - 2), so the cell above it is always free
            self.agent_pos = (width - 2, height - 3)
            self.agent_dir = self._rand_int(0, 4)
        elif self.kind == "unsolvable":
            for x in range(width):
                for y in range(height):
                    if isinstance(self.grid.get(x, y), Key):
                        self.grid.set(x, y, None)
