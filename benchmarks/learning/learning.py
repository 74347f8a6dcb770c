"""Learning benchmark: Prioritized Level Replay vs uniform level sampling, on held-out levels.

Not a test. Trains SB3 PPO on a fixed set of training levels, once with levels drawn uniformly
(``strategy="random"``) and once per PLR variant, and evaluates the policy on held-out levels (seeds
``>= 10_000``) and on the training levels at a few checkpoints during training. Each run
``(task, method, seed)`` writes ``<out>/runs/<task>/<method>/seed<k>.json``; re-running the script skips
finished runs (resumable), and ``--jobs 2`` runs two trainings at once (one process each, one torch
thread each). At the end the script prints a Markdown table per task (mean and IQM of held-out return
with 95% bootstrap CIs from :func:`plr_gym.evaluation.summarize`; from round 4 on also the area under
the held-out learning curve, see :func:`auc_matrix`) and writes ``summary.csv``,
``summary.json`` and a learning-curve PNG per task into ``<out>``.

    python benchmarks/learning/learning.py --jobs 2                         # the full study (see TASKS)
    python benchmarks/learning/learning.py --tasks doorkey6 --seeds 3 4    # a subset
    python benchmarks/learning/learning.py --report-only                    # tables and plots from saved runs
    python benchmarks/learning/learning.py --quick                          # smoke test, < 60 s

Budgets are tiny next to the paper's (25M steps per Procgen run): see ``docs/benchmarks.md``.
"""

from __future__ import annotations

import argparse
import datetime
import multiprocessing as mp
import os
import platform
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))  # benchmarks/common: _provenance
from _provenance import cpu_model, git_commit
from plr_gym import training

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "learning"
TEST_LEVEL_START = 10_000


# --------------------------------------------------------------------------------------------------
# experiment definitions
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Task:
    """One environment, its training/held-out levels, its budget and its PPO settings."""

    env_id: str
    kind: str  # "minigrid" (grid encoding + MLP) or "procgen" (64x64 RGB + CNN)
    train_levels: int  # levels 0 .. train_levels-1
    test_levels: int  # held-out levels test_level_start .. test_level_start + test_levels - 1
    total_steps: int
    checkpoints: int  # evaluations during training (evenly spaced, the last at total_steps)
    eval_train_levels: int  # how many training levels are evaluated at each checkpoint
    n_envs: int = 8
    n_steps: int = 256
    batch_size: int = 512
    n_epochs: int = 4
    learning_rate: float = 5e-4
    gamma: float = 0.99
    gae_lambda: float = 0.95
    ent_coef: float = 0.01
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    full_obs: bool = False  # MiniGrid: FullyObsWrapper (whole grid) instead of the 7x7 egocentric view
    methods: tuple[str, ...] | None = None  # restrict the methods run on this task (compute budget)
    test_level_start: int = TEST_LEVEL_START  # first held-out level (10_000 for every task before round 4)

    def hyperparameters(self) -> training.Hyperparameters:
        """The task's PPO settings (the demo's test checks the CLI against them)."""
        return training.Hyperparameters(
            n_steps=self.n_steps,
            batch_size=self.batch_size,
            n_epochs=self.n_epochs,
            learning_rate=self.learning_rate,
            ent_coef=self.ent_coef,
            gamma=self.gamma,
            gae_lambda=self.gae_lambda,
        )


