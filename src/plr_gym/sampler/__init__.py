"""Prioritized Level Replay over a finite set of levels.

:class:`LevelSampler` reproduces the level sampler of Prioritized Level Replay (PLR; Jiang, Grefenstette &
Rocktäschel, ICML 2021, arXiv 2010.03934) and of its reference code (``level_replay/level_sampler.py`` in
facebookresearch/level-replay), with the reference's known bugs fixed and every draw in ``O(log N)``.

The paper's notation, and where it lives here:

=====================  ===============================  ===============================================
paper                  reference code                   ``LevelSampler``
=====================  ===============================  ===============================================
scoring function       ``strategy``                     ``strategy`` (see :mod:`plr_gym.scoring`)
``S_i`` level score    ``seed_scores``                  :attr:`LevelSampler.scores`
``h``, ``β``           ``score_transform, temperature``  ``score_transform``, ``temperature``
``C_i`` (``c − C_i``)  ``seed_staleness``               :attr:`LevelSampler.staleness`
``ρ`` staleness coef   ``staleness_coef``               ``staleness_coef``
EWA of scores          ``alpha``                        ``alpha``
—                      ``rho``                          ``min_seen_ratio``
—                      ``1 − nu``                       ``replay_prob``
=====================  ===============================  ===============================================

.. note::
   **The two rhos.** In the paper ``ρ`` is the *staleness coefficient* (``staleness_coef`` here). In the
   reference code ``rho`` is something else: the fraction of levels that must have been seen before any
   replay (``min_seen_ratio`` here), and ``nu`` is the probability of *not* replaying under the fixed
   schedule (``replay_prob = 1 − nu`` here). This library never uses the names ``rho``/``nu``.

Replay distribution over the seen levels (unseen levels have weight 0)::

    P_replay = (1 − staleness_coef) · P_S + staleness_coef · P_C
    P_S(i) = h(S_i)^(1/β) / Σ_j h(S_j)^(1/β)      (h by ``score_transform``)
    P_C(i) = g(c − C_i) / Σ_j g(c − C_j)           (g by ``staleness_transform``)

where ``c`` is the number of levels sampled so far and ``C_i`` the draw at which level ``i`` was last
sampled. Each :meth:`LevelSampler.sample` first decides between *replaying* a seen level (drawn from
``P_replay``) and *exploring* an unseen one (drawn uniformly).

Differences from the reference code, all deliberate:

- ``max`` transform: the reference writes ``-inf`` into the stored scores of unseen levels (``scores[:]``
  is a view in numpy). Here stored scores are never touched by a transform.
- ``rank`` transform: levels are ranked among *seen* levels only (the reference also ranks unseen levels,
  with score 0, which only matters when replay starts before every level was seen and some seen score is
  negative; ``unseen_rank="zero"`` does as the reference). Ties are broken by
  the order of ``levels`` (earlier first), where the reference's ``argsort`` breaks them arbitrarily.
- ``power`` transform: ``S^(1/β)`` as in the paper; the reference adds ``1e-3`` to every score when
  ``staleness_coef == 0`` (``power_offset=1e-3`` does the same). Negative scores are rejected for ``power``
  (their fractional powers are NaN).
- ``eps_greedy`` spreads ``eps`` uniformly over the seen levels (the reference over all levels before
  zeroing the unseen ones and renormalising; identical once every level is seen).
- The first score of a level is stored as is; later scores are mixed in with ``alpha`` (the reference
  mixes the first score with its zero initial value, ``S = α·score``; identical for the default α = 1).
- When a component has no mass (e.g. every seen level has staleness 0, or every ``power`` weight is 0)
  that component is uniform over the seen levels instead of leaving a distribution that does not sum to 1.
- Staleness is counted for every sampled level whatever ``staleness_coef`` is (the reference stops
  counting when the coefficient is 0), so :attr:`LevelSampler.staleness` is always meaningful.

The package's rooms, one concern each (``from plr_gym.sampler import ...`` is the import path for all):

- :mod:`~plr_gym.sampler.level_sampler` — :class:`LevelSampler` itself: its arguments, public methods and
  the level-source protocol;
- :mod:`~plr_gym.sampler.options` — accepted names, the paper's presets, the argument checks;
- :mod:`~plr_gym.sampler.record` — the live record: every field, its type and shape;
- :mod:`~plr_gym.sampler.schedule` — the replay schedule (replay a seen level, or explore);
- :mod:`~plr_gym.sampler.sampling` — scores and staleness to the replay distribution, its draws;
- :mod:`~plr_gym.sampler.updates` — scores in (one by one or in batches, all or nothing);
- :mod:`~plr_gym.sampler.state` — the checkpoint record (``state_dict``), its checks, its files.
"""

from plr_gym.sampler.level_sampler import LevelSampler, sampler_defaults
from plr_gym.sampler.options import (
    PAPER_PRESETS,
    REPLAY_SCHEDULES,
    SCORE_TRANSFORMS,
    STALENESS_TRANSFORMS,
    STRATEGIES,
    UNSEEN_RANKS,
)

# ``X as X``: names of the module before it became a package that other plr_gym modules and the tests
# import from plr_gym.sampler
from plr_gym.sampler.options import _check_positive as _check_positive
from plr_gym.sampler.options import _check_real as _check_real
from plr_gym.sampler.options import _check_unit as _check_unit
from plr_gym.sampler.options import _is_int as _is_int
from plr_gym.sampler.state import _state_array as _state_array
from plr_gym.sampler.state import _state_int as _state_int
from plr_gym.sampler.state import _state_rng as _state_rng
from plr_gym.sampler.updates import _BULK_UPDATE as _BULK_UPDATE

__all__ = [
    "PAPER_PRESETS",
    "REPLAY_SCHEDULES",
    "SCORE_TRANSFORMS",
    "STALENESS_TRANSFORMS",
    "STRATEGIES",
    "UNSEEN_RANKS",
    "LevelSampler",
    "sampler_defaults",
]
