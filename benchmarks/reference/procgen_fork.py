"""Procgen as level-replay ran it (its fork of 0.9.5) against the Procgen the preset runs (0.10.7).

level-replay installs ``minqi/procgen`` (Procgen 0.9.5 plus per-env reseeding); ``--preset
paper-procgen`` runs stock Procgen 0.10.7 (procgen-mirror; procgen-gym on Python 3.13 has the same C++).
This script asks whether the two generate the same levels and the same dynamics for the same level seeds:
for each game (all 16, ``distribution_mode="easy"``) and each level seed, one env with ``num_levels=1,
start_level=seed`` plays a fixed action sequence (seeded by the level) of ``--steps`` steps (episodes
restart on the same level), and every frame and reward is compared.

Both builds are Python packages named ``procgen``, so each records in its own process (``--record``): per
level a 64-bit hash of every frame, the rewards and the episode ends, and the raw first frame.
``--compare`` reads the two records and prints the table (docs/paper.md quotes it).

Build the fork first (cmake, Qt5 and a C++ compiler; on Debian ``apt-get install cmake qtbase5-dev g++``)::

    git clone https://github.com/minqi/procgen /tmp/procgen-fork   # level-replay's requirements.txt pins it
    cd /tmp/procgen-fork && python -c "import sys; sys.path.insert(0, 'procgen'); import build; build.build()"

then, from the repository root, on the Python 3.11 stack (stock Procgen installed)::

    python benchmarks/reference/procgen_fork.py --record fork --fork-dir /tmp/procgen-fork --out /tmp/pf
    python benchmarks/reference/procgen_fork.py --record stock --out /tmp/pf
    python benchmarks/reference/procgen_fork.py --compare --out /tmp/pf    # the table

``--quick`` records 2 games × 3 levels × 50 steps of the stock build and compares it with itself (the
comparison's own check; it needs no fork).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))  # benchmarks/common: _provenance

from _provenance import cpu_model, git_commit, load_average

GAMES = (
    "bigfish", "bossfight", "caveflyer", "chaser", "climber", "coinrun", "dodgeball", "fruitbot",
    "heist", "jumper", "leaper", "maze", "miner", "ninja", "plunder", "starpilot",
)  # fmt: skip
NUM_ACTIONS = 15  # both builds: the same 15 button combos, in the same order


def actions_for(level: int, steps: int) -> np.ndarray:
    """The fixed action sequence of one level: the same for both builds."""
    return np.random.default_rng(10_000 + level).integers(0, NUM_ACTIONS, steps).astype(np.int32)


def frame_hash(frame: np.ndarray) -> int:
    digest = hashlib.blake2b(np.ascontiguousarray(frame).tobytes(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


class ForkEnv:
    """One env of level-replay's fork (Procgen 0.9.5, a baselines-style VecEnv of one)."""

    def __init__(self, game: str, level: int) -> None:
        from procgen import ProcgenEnv  # the fork: its folder is first on sys.path

        self.env = ProcgenEnv(
            num_envs=1, env_name=game, num_levels=1, start_level=level, distribution_mode="easy",
            rand_seed=0, num_threads=0,
        )  # fmt: skip

    def first(self) -> np.ndarray:
        return self.env.reset()["rgb"][0]

    def step(self, action: int) -> tuple[np.ndarray, float, bool]:
        obs, reward, done, _ = self.env.step(np.array([action], np.int32))
        return obs["rgb"][0], float(reward[0]), bool(done[0])

    def close(self) -> None:
        self.env.close()


class StockEnv:
    """One env of stock Procgen 0.10.7 (gym3 API)."""

    def __init__(self, game: str, level: int) -> None:
        from procgen import ProcgenGym3Env

        self.env = ProcgenGym3Env(
            num=1, env_name=game, num_levels=1, start_level=level, distribution_mode="easy", rand_seed=0
        )

    def first(self) -> np.ndarray:
        return self.env.observe()[1]["rgb"][0]

    def step(self, action: int) -> tuple[np.ndarray, float, bool]:
        self.env.act(np.array([action], np.int32))
        reward, obs, first = self.env.observe()
        return obs["rgb"][0], float(reward[0]), bool(first[0])  # `first`: the step ended an episode

    def close(self) -> None:
        self.env.close()


def record(build: str, games: tuple[str, ...], levels: int, steps: int, out: Path) -> None:
    """Play every (game, level) on one build and save hashes, rewards, ends and first frames."""
    import procgen

    make = ForkEnv if build == "fork" else StockEnv
    data: dict[str, np.ndarray] = {}
    start = time.perf_counter()
    for game in games:
        hashes = np.zeros((levels, steps + 1), np.uint64)
        rewards = np.zeros((levels, steps), np.float32)
        dones = np.zeros((levels, steps), bool)
        firsts = np.zeros((levels, 64, 64, 3), np.uint8)
        for level in range(levels):
            env = make(game, level)
            firsts[level] = env.first()
            hashes[level, 0] = frame_hash(firsts[level])
            for t, action in enumerate(actions_for(level, steps)):
                frame, rewards[level, t], dones[level, t] = env.step(int(action))
                hashes[level, t + 1] = frame_hash(frame)
            env.close()
        data.update({f"{game}/hash": hashes, f"{game}/reward": rewards, f"{game}/done": dones,
                     f"{game}/first": firsts})  # fmt: skip
        print(f"{build} {game}: {levels} levels × {steps} steps", flush=True)
    out.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(out / f"{build}.npz", **data)
    meta = {
        "build": build,
        "procgen": str(getattr(procgen, "__version__", "?")).strip(),
        "module": procgen.__file__,
        "games": list(games),
        "levels": levels,
        "steps": steps,
        "seconds": round(time.perf_counter() - start, 1),
        "commit": git_commit(),
        "machine": cpu_model(),
        "load": load_average(),
    }
    (out / f"{build}.json").write_text(json.dumps(meta, indent=1) + "\n")


