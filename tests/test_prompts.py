"""PromptCurriculum: the learnability curriculum over prompt indices (numpy only)."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from plr_gym import LevelSampler
from plr_gym.prompts import P_HISTOGRAM_BINS, PromptCurriculum

N = 300
TRUE_P = np.repeat([0.0, 0.5, 1.0], N // 3)  # never solved, solved half the time, always solved


def _middle_share(draw, observe, batches: int = 300, k: int = 16, g: int = 8, seed: int = 0) -> float:
    """Share of the draws of batches 100..batches that go to the p = 0.5 third."""
    rng = np.random.default_rng(seed)
    shares = []
    for _ in range(batches):
        ids = np.asarray(draw(k))
        shares.append(float(((ids >= N // 3) & (ids < 2 * N // 3)).mean()))
        per = np.repeat(ids, g)
        observe(per, rng.random(per.size) < TRUE_P[per])
    return float(np.mean(shares[100:]))


@pytest.mark.parametrize("method", ["learnability", "thompson"])
def test_draws_concentrate_on_the_learnable_third(method: str) -> None:
    cur = PromptCurriculum(N, method=method, seed=0)
    share = _middle_share(cur.next_prompts, cur.observe)
    # acceptance: >= 0.6. Learnability's default ageing (never-solved prompts re-measured, half-life 50)
    # costs some draws here, where nothing learns (0.857 at seed 0); estimates that never age keep the
    # floor lambda = 0.1, which bounds the share by 0.9 + 0.1/3 (0.926); Thompson's floor is 0.1 too
    assert share >= (0.82 if method == "learnability" else 0.85)
    if method == "learnability":
        still = PromptCurriculum(N, seed=0, evidence_half_life=None)
        assert _middle_share(still.next_prompts, still.observe) >= 0.88
        floor = PromptCurriculum(N, seed=0, uniform_mass=0.1, replay_prob=0.5)  # the defaults of round 2
        assert _middle_share(floor.next_prompts, floor.observe) < share - 0.02  # 0.808: the floor's cost
    # the reference points of the issue: LevelSampler's environment defaults ~0.49, uniform 1/3
    env = LevelSampler(range(N), strategy="learnability", seed=0)
    env_share = _middle_share(lambda k: env.sample(k), env.update_batch)
    assert 0.4 < env_share < 0.6
    rng = np.random.default_rng(1)
    uniform = _middle_share(lambda k: rng.integers(0, N, k), lambda ids, r: None)
    assert abs(uniform - 1 / 3) < 0.05


def test_group_rate_and_running_average_follow_the_documented_rule() -> None:
    cur = PromptCurriculum(4, seed=0, success_rate_alpha=0.5)
    cur.observe([1, 1, 1, 1, 2, 2], [1.0, 0.0, 0.0, 0.0, True, True])  # mixed bool/float: numbers here
    assert cur.success_rate.tolist() == [0.0, 0.25, 1.0, 0.0]
    assert cur.seen.tolist() == [False, True, True, False]
    cur.observe([1, 1], [1.0, 1.0])  # second group: p += max(1/2, 0.5) * (1 - 0.25)
    assert cur.success_rate[1] == pytest.approx(0.625)
    cur.observe([1, 1], [1.0, 1.0])  # third: p += max(1/3, 0.5) * (1 - 0.625)
    assert cur.success_rate[1] == pytest.approx(0.8125)
    # scores are p(1 - p) in the underlying LevelSampler
    assert cur.sampler.scores[1] == pytest.approx(0.8125 * 0.1875)
    # the Beta posterior counts successes and failures (prior (1, 1), no decay)
    a, b = cur.posterior
    assert (a[1], b[1]) == (1 + 1 + 2 + 2, 1 + 3)


def test_threshold_success_fn_and_posterior_decay() -> None:
    cur = PromptCurriculum(3, success_threshold=0.8)
    cur.observe([0, 0, 0, 0], [0.79, 0.8, 1.0, 0.0])
    assert cur.success_rate[0] == 0.5
    fn = PromptCurriculum(3, success_fn=lambda r: r > 2.0)
    fn.observe([0, 0, 0], [-5.0, 3.0, 10.0])  # any finite rewards with a function
    assert fn.success_rate[0] == pytest.approx(2 / 3)
    dec = PromptCurriculum(3, method="thompson", posterior_decay=0.5, prior=(2.0, 3.0))
    dec.observe([1, 1], [True, False])
    dec.observe([1, 1, 1], [True, True, True])
    a, b = dec.posterior
    # a <- 0.5 a + 0.5 a0 + s: 2 -> 0.5*2 + 1 + 1 = 3 -> 0.5*3 + 1 + 3 = 5.5
    # b <- 0.5 b + 0.5 b0 + f: 3 -> 0.5*3 + 1.5 + 1 = 4 -> 0.5*4 + 1.5 + 0 = 3.5
    assert (a[1], b[1]) == (5.5, 3.5)
    assert (a[0], b[0]) == (2.0, 3.0)


def test_filter_groups_marks_all_equal_groups() -> None:
    cur = PromptCurriculum(5, filter_groups=True)
    keep = cur.observe([0, 0, 1, 1, 2, 2, 0], [0, 0, 1, 0, 1, 1, 0])
    assert keep.tolist() == [False, False, True, True, False, False, False]
    assert cur.stats()["filtered_share"] == pytest.approx(2 / 3)
    plain = PromptCurriculum(5)
    assert plain.observe([0, 0, 1, 1], [0, 0, 1, 0]).tolist() == [True] * 4
    assert plain.observe([], []).tolist() == []


@pytest.mark.parametrize("method", ["learnability", "thompson"])
def test_state_round_trip_is_exact_in_memory_and_on_disk(method: str, tmp_path) -> None:
    kw = {"method": method, "seed": 3, "staleness_coef": 0.2 if method == "learnability" else 0.0}
    a = PromptCurriculum(50, **kw)
    rng = np.random.default_rng(0)
    p = rng.random(50)
    for _ in range(20):
        ids = a.next_prompts(8)
        per = np.repeat(ids, 4)
        a.observe(per, rng.random(per.size) < p[per])
    b = PromptCurriculum(50, **{**kw, "seed": 99})  # the seed only starts a generator: the state wins
    b.load_state_dict(copy.deepcopy(a.state_dict()))
    c = PromptCurriculum(50, **kw)
    a.save(tmp_path / "cur.npz", extra={"pending": [[1, 2]]})
    assert c.load_from(tmp_path / "cur.npz") == {"pending": [[1, 2]]}
    for _ in range(10):
        ids = a.next_prompts(8)
        assert np.array_equal(ids, b.next_prompts(8)) and np.array_equal(ids, c.next_prompts(8))
        per = np.repeat(ids, 4)
        r = rng.random(per.size) < p[per]
        for cur in (a, b, c):
            cur.observe(per, r)
    for cur in (b, c):
        sa, sb = a.state_dict(), cur.state_dict()
        assert sa["config"] == sb["config"] and sa["rng"] == sb["rng"]
        assert np.array_equal(sa["posterior_a"], sb["posterior_a"]) and np.array_equal(
            sa["draws"], sb["draws"]
        )
        for key in ("success_rate", "reward_mean", "reward_variance", "groups"):
            assert np.array_equal(sa[key], sb[key]), key
        assert sa["sampler"]["rng"] == sb["sampler"]["rng"]


def _snapshot(cur: PromptCurriculum) -> str:
    state = cur.state_dict()
    return repr(state)  # arrays print their values: equal strings mean equal states


def test_bad_input_is_refused_with_the_state_unchanged() -> None:
    cur = PromptCurriculum(10, seed=0, reward_range=(0.0, 1.0))
    cur.observe(np.repeat(cur.next_prompts(4), 2), [1, 0] * 4)
    before = _snapshot(cur)
    cases = [
        ([0, 1], [1.0], ValueError, "rewards must have one entry per prompt id"),
        ([0, 10], [1.0, 0.0], ValueError, r"prompt_ids must lie in \[0, 10\), got 10"),
        ([-1, 0], [1.0, 0.0], ValueError, "got -1"),
        ([0.0, 1.0], [1.0, 0.0], TypeError, "prompt_ids must be ints"),
        ([[0, 1]], [[1.0, 0.0]], ValueError, "prompt_ids must be 1-D"),
        ([0, 1], [1.0, np.nan], ValueError, "rewards must be finite"),
        ([0, 1], [1.0, 1.5], ValueError, r"rewards must lie in reward_range=\[0\.0, 1\.0\], got 1\.5"),
        ([0, 1], ["a", "b"], TypeError, "rewards must be bools or real numbers"),
    ]
    for ids, rewards, exc, match in cases:
        with pytest.raises(exc, match=match):
            cur.observe(ids, rewards)
        assert _snapshot(cur) == before
    with pytest.raises(ValueError, match="k must be a positive int"):
        cur.next_prompts(0)
    bad_fn = PromptCurriculum(4, success_fn=lambda r: r)
    with pytest.raises(TypeError, match="success_fn must return a bool array"):
        bad_fn.observe([0], [0.5])
    with pytest.raises(ValueError, match="distinct prompts"):
        PromptCurriculum(4, method="thompson").next_prompts(5)
    for kwargs, match in [
        ({"method": "ucb"}, "method='ucb' is not supported; choose one of learnability, thompson"),
        ({"uniform_mass": 1.5}, r"uniform_mass must lie in \[0, 1\]"),
        ({"success_threshold": 0.0, "reward_range": (0, 1)}, r"success_threshold must lie in reward_range"),
        ({"reward_range": (1.0, 1.0)}, "low < high"),
        ({"spread": "mad"}, "spread='mad' is not supported; choose one of variance, std"),
        ({"success_fn": bool, "reward_range": (0, 1)}, "pass one or the other"),
        ({"target": 1.0}, r"target must lie in \(0, 1\)"),
        ({"prior": (0.0, 1.0)}, "prior must be a pair"),
        ({"staleness_coef": 1.0}, "staleness_coef must be < 1"),
    ]:
        with pytest.raises(ValueError, match=match):
            PromptCurriculum(4, **kwargs)
    with pytest.raises(ValueError, match="num_prompts must be a positive int"):
        PromptCurriculum(0)
    with pytest.raises(TypeError, match="filter_groups must be a bool"):
        PromptCurriculum(4, filter_groups=1)  # type: ignore[arg-type]
    # states: another configuration, a corrupt member, a corrupt sampler member: refused, nothing changed
    other = PromptCurriculum(10, uniform_mass=0.3, reward_range=(0.0, 1.0)).state_dict()
    with pytest.raises(ValueError, match=r"uniform_mass: state has 0\.3"):
        cur.load_state_dict(other)
    good = cur.state_dict()
    for key, value in [("posterior_a", -good["posterior_a"]), ("num_filtered", 10**9), ("rng", {"x": 1})]:
        with pytest.raises(ValueError):
            cur.load_state_dict({**good, key: value})
        assert _snapshot(cur) == before
    broken_sampler = {**good["sampler"], "scores": good["sampler"]["scores"] + 1.0}
    with pytest.raises(ValueError, match="scores do not match 'reward_variance'"):
        cur.load_state_dict({**good, "sampler": broken_sampler})
    assert _snapshot(cur) == before


def test_stats_report_the_curriculum() -> None:
    cur = PromptCurriculum(6, seed=0, replay_prob=1.0, uniform_mass=0.1)
    assert cur.stats()["seen_fraction"] == 0.0
    cur.observe([0, 0, 2, 2, 4, 4], [0, 0, 1, 0, 1, 1])
    s = cur.stats()
    assert s["seen_fraction"] == 0.5 and s["mean_p"] == pytest.approx(0.5)
    assert [s[f"p_hist/{b}"] for b in P_HISTOGRAM_BINS] == pytest.approx([1 / 3, 0, 1 / 3, 0, 1 / 3])
    w = cur.sample_weights()  # replay_prob = 1: all mass on the seen prompts, floor 0.1 / 3 each
    assert w.sum() == pytest.approx(1.0)
    assert w[[0, 4]] == pytest.approx([0.1 / 3] * 2) and w[2] == pytest.approx(0.9 + 0.1 / 3)
    assert s["effective_prompts"] == pytest.approx(float(np.exp(-(w[w > 0] * np.log(w[w > 0])).sum())))
    cur.next_prompts(5)
    assert cur.stats()["replay_share"] == 1.0
    th = PromptCurriculum(6, method="thompson", seed=0)
    assert th.sample_weights().sum() == pytest.approx(1.0)
    assert th.stats()["effective_prompts"] > 1.0


def test_thompson_sample_weights_are_the_slot_probabilities_of_the_batches_drawn() -> None:
    """Thompson's ``sample_weights`` is the probability that a slot of the next batch is each prompt, for
    batches of the size drawn so far: with 6 prompts and batches of 2, the two prompts whose posterior sits
    at p = 0.5 fill nearly every slot (not the 1/6 each that batches of all 6 prompts would give)."""
    cur = PromptCurriculum(6, method="thompson", seed=0, uniform_mass=0.0)
    cur.observe(np.repeat([0, 1], 100), np.tile([True, False], 100))  # p ~ 0.5, sharp
    cur.observe(np.repeat([2, 3, 4, 5], 100), np.zeros(400, dtype=bool))  # p ~ 0
    drawn = np.concatenate([cur.next_prompts(2) for _ in range(50)])
    assert np.isin(drawn, [0, 1]).mean() == 1.0
    w = cur.sample_weights()
    assert w.sum() == pytest.approx(1.0) and w[[0, 1]] == pytest.approx([0.5, 0.5], abs=0.05)
    assert cur.stats()["effective_prompts"] == pytest.approx(2.0, abs=0.1)


def test_options_of_the_other_method_are_refused_not_ignored() -> None:
    """``replay_prob`` and ``staleness_coef`` shape only learnability's draws, ``target`` only Thompson's:
    set to anything but their defaults with the other method they would be silently ignored."""
    for kwargs in ({"staleness_coef": 0.3}, {"replay_prob": 0.9}):
        with pytest.raises(ValueError, match="method='learnability' only"):
            PromptCurriculum(4, method="thompson", **kwargs)
    with pytest.raises(ValueError, match="method='thompson' only"):
        PromptCurriculum(4, target=0.3)
    PromptCurriculum(4, method="thompson", target=0.3, prior=(2.0, 2.0), posterior_decay=0.9)
    PromptCurriculum(4, staleness_coef=0.3, replay_prob=0.9, prior=(2.0, 2.0))  # the posterior is kept


def test_the_default_estimate_is_the_latest_group() -> None:
    """``success_rate_alpha=1`` (the default since the estimates study): each group replaces the estimate."""
    cur = PromptCurriculum(3, seed=0)
    assert cur.success_rate_alpha == 1.0
    cur.observe([0, 0, 0, 0], [1.0, 0.0, 0.0, 0.0])
    cur.observe([0, 0], [1.0, 1.0])
    assert cur.success_rate[0] == 1.0 and cur.scores[0] == 0.0 and cur.reward_mean[0] == 1.0


def test_binary_rewards_score_p_times_one_minus_p_exactly() -> None:
    """The reward variance of 0/1 rewards is p(1 - p) of the running success rate, group after group."""
    cur = PromptCurriculum(3, seed=0, success_rate_alpha=0.3)
    rng = np.random.default_rng(0)
    for _ in range(40):
        per = np.repeat([0, 1, 2], 8)
        cur.observe(per, rng.random(per.size) < np.array([0.2, 0.5, 0.9])[per])
    p = cur.success_rate
    assert cur.reward_variance == pytest.approx(p * (1 - p), abs=1e-15)
    assert cur.reward_mean == pytest.approx(p, abs=1e-15)
    assert cur.sampler.scores == pytest.approx(p * (1 - p), abs=1e-15)


def test_partial_credit_scores_the_reward_variance_by_the_documented_rule() -> None:
    """Rewards 0.1 to 0.45 (all below the success threshold) have spread: the score is their variance."""
    cur = PromptCurriculum(4, seed=0, success_rate_alpha=0.5)
    g1 = np.array([0.1, 0.2, 0.45, 0.25])
    cur.observe([1, 1, 1, 1], g1)
    assert cur.success_rate[1] == 0.0  # no success at the 0.5 threshold ...
    v1 = float(np.mean((g1 - g1.mean()) ** 2))
    assert cur.scores[1] == pytest.approx(v1, rel=1e-12) and v1 > 0.01  # ... but a non-zero score
    assert cur.sampler.scores[1] == cur.scores[1]
    g2 = np.array([0.3, 0.3])
    cur.observe([1, 1], g2)  # second group, step max(1/2, 0.5) = 0.5
    s, d = 0.5, g2.mean() - g1.mean()
    assert cur.reward_mean[1] == pytest.approx(g1.mean() + s * d, rel=1e-12)
    assert cur.reward_variance[1] == pytest.approx((1 - s) * v1 + s * 0.0 + s * (1 - s) * d * d, rel=1e-12)
    # the pooled variance of the two groups, weighted 1/2 and 1/2 (what the rule computes)
    pooled = 0.5 * np.mean(g1**2) + 0.5 * np.mean(g2**2) - (0.5 * g1.mean() + 0.5 * g2.mean()) ** 2
    assert cur.reward_variance[1] == pytest.approx(pooled, rel=1e-12)
    std = PromptCurriculum(4, spread="std", reward_range=(0.0, 2.0))
    std.observe([1, 1, 1, 1], g1)
    assert std.scores[1] == pytest.approx(np.sqrt(v1) / 2.0, rel=1e-12)
    assert std.sampler.scores[1] == std.scores[1]
    flat = PromptCurriculum(2, filter_groups=True)
    keep = flat.observe([0, 0, 0, 1, 1], [0.1, 0.1, 0.1, 0.1, 0.2])
    assert flat.scores[0] == 0.0 and flat.scores[1] > 0  # equal rewards: zero GRPO advantage, score 0
    assert keep.tolist() == [False, False, False, True, True]  # DAPO drops the flat group


def test_plus_minus_one_rewards_and_several_reward_functions() -> None:
    """verl's DAPO reward is -1/+1; TRL sums weighted reward functions (e.g. accuracy + format, 0 to 2)."""
    pm = PromptCurriculum(3, reward_range=(-1.0, 1.0))  # success_threshold: the middle, 0
    assert pm.success_threshold == 0.0
    pm.observe([0, 0, 0, 0, 1, 1], [1.0, -1.0, -1.0, -1.0, -1.0, -1.0])
    assert pm.success_rate[:2].tolist() == [0.25, 0.0]
    # variance on the unit scale of the range: (+1/-1 with p = 1/4) -> 4 p (1 - p) / 4 = p (1 - p)
    assert pm.scores[0] == pytest.approx(0.25 * 0.75, rel=1e-12) and pm.scores[1] == 0.0
    with pytest.raises(ValueError, match=r"reward_range=\[-1\.0, 1\.0\], got 2\.0"):
        pm.observe([2], [2.0])
    # no range: any finite reward is taken; the draws are the same as on the unit scale
    raw = PromptCurriculum(30, seed=5)
    unit = PromptCurriculum(30, seed=5, reward_range=(-1.0, 1.0))
    rng = np.random.default_rng(2)
    for _ in range(30):
        ids = raw.next_prompts(6)
        assert np.array_equal(ids, unit.next_prompts(6))
        per = np.repeat(ids, 4)
        r = np.where(rng.random(per.size) < (per % 3) / 2, 1.0, -1.0)
        raw.observe(per, r)
        unit.observe(per, r)
    assert raw.scores == pytest.approx(4 * unit.scores, rel=1e-12)
    two = PromptCurriculum(2)  # accuracy + format: sums of 0..2 are taken
    two.observe([0, 0, 0, 0], [2.0, 1.0, 1.0, 0.0])
    assert two.scores[0] == pytest.approx(0.5, rel=1e-12) and two.success_rate[0] == 0.75


