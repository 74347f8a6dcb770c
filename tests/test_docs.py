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


def bash_blocks(markdown: str) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", markdown, flags=re.DOTALL)


def test_readme_install_then_setup_commands_then_quick_starts() -> None:
    headings = [line for line in README.splitlines() if line.startswith("## ")]
    assert headings[:3] == [
        "## Install",
        "## Set up a development copy",
        "## Quick start: PPO + PLR on MiniGrid",
    ]
    section = README[README.index("## Install") : README.index("## Set up")]
    py311, py313 = bash_blocks(section)  # the commands for Python 3.11/3.12, then for 3.13
    extras = r'pip install "\.\[([\w,]+)\]"'
    assert re.findall(extras, py311) == ["minigrid,cli", "procgen", "all", "rllib"]
    assert re.findall(extras, py313) == ["minigrid,cli", "procgen", "all", "distributed"]
    (setup,) = bash_blocks(README[README.index("## Set up") : README.index("## Quick start")])
    lines = setup.splitlines()
    assert lines[0].startswith("make demo") and lines[1].startswith("make test")
    # the procgen caveat is explained next to the commands
    assert "numpy" in section and "1.26" in section and "Gym has been unmaintained" in section


def test_readme_install_extras_exist() -> None:
    tomllib = pytest.importorskip("tomllib")
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for name in re.findall(r'pip install(?: -e)? "\.\[([\w,]+)\]"', README):
        for extra in name.split(","):
            assert extra in extras, extra
    assert set(re.findall(r"plr-gym\[([\w,]+)\]", " ".join(extras["all"]))[0].split(",")) == {
        "minigrid",
        "procgen",
        "cli",
        "contrib",
    }


@pytest.mark.slow
@pytest.mark.parametrize("extra", ["minigrid,cli", "procgen", "all"])
def test_readme_install_commands_resolve_from_a_fresh_copy(extra: str, tmp_path: Path) -> None:
    """``pip install ".[extra]"`` in a copy of the checkout, offline, against this environment."""
    import shutil

    procgen = ("procgen", "procgen_gym")  # procgen-mirror (Python 3.11/3.12), procgen-gym (3.13)
    if extra in ("procgen", "all") and all(importlib.util.find_spec(m) is None for m in procgen):
        pytest.skip("this environment has no Procgen: pip cannot resolve the extra offline")
    clone = tmp_path / "plr_gym"
    shutil.copytree(
        ROOT,
        clone,
        ignore=shutil.ignore_patterns(
            ".git", ".venv", "runs", "site", "build", "__pycache__", "*.egg-info", ".*_cache"
        ),
    )
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--no-build-isolation", "--no-index",
         f".[{extra}]"],
        cwd=clone,
        capture_output=True,
        text=True,
        timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Would install plr-gym-" in proc.stdout


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
    if index == 0:  # a readable result: one rounded line
        assert re.search(
            r"held-out return: mean \d\.\d{3} \[\d\.\d{3}, \d\.\d{3}\], "
            r"IQM \d\.\d{3} \[\d\.\d{3}, \d\.\d{3}\] "
            r"over 2 levels",
            proc.stdout,
        ), proc.stdout
        assert "100%" in proc.stderr + proc.stdout  # the progress bar reached the end
    if index == 1:  # held-out return and the curriculum reach TensorBoard
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

        (events,) = (tmp_path / "runs" / "tb").rglob("events.out.tfevents.*")
        acc = EventAccumulator(str(events), size_guidance={"scalars": 0, "histograms": 0})
        acc.Reload()
        assert "eval/heldout_mean" in acc.Tags()["scalars"]
        assert "curriculum/replay_probability" in acc.Tags()["histograms"]
        assert (tmp_path / "runs" / "curriculum.npz").is_file()


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
    # the curriculum heatmap is part of the site, shown in the CLI page and the guide
    assert (site / "img" / "curriculum.png").read_bytes()[:4] == b"\x89PNG"
    for page in ("cli", "guide"):
        assert 'src="../img/curriculum.png"' in (site / page / "index.html").read_text(), page
    for name in ("HeldOutEvalCallback", "CurriculumLogCallback", "plot_curriculum", "DEFAULT_DETERMINISTIC"):
        assert name in api, name
