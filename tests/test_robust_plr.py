"""Robust PLR and ACCEL: PrioritizedLevelReplay(buffer=LevelBuffer(...), generator=...) with PLRCallback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from minigrid.wrappers import FlatObsWrapper
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback, CallbackList
from stable_baselines3.common.vec_env import DummyVecEnv

from plr_gym import LevelBuffer, LevelWrapper, PLRCallback, PrioritizedLevelReplay
from plr_gym.envs.maze import LayoutMazeEnv, mutate_maze_level, random_maze_level

SIZE = 6


def maze_venv(n_envs: int = 2) -> DummyVecEnv:
    return DummyVecEnv(
        [lambda: LevelWrapper(FlatObsWrapper(LayoutMazeEnv(size=SIZE, max_steps=20)))] * n_envs
    )


def maze_generator(rng: np.random.Generator) -> dict[str, Any]:
    return random_maze_level(rng, size=SIZE)


class ModeLog(BaseCallback):
    """Records the rollout mode and a copy of the parameters before and after every train() call."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[dict[str, Any]] = []

    def _params(self) -> list[th.Tensor]:
        return [p.detach().clone() for p in self.model.policy.parameters()]

    def _on_rollout_start(self) -> None:
        if self.rows:
            self.rows[-1]["after"] = self._params()

    def _on_step(self) -> bool:
        return True

    def _on_rollout_end(self) -> None:
        wrapper = self.model.get_env()
        self.rows.append({"mode": wrapper.rollout_mode, "before": self._params()})  # type: ignore[union-attr]


def run(
    tmp: Path | None = None,
    steps: int = 32 * 2 * 8,
    mutator: Any = None,
    exploratory: bool = True,
    resume: Path | None = None,
    buffer_seed: int = 0,
) -> tuple[PrioritizedLevelReplay, ModeLog, PPO]:
    buffer = LevelBuffer(
        capacity=6, replay_prob=0.5, min_fill_ratio=0.5, staleness_coef=0.3, seed=buffer_seed
    )
    venv = PrioritizedLevelReplay(
        maze_venv(), buffer=buffer, generator=maze_generator, mutator=mutator, seed=1
    )
    model = PPO("MlpPolicy", venv, n_steps=32, batch_size=64, n_epochs=1, seed=0)
    log = ModeLog()
    cb = PLRCallback(exploratory_grad_updates=exploratory, save_path=tmp, save_freq=1, resume_from=resume)
    model.learn(steps, callback=CallbackList([cb, log]))
    return venv, log, model


def test_buffer_fills_and_replays() -> None:
    venv, log, _ = run()
    modes = [row["mode"] for row in log.rows]
    assert "new" in modes and "replay" in modes
    assert modes.index("replay") > 0  # never before min_fill_ratio
    buffer = venv.buffer
    assert buffer is not None and buffer.size >= 3
    assert all(
        isinstance(level, dict) and level["walls"].shape == (SIZE - 2, SIZE - 2) for level in buffer.levels
    )
    assert np.isfinite(buffer.scores).all()


def test_no_gradient_on_exploratory_rollouts() -> None:
    _, log, _ = run(exploratory=False)
    rows = [row for row in log.rows if "after" in row]
    assert {row["mode"] for row in rows} >= {"new", "replay"}
    for row in rows:
        same = all(torch_equal(a, b) for a, b in zip(row["before"], row["after"]))
        assert same == (row["mode"] != "replay"), row["mode"]


def torch_equal(a: th.Tensor, b: th.Tensor) -> bool:
    return bool(th.equal(a, b))


def test_accel_inserts_mutated_children() -> None:
    mutated: list[dict[str, Any]] = []

    def mutator(level: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]:
        child = mutate_maze_level(level, rng)
        mutated.append(child)
        return child

    venv, log, _ = run(mutator=mutator, steps=32 * 2 * 12)
    modes = [row["mode"] for row in log.rows]
    assert "mutate" in modes
    # every replay rollout (except possibly the last) is followed by a rollout on its children
    for a, b in zip(modes, modes[1:]):
        if a == "replay":
            assert b == "mutate"
    buffer = venv.buffer
    assert buffer is not None
    in_buffer = [buffer.find(child) for child in mutated]
    assert any(i >= 0 for i in in_buffer), "no mutated level was inserted"


def test_int_generator_levels_on_minigrid() -> None:
    base = DummyVecEnv(
        [lambda: LevelWrapper(FlatObsWrapper(gym.make("MiniGrid-Empty-Random-6x6-v0", max_steps=20)))] * 2
    )
    buffer = LevelBuffer(capacity=4, min_fill_ratio=0.5, replay_prob=0.5, seed=0)
    venv = PrioritizedLevelReplay(base, buffer=buffer, generator=lambda rng: int(rng.integers(2**31)), seed=0)
    PPO("MlpPolicy", venv, n_steps=32, batch_size=64, n_epochs=1, seed=0).learn(
        32 * 2 * 6, callback=PLRCallback()
    )
    assert buffer.size > 0 and all(isinstance(level, int) for level in buffer.levels)


def test_resume_is_exact(tmp_path: Path) -> None:
    full, _, _ = run(steps=32 * 2 * 10, mutator=mutate_maze_level)
    # split: 4 rollouts, checkpoint, then a fresh buffer restored from disk continues the same model/env
    venv, _, model = run(tmp=tmp_path, steps=32 * 2 * 4, mutator=mutate_maze_level)
    assert venv.buffer is not None
    venv.buffer = LevelBuffer(capacity=6, replay_prob=0.5, min_fill_ratio=0.5, staleness_coef=0.3, seed=99)
    model.learn(32 * 2 * 6, callback=PLRCallback(resume_from=tmp_path), reset_num_timesteps=False)
    assert full.buffer is not None
    np.testing.assert_array_equal(full.buffer.scores, venv.buffer.scores)
    assert all(
        np.array_equal(a["walls"], b["walls"]) and a["goal"] == b["goal"]
        for a, b in zip(full.buffer.levels, venv.buffer.levels)
    )


def test_bad_configuration_and_refused_levels() -> None:
    buffer = LevelBuffer(capacity=4)
    with pytest.raises(ValueError, match="generator"):
        PrioritizedLevelReplay(maze_venv(), buffer=buffer)
    with pytest.raises(ValueError, match="buffer"):
        PrioritizedLevelReplay(maze_venv(), levels=range(3), generator=maze_generator)
    with pytest.raises(ValueError, match="strategy"):
        PrioritizedLevelReplay(maze_venv(), buffer=buffer, generator=maze_generator, strategy="random")
    with pytest.raises(ValueError, match="only generator"):
        PrioritizedLevelReplay(maze_venv(), buffer=buffer, generator=maze_generator, levels=range(3))
    bad = PrioritizedLevelReplay(maze_venv(), buffer=buffer, generator=lambda rng: {"walls": np.ones((2, 2))})
    with pytest.raises(ValueError, match="refused a level made by the generator"):
        bad.reset()
