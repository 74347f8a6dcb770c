"""Every script and notebook in ``examples/`` runs end to end with a tiny budget.

The budget comes from environment variables the examples read (``PLR_GYM_EXAMPLE_STEPS``,
``PLR_GYM_EXAMPLE_EVAL_LEVELS``); each example runs in its own process (scripts) or kernel (notebooks),
in a temporary working directory.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import repository_url, stack_name
from plr_gym.sampler import SCORE_TRANSFORMS, STRATEGIES

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
SCRIPTS = sorted(EXAMPLES.glob("*.py"))
NOTEBOOKS = sorted(EXAMPLES.glob("*.ipynb"))
# Procgen is procgen-mirror's `procgen` on Python 3.11/3.12 and procgen-gym's `procgen_gym` on 3.13
NEEDS = {
    "ppo_procgen": ("procgen", "procgen_gym"),
    "plr_procgen": ("procgen", "procgen_gym"),
    "rllib_minigrid": ("ray.rllib",),
    "jax_ppo_plr": ("navix",),
}
# A single-file training loop in the CleanRL / PureJaxRL style: PPO, the network and Adam in one file is
# the point of it (tests/test_jax_example.py runs it and checks that it learns).
LONG_SCRIPTS = {"jax_ppo_plr.py": 300, "own_env.py": 150}
# own_env.py: three envs (one per way of making reset(seed=s) play level s), then train, evaluate, compare
# (steps, evaluation levels) per example: enough for a few rollouts (PLR scores a few episodes).
BUDGET = {
    "ppo_procgen": ("256", "2"),
    "plr_procgen": ("256", "2"),
    "perdqn_cartpole": ("400", "2"),
    "frame_stack_dqn": ("400", "2"),
}
DEFAULT_BUDGET = ("512", "2")


def tiny_env(name: str) -> dict[str, str]:
    steps, levels = BUDGET.get(name, DEFAULT_BUDGET)
    env = dict(os.environ, PLR_GYM_EXAMPLE_STEPS=steps, PLR_GYM_EXAMPLE_EVAL_LEVELS=levels)
    env["PYTHONWARNINGS"] = "ignore"
    return env


def skip_without(name: str) -> None:
    modules = NEEDS.get(name, ())
    if modules and not any(_installed(m) for m in modules):
        pytest.skip(f"{name} needs {' or '.join(modules)}, not installed on this stack ({stack_name()})")


def _installed(module: str) -> bool:
    if "." not in module:
        return importlib.util.find_spec(module) is not None
    try:  # a sub-package (ray.rllib ships inside Ray's wheel; what it needs may not be installed)
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def test_examples_exist() -> None:
    names = {p.name for p in SCRIPTS} | {p.name for p in NOTEBOOKS}
    assert {"ppo_minigrid.py", "ppo_procgen.py", "custom_loop_vector.py", "perdqn_cartpole.py"} <= names
    assert {"plr_minigrid.ipynb", "plr_procgen.ipynb"} <= names


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_script_is_short(script: Path) -> None:
    limit = LONG_SCRIPTS.get(script.name, 80)
    assert len(script.read_text().splitlines()) < limit, "examples show one idea each"


@pytest.mark.slow
@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_script_runs(script: Path, tmp_path: Path) -> None:
    skip_without(script.stem)
    proc = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=tiny_env(script.stem),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    expected = {
        "ppo_minigrid": "held-out: mean return",
        "ppo_procgen": "held-out mean return",
        "custom_loop_vector": "levels seen",
        "perdqn_cartpole": "CartPole-v1 return",
        "frame_stack_dqn": "sampled observations (32, 12, 40, 40)",
        "own_env": "OwnEnv/SeededLakes-v0: 8 distinct levels of 8 checked",
    }.get(script.stem, "")
    assert expected in proc.stdout


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_has_colab_badge_and_guarded_install(notebook: Path) -> None:
    url = repository_url()  # https://github.com/<owner>/<name>, from pyproject.toml
    cells = json.loads(notebook.read_text())["cells"]
    badge = url.replace("https://github.com/", "https://colab.research.google.com/github/")
    assert f"{badge}/blob/main/examples/{notebook.name}" in "".join(cells[0]["source"])
    install = [c for c in cells if "pip install" in "".join(c["source"])]
    assert len(install) == 1
    source = "".join(install[0]["source"])
    # plr-gym is not on PyPI: nothing to do where it is importable; Colab installs from the repository, a
    # clone installs itself, and anywhere else the cell says what to do
    extra = (
        "procgen" if "procgen" in notebook.stem else "minigrid"
    ) + ",cli"  # cli: matplotlib for the plots
    assert 'if importlib.util.find_spec("plr_gym") is None:' in source
    assert "import google.colab" in source and "if IN_COLAB:" in source
    assert f'%pip install -q "plr-gym[{extra}] @ git+{url}"' in source
    assert f'%pip install -q "..[{extra}]"' in source
    assert f'pip install ".[{extra}]" (see the README' in source and "raise RuntimeError(" in source


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_install_cell_installs_every_module_the_notebook_imports(notebook: Path) -> None:
    """What the install cell's extras bring (plr-gym's requirements and theirs, from the installed metadata)
    covers every module the other cells import, apart from the standard library and Jupyter's IPython."""
    import importlib.metadata as md

    import tomllib
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    cells = json.loads(notebook.read_text())["cells"]
    code = [c for c in cells if c["cell_type"] == "code"]
    install = next(c for c in code if "pip install" in "".join(c["source"]))
    (extras,) = set(re.findall(r'%pip install -q "plr-gym\[([\w,]+)\] @ git\+', "".join(install["source"])))
    project = tomllib.loads((EXAMPLES.parent / "pyproject.toml").read_text())["project"]
    wanted = list(project["dependencies"])
    for extra in extras.split(","):
        wanted += project["optional-dependencies"][extra]
    provided: set[str] = set()
    while wanted:  # plr-gym's requirements with those extras, and theirs (as installed here)
        req = Requirement(wanted.pop())
        name = canonicalize_name(req.name)
        if name in provided or (req.marker is not None and not req.marker.evaluate({"extra": ""})):
            continue
        if name == "plr-gym":  # a self-reference (the `all` extra)
            for extra in req.extras:
                wanted += project["optional-dependencies"][extra]
            continue
        provided.add(name)
        try:
            wanted += [r for r in md.requires(req.name) or [] if "extra ==" not in r]
        except md.PackageNotFoundError:  # not installed on this stack (e.g. Procgen's other build)
            pass
    source = "\n".join("".join(c["source"]) for c in code if c is not install)
    modules = set(re.findall(r"^(?:import|from) (\w+)", source, flags=re.MULTILINE))
    distributions = md.packages_distributions()
    missing = {
        m
        for m in modules - set(sys.stdlib_module_names) - {"plr_gym", "IPython"}
        if not {canonicalize_name(d) for d in distributions.get(m, [m])} & provided
    }
    assert not missing, f"the install cell's extras [{extras}] do not install {sorted(missing)}"


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_install_cell_outside_colab_and_a_clone_says_what_to_do(
    notebook: Path, tmp_path: Path
) -> None:
    """The install cell's plain-Python branch, run where plr_gym is not importable and no clone is around."""
    cells = json.loads(notebook.read_text())["cells"]
    source = "".join(next(c for c in cells if "pip install" in "".join(c["source"]))["source"])
    python = "\n".join(
        line.replace("!git", "pass  # !git").replace("%pip", "pass  # %pip") for line in source.splitlines()
    )
    script = tmp_path / "nb" / "install_cell.py"
    script.parent.mkdir()
    script.write_text(python)
    blocker = tmp_path / "block" / "sitecustomize.py"  # hide plr_gym from find_spec
    blocker.parent.mkdir()
    blocker.write_text(
        "import importlib.util, sys\n"
        "_find = importlib.util.find_spec\n"
        "importlib.util.find_spec = lambda name, *a: None if name == 'plr_gym' else _find(name, *a)\n"
    )
    env = dict(os.environ, PYTHONPATH=str(blocker.parent), PYTHONWARNINGS="ignore")
    proc = subprocess.run(
        [sys.executable, str(script)], cwd=script.parent, env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 1
    assert f"RuntimeError: plr_gym is not installed. In a clone of {repository_url()} run" in proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs(notebook: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    skip_without(notebook.stem)
    for key, value in tiny_env(notebook.stem).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(notebook, as_version=4)
    mlp = "MlpPolicy" in "".join(c.source for c in nb.cells)
    if mlp:  # torch's own default (one thread per core), so that the notebook's choice of one thread shows
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    claims = sampler_claims(nb)
    nb.cells.append(nbformat.v4.new_code_cell(SAMPLER_REPORT))  # the settings the notebook's sampler has
    client = nbclient.NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()  # raises CellExecutionError, with the cell and traceback, if any cell fails
    outputs = "".join(
        o.get("text", "") for cell in nb.cells if cell.cell_type == "code" for o in cell.get("outputs", [])
    )
    assert "held-out" in outputs
    assert "levels seen" in outputs
    steps = int(tiny_env(notebook.stem)["PLR_GYM_EXAMPLE_STEPS"])
    assert re.search(
        rf"^ *[\d,]+ / {steps:,} steps, +\d+ s$", outputs, flags=re.MULTILINE
    )  # training progress
    if mlp:  # a small MLP trains with one torch thread (README and docs/cli.md: the fast path on a CPU)
        assert "TORCH_THREADS 1\n" in outputs
    used = json.loads(outputs.split("SAMPLER ")[-1].splitlines()[0])
    for name, values in claims.items():
        assert values == {used[name]}, f"the text says {name} = {values}, the sampler has {used[name]}"
    assert set(claims) == {"strategy", "score_transform", "temperature", "staleness_coef", "uniform_mass"}


SAMPLER_REPORT = """import json
import torch
print("SAMPLER " + json.dumps({k: getattr(sampler, k) for k in
      ("strategy", "score_transform", "temperature", "staleness_coef", "uniform_mass")}))
print("TORCH_THREADS", torch.get_num_threads())"""


def sampler_claims(nb: Any) -> dict[str, set[Any]]:
    """Every sampler setting the notebook's text (markdown and code comments, install cell aside) states."""
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown" or "pip install" not in c.source)
    patterns = {
        "temperature": r"β = ([0-9.]+)",
        "staleness_coef": r"ρ = ([0-9.]+)",
        "uniform_mass": r"`?uniform_mass=([0-9.]+)",
    }
    claims: dict[str, set[Any]] = {k: {float(v) for v in re.findall(p, text)} for k, p in patterns.items()}
    claims["strategy"] = {s for s in STRATEGIES if f"`{s}`" in text}
    claims["score_transform"] = set(re.findall(rf"({'|'.join(SCORE_TRANSFORMS)}) transform", text))
    return {k: v for k, v in claims.items() if v}


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_names_the_extra_that_brings_jupyter(notebook: Path) -> None:
    """Issue #42: Jupyter is in an extra (``notebooks``), which each notebook's first cell names; the 3.13
    stack (where the notebooks run in ``make test``) installs it."""
    import tomllib

    first = "".join(json.loads(notebook.read_text())["cells"][0]["source"])
    assert (
        re.search(r'install `"\.\[\w+,cli,notebooks\]"`', first)
        and f"jupyter lab examples/{notebook.name}" in first
    )
    root = EXAMPLES.parent
    extras = tomllib.loads((root / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(req.startswith("jupyter>=") for req in extras["notebooks"])
    (line,) = [ln for ln in (root / "Makefile").read_text().splitlines() if ln.startswith("EXTRAS313 :=")]
    assert "notebooks" in line.split(":=")[1].strip().split(",")
