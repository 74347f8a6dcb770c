"""Issue 24's bad-input findings: level ids out of range, checkpoints that load and then break sampling,
bit flips, torn PER steps, garbage pushed to the Ray actor, unclear errors and silent accepts.

Each test failed before its fix (the finding it is named after).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

import reliability_objects as ro
from plr_gym import LevelSampler, LevelWrapper, PrioritizedReplayBuffer
from plr_gym.checkpoint import load_npz, save_npz

# ---------------------------------------------------------------------------------- level ids


@pytest.mark.parametrize(
    "levels",
    [
        range(2**63 - 2, 2**63 + 2),  # used to wrap to negative ids
        [-3, 1],
        range(-1, 3),
        np.array([0, -1]),
        np.array([2**63], dtype=np.uint64),
        [2**63],
        [2**64 + 5],
    ],
    ids=["range-beyond-int64", "negative-list", "negative-range", "negative-array", "uint64", "big", "huge"],
)
def test_sampler_refuses_level_ids_outside_the_accepted_range(levels: Any) -> None:
    with pytest.raises(ValueError, match=r"levels must be int level ids in \[0, 2\*\*63 - 1\]"):
        LevelSampler(levels)


def test_the_largest_level_ids_are_accepted_exactly() -> None:
    from plr_gym._levels import MAX_LEVEL_ID, check_level_id, check_level_ids

    s = LevelSampler(range(2**63 - 3, 2**63), seed=0)
    assert s.levels.tolist() == [2**63 - 3, 2**63 - 2, 2**63 - 1]
    assert {int(v) for v in s.sample(20)} <= set(s.levels.tolist())
    assert check_level_id(MAX_LEVEL_ID) == MAX_LEVEL_ID
    assert check_level_ids(np.array([MAX_LEVEL_ID], dtype=np.uint64)).dtype == np.int64


def test_level_wrapper_refuses_a_negative_level_before_resetting_the_env() -> None:
    calls: list[Any] = []

    class Recording(gym.Wrapper[Any, Any, Any, Any]):
        def reset(self, **kw: Any) -> Any:
            calls.append(kw)
            return self.env.reset(**kw)

    env = LevelWrapper(Recording(gym.make("CartPole-v1")))
    for bad in (-1, 2**63):
        with pytest.raises(ValueError, match=r"options\['level'\] must be an int level id in \[0, 2\*\*63"):
            env.reset(options={"level": bad})
        with pytest.raises(ValueError, match=r"next_level must be an int level id in \[0, 2\*\*63 - 1\]"):
            env.next_level = bad
    assert calls == []
    env.reset(options={"level": 3})
    assert env.level == 3


def test_per_refuses_a_negative_level_other_than_unknown() -> None:
    b = PrioritizedReplayBuffer(4, spaces.Box(-1, 1, (2,)), spaces.Discrete(2), device="cpu", seed=0)
    o = np.zeros((1, 2), np.float32)
    with pytest.raises(ValueError, match=r"level"):
        b.add(o, o, np.zeros((1, 1)), np.zeros(1), np.zeros(1), [{"level": -2}])
    assert b.size() == 0


# ---------------------------------------------------------------------------------- sampler counters


def _sampler_file(tmp_path: Path, **changes: Any) -> Path:
    ro.make_sampler(30).save(tmp_path / "s.npz")
    data = load_npz(tmp_path / "s.npz")
    meta = json.loads(str(data["meta"]))
    meta.update(changes)
    save_npz(tmp_path / "crafted.npz", {**data, "meta": np.array(json.dumps(meta))})
    return tmp_path / "crafted.npz"


@pytest.mark.parametrize("num_samples", [2**63 - 1, 2**53 + 1])
def test_sampler_checkpoint_with_a_counter_beyond_its_limit_is_refused(
    tmp_path: Path, num_samples: int
) -> None:
    path = _sampler_file(tmp_path, num_samples=num_samples)
    with pytest.raises(ValueError, match="num_samples"):
        LevelSampler.load(path)
    live = ro.make_sampler(12)
    before = live.state_dict()
    with pytest.raises(ValueError, match="num_samples"):
        live.load_from(path)
    assert ro.same(live.state_dict(), before)


def test_sample_at_the_counter_limit_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    s = ro.make_sampler(30)
    limit = s.max_samples
    assert limit == 2**53
    state = s.state_dict()
    last = np.asarray(state["last_sampled"])
    state["num_samples"] = limit - 2  # loadable: two draws left
    state["last_sampled"] = np.where(last > 0, last + limit - 2 - 30, 0)
    s.load_state_dict(state)
    before = s.state_dict()
    for n in (3, 100):
        with pytest.raises(ValueError, match=r"n=\d+ draws would take num_samples"):
            s.sample(n)
        assert ro.same(s.state_dict(), before)
    drawn = s.sample(2)
    assert s.num_samples == limit and drawn.shape == (2,)
    with pytest.raises(ValueError, match="num_samples"):
        s.sample()
    assert s.num_samples == limit


def test_sample_n_interrupted_part_way_is_undone(monkeypatch: pytest.MonkeyPatch) -> None:
    s = ro.make_sampler(40)
    before = s.state_dict()
    twin = ro.make_sampler(40)
    calls = {"n": 0}
    original = LevelSampler._mark_sampled

    def interrupt_fifth(self: LevelSampler, i: int) -> None:
        calls["n"] += 1
        if calls["n"] == 5:
            raise KeyboardInterrupt
        original(self, i)

    monkeypatch.setattr(LevelSampler, "_mark_sampled", interrupt_fifth)
    with pytest.raises(KeyboardInterrupt):
        s.sample(8)
    monkeypatch.undo()
    assert ro.same(s.state_dict(), before)
    np.testing.assert_array_equal(s.sample(50), twin.sample(50))  # the structures were rebuilt too
    assert s.num_replay_samples + s.num_explore_samples <= s.num_samples


def test_sample_with_a_huge_n_is_a_clear_error() -> None:
    s = LevelSampler(range(4), seed=0)
    for n in (10**12, 2**62):
        with pytest.raises(ValueError, match="n="):
            s.sample(n)
    assert s.num_samples == 0


# ---------------------------------------------------------------------------------- silent accepts


def test_sampler_refuses_masked_arrays() -> None:
    masked = np.ma.masked_array([1, 2], mask=[True, False])
    with pytest.raises(TypeError, match="levels must not be a numpy masked array"):
        LevelSampler(masked)
    s = LevelSampler(range(4), seed=0)
    with pytest.raises(TypeError, match="levels must not be a numpy masked array"):
        s.update_batch(masked, [1.0, 2.0])
    with pytest.raises(TypeError, match="scores must not be a numpy masked array"):
        s.update_batch([1, 2], np.ma.masked_array([1.0, 2.0], mask=[False, True]))
    assert s.num_seen == 0


def test_nan_level_is_refused_everywhere_a_level_is_taken() -> None:
    s = LevelSampler(range(4), seed=0)
    with pytest.raises(TypeError, match="level"):
        s.update(math.nan, 1.0)
    with pytest.raises(TypeError, match="levels"):
        LevelSampler([0, math.nan])
    env = LevelWrapper(gym.make("CartPole-v1"))
    with pytest.raises(ValueError, match="NaN"):
        env.reset(options={"level": math.nan})


# ---------------------------------------------------------------------------------- torn PER steps


def _full_per(kind: str = "per") -> Any:
    from plr_gym.replay import EpisodicReplayBuffer, PrioritizedDictReplayBuffer

    box = spaces.Box(-10, 10, (3,), np.float32)
    if kind == "dict":
        b: Any = PrioritizedDictReplayBuffer(
            4, spaces.Dict({"x": box}), spaces.Discrete(2), device="cpu", seed=0
        )
    elif kind == "episodic":
        b = EpisodicReplayBuffer(4, box, spaces.Discrete(2), device="cpu", seed=0)
    else:
        b = PrioritizedReplayBuffer(4, box, spaces.Discrete(2), device="cpu", seed=0)
    for t in range(4):
        o = np.full((1, 3), t, np.float32)
        obs = {"x": o} if kind == "dict" else o
        nxt = {"x": o + 1} if kind == "dict" else o + 1
        b.add(obs, nxt, np.zeros((1, 1)), np.array([float(t)]), np.zeros(1), [{"level": t}])
    assert b.full
    return b


def _snapshot(b: Any) -> dict[str, Any]:
    obs = b.observations if isinstance(b.observations, dict) else {"": b.observations}
    nxt = b.next_observations if isinstance(b.next_observations, dict) else {"": b.next_observations}
    return {
        "pos": b.pos,
        "full": b.full,
        "obs": {k: v.copy() for k, v in obs.items()},
        "next": {k: v.copy() for k, v in nxt.items()},
        "rewards": b.rewards.copy(),
        "actions": b.actions.copy(),
        "dones": b.dones.copy(),
        "levels": b.levels.copy(),
        "priorities": b.priorities,
    }


GOOD_O = np.full((1, 3), 9, np.float32)
BAD_STEPS: dict[str, dict[str, Any]] = {
    "next_obs of another shape": {"next_obs": np.zeros((1, 2), np.float32)},
    "obs of another shape": {"obs": np.zeros((1, 2), np.float32)},
    "obs without the env axis": {"obs": np.zeros(3, np.float32), "next_obs": np.zeros(3, np.float32)},
    "next_obs strings": {"next_obs": np.array([["a", "b", "c"]])},
    "next_obs masked": {"next_obs": np.ma.masked_array(GOOD_O, mask=True)},
    "next_obs complex": {"next_obs": GOOD_O + 1j},
    "reward NaN": {"reward": np.array([math.nan])},
    "reward inf": {"reward": np.array([math.inf])},
    "reward complex": {"reward": np.array([1 + 2j])},
    "reward masked": {"reward": np.ma.masked_array([1.0], mask=[True])},
    "action NaN": {"action": np.array([[math.nan]])},
    "done strings": {"done": np.array(["yes"])},
}


@pytest.mark.parametrize("kind", ["per", "dict", "episodic"])
@pytest.mark.parametrize("case", sorted(BAD_STEPS))
def test_a_refused_step_leaves_a_full_buffer_exactly_as_it_was(kind: str, case: str) -> None:
    b = _full_per(kind)
    before = _snapshot(b)
    step = {
        "obs": GOOD_O,
        "next_obs": GOOD_O,
        "action": np.zeros((1, 1)),
        "reward": np.zeros(1),
        "done": np.zeros(1),
        **BAD_STEPS[case],
    }
    if kind == "dict":
        step["obs"], step["next_obs"] = {"x": step["obs"]}, {"x": step["next_obs"]}
    with pytest.raises((ValueError, TypeError)) as info:
        b.add(step["obs"], step["next_obs"], step["action"], step["reward"], step["done"], [{"level": 9}])
    name = next(iter(BAD_STEPS[case]))
    assert name in str(info.value), info.value
    assert ro.same(_snapshot(b), before)
    batch = b.sample(64)  # nothing torn is ever sampled
    obs = batch.observations["x"] if kind == "dict" else batch.observations
    assert (
        (obs[:, 0] + 1) == (batch.next_observations["x"] if kind == "dict" else batch.next_observations)[:, 0]
    ).all()


#: malformed ``infos[i]["TimeLimit.truncated"]`` values (issue 34, N4): SB3's add stored obs, actions,
#: rewards and dones into the live slot of a full buffer before failing on (or silently casting) these
BAD_TIMEOUTS: dict[str, Any] = {
    "string": "yes",
    "None": None,
    "list": [True, False],
    "array of two": np.array([1, 0]),
    "int 2": 2,
    "float": 0.5,
    "complex": 1j,
    "object": object(),
}


@pytest.mark.parametrize("kind", ["per", "dict", "episodic"])
@pytest.mark.parametrize("case", sorted(BAD_TIMEOUTS))
def test_n4_a_malformed_timeout_flag_is_refused_before_anything_is_stored(kind: str, case: str) -> None:
    b = _full_per(kind)
    before = {**_snapshot(b), "timeouts": b.timeouts.copy()}
    obs = {"x": GOOD_O} if kind == "dict" else GOOD_O
    done = np.ones(1)
    infos = [{"level": 9, "TimeLimit.truncated": BAD_TIMEOUTS[case]}]
    with pytest.raises(ValueError, match=r'infos\[0\]\["TimeLimit\.truncated"\] must be a bool'):
        b.add(obs, obs, np.zeros((1, 1)), np.zeros(1), done, infos)
    assert ro.same({**_snapshot(b), "timeouts": b.timeouts.copy()}, before)
    for good in (True, False, np.bool_(True), 0, 1):  # bools, and the ints 0 and 1, are stored as before
        b.add(obs, obs, np.zeros((1, 1)), np.zeros(1), done, [{"level": 9, "TimeLimit.truncated": good}])
        assert b.timeouts[(b.pos - 1) % b.buffer_size, 0] == float(good)


def test_n4_the_shared_buffer_refuses_a_malformed_timeout_flag_before_writing_any_column() -> None:
    from plr_gym.replay import SharedReplayBuffer

    box = spaces.Box(-10, 10, (3,), np.float32)
    b = SharedReplayBuffer(4, box, spaces.Discrete(2), n_envs=2, device="cpu")
    try:
        obs = np.zeros((2, 3), np.float32)
        infos = [{"TimeLimit.truncated": True}, {"TimeLimit.truncated": np.array([1, 0])}]
        with pytest.raises(ValueError, match=r'infos\[1\]\["TimeLimit\.truncated"\] must be a bool'):
            b.add(obs, obs, np.zeros((2, 1)), np.zeros(2), np.ones(2), infos)
        assert b.counts.tolist() == [0, 0]  # env 0's column was not written either
    finally:
        b.close()


def test_frame_stack_buffer_refuses_masked_and_complex_stacks() -> None:
    from plr_gym.replay import FrameStackReplayBuffer

    space = spaces.Box(0, 255, (4, 2, 2), np.uint8)
    b = FrameStackReplayBuffer(
        8, space, spaces.Discrete(2), device="cpu", n_stack=4, channels_order="first", seed=0
    )
    good = np.zeros((1, 4, 2, 2), np.uint8)
    for bad, kind in (
        (np.ma.masked_array(good), TypeError),
        (good + 1j, TypeError),
        (good[:, :3], ValueError),
    ):
        with pytest.raises(kind, match="obs"):
            b.add(bad, good, np.zeros((1, 1)), np.zeros(1), np.zeros(1), [{}])
    assert b.size() == 0


def test_per_refuses_bool_priorities_and_keeps_them() -> None:
    b = _full_per()
    before = b.priorities
    with pytest.raises(TypeError, match="priorities must be real numbers"):
        b.update_priorities([0, 1], [True, False])
    with pytest.raises(TypeError, match="priorities must not be a numpy masked array"):
        b.update_priorities([0], np.ma.masked_array([1.0], mask=[True]))
    np.testing.assert_array_equal(b.priorities, before)


# ---------------------------------------------------------------------------------- the Ray actor's push


def _actor() -> Any:
    from plr_gym.distributed import LevelSourceActor

    return LevelSourceActor(LevelSampler(range(8), seed=0))


GOOD_BATCH = (np.array([1, 2]), [0.5, 0.25])
BAD_PUSHES: dict[str, tuple[dict[str, Any], str]] = {
    "a good batch, then garbage": ({"batches": [GOOD_BATCH, 7]}, r"batches\[1\]"),
    "a good batch, then a triple": ({"batches": [GOOD_BATCH, (1, 2, 3)]}, r"batches\[1\]"),
    "levels and scores of other lengths": ({"batches": [GOOD_BATCH, ([1, 2], [0.5])]}, r"batches\[1\]"),
    "packed sizes beyond the data": (
        {"batches": ("packed", np.array([1, 2, 3]), np.array([0.1, 0.2, 0.3]), np.array([2, 5]))},
        "packed",
    ),
    "packed sizes short of the data": (
        {"batches": ("packed", np.array([1, 2, 3]), np.array([0.1, 0.2, 0.3]), np.array([1, 1]))},
        "packed",
    ),
    "packed negative size": (
        {"batches": ("packed", np.array([1, 2]), np.array([0.1, 0.2]), np.array([3, -1]))},
        "packed",
    ),
    "packed scores of another length": (
        {"batches": ("packed", np.array([1, 2, 3]), np.array([0.1, 0.2]), np.array([1, 2]))},
        "packed",
    ),
    "unknown message kind": ({"batches": ("zipped", [1], [0.1], [1])}, "message kind"),
    "batches a string": ({"batches": "abc"}, "batches"),
    "draw=-1": ({"draw": -1}, "draw"),
    "draw=1.5": ({"draw": 1.5}, "draw"),
    "draw=True": ({"draw": True}, "draw"),
    "seq=0": ({"seq": 0}, "seq"),
    "seq='3'": ({"seq": "3"}, "seq"),
    "client=None": ({"client": None}, "client"),
}


@pytest.mark.parametrize("case", sorted(BAD_PUSHES))
def test_actor_push_with_garbage_applies_nothing(case: str) -> None:
    actor = _actor()
    kwargs, message = BAD_PUSHES[case]
    call = {"client": "a", "seq": 1, "batches": [GOOD_BATCH], "draw": 0, **kwargs}
    before = actor.source.state_dict()
    with pytest.raises((ValueError, TypeError), match=message):
        actor.push(call["client"], call["seq"], call["batches"], call["draw"])
    assert ro.same(actor.source.state_dict(), before)
    assert actor.stats()["scores_absorbed"] == 0 and actor.stats()["levels_served"] == 0
    # the same seq, sent again correctly, is applied (it was not recorded as applied)
    reply = actor.push("a", 1, [GOOD_BATCH], 2)
    assert reply["errors"] == [] and len(reply["levels"]) == 2
    assert actor.stats()["scores_absorbed"] == 2 and actor.source.num_seen == 2


def test_actor_draw_refuses_a_negative_count() -> None:
    actor = _actor()
    with pytest.raises(ValueError, match="n must be an int >= 0"):
        actor.draw(-1)
    assert actor.stats()["levels_served"] == 0


# ---------------------------------------------------------------------------------- unclear errors


class ListInfoEnv(gym.Env[np.ndarray, int]):
    observation_space = spaces.Box(0, 1, (1,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self, bad_in: str) -> None:
        self.bad_in = bad_in

    def reset(self, *, seed: Any = None, options: Any = None) -> Any:
        super().reset(seed=seed)
        return np.zeros(1, np.float32), ([] if self.bad_in == "reset" else {})

    def step(self, action: int) -> Any:
        return np.zeros(1, np.float32), 0.0, False, False, (None if self.bad_in == "step" else {})


class SharedInfoEnv(gym.Env[np.ndarray, int]):
    """An env whose every instance returns one class-level info dict (issue 34, N9)."""

    INFO: ClassVar[dict[str, Any]] = {}
    observation_space = spaces.Box(0, 1, (1,), np.float32)
    action_space = spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        self.t = 0
        return self.np_random.random(1).astype(np.float32), self.INFO

    def step(self, action: int) -> Any:
        self.t += 1
        return self.np_random.random(1).astype(np.float32), 0.0, self.t >= 3, False, self.INFO


def test_n9_sub_envs_sharing_one_info_dict_each_report_their_own_level() -> None:
    from stable_baselines3.common.vec_env import DummyVecEnv

    from plr_gym import PrioritizedLevelReplay

    venv = PrioritizedLevelReplay(
        DummyVecEnv([lambda: LevelWrapper(SharedInfoEnv()) for _ in range(3)]), levels=range(50), seed=0
    )
    venv.reset()
    assert [info["level"] for info in venv.reset_infos] == venv.current_levels.tolist()
    for _ in range(7):  # two episode ends each
        *_, infos = venv.step(np.zeros(3, dtype=np.int64))
        assert [info["level"] for info in infos] == venv.step_levels.tolist()
    assert "level" not in SharedInfoEnv.INFO  # the env's own dict is not written to


def test_n9_a_vec_env_that_shares_one_info_dict_between_envs_is_named() -> None:
    from stable_baselines3.common.vec_env import DummyVecEnv

    from plr_gym import PrioritizedLevelReplay

    class SharedResetInfos(DummyVecEnv):
        def reset(self) -> Any:
            obs = super().reset()
            self.reset_infos = [self.reset_infos[-1]] * self.num_envs  # one dict object for every env
            return obs

    inner = SharedResetInfos([lambda: LevelWrapper(gym.make("CartPole-v1")) for _ in range(3)])
    venv = PrioritizedLevelReplay(inner, levels=range(50), seed=0)
    with pytest.raises(RuntimeError, match=r"envs 0, 1 and 2 share one info dict object"):
        venv.reset()


@pytest.mark.parametrize("method", ["reset", "step"])
def test_env_returning_an_info_that_is_not_a_dict_is_named(method: str) -> None:
    env = LevelWrapper(ListInfoEnv(method))
    with pytest.raises(TypeError, match=rf"{method}\(\) returned an info of type (list|NoneType)"):
        env.reset(seed=1)
        env.step(0)


def test_per_buffer_given_a_dict_space_names_the_dict_buffer() -> None:
    space = spaces.Dict({"x": spaces.Box(-1, 1, (2,))})
    with pytest.raises(TypeError, match="use PrioritizedDictReplayBuffer"):
        PrioritizedReplayBuffer(8, space, spaces.Discrete(2), device="cpu")


@pytest.mark.parametrize(
    "case",
    [
        "per buffer_size",
        "per 2**62",
        "level buffer capacity",
        "capacity 2**70",
        "sampler levels",
        "scorer n_envs",
    ],
)
def test_sizes_beyond_memory_name_the_argument(case: str) -> None:
    from plr_gym import LevelBuffer
    from plr_gym.scoring import EpisodeScorer

    box = spaces.Box(-1, 1, (2,))
    build, name = {
        "per buffer_size": (
            lambda: PrioritizedReplayBuffer(10**15, box, spaces.Discrete(2), device="cpu"),
            "buffer_size",
        ),
        "per 2**62": (
            lambda: PrioritizedReplayBuffer(2**62, box, spaces.Discrete(2), device="cpu"),
            "buffer_size",
        ),
        "level buffer capacity": (lambda: LevelBuffer(10**15), "capacity"),
        "capacity 2**70": (lambda: LevelBuffer(2**70), "capacity"),
        "sampler levels": (lambda: LevelSampler(range(10**15)), "levels"),
        "scorer n_envs": (lambda: EpisodeScorer(LevelSampler(range(4)), n_envs=10**15), "n_envs"),
    }[case]
    with pytest.raises(ValueError, match=rf"{name}=.* is too large"):
        build()


def test_huge_draws_and_scores_name_the_argument() -> None:
    from plr_gym import LevelBuffer

    buf = LevelBuffer(4, seed=0)
    buf.insert(1, 0.5)
    with pytest.raises(ValueError, match=r"n=10+ is too large"):
        buf.sample_replay_levels(10**15)
    with pytest.raises(ValueError, match="score must be finite, got an int beyond the float range"):
        buf.insert(2, 10**400)
    s = LevelSampler(range(4), seed=0)
    with pytest.raises(ValueError, match=r"score \(level 1\) must be finite"):
        s.update(1, 10**400)
    per = _full_per()
    with pytest.raises(ValueError, match=r"batch_size=10+ is too large"):
        per.sample(10**15)


# ---------------------------------------------------------------------------------- bit flips


def _flip_positions(data: bytes, n_random: int, seed: int) -> list[int]:
    """Bits to flip: the compression method and the encryption flag of every zip member's local header
    (``NotImplementedError``/``RuntimeError`` from ``zipfile`` before the fix), plus a fixed-seed sample."""
    bits = []
    start = data.find(b"PK\x03\x04")
    while start >= 0:
        bits += [(start + 6) * 8, (start + 8) * 8 + 1, (start + 8) * 8 + 2]  # encrypted; methods 2 and 4
        start = data.find(b"PK\x03\x04", start + 4)
    start = data.find(b"PK\x01\x02")  # central directory entries: the same fields, 2 bytes later
    while start >= 0:
        bits += [(start + 8) * 8, (start + 10) * 8 + 1, (start + 10) * 8 + 2]
        start = data.find(b"PK\x01\x02", start + 4)
    rng = np.random.default_rng(seed)
    return bits + rng.integers(len(data) * 8, size=n_random).tolist()


LOADERS: dict[str, tuple[Any, Any, Any]] = {
    "sampler": (lambda: ro.make_sampler(30), lambda: ro.make_sampler(12), lambda o, p: o.load_from(p)),
    "level_buffer": (
        lambda: ro.make_level_buffer(9),
        lambda: ro.make_level_buffer(6),
        lambda o, p: o.load(p),
    ),
    "per": (lambda: ro.make_per(6), lambda: ro.make_per(3), lambda o, p: o.load(p)),
    "scorer": (lambda: ro.make_scorer(4), lambda: ro.make_scorer(3), lambda o, p: o.load(p)),
}


@pytest.mark.parametrize("kind", sorted(LOADERS))
def test_single_bit_flips_are_refused_with_value_error_and_change_nothing(tmp_path: Path, kind: str) -> None:
    make, make_live, load = LOADERS[kind]
    good = tmp_path / "good.npz"
    make().save(good)
    data = good.read_bytes()
    live = make_live()

    def state() -> Any:
        return ro.per_state(live) if kind == "per" else live.state_dict()

    before = state()
    refused = 0
    for bit in _flip_positions(data, 60, seed=0):
        flipped = bytearray(data)
        flipped[bit // 8] ^= 1 << (bit % 8)
        path = tmp_path / "flipped.npz"
        path.write_bytes(bytes(flipped))
        try:
            load(live, path)
        except ValueError:
            refused += 1
            assert ro.same(state(), before), f"bit {bit}: a refused load changed the object"
        else:  # a flip in a byte nothing reads (e.g. a zip timestamp): the load is whole
            live = make_live()
    assert refused >= 40


# ---------------------------------------------------------------------------------- issue 34: D8b, D12, D13
def test_d8b_loading_the_visible_name_never_follows_a_generation_link_outside(tmp_path: Path) -> None:
    import os

    from plr_gym.checkpoint import CURRENT_LINK, write_checkpoint_dir

    run = tmp_path / "run"
    write_checkpoint_dir(run, {"plr_sampler.npz": LevelSampler(range(5), seed=0).save})
    outside = tmp_path / "outside"
    outside.mkdir()
    LevelSampler(range(100, 103), seed=1).save(outside / "plr_sampler.npz")  # not this run's
    os.symlink(outside, run / ".plr-gen-00000009")
    os.unlink(run / CURRENT_LINK)
    os.symlink(".plr-gen-00000009", run / CURRENT_LINK)
    with pytest.raises(ValueError, match="not a directory inside the checkpoint directory"):
        LevelSampler.load(run / "plr_sampler.npz")
    live = LevelSampler(range(100, 103), seed=2)
    with pytest.raises(ValueError, match="not a directory inside the checkpoint directory"):
        live.load_from(run / "plr_sampler.npz")
    # a real generation is read through the visible name, as before
    os.unlink(run / CURRENT_LINK)
    os.symlink(".plr-gen-00000001", run / CURRENT_LINK)
    assert LevelSampler.load(run / "plr_sampler.npz").levels.tolist() == list(range(5))


def _savers() -> dict[str, Any]:
    from plr_gym.scoring import EpisodeScorer

    box = spaces.Box(-1, 1, (2,), np.float32)
    return {
        "LevelSampler": LevelSampler(range(5), seed=0),
        "LevelBuffer": ro.make_level_buffer(3),
        "EpisodeScorer": EpisodeScorer(LevelSampler(range(5)), n_envs=1),
        "PrioritizedReplayBuffer": PrioritizedReplayBuffer(8, box, spaces.Discrete(2), device="cpu"),
    }


@pytest.mark.parametrize("kind", sorted(_savers()))
def test_d12_save_and_load_of_a_directory_name_the_path_argument(kind: str, tmp_path: Path) -> None:
    obj = _savers()[kind]
    with pytest.raises(IsADirectoryError, match="path must name a file, not a directory"):
        obj.save(tmp_path)
    assert list(tmp_path.iterdir()) == []  # no temporary file left
    with pytest.raises(IsADirectoryError, match="path must name a file, not a directory"):
        obj.load(tmp_path) if kind != "LevelSampler" else obj.load_from(tmp_path)


@pytest.mark.parametrize("kind", ["sampler", "level_buffer", "plan"])
def test_d12_update_batch_with_a_scalar_names_the_argument(kind: str) -> None:
    target: Any = {
        "sampler": lambda: LevelSampler(range(5), seed=0),
        "level_buffer": lambda: ro.make_level_buffer(3),
        "plan": lambda: ro.make_plan(2),
    }[kind]()
    with pytest.raises(TypeError, match=r"scores must be a sequence of numbers \(one per level\), got float"):
        target.update_batch([0, 1], 0.5)
    first = "indices" if kind == "level_buffer" else "levels"
    with pytest.raises(TypeError, match=rf"{first} must be a sequence .*got int"):
        target.update_batch(0, [0.5])
    if kind == "plan":  # a complex score lost its imaginary part silently
        with pytest.raises(TypeError, match="scores must be real numbers, got dtype complex128"):
            target.update_batch(list(target.assigned), [0.5, 0.5j])


def _rollout(**changes: Any) -> dict[str, Any]:
    arrays: dict[str, Any] = {
        "levels": np.array([[3], [3], [4]]),
        "episode_starts": np.array([[1.0], [0.0], [1.0]], dtype=np.float32),  # SB3 stores float32 0/1
        "dones": np.array([True]),
        "rewards": np.array([[0.0], [1.0], [0.5]]),
        "values": np.array([[0.1], [0.2], [0.3]]),
        "advantages": np.array([[0.5], [-0.5], [1.0]]),
    }
    return {**arrays, **changes}


BAD_ROLLOUTS: dict[str, tuple[dict[str, Any], str]] = {
    "float levels": ({"levels": np.array([[3.0], [3.0], [4.5]])}, r"levels must be int level ids"),
    "complex levels": ({"levels": np.array([[3], [3], [4]]) + 0j}, r"levels must be int level ids"),
    "episode_starts of 0.5": (
        {"episode_starts": np.array([[1.0], [0.5], [1.0]])},
        r"episode_starts must hold booleans \(or 0 and 1\)",
    ),
    "complex dones": ({"dones": np.array([1 + 1j])}, r"dones must hold booleans \(or 0 and 1\)"),
    "valid of 2": ({"valid": np.array([[1], [2], [1]])}, r"valid must hold booleans \(or 0 and 1\)"),
    "truncations strings": (
        {"truncations": np.array([["x"], [""], ["x"]])},
        r"truncations must hold booleans",
    ),
    "complex rewards": ({"rewards": np.array([[0.0], [1.0], [0.5]]) + 1j}, r"rewards must hold real numbers"),
    "complex values": ({"values": np.array([[0.1], [0.2], [0.3]]) + 0j}, r"values must hold real numbers"),
    "complex advantages": ({"advantages": np.ones((3, 1)) * 1j}, r"advantages must hold real numbers"),
    "complex last_values": ({"last_values": np.array([1j])}, r"last_values must hold real numbers"),
}


@pytest.mark.parametrize("case", sorted(BAD_ROLLOUTS))
def test_d13_episode_scorer_refuses_complex_and_float_typed_flags_and_levels(case: str) -> None:
    from plr_gym.scoring import EpisodeScorer

    class Recorder:  # a score target that takes what it is given (a LevelSampler refuses float levels)
        def __init__(self) -> None:
            self.got: list[tuple[Any, Any]] = []

        def update_batch(self, levels: Any, scores: Any) -> None:
            self.got.append((list(levels), list(scores)))

    target = Recorder()
    scorer = EpisodeScorer(target, n_envs=1)
    changes, message = BAD_ROLLOUTS[case]
    with pytest.raises(TypeError, match=message):
        scorer.process_rollout(**_rollout(**changes))
    assert target.got == [] and scorer.num_scored == 0 and scorer.num_open_episodes == 0
    # SB3's float32 0/1 flags are accepted; value_l1 = mean |advantage|: level 3 (0.5 + 0.5) / 2, level 4 1.0
    assert scorer.process_rollout(**_rollout()) == [(3, 0.5), (4, 1.0)]
