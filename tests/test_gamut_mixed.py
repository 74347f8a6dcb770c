"""``DoorKeyMixedEnv``: levels trivial, normal or unsolvable by ``seed % 3``."""

from __future__ import annotations

import gymnasium as gym
import minigrid  # noqa: F401  (registers the envs)
import numpy as np
import pytest
from minigrid.core.world_object import Door, Goal, Key
from minigrid.envs import DoorKeyEnv
from minigrid.wrappers import ImgObsWrapper

import plr_gym.envs  # noqa: F401  (registers plr_gym/MiniGrid-DoorKeyMixed-v0)
from plr_gym import LevelWrapper, training
from plr_gym.envs.gamut import MIXED_KINDS, DoorKeyMixedEnv

LEFT, RIGHT, FORWARD, PICKUP, TOGGLE = 0, 1, 2, 3, 5
DOWN = 1  # MiniGrid's agent_dir: 0 right, 1 down, 2 left, 3 up


def objects(env: DoorKeyMixedEnv, kind: type) -> list[tuple[int, int, object]]:
    return [
        (x, y, obj)
        for x in range(env.width)
        for y in range(env.height)
        if isinstance(obj := env.grid.get(x, y), kind)
    ]


def test_kind_is_seed_mod_3_and_reported_in_info() -> None:
    env = DoorKeyMixedEnv()
    assert MIXED_KINDS == ("trivial", "normal", "unsolvable")
    for seed in [*range(12), 59, 10_000, 10_001, 10_002, 20_000, 2**31 - 2]:
        _, info = env.reset(seed=seed)
        assert info["kind"] == MIXED_KINDS[seed % 3] == DoorKeyMixedEnv.kind_of(seed) == env.kind
        *_, step_info = env.step(LEFT)
        assert step_info["kind"] == info["kind"]
    # the study's splits: 20 levels of each kind among training levels 0-59 and held-out 10000-10059
    for levels in (range(60), range(10_000, 10_060)):
        kinds = [DoorKeyMixedEnv.kind_of(s) for s in levels]
        assert {k: kinds.count(k) for k in MIXED_KINDS} == dict.fromkeys(MIXED_KINDS, 20)


def test_reset_with_a_seed_is_deterministic_across_calls_and_instances() -> None:
    a, b = DoorKeyMixedEnv(size=6), DoorKeyMixedEnv(size=6)
    for seed in range(9):
        obs_a, _ = a.reset(seed=seed)
        grid, pos, direction = a.grid.encode().tobytes(), tuple(a.agent_pos), a.agent_dir
        a.reset(seed=seed + 1)  # another level in between
        again, _ = a.reset(seed=seed)
        obs_b, _ = b.reset(seed=seed)
        for env, obs in ((a, again), (b, obs_b)):
            assert env.grid.encode().tobytes() == grid
            assert (tuple(env.agent_pos), env.agent_dir) == (pos, direction)
            np.testing.assert_array_equal(obs["image"], obs_a["image"])
    # unseeded resets draw the level from the env's RNG: the same chain after the same seed
    a.reset(seed=123)
    b.reset(seed=123)
    for _ in range(5):
        obs_a, info_a = a.reset()
        obs_b, info_b = b.reset()
        assert info_a["kind"] == info_b["kind"] in MIXED_KINDS
        np.testing.assert_array_equal(obs_a["image"], obs_b["image"])


@pytest.mark.parametrize("size", [5, 6, 8])
def test_normal_levels_are_minigrids_doorkey_levels(size: int) -> None:
    env, reference = DoorKeyMixedEnv(size=size), DoorKeyEnv(size=size)
    for seed in (1, 4, 10_000):
        obs, _ = env.reset(seed=seed)
        ref_obs, _ = reference.reset(seed=seed)
        assert env.grid.encode().tobytes() == reference.grid.encode().tobytes()
        assert (tuple(env.agent_pos), env.agent_dir) == (tuple(reference.agent_pos), reference.agent_dir)
        np.testing.assert_array_equal(obs["image"], ref_obs["image"])
        assert len(objects(env, Key)) == 1 and env.has_key()
        assert env.max_steps == reference.max_steps == 10 * size**2


