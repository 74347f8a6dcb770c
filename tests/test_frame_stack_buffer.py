"""FrameStackReplayBuffer: stacks rebuilt at sample time equal VecFrameStack's (PER, n-step, wrap-around)."""

from __future__ import annotations

import pickle
from typing import Any, Callable

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from gymnasium.wrappers import FrameStackObservation
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv, VecFrameStack

from plr_gym.replay import PERDQN, FrameStackReplayBuffer, PrioritizedReplayBuffer

pytestmark = pytest.mark.filterwarnings("ignore:.*without update_priorities.*:UserWarning")

ACT = spaces.Discrete(2)


class FrameEnv(gym.Env[np.ndarray, int]):
    """Random uint8 frames; terminates with prob. 0.15 and truncates with prob. 0.1 per step."""

    def __init__(self, shape: tuple[int, ...], seed: int) -> None:
        self.observation_space = spaces.Box(0, 255, shape, np.uint8)
        self.action_space = spaces.Discrete(2)
        self._rng = np.random.default_rng(seed)

    def _frame(self) -> np.ndarray:
        return self._rng.integers(1, 256, self.observation_space.shape, dtype=np.uint8)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        return self._frame(), {}

    def step(self, action: int) -> Any:
        u = self._rng.random()
        return self._frame(), float(self._rng.normal()), bool(u < 0.15), bool(0.15 <= u < 0.25), {}


def vec_env(
    shape: tuple[int, ...], n_envs: int, wrap: Callable[[gym.Env[Any, Any]], Any] | None = None
) -> VecEnv:
    def make(i: int) -> Callable[[], gym.Env[Any, Any]]:
        return lambda: FrameEnv(shape, 100 + i) if wrap is None else wrap(FrameEnv(shape, 100 + i))

    return DummyVecEnv([make(i) for i in range(n_envs)])


