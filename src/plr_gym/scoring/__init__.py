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

The package's rooms: :mod:`~plr_gym.scoring.strategies` (the score functions, :class:`EpisodeData` and
the strategy table :data:`STRATEGY_SPECS`) and :mod:`~plr_gym.scoring.episode_scorer` (the engine,
:class:`EpisodeScorer`: rollouts in, one score per completed episode out). Import every name from
``plr_gym.scoring``.
"""

# ``X as X``: names of the module before it became a package, still importable from plr_gym.scoring
from plr_gym.scoring.episode_scorer import _STEP_FIELDS as _STEP_FIELDS
from plr_gym.scoring.episode_scorer import PARTIAL_EPISODES, EpisodeScorer
from plr_gym.scoring.episode_scorer import REFERENCE_TAIL_STRATEGIES as REFERENCE_TAIL_STRATEGIES
from plr_gym.scoring.episode_scorer import ScoreTarget as ScoreTarget
from plr_gym.scoring.episode_scorer import _check_gamma as _check_gamma
from plr_gym.scoring.episode_scorer import _flags as _flags
from plr_gym.scoring.episode_scorer import _reals as _reals
from plr_gym.scoring.episode_scorer import _with_reference_tail as _with_reference_tail
from plr_gym.scoring.strategies import (
    DISCRETE_ONLY,
    OUTCOME_STRATEGIES,
    SCORE_FUNCTIONS,
    STRATEGY_SPECS,
    EpisodeData,
    Strategy,
    episode_success,
    gae,
    get_score_function,
    learnability,
    least_confidence,
    max_mc,
    min_margin,
    one_step_td_error,
    policy_entropy,
    positive_value_loss,
    strategy_spec,
    value_l1,
)
from plr_gym.scoring.strategies import FloatArray as FloatArray
from plr_gym.scoring.strategies import _need as _need

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