TASKS: dict[str, Task] = {
    # fully observed grid + MLP, 20 training levels: memorises training levels, a real train/test gap
    "doorkey5_full": Task("MiniGrid-DoorKey-5x5-v0", "minigrid", 20, 100, 160_000, 4, 20, full_obs=True),
    # egocentric 7x7 view + MLP, 40 training levels: generalises, the budget stops mid-learning
    "doorkey6": Task("MiniGrid-DoorKey-6x6-v0", "minigrid", 40, 100, 160_000, 4, 40),
    # a gamut: DoorKey 5x5 / 6x6 / 8x8 by seed % 3 (egocentric view): levels of mixed difficulty
    "gamut": Task(
        "plr_gym/MiniGrid-DoorKeyGamut-v0",
        "minigrid",
        60,
        60,
        160_000,
        4,
        30,
        env_kwargs={"sizes": (5, 6, 8)},
    ),
    # the same two tasks at 2.5x the budget: does every seed take off, removing the take-off lottery?
    "gamut_400k": Task(
        "plr_gym/MiniGrid-DoorKeyGamut-v0",
        "minigrid",
        60,
        60,
        400_000,
        4,
        30,
        env_kwargs={"sizes": (5, 6, 8)},
    ),
    "doorkey6_400k": Task("MiniGrid-DoorKey-6x6-v0", "minigrid", 40, 100, 400_000, 4, 40),
    # Procgen easy, 200 training levels (the paper's setting) at 0.4% of the paper's 25M steps
    "bigfish": Task(
        "plr_gym/procgen-bigfish-v0",
        "procgen",
        200,
        50,
        100_000,
        4,
        20,
        n_envs=16,
        n_steps=128,
        batch_size=512,
        n_epochs=3,
        methods=("uniform", "plr", "plr_t1_s0.3"),
    ),
    # study round 4: a training set as a random level generator makes it, DoorKey-5x5 levels that are
    # trivial (agent above the goal) / normal / unsolvable (no key) by seed % 3: 20 of each kind in 0-59
    # and in the held-out 10000-10059. A held-out return of ~0.63 is the ceiling (20 levels return 0).
    "mixed": Task(
        "plr_gym/MiniGrid-DoorKeyMixed-v0",
        "minigrid",
        60,
        60,
        160_000,
        4,
        30,
        env_kwargs={"size": 5},
    ),
    # study round 4: doorkey5_full again, on held-out levels no earlier round used (20000-20099), for
    # uniform and the defaults only
    "doorkey5_full_r4": Task(
        "MiniGrid-DoorKey-5x5-v0",
        "minigrid",
        20,
        100,
        160_000,
        4,
        20,
        full_obs=True,
        methods=("uniform", "plr_t1_s0.3_u0.5"),
        test_level_start=20_000,
    ),
    # --quick: a tiny budget only to check that everything runs
    "quick": Task("MiniGrid-DoorKey-5x5-v0", "minigrid", 10, 10, 2048, 2, 5, n_envs=4, n_steps=128),
}

#: Level-sampler settings per method (PLRCallback scores with the sampler's strategy).
METHODS: dict[str, dict[str, Any]] = {
    "uniform": {"strategy": "random"},
    # the paper's Procgen defaults: L1 value loss, rank transform, beta=0.1, rho=0.1
    "plr": {
        "strategy": "value_l1",
        "score_transform": "rank",
        "temperature": 0.1,
        "staleness_coef": 0.1,
        "uniform_mass": 0.0,
    },
    "plr_s0.3": {
        "strategy": "value_l1",
        "score_transform": "rank",
        "temperature": 0.1,
        "staleness_coef": 0.3,
        "uniform_mass": 0.0,
    },
    # flatter replay distributions: rank^-(1/0.3) and rank^-1 instead of rank^-10
    "plr_t0.3_s0.3": {
        "strategy": "value_l1",
        "score_transform": "rank",
        "temperature": 0.3,
        "staleness_coef": 0.3,
        "uniform_mass": 0.0,
    },
    "plr_t1_s0.3": {
        "strategy": "value_l1",
        "score_transform": "rank",
        "temperature": 1.0,
        "staleness_coef": 0.3,
        "uniform_mass": 0.0,
    },
    # candidate default: rank^-1, rho=0.3, and half of every replay draw uniform over the levels
    "plr_t1_s0.3_u0.5": {
        "strategy": "value_l1",
        "score_transform": "rank",
        "temperature": 1.0,
        "staleness_coef": 0.3,
        "uniform_mass": 0.5,
    },
    # the candidate default with beta annealed 1 -> 0.1 over training (PLRCallback drives set_progress)
    "plr_anneal": {
        "strategy": "value_l1",
        "score_transform": "rank",
        "temperature": 1.0,
        "temperature_end": 0.1,
        "staleness_coef": 0.3,
        "uniform_mass": 0.5,
    },
    # Sampling For Learnability (Rutherford et al. 2024): P ∝ p(1-p) for half the draws, uniform for half
    "learnability_u0.5": {
        "strategy": "learnability",
        "score_transform": "power",
        "temperature": 1.0,
        "staleness_coef": 0.0,
        "uniform_mass": 0.5,
    },
}
DEFAULT_TASKS = ("doorkey5_full", "doorkey6", "bigfish")
DEFAULT_SEEDS = (0, 1, 2)


