"""Gymnasium vector API: ``from plr_gym.vector import PrioritizedLevelReplay``.

Mirrors :class:`plr_gym.PrioritizedLevelReplay` (Stable-Baselines3) for ``gymnasium.vector`` environments,
as ``gymnasium.wrappers.vector`` mirrors ``gymnasium.wrappers``. Importing this module does not import
Stable-Baselines3.
"""

from plr_gym.wrappers.vector import PrioritizedLevelReplay

__all__ = ["PrioritizedLevelReplay"]
