"""Per-reset cost of switching Procgen levels: ProcgenLevelEnv vs re-creating a Procgen env per level.

Not a test. For each game, times ``reset(seed=s)`` of :class:`plr_gym.envs.ProcgenLevelEnv` over ``--levels``
levels it has never played (first visit), then over the same levels again (revisit, served by the level
cache), and times the naive alternative: building the installed Procgen build's stock env
(``procgen.ProcgenGym3Env(num=1, num_levels=1, start_level=s)`` on procgen-mirror,
``procgen_gym.ProcgenVecEnv(num_envs=1, ...)`` on procgen-gym) for every level (what per-level re-creation
does), with Procgen's default threads and with ``num_threads=0``. Each column is the per-reset time in
milliseconds (median / mean / 95th percentile), after a warm-up of ``--warmup`` levels that are not counted.

    python benchmarks/procgen/procgen_switch.py --games coinrun bigfish maze --levels 200

The "first visit" and "revisit" columns are ProcgenLevelEnv; the output is a Markdown table.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))  # benchmarks/common: _provenance
from _provenance import load_average, procgen_header

ROOT = Path(__file__).resolve().parents[2]


def time_each(fn: Callable[[int], object], levels: Iterable[int]) -> npt.NDArray[np.float64]:
    """Milliseconds per call of ``fn(level)``."""
    out = []
    for level in levels:
        start = time.perf_counter()
        fn(level)
        out.append((time.perf_counter() - start) * 1e3)
    return np.asarray(out)


def summary(ms: npt.NDArray[np.float64]) -> str:
    return f"{np.median(ms):6.3f} / {ms.mean():6.3f} / {np.percentile(ms, 95):6.3f}"


def bench_game(game: str, mode: str, n_levels: int, warmup: int, seed: int) -> list[tuple[str, str]]:
    from plr_gym.envs import ProcgenLevelEnv, procgen_backend

    backend = procgen_backend()

    rng = np.random.default_rng(seed)
    levels = [int(x) for x in rng.choice(2**31 - 1, size=n_levels + warmup, replace=False)]
    warm, measured = levels[:warmup], levels[warmup:]

    env = ProcgenLevelEnv(game, distribution_mode=mode, level_cache_size=n_levels + warmup)
    for level in warm:
        env.reset(seed=level)
    first = time_each(lambda s: env.reset(seed=s), measured)
    revisit = time_each(lambda s: env.reset(seed=s), measured)
    assert env.cache_info()["misses"] == n_levels + warmup, "revisits must hit the cache"
    fast = env.fast_level_switch
    per_level_kb = env.cache_info()["bytes"] / env.cache_info()["levels"] / 1024
    env.close()

    def recreate(num_threads: int | None) -> Callable[[int], object]:
        holder: list[Any] = []

        def make(level: int) -> object:
            extra = {} if num_threads is None else {"num_threads": num_threads}
            new = backend.make_stock(
                1, game, num_levels=1, start_level=level, distribution_mode=mode, **extra
            )
            new.get_state()  # the level is generated at construction; read it back as a user would
            if holder:
                holder.pop().close()
            holder.append(new)
            return new

        return make

    rows = [
        (f"first visit{'' if fast else ' (fallback path)'}", summary(first)),
        ("revisit (cached)", summary(revisit)),
    ]
    for label, threads in (("default threads", None), ("num_threads=0", 0)):
        make = recreate(threads)
        for level in warm:
            make(level)
        rows.append((f"re-create the stock env, {label}", summary(time_each(make, measured))))
    rows.append(("cached state per level", f"{per_level_kb:.1f} KB"))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--games", nargs="+", default=["coinrun", "bigfish", "maze"])
    parser.add_argument("--levels", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--distribution-mode", default="easy")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="smoke run: one game, 20 levels")
    args = parser.parse_args()
    if args.quick:
        args.games, args.levels, args.warmup = args.games[:1], 20, 3

    command = " ".join(["python", os.path.relpath(sys.argv[0], ROOT), *sys.argv[1:]])
    lines = procgen_header(command)
    lines += [
        "",
        f"Per-reset level-switch cost in ms (median / mean / p95) over {args.levels} new levels per game "
        f"(distribution_mode={args.distribution_mode!r}), after {args.warmup} warm-up levels.",
        "",
    ]
    table: list[list[str]] = []
    for game in args.games:
        rows = bench_game(game, args.distribution_mode, args.levels, args.warmup, args.seed)
        if not table:
            table.append(["game", *[label for label, _ in rows]])
        table.append([game, *[value for _, value in rows]])
    lines.append("| " + " | ".join(table[0]) + " |")
    lines.append("|" + "---|" * len(table[0]))
    lines += ["| " + " | ".join(row) + " |" for row in table[1:]]
    lines += ["", f"- load average at end: {load_average()}"]
    print("\n".join(lines))


if __name__ == "__main__":
    main()
