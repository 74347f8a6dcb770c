"""What PLR costs in a fully jitted PPO loop: examples/jax_ppo_plr.py's training step, with and without it.

Both variants are the example's own ``make_train`` (navix DoorKey-Random-5x5, 8 envs × 256 steps per update
per seed, 4 epochs of 4 minibatches, ``vmap`` over seeds, one ``jit``), without the held-out evaluation
(``num_eval_levels=0``): ``uniform`` draws each new episode's level with ``jax.random.randint`` (no scorer,
no sampler); the PLR arm scores every rollout (``EpisodeScorer.process_rollout``), updates the sampler
(``LevelSampler.update``) and draws each new episode's level with ``LevelSampler.sample(mask=done)``.
Each variant is compiled once, then timed in interleaved rounds (the order alternates every round) by the
CPU time of this process (``time.process_time``: every thread's, so other jobs on a shared machine count
less than in wall time; the wall time is printed too); the ratio of each round's PLR time to its uniform
time is the cost, reported as the median of the rounds and its quartiles.

    python benchmarks/jax/jax_ppo_plr_cost.py [--levels 200 10000 100000] [--rounds 11] [--quick]
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))  # benchmarks/common: _provenance

import jax
import jax.numpy as jnp

from _provenance import cpu_model, git_commit, load_average

_spec = importlib.util.spec_from_file_location(
    "jax_ppo_plr", Path(__file__).resolve().parents[2] / "examples" / "jax_ppo_plr.py"
)
assert _spec is not None and _spec.loader is not None
example: Any = importlib.util.module_from_spec(_spec)
sys.modules["jax_ppo_plr"] = example  # dataclasses look their module up
_spec.loader.exec_module(example)


def compiled(config: Any, seeds: int) -> tuple[Any, Any]:
    train = jax.jit(jax.vmap(example.make_train(config)))
    keys = jax.vmap(jax.random.PRNGKey)(jnp.arange(seeds))
    return train.lower(keys).compile(), keys


def quartiles(values: list[float]) -> tuple[float, float, float]:
    """First quartile, median, third quartile (``statistics.quantiles``' inclusive method)."""
    if len(values) < 2:
        return values[0], values[0], values[0]
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q2, q3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--levels", type=int, nargs="+", default=[200, 10_000, 100_000])
    parser.add_argument("--arm", default="defaults", choices=[a for a in example.ARMS if a != "uniform"])
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--updates", type=int, default=10, help="PPO updates per timed call")
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--quick", action="store_true", help="2 seeds, 1 update, 2 rounds, 200 levels")
    args = parser.parse_args()
    if args.quick:
        args.levels, args.seeds, args.updates, args.rounds = [200], 2, 1, 2
    print(f"commit {git_commit()}, {cpu_model()}, load before {load_average()}, JAX {jax.__version__}")
    for n in args.levels:
        variants = {}
        for arm in ("uniform", args.arm):
            config = example.Config(
                arm=arm, num_levels=n, num_eval_levels=0, updates_per_eval=args.updates, num_evals=1
            )
            t = time.perf_counter()
            variants[arm] = compiled(config, args.seeds)
            print(f"{n} levels, {arm}: compiled in {time.perf_counter() - t:.1f} s")
        steps = args.seeds * args.updates * config.num_envs * config.num_steps
        times: dict[str, list[float]] = {arm: [] for arm in variants}
        walls: dict[str, list[float]] = {arm: [] for arm in variants}
        for r in range(args.rounds):
            order = list(variants) if r % 2 == 0 else list(variants)[::-1]
            for arm in order:
                fn, keys = variants[arm]
                t, w = time.process_time(), time.perf_counter()
                jax.block_until_ready(fn(keys + r))
                times[arm].append(time.process_time() - t)
                walls[arm].append(time.perf_counter() - w)
        ratios = [p / u for p, u in zip(times[args.arm], times["uniform"])]
        for arm, ts in times.items():
            print(
                f"{n} levels, {arm}: median {statistics.median(ts):.3f} s CPU per call ({steps:,} env steps; "
                f"wall {statistics.median(walls[arm]):.3f} s); CPU per round {[round(t, 3) for t in ts]}"
            )
        q1, q2, q3 = quartiles(ratios)
        print(
            f"{n} levels: {args.arm} / uniform CPU time = {q2:.3f} [{q1:.3f}, {q3:.3f}] (median [quartiles] "
            f"of {len(ratios)} interleaved rounds; range {min(ratios):.3f}-{max(ratios):.3f}); "
            f"load now {load_average()}"
        )
    print(f"load after {load_average()}")


if __name__ == "__main__":
    main()