@pytest.mark.parametrize("size", [5, 6, 8])
def test_unsolvable_levels_have_no_key_and_a_locked_door_and_always_return_0(size: int) -> None:
    env, reference = DoorKeyMixedEnv(size=size), DoorKeyEnv(size=size)
    rng = np.random.default_rng(0)
    for seed in (2, 5, 8, 10_001):
        env.reset(seed=seed)
        reference.reset(seed=seed)
        assert objects(env, Key) == [] and not env.has_key()
        (door,) = [obj for *_, obj in objects(env, Door)]
        assert isinstance(door, Door) and door.is_locked and not door.is_open
        # the rest is MiniGrid's level: removing its key from the reference gives the same grid
        ((kx, ky, _),) = objects(reference, Key)
        reference.grid.set(kx, ky, None)
        assert env.grid.encode().tobytes() == reference.grid.encode().tobytes()
        # no sequence of actions opens the door: random play (pickup/toggle included) runs to the limit
        total, steps, terminated, truncated = 0.0, 0, False, False
        while not (terminated or truncated):
            _, reward, terminated, truncated, _ = env.step(int(rng.integers(0, 6)))
            total += float(reward)
            steps += 1
        assert (total, steps, terminated, truncated) == (0.0, 10 * size**2, False, True)
        assert door.is_locked and env.carrying is None


def test_unsolvable_door_cannot_be_toggled_open_from_in_front_of_it() -> None:
    env = DoorKeyMixedEnv()
    env.reset(seed=2)
    ((dx, dy, door),) = objects(env, Door)
    env.agent_pos, env.agent_dir = (dx - 1, dy), 0  # on the left of the door, facing it
    for action in (TOGGLE, PICKUP, TOGGLE, FORWARD):
        _, reward, terminated, _, _ = env.step(action)
        assert reward == 0 and not terminated
    assert isinstance(door, Door) and door.is_locked and tuple(env.agent_pos) == (dx - 1, dy)


@pytest.mark.parametrize("size", [5, 6, 8])
def test_trivial_levels_are_solved_by_turning_down_and_stepping_forward(size: int) -> None:
    env = DoorKeyMixedEnv(size=size)
    directions = set()
    for seed in range(0, 60, 3):
        env.reset(seed=seed)
        assert tuple(env.agent_pos) == (size - 2, size - 3)
        assert isinstance(env.grid.get(size - 2, size - 2), Goal)
        directions.add(env.agent_dir)
        actions = {0: [RIGHT], 1: [], 2: [LEFT], 3: [RIGHT, RIGHT]}[env.agent_dir] + [FORWARD]
        for action in actions[:-1]:
            assert env.step(action)[1:3] == (0, False)
        _, reward, terminated, truncated, info = env.step(actions[-1])
        assert terminated and not truncated and info["kind"] == "trivial"
        assert reward == pytest.approx(1 - 0.9 * len(actions) / (10 * size**2)) and float(reward) > 0.9
    assert directions == {0, 1, 2, 3}  # the start direction comes from the level's RNG


def test_observations_have_one_shape_for_every_kind_and_through_level_wrapper() -> None:
    env = DoorKeyMixedEnv(size=6)
    shapes = {env.reset(seed=s)[0]["image"].shape for s in range(6)}
    assert shapes == {(7, 7, 3)}
    assert env.observation_space["image"].shape == (7, 7, 3)
    wrapped = LevelWrapper(ImgObsWrapper(gym.make("plr_gym/MiniGrid-DoorKeyMixed-v0")))
    for level, kind in ((3, "trivial"), (4, "normal"), (5, "unsolvable")):
        obs, info = wrapped.reset(options={"level": level})
        assert info["level"] == level and info["kind"] == kind and obs.shape == (7, 7, 3)
        assert wrapped.observation_space.contains(obs)
    assert gym.make("plr_gym/MiniGrid-DoorKeyMixed-v0", size=8).unwrapped.width == 8
    assert training.env_family("plr_gym/MiniGrid-DoorKeyMixed-v0") == "minigrid"


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"size": 4}, "size"),
        ({"size": True}, "size"),
        ({"size": 6.0}, "size"),
        ({"max_steps": 0}, "max_steps"),
        ({"max_steps": True}, "max_steps"),
        ({"max_steps": 10.5}, "max_steps"),
    ],
)
def test_bad_constructor_arguments_raise_value_errors_naming_them(
    kwargs: dict[str, object], name: str
) -> None:
    with pytest.raises(ValueError, match=name):
        DoorKeyMixedEnv(**kwargs)  # type: ignore[arg-type]


def test_max_steps_overrides_the_step_limit() -> None:
    env = DoorKeyMixedEnv(max_steps=7)
    env.reset(seed=2)
    truncated, steps = False, 0
    while not truncated:
        truncated = env.step(LEFT)[3]
        steps += 1
    assert steps == 7
