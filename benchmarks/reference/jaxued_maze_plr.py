"""Run JaxUED's ``examples/maze_plr.py`` (Robust PLR, and ACCEL with ``--use_accel``) on plr_gym's drop-in.

The script is copied with exactly one line changed, ``from jaxued.level_sampler import LevelSampler`` ->
``from plr_gym.jax.jaxued import LevelSampler`` (checked: any other difference fails), and run for a few
updates on the CPU with Weights & Biases disabled.

It needs JaxUED's example environment, which is not plr_gym's (so this is not part of the test suite):
``pip install jaxued==0.0.1 flax optax distrax chex gymnax orbax-checkpoint "wandb<0.18" "moviepy<2" imageio``
(``maze_plr.py`` logs videos with the ``wandb.Video`` and ``moviepy.editor`` of those versions), with
``jax.tree_map`` replaced by ``jax.tree_util.tree_map`` in the installed ``jaxued`` (removed from JAX; fixed
upstream after the 0.0.1 release), and ``maze_plr.py`` from a JaxUED checkout (github.com/DramaCow/jaxued).

    python benchmarks/reference/jaxued_maze_plr.py path/to/jaxued/examples/maze_plr.py [--accel]
"""

from __future__ import annotations

import argparse
import difflib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))  # benchmarks/common: _provenance

from _provenance import cpu_model, git_commit, load_average

ORIGINAL = "from jaxued.level_sampler import LevelSampler"
REPLACED = "from plr_gym.jax.jaxued import LevelSampler"
TINY = [
    "--num_updates", "4", "--eval_freq", "2", "--num_steps", "16", "--num_train_envs", "4",
    "--checkpoint_save_interval", "0", "--eval_num_attempts", "1", "--level_buffer_capacity", "64",
]  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("maze_plr", type=Path, help="JaxUED's examples/maze_plr.py")
    parser.add_argument("--accel", action="store_true", help="run ACCEL (--use_accel)")
    args = parser.parse_args()
    source = args.maze_plr.read_text()
    changed = source.replace(ORIGINAL, REPLACED)
    diff = [
        line
        for line in difflib.unified_diff(source.splitlines(), changed.splitlines(), lineterm="", n=0)
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]
    assert diff == [f"-{ORIGINAL}", f"+{REPLACED}"], diff
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "maze_plr.py"
        script.write_text(changed)
        command = [sys.executable, str(script), *TINY, *(["--use_accel"] if args.accel else [])]
        src = str(Path(__file__).resolve().parents[2] / "src")
        env = {**os.environ, "WANDB_MODE": "disabled", "PYTHONPATH": src}
        start = time.perf_counter()
        proc = subprocess.run(command, cwd=tmp, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - start
    print(f"# JaxUED maze_plr.py{' --use_accel' if args.accel else ''} on plr_gym.jax.jaxued.LevelSampler")
    print(f"commit {git_commit()}, {cpu_model()}, load {load_average()}")
    print(f"the one changed line: {ORIGINAL!r} -> {REPLACED!r}")
    print(f"arguments: {' '.join(TINY)}{' --use_accel' if args.accel else ''}")
    logged = [line for line in proc.stdout.splitlines() if line.startswith("Logging update")]
    print(f"exit status {proc.returncode} after {wall:.0f} s (compiles included); {logged}")
    if proc.returncode:
        print(proc.stderr[-3000:])
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