# --------------------------------------------------------------------------------------------------
# one training run (runs in a worker process)
# --------------------------------------------------------------------------------------------------
def run_one(task_name: str, task: Task, method: str, seed: int, path: Path) -> dict[str, Any]:
    """Train one (task, method, seed), evaluate at checkpoints, write the result JSON to ``path``."""
    from stable_baselines3.common.callbacks import BaseCallback, CallbackList

    from plr_gym import LevelSampler, PLRCallback
    from plr_gym.evaluation import evaluate_levels, summarize

    training.set_torch_threads(1)
    start = time.time()
    sampler = LevelSampler(levels=range(task.train_levels), seed=seed, **METHODS[method])
    # The training VecEnv is unseeded. SB3's VecEnv.seed(None) draws a random uint32 seed that the first
    # reset() passes to every env, and LevelWrapper plays an int seed as the level (it takes precedence
    # over the queued one): seeding the evaluation env with the first held-out level makes that first
    # reset play exactly the levels evaluate_levels queues.
    run = training.build_run(
        task.env_id,
        sampler,
        seed=seed,
        env_seed=None,
        eval_seed=task.test_level_start,
        n_envs=task.n_envs,
        eval_n_envs=8,
        env_kwargs=task.env_kwargs,
        full_obs=task.full_obs,
        hyperparameters=task.hyperparameters(),
        device="cpu",
        cnn_features_dim=256,  # Procgen's CNN; MiniGrid's raw 0..10 grid codes go to an unscaled MLP
    )
    eval_venv, model = run.eval_venv, run.model
    test_levels = range(task.test_level_start, task.test_level_start + task.test_levels)
    train_eval_levels = range(min(task.eval_train_levels, task.train_levels))
    curve: list[dict[str, Any]] = []
    visits = np.zeros(task.train_levels, dtype=np.int64)
    replay_fraction: list[float] = []

    class Checkpoints(BaseCallback):
        """Evaluate on held-out and training levels every ``total_steps / checkpoints`` steps."""

        def __init__(self) -> None:
            super().__init__()
            self.every = task.total_steps // task.checkpoints
            self.next_at = self.every
            self.samples = (0, 0)

        def evaluate(self) -> None:
            test = evaluate_levels(self.model, eval_venv, test_levels, deterministic=False)
            train = evaluate_levels(self.model, eval_venv, train_eval_levels, deterministic=False)
            point = {
                "steps": int(self.num_timesteps),
                "wall_s": round(time.time() - start, 1),
                "test": summarize(test, seed=seed),
                "train": summarize(train, seed=seed),
            }
            # per-level returns at every checkpoint: the area under the curve is paired by level
            # (runs before round 4 stored them at the last checkpoint only)
            point["test_returns"] = training.returns_to_json(test)
            curve.append(point)
            print(
                f"  [{task_name}/{method}/seed{seed}] {point['steps']:>8} steps {point['wall_s']:>6.0f}s "
                f"test {point['test']['mean']:.3f} train {point['train']['mean']:.3f}",
                flush=True,
            )

        def _on_rollout_start(self) -> None:
            self.samples = (sampler.num_replay_samples, sampler.num_explore_samples)

        def _on_rollout_end(self) -> None:
            replays = sampler.num_replay_samples - self.samples[0]
            started = replays + sampler.num_explore_samples - self.samples[1]
            if started:
                replay_fraction.append(replays / started)

        def _on_step(self) -> bool:
            for done, info in zip(self.locals["dones"], self.locals["infos"]):
                if done:
                    visits[int(info["level"])] += 1
            if self.num_timesteps >= self.next_at:
                self.next_at += self.every
                self.evaluate()
            return True

    checkpoints = Checkpoints()
    model.learn(task.total_steps, callback=CallbackList([PLRCallback(), checkpoints]))
    if not curve or curve[-1]["steps"] < task.total_steps:  # (the last rollout may overshoot a bit)
        checkpoints.evaluate()
    if "test_returns" not in curve[-1]:  # the final test returns are what the tables use
        final = evaluate_levels(model, eval_venv, test_levels, deterministic=False)
        curve[-1]["test_returns"] = training.returns_to_json(final)
    weights = sampler.sample_weights()
    nz = weights[weights > 0]
    order = np.sort(visits)[::-1]
    result = {
        "task": task_name,
        "method": method,
        "seed": seed,
        "task_config": asdict(task),
        "sampler_config": METHODS[method],
        "steps": int(model.num_timesteps),
        "wall_s": round(time.time() - start, 1),
        "curve": curve,
        "plr": {
            "replay_fraction_mean": float(np.mean(replay_fraction)) if replay_fraction else 0.0,
            "replay_fraction_last": float(replay_fraction[-1]) if replay_fraction else 0.0,
            "num_seen": int(sampler.num_seen),
            "scores_seen": sampler.scores[sampler.seen].round(5).tolist(),
            "weight_entropy": float(-(nz * np.log(nz)).sum()) if nz.size else 0.0,
            "weight_max": float(weights.max()),
            "episodes": int(visits.sum()),
            "visits": visits.tolist(),
            "visit_share_top5": float(order[:5].sum() / max(1, visits.sum())),
        },
    }
    run.close()
    training.write_json(path, result, indent=None, newline=False)  # atomic: never half-written
    return result


