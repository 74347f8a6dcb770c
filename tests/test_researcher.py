"""What a researcher meets (issue 16): held-out evaluation in TensorBoard, evaluation on Gymnasium vector
envs with a plain policy, the forgotten-callback warning, the curriculum record and plot, and the CLI's
conventions (--overwrite, Ctrl-C, --resume, --device, --version)."""

from __future__ import annotations

import csv
import inspect
import json
import os
import signal
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from stable_baselines3 import PPO
from stable_baselines3.common.logger import configure
from stable_baselines3.common.vec_env import DummyVecEnv

from plr_gym import (
    CurriculumLogCallback,
    HeldOutEvalCallback,
    LevelSampler,
    LevelWrapper,
    PLRCallback,
    PrioritizedLevelReplay,
)
from plr_gym.evaluation import DEFAULT_DETERMINISTIC, evaluate_levels
from plr_gym.wrappers.level import NoScoresWarning, ScoreWatch

pytest.importorskip("minigrid")
pytest.importorskip("matplotlib")

from conftest import run_cli
from plr_gym.cli import CLIError, main, resolve_device

ENV = "MiniGrid-Empty-5x5-v0"
TINY = [
    "--timesteps", "256", "--n-envs", "2", "--n-steps", "64", "--batch-size", "64", "--n-epochs", "1",
    "--num-levels", "5", "--eval-levels", "1000:1004", "--eval-freq", "128",
    "--env-kwarg", "max_steps=20", "--no-progress", "--quiet",
]  # fmt: skip


class CountingEnv(gym.Env[np.ndarray, int]):
    """Level ``s`` lasts ``s % 3 + 1`` steps with reward ``s`` at every step: return ``s * (s % 3 + 1)``."""

    observation_space = spaces.Box(0.0, 1.0, (2,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self) -> None:
        self.level = 0
        self.t = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        self.level = int(seed if seed is not None else self.np_random.integers(100))
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action: int) -> Any:
        self.t += 1
        return np.zeros(2, np.float32), float(self.level), self.t >= self.level % 3 + 1, False, {}


def expected_return(level: int) -> float:
    return float(level * (level % 3 + 1))


# --------------------------------------------------------------------------------------------------
# evaluation
# --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", [gym.vector.AutoresetMode.NEXT_STEP, gym.vector.AutoresetMode.SAME_STEP])
def test_evaluate_levels_on_a_gymnasium_vector_env_with_a_plain_policy(mode: Any) -> None:
    envs = gym.vector.SyncVectorEnv([CountingEnv] * 3, autoreset_mode=mode)
    calls = []

    def policy(obs: np.ndarray) -> np.ndarray:
        calls.append(obs.shape)
        return np.zeros(len(obs), dtype=np.int64)

    levels = [4, 5, 7, 9, 11]  # lengths 2, 3, 2, 1, 3: waves of 3 envs end at different steps
    returns = evaluate_levels(policy, envs, levels, n_episodes=2)
    assert returns == {lvl: [expected_return(lvl)] * 2 for lvl in levels}
    assert all(shape == (3, 2) for shape in calls)
    # 10 episodes in waves of 3: (4, 4, 5) (5, 7, 7) (9, 9, 11) (11), each as long as its longest episode
    assert len(calls) == 3 + 3 + 3 + 3


def test_evaluate_levels_on_an_sb3_vec_env_with_a_plain_policy() -> None:
    venv = DummyVecEnv([lambda: LevelWrapper(CountingEnv())] * 2)
    returns = evaluate_levels(lambda obs: np.ones(len(obs), dtype=np.int64), venv, range(6))
    assert returns == {lvl: [expected_return(lvl)] for lvl in range(6)}


def test_evaluate_levels_rejects_a_training_vector_env_and_non_policies() -> None:
    from plr_gym.vector import PrioritizedLevelReplay as VectorPLR

    envs = VectorPLR(gym.vector.SyncVectorEnv([lambda: LevelWrapper(CountingEnv())]), levels=range(3))
    with pytest.raises(ValueError, match=r"without plr_gym\.vector\.PrioritizedLevelReplay"):
        evaluate_levels(lambda obs: np.zeros(len(obs), dtype=np.int64), envs, [10])
    with pytest.raises(TypeError, match="callable policy"):
        evaluate_levels(42, DummyVecEnv([lambda: LevelWrapper(CountingEnv())]), [1])
    with pytest.raises(TypeError, match=r"gymnasium\.vector\.VectorEnv"):
        evaluate_levels(lambda obs: obs, CountingEnv(), [1])


