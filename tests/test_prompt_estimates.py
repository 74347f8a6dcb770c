"""PromptCurriculum's estimates that keep up: evidence that decays with the observe() calls since a prompt
was measured, the label prior, the posterior estimate; exact formulas, validation, checkpoints."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from plr_gym.prompts import PromptCurriculum


def _feed(cur: PromptCurriculum, batches: list[tuple[list[int], list[list[int]]]]) -> None:
    """Observe each batch: prompt ids and each prompt's 0/1 group."""
    for ids, groups in batches:
        cur.observe(np.repeat(ids, len(groups[0])), np.asarray(groups, dtype=float).reshape(-1))


BATCHES = [
    ([0, 1, 2], [[1, 0, 0, 0], [1, 1, 0, 0], [0, 0, 0, 0]]),  # clock 1: p = 1/4, 1/2, 0
    ([3, 4], [[1, 1, 1, 0], [1, 0, 1, 0]]),  # clock 2: p = 3/4, 1/2
    ([0], [[1, 1, 0, 0]]),  # clock 3: prompt 0 again
]


def test_evidence_half_life_relaxes_scores_towards_the_fresh_weighted_mean() -> None:
    h = 2.0
    cur = PromptCurriculum(
        6, seed=0, success_rate_alpha=1.0, evidence_half_life=h, ageing="all", uniform_mass=0.1
    )
    _feed(cur, BATCHES)
    v = np.array([0.25, 0.25, 0.0, 0.1875, 0.25])  # p(1 - p) of each prompt's last group (alpha = 1)
    age = np.array([0, 2, 2, 1, 1])  # observe() calls since each prompt's last group; clock = 3
    w = 2.0 ** (-age / h)
    prior = (w * v).sum() / w.sum()
    expected = np.r_[w * v + (1 - w) * prior, 0.0]  # prompt 5 never measured: 0
    np.testing.assert_allclose(cur.scores, expected, rtol=0, atol=1e-15)
    assert cur.measured_at.tolist() == [3, 1, 1, 2, 2, 0]
    np.testing.assert_allclose(cur.reward_variance[:5], v, atol=1e-15)  # the raw estimates stay
    # the draws use the decayed scores: replay distribution (1 - lambda)·s/Σs + lambda/N_seen
    weights = cur.sampler.sample_weights()
    np.testing.assert_allclose(weights[:5], 0.9 * expected[:5] / expected.sum() + 0.1 / 5, atol=1e-12)
    assert weights[5] == 0.0


def test_prompt_labels_give_each_label_its_own_prior() -> None:
    h = 1.0
    labels = [7, 7, 3, 3, 3, 7]  # any ints; renumbered internally
    cur = PromptCurriculum(
        6, seed=0, success_rate_alpha=1.0, evidence_half_life=h, ageing="all", prompt_labels=labels
    )
    _feed(cur, BATCHES)
    v = np.array([0.25, 0.25, 0.0, 0.1875, 0.25])
    w = 2.0 ** (-np.array([0, 2, 2, 1, 1]) / h)
    lab = np.array(labels[:5])
    expected = np.zeros(6)
    for i in range(5):
        same = lab == lab[i]
        prior = (w[same] * v[same]).sum() / w[same].sum()
        expected[i] = w[i] * v[i] + (1 - w[i]) * prior
    np.testing.assert_allclose(cur.scores, expected, rtol=0, atol=1e-15)


def test_unsolved_ageing_relaxes_only_prompts_solved_less_than_half_the_time() -> None:
    h = 2.0
    cur = PromptCurriculum(6, seed=0, evidence_half_life=h, ageing="unsolved")
    _feed(cur, BATCHES)
    v = np.array([0.25, 0.25, 0.0, 0.1875, 0.25])
    p = np.array([0.5, 0.5, 0.0, 0.75, 0.5])  # success rates: only prompt 2 (p = 0) is below 1/2
    w = 2.0 ** (-np.array([0, 2, 2, 1, 1]) / h)
    prior = (w * v).sum() / w.sum()  # the prior is computed as with ageing="all"
    np.testing.assert_array_equal(cur.success_rate[:5], p)
    expected = np.r_[np.where(p < 0.5, w * v + (1 - w) * prior, v), 0.0]
    np.testing.assert_allclose(cur.scores, expected, rtol=0, atol=1e-15)
    assert cur.scores[2] > 0 and cur.reward_variance[2] == 0.0  # the never-solved prompt is drawn again


