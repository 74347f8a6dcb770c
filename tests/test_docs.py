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
# ... and in the TensorBoard quick start: the generalization-gap evaluation on 2 training levels, not 40
TINY_TENSORBOARD = {"train_levels=range(40))": "train_levels=range(2))"}


def python_blocks(markdown: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", markdown, flags=re.DOTALL)


def bash_blocks(markdown: str) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", markdown, flags=re.DOTALL)


def _quick_starts() -> list[tuple[str, int, str]]:
    """Every quick start as (page, index of its Python block, code): the README's one, then the Python
    blocks of the docs home page's "More quick starts" section."""
    home = (ROOT / "docs" / "index.md").read_text()
    before = len(python_blocks(home[: home.index("## More quick starts")]))
    return [("README.md", i, code) for i, code in enumerate(python_blocks(README))] + [
        ("docs/index.md", i, code) for i, code in enumerate(python_blocks(home)) if i >= before
    ]


QUICK_STARTS_INDEXED = _quick_starts()
QUICK_STARTS = [(page, code) for page, _, code in QUICK_STARTS_INDEXED]


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
    clone.mkdir()
    # what pip reads to build the metadata and resolve the extras (not the venvs, caches or dist/)
    for name in ("pyproject.toml", "README.md", "LICENSE", "MANIFEST.in"):
        shutil.copy2(ROOT / name, clone / name)
    shutil.copytree(ROOT / "src", clone / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
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
    """One quick start in the README (a newcomer reads it in one sitting); more on the docs' home page."""
    (block,) = python_blocks(README)
    code_lines = [ln for ln in block.splitlines() if ln.strip() and not ln.startswith(("import", "from"))]
    assert len(code_lines) <= 10
    assert len(README.splitlines()) <= 160, "the README is read in one sitting: move detail to docs/"
    more = [code for page, code in QUICK_STARTS if page != "README.md"]
    assert any("HeldOutEvalCallback" in code for code in more) and any(
        "LevelSampler(" in code for code in more
    )
    assert "docs/index.md#more-quick-starts" in README


def _slug(heading: str) -> str:
    """The anchor GitHub and mkdocs' toc give a heading (lowercase, punctuation dropped, spaces to '-')."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.DOTALL)
    return {_slug(h) for h in re.findall(r"^#+ (.*)$", text, flags=re.MULTILINE)}


def test_readme_links_resolve() -> None:
    for target, anchor in re.findall(r"\]\(([^)#\s]+)(?:#([^)\s]+))?\)", README):
        if "://" not in target:
            assert (ROOT / target).exists(), target
            if anchor and target.endswith(".md"):
                assert anchor in _anchors(ROOT / target), f"{target}#{anchor}"
    # the pages the README sends its reader to for what moved out of it
    for page in ("docs/evidence.md", "docs/install.md", "docs/benchmarks.md", "benchmarks/README.md"):
        assert f"]({page}" in README, page


def test_evidence_links_resolve() -> None:
    """docs/evidence.md: the page behind the README's claims links pages and anchors that exist."""
    evidence = (ROOT / "docs" / "evidence.md").read_text()
    for target, anchor in re.findall(r"\]\(([^)#\s]*)(?:#([^)\s]+))?\)", evidence):
        if "://" in target:
            continue
        page = ROOT / "docs" / (target or "evidence.md")
        assert page.exists(), target
        if anchor and page.suffix == ".md":
            assert anchor in _anchors(page), f"{target}#{anchor}"


@pytest.mark.slow
@pytest.mark.parametrize("page,index", [(page, i) for page, i, _ in QUICK_STARTS_INDEXED])
def test_readme_python_blocks_run(page: str, index: int, tmp_path: Path) -> None:
    """The quick starts (the README's and the docs home page's) run as written, with a tiny budget."""
    code = python_blocks((ROOT / page).read_text())[index]
    tensorboard = "HeldOutEvalCallback" in code
    readme = page == "README.md"
    for real, tiny in TINY.items():
        code = code.replace(real, tiny)
    if tensorboard:
        assert all(real in code for real in TINY_TENSORBOARD), "update TINY_TENSORBOARD"
        for real, tiny in TINY_TENSORBOARD.items():
            code = code.replace(real, tiny)
    if readme:
        assert all(tiny in code for tiny in TINY.values()), "the quick start's budget changed: update TINY"
    mlp_run = "MlpPolicy" in code and ".learn(" in code
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    if mlp_run:  # torch's own default (one thread per core), so that the block's choice of one thread shows
        env.pop("OMP_NUM_THREADS", None)
        code += "\nimport torch\nprint('TORCH_THREADS', torch.get_num_threads())\n"
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    if mlp_run:  # a small MLP trains with one torch thread, the fast path on a CPU (docs/cli.md)
        assert "TORCH_THREADS 1\n" in proc.stdout
    if readme or tensorboard:  # a readable result: one rounded line
        assert re.search(
            r"held-out return: mean \d\.\d{3} \[\d\.\d{3}, \d\.\d{3}\], "
            r"IQM \d\.\d{3} \[\d\.\d{3}, \d\.\d{3}\] "
            r"over 2 levels",
            proc.stdout,
        ), proc.stdout
        assert "100%" in proc.stderr + proc.stdout  # the progress bar reached the end
    if tensorboard:  # a progress bar from the first step (it printed nothing for minutes), TensorBoard
        assert "100%" in proc.stderr + proc.stdout and "512/512" in proc.stderr + proc.stdout
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


# --------------------------------------------------------------------------------------------------
# documented defaults and claims come from the code
# --------------------------------------------------------------------------------------------------
DOC_PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
DEFAULTS_BLOCK = re.compile(r"<!-- sampler-defaults -->(.*?)<!-- /sampler-defaults -->", re.DOTALL)


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_documented_sampler_defaults_are_the_codes() -> None:
    import ast

    from plr_gym.sampler import sampler_defaults

    defaults = sampler_defaults()
    found = {}
    for page in DOC_PAGES:
        for block in DEFAULTS_BLOCK.findall(page.read_text()):
            pairs = re.findall(r"`(\w+)=([^`]+)`", block)
            names = {name for name, _ in pairs}
            required = {"strategy", "score_transform", "temperature", "staleness_coef", "uniform_mass"}
            assert required <= names, page.name
            for name, value in pairs:
                assert ast.literal_eval(value) == defaults[name], (page.name, name, value, defaults[name])
            found[page.name] = True
    assert {"README.md", "cli.md"} <= set(found)


def test_prose_about_the_defaults_gives_the_codes_beta_and_rho() -> None:
    """A sentence about the library's (or "the", "new") defaults that gives β or ρ gives the code's."""
    from plr_gym.sampler import sampler_defaults

    defaults = sampler_defaults()
    expected = {"β": defaults["temperature"], "ρ": defaults["staleness_coef"]}
    checked = 0
    for page in DOC_PAGES:
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.DOTALL)
        for paragraph in re.split(r"\n\s*\n", text):
            for sentence in re.split(r"(?<=[.;])\s+(?=[A-Z*])", _flat(paragraph)):
                if not re.search(r"\b(?:library's|the|new) defaults?\b", sentence, flags=re.IGNORECASE):
                    continue
                if re.search(r"paper's (?:procgen |minigrid )?defaults", sentence, flags=re.IGNORECASE):
                    continue  # the paper's settings, not the library's
                for symbol, value in re.findall(r"([βρ]) = ([\d.]+)", sentence):
                    if f"paper's settings ({symbol}" in sentence or "paper_defaults" in sentence:
                        continue
                    assert float(value) == expected[symbol], (page.name, sentence)
                    checked += 1
    assert checked >= 2  # the README's and the study's statements of the defaults


def test_the_pages_hold_the_tables_written_from_the_option_declarations() -> None:
    """docs/paper.md's recipe tables and docs/cli.md's options table are the generators' output, as it is."""
    from plr_gym.options import options_table
    from plr_gym.presets import RECIPES, recipe_table

    paper = (ROOT / "docs" / "paper.md").read_text()
    for preset in RECIPES:
        block = re.search(
            rf"<!-- recipe-table {preset}: .*? -->\n\n(.*?)\n\n<!-- /recipe-table -->", paper, re.DOTALL
        )
        assert block is not None and block[1] == recipe_table(preset), preset
    cli = (ROOT / "docs" / "cli.md").read_text()
    block = re.search(r"<!-- options-table: .*? -->\n\n(.*?)\n\n<!-- /options-table -->", cli, re.DOTALL)
    assert block is not None and block[1] == options_table()


def test_readme_and_cli_docs_quote_the_demos_task_and_claim() -> None:
    from plr_gym import demo

    summary = _flat(demo.demo_summary())
    for page in (ROOT / "docs" / "evidence.md", ROOT / "docs" / "cli.md"):
        assert summary in _flat(page.read_text()), page.name
    # the README sends its reader there from the `make demo` line
    assert "docs/evidence.md#what-make-demo-runs-and-what-it-can-show" in README
    # the summary describes the settings the demo runs
    argv = demo.demo_argv(quick=False, out="runs/demo", seed=0)
    assert argv[argv.index("--env") + 1] in summary and "egocentric" in summary
    assert "the study's round-4 `mixed` task" in summary  # tests/test_cli.py checks its settings
    assert "--full-obs" not in argv  # the egocentric view the summary names
    levels = int(argv[argv.index("--num-levels") + 1])
    assert f"training levels 0-{levels - 1}" in summary
    assert f"{int(argv[argv.index('--timesteps') + 1]):,} steps per run" in summary
    assert f"{len(argv[argv.index('--seeds') + 1 : argv.index('--no-eval-train-levels')])} seeds" in summary
    # no claim that the study does not support survives in the README
    assert "significantly better" not in README
    assert "significantly better" not in (ROOT / "docs" / "evidence.md").read_text()


def test_benchmarks_page_is_one_section_per_benchmark_with_its_provenance() -> None:
    """docs/benchmarks.md shows current figures: every section gives its command, commit, machine and a
    table; earlier rounds live in benchmarks/results/history/ (linked, and present)."""
    page = (ROOT / "docs" / "benchmarks.md").read_text()
    sections = re.split(r"^## ", page, flags=re.MULTILINE)[1:]
    assert len(sections) >= 10
    titles = [s.splitlines()[0] for s in sections]
    assert len(set(titles)) == len(titles), titles  # one section per benchmark
    for title, section in zip(titles, sections):
        low = section.lower()
        assert "command" in low and "commit" in low and "machine" in low, title
        assert re.search(r"^\|.*\|\n\|[ :-]+\|", section, flags=re.MULTILINE), title  # a table
        assert not re.search(r"^#{3} (?:Earlier|Previous|First round)", section, flags=re.MULTILINE), title
        # the current figure only: no rounds, no dated sub-sections (history lives in benchmarks/results/)
        assert not re.search(r"^(?:#+ )?Round \d", section, flags=re.MULTILINE), title
        assert not re.search(r"^#{3,} .*\d{4}-\d{2}-\d{2}", section, flags=re.MULTILINE), title
    for target in re.findall(r"\]: \S+/blob/main/(benchmarks/results/history/\S+\.md)", page):
        assert (ROOT / target).is_file(), target
    assert len(list((ROOT / "benchmarks" / "results" / "history").glob("*.md"))) >= 6
    # the Procgen throughput ratio has one home, and the Procgen notebook quotes it
    procgen = [t for t in titles if t.startswith("Procgen throughput")]
    assert procgen == ["Procgen throughput"], procgen
    assert len([s for s in sections if "× stock" in s]) == 1
    (headline,) = [line for line in page.splitlines() if line.startswith("| [Procgen throughput]")]
    ratio = re.search(r"(\d\.\d\d–\d\.\d\d)× stock \(wall\)", headline)[1]  # type: ignore[index]
    notebook = (ROOT / "examples" / "plr_procgen.ipynb").read_text()
    assert f"{ratio}× stock" in notebook and "stock Procgen speed" not in notebook


def test_benchmark_folders_index_every_script() -> None:
    """benchmarks/ is grouped by area: each folder's README.md names each of its scripts with the command
    that runs it from the repository root, and its links (results, docs sections) resolve."""
    bench = ROOT / "benchmarks"
    assert not list(bench.glob("*.py")), "scripts live in an area folder (benchmarks/<area>/)"
    top = (bench / "README.md").read_text()
    folders = sorted(p.parent for p in bench.glob("*/*.py") if p.parent.name != "common")
    for folder in folders:
        assert f"[`{folder.name}/`]({folder.name}/README.md)" in top, folder.name
        index = (folder / "README.md").read_text()
        for script in sorted(folder.glob("*.py")):
            assert f"`{script.name}`" in index, script
            assert f"python benchmarks/{folder.name}/{script.name}" in index, script
        for target, anchor in re.findall(r"\]\(([^)#\s]+)(?:#([^)\s]+))?\)", index):
            if "://" not in target:
                assert (folder / target).exists(), (folder.name, target)
                if anchor and target.endswith(".md"):
                    assert anchor in _anchors((folder / target).resolve()), (folder.name, target, anchor)


@pytest.mark.parametrize("study", ["study", "tiny_grpo", "tiny_grpo_round4", "jax_study"])
def test_the_studies_per_seed_records_are_not_ignored_by_git(study: str) -> None:
    """The 1x JAX study's per-seed records were lost to the ``runs/`` ignore rule: every study's records
    folder must stay committed (``git check-ignore`` exits 1 for a path it does not ignore)."""
    for name in ("x.npz", "x.json", "sub/1x/x.npz"):
        path = f"benchmarks/results/{study}/runs/{name}"
        proc = subprocess.run(["git", "-C", str(ROOT), "check-ignore", "-q", path], capture_output=True)
        assert proc.returncode == 1, (
            f"{path} is ignored by git (or this is not a git checkout): {proc.stderr!r}"
        )
