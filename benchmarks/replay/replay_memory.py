"""Replay memory: frames stored once vs ``VecFrameStack`` stacks, sampling speed, shared memory vs pipes.

Three measurements, each variant in its own process so one does not inflate another:

1. **Memory**: resident set size (RSS) added by filling a buffer with ``--transitions`` Atari-sized
   steps (84×84 uint8 frames, stacks of 4, channels first as SB3's ``VecTransposeImage`` gives them,
   episodes of 200-2,000 steps), for SB3's ``ReplayBuffer`` behind ``VecFrameStack(4)`` (DQN's
   default, and with ``optimize_memory_usage=True``), plr_gym's ``PrioritizedReplayBuffer`` storing
   the stacks, and ``FrameStackReplayBuffer``. The bytes the arrays would take at 1,000,000 transitions
   are computed from the same layouts (``FrameStackReplayBuffer``'s by building one: numpy allocates
   lazily, so it costs no memory until filled).
2. **Sampling**: ``sample(batch)`` of ``FrameStackReplayBuffer`` vs the unstacked
   ``PrioritizedReplayBuffer`` (same PER settings) and SB3's ``ReplayBuffer``, on
   ``--sample-transitions`` stored steps, all three in one process with their timing rounds
   interleaved (the machine's load changes hit them alike); median µs per call and the median of the
   per-round ratios.
3. **Shared memory vs pipes**: 2 producer processes each deliver ``--producer-steps`` transitions of
   the same frame stacks to the learner: through ``multiprocessing`` pipes into SB3's ``ReplayBuffer``
   (what ``SubprocVecEnv`` + ``add`` does), or written by ``SharedReplayWriter`` straight into a
   ``SharedReplayBuffer``. Wall time and the learner's CPU time.

Usage::

    python benchmarks/replay/replay_memory.py [--transitions 100000] [--sample-transitions 20000]
        [--producer-steps 5000] [--quick]
    python benchmarks/replay/replay_memory.py --child memory frame-stack 1000000   # one variant's RSS alone
"""

from __future__ import annotations

import argparse
import datetime
import json
import multiprocessing
import os
import platform
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))  # benchmarks/common: _provenance
from _provenance import cpu_model, git_commit

SHAPE = (4, 84, 84)
FRAME = 84 * 84
VARIANTS = ("sb3", "sb3-optimized", "per-stacked", "frame-stack")
LABELS = {
    "sb3": "SB3 ReplayBuffer + VecFrameStack(4)",
    "sb3-optimized": "SB3 ReplayBuffer(optimize_memory_usage=True) + VecFrameStack(4)",
    "per-stacked": "plr_gym PrioritizedReplayBuffer + VecFrameStack(4)",
    "frame-stack": "plr_gym FrameStackReplayBuffer(n_stack=4)",
}
MEAN_EPISODE = 1100  # episodes of 200-2,000 steps


def rss_bytes() -> int:
    with open("/proc/self/status", encoding="utf-8") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def make_buffer(variant: str, size: int, seed: int = 0) -> Any:
    from gymnasium import spaces
    from stable_baselines3.common.buffers import ReplayBuffer

    from plr_gym.replay import FrameStackReplayBuffer, PrioritizedReplayBuffer

    obs_space = spaces.Box(0, 255, SHAPE, np.uint8)
    act = spaces.Discrete(4)
    if variant == "sb3":
        return ReplayBuffer(size, obs_space, act, "cpu")
    if variant == "sb3-optimized":
        return ReplayBuffer(
            size, obs_space, act, "cpu", optimize_memory_usage=True, handle_timeout_termination=False
        )
    if variant == "per-stacked":
        return PrioritizedReplayBuffer(size, obs_space, act, "cpu", seed=seed)
    if variant == "frame-stack":
        return FrameStackReplayBuffer(size, obs_space, act, "cpu", n_stack=4, seed=seed)
    raise ValueError(f"unknown variant {variant!r}")


def fill(buffer: Any, steps: int, seed: int = 0) -> None:
    """Add ``steps`` transitions of VecFrameStack-like stacks (zero padding after each reset)."""
    rng = np.random.default_rng(seed)
    palette = rng.integers(
        0, 256, (64, 1, 84, 84), dtype=np.uint8
    )  # frames reused: generating is not measured
    stack = np.zeros((1, *SHAPE), np.uint8)
    stack[0, -1:] = palette[0]
    left = int(rng.integers(200, 2001))
    for t in range(steps):
        new = palette[(t + 1) % 64]
        next_stack = np.concatenate([stack[:, 1:], new[None]], axis=1)
        left -= 1
        done = left == 0
        buffer.add(stack, next_stack, np.array([t % 4]), np.array([1.0], np.float32), np.array([done]), [{}])
        if done:
            left = int(rng.integers(200, 2001))
            stack = np.zeros((1, *SHAPE), np.uint8)
            stack[0, -1:] = palette[(t + 7) % 64]
        else:
            stack = next_stack


