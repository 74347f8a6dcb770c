"""Score functions: each strategy's formula on hand-made episodes."""

from __future__ import annotations

import numpy as np
import pytest

from plr_gym.scoring import (
    SCORE_FUNCTIONS,
    EpisodeData,
    gae,
    get_score_function,
    least_confidence,
    max_mc,
    min_margin,
    one_step_td_error,
    policy_entropy,
    positive_value_loss,
    value_l1,
)

ADV = np.array([0.5, -1.0, 0.25, -0.25])
VALUES = np.array([1.0, 2.0, 0.5, 0.0])
REWARDS = np.array([0.0, 1.0, 0.0, 2.0])
PROBS = np.array([[0.7, 0.2, 0.1], [1 / 3, 1 / 3, 1 / 3], [0.5, 0.5, 0.0 + 1e-300], [0.1, 0.6, 0.3]])
EP = EpisodeData(
    rewards=REWARDS, values=VALUES, advantages=ADV, next_value=0.5, gamma=0.9, log_policy=np.log(PROBS)
)


def test_value_losses() -> None:
    assert value_l1(EP) == pytest.approx((0.5 + 1.0 + 0.25 + 0.25) / 4)
    assert positive_value_loss(EP) == pytest.approx((0.5 + 0.25) / 4)
    assert gae(EP) == pytest.approx((0.5 - 1.0 + 0.25 - 0.25) / 4)


def test_max_mc() -> None:
    ep = EpisodeData(values=VALUES, max_return=3.0)
    assert max_mc(ep) == pytest.approx(np.mean(3.0 - VALUES))
    with pytest.raises(ValueError, match="max_return"):
        max_mc(EpisodeData(values=VALUES))


def test_one_step_td_error_is_papers_definition() -> None:
    # |r_t + gamma V(s_{t+1}) - V(s_t)|, V(s_T) = next_value
    td = [
        abs(0 + 0.9 * 2.0 - 1.0),
        abs(1 + 0.9 * 0.5 - 2.0),
        abs(0 + 0.9 * 0.0 - 0.5),
        abs(2 + 0.9 * 0.5 - 0.0),
    ]
    assert one_step_td_error(EP) == pytest.approx(np.mean(td))


def test_policy_scores() -> None:
    ent = -(PROBS * np.log(PROBS)).sum(-1)
    assert policy_entropy(EP) == pytest.approx(ent.mean() / np.log(3))
    assert least_confidence(EP) == pytest.approx(np.mean(1 - PROBS.max(-1)))
    margins = [0.7 - 0.2, 0.0, 0.0, 0.6 - 0.3]
    assert min_margin(EP) == pytest.approx(1 - np.mean(margins))
    assert policy_entropy(EpisodeData(entropies=np.array([1.0, 3.0]))) == 2.0


def test_uniform_policy_has_entropy_one() -> None:
    logp = np.log(np.full((5, 4), 0.25))
    assert policy_entropy(EpisodeData(log_policy=logp)) == pytest.approx(1.0)


def test_missing_inputs_and_empty_episodes_raise() -> None:
    with pytest.raises(ValueError, match="advantages"):
        value_l1(EpisodeData(values=VALUES))
    with pytest.raises(ValueError, match="empty"):
        value_l1(EpisodeData(advantages=np.array([])))
    with pytest.raises(ValueError, match="log_policy"):
        least_confidence(EP.__class__(values=VALUES))


def test_lookup() -> None:
    assert get_score_function("value_l1") is value_l1
    assert set(SCORE_FUNCTIONS) >= {"value_l1", "one_step_td_error", "max_mc"}

    def mine(ep: EpisodeData) -> float:
        return 1.0

    assert get_score_function(mine) is mine
    with pytest.raises(ValueError, match="random"):
        get_score_function("random")


def test_policy_entropy_with_masked_actions() -> None:
    logp = np.array([[np.log(0.5), np.log(0.5), -np.inf], [0.0, -np.inf, -np.inf]])  # masked: -inf
    assert policy_entropy(EpisodeData(log_policy=logp)) == pytest.approx(np.log(2) / 2 / np.log(3))
