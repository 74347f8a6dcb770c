"""Tests for plr_gym.replay buffers and sum tree."""

from __future__ import annotations

import pickle
import warnings
from typing import Any

import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats
from stable_baselines3.common.buffers import NStepReplayBuffer

from plr_gym.replay import PrioritizedDictReplayBuffer, PrioritizedReplayBuffer, SumTree

OBS_SPACE = spaces.Box(-np.inf, np.inf, (2,), np.float32)
ACT_SPACE = spaces.Discrete(3)

pytestmark = pytest.mark.filterwarnings("ignore:.*without update_priorities.*:UserWarning")


def make_buffer(size: int = 16, n_envs: int = 1, **kwargs: Any) -> PrioritizedReplayBuffer:
    kwargs.setdefault("seed", 0)
    return PrioritizedReplayBuffer(size, OBS_SPACE, ACT_SPACE, device="cpu", n_envs=n_envs, **kwargs)


def add_step(
    buffer: PrioritizedReplayBuffer,
    step: int,
    reward: float | np.ndarray = 0.0,
    done: bool | np.ndarray = False,
    timeout: bool | np.ndarray = False,
) -> None:
    """Obs of env e at step t is (t, e); next obs is (t + 0.5, e)."""
    n = buffer.n_envs
    envs = np.arange(n, dtype=np.float32)
    obs = np.stack([np.full(n, step, np.float32), envs], axis=1)
    next_obs = obs + np.array([0.5, 0.0], np.float32)
    done_arr = np.broadcast_to(np.asarray(done, dtype=np.float32), (n,))
    timeout_arr = np.broadcast_to(np.asarray(timeout, dtype=bool), (n,))
    infos = [{"TimeLimit.truncated": bool(t)} for t in timeout_arr]
    rewards = np.broadcast_to(np.asarray(reward, dtype=np.float32), (n,))
    buffer.add(obs, next_obs, np.full(n, step % 3), rewards.copy(), done_arr.copy(), infos)


def fill(buffer: PrioritizedReplayBuffer, steps: int) -> None:
    for t in range(steps):
        add_step(buffer, t)


# ---------------------------------------------------------------- sum tree


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(0.0, 100.0), min_size=1, max_size=40), st.data())
def test_sum_tree_matches_numpy(values: list[float], data: st.DataObject) -> None:
    tree = SumTree(len(values))
    tree.update(np.arange(len(values)), values)
    arr = np.array(values)
    assert tree.total == pytest.approx(arr.sum())
    positive = arr[arr > 0]
    assert tree.min == (positive.min() if positive.size else np.inf)
    if arr.sum() > 0:
        queries = np.array(
            data.draw(st.lists(st.floats(0.0, 1.0, exclude_max=True), min_size=1, max_size=10))
        )
        found = tree.find(queries * tree.total)
        expected = np.searchsorted(np.cumsum(arr), queries * tree.total, side="right")
        # Identical except where rounding differs at an interval edge; never a zero leaf.
        assert np.all(arr[found] > 0)
        assert np.all(np.abs(found - expected) <= np.count_nonzero(arr == 0) + 1)
        rebuilt = SumTree(len(values))
        rebuilt.build(arr)
        np.testing.assert_array_equal(rebuilt.sums, tree.sums)


def test_deep_sum_tree_incremental_updates_match_rebuild() -> None:
    rng = np.random.default_rng(0)
    capacity = 5_000  # 13 levels: exercises both the per-level and the sliced top-level paths
    values = rng.exponential(size=capacity) * (rng.random(capacity) > 0.2)
    tree = SumTree(capacity)
    tree.update(np.arange(capacity), values)
    for _ in range(20):
        idx = rng.integers(0, capacity, 300)  # with repeats
        new = rng.exponential(size=300) * (rng.random(300) > 0.2)
        tree.update(idx, new)
        values[idx] = new  # numpy assignment: last repeat wins, as in the tree
    rebuilt = SumTree(capacity)
    rebuilt.build(values)
    np.testing.assert_array_equal(tree.sums, rebuilt.sums)
    np.testing.assert_array_equal(tree.mins, rebuilt.mins)
    assert tree.min == values[values > 0].min()
    queries = rng.random(2_000) * tree.total
    found = tree.find(queries)
    expected = np.searchsorted(np.cumsum(values), queries, side="right")
    assert np.all(values[found] > 0)
    assert np.mean(found == expected) > 0.99  # equal but for rounding at interval edges
    assert np.all(np.abs(np.cumsum(values)[found] - values[found] / 2 - queries) <= values[found] / 2 + 1e-9)


