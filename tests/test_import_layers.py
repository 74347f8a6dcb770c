"""The package's floors: each module imports only its own room and the floors below, and no import goes round.

The table :data:`FLOORS` is the dependency direction of ``src/plr_gym`` (STYLE.md: lower rooms never import
the higher rooms that use them; a factory that would need to belongs in the higher room). It is read from
the source with :mod:`ast`, nothing is imported:

- every ``import``/``from ... import`` of a ``plr_gym`` module counts: at the top of a module, inside a
  function (a lazy import is a dependency all the same), and under ``if TYPE_CHECKING:`` (naming a higher
  room's type is knowing it);
- a module may import modules of its own room (cycles aside) and of lower floors; two rooms on one floor
  are strangers (neither imports the other);
- ``from PKG import NAME`` where ``PKG/__init__.py`` re-exports ``NAME`` (an eager ``from X import NAME``)
  counts as an import of ``X``, the module that defines it; the root package's lazy names (``from plr_gym
  import PLRCallback`` inside the package) are imports of the top floor;
- the cycle check follows what runs: ``TYPE_CHECKING`` imports are left out (they never execute, so they
  cannot make a circle of partly initialised modules; two modules of one room may name each other's
  types), lazy imports are in, and so is the ``__init__`` of every package an import passes through
  (except the root's, which Python always runs first).

Circles inside one room, closed by a lazy import, that are known (:data:`KNOWN_CIRCLES`, with what would
remove each); any other circle fails, and so does a known one that is gone (take it off the list).

A module matches the room whose prefix is the longest that equals its name or is followed by a dot
(``plr_gym.sampler`` also holds ``plr_gym.sampler.schedule`` once ``sampler.py`` becomes a package); the
root package ``plr_gym`` is matched only exactly. A module in no room fails the test: add it to the table
(and to docs/architecture.md).

Run ``python tests/test_import_layers.py`` to print the table, the imports that cross rooms and any
violation.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = "plr_gym"

#: Floors of the house, lowest first; each floor is ``{room: module prefixes}``.
FLOORS: tuple[dict[str, tuple[str, ...]], ...] = (
    # 0: no knowledge of levels' meaning: versions, sizes, level ids, trees, atomic files
    {
        "foundations": (
            "plr_gym._version",
            "plr_gym._sizes",
            "plr_gym._levels",
            "plr_gym._structures",
            "plr_gym._legacy_gym",
            "plr_gym.checkpoint",
            "plr_gym._eval_csv",
        )
    },
    # 1: the numpy core of PLR: transforms, scores, the level sources (no torch, no SB3)
    {
        "level core": (
            "plr_gym.transforms",
            "plr_gym.scoring",
            "plr_gym.episode_parts",
            "plr_gym.sampler",
            "plr_gym.level_buffer",
            "plr_gym.source",
            "plr_gym.reference",
        )
    },
    # 2: faces of the core, each its own room: env wrappers, PER, JAX, prompts, Ray, the paper's network
    {
        "wrappers": ("plr_gym.wrappers", "plr_gym.vector"),
        "replay": ("plr_gym.replay",),
        "jax": ("plr_gym.jax",),
        "prompts": (
            "plr_gym.prompts",
            "plr_gym._prompt_state",
            "plr_gym._prompt_checks",
            "plr_gym._prompt_stats",
        ),
        "distributed": ("plr_gym.distributed",),
        "policies": ("plr_gym.policies",),
    },
    # 3: what stands on those: env adapters (LevelWrapper), the run directory (finds the SB3 wrapper),
    #    the LLM trainers (prompts)
    {
        "envs": ("plr_gym.envs",),
        "env checker": ("plr_gym.env_checker",),  # check_level_env: reads observations as LevelWrapper does
        "run directory": ("plr_gym.run",),
        "llm": ("plr_gym.trl", "plr_gym.verl", "plr_gym._verl_replay", "plr_gym._verl_dataset"),
    },
    # 4: SB3 pieces of a training run: callbacks (RunCheckpointCallback above the run directory),
    #    evaluation, level-replay's PPO
    {
        "callbacks": ("plr_gym.callbacks", "plr_gym.offpolicy"),
        "evaluation": ("plr_gym.evaluation",),
        "ppo": ("plr_gym.ppo",),
    },
    # 5: the SB3 run set-up shared by the CLI, the demo and benchmarks; plots
    {
        "training": (
            "plr_gym.training",
            "plr_gym.level_envs",
            "plr_gym.hyperparameters",
            "plr_gym.torch_threads",
            "plr_gym.result_files",
        ),
        "plotting": ("plr_gym.plotting",),
    },
    # 6: the options of plr-gym train declared once and the paper's recipes read from them (they build
    #    training's hyperparameters); RLlib (uses training's env ids). The CLI (floor 7) parses with them.
    {
        "presets": ("plr_gym.presets", "plr_gym.options"),
        "rllib": ("plr_gym.rllib",),
    },
    # 7: applications
    {"applications": ("plr_gym.cli", "plr_gym.demo", "plr_gym.__main__")},
    # 8: the public names (``import plr_gym``): the root package only, whose lazy names reach every floor
    {"public API": (ROOT,)},
)


#: Circles that exist and are known, each inside one room and closed only by a lazy import (so nothing
#: breaks at import time), with what would remove it. A new circle fails the test; so does an entry here
#: that no longer is one (remove it). Circles across rooms are never listed: the floors forbid them.
KNOWN_CIRCLES: dict[frozenset[str], str] = {}


@dataclass(frozen=True)
class Import:
    """One import statement's target inside the package."""

    source: str  # the importing module
    target: str  # the module that defines what is imported
    passes: tuple[str, ...]  # packages whose ``__init__`` runs on the way (other than the root's)
    file: Path
    line: int
    type_only: bool  # under ``if TYPE_CHECKING:``

    def where(self) -> str:
        return f"{self.file}:{self.line}"


