"""Prioritized experience replay for Stable-Baselines3 off-policy algorithms.

Buffers (drop-in ``replay_buffer_class`` for SB3) and algorithm subclasses that feed importance
weights into the loss and TD errors back as priorities. One module per job:

- :mod:`~plr_gym.replay.sum_tree` and :mod:`~plr_gym.replay.priorities` (:class:`ReplayPriorities`):
  priorities, sampling and importance weights, numpy only (no PyTorch, no SB3);
- :mod:`~plr_gym.replay.sequences`: which slots a sequence or a reward-rebalanced sequence takes;
- :mod:`~plr_gym.replay.buffers`, :mod:`~plr_gym.replay.frame_stack`, :mod:`~plr_gym.replay.episodic`,
  :mod:`~plr_gym.replay.shared`: SB3 storage adapted to those cores;
- :mod:`~plr_gym.replay.td_error`: the TD error, shared by the PER algorithms
  (:mod:`~plr_gym.replay.algorithms`) and :class:`~plr_gym.OffPolicyPLRCallback`.

The PLR callbacks are not part of this package: import them from :mod:`plr_gym`.

Example:
    >>> from plr_gym.replay import PERDQN, PrioritizedReplayBuffer
    >>> model = PERDQN("MlpPolicy", "CartPole-v1", learning_starts=0, buffer_size=1_000, seed=0)
    >>> isinstance(model.replay_buffer, PrioritizedReplayBuffer)
    True
"""

from typing import NoReturn

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
from plr_gym.replay.priorities import ReplayPriorities
from plr_gym.replay.shared import ReplayWriterWrapper, SharedReplayBuffer, SharedReplayWriter
from plr_gym.replay.sum_tree import SumTree

__all__ = [
    "PERDQN",
    "PERSAC",
    "PERTD3",
    "EpisodicReplayBuffer",
    "EpisodicReplayBufferSamples",
    "FrameStackReplayBuffer",
    "PrioritizedDictReplayBuffer",
    "PrioritizedDictReplayBufferSamples",
    "PrioritizedReplayBuffer",
    "PrioritizedReplayBufferSamples",
    "PrioritizedReplayMixin",
    "ReplayPriorities",
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


def __getattr__(name: str) -> NoReturn:
    if name == "OffPolicyPLRCallback":
        raise AttributeError(
            "plr_gym.replay no longer re-exports OffPolicyPLRCallback (a PLR callback, not part of the "
            "replay package): import it from plr_gym or plr_gym.offpolicy"
        )
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