def test_one_default_for_greedy_or_sampled_actions() -> None:
    from plr_gym.cli import build_parser

    assert DEFAULT_DETERMINISTIC is False  # sampled actions, as in the PLR paper's evaluation
    assert inspect.signature(evaluate_levels).parameters["deterministic"].default is DEFAULT_DETERMINISTIC
    assert inspect.signature(HeldOutEvalCallback).parameters["deterministic"].default is DEFAULT_DETERMINISTIC
    from plr_gym.cli import resolve_train_args

    parser = build_parser()
    args = parser.parse_args(["train", ENV])
    resolve_train_args(args)  # options a --preset can set are filled in here
    assert args.eval_deterministic is DEFAULT_DETERMINISTIC
    assert parser.parse_args(["evaluate", "m.zip"]).deterministic is DEFAULT_DETERMINISTIC


def test_held_out_eval_callback_logs_mean_iqm_and_ci_through_the_sb3_logger(tmp_path: Path) -> None:
    def make() -> DummyVecEnv:
        return DummyVecEnv([lambda: LevelWrapper(CountingEnv())] * 2)

    venv = PrioritizedLevelReplay(make(), levels=range(6), seed=0)
    model = PPO("MlpPolicy", venv, n_steps=32, batch_size=64, n_epochs=1, seed=0, device="cpu")
    model.set_logger(configure(str(tmp_path / "log"), ["csv"]))
    held_out = [10, 11, 12, 13]  # returns 20, 33, 12, 26: the same at every evaluation
    callback = HeldOutEvalCallback(
        make(), held_out, eval_freq=64, train_levels=[0, 1, 2], log_path=tmp_path / "eval.csv"
    )
    model.learn(128, callback=[PLRCallback(), callback])
    with (tmp_path / "log" / "progress.csv").open() as f:
        logged = [r for r in csv.DictReader(f) if r.get("eval/heldout_mean")]
    assert [int(r["time/total_timesteps"]) for r in logged] == [0, 64, 128]
    for row in logged:
        assert float(row["eval/heldout_mean"]) == pytest.approx(22.75)
        assert float(row["eval/heldout_iqm"]) == pytest.approx(23.0)  # middle half: (20 + 26) / 2
        assert float(row["eval/heldout_mean_lo"]) <= 22.75 <= float(row["eval/heldout_mean_hi"])
        assert float(row["eval/train_mean"]) == pytest.approx(np.mean([0, 2, 6]))
    with (tmp_path / "eval.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [(int(r["timesteps"]), r["split"]) for r in rows] == [
        (t, s) for t in (0, 64, 128) for s in ("test", "train")
    ]
    assert callback.last_returns["test"] == {lvl: [expected_return(lvl)] for lvl in held_out}


def test_held_out_eval_callback_rejects_bad_arguments() -> None:
    venv = DummyVecEnv([lambda: LevelWrapper(CountingEnv())])
    with pytest.raises(ValueError, match="eval_freq must be a positive int"):
        HeldOutEvalCallback(venv, [1], eval_freq=0)
    with pytest.raises(ValueError, match="must be held out"):
        HeldOutEvalCallback(venv, [1, 2], train_levels=[2, 3])
    with pytest.raises(TypeError, match="eval_env must be"):
        HeldOutEvalCallback(CountingEnv(), [1])


# --------------------------------------------------------------------------------------------------
# forgotten PLRCallback
# --------------------------------------------------------------------------------------------------
def test_sb3_wrapper_warns_once_when_no_score_reaches_the_sampler(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ScoreWatch, "NO_SCORE_STEPS", 20)
    venv = PrioritizedLevelReplay(DummyVecEnv([lambda: LevelWrapper(CountingEnv())] * 2), levels=range(6))
    venv.reset()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(60):
            venv.step(np.zeros(2, dtype=np.int64))
    found = [w for w in caught if w.category is NoScoresWarning]
    assert len(found) == 1
    assert "Did you add PLRCallback?" in str(found[0].message) and "in 20 steps" in str(found[0].message)
    assert found[0].filename == __file__  # the venv.step line of this loop


