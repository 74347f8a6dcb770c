"""RLlib env-runner throughput with and without PLR (plr_gym.rllib). Not a test.

One ``SingleAgentEnvRunner`` (in this process, PPO's default RLModule acting, ``--num-envs`` sub-envs of
MiniGrid DoorKey-5x5 with flat float observations, or with ``--env bigfish`` Procgen BigFish (easy, 64×64
RGB: RLlib's default RLModule is then its CNN) samples ``--steps`` env steps per round:

- **plain**: the env as RLlib makes it (``reset`` with RLlib's seeds);
- **PLR**: the same env under :func:`plr_gym.rllib.add_plr`: each reset draws its level from a
  :class:`~plr_gym.LevelSampler` hosted in a Ray actor, through a
  :class:`~plr_gym.distributed.RemoteLevelSource` (``--prefetch`` levels per env ready), ``info["level"]``
  on every step.

A second plain runner, built the same way, is the control: its ratio to the first shows how much two
identical runners differ here (module weights, episodes, the machine's other jobs). Rounds rotate the
order of the runners (the machine may be shared: compare the ratios, measured under the same load).
Prints a Markdown table: env steps per second of the median round, and the median (and quartiles) of the
per-round ratios of steps per second to plain, by wall-clock and by process CPU time (steps counted as
sampled: a runner may overshoot ``--steps``), the steps per CPU-second (what the runner does on a core of
its own, whatever the machine's load) and the episodes that ended per 1,000 steps (with the steps/s: how
often a runner resets). The learner side (scoring in the GAE connector) is not timed.

    python benchmarks/distributed/rllib_throughput.py            # 8 rounds of 4000 steps, 4 envs
    python benchmarks/distributed/rllib_throughput.py --quick    # a smoke run
    python benchmarks/distributed/rllib_throughput.py --num-envs 1 --env bigfish  # 1 env, a CNN
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))  # benchmarks/common: _provenance
from _provenance import cpu_model, git_commit, load_average

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))


def make_env(env_config: Any) -> Any:
    import gymnasium as gym
    import minigrid  # noqa: F401
    from minigrid.wrappers import ImgObsWrapper

    env = gym.wrappers.FlattenObservation(ImgObsWrapper(gym.make("MiniGrid-DoorKey-5x5-v0")))
    return gym.wrappers.DtypeObservation(env, np.float32)


def make_bigfish(env_config: Any) -> Any:
    import gymnasium as gym

    import plr_gym.envs  # noqa: F401  (registers plr_gym/procgen-*)

    env = gym.make("plr_gym/procgen-bigfish-v0", distribution_mode="easy")
    return gym.wrappers.DtypeObservation(env, np.float32)  # RLlib's CNN takes float images


def build_runners(num_envs: int, prefetch: int, env: str = "doorkey") -> dict[str, Any]:
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner
    from ray.tune.registry import register_env

    from plr_gym import LevelSampler
    from plr_gym.distributed import RemoteLevelSource, host_level_source
    from plr_gym.rllib import add_plr

    maker = make_bigfish if env == "bigfish" else make_env
    register_env("plr_bench_doorkey", maker)

    def config() -> Any:
        return PPOConfig().env_runners(num_env_runners=0, num_envs_per_env_runner=num_envs).debugging(seed=0)

    plain = config().environment(env="plr_bench_doorkey")
    source = RemoteLevelSource(
        host_level_source(LevelSampler(range(200), strategy="value_l1", seed=0)), prefetch=prefetch
    )
    plr = add_plr(config(), source, maker)
    return {
        "plain": SingleAgentEnvRunner(config=plain),
        "PLR": SingleAgentEnvRunner(config=plr),
        "plain (control)": SingleAgentEnvRunner(config=plain.copy()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--num-envs", type=int, default=4)
    parser.add_argument("--steps", type=int, default=4000, help="env steps per round")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--prefetch", type=int, default=2)
    parser.add_argument("--env", choices=("doorkey", "bigfish"), default="doorkey")
    parser.add_argument("--quick", action="store_true", help="2 rounds of 400 steps")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.rounds = 400, 2

    import ray

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        runners = build_runners(args.num_envs, args.prefetch, args.env)
        for runner in runners.values():  # warm-up: first resets, prefetch queue, torch
            runner.sample(num_timesteps=max(100, args.steps // 10))
        wall: dict[str, list[float]] = {name: [] for name in runners}  # seconds per env step
        cpu: dict[str, list[float]] = {name: [] for name in runners}
        ends: dict[str, list[int]] = {name: [] for name in runners}  # episodes that ended, per round
        for k in range(args.rounds):
            names = list(runners)
            order = names[k % len(names) :] + names[: k % len(names)]
            for name in order:
                w0, c0 = time.perf_counter(), time.process_time()
                episodes = runners[name].sample(num_timesteps=args.steps)
                steps = sum(len(e) for e in episodes)  # at least args.steps: a runner may overshoot
                ends[name].append(1000 * sum(bool(e.is_done) for e in episodes) / steps)
                wall[name].append((time.perf_counter() - w0) / steps)
                cpu[name].append((time.process_time() - c0) / steps)
                assert steps >= args.steps
        for runner in runners.values():
            runner.stop()
    finally:
        ray.shutdown()

    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    print(f"- command: `python benchmarks/distributed/rllib_throughput.py {' '.join(sys.argv[1:])}`".rstrip())
    print(f"- commit: {git_commit()}")
    print(f"- date: {now}")
    print(f"- machine: {cpu_model()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    print(f"- load: {load_average()}")
    print(
        f"- {args.env}: {args.rounds} rounds of {args.steps} env steps, {args.num_envs} envs, prefetch "
        f"{args.prefetch}"
    )
    print()
    print(
        "| env runner | steps/s (median round) | ratio to plain (wall) | wall quartiles | "
        "ratio to plain (CPU) | CPU quartiles | steps per CPU-second | episode ends / 1000 steps |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for name in wall:
        rate = 1.0 / float(np.median(wall[name]))
        by_wall = np.array(wall["plain"]) / np.array(wall[name])  # per-round ratios of steps/s
        by_cpu = np.array(cpu["plain"]) / np.array(cpu[name])
        q_wall, q_cpu = np.percentile(by_wall, [25, 75]), np.percentile(by_cpu, [25, 75])
        print(
            f"| {name} | {rate:,.0f} | {np.median(by_wall):.3f} | {q_wall[0]:.3f}–{q_wall[1]:.3f} | "
            f"{np.median(by_cpu):.3f} | {q_cpu[0]:.3f}–{q_cpu[1]:.3f} | "
            f"{1.0 / float(np.median(cpu[name])):,.0f} | {np.mean(ends[name]):.1f} |"
        )


if __name__ == "__main__":
    main()
