"""An editable MiniGrid maze: the level is a wall layout passed through ``reset(options={"level": ...})``.

The example environment for open-ended curricula (:class:`~plr_gym.LevelBuffer`, Robust PLR, ACCEL): a
level is a plain dict of numpy arrays and ints, :func:`random_maze_level` is a generator and
:func:`mutate_maze_level` an ACCEL mutator (one edit: flip a wall, or move the goal).

A level is ``{"walls": bool array (size-2, size-2), "agent": (x, y), "agent_dir": 0..3, "goal": (x, y)}``
in inner-grid coordinates (the outer wall ring is always there). ``reset(seed=s)`` without a level draws a
random layout from the env's seeded RNG, so the env also works as a seed-indexed level set.

Example:
    >>> import numpy as np
    >>> from plr_gym.envs.maze import LayoutMazeEnv, random_maze_level, mutate_maze_level
    >>> rng = np.random.default_rng(0)
    >>> level = random_maze_level(rng, size=7)
    >>> env = LayoutMazeEnv(size=7)
    >>> obs, info = env.reset(options={"level": level})
    >>> bool((env.layout["walls"] == level["walls"]).all())
    True
    >>> child = mutate_maze_level(level, rng)
    >>> int((child["walls"] != level["walls"]).sum()) + int(child["goal"] != level["goal"])
    1
"""

from __future__ import annotations

from typing import Any

import numpy as np
from minigrid.core.grid import Grid
from minigrid.core.mission import MissionSpace
from minigrid.core.world_object import Goal, Wall
from minigrid.minigrid_env import MiniGridEnv

__all__ = ["LayoutMazeEnv", "check_maze_level", "mutate_maze_level", "random_maze_level"]


def random_maze_level(rng: np.random.Generator, size: int = 9, max_density: float = 0.4) -> dict[str, Any]:
    """A random layout: every inner cell is a wall with probability ``U(0, max_density)``; random ends."""
    inner = size - 2
    density = rng.uniform(0.0, max_density)
    walls = rng.random((inner, inner)) < density
    cells = rng.choice(inner * inner, size=2, replace=False)
    agent = (int(cells[0] % inner), int(cells[0] // inner))
    goal = (int(cells[1] % inner), int(cells[1] // inner))
    walls[agent[1], agent[0]] = walls[goal[1], goal[0]] = False
    return {"walls": walls, "agent": agent, "agent_dir": int(rng.integers(4)), "goal": goal}


def mutate_maze_level(level: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]:
    """One ACCEL edit: flip one wall cell (never the start or goal cell), or, 1 time in 10, move the goal."""
    walls = np.array(level["walls"], dtype=bool, copy=True)
    inner = walls.shape[0]
    agent, goal = tuple(level["agent"]), tuple(level["goal"])
    free = [(x, y) for y in range(inner) for x in range(inner) if (x, y) not in (agent, goal)]
    if rng.random() < 0.1:
        options = [(x, y) for (x, y) in free if not walls[y, x]]
        if options:
            goal = options[int(rng.integers(len(options)))]
            return {**level, "walls": walls, "goal": goal}
    x, y = free[int(rng.integers(len(free)))]
    walls[y, x] = not walls[y, x]
    return {**level, "walls": walls, "goal": goal}


def check_maze_level(level: Any, size: int) -> dict[str, Any]:
    """Validate a level for a ``size`` maze; raise ``ValueError``/``TypeError`` naming what is wrong."""
    if not isinstance(level, dict) or not {"walls", "agent", "goal"} <= set(level):
        raise TypeError(
            f"a maze level is a dict with 'walls', 'agent', 'goal' (and 'agent_dir'), got {level!r}"
        )
    inner = size - 2
    walls = np.asarray(level["walls"])
    if walls.shape != (inner, inner) or walls.dtype != np.bool_:
        raise ValueError(
            f"level['walls'] must be a bool array of shape {(inner, inner)}, got {walls.dtype} {walls.shape}"
        )
    out: dict[str, Any] = {"walls": walls, "agent_dir": int(level.get("agent_dir", 0)) % 4}
    for key in ("agent", "goal"):
        pos = level[key]
        if len(pos) != 2 or not all(isinstance(v, (int, np.integer)) and 0 <= v < inner for v in pos):
            raise ValueError(
                f"level[{key!r}] must be an (x, y) pair inside the {inner}x{inner} inner grid, got {pos!r}"
            )
        if walls[pos[1], pos[0]]:
            raise ValueError(f"level[{key!r}] = {tuple(pos)} is inside a wall")
        out[key] = (int(pos[0]), int(pos[1]))
    if out["agent"] == out["goal"]:
        raise ValueError("level['agent'] and level['goal'] must differ")
    return out


class LayoutMazeEnv(MiniGridEnv):
    """A ``size`` x ``size`` MiniGrid maze whose layout is the level given to ``reset``.

    :param size: grid size including the outer walls (>= 4).
    :param max_steps: episode length limit (default ``4 * size * size``).
    :param kwargs: passed to ``MiniGridEnv`` (e.g. ``agent_view_size``, ``render_mode``).
    """

    def __init__(self, size: int = 9, max_steps: int | None = None, **kwargs: Any) -> None:
        if size < 4:
            raise ValueError(f"size must be >= 4, got {size}")
        self.size = size
        self.layout: dict[str, Any] = {}
        super().__init__(
            mission_space=MissionSpace(mission_func=lambda: "get to the green goal square"),
            grid_size=size,
            max_steps=4 * size * size if max_steps is None else max_steps,
            see_through_walls=False,
            **kwargs,
        )

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        level = (options or {}).get("level")
        if level is None:
            super(MiniGridEnv, self).reset(seed=seed)  # seed self.np_random, then draw a layout from it
            seed = None
            level = random_maze_level(self.np_random, self.size)
        self.layout = check_maze_level(level, self.size)
        return super().reset(seed=seed)

    def _gen_grid(self, width: int, height: int) -> None:
        self.grid = Grid(width, height)
        self.grid.wall_rect(0, 0, width, height)
        walls = self.layout["walls"]
        for y, x in zip(*np.nonzero(walls)):
            self.grid.set(int(x) + 1, int(y) + 1, Wall())
        gx, gy = self.layout["goal"]
        self.put_obj(Goal(), gx + 1, gy + 1)
        ax, ay = self.layout["agent"]
        self.agent_pos = (ax + 1, ay + 1)
        self.agent_dir = self.layout["agent_dir"]
        self.mission = "get to the green goal square"
