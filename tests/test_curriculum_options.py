"""The curriculum options of the evidence study: learnability, the uniform floor, the DoorKey gamut."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import minigrid  # noqa: F401  (registers the envs)
import numpy as np
import pytest
from minigrid.wrappers import FlatObsWrapper, ImgObsWrapper
from scipy.stats import chisquare
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback, CallbackList
from stable_baselines3.common.env_util import make_vec_env

import plr_gym.envs
from plr_gym import LevelSampler, LevelWrapper, PLRCallback, PrioritizedLevelReplay
from plr_gym.envs.gamut import DoorKeyGamutEnv
from plr_gym.scoring import EpisodeData, EpisodeScorer, episode_success, learnability


# ---------------------------------------------------------------------------------------- learnability
def learn_sampler(**kw: Any) -> LevelSampler:
    kw.setdefault("score_transform", "power")
    kw.setdefault("temperature", 1.0)
    kw.setdefault("staleness_coef", 0.0)
    kw.setdefault("uniform_mass", 0.0)
    return LevelSampler(range(6), strategy="learnability", seed=0, **kw)


def test_learnability_running_rate_and_score_by_hand() -> None:
    s = learn_sampler(success_rate_alpha=0.25)
    outcomes = [1, 0, 1, 1, 0, 0, 1]
    rate, expected_rates = 0.0, []
    for n, o in enumerate(outcomes, start=1):
        rate += max(1.0 / n, 0.25) * (o - rate)  # plain mean for 4 outcomes, then EWA 0.25
        expected_rates.append(rate)
        s.update(2, o)
        assert s.success_rate[2] == pytest.approx(rate, abs=1e-15)
        assert s.scores[2] == pytest.approx(rate * (1 - rate), abs=1e-15)
    assert expected_rates[3] == pytest.approx(0.75)  # mean of 1, 0, 1, 1
    assert expected_rates[4] == pytest.approx(0.75 + 0.25 * (0 - 0.75))
    # booleans are outcomes too
    s.update(3, True)
    s.update(3, False)
    assert s.success_rate[3] == pytest.approx(0.5) and s.scores[3] == pytest.approx(0.25)


def test_learnability_power_weights_are_proportional_to_p_times_1_minus_p() -> None:
    s = learn_sampler()
    for level, outs in {0: [1, 1], 1: [1, 0], 2: [0, 0], 3: [1, 0, 0, 0], 4: [1], 5: [0, 1, 1]}.items():
        for o in outs:
            s.update(level, o)
    p = np.array([1.0, 0.5, 0.0, 0.25, 1.0, 2 / 3])
    learn = p * (1 - p)
    np.testing.assert_allclose(s.scores, learn, atol=1e-15)
    np.testing.assert_allclose(s.sample_weights(), learn / learn.sum(), atol=1e-12)


def test_learnability_refuses_bad_outcomes_and_alpha() -> None:
    s = learn_sampler()
    with pytest.raises(ValueError, match=r"outcomes in \[0, 1\]"):
        s.update(0, 2.0)
    with pytest.raises(ValueError, match=r"outcomes in \[0, 1\]"):
        s.update_batch([0, 1], [1.0, -1.0])
    assert s.num_seen == 0  # nothing stored by the failed calls
    with pytest.raises(ValueError, match="success_rate_alpha"):
        LevelSampler(range(3), strategy="learnability", alpha=0.5)
    with pytest.raises(ValueError, match="success_rate_alpha"):
        LevelSampler(range(3), success_rate_alpha=0.0)
    with pytest.raises(AttributeError, match="learnability"):
        LevelSampler(range(3)).success_rate  # noqa: B018


def test_learnability_bulk_update_equals_one_by_one() -> None:
    n = 5000  # above the bulk-update threshold
    rng = np.random.default_rng(0)
    a = LevelSampler(range(n), strategy="learnability", score_transform="rank", seed=0)
    b = LevelSampler(range(n), strategy="learnability", score_transform="rank", seed=0)
    for _ in range(3):
        outcomes = rng.integers(0, 2, size=n).astype(float)
        a.update_batch(np.arange(n), outcomes)
        for level, o in enumerate(outcomes.tolist()):
            b.update(level, o)
    np.testing.assert_array_equal(a.success_rate, b.success_rate)
    np.testing.assert_array_equal(a.scores, b.scores)
    np.testing.assert_array_equal(a.sample(50), b.sample(50))


def test_learnability_checkpoint_round_trip(tmp_path: Path) -> None:
    s = learn_sampler(staleness_coef=0.3, uniform_mass=0.25)
    rng = np.random.default_rng(1)
    for _ in range(40):
        s.update(int(s.sample()), int(rng.integers(0, 2)))
    s.save(tmp_path / "s.npz")
    t = LevelSampler.load(tmp_path / "s.npz")
    assert t.strategy == "learnability" and t.uniform_mass == 0.25
    np.testing.assert_array_equal(t.success_rate, s.success_rate)
    np.testing.assert_array_equal(t.sample(100), s.sample(100))
    state = s.state_dict()
    del state["outcomes"]
    with pytest.raises(ValueError, match="success_rate"):
        learn_sampler(staleness_coef=0.3, uniform_mass=0.25).load_state_dict(state)


def test_learnability_score_function_and_outcome_rule() -> None:
    assert learnability(EpisodeData(success=True)) == 1.0
    assert learnability(EpisodeData(success=False)) == 0.0
    with pytest.raises(ValueError, match="is_success"):
        learnability(EpisodeData(rewards=np.ones(3)))
    assert episode_success({"is_success": np.bool_(False), "episode": {"r": 1.0}}) is False
    assert episode_success({"episode": {"r": np.array([0.3])}}) is True
    assert episode_success({"episode": {"r": 0.0}}) is False
    assert episode_success({"anything": 1}) is None
    assert episode_success({}, success_fn=lambda info: True) is True


def test_scorer_reports_outcomes_and_refuses_unknown_ones() -> None:
    sampler = learn_sampler()
    scorer = EpisodeScorer(sampler, n_envs=2, strategy="learnability")
    starts = np.array([[1, 1], [0, 0], [1, 0]], dtype=bool)
    levels = np.array([[0, 1], [0, 1], [2, 1]])
    successes = np.array([[np.nan, np.nan], [1.0, np.nan], [np.nan, 0.0]])
    reported = scorer.process_rollout(
        levels=levels,
        episode_starts=starts,
        dones=np.array([False, True]),
        rewards=np.zeros((3, 2)),
        values=np.zeros((3, 2)),
        successes=successes,
    )
    assert reported == [(0, 1.0), (1, 0.0)]
    assert sampler.success_rate[:2].tolist() == [1.0, 0.0]
    with pytest.raises(ValueError, match="1 \\(success\\), 0 \\(failure\\) or NaN"):
        scorer.process_rollout(
            levels=levels,
            episode_starts=starts,
            dones=np.array([True, True]),
            rewards=np.zeros((3, 2)),
            values=np.zeros((3, 2)),
            successes=np.full((3, 2), 0.5),
        )
    unknown = EpisodeScorer(learn_sampler(), n_envs=2, strategy="learnability")
    with pytest.raises(ValueError, match="needs each episode's outcome"):
        unknown.process_rollout(
            levels=levels,
            episode_starts=starts,
            dones=np.array([False, True]),
            rewards=np.zeros((3, 2)),
            values=np.zeros((3, 2)),
        )


class OutcomeRecorder(BaseCallback):
    """Independent record: (level, Monitor return > 0) of every completed episode."""

    def __init__(self) -> None:
        super().__init__()
        self.episodes: list[tuple[int, bool]] = []

    def _on_step(self) -> bool:
        for done, info in zip(self.locals["dones"], self.locals["infos"]):
            if done:
                self.episodes.append((int(info["level"]), info["episode"]["r"] > 0))
        return True


def test_plr_callback_learnability_on_real_minigrid_rollouts() -> None:
    venv = make_vec_env(
        "MiniGrid-Empty-5x5-v0",
        n_envs=4,
        wrapper_class=lambda e: LevelWrapper(FlatObsWrapper(e)),
        env_kwargs={"max_steps": 25},
    )
    sampler = LevelSampler(
        range(8), strategy="learnability", score_transform="power", temperature=1.0, seed=0
    )
    venv = PrioritizedLevelReplay(venv, sampler=sampler)
    model = PPO("MlpPolicy", venv, n_steps=64, batch_size=64, n_epochs=1, seed=0, device="cpu")
    recorder = OutcomeRecorder()
    model.learn(512, callback=CallbackList([recorder, PLRCallback()]))
    # every completed episode (all start inside learn()) reached the sampler as its Monitor outcome
    expected_rate = np.zeros(8)
    counts = np.zeros(8, dtype=int)
    for level, success in recorder.episodes:
        counts[level] += 1
        expected_rate[level] += max(1.0 / counts[level], 0.1) * (float(success) - expected_rate[level])
    assert counts.sum() >= 20 and 0 < sum(s for _, s in recorder.episodes) < counts.sum()
    np.testing.assert_allclose(sampler.success_rate, expected_rate, atol=1e-12)
    np.testing.assert_allclose(sampler.scores, expected_rate * (1 - expected_rate), atol=1e-12)


def test_plr_callback_success_fn_and_buffer_mode_refusal() -> None:
    with pytest.raises(TypeError, match="success_fn"):
        PLRCallback(success_fn=3)  # type: ignore[arg-type]
    venv = make_vec_env(
        "MiniGrid-Empty-5x5-v0", n_envs=2, wrapper_class=lambda e: LevelWrapper(FlatObsWrapper(e))
    )
    with pytest.raises(ValueError, match="'learnability' needs a finite LevelSampler"):
        PrioritizedLevelReplay(
            venv, buffer=plr_gym.LevelBuffer(capacity=4), generator=lambda rng: 0, strategy="learnability"
        )


def test_vector_wrapper_reads_outcomes_from_episode_statistics() -> None:
    from plr_gym.vector import PrioritizedLevelReplay as VectorPLR

    envs = gym.make_vec(
        "MiniGrid-Empty-5x5-v0",
        num_envs=3,
        wrappers=[lambda e: LevelWrapper(ImgObsWrapper(e))],
        max_steps=10,
    )
    envs = gym.wrappers.vector.RecordEpisodeStatistics(envs)
    envs = VectorPLR(envs, levels=range(12), strategy="learnability", score_transform="power", seed=0)
    envs.reset(seed=0)
    rng = np.random.default_rng(0)
    episodes: list[tuple[int, bool]] = []
    n_steps = 40
    for _ in range(n_steps):
        # forward (2) mostly: the goal of Empty-5x5 is reachable within 10 steps
        actions = np.where(rng.random(3) < 0.5, 2, rng.integers(0, 3, size=3))
        _, _, term, trunc, info = envs.step(actions)
        for e in np.flatnonzero(term | trunc).tolist():
            episodes.append((int(info["level"][e]), bool(info["episode"]["r"][e] > 0)))
    reported = envs.report_rollout(rewards=np.zeros((n_steps, 3)), values=np.zeros((n_steps, 3)))
    assert sorted(reported) == sorted((lvl, float(s)) for lvl, s in episodes)
    assert len(episodes) >= 6 and any(s for _, s in episodes) and not all(s for _, s in episodes)


# ---------------------------------------------------------------------------------------- uniform floor
def scored_sampler(**kw: Any) -> LevelSampler:
    kw.setdefault("uniform_mass", 0.0)
    s = LevelSampler(range(5), seed=0, **kw)
    for level, score in enumerate([0.1, 0.9, 0.5, 0.3, 0.7]):
        s.update(level, score)
    s.sample(7)  # some staleness
    return s


@pytest.mark.parametrize("transform", ["rank", "power", "softmax"])
def test_uniform_mass_mixes_a_uniform_component_exactly(transform: str) -> None:
    floor = scored_sampler(score_transform=transform, staleness_coef=0.3, uniform_mass=0.4)
    base = LevelSampler(range(5), score_transform=transform, staleness_coef=0.3, uniform_mass=0.0)
    state = floor.state_dict()
    state["config"]["uniform_mass"] = 0.0  # the same scores and staleness, without the floor
    base.load_state_dict(state)
    assert floor.staleness.max() > 0
    np.testing.assert_allclose(floor.sample_weights(), 0.6 * base.sample_weights() + 0.4 / 5, atol=1e-15)
    full = scored_sampler(score_transform=transform, uniform_mass=1.0)
    assert LevelSampler(range(5)).uniform_mass == 0.5  # the library's default floor
    np.testing.assert_allclose(full.sample_weights(), np.full(5, 0.2))


def test_uniform_mass_draws_follow_sample_weights() -> None:
    s = LevelSampler(range(5), temperature=0.1, staleness_coef=0.0, uniform_mass=0.5, seed=3)
    for level, score in enumerate([0.1, 0.9, 0.5, 0.3, 0.7]):
        s.update(level, score)
    expected = s.sample_weights()  # no staleness: the distribution is fixed
    draws = np.bincount(s.sample(20_000), minlength=5)
    assert chisquare(draws, expected * draws.sum()).pvalue > 0.001
    assert expected.min() >= 0.1 - 1e-12  # every level keeps at least uniform_mass / N


def test_uniform_mass_zero_leaves_draws_unchanged_and_is_checked() -> None:
    # with uniform_mass=0 the draws are exactly those of the sampler before the option existed (recorded
    # from commit 8763534 with the same seed, scores and settings): no extra random number is consumed
    a = scored_sampler(temperature=1.0, staleness_coef=0.3)
    assert a.sample(20).tolist() == [1, 4, 0, 1, 0, 4, 0, 2, 2, 1, 4, 4, 0, 4, 4, 1, 1, 1, 2, 3]
    b = scored_sampler(temperature=0.1, staleness_coef=0.1)
    assert b.sample(20).tolist() == [1, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match="uniform_mass"):
            LevelSampler(range(3), uniform_mass=bad)
    with pytest.raises(TypeError, match="uniform_mass"):
        LevelSampler(range(3), uniform_mass=True)


# ---------------------------------------------------------------------------------------- gamut env
def test_gamut_level_size_by_seed_and_exact_levels() -> None:
    env = DoorKeyGamutEnv(sizes=(5, 8, 10))
    for seed in (0, 1, 2, 31):
        obs, info = env.reset(seed=seed)
        assert info["size"] == (5, 8, 10)[seed % 3]
        assert env._current.max_steps == 10 * info["size"] ** 2
        again, _ = env.reset(seed=seed)
        np.testing.assert_array_equal(obs["image"], again["image"])
        from minigrid.envs import DoorKeyEnv

        reference = DoorKeyEnv(size=info["size"])
        ref_obs, _ = reference.reset(seed=seed)
        np.testing.assert_array_equal(obs["image"], ref_obs["image"])
        assert env._current.grid.encode().tobytes() == reference.grid.encode().tobytes()
    with pytest.raises(ValueError, match="sizes"):
        DoorKeyGamutEnv(sizes=(4,))
    wrapped = LevelWrapper(ImgObsWrapper(gym.make("plr_gym/MiniGrid-DoorKeyGamut-v0")))
    obs, info = wrapped.reset(options={"level": 5})
    assert info["level"] == 5 and info["size"] == 8 and obs.shape == (7, 7, 3)


# ---------------------------------------------------------------------------------------- verdicts
def test_paired_difference_pairs_by_level_and_refuses_bad_input() -> None:
    from plr_gym.plotting import paired_difference

    rng = np.random.default_rng(0)
    difficulty = rng.uniform(0, 1, size=40)  # large between-level spread, cancelled by pairing
    base = difficulty + rng.normal(0, 0.02, size=(5, 40))
    better = difficulty + 0.05 + rng.normal(0, 0.02, size=(5, 40))
    d = paired_difference(better, base)
    assert d["mean"] == pytest.approx(float((better.mean(0) - base.mean(0)).mean()))
    assert 0.0 < d["mean_ci"][0] < d["mean"] < d["mean_ci"][1]
    same = paired_difference(base[:3], base[2:])
    assert same["mean_ci"][0] < 0 < same["mean_ci"][1]
    with pytest.raises(ValueError, match="same levels"):
        paired_difference(base, base[:, :5])
    with pytest.raises(ValueError, match="confidence"):
        paired_difference(base, base, confidence=1.0)
    for bad in (0, 2.5, True, -3):
        with pytest.raises(ValueError, match="n_resamples"):
            paired_difference(base, base, n_resamples=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="finite"):
        paired_difference(np.full((2, 40), np.nan), base)


def test_demo_verdict_reads_the_paired_difference(tmp_path: Path) -> None:
    import json

    from plr_gym.demo import verdict

    def write(sampler: str, seed: int, returns: dict[int, float]) -> None:
        run = tmp_path / f"{sampler}-seed{seed}"
        run.mkdir()
        (run / "evaluation.json").write_text(
            json.dumps({"returns": {str(k): [v] for k, v in returns.items()}})
        )

    levels = range(10000, 10030)
    for seed in (0, 1, 2):
        write("uniform", seed, {lvl: 0.5 + 0.01 * (lvl % 7) for lvl in levels})
        write("plr", seed, {lvl: 0.4 + 0.01 * (lvl % 7) + 0.001 * seed for lvl in levels})
    line = verdict(tmp_path, [0, 1, 2])
    assert line.startswith("Verdict: PLR generalised worse than uniform sampling: PLR -0.099")
    assert verdict(tmp_path, [0, 1, 2, 3]) == ""  # a missing run: no verdict rather than a wrong one
    assert verdict(tmp_path, [0]) == ""  # one seed per method: nothing to test


def test_learnability_interrupted_update_and_crafted_state_leave_the_sampler_unchanged() -> None:
    import copy

    live, twin = learn_sampler(score_transform="rank"), learn_sampler(score_transform="rank")
    for s in (live, twin):
        for level, outcome in [(0, 1), (0, 0), (1, 1), (2, 0)]:
            s.update(level, outcome)
    before = copy.deepcopy(live.state_dict())

    def interrupt(*args: Any, **kwargs: Any) -> None:
        raise KeyboardInterrupt

    assert live._score_keys is not None
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(live._score_keys, "replace", interrupt)  # after the success rate was updated
        with pytest.raises(KeyboardInterrupt):
            live.update(0, 1)
    np.testing.assert_array_equal(live.success_rate, before["success_rate"])
    np.testing.assert_array_equal(live.state_dict()["outcomes"], before["outcomes"])
    assert live.sample(30).tolist() == twin.sample(30).tolist()
    crafted = copy.deepcopy(twin.state_dict())
    crafted["scores"][0] = 0.2  # not p(1 - p) of the stored success rate 0.5
    with pytest.raises(ValueError, match="success_rate \\* \\(1 - success_rate\\)"):
        live.load_state_dict(crafted)
    crafted = copy.deepcopy(twin.state_dict())
    crafted["success_rate"][1] = 1.5
    with pytest.raises(ValueError, match="must lie in \\[0, 1\\]"):
        live.load_state_dict(crafted)
    assert live.sample(30).tolist() == twin.sample(30).tolist()


def test_comparison_table_pairs_merged_seeds_like_the_demo_verdict() -> None:
    """The table's "− uniform" CI and the demo's verdict use the same two-way bootstrap (seeds × levels)."""
    from plr_gym.plotting import Run, _difference, merge_seeds, paired_difference

    rng = np.random.default_rng(0)
    levels = list(range(10000, 10030))

    def runs(name: str, seed_means: list[float]) -> list[Run]:
        out = []
        for seed, m in enumerate(seed_means):
            returns = {str(lvl): [float(np.clip(m + rng.normal(0, 0.05), 0, 1))] for lvl in levels}
            out.append(
                Run(
                    Path(f"{name}-seed{seed}"),
                    name,
                    {"sampler": name, "seed": seed},
                    [],
                    {"returns": returns},
                )
            )
        return out

    plr, uni = runs("plr", [0.95, 0.05, 0.9]), runs("uniform", [0.9, 0.92, 0.88])  # one seed never took off
    merged_plr, merged_uni = merge_seeds(plr), merge_seeds(uni)
    diff = _difference(merged_plr, merged_uni)
    assert diff is not None

    def matrix(rs: list[Run]) -> np.ndarray:
        return np.array([[r.final["returns"][str(lvl)][0] for lvl in levels] for r in rs])  # type: ignore[index]

    expected = paired_difference(matrix(plr), matrix(uni))
    assert diff[0] == pytest.approx(expected["mean"])
    assert diff[1] == pytest.approx(expected["mean_ci"])
    assert diff[1][0] < 0 < diff[1][1]  # a level-only bootstrap would call this significantly worse

    # the table gives that CI and the demo's verdict line (one home: plotting.paired_verdict)
    from plr_gym.plotting import paired_verdict, results_table

    table, rows = results_table([merged_plr, merged_uni])
    assert (rows[0]["vs_baseline_lo"], rows[0]["vs_baseline_hi"]) == pytest.approx(diff[1])
    assert "held-out mean − uniform [95% CI]" in table and "One seed per method" not in table
    assert table.splitlines()[-1] == paired_verdict(diff[0], diff[1])
    assert table.splitlines()[-1].startswith("Verdict: no significant difference between PLR and uniform")


# ---------------------------------------------------------------------------------------- annealed β
def anneal_sampler(**kw: Any) -> LevelSampler:
    return LevelSampler(range(8), temperature=1.0, temperature_end=0.1, seed=3, **kw)


def fed(s: LevelSampler) -> LevelSampler:
    for level in range(8):
        s.update(level, 0.1 * ((level * 5) % 8))
    return s


@pytest.mark.parametrize("transform", ["rank", "power", "softmax"])
def test_annealed_temperature_is_linear_and_equals_a_fixed_sampler_at_that_beta(transform: str) -> None:
    for progress, beta in ((0.0, 1.0), (0.5, 0.55), (1.0, 0.1)):
        s = fed(anneal_sampler(score_transform=transform))
        s.set_progress(progress)
        assert s.temperature == pytest.approx(beta) and s.progress == progress
        fixed = fed(LevelSampler(range(8), temperature=s.temperature, seed=3, score_transform=transform))
        np.testing.assert_allclose(s.sample_weights(), fixed.sample_weights(), rtol=1e-12)
        assert s.sample(200).tolist() == fixed.sample(200).tolist()  # the fast structures follow too


def test_annealed_sampler_checkpoint_resumes_at_the_same_beta(tmp_path: Path) -> None:
    s = fed(anneal_sampler())
    s.set_progress(0.7)
    s.save(tmp_path / "s.npz")
    restored = fed(anneal_sampler())  # a fresh sampler with the same configuration (β back at 1.0)
    restored.load_from(tmp_path / "s.npz")
    assert restored.temperature == s.temperature and restored.progress == 0.7
    assert restored.sample(100).tolist() == s.sample(100).tolist()
    with pytest.raises(ValueError, match="temperature_end"):  # another schedule is another configuration
        LevelSampler(range(8), temperature=1.0, temperature_end=0.2, seed=3).load_from(tmp_path / "s.npz")


def test_progress_and_temperature_end_refuse_bad_values_and_change_nothing() -> None:
    s = fed(anneal_sampler())
    s.set_progress(0.25)
    before = s.state_dict()
    for bad in (1.5, -0.1, float("nan"), True, "0.5", None):
        with pytest.raises(ValueError, match="progress"):
            s.set_progress(bad)  # type: ignore[arg-type]
    after = s.state_dict()
    assert after["progress"] == before["progress"] and s.temperature == pytest.approx(0.775)
    for bad_end in (0.0, -1.0, float("inf")):
        with pytest.raises(ValueError, match="temperature_end"):
            LevelSampler(range(3), temperature_end=bad_end)
    plain = LevelSampler(range(3), temperature=0.5)
    plain.set_progress(0.9)  # no schedule: recorded, β unchanged
    assert plain.temperature == 0.5 and plain.progress == 0.9


def test_plr_callback_anneals_with_the_share_of_total_timesteps() -> None:
    seen: list[tuple[int, float]] = []

    class Watch(BaseCallback):
        def _on_rollout_start(self) -> None:
            seen.append((self.num_timesteps, sampler.temperature))

        def _on_step(self) -> bool:
            return True

    venv = make_vec_env(
        "MiniGrid-Empty-5x5-v0", n_envs=2, wrapper_class=lambda e: LevelWrapper(FlatObsWrapper(e))
    )
    sampler = LevelSampler(range(6), temperature=1.0, temperature_end=0.2, seed=0)
    venv = PrioritizedLevelReplay(venv, sampler=sampler)
    model = PPO("MlpPolicy", venv, n_steps=32, batch_size=64, n_epochs=1, seed=0, device="cpu")
    model.learn(256, callback=CallbackList([PLRCallback(), Watch()]))
    # PLRCallback runs first: the temperature each rollout starts with follows num_timesteps / 256
    assert [t for t, _ in seen] == [0, 64, 128, 192]
    for timesteps, beta in seen:
        assert beta == pytest.approx(1.0 - 0.8 * timesteps / 256)
    venv.close()


def test_annealing_to_a_low_beta_re_anchors_and_never_overflows() -> None:
    """softmax: exp((g − shift)/β) at a 100× lower β needs a re-anchored shift (it overflowed before)."""
    rng = np.random.default_rng(0)
    s = LevelSampler(range(200), score_transform="softmax", temperature=1.0, temperature_end=0.01, seed=0)
    for k in range(1, 11):
        s.update_batch(rng.integers(0, 200, size=8), rng.uniform(0.0, 10.0, size=8))
        s.set_progress(k / 10)
    assert s.temperature == pytest.approx(0.01)
    w = s.sample_weights()
    assert np.isfinite(w).all() and w.sum() == pytest.approx(1.0)
    fixed = LevelSampler(range(200), score_transform="softmax", temperature=0.01, seed=0)
    fixed.load_state_dict(
        {
            **s.state_dict(),
            "config": {**s.state_dict()["config"], "temperature_end": None, "temperature": 0.01},
            "progress": 0.0,
        }
    )
    np.testing.assert_allclose(w, fixed.sample_weights(), rtol=1e-9)


def test_chunked_learning_follows_the_run_budget_and_off_policy_anneals_too() -> None:
    from plr_gym import OffPolicyPLRCallback
    from plr_gym.replay import PERDQN

    def venv_with(sampler: LevelSampler) -> PrioritizedLevelReplay:
        venv = make_vec_env(
            "MiniGrid-Empty-5x5-v0", n_envs=2, wrapper_class=lambda e: LevelWrapper(FlatObsWrapper(e))
        )
        return PrioritizedLevelReplay(venv, sampler=sampler)

    sampler = LevelSampler(range(6), temperature=1.0, temperature_end=0.2, seed=0)
    model = PPO("MlpPolicy", venv_with(sampler), n_steps=32, batch_size=64, n_epochs=1, seed=0, device="cpu")
    callback = PLRCallback(total_timesteps=512)
    for _ in range(2):  # two chunks of a 512-step run
        model.learn(128, callback=callback, reset_num_timesteps=False)
    assert sampler.progress == pytest.approx(192 / 512)  # the last rollout started at 192 of 512 steps
    assert sampler.temperature == pytest.approx(1.0 - 0.8 * 192 / 512)
    with pytest.raises(ValueError, match="total_timesteps"):
        PLRCallback(total_timesteps=0)

    off = LevelSampler(range(6), strategy="one_step_td_error", temperature=1.0, temperature_end=0.5, seed=0)
    dqn = PERDQN("MlpPolicy", venv_with(off), learning_starts=50, buffer_size=500, seed=0, device="cpu")
    dqn.learn(200, callback=OffPolicyPLRCallback())
    assert 0.5 < off.progress < 1.0 and off.temperature == pytest.approx(1.0 - 0.5 * off.progress)
