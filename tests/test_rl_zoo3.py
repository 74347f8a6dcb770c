"""The rl_zoo3 recipe in ``examples/rl_zoo3/`` runs as documented (a few hundred steps), wiring the level
wrapper, the vec env wrapper and the callbacks by dotted path."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

RECIPE = Path(__file__).resolve().parent.parent / "examples" / "rl_zoo3" / "ppo_plr_minigrid.yml"


def documented_command() -> list[str]:
    """The ``python -m rl_zoo3.train ...`` command in the recipe's header comment."""
    lines = [ln.lstrip("# ").rstrip("\\").strip() for ln in RECIPE.read_text().splitlines()]
    start = next(i for i, ln in enumerate(lines) if ln.startswith("python -m rl_zoo3.train"))
    text = " ".join(lines[start : start + 2])
    return shlex.split(text)[1:]  # without "python"


@pytest.mark.slow
def test_rl_zoo3_recipe_trains_with_plr(tmp_path: Path) -> None:
    pytest.importorskip("rl_zoo3")
    pytest.importorskip("minigrid")
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    argv = documented_command()
    assert argv[:2] == ["-m", "rl_zoo3.train"] and "--conf-file" in argv
    argv[argv.index("--conf-file") + 1] = str(RECIPE)
    argv[argv.index("--tensorboard-log") + 1] = str(tmp_path / "tb")
    tiny = ["-n", "384", "--hyperparams", "n_envs:2", "n_steps:64", "batch_size:64", "n_epochs:1"]
    tiny += ["--env-kwargs", "max_steps:20", "--log-folder", str(tmp_path / "logs"), "--seed", "0"]
    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join([str(RECIPE.parents[2] / "src"), env.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [sys.executable, *argv, *tiny], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "logs" / "ppo" / "MiniGrid-DoorKey-5x5-v0_1" / "MiniGrid-DoorKey-5x5-v0.zip").is_file()
    (events,) = (tmp_path / "tb").rglob("events.out.tfevents.*")
    acc = EventAccumulator(str(events), size_guidance={"scalars": 0, "histograms": 0})
    acc.Reload()
    assert acc.Scalars("plr/num_seen")[-1].value > 0  # PLRCallback scored episodes
    assert [h.step for h in acc.Histograms("curriculum/replay_probability")] == [128, 256, 384]
