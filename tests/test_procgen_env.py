"""ProcgenLevelEnv against stock Procgen: same levels, same observations and rewards, Gymnasium semantics.

Runs on the installed Procgen build (procgen-mirror on Python 3.11/3.12, procgen-gym on 3.13), against a
stock env of that same build (:mod:`procgen_stock`).
"""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.error import ResetNeeded

from plr_gym.envs import GAMES, MAX_LEVEL, ProcgenLevelEnv, procgen_env_id
from plr_gym.envs import procgen as procgen_module
from procgen_stock import StockEnv, require_backend

BACKEND = require_backend()


def stock_env(game: str, level: int, distribution_mode: str = "easy", **options: Any) -> StockEnv:
    """The reference: a freshly built stock Procgen env that only plays ``level``."""
    return StockEnv(game, level, distribution_mode, **options)


def stock_step(env: StockEnv, action: int) -> tuple[np.ndarray, float, bool]:
    return env.step(action)


def stock_first_obs(env: StockEnv) -> np.ndarray:
    return env.first_obs()


@pytest.fixture(scope="module")
def coinrun() -> Any:
    env = ProcgenLevelEnv("coinrun")
    yield env
    env.close()


@pytest.mark.parametrize(
    ("game", "mode", "level"),
    [
        ("coinrun", "easy", 0),
        ("bigfish", "hard", 12345),
        ("bossfight", "easy", 3),
        ("dodgeball", "easy", 7),
        ("maze", "memory", 3),
        ("starpilot", "extreme", 99),
        ("heist", "easy", MAX_LEVEL),
    ],
)
def test_matches_stock_step_by_step_across_episode_ends(game: str, mode: str, level: int) -> None:
    env = ProcgenLevelEnv(game, distribution_mode=mode)
    assert env.fast_level_switch  # the exact sub-millisecond path is in use with this Procgen
    env.reset(seed=level + 1 if level < MAX_LEVEL else 0)  # start from another level
    obs, info = env.reset(seed=level)
    assert info == {"level": level}
    stock = stock_env(game, level, mode)
    assert np.array_equal(obs, stock_first_obs(stock))
    rng = np.random.default_rng(level)
    episodes_ended = 0
    for _ in range(400):
        action = int(rng.integers(15))
        obs_before = obs
        obs, reward, terminated, truncated, info = env.step(action)
        stock_obs, stock_reward, stock_first = stock_step(stock, action)
        assert reward == stock_reward
        assert terminated == stock_first
        assert not truncated
        assert info["level"] == level
        if terminated:
            # The ended episode's final frame is never rendered by Procgen: the env repeats its last frame
            # and does not leak the next episode's first frame ...
            assert np.array_equal(obs, obs_before)
            episodes_ended += 1
            # ... which reset() returns: the same frame Procgen auto-reset to.
            obs, info = env.reset(seed=level)
            assert np.array_equal(obs, stock_obs)
            stock.close()
            stock = stock_env(game, level, mode)  # the spec: a fresh env on the level
        else:
            assert np.array_equal(obs, stock_obs)
    stock.close()
    env.close()
    if game in ("bossfight", "dodgeball", "starpilot"):
        assert episodes_ended > 0  # the comparison did cross episode ends


@pytest.mark.parametrize("game", GAMES)
def test_every_game_matches_stock(game: str) -> None:
    env = ProcgenLevelEnv(game)
    for level in (5, 1_000_003):
        obs, _ = env.reset(seed=level)
        stock = stock_env(game, level)
        assert np.array_equal(obs, stock_first_obs(stock))
        rng = np.random.default_rng(level)
        for _ in range(40):
            action = int(rng.integers(15))
            obs, reward, terminated, _, _ = env.step(action)
            stock_obs, stock_reward, stock_first = stock_step(stock, action)
            assert (reward, terminated) == (stock_reward, stock_first)
            if terminated:
                break
            assert np.array_equal(obs, stock_obs)
        stock.close()
    env.close()


