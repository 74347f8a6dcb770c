"""Doctest collection of ``src/plr_gym``: modules of an integration this stack cannot hold are left out.

RLlib 2.60 pins ``gymnasium==1.2.2`` and procgen-gym (Procgen on Python 3.13) needs ``gymnasium>=1.2.3``, so
the Python 3.13 CI stack has Ray core but not RLlib (docs/install.md). There ``plr_gym/rllib.py`` cannot be
imported, and its doctests are not collected; ``tests/test_rllib.py`` reports the skip, naming the stack.
"""

from __future__ import annotations

collect_ignore: list[str] = []
try:
    import ray.rllib  # noqa: F401
except ImportError:
    collect_ignore.append("plr_gym/rllib.py")
