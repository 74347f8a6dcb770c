"""The version of plr_gym: written here only (pyproject.toml reads it; ``plr_gym.__version__`` is this)."""

__version__ = "0.1.0.dev0"
