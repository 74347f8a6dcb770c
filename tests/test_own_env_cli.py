"""Issue #42: any Gymnasium env through ``plr-gym``, with ``--gym-packages`` and ``--env-kwargs``.

The env is the test module ``own_level_env`` (``OwnLevels/Corridor-v0``, a seed-selected corridor), which
only ``--gym-packages own_level_env`` imports: the tests below remove it from ``sys.modules`` and its ids
from Gymnasium's registry first, or run the command in a fresh process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import gymnasium as gym
import pytest

from conftest import run_cli

pytest.importorskip("matplotlib")

TESTS = Path(__file__).resolve().parent
ENV = "OwnLevels/Corridor-v0"
# a few hundred steps: 2 envs x 32 steps per rollout, 4 rollouts, 8 training and 4 held-out levels
TINY = [
    "--timesteps", "256", "--n-envs", "2", "--n-steps", "32", "--batch-size", "64", "--n-epochs", "1",
    "--num-levels", "8", "--eval-levels", "100:104", "--eval-freq", "128", "--no-progress", "--quiet",
]  # fmt: skip


@pytest.fixture
def unregistered(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """``own_level_env`` not imported and its ids not registered, as in a user's fresh process."""
    monkeypatch.delitem(sys.modules, "own_level_env", raising=False)
    for env_id in [i for i in gym.registry if i.startswith("OwnLevels/")]:
        monkeypatch.delitem(gym.registry, env_id)
    monkeypatch.syspath_prepend(str(TESTS))
    yield


def test_train_resume_evaluate_compare_an_env_of_ones_own(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], unregistered: None
) -> None:
    out = tmp_path / "plr"
    code, _, err = run_cli(["train", ENV, "--out", str(out), *TINY], capsys)
    assert code == 2 and f"unknown environment {ENV!r}" in err and "--gym-packages" in err  # says what to do
    assert not out.exists()

    own = ["--gym-packages", "own_level_env", "--env-kwargs", "max_length:6"]  # rl_zoo3's KEY:VALUE
    code, _, err = run_cli(["train", ENV, "--out", str(out), *own, *TINY], capsys)
    assert code == 0, err
    config = json.loads((out / "config.json").read_text())
    assert config["gym_packages"] == ["own_level_env"] and config["env_kwarg"] == ["max_length=6"]
    assert config["env_family"] == "other" and (out / "model.zip").is_file()
    assert json.loads((out / "evaluation.json").read_text())["timesteps"] == 256
    # --resume continues it (the same command, a larger total); KEY=VALUE is the same option
    resume = ["--gym-packages", "own_level_env", "--env-kwarg", "max_length=6"]
    code, _, err = run_cli(["train", ENV, "--resume", str(out), *resume, *TINY[:-2], "--timesteps", "320",
                            "--no-progress", "--quiet"], capsys)  # fmt: skip
    assert code == 0, err
    assert json.loads((out / "evaluation.json").read_text())["timesteps"] >= 320
    # evaluate finds the env through the run's config.json (its --gym-packages and --env-kwarg)
    code, _, err = run_cli(["evaluate", str(out), "--levels", "200:203", "--n-envs", "2", "--no-progress",
                            "--out", str(tmp_path / "eval.json")], capsys)  # fmt: skip
    assert code == 0, err
    assert sorted(json.loads((tmp_path / "eval.json").read_text())["returns"]) == ["200", "201", "202"]
    # compare --run: two seeds per sampler, held-out curves, the table's verdict (or why there is none), plots
    cmp = tmp_path / "cmp"
    argv = ["compare", "--run", "--env", ENV, *own, "--seeds", "0", "1", "--out", str(cmp), *TINY]
    code, stdout, err = run_cli(argv, capsys)
    assert code == 0, err
    assert "| plr (value_l1), 2 seeds |" in stdout and "| uniform, 2 seeds |" in stdout
    assert "Verdict: " in stdout or "No verdict for plr (value_l1), 2 seeds: PLR replayed" in stdout
    assert (cmp / "comparison.png").is_file() and (cmp / "plr-seed1" / "eval.csv").is_file()


def test_a_reset_that_ignores_its_seed_is_refused_before_training(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], unregistered: None
) -> None:
    out = tmp_path / "bad"
    argv = ["train", "OwnLevels/IgnoresSeed-v0", "--gym-packages", "own_level_env", "--out", str(out), *TINY]
    code, _, err = run_cli(argv, capsys)
    assert code == 2 and "check_level_env" in err
    assert "same seed gave different first observations" in err and "super().reset(seed=seed)" in err
    assert not out.exists()  # refused before the run directory is touched
    code, _, err = run_cli(
        ["train", ENV, "--gym-packages", "no_such_module_42", "--out", str(out), *TINY], capsys
    )
    assert code == 2 and "--gym-packages no_such_module_42: cannot import it" in err
    code, _, err = run_cli(["train", ENV, "--gym-packages", "own_level_env", "--env-kwargs", "max_length",
                            "--out", str(out), *TINY], capsys)  # fmt: skip
    assert code == 2 and "--env-kwargs must be KEY=VALUE (or KEY:VALUE), got 'max_length'" in err


def test_the_console_command_imports_the_users_module(tmp_path: Path) -> None:
    """A fresh process, as a user runs the console script: the module is found in the current directory
    (``-P``: Python does not put the current directory on ``sys.path`` itself, as for ``plr-gym``)."""
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-P", "-m", "plr_gym.cli", "train", ENV, "--gym-packages", "own_level_env",
         "--env-kwargs", "max_length=5", "--out", str(out), *TINY],
        cwd=TESTS, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads((out / "evaluation.json").read_text())["summary"]["n_levels"] == 4
