"""The batched Procgen envs play every env's episodes exactly as ``ProcgenLevelEnv`` does.

On the installed Procgen build (procgen-mirror on Python 3.11/3.12, procgen-gym on 3.13).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from stable_baselines3.common.vec_env import DummyVecEnv

from plr_gym.envs import GAMES, ProcgenLevelEnv, ProcgenVectorEnv, procgen_env_id
from plr_gym.envs.procgen_sb3 import ProcgenVecEnv
from plr_gym.vector import PrioritizedLevelReplay as VectorPLR
from plr_gym.wrappers import LevelWrapper
from plr_gym.wrappers.sb3 import PrioritizedLevelReplay
from procgen_stock import require_backend

require_backend()

LEVELS = (0, 1, 2, 9, 10, 2**31 - 1)


def _run_batched(
    envs: ProcgenVectorEnv, n_steps: int, seed: int, actions: np.ndarray | None = None, abandon: bool = True
):
    """Random actions and level schedule; per env: its episodes as (level, first obs, [step records])."""
    n = envs.num_envs
    rng = np.random.default_rng(seed)
    start = rng.choice(LEVELS, size=n).tolist()
    obs, info = envs.reset(seed=seed, options={"level": start})  # the seed seeds the drawn levels
    assert info["level"].tolist() == start
    episodes: list[list[list]] = [[[start[i], obs[i], []]] for i in range(n)]
    for t in range(n_steps):
        if rng.random() < 0.3:  # queue levels for some envs' next episodes (None: drawn by the env)
            queue = [None if rng.random() < 0.3 else int(rng.choice(LEVELS)) for _ in range(n)]
            envs.set_attr("next_level", queue)
        if abandon and t == n_steps // 2:  # abandon env 0's episode: partial reset on a chosen level
            mask = np.zeros(n, dtype=bool)
            mask[0] = True
            level = int(rng.choice(LEVELS))
            obs, info = envs.reset(options={"level": level, "reset_mask": mask})
            assert info["level"][0] == level and info["_level"].tolist() == mask.tolist()
            episodes[0].append([level, obs[0], []])
        act = rng.integers(0, 15, n) if actions is None else actions[t]
        obs, rewards, terminated, truncated, info = envs.step(act)
        for i in range(n):
            ended = terminated[i] or truncated[i]
            if ended:
                assert info["_final_obs"][i] and info["_final_info"][i]
                final = info["final_obs"][i]
                complete = info["final_info"]["level_complete"][i]
                assert info["final_info"]["level"][i] == episodes[i][-1][0]
                assert not info["_level_complete"][i]
            else:
                final, complete = obs[i], info["level_complete"][i]
            episodes[i][-1][2].append((int(act[i]), final, rewards[i], terminated[i], truncated[i], complete))
            if ended:
                episodes[i].append([int(info["level"][i]), obs[i], []])
            else:
                assert info["level"][i] == episodes[i][-1][0]
    states = [envs.get_state(i) for i in range(n)]
    return episodes, states


def _check_against_single(single: ProcgenLevelEnv, episodes, states) -> int:
    """Replay each env's episodes in ``single``; every observation, reward and flag, byte for byte."""
    ends = 0
    for env_episodes, state in zip(episodes, states):
        for level, first, steps in env_episodes:
            obs, info = single.reset(seed=level)
            assert info["level"] == level
            np.testing.assert_array_equal(obs, first)
            for action, expected_obs, reward, terminated, truncated, complete in steps:
                obs, r, te, tr, info = single.step(action)
                np.testing.assert_array_equal(obs, expected_obs)
                assert (r, te, tr, info["level_complete"]) == (reward, terminated, truncated, complete)
                ends += te or tr
        assert single._get_state() == state  # the same Procgen state bytes at the end
    return ends


@pytest.mark.parametrize("game", GAMES)
def test_each_env_plays_exactly_as_procgen_level_env(game: str) -> None:
    envs = gym.make_vec(
        procgen_env_id(game), num_envs=4, vectorization_mode="vector_entry_point", num_threads=0
    )
    assert isinstance(envs, ProcgenVectorEnv)
    assert envs.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
    episodes, states = _run_batched(envs, n_steps=60, seed=GAMES.index(game))
    envs.close()
    single = ProcgenLevelEnv(game)
    _check_against_single(single, episodes, states)
    single.close()


