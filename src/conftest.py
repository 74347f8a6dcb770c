"""Doctest collection under ``src``: skip the modules whose optional dependencies are not installed."""

from __future__ import annotations


def _rllib_importable() -> bool:
    try:
        import ray.rllib  # noqa: F401
    except Exception:  # not installed, or broken (e.g. a pyarrow built for another numpy)
        return False
    return True


collect_ignore: list[str] = [] if _rllib_importable() else ["plr_gym/rllib.py"]
