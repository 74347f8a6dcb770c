"""Tests for the PER algorithm classes (PERDQN, PERSAC, PERTD3, PERQRDQN)."""

from __future__ import annotations

import copy
import hashlib
import importlib
import inspect
import warnings
from typing import Any

import numpy as np
import pytest
import torch as th
from stable_baselines3 import DQN, SAC, TD3
from stable_baselines3.common.buffers import ReplayBuffer

from plr_gym.replay import PERDQN, PERSAC, PERTD3, PrioritizedReplayBuffer
from plr_gym.replay.algorithms import SUPPORTED_SB3, UPSTREAM_TRAIN_SHA256
from plr_gym.replay.buffers import PrioritizedReplayBufferSamples

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SMALL = {"learning_starts": 50, "batch_size": 32, "buffer_size": 2_000, "seed": 0}


def _train_and_check_priorities(model: Any, steps: int) -> None:
    model.learn(steps)
    buffer = model.replay_buffer
    assert isinstance(buffer, PrioritizedReplayBuffer)
    stored = buffer.priorities[: buffer.size()].ravel()
    # Priorities came from TD errors: no longer all the initial max priority.
    assert len(np.unique(stored)) > steps // 4
    assert buffer.max_priority >= 1.0
    # beta was annealed with training progress (from beta0 towards 1).
    assert buffer.beta0 < buffer.beta <= 1.0


def test_perdqn_trains_and_updates_priorities() -> None:
    model = PERDQN("MlpPolicy", "CartPole-v1", train_freq=1, target_update_interval=100, **SMALL)
    _train_and_check_priorities(model, 300)


def test_persac_trains_and_updates_priorities() -> None:
    model = PERSAC("MlpPolicy", "Pendulum-v1", policy_kwargs={"net_arch": [32, 32]}, **SMALL)
    _train_and_check_priorities(model, 250)


def test_pertd3_trains_and_updates_priorities() -> None:
    model = PERTD3("MlpPolicy", "Pendulum-v1", policy_kwargs={"net_arch": [32, 32]}, **SMALL)
    _train_and_check_priorities(model, 250)


def test_perqrdqn_trains_and_updates_priorities() -> None:
    pytest.importorskip("sb3_contrib")
    from plr_gym.replay import PERQRDQN  # type: ignore[attr-defined]

    model = PERQRDQN("MlpPolicy", "CartPole-v1", policy_kwargs={"n_quantiles": 10}, **SMALL)
    _train_and_check_priorities(model, 300)


def test_rank_and_nstep_options_reach_the_buffer() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # in particular no SB3 "n_steps is ignored" warning
        model = PERDQN(
            "MlpPolicy",
            "CartPole-v1",
            n_steps=3,
            gamma=0.95,
            replay_buffer_kwargs={"prioritization": "rank"},
            **SMALL,
        )
    buffer = model.replay_buffer
    assert isinstance(buffer, PrioritizedReplayBuffer)
    assert (buffer.n_steps, buffer.gamma, buffer.prioritization) == (3, 0.95, "rank")
    model.learn(120)
    batch = buffer.sample(16)
    assert batch.discounts is not None
    assert np.all(np.isin(np.round(batch.discounts.numpy(), 6), np.round(0.95 ** np.arange(1, 4), 6)))


def test_gamma_mismatch_and_wrong_buffer_refused() -> None:
    with pytest.raises(ValueError, match="gamma"):
        PERDQN("MlpPolicy", "CartPole-v1", gamma=0.9, replay_buffer_kwargs={"n_steps": 3, "gamma": 0.99})
    with pytest.raises(TypeError, match="prioritized replay buffer"):
        PERDQN("MlpPolicy", "CartPole-v1", replay_buffer_class=ReplayBuffer)


def test_plain_sb3_algorithm_with_our_buffer_warns() -> None:
    model = DQN("MlpPolicy", "CartPole-v1", replay_buffer_class=PrioritizedReplayBuffer, **SMALL)
    with pytest.warns(UserWarning, match="priorities are never updated"):
        model.learn(80)


def _fixed_batch(model: Any, n: int, weights: list[float]) -> PrioritizedReplayBufferSamples:
    """The first n stored transitions, with the given importance weights."""
    buffer = model.replay_buffer
    batch = buffer._get_prioritized_samples(np.arange(n), np.ones(n), None)
    return batch._replace(weights=th.tensor(weights, dtype=th.float32).reshape(-1, 1))


def _grads_after_one_step(model: Any, batch: PrioritizedReplayBufferSamples) -> list[th.Tensor]:
    state = copy.deepcopy(model.policy.state_dict())
    model.replay_buffer.sample = lambda *args, **kwargs: batch
    model.train(gradient_steps=1, batch_size=len(batch.indices))
    del model.replay_buffer.sample
    grads = [p.grad.clone() for p in model.q_net.parameters()]
    model.policy.load_state_dict(state)
    return grads


