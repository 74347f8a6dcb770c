"""plr_gym.evaluation: evaluate_levels plays exactly the requested levels; summarize's numbers by hand."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv, VecMonitor

from plr_gym import LevelWrapper, PrioritizedLevelReplay
from plr_gym.evaluation import evaluate_levels, iqm, summarize


class LevelEcho(gym.Env[np.ndarray, int]):
    """Level ``s`` (``reset(seed=s)``) lasts ``1 + s % 3`` steps, each with reward ``s``: its return is
    ``s * (1 + s % 3)``, so a return tells which level was played. Every reset seed is logged."""

    observation_space = spaces.Box(-np.inf, np.inf, (1,), np.float64)
    action_space = spaces.Discrete(2)

    def __init__(self, log: list[Any]) -> None:
        self.log = log
        self.level = -1
        self.t = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        self.log.append(seed)
        self.level = -1 if seed is None else seed
        self.t = 0
        return np.array([float(self.level)]), {}

    def step(self, action: int) -> Any:
        self.t += 1
        done = self.t >= 1 + self.level % 3
        return np.array([float(self.level)]), float(self.level), done, False, {}


class ZeroPolicy:
    """SB3's ``predict`` interface; counts calls."""

    def __init__(self) -> None:
        self.calls = 0

    def predict(
        self, obs: Any, state: Any = None, episode_start: Any = None, deterministic: bool = False
    ) -> Any:
        self.calls += 1
        return np.zeros(len(obs), dtype=np.int64), state


def echo_venv(n_envs: int, log: list[Any], monitor: bool = True) -> DummyVecEnv:
    def make() -> gym.Env[Any, Any]:
        env: gym.Env[Any, Any] = LevelEcho(log)
        return LevelWrapper(Monitor(env) if monitor else env, max_checked_levels=0)

    return DummyVecEnv([make] * n_envs)


@pytest.mark.parametrize("n_envs", [1, 3, 8])
@pytest.mark.parametrize("monitor", [True, False])
def test_plays_exactly_the_requested_levels(n_envs: int, monitor: bool) -> None:
    log: list[Any] = []
    levels = [10, 4, 7, 22, 5]
    returns = evaluate_levels(ZeroPolicy(), echo_venv(n_envs, log, monitor), levels, n_episodes=2)
    assert list(returns) == levels  # in the order asked
    for level, values in returns.items():
        assert values == [level * (1 + level % 3)] * 2  # two episodes, each really on that level
    played = [s for s in log if s is not None]
    assert sorted(played) == sorted(levels * 2)  # each level reset exactly twice, nothing else seeded


def test_more_envs_than_episodes_and_unordered_levels() -> None:
    log: list[Any] = []
    returns = evaluate_levels(ZeroPolicy(), echo_venv(8, log), range(3, 0, -1), n_episodes=1)
    assert returns == {3: [3.0], 2: [2.0 * 3], 1: [1.0 * 2]}
    assert sorted(s for s in log if s is not None) == [1, 2, 3]


def test_refuses_an_env_with_prioritized_level_replay() -> None:
    plr = PrioritizedLevelReplay(echo_venv(2, [], monitor=False), levels=range(5), seed=0)
    with pytest.raises(ValueError, match="PrioritizedLevelReplay"):
        evaluate_levels(ZeroPolicy(), plr, [100])
    with pytest.raises(ValueError, match="PrioritizedLevelReplay"):
        evaluate_levels(ZeroPolicy(), VecMonitor(plr), [100])  # also further down the wrapper chain


@pytest.mark.parametrize(
    ("levels", "n_episodes", "message"),
    [
        ([], 1, "must not be empty"),
        ([1, 1], 1, "distinct"),
        ([1], 0, "n_episodes"),
        ([1], True, "n_episodes"),
    ],
)
def test_rejects_bad_arguments(levels: list[int], n_episodes: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        evaluate_levels(ZeroPolicy(), echo_venv(1, []), levels, n_episodes=n_episodes)


def test_summarize_mean_and_iqm_by_hand() -> None:
    values = [0, 0, 1, 2, 3, 4, 100, 100]
    stats = summarize(values)
    assert stats["n_levels"] == 8
    assert stats["mean"] == pytest.approx(210 / 8)
    assert stats["iqm"] == pytest.approx((1 + 2 + 3 + 4) / 4)  # middle 50%: drop 2 lowest and 2 highest
    assert iqm(values) == pytest.approx(2.5)
    # a dict from evaluate_levels: the mean of each level's episodes first
    assert summarize({1: [0.0, 2.0], 2: [4.0]})["mean"] == pytest.approx((1.0 + 4.0) / 2)


def test_summarize_confidence_intervals_by_hand() -> None:
    # Two levels with returns 0 and 1: a bootstrap resample's mean is 0, 0.5 or 1 with probabilities
    # 1/4, 1/2, 1/4, so the 2.5th and 97.5th percentiles are exactly 0 and 1.
    stats = summarize([0.0, 1.0])
    assert stats["mean_ci"] == (0.0, 1.0)
    assert stats["iqm_ci"] == (0.0, 1.0)
    # All levels equal: no uncertainty.
    assert summarize([0.5, 0.5, 0.5])["mean_ci"] == (0.5, 0.5)
    # Many levels: the percentile interval of the mean is close to mean ± 1.96 · sd / sqrt(n).
    x = np.random.default_rng(0).normal(5.0, 2.0, size=400)
    stats = summarize(x, seed=1)
    half = 1.96 * x.std(ddof=1) / np.sqrt(x.size)
    lo, hi = stats["mean_ci"]
    assert lo == pytest.approx(x.mean() - half, abs=0.1 * half)
    assert hi == pytest.approx(x.mean() + half, abs=0.1 * half)
    ilo, ihi = stats["iqm_ci"]
    assert ilo < stats["iqm"] < ihi
    # the same seed gives the same interval; a 50% interval is narrower than the 95% one
    assert summarize(x, seed=1)["mean_ci"] == stats["mean_ci"]
    nlo, nhi = summarize(x, confidence=0.5, seed=1)["mean_ci"]
    assert lo < nlo < nhi < hi


def test_summarize_rejects_no_data() -> None:
    with pytest.raises(ValueError, match="at least one level"):
        summarize([])
    with pytest.raises(ValueError, match="at least one level"):
        summarize({3: []})


def test_first_reset_plays_the_requested_levels_despite_vecenv_seeds() -> None:
    """make_vec_env seeds every VecEnv; those seeds must not replace the requested first levels."""
    import gymnasium as gym
    from stable_baselines3.common.env_util import make_vec_env

    from plr_gym import LevelWrapper
    from plr_gym.evaluation import evaluate_levels

    played: list[int] = []

    class Recorder(gym.Wrapper):  # type: ignore[type-arg]
        def reset(self, **kwargs):  # type: ignore[no-untyped-def]
            played.append(kwargs.get("seed"))
            return self.env.reset(**kwargs)

    class Zero:
        def predict(self, obs, state=None, episode_start=None, deterministic=True):  # type: ignore[no-untyped-def]
            return np.zeros(len(obs), dtype=np.int64), None

    venv = make_vec_env(
        "CartPole-v1", n_envs=2, seed=12345, wrapper_class=lambda e: LevelWrapper(Recorder(e))
    )
    out = evaluate_levels(Zero(), venv, levels=[10_000, 10_001, 10_002])
    assert sorted(out) == [10_000, 10_001, 10_002] and all(len(v) == 1 for v in out.values())
    assert played[:2] == [10_000, 10_001] and 12345 not in played
