"""Per-environment level control: :class:`LevelWrapper`.

A *level* is what an environment's ``reset(seed=level)`` selects (MiniGrid, Procgen through
:mod:`plr_gym.envs`, or your own env). :class:`LevelWrapper` makes one environment play the level it is
told to play, also on the resets that vectorized environments trigger themselves (autoresets, which never
pass a seed), and reports the level in ``info["level"]`` on every reset and step.
"""

from __future__ import annotations

import hashlib
import numbers
import warnings
from collections.abc import Callable, Iterator
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np

from plr_gym._levels import check_level_id, level_key
from plr_gym.source import NoScoresWarning, ScoreWatch

__all__ = [
    "LevelWrapper",
    "NoScoresWarning",
    "NondeterministicLevelWarning",
    "ScoreWatch",
    "is_int_level",
    "observation_digest",
]


class NondeterministicLevelWarning(UserWarning):
    """Two resets on the same level gave different first observations: the env may ignore its seed."""


def is_int_level(level: Any) -> bool:
    """True for an integer level id (Python or numpy int, not ``bool``): such a level is a reset seed."""
    return isinstance(level, numbers.Integral) and not isinstance(level, (bool, np.bool_))


def _check_info(env: Any, method: str, info: Any) -> None:
    if not isinstance(info, dict):
        raise TypeError(
            f"{env}.{method}() returned an info of type {type(info).__name__}; Gymnasium envs return a dict "
            "as info (LevelWrapper adds info['level'] to it)"
        )


def _checked_level(level: Any, name: str) -> Any:
    """``level`` if a wrapper can play it: an int level id in ``[0, 2**63 - 1]`` (as ``int``), ``None``,
    or a level object without NaN (:func:`plr_gym._levels.level_key`); else ``TypeError``/``ValueError``."""
    if isinstance(level, (bool, np.bool_)):
        raise TypeError(f"{name} must be an int level id or a level object, got bool {level!r}")
    if is_int_level(level):
        return check_level_id(level, name)
    if level is not None:
        try:
            level_key(level)
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"{name}: {exc}") from None
    return level


def _digest(obs: Any, h: Any) -> None:
    """Feed a canonical byte form of an observation (array, scalar, str, dict, tuple, list) into ``h``."""
    if isinstance(obs, np.ndarray):
        h.update(f"a{obs.dtype.str}{obs.shape}".encode())
        h.update(np.ascontiguousarray(obs).tobytes())
    elif isinstance(obs, dict):
        h.update(b"d")
        for key in sorted(obs, key=str):
            h.update(str(key).encode())
            _digest(obs[key], h)
    elif isinstance(obs, (tuple, list)):
        h.update(f"t{len(obs)}".encode())
        for item in obs:
            _digest(item, h)
    elif isinstance(obs, (str, bytes)):
        h.update(b"s" + (obs.encode() if isinstance(obs, str) else obs))
    else:
        h.update(b"o" + repr(obs).encode())


def observation_digest(obs: Any) -> bytes:
    """A 16-byte digest of an observation, equal for equal observations."""
    h = hashlib.blake2b(digest_size=16)
    _digest(obs, h)
    return h.digest()


class _TrackedOptions(dict):  # type: ignore[type-arg]
    """Reset options that remember whether the env looked up ``"level"`` (to catch envs ignoring it)."""

    level_read = False

    def __getitem__(self, key: Any) -> Any:
        if key == "level":
            self.level_read = True
        return super().__getitem__(key)

    def get(self, key: Any, default: Any = None) -> Any:
        if key == "level":
            self.level_read = True
        return super().get(key, default)

    def __contains__(self, key: Any) -> bool:
        if key == "level":
            self.level_read = True
        return super().__contains__(key)

    def pop(self, key: Any, *default: Any) -> Any:
        if key == "level":
            self.level_read = True
        return super().pop(key, *default)

    # copies (``dict(options)``, ``{**options}``, ``.copy()``) and iteration may read it later: trust them
    def copy(self) -> _TrackedOptions:
        self.level_read = True
        return _TrackedOptions(self)

    def __iter__(self) -> Iterator[Any]:
        self.level_read = True
        return super().__iter__()

    def keys(self) -> Any:
        self.level_read = True
        return super().keys()

    def items(self) -> Any:
        self.level_read = True
        return super().items()


