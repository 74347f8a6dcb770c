"""Episodic info (steps to episode end, discounted return-to-go) against hand and brute-force computations."""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
import pytest
import torch as th
from gymnasium import spaces

from plr_gym.replay import EpisodicReplayBuffer, FrameStackReplayBuffer

pytestmark = pytest.mark.filterwarnings("ignore:.*without update_priorities.*:UserWarning")

OBS = spaces.Box(-np.inf, np.inf, (1,), np.float32)
ACT = spaces.Discrete(2)


class Stream:
    """Per-env scalar observations, ``next_obs = obs + 1`` within an episode, chosen terminal values."""

    def __init__(self, n_envs: int) -> None:
        self.n_envs = n_envs
        self.obs = np.arange(n_envs, dtype=np.float32) * 1000.0

    def step(
        self,
        buffer: Any,
        rewards: list[float],
        dones: list[int],
        timeouts: list[int],
        terminal: list[float] | None = None,
    ) -> None:
        next_obs = self.obs + 1.0
        for e in range(self.n_envs):
            if dones[e] and terminal is not None:
                next_obs[e] = terminal[e]
        infos = [{"TimeLimit.truncated": bool(t)} for t in timeouts]
        obs, rew, done = self.obs.reshape(-1, 1), np.array(rewards, np.float32), np.array(dones, np.float32)
        buffer.add(obs, next_obs.reshape(-1, 1), np.zeros(self.n_envs), rew, done, infos)
        self.obs = np.where(np.array(dones) > 0, self.obs + 500.0, next_obs).astype(np.float32)


def test_hand_computed_returns_terminated_truncated_and_unfinished() -> None:
    buffer = EpisodicReplayBuffer(20, OBS, ACT, "cpu", n_envs=2, gamma=0.9, seed=0)
    buffer.value_fn = lambda obs: obs[:, 0]  # V(s) = the observation's value
    stream = Stream(2)
    # env 0: rewards 1, 2, 3, terminates; env 1: rewards 2, 1, truncates with V(s_end) = 10, then 5 (open)
    stream.step(buffer, [1, 2], [0, 0], [0, 0])
    stream.step(buffer, [2, 1], [0, 1], [0, 1], terminal=[0, 10.0])
    stream.step(buffer, [3, 5], [1, 0], [0, 0], terminal=[77.0, 0])
    steps, returns = buffer.steps_to_end[:3], buffer.returns_to_go[:3]
    assert steps[:, 0].tolist() == [2, 1, 0]
    np.testing.assert_allclose(returns[:, 0], [1 + 0.9 * (2 + 0.9 * 3), 2 + 0.9 * 3, 3], rtol=1e-6)
    assert steps[:, 1].tolist() == [1, 0, -1]
    np.testing.assert_allclose(returns[:2, 1], [2 + 0.9 * (1 + 0.9 * 10), 1 + 0.9 * 10], rtol=1e-6)
    assert np.isnan(returns[2, 1])
    batch = buffer.sample(6)
    flat_steps = buffer.steps_to_end.reshape(-1)[batch.indices]
    np.testing.assert_array_equal(batch.steps_to_end, flat_steps)
    expected = th.as_tensor(buffer.returns_to_go.reshape(-1)[batch.indices]).reshape(-1, 1)
    assert th.allclose(batch.returns_to_go, expected, equal_nan=True)


def test_truncation_without_value_fn_leaves_returns_unknown() -> None:
    buffer = EpisodicReplayBuffer(10, OBS, ACT, "cpu", gamma=0.5, seed=0)
    stream = Stream(1)
    stream.step(buffer, [1], [0], [0])
    stream.step(buffer, [1], [1], [1], terminal=[3.0])
    assert buffer.steps_to_end[:2, 0].tolist() == [1, 0]
    assert np.isnan(buffer.returns_to_go[:2, 0]).all()


def test_episode_longer_than_the_buffer_fills_the_steps_still_stored() -> None:
    buffer = EpisodicReplayBuffer(4, OBS, ACT, "cpu", gamma=0.9, seed=0)
    stream = Stream(1)
    for t in range(6):  # rewards 1..6, terminates at the 6th step; steps 0-5 land in rows 0 1 2 3 0 1
        stream.step(buffer, [t + 1.0], [int(t == 5)], [0])
    g6 = 6.0
    g5 = 5 + 0.9 * g6
    g4 = 4 + 0.9 * g5
    g3 = 3 + 0.9 * g4
    np.testing.assert_allclose(buffer.returns_to_go[[2, 3, 0, 1], 0], [g3, g4, g5, g6], rtol=1e-6)
    assert buffer.steps_to_end[[2, 3, 0, 1], 0].tolist() == [3, 2, 1, 0]


