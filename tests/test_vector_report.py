"""plr_gym.vector.PrioritizedLevelReplay.report_rollout in a CleanRL-style loop, every autoreset mode."""

from __future__ import annotations

import gymnasium as gym
import minigrid  # noqa: F401  (registers the envs)
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

from plr_gym.vector import PrioritizedLevelReplay
from plr_gym.wrappers import LevelWrapper


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
    with pytest.raises(ValueError, match="only 6 steps"):
        envs.report_rollout(rewards=np.zeros((7, 2)), values=np.zeros((7, 2)))
    logits = np.zeros((6, 2, 7))
    logits[..., 0] = np.log(3.0)  # p(action 0) = 3 / 9
    out = envs.report_rollout(rewards=np.zeros((6, 2)), values=np.zeros((6, 2)), logits=logits)
    assert out and all(score == pytest.approx(1 - 3 / 9) for _, score in out)
    envs.close()
