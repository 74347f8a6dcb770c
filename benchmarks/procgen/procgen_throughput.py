"""Procgen stepping throughput: stock batched Procgen, plr_gym's batched env under PLR, the DummyVecEnv route.

Not a test. For each ``N`` in ``--num-envs``, in one process and interleaved round by round (the machine may
be shared: compare the ratios, measured under the same load), env steps per second of:

- **stock**: the installed Procgen build's own batched env, Procgen's own levels (``num_levels=200``):
  ``procgen.ProcgenGym3Env(num=N)``'s ``act`` + ``observe`` on procgen-mirror (Python 3.11/3.12),
  ``procgen_gym.ProcgenVecEnv(num_envs=N)``'s ``step`` on procgen-gym (Python 3.13);
- **batched + PLR (SB3)**: ``PrioritizedLevelReplay(ProcgenVecEnv(game, N), levels=range(200))``, every
  episode on a level drawn by the sampler, exact per level (``plr_gym.envs.procgen_sb3``);
- **batched + PLR (Gymnasium)**: ``plr_gym.vector.PrioritizedLevelReplay(ProcgenVectorEnv(game, N))``;
- with ``--diagnose``, **set_state skipped**: the batched SB3 route with Procgen's ``set_state`` made a
  no-op (its games then play the wrong levels): the ceiling of any wrapper that loads levels through
  ``set_state``, and so what ``set_state`` costs;
- **DummyVecEnv + PLR**: ``PrioritizedLevelReplay(DummyVecEnv([LevelWrapper(ProcgenLevelEnv)] * N))``, the
  route before the batched env (skipped for ``N`` above ``--max-dummy``: it is slow).

Actions are uniformly random (pre-drawn), so episodes end at the rate a random policy ends them (the
"episode ends" column: ends per 1000 env steps); every route uses Procgen's default 4 threads.
``--ppo`` also times PPO training (``CnnPolicy``, ``PLRCallback``) on the batched env and on the DummyVecEnv
route.

    python benchmarks/procgen/procgen_throughput.py --game bigfish --num-envs 16 64 256 --ppo

Prints a Markdown table: steps/s of the median round and the median per-round ratio to stock, by wall-clock
time and by process CPU time (the latter is robust to other jobs sharing the machine).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))  # benchmarks/common: _provenance
from _provenance import procgen_header

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))

LEVELS = range(200)
#: Procgen's stepping threads for the batched routes (stock and ours); Procgen's default is 4.
THREADS = {"n": 4}


class Route:
    """One way of stepping ``N`` games: ``reset()`` once, then ``run(actions)`` -> episode ends."""

    name: str

    def reset(self) -> None:
        raise NotImplementedError

    def run(self, actions: np.ndarray) -> int:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class Stock(Route):
    def __init__(self, game: str, n: int) -> None:
        from plr_gym.envs import procgen_backend

        backend = procgen_backend()
        self.gym3 = backend.name == "procgen-mirror"
        self.name = f"stock {'ProcgenGym3Env' if self.gym3 else 'procgen_gym.ProcgenVecEnv'}"
        self.env = backend.make_stock(
            n,
            game,
            num_levels=len(LEVELS),
            start_level=0,
            distribution_mode="easy",
            num_threads=THREADS["n"],
        )

    def reset(self) -> None:
        if not self.gym3:
            self.env.reset()

    def run(self, actions: np.ndarray) -> int:
        env, ends = self.env, 0
        if self.gym3:
            for a in actions:
                env.act(a)
                _, _, first = env.observe()
                ends += int(first.sum())
        else:
            for a in actions:
                _, _, first, _, _ = env.step(a)  # procgen-gym reports Procgen's `first` as terminated
                ends += int(first.sum())
        return ends

    def close(self) -> None:
        self.env.close()


class SB3Route(Route):
    def __init__(self, name: str, venv: Any) -> None:
        from plr_gym.wrappers.sb3 import PrioritizedLevelReplay

        self.name = name
        self.venv = PrioritizedLevelReplay(venv, levels=LEVELS, seed=0)

    def reset(self) -> None:
        self.venv.reset()

    def run(self, actions: np.ndarray) -> int:
        venv, ends = self.venv, 0
        for a in actions:
            _, _, dones, _ = venv.step(a)
            ends += int(dones.sum())
        return ends

    def close(self) -> None:
        self.venv.close()


class GymRoute(Route):
    name = "batched + PLR (Gymnasium)"

    def __init__(self, game: str, n: int) -> None:
        from plr_gym.envs import ProcgenVectorEnv
        from plr_gym.vector import PrioritizedLevelReplay

        self.envs = PrioritizedLevelReplay(
            ProcgenVectorEnv(game, n, num_threads=THREADS["n"]), levels=LEVELS, seed=0
        )

    def reset(self) -> None:
        self.envs.reset()

    def run(self, actions: np.ndarray) -> int:
        envs, ends = self.envs, 0
        for a in actions:
            _, _, terminated, truncated, _ = envs.step(a)
            ends += int((terminated | truncated).sum())
        return ends

    def close(self) -> None:
        self.envs.close()


def batched_sb3(game: str, n: int) -> Route:
    from plr_gym.envs.procgen_sb3 import ProcgenVecEnv

    return SB3Route("batched + PLR (SB3)", ProcgenVecEnv(game, n, num_threads=THREADS["n"]))


def no_set_state_sb3(game: str, n: int) -> Route:
    """Diagnostic, not a route anyone should use: the batched + PLR (SB3) route with Procgen's ``set_state``
    replaced by a no-op, so its games replay whatever Procgen's own reset makes (the wrong levels). The gap
    between this row and the real one is what Procgen's ``set_state`` costs; the gap between this row and
    stock is plr_gym's own work."""
    from plr_gym.envs.procgen_sb3 import ProcgenVecEnv

    venv = ProcgenVecEnv(game, n, num_threads=THREADS["n"])
    batch = venv._batch
    # Procgen's own resets then draw from the same 200 levels as stock's (a level's stepping cost varies)
    kwargs = {**batch.levels.procgen_kwargs(0, num_threads=THREADS["n"]), "num_levels": len(LEVELS)}
    batch.core.close()
    batch.core = batch.levels.backend.make(n, game, **kwargs)
    batch.core.set_state = lambda i, state: None
    return SB3Route("batched + PLR (SB3), set_state skipped (diagnostic)", venv)