def test_episode_ends_are_exact() -> None:
    """Many natural episode ends (autoresets onto queued and drawn levels), more envs and threads."""
    envs = ProcgenVectorEnv("dodgeball", num_envs=8, num_threads=2)
    episodes, states = _run_batched(envs, n_steps=120, seed=1)
    envs.close()
    single = ProcgenLevelEnv("dodgeball")
    assert _check_against_single(single, episodes, states) == 22  # fixed seeds: the episodes that ended
    single.close()


def test_truncation_at_procgen_time_limit() -> None:
    envs = ProcgenVectorEnv("maze", num_envs=2, num_threads=0)
    limit = envs.max_episode_steps
    assert limit == 500
    noop = np.full((limit + 3, 2), 4)  # standing still: the time limit ends both episodes
    episodes, states = _run_batched(envs, n_steps=limit + 3, seed=0, actions=noop, abandon=False)
    envs.close()
    for env_episodes in episodes:
        ended = [steps[-1] for _, _, steps in env_episodes if steps and (steps[-1][3] or steps[-1][4])]
        assert [(te, tr) for _, _, _, te, tr, _ in ended] == [(False, True)]
    single = ProcgenLevelEnv("maze")
    assert _check_against_single(single, episodes, states) == 2
    single.close()


def test_sb3_face_under_plr_equals_dummy_vec_env_route() -> None:
    """PrioritizedLevelReplay over ProcgenVecEnv gives what it gives over DummyVecEnv x LevelWrapper."""
    n = 4
    make = lambda: LevelWrapper(ProcgenLevelEnv("bossfight"))  # noqa: E731
    routes = [
        PrioritizedLevelReplay(ProcgenVecEnv("bossfight", n_envs=n, num_threads=0), levels=range(20), seed=3),
        PrioritizedLevelReplay(DummyVecEnv([make] * n), levels=range(20), seed=3),
    ]
    assert routes[0].venv.env_is_wrapped(LevelWrapper) == [True] * n
    outs = [[route.reset()] for route in routes]
    rng = np.random.default_rng(0)
    ends = 0
    for _ in range(80):
        actions = rng.integers(0, 15, n)
        steps = [route.step(actions) for route in routes]
        (o0, r0, d0, i0), (o1, r1, d1, i1) = steps
        np.testing.assert_array_equal(o0, o1)
        np.testing.assert_array_equal(r0, r1)
        np.testing.assert_array_equal(d0, d1)
        for a, b in zip(i0, i1):
            assert a.keys() <= b.keys()
            for key in a:
                np.testing.assert_array_equal(a[key], b[key])
        assert [x["level"] for x in routes[0].reset_infos] == [x["level"] for x in routes[1].reset_infos]
        ends += int(d0.sum())
    assert ends == 6
    np.testing.assert_array_equal(routes[0].current_levels, routes[1].current_levels)
    for route in routes:
        route.close()
    del outs


def test_gymnasium_face_under_plr_equals_sync_vector_env_route() -> None:
    n = 3
    make = lambda: LevelWrapper(ProcgenLevelEnv("jumper"))  # noqa: E731
    routes = [
        VectorPLR(ProcgenVectorEnv("jumper", num_envs=n, num_threads=0), levels=range(20), seed=5),
        VectorPLR(
            SyncVectorEnv([make] * n, autoreset_mode=AutoresetMode.SAME_STEP), levels=range(20), seed=5
        ),
    ]
    resets = [route.reset() for route in routes]
    np.testing.assert_array_equal(resets[0][0], resets[1][0])
    np.testing.assert_array_equal(resets[0][1]["level"], resets[1][1]["level"])
    rng = np.random.default_rng(1)
    ends = 0
    for _ in range(80):
        actions = rng.integers(0, 15, n)
        (o0, r0, te0, tr0, i0), (o1, r1, te1, tr1, i1) = (route.step(actions) for route in routes)
        for x, y in ((o0, o1), (r0, r1), (te0, te1), (tr0, tr1)):
            np.testing.assert_array_equal(x, y)
        for key in ("level", "_level", "level_complete", "_level_complete"):
            np.testing.assert_array_equal(i0[key], i1[key])
        if "final_obs" in i1:
            np.testing.assert_array_equal(i0["_final_obs"], i1["_final_obs"])
            for i in np.flatnonzero(i1["_final_obs"]):
                np.testing.assert_array_equal(i0["final_obs"][i], i1["final_obs"][i])
                for key in ("level", "level_complete"):
                    assert i0["final_info"][key][i] == i1["final_info"][key][i]
        else:
            assert "final_obs" not in i0
        np.testing.assert_array_equal(routes[0].current_levels, routes[1].current_levels)
        ends += int((te0 | tr0).sum())
    assert ends == 5
    for route in routes:
        route.close()


