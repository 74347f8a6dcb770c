"""Names people bring from elsewhere: the legacy Procgen ids, SB3's unseeded make_vec_env, and MiniGrid's
wrappers on Procgen."""

from __future__ import annotations

import pickle
import warnings

import gymnasium as gym
import numpy as np
import pytest

from conftest import run_cli
from plr_gym import LevelWrapper, training
from plr_gym.envs._frames import FrameSpace

LEGACY_IDS = ["procgen-coinrun-v0", "procgen:procgen-coinrun-v0", "procgen/coinrun", "Procgen-CoinRun-v0"]


@pytest.mark.parametrize("env_id", LEGACY_IDS)
def test_legacy_procgen_ids_point_to_plr_gyms(env_id: str) -> None:
    assert training.procgen_id_for(env_id) == "plr_gym/procgen-coinrun-v0"
    expected = r"legacy Procgen id; .*: use 'plr_gym/procgen-coinrun-v0' \(whose reset\(seed=s\)"
    with pytest.raises(training.SetupError, match=expected):
        training.env_family(env_id)
    with pytest.raises(training.SetupError, match="use 'plr_gym/procgen-coinrun-v0'"):
        training.make_level_venv(env_id, n_envs=1, seed=0)


@pytest.mark.parametrize(
    "env_id", ["plr_gym/maze-v0", "MiniGrid-DoorKey-5x5-v0", "coinrun", "procgen-bigfsh-v0"]
)
def test_other_ids_are_not_taken_for_procgen(env_id: str) -> None:
    assert training.procgen_id_for(env_id) is None


