"""plr_gym.vector.PrioritizedLevelReplay on SyncVectorEnv/AsyncVectorEnv in every autoreset mode."""

from __future__ import annotations

import functools
import multiprocessing as mp
from typing import Any

import gymnasium as gym
import minigrid  # noqa: F401  (registers the MiniGrid envs)
import numpy as np
import pytest
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv, VectorEnv
from minigrid.wrappers import ImgObsWrapper

from conftest import Reference, Spy
from plr_gym.sampler import LevelSampler
from plr_gym.vector import PrioritizedLevelReplay
from plr_gym.wrappers import LevelWrapper

DOORKEY = "MiniGrid-DoorKey-5x5-v0"
MULTIROOM = "MiniGrid-MultiRoom-N2-S4-v0"
MAX_STEPS = 5
MODES = [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP, AutoresetMode.DISABLED]


class Crashy(gym.Wrapper[Any, Any, Any, Any]):
    """Raises on the next step once its ``armed`` attribute is set (through ``set_attr``)."""

    def __init__(self, env: gym.Env[Any, Any]) -> None:
        super().__init__(env)
        self.armed = False

    def step(self, action: Any) -> Any:
        if self.armed:
            self.armed = False
            raise RuntimeError("boom in step")
        return self.env.step(action)


def make_env(env_id: str = DOORKEY, level_wrapper: bool = True, crashy: bool = False) -> gym.Env[Any, Any]:
    env: gym.Env[Any, Any] = ImgObsWrapper(gym.make(env_id, max_steps=MAX_STEPS))
    if crashy:
        env = Crashy(env)
    return LevelWrapper(env) if level_wrapper else env


def make_vec(
    kind: str, mode: AutoresetMode = AutoresetMode.NEXT_STEP, n: int = 2, **kwargs: Any
) -> VectorEnv:
    fns = [functools.partial(make_env, **kwargs) for _ in range(n)]
    if kind == "sync":
        return SyncVectorEnv(fns, autoreset_mode=mode)
    return AsyncVectorEnv(fns, autoreset_mode=mode)


def assert_episode_starts(envs: PrioritizedLevelReplay, ref: Reference, obs: np.ndarray, idx: Any) -> None:
    """The envs ``idx`` just started an episode: each is a fresh reset(seed=level) of its current level."""
    hashes = envs.unwrapped.call("hash")  # type: ignore[attr-defined]
    for i in np.atleast_1d(idx).tolist():
        ref_obs, ref_hash = ref(int(envs.current_levels[i]))
        np.testing.assert_array_equal(obs[i], ref_obs)
        assert hashes[i] == ref_hash


def play(envs: PrioritizedLevelReplay, spy: Spy, ref: Reference, n_steps: int, seed: int = 0) -> list[int]:
    """Random actions; check every reported level against the sampler's draws; return the levels played."""
    n, mode = envs.num_envs, envs.autoreset_mode
    rng = np.random.default_rng(seed)
    k = len(spy.drawn)
    obs, info = envs.reset()
    np.testing.assert_array_equal(info["level"], spy.drawn[k : k + n])
    np.testing.assert_array_equal(info["level"], envs.current_levels)
    assert info["_level"].all()
    if mode == AutoresetMode.SAME_STEP:
        assert spy.drawn[k + n :] == envs.next_levels.tolist()
    assert_episode_starts(envs, ref, obs, range(n))
    played = envs.current_levels.tolist()
    resetting = np.zeros(n, dtype=bool)  # NEXT_STEP: envs whose next step is a reset step
    n_done = 0
    for _ in range(n_steps):
        before, queued, k = envs.current_levels, envs.next_levels, len(spy.drawn)
        obs, _, terminated, truncated, info = envs.step(rng.integers(0, 7, size=n))
        done = np.logical_or(terminated, truncated)
        after = envs.current_levels
        assert info["_level"].all()
        if mode == AutoresetMode.NEXT_STEP:
            # reset steps report the new episode's level, drawn just now; other steps their own episode's
            np.testing.assert_array_equal(info["level"], after)
            np.testing.assert_array_equal(after[~resetting], before[~resetting])
            assert spy.drawn[k:] == after[resetting].tolist()
            assert_episode_starts(envs, ref, obs, np.flatnonzero(resetting))
            played.extend(after[resetting].tolist())
            resetting = done
        else:
            # the step that ends an episode reports the finished episode's level
            np.testing.assert_array_equal(info["level"], before)
            if mode == AutoresetMode.SAME_STEP:
                np.testing.assert_array_equal(after[done], queued[done])  # queued one episode ahead
                np.testing.assert_array_equal(after[~done], before[~done])
                assert spy.drawn[k:] == envs.next_levels[done].tolist()
                if done.any():
                    np.testing.assert_array_equal(info["final_info"]["level"][done], before[done])
                assert_episode_starts(envs, ref, obs, np.flatnonzero(done))
                played.extend(after[done].tolist())
            else:  # DISABLED: the user resets finished envs; the wrapper draws their levels then
                np.testing.assert_array_equal(after, before)
                if done.any():
                    k = len(spy.drawn)
                    obs, info = envs.reset(options={"reset_mask": done})
                    np.testing.assert_array_equal(info["_level"], done)
                    np.testing.assert_array_equal(info["level"][done], spy.drawn[k:])
                    np.testing.assert_array_equal(envs.current_levels[~done], before[~done])
                    assert_episode_starts(envs, ref, obs, np.flatnonzero(done))
                    played.extend(spy.drawn[k:])
        n_done += int(done.sum())
    assert n_done >= n
    return played


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
@pytest.mark.parametrize("kind", ["sync", "async"])
def test_each_episode_plays_the_sampled_level(kind: str, mode: AutoresetMode) -> None:
    children = set(mp.active_children())
    env_id = MULTIROOM if kind == "sync" else DOORKEY
    sampler = LevelSampler(levels=range(50), strategy="random", seed=2)
    spy = Spy(sampler)
    envs = PrioritizedLevelReplay(make_vec(kind, mode, env_id=env_id), sampler=sampler)
    try:
        played = play(envs, spy, Reference(env_id, MAX_STEPS), n_steps=4 * MAX_STEPS)
        assert len(set(played)) > 2
    finally:
        envs.close()
    assert set(mp.active_children()) <= children  # no worker process left behind


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
def test_one_level_set_plays_only_that_level(mode: AutoresetMode) -> None:
    sampler = LevelSampler(levels=[7], seed=0)
    spy = Spy(sampler)
    envs = PrioritizedLevelReplay(make_vec("sync", mode, n=3), sampler=sampler)
    played = play(envs, spy, Reference(DOORKEY, MAX_STEPS), n_steps=3 * MAX_STEPS)
    assert set(played) == {7} and set(spy.drawn) == {7}
    envs.close()


