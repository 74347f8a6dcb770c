"""Does prioritized replay speed up learning? Two experiments.

1. **Blind Cliffwalk** (Schaul et al. 2015, Fig. 1 and Fig. 2): ``n`` states in a row, two actions. The
   "right" action moves to the next state (from the last state it ends the episode with reward 1); the
   "wrong" action ends the episode with reward 0. The replay memory holds the transitions of all ``2^n``
   action sequences of a random policy, each run until the episode ends: ``M = 2^(n+1) - 2``
   transitions, of which exactly one is rewarding. Tabular Q-learning (discount ``γ = 1 − 1/n``, step
   size ``η``, Q-table initialised ``N(0, 0.1²)`` per seed) replays one transition per update until the
   mean squared error of the Q-table to the true ``Q*`` is below ``--threshold``; we count updates.

   - ``uniform``: each update replays a transition drawn uniformly from the memory;
   - ``PER α=…``: proportional prioritized replay through :class:`plr_gym.replay.SumTree` (the sum tree
     of :class:`~plr_gym.replay.PrioritizedReplayBuffer`): every stored transition starts at the maximal
     priority 1 (never replayed), is drawn with probability ``p_i^α / Σ p^α`` and gets priority
     ``|δ| + 1e-6`` after its update. As in the paper's tabular illustration, no importance weights;
     only the replayed slot's priority changes (duplicates keep stale priorities);
   - ``oracle``: greedily replays the transition whose update lowers the global loss most (in hindsight).

   The table gives the median (min–max) number of updates over seeds; the PNG plots them against
   ``M`` (log-log), like the paper's figure.

2. **PERDQN vs DQN on CartPole-v1** (``--cartpole``): rl-zoo's tuned DQN hyper-parameters for both
   (PERDQN with PER's defaults α=0.6, β 0.4→1), several seeds, the mean return of 20 deterministic
   evaluation episodes at the end and every ``--eval-every`` steps, summarised with bootstrap 95% CIs
   (:func:`plr_gym.evaluation.summarize`).

Usage::

    python benchmarks/replay/per_learning.py --quick          # n = 2..10, 3 seeds (seconds)
    python benchmarks/replay/per_learning.py                  # n = 2..16, 5 seeds (minutes), PNG in results/
    python benchmarks/replay/per_learning.py --cartpole --seeds 3   # PERDQN vs DQN (tens of minutes)
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))  # benchmarks/common: _provenance
from _provenance import git_commit

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))  # benchmark the library in this checkout

from plr_gym.replay import SumTree  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
METHODS = ("uniform", "PER α=0.6", "PER α=1", "oracle")


# --------------------------------------------------------------------------------------------------
# Blind Cliffwalk
# --------------------------------------------------------------------------------------------------
class Cliffwalk:
    """The ``2n`` distinct transitions (id ``2s + a``, ``a = 1`` right) and the replay memory.

    :param n: number of states
    """

    def __init__(self, n: int) -> None:
        self.n = n
        self.gamma = 1.0 - 1.0 / n
        states = np.repeat(np.arange(n), 2)
        actions = np.tile([0, 1], n)
        self.rewards = ((states == n - 1) & (actions == 1)).astype(np.float64).tolist()
        # next state (-1: the episode ends)
        self.next_state = np.where((actions == 1) & (states < n - 1), states + 1, -1).tolist()
        self.q_star = np.where(actions == 1, self.gamma ** (n - 1 - states), 0.0).tolist()
        # Of the 2^n action sequences, 2^(n-1-s) reach state s and then take a given action there.
        counts = 2 ** (n - 1 - states)
        self.memory = np.repeat(np.arange(2 * n), counts)
        assert self.memory.size == 2 ** (n + 1) - 2


def cliffwalk_updates(
    world: Cliffwalk,
    method: str,
    seed: int,
    eta: float,
    threshold: float,
    max_updates: int,
) -> int:
    """Updates until ``mean((Q − Q*)²) <= threshold`` (``max_updates`` if never)."""
    rng = np.random.default_rng(seed)
    m = 2 * world.n
    q = rng.normal(0.0, 0.1, m).tolist()
    q_star, rewards, nxt, gamma = world.q_star, world.rewards, world.next_state, world.gamma
    sse = sum((q[i] - q_star[i]) ** 2 for i in range(m))
    target = threshold * m

    def td(i: int) -> float:
        j = nxt[i]
        boot = gamma * max(q[2 * j], q[2 * j + 1]) if j >= 0 else 0.0
        return float(rewards[i] + boot - q[i])

    def apply(i: int, delta: float) -> None:
        nonlocal sse
        old = q[i]
        q[i] = old + eta * delta
        sse += (q[i] - q_star[i]) ** 2 - (old - q_star[i]) ** 2

    updates = 0
    if method == "uniform":
        memory = world.memory.tolist()
        while sse > target and updates < max_updates:
            for k in rng.integers(0, len(memory), size=4096).tolist():
                i = memory[k]
                apply(i, td(i))
                updates += 1
                if sse <= target or updates >= max_updates:
                    break
    elif method == "oracle":
        while sse > target and updates < max_updates:
            best, best_gain, best_delta = 0, -np.inf, 0.0
            for i in range(m):
                delta = td(i)
                new = q[i] + eta * delta
                gain = (q[i] - q_star[i]) ** 2 - (new - q_star[i]) ** 2
                if gain > best_gain:
                    best, best_gain, best_delta = i, gain, delta
            apply(best, best_delta)
            updates += 1
    elif method.startswith("PER"):
        alpha = float(method.split("=")[1])
        size = world.memory.size
        tree = SumTree(size)
        tree.build(np.ones(size))  # new transitions: maximal priority 1
        memory = world.memory
        while sse > target and updates < max_updates:
            slot = int(tree.find([rng.random() * tree.total])[0])
            i = int(memory[slot])
            delta = td(i)
            apply(i, delta)
            updates += 1
            tree.update([slot], [(abs(delta) + 1e-6) ** alpha])
    else:
        raise ValueError(f"unknown method {method!r}")
    return updates


def run_cliffwalk(sizes: list[int], seeds: int, eta: float, threshold: float) -> dict[str, Any]:
    results: dict[str, dict[int, list[int]]] = {method: {} for method in METHODS}
    seconds: dict[str, float] = dict.fromkeys(METHODS, 0.0)
    for n in sizes:
        world = Cliffwalk(n)
        for method in METHODS:
            start = time.perf_counter()
            results[method][n] = [
                cliffwalk_updates(world, method, seed, eta, threshold, max_updates=10**9)
                for seed in range(seeds)
            ]
            seconds[method] += time.perf_counter() - start
    return {"updates": results, "seconds": seconds}


def cliffwalk_table(sizes: list[int], out: dict[str, Any]) -> list[str]:
    res = out["updates"]
    lines = [
        "| n | memory M | " + " | ".join(METHODS) + " | uniform / PER α=0.6 | uniform / PER α=1 |",
        "|---|---|" + "---|" * len(METHODS) + "---|---|",
    ]
    for n in sizes:
        cells = []
        for method in METHODS:
            u = res[method][n]
            cells.append(f"{int(np.median(u)):,} ({min(u):,}–{max(u):,})")
        uni = np.median(res["uniform"][n])
        ratios = [f"{uni / np.median(res[p][n]):.1f}×" for p in ("PER α=0.6", "PER α=1")]
        lines.append(
            f"| {n} | {2 ** (n + 1) - 2:,} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |"
        )
    return lines


def cliffwalk_plot(sizes: list[int], out: dict[str, Any], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    res = out["updates"]
    memory = [2 ** (n + 1) - 2 for n in sizes]
    fig, ax = plt.subplots(figsize=(6, 4.5))
    colors = {"uniform": "black", "PER α=0.6": "tab:red", "PER α=1": "tab:blue", "oracle": "tab:cyan"}
    for method in METHODS:
        med = [np.median(res[method][n]) for n in sizes]
        lo = [min(res[method][n]) for n in sizes]
        hi = [max(res[method][n]) for n in sizes]
        ax.plot(memory, med, "o-", color=colors[method], label=method)
        ax.fill_between(memory, lo, hi, color=colors[method], alpha=0.15)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("transitions in replay memory")
    ax.set_ylabel("updates until MSE(Q, Q*) below threshold")
    ax.set_title(title, fontsize=10)
    ax.legend()
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


# --------------------------------------------------------------------------------------------------
# PERDQN vs DQN on CartPole
# --------------------------------------------------------------------------------------------------
# rl-baselines3-zoo's tuned DQN hyper-parameters for CartPole-v1.
ZOO_DQN: dict[str, Any] = dict(
    learning_rate=2.3e-3,
    batch_size=64,
    buffer_size=100_000,
    learning_starts=1000,
    gamma=0.99,
    target_update_interval=10,
    train_freq=256,
    gradient_steps=128,
    exploration_fraction=0.16,
    exploration_final_eps=0.04,
    policy_kwargs=dict(net_arch=[256, 256]),
)


def run_cartpole(seeds: int, steps: int, eval_every: int) -> dict[str, Any]:
    import torch as th
    from stable_baselines3 import DQN
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.monitor import Monitor

    from plr_gym.replay import PERDQN

    th.set_num_threads(1)
    import gymnasium as gym

    class Evaluate(BaseCallback):
        def __init__(self, seed: int) -> None:
            super().__init__()
            self.curve: list[tuple[int, float]] = []
            self.env = Monitor(gym.make("CartPole-v1"))
            self.env.reset(seed=10_000 + seed)

        def _on_step(self) -> bool:
            if self.num_timesteps % eval_every == 0:
                mean, _ = evaluate_policy(self.model, self.env, n_eval_episodes=20, deterministic=True)
                self.curve.append((self.num_timesteps, float(np.mean(mean))))
            return True

    out: dict[str, Any] = {"DQN": [], "PERDQN": []}
    for seed in range(seeds):  # interleaved, so an interrupted run still compares like with like
        for name, cls in (("DQN", DQN), ("PERDQN", PERDQN)):
            start = time.perf_counter()
            model = cls("MlpPolicy", "CartPole-v1", seed=seed, device="cpu", **ZOO_DQN)
            callback = Evaluate(seed)
            model.learn(steps, callback=callback)
            out[name].append({"curve": callback.curve, "seconds": time.perf_counter() - start})
            print(
                f"  {name} seed {seed}: final {callback.curve[-1][1]:.1f} "
                f"({out[name][-1]['seconds']:.0f} s), "
                f"curve {[round(v) for _, v in callback.curve]}",
                flush=True,
            )
    return out


def cartpole_table(out: dict[str, Any]) -> list[str]:
    from plr_gym.evaluation import summarize

    lines = [
        "| algorithm | seeds | final return, mean [95% CI] "
        "| mean over evaluations (AUC), mean [95% CI] | s/run |",
        "|---|---|---|---|---|",
    ]
    for name, runs in out.items():
        final = [r["curve"][-1][1] for r in runs]
        auc = [float(np.mean([v for _, v in r["curve"]])) for r in runs]
        f, a = summarize(final), summarize(auc)
        secs = np.mean([r["seconds"] for r in runs])
        lines.append(
            f"| {name} | {len(runs)} | {f['mean']:.1f} [{f['mean_ci'][0]:.1f}, {f['mean_ci'][1]:.1f}] | "
            f"{a['mean']:.1f} [{a['mean_ci'][0]:.1f}, {a['mean_ci'][1]:.1f}] | {secs:.0f} |"
        )
    return lines


# --------------------------------------------------------------------------------------------------


def header() -> list[str]:
    try:
        load = "/".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        load = "n/a"
    return [
        f"- command: `{shlex.join(['python', *sys.argv])}`",
        f"- commit: {git_commit()}",
        f"- date: {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- machine: {platform.machine()}, {os.cpu_count()} logical cores, "
        f"python {platform.python_version()}, numpy {np.__version__}",
        f"- load average at start: {load} (1/5/15 min)",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="n = 2..10, 3 seeds, no PNG unless --png")
    parser.add_argument("--sizes", default=None, help="comma-separated n (default 2..16)")
    parser.add_argument("--seeds", type=int, default=None, help="seeds per cell (default 5; quick 3)")
    parser.add_argument("--eta", type=float, default=0.25, help="Q-learning step size")
    parser.add_argument("--threshold", type=float, default=1e-3, help="MSE to Q* that counts as learned")
    parser.add_argument("--png", default=None, help="PNG path (default results/per_cliffwalk.png)")
    parser.add_argument("--cartpole", action="store_true", help="run PERDQN vs DQN on CartPole-v1 instead")
    parser.add_argument("--steps", type=int, default=50_000, help="CartPole: training steps per run")
    parser.add_argument("--eval-every", type=int, default=5_000, help="CartPole: evaluation interval")
    args = parser.parse_args(argv)

    print("\n".join(header()))
    if args.cartpole:
        seeds = args.seeds or 3
        print(
            f"\nPERDQN vs DQN on CartPole-v1, {args.steps:,} steps, {seeds} seeds, rl-zoo hyper-parameters\n"
        )
        out = run_cartpole(seeds, args.steps, args.eval_every)
        print()
        print("\n".join(cartpole_table(out)))
        for name, runs in out.items():
            steps = [s for s, _ in runs[0]["curve"]]
            means = np.mean([[v for _, v in r["curve"]] for r in runs], axis=0)
            print(
                f"{name} curve (mean over seeds): "
                + ", ".join(f"{s // 1000}k: {m:.0f}" for s, m in zip(steps, means))
            )
        return 0

    sizes = (
        [int(s) for s in args.sizes.split(",")]
        if args.sizes
        else list(range(2, 11) if args.quick else range(2, 17))
    )
    seeds = args.seeds or (3 if args.quick else 5)
    print(
        f"\nBlind Cliffwalk: updates until MSE(Q, Q*) <= {args.threshold:g}; tabular Q-learning, step size "
        f"{args.eta:g}, γ = 1 − 1/n, Q0 ~ N(0, 0.1²); median (min–max) over {seeds} seeds\n"
    )
    start = time.perf_counter()
    out = run_cliffwalk(sizes, seeds, args.eta, args.threshold)
    print("\n".join(cliffwalk_table(sizes, out)))
    secs = ", ".join(f"{m} {s:.1f} s" for m, s in out["seconds"].items())
    print(f"\nwall time {time.perf_counter() - start:.1f} s ({secs})")
    if args.png or not args.quick:
        path = Path(args.png) if args.png else RESULTS / "per_cliffwalk.png"
        cliffwalk_plot(
            sizes,
            out,
            path,
            f"Blind Cliffwalk, tabular Q-learning (η={args.eta:g}), median and min–max of {seeds} seeds",
        )
        print(f"plot: {path}")
    # Acceptance: PER needs >= 10x fewer updates than uniform from n = 10 on.
    failed = [
        n
        for n in sizes
        if n >= 10 and np.median(out["updates"]["uniform"][n]) < 10 * np.median(out["updates"]["PER α=1"][n])
    ]
    print(
        "PER α=1 needs >= 10x fewer updates than uniform for every n >= 10: "
        + ("yes" if not failed else f"NO (n = {failed})")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