def test_level_precedence_and_contract() -> None:
    envs = ProcgenVectorEnv("coinrun", num_envs=3, num_threads=0)
    assert envs.call("has_wrapper_attr", "set_next_level") == (True, True, True)
    envs.set_attr("next_level", [4, None, 6])
    assert envs.get_attr("next_level") == (4, None, 6)
    # options["level"] beats the seed, which beats the queued level; every reset consumes the queue
    _, info = envs.reset(seed=[10, 11, None], options={"level": [1, 2, 3]})
    assert info["level"].tolist() == [1, 2, 3] and envs.get_attr("next_level") == (None, None, None)
    envs.call("set_next_level", 8)
    _, info = envs.reset(seed=[10, None, None])
    assert info["level"].tolist() == [10, 8, 8]
    _, info = envs.reset(seed=20)  # an int seed: env i plays level seed + i, as SyncVectorEnv seeds
    assert info["level"].tolist() == [20, 21, 22] and envs.get_attr("level") == (20, 21, 22)
    with pytest.raises(ValueError, match="num_envs must be an int >= 1"):
        ProcgenVectorEnv("coinrun", num_envs=0)
    with pytest.raises(ValueError, match="game must be one of"):
        ProcgenVectorEnv("pong", num_envs=2)
    with pytest.raises(ValueError, match=r"options\['level'\] must be an int level id in \[0, 2\*\*31 - 1\]"):
        envs.reset(options={"level": -1})
    with pytest.raises(ValueError, match="unknown reset options"):
        envs.reset(options={"levels": 1})
    with pytest.raises(ValueError, match="must hold 3 values"):
        envs.set_attr("next_level", [1, 2])
    with pytest.raises(ValueError, match="actions must be 3 integer actions"):
        envs.step(np.zeros(2, dtype=np.int64))
    with pytest.raises(ValueError, match=r"actions must be in \[0, 15\)"):
        envs.step(np.array([0, 15, 0]))
    with pytest.raises(AttributeError, match="only 'next_level' can be set"):
        envs.set_attr("level", 3)
    # a whole queue is checked before any of it is taken (int arrays at once, other values one by one)
    envs.set_attr("next_level", np.array([5, 6, 7]))
    for bad, error, match in (
        (np.array([1, -2, 3]), ValueError, "next_level must be an int level id in .* got -2"),
        ([1, 2, 2**31], ValueError, "next_level must be an int level id in .* got 2147483648"),
        ([1, 2.0, 3], TypeError, "next_level must be an int level id .* got 2.0"),
        ([1, True, 3], TypeError, "got True"),
        (np.array([1.0, 2.0, 3.0]), TypeError, "got 1.0"),
    ):
        with pytest.raises(error, match=match):
            envs.set_attr("next_level", bad)
        assert envs.get_attr("next_level") == (5, 6, 7)
    envs.set_attr("next_level", np.array([1, 2, 3], dtype=np.uint8))
    queued = envs.get_attr("next_level")
    assert queued == (1, 2, 3) and all(type(v) is int for v in queued)
    with pytest.raises(IndexError, match=r"index must be an env index in \[0, 3\), got 3"):
        envs.get_state(3)
    envs.close()
    with pytest.raises(RuntimeError, match="closed"):
        envs.step(np.zeros(3, dtype=np.int64))
    with pytest.raises(RuntimeError, match="closed"):  # not a call into the freed C env
        envs.get_state(0)