def test_learn_without_plr_callback_warns_at_the_first_rollout_end_on_the_learn_line(
    one_torch_thread: None,
) -> None:
    # 4 envs, 2 rollouts of 128 x 4 steps: the first ends with episodes and no score -> one warning, at
    # this file's model.learn line, not in SB3's code (it used to need 6,144 vector steps)
    venv = PrioritizedLevelReplay(DummyVecEnv([lambda: LevelWrapper(CountingEnv())] * 4), levels=range(6))
    model = PPO("MlpPolicy", venv, n_steps=128, batch_size=256, n_epochs=1, seed=0, device="cpu")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        learn_line = inspect.currentframe().f_lineno + 1  # type: ignore[union-attr]
        model.learn(1_024)
    found = [w for w in caught if w.category is NoScoresWarning]
    assert len(found) == 1
    assert (found[0].filename, found[0].lineno) == (__file__, learn_line)
    message = str(found[0].message)
    assert "in 128 steps (by the end of rollout 1 of model.learn)" in message
    assert "Did you add PLRCallback?" in message


def test_no_warning_when_a_rollout_ends_without_a_completed_episode(one_torch_thread: None) -> None:
    class Endless(CountingEnv):
        def step(self, action: int) -> Any:
            obs, reward, _, _, info = super().step(action)
            return obs, reward, False, self.t >= 100, info

    venv = PrioritizedLevelReplay(DummyVecEnv([lambda: LevelWrapper(Endless())] * 2), levels=range(6))
    model = PPO("MlpPolicy", venv, n_steps=64, batch_size=64, n_epochs=1, seed=0, device="cpu")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.learn(128)  # episodes of 100 steps: none ends in the first rollout (64 steps)
        assert not [w for w in caught if w.category is NoScoresWarning]
        model.learn(128, reset_num_timesteps=False)  # the second rollout's end has episodes: warns
    assert len([w for w in caught if w.category is NoScoresWarning]) == 1