def _worker(job: tuple[str, Task, str, int, str]) -> tuple[str, str, int, float, str]:
    task_name, task, method, seed, path = job
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    try:
        result = run_one(task_name, task, method, seed, Path(path))
    except Exception as exc:  # report and continue with the other runs
        import traceback

        traceback.print_exc()
        return task_name, method, seed, -1.0, f"FAILED: {exc!r}"
    return task_name, method, seed, result["wall_s"], "ok"


# --------------------------------------------------------------------------------------------------
# reporting
# --------------------------------------------------------------------------------------------------
def run_path(out: Path, task: str, method: str, seed: int) -> Path:
    return out / "runs" / task / method / f"seed{seed}.json"


def load_runs(out: Path, task: str, method: str) -> list[dict[str, Any]]:
    folder = out / "runs" / task / method
    if not folder.is_dir():
        return []
    runs = [training.read_json(p) for p in sorted(folder.glob("seed*.json"))]
    for run in runs:
        # Runs written before a fix evaluated once more after the last checkpoint (the last rollout
        # overshoots total_steps by < 1 rollout): keep the checkpoints only, the last one has the returns.
        n = run["task_config"]["checkpoints"]
        if len(run["curve"]) > n and "test_returns" in run["curve"][n - 1]:
            run["curve"] = run["curve"][:n]
    return runs


def _per_level(runs: list[dict[str, Any]]) -> dict[int, list[float]]:
    """Held-out level -> final mean return of each run (seed)."""
    out: dict[int, list[float]] = {}
    for run in runs:
        for level, returns in run["curve"][-1]["test_returns"].items():
            out.setdefault(int(level), []).append(float(np.mean(returns)))
    return out


def seed_level_matrix(runs: list[dict[str, Any]], levels: list[int]) -> np.ndarray:
    """``(n_seeds, n_levels)`` final mean held-out return of each run (row) on each level (column)."""
    return np.array(
        [[float(np.mean(run["curve"][-1]["test_returns"][str(lvl)])) for lvl in levels] for run in runs]
    )


def auc_matrix(runs: list[dict[str, Any]], levels: list[int]) -> np.ndarray | None:
    """``(n_seeds, n_levels)`` area under each run's held-out learning curve on each level, or ``None``.

    The area is the plain mean, over the run's ``checkpoints`` evaluations (evenly spaced, the last at
    ``total_steps``: 40k, 80k, 120k and 160k steps for a 160k task with 4 checkpoints), of the level's
    held-out return at that evaluation (no step-0 point, no trapezoid weights). ``None`` when a run lacks
    per-level returns at some checkpoint (runs before round 4 stored them at the last checkpoint only).
    """
    rows = []
    for run in runs:
        points = run["curve"][: run["task_config"]["checkpoints"]]
        if len(points) < run["task_config"]["checkpoints"] or any("test_returns" not in p for p in points):
            return None
        rows.append(
            [float(np.mean([np.mean(p["test_returns"][str(lvl)]) for p in points])) for lvl in levels]
        )
    return np.array(rows)


