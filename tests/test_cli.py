"""The ``plr-gym`` command line and ``python -m plr_gym.demo``, end to end with tiny budgets."""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("minigrid")
pytest.importorskip("matplotlib")

from conftest import run_cli
from plr_gym import LevelSampler
from plr_gym.cli import main, parse_levels

ENV = "MiniGrid-Empty-5x5-v0"
# Tiny: 2 envs x 64 steps per rollout, 4 rollouts, short episodes, 4 held-out levels.
TINY = [
    "--timesteps", "256", "--n-envs", "2", "--n-steps", "64", "--batch-size", "64", "--n-epochs", "1",
    "--num-levels", "5", "--eval-levels", "1000:1004", "--eval-freq", "128",
    "--env-kwarg", "max_steps=20", "--no-progress", "--quiet",
]  # fmt: skip


def assert_png_with_content(path: Path) -> None:
    import matplotlib.image

    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    pixels = matplotlib.image.imread(path)
    assert pixels.shape[0] > 200 and pixels.shape[1] > 400
    assert pixels[..., :3].std() > 0.05  # not a blank canvas
    assert len(np.unique(pixels[..., :3].reshape(-1, 3), axis=0)) > 50  # curves, text, bars


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("runs")
    dirs = {}
    for name, sampler, seed in (("plr", "plr", "0"), ("uniform", "uniform", "0"), ("plr-seed1", "plr", "1")):
        out = root / name
        assert main(["train", ENV, "--sampler", sampler, "--seed", seed, "--out", str(out), *TINY]) == 0
        dirs[name] = out
    return dirs


