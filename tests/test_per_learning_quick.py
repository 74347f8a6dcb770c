"""``benchmarks/replay/per_learning.py --quick`` runs the Blind Cliffwalk and PER beats uniform replay by >=
10x."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "replay" / "per_learning.py"
VENV_PYTHON = ROOT / ".venv" / "bin" / "python"


def _median(cell: str) -> int:
    return int(cell.strip().split(" ")[0].replace(",", ""))


def test_quick_cliffwalk_benchmark() -> None:
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
    head = next(line for line in out.splitlines() if line.startswith("| n |"))
    columns = [c.strip() for c in head.strip("|").split("|")]
    rows = {
        int(cells[0]): cells
        for cells in (
            [c.strip() for c in line.strip("|").split("|")]
            for line in out.splitlines()
            if line.startswith("| ")
        )
        if cells[0].isdigit()
    }
    assert sorted(rows) == list(range(2, 11)), out
    row = rows[10]
    uniform, per, oracle = (_median(row[columns.index(name)]) for name in ("uniform", "PER α=1", "oracle"))
    # Deterministic (fixed seeds): prioritized replay needs >= 10x fewer updates than uniform at n = 10,
    # and the oracle fewer still.
    assert uniform >= 10 * per, row
    assert oracle < per, row
    assert "for every n >= 10: yes" in out
