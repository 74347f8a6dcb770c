"""``plr_gym.check_level_env``: what PLR needs of an env, checked on the level ids it will be given (#42)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import own_level_env  # noqa: F401  (registers OwnLevels/*)
from plr_gym import check_level_env
from plr_gym.env_checker import LevelEnvError


class _Endless(gym.Wrapper[Any, Any, Any, Any]):
    """Never ends an episode (the corridor without its ends and time limit)."""

    def step(self, action: Any) -> Any:
        obs, reward, _, _, info = self.env.step(action)
        return obs, reward, False, False, info


class _FewLevels(gym.Wrapper[Any, Any, Any, Any]):
    """Has levels 0..9 only: a larger seed raises."""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        if seed is not None and seed >= 10:
            raise ValueError(f"no level {seed}")
        return self.env.reset(seed=seed, options=options)


class _AllAlike(gym.Wrapper[Any, Any, Any, Any]):
    """Every level's first observation is the same (the seed chooses nothing visible, or nothing)."""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        obs, info = self.env.reset(seed=0, options=options)
        return obs, info


def test_a_seed_selected_env_passes_with_a_report() -> None:
    env = gym.make("OwnLevels/Corridor-v0")
    report = check_level_env(env, levels=range(200), warn=False)
    assert report.ok and report.sampled_levels == 8 and report.distinct_levels >= 5
    assert len(report.episode_steps) == 2 and all(1 <= n <= 20 for n in report.episode_steps.values())
    assert check_level_env("OwnLevels/Corridor-v0", levels=[3, 4]).distinct_levels == 2  # an id works too


def test_a_reset_that_ignores_its_seed_is_named_with_the_fix() -> None:
    with pytest.raises(LevelEnvError, match=r"same seed gave different first observations") as info:
        check_level_env(gym.make("OwnLevels/IgnoresSeed-v0"), levels=range(100))
    assert "super().reset(seed=seed)" in str(info.value) and "docs/own_env.md" in str(info.value)
    assert isinstance(info.value, ValueError) and len(info.value.failures) == 1


def test_every_failure_is_listed_at_once() -> None:
    env = _Endless(_FewLevels(gym.make("OwnLevels/Corridor-v0", max_episode_steps=10**6)))
    with pytest.raises(LevelEnvError, match=r"2 problem") as info:
        check_level_env(env, levels=range(0, 100), max_steps=200)
    accepted, endless = info.value.failures
    assert "raised for 7 of 8 sampled level ids (14, 28, 42, 57, 71, ...)" in accepted
    assert "reset(seed=14) raised ValueError: no level 14" in accepted
    assert "give training and held-out levels in the env's range" in accepted
    assert "did not end within 200 steps" in endless and "max_episode_steps" in endless


def test_levels_that_all_look_alike_fail_and_a_few_alike_are_a_note() -> None:
    with pytest.raises(LevelEnvError, match=r"all 8 sampled levels gave the same first observation"):
        check_level_env(_AllAlike(gym.make("OwnLevels/Corridor-v0")), levels=range(100))
    with pytest.warns(UserWarning, match=r"share a first observation"):
        report = check_level_env(gym.make("OwnLevels/Corridor-v0"), levels=range(30), n_levels=30)
    assert report.ok and report.distinct_levels == 10 and report.notes


def test_an_env_reporting_another_level_is_refused() -> None:
    from plr_gym.envs import MAX_LEVEL
    from procgen_stock import require_backend

    require_backend()
    env = gym.make("plr_gym/procgen-bigfish-v0")
    with pytest.raises(
        LevelEnvError,
        match=r"reset\(seed=2147483648\) played level \d+ \(info\['level'\]\), and so did 0 other",
    ):
        check_level_env(env, levels=[0, MAX_LEVEL + 1], n_episodes=0)
    assert check_level_env(env, levels=np.arange(5), n_episodes=0).ok
    env.close()