def dummy_sb3(game: str, n: int) -> Route:
    from stable_baselines3.common.vec_env import DummyVecEnv

    from plr_gym.envs import ProcgenLevelEnv
    from plr_gym.wrappers import LevelWrapper

    make: Callable[[], Any] = lambda: LevelWrapper(ProcgenLevelEnv(game))  # noqa: E731
    return SB3Route("DummyVecEnv + PLR", DummyVecEnv([make] * n))


def throughput(args: argparse.Namespace, n: int) -> list[str]:
    makers: list[Callable[[str, int], Route]] = [
        lambda g, k: Stock(g, k),
        batched_sb3,
        lambda g, k: GymRoute(g, k),
    ]
    if args.diagnose:
        makers.append(no_set_state_sb3)
    if n <= args.max_dummy:
        makers.append(dummy_sb3)
    routes = [make(args.game, n) for make in makers]
    for route in routes:
        route.reset()
    rng = np.random.default_rng(args.seed)
    steps = max(args.env_steps // n, 5)
    wall: list[list[float]] = [[] for _ in routes]
    cpu: list[list[float]] = [[] for _ in routes]
    ends = [0] * len(routes)
    counted = [0] * len(routes)
    for r in range(args.rounds + 1):  # round 0 warms up (first level visits, caches)
        actions = rng.integers(0, 15, size=(steps, n)).astype(np.int32)
        order = list(range(len(routes)))
        if r % 2:
            order.reverse()  # ABC CBA ...: a load that drifts within a round hits every route alike
        for k in order:
            w0, c0 = time.perf_counter(), time.process_time()
            e = routes[k].run(actions)
            w1, c1 = time.perf_counter(), time.process_time()
            if r:
                wall[k].append(w1 - w0)
                cpu[k].append(c1 - c0)
                ends[k] += e
                counted[k] += steps * n
    rows = []
    for k, route in enumerate(routes):
        rate = steps * n / np.median(wall[k])
        wall_ratio = float(np.median(np.array(wall[0]) / np.array(wall[k])))
        cpu_ratio = float(np.median(np.array(cpu[0]) / np.array(cpu[k])))
        rows.append(
            f"| {n} | {route.name} | {rate:,.0f} | {wall_ratio:.2f}× | {cpu_ratio:.2f}× | "
            f"{1000 * ends[k] / counted[k]:.1f} |"
        )
        route.close()
    return rows


def ppo_fps(args: argparse.Namespace) -> list[str]:
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import DummyVecEnv

    from plr_gym import PLRCallback, PrioritizedLevelReplay
    from plr_gym.envs import ProcgenLevelEnv
    from plr_gym.envs.procgen_sb3 import ProcgenVecEnv
    from plr_gym.wrappers import LevelWrapper

    torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS", "1"))))
    n, n_steps = args.ppo_envs, args.ppo_n_steps
    make: Callable[[], Any] = lambda: LevelWrapper(ProcgenLevelEnv(args.game))  # noqa: E731
    builders = {
        "batched (ProcgenVecEnv)": lambda: ProcgenVecEnv(args.game, n),
        "DummyVecEnv × ProcgenLevelEnv": lambda: DummyVecEnv([make] * n),
    }
    fps: dict[str, list[float]] = {name: [] for name in builders}
    device = "cuda" if torch.cuda.is_available() else "cpu"
    for _ in range(args.ppo_rounds):
        for name, build in builders.items():
            venv = PrioritizedLevelReplay(build(), levels=LEVELS, seed=0)
            model = PPO(
                "CnnPolicy",
                venv,
                n_steps=n_steps,
                batch_size=min(2048, n * n_steps),
                n_epochs=3,
                seed=0,
                device=device,
            )
            model.learn(n * n_steps, callback=PLRCallback())  # warm-up rollout + update
            start = time.perf_counter()
            model.learn(args.ppo_rollouts * n * n_steps, callback=PLRCallback(), reset_num_timesteps=False)
            fps[name].append(args.ppo_rollouts * n * n_steps / (time.perf_counter() - start))
            venv.close()
    base = np.array(fps["DummyVecEnv × ProcgenLevelEnv"])
    rows = [
        f"PPO training, {args.game}, {n} envs, n_steps={n_steps}, 3 epochs, CnnPolicy on {device}, "
        f"{args.ppo_rollouts} rollouts timed × {args.ppo_rounds} rounds:",
        "",
        "| route | PPO fps (median) | ratio to DummyVecEnv route |",
        "|---|---|---|",
    ]
    for name, values in fps.items():
        ratio = float(np.median(np.array(values) / base))
        rows.append(f"| {name} | {np.median(values):,.0f} | {ratio:.2f}× |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--game", default="bigfish")
    parser.add_argument("--num-envs", nargs="+", type=int, default=[16, 64, 256])
    parser.add_argument("--env-steps", type=int, default=8192, help="env steps per route per round")
    parser.add_argument("--rounds", type=int, default=25)
    parser.add_argument("--max-dummy", type=int, default=256, help="largest N for the DummyVecEnv route")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--num-threads", type=int, default=4, help="Procgen stepping threads of the batched routes (0: none)"
    )
    parser.add_argument(
        "--diagnose",
        action="store_true",
        help="add a diagnostic row: the batched SB3 route with Procgen's set_state skipped (wrong levels)",
    )
    parser.add_argument("--ppo", action="store_true", help="also time PPO training")
    parser.add_argument("--ppo-envs", type=int, default=64)
    parser.add_argument("--ppo-n-steps", type=int, default=64)
    parser.add_argument("--ppo-rollouts", type=int, default=2)
    parser.add_argument("--ppo-rounds", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="smoke run: N=16, few steps, tiny PPO")
    args = parser.parse_args()
    if args.quick:
        args.num_envs, args.env_steps, args.rounds = [16], 800, 2
        args.ppo, args.ppo_envs, args.ppo_n_steps, args.ppo_rollouts, args.ppo_rounds = True, 4, 16, 1, 1
    import plr_gym.envs  # noqa: F401  (imports Procgen lazily; fail early if it is missing)

    THREADS["n"] = args.num_threads

    lines = [*procgen_header("python benchmarks/procgen/procgen_throughput.py " + " ".join(sys.argv[1:])), ""]
    lines += [
        f"{args.game}, easy, 200 levels, random actions; {args.rounds} interleaved rounds of "
        f"{args.env_steps:,} env steps per route (order reversed every other round); steps/s from the "
        "median round; ratios = median over rounds of stock's time ÷ the route's time, wall-clock and "
        "process CPU time (all threads; robust to other jobs on the machine):",
        "",
        "| N | route | steps/s | ratio to stock (wall) | ratio to stock (CPU time) | ends / 1000 steps |",
        "|---|---|---|---|---|---|",
    ]
    for n in args.num_envs:
        lines += throughput(args, n)
    print("\n".join(lines), flush=True)
    if args.ppo:
        print()
        print("\n".join(ppo_fps(args)), flush=True)


if __name__ == "__main__":
    main()