def package_dir() -> Path:
    """``src/plr_gym`` of the ``plr_gym`` on the path (found without importing it)."""
    spec = importlib.util.find_spec(ROOT)
    assert spec is not None and spec.submodule_search_locations, "plr_gym is not importable"
    return Path(next(iter(spec.submodule_search_locations)))


def modules(base: Path) -> dict[str, Path]:
    """``{dotted name: file}`` of every module of the package (a package is its ``__init__.py``)."""
    out = {}
    for path in sorted(base.rglob("*.py")):
        parts = list(path.relative_to(base.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _statements(tree: ast.AST) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool, bool]]:
    """Every import statement with (under TYPE_CHECKING, inside a function)."""

    def walk(
        node: ast.AST, type_only: bool, lazy: bool
    ) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool, bool]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child, type_only, lazy
            elif isinstance(child, ast.If) and _is_type_checking(child):
                for stmt in child.body:
                    yield from walk(ast.Module(body=[stmt], type_ignores=[]), True, lazy)
                for stmt in child.orelse:
                    yield from walk(ast.Module(body=[stmt], type_ignores=[]), type_only, lazy)
            else:
                inner = lazy or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                yield from walk(child, type_only, inner)

    yield from walk(tree, False, False)


class Graph:
    """The imports between the package's modules, read from their source."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.modules = modules(base)
        self.trees = {name: ast.parse(path.read_text(), str(path)) for name, path in self.modules.items()}
        self._exports = {name: self._eager_exports(name) for name in self.modules if self._is_package(name)}
        self.imports = [imp for name in self.modules for imp in self._imports_of(name)]

    def _is_package(self, name: str) -> bool:
        return self.modules[name].name == "__init__.py"

    def _absolute(self, name: str, node: ast.ImportFrom) -> str:
        if not node.level:
            return node.module or ""
        parts = name.split(".") if self._is_package(name) else name.split(".")[:-1]
        parts = parts[: len(parts) - (node.level - 1)]
        return ".".join([*parts, *([node.module] if node.module else [])])

    def _eager_exports(self, package: str) -> dict[str, tuple[str, str]]:
        """``{name: (module, its name there)}`` bound by the package ``__init__``'s top-level imports."""
        out = {}
        for node in self.trees[package].body:
            if isinstance(node, ast.ImportFrom):
                module = self._absolute(package, node)
                for alias in node.names:
                    out[alias.asname or alias.name] = (module, alias.name)
        return out

    def _resolve(self, module: str, name: str | None) -> tuple[str, tuple[str, ...]]:
        """The module defining ``module.name`` (``name=None``: ``import module``), and the packages whose
        ``__init__`` runs to get it."""
        passes: list[str] = []
        for _ in range(20):  # re-exports of re-exports
            if name is not None and f"{module}.{name}" in self.modules:
                module, name = f"{module}.{name}", None
            if name is None or module not in self._exports or name not in self._exports[module]:
                break
            passes.append(module)
            module, name = self._exports[module][name]
        while module not in self.modules and "." in module:  # an attribute of a module: that module
            module = module.rsplit(".", 1)[0]
        parts = module.split(".")
        passes += [".".join(parts[:i]) for i in range(2, len(parts))]  # parent packages, not the root
        if name is not None and module == ROOT:
            passes.append(ROOT)  # ``from plr_gym import X`` inside the package: the root runs for it
        return module, tuple(dict.fromkeys(passes))

    def _imports_of(self, name: str) -> Iterator[Import]:
        for node, type_only, _lazy in _statements(self.trees[name]):
            if isinstance(node, ast.Import):
                targets = [(alias.name, None) for alias in node.names]
            else:
                module = self._absolute(name, node)
                targets = [(module, alias.name) for alias in node.names]
            for module, attr in targets:
                if module != ROOT and not module.startswith(ROOT + "."):
                    continue
                target, passes = self._resolve(module, attr)
                passes = tuple(p for p in passes if not (name == p or name.startswith(p + ".")))
                if target != name:
                    yield Import(name, target, passes, self.modules[name], node.lineno, type_only)


