"""The replay schedule: whether a draw replays a seen level or explores an unseen one.

Before each draw of a PLR strategy the sampler decides between *replaying* a seen level (drawn from
``P_replay``, :mod:`plr_gym.sampler.sampling`) and *exploring* an unseen one (uniformly):

- nothing seen yet: explore; every level seen: replay;
- fewer than ``min_seen_ratio`` of the levels seen: explore (the reference code's ``rho``);
- otherwise replay with probability ``p``: the fraction of levels seen (``"proportionate"``) or
  ``replay_prob`` (``"fixed"``, the reference code's ``1 − nu``).

:func:`replay_decision` draws from the sampler's generator only in the last case (one ``random()``), so
a new schedule that keeps that rule keeps every seeded run's draws.
"""

from __future__ import annotations

import numpy as np


def replay_probability(
    n_seen: int, n: int, schedule: str, replay_prob: float, min_seen_ratio: float
) -> float:
    """The probability that the next draw replays, with ``n_seen`` of ``n`` levels seen."""
    if n_seen == 0:
        return 0.0
    if n_seen == n:
        return 1.0
    if n_seen / n < min_seen_ratio:
        return 0.0
    return n_seen / n if schedule == "proportionate" else replay_prob


def replay_decision(
    n_seen: int,
    n: int,
    schedule: str,
    replay_prob: float,
    min_seen_ratio: float,
    rng: np.random.Generator,
) -> bool:
    """Replay (``True``) or explore, drawing from ``rng`` only when the outcome is not certain."""
    if n_seen == 0:
        return False
    if n_seen == n:
        return True
    proportion = n_seen / n
    if proportion < min_seen_ratio:
        return False
    p = proportion if schedule == "proportionate" else replay_prob
    return bool(rng.random() < p)
