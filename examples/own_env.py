"""Your own environment with PLR: make reset(seed=s) play level s, check it, train, evaluate, compare.

Three ways to make `reset(seed=s)` select level `s` (docs/own_env.md explains each):
  1. a seeded generator: call super().reset(seed=seed), then draw the whole layout from self.np_random;
  2. a table of level parameters: level s is row s of a table you wrote or generated once;
  3. a wrapper over an existing generator: hand it the seed (here Gymnasium's FrozenLake map generator).
Then plr_gym.check_level_env checks each, and PPO trains on 40 lakes (way 3) with PLR and with uniform
sampling; both are evaluated on 100 held-out lakes and compared level by level.
Run: python examples/own_env.py   (1-2 minutes on a CPU; PLR_GYM_EXAMPLE_STEPS=2048 for a quick check)
"""

import os

import gymnasium as gym
import numpy as np
import torch
from gymnasium.envs.toy_text.frozen_lake import FrozenLakeEnv, generate_random_map
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env

from plr_gym import LevelWrapper, PLRCallback, PrioritizedLevelReplay, check_level_env
from plr_gym.evaluation import evaluate_levels, summarize
from plr_gym.plotting import paired_difference

STEPS = int(os.environ.get("PLR_GYM_EXAMPLE_STEPS", 40_000))
N_EVAL = int(os.environ.get("PLR_GYM_EXAMPLE_EVAL_LEVELS", 100))
TRAIN_LEVELS, TEST_LEVELS = range(40), range(10_000, 10_000 + N_EVAL)


class Corridor(gym.Env):
    """Way 1, a seeded generator: a corridor of 4-16 cells, the goal at one end; actions: left 0, right 1."""

    observation_space = gym.spaces.Box(0.0, 3.0, (16,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)  # seeds self.np_random with the level: everything below follows from it
        self.length, self.goal, self.pos = self.layout()
        return self.obs(), {}

    def layout(self):  # (length, goal cell, start cell)
        length = int(self.np_random.integers(4, 17))
        return (
            length,
            int(self.np_random.integers(2)) * (length - 1),
            int(self.np_random.integers(1, length - 1)),
        )

    def obs(self):
        cells = np.zeros(16, np.float32)
        cells[: self.length], cells[self.goal], cells[self.pos] = 1.0, 2.0, 3.0
        return cells

    def step(self, action):
        self.pos = min(max(self.pos + (1 if action == 1 else -1), 0), self.length - 1)
        return self.obs(), float(self.pos == self.goal), self.pos in (0, self.length - 1), False, {}


_rng = np.random.default_rng(0)  # way 2: a table of (length, goal at the right?, start), written once
LEVEL_TABLE = [(n, int(_rng.integers(2)), int(_rng.integers(1, n - 1))) for n in _rng.integers(4, 17, 20_000)]


class TableCorridor(Corridor):
    """Way 2, a table of level parameters: reset(seed=s) plays row s (levels 0..len(table) - 1 only)."""

    def reset(self, *, seed=None, options=None):
        self.level = seed if seed is not None else int(self.np_random.integers(len(LEVEL_TABLE)))
        return super().reset(seed=seed, options=options)

    def layout(self):
        length, right, start = LEVEL_TABLE[self.level]
        return int(length), right * (length - 1), start


class SeededLakes(gym.Wrapper):
    """Way 3, a wrapper over an existing generator: a new 5x5 FrozenLake map per level, from its seed."""

    metadata = {"render_modes": ["rgb_array"]}  # noqa: RUF012  (SB3's make_vec_env asks for rgb_array)

    def __init__(self, size=5, render_mode=None):
        self.size, self.mode = size, render_mode
        super().__init__(self.lake(0))
        self.observation_space = gym.spaces.Box(0.0, 1.0, (2 * size * size,), np.float32)  # holes + agent

    def lake(self, level):
        desc = generate_random_map(self.size, p=0.8, seed=level)
        return FrozenLakeEnv(desc=desc, is_slippery=False, render_mode=self.mode)

    def reset(self, *, seed=None, options=None):
        level = seed if seed is not None else int(self.env.np_random.integers(2**31 - 1))
        self.env = self.lake(level)  # the generator's seed is the level
        state, info = self.env.reset(seed=level)
        return self.obs(state), info

    def step(self, action):
        state, reward, terminated, truncated, info = self.env.step(action)
        return self.obs(state), reward, terminated, truncated, info

    def obs(self, state):
        agent = np.eye(self.size * self.size, dtype=np.float32)[state]
        return np.concatenate([(self.env.unwrapped.desc == b"H").ravel().astype(np.float32), agent])


for env_id, entry_point in [("OwnEnv/Corridor-v0", Corridor), ("OwnEnv/TableCorridor-v0", TableCorridor),
                            ("OwnEnv/SeededLakes-v0", SeededLakes)]:  # fmt: skip
    if env_id not in gym.registry:
        gym.register(env_id, entry_point=entry_point, max_episode_steps=40)


def train_and_evaluate(sampler_kwargs):
    def make(seed):
        return make_vec_env("OwnEnv/SeededLakes-v0", n_envs=8, seed=seed, wrapper_class=LevelWrapper)

    venv = PrioritizedLevelReplay(make(0), levels=TRAIN_LEVELS, seed=0, **sampler_kwargs)
    model = PPO("MlpPolicy", venv, n_steps=128, batch_size=256, learning_rate=1e-3, ent_coef=0.01, seed=0)
    model.learn(STEPS, callback=PLRCallback())  # PLRCallback scores each episode, updating the sampler
    return evaluate_levels(model, make(1), levels=TEST_LEVELS)  # level -> returns, on held-out lakes


if __name__ == "__main__":  # `plr-gym ... --gym-packages own_env` imports this file for its env ids only
    torch.set_num_threads(1)  # a small MLP: one thread is the fastest on a CPU
    for env_id in gym.registry:
        if env_id.startswith("OwnEnv/"):  # raises a ValueError listing each problem and its fix
            report = check_level_env(gym.make(env_id), levels=[*TRAIN_LEVELS, *TEST_LEVELS])
            print(f"{env_id}: {report.distinct_levels} distinct levels of {report.sampled_levels} checked")
    plr = train_and_evaluate({})  # the library's defaults
    uniform = train_and_evaluate(
        {"score_transform": "constant", "staleness_coef": 0.0, "min_seen_ratio": 0.0}
    )
    for name, returns in (("PLR", plr), ("uniform", uniform)):
        print(f"{name:8s} held-out mean return {summarize(returns)['mean']:.3f} over {len(returns)} lakes")
    plr_row, uniform_row = ([[np.mean(r[lvl]) for lvl in TEST_LEVELS]] for r in (plr, uniform))
    diff = paired_difference(np.array(plr_row), np.array(uniform_row))
    print(f"PLR - uniform: {diff['mean']:+.3f} held-out return, paired by lake (one seed each: no verdict).")
    print(
        "Several seeds, curves, a verdict and plots: in examples/, run plr-gym compare --run --gym-packages"
    )
    print("own_env --env OwnEnv/SeededLakes-v0 --num-levels 40 --eval-levels 10000:10100 --seeds 0 1 2")
