"""plr_gym.vector.PrioritizedLevelReplay.report_rollout in a CleanRL-style loop, every autoreset mode."""

from __future__ import annotations

import gymnasium as gym
import minigrid  # noqa: F401  (registers the envs)
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

from plr_gym.vector import PrioritizedLevelReplay
from plr_gym.wrappers import LevelWrapper


def maze_envs(n_envs: int = 2, mode: AutoresetMode = AutoresetMode.NEXT_STEP) -> gym.vector.SyncVectorEnv:
    """``n_envs`` LevelWrapper'd 6x6 layout mazes (8 steps an episode) in a SyncVectorEnv."""
    from minigrid.wrappers import FlatObsWrapper

    from plr_gym.envs.maze import LayoutMazeEnv

    make = lambda: LevelWrapper(FlatObsWrapper(LayoutMazeEnv(size=6, max_steps=8)))  # noqa: E731
    return gym.vector.SyncVectorEnv([make] * n_envs, autoreset_mode=mode)


def accel(envs: gym.vector.VectorEnv) -> PrioritizedLevelReplay:
    """ACCEL over ``envs``: a 5-level buffer, random 6x6 mazes, maze mutations."""
    from plr_gym import LevelBuffer
    from plr_gym.envs.maze import mutate_maze_level, random_maze_level

    return PrioritizedLevelReplay(
        envs,
        buffer=LevelBuffer(capacity=5, replay_prob=0.6, min_fill_ratio=0.4, seed=0),
        generator=lambda rng: random_maze_level(rng, size=6),
        mutator=mutate_maze_level,
        seed=0,
    )


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
def test_report_rollout_scores_last_completed_episode(mode: AutoresetMode) -> None:
    n_envs, n_steps, rollouts = 3, 25, 3
    envs = gym.make_vec(
        "MiniGrid-Empty-5x5-v0",
        num_envs=n_envs,
        wrappers=[LevelWrapper],
        vector_kwargs={"autoreset_mode": mode},
        max_steps=12,
    )
    envs = PrioritizedLevelReplay(envs, levels=range(30), seed=0)
    rng = np.random.default_rng(0)
    envs.reset()
    history: list[dict[str, np.ndarray]] = []  # independent record of every step
    prev_done = np.zeros(n_envs, dtype=bool)
    for _ in range(rollouts):
        adv = rng.normal(size=(n_steps, n_envs))
        for t in range(n_steps):
            _, _, term, trunc, info = envs.step(rng.integers(0, 3, size=n_envs))
            reset_step = prev_done if mode == AutoresetMode.NEXT_STEP else np.zeros(n_envs, dtype=bool)
            done = term | trunc
            history.append({"level": info["level"].copy(), "adv": adv[t], "done": done, "skip": reset_step})
            prev_done = done
        envs.report_rollout(
            rewards=np.zeros((n_steps, n_envs)), values=np.zeros((n_steps, n_envs)), advantages=adv
        )
    # expected: for each env, episodes = valid steps up to and including a done step
    expected: dict[tuple[int, int], tuple[int, float]] = {}
    for e in range(n_envs):
        current: list[float] = []
        levels: list[int] = []
        for t, row in enumerate(history):
            if row["skip"][e]:
                continue
            current.append(abs(row["adv"][e]))
            levels.append(int(row["level"][e]))
            if row["done"][e]:
                assert len(set(levels)) == 1
                expected[(t, e)] = (levels[0], float(np.mean(current)))
                current, levels = [], []
    scores: dict[int, float] = {}
    for key in sorted(expected):
        scores[expected[key][0]] = expected[key][1]
    sampler = envs.sampler
    assert len(scores) >= 5
    assert sampler.num_seen == len(scores)
    for level, score in scores.items():
        assert sampler.scores[level] == pytest.approx(score)
    envs.close()


