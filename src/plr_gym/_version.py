"""The version of plr_gym, written here (pyproject.toml reads it; ``plr_gym.__version__`` is this).
CITATION.cff repeats it, with the day it was set; tests/test_packaging.py keeps the two equal."""

__version__ = "0.1.0.dev0"