class LevelWrapper(gym.Wrapper[Any, Any, Any, Any], gym.utils.RecordConstructorArgs):
    """Play a chosen level on every reset and report it in ``info["level"]``.

    Which level the next reset plays, in order of precedence:

    1. ``options["level"]`` passed to :meth:`reset`;
    2. an ``int`` ``seed`` passed to :meth:`reset` (the level *is* the seed);
    3. the level queued with :meth:`set_next_level` (or the :attr:`next_level` attribute), which is how
       vectorized environments choose the level of an autoreset: neither Stable-Baselines3 nor
       Gymnasium passes a seed when it resets a finished sub-environment;
    4. the level returned by :attr:`level_provider`, a function the wrapper calls at that reset (set by
       ``PrioritizedLevelReplay(..., level_draw="episode_end")`` in the learner's process, so that the level
       is drawn when the previous episode has ended);
    5. none: the env is reset as usual (e.g. ``reset()`` continues its random stream) and the episode's
       level is ``None``.

    Every reset consumes the queued level. An ``int`` level ``L`` resets the wrapped env with
    ``env.reset(seed=L)``; any other level (a dict, an array: levels from an open-ended generator) with
    ``env.reset(options={"level": level})``, which the wrapped env must understand: if its ``reset`` never
    looks up ``options["level"]``, the level was not played and the reset raises ``ValueError``. Other
    ``options`` keys are passed through. An env that reports the level it played in ``info["level"]``
    (plr_gym's Procgen envs) is held to it: a level chosen through ``options["level"]`` or
    :meth:`set_next_level` that the env reports as another int level raises ``ValueError``.

    **Reset seeds that are no level.** A plain ``reset(seed=s)`` whose env reports another level in
    ``info["level"]`` was given a seed the env has no level for: a Procgen seed above ``2**31 - 1`` only
    seeds the env's RNG, which then draws one of the env's levels. That is what Stable-Baselines3's own
    seeding does: an unseeded ``make_vec_env(..., wrapper_class=LevelWrapper)`` (and ``model.learn``,
    ``evaluate_policy``) resets each sub-env with a seed drawn up to ``2**32 - 1``. Such a seed is taken as
    an RNG seed, as under :class:`~plr_gym.PrioritizedLevelReplay` (whose levels always come from the
    sampler): the episode's level is the level the env played, and ``info["level"]`` says which. To play
    chosen levels, pass them as ``reset(seed=level)`` within the env's range, ``options={"level": ...}``, or
    ``make_vec_env(..., seed=s)`` (sub-env ``i`` plays level ``s + i`` first).

    ``info["level"]`` is set on the reset and on every step of the episode, including the step that ends
    it. :attr:`level` holds the current episode's level.

    **Seed check (best effort).** For ``int`` levels the wrapper remembers a 16-byte digest of the first
    observation of up to ``max_checked_levels`` levels; if a later reset on a remembered level gives a
    different first observation, it warns once with :class:`NondeterministicLevelWarning`: the env probably
    ignores its seed, so the level replayed is not the level that was scored. The check cannot see
    differences hidden from the first observation (e.g. a partially observed layout), nor envs whose first
    observation is random by design; pass ``max_checked_levels=0`` to turn it off.

    :param env: the environment; its ``reset(seed=s)`` must select level ``s`` (for ``int`` levels).
    :param max_checked_levels: how many levels the seed check remembers (oldest forgotten first);
        ``0`` disables the check. Default 10 000 (about 0.5 MB).

    Example:
        >>> import gymnasium as gym
        >>> import minigrid  # registers the MiniGrid envs
        >>> from plr_gym.wrappers import LevelWrapper
        >>> env = LevelWrapper(gym.make("MiniGrid-DoorKey-5x5-v0"))
        >>> obs, info = env.reset(seed=3)
        >>> info["level"]
        3
        >>> env.set_next_level(7)                # e.g. from a vectorized env, before its autoreset
        >>> obs, info = env.reset()
        >>> info["level"], env.level
        (7, 7)
        >>> obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
        >>> info["level"]
        7
    """

    def __init__(self, env: gym.Env[Any, Any], max_checked_levels: int = 10_000) -> None:
        gym.utils.RecordConstructorArgs.__init__(self, max_checked_levels=max_checked_levels)
        super().__init__(env)
        if not is_int_level(max_checked_levels) or max_checked_levels < 0:
            raise ValueError(f"max_checked_levels must be an int >= 0, got {max_checked_levels!r}")
        self.max_checked_levels = int(max_checked_levels)
        self._level: Any = None
        self._next_level: Any = None
        self._level_provider: Callable[[], Any] | None = None
        self._first_obs: dict[int, bytes] = {}
        self._warned = False

    # ------------------------------------------------------------------ level control
    @property
    def level(self) -> Any:
        """Level of the current episode (``None`` before the first reset or for an unleveled reset)."""
        return self._level

    @property
    def next_level(self) -> Any:
        """Level queued for the next reset, or ``None``; settable (e.g. by a vector env's ``set_attr``)."""
        return self._next_level

    @next_level.setter
    def next_level(self, level: Any) -> None:
        self._next_level = _checked_level(level, "next_level")

    def set_next_level(self, level: Any) -> None:
        """Queue ``level`` for the next reset (callable through ``VecEnv.env_method`` / ``VectorEnv.call``).

        :param level: an ``int`` level id (a reset seed) or a level object for ``options={"level": ...}``;
            ``None`` clears the queue.
        """
        self.next_level = level

    @property
    def level_provider(self) -> Callable[[], Any] | None:
        """A function that returns the level of a reset that has no other level (precedence 4 above), or
        ``None``; settable (e.g. by ``SyncVectorEnv.set_attr``). Called once per such reset."""
        return self._level_provider

    @level_provider.setter
    def level_provider(self, provider: Callable[[], Any] | None) -> None:
        if provider is not None and not callable(provider):
            raise TypeError(f"level_provider must be a function or None, got {type(provider).__name__}")
        self._level_provider = provider

    def set_level_provider(self, provider: Callable[[], Any] | None) -> None:
        """Set :attr:`level_provider` (callable through ``VecEnv.env_method`` in a ``DummyVecEnv``)."""
        self.level_provider = provider

    # ------------------------------------------------------------------ gymnasium API
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Reset on the chosen level (see the class docstring for which one) and report it in ``info``."""
        inner_options = options
        from_seed = False  # the level is the reset's own seed (SB3's VecEnv passes its seeds there)
        if options is not None and "level" in options:
            inner_options = {k: v for k, v in options.items() if k != "level"}
            level = _checked_level(options["level"], "options['level']")
        elif seed is not None:
            level = check_level_id(seed, "seed")
            from_seed = True
        elif self._next_level is not None or self._level_provider is None:
            level = self._next_level
        else:
            level = _checked_level(self._level_provider(), "the level_provider's level")
        self._next_level = None

        if level is None:
            obs, info = self.env.reset(seed=seed, options=inner_options)
        elif is_int_level(level):
            level = int(level)
            obs, info = self.env.reset(seed=level, options=inner_options)
            self._check_first_obs(level, obs)
        else:
            tracked = _TrackedOptions({**(inner_options or {}), "level": level})
            obs, info = self.env.reset(seed=seed, options=tracked)
            if not tracked.level_read:
                raise ValueError(
                    f"{self.env} ignored options['level'] on reset, so it did not play level {level!r} "
                    f"({type(level).__name__}). Int levels are reset seeds; any other level needs an env "
                    "whose "
                    "reset reads options['level'] (e.g. plr_gym.envs.maze); a generator must return levels "
                    "of that kind (never None)"
                )
        _check_info(self.env, "reset", info)
        played = info.get("level", level)
        if is_int_level(level) and is_int_level(played) and int(played) != level:
            # e.g. plr_gym/procgen-*: a seed above its last level (2**31 - 1) only seeds its RNG
            if not from_seed:
                raise ValueError(
                    f"{self.env} cannot play level {level}: reset(seed={level}) played its level {played} "
                    "instead (info['level']); choose levels the env has (Procgen: 0..2**31 - 1)"
                )
            level = int(played)  # a reset seed that is no level of the env: an RNG seed (see the docstring)
        self._level = level
        # a new dict: an env may return one dict object from every call and every instance (sub-envs
        # sharing it would each report the last writer's level)
        return obs, {**info, "level": level}

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        """Step the env; ``info["level"]`` is the level of this step's episode."""
        obs, reward, terminated, truncated, info = self.env.step(action)
        _check_info(self.env, "step", info)
        return obs, reward, terminated, truncated, {**info, "level": self._level}

    # ------------------------------------------------------------------ seed check
    def _check_first_obs(self, level: int, obs: Any) -> None:
        if self.max_checked_levels == 0 or self._warned:
            return
        digest = observation_digest(obs)
        known = self._first_obs.get(level)
        if known is None:
            if len(self._first_obs) >= self.max_checked_levels:
                del self._first_obs[next(iter(self._first_obs))]
            self._first_obs[level] = digest
        elif known != digest:
            self._warned = True
            self._first_obs.clear()
            warnings.warn(
                f"{self.env}: two resets with seed={level} gave different first observations. The env seems "
                "to ignore the seed passed to reset(), so a level cannot be replayed and Prioritized Level "
                "Replay will not work. Make reset(seed=s) select level s (call super().reset(seed=seed) and "
                "draw the layout from self.np_random; docs/own_env.md shows three ways, and "
                "plr_gym.check_level_env checks an env). This warning is shown once per env.",
                NondeterministicLevelWarning,
                stacklevel=2,
            )