def test_procgen_options_are_passed_through() -> None:
    options = {"center_agent": False, "use_backgrounds": False, "restrict_themes": True}
    env = ProcgenLevelEnv("ninja", use_monochrome_assets=True, paint_vel_info=True, **options)
    obs, _ = env.reset(seed=11)
    stock = stock_env("ninja", 11, use_monochrome_assets=True, paint_vel_info=True, **options)
    assert np.array_equal(obs, stock_first_obs(stock))
    assert not np.array_equal(obs, ProcgenLevelEnv("ninja").reset(seed=11)[0])
    for action in (7, 7, 8, 8, 5):
        obs, reward, *_ = env.step(action)
        stock_obs, stock_reward, _ = stock_step(stock, action)
        assert np.array_equal(obs, stock_obs) and reward == stock_reward


def rollout(env: ProcgenLevelEnv, level: int, actions: list[int]) -> list[tuple[np.ndarray, float]]:
    obs, _ = env.reset(seed=level)
    out = [(obs, 0.0)]
    for action in actions:
        obs, reward, terminated, truncated, _ = env.step(action)
        out.append((obs, float(reward)))
        if terminated or truncated:
            break
    return out


def assert_same_rollout(a: list[tuple[np.ndarray, float]], b: list[tuple[np.ndarray, float]]) -> None:
    assert len(a) == len(b)
    for (obs_a, rew_a), (obs_b, rew_b) in zip(a, b):
        assert np.array_equal(obs_a, obs_b) and rew_a == rew_b


@pytest.mark.parametrize("level_cache_size", [0, 2, 256])
def test_revisiting_a_level_replays_it_exactly(level_cache_size: int) -> None:
    env = ProcgenLevelEnv("chaser", level_cache_size=level_cache_size)
    actions = [int(a) for a in np.random.default_rng(0).integers(15, size=60)]
    first = rollout(env, 42, actions)
    for other in (1, 2, 3, 4):  # evicts level 42 from the 2-level cache
        rollout(env, other, actions[:10])
    assert_same_rollout(rollout(env, 42, actions), first)
    assert_same_rollout(rollout(env, 42, actions), first)


def test_level_cache_is_a_bounded_lru() -> None:
    env = ProcgenLevelEnv("miner", level_cache_size=3)
    for level in (1, 2, 3, 1, 4, 1):  # 4 evicts 2, the least recently used
        env.reset(seed=level)
    info = env.cache_info()
    assert (info["levels"], info["max_levels"], info["hits"], info["misses"]) == (3, 3, 2, 4)
    assert 3 * 15_000 < info["bytes"] < 3 * 60_000
    env.reset(seed=2)
    assert env.cache_info()["misses"] == 5


def test_fallback_first_visit_is_exact_too() -> None:
    env = ProcgenLevelEnv("fruitbot")
    env._calibration = procgen_module._Calibration(fast=False)  # as if the self-check had failed
    obs, _ = env.reset(seed=8)
    assert np.array_equal(obs, stock_first_obs(stock_env("fruitbot", 8)))


def test_reset_level_option_seed_and_unseeded_draws() -> None:
    env = ProcgenLevelEnv("maze", num_levels=5, start_level=100)
    obs_seed, info = env.reset(seed=7)
    assert info["level"] == 7 and env.level == 7
    obs_opt, info = env.reset(options={"level": np.int64(7)})
    assert info["level"] == 7 and np.array_equal(obs_seed, obs_opt)
    _, info = env.reset(seed=3, options={"level": 9})  # options["level"] wins, seed seeds np_random
    assert info["level"] == 9
    draws = [env.reset()[1]["level"] for _ in range(30)]
    assert set(draws) <= set(range(100, 105)) and len(set(draws)) > 1
    env.reset(seed=123)
    again = [env.reset()[1]["level"] for _ in range(10)]
    env.reset(seed=123)
    assert [env.reset()[1]["level"] for _ in range(10)] == again