def test_report_rollout_checks_lengths_and_logits() -> None:
    envs = gym.make_vec("MiniGrid-Empty-5x5-v0", num_envs=2, wrappers=[LevelWrapper], max_steps=4)
    envs = PrioritizedLevelReplay(envs, levels=range(5), strategy="least_confidence", seed=0)
    envs.reset()
    for _ in range(6):
        envs.step(np.zeros(2, dtype=np.int64))
    with pytest.raises(ValueError, match="got 7 rows of rollout data but 6 steps were taken"):
        envs.report_rollout(rewards=np.zeros((7, 2)), values=np.zeros((7, 2)))
    logits = np.zeros((6, 2, 7))
    logits[..., 0] = np.log(3.0)  # p(action 0) = 3 / 9
    out = envs.report_rollout(rewards=np.zeros((6, 2)), values=np.zeros((6, 2)), logits=logits)
    assert out and all(score == pytest.approx(1 - 3 / 9) for _, score in out)
    envs.close()


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
def test_buffer_mode_custom_loop(mode: AutoresetMode) -> None:
    """Robust PLR / ACCEL with the Gymnasium wrapper: one level per env per rollout, buffer updates."""
    from plr_gym._levels import level_key

    n_envs, n_steps = 2, 30
    envs = accel(maze_envs(n_envs, mode))
    buffer = envs.buffer
    assert buffer is not None
    rng = np.random.default_rng(0)
    modes = []
    for _ in range(10):
        modes.append(envs.begin_rollout())
        assigned = [level_key(level) for level in envs.source.assigned]  # type: ignore[attr-defined]
        envs.reset()
        for _ in range(n_steps):
            _, _, _, _, info = envs.step(rng.integers(0, 3, size=n_envs))
            assert [level_key(level) for level in info["level"]] == assigned
        envs.report_rollout(
            rewards=np.zeros((n_steps, n_envs)),
            values=rng.normal(size=(n_steps, n_envs)),
            advantages=rng.normal(size=(n_steps, n_envs)),
        )
        assert envs.last_rollout_mode == modes[-1]
    assert {"new", "replay", "mutate"} <= set(modes)
    for a, b in zip(modes, modes[1:]):
        assert a != "replay" or b == "mutate"
    assert buffer.size == 5 and np.isfinite(buffer.scores).all()
    envs.close()


def test_buffer_mode_reset_after_report_plans_the_next_rollout() -> None:
    """reset() after report_rollout, without begin_rollout, plans a new rollout (it does not replay the
    closed plan's levels forever)."""
    from plr_gym._levels import level_key

    n_envs, n_steps = 2, 10
    envs = accel(maze_envs(n_envs))
    buffer = envs.buffer
    assert buffer is not None
    rng = np.random.default_rng(0)
    plans, modes = [], []
    for _ in range(6):
        envs.reset()
        modes.append(envs.rollout_mode)
        plans.append(tuple(level_key(level) for level in envs.source.assigned))  # type: ignore[attr-defined]
        for _ in range(n_steps):
            envs.step(rng.integers(0, 3, size=n_envs))
        envs.report_rollout(
            rewards=np.zeros((n_steps, n_envs)),
            values=rng.normal(size=(n_steps, n_envs)),
            advantages=rng.normal(size=(n_steps, n_envs)),
        )
    assert len(set(plans)) >= 4 and {"new", "replay"} <= set(modes)
    assert len({level_key(level) for level in buffer.levels}) == buffer.size == 5
    envs.close()


def test_the_source_views_sampler_and_buffer_are_replaceable_in_their_mode_only() -> None:
    from plr_gym import LevelBuffer, LevelSampler

    buffered = accel(maze_envs())
    restored = LevelBuffer(capacity=4, seed=1)
    buffered.buffer = restored
    assert buffered.buffer is restored and buffered.sampler is None and buffered.rollout_mode == "none"
    with pytest.raises(TypeError, match="sampler can only be replaced"):
        buffered.sampler = LevelSampler(range(3))
    with pytest.raises(TypeError, match="buffer can only be replaced by a LevelBuffer"):
        buffered.buffer = "not a buffer"  # type: ignore[assignment]
    sampled = PrioritizedLevelReplay(maze_envs(), levels=range(3))
    other = LevelSampler(range(3), seed=5)
    sampled.sampler = other
    assert sampled.sampler is other and sampled.source is other and sampled.buffer is None
    with pytest.raises(TypeError, match="buffer can only be replaced"):
        sampled.buffer = LevelBuffer(capacity=4)
