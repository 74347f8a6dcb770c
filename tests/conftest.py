"""Helpers shared by several test files (import them with ``from conftest import ...``) and fixtures."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from plr_gym.sampler import LevelSampler


class Spy:
    """Records every level a sampler draws."""

    def __init__(self, sampler: LevelSampler) -> None:
        self.drawn: list[int] = []
        original = sampler.sample

        def sample(n: int | None = None) -> Any:
            out = original(n)
            self.drawn.extend(np.atleast_1d(out).tolist())
            return out

        sampler.sample = sample  # type: ignore[method-assign]


class Reference:
    """First observation and full-state hash of ``reset(seed=level)`` on a fresh MiniGrid env, cached."""

    def __init__(self, env_id: str, max_steps: int) -> None:
        from minigrid.wrappers import ImgObsWrapper

        self.env = ImgObsWrapper(gym.make(env_id, max_steps=max_steps))
        self.cache: dict[int, tuple[np.ndarray, int]] = {}

    def __call__(self, level: int) -> tuple[np.ndarray, int]:
        if level not in self.cache:
            obs, _ = self.env.reset(seed=int(level))
            self.cache[level] = (obs, self.env.unwrapped.hash())
        return self.cache[level]


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Run ``plr-gym`` in-process: ``(exit code, stdout, stderr)``."""
    from plr_gym.cli import main

    try:
        code = main(args)
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def one_torch_thread() -> Iterator[None]:
    """Tiny networks: extra torch threads only contend for the CI machine's 2 cores."""
    import torch as th

    threads = th.get_num_threads()
    th.set_num_threads(1)
    yield
    th.set_num_threads(threads)


ROOT = Path(__file__).resolve().parents[1]


def run_benchmark(script: str, *args: str, timeout: float = 600) -> str:
    """``python benchmarks/<script> *args`` from the checkout's root (its ``.venv`` Python when there is
    one); asserts exit code 0, showing both streams otherwise; returns stdout."""
    venv_python = ROOT / ".venv" / "bin" / "python"
    python = str(venv_python) if venv_python.exists() else sys.executable
    proc = subprocess.run(
        [python, str(ROOT / "benchmarks" / script), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, (
        f"exit code {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    )
    return proc.stdout