def _fmt_ci(stats: dict[str, Any], key: str) -> str:
    lo, hi = stats[f"{key}_ci"]
    return f"{stats[key]:.3f} [{lo:.3f}, {hi:.3f}]"


def summarize_task(out: Path, task: str, methods: list[str]) -> list[dict[str, Any]]:
    """One row per method: held-out mean/IQM (CIs over level x seed), paired difference to uniform."""
    from plr_gym.evaluation import summarize
    from plr_gym.plotting import paired_difference, summarize_seeds

    base_runs = load_runs(out, task, "uniform")
    base = _per_level(base_runs)
    base_mean = {lvl: float(np.mean(v)) for lvl, v in base.items()}
    rows = []
    for method in methods:
        runs = load_runs(out, task, method)
        if not runs:
            continue
        per_level = _per_level(runs)
        levels = sorted(per_level)
        test = summarize_seeds(seed_level_matrix(runs, levels))
        test["level_ci"] = summarize([float(np.mean(per_level[lvl])) for lvl in levels])
        train = [run["curve"][-1]["train"]["mean"] for run in runs]
        row: dict[str, Any] = {
            "task": task,
            "method": method,
            "seeds": len(runs),
            "steps": runs[0]["curve"][-1]["steps"],  # the checkpoint the returns come from
            "test": test,
            "seed_means": [
                float(np.mean([np.mean(v) for v in run["curve"][-1]["test_returns"].values()]))
                for run in runs
            ],
            "train_mean": float(np.mean(train)),
            "replay_fraction": float(np.mean([r["plr"]["replay_fraction_mean"] for r in runs])),
            "levels_played": float(np.mean([np.count_nonzero(r["plr"]["visits"]) for r in runs])),
            "visit_share_top5": float(np.mean([r["plr"]["visit_share_top5"] for r in runs])),
            "weight_max": float(np.mean([r["plr"]["weight_max"] for r in runs])),
            "weight_perplexity": float(np.mean([np.exp(r["plr"]["weight_entropy"]) for r in runs])),
            "wall_s": float(np.mean([r["wall_s"] for r in runs])),
        }
        common = sorted(set(per_level) & set(base_mean))
        if base_mean and method != "uniform" and common:
            row["delta"] = paired_difference(
                seed_level_matrix(runs, common), seed_level_matrix(base_runs, common)
            )
            uniform_mean = float(np.mean([base_mean[lvl] for lvl in common]))
            row["normalized"] = (
                100.0 * float(np.mean([np.mean(per_level[lvl]) for lvl in common])) / uniform_mean
            )
        elif method == "uniform":
            row["normalized"] = 100.0
        auc = auc_matrix(runs, levels)
        if auc is not None:  # sample efficiency: area under the held-out curve, as the final return
            row["auc"] = summarize_seeds(auc)
            row["auc_seed_means"] = auc.mean(axis=1).tolist()
            base_auc = auc_matrix(base_runs, common) if common else None
            auc_common = auc_matrix(runs, common) if common else None
            if method != "uniform" and base_auc is not None and auc_common is not None:
                row["auc_delta"] = paired_difference(auc_common, base_auc)
        rows.append(row)
    return rows


def _verdict(delta: dict[str, Any]) -> str:
    lo, hi = delta["mean_ci"]
    return "**worse**" if hi < 0 else ("**better**" if lo > 0 else "tie")


def print_auc_table(rows: list[dict[str, Any]]) -> None:
    """Sample efficiency: area under the held-out curve (:func:`auc_matrix`); CIs and Δ as for the final
    return (stratified bootstrap over seeds and levels, Δ paired by level)."""
    rows = [r for r in rows if "auc" in r]
    if not rows:
        return
    print(
        "\n| task | method | seeds | held-out AUC mean [95% CI] | held-out AUC IQM [95% CI] | "
        "Δ AUC vs uniform [95% CI] | seed AUCs |"
    )
    print("|" + " --- |" * 7)
    for r in rows:
        delta = f"{_fmt_ci(r['auc_delta'], 'mean')} {_verdict(r['auc_delta'])}" if "auc_delta" in r else "—"
        seeds = " ".join(f"{m:.2f}" for m in r["auc_seed_means"])
        print(
            f"| {r['task']} | {r['method']} | {r['seeds']} | {_fmt_ci(r['auc'], 'mean')} | "
            f"{_fmt_ci(r['auc'], 'iqm')} | {delta} | {seeds} |"
        )