@pytest.mark.parametrize("command", [[], ["train"], ["evaluate"], ["compare"]])
def test_help_on_every_command(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli([*command, "--help"], capsys)
    assert code == 0
    assert out.startswith("usage: plr-gym")
    if command == ["train"]:
        for option in ("--sampler", "--strategy", "--staleness-coef", "--eval-levels", "--num-levels"):
            assert option in out


def test_module_entry_point_runs() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "plr_gym.cli", "evaluate", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "--levels" in proc.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["train", "MiniGrid-NoSuchEnv-v0"], "unknown environment 'MiniGrid-NoSuchEnv-v0'"),
        (["train", "plr_gym/procgen-bigfsh-v0"], "did you mean plr_gym/procgen-bigfish-v0"),
        (["train", ENV, "--strategy", "value_l2"], "invalid choice: 'value_l2'"),
        (["train", ENV, "--score-transform", "cubic"], "invalid choice: 'cubic'"),
        (["train", ENV, "--timesteps", "-5"], "expected a positive integer, got '-5'"),
        (["train", ENV, "--staleness-coef", "1.5"], "expected a number in [0, 1], got '1.5'"),
        (["train", ENV, "--temperature", "nan"], "expected a finite number"),
        (["train", ENV, "--eval-levels", "5:3"], "no levels in '5:3'"),
        (["train", ENV, "--num-levels", "100", "--eval-levels", "50:60"], "must be held out"),
        (["train", ENV, "--n-steps", "8", "--n-envs", "2"], "exceeds the rollout size"),
        (["train", ENV, "--env-kwarg", "max_steps"], "--env-kwarg must be KEY=VALUE"),
        (["train", ENV, "--env-kwarg", "colour=1", "--out", "{tmp}"], "cannot build MiniGrid-Empty-5x5-v0"),
        (["evaluate", "no/such/model.zip", "--env", ENV], "no model at no/such/model.zip"),
        (["compare", "--run"], "compare --run needs --env"),
        (["compare"], "compare needs run directories"),
        (["compare", "--run", "--env", ENV, "some/run"], "give no RUN_DIR"),
        (["train", ENV, "--algo", "dqn"], "invalid choice: 'dqn'"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
        (["train", ENV, "--torch-threads", "0"], "argument --torch-threads: expected an integer in 1.."),
        (
            ["evaluate", "m.zip", "--torch-threads", "x"],
            "argument --torch-threads: expected an integer in 1..",
        ),
    ],
)
def test_bad_input_exits_2_with_message(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, _, err = run_cli([a.replace("{tmp}", str(tmp_path)) for a in args], capsys)
    assert code == 2
    assert message in err


def test_torch_threads_beyond_the_machine_exits_2_instead_of_crashing() -> None:
    # torch's thread pool used to segfault on --torch-threads 100000: a real process, so a crash shows
    proc = subprocess.run(
        [sys.executable, "-m", "plr_gym.cli", "train", ENV, "--torch-threads", "100000"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    limit = os.cpu_count()
    assert (
        f"argument --torch-threads: expected an integer in 1..{limit} (this machine's CPUs), got '100000'"
        in (proc.stderr)
    )


def test_mlp_runs_default_to_one_torch_thread_and_the_option_overrides_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import torch
    from gymnasium import spaces

    from plr_gym.cli import _apply_torch_threads, _torch_default_threads

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        tiny = [a for a in TINY if a != "--quiet"]
        code, out, _ = run_cli(["train", ENV, "--out", str(tmp_path), *tiny, "--timesteps", "128"], capsys)
        assert code == 0
        assert torch.get_num_threads() == 1  # MiniGrid's MLP: one thread
        assert "(1 torch thread) ->" in out
        # a CNN (Procgen's frames) keeps torch's own default; --torch-threads wins over both
        frames = spaces.Box(0, 255, (64, 64, 3), np.uint8)
        assert _apply_torch_threads(None, frames) == _torch_default_threads() == torch.get_num_threads()
        assert _apply_torch_threads(1, frames) == 1 == torch.get_num_threads()
        limit = os.cpu_count() or 1
        grid = spaces.Box(0, 255, (7, 7, 3), np.uint8)
        assert _apply_torch_threads(limit, grid) == limit == torch.get_num_threads()
    finally:
        torch.set_num_threads(before)


def test_parse_levels() -> None:
    assert parse_levels("3:6") == [3, 4, 5]
    assert parse_levels("7, 2,9") == [7, 2, 9]
    for bad in ("a:b", "1,1", "-3:2", ""):
        with pytest.raises(Exception, match="levels"):
            parse_levels(bad)


def test_train_writes_model_sampler_curve_and_evaluation(runs: dict[str, Path]) -> None:
    for name, out in runs.items():
        assert (out / "model.zip").stat().st_size > 1000
        config = json.loads((out / "config.json").read_text())
        assert config["sampler"] == name.split("-")[0] and config["env_id"] == ENV
        restored = LevelSampler.load(out / "plr" / "plr_sampler.npz")
        assert restored.levels.tolist() == [0, 1, 2, 3, 4]
        assert restored.num_seen > 0  # episodes were scored
        with (out / "eval.csv").open() as f:
            rows = list(csv.DictReader(f))
        # evaluations at 0, 128, 256 steps, each on the held-out and the training levels
        assert [(int(r["timesteps"]), r["split"]) for r in rows] == [
            (t, s) for t in (0, 128, 256) for s in ("test", "train")
        ]
        assert all(float(r["mean_lo"]) <= float(r["mean"]) <= float(r["mean_hi"]) for r in rows)
        if importlib.util.find_spec("tensorboard") is not None:
            assert any((out / "tb").rglob("events.out.tfevents.*"))
        final = json.loads((out / "evaluation.json").read_text())
        assert sorted(final["returns"]) == ["1000", "1001", "1002", "1003"]
        assert all(len(v) == 1 for v in final["returns"].values())
        assert final["summary"]["n_levels"] == 4
    # uniform sampling: every draw is uniform over the training levels, PLR replays by score
    assert LevelSampler.load(runs["uniform"] / "plr" / "plr_sampler.npz").score_transform == "constant"
    assert LevelSampler.load(runs["plr"] / "plr" / "plr_sampler.npz").score_transform == "rank"


def test_evaluate_writes_json_and_csv(
    runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "eval" / "result.json"
    code, stdout, _ = run_cli(
        ["evaluate", str(runs["plr"]), "--levels", "2000,2001,2005", "--n-episodes", "2", "--n-envs", "2",
         "--out", str(out)],
        capsys,
    )  # fmt: skip
    assert code == 0
    assert "3 levels" in stdout
    result = json.loads(out.read_text())
    assert result["env_id"] == ENV  # read from the run's config.json, with its env options (max_steps=20)
    assert {k: len(v) for k, v in result["returns"].items()} == {"2000": 2, "2001": 2, "2005": 2}
    assert set(result["summary"]) == {"mean", "mean_ci", "iqm", "iqm_ci", "n_levels"}
    with out.with_suffix(".csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 6 and {r["level"] for r in rows} == {"2000", "2001", "2005"}


def test_evaluate_rejects_wrong_env(runs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(["evaluate", str(runs["plr"]), "--env", "CartPole-v1", "--levels", "0:2"], capsys)
    assert code == 2
    assert "expects observations of shape" in err


def test_compare_writes_table_csv_and_plot(
    runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "cmp"
    code, stdout, _ = run_cli(["compare", str(runs["plr"]), str(runs["uniform"]), "--out", str(out)], capsys)
    assert code == 0
    table = (out / "comparison.md").read_text()
    assert "| plr (value_l1) |" in table and "| uniform |" in table
    assert "held-out IQM [95% CI]" in stdout
    # one seed per method: the table says so and prints no CI of the difference, no significance, no verdict
    assert "held-out mean − uniform (1 seed) |" in stdout and "(1 seed, untested) |" in stdout
    assert "One seed per method: the difference from uniform is not tested" in stdout
    assert "Verdict" not in stdout and "significant" not in stdout
    with (out / "comparison.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [r["run"] for r in rows] == ["plr (value_l1)", "uniform"]
    final = json.loads((runs["plr"] / "evaluation.json").read_text())
    assert float(rows[0]["test_mean"]) == pytest.approx(final["summary"]["mean"])
    assert_png_with_content(out / "comparison.png")


def test_compare_merges_seeds_of_the_same_configuration(
    runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dirs = [str(runs[name]) for name in ("plr", "plr-seed1", "uniform")]
    code, _, _ = run_cli(["compare", *dirs, "--out", str(tmp_path)], capsys)
    assert code == 0
    with (tmp_path / "comparison.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [r["run"] for r in rows] == ["plr (value_l1), 2 seeds", "uniform"]
    assert "One seed for uniform or for a method" in (tmp_path / "comparison.md").read_text()  # uniform: 1
    # pooled final evaluation: both seeds' episodes of each held-out level
    per_level = []
    for name in ("plr", "plr-seed1"):
        returns = json.loads((runs[name] / "evaluation.json").read_text())["returns"]
        per_level.append([returns[str(level)][0] for level in range(1000, 1004)])
    assert float(rows[0]["test_mean"]) == pytest.approx(np.mean(per_level))
    # the curve: at each step, the mean over seeds
    curves = []
    for name in ("plr", "plr-seed1"):
        with (runs[name] / "eval.csv").open() as f:
            curves.append([float(r["mean"]) for r in csv.DictReader(f) if r["split"] == "test"])
    assert float(rows[0]["test_mean_over_training"]) == pytest.approx(np.mean(curves))
    assert_png_with_content(tmp_path / "comparison.png")


def test_compare_rejects_a_directory_that_is_not_a_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run_cli(["compare", str(tmp_path)], capsys)
    assert code == 2
    assert "not a plr-gym run directory" in err


def test_compare_run_with_jobs_trains_the_same_runs_in_worker_processes(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """``--jobs 2``: the runs of ``compare --run`` in two processes at once, each line prefixed with its
    run; the same runs as one after the other. ``--no-eval-at-start``: no evaluation at step 0."""
    import pickle

    from plr_gym.cli import Interrupted

    tiny = [*(a for a in TINY if a != "--quiet"), "--no-tensorboard"]
    argv = ["compare", "--run", "--env", ENV, "--seeds", "0", "--no-eval-at-start", *tiny]
    assert main([*argv, "--jobs", "2", "--out", str(tmp_path / "parallel")]) == 0
    out = capfd.readouterr().out
    assert "[plr-seed0]   step      128: mean return" in out and "[uniform-seed0] [uniform] ppo on" in out
    assert main([*argv, "--out", str(tmp_path / "serial")]) == 0  # --jobs 1, the default
    for run in ("plr-seed0", "uniform-seed0"):
        final = [
            json.loads((tmp_path / d / run / "evaluation.json").read_text()) for d in ("serial", "parallel")
        ]
        assert final[0]["returns"] == final[1]["returns"]
        with (tmp_path / "parallel" / run / "eval.csv").open() as f:
            assert [int(r["timesteps"]) for r in csv.DictReader(f) if r["split"] == "test"] == [128, 256]
    # an interruption in a worker keeps its exit code in the parent
    assert pickle.loads(pickle.dumps(Interrupted("stopped", 143))).exit_code == 143


def test_compare_run_with_jobs_stops_every_run_on_sigterm(tmp_path: Path) -> None:
    """SIGTERM to ``compare --run --jobs 2`` reaches both runs under way (each saves a checkpoint at its
    current step and stops), starts no other run and exits with 143."""
    import signal

    tiny = [*(a for a in TINY if a != "--quiet"), "--no-tensorboard"]
    argv = ["compare", "--run", "--env", ENV, "--seeds", "0", "1", "--jobs", "2", "--out", str(tmp_path)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "plr_gym.cli", *argv, *tiny, "--timesteps", "10000000"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        started: set[str] = set()
        while started != {"plr-seed0", "uniform-seed0"}:  # both runs have evaluated once
            line = proc.stdout.readline()
            assert line, proc.stderr.read() if proc.stderr else ""
            if "mean return" in line:
                started.add(line[1 : line.index("]")])
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 143, err
    assert "SIGTERM: the runs under way saved a checkpoint at their current step" in err
    for run in ("plr-seed0", "uniform-seed0"):
        assert (tmp_path / run / "checkpoint.json").is_file() and not (
            tmp_path / run / "evaluation.json"
        ).exists()
    assert not (tmp_path / "plr-seed1").exists()


def test_demo_runs_the_studys_mixed_task_with_its_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """The full demo's ``plr-gym`` options reproduce ``benchmarks/learning/learning.py``'s ``TASKS["mixed"]``
    run (``run_one``): task, levels, PPO settings, evaluation protocol and the PLR sampler."""
    import dataclasses

    from plr_gym import demo, training
    from plr_gym.cli import _env_kwargs, build_parser, resolve_train_args, sampler_kwargs
    from plr_gym.sampler import sampler_defaults

    root = Path(__file__).resolve().parents[1]
    monkeypatch.syspath_prepend(str(root / "benchmarks" / "common"))  # learning.py imports _provenance
    spec = importlib.util.spec_from_file_location(
        "learning_for_demo", root / "benchmarks" / "learning" / "learning.py"
    )
    assert spec is not None and spec.loader is not None
    learning = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "learning_for_demo", learning)
    spec.loader.exec_module(learning)
    task = learning.TASKS["mixed"]

    args = build_parser().parse_args(demo.demo_argv(quick=False, out="runs/demo", seed=0))
    resolve_train_args(args)
    assert (args.env_id, _env_kwargs(args, "minigrid"), task.full_obs) == (
        task.env_id,
        task.env_kwargs,
        False,
    )
    assert (args.level_start, args.num_levels) == (0, task.train_levels)
    assert args.eval_levels == list(range(task.test_level_start, task.test_level_start + task.test_levels))
    assert (args.algo, args.n_envs, args.device, args.torch_threads) == ("ppo", task.n_envs, "cpu", 1)
    hyper = training.Hyperparameters(
        **{f.name: getattr(args, f.name) for f in dataclasses.fields(training.Hyperparameters)}
    )
    assert hyper == task.hyperparameters()
    # evaluation: every total_steps / checkpoints steps, not at step 0, one sampled episode per level; the
    # study's last one (at total_steps, inside a rollout) saw as many PPO updates as the demo's whole run
    assert args.eval_freq == task.total_steps // task.checkpoints
    assert (args.eval_at_start, args.eval_episodes, args.eval_deterministic) == (False, 1, False)
    rollout = task.n_envs * task.n_steps
    assert args.timesteps == task.total_steps // rollout * rollout
    # the demo's PLR is the study's "defaults" method with LevelSampler's defaults for everything else
    args.sampler = "plr"
    kwargs = sampler_kwargs(args, range(task.train_levels))
    expected = {
        **sampler_defaults(),
        **learning.METHODS["plr_t1_s0.3_u0.5"],
        "levels": list(range(60)),
        "seed": 0,
    }
    assert kwargs == {k: expected[k] for k in kwargs}


def test_demo_quick(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from plr_gym import demo

    monkeypatch.setenv("PLR_GYM_DEMO_QUICK", "1")
    assert demo.main(["--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "| plr (value_l1), 2 seeds |" in out and "| uniform, 2 seeds |" in out
    # issue #42's empty comparison, small: 512 steps on 6 levels, scored at the end of 256-step rollouts, so
    # PLR (min_seen_ratio=1.0) never replayed; compare and the demo say so and give no verdict
    assert "PLR replay share per seed: 0%, 0% (a verdict needs at least 10% in every seed)" in out
    no_verdict = [line for line in out.splitlines() if line.startswith("No verdict for ")]
    assert len(no_verdict) == 2 and "Verdict: " not in out
    for line in no_verdict:
        assert "PLR replayed 0% of its level draws (seeds: 0%, 0%), under 10%" in line
        assert "with min_seen_ratio=1.0 PLR replays no level until 6 of the 6 training levels" in line
        assert "train for at least one pass over the training levels (about " in line
    for run in ("plr-seed0", "plr-seed1", "uniform-seed0", "uniform-seed1"):
        assert (tmp_path / run / "model.zip").is_file()
    assert_png_with_content(tmp_path / "comparison.png")


def test_compare_gives_no_verdict_where_plr_never_replayed(tmp_path: Path) -> None:
    """Issue #42: a PLR run that replayed less than 10% of its draws in some seed was uniform sampling; the
    table names each seed's share, the cause and the budget, and gives no verdict (enough replay: one)."""
    from plr_gym.plotting import Run, merge_seeds, replay_shortfall, results_table

    levels = range(10000, 10040)

    def runs(sampler: str, shares: list[float], seen: int) -> list[Run]:
        out = []
        for seed, share in enumerate(shares):
            returns = {str(lvl): [0.5 + 0.1 * seed + 0.01 * (lvl % 5)] for lvl in levels}
            stats = {"replay_share": share, "num_seen": float(seen), "num_levels": 40.0, "num_samples": 31.0}
            config = {"sampler": sampler, "seed": seed, "timesteps": 4096, "num_levels": 40, "n_steps": 128,
                      "n_envs": 8, "min_seen_ratio": 1.0}  # fmt: skip
            plr_stats = {**stats, "min_seen_ratio": 1.0} if sampler == "plr" else {}
            final = {"returns": returns}
            out.append(
                Run(tmp_path / f"{sampler}{seed}", sampler, config, [], final, sampler_stats=plr_stats)
            )
        return out

    uniform = merge_seeds(runs("uniform", [0.0, 0.0, 0.0], 0))
    empty = merge_seeds(runs("plr", [0.0, 0.0, 0.0], 27))
    table, _ = results_table([empty, uniform])
    assert "Verdict" not in table and "significant" not in table
    line = table.splitlines()[-1]
    assert line.startswith(
        "No verdict for plr, 3 seeds: PLR replayed 0% of its level draws (seeds: 0%, 0%, 0%)"
    )
    assert "until 40 of the 40 training levels were played once, and its seeds played 27 of them" in line
    assert (
        "(about 6,400 steps here, at ~132 steps per level draw" in line
    )  # 40 draws + one 1,024-step rollout
    one_low = merge_seeds(runs("plr", [0.4, 0.05, 0.5], 40))
    assert "(seeds: 40%, 5%, 50%)" in (replay_shortfall(one_low) or "")
    assert "got there only near the end" in (replay_shortfall(one_low) or "")
    fine = merge_seeds(runs("plr", [0.4, 0.3, 0.5], 40))
    assert replay_shortfall(fine) is None
    assert results_table([fine, uniform])[0].splitlines()[-1].startswith("Verdict: ")