@pytest.mark.parametrize("env_id", ["procgen-coinrun-v0", "procgen:procgen-coinrun-v0"])
def test_cli_suggests_plr_gyms_procgen_id(env_id: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(["train", env_id], capsys)
    assert code == 2
    assert f"plr-gym: error: {env_id!r} is a legacy Procgen id; " in err
    assert "use 'plr_gym/procgen-coinrun-v0'" in err


def test_frame_space_explains_minigrid_access_and_still_is_the_box() -> None:
    space = FrameSpace(0, 255, (64, 64, 3), np.uint8, env_id="plr_gym/procgen-ninja-v0")
    box = gym.spaces.Box(0, 255, (64, 64, 3), np.uint8)
    assert space == box and box == space and not hasattr(space, "spaces")
    with pytest.raises(
        AttributeError, match=r"plr_gym/procgen-ninja-v0 observes 64x64x3 RGB frames .*ImgObsWrapper"
    ):
        space.spaces  # noqa: B018
    with pytest.raises(TypeError, match="not MiniGrid's Dict with an 'image' key"):
        space["image"]
    with pytest.raises(AttributeError, match="object has no attribute 'colour'"):
        space.colour  # noqa: B018
    copy = pickle.loads(pickle.dumps(space))  # SubprocVecEnv sends spaces between processes
    assert copy == box and copy.env_id == "plr_gym/procgen-ninja-v0"


def test_minigrid_wrapper_on_a_procgen_env_says_what_to_do() -> None:
    from procgen_stock import require_backend

    require_backend()  # procgen-mirror or procgen-gym, whichever this stack has
    wrappers = pytest.importorskip("minigrid.wrappers")
    env = gym.make("plr_gym/procgen-coinrun-v0")
    try:
        with pytest.raises(
            AttributeError, match=r"do not apply to Procgen\. Wrap Procgen envs in LevelWrapper alone"
        ):
            wrappers.ImgObsWrapper(env)
        with pytest.raises(TypeError, match="do not apply to Procgen"):
            wrappers.FlatObsWrapper(env)
        obs, _ = env.reset(seed=7)
        assert env.observation_space.contains(obs)  # the env itself is unchanged
    finally:
        env.close()


def test_legacy_procgen_id_builds_plr_gyms_env_in_stock_procgens_default_mode() -> None:
    """``gym.make`` and SB3's ``make_vec_env`` on ``procgen-coinrun-v0``: plr_gym's env, in ``hard`` mode as
    stock Procgen's id."""
    from stable_baselines3.common.env_util import make_vec_env

    from procgen_stock import require_backend

    require_backend()
    import plr_gym.envs.procgen as procgen_module

    procgen_module._LEGACY_WARNED.discard("coinrun")
    with pytest.warns(
        UserWarning, match=r"procgen-coinrun-v0 is Procgen's legacy id and plays distribution_mode='hard'"
    ):
        legacy = gym.make("procgen-coinrun-v0")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per game; none where the mode is given
        gym.make("procgen-coinrun-v0").close()
        gym.make("procgen-bigfish-v0", distribution_mode="hard").close()
        assert gym.make("procgen-bigfish-v0", distribution_mode="easy").unwrapped.distribution_mode == "easy"
    ours = gym.make("plr_gym/procgen-coinrun-v0", distribution_mode="hard")
    try:
        assert legacy.unwrapped.distribution_mode == "hard"
        obs, info = legacy.reset(seed=5)
        assert info == {"level": 5} and np.array_equal(obs, ours.reset(seed=5)[0])
    finally:
        legacy.close()
        ours.close()
    venv = make_vec_env("procgen-coinrun-v0", n_envs=2, seed=3)
    try:
        assert venv.reset().shape == (2, 64, 64, 3) and [i["level"] for i in venv.reset_infos] == [3, 4]
    finally:
        venv.close()


def test_procgen_module_prefix_works_where_the_procgen_module_exists_else_gymnasium_names_it() -> None:
    """``procgen:procgen-coinrun-v0`` makes Gymnasium import a module ``procgen``: procgen-mirror's (Python
    3.11/3.12) registers nothing with Gymnasium, so the id is plr_gym's; procgen-gym (3.13) has no such
    module, and Gymnasium's own ModuleNotFoundError is what a user sees (docs/guide.md says so)."""
    import importlib.util

    from procgen_stock import require_backend

    require_backend()
    if importlib.util.find_spec("procgen") is None:
        with pytest.raises(ModuleNotFoundError, match="No module named 'procgen'"):
            gym.make("procgen:procgen-coinrun-v0")
        return
    env = gym.make("procgen:procgen-coinrun-v0")
    try:
        assert env.unwrapped.game == "coinrun" and env.reset(seed=2)[1] == {"level": 2}
    finally:
        env.close()


def test_sb3_unseeded_make_vec_env_resets_every_procgen_game_for_any_seed_sb3_draws() -> None:
    """SB3 seeds an unseeded VecEnv with a random uint32 (plus the env index): a Procgen seed above the last
    level (2**31 - 1) only seeds the env's RNG. 32 of SB3's own draws per game, reset only."""
    from stable_baselines3.common.env_util import make_vec_env

    from plr_gym.envs import GAMES, MAX_LEVEL
    from procgen_stock import require_backend

    require_backend()
    np.random.seed(0)  # noqa: NPY002  (SB3 draws its seeds from numpy's global RNG)
    drawn: list[int] = []
    for game in GAMES:
        venv = make_vec_env(f"plr_gym/procgen-{game}-v0", n_envs=1)  # no seed, as a user would
        try:
            for _ in range(32):
                seed = venv.seed()[0]  # what make_vec_env did: a random uint32
                venv.reset()
                level = venv.reset_infos[0]["level"]
                assert 0 <= level <= MAX_LEVEL and (seed > MAX_LEVEL or level == seed)
                drawn.append(seed)
        finally:
            venv.close()
    assert min(drawn) < 2**31 <= max(drawn) <= 2**32 - 1  # both halves of SB3's range were exercised


def test_procgen_large_seed_is_a_reproducible_rng_seed_and_no_level() -> None:
    from plr_gym.envs import MAX_LEVEL
    from procgen_stock import require_backend

    require_backend()
    env = gym.make("plr_gym/procgen-bigfish-v0", num_levels=50, start_level=100)
    try:
        for seed in (2**31, 2**32 - 1, 2**32 + 6, 2**70):
            first = [env.reset(seed=seed)[1]["level"], env.reset()[1]["level"]]
            again = [env.reset(seed=seed)[1]["level"], env.reset()[1]["level"]]
            assert first == again and all(100 <= lvl < 150 for lvl in first)  # drawn from the env's range
        assert env.reset(seed=MAX_LEVEL)[1]["level"] == MAX_LEVEL  # the last level is still a level
        with pytest.raises(ValueError, match=r"seed must be an int >= 0 .* got -1"):
            env.reset(seed=-1)
        with pytest.raises(TypeError, match=r"seed must be an int >= 0, got 2\.5"):
            env.reset(seed=2.5)
        # a level is still a level: LevelWrapper refuses a chosen one the env cannot play, naming it
        wrapped = LevelWrapper(env)
        with pytest.raises(ValueError, match=r"cannot play level 2147483648: reset\(seed=2147483648\)"):
            wrapped.reset(options={"level": 2**31})
        wrapped.set_next_level(2**31)
        with pytest.raises(ValueError, match=r"cannot play level 2147483648"):
            wrapped.reset()
        # a plain reset seed beyond the levels (SB3's own seeding) seeds the RNG: the level is the one played
        _obs, info = wrapped.reset(seed=2**31)
        assert 100 <= info["level"] < 150 and wrapped.level == info["level"]
        assert wrapped.reset(seed=2**31)[1]["level"] == info["level"]  # reproducible
        with pytest.raises(ValueError, match=r"options\[.level.\] must be an int level id in \[0, 2\*\*31"):
            env.reset(options={"level": 2**31})
        assert wrapped.reset(seed=7)[1]["level"] == 7 and wrapped.level == 7
    finally:
        env.close()


def test_level_wrapper_under_sb3_own_seeding_plays_a_level_of_every_procgen_game() -> None:
    """Issue #42: ``make_vec_env(..., wrapper_class=LevelWrapper)`` without a seed, reset by hand, by
    ``model.learn`` and by ``evaluate_policy``, without PrioritizedLevelReplay: SB3's seeds above 2**31 - 1
    seed the env's RNG and the episode plays (and reports) one of the env's levels."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy

    from plr_gym.envs import GAMES, MAX_LEVEL
    from procgen_stock import require_backend

    require_backend()
    np.random.seed(1)  # noqa: NPY002  (SB3 draws its seeds from numpy's global RNG)
    drawn: list[int] = []
    for game in GAMES:  # by hand: 12 games x 4 resets, each with a fresh SB3 seed
        venv = make_vec_env(f"plr_gym/procgen-{game}-v0", n_envs=1, wrapper_class=LevelWrapper)
        try:
            for _ in range(4):
                seed = venv.seed()[0]
                venv.reset()
                level = venv.reset_infos[0]["level"]
                assert 0 <= level <= MAX_LEVEL and (seed > MAX_LEVEL or level == seed)
                drawn.append(seed)
        finally:
            venv.close()
    assert max(drawn) >= 2**31  # SB3 drew seeds beyond Procgen's levels
    venv = make_vec_env("plr_gym/procgen-bigfish-v0", n_envs=2, wrapper_class=LevelWrapper)
    try:
        model = PPO("CnnPolicy", venv, n_steps=16, batch_size=32, n_epochs=1, seed=None, device="cpu")
        for _ in range(3):  # PPO(seed=None) leaves SB3's own random seeds in place
            venv.seed(int(np.random.randint(2**31, 2**32 - 2)))  # noqa: NPY002
            model.learn(32)
        evaluate_policy(model, venv, n_eval_episodes=2, warn=False)
    finally:
        venv.close()
