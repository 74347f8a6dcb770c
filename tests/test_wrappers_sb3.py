"""plr_gym.PrioritizedLevelReplay (SB3 VecEnvWrapper) on DummyVecEnv and SubprocVecEnv with MiniGrid."""

from __future__ import annotations

import functools
import multiprocessing as mp
from typing import Any

import gymnasium as gym
import minigrid  # noqa: F401  (registers the MiniGrid envs)
import numpy as np
import pytest
from minigrid.wrappers import ImgObsWrapper
from stable_baselines3.common.vec_env import (
    DummyVecEnv,
    SubprocVecEnv,
    VecEnv,
    VecMonitor,
    VecNormalize,
)

from conftest import Reference, Spy
from plr_gym.sampler import LevelSampler
from plr_gym.wrappers import LevelWrapper
from plr_gym.wrappers.sb3 import PrioritizedLevelReplay

DOORKEY = "MiniGrid-DoorKey-5x5-v0"
MULTIROOM = "MiniGrid-MultiRoom-N2-S4-v0"
MAX_STEPS = 5  # short episodes: many episode ends in few steps


class Crashy(gym.Wrapper[Any, Any, Any, Any]):
    """Raises on the next step (or reset) once armed through env_method."""

    def __init__(self, env: gym.Env[Any, Any]) -> None:
        super().__init__(env)
        self.armed = ""

    def arm(self, where: str) -> None:
        self.armed = where

    def step(self, action: Any) -> Any:
        if self.armed == "step":
            self.armed = ""
            raise RuntimeError("boom in step")
        return self.env.step(action)

    def reset(self, **kwargs: Any) -> Any:
        if self.armed == "reset":
            self.armed = ""
            raise RuntimeError("boom in reset")
        return self.env.reset(**kwargs)


def make_env(env_id: str = DOORKEY, level_wrapper: bool = True, crashy: bool = False) -> gym.Env[Any, Any]:
    env: gym.Env[Any, Any] = ImgObsWrapper(gym.make(env_id, max_steps=MAX_STEPS))
    if crashy:
        env = Crashy(env)
    return LevelWrapper(env) if level_wrapper else env


def make_venv(kind: str, n: int = 2, **kwargs: Any) -> VecEnv:
    fns = [functools.partial(make_env, **kwargs) for _ in range(n)]
    return DummyVecEnv(fns) if kind == "dummy" else SubprocVecEnv(fns)


def assert_episode_start(venv: PrioritizedLevelReplay, ref: Reference, obs: np.ndarray, i: int) -> None:
    """Env ``i`` just started an episode: it is exactly a fresh reset(seed=level) of its current level."""
    level = int(venv.current_levels[i])
    ref_obs, ref_hash = ref(level)
    np.testing.assert_array_equal(obs[i], ref_obs)
    assert venv.env_method("hash", indices=[i])[0] == ref_hash
    assert venv.venv.reset_infos[i]["level"] == level


def play(venv: PrioritizedLevelReplay, spy: Spy, ref: Reference, n_steps: int, seed: int = 0) -> list[int]:
    """Step with random actions, checking every level against the sampler; return the levels played."""
    n = venv.num_envs
    rng = np.random.default_rng(seed)
    k = len(spy.drawn)
    obs = venv.reset()
    assert spy.drawn[k:] == [*venv.current_levels.tolist(), *venv.next_levels.tolist()]
    played = venv.current_levels.tolist()
    for i in range(n):
        assert_episode_start(venv, ref, obs, i)
    n_done = 0
    for _ in range(n_steps):
        before, queued, k = venv.current_levels, venv.next_levels, len(spy.drawn)
        obs, _, dones, infos = venv.step(rng.integers(0, 7, size=n))
        # every transition, including the one that ends an episode, reports its own episode's level
        assert [info["level"] for info in infos] == before.tolist()
        done = np.flatnonzero(dones)
        after = venv.current_levels
        np.testing.assert_array_equal(after[~dones], before[~dones])
        np.testing.assert_array_equal(after[done], queued[done])  # the level queued one episode ahead
        assert spy.drawn[k:] == venv.next_levels[done].tolist()  # and the next one is a fresh draw
        for i in done:
            assert_episode_start(venv, ref, obs, int(i))
        played.extend(after[done].tolist())
        n_done += done.size
    assert n_done >= n  # every env finished at least one episode
    return played


@pytest.mark.parametrize(
    ("kind", "env_id"), [("dummy", DOORKEY), ("dummy", MULTIROOM), ("subproc", MULTIROOM)]
)
def test_each_episode_plays_the_sampled_level(kind: str, env_id: str) -> None:
    children = set(mp.active_children())
    sampler = LevelSampler(levels=range(50), strategy="random", seed=1)
    spy = Spy(sampler)
    venv = PrioritizedLevelReplay(make_venv(kind, env_id=env_id), sampler=sampler)
    try:
        played = play(venv, spy, Reference(env_id, MAX_STEPS), n_steps=4 * MAX_STEPS)
        assert len(set(played)) > 2
        played = play(venv, spy, Reference(env_id, MAX_STEPS), n_steps=MAX_STEPS)  # a second reset works too
    finally:
        venv.close()
    assert set(mp.active_children()) <= children  # no worker process left behind


def test_one_level_set_plays_only_that_level() -> None:
    sampler = LevelSampler(levels=[7], seed=0)
    spy = Spy(sampler)
    venv = PrioritizedLevelReplay(make_venv("dummy", n=3), sampler=sampler)
    played = play(venv, spy, Reference(DOORKEY, MAX_STEPS), n_steps=2 * MAX_STEPS)
    assert set(played) == {7} and set(spy.drawn) == {7}
    venv.close()


