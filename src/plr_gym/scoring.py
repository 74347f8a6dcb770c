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
``learnability``           the episode's outcome (1 success, 0 failure); the sampler turns the level's
                           running success rate ``p`` into the score ``p·(1 − p)`` (Rutherford et al.
                           2024, Sampling For Learnability)
=========================  ========================================================================

``one_step_td_error`` follows the paper. The reference code computes ``|r_t + V(s_t) − V(s_{t+1})|``
(wrong sign, no discount) and drops the last step; this module does not reproduce that.

A user strategy is any callable ``fn(episode: EpisodeData) -> float``.

``learnability`` is defined for tasks with a binary outcome. Its per-episode value is the outcome, taken
from ``info["is_success"]`` at the episode's last step, else from the raw episodic return (``> 0`` is a
success, MiniGrid's convention; read from ``info["episode"]["r"]`` written by SB3's ``Monitor`` or
Gymnasium's ``RecordEpisodeStatistics``), or from a user function ``success_fn(info) -> bool`` (see
:func:`episode_success`). The :class:`~plr_gym.LevelSampler` keeps each level's success rate and stores
``p·(1 − p)`` as its score.

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

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from plr_gym._levels import level_key, load_values, save_values
from plr_gym._sizes import allocating

FloatArray = npt.NDArray[np.floating[Any]]

__all__ = [
    "DISCRETE_ONLY",
    "OUTCOME_STRATEGIES",
    "PARTIAL_EPISODES",
    "SCORE_FUNCTIONS",
    "STRATEGY_SPECS",
    "EpisodeData",
    "EpisodeScorer",
    "Strategy",
    "episode_success",
    "gae",
    "get_score_function",
    "learnability",
    "least_confidence",
    "max_mc",
    "min_margin",
    "one_step_td_error",
    "policy_entropy",
    "positive_value_loss",
    "strategy_spec",
    "value_l1",
]


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


# --------------------------------------------------------------------------------------------------
# EpisodeScorer: rollouts in, one score per completed episode out
# --------------------------------------------------------------------------------------------------
#: Fields an :class:`EpisodeScorer` keeps per step, and their per-step shape suffix.
_STEP_FIELDS = (
    "rewards",
    "raw_rewards",
    "values",
    "next_values",
    "advantages",
    "log_policy",
    "entropies",
    "successes",
)
#: How :class:`EpisodeScorer` treats an episode still running when a rollout ends.
PARTIAL_EPISODES = ("stitch", "commit")
#: Strategies whose score level-replay computes from ``returns[start:] - value_preds[start:]``: for a
#: rollout's last, running chunk those slices of its ``(T + 1)``-row storage run one row past the
#: rollout, adding the pair ``(returns[T], value_preds[T]) = (0, V(s_T))`` to the chunk. ``"commit"``
#: reproduces it (:func:`_with_reference_tail`).
REFERENCE_TAIL_STRATEGIES = ("value_l1", "gae")


def _with_reference_tail(chunk: dict[str, Any], last_value: float) -> dict[str, Any]:
    """The running chunk as level-replay scores it: one more step with advantage ``0 - V(s_T)``, value
    ``V(s_T)`` and nothing else (its storage's row ``T`` after ``compute_returns``)."""
    extra = {"advantages": -last_value, "values": last_value}
    return {k: np.append(v, extra.get(k, 0.0)) if v.ndim == 1 else v for k, v in chunk.items()}


def _check_gamma(gamma: Any) -> float:
    if isinstance(gamma, (bool, np.bool_)) or not isinstance(gamma, (int, float, np.integer, np.floating)):
        raise TypeError(f"gamma must be a number in [0, 1], got {type(gamma).__name__} {gamma!r}")
    if not 0.0 <= float(gamma) <= 1.0:
        raise ValueError(f"gamma must be a number in [0, 1], got {gamma!r}")
    return float(gamma)


class ScoreTarget(Protocol):
    """What an :class:`EpisodeScorer` reports to: a :class:`~plr_gym.LevelSampler` or anything alike."""

    def update_batch(self, levels: Any, scores: Any) -> None: ...


