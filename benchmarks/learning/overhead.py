"""Training overhead of PLR: PPO timesteps/second with and without PLR, side by side in one process.

Plain PPO trains on ``make_vec_env(env_id, n_envs)``; PPO+PLR trains on the same env with every sub-env
in a ``LevelWrapper``, the vec env in ``PrioritizedLevelReplay`` and ``PLRCallback`` scoring every
episode. Runs are interleaved (plain, value-based, logit-based, plain, ...) so that background load
hits all variants alike; the table gives the median of the repeats and the ratio to plain PPO.

    python benchmarks/learning/overhead.py                 # MiniGrid-DoorKey-5x5, 8 envs, 5 repeats
    python benchmarks/learning/overhead.py --quick         # smoke test
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import gymnasium as gym
import minigrid  # noqa: F401  (registers the MiniGrid envs)
import numpy as np
import torch as th
from minigrid.wrappers import FlatObsWrapper
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))  # benchmarks/common: _provenance
from _provenance import cpu_model, git_commit
from plr_gym import LevelWrapper, PLRCallback, PrioritizedLevelReplay

VARIANTS = ("plain", "value_l1", "policy_entropy")


def build(variant: str, env_id: str, n_envs: int, n_steps: int, seed: int) -> tuple[PPO, Any]:
    if variant == "plain":
        venv = make_vec_env(env_id, n_envs=n_envs, seed=seed, wrapper_class=FlatObsWrapper)
        callback = None
    else:
        venv = make_vec_env(env_id, n_envs=n_envs, wrapper_class=lambda e: LevelWrapper(FlatObsWrapper(e)))
        venv = PrioritizedLevelReplay(venv, levels=range(200), strategy=variant, seed=seed)
        callback = PLRCallback()
    model = PPO("MlpPolicy", venv, n_steps=n_steps, batch_size=256, n_epochs=4, seed=seed, device="cpu")
    return model, callback


def timed_run(variant: str, env_id: str, n_envs: int, n_steps: int, rollouts: int, seed: int) -> float:
    model, callback = build(variant, env_id, n_envs, n_steps, seed)
    model.learn(n_envs * n_steps, callback=callback)  # warm-up rollout: imports, allocations, JIT paths
    total = n_envs * n_steps * rollouts
    start = time.perf_counter()
    model.learn(total, callback=callback, reset_num_timesteps=False)
    elapsed = time.perf_counter() - start
    model.get_env().close()  # type: ignore[union-attr]
    return total / elapsed


def machine() -> str:
    return (
        f"{cpu_model()}, {os.cpu_count()} cores, Python {platform.python_version()}, torch {th.__version__}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env-id", default="MiniGrid-DoorKey-5x5-v0")
    parser.add_argument("--n-envs", type=int, default=8)
    parser.add_argument("--n-steps", type=int, default=128)
    parser.add_argument("--rollouts", type=int, default=8, help="timed rollouts per run")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="1 repeat of 2 short rollouts")
    args = parser.parse_args()
    if args.quick:
        args.repeats, args.rollouts, args.n_steps = 1, 2, 32
    th.set_num_threads(1)
    gym.logger.min_level = 40
    print(f"# {' '.join(['python', *sys.argv])}")
    print(f"# commit {git_commit()}, {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {machine()}")
    print(f"# load average at start: {os.getloadavg()[0]:.2f}")
    fps: dict[str, list[float]] = {v: [] for v in VARIANTS}
    for r in range(args.repeats):
        for variant in VARIANTS:
            fps[variant].append(
                timed_run(variant, args.env_id, args.n_envs, args.n_steps, args.rollouts, seed=r)
            )
    print(f"# load average at end: {os.getloadavg()[0]:.2f}\n")
    base = statistics.median(fps["plain"])
    head = f"| variant ({args.env_id}, {args.n_envs} envs) | timesteps/s (median of {args.repeats})"
    print(f"{head} | ratio to plain PPO |")
    print("|---|---|---|")
    for variant in VARIANTS:
        med = statistics.median(fps[variant])
        label = "PPO" if variant == "plain" else f"PPO + PLR ({variant})"
        print(f"| {label} | {med:,.0f} | {med / base:.3f} |")
    print("\nper repeat:", {v: [round(x) for x in xs] for v, xs in fps.items()})
    ratios = {v: np.array(fps[v]) / np.array(fps["plain"]) for v in VARIANTS[1:]}
    print("paired ratios (same repeat):", {v: [round(float(x), 3) for x in r] for v, r in ratios.items()})


if __name__ == "__main__":
    main()