def child_memory(variant: str, steps: int) -> dict[str, Any]:
    import torch  # noqa: F401 - imported before the baseline, as by the algorithms

    import plr_gym.replay  # noqa: F401

    before = rss_bytes()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        buffer = make_buffer(variant, steps)
        fill(buffer, steps)
    return {"variant": variant, "rss": rss_bytes() - before}


def child_sampling(steps: int, batch_sizes: list[int], repeats: int, rounds: int = 15) -> dict[str, Any]:
    """Time the buffers in one process, alternating rounds, so that load changes hit all alike."""
    names = ("sb3", "per-stacked", "frame-stack")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        buffers = {}
        for v in names:
            buffers[v] = make_buffer(v, steps)
            fill(buffers[v], steps)
        out: dict[str, Any] = {}
        for batch in batch_sizes:
            times: dict[str, list[float]] = {v: [] for v in names}
            for _ in range(rounds):
                for v in names:
                    start = time.perf_counter()
                    for _ in range(repeats):
                        buffers[v].sample(batch)
                    times[v].append((time.perf_counter() - start) / repeats * 1e6)
            ratios = [a / b for a, b in zip(times["frame-stack"], times["per-stacked"])]
            out[str(batch)] = {v: statistics.median(t) for v, t in times.items()}
            out[str(batch)]["ratio"] = statistics.median(ratios)
    return out


