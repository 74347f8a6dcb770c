"""SharedReplayBuffer: writers in other processes, no torn transitions under concurrent writes."""

from __future__ import annotations

import multiprocessing
import pickle
from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from stable_baselines3 import DQN
from stable_baselines3.common.vec_env import SubprocVecEnv

from plr_gym.replay import ReplayWriterWrapper, SharedReplayBuffer, SharedReplayWriter

OBS = spaces.Box(-np.inf, np.inf, (2048,), np.float32)  # large rows: a write takes a while
ACT = spaces.Discrete(1_000_000)


def write_many(writer: SharedReplayWriter, writer_id: int, steps: int) -> None:
    for t in range(steps):
        v = float(writer_id * 100_000 + t)
        obs = np.full(OBS.shape, v, np.float32)
        writer.add(obs, obs + 0.5, int(v), v, terminated=t % 7 == 0, truncated=t % 11 == 0)
    writer.close()


def check_batch(batch: Any) -> int:
    obs = batch.observations.numpy()
    v = obs[:, 0]
    assert (obs == v[:, None]).all(), "torn observation"
    assert (batch.next_observations.numpy() == v[:, None] + 0.5).all(), "torn next observation"
    assert (batch.actions.numpy()[:, 0] == v).all()
    assert (batch.rewards.numpy()[:, 0] == v).all()
    t = v.astype(np.int64) % 100_000
    # dones exclude timeouts: terminated, or both flags at once (a termination wins)
    assert (batch.dones.numpy()[:, 0] == (t % 7 == 0)).all()
    return len(v)


def test_concurrent_writers_never_produce_torn_samples() -> None:
    ctx = multiprocessing.get_context("fork")
    buffer = SharedReplayBuffer(2 * 500, OBS, ACT, "cpu", n_envs=2, local_add=False, seed=0)
    steps = 3000  # each column wraps around six times while the learner samples
    procs = [ctx.Process(target=write_many, args=(buffer.writer(i), i, steps)) for i in range(2)]
    for p in procs:
        p.start()
    checked = 0
    while any(p.is_alive() for p in procs) or checked == 0:
        if buffer.n_transitions:
            checked += check_batch(buffer.sample(64))
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert checked > 0
    assert buffer.counts.tolist() == [steps, steps]
    assert buffer.n_transitions == 1000
    check_batch(buffer.sample(256))
    # each column holds its newest 500 steps
    assert sorted(buffer.observations[:, 0, 0].astype(int).tolist()) == list(range(2500, 3000))
    buffer.close()


def test_local_add_matches_sb3_semantics_and_local_add_false_ignores_calls() -> None:
    space = spaces.Box(-1, 1, (3,), np.float32)
    buffer = SharedReplayBuffer(8, space, spaces.Discrete(4), "cpu", n_envs=2, seed=0)
    obs = np.arange(6, dtype=np.float32).reshape(2, 3)
    infos = [{"TimeLimit.truncated": True}, {}]
    buffer.add(obs, obs + 1, np.array([[1], [2]]), np.array([0.5, 1.5]), np.array([1.0, 1.0]), infos)
    assert buffer.counts.tolist() == [1, 1]
    np.testing.assert_array_equal(buffer.observations[0], obs)
    assert buffer.timeouts[0].tolist() == [1.0, 0.0]
    batch = buffer.sample(50)
    assert set(batch.dones[:, 0].tolist()) <= {0.0, 1.0}
    assert ((batch.rewards[:, 0] == 0.5) == (batch.dones[:, 0] == 0.0)).all()  # env 0's done was a timeout
    copy = pickle.loads(pickle.dumps(buffer))
    assert copy.name != buffer.name
    np.testing.assert_array_equal(copy.observations, buffer.observations)
    ignoring = SharedReplayBuffer(8, space, spaces.Discrete(4), "cpu", n_envs=2, local_add=False, seed=0)
    ignoring.add(obs, obs + 1, np.array([[1], [2]]), np.ones(2), np.zeros(2), [{}, {}])
    assert ignoring.n_transitions == 0
    with pytest.raises(ValueError, match="empty"):
        ignoring.sample(1)
    with pytest.raises(ValueError, match="env_index"):
        ignoring.writer(2)
    for b in (buffer, copy, ignoring):
        b.close()


@pytest.mark.parametrize("handle", [True, False])
def test_writer_stores_timeouts_as_local_add_does(handle: bool) -> None:
    # (terminated, truncated) per step; local add() gets done = terminated or truncated and the flag in infos
    flags = [(False, True), (True, False), (True, True), (False, False)]
    space = spaces.Box(-1, 1, (1,), np.float32)
    local = SharedReplayBuffer(8, space, spaces.Discrete(2), "cpu", handle_timeout_termination=handle)
    remote = SharedReplayBuffer(
        8, space, spaces.Discrete(2), "cpu", local_add=False, handle_timeout_termination=handle
    )
    writer = remote.writer(0)
    assert writer.handle_timeout_termination is handle
    for t, (term, trunc) in enumerate(flags):
        obs = np.full((1, 1), t / 10, np.float32)
        info = {"TimeLimit.truncated": trunc and not term}  # Gymnasium/SB3: set only for a pure timeout
        local.add(obs, obs, np.array([[0]]), np.array([1.0]), np.array([float(term or trunc)]), [info])
        writer.add(obs[0], obs[0], 0, 1.0, terminated=term, truncated=trunc)
    writer.close()
    expected = [1.0, 0.0, 0.0, 0.0] if handle else [0.0, 0.0, 0.0, 0.0]
    assert local.timeouts[:4, 0].tolist() == expected
    assert remote.timeouts[:4, 0].tolist() == expected
    np.testing.assert_array_equal(remote.dones, local.dones)
    for b in (local, remote):
        b.close()


class CountingEnv(gym.Env[np.ndarray, int]):
    """Observation = step counter within the episode; episodes of 5 steps (terminated)."""

    observation_space = spaces.Box(0, 100, (1,), np.float32)
    action_space = spaces.Discrete(2)

    def reset(self, *, seed: Any = None, options: Any = None) -> Any:
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action: int) -> Any:
        self.t += 1
        return np.full(1, self.t, np.float32), float(self.t), self.t == 5, False, {}


def make_writer_env(writer: SharedReplayWriter) -> gym.Env[Any, Any]:
    return ReplayWriterWrapper(CountingEnv(), writer)


def test_subproc_workers_fill_the_buffer_for_dqn() -> None:
    env = CountingEnv()
    buffer = SharedReplayBuffer(
        400, env.observation_space, env.action_space, "cpu", n_envs=2, local_add=False
    )
    fns = [partial(make_writer_env, buffer.writer(i)) for i in range(2)]
    venv = SubprocVecEnv(fns, start_method="fork")
    try:
        model = DQN(
            "MlpPolicy", venv, buffer_size=400, learning_starts=10, batch_size=16, seed=0, device="cpu"
        )
        model.replay_buffer = buffer
        model.learn(60)
    finally:
        venv.close()
    assert buffer.counts.tolist() == [model.num_timesteps // 2] * 2  # every step, written by the workers
    batch = buffer.sample(64)
    obs, nxt = batch.observations[:, 0], batch.next_observations[:, 0]
    assert ((nxt == obs + 1) & (batch.rewards[:, 0] == nxt)).all()
    assert ((batch.dones[:, 0] == 1) == (nxt == 5)).all()
    buffer.close()
