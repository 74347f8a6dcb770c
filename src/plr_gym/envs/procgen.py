"""Stock Procgen as a Gymnasium env whose ``reset(seed=s)`` plays level ``s``.

Procgen (Cobbe et al. 2020) draws a level for every episode itself; its only level control is the range
``[start_level, start_level + num_levels)`` fixed when the environment is built. PLR needs to choose the
level of every episode. :class:`ProcgenLevelEnv` gives that choice on top of the unmodified
Procgen package, without a fork: ``procgen-mirror`` on Python 3.11 and 3.12, ``procgen-gym`` on Python 3.13
(both openai/procgen 0.10.7's C++; :mod:`plr_gym.envs._procgen_backend` binds whichever is installed, and
:func:`~plr_gym.envs.procgen_backend` says which):

``reset(seed=s)`` puts the game into *exactly* the state that a stock Procgen env built with
``num_levels=1, start_level=s`` (``procgen.ProcgenGym3Env(num=1, ...)``, ``procgen_gym.ProcgenVecEnv(
num_envs=1, ...)``) has after construction, byte for byte as Procgen serializes it (``get_state``), so the
same actions give the same observations and rewards.

How a level is switched (one single-game Procgen env per :class:`ProcgenLevelEnv`):

* **Revisit** — the initial state of every level played recently is kept in an LRU cache
  (``level_cache_size`` levels); a revisit is one ``set_state`` (≈0.15 ms per reset in all).
* **First visit** — Procgen's serialized state stores the level-seed range. The adapter takes the pristine
  initial state of level 0, writes ``[s, s + 1)`` into that range, restores it and sends action ``-1``,
  Procgen's own "force a reset" action: the game generates level ``s`` from its seed exactly as a new
  environment would. That forced step leaves a few bookkeeping fields that a never-stepped environment does
  not have (the last action, the step's random draw, …); they are copied back from the pristine state, so
  the result is byte-identical to a freshly built environment's state (≈0.4–0.5 ms per reset in all).
* **Self-check** — the first environment of each configuration in a process verifies this on two probe
  levels against freshly built Procgen environments. If the installed Procgen serializes its state
  differently, the adapter warns and falls back to building a throw-away Procgen environment per first
  visit (≈1 ms), which is exact by construction. ``benchmarks/procgen_switch.py`` measures all of this.

Episode ends. Procgen resets a game inside the step that ends its episode and renders only the new
episode's first frame; the ended episode's final frame is never drawn.

* ``terminated=True`` when the game ended the episode (death, success). Its observation is the **last frame
  of the ended episode that Procgen rendered** (the frame the final action was taken in), never the next
  episode's first frame; the next episode's first frame comes from :meth:`ProcgenLevelEnv.reset`.
  ``info["level_complete"]`` is ``True`` when the episode ended by solving the level.
* ``truncated=True`` when Procgen's own time limit (:attr:`ProcgenLevelEnv.max_episode_steps`: 1000 steps
  for most games; 500 for leaper and maze, 4000 for bossfight and plunder, 6000 for bigfish) is reached.
  Procgen would reset the game in that step; the adapter instead raises the limit by one step for that step
  only, so the observation returned is the true final frame. Rewards are unchanged. If the game also ends at
  that step, both flags are ``True``.
* After either, :meth:`~ProcgenLevelEnv.step` raises :class:`gymnasium.error.ResetNeeded` until
  :meth:`~ProcgenLevelEnv.reset` is called.

Every ``reset(seed=s)`` starts level ``s`` as a *freshly built* Procgen environment does. Stock Procgen's own
automatic reset carries a few fields over from the previous episode (in dodgeball, the direction of the
last move, which aims the first shot), so the second episode of a stock ``num_levels=1`` environment can
differ from its first; this adapter never carries anything over.

The first import of Procgen takes a few seconds (it loads its image assets). procgen-mirror also imports
the legacy ``gym`` package, whose notice about being unmaintained ``plr_gym`` removes from stderr.
"""

from __future__ import annotations

import collections
import dataclasses
import numbers
import struct
import warnings
from collections.abc import Mapping
from typing import Any, SupportsFloat, Union

import gymnasium as gym
import numpy as np
import numpy.typing as npt
from gymnasium import spaces
from gymnasium.error import ResetNeeded