def first_divergence(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per row, the first index where a and b differ (the row length where they never do)."""
    differ = a != b
    return np.where(differ.any(axis=1), differ.argmax(axis=1), a.shape[1])


def compare_game(fork: Any, stock: Any, game: str) -> dict[str, Any]:
    fh, sh = fork[f"{game}/hash"], stock[f"{game}/hash"]
    same_first = fh[:, 0] == sh[:, 0]
    same_frames = (fh == sh).all(axis=1)
    same_rewards = (fork[f"{game}/reward"] == stock[f"{game}/reward"]).all(axis=1)
    same_dones = (fork[f"{game}/done"] == stock[f"{game}/done"]).all(axis=1)
    diverge = first_divergence(fh, sh)
    differing = ~same_frames
    pixel = np.abs(fork[f"{game}/first"].astype(np.int16) - stock[f"{game}/first"].astype(np.int16))
    return {
        "game": game,
        "levels": int(fh.shape[0]),
        "same_first_frame": int(same_first.sum()),
        "same_all_frames": int(same_frames.sum()),
        "same_rewards": int(same_rewards.sum()),
        "same_episode_ends": int(same_dones.sum()),
        "median_first_differing_frame": float(np.median(diverge[~same_frames])) if differing.any() else None,
        "first_frame_pixels_differing": float((pixel.max(axis=-1) > 0).mean()),
        "first_frame_max_abs_difference": int(pixel.max()),
        "episodes_fork": int(fork[f"{game}/done"].sum()),
        "episodes_stock": int(stock[f"{game}/done"].sum()),
    }


def compare(out: Path, fork_name: str = "fork") -> list[dict[str, Any]]:
    fork, stock = np.load(out / f"{fork_name}.npz"), np.load(out / "stock.npz")
    meta = json.loads((out / "stock.json").read_text())
    rows = [compare_game(fork, stock, game) for game in meta["games"]]
    steps = meta["steps"]
    header = (
        f"| game | levels | same first frame | same {steps + 1} frames | same rewards | same episode ends"
        " | median first differing frame | first-frame pixels differing (max abs) | episodes (fork / stock) |"
    )
    print(header)
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        first_diff = r["median_first_differing_frame"]
        median = "—" if first_diff is None else f"{first_diff:.0f}"
        pixels = f"{100 * r['first_frame_pixels_differing']:.3f}% ({r['first_frame_max_abs_difference']})"
        episodes = f"{r['episodes_fork']} / {r['episodes_stock']}"
        cells = [r["game"], r["levels"], r["same_first_frame"], r["same_all_frames"], r["same_rewards"],
                 r["same_episode_ends"], median, pixels, episodes]  # fmt: skip
        print("| " + " | ".join(str(c) for c in cells) + " |")
    (out / "comparison.json").write_text(json.dumps(rows, indent=1) + "\n")
    return rows


def quick(out: Path) -> None:
    """The comparison's own check without the fork: the stock build against itself must match everywhere."""
    games, levels, steps = ("coinrun", "maze"), 3, 50
    for name in ("stock", "stock_again"):
        cmd = [sys.executable, __file__, "--record", "stock", "--out", str(out / name),
               "--levels", str(levels), "--steps", str(steps), "--games", *games]  # fmt: skip
        subprocess.run(cmd, check=True)
    (out / "stock_again" / "stock.npz").rename(out / "stock" / "again.npz")
    rows = compare(out / "stock", fork_name="again")
    assert all(r["same_all_frames"] == levels and r["same_rewards"] == levels for r in rows), rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--record", choices=("fork", "stock"), help="play every level on this build")
    parser.add_argument("--compare", action="store_true", help="print the table from the two records")
    parser.add_argument("--quick", action="store_true", help="the stock build against itself (no fork)")
    parser.add_argument("--fork-dir", type=Path, help="with --record fork: the built fork's checkout")
    parser.add_argument("--games", nargs="+", choices=GAMES, default=list(GAMES))
    parser.add_argument("--levels", type=int, default=100)
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--out", type=Path, default=Path("/tmp/procgen_fork"))
    args = parser.parse_args(argv)
    if args.quick:
        quick(args.out)
    elif args.record:
        if args.record == "fork":
            if args.fork_dir is None or not (args.fork_dir / "procgen" / "env.py").exists():
                parser.error("--record fork needs --fork-dir: a built checkout of minqi/procgen (see above)")
            sys.path.insert(0, str(args.fork_dir.resolve()))
        record(args.record, tuple(args.games), args.levels, args.steps, args.out)
    elif args.compare:
        compare(args.out)
    else:
        parser.error("give --record fork|stock, --compare or --quick")


if __name__ == "__main__":
    main()