def test_sum_tree_never_returns_zero_leaf_at_total() -> None:
    tree = SumTree(5)
    tree.update([0, 1, 2, 3, 4], [0.1, 0.2, 0.0, 0.3, 0.0])
    found = tree.find(np.array([tree.total, np.nextafter(tree.total, 0), 0.0]))
    assert found.tolist() == [3, 3, 0]


# ---------------------------------------------------------------- construction and validation


def test_refuses_optimize_memory_usage() -> None:
    with pytest.raises(ValueError, match="optimize_memory_usage"):
        PrioritizedReplayBuffer(
            16, OBS_SPACE, ACT_SPACE, optimize_memory_usage=True, handle_timeout_termination=False
        )


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"prioritization": "softmax"}, "prioritization"),
        ({"alpha": -1.0}, "alpha"),
        ({"beta": 1.5}, "beta"),
        ({"n_steps": 0}, "n_steps"),
        ({"recent_data_ratio": 0.5}, "recent_data_steps"),
        ({"recent_data_ratio": 2.0}, "recent_data_ratio"),
    ],
)
def test_bad_arguments_rejected(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        make_buffer(**kwargs)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf, -0.5])
def test_bad_priorities_rejected(bad: float) -> None:
    buffer = make_buffer()
    fill(buffer, 4)
    before = buffer.priorities
    with pytest.raises(ValueError, match="priorities must be"):
        buffer.update_priorities(np.array([0, 1]), np.array([1.0, bad]))
    np.testing.assert_array_equal(buffer.priorities, before)  # nothing stored


def test_bad_indices_rejected() -> None:
    buffer = make_buffer()
    fill(buffer, 4)
    with pytest.raises(ValueError, match="stored transitions"):
        buffer.update_priorities(np.array([4]), np.array([1.0]))  # slot not written yet
    with pytest.raises(ValueError, match="same length"):
        buffer.update_priorities(np.array([0, 1]), np.array([1.0]))
    with pytest.raises(ValueError, match="empty buffer"):
        make_buffer().sample(2)