def _flags(name: str, value: Any) -> npt.NDArray[np.bool_]:
    """A mask of ``process_rollout`` as booleans: bools, or numbers that are all 0 or 1 (SB3 stores
    ``episode_starts`` as float32); anything else (0.5, a complex number, strings) is a ``TypeError``."""
    arr = np.asarray(value)
    if arr.dtype == np.bool_:
        return arr
    if arr.dtype.kind in "iuf" and np.isin(arr, (0, 1)).all():
        return arr.astype(bool)
    raise TypeError(
        f"{name} must hold booleans (or 0 and 1), got dtype {arr.dtype}"
        + (f" with values {np.unique(arr)[:4].tolist()}" if arr.dtype.kind in "iufc" else "")
    )


def _reals(name: str, value: Any) -> npt.NDArray[np.float64]:
    """An array of ``process_rollout`` as float64: bools, ints or floats only (a complex array would lose
    its imaginary part, silently)."""
    arr = np.asarray(value)
    if arr.dtype.kind not in "biuf":
        raise TypeError(f"{name} must hold real numbers, got dtype {arr.dtype}")
    return arr.astype(np.float64)


class EpisodeScorer:
    """Cuts rollouts into episodes and reports each completed episode's score exactly once.

    One scoring engine for every front end (the SB3 :class:`~plr_gym.PLRCallback` and the Gymnasium
    vector wrapper). Call :meth:`process_rollout` once per rollout with arrays shaped
    ``(n_steps, n_envs)``, as in SB3's ``RolloutBuffer``: step ``t`` of env ``e`` holds the observation
    ``s_t``, whether ``s_t`` starts an episode (``episode_starts``), the reward of the action taken in it,
    ``V(s_t)`` and the GAE advantage.

    - ``partial_episodes="stitch"`` (default): an episode that runs past the end of a rollout stays
      *open*; its arrays are concatenated with its continuation in the next rollout and it is scored
      once, when it completes, over all its steps. ``max_mc`` uses the best return known when the
      episode completes; ``one_step_td_error`` bootstraps the chunk's last step with the ``last_values``
      GAE used. An episode whose start was not observed (the scorer was attached mid-episode), or whose
      continuation never came (the env was reset in between, e.g. a new ``learn()`` call), is dropped,
      never scored: a level with no completed episode stays unscored.
    - ``partial_episodes="commit"``: what PLR's reference code (level-replay) computes. Its sampler
      keeps the score of a rollout's last, unfinished chunk as a *partial* score and commits it as a
      full update of the level's score in ``after_update``, called after every rollout; the rest of the
      episode, in the next rollout, is then scored as an episode of its own. Here the running chunk is
      scored as if the episode ended at the rollout's end (bootstrapped with ``last_values``) and
      reported; its continuation is scored separately. As in level-replay, the running chunks are
      reported after all of the rollout's completed episodes, a chunk whose score is exactly 0 is
      not reported (level-replay's ``after_update`` commits only non-zero partial scores), and for
      ``value_l1`` and ``gae`` the running chunk's mean includes one more term, ``0 - V(s_T)`` (level-replay
      slices ``returns[start:]`` and ``value_preds[start:]`` of its ``T + 1`` rows: see
      :data:`REFERENCE_TAIL_STRATEGIES`). ``max_mc``
      records best returns from completed episodes only; a chunk uses the best known return (its own
      return if none is known yet). Use it to compare with level-replay or Syllabus runs (``plr-gym
      train --preset paper-procgen`` does); ``"stitch"`` scores each episode once, as the paper defines.
    - All scores of one rollout reach the target in one ``update_batch`` call, env by env (env 0's
      episodes in time order, then env 1's...), not in completion order across envs; with ``"commit"``
      the running chunks follow, env by env.

    :param target: where scores go: a :class:`~plr_gym.LevelSampler` (or an object with ``update_batch``).
    :param n_envs: number of parallel envs (columns of the rollout arrays).
    :param strategy: a strategy name of :data:`SCORE_FUNCTIONS` or a callable ``fn(EpisodeData) -> float``.
    :param gamma: the algorithm's discount, passed to the score function (``one_step_td_error``).
    :param partial_episodes: ``"stitch"`` (default) or ``"commit"`` (level-replay's behaviour), see above.

    Example:
        >>> import numpy as np
        >>> from plr_gym import LevelSampler
        >>> from plr_gym.scoring import EpisodeScorer
        >>> sampler = LevelSampler(levels=range(10))
        >>> scorer = EpisodeScorer(sampler, n_envs=1, strategy="value_l1")
        >>> starts = np.array([[1], [0], [0], [1]], dtype=bool)   # episodes: steps 0-2, then 3-...
        >>> levels = np.array([[4], [4], [4], [7]])
        >>> adv = np.array([[0.5], [-0.5], [1.0], [2.0]])
        >>> scorer.process_rollout(levels=levels, episode_starts=starts, dones=np.array([False]),
        ...                        rewards=np.zeros((4, 1)), values=np.zeros((4, 1)), advantages=adv)
        [(4, 0.6666666666666666)]
        >>> scorer.num_open_episodes      # level 7's episode continues in the next rollout
        1
    """

    def __init__(
        self,
        target: ScoreTarget,
        n_envs: int,
        strategy: str | Callable[[EpisodeData], float] = "value_l1",
        gamma: float = 0.99,
        partial_episodes: str = "stitch",
    ) -> None:
        if isinstance(n_envs, bool) or not isinstance(n_envs, (int, np.integer)) or n_envs < 1:
            raise ValueError(f"n_envs must be a positive int, got {n_envs!r}")
        if not isinstance(partial_episodes, str) or partial_episodes not in PARTIAL_EPISODES:
            raise ValueError(
                f"partial_episodes={partial_episodes!r} is not supported; choose 'stitch' or 'commit'"
            )
        if partial_episodes == "commit" and isinstance(strategy, str) and strategy in OUTCOME_STRATEGIES:
            raise ValueError(
                f"strategy={strategy!r} scores episode outcomes, which an unfinished episode does not have: "
                "use partial_episodes='stitch'"
            )
        if not hasattr(target, "update_batch"):
            raise TypeError(
                f"target must have an update_batch(levels, scores) method, got {type(target).__name__}"
            )
        self.target = target
        self.n_envs = int(n_envs)
        self.strategy = strategy
        self.score_fn = get_score_function(strategy)
        self.gamma = _check_gamma(gamma)
        self.partial_episodes = partial_episodes
        with allocating("n_envs", n_envs):
            self._open: list[dict[str, Any] | None] = [None] * self.n_envs
        self.max_returns: dict[Any, float] = {}
        self._level_of_key: dict[Any, Any] = {}
        self.num_scored = 0
        self.num_dropped = 0

    @property
    def num_open_episodes(self) -> int:
        return sum(o is not None for o in self._open)

    @property
    def needs_policy(self) -> bool:
        """True if the strategy needs the action distribution (``log_policy`` or ``entropies``)."""
        return strategy_spec(self.strategy).needs_policy

    def process_rollout(
        self,
        *,
        levels: Any,
        episode_starts: Any,
        dones: Any,
        rewards: Any,
        values: Any,
        advantages: Any = None,
        last_values: Any = None,
        log_policy: Any = None,
        entropies: Any = None,
        valid: Any = None,
        successes: Any = None,
        raw_rewards: Any = None,
        truncations: Any = None,
    ) -> list[tuple[Any, float]]:
        """Score the episodes that complete in this rollout and report them to the target.

        :param levels: ``(n_steps, n_envs)`` level of each step's episode (``infos[e]["level"]``).
        :param episode_starts: ``(n_steps, n_envs)`` whether ``s_t`` is the first observation of an episode.
        :param dones: whether a step ended its episode: ``(n_envs,)`` for the rollout's last step only (SB3:
            the other ends follow from ``episode_starts``), or ``(n_steps, n_envs)`` for every step.
        :param rewards: ``(n_steps, n_envs)`` rewards (SB3 folds ``γ·V(terminal obs)`` into the reward of a
            truncated episode's last step, so episode ends bootstrap with 0 here).
        :param values: ``(n_steps, n_envs)`` value predictions ``V(s_t)``.
        :param advantages: ``(n_steps, n_envs)`` GAE advantages (value_l1, positive_value_loss, gae).
        :param last_values: ``(n_envs,)`` ``V`` of the observation after the last step (GAE's bootstrap);
            zeros if omitted.
        :param log_policy: ``(n_steps, n_envs, n_actions)`` normalised log-probabilities of the policy.
        :param entropies: ``(n_steps, n_envs)`` policy entropies (continuous actions).
        :param valid: ``(n_steps, n_envs)`` steps that belong to an episode (default: all). Invalid steps,
            e.g. the reset steps of Gymnasium's ``NEXT_STEP`` autoreset, are removed before cutting.
        :param raw_rewards: ``(n_steps, n_envs)`` the env's rewards before any bootstrap was folded in
            (SB3 adds ``γ·V(terminal obs)`` to a truncated episode's last reward). Episodic returns
            (``max_mc``'s best return) are summed from these; default ``rewards``.
        :param truncations: ``(n_steps, n_envs)`` valid steps that ended their episode by truncation
            (time limit), with ``valid`` marking the ``NEXT_STEP`` reset rows: such a step's one-step
            bootstrap is ``values`` of the next row (the reset row, whose observation is the final one),
            or ``last_values`` on the rollout's last row, instead of 0.
        :param successes: ``(n_steps, n_envs)`` outcome of the episode that ends at each step (1 success,
            0 failure, NaN unknown; read at episode ends only), for ``learnability``.
        :return: the ``(level, score)`` pairs reported, env by env.
        """
        starts = _flags("episode_starts", episode_starts)
        n_steps, n_envs = self._check_shape("episode_starts", starts, None)
        lv = np.asarray(levels)
        if lv.dtype.kind in "bfc":
            raise TypeError(
                f"levels must be int level ids (or a generator's level objects), got dtype {lv.dtype}"
            )
        if lv.shape[:2] != (n_steps, n_envs):
            raise ValueError(f"levels must have shape {(n_steps, n_envs)}, got {lv.shape}")
        done_arr = _flags("dones", dones)
        if done_arr.shape not in ((n_envs,), (n_steps, n_envs)) and done_arr.size != n_envs:
            raise ValueError(
                f"dones must have shape ({n_envs},) or ({n_steps}, {n_envs}), got {done_arr.shape}"
            )
        if done_arr.shape != (n_steps, n_envs):
            done_arr = done_arr.reshape(n_envs)
        mask = np.ones((n_steps, n_envs), dtype=bool) if valid is None else _flags("valid", valid)
        self._check_shape("valid", mask, (n_steps, n_envs))
        fields: dict[str, Any] = {
            "rewards": self._check_shape("rewards", _reals("rewards", rewards), (n_steps, n_envs)),
            "values": self._check_shape("values", _reals("values", values), (n_steps, n_envs)),
        }
        for name, arr in (
            ("advantages", advantages),
            ("log_policy", log_policy),
            ("entropies", entropies),
            ("successes", successes),
            ("raw_rewards", raw_rewards),
        ):
            if arr is not None:
                fields[name] = self._check_shape(name, _reals(name, arr), (n_steps, n_envs))
        if "successes" in fields:
            known = fields["successes"][~np.isnan(fields["successes"])]
            if not np.isin(known, (0.0, 1.0)).all():
                raise ValueError("successes must hold 1 (success), 0 (failure) or NaN (unknown)")
        fields.setdefault("raw_rewards", fields["rewards"])
        for name, arr in fields.items():
            if name not in ("log_policy", "successes") and not np.isfinite(arr[mask]).all():
                raise ValueError(f"{name} contains NaN or inf")
        boot = np.zeros(n_envs) if last_values is None else _reals("last_values", last_values).reshape(-1)
        if boot.shape != (n_envs,):
            raise ValueError(f"last_values must have shape ({n_envs},), got {boot.shape}")
        if not np.isfinite(boot).all():
            raise ValueError("last_values contains NaN or inf")
        trunc = None
        if truncations is not None:
            trunc = self._check_shape("truncations", _flags("truncations", truncations), (n_steps, n_envs))
            trunc = trunc & mask
            rows, cols = np.nonzero(trunc[:-1])
            if not np.isfinite(fields["values"][rows + 1, cols]).all():
                raise ValueError(
                    "values of the rows after truncated steps (the final observations) contain NaN or inf"
                )

        snapshot = (dict(self.max_returns), dict(self._level_of_key), self.num_dropped)
        try:
            return self._process(n_steps, n_envs, starts, lv, done_arr, mask, fields, boot, trunc)
        except BaseException:  # leave the scorer as it was: the same rollout may be retried
            self.max_returns, self._level_of_key, self.num_dropped = snapshot
            raise

    def _process(
        self,
        n_steps: int,
        n_envs: int,
        starts: Any,
        lv: Any,
        done_arr: Any,
        mask: Any,
        fields: dict[str, Any],
        boot: Any,
        trunc: Any = None,
    ) -> list[tuple[Any, float]]:
        done_levels: list[Any] = []
        done_scores: list[float] = []
        # commit: the running chunks' scores, reported after every completed episode's (level-replay
        # commits them in after_update, once the whole rollout was scored)
        chunk_levels: list[Any] = []
        chunk_scores: list[float] = []
        new_open = list(self._open)
        for e in range(n_envs):
            rows = np.flatnonzero(mask[:, e])
            if rows.size == 0:
                continue
            env_starts = starts[rows, e]
            env_levels = lv[rows, e]
            env = {k: v[rows, e] for k, v in fields.items()}
            # where each episode ends, and the value that bootstraps each step (0 at an episode's end)
            if done_arr.ndim == 2:
                ends = done_arr[rows, e]
            else:
                ends = np.append(env_starts[1:], done_arr[e])
            nxt = np.append(env["values"][1:], boot[e])
            nxt[ends] = 0.0
            if trunc is not None:  # a truncated episode bootstraps with V(final observation)
                full_next = np.append(fields["values"][1:, e], boot[e])
                cut = ends & trunc[rows, e]
                nxt[cut] = full_next[rows[cut]]
            env["next_values"] = nxt
            carried = new_open[e]
            if carried is not None and env_starts[0]:
                carried = None  # the env was reset: the open episode never completes
                self.num_dropped += 1
            new_open[e] = None
            bounds = np.flatnonzero(ends).tolist()
            begin = 0
            for stop in [b + 1 for b in bounds] + (
                [rows.size] if not bounds or bounds[-1] + 1 < rows.size else []
            ):
                chunk = {k: v[begin:stop] for k, v in env.items()}
                level = self._episode_level(e, env_levels[begin:stop], rows[begin])
                observed_start = bool(env_starts[begin])
                if begin == 0 and carried is not None:
                    if level_key(carried["level"]) != level_key(level):
                        raise ValueError(
                            f"env {e}: episode on level {carried['level']!r} continued on level {level!r}"
                        )
                    chunk = {k: np.concatenate([carried[k], chunk[k]]) for k in chunk}
                    observed_start = True
                if not ends[stop - 1] and self.partial_episodes == "commit":
                    # level-replay: the running chunk's score is committed as if the episode ended here,
                    # unless it is exactly 0 (its after_update skips zero partial scores)
                    if isinstance(self.strategy, str) and self.strategy in REFERENCE_TAIL_STRATEGIES:
                        chunk = _with_reference_tail(chunk, float(boot[e]))
                    score = self._score(level, chunk, complete=False)
                    if score != 0.0:
                        chunk_levels.append(level)
                        chunk_scores.append(score)
                elif not ends[stop - 1]:  # runs past the rollout's end
                    if observed_start:
                        new_open[e] = {"level": level, **chunk}
                    else:
                        self.num_dropped += 1
                elif self.partial_episodes == "commit":
                    done_levels.append(level)
                    done_scores.append(self._score(level, chunk, complete=observed_start))
                elif observed_start:
                    done_levels.append(level)
                    done_scores.append(self._score(level, chunk))
                else:
                    self.num_dropped += 1
                begin = stop
        done_levels += chunk_levels
        done_scores += chunk_scores
        if done_levels:
            self.target.update_batch(done_levels, np.asarray(done_scores, dtype=np.float64))
        self._open = new_open
        self.num_scored += len(done_levels)
        return list(zip(done_levels, done_scores))

    @staticmethod
    def _episode_level(env: int, levels: Any, first_row: int) -> Any:
        """The level of one episode's steps; they must all agree."""
        first = levels[0]
        if levels.dtype != object:
            if (levels != first).any():
                raise ValueError(
                    f"env {env} reported levels {np.unique(levels).tolist()} within one episode (from step "
                    f"{first_row}); the level must only change at episode starts"
                )
            return first.item()
        key = level_key(first)
        if any(level_key(x) != key for x in levels[1:]):
            raise ValueError(
                f"env {env} reported different levels within one episode (from step {first_row})"
            )
        return first

    def _check_shape(self, name: str, arr: Any, shape: tuple[int, int] | None) -> Any:
        """With ``shape=None``: check ``(n_steps, n_envs)`` and return it; else check and return ``arr``."""
        if shape is None:
            if arr.ndim != 2 or arr.shape[1] != self.n_envs or arr.shape[0] < 1:
                raise ValueError(f"{name} must have shape (n_steps, {self.n_envs}), got {arr.shape}")
            return arr.shape[0], arr.shape[1]
        if arr.shape[:2] != shape:
            raise ValueError(
                f"{name} must have shape {shape}{'...' if arr.ndim > 2 else ''}, got {arr.shape}"
            )
        return arr

    def _max_key(self, level: Any) -> Any:
        """Key of ``max_returns``: the level itself for ints and strings, else its value key."""
        if isinstance(level, (int, str)):
            return level
        key = level_key(level)
        self._level_of_key[key] = level
        return key

    def prune_max_returns(self, keep: Iterable[Any]) -> None:
        """Forget the max returns of levels not in ``keep`` (e.g. levels evicted from a LevelBuffer)."""
        keys = {self._max_key(level) for level in keep}
        self.max_returns = {k: v for k, v in self.max_returns.items() if k in keys}
        self._level_of_key = {k: v for k, v in self._level_of_key.items() if k in keys}

    def _score(self, level: Any, ep: dict[str, Any], complete: bool = True) -> float:
        """Score one episode; ``complete=False`` for a chunk whose start or end was not observed, whose
        return is not an episodic return (it is not recorded as a best return)."""
        max_return = None
        if self.strategy == "max_mc" or callable(self.strategy):
            ret = float(ep.get("raw_rewards", ep["rewards"]).sum())  # the raw episodic return
            key = self._max_key(level)
            if complete:
                max_return = max(self.max_returns.get(key, -np.inf), ret)
                self.max_returns[key] = max_return
            else:
                max_return = self.max_returns.get(key, ret)
        data = EpisodeData(
            rewards=ep["rewards"],
            values=ep["values"],
            advantages=ep.get("advantages"),
            next_values=ep["next_values"],
            gamma=self.gamma,
            log_policy=ep.get("log_policy"),
            entropies=ep.get("entropies"),
            max_return=max_return,
            success=self._success(ep),
        )
        return float(self.score_fn(data))

    @staticmethod
    def _success(ep: dict[str, Any]) -> bool | None:
        outcomes = ep.get("successes")
        if outcomes is None or np.isnan(outcomes[-1]):
            return None
        return bool(outcomes[-1] == 1.0)

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """Open episodes and per-level max returns (levels may be any value :func:`save_values` can store)."""
        open_eps = [
            {"env": e, "level": ep["level"], **{k: ep[k] for k in _STEP_FIELDS if k in ep}}
            for e, ep in enumerate(self._open)
            if ep is not None
        ]
        return {
            "n_envs": self.n_envs,
            "open": open_eps,
            "max_returns": [[self._level_of_key.get(k, k), v] for k, v in self.max_returns.items()],
            "num_scored": self.num_scored,
            "num_dropped": self.num_dropped,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict`. Everything is checked first; a refused state (``ValueError``)
        leaves the scorer exactly as it was."""
        if not isinstance(state, dict) or any(
            k not in state for k in ("n_envs", "open", "max_returns", "num_scored", "num_dropped")
        ):
            raise ValueError(
                "not an EpisodeScorer state (needs n_envs, open, max_returns, num_scored, num_dropped)"
            )
        n_envs = state["n_envs"]
        if (
            isinstance(n_envs, bool)
            or not isinstance(n_envs, (int, np.integer))
            or int(n_envs) != self.n_envs
        ):
            raise ValueError(f"state has n_envs={n_envs!r}, this scorer has {self.n_envs}")
        counters = {}
        for name in ("num_scored", "num_dropped"):
            v = state[name]
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
                raise ValueError(f"state '{name}' must be an int >= 0, got {v!r}")
            counters[name] = int(v)
        if not isinstance(state["open"], list) or not isinstance(state["max_returns"], list):
            raise ValueError("state 'open' and 'max_returns' must be lists")
        opened: list[dict[str, Any] | None] = [None] * self.n_envs
        for ep in state["open"]:
            opened_ep = self._validated_open(ep)
            e = int(ep["env"])
            if opened[e] is not None:
                raise ValueError(f"state 'open' has two episodes for env {e}")
            opened[e] = opened_ep
        max_returns: dict[Any, float] = {}
        level_of_key: dict[Any, Any] = {}
        for item in state["max_returns"]:
            if not isinstance(item, (list, tuple)) or len(item) != 2:
                raise ValueError(f"state 'max_returns' entries must be [level, return] pairs, got {item!r}")
            level, value = item
            if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
                raise ValueError(
                    f"state 'max_returns' value for level {level!r} must be a float, got {value!r}"
                )
            if not np.isfinite(value):
                raise ValueError(
                    f"state 'max_returns' value for level {level!r} must be finite, got {value!r}"
                )
            try:
                key = level if isinstance(level, (int, str)) else level_key(level)
            except TypeError as exc:
                raise ValueError(f"state 'max_returns' level {level!r}: {exc}") from exc
            if key is not level:
                level_of_key[key] = level
            max_returns[key] = float(value)
        self._open = opened
        self.max_returns = max_returns
        self._level_of_key = level_of_key
        self.num_scored = counters["num_scored"]
        self.num_dropped = counters["num_dropped"]

    def _validated_open(self, ep: Any) -> dict[str, Any]:
        """One open episode of a state: env in range, a level, equal-length finite step arrays."""
        if not isinstance(ep, dict) or "env" not in ep or "level" not in ep:
            raise ValueError("state 'open' entries must be dicts with 'env', 'level' and step arrays")
        e = ep["env"]
        if isinstance(e, bool) or not isinstance(e, (int, np.integer)) or not 0 <= int(e) < self.n_envs:
            raise ValueError(f"state 'open' env must be an int in [0, {self.n_envs}), got {e!r}")
        unknown = sorted(set(ep) - {"env", "level", *_STEP_FIELDS})
        if unknown:
            raise ValueError(f"state 'open' episode has unknown fields {unknown}")
        out: dict[str, Any] = {"level": ep["level"]}
        length = None
        for k in _STEP_FIELDS:
            if k not in ep:
                continue
            try:
                arr = np.asarray(ep[k], dtype=np.float64)
            except (TypeError, ValueError) as exc:
                raise ValueError(f"state 'open' field {k!r} is not numeric: {exc}") from exc
            if arr.ndim < 1 or arr.shape[0] == 0 or (length is not None and arr.shape[0] != length):
                raise ValueError(
                    f"state 'open' field {k!r} must have one entry per step, got shape {arr.shape}"
                )
            if k not in ("log_policy", "successes") and not np.isfinite(arr).all():
                raise ValueError(f"state 'open' field {k!r} contains NaN or inf")
            length = arr.shape[0]
            out[k] = arr
        for k in ("rewards", "values", "next_values"):
            if k not in out:
                raise ValueError(f"state 'open' episode lacks {k!r}")
        if "raw_rewards" not in out:  # states saved before raw rewards were kept
            out["raw_rewards"] = out["rewards"].copy()
        return out

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write :meth:`state_dict` as ``.npz`` (arrays + JSON; loading never unpickles)."""
        save_values(path, self.state_dict())

    def load(self, path: str | os.PathLike[str]) -> None:
        """Restore a file written by :meth:`save`."""
        self.load_state_dict(load_values(path))
