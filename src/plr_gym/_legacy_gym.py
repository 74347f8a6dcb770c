"""Import the legacy ``gym`` package without its "Gym has been unmaintained" banner.

Stable-Baselines3 imports ``gym`` when it is installed (the ``procgen`` extra pulls it in), and ``gym``
0.26 prints a four-line notice to stderr on import. :func:`import_quietly` imports it first, capturing
stderr only for the duration of that one import and writing back everything except the notice. Nothing
else changes: no warning filter, no environment variable, and a ``gym`` imported before ``plr_gym`` is
left alone (its banner has been printed already). ``plr_gym/__init__.py`` imports this module first.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import io
import sys

__all__ = ["import_quietly"]


def import_quietly() -> None:
    """Import ``gym`` (if installed and not imported yet) with its banner removed from stderr."""
    if "gym" in sys.modules or importlib.util.find_spec("gym") is None:
        return
    captured = io.StringIO()
    with contextlib.redirect_stderr(captured):
        try:
            gym = importlib.import_module("gym")
        except Exception:  # a broken gym: SB3's own `import gym` fails (or copes) as it would without us
            gym = None
    text = captured.getvalue()
    if gym is not None:
        with contextlib.suppress(Exception):
            from gym_notices.notices import notices

            notice = notices.get(getattr(gym, "__version__", ""))
            if notice:
                text = text.replace(notice + "\n", "", 1)
    if text:
        sys.stderr.write(text)


import_quietly()
