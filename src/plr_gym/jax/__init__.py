"""plr_gym in JAX: level samplers as pure functions on pytree states (``pip install "plr-gym[jax]"``).

- :class:`LevelSampler` / :class:`SamplerState`: PLR over a finite level set, the twin of
  :class:`plr_gym.LevelSampler` (same keywords, defaults and replay distribution).
- :class:`LevelBuffer` / :class:`BufferState`: Robust PLR / ACCEL's bounded level buffer, the twin of
  :class:`plr_gym.LevelBuffer`.
- :class:`EpisodeScorer` / :class:`ScorerState`: PLR scores (value_l1, positive_value_loss, max_mc,
  learnability) from ``(T, N)`` rollout arrays, the twin of :class:`plr_gym.scoring.EpisodeScorer`.

Every method is a pure function of a static configuration (the sampler object) and a state, and runs
inside ``jax.jit``, ``jax.vmap`` and ``jax.lax.scan``. See ``docs/jax.md``.
"""

from __future__ import annotations

from plr_gym.jax.buffer import BufferState, LevelBuffer
from plr_gym.jax.sampler import LevelSampler, SamplerState
from plr_gym.jax.scoring import EpisodeScorer, ScorerState

__all__ = ["BufferState", "EpisodeScorer", "LevelBuffer", "LevelSampler", "SamplerState", "ScorerState"]