def test_posterior_estimate_is_the_expected_learnability_with_decaying_evidence() -> None:
    cur = PromptCurriculum(6, seed=0, estimate="posterior", prior=(1.0, 2.0), evidence_half_life=None)
    _feed(cur, BATCHES)
    a, b = cur.posterior
    expected = np.where(np.arange(6) < 5, a * b / ((a + b) * (a + b + 1)), 0.0)
    np.testing.assert_allclose(cur.scores, expected, rtol=0, atol=1e-15)
    assert a[0] == 1 + 1 + 2 and b[0] == 2 + 3 + 2  # both groups of prompt 0 count (no decay)
    h = 3.0
    dec = PromptCurriculum(
        6, seed=0, estimate="posterior", prior=(1.0, 2.0), evidence_half_life=h, ageing="all"
    )
    _feed(dec, BATCHES)
    w = np.r_[2.0 ** (-np.array([0, 2, 2, 1, 1]) / h), 1.0]
    ad, bd = 1.0 + w * (a - 1.0), 2.0 + w * (b - 2.0)
    np.testing.assert_allclose(dec.scores[:5], (ad * bd / ((ad + bd) * (ad + bd + 1)))[:5], atol=1e-15)
    std = PromptCurriculum(6, seed=0, estimate="posterior", spread="std", evidence_half_life=None)
    _feed(std, BATCHES)
    a1, b1 = std.posterior
    np.testing.assert_allclose(std.scores[:5], np.sqrt(a1 * b1 / ((a1 + b1) * (a1 + b1 + 1)))[:5], atol=1e-15)


def test_defaults_are_the_studys_choice_and_none_switches_ageing_off() -> None:
    cur = PromptCurriculum(6, seed=0)
    assert (cur.success_rate_alpha, cur.evidence_half_life, cur.ageing) == (1.0, 50.0, "unsolved")
    assert (cur.uniform_mass, cur.replay_prob) == (0.0, 0.6)  # round 3: no floor, 40% of draws explore
    off = PromptCurriculum(6, seed=0, evidence_half_life=None)
    _feed(off, BATCHES)
    np.testing.assert_array_equal(off.scores, off.reward_variance)  # 0/1 rewards, no range: the variance
    assert off.uniform_mass == 0.1  # estimates that never age keep the floor that re-measures them
    # Thompson sampling keeps its own posterior_decay and MoPPS's uniform slots: the study is learnability's
    th = PromptCurriculum(6, method="thompson", seed=0)
    assert th.evidence_half_life is None and th.ageing == "all" and th.uniform_mass == 0.1


def test_default_draws_have_no_floor_and_ageing_brings_back_the_never_solved() -> None:
    """The defaults' draws, exactly: 40% of each draw explores while prompts are unseen; a prompt whose
    group was all solved gets nothing (no floor, and solved prompts do not age); one read as never solved
    gets nothing at first and comes back as it ages (half-life 50 observe() calls)."""
    cur = PromptCurriculum(4, seed=0)
    _feed(cur, [([0, 1, 2], [[1] * 8, [0] * 8, [1, 0] * 4])])  # p = 1, 0, 1/2; prompt 3 unseen
    np.testing.assert_allclose(cur.sample_weights(), [0.0, 0.0, 0.6, 0.4], atol=1e-15)
    _feed(cur, [([2], [[1, 0] * 4])] * 50)  # prompt 2 measured again 50 times: prompts 0 and 1 are 50 old
    w = 0.5  # 2^(-50/50)
    prior = (w * 0.0 + w * 0.0 + 1.0 * 0.25) / (w + w + 1.0)  # the w-weighted mean score
    expected = np.array([0.0, (1 - w) * prior, 0.25, 0.0])  # only the never-solved prompt ages
    np.testing.assert_allclose(cur.scores, expected, atol=1e-15)
    np.testing.assert_allclose(
        cur.sample_weights(), np.r_[0.6 * expected[:3] / expected.sum(), 0.4], atol=1e-15
    )
    drawn = np.concatenate([cur.next_prompts(50) for _ in range(20)])
    counts = np.bincount(drawn, minlength=4)
    assert counts[0] == 0 and counts[1] > 0  # the solved prompt never; the aged never-solved one again
    assert abs(counts[3] / drawn.size - 0.4) < 0.05  # 1000 draws: 4.6 standard errors


