"""Robust PLR over an open-ended level generator: no fixed training set, a bounded buffer of good levels.

Each rollout either tries new levels from the generator (scored and offered to the buffer, which keeps
the highest-scoring ones) or replays buffer levels chosen by score and staleness (Robust PLR, Jiang et
al., NeurIPS 2021). MiniGrid levels are reset seeds, so the generator draws fresh seeds out of 2^31.
Run: python examples/robust_plr_generator.py   (PLR_GYM_EXAMPLE_STEPS=2048 for a quick check)
"""

import os

import minigrid  # noqa: F401  (registers the MiniGrid envs)
import numpy as np
import torch
from minigrid.wrappers import ImgObsWrapper
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env

from plr_gym import LevelBuffer, LevelWrapper, PLRCallback, PrioritizedLevelReplay
from plr_gym.evaluation import evaluate_levels, summarize

STEPS = int(os.environ.get("PLR_GYM_EXAMPLE_STEPS", 80_000))
N_EVAL = int(os.environ.get("PLR_GYM_EXAMPLE_EVAL_LEVELS", 50))
ENV_ID = "MiniGrid-DoorKey-5x5-v0"
torch.set_num_threads(1)  # a small MLP: one thread is the fastest on a CPU


def make_venv(seed: int):
    return make_vec_env(ENV_ID, n_envs=8, seed=seed, wrapper_class=lambda e: LevelWrapper(ImgObsWrapper(e)))


def new_level(rng: np.random.Generator) -> int:
    return int(rng.integers(2**31 - 1))  # any level the env can play; here a fresh MiniGrid seed


buffer = LevelBuffer(capacity=64, replay_prob=0.8, staleness_coef=0.3, temperature=0.3, seed=0)
venv = PrioritizedLevelReplay(
    make_venv(0), buffer=buffer, generator=new_level, strategy="positive_value_loss", seed=0
)
model = PPO(
    "MlpPolicy",
    venv,
    n_steps=256 if STEPS >= 20_000 else 32,  # short rollouts only for tiny test budgets
    batch_size=256,
    n_epochs=4,
    learning_rate=5e-4,
    ent_coef=0.01,
    policy_kwargs={"normalize_images": False},
    seed=0,
)
# PLRCallback starts each rollout (replay or new levels) and scores the episodes into the buffer.
model.learn(STEPS, callback=PLRCallback())

print(f"buffer: {len(buffer)}/{buffer.capacity} levels, mean score {buffer.scores[: len(buffer)].mean():.4f}")
eval_venv = make_venv(1)
stats = summarize(evaluate_levels(model, eval_venv, range(10_000, 10_000 + N_EVAL)))
print(f"held-out mean return {stats['mean']:.3f} {np.round(stats['mean_ci'], 3)}, IQM {stats['iqm']:.3f}")
venv.close()
eval_venv.close()