def test_seed_does_not_change_the_levels() -> None:
    venv = PrioritizedLevelReplay(make_venv("dummy"), levels=range(30), seed=5)
    spy = Spy(venv.sampler)
    venv.seed(123)  # what PPO(..., seed=123) does: the reset seeds stay the levels
    play(venv, spy, Reference(DOORKEY, MAX_STEPS), n_steps=MAX_STEPS + 1)
    venv.close()


def test_builds_its_own_sampler_from_keyword_arguments() -> None:
    venv = PrioritizedLevelReplay(make_venv("dummy"), levels=range(5, 9), strategy="random", seed=3)
    assert isinstance(venv.sampler, LevelSampler)
    assert venv.sampler.levels.tolist() == [5, 6, 7, 8] and venv.sampler.strategy == "random"
    venv.reset()
    assert set(venv.current_levels.tolist()) <= {5, 6, 7, 8}
    venv.close()


def test_constructor_errors() -> None:
    venv = make_venv("dummy")
    with pytest.raises(ValueError, match="either sampler"):
        PrioritizedLevelReplay(venv, sampler=LevelSampler(range(3)), levels=range(3))
    with pytest.raises(ValueError, match="levels="):
        PrioritizedLevelReplay(venv)
    with pytest.raises(TypeError, match="LevelSampler"):
        PrioritizedLevelReplay(venv, levels=range(3), not_an_argument=1)
    with pytest.raises(TypeError, match="LevelSampler"):
        PrioritizedLevelReplay(venv, sampler=range(3))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="outside"):
        PrioritizedLevelReplay(VecNormalize(venv), levels=range(3))
    with pytest.raises(ValueError, match="wrapper_class=LevelWrapper"):
        PrioritizedLevelReplay(make_venv("dummy", level_wrapper=False), levels=range(3))


def test_level_outside_the_sampler_set_raises() -> None:
    class Rogue(LevelSampler):
        offset = 0

        def sample(self, n: int | None = None) -> Any:
            return super().sample(n) + self.offset

    sampler = Rogue(levels=range(10), seed=0)
    venv = PrioritizedLevelReplay(make_venv("dummy"), sampler=sampler)
    sampler.offset = 1000
    with pytest.raises(ValueError, match="not one of"):
        venv.reset()
    sampler.offset = 0
    venv.reset()
    sampler.offset = 1000  # now the level queued at the next episode end is out of the set
    with pytest.raises(ValueError, match="not one of"):
        for _ in range(MAX_STEPS):
            venv.step(np.zeros(2, dtype=np.int64))
    with pytest.raises(RuntimeError, match="reset"):
        venv.step(np.zeros(2, dtype=np.int64))
    venv.close()


def test_user_options_must_not_choose_levels() -> None:
    venv = PrioritizedLevelReplay(make_venv("dummy"), levels=range(10))
    with pytest.raises(ValueError, match="level"):
        venv.set_options({"level": 3})
    with pytest.raises(RuntimeError, match="reset"):
        venv.step(np.zeros(2, dtype=np.int64))  # step before reset
    venv.close()


@pytest.mark.parametrize("where", ["step", "reset"])
def test_crashing_env_in_dummy_vec_env(where: str) -> None:
    sampler = LevelSampler(levels=range(20), seed=0)
    venv = PrioritizedLevelReplay(make_venv("dummy", crashy=True), sampler=sampler)
    venv.reset()
    venv.env_method("arm", where, indices=[1])
    with pytest.raises(RuntimeError, match=f"boom in {where}"):
        if where == "reset":
            venv.reset()
        for _ in range(MAX_STEPS):
            venv.step(np.zeros(2, dtype=np.int64))
    with pytest.raises(RuntimeError, match="reset"):
        venv.step(np.zeros(2, dtype=np.int64))
    # The sampler is untouched by the failure and keeps working.
    sampler.update(sampler.sample(), 1.0)
    assert sampler.num_seen == 1
    spy = Spy(sampler)
    play(
        venv, spy, Reference(DOORKEY, MAX_STEPS), n_steps=MAX_STEPS
    )  # and the VecEnv works again after reset
    venv.close()


def test_crashing_worker_in_subproc_vec_env_closes_cleanly() -> None:
    children = set(mp.active_children())
    sampler = LevelSampler(levels=range(20), seed=0)
    venv = PrioritizedLevelReplay(make_venv("subproc", crashy=True), sampler=sampler)
    venv.reset()
    venv.env_method("arm", "step", indices=[0])
    with pytest.raises(RuntimeError, match="worker process died"):
        venv.step(np.zeros(2, dtype=np.int64))
    sampler.update(sampler.sample(), 1.0)
    venv.close()  # must not hang on the dead worker's pipe
    venv.close()  # idempotent
    assert set(mp.active_children()) <= children


def test_outer_wrappers_and_ppo() -> None:
    from stable_baselines3 import PPO

    plr = PrioritizedLevelReplay(make_venv("dummy"), levels=range(20), seed=0)
    venv = VecNormalize(VecMonitor(plr), norm_reward=False)
    venv.reset()
    _, _, _, infos = venv.step(np.zeros(2, dtype=np.int64))
    assert [info["level"] for info in infos] == plr.current_levels.tolist()
    model = PPO("MlpPolicy", venv, n_steps=8, batch_size=16, n_epochs=1, seed=0, device="cpu")
    model.learn(16)
    assert model.num_timesteps == 16
    venv.close()
