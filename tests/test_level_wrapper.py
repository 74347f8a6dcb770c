"""LevelWrapper: the level each reset plays, info["level"], the non-int level path, the seed check."""

from __future__ import annotations

import warnings
from typing import Any

import gymnasium as gym
import minigrid  # noqa: F401  (registers the MiniGrid envs)
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.utils.env_checker import check_env as gym_check_env
from minigrid.wrappers import ImgObsWrapper
from stable_baselines3.common.env_checker import check_env as sb3_check_env

from plr_gym.wrappers import LevelWrapper, NondeterministicLevelWarning

DOORKEY = "MiniGrid-DoorKey-5x5-v0"
MULTIROOM = "MiniGrid-MultiRoom-N2-S4-v0"


def minigrid_env(env_id: str = DOORKEY) -> gym.Env[Any, Any]:
    return ImgObsWrapper(gym.make(env_id, max_steps=5))


def first_state(env_id: str, level: int) -> tuple[np.ndarray, int]:
    """First observation and full-state hash of a fresh env reset with seed=level."""
    env = minigrid_env(env_id)
    obs, _ = env.reset(seed=level)
    return obs, env.unwrapped.hash()


class IgnoresSeed(gym.Env[np.ndarray, int]):
    """Its first observation counts resets and ignores the seed."""

    observation_space = spaces.Box(0, 10_000, (1,), dtype=np.int64)
    action_space = spaces.Discrete(2)

    def __init__(self) -> None:
        self.count = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        self.count += 1
        return np.array([self.count]), {}

    def step(self, action: int) -> Any:
        return np.array([self.count]), 0.0, True, False, {}


class DictLevelEnv(gym.Env[np.ndarray, int]):
    """Builds its level from options["level"], a dict (the open-ended generator path)."""

    observation_space = spaces.Box(0, 100, (2,), dtype=np.int64)
    action_space = spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        options = options or {}
        self.options = options
        level = options["level"]
        return np.array([level["width"], level["height"]]), {}

    def step(self, action: int) -> Any:
        return np.zeros(2, dtype=np.int64), 0.0, False, False, {}


@pytest.mark.parametrize("env_id", [DOORKEY, MULTIROOM])
def test_int_level_is_the_reset_seed_and_is_reported_on_every_step(env_id: str) -> None:
    env = LevelWrapper(minigrid_env(env_id))
    for level in (3, 11):
        obs, info = env.reset(seed=level)
        ref_obs, ref_hash = first_state(env_id, level)
        assert info["level"] == level and env.level == level
        np.testing.assert_array_equal(obs, ref_obs)
        assert env.unwrapped.hash() == ref_hash
        for _ in range(5):
            *_, terminated, truncated, info = env.step(0)
            assert info["level"] == level
            if terminated or truncated:
                break
        assert terminated or truncated  # max_steps=5: the done step reports the finished level too


def test_queued_level_plays_on_a_seedless_reset_and_is_consumed() -> None:
    env = LevelWrapper(minigrid_env())
    env.set_next_level(np.int64(42))
    assert env.next_level == 42 and type(env.next_level) is int
    obs, info = env.reset()
    assert info["level"] == 42 and env.next_level is None
    np.testing.assert_array_equal(obs, first_state(DOORKEY, 42)[0])
    # Nothing queued, no seed: the env resets as usual and the episode has no level.
    _, info = env.reset()
    assert info["level"] is None and env.level is None


def test_precedence_options_then_seed_then_queue() -> None:
    env = LevelWrapper(minigrid_env())
    env.next_level = 1
    _, info = env.reset(seed=2, options={"level": 3})
    assert info["level"] == 3 and env.next_level is None  # every reset consumes the queue
    env.next_level = 1
    _, info = env.reset(seed=2)
    assert info["level"] == 2
    env.next_level = 1
    _, info = env.reset()
    assert info["level"] == 1


def test_bool_levels_are_rejected() -> None:
    env = LevelWrapper(minigrid_env())
    with pytest.raises(TypeError, match="bool"):
        env.set_next_level(True)
    with pytest.raises(TypeError, match="level"):
        env.reset(options={"level": False})
    with pytest.raises(ValueError, match="max_checked_levels"):
        LevelWrapper(minigrid_env(), max_checked_levels=-1)


def test_non_int_level_goes_through_options() -> None:
    env = LevelWrapper(DictLevelEnv())
    level = {"width": 3, "height": 4}
    obs, info = env.reset(options={"level": level, "other": 1})
    np.testing.assert_array_equal(obs, [3, 4])
    assert info["level"] == level
    assert env.unwrapped.options == {"other": 1, "level": level}  # other options pass through
    env.set_next_level({"width": 7, "height": 1})
    obs, info = env.reset()
    np.testing.assert_array_equal(obs, [7, 1])
    *_, info = env.step(0)
    assert info["level"] == {"width": 7, "height": 1}


def test_env_that_ignores_its_seed_warns_once() -> None:
    env = LevelWrapper(IgnoresSeed())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(5):
            env.reset(seed=3)
            env.reset(seed=4)
    relevant = [w for w in caught if issubclass(w.category, NondeterministicLevelWarning)]
    assert len(relevant) == 1
    assert "seed=3" in str(relevant[0].message)


def test_deterministic_env_does_not_warn_and_the_check_memory_is_bounded() -> None:
    env = LevelWrapper(minigrid_env(MULTIROOM), max_checked_levels=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error", NondeterministicLevelWarning)
        for level in [*range(10), *range(10)]:
            env.reset(seed=level)
    assert len(env._first_obs) == 3


def test_check_disabled() -> None:
    env = LevelWrapper(IgnoresSeed(), max_checked_levels=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", NondeterministicLevelWarning)
        env.reset(seed=1)
        env.reset(seed=1)


@pytest.mark.filterwarnings("ignore:.*is different from the unwrapped version")
def test_gymnasium_and_sb3_env_checkers_pass() -> None:
    gym_check_env(LevelWrapper(gym.make(DOORKEY)), skip_render_check=True)
    sb3_check_env(LevelWrapper(minigrid_env()), warn=False)
