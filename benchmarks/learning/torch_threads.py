"""Torch's CPU threads for a small MLP: torch's default (one per core) against one thread.

Trains the README's MiniGrid quick start (PPO + PLR, DoorKey-5x5, 8 envs, ``MlpPolicy``) for ``--steps``
steps in a fresh process per run, with torch's own thread count and with ``torch.set_num_threads(1)``
(what ``plr_gym.training.build_run`` and ``plr-gym train`` choose for an MLP), alternating the two in every
round so that background load hits both alike. Reports each run's wall time and CPU time (user + system, of
the child process), and the medians. ``OMP_NUM_THREADS`` is removed from the children's environment, so
"default" is torch's default on this machine.

    python benchmarks/learning/torch_threads.py --steps 10240 --rounds 2
    python benchmarks/learning/torch_threads.py --quick   # one round of 512 steps: a pipeline check
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))  # benchmarks/common: _provenance
from _provenance import cpu_model, git_commit, load_average

RUN = """
import sys
import minigrid  # noqa: F401
import torch
from minigrid.wrappers import ImgObsWrapper
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env
from plr_gym import LevelWrapper, PLRCallback, PrioritizedLevelReplay

if sys.argv[1] != "default":
    torch.set_num_threads(int(sys.argv[1]))
venv = PrioritizedLevelReplay(
    make_vec_env("MiniGrid-DoorKey-5x5-v0", n_envs=8, seed=0,
                 wrapper_class=lambda env: LevelWrapper(ImgObsWrapper(env))),
    levels=range(40), seed=0)
model = PPO("MlpPolicy", venv, n_steps=256 if int(sys.argv[2]) >= 2048 else 32, batch_size=256,
            learning_rate=5e-4, ent_coef=0.01, policy_kwargs={"normalize_images": False}, seed=0)
model.learn(int(sys.argv[2]), callback=PLRCallback())
print("THREADS", torch.get_num_threads())
"""


def run(threads: str, steps: int) -> tuple[float, float, int]:
    """(wall s, CPU s, torch threads used) of one training run in a fresh process."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", RUN, threads, str(steps)], env=env, capture_output=True, text=True, check=False
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"the run with threads={threads} failed:\n{proc.stderr[-3000:]}")
    used = int(proc.stdout.split("THREADS")[-1])
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), used


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10240, help="training steps per run (default 10240)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds, each one run per setting (default 2)")
    parser.add_argument("--quick", action="store_true", help="one round of 512 steps")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.rounds = 512, 1
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    print(f"- command: `python benchmarks/learning/torch_threads.py {' '.join(sys.argv[1:])}`")
    print(f"- commit: {git_commit()}")
    print(f"- date: {now}")
    print(f"- machine: {cpu_model()}, {os.cpu_count()} logical cores, Python {platform.python_version()}")
    print(f"- load average at start: {load_average()}")
    results: dict[str, list[tuple[float, float, int]]] = {"default": [], "1": []}
    for r in range(args.rounds):
        order = ["default", "1"] if r % 2 == 0 else ["1", "default"]
        for threads in order:
            results[threads].append(run(threads, args.steps))
            wall, cpu, used = results[threads][-1]
            print(
                f"  round {r + 1}: threads={threads} ({used}): wall {wall:.1f} s, CPU {cpu:.1f} s", flush=True
            )
    task = "PPO + PLR on MiniGrid-DoorKey-5x5-v0 (8 envs, MlpPolicy)"
    print(f"\n{args.steps} steps of {task}, {args.rounds} round(s):\n")
    print("| torch threads | wall s (median; runs) | CPU s (median; runs) |")
    print("|---|---|---|")
    for threads, rows in results.items():
        label = f"torch's default ({rows[0][2]})" if threads == "default" else "1"
        walls = ", ".join(f"{w:.1f}" for w, _, _ in rows)
        cpus = ", ".join(f"{c:.1f}" for _, c, _ in rows)
        wall_med = statistics.median(w for w, _, _ in rows)
        cpu_med = statistics.median(c for _, c, _ in rows)
        print(f"| {label} | {wall_med:.1f} ({walls}) | {cpu_med:.1f} ({cpus}) |")


if __name__ == "__main__":
    main()