from plr_gym._levels import check_level_id
from plr_gym.envs._procgen_backend import MAX_STATE_BYTES, ProcgenBackend, ProcgenCore, procgen_backend

__all__ = [
    "DISTRIBUTION_MODES",
    "GAMES",
    "MAX_LEVEL",
    "ProcgenLevelEnv",
]

#: The 16 Procgen games.
GAMES: tuple[str, ...] = (
    "bigfish",
    "bossfight",
    "caveflyer",
    "chaser",
    "climber",
    "coinrun",
    "dodgeball",
    "fruitbot",
    "heist",
    "jumper",
    "leaper",
    "maze",
    "miner",
    "ninja",
    "plunder",
    "starpilot",
)

#: Distribution modes and the games that support them (as checked by Procgen's ``game.cpp``).
DISTRIBUTION_MODES: dict[str, tuple[str, ...]] = {
    "easy": GAMES,
    "hard": GAMES,
    "extreme": ("chaser", "dodgeball", "leaper", "starpilot"),
    "memory": ("caveflyer", "dodgeball", "heist", "jumper", "maze", "miner"),
}

#: Largest level id: Procgen level seeds are non-negative 32-bit ints.
MAX_LEVEL = 2**31 - 1

_NUM_ACTIONS = 15
_OBS_SHAPE = (64, 64, 3)

ObsType = npt.NDArray[np.uint8]
ActType = Union[int, np.integer[Any]]


def _check_level(value: object, name: str) -> int:
    """Return ``value`` as a level id in ``[0, MAX_LEVEL]`` or raise ``TypeError``/``ValueError``."""
    if type(value) is int and 0 <= value <= MAX_LEVEL:  # the common case, without the ABC check
        return value
    return check_level_id(value, name, high=MAX_LEVEL, what="a Procgen level seed")


def _check_seed(value: object) -> int:
    """A reset ``seed``: any int >= 0 (a level up to :data:`MAX_LEVEL`, else an RNG seed only)."""
    if type(value) is int and 0 <= value <= MAX_LEVEL:
        return value
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Integral, np.integer)):
        raise TypeError(f"seed must be an int >= 0, got {value!r} ({type(value).__name__})")
    if value < 0:
        raise ValueError(
            f"seed must be an int >= 0 (a level up to 2**31 - 1, or a larger RNG seed), got {int(value)}"
        )
    return int(value)


def _check_count(value: object, name: str, meaning: str) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int >= 0 {meaning}, got {value!r}")
    if value < 0:
        raise ValueError(f"{name} must be an int >= 0 {meaning}, got {value!r}")
    return int(value)


def _check_bool(value: object, name: str) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool, got {value!r}")
    return bool(value)


# --------------------------------------------------------------------------------------------------
# Procgen's serialized game state (Game::serialize followed by BasicAbstractGame::serialize, then the
# game's own fields and an end marker). Only the fields the level switch touches are located.
# --------------------------------------------------------------------------------------------------

_INT = struct.Struct("<i")
_MAX_STATE_BYTES = MAX_STATE_BYTES
_END_OF_BUFFER = struct.pack("<I", 0xCAFECAFE)
_STATE_VERSION = 0
_GAME_OPTION_WORDS = 12  # paint_vel_info … physics_mode
_ENTITY_BYTES = 31 * 4  # Entity::serialize writes 31 four-byte fields
# reward, done, level_complete, action, timeout, current_level_seed, …, cur_time, is_waiting_for_step
_EPISODE_WORDS = 15
_TIMEOUT_WORD = 4
_CURRENT_LEVEL_WORD = 5


class _StateFormatError(ValueError):
    """The installed Procgen serializes its state differently from what this module expects."""


@dataclasses.dataclass(frozen=True)
class _Layout:
    """Byte offsets of the fields of one serialized state that a level switch reads or writes."""

    level_range: int  # level_seed_low, level_seed_high
    level_seed_rng: tuple[int, int]  # span of the level-seed RNG (irrelevant with a one-level range)
    level_rng: tuple[int, int]  # span of the game's RNG, seeded by the level at reset
    episode: int  # the _EPISODE_WORDS words after the RNGs
    action_words: int  # last_move_action, move_action, special_action
    action_velocity: int  # action_vx, action_vy, action_vrot
    step_rand_int: int
    end: int  # offset of the end marker

    @property
    def timeout(self) -> int:
        return self.episode + 4 * _TIMEOUT_WORD


