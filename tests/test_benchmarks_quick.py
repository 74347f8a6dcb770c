"""``benchmarks/sampler_speed.py --quick`` runs and reports both samplers (no timing assertions)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "sampler_speed.py"
VENV_PYTHON = ROOT / ".venv" / "bin" / "python"


def test_quick_benchmark_reports_both_samplers() -> None:
    python = str(VENV_PYTHON) if VENV_PYTHON.exists() else sys.executable
    proc = subprocess.run(
        [python, str(SCRIPT), "--quick"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, (
        f"exit code {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    )
    out = proc.stdout
    for header in ("- command:", "- commit:", "- machine:", "- date:", "- load average at start:"):
        assert header in out, f"missing {header!r} in:\n{out}"
    rows = [line for line in out.splitlines() if line.startswith("| ")]
    for n in ("200", "10k"):
        for name in ("plr_gym LevelSampler", "Syllabus TaskSampler"):
            assert any(line.startswith(f"| {n} | {name} |") for line in rows), (
                f"no {name} row for N={n}:\n{out}"
            )
    assert "Speedup" in out


def run_quick(script: str, *extra: str) -> str:
    python = str(VENV_PYTHON) if VENV_PYTHON.exists() else sys.executable
    proc = subprocess.run(
        [python, str(ROOT / "benchmarks" / script), "--quick", *extra],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, (
        f"exit code {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    )
    return proc.stdout


def test_overhead_quick_reports_every_variant() -> None:
    out = run_quick("overhead.py")
    for label in ("| PPO |", "| PPO + PLR (value_l1) |", "| PPO + PLR (policy_entropy) |"):
        assert label in out, out


def test_procgen_switch_quick() -> None:
    out = run_quick("procgen_switch.py")
    rows = [line for line in out.splitlines() if line.startswith("| ")]
    assert rows and rows[0].startswith("| game | first visit | revisit (cached) |"), out
    assert any(line.startswith("| coinrun |") for line in rows), out


def test_per_speed_quick() -> None:
    out = run_quick("per_speed.py")
    assert "plr_gym" in out, out


def test_replay_memory_quick() -> None:
    out = run_quick("replay_memory.py")
    for header in ("- command:", "- commit:", "- machine:", "- date:", "- load average at start:"):
        assert header in out, out
    for label in ("| SB3 ReplayBuffer + VecFrameStack(4) |", "| plr_gym FrameStackReplayBuffer(n_stack=4) |"):
        assert sum(line.startswith(label) for line in out.splitlines()) == 2, out  # memory and sampling rows
    assert "| SharedReplayWriter (shared memory) |" in out and "| pipes + SB3 ReplayBuffer.add |" in out
    assert "frame-stack / SB3: RSS" in out


def test_procgen_throughput_quick() -> None:
    out = run_quick("procgen_throughput.py")
    rows = [line for line in out.splitlines() if line.startswith("| ")]
    assert rows and rows[0].startswith("| N | route | steps/s | ratio to stock (wall) |"), out
    for route in (
        "stock ProcgenGym3Env",
        "batched + PLR (SB3)",
        "batched + PLR (Gymnasium)",
        "DummyVecEnv + PLR",
    ):
        assert any(line.startswith(f"| 16 | {route} |") for line in rows), out
    assert any(line.startswith("| batched (ProcgenVecEnv) |") for line in rows), out
