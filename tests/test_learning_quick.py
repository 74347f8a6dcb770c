"""``benchmarks/learning/learning.py --quick`` trains, evaluates and prints a result table (no performance
checks)."""

from __future__ import annotations

import csv
from pathlib import Path

from conftest import run_benchmark


def test_quick_learning_benchmark_prints_a_table(tmp_path: Path) -> None:
    out = run_benchmark("learning/learning.py", "--quick", "--out", str(tmp_path), timeout=300)
    for header in ("- command:", "- commit:", "- machine:", "- date:", "- load average:"):
        assert header in out, f"missing {header!r} in:\n{out}"
    rows = [line for line in out.splitlines() if line.startswith("| quick |")]
    assert {row.split("|")[2].strip() for row in rows} == {"uniform", "plr"}, out
    assert (tmp_path / "runs" / "quick" / "plr" / "seed0.json").exists()
    assert (tmp_path / "summary.csv").exists()
    # sample efficiency: per-level returns at every checkpoint give the area under the held-out curve
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if "held-out AUC mean [95% CI]" in line)
    auc_rows = {row.split("|")[2].strip(): row for row in lines[start + 2 : start + 4]}
    assert set(auc_rows) == {"uniform", "plr"}, out
    assert auc_rows["uniform"].split("|")[6].strip() == "—"
    assert auc_rows["plr"].split("|")[6].strip().endswith(("tie", "**better**", "**worse**")), out
    with (tmp_path / "summary.csv").open() as f:
        summary = {row["method"]: row for row in csv.DictReader(f)}
    assert all(0.0 <= float(summary[m]["auc_mean"]) <= 1.0 for m in ("uniform", "plr"))
    assert summary["plr"]["auc_delta_mean"] != "" and summary["uniform"]["auc_delta_mean"] == ""
