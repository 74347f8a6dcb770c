"""Batched Procgen with per-episode level choice: one Procgen C environment for ``N`` games.

:class:`ProcgenVectorEnv` (Gymnasium ``VectorEnv``) and :class:`~plr_gym.envs.procgen_sb3.ProcgenVecEnv`
(Stable-Baselines3 ``VecEnv``) step ``N`` games of one Procgen environment in Procgen's own C++ loop, as
stock ``procgen.ProcgenGym3Env(num=N)`` (procgen-mirror) or ``procgen_gym.ProcgenVecEnv(num_envs=N)``
(procgen-gym) does, and still play every episode on the level it is told to play. Both builds are stepped
through their C library's buffers (:mod:`plr_gym.envs._procgen_backend`), never through their Python faces.

Every sub-env ``i`` behaves exactly as ``LevelWrapper(ProcgenLevelEnv(game, ...))``: when its episode ends
(or it is reset), game ``i`` is put into the initial state of its next level with Procgen's ``set_state``
for that one game, the state :class:`~plr_gym.envs.ProcgenLevelEnv` computes for that level (shared LRU
cache; see :mod:`plr_gym.envs.procgen`). So env ``i`` plays the same state bytes, observations and rewards as
a single ``ProcgenLevelEnv`` on that level, and the other games are untouched. Terminal observations,
truncation at Procgen's time limit (:attr:`ProcgenVectorEnv.max_episode_steps`), ``info["level"]`` and
``info["level_complete"]`` follow :class:`~plr_gym.envs.ProcgenLevelEnv`.

Both faces speak the level contract of :class:`~plr_gym.wrappers.LevelWrapper`, which is how the
``PrioritizedLevelReplay`` wrappers pass levels to sub-envs: ``set_next_level`` / the ``next_level``
attribute (through ``call``/``set_attr`` or ``env_method``/``set_attr``), ``options["level"]`` and an int
reset seed, in that order of precedence after ``options["level"]``; so both wrappers accept them as they
are (SB3: ``env_is_wrapped(LevelWrapper)`` is ``True`` for every sub-env).
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from plr_gym.envs._procgen_backend import ProcgenCore
from plr_gym.envs.procgen import (
    _INT,
    _NUM_ACTIONS,
    _OBS_SHAPE,
    MAX_LEVEL,
    ProcgenLevelEnv,
    _check_count,
    _check_level,
    _layout,
)

__all__ = ["ProcgenVectorEnv"]

_NONE_ENDED = np.zeros(0, dtype=np.intp)
_NONE_ENDED.flags.writeable = False

#: Per-env attributes and methods of the ``LevelWrapper`` contract that the batched envs expose.
LEVEL_ATTRIBUTES = ("level", "next_level", "set_next_level", "level_provider", "set_level_provider")


def _check_num_envs(num_envs: object) -> int:
    if isinstance(num_envs, (bool, np.bool_)) or not isinstance(num_envs, numbers.Integral) or num_envs < 1:
        raise ValueError(f"num_envs must be an int >= 1, got {num_envs!r}")
    return int(num_envs)


def _check_queued_level(level: object, name: str) -> int | None:
    """A level for ``next_level``: an int level id or ``None`` (clears the queue)."""
    if level is None:
        return None
    return _check_level(level, name)


class ProcgenBatch:
    """The engine shared by both faces: ``N`` Procgen games with exact per-episode level choice.

    Not public: use :class:`ProcgenVectorEnv` or :class:`~plr_gym.envs.procgen_sb3.ProcgenVecEnv`.
    Arguments as in :class:`ProcgenVectorEnv`.
    """

    def __init__(
        self,
        game: str,
        num_envs: int,
        *,
        distribution_mode: str = "easy",
        num_levels: int = 0,
        start_level: int = 0,
        level_cache_size: int = 1024,
        num_threads: int = 4,
        center_agent: bool = True,
        use_backgrounds: bool = True,
        restrict_themes: bool = False,
        use_monochrome_assets: bool = False,
        paint_vel_info: bool = False,
        use_generated_assets: bool = False,
        use_sequential_levels: bool = False,
    ) -> None:
        self.num_envs = _check_num_envs(num_envs)
        num_threads = _check_count(num_threads, "num_threads", "(0: step in the calling thread)")
        # The level factory: validates every argument and computes (and caches) level initial states.
        self.levels = ProcgenLevelEnv(
            game,
            distribution_mode=distribution_mode,
            num_levels=num_levels,
            start_level=start_level,
            level_cache_size=level_cache_size,
            center_agent=center_agent,
            use_backgrounds=use_backgrounds,
            restrict_themes=restrict_themes,
            use_monochrome_assets=use_monochrome_assets,
            paint_vel_info=paint_vel_info,
            use_generated_assets=use_generated_assets,
            use_sequential_levels=use_sequential_levels,
        )
        self.game = game
        self.distribution_mode = distribution_mode
        self.max_episode_steps = self.levels.max_episode_steps
        self._level_low = self.levels._level_low
        self._level_high = self.levels._level_high
        try:
            # one-level range: the games' own resets are always overwritten by set_state
            self.core: ProcgenCore = self.levels.backend.make(
                self.num_envs, game, **self.levels.procgen_kwargs(0, num_threads=num_threads)
            )
        except BaseException:
            self.levels.close()
            raise
        self._start_bookkeeping()

    def _start_bookkeeping(self) -> None:
        """Each env's level, queued level, episode start and latest frame; no episode started yet."""
        n = self.num_envs
        self.current = np.zeros(n, dtype=np.int64)  # level of each env's current episode
        self.queued: list[int | None] = [None] * n  # next_level of each env (LevelWrapper semantics)
        self.providers: list[Callable[[], Any] | None] = [None] * n  # level_provider of each env
        # steps of each env's episode = clock - started; the clock is a Python int, so a step that no time
        # limit can touch (the oldest episode is not near it) costs no per-env arithmetic
        self.clock = 0
        self.started = np.zeros(n, dtype=np.int64)
        self._oldest_start = 0  # min(started)
        # each env's latest frame: the array the last step/reset returned, kept without a copy (see step)
        self.frames = np.zeros((n, *_OBS_SHAPE), dtype=np.uint8)
        self._no_complete = np.zeros(n, dtype=bool)
        self._no_complete.flags.writeable = False
        self.rng = np.random.default_rng()
        self.needs_reset = True
        self.closed = False

    # ------------------------------------------------------------------ levels
    def choose(self, i: int, seed: int | None, option: int | None) -> int:
        """Level of env ``i``'s next episode (``LevelWrapper``'s precedence); consumes its queued level."""
        queued = self.queued[i]
        self.queued[i] = None
        if option is not None:
            return option
        if seed is not None:
            return seed
        if queued is not None:
            return queued
        provider = self.providers[i]
        if provider is not None:  # level_draw="episode_end": drawn now, after the episode ended
            return _check_level(provider(), "the level_provider's level")
        return int(self.rng.integers(self._level_low, self._level_high))

    def load(self, indices: Sequence[int], levels: Sequence[int]) -> None:
        """Put the games ``indices`` into the initial states of ``levels`` (no other game is touched)."""
        if self.closed:
            raise RuntimeError("the environment is closed")
        set_state, level_state = self.core.set_state, self.levels._level_state
        current, started, clock = self.current, self.started, self.clock
        for i, level in zip(indices, levels):
            set_state(i, level_state(level))
            current[i] = level
            started[i] = clock
        self._oldest_start = int(started.min())

    @property
    def elapsed(self) -> npt.NDArray[np.int64]:
        """Steps taken in each env's current episode, shape ``(N,)`` (a new array)."""
        return self.clock - self.started

    def reset(self, indices: Sequence[int], levels: Sequence[int]) -> npt.NDArray[np.uint8]:
        """Start the envs ``indices`` on ``levels``; returns every env's latest frame (a new array)."""
        self.needs_reset = True
        self.load(indices, levels)
        self.core.observe()
        # Procgen's buffer holds every game's latest frame: set_state renders the loaded games' first frames
        # and the other games still show the frame their last step returned.
        self.frames = self.core.rgb.copy()
        self.needs_reset = False
        return self.frames

    # ------------------------------------------------------------------ stepping
    def step(self, actions: npt.NDArray[np.int32]) -> tuple[Any, ...]:
        """Step every game; the ended ones start their next level.

        :return: ``(obs, rewards, terminated, truncated, level_complete, step_levels, ended, final_obs)``:
            ``obs`` the frames after the step (the next episode's first frame for ended envs), ``step_levels``
            the level of each env's transition, ``ended`` the indices of the envs whose episode ended and
            ``final_obs`` their last frames, shape ``(len(ended), 64, 64, 3)``. ``obs`` is a new array
            (one copy of Procgen's buffers, as stock ``observe`` makes); ``level_complete`` and
            ``step_levels`` may be read-only or shared with the engine: the faces copy what they hand out.

        Cost on top of stock's ``act``/``observe``: a few operations on ``(N,)`` arrays, and per ended
        episode one ``set_state`` (and a Python call or two). Procgen never renders the last frame of an
        episode the game ends (it resets inside the step), so that final observation is the frame the
        previous step returned: the engine keeps a reference to the ``obs`` array it returned (no copy of
        ``N`` frames per step) and reads the terminated envs' rows from it.
        """
        if self.closed:
            raise RuntimeError("the environment is closed")
        if self.needs_reset:
            raise RuntimeError("call reset() before step() (first use, or a previous call raised)")
        self.needs_reset = True
        timeout = self.max_episode_steps
        if self.clock - self._oldest_start >= timeout - 1:  # some episode reaches the limit in this step
            for i in np.flatnonzero(self.clock - self.started >= timeout - 1).tolist():
                self._extend_time_limit(i)
        # the stock envs' act()/observe() around the same two C calls, without their checks and dict copies
        core = self.core
        core.action[:] = actions
        core.act()
        core.observe()
        obs = core.rgb.copy()
        rewards = core.reward.copy()
        terminated = core.first.copy()
        self.clock += 1
        if self.clock - self._oldest_start >= timeout:
            truncated = self.clock - self.started >= timeout
            ended_mask = terminated | truncated
        else:
            truncated = np.zeros(self.num_envs, dtype=bool)
            ended_mask = terminated
        if not ended_mask.any():
            self.frames = obs  # the final observation of an episode that the game ends in the next step
            self.needs_reset = False
            return obs, rewards, terminated, truncated, self._no_complete, self.current, _NONE_ENDED, None
        step_levels = self.current.copy()
        level_complete = np.zeros(self.num_envs, dtype=bool)
        term = terminated.nonzero()[0]
        if term.size:
            # Procgen already reset these games: keep the last frame of the ended episode (its final
            # observation) instead of the next episode's first frame, as ProcgenLevelEnv does.
            obs[term] = self.frames[term]
            level_complete[term] = core.level_complete[term] != 0
        ended = ended_mask.nonzero()[0]
        final_obs = obs[ended]
        ended_list = ended.tolist()
        self.load(ended_list, [self.choose(i, None, None) for i in ended_list])
        obs[ended] = core.rgb[ended]  # set_state rendered each loaded game's first frame there
        self.frames = obs
        self.needs_reset = False
        return obs, rewards, terminated, truncated, level_complete, step_levels, ended, final_obs

    def _extend_time_limit(self, i: int) -> None:
        """Raise game ``i``'s time limit by one step so that Procgen does not reset it in the next step."""
        state = self.core.get_state(i)
        out = bytearray(state)
        _INT.pack_into(out, _layout(state, self.game).timeout, self.max_episode_steps + 1)
        self.core.set_state(i, bytes(out))

    def get_state(self, i: int) -> bytes:
        """Procgen's serialized state of game ``i`` (for tests and debugging)."""
        if self.closed:
            raise RuntimeError("the environment is closed")
        valid = not isinstance(i, (bool, np.bool_)) and isinstance(i, numbers.Integral)
        if not valid or not 0 <= i < self.num_envs:
            raise IndexError(f"index must be an env index in [0, {self.num_envs}), got {i!r}")
        return self.core.get_state(i)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.core.close()  # frees the C env: every call into it checks `closed` first
            self.levels.close()

    # ------------------------------------------------------------------ LevelWrapper contract
    def get_level_attr(self, name: str, i: int) -> Any:
        if name == "level":
            return int(self.current[i])
        if name == "next_level":
            return self.queued[i]
        if name == "level_provider":
            return self.providers[i]
        raise AttributeError(f"sub-envs of a batched Procgen env have no attribute {name!r}")

    def set_next_level(self, i: int, level: object) -> None:
        self.queued[i] = _check_queued_level(level, "next_level")

    def set_level_provider(self, i: int, provider: Callable[[], Any] | None) -> None:
        """``LevelWrapper.level_provider`` of env ``i``: called for a level when env ``i`` starts an episode
        that has no other level (given, seeded or queued)."""
        if provider is not None and not callable(provider):
            raise TypeError(f"level_provider must be a function or None, got {type(provider).__name__}")
        self.providers[i] = provider

    def set_next_levels(self, levels: list[Any]) -> None:
        """Queue ``levels[i]`` (an int level id, or ``None`` to clear) for every env ``i``; all are checked
        before any is queued."""
        if levels and set(map(type, levels)) == {int} and 0 <= min(levels) and max(levels) <= MAX_LEVEL:
            self.queued = list(levels)  # the common case (a list of valid Python ints), checked at once
            return
        self.queued = [_check_queued_level(level, "next_level") for level in levels]


