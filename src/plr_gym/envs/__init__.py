"""Environments with per-reset level choice, registered with Gymnasium on import.

Importing this package is cheap: it registers ``plr_gym/maze-v0`` (:mod:`plr_gym.envs.maze`, an editable
MiniGrid maze for open-ended curricula) and ``plr_gym/procgen-<game>-v0`` for the 16 Procgen games
(:data:`~plr_gym.envs.procgen.GAMES`; stock Procgen's legacy ids ``procgen-<game>-v0`` build the same
env with stock Procgen's default ``distribution_mode="hard"``, and warn once per game that they are hard
mode unless ``distribution_mode`` is given; ``gymnasium.make_vec(id, num_envs=N,
vectorization_mode="vector_entry_point")`` builds the batched :class:`ProcgenVectorEnv`, one Procgen
C environment of ``N`` games) and imports Procgen only when such an env is built, so it works without the
``procgen`` extra installed (building one then raises an ``ImportError`` saying what to install). Procgen
is procgen-mirror on Python 3.11/3.12 and procgen-gym on Python 3.13, behind one API:
:func:`procgen_backend` says which one is in use.

Example:
    >>> import gymnasium as gym
    >>> import plr_gym.envs
    >>> "plr_gym/procgen-bigfish-v0" in gym.registry
    True
"""

from __future__ import annotations

import gymnasium as gym

from plr_gym.envs._procgen_backend import ProcgenBackend, procgen_backend
from plr_gym.envs.procgen import DISTRIBUTION_MODES, GAMES, MAX_LEVEL, LegacyHardMode, ProcgenLevelEnv
from plr_gym.envs.procgen_vector import ProcgenVectorEnv

__all__ = [
    "DISTRIBUTION_MODES",
    "GAMES",
    "MAX_LEVEL",
    "ProcgenBackend",
    "ProcgenLevelEnv",
    "ProcgenVectorEnv",
    "procgen_backend",
    "procgen_env_id",
]


def procgen_env_id(game: str) -> str:
    """The Gymnasium id of a Procgen game, e.g. ``"plr_gym/procgen-coinrun-v0"``."""
    if game not in GAMES:
        raise ValueError(f"game must be one of {', '.join(GAMES)}; got {game!r}")
    return f"plr_gym/procgen-{game}-v0"


def _register_procgen() -> None:
    for game in GAMES:
        # plr_gym's id, and stock Procgen's legacy gym id with stock Procgen's default mode ("hard"): the
        # same env either way (procgen-mirror registers its ids with the legacy gym, procgen-gym namespaces
        # its own as procgen_gym/..., so the plain legacy id is free in Gymnasium's registry); the legacy
        # id's "hard" is a LegacyHardMode, so that the env warns where the user did not choose the mode
        for env_id, kwargs in (
            (procgen_env_id(game), {"game": game}),
            (f"procgen-{game}-v0", {"game": game, "distribution_mode": LegacyHardMode("hard")}),
        ):
            if env_id not in gym.registry:  # importing twice (e.g. importlib.reload) must not re-register
                gym.register(
                    id=env_id,
                    entry_point="plr_gym.envs._frames:make_procgen_level_env",  # ProcgenLevelEnv
                    vector_entry_point="plr_gym.envs.procgen_vector:ProcgenVectorEnv",
                    kwargs=kwargs,
                )


_register_procgen()
if "plr_gym/maze-v0" not in gym.registry:
    # an editable MiniGrid maze (needs the minigrid extra): levels are wall layouts, see plr_gym.envs.maze
    gym.register(id="plr_gym/maze-v0", entry_point="plr_gym.envs.maze:LayoutMazeEnv")
if "plr_gym/MiniGrid-DoorKeyGamut-v0" not in gym.registry:
    # DoorKey levels of sizes 5, 6 and 8 chosen by seed % 3 (needs the minigrid extra): plr_gym.envs.gamut
    gym.register(id="plr_gym/MiniGrid-DoorKeyGamut-v0", entry_point="plr_gym.envs.gamut:DoorKeyGamutEnv")
if "plr_gym/MiniGrid-DoorKeyMixed-v0" not in gym.registry:
    # DoorKey levels that are trivial, normal or unsolvable by seed % 3 (needs the minigrid extra)
    gym.register(id="plr_gym/MiniGrid-DoorKeyMixed-v0", entry_point="plr_gym.envs.gamut:DoorKeyMixedEnv")