def test_reset_without_done_abandons_the_episode() -> None:
    buffer = EpisodicReplayBuffer(10, OBS, ACT, "cpu", gamma=1.0, seed=0)
    stream = Stream(1)
    stream.step(buffer, [1], [0], [0])
    stream.obs += 123.0  # the env was reset (SB3's learn()) without a done
    stream.step(buffer, [2], [0], [0])
    stream.step(buffer, [3], [1], [0], terminal=[0.0])
    assert buffer.steps_to_end[:3, 0].tolist() == [-1, 1, 0]
    np.testing.assert_allclose(buffer.returns_to_go[1:3, 0], [5.0, 3.0])
    assert np.isnan(buffer.returns_to_go[0, 0])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_stream_matches_brute_force(seed: int) -> None:
    """Several envs, random terminations and truncations, a buffer that wraps around several times."""
    rng = np.random.default_rng(seed)
    n_envs, rows, steps, gamma = 3, 7, 40, 0.8
    buffer = EpisodicReplayBuffer(rows * n_envs, OBS, ACT, "cpu", n_envs=n_envs, gamma=gamma, seed=0)
    buffer.value_fn = lambda obs: 0.1 * obs[:, 0]
    stream = Stream(n_envs)
    log = []  # per step: rewards, dones, timeouts, terminal values
    for _ in range(steps):
        rewards = rng.normal(size=n_envs).astype(np.float32)
        u = rng.random(n_envs)
        dones, timeouts = (u < 0.3).astype(int), (u < 0.1).astype(int)
        terminal = rng.integers(-50, 50, n_envs).astype(np.float32)
        stream.step(buffer, rewards.tolist(), dones.tolist(), timeouts.tolist(), terminal.tolist())
        log.append((rewards.astype(np.float64), dones, timeouts, terminal.astype(np.float64)))
    for e in range(n_envs):
        expected_steps = np.full(steps, -1)
        expected_returns = np.full(steps, np.nan)
        start = 0
        for t in range(steps):
            if not log[t][1][e]:
                continue
            g = 0.1 * log[t][3][e] if log[t][2][e] else 0.0
            for s in range(t, start - 1, -1):
                g = log[s][0][e] + gamma * g
                expected_returns[s], expected_steps[s] = g, t - s
            start = t + 1
        stored = range(steps - rows, steps)
        row_of = [s % rows for s in stored]
        np.testing.assert_array_equal(buffer.steps_to_end[row_of, e], expected_steps[list(stored)])
        np.testing.assert_allclose(buffer.returns_to_go[row_of, e], expected_returns[list(stored)], rtol=1e-5)


def test_checkpoint_and_pickle_keep_episodic_info(tmp_path: Any) -> None:
    buffer = EpisodicReplayBuffer(10, OBS, ACT, "cpu", gamma=0.9, seed=0, value_fn=lambda obs: obs[:, 0])
    stream = Stream(1)
    for t in range(4):
        stream.step(buffer, [1.0], [int(t == 2)], [int(t == 2)], terminal=[2.0])
    buffer.save(tmp_path / "b.npz")
    restored = EpisodicReplayBuffer(10, OBS, ACT, "cpu", gamma=0.9, seed=0)
    restored.load(tmp_path / "b.npz")
    np.testing.assert_array_equal(restored.returns_to_go, buffer.returns_to_go)
    np.testing.assert_array_equal(restored.steps_to_end, buffer.steps_to_end)
    stream.step(buffer, [4.0], [1], [0])
    copy = pickle.loads(pickle.dumps(buffer))
    assert copy.value_fn is None
    np.testing.assert_allclose(copy.returns_to_go[3:5, 0], [1 + 0.9 * 4, 4.0])


def test_frame_stack_buffer_bootstraps_from_the_stacked_terminal_observation() -> None:
    space = spaces.Box(0, 255, (2, 1, 1), np.uint8)
    seen = []

    def value_fn(obs: th.Tensor) -> th.Tensor:
        seen.append(obs.clone())
        return obs.float().sum(dim=(1, 2, 3))

    buffer = FrameStackReplayBuffer(
        8,
        space,
        ACT,
        "cpu",
        n_stack=2,
        channels_order="first",
        gamma=0.5,
        episodic_info=True,
        value_fn=value_fn,
        seed=0,
    )
    stack = lambda a, b: np.array([a, b], np.uint8).reshape(1, 2, 1, 1)  # noqa: E731
    buffer.add(stack(0, 3), stack(3, 4), np.zeros(1), np.array([1.0]), np.zeros(1), [{}])
    buffer.add(
        stack(3, 4), stack(4, 6), np.zeros(1), np.array([2.0]), np.ones(1), [{"TimeLimit.truncated": True}]
    )
    assert seen[0].reshape(-1).tolist() == [4, 6]  # the terminal stack, rebuilt from stored frames
    np.testing.assert_allclose(buffer.returns_to_go[:2, 0], [1 + 0.5 * (2 + 0.5 * 10), 2 + 0.5 * 10])
    assert buffer.sample(2).returns_to_go.shape == (2, 1)


