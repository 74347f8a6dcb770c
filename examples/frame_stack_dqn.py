"""DQN on pixels with frame stacking, each frame stored once in the replay buffer.

VecFrameStack(4) still builds the stacks the policy acts on; FrameStackReplayBuffer keeps one frame per
step and rebuilds the stacks of observations and next observations when sampling (Atari-style DQN memory).
Run: python examples/frame_stack_dqn.py   (PLR_GYM_EXAMPLE_STEPS=500 for a quick check)
"""

import os

from minigrid.wrappers import ImgObsWrapper, RGBImgObsWrapper
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import VecFrameStack

from plr_gym.replay import PERDQN, FrameStackReplayBuffer

STEPS = int(os.environ.get("PLR_GYM_EXAMPLE_STEPS", 50_000))


def pixels(env):
    return ImgObsWrapper(RGBImgObsWrapper(env, tile_size=8))  # 40x40 RGB frames


env = VecFrameStack(make_vec_env("MiniGrid-Empty-5x5-v0", n_envs=4, seed=0, wrapper_class=pixels), n_stack=4)
model = PERDQN(
    "CnnPolicy",
    env,
    buffer_size=100_000,
    learning_starts=min(1000, STEPS // 2),
    exploration_fraction=0.3,
    replay_buffer_class=FrameStackReplayBuffer,
    replay_buffer_kwargs={"n_stack": 4, "n_steps": 3, "gamma": 0.99},
    seed=0,
)
model.learn(STEPS)

buffer = model.replay_buffer
capacity = buffer.buffer_size * buffer.n_envs
both_stacks = 2 * capacity * buffer.observations_at([0]).nbytes  # obs + next obs of every step
print(f"replay buffer: {buffer.n_transitions} of {capacity} transitions stored")
print(f"arrays at capacity: {buffer.nbytes / 1e6:.0f} MB (storing both stacks: {both_stacks / 1e6:.0f} MB)")
batch = buffer.sample(32)
shapes = tuple(batch.observations.shape), tuple(batch.next_observations.shape)
print("sampled observations {}, next observations {}".format(*shapes))
