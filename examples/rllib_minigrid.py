"""PPO + Prioritized Level Replay on MiniGrid DoorKey with RLlib: 2 env runners share one level sampler.

The sampler lives in a Ray actor; each env runner's envs draw their next level from it, and the learner
scores every completed episode (mean |GAE advantage|) and sends the scores back. Needs the rllib extra.
Run: python examples/rllib_minigrid.py   (PLR_GYM_EXAMPLE_STEPS=2000 for a quick check)
"""

import os

import gymnasium as gym
import numpy as np
import ray

from plr_gym.rllib import plr_metrics, plr_ppo_config, plr_source

STEPS = int(os.environ.get("PLR_GYM_EXAMPLE_STEPS", 40_000))
BATCH = 1000 if STEPS >= 10_000 else 256  # small batches only for tiny test budgets


def make_env(env_config):
    import minigrid  # noqa: F401  (registers the MiniGrid envs in each env runner's process)
    from minigrid.wrappers import ImgObsWrapper

    env = gym.wrappers.FlattenObservation(ImgObsWrapper(gym.make("MiniGrid-DoorKey-5x5-v0")))
    return gym.wrappers.DtypeObservation(env, np.float32)  # RLlib's default MLP wants float inputs


ray.init(num_cpus=2, include_dashboard=False)  # on a cluster: ray.init(address="auto")
config = plr_ppo_config(make_env, levels=range(50), strategy="value_l1", seed=0, num_env_runners=2)
config.training(train_batch_size=BATCH, minibatch_size=BATCH // 4, num_epochs=4, lr=5e-4, entropy_coeff=0.01)
algo = config.build_algo()
for iteration in range(max(1, STEPS // BATCH)):
    result = algo.train()
    episode_return = result["env_runners"].get("episode_return_mean", float("nan"))
    plr = " ".join(f"{k}={v:.3g}" for k, v in sorted(plr_metrics(result).items()))
    print(f"iteration {iteration}: return {episode_return:.2f} {plr}")
print("levels seen:", plr_source(config).rollout_stats(full=False)["num_seen"])
algo.stop()
ray.shutdown()