def check_actions(actions: Any, num_envs: int) -> npt.NDArray[np.int32]:
    """``actions`` as an ``int32`` array of shape ``(num_envs,)`` with values in ``[0, 15)``."""
    arr = np.asarray(actions)
    if arr.shape != (num_envs,) or arr.dtype.kind not in "iu":
        raise ValueError(
            f"actions must be {num_envs} integer actions in [0, {_NUM_ACTIONS}), shape ({num_envs},); got an "
            f"array of shape {arr.shape} and dtype {arr.dtype}"
        )
    # one reduction: read as unsigned, a negative action is larger than any valid one
    if arr.size and arr.view(f"u{arr.dtype.itemsize}").max() >= _NUM_ACTIONS:
        raise ValueError(f"actions must be in [0, {_NUM_ACTIONS}), got {arr.tolist()}")
    return arr.astype(np.int32, copy=False)


def per_env(values: Any, num_envs: int, name: str) -> list[Any]:
    """A value for every env: a list/tuple/array of ``num_envs`` values, or one value for all."""
    if isinstance(values, (list, tuple, np.ndarray)):
        out = list(values.tolist() if isinstance(values, np.ndarray) else values)
        if len(out) != num_envs:
            raise ValueError(f"{name} must hold {num_envs} values (one per env), got {len(out)}")
        return out
    return [values] * num_envs