def test_real_groups_are_judged_one_by_one_not_pooled_by_prompt() -> None:
    """A prompt drawn twice in a batch is two GRPO groups: one may be all-equal (dropped by DAPO's rule) while
    the other is mixed; pooled by prompt id, the all-equal one would be kept."""
    ids = np.repeat([3, 5, 3], 4)
    rewards = np.array([0, 0, 0, 0, 1, 0, 1, 0, 1, 1, 0, 1], dtype=float)
    groups = np.arange(12) // 4
    cur = PromptCurriculum(8, filter_groups=True, success_rate_alpha=0.5, seed=0)
    keep = cur.observe(ids, rewards, groups=groups)
    assert keep.tolist() == [False] * 4 + [True] * 8
    pooled = PromptCurriculum(8, filter_groups=True, success_rate_alpha=0.5)
    assert pooled.observe(ids, rewards).tolist() == [True] * 12  # the all-zero group of prompt 3 kept
    # prompt 3: first group p = 0 (v = 0), then the second (p_g = 3/4) with step max(1/2, 0.5)
    s, d = 0.5, 0.75 - 0.0
    assert cur.success_rate[3] == pytest.approx(0.375, rel=1e-12)
    assert cur.reward_variance[3] == pytest.approx(
        (1 - s) * 0 + s * 0.75 * 0.25 + s * (1 - s) * d * d, rel=1e-12
    )
    assert cur.reward_variance[3] == pytest.approx(0.375 * 0.625, rel=1e-12)  # still p(1 - p)
    assert cur.stats()["filtered_share"] == pytest.approx(1 / 3)
    a, b = cur.posterior
    assert (a[3], b[3]) == (1 + 0 + 3, 1 + 4 + 1)
    before = repr(cur.state_dict())
    with pytest.raises(ValueError, match=r"entry 4 \(prompt 5\) shares its group with prompt 3"):
        cur.observe(ids, rewards, groups=np.arange(12) // 6)
    with pytest.raises(ValueError, match="groups must have one label per prompt id"):
        cur.observe(ids, rewards, groups=[0, 1])
    assert repr(cur.state_dict()) == before
    uids = np.array(["u1"] * 4 + ["u2"] * 4 + ["u3"] * 4, dtype=object)  # verl's uid strings
    strings = PromptCurriculum(8, filter_groups=True, success_rate_alpha=0.5, seed=0)
    assert strings.observe(ids, rewards, groups=uids).tolist() == keep.tolist()
    assert repr(strings.state_dict()) == repr(cur.state_dict())