def room_of(module: str) -> tuple[int, str] | None:
    """``(floor, room)`` of a module: the room with the longest matching prefix."""
    best: tuple[int, int, str] | None = None
    for floor, rooms in enumerate(FLOORS):
        for room, prefixes in rooms.items():
            for prefix in prefixes:
                exact = module == prefix
                if exact or (prefix != ROOT and module.startswith(prefix + ".")):
                    if best is None or len(prefix) > best[0]:
                        best = (len(prefix), floor, room)
    return None if best is None else (best[1], best[2])


def unplaced(graph: Graph) -> list[str]:
    return [name for name in graph.modules if room_of(name) is None]


def stale_prefixes(graph: Graph) -> list[str]:
    return [
        prefix
        for rooms in FLOORS
        for prefixes in rooms.values()
        for prefix in prefixes
        if not any(m == prefix or m.startswith(prefix + ".") for m in graph.modules)
    ]


def upward_imports(graph: Graph) -> list[str]:
    """Each import of a higher floor or of another room of the same floor, as ``file:line: ...``."""
    out = []
    for imp in graph.imports:
        here, there = room_of(imp.source), room_of(imp.target)
        if here is None or there is None or here[1] == there[1] or there[0] < here[0]:
            continue
        how = "a higher floor" if there[0] > here[0] else "another room of its floor"
        out.append(
            f"{imp.where()}: {imp.source} (floor {here[0]}, {here[1]}) imports {imp.target} "
            f"({how}: floor {there[0]}, {there[1]}){' under TYPE_CHECKING' if imp.type_only else ''}"
        )
    return out


def cycles(graph: Graph) -> list[list[Import]]:
    """The import circles that run (strongly connected components of more than one module), each as the
    imports inside it."""
    edges: dict[str, dict[str, Import]] = {name: {} for name in graph.modules}
    for imp in graph.imports:
        if imp.type_only:
            continue
        for target in (imp.target, *imp.passes):
            if target != imp.source:
                edges[imp.source].setdefault(target, imp)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(v: str) -> None:  # Tarjan; the graph has ~100 nodes, recursion is fine
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for name in sorted(edges):
        if name not in index:
            connect(name)
    return [
        list({id(imp): imp for m in component for t, imp in edges[m].items() if t in component}.values())
        for component in found
    ]


