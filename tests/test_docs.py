"""README and docs: the README's code runs as written (with a tiny budget), the docs build in strict mode,
and the guide covers every sampler argument."""

from __future__ import annotations

import importlib.util
import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from plr_gym import LevelSampler

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
# The README's training budget, and what the test runs instead.
TINY = {
    "model.learn(60_000,": "model.learn(512,",
    "range(10_000, 10_050)": "range(10_000, 10_002)",
    "n_envs=8": "n_envs=2",
}


def python_blocks(markdown: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", markdown, flags=re.DOTALL)


def test_readme_starts_with_the_two_setup_commands() -> None:
    lines = [line for line in README.splitlines() if line.strip()]
    assert lines[0] == "# plr_gym"
    assert lines[1] == "```bash"
    assert lines[2].startswith("make demo") and lines[3].startswith("make test")


def test_readme_quick_start_is_short() -> None:
    blocks = python_blocks(README)
    assert len(blocks) >= 2
    code_lines = [ln for ln in blocks[0].splitlines() if ln.strip() and not ln.startswith(("import", "from"))]
    assert len(code_lines) <= 10


def test_readme_links_resolve() -> None:
    for target in re.findall(r"\]\(([^)#]+)\)", README):
        if "://" not in target:
            assert (ROOT / target).exists(), target


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(python_blocks(README))))
def test_readme_python_blocks_run(index: int, tmp_path: Path) -> None:
    code = python_blocks(README)[index]
    for real, tiny in TINY.items():
        code = code.replace(real, tiny)
    if index == 0:
        assert all(tiny in code for tiny in TINY.values()), "the quick start's budget changed: update TINY"
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=dict(os.environ, PYTHONWARNINGS="ignore"),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    if index == 0:
        assert "'iqm'" in proc.stdout and "'mean_ci'" in proc.stdout


def test_guide_maps_every_sampler_argument() -> None:
    guide = (ROOT / "docs" / "guide.md").read_text()
    for name in inspect.signature(LevelSampler).parameters:
        if name not in ("levels", "seed", "eps"):
            assert f"`{name}" in guide, name
    assert "benchmarks.md" in guide


@pytest.mark.slow
def test_docs_build_strict(tmp_path: Path) -> None:
    if (
        importlib.util.find_spec("mkdocs") is None
        or importlib.util.find_spec("mkdocstrings_handlers") is None
    ):
        pytest.skip("needs the docs extra (mkdocs, mkdocstrings[python])")
    site = tmp_path / "site"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "-f",
            str(ROOT / "mkdocs.yml"),
            "-d",
            str(site),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    api = (site / "api" / "index.html").read_text()
    # generated from the docstrings: classes, and text of their parameter docs
    for expected in ("LevelSampler", "PLRCallback", "report_rollout", "evaluate_levels", "staleness_coef"):
        assert expected in api, expected
    assert "paper" in (site / "guide" / "index.html").read_text()