def test_no_warning_with_plr_callback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ScoreWatch, "NO_SCORE_STEPS", 20)
    venv = PrioritizedLevelReplay(DummyVecEnv([lambda: LevelWrapper(CountingEnv())] * 2), levels=range(6))
    model = PPO("MlpPolicy", venv, n_steps=32, batch_size=64, n_epochs=1, seed=0, device="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("error", NoScoresWarning)
        model.learn(128, callback=PLRCallback())
    assert venv.sampler.num_seen == 6


def test_vector_wrapper_warns_until_report_rollout_is_called(monkeypatch: pytest.MonkeyPatch) -> None:
    from plr_gym.vector import PrioritizedLevelReplay as VectorPLR

    monkeypatch.setattr(ScoreWatch, "NO_SCORE_STEPS", 20)
    for report in (False, True):
        envs = VectorPLR(gym.vector.SyncVectorEnv([lambda: LevelWrapper(CountingEnv())] * 2), levels=range(6))
        envs.reset(seed=0)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(2):
                for _ in range(16):
                    envs.step(np.zeros(2, dtype=np.int64))
                if report:
                    envs.report_rollout(
                        rewards=np.ones((16, 2)), values=np.zeros((16, 2)), advantages=np.ones((16, 2))
                    )
        found = [w for w in caught if w.category is NoScoresWarning]
        assert len(found) == (0 if report else 1)
        if not report:
            assert "report_rollout" in str(found[0].message)


# --------------------------------------------------------------------------------------------------
# curriculum record and plot
# --------------------------------------------------------------------------------------------------
def test_curriculum_callback_records_weights_visits_and_scores(tmp_path: Path) -> None:
    venv = PrioritizedLevelReplay(
        DummyVecEnv([lambda: LevelWrapper(CountingEnv())] * 2), levels=[30, 10, 20, 40], seed=0
    )
    model = PPO("MlpPolicy", venv, n_steps=32, batch_size=64, n_epochs=1, seed=0, device="cpu")
    curriculum = CurriculumLogCallback(log_freq=2, save_path=tmp_path / "c.npz")
    starts = []

    class CountStarts(PLRCallback):
        def _on_step(self) -> bool:
            starts.append(int(np.sum(self.locals["dones"])))
            return super()._on_step()

    model.learn(128, callback=[CountStarts(), curriculum])
    h = curriculum.history
    assert h["timesteps"].tolist() == [128]  # 2 rollouts of 64 steps, one snapshot every 2
    assert h["levels"].tolist() == [30, 10, 20, 40]
    np.testing.assert_allclose(h["weights"][-1], venv.sampler.sample_weights(), rtol=1e-6)
    np.testing.assert_allclose(h["scores"][-1], venv.sampler.scores, rtol=1e-6)
    assert h["visits"].sum() == 2 + sum(starts)  # the 2 first episodes, then every episode started
    saved = np.load(tmp_path / "c.npz")
    assert saved["weights"].shape == (1, 4) and saved["timesteps"].tolist() == [128]
    # resuming appends to the saved snapshots
    more = CurriculumLogCallback(log_freq=2, resume_from=tmp_path / "c.npz")
    model.learn(128, callback=[PLRCallback(), more], reset_num_timesteps=False)
    assert more.history["timesteps"].tolist() == [128, 256]


def test_a_corrupt_or_incomplete_curriculum_npz_is_refused_naming_the_file(tmp_path: Path) -> None:
    from plr_gym.callbacks import curriculum as curriculum_module
    from plr_gym.plotting import _CURRICULUM_ARRAYS, load_curriculum

    assert _CURRICULUM_ARRAYS == curriculum_module._ARRAYS  # the writer's format, read by plotting
    torn = tmp_path / "torn.npz"
    torn.write_bytes(b"PK\x03\x04 not a zip")
    partial = tmp_path / "partial.npz"
    np.savez(partial, timesteps=np.arange(2), levels=np.arange(4))
    for path, message in (
        (torn, "is not a readable plr_gym checkpoint"),
        (partial, "lacks the arrays weights"),
    ):
        with pytest.raises(ValueError, match=f"{path.name}.*{message}|{message}"):
            load_curriculum(path)
        venv = PrioritizedLevelReplay(DummyVecEnv([lambda: LevelWrapper(CountingEnv())]), levels=[0, 1, 2, 3])
        model = PPO("MlpPolicy", venv, n_steps=16, batch_size=16, n_epochs=1, seed=0, device="cpu")
        with pytest.raises(ValueError, match=message):
            model.learn(16, callback=[PLRCallback(), CurriculumLogCallback(resume_from=path)])


def test_plot_curriculum_checks_its_input(tmp_path: Path) -> None:
    from plr_gym.plotting import plot_curriculum

    h = {
        "timesteps": np.array([10]),
        "levels": np.arange(3),
        "weights": np.ones((1, 3)) / 3,
        "visits": np.ones((1, 3)),
        "scores": np.zeros((1, 3)),
    }
    with pytest.raises(ValueError, match="one number per level"):
        plot_curriculum(h, tmp_path / "x.png", difficulty=[1, 2])
    with pytest.raises(ValueError, match="no snapshot"):
        plot_curriculum({**h, "timesteps": np.zeros(0)}, tmp_path / "x.png")


def test_results_table_puts_the_baseline_beside_each_run(tmp_path: Path) -> None:
    from plr_gym.plotting import Run, results_table

    def run(sampler: str, returns: dict[str, list[float]]) -> Run:
        curve = [{"timesteps": "100", "split": "test", "mean": "0.5", "mean_lo": "0", "mean_hi": "1"}]
        curve[0].update(iqm="0.5", iqm_lo="0", iqm_hi="1")
        values = [np.mean(v) for v in returns.values()]
        summary = {"mean": float(np.mean(values)), "mean_ci": (0.0, 1.0), "iqm": 0.5, "iqm_ci": (0.0, 1.0)}
        return Run(
            path=tmp_path / sampler,
            label=sampler,
            config={"sampler": sampler},
            curve=curve,
            final={"returns": returns, "summary": summary, "timesteps": 1000},
            sampler_stats={"num_seen": 3.0, "replay_share": 0.75},
        )

    plr = run("plr", {"1": [0.9], "2": [0.5], "3": [0.4]})
    uniform = run("uniform", {"1": [0.6], "2": [0.5], "3": [0.1]})
    table, rows = results_table([plr, uniform])
    assert rows[0]["vs_baseline"] == pytest.approx(0.2)  # (0.3 + 0 + 0.3) / 3, paired by level
    # one seed per method: the difference is shown, untested: no CI, no significance, no verdict
    assert np.isnan(rows[0]["vs_baseline_lo"]) and np.isnan(rows[0]["vs_baseline_hi"])
    assert "held-out mean − uniform (1 seed) |" in table and "[95% CI] | held-out IQM" not in table
    lines = table.splitlines()
    assert lines[2].startswith("| plr | 1,000 | 0.600 [0.000, 1.000] | +0.200 (1 seed, untested) |")
    assert "| 75% |" in lines[2]
    assert "(baseline)" in lines[3] and "| — |" in lines[3]  # uniform draws never use scores
    assert "One seed per method: the difference from uniform is not tested" in table
    assert "Verdict" not in table and "significant" not in table


# --------------------------------------------------------------------------------------------------
# the CLI
# --------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cli") / "run"
    assert main(["train", ENV, "--out", str(out), *TINY]) == 0
    return out


def test_cli_run_writes_heldout_scalars_and_curriculum_histograms_to_tensorboard(run_dir: Path) -> None:
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    (events,) = run_dir.glob("tb/plr_1/events.out.tfevents.*")
    acc = EventAccumulator(str(events), size_guidance={"scalars": 0, "histograms": 0})
    acc.Reload()
    tags = acc.Tags()
    assert {"eval/heldout_mean", "eval/heldout_iqm", "eval/heldout_mean_lo", "eval/train_mean"} <= set(
        tags["scalars"]
    )
    assert [e.step for e in acc.Scalars("eval/heldout_mean")] == [0, 128, 256]
    with (run_dir / "eval.csv").open() as f:
        test_rows = [r for r in csv.DictReader(f) if r["split"] == "test"]
    assert [e.value for e in acc.Scalars("eval/heldout_mean")] == pytest.approx(
        [float(r["mean"]) for r in test_rows]
    )
    assert {"curriculum/replay_probability", "curriculum/visits"} <= set(tags["histograms"])
    hist = acc.Histograms("curriculum/replay_probability")
    assert [h.step for h in hist] == [128, 256]  # one per rollout (2 envs x 64 steps)
    last = hist[-1].histogram_value
    assert list(last.bucket_limit) == [0.5, 1.5, 2.5, 3.5, 4.5]  # one bucket per training level
    weights = np.load(run_dir / "curriculum.npz")["weights"][-1]
    np.testing.assert_allclose(list(last.bucket), weights, rtol=1e-5)
    assert sum(last.bucket) == pytest.approx(1.0, abs=1e-5)


def test_cli_run_draws_the_curriculum_heatmap(run_dir: Path) -> None:
    import matplotlib.image

    png = run_dir / "curriculum.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    pixels = matplotlib.image.imread(png)
    assert pixels.shape[0] > 300 and pixels.shape[1] > 1000
    assert len(np.unique(pixels[..., :3].reshape(-1, 3), axis=0)) > 50


def test_cli_refuses_a_non_empty_out_unless_overwrite(
    run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "again"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    (out / "eval.csv").write_text("old")
    code, _, err = run_cli(["train", ENV, "--out", str(out), *TINY], capsys)
    assert code == 2
    assert f"{out} is not empty: replace the run in it (plr-gym train --overwrite)" in err
    assert not (out / "model.zip").exists() and (out / "eval.csv").read_text() == "old"
    code, _, _ = run_cli(["train", ENV, "--out", str(out), "--overwrite", *TINY], capsys)
    assert code == 0
    assert (out / "notes.txt").read_text() == "mine"  # only the run's own files are replaced
    with (out / "eval.csv").open() as f:
        assert [int(r["timesteps"]) for r in csv.DictReader(f)] == [0, 0, 128, 128, 256, 256]


def test_ctrl_c_saves_a_loadable_model_and_sampler_and_resume_continues(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "run"
    original = HeldOutEvalCallback._on_step

    def interrupt_after_128(self: HeldOutEvalCallback) -> bool:
        if self.num_timesteps == 130:
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C: saved at this step, then training stops
        return original(self)

    monkeypatch.setattr(HeldOutEvalCallback, "_on_step", interrupt_after_128)
    code, _, err = run_cli(["train", ENV, "--out", str(out), *TINY], capsys)
    assert code == 130
    assert "stopped at step 130" in err and f"--resume {out}" in err
    model = PPO.load(out / "model.zip", device="cpu")
    assert model.num_timesteps == 130
    sampler = LevelSampler.load(out / "plr" / "plr_sampler.npz")
    assert sampler.levels.tolist() == [0, 1, 2, 3, 4] and sampler.num_seen > 0
    assert not (out / "evaluation.json").exists()
    assert json.loads((out / "checkpoint.json").read_text())["timestep"] == 130

    monkeypatch.setattr(HeldOutEvalCallback, "_on_step", original)
    code, _, _ = run_cli(["train", ENV, "--resume", str(out), *TINY, "--timesteps", "384"], capsys)
    assert code == 0
    # SB3 finishes the rollout that crosses --timesteps: 130 + 2 rollouts of 128 steps
    assert PPO.load(out / "model.zip", device="cpu").num_timesteps == 386
    final = json.loads((out / "evaluation.json").read_text())
    assert final["timesteps"] == 386
    config = json.loads((out / "config.json").read_text())
    assert config["resumed_at"] == [130] and "interrupted_at" not in config
    with (out / "eval.csv").open() as f:
        steps = [int(r["timesteps"]) for r in csv.DictReader(f) if r["split"] == "test"]
    # the schedule survives the resume: evaluations stay on the 128-step grid of the run that was
    # interrupted (256, 384), then the final one at 386 where SB3 stopped
    assert steps == [0, 128, 256, 384, 386]
    assert np.load(out / "curriculum.npz")["timesteps"].tolist() == [128, 258, 386]


def test_resume_checks_the_run(run_dir: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run_cli(["train", ENV, "--resume", str(run_dir), *TINY], capsys)
    assert code == 0 and err == ""  # a finished run: nothing to do (a requeued job just ends)
    code, _, err = run_cli(["train", ENV, "--resume", str(run_dir), *TINY, "--sampler", "uniform"], capsys)
    assert code == 2 and "trained with sampler='plr' (now 'uniform')" in err
    (tmp_path / "model.zip").write_bytes(b"PK")
    code, _, err = run_cli(["train", ENV, "--resume", str(tmp_path), *TINY], capsys)
    assert code == 2 and "holds a run without checkpoint.json" in err


def test_device_cuda_is_accepted_with_a_gpu_and_refused_clearly_without(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("cuda") == "cuda" and resolve_device("auto") == "cuda"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == "cpu" and resolve_device("cpu") == "cpu"
    with pytest.raises(CLIError, match="--device cuda: torch sees no CUDA GPU here"):
        resolve_device("cuda")
    code, _, err = run_cli(["train", ENV, "--device", "cuda", "--out", str(tmp_path / "r"), *TINY], capsys)
    assert code == 2 and "use --device cpu or auto" in err
    assert not (tmp_path / "r").exists()  # refused before anything is written
    code, _, err = run_cli(["train", ENV, "--device", "tpu"], capsys)
    assert code == 2 and "invalid choice: 'tpu'" in err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    import plr_gym

    code, out, _ = run_cli(["--version"], capsys)
    assert code == 0 and out.strip() == f"plr-gym {plr_gym.__version__}"


def test_importing_plr_gym_prints_no_legacy_gym_banner() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", "import plr_gym, stable_baselines3, sys; print('gym' in sys.modules)"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Gym has been unmaintained" not in proc.stderr
    assert proc.stderr == ""


@pytest.mark.slow
def test_sigint_to_a_training_process_leaves_a_resumable_run(tmp_path: Path) -> None:
    import os
    import signal
    import time

    out = tmp_path / "run"
    args = [a for a in TINY if a not in ("--quiet",)]
    args[args.index("--timesteps") + 1] = "1000000"
    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join(
        [str(Path(__file__).resolve().parents[1] / "src"), env.get("PYTHONPATH", "")]
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "plr_gym.cli", "train", ENV, "--out", str(out), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # wait until training is under way (the evaluation at 128 steps)
        if (out / "eval.csv").is_file() and len((out / "eval.csv").read_text().splitlines()) >= 5:
            break
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    assert "SIGINT: saving at this step and stopping" in err  # the first Ctrl-C stops between env steps
    assert "stopped at step" in err
    manifest = json.loads((out / "checkpoint.json").read_text())
    model = PPO.load(out / "model.zip", device="cpu")
    assert 128 <= model.num_timesteps == manifest["timestep"] < 1_000_000
    assert LevelSampler.load(out / "plr" / "plr_sampler.npz").num_seen > 0
