"""Run JaxUED's ``examples/maze_plr.py`` (Robust PLR, and ACCEL with ``--use_accel``) on plr_gym's drop-in.

The script is copied with exactly one line changed, ``from jaxued.level_sampler import LevelSampler`` ->
``from plr_gym.jax.jaxued import LevelSampler`` (checked: any other difference fails), and run for a few
updates on the CPU with Weights & Biases disabled, at a rollout length where episodes end (``--num_steps
256`` > the maze's 250-step limit), so that levels are scored, inserted and replayed, and ACCEL mutates.

The copy runs under a small harness (in the same process, before the script): it counts, through
``jax.debug.callback``, what the drop-in does inside the script's ``jit`` — levels offered to
``insert_batch`` and those stored, levels handed out by ``sample_replay_levels``, scores written by
``update_batch``, and the levels JaxUED's mutator (``make_level_mutator_minimax``) edits — and prints the
counts as one ``COUNTS {...}`` line (JSON). It also replaces ``wandb.Video`` by a no-op (W&B is disabled,
and wandb >= 0.18 refuses the script's call without ``format=``). The script itself is not changed beyond
its import line.

It needs JaxUED's example environment, which is not plr_gym's (so the test that runs it is skipped without
it): ``pip install jaxued==0.0.1 gymnax flax optax distrax chex orbax-checkpoint wandb`` (a venv of the
3.13 stack already has all but ``jaxued`` and ``gymnax``), with ``jax.tree_map`` replaced by
``jax.tree_util.tree_map`` in the installed ``jaxued`` (removed from JAX; fixed upstream after the 0.0.1
release), and ``maze_plr.py`` from a JaxUED checkout (github.com/DramaCow/jaxued).

    python benchmarks/reference/jaxued_maze_plr.py path/to/maze_plr.py [--accel] [--num-updates 6]
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))  # benchmarks/common: _provenance

from _provenance import cpu_model, git_commit, load_average

ORIGINAL = "from jaxued.level_sampler import LevelSampler"
REPLACED = "from plr_gym.jax.jaxued import LevelSampler"


def arguments(num_updates: int, num_steps: int) -> list[str]:
    """maze_plr.py's arguments: a small buffer (8 levels, replay from 4 on) so that replay starts after one
    update of 4 envs; one evaluation level, one attempt; evaluations at half-way and at the end."""
    return [
        "--num_updates", str(num_updates), "--eval_freq", str(max(1, num_updates // 2)),
        "--num_steps", str(num_steps), "--num_train_envs", "4", "--checkpoint_save_interval", "0",
        "--eval_num_attempts", "1", "--eval_levels", "SixteenRooms", "--level_buffer_capacity", "8",
    ]  # fmt: skip


def changed_script(source: str) -> str:
    """``source`` with its one import line changed (asserts that nothing else differs)."""
    changed = source.replace(ORIGINAL, REPLACED)
    diff = [
        line
        for line in difflib.unified_diff(source.splitlines(), changed.splitlines(), lineterm="", n=0)
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]
    assert diff == [f"-{ORIGINAL}", f"+{REPLACED}"], diff
    return changed


def run_counted(script: str, argv: list[str]) -> None:
    """The harness (in the child process): install the counters, run ``script`` as ``__main__``, print
    the counts."""
    import atexit
    import runpy
    from collections import Counter

    import jax
    import jaxued.environments.maze as maze
    import numpy as np
    import wandb

    import plr_gym.jax.jaxued as dropin

    counts: Counter[str] = Counter()

    def add(**values: Any) -> None:
        counts.update({k: int(np.sum(v)) for k, v in values.items()})

    class Counting(dropin.LevelSampler):  # type: ignore[misc]
        def insert_batch(self, sampler: Any, levels: Any, scores: Any, level_extras: Any = None) -> Any:
            sampler, idx = super().insert_batch(sampler, levels, scores, level_extras)
            finite = jax.numpy.isfinite(scores)
            jax.debug.callback(
                lambda i, f: add(offered=np.ones_like(i), finite=f, inserted=i >= 0), idx, finite
            )
            return sampler, idx

        def sample_replay_levels(self, sampler: Any, rng: Any, num: int) -> Any:
            sampler, (idx, levels) = super().sample_replay_levels(sampler, rng, num)
            jax.debug.callback(lambda i: add(replayed=i >= 0), idx)
            return sampler, (idx, levels)

        def update_batch(self, sampler: Any, level_inds: Any, scores: Any, level_extras: Any = None) -> Any:
            jax.debug.callback(lambda i: add(updated=i >= 0), level_inds)
            return super().update_batch(sampler, level_inds, scores, level_extras)

    make_mutator = maze.make_level_mutator_minimax

    def counted_mutator(*args: Any, **kwargs: Any) -> Any:
        mutate = make_mutator(*args, **kwargs)

        def wrapped(rng: Any, level: Any, n: Any) -> Any:
            child = mutate(rng, level, n)
            changed = jax.tree.reduce(
                jax.numpy.logical_or, jax.tree.map(lambda a, b: (a != b).any(), child, level)
            )
            jax.debug.callback(lambda c: add(mutated=np.ones_like(c), mutated_changed=c), changed)
            return child

        return wrapped

    class NoVideo:  # W&B is disabled; wandb >= 0.18 wants a format= that maze_plr.py does not pass
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            pass

    dropin.LevelSampler = Counting
    maze.make_level_mutator_minimax = counted_mutator
    wandb.Video = NoVideo
    atexit.register(lambda: print("COUNTS " + json.dumps(dict(sorted(counts.items()))), flush=True))
    sys.argv = [script, *argv]
    runpy.run_path(script, run_name="__main__")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("maze_plr", type=Path, help="JaxUED's examples/maze_plr.py")
    parser.add_argument("--accel", action="store_true", help="run ACCEL (--use_accel)")
    parser.add_argument("--num-updates", type=int, default=6)
    parser.add_argument("--num-steps", type=int, default=256)
    parser.add_argument("--child", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:  # inside the harness process
        run_counted(str(args.maze_plr), args.child)
        return 0
    changed = changed_script(args.maze_plr.read_text())
    script_args = arguments(args.num_updates, args.num_steps) + (["--use_accel"] if args.accel else [])
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "maze_plr.py"
        script.write_text(changed)
        command = [sys.executable, str(Path(__file__).resolve()), str(script), "--child", *script_args]
        src = str(Path(__file__).resolve().parents[2] / "src")
        env = {**os.environ, "WANDB_MODE": "disabled", "PYTHONPATH": src}
        start = time.perf_counter()
        proc = subprocess.run(command, cwd=tmp, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - start
    print(f"# JaxUED maze_plr.py{' --use_accel' if args.accel else ''} on plr_gym.jax.jaxued.LevelSampler")
    print(f"commit {git_commit()}, {cpu_model()}, load {load_average()}")
    print(f"the one changed line: {ORIGINAL!r} -> {REPLACED!r}")
    print(f"arguments: {' '.join(script_args)}")
    logged = [line for line in proc.stdout.splitlines() if line.startswith("Logging update")]
    print(f"exit status {proc.returncode} after {wall:.0f} s (compiles included); {logged}")
    counts = [line for line in proc.stdout.splitlines() if line.startswith("COUNTS ")]
    print(counts[-1] if counts else "COUNTS missing")
    if proc.returncode:
        print(proc.stderr[-3000:])
        return proc.returncode
    return 0 if counts and ran_the_sampler(json.loads(counts[-1].removeprefix("COUNTS ")), args.accel) else 1


def ran_the_sampler(counts: dict[str, int], accel: bool) -> bool:
    """The run is evidence only if levels were inserted, replayed and re-scored (and, for ACCEL, mutated)."""
    needed = ("inserted", "replayed", "updated") + (("mutated",) if accel else ())
    missing = [key for key in needed if counts.get(key, 0) <= 0]
    if missing:
        print(f"the sampler did not run: no {', '.join(missing)} (longer --num-steps, more --num-updates?)")
    return not missing


if __name__ == "__main__":
    sys.exit(main())
