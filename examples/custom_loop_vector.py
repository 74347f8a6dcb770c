"""Your own PPO loop (CleanRL style) with PLR through the Gymnasium vector API and ``report_rollout``.

The wrapper picks each episode's level; after computing advantages, pass the rollout to report_rollout,
which scores each finished episode (L1 value loss) and updates the sampler. Quick check:
PLR_GYM_EXAMPLE_STEPS=2048 python examples/custom_loop_vector.py
"""

import os

import gymnasium as gym
import minigrid  # noqa: F401  (registers the MiniGrid envs)
import numpy as np
import torch
from minigrid.wrappers import ImgObsWrapper
from torch import nn

from plr_gym.vector import PrioritizedLevelReplay
from plr_gym.wrappers import LevelWrapper

STEPS = int(os.environ.get("PLR_GYM_EXAMPLE_STEPS", 100_000))
N_ENVS, N_STEPS, GAMMA, LAM, EPOCHS, MINIBATCHES, CLIP = 8, 128, 0.99, 0.95, 4, 4, 0.2
torch.manual_seed(0)
torch.set_num_threads(1)  # a small MLP: one thread is the fastest on a CPU
# SAME_STEP autoreset: the observation returned with done=True is already the next episode's first.
envs = gym.make_vec("MiniGrid-DoorKey-5x5-v0", num_envs=N_ENVS, wrappers=[ImgObsWrapper, LevelWrapper],
                    vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP})  # fmt: skip
envs = PrioritizedLevelReplay(envs, levels=range(100), strategy="value_l1", seed=0)
obs_dim, n_actions = int(np.prod(envs.single_observation_space.shape)), int(envs.single_action_space.n)


def mlp(out: int) -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(obs_dim, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(),
                         nn.Linear(64, out))  # fmt: skip


actor, critic = mlp(n_actions), mlp(1)
optimizer = torch.optim.Adam([*actor.parameters(), *critic.parameters()], lr=5e-4)
obs_buf = torch.zeros((N_STEPS, N_ENVS, *envs.single_observation_space.shape))
act_buf, logp_buf, val_buf = (torch.zeros((N_STEPS, N_ENVS)) for _ in range(3))
rew_buf, done_buf = np.zeros((N_STEPS, N_ENVS), np.float32), np.zeros((N_STEPS, N_ENVS), np.float32)
obs, _ = envs.reset()
returns, ep_return = [], np.zeros(N_ENVS)
for update in range(max(1, STEPS // (N_STEPS * N_ENVS))):
    for t in range(N_STEPS):  # ---- rollout
        x = torch.as_tensor(obs, dtype=torch.float32)
        with torch.no_grad():
            dist = torch.distributions.Categorical(logits=actor(x))
            action, value = dist.sample(), critic(x)[:, 0]
        obs_buf[t], act_buf[t], logp_buf[t], val_buf[t] = x, action, dist.log_prob(action), value
        obs, reward, terminated, truncated, info = envs.step(action.numpy())
        rew_buf[t], done_buf[t] = reward, terminated | truncated
        ep_return += reward
        returns += ep_return[done_buf[t] > 0].tolist()
        ep_return[done_buf[t] > 0] = 0.0
    last_value = critic(torch.as_tensor(obs, dtype=torch.float32))[:, 0].detach().numpy()  # ---- GAE
    values, adv, gae = val_buf.numpy(), np.zeros((N_STEPS, N_ENVS), np.float32), 0.0
    for t in reversed(range(N_STEPS)):
        next_value, nonterminal = (last_value if t == N_STEPS - 1 else values[t + 1]), 1.0 - done_buf[t]
        delta = rew_buf[t] + GAMMA * next_value * nonterminal - values[t]
        adv[t] = gae = delta + GAMMA * LAM * nonterminal * gae
    # ---- PLR: score the finished episodes of this rollout and update the sampler
    envs.report_rollout(rewards=rew_buf, values=values, advantages=adv, last_values=last_value, gamma=GAMMA)
    b_obs, b_act, b_logp = obs_buf.flatten(0, 1), act_buf.flatten(), logp_buf.flatten()
    b_adv, b_ret = torch.as_tensor(adv).flatten(), torch.as_tensor(adv + values).flatten()
    for _ in range(EPOCHS):  # ---- PPO update
        for mb in torch.randperm(len(b_obs)).chunk(MINIBATCHES):
            dist = torch.distributions.Categorical(logits=actor(b_obs[mb]))
            ratio = (dist.log_prob(b_act[mb]) - b_logp[mb]).exp()
            a = (b_adv[mb] - b_adv[mb].mean()) / (b_adv[mb].std() + 1e-8)
            pg_loss = -torch.min(ratio * a, ratio.clamp(1 - CLIP, 1 + CLIP) * a).mean()
            v_loss = 0.5 * (critic(b_obs[mb])[:, 0] - b_ret[mb]).pow(2).mean()
            loss = pg_loss + 0.5 * v_loss - 0.01 * dist.entropy().mean()
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_([*actor.parameters(), *critic.parameters()], 0.5)
            optimizer.step()
    recent = np.mean(returns[-50:]) if returns else float("nan")
    print(f"update {update}: return {recent:.3f}, levels seen {envs.sampler.num_seen}/100")
envs.close()