def test_truncated_at_procgen_time_limit_with_the_true_final_frame() -> None:
    env = ProcgenLevelEnv("leaper")  # standing still in leaper survives until the 500-step limit
    assert env.max_episode_steps == 500
    first_obs, _ = env.reset(seed=0)
    stock = stock_env("leaper", 0)
    for step in range(1, 501):
        obs, reward, terminated, truncated, info = env.step(4)
        stock_obs, stock_reward, stock_first = stock_step(stock, 4)
        assert reward == stock_reward and not terminated
        assert truncated == (step == 500) == stock_first
        if step < 500:
            assert np.array_equal(obs, stock_obs)
    assert info == {"level": 0, "level_complete": False}
    # Procgen already showed the next episode's first frame here; the env shows the true last frame.
    assert np.array_equal(stock_obs, first_obs) and not np.array_equal(obs, first_obs)
    with pytest.raises(ResetNeeded):
        env.step(4)
    assert np.array_equal(env.reset(seed=0)[0], first_obs)


def test_terminated_when_the_level_is_solved(coinrun: ProcgenLevelEnv) -> None:
    coinrun.reset(seed=3)
    for step in range(300):  # run right and jump: solves coinrun level 3
        _, reward, terminated, truncated, info = coinrun.step(8 if step % 10 < 7 else 7)
        if terminated or truncated:
            break
    assert terminated and not truncated
    assert reward == 10.0 and info == {"level": 3, "level_complete": True}
    with pytest.raises(ResetNeeded, match="reset"):
        coinrun.step(0)


def test_step_before_reset_raises() -> None:
    with pytest.raises(ResetNeeded):
        ProcgenLevelEnv("coinrun").step(0)


def test_render_rgb_array() -> None:
    env = ProcgenLevelEnv("starpilot", render_mode="rgb_array")
    obs, _ = env.reset(seed=1)
    assert np.array_equal(env.render(), obs)
    obs, *_ = env.step(3)
    frame = env.render()
    assert frame is not None and frame.shape == (64, 64, 3) and np.array_equal(frame, obs)
    assert ProcgenLevelEnv("starpilot").render() is None


def test_spaces() -> None:
    env = ProcgenLevelEnv("plunder")
    assert env.observation_space == gym.spaces.Box(0, 255, (64, 64, 3), np.uint8)
    assert env.action_space == gym.spaces.Discrete(15)


