"""``python -m plr_gym.demo`` (``make demo``): PPO with PLR against PPO with uniform level sampling.

Trains PPO on the same fixed set of MiniGrid training levels (``MiniGrid-DoorKey-5x5-v0``, levels
``0..39``, 50,000 steps per run) with Prioritized Level Replay (the paper's defaults: L1 value loss
scores, rank transform, ``β = 0.1``, ``ρ = 0.1``) and with uniform level sampling, three seeds each.
Every run is evaluated on 64 held-out levels (``10000..10063``) every 5,000 steps. It prints a table
(mean and interquartile mean of the final held-out return, the seeds' episodes pooled per level, with
95% bootstrap confidence intervals over levels; and the held-out return averaged over all evaluations,
which measures how fast each sampler learned) and writes ``runs/demo/comparison.png``: held-out return
over training (band: range over seeds) and the distribution of level scores.

It is ``plr-gym compare --run --seeds 0 1 2`` with fixed settings, and takes about 6-10 minutes on 2
CPU cores. ``--quick`` (or the environment variable ``PLR_GYM_DEMO_QUICK=1``) runs a tiny version in
under a minute, to check the pipeline; its numbers mean nothing.

No claim is built in: with this budget the two samplers may well be within each other's confidence
intervals, and the demo says so.
"""

from __future__ import annotations

import argparse
import csv
import os
import time
from pathlib import Path
from typing import Any

from plr_gym import cli

__all__ = ["DEMO_SETTINGS", "QUICK_SETTINGS", "demo_argv", "main"]

DEMO_ENV = "MiniGrid-DoorKey-5x5-v0"
#: ``plr-gym compare --run`` options of the full demo.
DEMO_SETTINGS: dict[str, str] = {
    "--timesteps": "50000",
    "--num-levels": "40",
    "--eval-levels": "10000:10064",
    "--eval-freq": "5000",
    "--n-envs": "8",
    "--n-steps": "256",
    "--batch-size": "256",
    "--n-epochs": "4",
    "--torch-threads": "1",
}
#: Overrides of the ``--quick`` demo: a pipeline check, not an experiment.
QUICK_SETTINGS: dict[str, str] = {
    "--timesteps": "512",
    "--num-levels": "6",
    "--eval-levels": "10000:10004",
    "--eval-freq": "256",
    "--n-envs": "2",
    "--n-steps": "128",
    "--batch-size": "128",
    "--n-epochs": "1",
}


def demo_argv(quick: bool, out: str, seed: int, timesteps: int | None = None, n_seeds: int = 3) -> list[str]:
    """The ``plr-gym`` command line the demo runs: ``n_seeds`` seeds from ``seed`` per sampler."""
    settings = dict(DEMO_SETTINGS)
    if quick:
        settings.update(QUICK_SETTINGS)
    if timesteps is not None:
        settings["--timesteps"] = str(timesteps)
    seeds = [str(seed + k) for k in range(n_seeds)]
    argv = ["compare", "--run", "--env", DEMO_ENV, "--out", out, "--seeds", *seeds, "--no-eval-train-levels"]
    for key, value in settings.items():
        argv += [key, value]
    if quick:  # short episodes too: an untrained agent otherwise plays DoorKey's 250-step limit
        argv += ["--env-kwarg", "max_steps=50", "--no-tensorboard", "--no-progress"]
    return argv


def _verdict(rows: list[dict[str, Any]]) -> str:
    """One sentence on the held-out means: the difference and whether the 95% CIs overlap."""
    by_run = {r["run"].split(",")[0].split(" ")[0]: r for r in rows}
    plr, uni = by_run.get("plr"), by_run.get("uniform")
    if plr is None or uni is None:
        return ""
    diff = float(plr["test_mean"]) - float(uni["test_mean"])
    overlap = float(plr["test_mean_lo"]) <= float(uni["test_mean_hi"]) and float(
        uni["test_mean_lo"]
    ) <= float(plr["test_mean_hi"])
    if overlap:
        return (
            f"Held-out mean return: PLR {diff:+.3f} vs uniform; the 95% CIs overlap, so this run does not "
            "separate the two samplers (try more --timesteps or --n-seeds)."
        )
    better = "PLR" if diff > 0 else "uniform sampling"
    return f"Held-out mean return: PLR {diff:+.3f} vs uniform; the 95% CIs do not overlap ({better} ahead)."


def main(argv: list[str] | None = None) -> int:
    """Run the demo; returns the exit code."""
    parser = argparse.ArgumentParser(
        prog="python -m plr_gym.demo",
        description="PPO with PLR vs uniform level sampling on MiniGrid DoorKey-5x5 (about 6-10 minutes).",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="tiny pipeline check (also PLR_GYM_DEMO_QUICK=1); meaningless numbers",
    )
    parser.add_argument("--out", default="runs/demo", help="output directory (default runs/demo)")
    parser.add_argument("--seed", type=int, default=0, help="seed (default 0)")
    parser.add_argument("--timesteps", type=int, default=None, help="steps per run (default 50000)")
    parser.add_argument("--n-seeds", type=int, default=None, help="seeds per sampler (default 3; --quick: 2)")
    args = parser.parse_args(argv)
    quick = args.quick or os.environ.get("PLR_GYM_DEMO_QUICK", "") not in ("", "0")
    n_seeds = args.n_seeds if args.n_seeds is not None else (2 if quick else 3)
    cli_argv = demo_argv(quick, args.out, args.seed, args.timesteps, n_seeds)
    print("plr_gym demo: PPO + Prioritized Level Replay vs PPO + uniform level sampling")
    print("  equivalent command: plr-gym " + " ".join(cli_argv) + "\n", flush=True)
    start = time.perf_counter()
    code = cli.main(cli_argv)
    elapsed = time.perf_counter() - start
    with (Path(args.out) / "comparison.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    verdict = _verdict(rows)
    if verdict:
        print("\n" + verdict)
    plot = Path(args.out) / "comparison.png"
    print(f"Plot: {plot if plot.exists() else '(needs matplotlib)'}   (total {elapsed / 60:.1f} min)")
    return code


if __name__ == "__main__":
    raise SystemExit(main())
