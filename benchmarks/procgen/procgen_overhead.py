"""The Python cost per step of the batched Procgen env under PLR, with Procgen's C calls stubbed out.

Not a test. ``procgen_throughput.py`` measures whole steps, in which Procgen's C++ games dominate and
a loaded machine blurs the rest. This script measures only what plr_gym adds: it replaces Procgen's C
step (``libenv_act``/``libenv_observe``) and ``set_state`` by no-ops, writes a fixed random pattern of
episode ends into Procgen's ``first`` buffer (``--end-rate`` per env step; bigfish under random actions:
0.0082), and times ``--steps`` steps of

- **stock**: the installed build's own Python face over the same stubbed C library
  (``ProcgenGym3Env.act`` + ``observe`` on procgen-mirror, ``procgen_gym.ProcgenVecEnv.step`` on
  procgen-gym): its checks and its copies of the buffers;
- **batched + PLR (SB3)** and **batched + PLR (Gymnasium)**: as in ``procgen_throughput.py``, every ended
  episode drawing its next level from the sampler (level states come from the warmed-up level cache).

Times are the main thread's CPU time (``time.thread_time``) per vector step, median of ``--reps``
interleaved repetitions, so other processes on the machine barely move them. What this leaves out is
``set_state``'s own C cost per episode end (≈ 0.1 ms, ``procgen_switch.py``'s "revisit").

    python benchmarks/procgen/procgen_overhead.py --num-envs 64
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))  # benchmarks/common: _provenance
from _provenance import procgen_header

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))

LEVELS = range(200)


class Pattern:
    """Episode ends written into Procgen's ``first`` buffer by the stubbed ``observe``."""

    def __init__(self, first: np.ndarray, ends: np.ndarray) -> None:
        self.first, self.ends, self.t = first, ends, 0

    def act(self, *_: Any) -> None:
        self.t += 1

    def observe(self, *_: Any) -> None:
        self.first[:] = self.ends[self.t % len(self.ends)]


def stub_lib(pattern: Pattern) -> Any:
    """A stand-in for the C library: ``libenv_act``/``libenv_observe`` only play ``pattern``."""
    return type("StubLib", (), {"libenv_act": pattern.act, "libenv_observe": pattern.observe})


def stock_stepper(game: str, n: int, ends: np.ndarray) -> Any:
    from plr_gym.envs import procgen_backend

    backend = procgen_backend()
    env = backend.make_stock(n, game, num_levels=len(LEVELS), distribution_mode="easy")
    if backend.name == "procgen-mirror":
        pattern = Pattern(env._first, ends)
        real, env._c_lib = env._c_lib, stub_lib(pattern)

        def step(actions: np.ndarray) -> int:
            env.act(actions)
            _, _, first = env.observe()
            return int(first.sum())

    else:
        clib = env._clib
        pattern = Pattern(clib._first_buf, ends)
        real, clib._lib = clib._lib, stub_lib(pattern)

        def step(actions: np.ndarray) -> int:
            return int(env.step(actions)[2].sum())

    def close() -> None:
        if backend.name == "procgen-mirror":
            env._c_lib = real
        else:
            env._clib._lib = real
        env.close()

    step.close = close  # type: ignore[attr-defined]
    return step


def stub_batch(batch: Any, ends: np.ndarray) -> None:
    pattern = Pattern(batch.core.first, ends)
    batch.core.act, batch.core.observe = pattern.act, pattern.observe
    batch.core.set_state = lambda i, state: None


def plr_sb3_stepper(game: str, n: int, ends: np.ndarray) -> Any:
    from plr_gym.envs.procgen_sb3 import ProcgenVecEnv
    from plr_gym.wrappers.sb3 import PrioritizedLevelReplay

    venv = PrioritizedLevelReplay(ProcgenVecEnv(game, n, num_threads=0), levels=LEVELS, seed=0)
    venv.reset()
    stub_batch(venv.venv._batch, ends)

    def step(actions: np.ndarray) -> int:
        return int(venv.step(actions)[2].sum())

    step.close = venv.close  # type: ignore[attr-defined]
    return step


def plr_gym_stepper(game: str, n: int, ends: np.ndarray) -> Any:
    from plr_gym.envs import ProcgenVectorEnv
    from plr_gym.vector import PrioritizedLevelReplay

    envs = PrioritizedLevelReplay(ProcgenVectorEnv(game, n, num_threads=0), levels=LEVELS, seed=0)
    envs.reset()
    stub_batch(envs.env._batch, ends)

    def step(actions: np.ndarray) -> int:
        _, _, terminated, truncated, _ = envs.step(actions)
        return int((terminated | truncated).sum())

    step.close = envs.close  # type: ignore[attr-defined]
    return step


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--game", default="bigfish")
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--steps", type=int, default=3000, help="vector steps per route and repetition")
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--end-rate", type=float, default=0.0082, help="episode ends per env step")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="smoke run: N=8, few steps")
    args = parser.parse_args()
    if args.quick:
        args.num_envs, args.steps, args.reps = 8, 200, 2
    import plr_gym.envs  # noqa: F401  (fail early if Procgen is missing)

    n = args.num_envs
    rng = np.random.default_rng(args.seed)
    ends = rng.random((args.steps, n)) < args.end_rate
    actions = rng.integers(0, 15, size=(args.steps, n)).astype(np.int32)
    names = ["stock (its Python face)", "batched + PLR (SB3)", "batched + PLR (Gymnasium)"]
    steppers = [make(args.game, n, ends) for make in (stock_stepper, plr_sb3_stepper, plr_gym_stepper)]
    for step in steppers:  # warm-up: every level's initial state in the cache, allocator settled
        for a in actions:
            step(a)
    times: list[list[float]] = [[] for _ in steppers]
    counts = [0] * len(steppers)
    for r in range(args.reps):
        order = list(range(len(steppers)))
        if r % 2:
            order.reverse()
        for k in order:
            start = time.thread_time()
            for a in actions:
                counts[k] += steppers[k](a)
            times[k].append((time.thread_time() - start) / args.steps * 1e6)
    for step in steppers:
        step.close()
    med = [float(np.median(t)) for t in times]
    lines = [*procgen_header("python benchmarks/procgen/procgen_overhead.py " + " ".join(sys.argv[1:])), ""]
    lines += [
        f"{args.game}, N={n}, Procgen's C step and set_state stubbed out, {args.end_rate * 1000:.1f} episode "
        f"ends per 1000 env steps; main-thread CPU µs per vector step, median of {args.reps} interleaved "
        f"repetitions of {args.steps:,} steps:",
        "",
        "| route | µs per step | added to stock | episode ends per step |",
        "|---|---|---|---|",
    ]
    for k, name in enumerate(names):
        lines.append(
            f"| {name} | {med[k]:.1f} | {med[k] - med[0]:+.1f} | {counts[k] / (args.reps * args.steps):.2f} |"
        )
    print("\n".join(lines), flush=True)


if __name__ == "__main__":
    main()
