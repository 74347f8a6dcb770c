"""The environments of a training run: env families, Procgen ids, and VecEnvs of ``LevelWrapper`` sub-envs.

:func:`env_family` names what an id is (MiniGrid, Procgen, other), :func:`level_env_wrapper` the wrappers
each sub-env gets (MiniGrid's image observation, optionally the fully observed grid, then
:class:`~plr_gym.LevelWrapper`), and :func:`make_level_venv` builds the VecEnv (one process, one per sub-env,
or Procgen's batched env). :mod:`plr_gym.training` builds a whole run from these and re-exports them.

Importing this module imports neither torch nor Stable-Baselines3. Setup errors a user can fix (an unknown
env id, env options the env does not take) raise :class:`SetupError`, a ``ValueError``.
"""

from __future__ import annotations

import difflib
import importlib.util
import re
from collections.abc import Callable, Mapping
from typing import Any

__all__ = [
    "ENV_FAMILIES",
    "VEC_ENVS",
    "SetupError",
    "env_family",
    "level_env_wrapper",
    "make_level_venv",
    "procgen_id_for",
    "register_envs",
]

#: What :func:`env_family` returns.
ENV_FAMILIES: tuple[str, ...] = ("minigrid", "procgen", "other")
#: How :func:`make_level_venv` steps its sub-envs: ``dummy`` (one process), ``subproc`` (one process per
#: sub-env) or ``batched`` (Procgen only: :class:`~plr_gym.envs.procgen_sb3.ProcgenVecEnv`, one
#: ``ProcgenGym3Env`` stepping every game in Procgen's C++ loop).
VEC_ENVS: tuple[str, ...] = ("dummy", "subproc", "batched")


class SetupError(ValueError):
    """A run cannot be set up as asked (unknown env id, env options, sampler); the message says why."""


def register_envs() -> None:
    """Register MiniGrid's ids (when minigrid is installed) and plr_gym's envs with Gymnasium.

    Example:
        >>> import gymnasium as gym
        >>> register_envs()
        >>> "plr_gym/procgen-bigfish-v0" in gym.registry
        True
    """
    if importlib.util.find_spec("minigrid") is not None:
        import minigrid  # noqa: F401  (registers MiniGrid-* ids)
    import plr_gym.envs  # noqa: F401  (registers plr_gym/procgen-*-v0 and the DoorKey gamut)


def env_family(env_id: str) -> str:
    """``"minigrid"``, ``"procgen"`` or ``"other"`` (see :data:`ENV_FAMILIES`), from a registered id.

    :raises SetupError: ``env_id`` is not registered (with close matches as a hint).

    Example:
        >>> env_family("MiniGrid-DoorKey-5x5-v0"), env_family("plr_gym/procgen-bigfish-v0")
        ('minigrid', 'procgen')
        >>> env_family("CartPole-v1")
        'other'
    """
    import gymnasium as gym

    register_envs()
    ours = procgen_id_for(env_id)
    if ours is not None and ours != env_id:
        raise SetupError(
            f"{env_id!r} is a legacy Procgen id; plr_gym's runs name each game one way: use {ours!r} "
            "(whose reset(seed=s) plays level s, as PLR needs; distribution_mode 'easy' unless given)"
        )
    if env_id not in gym.registry:
        close = difflib.get_close_matches(env_id, list(gym.registry), n=3, cutoff=0.6)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise SetupError(
            f"unknown environment {env_id!r}{hint} (MiniGrid ids such as MiniGrid-DoorKey-5x5-v0 need the "
            "minigrid extra; Procgen games are plr_gym/procgen-<game>-v0)"
        )
    if env_id.split("/")[-1].startswith("MiniGrid-"):  # also plr_gym/MiniGrid-DoorKeyGamut-v0
        return "minigrid"
    if env_id.startswith("plr_gym/procgen-"):
        return "procgen"
    return "other"


def procgen_id_for(env_id: str) -> str | None:
    """plr_gym's id of the Procgen game ``env_id`` names in any of the usual spellings (the legacy
    ``procgen-coinrun-v0``, ``procgen:procgen-coinrun-v0``, ``procgen/coinrun``...), else ``None``.

    Example:
        >>> procgen_id_for("procgen:procgen-coinrun-v0"), procgen_id_for("procgen-bigfish-v0")
        ('plr_gym/procgen-coinrun-v0', 'plr_gym/procgen-bigfish-v0')
        >>> procgen_id_for("plr_gym/procgen-coinrun-v0"), procgen_id_for("CartPole-v1")
        ('plr_gym/procgen-coinrun-v0', None)
    """
    from plr_gym.envs.procgen import GAMES

    text = env_id.strip().lower()
    match = _PROCGEN_ID.fullmatch(text)
    if "procgen" not in text or match is None or match.group("game") not in GAMES:
        return None
    return f"plr_gym/procgen-{match.group('game')}-v0"


# procgen-coinrun-v0, procgen:procgen-coinrun-v0, procgen/coinrun, plr_gym/procgen-coinrun-v0 (with "procgen")
_PROCGEN_ID = re.compile(r"(?:procgen:)?(?:(?:plr_gym|procgen)/)?(?:procgen-)?(?P<game>[a-z]+)(?:-v\d+)?")


