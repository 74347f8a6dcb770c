"""Packaged like a released library: one version, one repository URL, an sdist and a wheel that install and
import, a citation file, extras that bring what the README's quick starts use, and CI's skip guard.

`make test` builds the sdist and the wheel with ``python -m build`` and runs ``twine check`` on them before
the suite (``make dist``), then points ``PLR_GYM_DIST`` at them; without it the wheel test builds its own.
"""

from __future__ import annotations

import ast
import datetime
import functools
import importlib.metadata
import json
import os
import re
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest
import tomllib
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from conftest import ROOT, repository_url

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
README = (ROOT / "README.md").read_text()


# ------------------------------------------------------------------------------------------------ version
def test_the_version_is_written_in_one_place() -> None:
    import plr_gym
    from plr_gym._version import __version__

    assert "version" not in PYPROJECT["project"] and "version" in PYPROJECT["project"]["dynamic"]
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "plr_gym._version.__version__"}
    assert plr_gym.__version__ is __version__
    assert re.fullmatch(r"\d+\.\d+\.\d+((a|b|rc)\d+)?(\.post\d+)?(\.dev\d+)?", __version__), __version__
    written = [
        str(path.relative_to(ROOT))
        for path in text_files()
        if re.search(r"""^\s*(__version__|version)\s*[:=]\s*["']?\d+\.\d+""", path.read_text(), re.MULTILINE)
    ]
    # CITATION.cff repeats it for citation tools (cffconvert, GitHub); test_citation_... keeps the two equal
    assert sorted(written) == ["CITATION.cff", "src/plr_gym/_version.py"]


# ------------------------------------------------------------------------------------------------ one URL
def text_files() -> list[Path]:
    """The repository's text files that a user reads or a tool uses (not the benchmarks' result logs)."""
    paths = [
        ROOT / name for name in ("README.md", "CHANGELOG.md", "CITATION.cff", "mkdocs.yml", "pyproject.toml")
    ]
    paths += sorted((ROOT / "docs").rglob("*.md")) + sorted((ROOT / "examples").rglob("*"))
    paths += sorted((ROOT / "src").rglob("*.py")) + sorted((ROOT / "tests").glob("*.py"))
    return [p for p in paths if p.is_file() and p.suffix in {".md", ".cff", ".yml", ".toml", ".py", ".ipynb"}]


def test_every_link_to_the_repository_is_the_url_in_pyproject() -> None:
    url = repository_url()
    owner_name = re.fullmatch(r"https://github\.com/([\w.-]+/[\w.-]+)", url)
    assert owner_name, url
    urls = PYPROJECT["project"]["urls"]
    assert urls["Homepage"] == url and urls["Documentation"].startswith(url + "/")
    # github.com/<owner>/<name> and Colab's github/<owner>/<name> wherever the name is this project's
    link = re.compile(r"(?:github\.com|colab\.research\.google\.com/github)/([\w.-]+)/([\w-]+(?:\.[\w-]+)*)")
    wrong = []
    for path in text_files():
        for owner, name in link.findall(path.read_text()):
            if (
                canonicalize_name(name.removesuffix(".git")) == "plr-gym"
                and f"{owner}/{name}" != owner_name[1]
            ):
                wrong.append(f"{path.relative_to(ROOT)}: {owner}/{name}")
    assert not wrong, f"links that are not {url}: {wrong}"
    # and the places that must name it do
    assert f"git clone {url}" in README
    mkdocs = (ROOT / "mkdocs.yml").read_text()
    assert re.search(r"^repo_url: (\S+)$", mkdocs, re.MULTILINE)[1] == url  # type: ignore[index]
    citation = (ROOT / "CITATION.cff").read_text()
    assert f'repository-code: "{url}"' in citation
    for notebook in sorted((ROOT / "examples").glob("*.ipynb")):
        assert f"git+{url}" in notebook.read_text(), notebook.name


def test_citation_cites_the_library_and_the_paper() -> None:
    yaml = pytest.importorskip("yaml")  # PyYAML comes with the test extra's mkdocs
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0" and cff["type"] == "software" and cff["license"] == "MIT"
    assert cff["title"].startswith("plr_gym") and cff["authors"]
    # the software's version is plr_gym's (src/plr_gym/_version.py), with the day it was set
    from plr_gym._version import __version__

    assert cff["version"] == __version__
    assert isinstance(cff["date-released"], datetime.date) and cff["date-released"] <= datetime.date.today()
    (paper,) = cff["references"]
    assert paper["title"] == "Prioritized Level Replay" and paper["year"] == 2021
    assert [a["family-names"] for a in paper["authors"]] == ["Jiang", "Grefenstette", "Rocktäschel"]
    assert "ICML 2021" in paper["collection-title"]
    assert {"type": "other", "value": "arXiv:2010.03934", "description": "arXiv preprint"} in paper[
        "identifiers"
    ]
    assert PYPROJECT["project"]["urls"]["Paper"] == paper["url"] == "https://arxiv.org/abs/2010.03934"


