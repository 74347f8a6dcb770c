"""The JAX study (docs/study.md, "JAX study plan"): examples/jax_ppo_plr.py over tasks × arms × budgets.

Every cell (task, budget, arm) trains seeds 0 .. 149 with the example's own ``make_train`` (``vmap`` over a
chunk of seeds, one ``jit``), evaluates on 100 held-out levels at 4 checkpoints, and writes one record per
chunk of seeds: ``OUT/runs/<task>/<budget>/<arm>_s<first>-<last>.npz`` (held-out return per seed,
checkpoint and level; the initial policy's; the training return per update) and a ``.json`` beside it
(configuration, commit, machine, load, seconds). A finished chunk is skipped, so the runner resumes.
``--report`` reads the records and prints the tables: per arm the mean final held-out return and AUC (mean
over the 4 checkpoints) with 95% bootstrap CIs over seeds, and each arm's paired difference to uniform
(same seed: same initial network), bootstrapped over seeds (10,000 resamples, seeded).

    python benchmarks/jax/jax_study.py --tasks doorkey5 doorkey6 fourrooms9 --budget 1x \\
        [--seeds 150 --chunk 50]
    python benchmarks/jax/jax_study.py --report --budget 1x
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))  # benchmarks/common: _provenance

import numpy as np

from _provenance import cpu_model, git_commit, load_average

ROOT = Path(__file__).resolve().parents[2]
#: task -> (navix id, max_steps = MiniGrid's limit for that env)
TASKS: dict[str, tuple[str, int]] = {
    "doorkey5": ("Navix-DoorKey-Random-5x5-v0", 250),
    "doorkey6": ("Navix-DoorKey-Random-6x6-v0", 360),
    "fourrooms9": ("Navix-FourRooms-9x9-v0", 100),
}
ARMS = ("uniform", "defaults", "paper", "learnability")
#: budget -> PPO updates between the 4 evaluations (8 envs × 256 steps = 2,048 steps per update)
BUDGETS = {"1x": 20, "10x": 200}


def load_example() -> Any:
    spec = importlib.util.spec_from_file_location("jax_ppo_plr", ROOT / "examples" / "jax_ppo_plr.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["jax_ppo_plr"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def cell_dir(out: Path, task: str, budget: str) -> Path:
    return out / "runs" / task / budget


def run_cells(args: argparse.Namespace) -> None:
    import jax
    import jax.numpy as jnp

    example = load_example()
    for task in args.tasks:
        env_id, max_steps = TASKS[task]
        for arm in args.arms:
            config = example.Config(
                env_id=env_id,
                max_steps=max_steps,
                arm=arm,
                updates_per_eval=BUDGETS[args.budget],
                num_evals=4,
            )
            directory = cell_dir(args.out, task, args.budget)
            directory.mkdir(parents=True, exist_ok=True)
            train = None
            for first in range(0, args.seeds, args.chunk):
                last = min(first + args.chunk, args.seeds) - 1
                stem = directory / f"{arm}_s{first:03d}-{last:03d}"
                if stem.with_suffix(".json").exists():
                    continue
                if train is None:
                    train = jax.jit(jax.vmap(example.make_train(config)))
                keys = jax.vmap(jax.random.PRNGKey)(jnp.arange(first, last + 1))
                load = load_average()
                start = time.perf_counter()
                result = jax.device_get(jax.block_until_ready(train(keys)))
                seconds = time.perf_counter() - start
                np.savez_compressed(
                    stem.with_suffix(".npz"),
                    seeds=np.arange(first, last + 1),
                    eval_return=np.asarray(result["eval_return"], np.float32),  # (seeds, 4, levels)
                    eval_return_initial=np.asarray(result["eval_return_initial"], np.float32),
                    train_return=np.asarray(result["train_return"], np.float32),  # (seeds, 4, updates)
                )
                record = {
                    "task": task,
                    "budget": args.budget,
                    "arm": arm,
                    "seeds": [first, last],
                    "config": dataclasses.asdict(config),
                    "steps_per_seed": config.steps_per_seed,
                    "seconds_with_compile": round(seconds, 1),
                    "commit": git_commit(),
                    "machine": f"2-core CPU, shared with other jobs ({cpu_model()})",
                    "load_before": load,
                    "load_after": load_average(),
                    "jax": jax.__version__,
                    "final_mean": float(np.mean(result["eval_return"][:, -1])),
                }
                stem.with_suffix(".json").write_text(json.dumps(record, indent=1) + "\n")
                print(f"{task} {args.budget} {arm} seeds {first}-{last}: final held-out mean "
                      f"{record['final_mean']:.3f}, {seconds:.0f} s", flush=True)  # fmt: skip


def load_cell(out: Path, task: str, budget: str, arm: str) -> dict[str, np.ndarray] | None:
    parts = sorted(cell_dir(out, task, budget).glob(f"{arm}_s*.npz"))
    if not parts:
        return None
    data = [dict(np.load(p)) for p in parts]
    return {k: np.concatenate([d[k] for d in data]) for k in data[0]}


def bootstrap(x: np.ndarray, rng: np.random.Generator, n: int = 10_000) -> tuple[float, float, float]:
    idx = rng.integers(0, x.size, (n, x.size))
    means = x[idx].mean(1)
    return float(x.mean()), float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))


def report(args: argparse.Namespace) -> None:
    print("| task | arm | seeds | final held-out [95% CI] | Δ final vs uniform [95% CI] | AUC [95% CI] | "
          "Δ AUC vs uniform [95% CI] |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for task in args.tasks:
        base = load_cell(args.out, task, args.budget, "uniform")
        for arm in args.arms:
            cell = load_cell(args.out, task, args.budget, arm)
            if cell is None:
                print(f"| `{task}` | `{arm}` | 0 | not run | | | |")
                continue
            rng = np.random.default_rng(0)
            final = cell["eval_return"][:, -1].mean(-1)  # per seed, over the held-out levels
            auc = cell["eval_return"].mean(-1).mean(-1)  # per seed, mean of the 4 checkpoints
            row = [f"`{task}`", f"`{arm}`", str(final.size)]
            m, lo, hi = bootstrap(final, rng)
            row.append(f"{m:.3f} [{lo:.3f}, {hi:.3f}]")
            deltas = ["—", "—"]
            if base is not None and arm != "uniform":
                common, i, j = np.intersect1d(cell["seeds"], base["seeds"], return_indices=True)
                b_final = base["eval_return"][:, -1].mean(-1)[j]
                b_auc = base["eval_return"].mean(-1).mean(-1)[j]
                for k, (x, y) in enumerate(((final[i], b_final), (auc[i], b_auc))):
                    m, lo, hi = bootstrap(x - y, rng)
                    deltas[k] = f"{m:+.3f} [{lo:+.3f}, {hi:+.3f}] (n={common.size}, ±{(hi - lo) / 2:.3f})"
            m, lo, hi = bootstrap(auc, rng)
            row += [deltas[0], f"{m:.3f} [{lo:.3f}, {hi:.3f}]", deltas[1]]
            print("| " + " | ".join(row) + " |")


def growth(args: argparse.Namespace, against: str) -> None:
    """Per arm, the paired change of the final held-out return from budget ``against`` to ``--budget``
    (the same seeds: how much more the agents learn with the larger budget)."""
    print(f"\n| task | arm | seeds in both | final at {against} | final at {args.budget} | "
          f"Δ {args.budget} − {against} [95% CI] |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- |")
    for task in args.tasks:
        for arm in args.arms:
            big, small = (load_cell(args.out, task, b, arm) for b in (args.budget, against))
            if big is None or small is None:
                continue
            common, i, j = np.intersect1d(big["seeds"], small["seeds"], return_indices=True)
            x, y = big["eval_return"][i, -1].mean(-1), small["eval_return"][j, -1].mean(-1)
            m, lo, hi = bootstrap(x - y, np.random.default_rng(0))
            print(f"| `{task}` | `{arm}` | {common.size} | {y.mean():.3f} | {x.mean():.3f} | "
                  f"{m:+.3f} [{lo:+.3f}, {hi:+.3f}] |")  # fmt: skip


def figure(args: argparse.Namespace, path: Path) -> None:
    """Held-out learning curves (mean over seeds ± 2 s.e.), one panel per task."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(args.tasks), figsize=(4 * len(args.tasks), 3.2), squeeze=False)
    for ax, task in zip(axes[0], args.tasks):
        for arm in args.arms:
            cell = load_cell(args.out, task, args.budget, arm)
            if cell is None:
                continue
            per_seed = np.concatenate(
                [cell["eval_return_initial"].mean(-1)[:, None], cell["eval_return"].mean(-1)], 1
            )
            steps = np.arange(per_seed.shape[1]) * BUDGETS[args.budget] * 2048
            mean, se = per_seed.mean(0), per_seed.std(0, ddof=1) / np.sqrt(per_seed.shape[0])
            ax.plot(steps, mean, marker="o", label=f"{arm} ({per_seed.shape[0]})")
            ax.fill_between(steps, mean - 2 * se, mean + 2 * se, alpha=0.2)
        ax.set_title(f"{task} ({args.budget})")
        ax.set_xlabel("env steps per seed")
        ax.set_ylabel("held-out return")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", nargs="+", choices=sorted(TASKS), default=list(TASKS))
    parser.add_argument("--arms", nargs="+", choices=ARMS, default=list(ARMS))
    parser.add_argument("--budget", choices=sorted(BUDGETS), default="1x")
    parser.add_argument("--seeds", type=int, default=150)
    parser.add_argument("--chunk", type=int, default=50, help="seeds per vmapped call (one record each)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "jax_study")
    parser.add_argument("--report", action="store_true", help="print the tables from the records")
    parser.add_argument("--figure", type=Path, help="with --report: also save the held-out curves here")
    parser.add_argument(
        "--against", choices=sorted(BUDGETS), help="with --report: also each arm's change from this budget"
    )
    args = parser.parse_args()
    if args.report:
        report(args)
        if args.against:
            growth(args, args.against)
        if args.figure:
            figure(args, args.figure)
    else:
        run_cells(args)


if __name__ == "__main__":
    main()
