"""One TD error (plr_gym.replay.td_error) for PER priorities and OffPolicyPLRCallback's level scores: on the
same weights and transitions, the priority PER stores and the score the callback computes agree."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch as th

from plr_gym import OffPolicyPLRCallback
from plr_gym.replay import PERDQN, PERSAC, PERTD3
from plr_gym.replay.td_error import (
    absolute_td_error,
    sac_td_terms,
    td3_td_terms,
    td_errors,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SMALL = {"learning_starts": 50, "batch_size": 16, "buffer_size": 1_000, "seed": 0}
N = 16  # transitions compared


def _callback_scores(model: Any) -> np.ndarray:
    """OffPolicyPLRCallback's per-step scores of the first N stored transitions (its own code path:
    gather from the buffer, one_step_td_errors under no_grad)."""
    callback = OffPolicyPLRCallback()
    callback.model = model
    rows, envs = np.divmod(np.arange(N), model.n_envs)
    return callback.td_errors(rows.astype(np.int64), envs.astype(np.int64))


def _per_priorities_after_one_step(model: Any) -> tuple[Any, np.ndarray]:
    """Train one gradient step on the first N stored transitions; the priorities PER stored for them."""
    buffer = model.replay_buffer
    batch = buffer._get_prioritized_samples(np.arange(N), np.ones(N), None)
    buffer.sample = lambda *args, **kwargs: batch
    try:
        model.train(gradient_steps=1, batch_size=N)
    finally:
        del buffer.sample
    return batch, buffer.priorities.ravel()[:N] - buffer.eps


def test_dqn_priority_equals_callback_score() -> None:
    model = PERDQN("MlpPolicy", "CartPole-v1", **SMALL)
    model.learn(80)
    scores = _callback_scores(model)  # before the step: same weights as the priorities' TD errors
    _, priorities = _per_priorities_after_one_step(model)
    np.testing.assert_allclose(priorities, scores, rtol=1e-9, atol=1e-12)
    assert (scores > 0).all()


def test_qrdqn_priority_equals_callback_score() -> None:
    pytest.importorskip("sb3_contrib")
    from plr_gym.replay import PERQRDQN  # type: ignore[attr-defined]

    model = PERQRDQN("MlpPolicy", "CartPole-v1", **SMALL)
    model.learn(80)
    scores = _callback_scores(model)
    _, priorities = _per_priorities_after_one_step(model)
    np.testing.assert_allclose(priorities, scores, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("algo", [PERSAC, PERTD3])
def test_actor_critic_deterministic_priority_equals_callback_score(algo: Any) -> None:
    """SAC/TD3: the callback's score is the PER definition with deterministic=True."""
    model = algo("MlpPolicy", "Pendulum-v1", **SMALL)
    model.learn(60)
    scores = _callback_scores(model)
    batch = model.replay_buffer._get_prioritized_samples(np.arange(N), np.ones(N), None)
    terms = sac_td_terms if algo is PERSAC else td3_td_terms
    with th.no_grad():
        deterministic = absolute_td_error(*terms(model, batch, model.gamma, deterministic=True))
    np.testing.assert_allclose(deterministic.numpy(), scores, rtol=1e-6, atol=1e-7)
    with th.no_grad():  # the dispatcher the callback uses, on PER's batch type
        np.testing.assert_array_equal(td_errors(model, batch).numpy(), deterministic.numpy())


def test_sac_training_priority_is_the_sampled_definition() -> None:
    """PERSAC's priorities are td_error's sampled terms (next action drawn, entropy term), not a copy."""
    model = PERSAC("MlpPolicy", "Pendulum-v1", **SMALL)
    model.learn(60)
    batch = model.replay_buffer._get_prioritized_samples(np.arange(N), np.ones(N), None)
    ent_coef = th.exp(model.log_ent_coef.detach())
    th.manual_seed(7)
    with th.no_grad():
        model.actor.action_log_prob(batch.observations)  # train() draws the policy's actions first
        expected = absolute_td_error(
            *sac_td_terms(model, batch, model.gamma, deterministic=False, ent_coef=ent_coef)
        )
    th.manual_seed(7)
    _, priorities = _per_priorities_after_one_step(model)
    np.testing.assert_allclose(priorities, expected.numpy(), rtol=1e-5, atol=1e-6)
    with th.no_grad():
        deterministic = td_errors(model, batch)
    assert not np.allclose(expected.numpy(), deterministic.numpy())


def test_td3_training_priority_is_the_noisy_definition() -> None:
    model = PERTD3("MlpPolicy", "Pendulum-v1", **SMALL)
    model.learn(60)
    batch = model.replay_buffer._get_prioritized_samples(np.arange(N), np.ones(N), None)
    th.manual_seed(7)
    with th.no_grad():
        expected = absolute_td_error(*td3_td_terms(model, batch, model.gamma, deterministic=False))
    th.manual_seed(7)
    _, priorities = _per_priorities_after_one_step(model)
    np.testing.assert_allclose(priorities, expected.numpy(), rtol=1e-5, atol=1e-6)


def test_absolute_td_error_reduces_quantiles_then_critics() -> None:
    quantiles = th.tensor([[0.0, 2.0], [1.0, 1.0]])  # means 1 and 1
    target = th.tensor([[3.0, 5.0], [0.0, 0.0]])  # means 4 and 0
    assert absolute_td_error(quantiles, target).tolist() == [3.0, 1.0]


def test_td_errors_names_unsupported_algorithms() -> None:
    with pytest.raises(TypeError, match="td_error_fn"):
        td_errors(object(), None)  # type: ignore[arg-type]
