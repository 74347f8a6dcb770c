"""Where a benchmark ran: CPU model and git commit, shared by the scripts in ``benchmarks/``."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def cpu_model() -> str:
    """The CPU's model name (from /proc/cpuinfo where available)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def git_commit() -> str:
    """Short hash of HEAD (a read-only git call)."""
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"},
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"


def load_average() -> str:
    """The 1/5/15-minute load averages, e.g. ``"1.20/0.90/0.70 (1/5/15 min)"`` (``"n/a"`` where unknown)."""
    try:
        return "/".join(f"{x:.2f}" for x in os.getloadavg()) + " (1/5/15 min)"
    except OSError:
        return "n/a"


def procgen_header(command: str) -> list[str]:
    """Provenance lines of the Procgen benchmarks: command, commit, date, machine, versions, load."""
    import datetime

    import gymnasium
    import numpy as np

    from plr_gym.envs import procgen_backend

    backend = procgen_backend()

    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return [
        f"- command: `{command}`",
        f"- commit: {git_commit()}",
        f"- date: {now}",
        f"- machine: {cpu_model()}, {os.cpu_count()} logical cores, {platform.platform()}",
        f"- software: Python {platform.python_version()}, numpy {np.__version__}, "
        f"gymnasium {gymnasium.__version__}, Procgen build {backend.name} {backend.version}",
        f"- load average at start: {load_average()}",
    ]
