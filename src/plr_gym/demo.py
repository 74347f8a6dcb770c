"""``python -m plr_gym.demo`` (``make demo``): PPO with PLR against PPO with uniform level sampling.

Runs the learning study's round-4 ``mixed`` task (docs/study.md, ``benchmarks/learning.py``'s
``TASKS["mixed"]``) with the study's settings: PPO on ``plr_gym/MiniGrid-DoorKeyMixed-v0`` (size 5,
egocentric 7x7 view; a third of the levels trivial, a third normal DoorKey-5x5, a third unsolvable),
training levels ``0..59``, with Prioritized Level Replay (the library's defaults, see
:class:`~plr_gym.LevelSampler`) and with uniform level sampling, three seeds each. Every run is evaluated
on the 60 held-out levels ``10000..10059`` every 40,000 steps and at its end (159,744 steps: 78 PPO updates
of 8 x 256 steps, the policy the study evaluated at its 160,000-step checkpoint), one episode per level
with actions sampled from the policy. It prints a table (mean and interquartile mean of the final held-out
return, the seeds' episodes pooled per level, with 95% bootstrap confidence intervals over levels; and
the held-out return averaged over the four evaluations, the study's area under the held-out curve) and
writes ``runs/demo/comparison.png``: held-out return over training (band: range over seeds) and the
distribution of level scores.

It is ``plr-gym compare --run --seeds 0 1 2 --jobs 2`` with fixed settings (two runs at a time, one
process and one torch thread each): 6.7 minutes measured on 2 CPU cores at load 0.7-1.9 (its own two
runs; ``benchmarks/results/demo/2026-11-26.md``), 32 minutes at load 11-22 on a busy shared machine.
``--quick`` (or the environment variable ``PLR_GYM_DEMO_QUICK=1``) runs a tiny version in one process in
under a minute, to check the pipeline; its numbers mean nothing.

The last lines are each PLR seed's replay share and a verdict from the paired difference of held-out
returns (PLR minus uniform on each held-out level, averaged over seeds) and its 95% bootstrap CI over seeds
and levels: better, worse, or no significant difference. Where a PLR seed replayed less than 10% of its
level draws (too short a run: PLR replays nothing until every training level was played once) it gives no
verdict and says which budget would. What the study found on this task, and so what the demo can check, is
:func:`demo_summary`, printed first and quoted in the README.
"""

from __future__ import annotations

import argparse
import os
import textwrap
import time
from pathlib import Path
from typing import Any

from plr_gym import cli, training

__all__ = [
    "DEMO_SETTINGS",
    "QUICK_SETTINGS",
    "demo_argv",
    "demo_summary",
    "main",
    "replay_share_line",
    "verdict",
]

DEMO_ENV = "plr_gym/MiniGrid-DoorKeyMixed-v0"
#: ``plr-gym compare --run`` options of the full demo: the study's ``mixed`` task and PPO settings.
#: 159,744 steps = 78 rollouts of 8 x 256 steps: the study's runs were evaluated at 160,000 steps, in the
#: 79th rollout, i.e. after 78 PPO updates; ``plr-gym`` evaluates at the end of its last rollout.
DEMO_SETTINGS: dict[str, str] = {
    "--env-kwarg": "size=5",
    "--timesteps": "159744",
    "--num-levels": "60",
    "--eval-levels": "10000:10060",
    "--eval-freq": "40000",
    "--eval-episodes": "1",
    "--n-envs": "8",
    "--n-steps": "256",
    "--batch-size": "512",
    "--n-epochs": "4",
    "--learning-rate": "0.0005",
    "--gamma": "0.99",
    "--gae-lambda": "0.95",
    "--ent-coef": "0.01",
    "--device": "cpu",
    "--torch-threads": "1",
    "--jobs": "2",
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
    "--jobs": "1",  # one process: two workers (each importing torch and SB3) cost more than these runs
}