def _describe(component: list[Import]) -> str:
    return "\n".join(f"  {imp.where()}: {imp.source} -> {imp.target}" for imp in component)


# --------------------------------------------------------------------------------------------------
# tests
# --------------------------------------------------------------------------------------------------
GRAPH = Graph(package_dir())


def test_every_module_has_a_room() -> None:
    missing = unplaced(GRAPH)
    assert not missing, (
        f"modules in no room of FLOORS: {missing}; add each to the room it belongs to in "
        "tests/test_import_layers.py (and to docs/architecture.md's layout)"
    )
    stale = stale_prefixes(GRAPH)
    assert not stale, f"FLOORS names modules that no longer exist: {stale}; remove them from the table"


def test_no_module_imports_a_higher_floor_or_a_sibling_room() -> None:
    bad = upward_imports(GRAPH)
    assert not bad, "imports against the floors (lower rooms never import higher ones):\n" + "\n".join(bad)


def test_no_import_circle() -> None:
    found = {frozenset(imp.source for imp in c): c for c in cycles(GRAPH)}
    new = [c for members, c in found.items() if members not in KNOWN_CIRCLES]
    assert not new, "import circles:\n" + "\n\n".join(_describe(c) for c in new)
    gone = [sorted(members) for members in KNOWN_CIRCLES if members not in found]
    assert not gone, f"KNOWN_CIRCLES lists circles that no longer exist: {gone}; remove them"


def test_the_reader_sees_lazy_type_only_and_reexported_imports(tmp_path: Path) -> None:
    """The graph itself: a lazy import and a TYPE_CHECKING import are seen, a package's re-export is
    followed to the defining module, and a circle through a package ``__init__`` is found."""
    pkg = tmp_path / ROOT
    (pkg / "low").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "low" / "__init__.py").write_text("from plr_gym.low.impl import Thing\n")
    (pkg / "low" / "impl.py").write_text("def f():\n    from plr_gym.high import g\n")
    (pkg / "high.py").write_text(
        "from typing import TYPE_CHECKING\nfrom plr_gym.low import Thing\n"
        "if TYPE_CHECKING:\n    from plr_gym import other\n"
    )
    (pkg / "other.py").write_text("")
    graph = Graph(pkg)
    seen = {(i.source, i.target, i.line, i.type_only, i.passes) for i in graph.imports}
    assert seen == {
        ("plr_gym.low", "plr_gym.low.impl", 1, False, ()),
        ("plr_gym.low.impl", "plr_gym.high", 2, False, ()),
        ("plr_gym.high", "plr_gym.low.impl", 2, False, ("plr_gym.low",)),
        ("plr_gym.high", "plr_gym.other", 4, True, ()),
    }
    [circle] = cycles(graph)
    assert {(i.source, i.target) for i in circle} == {
        ("plr_gym.low.impl", "plr_gym.high"),
        ("plr_gym.high", "plr_gym.low.impl"),
        ("plr_gym.low", "plr_gym.low.impl"),
    }
    assert "high.py:2: plr_gym.high -> plr_gym.low.impl" in _describe(circle)


def _report() -> int:
    print(f"floors of {GRAPH.base} (lowest first):")
    for floor, rooms in enumerate(FLOORS):
        print(f"  {floor}: " + "; ".join(f"{room}: {', '.join(p)}" for room, p in rooms.items()))
    print("imports between rooms:")
    crossing = {
        (imp.source, imp.target, imp.where(), imp.type_only)
        for imp in GRAPH.imports
        if room_of(imp.source) != room_of(imp.target)
    }
    for source, target, where, type_only in sorted(crossing):
        print(f"  {source} -> {target} ({where}){' type-only' if type_only else ''}")
    problems = [*(f"not in a room: {m}" for m in unplaced(GRAPH)), *upward_imports(GRAPH)]
    for circle in cycles(GRAPH):
        known = KNOWN_CIRCLES.get(frozenset(imp.source for imp in circle))
        if known:
            print(f"known circle ({known}):\n{_describe(circle)}")
        else:
            problems.append(f"circle:\n{_describe(circle)}")
    print("\n".join(problems) if problems else "no upward import, no new circle")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(_report())
