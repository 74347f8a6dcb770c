"""What PLR costs in a fully jitted PPO loop: examples/jax_ppo_plr.py's training step, with and without it.

Both variants are the example's own ``make_train`` (navix DoorKey-Random-5x5, 8 envs × 256 steps per update
per seed, 4 epochs of 4 minibatches, ``vmap`` over seeds, one ``jit``), without the held-out evaluation
(``num_eval_levels=0``): ``uniform`` draws each new episode's level with ``jax.random.randint`` (no scorer,
no sampler); the PLR arm scores every rollout (``EpisodeScorer.process_rollout``), updates the sampler
(``LevelSampler.update``) and draws each new episode's level with ``LevelSampler.sample(mask=done)``.
Each variant is compiled once, then timed in interleaved rounds (the order alternates every round); the
ratio of each round's PLR time to its uniform time is the cost.

    python benchmarks/jax/jax_ppo_plr_cost.py [--levels 20 200] [--arm defaults] [--rounds 7] [--quick]
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--levels", type=int, nargs="+", default=[20, 200])
    parser.add_argument("--arm", default="defaults", choices=[a for a in example.ARMS if a != "uniform"])
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--updates", type=int, default=10, help="PPO updates per timed call")
    parser.add_argument("--rounds", type=int, default=7)
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
        for r in range(args.rounds):
            order = list(variants) if r % 2 == 0 else list(variants)[::-1]
            for arm in order:
                fn, keys = variants[arm]
                t = time.perf_counter()
                jax.block_until_ready(fn(keys + r))
                times[arm].append(time.perf_counter() - t)
        ratios = [p / u for p, u in zip(times[args.arm], times["uniform"])]
        for arm, ts in times.items():
            print(
                f"{n} levels, {arm}: median {statistics.median(ts):.3f} s per call ({steps:,} env steps), "
                f"{steps / statistics.median(ts):,.0f} steps/s; rounds {[round(t, 3) for t in ts]}"
            )
        print(
            f"{n} levels: {args.arm} / uniform = {statistics.median(ratios):.3f} (median of {len(ratios)} "
            f"interleaved rounds; range {min(ratios):.3f}-{max(ratios):.3f})"
        )
    print(f"load after {load_average()}")


if __name__ == "__main__":
    main()