def print_kind_table(out: Path, task: str, methods: list[str]) -> None:
    """DoorKeyMixed tasks: final held-out mean per level kind (``seed % 3``), over seeds (descriptive)."""
    if "DoorKeyMixed" not in TASKS[task].env_id:
        return
    from plr_gym.envs.gamut import MIXED_KINDS

    print("\n| task | method | " + " | ".join(f"held-out {k}" for k in MIXED_KINDS) + " |")
    print("|" + " --- |" * (2 + len(MIXED_KINDS)))
    for method in methods:
        per_level = _per_level(load_runs(out, task, method))
        if not per_level:
            continue
        cells = []
        for i in range(len(MIXED_KINDS)):
            vals = [np.mean(v) for lvl, v in per_level.items() if lvl % 3 == i]
            cells.append(f"{np.mean(vals):.3f}" if vals else "—")
        print(f"| {task} | {method} | " + " | ".join(cells) + " |")


def print_table(rows: list[dict[str, Any]]) -> None:
    """Held-out return per method, then what the sampler did (averaged over seeds)."""
    print(
        "| task | method | seeds | steps | held-out mean [95% CI] | held-out IQM [95% CI] | "
        "norm. (uniform=100) | Δ mean vs uniform [95% CI] | train-level mean | seed means |"
    )
    print("|" + " --- |" * 10)
    for r in rows:
        delta = _fmt_ci(r["delta"], "mean") if "delta" in r else "—"
        if "delta" in r:
            lo, hi = r["delta"]["mean_ci"]
            delta += " **worse**" if hi < 0 else (" **better**" if lo > 0 else " tie")
        norm = f"{r['normalized']:.0f}" if "normalized" in r else "—"
        seeds = " ".join(f"{m:.2f}" for m in r["seed_means"])
        print(
            f"| {r['task']} | {r['method']} | {r['seeds']} | {r['steps']:,} | {_fmt_ci(r['test'], 'mean')} | "
            f"{_fmt_ci(r['test'], 'iqm')} | {norm} | {delta} | {r['train_mean']:.3f} | {seeds} |"
        )
    print(
        "\n| task | method | replay fraction | levels played | top-5 levels' share of episodes | "
        "final max replay weight | final exp(entropy) of replay weights |"
    )
    print("|" + " --- |" * 7)
    for r in rows:
        print(
            f"| {r['task']} | {r['method']} | {r['replay_fraction']:.2f} | {r['levels_played']:.0f} | "
            f"{r['visit_share_top5']:.2f} | {r['weight_max']:.2f} | {r['weight_perplexity']:.1f} |"
        )


def print_curve_table(out: Path, task: str, methods: list[str]) -> None:
    """Held-out mean return at each checkpoint, averaged over seeds (± s.e. over seeds)."""
    cols: dict[str, dict[int, list[float]]] = {}
    for method in methods:
        for run in load_runs(out, task, method):
            for point in run["curve"]:
                cols.setdefault(method, {}).setdefault(point["steps"], []).append(point["test"]["mean"])
    if not cols:
        return
    steps = sorted({s for col in cols.values() for s in col})
    print("\n| steps | " + " | ".join(cols) + " |")
    print("|" + " --- |" * (len(cols) + 1))
    for s in steps:
        cells = []
        for col in cols.values():
            v = np.asarray(col.get(s, []))
            se = v.std(ddof=1) / np.sqrt(v.size) if v.size > 1 else float("nan")
            cells.append(f"{v.mean():.3f} ± {se:.3f} (n={v.size})" if v.size else "—")
        print(f"| {s:,} | " + " | ".join(cells) + " |")
    # area under the learning curve: mean over the checkpoints of each run, then over seeds
    cells = []
    for col in cols.values():
        n = min(len(v) for v in col.values())
        per_seed = np.mean([col[s][:n] for s in steps if s in col and len(col[s]) >= n], axis=0)
        se = per_seed.std(ddof=1) / np.sqrt(per_seed.size) if per_seed.size > 1 else float("nan")
        cells.append(f"{per_seed.mean():.3f} ± {se:.3f}")
    print("| mean over checkpoints | " + " | ".join(cells) + " |")