def level_env_wrapper(family: str, full_obs: bool = False) -> Callable[[Any], Any]:
    """``make_vec_env``'s ``wrapper_class`` for an env family: observation wrappers, then ``LevelWrapper``.

    MiniGrid envs get ``ImgObsWrapper`` (the egocentric 7x7x3 grid codes), or with ``full_obs`` the whole
    grid (``ImgObsWrapper(FullyObsWrapper(env))``); other envs keep their observations.

    :param family: one of :data:`ENV_FAMILIES`.
    :param full_obs: MiniGrid only: observe the whole grid instead of the egocentric view.
    :raises ValueError: an unknown family, or ``full_obs`` outside MiniGrid.
    """
    from plr_gym.wrappers.level import LevelWrapper

    if family not in ENV_FAMILIES:
        raise ValueError(f"family must be one of {', '.join(ENV_FAMILIES)}, got {family!r}")
    if full_obs and family != "minigrid":
        raise ValueError(f"full_obs=True is for MiniGrid envs only, got family {family!r}")
    if family == "minigrid":
        from minigrid.wrappers import FullyObsWrapper, ImgObsWrapper

        if full_obs:
            return lambda env: LevelWrapper(ImgObsWrapper(FullyObsWrapper(env)))  # type: ignore[no-untyped-call]
        return lambda env: LevelWrapper(ImgObsWrapper(env))  # type: ignore[no-untyped-call]
    return lambda env: LevelWrapper(env)


def make_level_venv(
    env_id: str,
    n_envs: int,
    seed: int | None,
    env_kwargs: Mapping[str, Any] | None = None,
    subproc: bool = False,
    full_obs: bool = False,
    batched: bool = False,
) -> Any:
    """An SB3 VecEnv of ``n_envs`` :class:`~plr_gym.LevelWrapper` sub-envs (see :func:`level_env_wrapper`).

    Episode returns are recorded by SB3's ``Monitor`` (``infos[i]["episode"]``), which ``make_vec_env`` adds;
    the batched Procgen env has no ``Monitor`` (:func:`build_run` puts ``VecMonitor`` outside the PLR
    wrapper, where :class:`~plr_gym.envs.procgen_sb3.ProcgenVecEnv` wants it).

    :param env_id: a Gymnasium id (MiniGrid, ``plr_gym/procgen-<game>-v0``, or any registered env whose
        ``reset(seed=s)`` selects level ``s``).
    :param n_envs: number of sub-envs.
    :param seed: ``make_vec_env``'s seed; ``None`` leaves the VecEnv unseeded.
    :param env_kwargs: keyword arguments of ``gym.make``.
    :param subproc: ``SubprocVecEnv`` (one process per sub-env) instead of ``DummyVecEnv``.
    :param full_obs: MiniGrid only: the whole grid as observation.
    :param batched: Procgen only: one :class:`~plr_gym.envs.procgen_sb3.ProcgenVecEnv` for all sub-envs
        (``env_kwargs`` are its keywords: ``distribution_mode``, ``num_threads``, ...).
    :raises SetupError: an unknown ``env_id``, ``env_kwargs`` the env does not take, ``batched`` outside
        Procgen or with ``subproc``.

    Example:
        >>> venv = make_level_venv("MiniGrid-Empty-5x5-v0", n_envs=2, seed=0)
        >>> venv.num_envs, venv.observation_space.shape
        (2, (7, 7, 3))
        >>> venv.close()
    """
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

    family = env_family(env_id)
    if batched:
        return _batched_procgen(env_id, family, n_envs, seed, env_kwargs, subproc)
    wrapper = level_env_wrapper(family, full_obs=full_obs)
    if subproc:
        wrapper = _ignoring_stop_signals(wrapper)
    try:
        return make_vec_env(
            env_id,
            n_envs=n_envs,
            seed=seed,
            env_kwargs=None if env_kwargs is None else dict(env_kwargs),
            wrapper_class=wrapper,
            vec_env_cls=SubprocVecEnv if subproc else DummyVecEnv,
        )
    except (TypeError, ValueError) as exc:  # e.g. a keyword the env does not take
        raise SetupError(f"cannot build {env_id} with options {dict(env_kwargs or {})}: {exc}") from None


def _ignoring_stop_signals(wrapper: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``wrapper``, first making the ``SubprocVecEnv`` worker it runs in ignore SIGINT, SIGTERM and SIGUSR1.

    A terminal's Ctrl-C, ``scancel`` and a preemption signal the whole process group: the trainer saves at
    the current step on them (:class:`plr_gym.run.StopOnSignals`), which needs its workers alive. A worker
    still ends when the trainer closes the VecEnv, or when the trainer dies (its pipe closes)."""

    def wrap(env: Any) -> Any:
        import signal

        for name in ("SIGINT", "SIGTERM", "SIGUSR1"):
            if hasattr(signal, name):
                signal.signal(getattr(signal, name), signal.SIG_IGN)
        return wrapper(env)

    return wrap


def _batched_procgen(
    env_id: str,
    family: str,
    n_envs: int,
    seed: int | None,
    env_kwargs: Mapping[str, Any] | None,
    subproc: bool,
) -> Any:
    """:func:`make_level_venv` with ``batched=True``: a seeded ``ProcgenVecEnv``."""
    import gymnasium as gym

    if family != "procgen":
        raise SetupError(
            "the batched env (--vec-env batched, which --preset paper-procgen sets) is for Procgen games "
            f"only (plr_gym/procgen-<game>-v0), got {env_id}"
        )
    if subproc:
        raise SetupError("the batched Procgen env steps every game in one process: drop subproc")
    from plr_gym.envs.procgen_sb3 import ProcgenVecEnv

    game = gym.spec(env_id).kwargs["game"]
    try:
        venv = ProcgenVecEnv(game, n_envs=n_envs, **dict(env_kwargs or {}))
    except (TypeError, ValueError) as exc:
        raise SetupError(
            f"cannot build the batched {env_id} with options {dict(env_kwargs or {})}: {exc}"
        ) from None
    if seed is not None:
        venv.seed(seed)
    return venv