class ProcgenVectorEnv(VectorEnv[Any, Any, Any]):
    """``N`` Procgen games in one Procgen C environment, each episode on a level you choose.

    A Gymnasium ``VectorEnv`` with ``metadata["autoreset_mode"] == AutoresetMode.SAME_STEP`` (Procgen's own
    behaviour): the step that ends env ``i``'s episode returns the next episode's first observation, with the
    ended episode's last observation in ``info["final_obs"][i]`` and its info in ``info["final_info"]``. Env
    ``i`` plays exactly as ``SyncVectorEnv`` SAME_STEP over ``LevelWrapper(ProcgenLevelEnv(game, ...))`` would
    (same observations, rewards, flags and infos), at the speed of stock batched Procgen (see
    :mod:`plr_gym.envs.procgen_vector` and ``benchmarks/procgen_throughput.py``).

    Level of env ``i``'s next episode, as :class:`~plr_gym.wrappers.LevelWrapper` chooses it:
    ``reset(options={"level": levels})`` (one int or a sequence of ``N``), else the reset ``seed`` (an int
    ``s`` gives env ``i`` level ``s + i``, a list gives each env its own), else the level queued with
    ``set_attr("next_level", levels)`` / ``call("set_next_level", level)`` (consumed by the env's next reset
    or autoreset), else one drawn uniformly from ``[start_level, start_level + num_levels)``.
    :class:`plr_gym.vector.PrioritizedLevelReplay` uses exactly these calls, so it wraps this env directly.

    **Final observations.** Procgen never renders the last frame of an episode that the game ends (it
    resets the game inside that step): the final observation of env ``i`` is the frame the previous step
    returned for it, which the env reads from the ``obs`` array it returned then (it keeps that array
    instead of copying ``N`` frames every step). Transform observations into new arrays, as Gymnasium's
    and SB3's wrappers do; an in-place edit of a returned ``obs`` shows in a final observation of the
    next step.

    Info keys: ``info["level"]`` (``int64``, shape ``(N,)``) is the level of each env's returned observation,
    ``info["level_complete"]`` is ``True`` where the step ended the episode by solving the level (for ended
    envs under ``info["final_info"]``, as in ``SyncVectorEnv``), each with its ``_key`` mask.

    :param game: one of :data:`~plr_gym.envs.GAMES`.
    :param num_envs: number of games stepped together.
    :param distribution_mode: as in :class:`~plr_gym.envs.ProcgenLevelEnv`.
    :param num_levels: size of the level range drawn from when no level is given; ``0``: every level.
    :param start_level: first level of that range.
    :param level_cache_size: initial states kept (LRU), shared by all envs (21–40 KB each); ``0`` disables
        the cache.
    :param num_threads: Procgen's stepping threads (its default, 4); ``0`` steps in the calling thread.
    :param center_agent: Procgen option (default ``True``).
    :param use_backgrounds: Procgen option (default ``True``).
    :param restrict_themes: Procgen option (default ``False``).
    :param use_monochrome_assets: Procgen option (default ``False``).
    :param paint_vel_info: Procgen option (default ``False``).
    :param use_generated_assets: must be ``False`` (see :class:`~plr_gym.envs.ProcgenLevelEnv`).
    :param use_sequential_levels: must be ``False`` (see :class:`~plr_gym.envs.ProcgenLevelEnv`).

    Example:
        >>> import gymnasium as gym
        >>> import numpy as np
        >>> import plr_gym.envs  # registers plr_gym/procgen-<game>-v0
        >>> envs = gym.make_vec(
        ...     "plr_gym/procgen-coinrun-v0", num_envs=2, vectorization_mode="vector_entry_point"
        ... )
        >>> obs, info = envs.reset(options={"level": [3, 5]})
        >>> obs.shape, info["level"].tolist()
        ((2, 64, 64, 3), [3, 5])
        >>> envs.set_attr("next_level", [7, None])   # env 0's next episode plays level 7
        >>> obs, rewards, terminated, truncated, info = envs.step(np.array([4, 4]))
        >>> info["level"].tolist()
        [3, 5]
        >>> envs.close()
    """

    metadata: dict[str, Any] = {"autoreset_mode": AutoresetMode.SAME_STEP}  # noqa: RUF012 (as in VectorEnv)
    #: The sub-envs' level providers (``set_attr("level_provider", ...)``) run in this process.
    level_providers_in_process = True

    def __init__(
        self,
        game: str,
        num_envs: int = 1,
        *,
        distribution_mode: str = "easy",
        num_levels: int = 0,
        start_level: int = 0,
        level_cache_size: int = 1024,
        num_threads: int = 4,
        center_agent: bool = True,
        use_backgrounds: bool = True,
        restrict_themes: bool = False,
        use_monochrome_assets: bool = False,
        paint_vel_info: bool = False,
        use_generated_assets: bool = False,
        use_sequential_levels: bool = False,
    ) -> None:
        self._batch = ProcgenBatch(
            game,
            num_envs,
            distribution_mode=distribution_mode,
            num_levels=num_levels,
            start_level=start_level,
            level_cache_size=level_cache_size,
            num_threads=num_threads,
            center_agent=center_agent,
            use_backgrounds=use_backgrounds,
            restrict_themes=restrict_themes,
            use_monochrome_assets=use_monochrome_assets,
            paint_vel_info=paint_vel_info,
            use_generated_assets=use_generated_assets,
            use_sequential_levels=use_sequential_levels,
        )
        self.num_envs = self._batch.num_envs
        self.game = game
        self.single_observation_space = spaces.Box(0, 255, _OBS_SHAPE, np.uint8)
        self.single_action_space = spaces.Discrete(_NUM_ACTIONS)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.render_mode = None
        self._every = np.ones(self.num_envs, dtype=bool)
        self._none = np.zeros(self.num_envs, dtype=bool)

    @property
    def max_episode_steps(self) -> int:
        """Procgen's time limit for this game, after which an episode is truncated."""
        return self._batch.max_episode_steps

    @property
    def levels(self) -> npt.NDArray[np.int64]:
        """Level of each env's current episode, shape ``(num_envs,)`` (a copy)."""
        return self._batch.current.copy()

    def reset(
        self, *, seed: int | Sequence[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[npt.NDArray[np.uint8], dict[str, Any]]:
        """Reset every env, or those in ``options["reset_mask"]``, each on its chosen level.

        :param seed: an int ``s`` (env ``i`` plays level ``s + i`` and the fallback draws are seeded by
            ``s``), a list of one level (or ``None``) per env, or ``None``.
        :param options: ``{"level": ..., "reset_mask": ...}``, both optional: ``"level"`` one int level or
            one per env; ``"reset_mask"`` a boolean array of shape ``(num_envs,)``.
        :return: ``(obs, info)``; ``obs`` shape ``(num_envs, 64, 64, 3)``; ``info["level"]`` as above.
        """
        n = self.num_envs
        opts = dict(options or {})
        unknown = set(opts) - {"level", "reset_mask"}
        if unknown:
            raise ValueError(
                f"unknown reset options {sorted(map(str, unknown))}; "
                "only 'level' and 'reset_mask' are understood"
            )
        mask = np.ones(n, dtype=bool)
        if "reset_mask" in opts:
            mask = opts["reset_mask"]
            if not isinstance(mask, np.ndarray) or mask.dtype != np.bool_ or mask.shape != (n,):
                raise TypeError(
                    f"options['reset_mask'] must be a boolean numpy array of shape ({n},), got {mask!r}"
                )
        option_levels: list[int | None] = [None] * n
        if "level" in opts:
            option_levels = [
                _check_level(lvl, "options['level']") for lvl in per_env(opts["level"], n, "options['level']")
            ]
        seeds: list[int | None] = [None] * n
        if isinstance(seed, (list, tuple, np.ndarray)):
            seeds = [None if s is None else _check_level(s, "seed") for s in per_env(seed, n, "seed")]
        elif seed is not None:
            base = _check_level(seed, "seed")
            seeds = [_check_level(base + i, "seed + env index") for i in range(n)]
            self._batch.rng = np.random.default_rng(base)
        indices = np.flatnonzero(mask).tolist()
        levels = [self._batch.choose(i, seeds[i], option_levels[i]) for i in indices]
        obs = self._batch.reset(indices, levels)
        info = {"level": self._batch.current.copy(), "_level": mask.copy()}
        return obs, info

    def step(
        self, actions: Any
    ) -> tuple[
        npt.NDArray[np.uint8],
        npt.NDArray[np.float32],
        npt.NDArray[np.bool_],
        npt.NDArray[np.bool_],
        dict[str, Any],
    ]:
        """Step every env; ended envs start their next level in the same step (SAME_STEP autoreset)."""
        acts = check_actions(actions, self.num_envs)
        obs, rewards, terminated, truncated, level_complete, step_levels, ended, final_obs = self._batch.step(
            acts
        )
        n = self.num_envs
        every, none = self._every, self._none  # copied from templates: cheaper than np.ones/np.zeros
        info: dict[str, Any] = {"level": self._batch.current.copy(), "_level": every.copy()}
        if ended.size == 0:
            info["level_complete"] = none.copy()  # only an ended episode can be complete
            info["_level_complete"] = every.copy()
            return obs, rewards, terminated, truncated, info
        ended_mask = none.copy()
        ended_mask[ended] = True
        info["level_complete"] = none.copy()
        info["_level_complete"] = ~ended_mask
        finals = np.empty(n, dtype=object)  # all None
        for k, i in enumerate(ended.tolist()):
            finals[i] = final_obs[k]
        final_levels = np.zeros(n, dtype=np.int64)
        final_levels[ended] = step_levels[ended]
        final_complete = none.copy()
        final_complete[ended] = level_complete[ended]
        info["final_obs"] = finals
        info["_final_obs"] = ended_mask
        info["final_info"] = {
            "level": final_levels,
            "_level": ended_mask.copy(),
            "level_complete": final_complete,
            "_level_complete": ended_mask.copy(),
        }
        info["_final_info"] = ended_mask.copy()
        return obs, rewards, terminated, truncated, info

    # ------------------------------------------------------------------ LevelWrapper contract
    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Call a ``LevelWrapper`` method on every sub-env: ``set_next_level(level)`` or
        ``has_wrapper_attr(name)``; also returns ``level``/``next_level`` (as ``SyncVectorEnv.call`` does)."""
        n = self.num_envs
        if name == "has_wrapper_attr":
            (attr,) = args
            return tuple(attr in LEVEL_ATTRIBUTES for _ in range(n))
        if name == "set_next_level":
            (level,) = args
            for i in range(n):
                self._batch.set_next_level(i, level)
            return (None,) * n
        return self.get_attr(name)

    def get_attr(self, name: str) -> tuple[Any, ...]:
        """``level`` or ``next_level`` of every sub-env."""
        return tuple(self._batch.get_level_attr(name, i) for i in range(self.num_envs))

    def set_attr(self, name: str, values: Any) -> None:
        """``set_attr("next_level", levels)``: queue one level per env (a list of ``num_envs``, ``None``
        entries clear an env's queue) or one level for all; ``set_attr("level_provider", functions)``: each
        env's ``LevelWrapper.level_provider`` (a list of ``num_envs`` functions or ``None``)."""
        if name == "level_provider":
            for i, provider in enumerate(per_env(values, self.num_envs, "values")):
                self._batch.set_level_provider(i, provider)
            return
        if name != "next_level":
            raise AttributeError(
                f"only 'next_level' can be set on the sub-envs of {type(self).__name__}, got {name!r}"
            )
        self._batch.set_next_levels(per_env(values, self.num_envs, "values"))

    def get_state(self, index: int) -> bytes:
        """Procgen's serialized state of env ``index``'s game (what stock Procgen's ``get_state`` returns)."""
        return self._batch.get_state(index)

    def close_extras(self, **kwargs: Any) -> None:
        batch = getattr(self, "_batch", None)  # None: the constructor refused its arguments
        if batch is not None:
            batch.close()

    def __repr__(self) -> str:
        mode = self._batch.distribution_mode
        return f"<ProcgenVectorEnv {self.game} num_envs={self.num_envs} distribution_mode={mode!r}>"