def test_options_are_validated() -> None:
    for kwargs, exc, match in [
        ({"evidence_half_life": 0.0}, ValueError, "evidence_half_life must be > 0"),
        ({"evidence_half_life": float("inf")}, ValueError, "evidence_half_life"),
        ({"evidence_half_life": "10"}, TypeError, "evidence_half_life"),
        ({"method": "thompson", "evidence_half_life": 10.0}, ValueError, "method='learnability' only"),
        (
            {"estimate": "bayes"},
            ValueError,
            "estimate='bayes' is not supported; choose one of running, posterior",
        ),
        ({"method": "thompson", "estimate": "posterior"}, ValueError, "method='learnability' only"),
        ({"prompt_labels": [0, 1, 0, 1], "evidence_half_life": None}, ValueError, "need evidence_half_life"),
        ({"ageing": "all", "evidence_half_life": None}, ValueError, "it needs evidence_half_life"),
        ({"ageing": "old", "evidence_half_life": 5.0}, ValueError, "ageing='old' is not supported"),
        ({"method": "thompson", "ageing": "all"}, ValueError, "method='learnability' only"),
        ({"prompt_labels": [0, 1, 0], "evidence_half_life": 5.0}, ValueError, r"shape \(4,\), got \(3,\)"),
        (
            {"prompt_labels": [0.5, 1, 0, 1], "evidence_half_life": 5.0},
            TypeError,
            "prompt_labels must be ints",
        ),
        (
            {"prompt_labels": [0, 1, 0, 1], "evidence_half_life": 5.0, "estimate": "posterior"},
            ValueError,
            "prompt_labels apply to estimate='running'",
        ),
    ]:
        with pytest.raises(exc, match=match):
            PromptCurriculum(4, **kwargs)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"evidence_half_life": 4.0, "success_rate_alpha": 1.0, "prompt_labels": np.arange(40) % 3},
        {"evidence_half_life": 3.0, "ageing": "unsolved", "success_rate_alpha": 0.5},
        {"estimate": "posterior", "evidence_half_life": 6.0},
    ],
)
def test_state_round_trip_is_exact_with_decay(kwargs: dict, tmp_path) -> None:
    a = PromptCurriculum(40, seed=3, **kwargs)
    rng = np.random.default_rng(0)
    p = rng.random(40)
    for _ in range(15):
        ids = a.next_prompts(8)
        per = np.repeat(ids, 4)
        a.observe(per, rng.random(per.size) < p[per])
    b = PromptCurriculum(40, seed=3, **kwargs)
    b.load_state_dict(copy.deepcopy(a.state_dict()))
    c = PromptCurriculum(40, seed=3, **kwargs)
    a.save(tmp_path / "cur.npz")
    c.load_from(tmp_path / "cur.npz")
    for _ in range(10):
        ids = a.next_prompts(8)
        assert np.array_equal(ids, b.next_prompts(8)) and np.array_equal(ids, c.next_prompts(8))
        per = np.repeat(ids, 4)
        r = rng.random(per.size) < p[per]
        for cur in (a, b, c):
            cur.observe(per, r)
    for cur in (b, c):
        np.testing.assert_array_equal(cur.scores, a.scores)
        np.testing.assert_array_equal(cur.measured_at, a.measured_at)
        assert cur.state_dict()["clock"] == a.state_dict()["clock"] == 25
    # another half-life, other labels, a corrupt clock, an old state: refused, the curriculum unchanged
    before = repr(a.state_dict())
    other = PromptCurriculum(40, seed=3, **{**kwargs, "evidence_half_life": 5.0})
    with pytest.raises(ValueError, match="evidence_half_life: state has"):
        other.load_state_dict(a.state_dict())
    good = a.state_dict()
    with pytest.raises(ValueError, match="'measured_at' exceeds 'clock'"):
        a.load_state_dict({**good, "clock": 3})
    with pytest.raises(ValueError, match="scores do not match"):
        a.load_state_dict({**good, "measured_at": np.zeros(40, dtype=np.int64)})
    with pytest.raises(ValueError, match="has version 2, written by an older plr_gym"):
        a.load_state_dict({**good, "version": 2})
    assert repr(a.state_dict()) == before