def rollout(venv: VecEnv, buffers: list[Any], steps: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Feed ``buffers`` as SB3's ``_store_transition`` does; return every step's (obs, next_obs)."""
    history = []
    obs = venv.reset()
    rng = np.random.default_rng(0)
    for _ in range(steps):
        actions = rng.integers(0, 2, venv.num_envs)
        new_obs, rewards, dones, infos = venv.step(actions)
        next_obs = new_obs.copy()
        for i, done in enumerate(dones):
            if done and infos[i].get("terminal_observation") is not None:
                next_obs[i] = infos[i]["terminal_observation"]
        for buffer in buffers:
            buffer.add(obs, next_obs, actions, rewards, dones, infos)
        history.append((obs.copy(), next_obs.copy()))
        obs = new_obs
    return history


def stored_reference(
    history: list[tuple[np.ndarray, np.ndarray]], size: int, n_envs: int
) -> tuple[np.ndarray, np.ndarray]:
    """The stacks the buffer's slots should hold: row r holds the newest step t with t % size == r."""
    steps = len(history)
    rows = min(steps, size)
    obs = np.stack([history[t][0] for t in range(steps)])
    nxt = np.stack([history[t][1] for t in range(steps)])
    order = [max(t for t in range(steps) if t % size == r) for r in range(rows)]
    flat = lambda a: a[order].reshape(rows * n_envs, *a.shape[2:])  # noqa: E731
    return flat(obs), flat(nxt)


@pytest.mark.parametrize(
    "shape", [(1, 6, 5), (6, 5, 1), (6, 5, 3), (4,)], ids=["chw", "hwc", "hwc-rgb", "vector"]
)
def test_stacks_equal_vec_frame_stack_across_episode_ends_and_wraparound(shape: tuple[int, ...]) -> None:
    venv = VecFrameStack(vec_env(shape, 3), n_stack=4)
    size = 30  # 10 rows per env; 53 steps wrap around five times
    buffer = FrameStackReplayBuffer(size, venv.observation_space, ACT, "cpu", n_envs=3, n_stack=4, seed=0)
    history = rollout(venv, [buffer], 53)
    dones = buffer.dones.sum()
    assert dones >= 3  # episode ends inside the stored window
    ref_obs, ref_next = stored_reference(history, 10, 3)
    slots = np.arange(buffer.n_transitions)
    np.testing.assert_array_equal(buffer.observations_at(slots), ref_obs)
    np.testing.assert_array_equal(buffer.observations_at(slots, next_obs=True), ref_next)
    # Padding really occurs: some stored stacks start with zero frames (VecFrameStack after a reset).
    assert (ref_obs.reshape(len(slots), -1) == 0).any(axis=1).sum() > 0


def test_first_frame_padding_equals_gymnasium_frame_stack_observation() -> None:
    wrap = lambda env: FrameStackObservation(env, 3, padding_type="reset")  # noqa: E731
    venv = vec_env((5, 4), 2, wrap)  # frames (5, 4) stacked on a new first axis: (3, 5, 4)
    buffer = FrameStackReplayBuffer(
        16,
        venv.observation_space,
        ACT,
        "cpu",
        n_envs=2,
        n_stack=3,
        channels_order="first",
        padding="first",
        seed=0,
    )
    history = rollout(venv, [buffer], 29)
    ref_obs, ref_next = stored_reference(history, 8, 2)
    slots = np.arange(buffer.n_transitions)
    np.testing.assert_array_equal(buffer.observations_at(slots), ref_obs)
    np.testing.assert_array_equal(buffer.observations_at(slots, next_obs=True), ref_next)


@pytest.mark.parametrize("prioritization", ["proportional", "rank"])
def test_nstep_per_samples_equal_the_unstacked_buffer(prioritization: str) -> None:
    venv = VecFrameStack(vec_env((1, 4, 4), 2), n_stack=4)
    kwargs: dict[str, Any] = dict(n_envs=2, n_steps=3, gamma=0.9, prioritization=prioritization, seed=5)
    stacked = FrameStackReplayBuffer(24, venv.observation_space, ACT, "cpu", n_stack=4, **kwargs)
    plain = PrioritizedReplayBuffer(24, venv.observation_space, ACT, "cpu", **kwargs)
    rollout(venv, [stacked, plain], 37)
    rng = np.random.default_rng(1)
    for _ in range(5):
        a, b = stacked.sample(16), plain.sample(16)
        for field in (
            "observations",
            "next_observations",
            "actions",
            "rewards",
            "dones",
            "discounts",
            "weights",
        ):
            assert th.equal(getattr(a, field), getattr(b, field)), field
        np.testing.assert_array_equal(a.indices, b.indices)
        priorities = rng.random(16)
        stacked.update_priorities(a.indices, priorities)
        plain.update_priorities(b.indices, priorities)
    seq_a, seq_b = stacked.sample_sequences(4, 5), plain.sample_sequences(4, 5)
    assert th.equal(seq_a.observations, seq_b.observations)
    assert th.equal(seq_a.next_observations, seq_b.next_observations)


def test_save_load_round_trip_resumes_identically(tmp_path: Any) -> None:
    venv = VecFrameStack(vec_env((1, 4, 4), 2), n_stack=2)
    make = lambda: FrameStackReplayBuffer(20, venv.observation_space, ACT, "cpu", n_envs=2, n_stack=2, seed=3)  # noqa: E731
    buffer = make()
    rollout(venv, [buffer], 27)
    buffer.save(tmp_path / "buf.npz")
    restored = make()
    restored.load(tmp_path / "buf.npz")
    slots = np.arange(buffer.n_transitions)
    np.testing.assert_array_equal(restored.observations_at(slots, True), buffer.observations_at(slots, True))
    a, b = buffer.sample(8), restored.sample(8)
    assert th.equal(a.observations, b.observations) and th.equal(a.next_observations, b.next_observations)
    # Both continue: terminal frames are allocated and freed the same way after loading.
    more = vec_env((1, 4, 4), 2)
    stacked_more = VecFrameStack(more, n_stack=2)
    hist = rollout(stacked_more, [buffer, restored], 15)
    assert len(hist) == 15
    np.testing.assert_array_equal(restored.observations_at(slots, True), buffer.observations_at(slots, True))
    copy = pickle.loads(pickle.dumps(buffer))  # SB3's save_replay_buffer pickles the buffer
    np.testing.assert_array_equal(copy.observations_at(slots), buffer.observations_at(slots))
    buffer.reset()
    assert buffer.n_transitions == 0 and buffer.nbytes < copy.nbytes
    rollout(stacked_more, [buffer], 3)  # after reset() the first step may again be mid-episode
    assert buffer.n_transitions == 6
    other = FrameStackReplayBuffer(
        20, venv.observation_space, ACT, "cpu", n_envs=2, n_stack=2, padding="first"
    )
    with pytest.raises(ValueError, match="padding"):
        other.load(tmp_path / "buf.npz")


def _crafted(case: str, data: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    data = dict(data)
    detached = data["frame_detached"].copy()
    held = np.flatnonzero(detached.reshape(-1) >= 0)
    if case == "detached-beyond-pool":
        detached.reshape(-1)[held[0]] = data["frame_pool"].shape[0]
    elif case == "detached-below-minus-one":
        detached.reshape(-1)[held[0]] = -2
    elif case == "detached-twice":
        detached.reshape(-1)[held[1]] = detached.reshape(-1)[held[0]]
    elif case == "offset-too-large":
        offsets = data["frame_offsets"].copy()
        offsets[0, 0] = 2  # n_stack = 2
        data["frame_offsets"] = offsets
    elif case == "counter-not-pos":
        data["frame_counter"] = data["frame_counter"] + 1
    elif case == "counter-below-full":
        data["frame_counter"] = data["pos"].reshape(1).astype(np.int64)  # full, yet fewer steps than rows
    data["frame_detached"] = detached
    return data


CRAFTED = [
    "detached-beyond-pool",
    "detached-below-minus-one",
    "detached-twice",
    "offset-too-large",
    "counter-not-pos",
    "counter-below-full",
    "truncated-file",
]


@pytest.mark.parametrize("case", CRAFTED)
def test_load_refuses_crafted_frame_bookkeeping_and_stays_unchanged(tmp_path: Any, case: str) -> None:
    venv = VecFrameStack(vec_env((1, 4, 4), 2), n_stack=2)
    make = lambda: FrameStackReplayBuffer(20, venv.observation_space, ACT, "cpu", n_envs=2, n_stack=2, seed=3)  # noqa: E731
    saved = make()
    rollout(venv, [saved], 27)  # full (10 rows per env), with episode ends: terminal frames in the pool
    assert saved.full and (saved._detached >= 0).sum() >= 2
    saved.save(tmp_path / "buf.npz")
    path = tmp_path / "bad.npz"
    if case == "truncated-file":
        path.write_bytes((tmp_path / "buf.npz").read_bytes()[:1000])
    else:
        data = dict(np.load(tmp_path / "buf.npz"))
        np.savez(path, **_crafted(case, data))
    live = make()
    rollout(VecFrameStack(vec_env((1, 4, 4), 2), n_stack=2), [live], 7)
    slots = np.arange(live.n_transitions)
    before = (live.observations_at(slots), live.observations_at(slots, True), live._pool.copy(), live.pos)
    with pytest.raises(ValueError, match=r"cannot load|not a readable"):
        live.load(path)
    after = (live.observations_at(slots), live.observations_at(slots, True), live._pool, live.pos)
    for a, b in zip(before, after):
        np.testing.assert_array_equal(a, b)
    live.load(tmp_path / "buf.npz")  # the genuine file still loads
    every = np.arange(saved.n_transitions)
    np.testing.assert_array_equal(live.observations_at(every, True), saved.observations_at(every, True))


class RefusedFirst:
    """Before each valid step, tries steps the buffer must refuse, and checks that each changed nothing."""

    def __init__(self, buffer: FrameStackReplayBuffer) -> None:
        self.buffer = buffer
        self.refused = 0

    def state(self) -> list[Any]:
        b = self.buffer
        slots = np.arange(b.n_transitions)
        return [b.observations_at(slots), b.observations_at(slots, True), b.pos, b.full, b._counter.copy()]

    def add(self, obs: Any, next_obs: Any, action: Any, reward: Any, done: Any, infos: Any) -> None:
        before = self.state()
        too_big = [dict(i) for i in infos]
        too_big[-1]["level"] = 2**64
        unpadded_obs, unpadded_next = obs.copy(), next_obs.copy()
        unpadded_obs[-1] = 7  # a new episode (not the previous next_obs) whose older frame is not zero
        unpadded_next[-1, 0] = 7  # still obs shifted by one frame
        bad_steps = [
            ((obs, next_obs, action, reward, done, too_big), "level"),
            ((unpadded_obs, unpadded_next, action, reward, done, infos), "padding"),
            ((obs, next_obs, action, reward, np.zeros(len(done) + 1), infos), "done"),
            ((obs, next_obs, np.zeros(len(done) + 1), reward, done, infos), "action"),
        ]
        if self.buffer._counter[0] == 0:  # the very first step may be mid-episode: no padding check
            del bad_steps[1]
        for args, message in bad_steps:
            with pytest.raises(ValueError, match=message):
                self.buffer.add(*args)
            self.refused += 1
            for a, b in zip(before, self.state()):
                np.testing.assert_array_equal(a, b)
        self.buffer.add(obs, next_obs, action, reward, done, infos)


def test_a_refused_add_changes_nothing_and_the_valid_retry_is_stored_once() -> None:
    space = VecFrameStack(vec_env((1, 4, 4), 2), n_stack=2).observation_space
    make = lambda: FrameStackReplayBuffer(20, space, ACT, "cpu", n_envs=2, n_stack=2, seed=3)  # noqa: E731
    reference, tested = make(), make()
    meddler = RefusedFirst(tested)
    venv = VecFrameStack(vec_env((1, 4, 4), 2), n_stack=2)
    rollout(venv, [reference, meddler], 27)  # wraps around: refused steps meet rows holding terminal frames
    rollout(venv, [reference, meddler], 4)  # rollout() resets: every env starts an episode without a done
    assert meddler.refused == 4 * 31 - 1 and tested.full
    assert (tested._detached >= 0).sum() == 2  # an episode end, and a reset without a done (env 0)
    slots = np.arange(reference.n_transitions)
    for next_obs in (False, True):
        np.testing.assert_array_equal(
            tested.observations_at(slots, next_obs), reference.observations_at(slots, next_obs)
        )
    assert (tested.pos, int(tested._counter[0])) == (reference.pos, int(reference._counter[0])) == (1, 31)
    np.testing.assert_array_equal(tested._detached, reference._detached)
    a, b = reference.sample(16), tested.sample(16)
    assert th.equal(a.observations, b.observations) and th.equal(a.next_observations, b.next_observations)


def test_reset_without_done_starts_a_new_episode_and_keeps_the_old_next_frame() -> None:
    venv = VecFrameStack(vec_env((1, 3, 3), 1), n_stack=3)
    buffer = FrameStackReplayBuffer(50, venv.observation_space, ACT, "cpu", n_stack=3, seed=0)
    history = rollout(venv, [buffer], 6)
    history += rollout(venv, [buffer], 6)  # rollout() resets the env first, as SB3's learn() does
    obs = np.concatenate([h[0] for h in history])
    nxt = np.concatenate([h[1] for h in history])
    np.testing.assert_array_equal(buffer.observations_at(np.arange(12)), obs)
    np.testing.assert_array_equal(buffer.observations_at(np.arange(12), next_obs=True), nxt)


def test_bad_input_is_rejected() -> None:
    space = spaces.Box(0, 255, (4, 5, 5), np.uint8)
    with pytest.raises(ValueError, match="n_stack"):
        FrameStackReplayBuffer(8, space, ACT, "cpu", n_stack=3)
    with pytest.raises(ValueError, match="padding"):
        FrameStackReplayBuffer(8, space, ACT, "cpu", padding="edge")
    with pytest.raises(ValueError, match="channels_order"):
        FrameStackReplayBuffer(8, space, ACT, "cpu", channels_order="middle")
    with pytest.raises(TypeError, match="Box"):
        FrameStackReplayBuffer(8, spaces.Discrete(3), ACT, "cpu")
    buffer = FrameStackReplayBuffer(8, space, ACT, "cpu", n_stack=4, seed=0)
    zeros = np.zeros((1, 4, 5, 5), np.uint8)
    with pytest.raises(ValueError, match="shape"):
        buffer.add(zeros[:, :2], zeros, np.zeros(1), np.zeros(1), np.zeros(1), [{}])
    stack = np.arange(100, dtype=np.uint8).reshape(1, 4, 5, 5)
    with pytest.raises(ValueError, match="shifted"):
        buffer.add(stack, stack, np.zeros(1), np.zeros(1), np.zeros(1), [{}])
    shifted = np.concatenate([stack[:, 1:], stack[:, :1]], axis=1)
    buffer.add(stack, shifted, np.zeros(1), np.zeros(1), np.ones(1), [{}])
    with pytest.raises(ValueError, match="padding"):  # a new episode must start with zero frames
        buffer.add(stack, shifted, np.zeros(1), np.zeros(1), np.zeros(1), [{}])
    with pytest.raises(ValueError, match="indices"):
        buffer.observations_at(np.array([1]))


def test_memory_is_under_a_third_of_stacked_storage() -> None:
    space = spaces.Box(0, 255, (4, 84, 84), np.uint8)
    buffer = FrameStackReplayBuffer(10_000, space, ACT, "cpu", n_stack=4, seed=0)
    sb3_obs_bytes = 2 * 10_000 * 4 * 84 * 84  # observations + next_observations in SB3's ReplayBuffer
    assert buffer.nbytes < sb3_obs_bytes / 3
    assert buffer.observations.nbytes == 0 and buffer.next_observations.nbytes == 0


def test_perdqn_learns_with_frame_stack_buffer() -> None:
    venv = VecFrameStack(vec_env((1, 6, 6), 2), n_stack=4)
    model = PERDQN(
        "MlpPolicy",
        venv,
        buffer_size=200,
        learning_starts=20,
        batch_size=8,
        train_freq=4,
        replay_buffer_class=FrameStackReplayBuffer,
        replay_buffer_kwargs=dict(n_stack=4, n_steps=2),
        policy_kwargs=dict(net_arch=[16]),
        seed=0,
        device="cpu",
    )
    model.learn(150)
    model.learn(60)  # learn() resets the envs without a done; the buffer starts new episodes
    buffer = model.replay_buffer
    assert isinstance(buffer, FrameStackReplayBuffer)
    assert buffer.n_transitions == 200  # 210 steps in 100 rows x 2 envs: wrapped around
    assert not np.allclose(buffer.priorities, 1.0)  # PERDQN fed TD errors back
