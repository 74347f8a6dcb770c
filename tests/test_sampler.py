"""LevelSampler: exact formulas, sampling distribution, schedules, checkpoints and bad input."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from plr_gym import LevelSampler
from plr_gym.sampler import REPLAY_SCHEDULES, SCORE_TRANSFORMS, STALENESS_TRANSFORMS, STRATEGIES

SCORES = np.array([0.2, 0.9, 0.5, 0.05, 0.7, 0.3])
#: The paper's Procgen mixture (LevelSampler.paper_defaults), which the formula tests below assume.
PAPER = {"temperature": 0.1, "staleness_coef": 0.1, "uniform_mass": 0.0}


def seen_sampler(scores: np.ndarray = SCORES, **kwargs: object) -> LevelSampler:
    """A sampler whose levels 0..n-1 all have the given scores (no sample drawn yet).

    These tests check the paper's formulas, so the paper's mixture is the default here (the library's own
    defaults are checked in ``test_library_defaults_are_the_studys_choice``).
    """
    kwargs.setdefault("seed", 0)
    for key, value in PAPER.items():
        kwargs.setdefault(key, value)
    s = LevelSampler(levels=range(len(scores)), **kwargs)  # type: ignore[arg-type]
    s.update_batch(range(len(scores)), scores)
    return s


def first_draw_counts(sampler: LevelSampler, trials: int) -> np.ndarray:
    """Counts of the level drawn by the *next* sample(), over independent RNG streams."""
    state = sampler.state_dict()
    counts = np.zeros(sampler.num_levels, dtype=np.int64)
    index = {int(lv): i for i, lv in enumerate(sampler.levels)}
    for k in range(trials):
        st = dict(state)
        st["rng"] = np.random.default_rng(10_000 + k).bit_generator.state
        sampler.load_state_dict(st)
        counts[index[sampler.sample()]] += 1
    sampler.load_state_dict(state)
    return counts


def chi_square_p(counts: np.ndarray, probs: np.ndarray) -> float:
    mask = probs > 0
    assert counts[~mask].sum() == 0, "sampled a level with zero probability"
    expected = probs[mask] / probs[mask].sum() * counts.sum()
    return float(stats.chisquare(counts[mask], expected).pvalue)


# ------------------------------------------------------------------------------------------ formulas
class TestScoreTransforms:
    def test_rank(self) -> None:
        s = seen_sampler(score_transform="rank", temperature=0.5, staleness_coef=0.0)
        ranks = np.array([5, 1, 3, 6, 2, 4], dtype=float)  # by descending score
        h = ranks ** (-1 / 0.5)
        np.testing.assert_allclose(s.sample_weights(), h / h.sum())

    def test_rank_ties_go_to_earlier_level(self) -> None:
        s = seen_sampler(np.array([0.5, 0.5, 0.1]), score_transform="rank", temperature=1.0, staleness_coef=0)
        np.testing.assert_allclose(s.sample_weights(), np.array([1, 1 / 2, 1 / 3]) / (11 / 6))

    def test_paper_default_rank_temperature(self) -> None:
        s = seen_sampler(staleness_coef=0.0)  # rank, T = 0.1 -> h = rank^-10
        ranks = np.array([5, 1, 3, 6, 2, 4], dtype=float)
        h = ranks**-10.0
        np.testing.assert_allclose(s.sample_weights(), h / h.sum())

    def test_power(self) -> None:
        s = seen_sampler(score_transform="power", temperature=0.5, staleness_coef=0.0)
        h = SCORES**2.0
        np.testing.assert_allclose(s.sample_weights(), h / h.sum())

    def test_power_all_zero_is_uniform(self) -> None:
        s = seen_sampler(np.zeros(4), score_transform="power", staleness_coef=0.0)
        np.testing.assert_allclose(s.sample_weights(), np.full(4, 0.25))

    def test_softmax(self) -> None:
        s = seen_sampler(score_transform="softmax", temperature=0.3, staleness_coef=0.0)
        h = np.exp(SCORES / 0.3)
        np.testing.assert_allclose(s.sample_weights(), h / h.sum())

    def test_softmax_huge_scores_do_not_overflow(self) -> None:
        scores = np.array([1e4, 1e4 + 1.0, 0.0])
        s = seen_sampler(scores, score_transform="softmax", temperature=1.0, staleness_coef=0.0)
        expected = np.array([np.exp(-1.0), 1.0, 0.0]) / (1 + np.exp(-1.0))
        np.testing.assert_allclose(s.sample_weights(), expected, atol=1e-300)
        counts = np.bincount(s.sample(4000) - 0, minlength=3)
        assert counts[2] == 0 and chi_square_p(counts, expected) > 1e-3

    def test_eps_greedy(self) -> None:
        s = seen_sampler(score_transform="eps_greedy", eps=0.2, staleness_coef=0.0)
        expected = np.full(6, 0.2 / 6)
        expected[1] += 0.8
        np.testing.assert_allclose(s.sample_weights(), expected)

    def test_constant(self) -> None:
        s = seen_sampler(score_transform="constant", staleness_coef=0.0)
        np.testing.assert_allclose(s.sample_weights(), np.full(6, 1 / 6))

    def test_max_is_uniform_over_ties_and_keeps_scores(self) -> None:
        scores = np.array([0.4, 0.9, 0.9, 0.1])
        s = LevelSampler(
            levels=range(6), score_transform="max", staleness_coef=0.0, min_seen_ratio=0.5, uniform_mass=0.0
        )
        s.update_batch(range(4), scores)
        np.testing.assert_allclose(s.sample_weights(), [0, 0.5, 0.5, 0, 0, 0])
        s.sample_weights()
        # the reference overwrote stored scores of unseen levels with -inf: ours never touches them
        np.testing.assert_array_equal(s.scores, [0.4, 0.9, 0.9, 0.1, 0.0, 0.0])


class TestStaleness:
    def test_staleness_counts_draws_since_last_sampled(self) -> None:
        s = LevelSampler(levels=[10, 20, 30], strategy="sequential")
        assert s.sample(4).tolist() == [10, 20, 30, 10]
        np.testing.assert_array_equal(s.staleness, [0, 2, 1])
        assert s.num_samples == 4

    def test_power_staleness_is_papers_pc(self) -> None:
        s = seen_sampler(staleness_coef=0.3, temperature=1.0, score_transform="constant")
        s.sample(25)
        stale = s.staleness.astype(float)
        pc = stale / stale.sum()
        np.testing.assert_allclose(s.sample_weights(), 0.7 / 6 + 0.3 * pc)

    def test_staleness_temperature_and_transforms(self) -> None:
        for transform, temp in [("power", 0.5), ("softmax", 2.0), ("rank", 1.0), ("eps_greedy", 1.0)]:
            s = seen_sampler(
                staleness_coef=1.0, staleness_transform=transform, staleness_temperature=temp, eps=0.1
            )
            s.sample(30)
            st = s.staleness.astype(float)
            if transform == "power":
                w = st ** (1 / temp)
            elif transform == "softmax":
                w = np.exp((st - st.max()) / temp)
            elif transform == "rank":
                order = np.argsort(-st, kind="stable")
                ranks = np.empty(6)
                ranks[order] = np.arange(1, 7)
                w = 1 / ranks
            else:
                w = np.full(6, 0.1 / 6)
                w[np.argmax(st)] += 0.9
            np.testing.assert_allclose(s.sample_weights(), w / w.sum(), err_msg=transform)

    def test_zero_staleness_mass_is_uniform(self) -> None:
        s = LevelSampler(levels=range(3), staleness_coef=1.0, min_seen_ratio=0.0, seed=1)
        lvl = s.sample()
        s.update(lvl, 1.0)  # one seen level, staleness 0 -> P_C uniform over {lvl}
        w = s.sample_weights()
        assert w[lvl] == 1.0 and w.sum() == 1.0

    def test_mixture(self) -> None:
        s = seen_sampler(staleness_coef=0.25, temperature=0.5)
        s.sample(40)
        ranks = np.array([5, 1, 3, 6, 2, 4], dtype=float)
        ps = ranks**-2.0 / (ranks**-2.0).sum()
        st = s.staleness.astype(float)
        np.testing.assert_allclose(s.sample_weights(), 0.75 * ps + 0.25 * st / st.sum())


# ------------------------------------------------------------------------------------------ sampling
ALL_COMBOS = list(itertools.product(SCORE_TRANSFORMS, STALENESS_TRANSFORMS))


@pytest.mark.parametrize(("score_transform", "staleness_transform"), ALL_COMBOS)
def test_sample_follows_sample_weights(score_transform: str, staleness_transform: str) -> None:
    """Chi-square: the next draw follows sample_weights() for every transform pair (staleness 0.4)."""
    scores = np.array([0.3, 1.2, 0.8, 0.05, 0.9, 0.6, 0.6, 0.0])
    s = seen_sampler(
        scores,
        score_transform=score_transform,
        temperature=0.7,
        staleness_coef=0.4,
        staleness_transform=staleness_transform,
        staleness_temperature=0.8 if staleness_transform in ("power", "softmax") else 1.0,
        eps=0.3,
        seed=3,
    )
    s.sample(37)  # build up a non-trivial staleness profile
    probs = s.sample_weights()
    counts = first_draw_counts(s, 3000)
    assert chi_square_p(counts, probs) > 1e-4, (counts, probs)


@pytest.mark.parametrize("staleness_temperature", [1.0, 0.5])
def test_long_run_power_staleness_tree_matches_dense(staleness_temperature: float) -> None:
    """Many draws with changing scores: fast P_C (tree for T=1, dense for T!=1) stays exact."""
    rng = np.random.default_rng(0)
    s = seen_sampler(rng.random(50), staleness_coef=1.0, staleness_temperature=staleness_temperature, seed=5)
    for _ in range(300):
        lvl = s.sample()
        s.update(lvl, float(rng.random()))
    counts = first_draw_counts(s, 3000)
    assert chi_square_p(counts, s.sample_weights()) > 1e-4


@pytest.mark.parametrize("score_transform", ["rank", "power", "softmax"])
def test_fast_score_sampler_tracks_updates(score_transform: str) -> None:
    rng = np.random.default_rng(1)
    s = seen_sampler(
        rng.random(40), score_transform=score_transform, temperature=0.3, staleness_coef=0, seed=2
    )
    for _ in range(500):
        s.update(int(rng.integers(40)), float(rng.random()))
    probs = s.sample_weights()
    counts = np.bincount(s.sample(6000), minlength=40)
    assert chi_square_p(counts, probs) > 1e-4


# ------------------------------------------------------------------------------------------ schedules
class TestReplaySchedule:
    def test_unseen_levels_are_uniform_and_no_replay_before_min_seen_ratio(self) -> None:
        s = LevelSampler(levels=range(10), min_seen_ratio=0.5, seed=0)
        s.update_batch([0, 1, 2, 3], [1.0, 1.0, 1.0, 1.0])  # 40% seen < 50%
        assert s.replay_probability() == 0.0
        counts = first_draw_counts(s, 3000)
        assert counts[:4].sum() == 0
        assert chi_square_p(counts[4:], np.full(6, 1 / 6)) > 1e-4

    def test_proportionate(self) -> None:
        s = LevelSampler(levels=range(10), min_seen_ratio=0.5, seed=0)
        s.update_batch(range(7), np.linspace(0, 1, 7))
        assert s.replay_probability() == pytest.approx(0.7)
        replayed = (first_draw_counts(s, 4000)[:7]).sum()
        assert stats.binomtest(int(replayed), 4000, 0.7).pvalue > 1e-4

    def test_fixed(self) -> None:
        s = LevelSampler(
            levels=range(10), replay_schedule="fixed", replay_prob=0.25, min_seen_ratio=0.2, seed=0
        )
        s.update_batch(range(3), [0.1, 0.2, 0.3])
        assert s.replay_probability() == 0.25
        replayed = (first_draw_counts(s, 4000)[:3]).sum()
        assert stats.binomtest(int(replayed), 4000, 0.25).pvalue > 1e-4

    @pytest.mark.parametrize("schedule", REPLAY_SCHEDULES)
    def test_all_seen_always_replays(self, schedule: str) -> None:
        s = seen_sampler(replay_schedule=schedule, replay_prob=0.0)
        s.sample(100)
        assert s.num_replay_samples == 100 and s.num_explore_samples == 0

    def test_default_sees_every_level_before_replay(self) -> None:
        s = LevelSampler(levels=range(20), seed=4)  # min_seen_ratio = 1 (paper)
        order: list[int] = []
        while s.num_seen < 20:
            lvl = s.sample()
            assert s.seen[lvl] is np.False_ or s.num_seen == 20
            order.append(lvl)
            s.update(lvl, 0.5)
        assert s.num_replay_samples == 0 and len(order) == 20

    def test_level_becomes_seen_on_update_not_on_sample(self) -> None:
        s = LevelSampler(levels=range(5), seed=0)
        lvl = s.sample()
        assert not s.seen.any()
        s.update(lvl, 0.1)
        assert s.seen.tolist() == [i == lvl for i in range(5)]


class TestBaselines:
    def test_random_is_uniform_over_all_levels(self) -> None:
        s = LevelSampler(levels=range(100, 108), strategy="random", seed=0)
        s.update(100, 5.0)
        np.testing.assert_allclose(s.sample_weights(), np.full(8, 1 / 8))
        counts = np.bincount(s.sample(4000) - 100, minlength=8)
        assert chi_square_p(counts, np.full(8, 1 / 8)) > 1e-4

    def test_sequential_cycles(self) -> None:
        s = LevelSampler(levels=[7, 3, 9], strategy="sequential")
        assert s.sample(7).tolist() == [7, 3, 9, 7, 3, 9, 7]
        assert s.sample_weights().tolist() == [0.0, 1.0, 0.0]

    def test_callable_strategy_samples_with_plr(self) -> None:
        def my_score(ep: object) -> float:
            return 1.0

        s = seen_sampler(strategy=my_score)
        assert s.strategy is my_score and s.uses_scores


class TestUpdates:
    def test_ewa(self) -> None:
        s = LevelSampler(levels=range(3), alpha=0.25)
        s.update(1, 2.0)
        assert s.scores[1] == 2.0  # first score stored as is
        s.update(1, 6.0)
        assert s.scores[1] == pytest.approx(0.75 * 2.0 + 0.25 * 6.0)

    def test_update_batch_in_order_with_repeats(self) -> None:
        s = LevelSampler(levels=range(3), alpha=0.5)
        s.update_batch(np.array([2, 2, 0]), np.array([1.0, 3.0, 4.0]))
        np.testing.assert_allclose(s.scores, [4.0, 0.0, 2.0])

    def test_non_contiguous_levels(self) -> None:
        s = LevelSampler(
            levels=[1000, 7, 42], score_transform="power", temperature=1.0, staleness_coef=0, uniform_mass=0
        )
        s.update_batch([42, 7, 1000], [3.0, 1.0, 0.0])
        np.testing.assert_allclose(s.sample_weights(), [0.0, 0.25, 0.75])
        assert set(s.sample(200).tolist()) <= {7, 42}

    def test_sample_returns_python_int_and_arrays(self) -> None:
        s = LevelSampler(levels=np.arange(5, dtype=np.int32), seed=0)
        assert type(s.sample()) is int
        out = s.sample(3)
        assert out.dtype == np.int64 and out.shape == (3,)
        assert s.sample(0).shape == (0,)


# ------------------------------------------------------------------------------------------ checkpoints
def drive(s: LevelSampler, steps: int, seed: int) -> list[int]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(steps):
        lvl = s.sample()
        out.append(lvl)
        if rng.random() < 0.8:
            s.update(lvl, float(rng.normal()) if s.score_transform != "power" else float(rng.random()))
    return out


@pytest.mark.parametrize(
    "config",
    [
        {},
        {"score_transform": "power", "staleness_transform": "power", "staleness_temperature": 0.5},
        {"score_transform": "softmax", "staleness_transform": "rank", "alpha": 0.3},
        {"score_transform": "eps_greedy", "staleness_transform": "max", "replay_schedule": "fixed"},
        {"score_transform": "max", "staleness_transform": "softmax", "min_seen_ratio": 0.3},
        {"score_transform": "constant", "staleness_transform": "eps_greedy", "staleness_coef": 0.5},
        {"strategy": "random"},
        {"strategy": "sequential"},
    ],
)
def test_resume_is_exact(config: dict[str, object], tmp_path: Path) -> None:
    a = LevelSampler(levels=range(30), seed=7, **config)  # type: ignore[arg-type]
    drive(a, 120, seed=1)
    a.save(tmp_path / "s.npz")
    b = LevelSampler.load(tmp_path / "s.npz")
    c = LevelSampler(levels=range(30), seed=123, **config)  # type: ignore[arg-type]
    c.load_state_dict(a.state_dict())
    ref = drive(a, 200, seed=2)
    assert drive(b, 200, seed=2) == ref
    assert drive(c, 200, seed=2) == ref
    np.testing.assert_array_equal(a.scores, b.scores)
    np.testing.assert_array_equal(a.staleness, b.staleness)


def test_saved_file_is_plain_npz_json(tmp_path: Path) -> None:
    s = seen_sampler()
    s.save(tmp_path / "s.npz")
    with np.load(tmp_path / "s.npz", allow_pickle=False) as npz:
        meta = json.loads(str(npz["meta"]))
        assert meta["config"]["strategy"] == "value_l1"
        np.testing.assert_array_equal(npz["scores"], SCORES)


def test_callable_strategy_checkpoint(tmp_path: Path) -> None:
    def my_score(ep: object) -> float:
        return 0.0

    s = seen_sampler(strategy=my_score)
    s.save(tmp_path / "s.npz")
    with pytest.raises(ValueError, match="pass strategy"):
        LevelSampler.load(tmp_path / "s.npz")
    assert LevelSampler.load(tmp_path / "s.npz", strategy=my_score).strategy is my_score


def test_load_state_with_other_config_or_levels_fails() -> None:
    state = seen_sampler().state_dict()
    with pytest.raises(ValueError, match="temperature"):
        LevelSampler(levels=range(6), temperature=0.2).load_state_dict(state)
    with pytest.raises(ValueError, match="levels"):
        LevelSampler(levels=range(7)).load_state_dict(state)


# ------------------------------------------------------------------------------------------ bad input
@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"strategy": "value_l2"}, ValueError, "strategy"),
        ({"score_transform": "boltzmann"}, ValueError, "score_transform"),
        ({"staleness_transform": "linear"}, ValueError, "staleness_transform"),
        ({"replay_schedule": "always"}, ValueError, "replay_schedule"),
        ({"temperature": 0.0}, ValueError, "temperature"),
        ({"temperature": -1}, ValueError, "temperature"),
        ({"temperature": float("nan")}, ValueError, "temperature"),
        ({"staleness_temperature": 0}, ValueError, "staleness_temperature"),
        ({"staleness_coef": 1.5}, ValueError, "staleness_coef"),
        ({"staleness_coef": -0.1}, ValueError, "staleness_coef"),
        ({"replay_prob": 2}, ValueError, "replay_prob"),
        ({"min_seen_ratio": -1}, ValueError, "min_seen_ratio"),
        ({"alpha": 0.0}, ValueError, "alpha"),
        ({"eps": 1.1}, ValueError, "eps"),
        ({"temperature": "0.1"}, TypeError, "temperature"),
        ({"seed": 1.5}, TypeError, "seed"),
        ({"levels": []}, ValueError, "empty"),
        ({"levels": [1, 2, 2]}, ValueError, "unique"),
        ({"levels": [1.0, 2.0]}, TypeError, "integers"),
        ({"levels": [[1, 2]]}, ValueError, "1-D"),
        ({"levels": "abc"}, TypeError, "levels"),
    ],
)
def test_bad_constructor_arguments(kwargs: dict[str, object], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        LevelSampler(**kwargs)  # type: ignore[arg-type]


def test_bad_updates_leave_sampler_unchanged() -> None:
    s = LevelSampler(levels=range(5), score_transform="power", seed=0)
    s.update(0, 1.0)
    before = s.state_dict()
    with pytest.raises(KeyError, match="level 9"):
        s.update(9, 1.0)
    with pytest.raises(TypeError, match="level"):
        s.update(1.0, 1.0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="level"):
        s.update(True, 1.0)
    for bad in (float("nan"), float("inf"), -float("inf")):
        with pytest.raises(ValueError, match="finite"):
            s.update(1, bad)
    with pytest.raises(TypeError, match="score"):
        s.update(1, "0.5")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="non-negative"):
        s.update(1, -0.5)
    with pytest.raises(ValueError, match="finite"):
        s.update_batch([1, 2], [0.5, np.nan])
    with pytest.raises(KeyError):
        s.update_batch([1, 99], [0.5, 0.5])
    with pytest.raises(ValueError, match="equal length"):
        s.update_batch([1, 2], [0.5])
    with pytest.raises(ValueError, match="non-negative"):
        s.update_batch([1, 2], [0.5, -1.0])
    after = s.state_dict()
    for key in ("scores", "order", "last_sampled"):
        np.testing.assert_array_equal(before[key], after[key])
    assert before["num_seen"] == after["num_seen"] == 1
    with pytest.raises(ValueError, match="n must be"):
        s.sample(-1)
    with pytest.raises(TypeError, match="n must be"):
        s.sample(2.0)  # type: ignore[arg-type]


def test_no_global_numpy_side_effects() -> None:
    before = np.geterr()
    seen_sampler(score_transform="power", staleness_transform="power", staleness_temperature=0.5).sample(50)
    assert np.geterr() == before


def test_strategies_constant_lists_every_strategy() -> None:
    assert set(STRATEGIES) == {
        "value_l1", "positive_value_loss", "gae", "max_mc", "policy_entropy", "least_confidence",
        "min_margin", "one_step_td_error", "learnability", "random", "sequential",
    }  # fmt: skip


def test_softmax_reanchors_when_the_best_score_drops() -> None:
    """Leaves anchored at an old best score must not underflow into wrong ratios (review finding)."""
    s = LevelSampler(
        range(3),
        score_transform="softmax",
        temperature=0.1,
        staleness_coef=0,
        min_seen_ratio=0,
        uniform_mass=0,
        seed=0,
    )
    for level, score in [(0, 1000.0), (1, 925.5), (2, 925.4), (0, 0.0)]:
        s.update(level, score)
    probs = s.sample_weights()
    np.testing.assert_allclose(probs[1:], [1 / (1 + np.exp(-1)), np.exp(-1) / (1 + np.exp(-1))])
    counts = np.bincount(s.sample(4000), minlength=3)
    assert counts[0] == 0 and chi_square_p(counts, probs) > 1e-4


@pytest.mark.parametrize("transform", ["softmax", "power"])
def test_checkpoint_rebuilds_the_sum_tree_bit_for_bit(transform: str) -> None:
    rng = np.random.default_rng(0)
    a = LevelSampler(range(500), score_transform=transform, temperature=0.3, staleness_coef=0, seed=0)
    for _ in range(2000):
        a.update(int(rng.integers(500)), float(rng.random() * 3))
    b = LevelSampler(range(500), score_transform=transform, temperature=0.3, staleness_coef=0, seed=1)
    b.load_state_dict(a.state_dict())
    assert a._score_tree is not None and b._score_tree is not None
    assert list(a._score_tree._t) == list(b._score_tree._t)


def test_library_defaults_are_the_studys_choice() -> None:
    """Defaults chosen by the evidence study (docs/study.md): rank^-1, rho = 0.3, half the mass uniform."""
    s = LevelSampler(levels=range(6), seed=0)
    assert (s.strategy, s.score_transform, s.temperature, s.staleness_coef, s.uniform_mass) == (
        "value_l1", "rank", 1.0, 0.3, 0.5
    )  # fmt: skip
    s.update_batch(range(6), SCORES)
    ranks = np.array([5, 1, 3, 6, 2, 4], dtype=float)
    p_s = (1 / ranks) / (1 / ranks).sum()
    stale = s.staleness.astype(float)
    p_c = stale / stale.sum() if stale.sum() > 0 else np.full(6, 1 / 6)
    expected = 0.5 * (0.7 * p_s + 0.3 * p_c) + 0.5 / 6
    np.testing.assert_allclose(s.sample_weights(), expected)
    paper = LevelSampler.paper_defaults(levels=range(6), seed=0)
    assert (paper.temperature, paper.staleness_coef, paper.uniform_mass) == (0.1, 0.1, 0.0)
    minigrid = LevelSampler.paper_defaults(levels=range(6), preset="paper-minigrid", seed=3)
    assert (minigrid.staleness_coef, minigrid.seed) == (0.3, 3)
    with pytest.raises(ValueError, match="preset"):
        LevelSampler.paper_defaults(levels=range(6), preset="paper")


def test_next_levels_refuses_a_foreign_level_from_an_overriding_sample() -> None:
    class Stray(LevelSampler):
        def sample(self, n: int | None = None) -> np.ndarray:  # type: ignore[override]
            return np.full(n or 1, 999)

    assert set(LevelSampler(range(10), seed=0).next_levels(np.arange(3)).tolist()) <= set(range(10))
    with pytest.raises(ValueError, match="the sampler returned a level it does not hold"):
        Stray(range(10), seed=0).next_levels(np.arange(2))