# ---------------------------------------------------------------- reward_noise (issue 44, round 4)
def test_reward_noise_debiases_the_score_exactly() -> None:
    """Score = max(0, v − ε(1 − ε)) / (1 − 2ε)², v the running variance on the unit scale; with ageing
    the de-biased scores are the ones that relax; success rates stay the observed ones."""
    eps = 0.1
    cur = PromptCurriculum(6, seed=0, evidence_half_life=None, uniform_mass=0.0, reward_noise=eps)
    _feed(cur, BATCHES)
    v = np.array([0.25, 0.25, 0.0, 0.1875, 0.25])
    expected = np.maximum(v - eps * (1 - eps), 0.0) / (1 - 2 * eps) ** 2
    np.testing.assert_allclose(cur.scores[:5], expected, rtol=0, atol=1e-15)
    np.testing.assert_allclose(cur.reward_variance[:5], v, atol=1e-15)  # the raw estimates stay
    assert cur.success_rate[:5].tolist() == [0.5, 0.5, 0.0, 0.75, 0.5]
    # a group read at p_obs = 1/8 (v = 0.109) under ε = 0.2 (ε(1 − ε) = 0.16): score 0
    low = PromptCurriculum(2, seed=0, evidence_half_life=None, reward_noise=0.2)
    low.observe([0] * 8 + [1] * 8, [1, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0])
    np.testing.assert_allclose(low.scores, [0.0, (0.25 - 0.16) / 0.36], rtol=0, atol=1e-15)
    # spread="std": the square root; reward_range: on its unit scale (-1/+1 rewards)
    std = PromptCurriculum(2, seed=0, evidence_half_life=None, reward_noise=0.2, spread="std")
    std.observe([0] * 8 + [1] * 8, [1, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0])
    np.testing.assert_allclose(std.scores, [0.0, np.sqrt(0.09 / 0.36)], rtol=0, atol=1e-15)
    pm = PromptCurriculum(2, seed=0, evidence_half_life=None, reward_noise=0.2, reward_range=(-1, 1))
    pm.observe([0] * 8 + [1] * 8, [1, -1, -1, -1, -1, -1, -1, -1, 1, 1, 1, 1, -1, -1, -1, -1])
    np.testing.assert_allclose(pm.scores, low.scores, rtol=0, atol=1e-15)
    # with ageing: w·v' + (1 − w)·v̄' of the de-biased scores v'
    h = 2.0
    aged = PromptCurriculum(6, seed=0, evidence_half_life=h, ageing="all", reward_noise=eps)
    _feed(aged, BATCHES)
    w = 2.0 ** (-np.array([0, 2, 2, 1, 1]) / h)
    prior = (w * expected).sum() / w.sum()
    np.testing.assert_allclose(aged.scores[:5], w * expected + (1 - w) * prior, rtol=0, atol=1e-15)


def test_reward_noise_zero_is_the_default_bit_for_bit_and_noise_helps_on_flipped_rewards() -> None:
    """reward_noise=0 draws exactly as the defaults; on rewards with 20% flipped, ε = 0.2 sends more
    draws to the prompts at p = 1/2 than the defaults (seeded)."""
    true_p = np.repeat([0.0, 0.5, 1.0], 20)
    ways = []
    for kwargs in ({}, {"reward_noise": 0.0}, {"reward_noise": 0.2}):
        cur = PromptCurriculum(60, seed=1, **kwargs)
        rng = np.random.default_rng(5)
        middle = 0
        for step in range(150):
            ids = cur.next_prompts(8)
            per = np.repeat(ids, 8)
            seen = (rng.random(per.size) < true_p[per]) ^ (rng.random(per.size) < 0.2)
            cur.observe(per, seen)
            middle += int(((ids >= 20) & (ids < 40)).sum()) if step >= 50 else 0
        ways.append((cur.scores.copy(), middle / 800))
    np.testing.assert_array_equal(ways[0][0], ways[1][0])
    assert ways[0][1] == ways[1][1]
    assert ways[2][1] > ways[0][1] + 0.15, (ways[0][1], ways[2][1])


