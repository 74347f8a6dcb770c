"""plr_gym: Prioritized Level Replay for Gymnasium and Stable-Baselines3.

Example:
    >>> from plr_gym import LevelSampler
    >>> sampler = LevelSampler(levels=range(200), seed=0)
    >>> level = sampler.sample()
    >>> sampler.update(level, 0.5)
"""

import plr_gym._legacy_gym  # (first: imports the procgen extra's legacy gym without its banner)
import plr_gym.envs  # noqa: F401  (registers plr_gym/procgen-<game>-v0; Procgen itself is imported lazily)
from plr_gym.callbacks import CurriculumLogCallback, PLRCallback
from plr_gym.envs import ProcgenLevelEnv
from plr_gym.evaluation import HeldOutEvalCallback
from plr_gym.level_buffer import LevelBuffer
from plr_gym.offpolicy import OffPolicyPLRCallback
from plr_gym.replay import PERDQN, PERSAC, PERTD3, PrioritizedReplayBuffer
from plr_gym.sampler import LevelSampler
from plr_gym.scoring import EpisodeData, EpisodeScorer
from plr_gym.wrappers.level import LevelWrapper
from plr_gym.wrappers.sb3 import PrioritizedLevelReplay

__all__ = [
    "PERDQN",
    "PERSAC",
    "PERTD3",
    "CurriculumLogCallback",
    "EpisodeData",
    "EpisodeScorer",
    "HeldOutEvalCallback",
    "LevelBuffer",
    "LevelSampler",
    "LevelWrapper",
    "OffPolicyPLRCallback",
    "PLRCallback",
    "PrioritizedLevelReplay",
    "PrioritizedReplayBuffer",
    "ProcgenLevelEnv",
]
__version__ = "0.1.0.dev0"