def _contents(buffer: Any) -> list[Any]:
    arrays = [buffer.rewards, buffer.dones, buffer.timeouts, buffer.steps_to_end, buffer.returns_to_go]
    return [a.copy() for a in arrays] + [buffer.pos, buffer.n_transitions, buffer._episode_lengths.copy()]


@pytest.mark.parametrize("bad", ["nan", "shape", "raises"])
def test_a_refused_value_fn_result_stores_nothing_and_the_retry_is_stored_once(bad: str) -> None:
    buffer = EpisodicReplayBuffer(20, OBS, ACT, "cpu", n_envs=2, gamma=0.9, seed=0)
    answers = {"nan": th.tensor([np.nan]), "shape": th.zeros(2)}

    def broken(obs: th.Tensor) -> th.Tensor:
        if bad == "raises":
            raise RuntimeError("model not ready")
        return answers[bad]

    stream = Stream(2)
    stream.step(buffer, [1, 2], [0, 0], [0, 0])
    before = _contents(buffer)
    buffer.value_fn = broken
    obs = stream.obs.copy()
    with pytest.raises(ValueError if bad != "raises" else RuntimeError, match=r"value_fn|model"):
        stream.step(buffer, [2, 1], [0, 1], [0, 1], terminal=[0, 10.0])  # env 1 truncates
    for a, b in zip(before, _contents(buffer)):
        np.testing.assert_array_equal(a, b)
    buffer.value_fn = lambda obs: obs[:, 0]
    stream.obs = obs  # the same step again
    stream.step(buffer, [2, 1], [0, 1], [0, 1], terminal=[0, 10.0])
    assert buffer.pos == 2 and buffer.steps_to_end[:2, 1].tolist() == [1, 0]
    np.testing.assert_allclose(buffer.returns_to_go[:2, 1], [2 + 0.9 * (1 + 0.9 * 10), 1 + 0.9 * 10])


def test_frame_stack_buffer_refusing_a_value_stores_nothing() -> None:
    space = spaces.Box(0, 255, (2, 1, 1), np.uint8)
    buffer = FrameStackReplayBuffer(
        4,
        space,
        ACT,
        "cpu",
        n_stack=2,
        channels_order="first",
        gamma=0.5,
        episodic_info=True,
        value_fn=lambda o: o[:0],
        seed=0,
    )
    stack = lambda a, b: np.array([a, b], np.uint8).reshape(1, 2, 1, 1)  # noqa: E731
    truncated = [{"TimeLimit.truncated": True}]
    for t in range(4):  # full: the next step overwrites row 0
        buffer.add(stack(t, t + 1), stack(t + 1, t + 2), np.zeros(1), np.ones(1), np.zeros(1), [{}])
    before = _contents(buffer), buffer.observations_at(np.arange(4), True), int(buffer._counter[0])
    with pytest.raises(ValueError, match="value_fn"):
        buffer.add(stack(4, 5), stack(5, 6), np.zeros(1), np.ones(1), np.ones(1), truncated)
    after = _contents(buffer), buffer.observations_at(np.arange(4), True), int(buffer._counter[0])
    for a, b in zip([*before[0], *before[1:]], [*after[0], *after[1:]]):
        np.testing.assert_array_equal(a, b)
    buffer.value_fn = lambda o: o.float().sum(dim=(1, 2, 3))
    buffer.add(stack(4, 5), stack(5, 6), np.zeros(1), np.ones(1), np.ones(1), truncated)
    assert int(buffer._counter[0]) == 5 and buffer.pos == 1
    # the episode's last 4 steps are still stored (rows 1, 2, 3, 0): returns 1 + 0.5 * (...) + V = 11
    np.testing.assert_allclose(buffer.returns_to_go[0, 0], 1 + 0.5 * 11)
    np.testing.assert_allclose(buffer.returns_to_go[3, 0], 1 + 0.5 * (1 + 0.5 * 11))


def test_episodic_arguments_are_checked() -> None:
    with pytest.raises(TypeError, match="episodic_info"):
        EpisodicReplayBuffer(8, OBS, ACT, "cpu", episodic_info=False)
    with pytest.raises(TypeError, match="value_fn"):
        EpisodicReplayBuffer(8, OBS, ACT, "cpu", value_fn=3)
    with pytest.raises(TypeError, match="episodic_info"):
        FrameStackReplayBuffer(
            8, spaces.Box(0, 255, (2, 3, 3), np.uint8), ACT, "cpu", n_stack=2, episodic_info=1
        )
    buffer = EpisodicReplayBuffer(8, OBS, ACT, "cpu", value_fn=lambda obs: obs[:, 0] * np.inf)
    with pytest.raises(ValueError, match="value_fn"):
        Stream(1).step(buffer, [1.0], [1], [1], terminal=[1.0])