def demo_summary(n_seeds: int = 3) -> str:
    """The demo's task and what it can show, printed before its runs; the README and docs/cli.md quote it
    (a test keeps them equal), so the demo and the docs make one claim about one task.

    Example:
        >>> demo_summary().split(": ")[1]
        "the study's round-4 `mixed` task (docs/study.md)"
    """
    levels = int(DEMO_SETTINGS["--num-levels"])
    lo, hi = (int(x) for x in DEMO_SETTINGS["--eval-levels"].split(":"))
    steps = int(DEMO_SETTINGS["--timesteps"])
    updates = steps // (int(DEMO_SETTINGS["--n-envs"]) * int(DEMO_SETTINGS["--n-steps"]))
    return (
        f"Task: the study's round-4 `mixed` task (docs/study.md): PPO on {DEMO_ENV} (size 5, egocentric "
        "7x7 view; a third of the levels trivial, a third normal DoorKey-5x5, a third unsolvable), training "
        f"levels 0-{levels - 1}, held-out levels {lo}-{hi - 1}, {steps:,} steps per run ({updates} PPO "
        "updates, as the study's runs at their 160,000-step evaluation), the study's PPO settings, "
        f"{n_seeds} seeds per sampler (PLR with the library's defaults, and uniform). There the study's 6 "
        "seeds gave defaults minus uniform +0.003 final held-out return (95% CI [-0.003, +0.012]) and "
        "+0.013 area under the held-out curve ([-0.002, +0.031]): a tie at the ceiling (about 0.65; the "
        "unsolvable third returns 0), not a gain. The claim this demo can check: the library's defaults are "
        "not worse than uniform here. They were never significantly worse on the study's tasks, and a gain "
        "over uniform is not established (round 1's +0.097 on fully observed DoorKey-5x5 did not "
        "replicate). These are new runs of the study's setup (other random streams); the last line is "
        "their paired verdict."
    )


def demo_argv(quick: bool, out: str, seed: int, timesteps: int | None = None, n_seeds: int = 3) -> list[str]:
    """The ``plr-gym`` command line the demo runs: ``n_seeds`` seeds from ``seed`` per sampler.

    The runs land in ``out/plr-seed<k>`` and ``out/uniform-seed<k>`` (:func:`plr_gym.training.run_dir_name`).

    Example:
        >>> argv = demo_argv(quick=False, out="runs/demo", seed=0)
        >>> argv[:5]
        ['compare', '--run', '--env', 'plr_gym/MiniGrid-DoorKeyMixed-v0', '--out']
        >>> argv[argv.index("--seeds") + 1 : argv.index("--seeds") + 4], argv[argv.index("--jobs") + 1]
        (['0', '1', '2'], '2')
        >>> argv[argv.index("--timesteps") + 1], argv[argv.index("--batch-size") + 1]
        ('159744', '512')
    """
    settings = dict(DEMO_SETTINGS)
    if quick:
        settings.update(QUICK_SETTINGS)
    if timesteps is not None:
        settings["--timesteps"] = str(timesteps)
    seeds = [str(seed + k) for k in range(n_seeds)]
    argv = ["compare", "--run", "--env", DEMO_ENV, "--out", out, "--seeds", *seeds, "--no-eval-train-levels"]
    # the study's evaluation: at its checkpoints only (no step 0), actions sampled from the policy
    argv += ["--no-eval-at-start", "--no-eval-deterministic"]
    argv.append("--overwrite")  # running the demo again replaces its runs
    for key, value in settings.items():
        argv += [key, value]
    if quick:  # short episodes too: an untrained agent otherwise plays the 250-step limit of DoorKey-5x5
        argv += ["--env-kwarg", "max_steps=50", "--no-tensorboard", "--no-progress"]
    return argv


def _final_matrix(out: Path, sampler: str, seeds: list[int]) -> tuple[list[int], Any] | None:
    """``(levels, (n_seeds, n_levels) matrix)`` of final held-out mean returns from ``evaluation.json``."""
    import numpy as np

    per_seed = []
    for seed in seeds:
        returns = training.load_final_returns(out / training.run_dir_name(sampler, seed))
        if returns is None:
            return None
        per_seed.append({level: float(np.mean(v)) for level, v in returns.items() if len(v)})
    levels = sorted(set.intersection(*(set(r) for r in per_seed)))
    if not levels:
        return None
    return levels, np.array([[r[lvl] for lvl in levels] for r in per_seed])


def _plr_runs(out: Path, seeds: list[int]) -> Any:
    """The PLR runs of the seeds merged into one :class:`~plr_gym.plotting.Run` (``None`` if one is
    missing)."""
    from plr_gym.plotting import load_run, merge_seeds

    dirs = [out / training.run_dir_name("plr", seed) for seed in seeds]
    if not all((d / "eval.csv").is_file() and (d / "config.json").is_file() for d in dirs):
        return None
    merged = merge_seeds([load_run(d) for d in dirs])
    merged.label = "PLR"
    return merged


