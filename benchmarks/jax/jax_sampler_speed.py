"""What plr_gym.jax costs inside a jitted training loop: one PPO update's sampler work, timed.

A PPO update on ``E`` envs with PLR does, per update: score the rollout (``EpisodeScorer.process_rollout``
on ``(T, E)`` arrays), record the scores (``LevelSampler.update``) and draw the next ``E`` levels
(``LevelSampler.sample``). This script times exactly that, jitted and run ``--updates`` times inside one
``lax.scan``, against the same scan doing only a stand-in for the env steps (a ``(T, E)`` random array),
at 20 and 200 levels; and, for Robust PLR / ACCEL, ``insert_batch`` + ``sample_replay_levels`` at a
capacity of 4,000 (JaxUED's maze default) through JaxUED's interface: plr_gym's drop-in, and JaxUED's own
sampler where it is installed.

    python benchmarks/jax/jax_sampler_speed.py [--quick]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))  # benchmarks/common: _provenance

import jax
import jax.numpy as jnp

from _provenance import cpu_model, git_commit, load_average
from plr_gym.jax import EpisodeScorer, LevelSampler
from plr_gym.jax.jaxued import LevelSampler as JaxUEDLevelSampler


def _timed(fn: Callable[[Any], Any], arg: Any, rounds: int) -> float:
    """Best wall time of ``rounds`` calls (compiled first)."""
    jax.block_until_ready(fn(arg))
    best = float("inf")
    for _ in range(rounds):
        t = time.perf_counter()
        jax.block_until_ready(fn(arg))
        best = min(best, time.perf_counter() - t)
    return best


def finite(num_levels: int, n_envs: int, n_steps: int, updates: int, rounds: int) -> tuple[float, float]:
    """Seconds per update with the sampler's work, and of the stand-in alone."""
    sampler = LevelSampler(num_levels=num_levels)
    scorer = EpisodeScorer(num_levels=num_levels)

    def rollout(key: Any) -> Any:
        return jax.random.normal(key, (n_steps, n_envs))

    def with_plr(carry: Any, key: Any) -> Any:
        state, sstate, levels = carry
        k1, k2, k3 = jax.random.split(key, 3)
        adv = rollout(k1)
        starts = jax.random.uniform(k2, (n_steps, n_envs)) < 0.05
        lv = jnp.broadcast_to(levels, (n_steps, n_envs))
        sstate, out_levels, scores, mask = scorer.process_rollout(
            sstate,
            levels=lv,
            episode_starts=starts.at[0].set(True),
            dones=jnp.zeros(n_envs, bool),
            rewards=adv,
            values=adv,
            advantages=adv,
        )
        state = sampler.update(state, out_levels, scores, mask)
        state, levels, _ = sampler.sample(state, k3, n_envs)
        return (state, sstate, levels), adv.sum()

    def without(carry: Any, key: Any) -> Any:
        return carry, rollout(key).sum()

    keys = jax.random.split(jax.random.key(0), updates)
    init = (sampler.init(), scorer.init(n_envs), jnp.zeros(n_envs, int))
    plr = jax.jit(lambda k: jax.lax.scan(with_plr, init, k))
    base = jax.jit(lambda k: jax.lax.scan(without, init, k))
    return _timed(plr, keys, rounds) / updates, _timed(base, keys, rounds) / updates


def buffer(cls: Any, capacity: int, n_envs: int, updates: int, rounds: int) -> float:
    """Seconds per update of insert_batch(n_envs) + sample_replay_levels(n_envs) of (13, 13) levels, through
    JaxUED's interface (``cls``: plr_gym's drop-in, or JaxUED's own sampler)."""
    ls = cls(capacity, 0.8, 0.3, 0.5, "rank", {"temperature": 0.3}, True)
    state0 = ls.initialize(jnp.zeros((13, 13), bool), {"max_return": 0.0})

    def step(state: Any, key: Any) -> Any:
        k1, k2, k3 = jax.random.split(key, 3)
        levels = jax.random.bernoulli(k1, 0.3, (n_envs, 13, 13))
        scores = jax.random.uniform(k2, (n_envs,))
        state, _ = ls.insert_batch(state, levels, scores, {"max_return": scores})
        state, (idx, _) = ls.sample_replay_levels(state, k3, n_envs)
        return state, idx.sum()

    keys = jax.random.split(jax.random.key(1), updates)
    fn = jax.jit(lambda k: jax.lax.scan(step, state0, k))
    return _timed(fn, keys, rounds) / updates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few updates, to check the script runs")
    args = parser.parse_args()
    updates, rounds = (5, 1) if args.quick else (200, 5)
    n_envs, n_steps = 32, 256
    print(f"# plr_gym.jax sampler cost per PPO update (jax {jax.__version__}, {jax.devices()[0].platform})")
    print(f"commit {git_commit()}, {cpu_model()}, load {load_average()}")
    print(f"command: python benchmarks/jax/jax_sampler_speed.py{' --quick' if args.quick else ''}")
    print(
        f"{n_envs} envs x {n_steps} steps per update, {updates} updates in one jitted scan, best of {rounds}"
    )
    for num_levels in (20, 200):
        plr, base = finite(num_levels, n_envs, n_steps, updates, rounds)
        print(
            f"- LevelSampler, {num_levels} levels: scorer + update + sample {1e6 * (plr - base):.0f} us per "
            f"update (loop with them {1e6 * plr:.0f} us, stand-in alone {1e6 * base:.0f} us)"
        )
    capacity = 64 if args.quick else 4000
    samplers: list[tuple[str, Any]] = [("plr_gym.jax.jaxued.LevelSampler", JaxUEDLevelSampler)]
    try:  # JaxUED's own, where installed (not a plr_gym dependency)
        from jaxued.level_sampler import LevelSampler as Reference

        samplers.append(("jaxued.level_sampler.LevelSampler", Reference))
    except ImportError:
        pass
    for label, cls in samplers:
        per = buffer(cls, capacity, n_envs, updates, rounds)
        print(f"- {label}, capacity {capacity}: insert {n_envs} + replay {n_envs}: {1e6 * per:.0f} us/update")


if __name__ == "__main__":
    main()
