"""Environment wrappers that make sub-environments play the levels a sampler chooses.

- :class:`LevelWrapper` (per env): resets its env on the level it is told to play and reports
  ``info["level"]``.
- :class:`plr_gym.wrappers.sb3.PrioritizedLevelReplay` (also ``plr_gym.PrioritizedLevelReplay``):
  Stable-Baselines3 ``VecEnvWrapper``.
- :class:`plr_gym.wrappers.vector.PrioritizedLevelReplay` (also ``plr_gym.vector.PrioritizedLevelReplay``):
  Gymnasium ``VectorWrapper``.

Only :class:`LevelWrapper` is imported here, so Gymnasium users do not import Stable-Baselines3.
"""

from plr_gym.wrappers.level import LevelWrapper, NondeterministicLevelWarning

__all__ = ["LevelWrapper", "NondeterministicLevelWarning"]