def test_reset_seed_does_not_change_levels() -> None:
    envs = PrioritizedLevelReplay(make_vec("sync"), levels=range(30), seed=4)
    spy = Spy(envs.sampler)
    _, info = envs.reset(seed=123)
    assert info["level"].tolist() == spy.drawn


def test_errors() -> None:
    with pytest.raises(ValueError, match="are not wrapped in"):
        PrioritizedLevelReplay(make_vec("sync", level_wrapper=False), levels=range(3))
    with pytest.raises(ValueError, match="either sampler"):
        PrioritizedLevelReplay(make_vec("sync"), sampler=LevelSampler(range(3)), levels=range(3))
    envs = PrioritizedLevelReplay(make_vec("sync"), levels=range(3))
    with pytest.raises(RuntimeError, match="reset"):
        envs.step(np.zeros(2, dtype=np.int64))
    with pytest.raises(ValueError, match="level"):
        envs.reset(options={"level": 1})
    with pytest.raises(TypeError, match="reset_mask"):
        envs.reset(options={"reset_mask": [True, False]})


def test_level_outside_the_sampler_set_raises() -> None:
    class Rogue(LevelSampler):
        def sample(self, n: int | None = None) -> Any:
            return super().sample(n) + 1000

    envs = PrioritizedLevelReplay(make_vec("sync"), sampler=Rogue(levels=range(10), seed=0))
    with pytest.raises(ValueError, match="not one of"):
        envs.reset()


@pytest.mark.filterwarnings("ignore:.*(Received the following error|Traceback|Raising the last exception)")
@pytest.mark.parametrize("kind", ["sync", "async"])
def test_crashing_env_raises_and_leaves_the_sampler_usable(kind: str) -> None:
    children = set(mp.active_children())
    sampler = LevelSampler(levels=range(20), seed=0)
    envs = PrioritizedLevelReplay(make_vec(kind, crashy=True), sampler=sampler)
    envs.reset()
    envs.unwrapped.set_attr("armed", [False, True])  # type: ignore[attr-defined]
    with pytest.raises(RuntimeError, match="boom in step"):
        envs.step(np.zeros(2, dtype=np.int64))
    with pytest.raises(RuntimeError, match="reset"):
        envs.step(np.zeros(2, dtype=np.int64))
    sampler.update(sampler.sample(), 1.0)
    assert sampler.num_seen == 1
    if kind == "sync":  # the sub-env itself survived: the vector env works again after a reset
        play(envs, Spy(sampler), Reference(DOORKEY, MAX_STEPS), n_steps=MAX_STEPS + 1)
    envs.close()
    assert set(mp.active_children()) <= children
