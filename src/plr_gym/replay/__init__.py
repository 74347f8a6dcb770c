"""Prioritized experience replay for Stable-Baselines3 off-policy algorithms.

Buffers (drop-in ``replay_buffer_class`` for SB3) and algorithm subclasses that feed importance
weights into the loss and TD errors back as priorities. One module per job:

- :mod:`~plr_gym.replay.sum_tree` and :mod:`~plr_gym.replay.priorities` (:class:`ReplayPriorities`):
  priorities, sampling and importance weights, numpy only (no PyTorch, no SB3);
- :mod:`~plr_gym.replay.sequences`: which slots a sequence or a reward-rebalanced sequence takes;
- :mod:`~plr_gym.replay.buffers` (with :mod:`~plr_gym.replay.buffer_base`,
  :mod:`~plr_gym.replay.buffer_checks` and :mod:`~plr_gym.replay.buffer_files`),
  :mod:`~plr_gym.replay.frame_stack`, :mod:`~plr_gym.replay.episodic`, :mod:`~plr_gym.replay.shared`:
  SB3 storage adapted to those cores;
- :mod:`~plr_gym.replay.td_error`: the TD error, shared by the PER algorithms
  (:mod:`~plr_gym.replay.algorithms`) and :class:`~plr_gym.OffPolicyPLRCallback`.

The names below are imported on first use (PEP 562): this package itself imports neither PyTorch nor SB3,
so the numpy-only modules load without them (``plr_gym/__init__.py`` does import the SB3 front ends). The
PLR callbacks are not part of this package: import them from :mod:`plr_gym`.

Example:
    >>> from plr_gym.replay import PERDQN, PrioritizedReplayBuffer
    >>> model = PERDQN("MlpPolicy", "CartPole-v1", learning_starts=0, buffer_size=1_000, seed=0)
    >>> isinstance(model.replay_buffer, PrioritizedReplayBuffer)
    True
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from plr_gym.replay.algorithms import PERDQN, PERQRDQN, PERSAC, PERTD3, PrioritizedReplayMixin
    from plr_gym.replay.buffers import (
        PrioritizedDictReplayBuffer,
        PrioritizedDictReplayBufferSamples,
        PrioritizedReplayBuffer,
        PrioritizedReplayBufferSamples,
    )
    from plr_gym.replay.episodic import EpisodicReplayBuffer, EpisodicReplayBufferSamples
    from plr_gym.replay.frame_stack import FrameStackReplayBuffer
    from plr_gym.replay.priorities import ReplayPriorities
    from plr_gym.replay.sequences import SequenceSamples
    from plr_gym.replay.shared import ReplayWriterWrapper, SharedReplayBuffer, SharedReplayWriter
    from plr_gym.replay.sum_tree import SumTree

# Public name -> the submodule defining it (imported on first access).
_SOURCES = {
    "PERDQN": "algorithms",
    "PERSAC": "algorithms",
    "PERTD3": "algorithms",
    "PERQRDQN": "algorithms",
    "PrioritizedReplayMixin": "algorithms",
    "EpisodicReplayBuffer": "episodic",
    "EpisodicReplayBufferSamples": "episodic",
    "FrameStackReplayBuffer": "frame_stack",
    "PrioritizedDictReplayBuffer": "buffers",
    "PrioritizedDictReplayBufferSamples": "buffers",
    "PrioritizedReplayBuffer": "buffers",
    "PrioritizedReplayBufferSamples": "buffers",
    "ReplayPriorities": "priorities",
    "ReplayWriterWrapper": "shared",
    "SequenceSamples": "sequences",
    "SharedReplayBuffer": "shared",
    "SharedReplayWriter": "shared",
    "SumTree": "sum_tree",
}

_SUBMODULES = frozenset(
    {
        "algorithms",
        "buffer_base",
        "buffer_checks",
        "buffer_files",
        "buffers",
        "episodic",
        "frame_stack",
        "priorities",
        "sequences",
        "shared",
        "sum_tree",
        "td_error",
    }
)

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


def _has_sb3_contrib() -> bool:
    """Whether the optional sb3-contrib is installed (looked up, not imported)."""
    try:
        return importlib.util.find_spec("sb3_contrib") is not None
    except (ImportError, ValueError):  # ValueError: sys.modules["sb3_contrib"] is None or has no spec
        return False


if _has_sb3_contrib():
    __all__ += ["PERQRDQN"]


def __getattr__(name: str) -> object:
    if name in _SUBMODULES:  # `import plr_gym.replay` then `plr_gym.replay.buffers`, as before
        module: ModuleType = importlib.import_module(f"{__name__}.{name}")
        return module
    if name == "OffPolicyPLRCallback":
        raise AttributeError(
            "plr_gym.replay no longer re-exports OffPolicyPLRCallback (a PLR callback, not part of the "
            "replay package): import it from plr_gym or plr_gym.offpolicy"
        )
    if name not in _SOURCES or (name == "PERQRDQN" and name not in __all__):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_SOURCES[name]}"), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
