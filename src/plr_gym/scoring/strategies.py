"""The strategies: one pure numpy function per scoring strategy, and the table of what each needs.

A score function takes one complete episode (:class:`EpisodeData`) and returns one float; the table of
definitions is in :mod:`plr_gym.scoring`'s docstring. :data:`STRATEGY_SPECS` is the one registry of
strategies: every check of what a strategy needs (scores, the policy, discrete actions, outcomes, which
front ends can compute it) reads its :class:`Strategy` entry. A new strategy is a function here and one
entry in the table.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.floating[Any]]


@dataclass(frozen=True)
class EpisodeData:
    """The arrays of one complete episode of ``T`` steps (only what the strategy needs must be set).

    :param rewards: ``(T,)`` rewards ``r_t``.
    :param values: ``(T,)`` value predictions ``V(s_t)``.
    :param advantages: ``(T,)`` advantage estimates ``A_t`` (GAE), for value_l1, positive_value_loss, gae.
    :param next_value: ``V(s_T)`` after the last step: 0 if the episode terminated, the bootstrap value if
        it was truncated. Used by ``one_step_td_error`` when ``next_values`` is not given.
    :param next_values: ``(T,)`` the value ``V(s_{t+1})`` used to bootstrap step ``t`` (overrides
        ``values[1:]`` + ``next_value``; :class:`EpisodeScorer` sets it so that an episode stitched
        across rollouts bootstraps each step exactly as GAE did).
    :param gamma: discount factor, for ``one_step_td_error``.
    :param log_policy: ``(T, n_actions)`` normalised log-probabilities ``log π(·|s_t)`` (discrete actions),
        for policy_entropy, least_confidence, min_margin.
    :param entropies: ``(T,)`` policy entropies, for ``policy_entropy`` with continuous actions.
    :param max_return: best episodic return ever achieved on this level (this episode included), for
        ``max_mc``.
    :param success: the episode's outcome (True = the task was solved), for ``learnability``.
    """

    rewards: FloatArray | None = None
    values: FloatArray | None = None
    advantages: FloatArray | None = None
    next_value: float = 0.0
    next_values: FloatArray | None = None
    gamma: float = 0.99
    log_policy: FloatArray | None = None
    entropies: FloatArray | None = None
    max_return: float | None = None
    success: bool | None = None


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
        # masked actions have log-probability -inf and contribute 0 (not exp(-inf) * -inf = nan)
        ent = -(np.exp(logp) * np.where(np.isneginf(logp), 0.0, logp)).sum(-1)
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
    if ep.next_values is not None:
        next_values = np.asarray(ep.next_values, dtype=np.float64)
        if next_values.shape != values.shape:
            raise ValueError(
                f"next_values {next_values.shape} and values {values.shape} must have the same shape"
            )
    else:
        next_values = np.append(values[1:], float(ep.next_value))
    return float(np.abs(rewards + ep.gamma * next_values - values).mean())


def learnability(ep: EpisodeData) -> float:
    """The episode's outcome, 1.0 (success) or 0.0 (failure), for ``strategy="learnability"``.

    The level's score ``p·(1 − p)`` is formed by :class:`~plr_gym.LevelSampler` from the running success
    rate ``p`` of the level's outcomes (one outcome cannot tell how learnable a level is).
    """
    if ep.success is None:
        raise ValueError(
            "strategy 'learnability' needs each episode's outcome (EpisodeData.success): give the env an "
            'info["is_success"] at episode ends, keep the episode statistics (SB3 Monitor / Gymnasium '
            "RecordEpisodeStatistics, success = return > 0), or pass success_fn=..."
        )
    return 1.0 if bool(ep.success) else 0.0


def episode_success(info: Any, success_fn: Callable[[Any], Any] | None = None) -> bool | None:
    """The outcome of an episode from its last step's ``info`` dict, or ``None`` if it cannot be told.

    ``success_fn(info)`` if given; else ``info["is_success"]``; else the raw episodic return
    ``info["episode"]["r"] > 0`` (SB3's ``Monitor``, Gymnasium's ``RecordEpisodeStatistics``), MiniGrid's
    notion of success (its reward is positive only when the goal is reached).

    Example:
        >>> from plr_gym.scoring import episode_success
        >>> episode_success({"is_success": True}), episode_success({"episode": {"r": 0.0, "l": 40}})
        (True, False)
        >>> episode_success({}) is None
        True
    """
    if success_fn is not None:
        return bool(success_fn(info))
    if not isinstance(info, dict):
        return None
    if "is_success" in info and info["is_success"] is not None:
        return bool(info["is_success"])
    episode = info.get("episode")
    if isinstance(episode, dict) and "r" in episode:
        return bool(float(np.asarray(episode["r"]).reshape(-1)[0]) > 0.0)
    return None


@dataclass(frozen=True)
class Strategy:
    """What a level-scoring strategy is and what it needs: one entry of :data:`STRATEGY_SPECS`.

    Every check of "does this strategy need scores / the policy / discrete actions / outcomes, and which
    front ends can compute it" reads these fields; adding a strategy is one new entry (and its tests).

    :param name: the ``strategy=`` string.
    :param score_fn: ``fn(EpisodeData) -> float`` (``None``: the strategy ignores scores).
    :param needs_policy: needs the policy's action distribution (``log_policy`` or ``entropies``).
    :param discrete_only: needs a ``Discrete`` action space (``log_policy`` over all actions).
    :param outcome: the per-episode value is a binary outcome that the sampler aggregates per level into a
        success rate (``learnability``); needs whole episodes and a finite level set.
    :param off_policy: :class:`~plr_gym.OffPolicyPLRCallback` can compute it from a replay buffer.
    :param level_buffer: a :class:`~plr_gym.LevelBuffer` (Robust PLR / ACCEL) can be scored with it.
    """

    name: str
    score_fn: Callable[[EpisodeData], float] | None
    needs_policy: bool = False
    discrete_only: bool = False
    outcome: bool = False
    off_policy: bool = False
    level_buffer: bool = True

    @property
    def uses_scores(self) -> bool:
        """False for the ``random`` and ``sequential`` baselines, which never look at a score."""
        return self.score_fn is not None


#: Every built-in strategy, by name (the only list of strategies; the tuples below derive from it).
STRATEGY_SPECS: dict[str, Strategy] = {
    s.name: s
    for s in (
        Strategy("value_l1", value_l1),
        Strategy("positive_value_loss", positive_value_loss),
        Strategy("gae", gae),
        Strategy("max_mc", max_mc),
        Strategy("policy_entropy", policy_entropy, needs_policy=True),
        Strategy("least_confidence", least_confidence, needs_policy=True, discrete_only=True),
        Strategy("min_margin", min_margin, needs_policy=True, discrete_only=True),
        Strategy("one_step_td_error", one_step_td_error, off_policy=True),
        Strategy("learnability", learnability, outcome=True, level_buffer=False),
        Strategy("random", None, off_policy=True, level_buffer=False),
        Strategy("sequential", None, off_policy=True, level_buffer=False),
    )
}


def strategy_spec(strategy: str | Callable[[EpisodeData], float]) -> Strategy:
    """The :class:`Strategy` of a name, or of a user's callable ``fn(EpisodeData) -> float``.

    A callable scores episodes from values/advantages/returns (no policy, no outcome); it works with
    every on-policy front end and with a :class:`~plr_gym.LevelBuffer`.

    >>> strategy_spec("learnability").outcome, strategy_spec("random").uses_scores
    (True, False)
    """
    if callable(strategy):
        return Strategy(getattr(strategy, "__name__", "callable"), strategy)
    try:
        return STRATEGY_SPECS[strategy]
    except (KeyError, TypeError):
        raise ValueError(
            f"strategy={strategy!r} is not a strategy; choose one of {', '.join(STRATEGY_SPECS)} "
            "or a callable fn(EpisodeData) -> float"
        ) from None


#: Built-in scoring strategies by name (those that compute a score).
SCORE_FUNCTIONS: dict[str, Callable[[EpisodeData], float]] = {
    name: s.score_fn for name, s in STRATEGY_SPECS.items() if s.score_fn is not None
}
#: Strategies that need a discrete action distribution (``log_policy``).
DISCRETE_ONLY: frozenset[str] = frozenset(n for n, s in STRATEGY_SPECS.items() if s.discrete_only)
#: Strategies whose per-episode value is an outcome (success) that the sampler aggregates per level.
OUTCOME_STRATEGIES: frozenset[str] = frozenset(n for n, s in STRATEGY_SPECS.items() if s.outcome)


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
