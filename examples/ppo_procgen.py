"""PPO + Prioritized Level Replay on Procgen BigFish (the paper's setting: 200 training levels, easy mode).

The paper trains 25M steps on a GPU; this file shows the wiring and runs on a CPU with a small budget.
Run: python examples/ppo_procgen.py   (PLR_GYM_EXAMPLE_STEPS=512 for a quick check)
Needs: pip install ".[procgen]" in a clone (numpy 1.x and the legacy gym: see the README's Install)
"""

import os

from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env

import plr_gym.envs  # noqa: F401  (registers plr_gym/procgen-<game>-v0)
from plr_gym import LevelWrapper, PLRCallback, PrioritizedLevelReplay
from plr_gym.evaluation import evaluate_levels, summarize

STEPS = int(os.environ.get("PLR_GYM_EXAMPLE_STEPS", 200_000))
N_EVAL = int(os.environ.get("PLR_GYM_EXAMPLE_EVAL_LEVELS", 20))
ENV_ID = "plr_gym/procgen-bigfish-v0"
ENV_KWARGS = {"distribution_mode": "easy"}


def make_venv(n_envs: int, seed: int):
    return make_vec_env(ENV_ID, n_envs=n_envs, seed=seed, env_kwargs=ENV_KWARGS, wrapper_class=LevelWrapper)


venv = PrioritizedLevelReplay(
    make_venv(8, 0),
    levels=range(200),
    strategy="value_l1",
    score_transform="rank",
    temperature=0.1,  # beta
    staleness_coef=0.1,  # rho
    seed=0,
)
# PPO wraps the env in VecTransposeImage (channels first) itself, outside PrioritizedLevelReplay.
model = PPO(
    "CnnPolicy",
    venv,
    n_steps=256 if STEPS >= 2048 else 32,
    batch_size=512 if STEPS >= 2048 else 64,
    n_epochs=3,
    learning_rate=5e-4,
    ent_coef=0.01,
    gamma=0.999,
    seed=0,
)
model.learn(STEPS, callback=PLRCallback())
print(f"levels seen: {venv.sampler.num_seen}/200")

eval_venv = make_venv(4, 1)
stats = summarize(evaluate_levels(model, eval_venv, levels=range(10_000, 10_000 + N_EVAL)))
print(f"held-out mean return {stats['mean']:.2f} {stats['mean_ci']}, IQM {stats['iqm']:.2f}")
venv.close()
eval_venv.close()
