"""Stable-Baselines3 callbacks of plr_gym, one module each, as SB3's ``common/callbacks.py`` keeps them
above the objects they drive:

- :mod:`plr_gym.callbacks.plr` — :class:`PLRCallback`: scores every completed episode of an on-policy
  rollout and reports it to the level source (and :func:`find_plr_wrapper`, :func:`report_progress`,
  shared with :class:`~plr_gym.OffPolicyPLRCallback`);
- :mod:`plr_gym.callbacks.curriculum` — :class:`CurriculumLogCallback`: per-level replay probability,
  visits and scores over training;
- :mod:`plr_gym.callbacks.run_checkpoint` — :class:`RunCheckpointCallback`: when a run directory
  (:mod:`plr_gym.run`) saves a checkpoint.

``from plr_gym.callbacks import PLRCallback`` (and the others) is the import path; the run directory and
the level sources never import this package.
"""

from __future__ import annotations

from plr_gym.callbacks.curriculum import CurriculumLogCallback
from plr_gym.callbacks.plr import PLRCallback, find_plr_wrapper
from plr_gym.callbacks.plr import report_progress as report_progress
from plr_gym.callbacks.run_checkpoint import RunCheckpointCallback

__all__ = ["CurriculumLogCallback", "PLRCallback", "RunCheckpointCallback", "find_plr_wrapper"]
