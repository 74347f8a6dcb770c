"""Prioritized experience replay for Stable-Baselines3 off-policy algorithms.

Buffers (drop-in ``replay_buffer_class`` for SB3) and algorithm subclasses that feed importance
weights into the loss and TD errors back as priorities.

Example:
    >>> from plr_gym.replay import PERDQN, PrioritizedReplayBuffer
    >>> model = PERDQN("MlpPolicy", "CartPole-v1", learning_starts=0, buffer_size=1_000, seed=0)
    >>> isinstance(model.replay_buffer, PrioritizedReplayBuffer)
    True
"""

from plr_gym.offpolicy import OffPolicyPLRCallback
from plr_gym.replay.algorithms import PERDQN, PERSAC, PERTD3, PrioritizedReplayMixin
from plr_gym.replay.buffers import (
    PrioritizedDictReplayBuffer,
    PrioritizedDictReplayBufferSamples,
    PrioritizedReplayBuffer,
    PrioritizedReplayBufferSamples,
    SequenceSamples,
)
from plr_gym.replay.episodic import EpisodicReplayBuffer, EpisodicReplayBufferSamples
from plr_gym.replay.frame_stack import FrameStackReplayBuffer
from plr_gym.replay.shared import ReplayWriterWrapper, SharedReplayBuffer, SharedReplayWriter
from plr_gym.replay.sum_tree import SumTree

__all__ = [
    "PERDQN",
    "PERSAC",
    "PERTD3",
    "EpisodicReplayBuffer",
    "EpisodicReplayBufferSamples",
    "FrameStackReplayBuffer",
    "OffPolicyPLRCallback",
    "PrioritizedDictReplayBuffer",
    "PrioritizedDictReplayBufferSamples",
    "PrioritizedReplayBuffer",
    "PrioritizedReplayBufferSamples",
    "PrioritizedReplayMixin",
    "ReplayWriterWrapper",
    "SequenceSamples",
    "SharedReplayBuffer",
    "SharedReplayWriter",
    "SumTree",
]

try:  # sb3-contrib is optional
    from plr_gym.replay.algorithms import PERQRDQN
except ImportError:  # pragma: no cover - exercised only without sb3-contrib
    pass
else:
    __all__ += ["PERQRDQN"]