def _read_int(state: bytes, offset: int) -> int:
    if offset < 0 or offset + 4 > len(state):
        raise _StateFormatError(f"state too short to read offset {offset}")
    value: int = _INT.unpack_from(state, offset)[0]
    return value


def _skip_string(state: bytes, offset: int) -> int:
    size = _read_int(state, offset)
    if size < 0 or offset + 4 + size > len(state):
        raise _StateFormatError("bad string length")
    return offset + 4 + size


def _layout(state: bytes, game: str) -> _Layout:
    """Locate the fields of ``state`` (a ``get_state`` result); raise ``_StateFormatError`` if unexpected."""
    if not state.endswith(_END_OF_BUFFER) or _read_int(state, 0) != _STATE_VERSION:
        raise _StateFormatError("unknown state version or end marker")
    offset = _skip_string(state, 4)
    if state[8:offset] != game.encode():
        raise _StateFormatError("game name mismatch")
    offset += 4 * _GAME_OPTION_WORDS
    level_range = offset + 4  # after grid_step
    offset += 4 * 5  # grid_step, level_seed_low, level_seed_high, game_type, game_n
    spans = []
    for _ in range(2):  # RandGen::serialize: is_seeded, then the generator as text
        start = offset
        offset = _skip_string(state, offset + 4)
        spans.append((start, offset))
    episode = offset
    offset += 4 * _EPISODE_WORDS + 4  # the episode words, then grid_size
    num_entities = _read_int(state, offset)
    if num_entities < 0 or num_entities * _ENTITY_BYTES > len(state):
        raise _StateFormatError("bad entity count")
    offset += 4 + num_entities * _ENTITY_BYTES
    # use_procgen_background, background_index, bg_tile_ratio, bg_pct_x, char_dim
    action_words = offset + 4 * 5
    layout = _Layout(
        level_range=level_range,
        level_seed_rng=spans[0],
        level_rng=spans[1],
        episode=episode,
        action_words=action_words,
        action_velocity=action_words + 4 * 6,  # after mixrate, maxspeed, max_jump
        step_rand_int=action_words + 4 * 13,  # after center_x/y, random_agent_start, has_useful_vel_info
        end=len(state) - len(_END_OF_BUFFER),
    )
    if layout.step_rand_int + 4 > layout.end:
        raise _StateFormatError("state too short")
    return layout


def _with_level_range(state: bytes, layout: _Layout, level: int) -> bytes:
    """``state`` whose level-seed range is ``[level, level + 1)`` (int32 wrap-around, as in Procgen)."""
    out = bytearray(state)
    high = level + 1 if level < MAX_LEVEL else -(2**31)
    struct.pack_into("<ii", out, layout.level_range, level, high)
    return bytes(out)


@dataclasses.dataclass(frozen=True)
class _Calibration:
    """Result of the self-check: whether the fast first visit is exact, and what it must repair."""

    fast: bool
    # offsets from the end of the state of game-specific bytes that the forced step changes
    tail_offsets: tuple[int, ...] = ()
    tail_values: bytes = b""


# One self-check per Procgen configuration and process (the states are deterministic).
_CALIBRATIONS: dict[tuple[Any, ...], _Calibration] = {}

_PROBE_LEVELS = (1, MAX_LEVEL)


class LegacyHardMode(str):
    """``"hard"`` as the legacy ids ``procgen-<game>-v0`` register it (stock Procgen's default mode): equal
    to ``"hard"``, but it tells the env that the user did not choose the mode, so it warns once per game
    (:func:`_plain_mode`). A ``distribution_mode`` given to ``gym.make`` replaces it, and no warning is shown.
    """

    __slots__ = ()


_LEGACY_WARNED: set[str] = set()


def _plain_mode(game: str, distribution_mode: str) -> str:
    """``distribution_mode`` as a plain ``str``; a :class:`LegacyHardMode` warns once per game that the
    legacy id gives hard mode."""
    if type(distribution_mode) is not LegacyHardMode:
        return distribution_mode
    if game not in _LEGACY_WARNED:
        _LEGACY_WARNED.add(game)
        warnings.warn(
            f"procgen-{game}-v0 is Procgen's legacy id and plays distribution_mode='hard' (stock Procgen's "
            f"default); the PLR paper and plr_gym/procgen-{game}-v0 use 'easy'. Use "
            f"gym.make('plr_gym/procgen-{game}-v0'), or give distribution_mode='easy' (or 'hard', to keep "
            "hard mode and silence this warning). Shown once per game.",
            UserWarning,
            stacklevel=4,
        )
    return "hard"


