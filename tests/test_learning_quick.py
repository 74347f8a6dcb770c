"""``benchmarks/learning.py --quick`` trains, evaluates and prints a result table (no performance checks)."""

from __future__ import annotations

from pathlib import Path

from conftest import run_benchmark


def test_quick_learning_benchmark_prints_a_table(tmp_path: Path) -> None:
    out = run_benchmark("learning.py", "--quick", "--out", str(tmp_path), timeout=300)
    for header in ("- command:", "- commit:", "- machine:", "- date:", "- load average:"):
        assert header in out, f"missing {header!r} in:\n{out}"
    rows = [line for line in out.splitlines() if line.startswith("| quick |")]
    assert {row.split("|")[2].strip() for row in rows} == {"uniform", "plr"}, out
    assert (tmp_path / "runs" / "quick" / "plr" / "seed0.json").exists()
    assert (tmp_path / "summary.csv").exists()
    assert (tmp_path / "curve_quick.png").exists()