def test_plain_use_without_updates_warns() -> None:
    buffer = make_buffer()
    fill(buffer, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        batch = buffer.sample(2)
        buffer.update_priorities(batch.indices, np.ones(2))
        buffer.sample(2)  # one sample after an update: fine
    with pytest.warns(UserWarning, match="never updated"):
        buffer.sample(2)


# ---------------------------------------------------------------- prioritized sampling


def _draw_counts(buffer: PrioritizedReplayBuffer, n_batches: int, batch_size: int) -> np.ndarray:
    counts = np.zeros(buffer.n_transitions, dtype=np.int64)
    for _ in range(n_batches):
        indices, _ = buffer.sample_indices(batch_size)
        counts += np.bincount(indices, minlength=buffer.n_transitions)
    return counts


def test_proportional_frequencies_follow_p_alpha() -> None:
    buffer = make_buffer(size=24, n_envs=2, alpha=0.7, eps=0.01)
    fill(buffer, 12)
    raw = np.random.default_rng(1).uniform(0.05, 5.0, buffer.n_transitions)
    buffer.update_priorities(np.arange(buffer.n_transitions), raw)
    counts = _draw_counts(buffer, 1500, 32)
    expected = (raw + 0.01) ** 0.7
    expected = expected / expected.sum() * counts.sum()
    assert stats.chisquare(counts, expected).pvalue > 1e-3
    # And it is not uniform.
    assert stats.chisquare(counts).pvalue < 1e-6


def test_rank_frequencies_follow_rank_power() -> None:
    buffer = make_buffer(size=20, prioritization="rank", rank_refresh_interval=10_000)
    assert (buffer.alpha, buffer.beta) == (0.7, 0.5)
    fill(buffer, 20)
    raw = np.random.default_rng(2).permutation(np.linspace(0.1, 10.0, 20))
    buffer.update_priorities(np.arange(20), raw)
    buffer.refresh_ranks()
    ranks = 1 + np.argsort(np.argsort(-raw))
    expected_p = ranks**-0.7 / (ranks**-0.7).sum()
    np.testing.assert_allclose(buffer.sampling_probabilities().ravel(), expected_p)
    counts = _draw_counts(buffer, 1500, 32)
    assert stats.chisquare(counts, expected_p * counts.sum()).pvalue > 1e-3


def test_rank_between_sorts_uses_snapshot_rank() -> None:
    buffer = make_buffer(size=4, prioritization="rank", alpha=1.0, rank_refresh_interval=10_000)
    fill(buffer, 4)
    buffer.update_priorities(np.arange(4), [1.0, 2.0, 3.0, 4.0])
    buffer.refresh_ranks()
    buffer.update_priorities([0], [3.5])  # between 3 and 4 in the snapshot -> rank 2
    probs = buffer.sampling_probabilities().ravel()
    leaves = np.array([1 / 2, 1 / 3, 1 / 2, 1 / 1])
    np.testing.assert_allclose(probs, leaves / leaves.sum())


def test_importance_weights_by_hand() -> None:
    buffer = make_buffer(size=4, alpha=0.5, beta=0.7, eps=0.0)
    fill(buffer, 4)
    raw = np.array([1.0, 2.0, 3.0, 4.0])
    buffer.update_priorities(np.arange(4), raw)
    indices, weights = buffer.sample_indices(64)
    p = raw**0.5 / (raw**0.5).sum()
    w_all = (4 * p) ** -0.7
    np.testing.assert_allclose(weights, w_all[indices] / w_all.max())
    batch = buffer.sample(8)
    np.testing.assert_allclose(batch.weights.numpy().ravel(), (w_all[batch.indices] / w_all.max()), rtol=1e-6)


def test_beta_annealing() -> None:
    buffer = make_buffer(beta=0.4)
    buffer.anneal_beta(0.5)
    assert buffer.beta == pytest.approx(0.7)
    buffer.anneal_beta(1.0)
    assert buffer.beta == 1.0
    with pytest.raises(ValueError, match="progress"):
        buffer.anneal_beta(1.5)


def test_each_sample_lies_in_its_own_segment() -> None:
    buffer = make_buffer(size=32, n_envs=2)
    fill(buffer, 16)
    raw = np.random.default_rng(3).exponential(1.0, 32)
    buffer.update_priorities(np.arange(32), raw)
    leaves = (raw + buffer.eps) ** buffer.alpha
    upper = np.cumsum(leaves)
    lower = upper - leaves
    total = upper[-1]
    batch_size = 8
    for _ in range(200):
        indices, _ = buffer.sample_indices(batch_size)
        seg_lo = np.arange(batch_size) * total / batch_size
        seg_hi = seg_lo + total / batch_size
        # The leaf's prefix-sum interval overlaps the k-th segment.
        assert np.all((lower[indices] < seg_hi + 1e-9) & (upper[indices] > seg_lo - 1e-9))
        assert np.all(np.diff(indices) >= 0)  # so the batch is ordered by segment


def test_new_transitions_get_max_priority() -> None:
    buffer = make_buffer(size=8, eps=0.0)
    fill(buffer, 2)
    np.testing.assert_array_equal(buffer.priorities[:2, 0], [1.0, 1.0])  # at least 1
    buffer.update_priorities([0, 1], [0.2, 0.3])
    add_step(buffer, 2)
    assert buffer.priorities[2, 0] == 1.0  # max seen so far is still the initial 1
    buffer.update_priorities([0], [7.0])
    add_step(buffer, 3)
    assert buffer.priorities[3, 0] == 7.0
    buffer.update_priorities([0], [0.1])  # the max is "seen so far", not current
    add_step(buffer, 4)
    assert buffer.priorities[4, 0] == 7.0
    assert buffer.max_priority == 7.0


def test_wrap_around_with_several_envs() -> None:
    buffer = make_buffer(size=6, n_envs=2)  # 3 rows x 2 envs
    fill(buffer, 3)
    buffer.update_priorities(np.arange(6), [0.1, 5.0, 0.1, 5.0, 0.1, 5.0])
    add_step(buffer, 3)
    add_step(buffer, 4)  # overwrites rows 0 and 1
    assert buffer.full and buffer.pos == 2
    np.testing.assert_array_equal(buffer.observations[:, :, 0], [[3, 3], [4, 4], [2, 2]])
    expected = np.array([[5.0, 5.0], [5.0, 5.0], [0.1, 5.0]]) + buffer.eps
    np.testing.assert_allclose(buffer.priorities, expected)
    batch = buffer.sample(64)
    rows, envs = np.divmod(batch.indices, 2)
    # The data gathered is the slot's own data: step of that row, env of that column.
    np.testing.assert_array_equal(batch.observations[:, 0].numpy(), buffer.observations[rows, envs, 0])
    np.testing.assert_array_equal(batch.observations[:, 1].numpy(), envs)
    leaves = expected.ravel() ** buffer.alpha
    expected_weights = (leaves.min() / leaves[batch.indices]) ** buffer.beta
    np.testing.assert_allclose(batch.weights.numpy().ravel(), expected_weights, rtol=1e-6)


def test_env_choice_comes_from_priorities() -> None:
    buffer = make_buffer(size=40, n_envs=2, alpha=1.0, eps=0.0)
    fill(buffer, 20)
    prio = np.tile([0.0, 1.0], 20)  # env 0 has priority 0: never sampled
    buffer.update_priorities(np.arange(40), prio)
    batch = buffer.sample(256)
    assert np.all(batch.observations[:, 1].numpy() == 1.0)


def test_sampling_without_replacement() -> None:
    buffer = make_buffer(size=8, replacement=False, alpha=1.0)
    fill(buffer, 8)
    buffer.update_priorities(np.arange(8), [100.0, 1, 1, 1, 1, 1, 1, 1])
    for _ in range(50):
        indices, _ = buffer.sample_indices(6)
        assert len(set(indices.tolist())) == 6
        assert 0 in indices
    full = buffer.sample_indices(8)[0]
    assert sorted(full.tolist()) == list(range(8))
    np.testing.assert_allclose(buffer.sampling_probabilities().ravel()[0], (100 + 1e-6) / (107 + 8e-6))
    with pytest.raises(ValueError, match="batch_size"):
        buffer.sample_indices(9)


def test_recent_data_ratio() -> None:
    buffer = make_buffer(size=40, n_envs=2, recent_data_ratio=0.5, recent_data_steps=2, alpha=1.0, eps=0.0)
    fill(buffer, 20)
    prio = np.zeros(40)
    prio[:4] = 1.0  # only the oldest two rows carry priority
    buffer.update_priorities(np.arange(40), prio)
    indices, weights = buffer.sample_indices(16)
    rows = indices // 2
    assert np.all(np.isin(rows[:8], [18, 19]))  # the recent share: the two newest rows
    assert np.all(np.isin(rows[8:], [0, 1]))
    # Mixture probability: 0.5 * 1/4 for the prioritized ones, 0.5 * 1/4 for the recent ones.
    np.testing.assert_allclose(weights, 1.0)


# ---------------------------------------------------------------- n-step returns


def _episode_buffer(n_steps: int, **kwargs: Any) -> PrioritizedReplayBuffer:
    buffer = make_buffer(size=16, n_steps=n_steps, gamma=0.9, **kwargs)
    for t in range(8):  # terminated at step 2, truncated (timeout) at step 5
        add_step(buffer, t, reward=t + 1.0, done=t in (2, 5), timeout=t == 5)
    return buffer


def test_n_step_targets_by_hand() -> None:
    buffer = _episode_buffer(3)
    g = 0.9
    # step: (reward sum, next obs step, done, discount)
    expected = {
        0: (1 + g * 2 + g**2 * 3, 2, 1.0, g**3),
        1: (2 + g * 3, 2, 1.0, g**2),
        2: (3, 2, 1.0, g),
        3: (4 + g * 5 + g**2 * 6, 5, 0.0, g**3),  # timeout: bootstrap, not done
        4: (5 + g * 6, 5, 0.0, g**2),
        5: (6, 5, 0.0, g),
        6: (7 + g * 8, 7, 0.0, g**2),  # cut at the newest step
        7: (8, 7, 0.0, g),
    }
    batch = buffer.sample(64)
    assert batch.discounts is not None
    for i, index in enumerate(batch.indices):
        reward, next_step, done, discount = expected[int(index)]
        assert batch.rewards[i, 0].item() == pytest.approx(reward, rel=1e-6)
        assert batch.next_observations[i, 0].item() == next_step + 0.5
        assert batch.observations[i, 0].item() == index
        assert batch.dones[i, 0].item() == done
        assert batch.discounts[i, 0].item() == pytest.approx(discount, rel=1e-6)
    assert set(batch.indices.tolist()) == set(range(8))


def test_n_step_matches_sb3_nstep_buffer() -> None:
    ours = _episode_buffer(3)
    ref = NStepReplayBuffer(16, OBS_SPACE, ACT_SPACE, device="cpu", n_steps=3, gamma=0.9)
    for t in range(8):
        obs = np.array([[t, 0.0]], np.float32)
        info = [{"TimeLimit.truncated": t == 5}]
        ref.add(
            obs,
            obs + np.array([0.5, 0.0], np.float32),
            np.array([t % 3]),
            np.array([t + 1.0]),
            np.array([t in (2, 5)]),
            info,
        )
    batch = ours.sample(32)
    theirs = ref._get_samples(batch.indices)
    for field in ("observations", "actions", "next_observations", "dones", "rewards", "discounts"):
        np.testing.assert_allclose(getattr(batch, field).numpy(), getattr(theirs, field).numpy(), rtol=1e-6)


def test_one_step_targets_and_timeouts() -> None:
    buffer = _episode_buffer(1)
    batch = buffer.sample(64)
    assert batch.discounts is None  # the algorithm's own gamma applies
    steps = batch.indices
    np.testing.assert_allclose(batch.rewards.numpy().ravel(), steps + 1.0)
    np.testing.assert_array_equal(batch.dones.numpy().ravel(), (steps == 2).astype(np.float32))
    no_timeouts = _episode_buffer(1, handle_timeout_termination=False).sample(64)
    np.testing.assert_array_equal(no_timeouts.dones.numpy().ravel(), np.isin(no_timeouts.indices, [2, 5]))


def test_n_step_stops_at_seam_when_full() -> None:
    buffer = make_buffer(size=4, n_steps=3, gamma=0.5)
    for t in range(6):  # rows now hold steps [4, 5, 2, 3]; newest is step 5 at row 1
        add_step(buffer, t, reward=1.0)
    batch = buffer.sample(64)
    for i, index in enumerate(batch.indices):
        step = int(buffer.observations[index, 0, 0])
        assert batch.next_observations[i, 0].item() == min(step + 2, 5) + 0.5  # never wraps to old data


def test_vecnormalize_normalises_obs_and_reward() -> None:
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    venv = VecNormalize(make_vec_env("Pendulum-v1", n_envs=1), gamma=0.9)
    venv.obs_rms.mean = np.array([1.0, 0.0, 0.0])
    venv.obs_rms.var = np.array([4.0, 1.0, 1.0])
    venv.ret_rms.var = np.array(9.0)
    space = spaces.Box(-np.inf, np.inf, (3,), np.float32)
    buffer = PrioritizedReplayBuffer(8, space, spaces.Box(-1, 1, (1,)), device="cpu", seed=0)
    for t in range(4):
        obs = np.full((1, 3), float(t), np.float32)
        buffer.add(obs, obs, np.zeros((1, 1)), np.array([3.0]), np.array([False]), [{}])
    batch = buffer.sample(4, env=venv)
    raw_obs = buffer.observations[batch.indices, 0]
    np.testing.assert_allclose(batch.observations.numpy(), venv.normalize_obs(raw_obs), rtol=1e-5)
    np.testing.assert_allclose(batch.rewards.numpy(), 3.0 / np.sqrt(9.0 + venv.epsilon), rtol=1e-5)
    venv.close()


# ---------------------------------------------------------------- sequences


def _episodes_buffer() -> PrioritizedReplayBuffer:
    """Two envs, episodes of lengths 3, 5, 2, ... (env 0) and 4, 4, ... (env 1); obs[:, 1] = episode id."""
    buffer = make_buffer(size=60, n_envs=2)
    lengths = [[3, 5, 2, 6, 1, 7, 6], [4, 4, 4, 4, 4, 4, 6]]
    ends = [np.cumsum(ls) - 1 for ls in lengths]
    for t in range(30):
        episode = np.array([np.searchsorted(ends[e], t) for e in range(2)], np.float32)
        done = np.array([t in ends[e] for e in range(2)])
        obs = np.stack([np.full(2, t, np.float32), episode], axis=1)
        reward = np.array([float(done[0]), 0.0], np.float32)  # env 0 is rewarded at episode ends
        buffer.add(obs, obs, np.zeros(2), reward, done.astype(np.float32), [{}, {}])
    return buffer


def test_sequences_stay_within_episode() -> None:
    buffer = _episodes_buffer()
    seq = buffer.sample_sequences(256, 4)
    obs = seq.observations.numpy()
    mask = seq.mask.numpy().astype(bool)
    assert obs.shape == (256, 4, 2) and mask.shape == (256, 4)
    assert np.all(mask[:, 0])
    assert np.any(~mask)  # some sequences hit an episode end
    episode = obs[:, :, 1]
    np.testing.assert_array_equal(episode, episode[:, :1].repeat(4, axis=1))  # padding repeats, never crosses
    steps = obs[:, :, 0]
    valid_steps = np.where(mask, steps, np.nan)
    assert np.all(np.nan_to_num(np.diff(valid_steps, axis=1), nan=1.0) == 1.0)  # contiguous
    np.testing.assert_array_equal(seq.rewards.numpy()[~mask], 0.0)
    # Sequence env comes from the anchor slot.
    np.testing.assert_array_equal(steps[:, 0], seq.indices // 2)


def test_sequences_cross_episodes_only_when_asked() -> None:
    buffer = _episodes_buffer()
    seq = buffer.sample_sequences(256, 4, allow_episode_crossing=True)
    obs = seq.observations.numpy()
    mask = seq.mask.numpy().astype(bool)
    crossing = np.any(obs[:, :, 1] != obs[:, :1, 1], axis=1)
    assert crossing.any()
    # Still never past the newest step (29): masked there.
    assert np.all(obs[:, :, 0][mask] <= 29)
    beyond_newest = obs[:, :1, 0] + np.arange(4) > 29
    assert beyond_newest.any() and not np.any(mask & beyond_newest)


def test_reward_rebalanced_sequences() -> None:
    buffer = _episodes_buffer()
    nonzero_share = np.mean(buffer.rewards[:30] != 0)
    assert nonzero_share < 0.15
    seq = buffer.sample_reward_sequences(2000, 3, nonzero_reward_prob=0.5)
    last_rewards = seq.rewards.numpy()[:, -1]
    assert seq.mask.numpy()[:, -1].all()
    k = int(np.count_nonzero(last_rewards))
    assert stats.binomtest(k, 2000, 0.5).pvalue > 1e-3
    episode = seq.observations.numpy()[:, :, 1]
    np.testing.assert_array_equal(episode, episode[:, -1:].repeat(3, axis=1))
    np.testing.assert_array_equal(seq.weights.numpy(), 1.0)
    # After new data is added, the reward index follows it.
    obs = np.array([[30, 99], [30, 99]], np.float32)
    buffer.add(obs, obs, np.zeros(2), np.array([5.0, 0.0]), np.zeros(2), [{}, {}])
    seq = buffer.sample_reward_sequences(500, 1, nonzero_reward_prob=1.0)
    assert np.any(seq.observations.numpy()[:, 0, 0] == 30)


# ---------------------------------------------------------------- dict observations


def test_dict_buffer_samples_and_nsteps() -> None:
    space = spaces.Dict({"pos": spaces.Box(-np.inf, np.inf, (2,), np.float32), "goal": spaces.Discrete(4)})
    buffer = PrioritizedDictReplayBuffer(
        12, space, ACT_SPACE, device="cpu", n_envs=2, n_steps=2, gamma=0.5, seed=0
    )
    for t in range(5):
        obs = {"pos": np.full((2, 2), t, np.float32), "goal": np.array([t % 4, (t + 1) % 4])}
        nxt = {"pos": np.full((2, 2), t + 0.5, np.float32), "goal": obs["goal"]}
        buffer.add(obs, nxt, np.zeros(2), np.ones(2), np.array([t == 2, False]), [{}, {}])
    batch = buffer.sample(16)
    rows, envs = np.divmod(batch.indices, 2)
    np.testing.assert_array_equal(batch.observations["pos"][:, 0].numpy(), rows)
    np.testing.assert_array_equal(batch.observations["goal"][:, 0].numpy(), (rows + envs) % 4)
    expected_next = np.where((envs == 0) & (rows == 2), rows, np.minimum(rows + 1, 4)) + 0.5
    np.testing.assert_array_equal(batch.next_observations["pos"][:, 0].numpy(), expected_next)
    buffer.update_priorities(batch.indices, np.arange(16.0))
    seq = buffer.sample_sequences(4, 3)
    assert isinstance(seq.observations, dict)
    assert tuple(seq.observations["pos"].shape) == (4, 3, 2)
    with pytest.raises(TypeError, match="Dict"):
        PrioritizedDictReplayBuffer(8, OBS_SPACE, ACT_SPACE)  # type: ignore[arg-type]


# ---------------------------------------------------------------- save / load


def _used_buffer(**kwargs: Any) -> PrioritizedReplayBuffer:
    buffer = make_buffer(size=20, n_envs=2, **kwargs)
    fill(buffer, 13)  # wraps around
    for _ in range(5):
        batch = buffer.sample(8)
        buffer.update_priorities(batch.indices, np.random.default_rng(0).exponential(size=8))
    buffer.anneal_beta(0.3)
    return buffer


@pytest.mark.parametrize("prioritization", ["proportional", "rank"])
def test_npz_round_trip(tmp_path: Any, prioritization: str) -> None:
    original = _used_buffer(prioritization=prioritization, n_steps=2)
    original.save(tmp_path / "buffer.npz")
    loaded = make_buffer(size=20, n_envs=2, prioritization=prioritization, n_steps=2, seed=123)
    loaded.load(tmp_path / "buffer.npz")
    np.testing.assert_array_equal(loaded.priorities, original.priorities)
    np.testing.assert_array_equal(loaded.sampling_probabilities(), original.sampling_probabilities())
    assert (loaded.pos, loaded.full, loaded.beta, loaded.max_priority) == (
        original.pos,
        original.full,
        original.beta,
        original.max_priority,
    )
    for _ in range(3):  # same RNG state: identical batches
        a, b = original.sample(8), loaded.sample(8)
        np.testing.assert_array_equal(a.indices, b.indices)
        for x, y in zip(a[:5], b[:5]):
            assert th.equal(x, y)
        assert th.equal(a.weights, b.weights)
        original.update_priorities(a.indices, np.arange(8.0))
        loaded.update_priorities(b.indices, np.arange(8.0))


def test_npz_load_refuses_other_settings(tmp_path: Any) -> None:
    _used_buffer().save(tmp_path / "buffer.npz")
    with pytest.raises(ValueError, match="alpha"):
        make_buffer(size=20, n_envs=2, alpha=0.9).load(tmp_path / "buffer.npz")
    with pytest.raises(ValueError, match="buffer_size"):
        make_buffer(size=40, n_envs=2).load(tmp_path / "buffer.npz")


def test_dict_npz_round_trip(tmp_path: Any) -> None:
    space = spaces.Dict({"a": spaces.Box(-1, 1, (2,), np.float32), "b": spaces.Discrete(3)})
    buffers = [PrioritizedDictReplayBuffer(8, space, ACT_SPACE, device="cpu", seed=s) for s in (0, 1)]
    for t in range(5):
        obs = {"a": np.full((1, 2), t / 10, np.float32), "b": np.array([t % 3])}
        buffers[0].add(obs, obs, np.zeros(1), np.ones(1), np.zeros(1), [{}])
    buffers[0].update_priorities([0, 3], [4.0, 0.5])
    buffers[0].save(tmp_path / "dict")
    buffers[1].load(tmp_path / "dict")  # exactly the path given: no ".npz" appended
    a, b = buffers[0].sample(6), buffers[1].sample(6)
    np.testing.assert_array_equal(a.indices, b.indices)
    assert th.equal(a.observations["a"], b.observations["a"])


def test_pickle_round_trip() -> None:
    original = _used_buffer()
    loaded = pickle.loads(pickle.dumps(original))
    np.testing.assert_array_equal(loaded.priorities, original.priorities)
    a, b = original.sample(8), loaded.sample(8)
    np.testing.assert_array_equal(a.indices, b.indices)
    assert th.equal(a.observations, b.observations)
    fill(loaded, 2)  # still consistent after more adds (no stale views)
    batch = loaded.sample(32)
    rows, envs = np.divmod(batch.indices, 2)
    np.testing.assert_array_equal(batch.observations[:, 0].numpy(), loaded.observations[rows, envs, 0])


def test_reset_clears_priorities() -> None:
    buffer = _used_buffer()
    buffer.reset()
    assert buffer.n_transitions == 0 and buffer.max_priority == 1.0
    assert not buffer.priorities.any()
    fill(buffer, 2)
    assert buffer.sampling_probabilities()[:2].sum() == pytest.approx(1.0)
