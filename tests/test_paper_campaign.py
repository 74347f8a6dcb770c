"""``benchmarks/learning/paper_campaign.py``: the lease plan, the report's normalised returns, bundles, and a
real CPU smoke campaign that is stopped and resumed."""

from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SPEC = importlib.util.spec_from_file_location(
    "paper_campaign", ROOT / "benchmarks" / "learning" / "paper_campaign.py"
)
assert SPEC is not None and SPEC.loader is not None
campaign = importlib.util.module_from_spec(SPEC)
sys.modules["paper_campaign"] = campaign
SPEC.loader.exec_module(campaign)


def fake_run(out: Path, name: str, points: list[tuple[int, float, float]], final: float | None) -> Path:
    """A run directory as ``plr-gym train`` leaves it: eval.csv (test rows), evaluation.json when done."""
    path = out / "runs" / name
    path.mkdir(parents=True)
    with open(path / "eval.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["timesteps", "split", "n_levels", "mean", "wall_time"])
        for steps, mean, wall in points:
            w.writerow([steps, "test", 2, mean, wall])
            w.writerow([steps, "train", 2, mean + 1, wall])
    (path / "model.zip").write_bytes(b"x" * 1000)
    if final is not None:
        record = {"timesteps": points[-1][0], "summary": {"mean": final}}
        (path / "evaluation.json").write_text(json.dumps(record))
    return path


def test_plan_names_every_step_of_a_lease() -> None:
    args = argparse.Namespace(
        game="bigfish",
        seeds=[0, 1],
        methods=["uniform", "paper"],
        out="benchmarks/results/paper_campaign/bigfish",
        steps_per_second=None,
    )
    text = campaign.plan(args, ["--timesteps", "5000000"])
    for piece in (
        "--prepare",
        'carry=["benchmarks/.gpu_payload"]',
        "pip install -q --no-index --no-deps",
        "dpkg -x $f /tmp/gl",
        "LD_LIBRARY_PATH=/tmp/gl/usr/lib/x86_64-linux-gnu",
        "setsid nohup python3 benchmarks/learning/paper_campaign.py --game bigfish --seeds 0 1",
        "--methods uniform paper",
        "--timesteps 5000000",
        "--status",
        "--stop --grace 120",
        "--report",
        "$OUT",
        "--bundle 0 --bundle-to $OUT",
        "--unbundle",
    ):
        assert piece in text, piece


def test_plan_gives_the_gpu_hours_at_a_measured_rate(tmp_path: Path) -> None:
    args = argparse.Namespace(
        game="bigfish",
        seeds=[0, 1, 2],
        methods=["uniform", "paper"],
        out=str(tmp_path),
        steps_per_second=None,
    )
    lines = campaign.budget(args, ["--timesteps", "3600000"])
    assert "6 runs (2 methods x 3 seeds) x 3,600,000 steps = 21,600,000 environment steps" in lines[0]
    assert "GPU rate not measured yet" in lines[1]
    # runs measured so far: 1,000 and 3,000 steps/s (eval.csv); the median is taken
    fake_run(tmp_path, "uniform-seed0", [(0, 1.0, 0.0), (100_000, 2.0, 100.0)], None)
    fake_run(tmp_path, "paper-seed0", [(0, 1.0, 0.0), (300_000, 2.0, 100.0)], None)
    lines = campaign.budget(args, ["--timesteps", "3600000"])
    assert (
        "at 3,000 steps/s per run (median of 2 runs so far): 0.3 GPU-hours (= 2 slices of 10 min" in lines[1]
    )
    args.steps_per_second = 500.0  # a rate given wins: 3.6M steps / 500 per s = 2 hours = 12 slices
    assert "2.0 GPU-hours (= 12 slices of 10 min" in campaign.budget(args, ["--timesteps", "3600000"])[1]
    cmd = campaign.train_command("bigfish", "paper", 0, tmp_path / "r", [], resume=False)
    assert cmd[cmd.index("--save-minutes") + 1] == "10"


def test_methods_flags() -> None:
    from plr_gym.sampler import sampler_defaults

    assert campaign.method_args("uniform") == ["--sampler", "uniform"]
    flags = campaign.method_args("plr_defaults")
    d = sampler_defaults()
    assert flags[flags.index("--staleness-coef") + 1] == str(d["staleness_coef"])
    assert flags[flags.index("--temperature") + 1] == str(d["temperature"])
    with pytest.raises(ValueError, match="method must be one of"):
        campaign.method_args("best")
    assert campaign.target_steps([]) == 25_000_000
    assert campaign.target_steps(["--timesteps", "512", "--timesteps=2048"]) == 2048


def test_report_normalises_by_uniforms_mean_and_counts_steps_per_second(tmp_path: Path) -> None:
    fake_run(tmp_path, "uniform-seed0", [(0, 1.0, 10.0), (100, 2.0, 20.0), (200, 4.0, 30.0)], 4.0)
    fake_run(tmp_path, "uniform-seed1", [(0, 1.0, 5.0), (100, 6.0, 15.0), (200, 6.0, 25.0)], 6.0)
    # resumed at step 100: wall_time restarts; steps/s sums the two processes' segments
    fake_run(
        tmp_path, "paper-seed0", [(0, 1.0, 0.0), (100, 3.0, 50.0), (100, 3.0, 1.0), (200, 5.0, 51.0)], 5.0
    )
    fake_run(tmp_path, "paper-seed1", [(0, 1.0, 0.0), (100, 3.0, 10.0)], None)  # unfinished
    result = campaign.write_report(tmp_path, "bigfish", 200)
    assert result["uniform_mean"] == 5.0
    paper = result["methods"]["paper"]
    assert paper["seeds"] == [0] and paper["normalised"] == [100.0]
    assert result["methods"]["uniform"]["normalised"] == [80.0, 120.0]
    runs = {r["run"]: r for r in result["runs"]}
    assert runs["paper-seed0"]["steps_per_s"] == pytest.approx(200 / 100)
    assert runs["uniform-seed0"]["steps_per_s"] == pytest.approx(200 / 20)
    assert runs["paper-seed1"]["state"] == "partial" and runs["paper-seed1"]["final_mean"] is None
    rows = list(csv.DictReader(open(tmp_path / "curves.csv")))
    assert {
        "method": "uniform",
        "seed": "1",
        "timesteps": "100",
        "heldout_mean": "6.0",
        "normalised": "120.0",
    } in rows
    table = (tmp_path / "results.md").read_text()
    assert "| paper | 1 | 5.000 | 100.0 |" in table  # one seed: no standard error
    assert "| uniform | 2 | 5.000 ± 1.000 | 100.0 ± 20.0 |" in table


def test_bundles_fit_the_transfer_limit_and_round_trip(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "camp"
    for k in range(3):
        fake_run(out, f"paper-seed{k}", [(0, 1.0, 0.0), (64, 2.0, 1.0)], None)
        (out / "runs" / f"paper-seed{k}.log").write_text(f"log {k}\n")
    monkeypatch.setattr(campaign, "BUNDLE_BYTES", 2500)  # two fake runs per group
    groups = campaign.bundle_groups(out)
    assert [[p.name for p in g] for g in groups] == [["paper-seed0", "paper-seed1"], ["paper-seed2"]]
    dest = tmp_path / "OUT"
    dest.mkdir()
    assert campaign.bundle(out, 0, dest) == 0 and campaign.bundle(out, 1, dest) == 0
    assert campaign.bundle(out, 2, dest) == 2
    restored = tmp_path / "restored"
    assert campaign.unbundle(restored, sorted(dest.iterdir())) == 0
    for k in range(3):
        assert (restored / "runs" / f"paper-seed{k}" / "eval.csv").read_text() == (
            out / "runs" / f"paper-seed{k}" / "eval.csv"
        ).read_text()
        assert (restored / "runs" / f"paper-seed{k}.log").read_text() == f"log {k}\n"


@pytest.mark.slow
def test_cpu_smoke_campaign_runs_in_parallel_then_resumes(tmp_path: Path) -> None:
    """Two runs of --preset paper-procgen in parallel (256 steps: one rollout), then the same
    command with a larger budget resumes both from their checkpoints and the report counts them done.
    (fruitbot: a random policy's episodes there last under 100 steps, so the evaluations stay short.)"""
    from procgen_stock import require_backend

    require_backend()  # procgen-mirror or procgen-gym, whichever this stack has
    from conftest import run_benchmark

    out = tmp_path / "fruitbot"
    base = [
        "--game",
        "fruitbot",
        "--seeds",
        "0",
        "--methods",
        "uniform",
        "paper",
        "--smoke",
        "--out",
        str(out),
        "--poll",
        "1",
    ]
    run_benchmark("learning/paper_campaign.py", *base, "--timesteps", "256", "--eval-freq", "128")
    first = json.loads((out / "results.json").read_text())
    assert {r["run"]: r["state"] for r in first["runs"]} == {"paper-seed0": "done", "uniform-seed0": "done"}
    assert first["campaign"]["parallel_runs"] == 2 and first["methods"]["paper"]["normalised"]
    config = json.loads((out / "runs" / "paper-seed0" / "config.json").read_text())
    assert (config["preset"], config["encoder"], config["normalize_reward"]) == (
        "paper-procgen",
        "impala",
        True,
    )
    assert config["sampler"] == "plr" and config["staleness_coef"] == 0.1
    run_benchmark("learning/paper_campaign.py", *base, "--timesteps", "512", "--eval-freq", "128")
    second = json.loads((out / "results.json").read_text())
    assert all(r["state"] == "done" and r["final_timesteps"] >= 512 for r in second["runs"])
    log = (out / "runs" / "paper-seed0.log").read_text()
    assert "--resume" in log and "(resumed at step 256)" in log
    curve = [r for r in csv.DictReader(open(out / "curves.csv")) if r["method"] == "paper"]
    assert [int(r["timesteps"]) for r in curve] == [0, 128, 256, 384, 512]


def test_checkpoints_follow_the_wall_clock_with_save_seconds(tmp_path: Path) -> None:
    """A run in 10-minute slices of machine time: with ``save_seconds`` a checkpoint is written at the first
    rollout boundary after that much wall clock, whatever ``save_freq`` says (the clock is faked)."""
    from minigrid.wrappers import FlatObsWrapper
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env

    from plr_gym import LevelWrapper, PLRCallback, PrioritizedLevelReplay, RunCheckpointCallback, RunDirectory

    def learn(save_seconds: float | None, tick: float, out: Path) -> list[int]:
        """Train 4 rollouts of 64 steps; each rollout takes ``tick`` seconds of the fake clock."""
        venv = make_vec_env(
            "MiniGrid-Empty-5x5-v0", n_envs=2, wrapper_class=lambda e: LevelWrapper(FlatObsWrapper(e))
        )
        model = PPO("MlpPolicy", PrioritizedLevelReplay(venv, levels=range(4), seed=0), n_steps=32,
                    batch_size=64, n_epochs=1, seed=0)  # fmt: skip
        plr = PLRCallback()
        now = [0.0]
        saved: list[int] = []

        class Tick(BaseCallback):
            def _on_rollout_start(self) -> None:
                now[0] += tick

            def _on_step(self) -> bool:
                return True

        with RunDirectory(out) as run:
            saver = RunCheckpointCallback(run, 10**9, plr_callback=plr, save_seconds=save_seconds)
            saver.clock = lambda: now[0]
            save_now = saver.save_now

            def record() -> object:
                saved.append(int(saver.model.num_timesteps))
                return save_now()

            saver.save_now = record  # type: ignore[method-assign]
            model.learn(256, callback=[plr, Tick(), saver])
        return saved

    # 700 s per rollout, checkpoints due after 600 s: one at every rollout boundary
    assert learn(600.0, 700.0, tmp_path / "every") == [0, 64, 128, 192, 256]
    # 400 s per rollout: due at every second boundary
    assert learn(600.0, 400.0, tmp_path / "second") == [0, 64, 192, 256]
    assert learn(None, 700.0, tmp_path / "steps") == [0, 256]  # steps only (save_freq 10**9): start and end
    with pytest.raises(ValueError, match="save_seconds must be a finite number > 0 or None"):
        with RunDirectory(tmp_path / "bad") as run:
            RunCheckpointCallback(run, save_seconds=0)
