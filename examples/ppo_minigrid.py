"""PPO + Prioritized Level Replay on MiniGrid DoorKey, evaluated on held-out levels.

Train on 50 fixed levels (seeds 0..49), test on 50 levels never seen in training.
Run: python examples/ppo_minigrid.py   (PLR_GYM_EXAMPLE_STEPS=2048 for a quick check)
"""

import os

import minigrid  # noqa: F401  (registers the MiniGrid envs)
import torch
from minigrid.wrappers import ImgObsWrapper
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env

from plr_gym import LevelWrapper, PLRCallback, PrioritizedLevelReplay
from plr_gym.evaluation import evaluate_levels, summarize

STEPS = int(os.environ.get("PLR_GYM_EXAMPLE_STEPS", 80_000))
N_EVAL = int(os.environ.get("PLR_GYM_EXAMPLE_EVAL_LEVELS", 50))
ENV_ID = "MiniGrid-DoorKey-5x5-v0"
TRAIN_LEVELS, TEST_LEVELS = range(50), range(10_000, 10_000 + N_EVAL)
torch.set_num_threads(1)  # a small MLP: one thread is the fastest on a CPU


def make_venv(seed: int):
    # LevelWrapper must be the outermost gymnasium wrapper: it picks each episode's level (= reset seed).
    return make_vec_env(ENV_ID, n_envs=8, seed=seed, wrapper_class=lambda e: LevelWrapper(ImgObsWrapper(e)))


# The sampler: the library's defaults (L1 value loss scores, rank, beta=1, rho=0.3, uniform_mass=0.5).
venv = PrioritizedLevelReplay(make_venv(0), levels=TRAIN_LEVELS, strategy="value_l1", seed=0)
model = PPO(
    "MlpPolicy",
    venv,
    n_steps=256 if STEPS >= 20_000 else 32,  # short rollouts only for tiny test budgets
    batch_size=256,
    n_epochs=4,
    learning_rate=5e-4,
    ent_coef=0.01,
    policy_kwargs={"normalize_images": False},  # MiniGrid's 7x7x3 view holds small ints, not pixels
    seed=0,
)
# PLRCallback scores each finished episode from the rollout buffer and updates the sampler.
model.learn(STEPS, callback=PLRCallback(save_path="runs/ppo_minigrid/plr"))

sampler = venv.sampler
print(f"levels seen {sampler.num_seen}/{sampler.num_levels}, replayed {sampler.num_replay_samples} episodes")
top = sampler.levels[sampler.scores.argsort()[::-1][:5]]
print("highest-scoring training levels (most learning potential):", top.tolist())

eval_venv = make_venv(1)  # no PrioritizedLevelReplay here: we choose the levels
for name, levels in (("train", TRAIN_LEVELS[:N_EVAL]), ("held-out", TEST_LEVELS)):
    stats = summarize(evaluate_levels(model, eval_venv, levels))
    lo, hi = stats["mean_ci"]
    print(f"{name:>9}: mean return {stats['mean']:.3f} [{lo:.3f}, {hi:.3f}], IQM {stats['iqm']:.3f}")
venv.close()
eval_venv.close()
