"""plr_gym: Prioritized Level Replay for Gymnasium and Stable-Baselines3.

``import plr_gym`` is cheap: it loads the numpy core (:class:`LevelSampler`, :class:`LevelBuffer`, the
scorer) and registers the ``plr_gym/...`` Gymnasium envs. The names that need PyTorch or
Stable-Baselines3 (:class:`PrioritizedLevelReplay`, :class:`PLRCallback`, the PER classes...) are loaded
on first use, so ``plr_gym.sampler``, ``plr_gym.level_buffer``, ``plr_gym.scoring``, ``plr_gym.source``
and ``plr_gym.vector`` work without either installed.

Example:
    >>> from plr_gym import LevelSampler
    >>> sampler = LevelSampler(levels=range(200), seed=0)
    >>> level = sampler.sample()
    >>> sampler.update(level, 0.5)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

import plr_gym._legacy_gym
import plr_gym.envs  # noqa: F401  (registers plr_gym/procgen-<game>-v0 and co; Procgen is imported lazily)
from plr_gym._version import __version__ as __version__  # the one place: _version.py
from plr_gym.level_buffer import LevelBuffer
from plr_gym.sampler import LevelSampler
from plr_gym.scoring import EpisodeData, EpisodeScorer

if TYPE_CHECKING:
    from plr_gym.callbacks import CurriculumLogCallback, PLRCallback, RunCheckpointCallback
    from plr_gym.env_checker import check_level_env
    from plr_gym.envs import ProcgenLevelEnv
    from plr_gym.evaluation import HeldOutEvalCallback
    from plr_gym.offpolicy import OffPolicyPLRCallback
    from plr_gym.policies import ImpalaCNN, ImpalaCnnPolicy
    from plr_gym.replay import PERDQN, PERSAC, PERTD3, PrioritizedReplayBuffer
    from plr_gym.run import RunDirectory
    from plr_gym.wrappers.level import LevelWrapper
    from plr_gym.wrappers.sb3 import PrioritizedLevelReplay

#: Public names loaded on first use, and the module each comes from.
_LAZY = {
    "CurriculumLogCallback": "plr_gym.callbacks",
    "PLRCallback": "plr_gym.callbacks",
    "RunCheckpointCallback": "plr_gym.callbacks",
    "RunDirectory": "plr_gym.run",
    "ProcgenLevelEnv": "plr_gym.envs",
    "check_level_env": "plr_gym.env_checker",
    "HeldOutEvalCallback": "plr_gym.evaluation",
    "OffPolicyPLRCallback": "plr_gym.offpolicy",
    "ImpalaCNN": "plr_gym.policies",
    "ImpalaCnnPolicy": "plr_gym.policies",
    "PERDQN": "plr_gym.replay",
    "PERSAC": "plr_gym.replay",
    "PERTD3": "plr_gym.replay",
    "PrioritizedReplayBuffer": "plr_gym.replay",
    "LevelWrapper": "plr_gym.wrappers.level",
    "PrioritizedLevelReplay": "plr_gym.wrappers.sb3",
}

__all__ = [
    "PERDQN",
    "PERSAC",
    "PERTD3",
    "CurriculumLogCallback",
    "EpisodeData",
    "EpisodeScorer",
    "HeldOutEvalCallback",
    "ImpalaCNN",
    "ImpalaCnnPolicy",
    "LevelBuffer",
    "LevelSampler",
    "LevelWrapper",
    "OffPolicyPLRCallback",
    "PLRCallback",
    "PrioritizedLevelReplay",
    "PrioritizedReplayBuffer",
    "ProcgenLevelEnv",
    "RunCheckpointCallback",
    "RunDirectory",
    "check_level_env",
]


#: Submodules reachable as attributes (``plr_gym.callbacks``...) without importing them first.
_SUBMODULES = frozenset(
    {
        "callbacks",
        "checkpoint",
        "cli",
        "demo",
        "env_checker",
        "evaluation",
        "offpolicy",
        "plotting",
        "policies",
        "presets",
        "replay",
        "run",
        "source",
        "training",
        "transforms",
        "vector",
        "wrappers",
    }
)


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"plr_gym.{name}")
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'plr_gym' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY, *_SUBMODULES})
