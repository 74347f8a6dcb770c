"""Names people bring from elsewhere: the legacy Procgen ids, and MiniGrid's wrappers on Procgen."""

from __future__ import annotations

import pickle

import gymnasium as gym
import numpy as np
import pytest

from conftest import run_cli
from plr_gym import training
from plr_gym.envs._frames import FrameSpace

LEGACY_IDS = ["procgen-coinrun-v0", "procgen:procgen-coinrun-v0", "procgen/coinrun", "Procgen-CoinRun-v0"]


@pytest.mark.parametrize("env_id", LEGACY_IDS)
def test_legacy_procgen_ids_point_to_plr_gyms(env_id: str) -> None:
    assert training.procgen_id_for(env_id) == "plr_gym/procgen-coinrun-v0"
    with pytest.raises(training.SetupError, match=r"use 'plr_gym/procgen-coinrun-v0', whose reset\(seed=s\)"):
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
    assert f"plr-gym: error: {env_id!r} is not plr_gym's Procgen env: use 'plr_gym/procgen-coinrun-v0'" in err


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
