"""SharedReplayBuffer: writers in other processes, no torn transitions under concurrent writes."""

from __future__ import annotations

import multiprocessing
import os
import pickle
import signal
import threading
import time
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


# ---------------------------------------------------------------------------------- a writer that dies


BIG = spaces.Box(-np.inf, np.inf, (20_000,), np.float32)  # 80 kB rows: a write takes a while


def sample_within(buffer: SharedReplayBuffer, n: int, timeout: float = 20.0) -> Any:
    """``buffer.sample(n)`` in a thread; fails if it has not returned after ``timeout`` seconds."""
    out: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: out.setdefault("batch", buffer.sample(n)), daemon=True)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), "sample() blocked: the dead writer's lock was never released"
    return out["batch"]


def check_rows(batch: Any) -> None:
    obs, nxt = batch.observations.numpy(), batch.next_observations.numpy()
    v = obs[:, 0]
    assert (obs == v[:, None]).all() and (nxt == v[:, None] + 0.5).all(), "torn transition sampled"
    assert (batch.rewards.numpy()[:, 0] == v).all()


def stall_in_next_obs_and_wait(writer: SharedReplayWriter, ready: Any) -> None:
    """Child: write one transition, stalling (holding the lock) after its obs overwrote a live row."""

    class Stall:
        def __setitem__(self, key: Any, value: Any) -> None:
            ready.set()
            time.sleep(120)

    arrays = writer._open()
    arrays["next_observations"] = Stall()  # type: ignore[assignment]
    obs = np.full(BIG.shape, 999.0, np.float32)
    writer.add(obs, obs + 0.5, 0, 999.0, terminated=False, truncated=False)


def write_forever(writer: SharedReplayWriter, start: int) -> None:
    t = start
    while True:
        v = float(t)
        obs = np.full(BIG.shape, v, np.float32)
        writer.add(obs, obs + 0.5, 0, v, terminated=False, truncated=False)
        t += 1


def fill(buffer: SharedReplayBuffer, column: int, values: range) -> None:
    writer = buffer.writer(column)
    for v in values:
        obs = np.full(BIG.shape, float(v), np.float32)
        writer.add(obs, obs + 0.5, 0, float(v), terminated=False, truncated=False)
    writer.close()


def test_writer_killed_while_holding_the_lock_neither_blocks_nor_tears_samples() -> None:
    ctx = multiprocessing.get_context("fork")
    buffer = SharedReplayBuffer(8, BIG, spaces.Discrete(2), "cpu", local_add=False, seed=0)
    fill(buffer, 0, range(8))  # full: the next write overwrites a live row
    ready = ctx.Event()
    proc = ctx.Process(target=stall_in_next_obs_and_wait, args=(buffer.writer(0), ready))
    proc.start()
    assert ready.wait(60), "the writer never reached the middle of its row"
    os.kill(proc.pid, signal.SIGKILL)  # dies holding the column's lock, its row half written
    proc.join(30)
    assert proc.exitcode == -signal.SIGKILL
    batch = sample_within(buffer, 64)
    check_rows(batch)
    assert 999.0 not in batch.observations[:, 0].tolist()
    assert set(batch.observations[:, 0].tolist()) == set(map(float, range(1, 8)))  # row of 0 is torn
    assert buffer.n_transitions == 7 and buffer.size() == 7
    fill(buffer, 0, range(100, 101))  # the next write replaces the torn row
    assert buffer.n_transitions == 8
    assert set(sample_within(buffer, 96).observations[:, 0].tolist()) == {*map(float, range(1, 8)), 100.0}
    buffer.close()


def test_writers_killed_at_random_moments_never_block_the_learner() -> None:
    ctx = multiprocessing.get_context("fork")
    rng = np.random.default_rng(0)
    buffer = SharedReplayBuffer(2 * 6, BIG, spaces.Discrete(2), "cpu", n_envs=2, local_add=False, seed=0)
    fill(buffer, 0, range(6))
    fill(buffer, 1, range(1000, 1006))
    for trial in range(10):
        procs = [
            ctx.Process(target=write_forever, args=(buffer.writer(e), 10_000 * (trial + 1) + 1000 * e))
            for e in (0, 1)
        ]
        for p in procs:
            p.start()
        time.sleep(float(rng.uniform(0.02, 0.1)))
        for p in procs:
            os.kill(p.pid, signal.SIGKILL)
            p.join(30)
        check_rows(sample_within(buffer, 32))
        assert 10 <= buffer.n_transitions <= 12
    buffer.close()


def test_refused_writer_and_local_steps_store_nothing() -> None:
    space = spaces.Box(-1, 1, (3,), np.float32)
    buffer = SharedReplayBuffer(4, space, spaces.Discrete(2), "cpu", n_envs=2, seed=0)
    writer = buffer.writer(0)
    good = np.zeros(3, np.float32)
    for kwargs in (
        {"next_obs": np.zeros(2, np.float32)},
        {"obs": np.ma.masked_array(good)},
        {"reward": float("nan")},
        {"reward": 1 + 2j},
        {"obs": good + 1j},
    ):
        step = {"obs": good, "next_obs": good, "action": 0, "reward": 0.0, **kwargs}
        with pytest.raises((TypeError, ValueError), match=next(iter(kwargs))):
            writer.add(step["obs"], step["next_obs"], step["action"], step["reward"], False, False)
    two = np.zeros((2, 3), np.float32)
    with pytest.raises(ValueError, match="next_obs"):
        buffer.add(two, two[:1], np.zeros((2, 1)), np.zeros(2), np.zeros(2), [{}, {}])
    with pytest.raises(ValueError, match="reward"):
        buffer.add(two, two, np.zeros((2, 1)), np.array([0.0, np.nan]), np.zeros(2), [{}, {}])
    assert buffer.counts.tolist() == [0, 0] and buffer.writing.tolist() == [-1, -1]
    writer.close()
    buffer.close()