# ------------------------------------------------------------------------------------------------ wheel
def built_dist(tmp_path: Path) -> tuple[Path, Path]:
    """``(sdist, wheel)``: CI's (``PLR_GYM_DIST``, from ``make dist``) or built here from a copy of the
    checkout (the wheel from the sdist, as ``python -m build`` does)."""
    if "PLR_GYM_DIST" in os.environ:
        dist = Path(os.environ["PLR_GYM_DIST"])
    else:
        import shutil

        copy = tmp_path / "src-copy"
        shutil.copytree(
            ROOT,
            copy,
            ignore=shutil.ignore_patterns(".git", ".venv*", "runs", "site", "build", "dist", "__pycache__",
                                          "*.egg-info", ".*_cache", "benchmarks"),
        )  # fmt: skip
        dist = tmp_path / "dist"
        proc = subprocess.run(
            [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(copy)],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (sdist,) = dist.glob("plr_gym-*.tar.gz")
    (wheel,) = dist.glob("plr_gym-*.whl")
    return sdist, wheel


@pytest.mark.slow
def test_the_built_wheel_installs_in_a_clean_venv_and_imports(tmp_path: Path) -> None:
    from plr_gym._version import __version__

    sdist, wheel = built_dist(tmp_path)
    assert sdist.name == f"plr_gym-{__version__}.tar.gz" and wheel.name.startswith(
        f"plr_gym-{__version__}-py3"
    )
    # the wheel holds every module of src/plr_gym and py.typed, and nothing else at the top
    names = set(zipfile.ZipFile(wheel).namelist())
    sources = {str(p.relative_to(ROOT / "src")) for p in (ROOT / "src" / "plr_gym").rglob("*.py")}
    assert sources <= names, sorted(sources - names)
    assert "plr_gym/py.typed" in names
    assert {n.split("/")[0] for n in names} == {"plr_gym", f"plr_gym-{__version__}.dist-info"}
    proc = subprocess.run([sys.executable, "-m", "twine", "check", "--strict", str(sdist), str(wheel)],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # a fresh venv whose only plr_gym is the wheel; its dependencies come from this venv's site-packages,
    # appended to its path by a .pth file (so no download, no editable finder, no PYTHONPATH)
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    deps = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (Path(purelib) / "_test_deps.pth").write_text("\n".join(sorted(deps)) + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index",
         str(wheel)],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    probe = """if True:
        import importlib.metadata, json, os, plr_gym
        from plr_gym import LevelSampler
        eps = importlib.metadata.entry_points(group="console_scripts", name="plr-gym")
        meta = importlib.metadata.metadata("plr-gym")
        print(json.dumps({
            "file": plr_gym.__file__, "version": plr_gym.__version__,
            "dist_version": importlib.metadata.version("plr-gym"),
            "py_typed": os.path.isfile(os.path.join(os.path.dirname(plr_gym.__file__), "py.typed")),
            "entry_point": [ep.value for ep in eps],
            "urls": meta.get_all("Project-URL"),
            "sample": LevelSampler(levels=range(10), seed=0).sample() in range(10),
        }))"""
    proc = subprocess.run(
        [python, "-c", probe], cwd=tmp_path, capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.splitlines()[-1])
    assert Path(got["file"]).is_relative_to(env_dir), got["file"]  # the wheel's copy, not the checkout's
    assert got["version"] == got["dist_version"] == __version__
    assert got["py_typed"] and got["entry_point"] == ["plr_gym.cli:main"] and got["sample"]
    assert f"Repository, {repository_url()}" in got["urls"]
    assert (env_dir / "bin" / "plr-gym").is_file()
    with __import__("tarfile").open(sdist) as tar:
        members = {m.split("/", 1)[1] for m in tar.getnames() if "/" in m}
    assert {"pyproject.toml", "README.md", "LICENSE", "CITATION.cff", "src/plr_gym/_version.py"} <= members


# ------------------------------------------------------------------------------------------------ extras
#: What a quick start needs beyond its imports: SB3 writes TensorBoard files with ``tensorboard_log=``,
#: draws progress bars with ``progress_bar=True`` (tqdm and rich), and ``plr-gym`` draws its plots
#: (matplotlib) and writes TensorBoard logs.
IMPLICIT = {
    "tensorboard_log=": {"tensorboard"},
    "progress_bar=True": {"tqdm", "rich"},
    "plot_curriculum": {"matplotlib"},
    "plr-gym train": {"matplotlib", "tensorboard"},
    "plr-gym compare": {"matplotlib", "tensorboard"},
}


def quick_starts() -> dict[str, list[str]]:
    """``{heading: [code block, ...]}`` of the README's ``## Quick start`` sections and of the ``###``
    sections under the docs home page's ``## More quick starts`` (where the README sends its reader)."""
    blocks = r"```(?:python|bash)\n(.*?)```"
    sections = re.split(r"^## ", README, flags=re.MULTILINE)
    starts = {
        s.splitlines()[0]: re.findall(blocks, s, re.DOTALL) for s in sections if s.startswith("Quick start")
    }
    home = (ROOT / "docs" / "index.md").read_text()
    more = re.split(r"^## ", home[home.index("## More quick starts") :], flags=re.MULTILINE)[1]
    for s in re.split(r"^### ", more, flags=re.MULTILINE)[1:]:
        starts[s.splitlines()[0]] = re.findall(blocks, s, re.DOTALL)
    return starts


def modules_needed(code: str) -> set[str]:
    """The top-level modules (not the standard library's, not plr_gym) a code block imports or implies."""
    needed = {need for marker, needs in IMPLICIT.items() if marker in code for need in needs}
    try:
        tree = ast.parse(code)
    except SyntaxError:  # a shell block
        return needed
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            needed |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            needed.add(node.module.split(".")[0])
    return {m for m in needed if m not in sys.stdlib_module_names and m != "plr_gym"}


def distributions_of(extras: list[str]) -> set[str]:
    """Every distribution ``pip install ".[extras]"`` installs on this Python: the requirement closure,
    through the installed distributions' metadata (the test environment holds them all)."""
    environment: dict[str, str] = dict(default_environment())
    todo = [Requirement(r) for r in PYPROJECT["project"]["dependencies"]]
    for extra in extras:
        for spec in PYPROJECT["project"]["optional-dependencies"][extra]:
            req = Requirement(spec)
            if canonicalize_name(req.name) == "plr-gym":
                todo += [
                    Requirement(r)
                    for e in req.extras
                    for r in PYPROJECT["project"]["optional-dependencies"][e]
                ]
            else:
                todo.append(req)
    seen: set[str] = set()
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        if req.marker is not None and not req.marker.evaluate({**environment, "extra": ""}):
            continue
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        for spec in requires:
            sub = Requirement(spec)
            if sub.marker is None or any(
                sub.marker.evaluate({**environment, "extra": e}) for e in req.extras or [""]
            ):
                todo.append(Requirement(str(sub).split(";")[0]) if sub.marker else sub)
    return seen


@functools.cache
def module_distributions() -> dict[str, list[str]]:
    return importlib.metadata.packages_distributions()


def provided_by(module: str) -> set[str]:
    return {canonicalize_name(d) for d in module_distributions().get(module, [])}


def test_the_install_sections_extras_bring_what_every_quick_start_uses() -> None:
    install = README[README.index("## Install") : README.index("## Set up")]
    line = next(
        line for line in install.splitlines() if line.startswith("pip install") and "quick start" in line
    )
    (extras,) = re.findall(r'pip install "\.\[([\w,]+)\]"', line)
    have = distributions_of(extras.split(","))
    starts = quick_starts()
    assert len(starts) >= 3, list(starts)
    missing = {}
    for heading, blocks in starts.items():
        for module in sorted(set().union(*map(modules_needed, blocks))):
            if not provided_by(module) & have:
                missing[module] = heading
    assert not missing, f'pip install ".[{extras}]" does not bring {missing}'


def test_the_quick_start_check_catches_a_missing_extra() -> None:
    """Without ``cli`` the TensorBoard quick start lacks tensorboard (what a user of ``[minigrid]`` met)."""
    have = distributions_of(["minigrid"])
    tensorboard_start = next(b for h, b in quick_starts().items() if "TensorBoard" in h)
    needed = set().union(*map(modules_needed, tensorboard_start))
    assert "tensorboard" in needed and not provided_by("tensorboard") & have
    assert provided_by("minigrid") & have and provided_by("torch") & have  # via stable-baselines3


# ------------------------------------------------------------------------------------------------ CI guard
def test_ci_fails_a_run_with_a_skip_the_stack_does_not_allow(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text((ROOT / "tests" / "conftest.py").read_text())
    (tmp_path / "test_a.py").write_text(
        "from conftest import importorskip_on_stack\n"
        "def test_runs():\n    pass\n"
        "def test_needs_rllib():\n    importorskip_on_stack('no_such_module_xyz', 'not on this stack')\n"
    )

    def run(allowed: str | None) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if k != "PLR_GYM_ALLOWED_SKIPS"}
        if allowed is not None:
            env["PLR_GYM_ALLOWED_SKIPS"] = allowed
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "-rs", "."]
        return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)

    strict = run("")
    assert strict.returncode == 1, strict.stdout
    assert "skips this stack does not allow" in strict.stdout
    assert (
        "test_a.py::test_needs_rllib: no_such_module_xyz is not installed on this stack (Python "
        in strict.stdout
    )
    assert run("test_a.py::test_needs_*").returncode == 0
    assert run(None).returncode == 0  # outside CI a skip is a skip


def test_stack_name_names_python_numpy_and_gymnasium() -> None:
    import platform

    import gymnasium
    import numpy

    from conftest import stack_name

    assert stack_name() == (
        f"Python {platform.python_version()}, numpy {numpy.__version__}, gymnasium {gymnasium.__version__}"
    )