def run_child(*args: str) -> dict[str, Any]:
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src"),
    }
    proc = subprocess.run(
        [sys.executable, __file__, "--child", *args], capture_output=True, text=True, env=env, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(f"child {args} failed:\n{proc.stderr}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def bytes_at_1m() -> dict[str, float]:
    """Bytes of each layout's arrays at 1,000,000 transitions (computed; SB3's are not allocated)."""
    n = 1_000_000
    stack = int(np.prod(SHAPE))
    per_step = 8 + 4 * 3  # action (int64), reward, done, timeout (float32)
    trees = 2 * 2 * (1 << (n - 1).bit_length()) * 8  # PER sum and min trees, float64
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fs = make_buffer("frame-stack", n)  # frames are allocated lazily: this costs no memory
    episodes = n // MEAN_EPISODE
    return {
        "sb3": n * (2 * stack + per_step),
        "sb3-optimized": n * (stack + per_step),
        "per-stacked": n * (2 * stack + per_step + 8 + 8) + trees,  # + levels, priorities
        "frame-stack": fs.nbytes + episodes * FRAME + trees,  # + one terminal frame per episode
    }


def producer_pipe(conn: Any, steps: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    obs = rng.integers(0, 256, SHAPE, dtype=np.uint8)
    for t in range(steps):
        conn.send((obs, obs, t % 4, 1.0, False))
    conn.close()


def producer_shared(writer: Any, steps: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    obs = rng.integers(0, 256, SHAPE, dtype=np.uint8)
    for t in range(steps):
        writer.add(obs, obs, t % 4, 1.0, False, False)
    writer.close()


def shared_vs_pipe(steps: int, n_producers: int = 2) -> dict[str, dict[str, float]]:
    from gymnasium import spaces
    from stable_baselines3.common.buffers import ReplayBuffer

    from plr_gym.replay import SharedReplayBuffer

    ctx = multiprocessing.get_context("fork")
    obs_space, act = spaces.Box(0, 255, SHAPE, np.uint8), spaces.Discrete(4)
    results: dict[str, dict[str, float]] = {}

    buffer = ReplayBuffer(steps * n_producers, obs_space, act, "cpu", n_envs=n_producers)
    pipes = [ctx.Pipe(duplex=False) for _ in range(n_producers)]
    procs = [ctx.Process(target=producer_pipe, args=(w, steps, i)) for i, (_, w) in enumerate(pipes)]
    wall, cpu = time.perf_counter(), time.process_time()
    for p in procs:
        p.start()
    for _ in range(steps):
        items = [r.recv() for r, _ in pipes]
        obs = np.stack([it[0] for it in items])
        buffer.add(
            obs,
            obs,
            np.array([it[2] for it in items]),
            np.ones(n_producers),
            np.zeros(n_producers),
            [{}] * n_producers,
        )
    for p in procs:
        p.join()
    results["pipes + SB3 ReplayBuffer.add"] = {
        "wall": time.perf_counter() - wall,
        "cpu": time.process_time() - cpu,
    }
    del buffer

    shared = SharedReplayBuffer(
        steps * n_producers, obs_space, act, "cpu", n_envs=n_producers, local_add=False
    )
    procs = [
        ctx.Process(target=producer_shared, args=(shared.writer(i), steps, i)) for i in range(n_producers)
    ]
    wall, cpu = time.perf_counter(), time.process_time()
    for p in procs:
        p.start()
    while int(shared.counts.min()) < steps:
        time.sleep(0.001)
    for p in procs:
        p.join()
    results["SharedReplayWriter (shared memory)"] = {
        "wall": time.perf_counter() - wall,
        "cpu": time.process_time() - cpu,
    }
    shared.close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--transitions", type=int, default=100_000, help="steps stored for the memory test")
    parser.add_argument("--sample-transitions", type=int, default=20_000, help="steps stored for sampling")
    parser.add_argument("--producer-steps", type=int, default=5_000, help="steps per producer process")
    parser.add_argument("--repeats", type=int, default=50, help="sample() calls per timing round")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="tiny sizes, two memory variants (a smoke test, numbers meaningless)",
    )
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, variant, steps = args.child[0], args.child[1], int(args.child[2])
        if kind == "memory":
            print(json.dumps(child_memory(variant, steps)))
        else:
            print(json.dumps(child_sampling(steps, [32, 256], int(args.child[3]))))
        return
    if args.quick:
        args.transitions, args.sample_transitions, args.producer_steps, args.repeats = 3000, 2000, 300, 5

    import numpy

    load = os.getloadavg()
    print("# Replay memory benchmark\n")
    print(f"- command: `python benchmarks/replay/replay_memory.py {' '.join(sys.argv[1:])}`")
    print(f"- commit: {git_commit()}")
    versions = f"Python {platform.python_version()}, numpy {numpy.__version__}"
    print(f"- machine: {cpu_model()}, {os.cpu_count()} cores, {versions}")
    print(f"- date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC")
    print(f"- load average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}\n")

    print(f"## Memory: {args.transitions:,} transitions of 4×84×84 uint8 stacks (RSS added, own process)\n")
    print("| buffer | RSS added (MB) | relative to SB3 | array bytes at 1M transitions (GB) |")
    print("|---|---|---|---|")
    at_1m = bytes_at_1m()
    variants = ("sb3", "frame-stack") if args.quick else VARIANTS  # --quick: fewer processes to start
    rss = {v: run_child("memory", v, str(args.transitions))["rss"] for v in variants}
    for v in variants:
        print(f"| {LABELS[v]} | {rss[v] / 1e6:,.0f} | {rss[v] / rss['sb3']:.3f} | {at_1m[v] / 1e9:.2f} |")
    rss_ratio = rss["frame-stack"] / rss["sb3"]
    bytes_ratio = at_1m["frame-stack"] / at_1m["sb3"]
    print(f"\nframe-stack / SB3: RSS {rss_ratio:.3f}, bytes at 1M {bytes_ratio:.3f} (target ≤ 0.333)\n")

    print(f"## Sampling: {args.sample_transitions:,} stored transitions, median µs per sample() call\n")
    print("| buffer | batch 32 | batch 256 |")
    print("|---|---|---|")
    timing = run_child("sampling", "all", str(args.sample_transitions), str(args.repeats))
    for v in ("sb3", "per-stacked", "frame-stack"):
        print(f"| {LABELS[v]} | {timing['32'][v]:,.0f} | {timing['256'][v]:,.0f} |")
    for b in ("32", "256"):
        ratio = timing[b]["ratio"]
        print(
            f"\nbatch {b}: frame-stack / unstacked PrioritizedReplayBuffer = {ratio:.2f}× "
            "(median of per-round ratios; target ≤ 1.5×)"
        )

    print(
        f"\n## Shared memory vs pipes: 2 producers × {args.producer_steps:,} transitions of 4×84×84 uint8\n"
    )
    print("| path | wall (s) | transitions / s | learner CPU (s) |")
    print("|---|---|---|---|")
    for name, r in shared_vs_pipe(args.producer_steps).items():
        print(f"| {name} | {r['wall']:.2f} | {2 * args.producer_steps / r['wall']:,.0f} | {r['cpu']:.2f} |")
    print(f"\n- load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