def plot_curves(out: Path, task: str, methods: list[str]) -> Path | None:
    """Held-out (solid) and training-level (dashed) mean return vs steps; band = ±1 s.e. over seeds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    drawn = False
    for k, method in enumerate(methods):
        runs = load_runs(out, task, method)
        if not runs:
            continue
        n = min(len(r["curve"]) for r in runs)
        steps = np.array([runs[0]["curve"][i]["steps"] for i in range(n)])
        color = f"C{k}"
        for part, style in (("test", "-"), ("train", "--")):
            vals = np.array([[r["curve"][i][part]["mean"] for i in range(n)] for r in runs])
            mean = vals.mean(axis=0)
            label = f"{method} ({len(runs)} seeds)" if part == "test" else None
            ax.plot(steps, mean, style, color=color, label=label, marker="o" if part == "test" else None)
            if part == "test" and len(runs) > 1:
                se = vals.std(axis=0, ddof=1) / np.sqrt(len(runs))
                ax.fill_between(steps, mean - se, mean + se, color=color, alpha=0.2)
        drawn = True
    if not drawn:
        plt.close(fig)
        return None
    ax.set_xlabel("training steps")
    ax.set_ylabel("mean episodic return")
    ax.set_title(f"{task}: held-out levels (solid), training levels (dashed)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    path = out / f"curve_{task}.png"
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_deltas(out: Path, rows: list[dict[str, Any]]) -> Path | None:
    """Forest plot: paired Δ held-out mean return vs uniform, 95% CI, one panel per task."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = list(dict.fromkeys(r["task"] for r in rows if "delta" in r))
    if not tasks:
        return None
    # at least 7 inches wide: the title is one line, as wide as a single panel of 4.2 inches is not
    width = max(7.0, 4.2 * len(tasks))
    fig, axes = plt.subplots(1, len(tasks), figsize=(width, 3.2), sharey=True, squeeze=False)
    for ax, task in zip(axes[0], tasks):
        task_rows = [r for r in rows if r["task"] == task and "delta" in r]
        for k, r in enumerate(task_rows):
            d = r["delta"]
            lo, hi = d["mean_ci"]
            color = "C3" if hi < 0 else ("C2" if lo > 0 else "C0")
            ax.errorbar(
                d["mean"], k, xerr=[[d["mean"] - lo], [hi - d["mean"]]], fmt="o", color=color, capsize=4
            )
        ax.axvline(0.0, color="k", lw=0.8)
        ax.set_yticks(range(len(task_rows)))
        ax.set_yticklabels([f"{r['method']} ({r['seeds']})" for r in task_rows], fontsize=8)
        ax.set_title(task, fontsize=10)
        ax.set_xlabel("Δ held-out mean return vs uniform")
        ax.grid(axis="x", alpha=0.3)
    fig.suptitle(
        "Paired difference to uniform (95% CI over seeds × levels; red: worse, green: better)", fontsize=9
    )
    fig.tight_layout()
    path = out / "delta_vs_uniform.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_summary(out: Path, rows: list[dict[str, Any]]) -> None:
    training.write_json(out / "summary.json", rows, indent=1, newline=False)
    header = ["task", "method", "seeds", "steps", "test_mean", "test_mean_lo", "test_mean_hi", "test_iqm",
              "test_iqm_lo", "test_iqm_hi", "normalized", "delta_mean", "delta_lo", "delta_hi", "train_mean",
              "replay_fraction", "levels_played", "visit_share_top5", "seed_means", "auc_mean", "auc_lo",
              "auc_hi", "auc_iqm", "auc_delta_mean", "auc_delta_lo", "auc_delta_hi"]  # fmt: skip
    lines = []
    for r in rows:
        t, d = r["test"], r.get("delta")
        delta = [d["mean"], *d["mean_ci"]] if d else ["", "", ""]
        seed_means = " ".join(f"{m:.3f}" for m in r["seed_means"])
        a, ad = r.get("auc"), r.get("auc_delta")
        auc = [a["mean"], *a["mean_ci"], a["iqm"]] if a else ["", "", "", ""]
        auc += [ad["mean"], *ad["mean_ci"]] if ad else ["", "", ""]
        lines.append(
            [r["task"], r["method"], r["seeds"], r["steps"], t["mean"], *t["mean_ci"], t["iqm"],
             *t["iqm_ci"], r.get("normalized", ""), *delta, r["train_mean"], r["replay_fraction"],
             r["levels_played"], r["visit_share_top5"], seed_means, *auc]
        )  # fmt: skip
    training.write_csv(out / "summary.csv", header, lines)