def test_zero_importance_weight_removes_a_samples_gradient() -> None:
    model = PERDQN("MlpPolicy", "CartPole-v1", max_grad_norm=1e9, **SMALL)
    model.learn(60)
    one = _fixed_batch(model, 1, [1.0])
    two = _fixed_batch(model, 2, [1.0, 0.0])
    zero = _fixed_batch(model, 1, [0.0])
    grads_one = _grads_after_one_step(model, one)
    grads_two = _grads_after_one_step(model, two)
    grads_zero = _grads_after_one_step(model, zero)
    assert any(g.abs().sum() > 0 for g in grads_one)
    for g1, g2, g0 in zip(grads_one, grads_two, grads_zero):
        # The loss is a mean over the batch: the weighted-out sample only halves the first one's share.
        th.testing.assert_close(g2, g1 / 2)
        assert th.all(g0 == 0)
    # A half weight halves the gradient.
    half = _grads_after_one_step(model, _fixed_batch(model, 1, [0.5]))
    for g1, gh in zip(grads_one, half):
        th.testing.assert_close(gh, g1 / 2)


@pytest.mark.parametrize("algo", [PERSAC, PERTD3])
def test_zero_weights_leave_critic_unchanged(algo: Any) -> None:
    model = algo(
        "MlpPolicy", "Pendulum-v1", policy_kwargs={"net_arch": [16]}, **{**SMALL, "learning_starts": 100}
    )
    model.learn(60)  # collect only: the optimizers have no momentum yet
    batch = _fixed_batch(model, 4, [0.0] * 4)
    before = [p.detach().clone() for p in model.critic.parameters()]
    model.replay_buffer.sample = lambda *args, **kwargs: batch
    model.train(gradient_steps=1, batch_size=4)
    assert all(th.equal(a, b) for a, b in zip(before, model.critic.parameters()))
    batch = _fixed_batch(model, 4, [1.0] * 4)
    model.replay_buffer.sample = lambda *args, **kwargs: batch
    model.train(gradient_steps=1, batch_size=4)
    assert not all(th.equal(a, b) for a, b in zip(before, model.critic.parameters()))


def test_priorities_are_td_errors() -> None:
    model = PERDQN("MlpPolicy", "CartPole-v1", **SMALL)
    model.learn(60)
    buffer = model.replay_buffer
    batch = buffer.sample(8)
    with th.no_grad():
        next_q = model.q_net_target(batch.next_observations).max(dim=1)[0].reshape(-1, 1)
        target = batch.rewards + (1 - batch.dones) * model.gamma * next_q
        current = th.gather(model.q_net(batch.observations), 1, batch.actions.long())
    expected = (target - current).abs().numpy().ravel()
    buffer.sample = lambda *args, **kwargs: batch
    model.policy.optimizer.param_groups[0]["lr"] = 0.0
    model.learning_rate = 0.0
    model.lr_schedule = lambda _: 0.0
    model.train(gradient_steps=1, batch_size=8)
    stored = buffer.priorities.ravel()[batch.indices]
    np.testing.assert_allclose(stored, expected + buffer.eps, rtol=1e-5)


def test_save_replay_buffer_pickle_round_trip(tmp_path: Any) -> None:
    model = PERDQN("MlpPolicy", "CartPole-v1", **SMALL)
    model.learn(100)
    model.save_replay_buffer(tmp_path / "buffer.pkl")
    original = model.replay_buffer
    other = PERDQN("MlpPolicy", "CartPole-v1", **SMALL)
    other.load_replay_buffer(tmp_path / "buffer.pkl")
    loaded = other.replay_buffer
    assert isinstance(loaded, PrioritizedReplayBuffer) and isinstance(original, PrioritizedReplayBuffer)
    np.testing.assert_array_equal(loaded.priorities, original.priorities)
    np.testing.assert_array_equal(loaded.sample(16).indices, original.sample(16).indices)


UPSTREAM = [
    ("stable_baselines3", "DQN", PERDQN),
    ("stable_baselines3", "SAC", PERSAC),
    ("stable_baselines3", "TD3", PERTD3),
    ("sb3_contrib", "QRDQN", "PERQRDQN"),
]


@pytest.mark.parametrize(("package", "name", "ours"), UPSTREAM)
def test_upstream_train_unchanged(package: str, name: str, ours: Any) -> None:
    module = pytest.importorskip(package)
    upstream = getattr(module, name).train
    digest = hashlib.sha256(inspect.getsource(upstream).encode()).hexdigest()
    version = importlib.metadata.version(package.replace("_", "-"))
    ours_name = ours if isinstance(ours, str) else ours.__name__
    assert digest == UPSTREAM_TRAIN_SHA256[f"{package}.{name}"], (
        f"{package}.{name}.train() changed upstream (installed {package} {version}; ours mirrors "
        f"{'/'.join(SUPPORTED_SB3)}). Re-read it, port every change into plr_gym.replay.algorithms."
        f"{ours_name}.train() keeping the '# PER:' lines (beta annealing, importance-weighted per-sample "
        "loss, update_priorities with |TD error|), check how `discounts`/n-step are consumed, then update "
        "UPSTREAM_TRAIN_SHA256 and SUPPORTED_SB3."
    )


def test_sb3_version_is_supported() -> None:
    import stable_baselines3

    assert ".".join(stable_baselines3.__version__.split(".")[:2]) in SUPPORTED_SB3


def test_per_algorithms_are_thin_subclasses() -> None:
    # Everything but train() is inherited from upstream.
    for ours, upstream in ((PERDQN, DQN), (PERSAC, SAC), (PERTD3, TD3)):
        assert issubclass(ours, upstream)
        assert {name for name in vars(ours) if not name.startswith("_")} == {"train"}