def _check_game(game: str, distribution_mode: str) -> None:
    """Refuse a game or a distribution mode Procgen does not have, or a mode the game does not support."""
    if game not in GAMES:
        raise ValueError(f"game must be one of {', '.join(GAMES)}; got {game!r}")
    if distribution_mode == "exploration":
        raise ValueError(
            "distribution_mode='exploration' is a single fixed Procgen level; use "
            "distribution_mode='hard' and reset(seed=procgen.env.EXPLORATION_LEVEL_SEEDS[game])"
        )
    if distribution_mode not in DISTRIBUTION_MODES:
        raise ValueError(
            f"distribution_mode must be one of {', '.join(DISTRIBUTION_MODES)}; got {distribution_mode!r}"
        )
    if game not in DISTRIBUTION_MODES[distribution_mode]:
        supported = [mode for mode, games in DISTRIBUTION_MODES.items() if game in games]
        raise ValueError(
            f"{game} does not support distribution_mode={distribution_mode!r}; "
            f"it supports {', '.join(supported)}"
        )


def _refuse_level_changing_options(use_generated_assets: Any, use_sequential_levels: Any) -> None:
    """Refuse Procgen's options under which a level cannot be saved and restored, or an episode is not one
    level."""
    if _check_bool(use_generated_assets, "use_generated_assets"):
        raise ValueError(
            "use_generated_assets=True is not supported: Procgen cannot save or restore the state of a "
            "game with generated assets, which per-level resets need"
        )
    if _check_bool(use_sequential_levels, "use_sequential_levels"):
        raise ValueError(
            "use_sequential_levels=True is not supported: Procgen then moves to another level without "
            "ending the episode, so an episode would no longer be one level"
        )


def _check_level_range(num_levels: Any, start_level: Any) -> tuple[int, int]:
    """``(num_levels, start_level)`` checked: Procgen's level range is ``[start_level, start_level +
    num_levels)``, every level for ``num_levels=0``."""
    num_levels = _check_count(num_levels, "num_levels", "(0: every level)")
    start_level = _check_level(start_level, "start_level")
    if num_levels == 0 and start_level != 0:
        raise ValueError(
            "start_level must be 0 when num_levels=0 (every level), as in Procgen; "
            f"got start_level={start_level}"
        )
    if start_level + num_levels > MAX_LEVEL + 1:
        raise ValueError(f"start_level + num_levels must be <= 2**31, got {start_level} + {num_levels}")
    return num_levels, start_level