def replay_share_line(out: Path, seeds: list[int]) -> str:
    """``"PLR replay share per seed: 61%, 58%, 60% ..."``: how much of each PLR run's level draws replayed a
    seen level (``""`` without the runs' sampler files)."""
    from plr_gym.plotting import MIN_REPLAY_SHARE, replay_shares

    merged = _plr_runs(out, seeds)
    shares = replay_shares(merged) if merged is not None else []
    if not shares:
        return ""
    return (
        f"PLR replay share per seed: {', '.join(f'{x:.0%}' for x in shares)} (a verdict needs at least "
        f"{MIN_REPLAY_SHARE:.0%} in every seed)"
    )


def verdict(out: Path, seeds: list[int]) -> str:
    """One line for a newcomer: PLR minus uniform on held-out levels, paired by level, with its 95% CI over
    seeds and levels (:func:`plr_gym.plotting.paired_verdict`, which ``plr-gym compare`` prints too); ``""``
    for fewer than two seeds or a missing run. Where a PLR seed replayed less than
    :data:`~plr_gym.plotting.MIN_REPLAY_SHARE` of its draws the line gives no verdict and says why
    (:func:`plr_gym.plotting.replay_shortfall`)."""
    from plr_gym.plotting import paired_difference, paired_verdict, replay_shortfall

    plr, uni = _final_matrix(out, "plr", seeds), _final_matrix(out, "uniform", seeds)
    if plr is None or uni is None or len(seeds) < 2:  # one seed per method: nothing to test
        return ""
    merged = _plr_runs(out, seeds)
    shortfall = replay_shortfall(merged) if merged is not None else None
    if shortfall is not None:  # PLR (nearly) never replayed: uniform against uniform, no verdict
        return shortfall
    common = sorted(set(plr[0]) & set(uni[0]))
    pick = [[levels.index(lvl) for lvl in common] for levels in (plr[0], uni[0])]
    d = paired_difference(plr[1][:, pick[0]], uni[1][:, pick[1]])
    return paired_verdict(d["mean"], d["mean_ci"])


def main(argv: list[str] | None = None) -> int:
    """Run the demo; returns the exit code."""
    parser = argparse.ArgumentParser(
        prog="python -m plr_gym.demo",
        description="PPO with PLR vs uniform level sampling on the learning study's mixed task "
        "(plr_gym/MiniGrid-DoorKeyMixed-v0; 6.7 minutes measured on 2 CPU cores at load 0.7-1.9, 32 "
        "minutes at load 11-22).",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="tiny pipeline check (also PLR_GYM_DEMO_QUICK=1); meaningless numbers",
    )
    parser.add_argument("--out", default="runs/demo", help="output directory (default runs/demo)")
    parser.add_argument("--seed", type=int, default=0, help="seed (default 0)")
    parser.add_argument(
        "--timesteps",
        type=int,
        default=None,
        help=f"steps per run (default {DEMO_SETTINGS['--timesteps']}, the study's; --quick: "
        f"{QUICK_SETTINGS['--timesteps']})",
    )
    parser.add_argument("--n-seeds", type=int, default=None, help="seeds per sampler (default 3; --quick: 2)")
    args = parser.parse_args(argv)
    quick = args.quick or os.environ.get("PLR_GYM_DEMO_QUICK", "") not in ("", "0")
    n_seeds = args.n_seeds if args.n_seeds is not None else (2 if quick else 3)
    cli_argv = demo_argv(quick, args.out, args.seed, args.timesteps, n_seeds)
    print("plr_gym demo: PPO + Prioritized Level Replay vs PPO + uniform level sampling")
    if not quick:
        print(textwrap.fill(demo_summary(n_seeds), width=100, break_on_hyphens=False))
        if args.timesteps is not None and str(args.timesteps) != DEMO_SETTINGS["--timesteps"]:
            print(
                f"  note: --timesteps {args.timesteps} is not the study's budget, which the summary describes"
            )
    print("  equivalent command: plr-gym " + " ".join(cli_argv) + "\n", flush=True)
    start = time.perf_counter()
    code = cli.main(cli_argv)
    elapsed = time.perf_counter() - start
    seeds = [args.seed + k for k in range(n_seeds)]
    shares = replay_share_line(Path(args.out), seeds)
    line = verdict(Path(args.out), seeds)
    if shares or line:
        print()
    if shares:
        print(shares)
    if line:
        print(line)
    plot = Path(args.out) / "comparison.png"
    print(f"Plot: {plot if plot.exists() else '(needs matplotlib)'}   (total {elapsed / 60:.1f} min)")
    return code


if __name__ == "__main__":
    raise SystemExit(main())
