"""LevelBuffer: insertion, eviction, duplicates, weights, replay decisions, checkpoints."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from plr_gym import LevelBuffer


def filled(scores: list[float], **kwargs: object) -> LevelBuffer:
    kwargs.setdefault("seed", 0)
    buf = LevelBuffer(capacity=len(scores), **kwargs)  # type: ignore[arg-type]
    for i, s in enumerate(scores):
        assert buf.insert(1000 + i, s) == i
    return buf


class TestInsertion:
    def test_full_buffer_rejects_lower_and_replaces_lowest_weighted(self) -> None:
        buf = filled([0.5, 0.2, 0.9], staleness_coef=0.0)
        assert buf.insert(7, 0.1) == -1 and buf.find(7) == -1 and buf.size == 3
        assert buf.insert(8, 0.3) == 1  # lowest weight = lowest rank = level 1001 (0.2)
        assert buf.find(1001) == -1 and buf.find(8) == 1
        assert buf.levels == [1000, 8, 1002]
        np.testing.assert_array_equal(buf.scores, [0.5, 0.3, 0.9])

    def test_eviction_uses_weights_including_staleness(self) -> None:
        buf = filled([0.5, 0.2, 0.9], staleness_coef=0.9)
        # level 1000 is the stalest: with heavy staleness weight the lowest-weighted is the freshest, 1002
        w = buf.sample_weights()
        assert int(np.argmin(w)) == 2
        assert buf.insert(9, 1.0) == 2 and buf.find(1002) == -1

    def test_equal_score_does_not_replace(self) -> None:
        buf = filled([0.5], staleness_coef=0.0)
        assert buf.insert(2, 0.5) == -1

    def test_duplicate_check_with_array_levels(self) -> None:
        buf = LevelBuffer(capacity=4, duplicate_check=True)
        a = {"walls": np.array([[1, 0], [0, 1]]), "goal": (1, 1)}
        assert buf.insert(a, 0.1, extra={"max_return": 1.0}) == 0
        same = {"goal": (1, 1), "walls": np.array([[1, 0], [0, 1]])}
        assert buf.find(same) == 0
        assert buf.insert(same, 0.7) == 0 and buf.size == 1
        assert buf.scores[0] == 0.7 and buf.extras[0] == {"max_return": 1.0}
        assert buf.find({"goal": (1, 1), "walls": np.array([[1, 1], [0, 1]])}) == -1
        nodup = LevelBuffer(capacity=4)
        nodup.insert(np.arange(3), 0.1)
        assert nodup.insert(np.arange(3), 0.2) == 1 and nodup.size == 2

    def test_find_after_eviction_of_a_duplicate(self) -> None:
        buf = LevelBuffer(capacity=2, staleness_coef=0.0)
        buf.insert(5, 0.1)
        buf.insert(5, 0.2)
        assert buf.insert(6, 0.3) == 0  # evicts the first copy of level 5
        assert buf.find(5) == 1

    def test_update_and_batches(self) -> None:
        buf = LevelBuffer(capacity=3)
        np.testing.assert_array_equal(buf.insert_batch([1, 2], [0.1, 0.2]), [0, 1])
        buf.update_batch([0, 1], [0.9, 0.8], extras=[{"max_return": 2.0}, None])
        np.testing.assert_array_equal(buf.scores, [0.9, 0.8])
        assert buf.extras == [{"max_return": 2.0}, {}]
        with pytest.raises(IndexError):
            buf.update(2, 0.1)
        with pytest.raises(ValueError, match="finite"):
            buf.update_batch([0, 1], [0.1, float("nan")])
        np.testing.assert_array_equal(buf.scores, [0.9, 0.8])  # validated before any change

    def test_flush(self) -> None:
        buf = filled([0.1, 0.2])
        buf.flush()
        assert buf.size == 0 and buf.find(1000) == -1 and buf.levels == []


class TestWeights:
    def test_rank_by_hand(self) -> None:
        buf = filled([0.5, 0.2, 0.9, 0.7], staleness_coef=0.0, temperature=0.5)
        ranks = np.array([3, 4, 1, 2], dtype=float)
        np.testing.assert_allclose(buf.sample_weights(), ranks**-2 / (ranks**-2).sum())

    def test_topk_by_hand(self) -> None:
        buf = filled([0.5, 0.2, 0.9, 0.7], staleness_coef=0.0, score_transform="topk", topk=2)
        np.testing.assert_allclose(buf.sample_weights(), [0, 0, 0.5, 0.5])

    def test_staleness_mixture(self) -> None:
        buf = filled([0.5, 0.2, 0.9], staleness_coef=0.5, temperature=1.0)
        np.testing.assert_array_equal(buf.staleness, [2, 1, 0])
        ps = np.array([1 / 2, 1 / 3, 1.0]) / (1 / 2 + 1 / 3 + 1)
        np.testing.assert_allclose(buf.sample_weights(), 0.5 * ps + 0.5 * np.array([2, 1, 0]) / 3)

    @pytest.mark.parametrize("transform", ["rank", "topk"])
    def test_sampling_follows_weights(self, transform: str) -> None:
        scores = [0.5, 0.2, 0.9, 0.7, 0.1]
        buf = filled(scores, staleness_coef=0.3, score_transform=transform, topk=2, seed=1)
        for _ in range(7):
            buf.sample_replay_level()
        probs = buf.sample_weights()
        state = buf.state_dict()
        counts = np.zeros(5)
        for k in range(3000):
            st = dict(state)
            st["rng"] = np.random.default_rng(k).bit_generator.state
            buf.load_state_dict(st)
            counts[buf.sample_replay_level()[0]] += 1
        mask = probs > 0
        assert counts[~mask].sum() == 0
        assert stats.chisquare(counts[mask], probs[mask] * 3000).pvalue > 1e-4

    def test_replay_marks_level_fresh(self) -> None:
        buf = filled([0.5, 0.2, 0.9])
        idx, level = buf.sample_replay_level()
        assert buf.staleness[idx] == 0 and level == 1000 + idx


class TestReplayDecision:
    def test_never_before_min_fill_ratio(self) -> None:
        buf = LevelBuffer(capacity=10, replay_prob=1.0, min_fill_ratio=0.5)
        for i in range(4):
            buf.insert(i, 0.1)
            assert not buf.sample_replay_decision()
        buf.insert(4, 0.1)
        assert buf.sample_replay_decision()

    def test_replay_prob_frequency(self) -> None:
        buf = filled([0.1, 0.2], replay_prob=0.7)
        hits = sum(buf.sample_replay_decision() for _ in range(4000))
        assert stats.binomtest(hits, 4000, 0.7).pvalue > 1e-4


def test_resume_is_exact(tmp_path: Path) -> None:
    def drive(buf: LevelBuffer, rng: np.random.Generator, steps: int) -> list[object]:
        out: list[object] = []
        for _ in range(steps):
            if buf.sample_replay_decision():
                idx, _ = buf.sample_replay_level()
                buf.update(idx, float(rng.random()))
                out.append(("replay", idx))
            else:
                level = {"grid": rng.integers(0, 2, size=(3, 3)), "seed": int(rng.integers(1 << 30))}
                out.append(("insert", buf.insert(level, float(rng.random()), {"max_return": 1.0})))
        return out

    a = LevelBuffer(capacity=8, duplicate_check=True, min_fill_ratio=0.5, seed=3, replay_prob=0.6)
    drive(a, np.random.default_rng(0), 50)
    a.save(tmp_path / "buf.npz")
    b = LevelBuffer.load(tmp_path / "buf.npz")
    assert drive(a, np.random.default_rng(1), 80) == drive(b, np.random.default_rng(1), 80)
    np.testing.assert_array_equal(a.scores, b.scores)
    assert all(np.array_equal(x["grid"], y["grid"]) for x, y in zip(a.levels, b.levels))


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"capacity": 0}, ValueError, "capacity"),
        ({"capacity": 2.5}, TypeError, "capacity"),
        ({"capacity": 4, "replay_prob": 1.5}, ValueError, "replay_prob"),
        ({"capacity": 4, "staleness_coef": -0.1}, ValueError, "staleness_coef"),
        ({"capacity": 4, "min_fill_ratio": 2}, ValueError, "min_fill_ratio"),
        ({"capacity": 4, "score_transform": "power"}, ValueError, "score_transform"),
        ({"capacity": 4, "temperature": 0}, ValueError, "temperature"),
        ({"capacity": 4, "topk": 0}, ValueError, "topk"),
    ],
)
def test_bad_arguments(kwargs: dict[str, object], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        LevelBuffer(**kwargs)  # type: ignore[arg-type]


def test_bad_scores_and_levels() -> None:
    buf = LevelBuffer(capacity=2)
    for bad in (float("nan"), float("inf")):
        with pytest.raises(ValueError, match="finite"):
            buf.insert(1, bad)
    with pytest.raises(TypeError, match="score"):
        buf.insert(1, "high")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="levels must be"):
        buf.insert({1, 2}, 0.5)
    with pytest.raises(RuntimeError, match="empty"):
        buf.sample_replay_level()
    assert buf.size == 0