class ProcgenLevelEnv(gym.Env[ObsType, ActType]):
    """One Procgen game as a Gymnasium env in which ``reset(seed=s)`` plays Procgen level ``s``.

    Level ``s`` is the level that stock Procgen plays when built with ``num_levels=1, start_level=s``
    (``procgen.ProcgenGym3Env(num=1, env_name=game, ...)`` on procgen-mirror,
    ``procgen_gym.ProcgenVecEnv(num_envs=1, env_name=game, ...)`` on procgen-gym): same first observation,
    and the same observations and rewards for the same actions. The adapter runs on stock Procgen; see the
    module docstring for how a level switch is done (≈0.15 ms for a cached level, ≈0.5 ms for a new one)
    and for the exact meaning of ``terminated`` / ``truncated``.

    Choosing the level of an episode, in order of precedence:

    1. ``reset(options={"level": s})`` — the plr_gym convention (``seed``, if also given, only seeds
       :attr:`np_random`);
    2. ``reset(seed=s)`` with ``s <= MAX_LEVEL`` (``2**31 - 1``) — level ``s``; also seeds
       :attr:`np_random`, as in any Gymnasium env;
    3. ``reset()`` — a level drawn uniformly by :attr:`np_random` from ``[start_level, start_level +
       num_levels)``, like Procgen's own ``num_levels``/``start_level`` (``num_levels=0``: every level
       ``[0, 2**31 - 1)``). So ``reset(seed=k)`` followed by ``reset()`` calls is a reproducible sequence.
       A larger seed ``s > MAX_LEVEL`` is no level: it only seeds :attr:`np_random`, and the level is drawn
       as here (Stable-Baselines3's unseeded ``make_vec_env`` passes seeds up to ``2**32 + n_envs - 2``).
       :class:`~plr_gym.LevelWrapper` refuses such a seed as a level, since no Procgen level has it.

    Observations are the ``(64, 64, 3)`` ``uint8`` RGB frames Procgen gives agents; actions are Procgen's 15
    discrete actions. ``info["level"]`` is the current level on every reset and step;
    ``info["level_complete"]`` on every step is ``True`` only on the step that ends the episode by solving
    the level (Procgen's ``prev_level_complete``).

    **Memory.** The LRU cache holds the initial state of up to ``level_cache_size`` levels, 21–40 KB each
    depending on the game and mode (e.g. ≈22 KB bigfish, ≈38 KB coinrun): the default 256 levels take at most
    ≈10 MB per env. ``level_cache_size=0`` disables the cache (every reset is a first visit).

    :param game: one of :data:`GAMES`.
    :param distribution_mode: ``"easy"`` (default; Procgen's own default is ``"hard"``), ``"hard"``,
        ``"extreme"`` or ``"memory"`` where the game supports it (:data:`DISTRIBUTION_MODES`).
        ``"exploration"`` is one fixed level: use ``"hard"`` with ``reset(seed=level)`` instead.
    :param num_levels: size of the level range that unseeded resets draw from; ``0`` means every level.
    :param start_level: first level of that range; must be ``0`` when ``num_levels=0``.
    :param level_cache_size: number of level initial states kept (LRU); ``0`` disables the cache.
    :param render_mode: ``None`` or ``"rgb_array"``: :meth:`render` returns the current ``(64, 64, 3)``
        frame (the frame last returned; Procgen's 512×512 human-view frames are not offered).
    :param center_agent: Procgen option (default ``True``).
    :param use_backgrounds: Procgen option (default ``True``).
    :param restrict_themes: Procgen option (default ``False``).
    :param use_monochrome_assets: Procgen option (default ``False``).
    :param paint_vel_info: Procgen option (default ``False``).
    :param use_generated_assets: must be ``False``: Procgen cannot save the state of such a game.
    :param use_sequential_levels: must be ``False``: it moves to another level inside an episode, so an
        episode would no longer be one level.

    Example:
        >>> import numpy as np
        >>> from plr_gym.envs import ProcgenLevelEnv
        >>> env = ProcgenLevelEnv("coinrun")
        >>> obs, info = env.reset(seed=7)
        >>> obs.shape, obs.dtype, info["level"]
        ((64, 64, 3), dtype('uint8'), 7)
        >>> obs, reward, terminated, truncated, info = env.step(4)
        >>> obs2, _ = env.reset(options={"level": 7})   # back to the start of level 7
        >>> obs3, _ = env.reset(seed=7)
        >>> bool(np.array_equal(obs2, obs3))
        True
        >>> env.close()
    """

    metadata: dict[str, Any] = {"render_modes": ["rgb_array"], "render_fps": 15}  # noqa: RUF012 (as in Env)

    game: str
    distribution_mode: str
    level_cache_size: int
    backend: ProcgenBackend
    _core: ProcgenCore | None
    _options: dict[str, bool]
    _level_low: int
    _level_high: int
    _template: bytes
    _template_layout: _Layout
    _timeout: int
    _calibration: _Calibration
    _cache: collections.OrderedDict[int, bytes]
    _cache_hits: int
    _cache_misses: int
    _level: int | None
    _elapsed: int
    _needs_reset: bool
    _frame: ObsType

    def __init__(
        self,
        game: str,
        *,
        distribution_mode: str = "easy",
        num_levels: int = 0,
        start_level: int = 0,
        level_cache_size: int = 256,
        render_mode: str | None = None,
        center_agent: bool = True,
        use_backgrounds: bool = True,
        restrict_themes: bool = False,
        use_monochrome_assets: bool = False,
        paint_vel_info: bool = False,
        use_generated_assets: bool = False,
        use_sequential_levels: bool = False,
    ) -> None:
        distribution_mode = _plain_mode(game, distribution_mode)
        _check_game(game, distribution_mode)
        _refuse_level_changing_options(use_generated_assets, use_sequential_levels)
        num_levels, start_level = _check_level_range(num_levels, start_level)
        level_cache_size = _check_count(level_cache_size, "level_cache_size", "(0: no cache)")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")

        self.game = game
        self.distribution_mode = distribution_mode
        self.render_mode = render_mode
        self.level_cache_size = level_cache_size
        self._level_low = start_level
        self._level_high = start_level + num_levels if num_levels else MAX_LEVEL
        self._options = {
            "center_agent": _check_bool(center_agent, "center_agent"),
            "use_backgrounds": _check_bool(use_backgrounds, "use_backgrounds"),
            "restrict_themes": _check_bool(restrict_themes, "restrict_themes"),
            "use_monochrome_assets": _check_bool(use_monochrome_assets, "use_monochrome_assets"),
            "paint_vel_info": _check_bool(paint_vel_info, "paint_vel_info"),
        }
        self.observation_space = spaces.Box(0, 255, _OBS_SHAPE, np.uint8)
        self.action_space = spaces.Discrete(_NUM_ACTIONS)

        #: The Procgen build in use (:func:`~plr_gym.envs.procgen_backend`).
        self.backend = procgen_backend()
        self._core = self._make_core(start_level=0)
        self._template = self._get_state()
        self._template_layout = _layout(self._template, game)
        self._timeout = _read_int(self._template, self._template_layout.timeout)
        self._calibration = self._calibrate()

        self._cache = collections.OrderedDict()
        self._cache_hits = 0
        self._cache_misses = 0
        self._level = None
        self._elapsed = 0
        self._needs_reset = True
        self._frame = np.zeros(_OBS_SHAPE, np.uint8)

    # ------------------------------------------------------------------------------------------ API

    @property
    def level(self) -> int | None:
        """The level being played (``None`` before the first reset)."""
        return self._level

    @property
    def max_episode_steps(self) -> int:
        """Procgen's time limit for this game, after which an episode is truncated."""
        return self._timeout

    @property
    def fast_level_switch(self) -> bool:
        """Whether first visits use the fast exact path (``False``: the self-check fell back)."""
        return self._calibration.fast

    def cache_info(self) -> dict[str, int]:
        """Level-cache statistics: ``levels``, ``max_levels``, ``bytes``, ``hits``, ``misses``."""
        return {
            "levels": len(self._cache),
            "max_levels": self.level_cache_size,
            "bytes": sum(len(state) for state in self._cache.values()),
            "hits": self._cache_hits,
            "misses": self._cache_misses,
        }

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[ObsType, dict[str, Any]]:
        """Start an episode on a level: ``options["level"]``, else ``seed``, else one drawn by ``np_random``.

        :param seed: a non-negative int: the level to play when ``seed <= MAX_LEVEL`` and ``options`` has
            no ``"level"``; always seeds ``np_random`` (a larger seed only seeds it: the level is drawn).
        :param options: ``{"level": s}`` selects level ``s``; no other keys are understood.
        :return: the level's first observation and ``{"level": s}``.
        """
        level: int | None = None
        if options:
            if not isinstance(options, Mapping):
                raise TypeError(f"options must be a dict or None, got {options!r}")
            unknown = set(options) - {"level"}
            if unknown:
                raise ValueError(
                    f"unknown reset options {sorted(map(str, unknown))}; only 'level' is understood"
                )
            if "level" in options:
                level = _check_level(options["level"], "options['level']")
        if seed is not None:
            seed = _check_seed(seed)
        super().reset(seed=seed)
        if level is None:
            if seed is not None and seed <= MAX_LEVEL:
                level = seed
            else:
                level = int(self.np_random.integers(self._level_low, self._level_high))
        self._load_level(level)
        core = self._live_core()
        core.observe()
        self._frame = core.rgb[0].copy()
        self._level = level
        self._elapsed = 0
        self._needs_reset = False
        return self._frame.copy(), {"level": level}

    def step(self, action: ActType) -> tuple[ObsType, SupportsFloat, bool, bool, dict[str, Any]]:
        """Play one action; see the class docstring for ``terminated``/``truncated``."""
        if self._needs_reset:
            raise ResetNeeded(
                "step() called before reset() or after the episode ended (terminated or truncated); "
                "call reset() first"
            )
        index = self._check_action(action)
        if self._elapsed + 1 >= self._timeout:
            self._extend_time_limit()
        core = self._live_core()
        core.action[0] = index
        core.act()
        core.observe()
        self._elapsed += 1
        terminated = bool(core.first[0])
        truncated = self._elapsed >= self._timeout
        level_complete = False
        if terminated:
            # Procgen already reset the game: its frame is the next episode's first. Keep the last frame
            # of the ended episode instead (see the module docstring).
            level_complete = bool(core.level_complete[0])
        else:
            self._frame = core.rgb[0].copy()
        self._needs_reset = terminated or truncated
        info = {"level": self._level, "level_complete": level_complete}
        return self._frame.copy(), float(core.reward[0]), terminated, truncated, info

    def render(self) -> ObsType | None:  # type: ignore[override, unused-ignore]  # gymnasium 1.2
        """The current ``(64, 64, 3)`` frame if ``render_mode == "rgb_array"``, else ``None``."""
        if self.render_mode != "rgb_array":
            return None
        return self._frame.copy()

    def close(self) -> None:
        """Release the Procgen environment; calling it again does nothing."""
        if self._core is not None:
            self._core.close()
            self._core = None
        self._cache.clear()
        self._needs_reset = True

    @staticmethod
    def _check_action(action: object) -> int:
        value = action
        if isinstance(value, np.ndarray) and value.shape == () and value.dtype.kind in "iu":
            value = value.item()  # a 0-d integer array
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
            raise TypeError(f"action must be an int in [0, {_NUM_ACTIONS}), got {action!r}")
        index = int(value)
        if not 0 <= index < _NUM_ACTIONS:
            raise ValueError(f"action must be an int in [0, {_NUM_ACTIONS}), got {index}")
        return index

    # ------------------------------------------------------------------------------ level switch

    def procgen_kwargs(self, start_level: int, num_threads: int) -> dict[str, Any]:
        """Keyword arguments of a stock Procgen env of this configuration that plays only ``start_level``
        (for :meth:`ProcgenBackend.make`; the games' own level draws never matter then)."""
        return {
            "num_levels": 1,
            "start_level": start_level,
            "distribution_mode": self.distribution_mode,
            "num_threads": num_threads,
            "rand_seed": 0,  # only seeds the level-seed RNG, irrelevant with a one-level range
            **self._options,
        }

    def _make_core(self, start_level: int) -> ProcgenCore:
        # num_threads=0: step in the calling thread, no hand-off latency for one game
        return self.backend.make(1, self.game, **self.procgen_kwargs(start_level, num_threads=0))

    def _live_core(self) -> ProcgenCore:
        if self._core is None:
            raise RuntimeError("the environment is closed")
        return self._core

    def _get_state(self) -> bytes:
        return self._live_core().get_state(0)

    def _set_state(self, state: bytes) -> None:
        self._live_core().set_state(0, state)

    def _load_level(self, level: int) -> None:
        self._set_state(self._level_state(level))

    def _level_state(self, level: int) -> bytes:
        """The initial state of ``level``, from the LRU cache or computed (may leave the game elsewhere)."""
        if self._core is None:
            raise RuntimeError("the environment is closed")
        state = self._cache.get(level)
        if state is not None:
            self._cache.move_to_end(level)
            self._cache_hits += 1
        else:
            self._cache_misses += 1
            state = self._initial_state(level)
            if self.level_cache_size > 0:
                self._cache[level] = state
                if len(self._cache) > self.level_cache_size:
                    self._cache.popitem(last=False)
        return state

    def _initial_state(self, level: int) -> bytes:
        """The state of a freshly built Procgen env on ``level`` (leaves the game in some other state)."""
        if self._calibration.fast:
            forced = self._forced_reset(level)
            try:
                return self._repair(forced, level, self._calibration)
            except _StateFormatError:
                pass  # a state this module cannot repair: build the level the slow, exact way
        return self._fresh_state(level)

    def _fresh_state(self, level: int) -> bytes:
        core = self._make_core(start_level=level)
        try:
            return core.get_state(0)
        finally:
            core.close()

    def _forced_reset(self, level: int) -> bytes:
        """Let Procgen generate ``level`` by a forced reset from the pristine state; the resulting state."""
        core = self._live_core()
        self._set_state(_with_level_range(self._template, self._template_layout, level))
        core.action[0] = -1  # Procgen's "force a reset" action
        core.act()
        return self._get_state()

    def _repair(self, forced: bytes, level: int, calibration: _Calibration) -> bytes:
        """Turn the state after a forced reset into the state of a freshly built env on ``level``."""
        template, t_layout = self._template, self._template_layout
        layout = _layout(forced, self.game)
        if _read_int(forced, layout.episode + 4 * _CURRENT_LEVEL_WORD) != level:
            raise _StateFormatError("the forced reset did not load the requested level")
        out = bytearray(forced[: layout.level_seed_rng[0]])
        out += template[slice(*t_layout.level_seed_rng)]  # as after a fresh env's single draw
        out += forced[slice(*layout.level_rng)]  # the level's own RNG, seeded by the level
        episode = len(out)
        out += template[t_layout.episode : t_layout.episode + 4 * _EPISODE_WORDS]  # no step taken yet
        for word in (_TIMEOUT_WORD, _CURRENT_LEVEL_WORD):
            src, dst = layout.episode + 4 * word, episode + 4 * word
            out[dst : dst + 4] = forced[src : src + 4]
        shift = len(out) - (layout.episode + 4 * _EPISODE_WORDS)
        out += forced[layout.episode + 4 * _EPISODE_WORDS :]
        for name, words in (("action_words", 3), ("action_velocity", 3), ("step_rand_int", 1)):
            src = getattr(t_layout, name)
            dst = getattr(layout, name) + shift
            out[dst : dst + 4 * words] = template[src : src + 4 * words]
        if calibration.tail_offsets:
            size = len(out)
            polluted = bytes(out[size - back] for back in calibration.tail_offsets)
            if polluted != calibration.tail_values:
                raise _StateFormatError("unexpected game-specific fields")
            for back in calibration.tail_offsets:
                out[size - back] = template[len(template) - back]
        return bytes(out)

    def _calibrate(self) -> _Calibration:
        key = (self.game, self.distribution_mode, tuple(sorted(self._options.items())))
        calibration = _CALIBRATIONS.get(key)
        if calibration is None:
            calibration = self._measure_calibration()
            _CALIBRATIONS[key] = calibration
            if not calibration.fast:
                warnings.warn(
                    f"plr_gym: the installed Procgen serializes {self.game} differently than expected; "
                    "first visits of a level fall back to building a Procgen environment (~1-3 ms each, "
                    "still exact)",
                    RuntimeWarning,
                    stacklevel=3,
                )
        return calibration

    def _measure_calibration(self) -> _Calibration:
        """Check the fast first visit against freshly built envs; find game fields a forced step changes."""
        try:
            # Forced reset into the template's own level: any difference left after the generic repair
            # comes from game-specific fields that game_step writes and game_reset does not.
            own = self._repair(self._forced_reset(0), 0, _Calibration(fast=True))
            if len(own) != len(self._template):
                return _Calibration(fast=False)
            a = np.frombuffer(own, np.uint8)
            b = np.frombuffer(self._template, np.uint8)
            differ = np.flatnonzero(a != b)
            if differ.size and differ[0] < self._template_layout.step_rand_int + 4:
                return _Calibration(fast=False)
            tail_offsets = tuple(int(len(own) - i) for i in differ)
            calibration = _Calibration(
                fast=True, tail_offsets=tail_offsets, tail_values=bytes(a[differ].tolist())
            )
            for probe in _PROBE_LEVELS:
                if self._repair(self._forced_reset(probe), probe, calibration) != self._fresh_state(probe):
                    return _Calibration(fast=False)
        except _StateFormatError:
            return _Calibration(fast=False)
        return calibration

    def _extend_time_limit(self) -> None:
        """Raise Procgen's time limit by one step so that it does not reset the game in the next step."""
        state = self._get_state()
        layout = _layout(state, self.game)
        out = bytearray(state)
        _INT.pack_into(out, layout.timeout, self._timeout + 1)
        self._set_state(bytes(out))

    def __repr__(self) -> str:
        return f"<ProcgenLevelEnv {self.game} distribution_mode={self.distribution_mode!r}>"
