"""Print the `uv pip install` options that make uv install from where pip is configured to install from.

The Makefile installs its venvs with uv (parallel downloads and unpacking: minutes faster than pip on a fresh
clone), but uv reads none of pip's configuration. A machine's pip configuration can name a local wheel folder
(`find-links`, where this machine keeps its CPU build of torch), extra package indexes and a constraints
file; without them uv would resolve a different torch (a CUDA build, gigabytes) or ignore the machine's caps.
This script reads `pip config list` (files and PIP_* variables, as pip applies them) and prints uv's options:

    python .ci/uv_args.py
    --find-links /opt/wheels --constraint /etc/xdg/pip/constraints.txt --index-strategy unsafe-best-match ...

`--index-strategy unsafe-best-match` is pip's own rule (the best version across all indexes); uv's default
takes each package from the first index that has it. Prints nothing when pip has no such configuration.
"""

from __future__ import annotations

import shlex
import subprocess
import sys

# pip's option -> uv's option; both accept each of these more than once
OPTIONS = {
    "index-url": "--index-url",
    "extra-index-url": "--extra-index-url",
    "find-links": "--find-links",
    "constraint": "--constraint",
}


def pip_config(python: str) -> dict[str, list[str]]:
    """The values of OPTIONS in pip's configuration, the environment's variables winning over files."""
    out = subprocess.run(
        [python, "-m", "pip", "config", "list"], capture_output=True, text=True, check=True
    ).stdout
    by_scope: dict[str, dict[str, list[str]]] = {}
    for line in out.splitlines():
        key, sep, raw = line.partition("=")
        scope, _, name = key.rpartition(".")
        if not sep or name not in OPTIONS:
            continue
        value = raw.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        by_scope.setdefault(name, {})[scope] = value.split()
    # pip applies the PIP_* variables (scope ":env:") over the files' values (global, user, site)
    return {name: scopes.get(":env:", next(iter(scopes.values()))) for name, scopes in by_scope.items()}


def uv_args(config: dict[str, list[str]]) -> list[str]:
    args: list[str] = []
    for name, flag in OPTIONS.items():
        for value in config.get(name, []):
            args += [flag, value]
    if "extra-index-url" in config:
        args += ["--index-strategy", "unsafe-best-match"]
    return args


if __name__ == "__main__":
    print(shlex.join(uv_args(pip_config(sys.argv[1] if len(sys.argv) > 1 else sys.executable))))
