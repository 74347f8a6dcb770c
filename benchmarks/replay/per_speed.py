"""Speed of one prioritized replay step: sample(batch) + update_priorities(batch), at a large capacity.

Runs, side by side on the same machine:

- ``plr_gym``: :class:`plr_gym.replay.PrioritizedReplayBuffer` (vectorized numpy sum tree; the timing
  includes gathering the batch into torch tensors, as SB3 algorithms receive it);
- ``cpprb``: ``cpprb.PrioritizedReplayBuffer`` (C++ segment tree; returns numpy arrays);
- ``python-loop``: the same sum tree walked one sample at a time in a Python loop (the naive baseline);
- ``torchrl``: ``torchrl.data.PrioritizedReplayBuffer`` with a ``LazyTensorStorage``, if installed.

Each buffer holds ``--capacity`` CartPole-sized transitions (obs of 4 floats) with random priorities;
the step is repeated ``--repeats`` times and the median of ``--rounds`` rounds is reported; the rounds of
``plr_gym`` and ``cpprb`` are interleaved and their ratio is the median of the per-round ratios.

Usage::

    python benchmarks/replay/per_speed.py [--capacity 1000000] [--batch-size 256] [--repeats 300] [--rounds 5]
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import platform
import statistics
import sys
import time
from typing import Callable

import numpy as np
import torch as th
from gymnasium import spaces

from plr_gym.replay import PrioritizedReplayBuffer

OBS_DIM = 4
Step = Callable[[np.ndarray], None]


class Unavailable(Exception):
    """A peer library that is not installed or does not work here."""


def make_plr_gym(capacity: int, batch_size: int, rng: np.random.Generator) -> Step:
    buffer = PrioritizedReplayBuffer(
        capacity,
        spaces.Box(-np.inf, np.inf, (OBS_DIM,), np.float32),
        spaces.Discrete(2),
        device="cpu",
        seed=0,
    )
    # Fill the storage directly (adding 1M steps one by one is not what is measured here).
    buffer.observations[:] = rng.standard_normal(buffer.observations.shape, dtype=np.float32)
    buffer.next_observations[:] = rng.standard_normal(buffer.next_observations.shape, dtype=np.float32)
    buffer.rewards[:] = 1.0
    buffer.full, buffer.pos = True, 0
    buffer.update_priorities(np.arange(buffer.n_transitions), rng.random(buffer.n_transitions))

    def step(new_priorities: np.ndarray) -> None:
        batch = buffer.sample(batch_size)
        buffer.update_priorities(batch.indices, new_priorities)

    return step


def make_cpprb(capacity: int, batch_size: int, rng: np.random.Generator) -> Step:
    try:
        import cpprb
    except ImportError as e:
        raise Unavailable("not installed") from e
    env_dict = {"obs": {"shape": OBS_DIM}, "act": {}, "rew": {}, "next_obs": {"shape": OBS_DIM}, "done": {}}
    buffer = cpprb.PrioritizedReplayBuffer(capacity, env_dict, alpha=0.6)
    chunk = 100_000
    for start in range(0, capacity, chunk):
        n = min(chunk, capacity - start)
        buffer.add(
            obs=rng.standard_normal((n, OBS_DIM)),
            act=np.zeros(n),
            rew=np.ones(n),
            next_obs=rng.standard_normal((n, OBS_DIM)),
            done=np.zeros(n),
        )
    buffer.update_priorities(np.arange(capacity), rng.random(capacity))

    def step(new_priorities: np.ndarray) -> None:
        batch = buffer.sample(batch_size, beta=0.4)
        buffer.update_priorities(batch["indexes"], new_priorities)

    return step


class LoopSumTree:
    """Textbook sum/min tree with one Python-level descent and one update walk per sample."""

    def __init__(self, capacity: int, leaves: np.ndarray) -> None:
        self.size = 1 << (capacity - 1).bit_length()
        self.sums = [0.0] * (2 * self.size)
        self.mins = [float("inf")] * (2 * self.size)
        for j, value in enumerate(leaves.tolist()):
            self.sums[self.size + j] = value
            self.mins[self.size + j] = value
        for node in range(self.size - 1, 0, -1):
            self.sums[node] = self.sums[2 * node] + self.sums[2 * node + 1]
            self.mins[node] = min(self.mins[2 * node], self.mins[2 * node + 1])

    def find(self, value: float) -> int:
        node = 1
        while node < self.size:
            left = self.sums[2 * node]
            if value < left:
                node = 2 * node
            else:
                value -= left
                node = 2 * node + 1
        return node - self.size

    def update(self, index: int, value: float) -> None:
        node = index + self.size
        self.sums[node] = value
        self.mins[node] = value
        node //= 2
        while node >= 1:
            self.sums[node] = self.sums[2 * node] + self.sums[2 * node + 1]
            self.mins[node] = min(self.mins[2 * node], self.mins[2 * node + 1])
            node //= 2


def make_python_loop(capacity: int, batch_size: int, rng: np.random.Generator) -> Step:
    alpha, beta, eps = 0.6, 0.4, 1e-6
    obs = rng.standard_normal((capacity, OBS_DIM), dtype=np.float32)
    next_obs = rng.standard_normal((capacity, OBS_DIM), dtype=np.float32)
    rewards = np.ones(capacity, dtype=np.float32)
    tree = LoopSumTree(capacity, (rng.random(capacity) + eps) ** alpha)
    sample_rng = np.random.default_rng(0)

    def step(new_priorities: np.ndarray) -> None:
        total = tree.sums[1]
        segment = total / batch_size
        indices, weights = [], []
        p_min = tree.mins[1]
        for i in range(batch_size):
            index = tree.find((i + sample_rng.random()) * segment)
            indices.append(index)
            weights.append((p_min / tree.sums[tree.size + index]) ** beta)
        idx = np.array(indices)
        _ = (th.as_tensor(obs[idx]), th.as_tensor(next_obs[idx]), th.as_tensor(rewards[idx]), weights)
        for index, priority in zip(indices, new_priorities.tolist()):
            tree.update(index, (priority + eps) ** alpha)

    return step


def make_torchrl(capacity: int, batch_size: int, rng: np.random.Generator) -> Step:
    try:
        from tensordict import TensorDict
        from torchrl.data import LazyTensorStorage, TensorDictPrioritizedReplayBuffer
    except ImportError as e:
        raise Unavailable("not installed") from e
    try:
        buffer = TensorDictPrioritizedReplayBuffer(
            alpha=0.6,
            beta=0.4,
            storage=LazyTensorStorage(capacity),
            batch_size=batch_size,
            priority_key="td_error",
        )
    except RuntimeError as e:  # e.g. its C++ segment tree was built for another torch
        raise Unavailable(str(e).split(".")[0]) from e
    chunk = 100_000
    for start in range(0, capacity, chunk):
        n = min(chunk, capacity - start)
        data = TensorDict(
            {
                "obs": th.as_tensor(rng.standard_normal((n, OBS_DIM), dtype=np.float32)),
                "next_obs": th.as_tensor(rng.standard_normal((n, OBS_DIM), dtype=np.float32)),
                "reward": th.ones(n),
                "td_error": th.as_tensor(rng.random(n), dtype=th.float32),
            },
            batch_size=[n],
        )
        buffer.extend(data)

    def step(new_priorities: np.ndarray) -> None:
        batch = buffer.sample()
        buffer.update_priority(batch["index"], th.as_tensor(new_priorities))

    return step


def time_step(
    step: Step, batch_size: int, repeats: int, rounds: int, clock: Callable[[], float] = time.perf_counter
) -> float:
    """Median over rounds of the mean seconds per step (``clock``: wall-clock, or process CPU time)."""
    rng = np.random.default_rng(1)
    priorities = [rng.random(batch_size) for _ in range(repeats)]
    for p in priorities[: max(repeats // 10, 1)]:  # warm up
        step(p)
    results = []
    for _ in range(rounds):
        start = clock()
        for p in priorities:
            step(p)
        results.append((clock() - start) / repeats)
    return statistics.median(results)


def machine_info() -> str:
    cpu = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    versions = [f"python {platform.python_version()}", f"numpy {np.__version__}", f"torch {th.__version__}"]
    for name in ("cpprb", "torchrl"):
        try:
            versions.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            versions.append(f"{name} not installed")
    return f"{cpu}, {os.cpu_count()} logical cores, {platform.system()} {platform.release()}\n" + ", ".join(
        versions
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--capacity", type=int, default=1_000_000)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--loop-repeats", type=int, default=30, help="repeats for the slow Python loop")
    parser.add_argument("--quick", action="store_true", help="smoke test: 20k capacity, few repeats")
    args = parser.parse_args()
    if args.quick:
        args.capacity, args.repeats, args.rounds, args.loop_repeats = 20_000, 20, 2, 3
    th.set_num_threads(1)

    print("command:", " ".join([os.path.basename(sys.executable), *sys.argv]))
    print("machine:", machine_info())
    print(
        f"capacity {args.capacity:,}, batch {args.batch_size}, obs dim {OBS_DIM}; "
        "one step = sample + update\n"
    )

    factories = {
        "plr_gym": make_plr_gym,
        "cpprb": make_cpprb,
        "python-loop": make_python_loop,
        "torchrl": make_torchrl,
    }
    timings: dict[str, float | None] = {}
    reasons: dict[str, str] = {}
    for name in ("python-loop", "torchrl"):  # timed alone (much slower, or not comparable in a pair)
        try:
            step = factories[name](args.capacity, args.batch_size, np.random.default_rng(0))
        except Unavailable as e:
            timings[name], reasons[name] = None, str(e)
            continue
        repeats = args.loop_repeats if name == "python-loop" else args.repeats
        timings[name] = time_step(step, args.batch_size, repeats, args.rounds)
        del step
    # plr_gym and cpprb: both alive, rounds interleaved (order swapped every round), so that the load of
    # a shared machine hits both alike; the ratio is the median of the per-round ratios.
    pair: dict[str, Step] = {
        "plr_gym": make_plr_gym(args.capacity, args.batch_size, np.random.default_rng(0))
    }
    try:
        pair["cpprb"] = make_cpprb(args.capacity, args.batch_size, np.random.default_rng(0))
    except Unavailable as e:
        timings["cpprb"], reasons["cpprb"] = None, str(e)
    per_round: dict[str, list[float]] = {name: [] for name in pair}
    cpu_round: dict[str, list[float]] = {name: [] for name in pair}
    names = list(pair)
    for r in range(args.rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            per_round[name].append(time_step(pair[name], args.batch_size, args.repeats, 1))
            cpu_round[name].append(time_step(pair[name], args.batch_size, args.repeats, 1, time.process_time))
    for name, values in per_round.items():
        timings[name] = statistics.median(values)
    ratio = cpu_ratio = None
    if "cpprb" in per_round:
        ratio = statistics.median(a / b for a, b in zip(per_round["plr_gym"], per_round["cpprb"]))
        cpu_ratio = statistics.median(a / b for a, b in zip(cpu_round["plr_gym"], cpu_round["cpprb"]))

    ours = timings["plr_gym"]
    assert ours is not None
    print(f"{'implementation':<14}{'us / step':>12}{'vs plr_gym':>12}")
    for name in factories:
        seconds = timings.get(name)
        if seconds is None:
            print(f"{name:<14}{'-':>12}{'-':>12}   unavailable: {reasons[name]}")
        else:
            print(f"{name:<14}{seconds * 1e6:>12.1f}{seconds / ours:>11.2f}x")
    if ratio is not None:
        print(
            f"\nplr_gym time / cpprb time, median over {args.rounds} interleaved rounds: "
            f"{ratio:.2f}x wall-clock, "
            f"{cpu_ratio:.2f}x process CPU time (both single-threaded; CPU time is robust to other jobs)"
        )


if __name__ == "__main__":
    main()
