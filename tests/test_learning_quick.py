"""``benchmarks/learning.py --quick`` trains, evaluates and prints a result table (no performance checks)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "learning.py"
VENV_PYTHON = ROOT / ".venv" / "bin" / "python"


def test_quick_learning_benchmark_prints_a_table(tmp_path: Path) -> None:
    python = str(VENV_PYTHON) if VENV_PYTHON.exists() else sys.executable
    proc = subprocess.run(
        [python, str(SCRIPT), "--quick", "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, (
        f"exit code {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    )
    out = proc.stdout
    for header in ("- command:", "- commit:", "- machine:", "- date:", "- load average:"):
        assert header in out, f"missing {header!r} in:\n{out}"
    rows = [line for line in out.splitlines() if line.startswith("| quick |")]
    assert {row.split("|")[2].strip() for row in rows} == {"uniform", "plr"}, out
    assert (tmp_path / "runs" / "quick" / "plr" / "seed0.json").exists()
    assert (tmp_path / "summary.csv").exists()
    assert (tmp_path / "curve_quick.png").exists()