def test_reward_noise_is_checked_and_old_states_still_load() -> None:
    for kwargs, match in [
        ({"reward_noise": 0.5}, r"reward_noise must lie in \[0, 0.5\)"),
        ({"reward_noise": -0.1}, r"reward_noise must lie in \[0, 0.5\)"),
        ({"reward_noise": 0.1, "method": "thompson"}, "applies to method='learnability' with"),
        ({"reward_noise": 0.1, "estimate": "posterior"}, "applies to method='learnability' with"),
    ]:
        with pytest.raises(ValueError, match=match):
            PromptCurriculum(4, **kwargs)
    with pytest.raises(TypeError):
        PromptCurriculum(4, reward_noise="0.1")
    a = PromptCurriculum(10, seed=2)
    _feed(a, BATCHES)
    old = copy.deepcopy(a.state_dict())
    del old["config"]["reward_noise"]  # a state written before the option existed
    b = PromptCurriculum(10, seed=2)
    b.load_state_dict(old)
    assert np.array_equal(b.next_prompts(6), a.next_prompts(6))
    noisy = PromptCurriculum(10, seed=2, reward_noise=0.1)
    with pytest.raises(ValueError, match=r"reward_noise: state has 0.0, curriculum has 0.1"):
        noisy.load_state_dict(old)


def test_replay_prob_auto_follows_the_dataset_size() -> None:
    """``replay_prob="auto"`` (the default): 0.6 + 0.2·clip(log10(N / 2000), 0, 1)."""
    from plr_gym.prompts import _auto_replay_prob

    for n, expected in [(1, 0.6), (2000, 0.6), (round(2000 * 10**0.5), 0.7), (20000, 0.8), (10**6, 0.8)]:
        assert _auto_replay_prob(n) == pytest.approx(expected, abs=1e-4)
        cur = PromptCurriculum(n, seed=0)
        assert cur.replay_prob == pytest.approx(expected, abs=1e-4)
        assert cur.sampler.replay_prob == cur.replay_prob
    assert PromptCurriculum(20000, replay_prob=0.6).replay_prob == 0.6
    assert PromptCurriculum(20000, method="thompson").replay_prob == 0.6  # not used by thompson
    with pytest.raises(TypeError):
        PromptCurriculum(10, replay_prob="fast")


def test_a_state_saved_before_auto_resumes_with_its_replay_prob(tmp_path) -> None:
    """A state written before round 4 (no ``reward_noise`` in its config) with ``replay_prob=0.6`` loads
    into a default curriculum of any size and draws as it would have; a newer state is checked as usual."""
    n = 5000  # "auto": 0.6797
    old = PromptCurriculum(n, seed=4, replay_prob=0.6)
    rng = np.random.default_rng(1)
    for _ in range(5):
        ids = old.next_prompts(16)
        old.observe(np.repeat(ids, 4), rng.random(64) < 0.5)
    state = copy.deepcopy(old.state_dict())
    del state["config"]["reward_noise"]
    cur = PromptCurriculum(n, seed=4)
    assert cur.replay_prob > 0.6
    cur.load_state_dict(copy.deepcopy(state))
    assert cur.replay_prob == 0.6 and cur.sampler.replay_prob == 0.6
    for _ in range(5):
        ids = old.next_prompts(16)
        assert np.array_equal(cur.next_prompts(16), ids)
        r = rng.random(64) < 0.5
        old.observe(np.repeat(ids, 4), r)
        cur.observe(np.repeat(ids, 4), r)
    cur.save(tmp_path / "cur.npz")  # and it saves and resumes as a round-4 state with 0.6
    again = PromptCurriculum(n, seed=4, replay_prob=0.6)
    again.load_from(tmp_path / "cur.npz")
    assert np.array_equal(again.next_prompts(16), cur.next_prompts(16))
    fresh = PromptCurriculum(n, seed=4)
    before = repr(fresh.state_dict())
    with pytest.raises(ValueError, match=r"replay_prob: state has 0.6, curriculum has 0.679"):
        fresh.load_state_dict(old.state_dict())  # a round-4 state: the options must match
    other = {**state, "config": {**state["config"], "replay_prob": 0.5}}
    with pytest.raises(ValueError, match=r"replay_prob: state has 0.5"):
        fresh.load_state_dict(other)
    assert repr(fresh.state_dict()) == before
