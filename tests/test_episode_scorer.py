"""EpisodeScorer on hand-made rollouts: cutting, stitching, dropping, checkpoints."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from plr_gym import LevelSampler
from plr_gym.scoring import EpisodeData, EpisodeScorer


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[list[int], list[float]]] = []

    def update_batch(self, levels: list[int], scores: np.ndarray) -> None:
        self.calls.append((list(levels), list(scores)))


def rollout(starts: list[list[int]], levels: list[list[int]], seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    shape = np.asarray(starts).shape
    return {
        "episode_starts": np.asarray(starts, dtype=bool),
        "levels": np.asarray(levels),
        "rewards": rng.normal(size=shape),
        "values": rng.normal(size=shape),
        "advantages": rng.normal(size=shape),
    }


def test_cuts_episodes_per_env_and_reports_once() -> None:
    rec = Recorder()
    scorer = EpisodeScorer(rec, n_envs=2)
    r = rollout([[1, 1], [0, 0], [1, 0], [0, 1]], [[3, 5], [3, 5], [4, 5], [4, 6]])
    out = scorer.process_rollout(dones=np.array([True, False]), **r)
    adv = r["advantages"]
    expected = [
        (3, np.abs(adv[0:2, 0]).mean()),
        (4, np.abs(adv[2:4, 0]).mean()),
        (5, np.abs(adv[0:3, 1]).mean()),
    ]
    assert [lvl for lvl, _ in out] == [3, 4, 5]
    np.testing.assert_allclose([s for _, s in out], [s for _, s in expected])
    assert len(rec.calls) == 1 and scorer.num_open_episodes == 1  # env 1's level-6 episode is open


def test_stitching_equals_whole_episode_score() -> None:
    sampler = LevelSampler(levels=range(10))
    scorer = EpisodeScorer(sampler, n_envs=1, strategy="one_step_td_error", gamma=0.9)
    a = rollout([[1], [0], [0]], [[2], [2], [2]], seed=1)
    b = rollout([[0], [0], [1]], [[2], [2], [7]], seed=2)
    assert scorer.process_rollout(dones=np.array([False]), last_values=np.array([0.3]), **a) == []
    assert not sampler.seen[2]  # nothing reported before the episode completes
    ((level, score),) = scorer.process_rollout(dones=np.array([False]), last_values=np.array([0.0]), **b)
    rewards = np.concatenate([a["rewards"][:, 0], b["rewards"][:2, 0]])
    values = np.concatenate([a["values"][:, 0], b["values"][:2, 0]])
    # the boundary step bootstraps with last_values (as GAE did); the episode end with 0
    next_values = np.array([values[1], values[2], 0.3, values[4], 0.0])
    expected = np.mean(np.abs(rewards + 0.9 * next_values - values))
    assert level == 2 and score == pytest.approx(expected)
    assert sampler.scores[2] == pytest.approx(expected)
    # mean-type strategies: stitched score = step-weighted mean of chunk scores
    s2 = EpisodeScorer(Recorder(), n_envs=1)
    s2.process_rollout(dones=np.array([False]), **a)
    ((_, stitched),) = s2.process_rollout(dones=np.array([False]), **b)
    c1, c2 = np.abs(a["advantages"][:, 0]).mean(), np.abs(b["advantages"][:2, 0]).mean()
    assert stitched == pytest.approx((3 * c1 + 2 * c2) / 5)


def test_unobserved_starts_and_reset_envs_are_dropped() -> None:
    rec = Recorder()
    scorer = EpisodeScorer(rec, n_envs=1)
    # attached mid-episode: the first episode's start was never seen
    out = scorer.process_rollout(dones=np.array([False]), **rollout([[0], [0], [1]], [[1], [1], [2]]))
    assert out == [] and scorer.num_dropped == 1 and scorer.num_open_episodes == 1
    # the env was reset while level 2's episode was open (e.g. a new learn() call): it never completes
    out = scorer.process_rollout(dones=np.array([True]), **rollout([[1], [0]], [[3], [3]]))
    assert [lvl for lvl, _ in out] == [3] and scorer.num_dropped == 2 and scorer.num_open_episodes == 0


def test_max_mc_uses_best_return_so_far() -> None:
    rec = Recorder()
    scorer = EpisodeScorer(rec, n_envs=1, strategy="max_mc")
    r = rollout([[1], [0], [1], [0]], [[4], [4], [4], [4]])
    r["rewards"] = np.array([[1.0], [2.0], [0.0], [0.5]])
    out = scorer.process_rollout(dones=np.array([True]), **r)
    v = r["values"][:, 0]
    assert out[0][1] == pytest.approx(np.mean(3.0 - v[:2]))
    assert out[1][1] == pytest.approx(np.mean(3.0 - v[2:]))  # max return stays 3.0
    assert scorer.max_returns == {4: 3.0}


def test_inconsistent_levels_and_shapes_raise() -> None:
    scorer = EpisodeScorer(Recorder(), n_envs=1)
    with pytest.raises(ValueError, match="within one episode"):
        scorer.process_rollout(dones=np.array([True]), **rollout([[1], [0]], [[1], [2]]))
    with pytest.raises(ValueError, match="n_steps, 1"):
        scorer.process_rollout(dones=np.array([True]), **rollout([[1, 1]], [[1, 1]]))
    with pytest.raises(ValueError, match="n_envs"):
        EpisodeScorer(Recorder(), n_envs=0)
    r = rollout([[1], [0]], [[1], [1]])
    r["values"][0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        scorer.process_rollout(dones=np.array([True]), **r)


def test_checkpoint_round_trip(tmp_path: Path) -> None:
    a = EpisodeScorer(Recorder(), n_envs=2, strategy="max_mc")
    r1 = rollout([[1, 1], [0, 1]], [[1, 2], [1, 3]], seed=3)
    r2 = rollout([[0, 0], [1, 1]], [[1, 3], [5, 6]], seed=4)
    a.process_rollout(dones=np.array([False, False]), **r1)
    a.save(tmp_path / "scorer.npz")
    b = EpisodeScorer(Recorder(), n_envs=2, strategy="max_mc")
    b.load(tmp_path / "scorer.npz")
    assert a.process_rollout(dones=np.array([False, True]), **r2) == b.process_rollout(
        dones=np.array([False, True]), **r2
    )
    assert a.max_returns == b.max_returns


def test_score_functions_accept_user_callable() -> None:
    def first_value(ep: EpisodeData) -> float:
        assert ep.values is not None
        return float(ep.values[0])

    rec = Recorder()
    scorer = EpisodeScorer(rec, n_envs=1, strategy=first_value)
    r = rollout([[1], [0]], [[9], [9]])
    ((lvl, score),) = scorer.process_rollout(dones=np.array([True]), **r)
    assert (lvl, score) == (9, r["values"][0, 0])


def test_failed_report_leaves_the_scorer_unchanged() -> None:
    class Refuses:
        def update_batch(self, levels: object, scores: object) -> None:
            raise ValueError("refused")

    scorer = EpisodeScorer(Refuses(), n_envs=1, strategy="max_mc")
    r = rollout([[0], [1], [0]], [[1], [2], [2]])
    with pytest.raises(ValueError, match="refused"):
        scorer.process_rollout(dones=np.array([True]), **r)
    assert scorer.max_returns == {} and scorer.num_dropped == 0 and scorer.num_open_episodes == 0
