"""The cost per step of ``level_draw="episode_end"`` on batched Procgen, against episode_start and no PLR.

Not a test. Steps plr_gym's ``ProcgenVecEnv`` (the SB3 face, ``--num-envs`` games, Procgen stepping in the
calling thread so that CPU time covers all of it) with random actions, in three configurations:

- **no PLR**: the raw ``ProcgenVecEnv`` over ``num_levels=200`` (the engine draws each level uniformly);
- **episode_start**: ``PrioritizedLevelReplay(venv, level_draw="episode_start")``, the default: each env's
  next level queued (``env_method("set_next_level")``) when its episode starts;
- **episode_end**: ``level_draw="episode_end"``: the engine asks the sampler for each ended env's level
  inside its step (level-replay's draw).

The sampler is the paper's (``LevelSampler.paper_defaults``: rank, β 0.1, ρ 0.1) over 200 levels, every
level scored beforehand, so that every draw is a replay draw. Two episode-end rates: the game's own
(``--time-limit 0``: bigfish under random actions ends ~0.8% of env steps) and episodes cut at
``--time-limit`` steps (many more draws per step). Rounds are interleaved (each round runs every
configuration for ``--steps`` steps, in a rotated order) so that a shared machine's load falls on all of
them alike; the table gives the median over rounds of wall time and of process CPU time per vector step.

    python benchmarks/procgen/level_draw_cost.py --num-envs 64 --steps 300 --rounds 11 \
        --out benchmarks/results/level_draw_cost.md
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

CONFIGS = ("no PLR", "episode_start", "episode_end")
LEVELS = range(200)


def build(config: str, game: str, n: int, time_limit: int, seed: int) -> Any:
    from plr_gym import LevelSampler, PrioritizedLevelReplay
    from plr_gym.envs.procgen_sb3 import ProcgenVecEnv

    venv = ProcgenVecEnv(game, n_envs=n, num_threads=0, num_levels=len(LEVELS))
    if time_limit:
        venv._batch.max_episode_steps = time_limit
    if config == "no PLR":
        venv.reset()
        return venv
    sampler = LevelSampler.paper_defaults(levels=LEVELS, seed=seed)
    rng = np.random.default_rng(seed)
    for level in LEVELS:  # every level seen: every draw is a replay draw (rank over 200 scores)
        sampler.update(level, float(rng.random()))
    plr = PrioritizedLevelReplay(venv, sampler=sampler, level_draw=config)
    plr.reset()
    return plr


def run(env: Any, actions: np.ndarray) -> tuple[float, float, int]:
    """Step ``env`` through ``actions``; wall and process CPU seconds, episodes ended."""
    ends = 0
    wall, cpu = time.perf_counter(), time.process_time()
    for a in actions:
        ends += int(env.step(a)[2].sum())
    return time.perf_counter() - wall, time.process_time() - cpu, ends


def measure(game: str, n: int, steps: int, rounds: int, time_limit: int, seed: int) -> dict[str, Any]:
    envs = {c: build(c, game, n, time_limit, seed) for c in CONFIGS}
    rng = np.random.default_rng(seed)
    warm = rng.integers(0, 15, (steps, n))
    for env in envs.values():  # level cache and branch warm-up
        run(env, warm)
    results: dict[str, dict[str, list[float]]] = {c: {"wall": [], "cpu": [], "ends": []} for c in CONFIGS}
    for r in range(rounds):
        actions = rng.integers(0, 15, (steps, n))
        order = CONFIGS[r % 3 :] + CONFIGS[: r % 3]
        for c in order:
            wall, cpu, ends = run(envs[c], actions)
            results[c]["wall"].append(wall / steps * 1e3)
            results[c]["cpu"].append(cpu / steps * 1e3)
            results[c]["ends"].append(ends / steps)
    for env in envs.values():
        env.close()
    return results


def table(results: dict[str, Any], label: str) -> list[str]:
    base = results["no PLR"]
    lines = [
        f"### {label}",
        "",
        "| configuration | episode ends per vector step | wall ms/step (median) | CPU ms/step (median) | "
        "CPU vs no PLR | CPU vs episode_start |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    start_cpu = float(np.median(results["episode_start"]["cpu"]))
    for c in CONFIGS:
        wall = float(np.median(results[c]["wall"]))
        cpu = float(np.median(results[c]["cpu"]))
        ends = float(np.mean(results[c]["ends"]))
        rel = cpu / float(np.median(base["cpu"]))
        vs_start = cpu / start_cpu
        lines.append(f"| {c} | {ends:.2f} | {wall:.3f} | {cpu:.3f} | {rel:.3f} | {vs_start:.3f} |")
    # per-round paired differences: episode_end - episode_start, CPU
    diff = np.array(results["episode_end"]["cpu"]) - np.array(results["episode_start"]["cpu"])
    lines += [
        "",
        f"episode_end − episode_start, CPU ms/step per round: {', '.join(f'{d:+.3f}' for d in diff)} "
        f"(median {np.median(diff):+.3f}, min {diff.min():+.3f}, max {diff.max():+.3f})",
        "",
    ]
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--game", default="bigfish")
    p.add_argument("--num-envs", type=int, default=64)
    p.add_argument("--steps", type=int, default=200, help="vector steps per configuration and round")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--time-limit", type=int, default=32, help="the second setting's episode length (0: none)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=None, help="write the Markdown report here")
    args = p.parse_args(argv)
    command = "python benchmarks/procgen/level_draw_cost.py " + " ".join(
        argv if argv is not None else sys.argv[1:]
    )
    lines = [f"# level_draw cost on batched Procgen ({args.game}, {args.num_envs} envs)", ""]
    lines += procgen_header(command)
    lines += [
        "",
        f"{args.rounds} interleaved rounds x {args.steps} vector steps per configuration; Procgen steps in "
        "the calling thread (num_threads=0); sampler: paper-procgen (rank, β 0.1, ρ 0.1), 200 levels, all "
        "scored.",
        "",
    ]
    settings = [(0, "the game's own episode ends")]
    if args.time_limit:
        settings.append((args.time_limit, f"episodes cut at {args.time_limit} steps"))
    for limit, label in settings:
        results = measure(args.game, args.num_envs, args.steps, args.rounds, limit, args.seed)
        lines += table(results, label)
        print("\n".join(lines[-12:]), flush=True)
    text = "\n".join(lines) + "\n"
    if args.out is not None:
        args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
