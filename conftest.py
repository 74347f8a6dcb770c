"""Doctest collection over src/: skip the modules of optional extras whose packages are not installed."""

from __future__ import annotations

import importlib.util

collect_ignore = [
    path
    for path, needs in (("src/plr_gym/trl.py", "trl"), ("src/plr_gym/verl.py", "verl"))
    if importlib.util.find_spec(needs) is None
]
