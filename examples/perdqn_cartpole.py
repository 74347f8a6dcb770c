"""DQN with prioritized experience replay (Schaul et al., 2015) on CartPole.

PERDQN is SB3's DQN whose loss is importance-weighted and whose replay priorities are |TD error|.
Run: python examples/perdqn_cartpole.py   (PLR_GYM_EXAMPLE_STEPS=500 for a quick check)
"""

import os

import torch
from stable_baselines3.common.evaluation import evaluate_policy

from plr_gym import PERDQN

STEPS = int(os.environ.get("PLR_GYM_EXAMPLE_STEPS", 50_000))
torch.set_num_threads(1)  # a small MLP: one thread is the fastest on a CPU

model = PERDQN(
    "MlpPolicy",
    "CartPole-v1",
    learning_rate=2.3e-3,
    batch_size=64,
    buffer_size=100_000,
    learning_starts=min(1000, STEPS // 2),
    gamma=0.99,
    target_update_interval=10,
    train_freq=256,
    gradient_steps=128,
    exploration_fraction=0.16,
    exploration_final_eps=0.04,
    policy_kwargs={"net_arch": [256, 256]},
    # buffer options: proportional priorities p^alpha, importance weights annealed from beta to 1
    replay_buffer_kwargs={"prioritization": "proportional", "alpha": 0.6, "beta": 0.4},
    seed=0,
)
model.learn(STEPS)

buffer = model.replay_buffer
filled = buffer.priorities[: buffer.size()]
print(f"replay buffer: {buffer.size()} transitions, priority min {filled.min():.3g} max {filled.max():.3g}")
mean, std = evaluate_policy(model, model.get_env(), n_eval_episodes=10)
print(f"CartPole-v1 return: {mean:.1f} +/- {std:.1f}")
