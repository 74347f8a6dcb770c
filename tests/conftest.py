"""Helpers shared by several test files (import them with ``from conftest import ...``) and fixtures."""

from __future__ import annotations

import fnmatch
import os
import platform
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


def repository_url() -> str:
    """The repository's one URL, ``project.urls.Repository`` in pyproject.toml (everything else uses it)."""
    import tomllib

    url: str = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]["Repository"]
    return url


def run_benchmark(script: str, *args: str, timeout: float = 600) -> str:
    """``python benchmarks/<area>/<script> *args`` from the checkout's root, with the Python running the tests
    (each CI stack has its own venv); asserts exit code 0, showing both streams otherwise; returns stdout."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, (
        f"exit code {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    )
    return proc.stdout


# --- the stacks -------------------------------------------------------------------------------------------
# `make test` runs the suite on two stacks (docs/install.md): Python 3.11 + numpy 1.26 + procgen-mirror +
# Ray/RLlib, and Python 3.13 + numpy 2 + procgen-gym + Ray core. A test of a package that a stack cannot hold
# skips with `importorskip_on_stack`, naming the stack; CI sets PLR_GYM_ALLOWED_SKIPS to the node ids (fnmatch
# patterns, comma-separated) that may skip there, and the run fails if anything else skipped.


def stack_name() -> str:
    """``"Python 3.13.0, numpy 2.3.5, gymnasium 1.2.3"``: what a stack-dependent skip names."""
    return f"Python {platform.python_version()}, numpy {np.__version__}, gymnasium {gym.__version__}"


def importorskip_on_stack(module: str, why: str) -> Any:
    """``pytest.importorskip(module)`` whose reason names this stack and says why it lacks ``module``."""
    reason = f"{module} is not installed on this stack ({stack_name()}): {why}"
    return pytest.importorskip(module, reason=reason)


def unexpected_skips(skipped: list[Any], allowed: list[str]) -> list[str]:
    """The node ids (with their reasons) of the skipped reports that no pattern in ``allowed`` matches."""
    bad = []
    for report in skipped:
        nodeid = report.nodeid or str(getattr(report, "fspath", ""))
        if not any(fnmatch.fnmatch(nodeid, pattern) for pattern in allowed):
            longrepr = report.longrepr
            reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
            reason = reason.removeprefix("Skipped: ")
            bad.append(f"{nodeid}: {reason}")
    return sorted(set(bad))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """With PLR_GYM_ALLOWED_SKIPS set (CI), a skip that the stack does not allow fails the run."""
    allowed_env = os.environ.get("PLR_GYM_ALLOWED_SKIPS")
    if allowed_env is None or hasattr(session.config, "workerinput"):  # not CI, or an xdist worker
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:
        return
    allowed = [p.strip() for p in allowed_env.split(",") if p.strip()]
    bad = unexpected_skips(reporter.stats.get("skipped", []), allowed)
    if bad:
        reporter.write("\n")
        reporter.write_sep("=", "skips this stack does not allow (PLR_GYM_ALLOWED_SKIPS)", red=True)
        for line in bad:
            reporter.write_line(line)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