# --------------------------------------------------------------------------------------------------
# provenance
# --------------------------------------------------------------------------------------------------


def print_provenance(argv: list[str]) -> None:
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    print(f"- command: `python benchmarks/learning/learning.py {' '.join(argv)}`".replace(" `", " `", 1))
    print(f"- commit: {git_commit()}")
    print(f"- machine: {cpu_model()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    print(f"- date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}")
    print(f"- load average: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


# --------------------------------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------------------------------
def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks", nargs="+", choices=sorted(TASKS), default=list(DEFAULT_TASKS))
    p.add_argument("--methods", nargs="+", choices=list(METHODS), default=list(METHODS))
    p.add_argument("--seeds", nargs="+", type=int, default=list(DEFAULT_SEEDS))
    p.add_argument("--jobs", type=int, default=1, help="training processes at once (default 1)")
    p.add_argument("--out", type=Path, default=None, help=f"results directory (default {DEFAULT_OUT})")
    p.add_argument("--report-only", action="store_true", help="only print tables / plots from saved runs")
    p.add_argument("--quick", action="store_true", help="smoke test: tiny budget, 1 seed, < 60 s")
    args = p.parse_args(argv)
    if args.quick:
        args.tasks, args.methods, args.seeds = ["quick"], ["uniform", "plr"], [0]
        if args.out is None:
            args.out = Path(tempfile.mkdtemp(prefix="plr_learning_quick_"))
    if args.out is None:
        args.out = DEFAULT_OUT
    if args.jobs < 1:
        p.error("--jobs must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    print_provenance(argv)
    # seed-major order: the first seed of every (task, method) finishes before any second seed
    jobs = [
        (task, TASKS[task], method, seed, str(run_path(out, task, method, seed)))
        for seed in args.seeds
        for task in args.tasks
        for method in args.methods
        if TASKS[task].methods is None or method in TASKS[task].methods
    ]
    todo = [j for j in jobs if not Path(j[4]).exists()]
    if not args.report_only:
        print(
            f"- runs: {len(jobs)} ({len(jobs) - len(todo)} already finished), jobs: {args.jobs}\n", flush=True
        )
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        if args.jobs == 1 or len(todo) <= 1:
            results = [_worker(j) for j in todo]
        else:
            with mp.get_context("spawn").Pool(args.jobs, maxtasksperchild=1) as pool:
                results = []
                for res in pool.imap_unordered(_worker, todo):
                    print(f"  done {res[0]}/{res[1]}/seed{res[2]}: {res[4]} ({res[3]:.0f} s)", flush=True)
                    results.append(res)
        failed = [r for r in results if r[4] != "ok"]
    else:
        failed = []
    all_rows = []
    for task in args.tasks:
        rows = summarize_task(out, task, args.methods)
        if not rows:
            continue
        t = TASKS[task]
        print(
            f"\n### {task}: {t.env_id}, {t.train_levels} training levels, {t.test_levels} held-out levels "
            f"({t.test_level_start}+), {t.total_steps:,} steps\n"
        )
        print_table(rows)
        print_auc_table(rows)
        print_kind_table(out, task, args.methods)
        print_curve_table(out, task, args.methods)
        plot = plot_curves(out, task, args.methods)
        if plot is not None:
            print(f"\nlearning curves: {plot}")
        all_rows.extend(rows)
    write_summary(out, all_rows)
    if all_rows:
        deltas = plot_deltas(out, all_rows)
        if deltas is not None:
            print(f"paired differences: {deltas}")
    print(f"\nresults: {out}")
    if failed:
        print(f"{len(failed)} run(s) failed: {failed}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
