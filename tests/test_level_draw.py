"""``level_draw="episode_end"``: each episode plays the level the sampler returned at the step that ended the
previous episode of its env (level-replay's ``VecPyTorchProcgen.step_wait``), on both wrappers, over
real MiniGrid and real batched Procgen envs; and the refusals."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import minigrid  # noqa: F401  (registers the MiniGrid envs)
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from minigrid.wrappers import ImgObsWrapper
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

from plr_gym import LevelBuffer, LevelSampler
from plr_gym.vector import PrioritizedLevelReplay as VectorPLR
from plr_gym.wrappers import LevelWrapper
from plr_gym.wrappers.sb3 import PrioritizedLevelReplay

MINIGRID = "MiniGrid-DoorKey-5x5-v0"


def _minigrid(max_steps: int) -> Callable[[], gym.Env[Any, Any]]:
    return lambda: LevelWrapper(ImgObsWrapper(gym.make(MINIGRID, max_steps=max_steps)))


def _first_obs(level: int) -> np.ndarray:
    return ImgObsWrapper(gym.make(MINIGRID)).reset(seed=level)[0]


class DrawLog:
    """Records every level the sampler hands out, with the step (``-1``: reset) and the env."""

    def __init__(self, sampler: LevelSampler) -> None:
        self.step = -1
        self.calls: list[tuple[int, int, int]] = []
        real = sampler.next_levels

        def spy(envs: Any) -> Any:
            out = real(envs)
            self.calls.extend(
                (self.step, int(e), int(v)) for e, v in zip(np.asarray(envs).tolist(), out.tolist())
            )
            return out

        sampler.next_levels = spy  # type: ignore[method-assign]

    def at(self, step: int) -> list[tuple[int, int]]:
        return [(e, v) for s, e, v in self.calls if s == step]


def _rescore(sampler: LevelSampler, t: int, rng: np.random.Generator) -> None:
    """Change the sampler between steps (a rollout's end), so that draws at different steps differ."""
    if t % 4 == 3:
        for level in rng.choice(sampler.levels, size=3, replace=False).tolist():
            sampler.update(level, float(rng.random()))


def _check_sb3(venv: PrioritizedLevelReplay, log: DrawLog, n_steps: int, first_obs: Any = None) -> int:
    """Step ``venv``; every episode's level is what the sampler returned at the step that ended the previous
    one (in env order, one draw per ended episode), every step reports it, and the new episode's first
    observation replaces the ended env's row while ``terminal_observation`` keeps its last frame."""
    sampler = venv.sampler
    assert sampler is not None
    rng = np.random.default_rng(0)
    venv.reset()
    playing = np.array([v for _, v in log.at(-1)])
    assert playing.tolist() == venv.current_levels.tolist()
    ends = 0
    for t in range(n_steps):
        _rescore(sampler, t, rng)
        log.step = t
        obs, _, dones, infos = venv.step(rng.integers(0, venv.action_space.n, venv.num_envs))
        assert [info["level"] for info in infos] == playing.tolist()
        drawn = log.at(t)
        assert [e for e, _ in drawn] == np.flatnonzero(dones).tolist()  # in env order, one per end
        for e, level in drawn:
            playing[e] = level
            assert venv.reset_infos[e]["level"] == level
            assert "terminal_observation" in infos[e]
            if first_obs is not None:
                np.testing.assert_array_equal(obs[e], first_obs(level))
        assert venv.current_levels.tolist() == playing.tolist()
        ends += len(drawn)
    return ends


def test_sb3_dummy_vec_env_draws_each_level_when_the_previous_episode_ends() -> None:
    sampler = LevelSampler(range(40), seed=1, min_seen_ratio=0.0, staleness_coef=0.1)
    log = DrawLog(sampler)
    venv = PrioritizedLevelReplay(
        DummyVecEnv([_minigrid(5), _minigrid(7), _minigrid(4)]), sampler=sampler, level_draw="episode_end"
    )
    assert _check_sb3(venv, log, 40, _first_obs) == 8 + 5 + 10
    assert len(log.calls) == 3 + 23  # the reset's first levels, then one per ended episode, nothing queued
    venv.close()


def test_sb3_episode_start_still_queues_the_next_level_when_an_episode_starts() -> None:
    sampler = LevelSampler(range(40), seed=1)
    log = DrawLog(sampler)
    venv = PrioritizedLevelReplay(DummyVecEnv([_minigrid(5), _minigrid(7)]), sampler=sampler)
    assert venv.level_draw == "episode_start"
    venv.reset()
    assert len(log.at(-1)) == 4  # first and queued levels
    queued = venv.next_levels
    for t in range(5):
        log.step = t
        venv.step(np.zeros(2, dtype=np.int64))
    assert venv.current_levels[0] == queued[0] and log.at(4) == [(0, venv.next_levels[0])]


def test_scoring_stays_exact_with_episode_end() -> None:
    """Each episode is scored once, with the level it played (the logged levels are the drawn ones)."""
    from plr_gym.scoring import EpisodeScorer

    sampler = LevelSampler(range(40), seed=2, strategy="value_l1")
    log = DrawLog(sampler)
    venv = PrioritizedLevelReplay(
        DummyVecEnv([_minigrid(3), _minigrid(5)]), sampler=sampler, level_draw="episode_end"
    )
    venv.reset()
    starts, dones_rows = [np.ones(2, dtype=bool)], []
    for t in range(10):
        log.step = t
        _, _, dones, _ = venv.step(np.zeros(2, dtype=np.int64))
        dones_rows.append(dones.copy())
        starts.append(dones.copy())
    scorer = EpisodeScorer(sampler, n_envs=2, strategy="value_l1")
    advantages = np.arange(20, dtype=np.float64).reshape(10, 2)
    reported = venv.score_rollout(
        scorer, episode_starts=np.stack(starts[:-1]), dones=dones_rows[-1], rewards=np.zeros((10, 2)),
        values=np.zeros((10, 2)), advantages=advantages,
    )  # fmt: skip
    played = [v for _, v in log.at(-1)] + [v for s, e, v in log.calls if s >= 0]
    # env 0 ends at steps 2, 5, 8 (3 episodes), env 1 at 4, 9 (2): scored in the order they end, per env
    expected_levels = [log.at(-1)[0][1], log.at(2)[0][1], log.at(5)[0][1], log.at(-1)[1][1], log.at(4)[0][1]]
    assert sorted(level for level, _ in reported) == sorted(expected_levels)
    assert len(reported) == 5 and set(expected_levels) <= set(played)
    venv.close()


def test_gymnasium_same_step_draws_at_the_autoreset() -> None:
    sampler = LevelSampler(range(40), seed=3, min_seen_ratio=0.0)
    log = DrawLog(sampler)
    envs = VectorPLR(
        SyncVectorEnv([_minigrid(5), _minigrid(6)], autoreset_mode=AutoresetMode.SAME_STEP),
        sampler=sampler,
        level_draw="episode_end",
    )
    _, info = envs.reset()
    playing = info["level"].copy()
    rng = np.random.default_rng(0)
    for t in range(30):
        _rescore(sampler, t, rng)
        log.step = t
        obs, _, term, trunc, info = envs.step(np.zeros(2, dtype=np.int64))
        assert info["level"].tolist() == playing.tolist()
        drawn = log.at(t)
        assert [e for e, _ in drawn] == np.flatnonzero(term | trunc).tolist()
        for e, level in drawn:
            playing[e] = level
            np.testing.assert_array_equal(obs[e], _first_obs(level))
        assert envs.current_levels.tolist() == playing.tolist()
    assert len(log.calls) == 2 + 6 + 5
    envs.close()


def test_gymnasium_next_step_draws_at_the_end_step_and_plays_it_at_the_reset_step() -> None:
    """NEXT_STEP: drawn when the episode ends, not at the reset step: a report (sampler change) between
    them does not change it."""
    sampler = LevelSampler(range(40), seed=4, min_seen_ratio=0.0)
    log = DrawLog(sampler)
    envs = VectorPLR(SyncVectorEnv([_minigrid(4), _minigrid(6)]), sampler=sampler, level_draw="episode_end")
    assert envs.autoreset_mode == AutoresetMode.NEXT_STEP
    _, info = envs.reset()
    playing = info["level"].copy()
    pending: dict[int, int] = {}
    rng = np.random.default_rng(0)
    for t in range(30):
        log.step = t
        obs, _, term, trunc, info = envs.step(np.zeros(2, dtype=np.int64))
        for e, level in pending.items():  # the reset step: the level drawn one step earlier
            playing[e] = level
            np.testing.assert_array_equal(obs[e], _first_obs(level))
        assert info["level"].tolist() == playing.tolist()
        drawn = log.at(t)
        assert [e for e, _ in drawn] == np.flatnonzero(term | trunc).tolist()
        pending = dict(drawn)
        _rescore(sampler, 3, rng)  # the sampler changes between the end step and the reset step
    assert len(log.calls) == 2 + 6 + 4
    envs.close()


# ------------------------------------------------------------------ batched Procgen


def _procgen() -> Any:
    from procgen_stock import require_backend

    require_backend()
    from plr_gym.envs import ProcgenLevelEnv, ProcgenVectorEnv
    from plr_gym.envs.procgen_sb3 import ProcgenVecEnv

    return ProcgenLevelEnv, ProcgenVectorEnv, ProcgenVecEnv


def test_sb3_procgen_vec_env_episode_end_equals_dummy_vec_env_route() -> None:
    """Over ProcgenVecEnv the engine asks for the level inside its step; the result is what DummyVecEnv x
    LevelWrapper(ProcgenLevelEnv) gives, and each episode plays the level drawn when the previous ended."""
    ProcgenLevelEnv, _, ProcgenVecEnv = _procgen()
    n, limit = 4, 12
    single = ProcgenLevelEnv("bigfish")

    def make() -> gym.Env[Any, Any]:
        return LevelWrapper(gym.wrappers.TimeLimit(ProcgenLevelEnv("bigfish"), limit))

    samplers = [LevelSampler(range(30), seed=5, min_seen_ratio=0.0) for _ in range(2)]
    logs = [DrawLog(s) for s in samplers]
    batched = ProcgenVecEnv("bigfish", n_envs=n, num_threads=0)
    batched._batch.max_episode_steps = limit  # end episodes often (as the harness does)
    routes = [
        PrioritizedLevelReplay(batched, sampler=samplers[0], level_draw="episode_end"),
        PrioritizedLevelReplay(DummyVecEnv([make] * n), sampler=samplers[1], level_draw="episode_end"),
    ]
    first = lambda level: single.reset(seed=level)[0]  # noqa: E731
    ends = _check_sb3(routes[0], logs[0], 30, first)
    assert ends >= 8
    # the DummyVecEnv route, same actions: the same observations, dones and levels
    rng = np.random.default_rng(0)
    routes[1].reset()
    replay = PrioritizedLevelReplay(ProcgenVecEnv("bigfish", n_envs=n, num_threads=0),
                                    sampler=LevelSampler(range(30), seed=5, min_seen_ratio=0.0),
                                    level_draw="episode_end")  # fmt: skip
    replay.venv._batch.max_episode_steps = limit
    replay.reset()
    rescore = [np.random.default_rng(0), np.random.default_rng(0)]
    for t in range(30):
        for k, route in enumerate((replay, routes[1])):
            _rescore(route.sampler, t, rescore[k])
        actions = rng.integers(0, 15, n)
        (o0, r0, d0, i0), (o1, r1, d1, i1) = replay.step(actions), routes[1].step(actions)
        np.testing.assert_array_equal(o0, o1)
        np.testing.assert_array_equal(r0, r1)
        np.testing.assert_array_equal(d0, d1)
        for e in np.flatnonzero(d0).tolist():
            np.testing.assert_array_equal(i0[e]["terminal_observation"], i1[e]["terminal_observation"])
            assert i0[e]["level"] == i1[e]["level"]
        assert replay.current_levels.tolist() == routes[1].current_levels.tolist()
    for route in (*routes, replay):
        route.close()
    single.close()


def test_gymnasium_procgen_vector_env_draws_at_the_engines_autoreset() -> None:
    ProcgenLevelEnv, ProcgenVectorEnv, _ = _procgen()
    sampler = LevelSampler(range(30), seed=6, min_seen_ratio=0.0)
    log = DrawLog(sampler)
    base = ProcgenVectorEnv("chaser", num_envs=3, num_threads=0)
    base._batch.max_episode_steps = 9
    envs = VectorPLR(base, sampler=sampler, level_draw="episode_end")
    single = ProcgenLevelEnv("chaser")
    _, info = envs.reset()
    playing = info["level"].copy()
    rng = np.random.default_rng(0)
    for t in range(25):
        _rescore(sampler, t, rng)
        log.step = t
        obs, _, term, trunc, info = envs.step(rng.integers(0, 15, 3))
        assert info["level"].tolist() == playing.tolist()
        drawn = log.at(t)
        assert [e for e, _ in drawn] == np.flatnonzero(term | trunc).tolist()
        for e, level in drawn:
            playing[e] = level
            np.testing.assert_array_equal(obs[e], single.reset(seed=level)[0])
        assert envs.current_levels.tolist() == playing.tolist()
    assert len(log.calls) >= 3 + 6
    envs.close()
    single.close()


# ------------------------------------------------------------------ refusals


def test_level_draw_is_checked() -> None:
    with pytest.raises(ValueError, match="level_draw must be one of episode_start, episode_end, got 'end'"):
        PrioritizedLevelReplay(DummyVecEnv([_minigrid(5)]), levels=range(4), level_draw="end")
    with pytest.raises(ValueError, match="level_draw must be one of"):
        VectorPLR(SyncVectorEnv([_minigrid(5)]), levels=range(4), level_draw=None)  # type: ignore[arg-type]


def test_subproc_vec_env_is_refused_with_the_reason() -> None:
    venv = SubprocVecEnv([_minigrid(5)], start_method="fork")
    try:
        with pytest.raises(ValueError, match="round trip to the learner's process per ended episode"):
            PrioritizedLevelReplay(venv, levels=range(4), level_draw="episode_end")
    finally:
        venv.close()


def test_async_vector_env_same_step_is_refused_but_next_step_works() -> None:
    from gymnasium.vector import AsyncVectorEnv

    envs = AsyncVectorEnv([_minigrid(5)], autoreset_mode=AutoresetMode.SAME_STEP, context="fork")
    try:
        with pytest.raises(ValueError, match="AsyncVectorEnv in SAME_STEP autoreset mode"):
            VectorPLR(envs, levels=range(4), level_draw="episode_end")
    finally:
        envs.close()
    envs = AsyncVectorEnv([_minigrid(2)], context="fork")  # NEXT_STEP: drawn at the end, queued by set_attr
    plr = VectorPLR(envs, levels=range(4), level_draw="episode_end", seed=0)
    plr.reset()
    plr.step(np.zeros(1, dtype=np.int64))
    _, _, term, trunc, _ = plr.step(np.zeros(1, dtype=np.int64))
    assert bool(term[0] or trunc[0])
    queued = plr.next_levels[0]
    _, _, _, _, info = plr.step(np.zeros(1, dtype=np.int64))
    assert info["level"][0] == queued
    plr.close()


def test_a_source_that_plans_rollouts_is_refused() -> None:
    buffer = LevelBuffer(capacity=4, seed=0)
    with pytest.raises(ValueError, match="plans one level per env for a whole rollout"):
        PrioritizedLevelReplay(
            DummyVecEnv([_minigrid(5)]), buffer=buffer, generator=lambda rng: int(rng.integers(100)),
            level_draw="episode_end",
        )  # fmt: skip


def test_level_wrapper_level_provider() -> None:
    env = _minigrid(5)()
    calls = []
    env.set_level_provider(lambda: calls.append(1) or 7)
    assert env.reset()[1]["level"] == 7 and calls == [1]
    env.set_next_level(3)  # a queued level comes first: the provider is not asked
    assert env.reset()[1]["level"] == 3 and calls == [1]
    assert env.reset(seed=4)[1]["level"] == 4 and calls == [1]
    with pytest.raises(TypeError, match="level_provider must be a function or None"):
        env.level_provider = 5  # type: ignore[assignment]
    env.level_provider = None
    assert env.reset()[1]["level"] is None


# ------------------------------------------------------------------ level-replay's draw, at tiny size


def test_episode_end_is_level_replays_step_wait() -> None:
    """level-replay's ``VecPyTorchProcgen.step_wait`` (envs.py L147-160), written out over a plain
    DummyVecEnv: ``for e in done.nonzero()[0]: seed = level_sampler.sample(); venv.seed(seed, e)`` and the
    observation of the reseeded env replaced. With an identical sampler on each side, fed the same scores
    at the same steps, the wrapper with ``level_draw="episode_end"`` gives the same observations, the same
    levels and the same sampler state at every step; ``"episode_start"`` does not (it plays each level one
    episode later)."""
    makes = [_minigrid(3), _minigrid(5), _minigrid(4)]
    rng = np.random.default_rng(0)
    actions = rng.integers(0, 3, (40, 3))
    score_at = {t: rng.random(3) for t in range(40) if t % 6 == 5}  # a rollout's end every 6 steps

    def paper_sampler() -> LevelSampler:
        return LevelSampler.paper_defaults(levels=range(6), seed=3, min_seen_ratio=0.5)

    def reference() -> list[tuple[np.ndarray, list[int]]]:
        sampler = paper_sampler()
        venv = DummyVecEnv(makes)
        levels = sampler.sample(3).tolist()  # the first levels (level-replay's reset: in order; any will do)
        venv.set_options([{"level": level} for level in levels])
        venv.reset()
        out = []
        for t, a in enumerate(actions):
            obs, _, done, infos = venv.step(a)
            played = [info["level"] for info in infos]
            for e in done.nonzero()[0]:
                seed = sampler.sample()  # as the sampler is at the step that ended the episode
                obs[e] = venv.envs[e].reset(seed=seed)[0]  # venv.seed(seed, e) + observe()
                levels[e] = seed
            out.append((obs.copy(), played))
            if t in score_at:
                for e in range(3):
                    sampler.update(levels[e], float(score_at[t][e]))
        return out

    def ours(level_draw: str) -> list[tuple[np.ndarray, list[int]]]:
        sampler = paper_sampler()
        venv = PrioritizedLevelReplay(DummyVecEnv(makes), sampler=sampler, level_draw=level_draw)
        venv.reset()
        out = []
        for t, a in enumerate(actions):
            obs, _, _, infos = venv.step(a)
            out.append((obs.copy(), [info["level"] for info in infos]))
            if t in score_at:
                for e, level in enumerate(venv.current_levels.tolist()):
                    sampler.update(level, float(score_at[t][e]))
        return out

    expected = reference()
    got = ours("episode_end")
    for (obs_a, lv_a), (obs_b, lv_b) in zip(expected, got):
        assert lv_a == lv_b
        np.testing.assert_array_equal(obs_a, obs_b)
    lagged = ours("episode_start")
    assert any(a[1] != b[1] for a, b in zip(expected, lagged))
