"""Level scoring functions: one episode's arrays in, one float out.

Each function implements one PLR scoring strategy on a single, complete episode of ``T`` steps. They are
pure numpy functions of an :class:`EpisodeData`; the sampler only stores the numbers they return.

=========================  ========================================================================
strategy                   score of one episode
=========================  ========================================================================
``value_l1``               ``mean_t |A_t|`` with ``A_t`` the GAE advantage (PLR's L1 value loss)
``positive_value_loss``    ``mean_t max(A_t, 0)`` (Robust PLR)
``gae``                    ``mean_t A_t`` (signed)
``max_mc``                 ``mean_t (R_max − V(s_t))``, ``R_max`` the level's best return (Robust PLR)
``policy_entropy``         ``mean_t H(π(·|s_t)) / log|A|`` (normalised entropy; continuous: mean entropy)
``least_confidence``       ``mean_t (1 − max_a π(a|s_t))``
``min_margin``             ``1 − mean_t (π_(1)(s_t) − π_(2)(s_t))`` (gap between the two likeliest actions)
``one_step_td_error``      ``mean_t |r_t + γ·V(s_{t+1}) − V(s_t)|`` with ``V(s_T)`` = ``next_value``
=========================  ========================================================================

``one_step_td_error`` follows the paper. The reference code computes ``|r_t + V(s_t) − V(s_{t+1})|``
(wrong sign, no discount) and drops the last step; this module does not reproduce that.

A user strategy is any callable ``fn(episode: EpisodeData) -> float``.

Example:
    >>> import numpy as np
    >>> from plr_gym.scoring import EpisodeData, value_l1, one_step_td_error
    >>> ep = EpisodeData(rewards=np.array([0.0, 1.0]), values=np.array([0.5, 0.8]),
    ...                  advantages=np.array([0.3, -0.2]), next_value=0.0, gamma=0.9)
    >>> value_l1(ep)
    0.25
    >>> round(one_step_td_error(ep), 6)   # (|0 + 0.9*0.8 - 0.5| + |1 + 0.9*0 - 0.8|) / 2
    0.21
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.floating[Any]]

__all__ = [
    "DISCRETE_ONLY",
    "SCORE_FUNCTIONS",
    "EpisodeData",
    "gae",
    "get_score_function",
    "least_confidence",
    "max_mc",
    "min_margin",
    "one_step_td_error",
    "policy_entropy",
    "positive_value_loss",
    "value_l1",
]


@dataclass(frozen=True)
class EpisodeData:
    """The arrays of one complete episode of ``T`` steps (only what the strategy needs must be set).

    :param rewards: ``(T,)`` rewards ``r_t``.
    :param values: ``(T,)`` value predictions ``V(s_t)``.
    :param advantages: ``(T,)`` advantage estimates ``A_t`` (GAE), for value_l1, positive_value_loss, gae.
    :param next_value: ``V(s_T)`` after the last step: 0 if the episode terminated, the bootstrap value if
        it was truncated. Used by ``one_step_td_error``.
    :param gamma: discount factor, for ``one_step_td_error``.
    :param log_policy: ``(T, n_actions)`` normalised log-probabilities ``log π(·|s_t)`` (discrete actions),
        for policy_entropy, least_confidence, min_margin.
    :param entropies: ``(T,)`` policy entropies, for ``policy_entropy`` with continuous actions.
    :param max_return: best episodic return ever achieved on this level (this episode included), for
        ``max_mc``.
    """

    rewards: Optional[FloatArray] = None
    values: Optional[FloatArray] = None
    advantages: Optional[FloatArray] = None
    next_value: float = 0.0
    gamma: float = 0.99
    log_policy: Optional[FloatArray] = None
    entropies: Optional[FloatArray] = None
    max_return: Optional[float] = None


def _need(ep: EpisodeData, name: str, strategy: str) -> FloatArray:
    arr = getattr(ep, name)
    if arr is None:
        raise ValueError(f"strategy {strategy!r} needs EpisodeData.{name}")
    out = np.asarray(arr, dtype=np.float64)
    if out.shape[0] == 0:
        raise ValueError(f"strategy {strategy!r} got an empty episode")
    return out


def value_l1(ep: EpisodeData) -> float:
    """Mean absolute GAE advantage ``mean_t |A_t|`` (PLR's default score)."""
    return float(np.abs(_need(ep, "advantages", "value_l1")).mean())


def positive_value_loss(ep: EpisodeData) -> float:
    """Mean positive part of the GAE advantage ``mean_t max(A_t, 0)`` (Robust PLR)."""
    return float(np.maximum(_need(ep, "advantages", "positive_value_loss"), 0.0).mean())


def gae(ep: EpisodeData) -> float:
    """Signed mean GAE advantage ``mean_t A_t``."""
    return float(_need(ep, "advantages", "gae").mean())


def max_mc(ep: EpisodeData) -> float:
    """``mean_t (R_max − V(s_t))``: regret against the best return seen on the level (Robust PLR)."""
    values = _need(ep, "values", "max_mc")
    if ep.max_return is None:
        raise ValueError("strategy 'max_mc' needs EpisodeData.max_return")
    return float((ep.max_return - values).mean())


def policy_entropy(ep: EpisodeData) -> float:
    """Mean policy entropy, divided by ``log(n_actions)`` for discrete actions (as in the reference)."""
    if ep.log_policy is not None:
        logp = _need(ep, "log_policy", "policy_entropy")
        n_actions = logp.shape[-1]
        ent = -(np.exp(logp) * logp).sum(-1)
        return float(ent.mean() / np.log(n_actions)) if n_actions > 1 else 0.0
    return float(_need(ep, "entropies", "policy_entropy").mean())


def least_confidence(ep: EpisodeData) -> float:
    """``mean_t (1 − max_a π(a|s_t))``."""
    logp = _need(ep, "log_policy", "least_confidence")
    return float((1.0 - np.exp(logp.max(-1))).mean())


def min_margin(ep: EpisodeData) -> float:
    """``1 − mean_t (π_(1) − π_(2))``, the margin between the two most likely actions."""
    logp = _need(ep, "log_policy", "min_margin")
    if logp.shape[-1] < 2:
        raise ValueError("strategy 'min_margin' needs at least 2 actions")
    top2 = np.exp(np.partition(logp, -2, axis=-1)[..., -2:])
    return float(1.0 - (top2[..., 1] - top2[..., 0]).mean())


def one_step_td_error(ep: EpisodeData) -> float:
    """``mean_t |r_t + γ·V(s_{t+1}) − V(s_t)|`` with ``V(s_T) = next_value`` (the paper's definition)."""
    rewards = _need(ep, "rewards", "one_step_td_error")
    values = _need(ep, "values", "one_step_td_error")
    if rewards.shape != values.shape:
        raise ValueError(f"rewards {rewards.shape} and values {values.shape} must have the same shape")
    next_values = np.append(values[1:], float(ep.next_value))
    return float(np.abs(rewards + ep.gamma * next_values - values).mean())


#: Built-in scoring strategies by name.
SCORE_FUNCTIONS: dict[str, Callable[[EpisodeData], float]] = {
    "value_l1": value_l1,
    "positive_value_loss": positive_value_loss,
    "gae": gae,
    "max_mc": max_mc,
    "policy_entropy": policy_entropy,
    "least_confidence": least_confidence,
    "min_margin": min_margin,
    "one_step_td_error": one_step_td_error,
}

#: Strategies that need a discrete action distribution (``log_policy``).
DISCRETE_ONLY: frozenset[str] = frozenset({"least_confidence", "min_margin"})


def get_score_function(strategy: str | Callable[[EpisodeData], float]) -> Callable[[EpisodeData], float]:
    """The score function of a strategy name, or the user's callable itself."""
    if callable(strategy):
        return strategy
    try:
        return SCORE_FUNCTIONS[strategy]
    except KeyError:
        raise ValueError(
            f"strategy={strategy!r} has no score function; choose one of {', '.join(SCORE_FUNCTIONS)}"
        ) from None