def test_gymnasium_check_env() -> None:
    from gymnasium.utils.env_checker import check_env

    env = gym.make(procgen_env_id("caveflyer"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # gymnasium's checker reports problems as warnings
        check_env(env.unwrapped)
    env.close()
    env.close()  # closing twice is allowed


def test_sb3_check_env() -> None:
    from stable_baselines3.common.env_checker import check_env

    check_env(ProcgenLevelEnv("bigfish"), warn=True)


def test_registered_for_every_game() -> None:
    for game in GAMES:
        assert gym.spec(f"plr_gym/procgen-{game}-v0").kwargs == {"game": game}
    env = gym.make("plr_gym/procgen-jumper-v0", distribution_mode="hard")
    assert isinstance(env.unwrapped, ProcgenLevelEnv) and env.unwrapped.distribution_mode == "hard"
    obs, _ = env.reset(seed=4)
    assert np.array_equal(obs, stock_first_obs(stock_env("jumper", 4, "hard")))
    env.close()


def test_import_is_lazy_and_missing_procgen_is_explained(monkeypatch: pytest.MonkeyPatch) -> None:
    code = (
        "import sys, plr_gym.envs; "
        "assert not {'procgen', 'procgen_gym', 'gym3'} & set(sys.modules), 'Procgen imported eagerly'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    for module in ("procgen", "procgen_gym"):
        monkeypatch.setitem(sys.modules, module, None)  # makes `import module` fail
    with pytest.raises(
        ImportError, match=r"procgen-mirror \(Python 3.11/3.12\) or procgen-gym.*plr-gym\[procgen\]"
    ):
        ProcgenLevelEnv("coinrun")


def test_backend_is_the_one_the_procgen_extra_installs_for_this_python() -> None:
    expected = "procgen-gym" if sys.version_info >= (3, 13) else "procgen-mirror"
    assert BACKEND.name == expected
    env = ProcgenLevelEnv("coinrun")
    assert env.backend.name == expected
    env.close()
    if expected == "procgen-gym":  # the 3.13 stack: numpy 2 and no legacy gym, gym3 anywhere
        import importlib.util

        assert int(np.__version__.split(".")[0]) >= 2
        assert importlib.util.find_spec("gym") is None and importlib.util.find_spec("gym3") is None


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"game": "pong"}, ValueError, "bigfish, bossfight"),
        ({"game": "coinrun", "distribution_mode": "extreme"}, ValueError, "supports easy, hard"),
        ({"game": "coinrun", "distribution_mode": "exploration"}, ValueError, "EXPLORATION_LEVEL_SEEDS"),
        ({"game": "coinrun", "distribution_mode": "medium"}, ValueError, "distribution_mode must be"),
        ({"game": "coinrun", "use_sequential_levels": True}, ValueError, "use_sequential_levels"),
        ({"game": "coinrun", "use_generated_assets": True}, ValueError, "use_generated_assets"),
        ({"game": "coinrun", "center_agent": 1}, TypeError, "center_agent"),
        ({"game": "coinrun", "num_levels": -1}, ValueError, "num_levels"),
        ({"game": "coinrun", "num_levels": 2.0}, TypeError, "num_levels"),
        ({"game": "coinrun", "start_level": 5}, ValueError, "start_level must be 0"),
        ({"game": "coinrun", "start_level": 2**31 - 10, "num_levels": 20}, ValueError, "2\\*\\*31"),
        ({"game": "coinrun", "level_cache_size": -1}, ValueError, "level_cache_size"),
        ({"game": "coinrun", "render_mode": "human"}, ValueError, "render_mode"),
    ],
)
def test_bad_constructor_arguments(kwargs: dict[str, Any], error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        ProcgenLevelEnv(**kwargs)


@pytest.mark.parametrize(
    ("reset_kwargs", "error", "match"),
    [
        ({"seed": -1}, ValueError, r"seed must be an int >= 0 \(a level up to 2\*\*31 - 1, or a larger RNG"),
        ({"seed": 1.5}, TypeError, "seed must be an int"),
        ({"options": {"level": -3}}, ValueError, "options\\['level'\\] must be an int level id in"),
        ({"options": {"level": "3"}}, TypeError, "options\\['level'\\] must be an int"),
        ({"options": {"level": 3.0}}, TypeError, "options\\['level'\\] must be an int"),
        ({"options": {"level": True}}, TypeError, "options\\['level'\\] must be an int"),
        ({"options": {"lvl": 3}}, ValueError, "unknown reset options"),
    ],
)
def test_bad_reset_arguments(
    coinrun: ProcgenLevelEnv, reset_kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        coinrun.reset(**reset_kwargs)


@pytest.mark.parametrize(
    ("action", "error"), [(15, ValueError), (-1, ValueError), (1.0, TypeError), (np.array([1]), TypeError)]
)
def test_bad_actions(coinrun: ProcgenLevelEnv, action: Any, error: type[Exception]) -> None:
    coinrun.reset(seed=0)
    with pytest.raises(error, match="action must be an int"):
        coinrun.step(action)
    coinrun.step(np.int64(4))  # numpy integers and 0-d integer arrays are fine
    coinrun.step(np.array(4))


def test_switch_benchmark_quick_run() -> None:
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run(
        [sys.executable, str(root / "benchmarks" / "procgen" / "procgen_switch.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "- command:" in proc.stdout and "- machine:" in proc.stdout
    assert any(line.startswith("| coinrun |") for line in proc.stdout.splitlines()), proc.stdout
