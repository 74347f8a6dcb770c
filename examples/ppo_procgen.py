"""PPO + Prioritized Level Replay on Procgen BigFish (the paper's setting: 200 training levels, easy mode).

The paper trains 25M steps on a GPU; this file shows the wiring and runs on a CPU with a small budget.
`ProcgenVecEnv` steps all envs in one batched Procgen (stock speed), each episode on the level PLR chose.
Run: python examples/ppo_procgen.py   (PLR_GYM_EXAMPLE_STEPS=512 for a quick check)
Needs: pip install ".[procgen]" in a clone (procgen-gym on Python 3.13, procgen-mirror on 3.11/3.12)
"""

import os

from stable_baselines3 import PPO
from stable_baselines3.common.vec_env import VecMonitor

from plr_gym import PLRCallback, PrioritizedLevelReplay
from plr_gym.envs.procgen_sb3 import ProcgenVecEnv
from plr_gym.evaluation import evaluate_levels, summarize

STEPS = int(os.environ.get("PLR_GYM_EXAMPLE_STEPS", 200_000))
N_EVAL = int(os.environ.get("PLR_GYM_EXAMPLE_EVAL_LEVELS", 20))
GAME = "bigfish"

plr = PrioritizedLevelReplay(
    ProcgenVecEnv(GAME, n_envs=8, distribution_mode="easy"),
    levels=range(200),
    strategy="value_l1",  # the library's defaults (docs/study.md); for the paper's beta = rho = 0.1 pass
    seed=0,  # sampler=LevelSampler.paper_defaults(range(200), seed=0) instead of levels=/strategy=
)
venv = VecMonitor(plr)  # episode returns for SB3's logs; VecEnvWrappers go outside PrioritizedLevelReplay
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
print(f"levels seen: {plr.sampler.num_seen}/200")

eval_venv = ProcgenVecEnv(GAME, n_envs=4, distribution_mode="easy")
stats = summarize(evaluate_levels(model, eval_venv, levels=range(10_000, 10_000 + N_EVAL)))
print(f"held-out mean return {stats['mean']:.2f} {stats['mean_ci']}, IQM {stats['iqm']:.2f}")
venv.close()
eval_venv.close()
