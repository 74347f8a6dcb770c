"""Set-up of an SB3 training run with PLR, shared by ``plr-gym train``, the demo and the learning study.

One place for what every training script of plr_gym builds before ``model.learn`` and writes after it:

- the environments: :func:`env_family` and :func:`make_level_venv` (a VecEnv of
  :class:`~plr_gym.LevelWrapper` sub-envs; MiniGrid gets its image observation, optionally the fully
  observed grid);
- the model: :func:`policy_for` (a CNN for frames: SB3's NatureCNN or the paper's IMPALA-CNN; an MLP for
  MiniGrid's grid codes), :func:`algorithm_class` and :class:`Hyperparameters`;
- the whole run: :func:`build_run` gives a :class:`TrainingRun` (the training env wrapped in
  :class:`~plr_gym.PrioritizedLevelReplay`, optionally SB3's ``VecNormalize`` reward normalisation,
  a separate evaluation env, the model); :func:`save_reward_normalization` and
  :func:`load_reward_normalization` checkpoint the normalisation statistics without pickles;
- the result files: :func:`write_json` and :func:`write_csv` (atomic), :func:`returns_to_json` /
  :func:`returns_from_json` for per-level returns, :func:`run_dir_name` and :func:`load_final_returns`
  for the run directories of ``plr-gym compare --run``.

Importing this module imports neither torch nor Stable-Baselines3; the functions that need them import
them when called. Setup errors a user can fix (an unknown env id, env options the env does not take, a
sampler that does not fit the env) raise :class:`SetupError`, a ``ValueError``.

Example:
    >>> from plr_gym import LevelSampler, PLRCallback
    >>> from plr_gym.training import Hyperparameters, build_run
    >>> run = build_run("MiniGrid-Empty-5x5-v0", LevelSampler(levels=range(5), seed=0), n_envs=2,
    ...                 seed=0, env_seed=0, eval_seed=1, env_kwargs={"max_steps": 20},
    ...                 hyperparameters=Hyperparameters(n_steps=32, batch_size=64, n_epochs=1))
    >>> run.model = run.model.learn(64, callback=PLRCallback())  # PLRCallback scores the episodes
    >>> run.model.num_timesteps
    64
    >>> run.close()
"""

from __future__ import annotations

import csv
import difflib
import functools
import importlib.util
import io
import json
import math
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "ALGORITHMS",
    "ENCODERS",
    "ENV_FAMILIES",
    "EVALUATION_FILE",
    "REWARD_NORMALIZATION_FILE",
    "VEC_ENVS",
    "Hyperparameters",
    "SetupError",
    "TrainingRun",
    "algorithm_class",
    "apply_torch_threads",
    "build_run",
    "default_torch_threads",
    "env_family",
    "level_env_wrapper",
    "load_final_returns",
    "load_reward_normalization",
    "make_level_venv",
    "max_torch_threads",
    "policy_for",
    "procgen_id_for",
    "read_json",
    "register_envs",
    "returns_from_json",
    "returns_to_json",
    "run_dir_name",
    "save_reward_normalization",
    "set_torch_threads",
    "torch_default_threads",
    "write_csv",
    "write_json",
]

#: Algorithms :func:`algorithm_class` knows (``recurrentppo`` needs sb3-contrib).
ALGORITHMS: tuple[str, ...] = ("ppo", "a2c", "recurrentppo")
#: What :func:`env_family` returns.
ENV_FAMILIES: tuple[str, ...] = ("minigrid", "procgen", "other")
#: A run directory's final held-out evaluation (written by ``plr-gym train``).
EVALUATION_FILE = "evaluation.json"
#: A run directory's reward-normalisation statistics (:func:`save_reward_normalization`).
REWARD_NORMALIZATION_FILE = "reward_normalization.npz"
#: Image encoders of :func:`policy_for`: ``auto`` (SB3's NatureCNN ``CnnPolicy``), ``nature`` (the same),
#: ``impala`` (:class:`plr_gym.policies.ImpalaCnnPolicy`, the PLR paper's).
ENCODERS: tuple[str, ...] = ("auto", "nature", "impala")
#: How :func:`make_level_venv` steps its sub-envs: ``dummy`` (one process), ``subproc`` (one process per
#: sub-env) or ``batched`` (Procgen only: :class:`~plr_gym.envs.procgen_sb3.ProcgenVecEnv`, one
#: ``ProcgenGym3Env`` stepping every game in Procgen's C++ loop).
VEC_ENVS: tuple[str, ...] = ("dummy", "subproc", "batched")


class SetupError(ValueError):
    """A run cannot be set up as asked (unknown env id, env options, sampler); the message says why."""


# --------------------------------------------------------------------------------------------------
# environments
# --------------------------------------------------------------------------------------------------
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


# --------------------------------------------------------------------------------------------------
# model
# --------------------------------------------------------------------------------------------------
def policy_for(
    obs_space: Any,
    recurrent: bool = False,
    cnn_features_dim: int | None = None,
    encoder: str = "auto",
    residual_skip: str = "identity",
) -> tuple[Any, dict[str, Any]]:
    """SB3 policy (a name or a class) and ``policy_kwargs`` for an observation space.

    A CNN for ``uint8`` frames of 32x32 pixels or more (Procgen's 64x64x3): SB3's ``CnnPolicy`` (NatureCNN)
    by default, or with ``encoder="impala"`` the PLR paper's :class:`~plr_gym.policies.ImpalaCnnPolicy`
    (IMPALA-CNN encoder, linear heads); an MLP otherwise; small ``uint8`` grids (MiniGrid's 7x7x3 codes) go
    to the MLP unscaled (``normalize_images=False``).

    :param obs_space: the env's observation space.
    :param recurrent: the LSTM variant (``CnnLstmPolicy``/``MlpLstmPolicy``, for sb3-contrib's RecurrentPPO;
        with ``encoder="impala"`` its features extractor is :class:`~plr_gym.policies.ImpalaCNN`).
    :param cnn_features_dim: the CNN's feature size (``features_extractor_kwargs``); ``None``: SB3's default
        (the IMPALA-CNN's: 256).
    :param encoder: one of :data:`ENCODERS`.
    :param residual_skip: the IMPALA-CNN's residual skip (:class:`~plr_gym.policies.ImpalaCNN`'s
        ``residual_skip``; ``"relu"`` is the PLR paper's code's); ``encoder="impala"`` only.
    :raises ValueError: an unknown ``encoder``, ``"impala"`` for observations that are not frames, or a
        ``residual_skip`` other than ``"identity"`` without ``encoder="impala"``.

    Example:
        >>> import numpy as np
        >>> from gymnasium import spaces
        >>> policy_for(spaces.Box(0, 255, (7, 7, 3), np.uint8))
        ('MlpPolicy', {'normalize_images': False})
        >>> policy_for(spaces.Box(0, 255, (64, 64, 3), np.uint8), cnn_features_dim=256)
        ('CnnPolicy', {'features_extractor_kwargs': {'features_dim': 256}})
    """
    import numpy as np
    from gymnasium import spaces

    if encoder not in ENCODERS:
        raise ValueError(f"encoder must be one of {', '.join(ENCODERS)}, got {encoder!r}")
    kwargs: dict[str, Any] = {}
    image = isinstance(obs_space, spaces.Box) and len(obs_space.shape) == 3 and obs_space.dtype == np.uint8
    frames = image and min(obs_space.shape[:2]) >= 32
    if encoder == "impala" and not frames:
        raise ValueError(
            f"encoder='impala' needs uint8 frames of at least 32x32 pixels, got {obs_space}; use 'auto'"
        )
    from plr_gym.reference import RESIDUAL_SKIPS

    if residual_skip not in RESIDUAL_SKIPS:
        raise ValueError(f"residual_skip must be one of {', '.join(RESIDUAL_SKIPS)}, got {residual_skip!r}")
    if residual_skip != "identity" and encoder != "impala":
        raise ValueError(
            f"residual_skip={residual_skip!r} is an option of the IMPALA-CNN (encoder='impala'), got "
            f"encoder={encoder!r}"
        )
    if frames:
        name = "CnnPolicy"
        if cnn_features_dim is not None:
            kwargs["features_extractor_kwargs"] = {"features_dim": cnn_features_dim}
        if encoder == "impala" and residual_skip != "identity":
            kwargs.setdefault("features_extractor_kwargs", {})["residual_skip"] = residual_skip
        if encoder == "impala":
            from plr_gym.policies import ImpalaCNN, ImpalaCnnPolicy

            if not recurrent:
                return ImpalaCnnPolicy, kwargs
            kwargs.update(features_extractor_class=ImpalaCNN, net_arch=[])
    else:
        name = "MlpPolicy"
        if image:
            kwargs["normalize_images"] = False
    if recurrent:
        name = name.replace("Policy", "LstmPolicy")
    return name, kwargs


def algorithm_class(algo: str) -> Any:
    """The SB3 class of ``algo`` (one of :data:`ALGORITHMS`).

    :raises SetupError: an unknown name, or ``recurrentppo`` without sb3-contrib installed.

    Example:
        >>> algorithm_class("a2c").__name__
        'A2C'
    """
    if algo == "ppo":
        from stable_baselines3 import PPO

        return PPO
    if algo == "a2c":
        from stable_baselines3 import A2C

        return A2C
    if algo == "recurrentppo":
        if importlib.util.find_spec("sb3_contrib") is None:
            raise SetupError("--algo recurrentppo needs sb3-contrib: pip install 'plr-gym[contrib]'")
        from sb3_contrib import RecurrentPPO

        return RecurrentPPO
    raise SetupError(f"unknown algorithm {algo!r}; choose from {', '.join(ALGORITHMS)}")


@dataclass(frozen=True)
class Hyperparameters:
    """On-policy hyperparameters of a run (the defaults are ``plr-gym train``'s).

    :param n_steps: rollout length per env.
    :param batch_size: minibatch size (PPO; A2C does not take it).
    :param n_epochs: epochs per rollout (PPO; A2C does not take it).
    :param learning_rate: optimizer step size.
    :param ent_coef: entropy bonus.
    :param gamma: discount.
    :param gae_lambda: GAE lambda.
    :param clip_range: PPO's clipping parameter (A2C does not take it).
    :param vf_coef: value-loss coefficient (SB3's loss: ``vf_coef * mean((R - V)^2)``).
    :param max_grad_norm: gradient norm clipping.
    :param optimizer_eps: epsilon of the optimizer: Adam's (PPO, RecurrentPPO; via ``policy_kwargs``) or
        RMSprop's (A2C's ``rms_prop_eps``).
    :param value_loss: PPO's value loss, one of :data:`plr_gym.reference.VALUE_LOSSES`: ``"mse"`` (SB3's)
        or ``"clipped_max"`` (the PLR paper's code; :class:`plr_gym.ppo.LevelReplayPPO`). PPO only.
    :param advantage_normalization: one of :data:`plr_gym.reference.ADVANTAGE_NORMALIZATIONS`:
        ``"minibatch"`` (SB3's), ``"rollout"`` (the PLR paper's code) or ``"none"``. PPO only.
        :meth:`for_algorithm` leaves both out: :func:`build_run` passes them to
        :class:`~plr_gym.ppo.LevelReplayPPO` when either differs from SB3's (:meth:`level_replay_update`).

    Example:
        >>> Hyperparameters(n_steps=128).for_algorithm("a2c")  # doctest: +NORMALIZE_WHITESPACE
        {'n_steps': 128, 'learning_rate': 0.0005, 'ent_coef': 0.01, 'gamma': 0.99, 'gae_lambda': 0.95,
         'vf_coef': 0.5, 'max_grad_norm': 0.5, 'rms_prop_eps': 1e-05}
    """

    n_steps: int = 256
    batch_size: int = 256
    n_epochs: int = 4
    learning_rate: float = 5e-4
    ent_coef: float = 0.01
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip_range: float = 0.2
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    optimizer_eps: float = 1e-5
    value_loss: str = "mse"
    advantage_normalization: str = "minibatch"

    def __post_init__(self) -> None:
        from plr_gym.reference import ADVANTAGE_NORMALIZATIONS, VALUE_LOSSES

        for name, accepted in (
            ("value_loss", VALUE_LOSSES),
            ("advantage_normalization", ADVANTAGE_NORMALIZATIONS),
        ):
            value = getattr(self, name)
            if not isinstance(value, str) or value not in accepted:
                raise ValueError(f"{name} must be one of {', '.join(accepted)}, got {value!r}")
        for name in ("n_steps", "batch_size", "n_epochs"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        for name in ("learning_rate", "clip_range", "max_grad_norm", "optimizer_eps"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
        if not (isinstance(self.vf_coef, (int, float)) and math.isfinite(self.vf_coef) and self.vf_coef >= 0):
            raise ValueError(f"vf_coef must be a finite number >= 0, got {self.vf_coef!r}")
        for name in ("gamma", "gae_lambda"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {value!r}")

    def for_algorithm(self, algo: str) -> dict[str, Any]:
        """Keyword arguments of the ``algo`` constructor (A2C takes no ``batch_size``/``n_epochs``)."""
        kwargs = {
            "n_steps": self.n_steps,
            "learning_rate": self.learning_rate,
            "ent_coef": self.ent_coef,
            "gamma": self.gamma,
            "gae_lambda": self.gae_lambda,
            "vf_coef": self.vf_coef,
            "max_grad_norm": self.max_grad_norm,
        }
        if algo == "a2c":
            kwargs["rms_prop_eps"] = self.optimizer_eps
        else:
            kwargs.update(batch_size=self.batch_size, n_epochs=self.n_epochs, clip_range=self.clip_range)
        return kwargs

    def level_replay_update(self) -> dict[str, str]:
        """The PPO update options that differ from SB3's (``value_loss``, ``advantage_normalization``):
        empty when SB3's ``PPO`` trains as asked, else :class:`~plr_gym.ppo.LevelReplayPPO`'s keywords.

        Example:
            >>> Hyperparameters(value_loss="clipped_max").level_replay_update()
            {'value_loss': 'clipped_max'}
            >>> Hyperparameters().level_replay_update()  # SB3's PPO
            {}
        """
        defaults = Hyperparameters.__dataclass_fields__
        return {
            name: getattr(self, name)
            for name in ("value_loss", "advantage_normalization")
            if getattr(self, name) != defaults[name].default
        }

    def policy_kwargs(self, algo: str) -> dict[str, Any]:
        """``policy_kwargs`` this asks for: Adam's epsilon for PPO and RecurrentPPO (A2C: none)."""
        return {} if algo == "a2c" else {"optimizer_kwargs": {"eps": self.optimizer_eps}}

    def as_dict(self) -> dict[str, Any]:
        """All fields, in declaration order."""
        return asdict(self)


def max_torch_threads() -> int:
    """Most torch CPU threads :func:`set_torch_threads` (and ``--torch-threads``) accept: the machine's
    logical CPUs (``os.cpu_count()``). More threads than CPUs never speed torch up, and very large counts
    crash its thread pool."""
    return os.cpu_count() or 1


def default_torch_threads(policy: str) -> int | None:
    """The torch CPU thread count a run of ``policy`` (a name from :func:`policy_for`) should use.

    - MLP policies (``MlpPolicy``, ``MlpLstmPolicy``: MiniGrid's grid codes, vector observations): **1**.
      Their matrix products are too small to split; extra threads only spin, so torch's default (one
      thread per core) costs several times the CPU for the same steps per second.
    - CNN policies (``CnnPolicy``, ``CnnLstmPolicy``: Procgen's 64x64 frames): ``None``, torch's default
      (one thread per physical core): convolutions over a batch of frames do use several cores.

    Example:
        >>> default_torch_threads("MlpPolicy"), default_torch_threads("CnnPolicy")
        (1, None)
    """
    if policy.startswith("Mlp"):
        return 1
    if policy.startswith("Cnn"):
        return None
    raise ValueError(f"policy must be an Mlp* or Cnn* policy name, got {policy!r}")


def set_torch_threads(n: int | None) -> None:
    """``torch.set_num_threads(n)``; ``None`` leaves torch's default.

    :raises ValueError: ``n`` is not an int in ``1..max_torch_threads()``.
    """
    if n is None:
        return
    limit = max_torch_threads()
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= limit:
        raise ValueError(f"n must be an int in 1..{limit} (this machine's CPUs) or None, got {n!r}")
    import torch

    torch_default_threads()  # remember torch's own count before the first change
    torch.set_num_threads(n)


@functools.cache
def torch_default_threads() -> int:
    """torch's own CPU thread count, as it was before plr_gym first changed it in this process (so a CNN
    run after an MLP run in one process gets torch's default back)."""
    import torch

    return int(torch.get_num_threads())


def apply_torch_threads(torch_threads: int | str | None, policy: str) -> int:
    """Set torch's CPU threads for a run of ``policy`` (a name from :func:`policy_for`); return the count
    now in use. The one rule behind :func:`build_run`'s ``torch_threads`` and ``plr-gym --torch-threads``.

    :param torch_threads: ``"auto"``: :func:`default_torch_threads` (1 for an MLP; for a CNN torch's own
        default, :func:`torch_default_threads`); an int in ``1..max_torch_threads()``: that many; ``None``:
        leave torch's setting as it is (the opt-out, e.g. after your own ``torch.set_num_threads``).
    :raises ValueError: any other ``torch_threads``, or a policy name that is not ``Mlp*``/``Cnn*``.

    Example:
        >>> import torch
        >>> apply_torch_threads("auto", "MlpPolicy"), torch.get_num_threads()
        (1, 1)
    """
    _check_torch_threads(torch_threads)
    if torch_threads is None:
        import torch

        return int(torch.get_num_threads())
    if torch_threads == "auto":
        auto = default_torch_threads(policy)
        n = min(torch_default_threads(), max_torch_threads()) if auto is None else auto
    else:
        default_torch_threads(policy)  # a known policy name, as for "auto"
        n = int(torch_threads)
    set_torch_threads(n)
    return n


def _check_torch_threads(torch_threads: object) -> None:
    limit = max_torch_threads()
    if torch_threads is None or torch_threads == "auto":
        return
    if (
        isinstance(torch_threads, bool)
        or not isinstance(torch_threads, int)
        or not 1 <= torch_threads <= limit
    ):
        raise ValueError(
            f"torch_threads must be 'auto', None (leave torch as it is) or an int in 1..{limit} (this "
            f"machine's CPUs), got {torch_threads!r}"
        )


@dataclass
class TrainingRun:
    """What :func:`build_run` builds: train on :attr:`venv`, evaluate on :attr:`eval_venv`.

    :param venv: the training env the model steps: :class:`~plr_gym.PrioritizedLevelReplay` (its sampler
        is :attr:`sampler`), under ``VecMonitor`` for the batched Procgen env and under ``VecNormalize``
        with reward normalisation (:attr:`reward_normalization`).
    :param eval_venv: a separate VecEnv of ``LevelWrapper`` sub-envs for held-out evaluation
        (:func:`~plr_gym.evaluation.evaluate_levels`, :class:`~plr_gym.HeldOutEvalCallback`).
    :param model: the SB3 model, built on ``venv``.
    """

    venv: Any
    eval_venv: Any
    model: Any

    @property
    def sampler(self) -> Any:
        """The training env's level sampler."""
        return self.plr_venv.sampler

    @property
    def plr_venv(self) -> Any:
        """The :class:`~plr_gym.PrioritizedLevelReplay` wrapper inside :attr:`venv`."""
        from stable_baselines3.common.vec_env import VecEnvWrapper

        from plr_gym.wrappers.sb3 import PrioritizedLevelReplay

        current = self.venv
        while not isinstance(current, PrioritizedLevelReplay):
            if not isinstance(current, VecEnvWrapper):
                raise RuntimeError(f"no PrioritizedLevelReplay wrapper in {self.venv!r}")
            current = current.venv
        return current

    @property
    def reward_normalization(self) -> Any:
        """SB3's ``VecNormalize`` of the training env, or ``None`` without reward normalisation."""
        from stable_baselines3.common.vec_env import VecNormalize

        return self.venv if isinstance(self.venv, VecNormalize) else None

    def close(self) -> None:
        """Close both envs."""
        self.venv.close()
        self.eval_venv.close()


def build_run(
    env_id: str,
    sampler: Any,
    *,
    seed: int,
    env_seed: int | None,
    eval_seed: int | None,
    algo: str = "ppo",
    n_envs: int = 8,
    eval_n_envs: int | None = None,
    env_kwargs: Mapping[str, Any] | None = None,
    full_obs: bool = False,
    subproc: bool = False,
    batched: bool = False,
    hyperparameters: Hyperparameters | None = None,
    device: str = "cpu",
    tensorboard_log: str | None = None,
    cnn_features_dim: int | None = None,
    encoder: str = "auto",
    normalize_reward: bool = False,
    normalize_reward_gamma: float = 0.99,
    time_limit: str = "bootstrap",
    residual_skip: str = "identity",
    level_draw: str = "episode_start",
    load_path: str | os.PathLike[str] | None = None,
    torch_threads: int | str | None = "auto",
) -> TrainingRun:
    """Build the training env (with PLR), the evaluation env and the model of one run, in this order.

    :param env_id: Gymnasium id (see :func:`make_level_venv`).
    :param sampler: the level source of the training env (a :class:`~plr_gym.LevelSampler`, ...).
    :param seed: the model's seed.
    :param env_seed: the training VecEnv's seed (``None``: unseeded).
    :param eval_seed: the evaluation VecEnv's seed (``None``: unseeded).
    :param algo: one of :data:`ALGORITHMS`.
    :param n_envs: training sub-envs.
    :param eval_n_envs: evaluation sub-envs (default ``n_envs``).
    :param env_kwargs: keyword arguments of ``gym.make`` (both envs).
    :param full_obs: MiniGrid only: observe the whole grid.
    :param subproc: ``SubprocVecEnv`` for the training env (the evaluation env is always in-process).
    :param batched: Procgen only: both envs are :class:`~plr_gym.envs.procgen_sb3.ProcgenVecEnv` (the
        training one under ``VecMonitor``), see :func:`make_level_venv`.
    :param hyperparameters: default :class:`Hyperparameters()`.
    :param device: torch device of the model.
    :param tensorboard_log: TensorBoard directory (``None``: no TensorBoard).
    :param cnn_features_dim: CNN feature size for image observations (see :func:`policy_for`).
    :param encoder: image encoder, one of :data:`ENCODERS` (see :func:`policy_for`).
    :param normalize_reward: wrap the training env in SB3's ``VecNormalize(norm_obs=False,
        norm_reward=True, clip_reward=10, epsilon=1e-8)``, as the PLR paper's code does with OpenAI
        Baselines' ``VecNormalize(ob=False, ret=True)``: rewards are divided by the running standard
        deviation of a discounted return (reset at episode ends) and clipped to [-10, 10]. The evaluation
        env and the episode returns in ``infos`` stay raw.
    :param normalize_reward_gamma: discount of that running return (Baselines' default, 0.99, which the
        paper's code keeps even with PPO's gamma of 0.999).
    :param time_limit: how an episode cut by a time limit ends, one of
        :data:`plr_gym.reference.TIME_LIMITS`: ``"bootstrap"`` (SB3's: its last reward gets
        ``gamma * V(final observation)``) or ``"terminal"`` (the PLR paper's code: the return ends there;
        :class:`~plr_gym.wrappers.time_limit.TimeLimitAsTerminal` over the PLR wrapper; the level scores
        follow, as they are computed from the rollout buffer's rewards and advantages).
    :param residual_skip: the IMPALA-CNN's residual skip (``encoder="impala"``), see :func:`policy_for`.
    :param level_draw: when each env's next level is drawn, ``PrioritizedLevelReplay(level_draw=...)``:
        ``"episode_start"`` or ``"episode_end"`` (the PLR paper's code; not with ``subproc``).
    :param load_path: continue a saved model (``algo``'s ``load``) instead of building a new one; the
        hyperparameters are the saved model's (reward-normalisation statistics: see
        :func:`load_reward_normalization`).
    :param torch_threads: torch's CPU threads, set once the run is built (:func:`apply_torch_threads`):
        ``"auto"`` (default) one thread for an MLP policy (MiniGrid: several times less CPU for the same
        steps per second, docs/cli.md), torch's default for a CNN; an int sets that many; ``None``
        leaves torch's setting alone.
    :raises SetupError: an unknown env or algorithm, env options the env does not take, or a sampler that
        does not fit the env. The envs built so far are closed on any error.
    """
    from stable_baselines3.common.vec_env import VecMonitor, VecNormalize

    from plr_gym.reference import TIME_LIMITS
    from plr_gym.wrappers.sb3 import PrioritizedLevelReplay

    algo_cls = algorithm_class(algo)
    _check_torch_threads(torch_threads)
    hyper = Hyperparameters() if hyperparameters is None else hyperparameters
    update = hyper.level_replay_update()
    if update and algo != "ppo":
        raise SetupError(
            f"{', '.join(f'{k}={v!r}' for k, v in update.items())}: PPO's update options (algo='ppo'), "
            f"got algo={algo!r}"
        )
    if update:
        from plr_gym.ppo import LevelReplayPPO

        algo_cls = LevelReplayPPO
    if not (isinstance(normalize_reward_gamma, (int, float)) and 0.0 <= normalize_reward_gamma <= 1.0):
        raise SetupError(f"normalize_reward_gamma must be in [0, 1], got {normalize_reward_gamma!r}")
    if time_limit not in TIME_LIMITS:
        raise SetupError(f"time_limit must be one of {', '.join(TIME_LIMITS)}, got {time_limit!r}")
    base = make_level_venv(
        env_id, n_envs, env_seed, env_kwargs, subproc=subproc, full_obs=full_obs, batched=batched
    )
    try:
        venv: Any = PrioritizedLevelReplay(base, sampler=sampler, level_draw=level_draw)
    except (ValueError, TypeError) as exc:
        base.close()
        raise SetupError(str(exc)) from None
    if batched:
        venv = VecMonitor(venv)
    if time_limit == "terminal":  # SB3 reads the infos of the outermost VecEnv
        from plr_gym.wrappers.time_limit import TimeLimitAsTerminal

        venv = TimeLimitAsTerminal(venv)
    if normalize_reward:
        venv = VecNormalize(
            venv,
            norm_obs=False,
            norm_reward=True,
            clip_reward=10.0,
            gamma=normalize_reward_gamma,
            epsilon=1e-8,
        )
    try:
        eval_venv = make_level_venv(
            env_id, eval_n_envs or n_envs, eval_seed, env_kwargs, full_obs=full_obs, batched=batched
        )
    except BaseException:
        venv.close()
        raise
    try:
        if load_path is not None:
            model = algo_cls.load(load_path, env=venv, device=device, tensorboard_log=tensorboard_log)
        else:
            try:
                policy, policy_kwargs = policy_for(
                    venv.observation_space,
                    recurrent=algo == "recurrentppo",
                    cnn_features_dim=cnn_features_dim,
                    encoder=encoder,
                    residual_skip=residual_skip,
                )
            except ValueError as exc:
                raise SetupError(str(exc)) from None
            policy_kwargs = {**hyper.policy_kwargs(algo), **policy_kwargs}
            model = algo_cls(
                policy,
                venv,
                seed=seed,
                policy_kwargs=policy_kwargs,
                tensorboard_log=tensorboard_log,
                verbose=0,
                device=device,
                **hyper.for_algorithm(algo),
                **update,
            )
        apply_torch_threads(torch_threads, policy_for(venv.observation_space)[0])
    except BaseException:
        venv.close()
        eval_venv.close()
        raise
    return TrainingRun(venv=venv, eval_venv=eval_venv, model=model)


# --------------------------------------------------------------------------------------------------
# result files
# --------------------------------------------------------------------------------------------------
def write_json(
    path: str | os.PathLike[str],
    data: Any,
    indent: int | None = 2,
    default: Callable[[Any], Any] | None = None,
    newline: bool = True,
) -> Path:
    """Write ``data`` as JSON at ``path``, atomically (a reader never sees a half-written file).

    :param path: the file; its directory is created if missing.
    :param data: anything ``json.dumps`` takes (with ``default`` for the rest, e.g. ``default=str``).
    :param indent: ``json.dumps``'s indent (``None``: one line).
    :param newline: end the file with a newline.
    :return: ``path``.

    Example:
        >>> import tempfile
        >>> path = write_json(Path(tempfile.mkdtemp()) / "run" / "result.json", {"steps": 64})
        >>> read_json(path)
        {'steps': 64}
    """
    from plr_gym.checkpoint import atomic_open

    target = Path(path)
    text = json.dumps(data, indent=indent, default=default) + ("\n" if newline else "")
    target.parent.mkdir(parents=True, exist_ok=True)
    with atomic_open(target) as f:
        f.write(text.encode())
    return target


def read_json(path: str | os.PathLike[str]) -> Any:
    """The JSON value in the file ``path``."""
    return json.loads(Path(path).read_text())


def write_csv(
    path: str | os.PathLike[str],
    header: Sequence[str],
    rows: Iterable[Sequence[Any] | Mapping[str, Any]],
) -> Path:
    """Write a CSV file (``header``, then ``rows``) at ``path``, atomically.

    :param header: the column names.
    :param rows: one sequence of values per row, or one mapping (column -> value; a missing column is
        written empty).
    :raises ValueError: a mapping row with a key that is not in ``header``.
    :return: ``path``.

    Example:
        >>> import tempfile
        >>> rows = [[3, 0.5], {"level": 4}]
        >>> path = write_csv(Path(tempfile.mkdtemp()) / "r.csv", ["level", "return"], rows)
        >>> path.read_text().splitlines()
        ['level,return', '3,0.5', '4,']
    """
    from plr_gym.checkpoint import atomic_open

    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(header)
    for row in rows:
        if isinstance(row, Mapping):
            extra = [key for key in row if key not in header]
            if extra:
                raise ValueError(f"rows: keys {extra} are not in header {list(header)}")
            writer.writerow([row.get(key, "") for key in header])
        else:
            writer.writerow(row)
    target = Path(path)
    with atomic_open(target) as f:
        f.write(buffer.getvalue().encode("utf-8"))
    return target


def save_reward_normalization(venv: Any, path: str | os.PathLike[str]) -> Path:
    """Save a ``VecNormalize``'s reward-normalisation state (running return statistics and each env's
    running return) to an ``.npz`` of plain arrays, atomically (no pickle, unlike ``VecNormalize.save``).

    :raises TypeError: ``venv`` is not a ``VecNormalize``.

    Example:
        >>> import tempfile
        >>> from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize
        >>> import gymnasium as gym
        >>> venv = VecNormalize(DummyVecEnv([lambda: gym.make("CartPole-v1")]), norm_obs=False)
        >>> path = save_reward_normalization(venv, Path(tempfile.mkdtemp()) / REWARD_NORMALIZATION_FILE)
        >>> load_reward_normalization(venv, path).ret_rms.count
        0.0001
    """
    from stable_baselines3.common.vec_env import VecNormalize

    from plr_gym.checkpoint import save_npz

    if not isinstance(venv, VecNormalize):
        raise TypeError(f"venv must be a VecNormalize, got {type(venv).__name__}")
    target = Path(path)
    save_npz(
        target,
        {
            "ret_mean": np.asarray(venv.ret_rms.mean, dtype=np.float64),
            "ret_var": np.asarray(venv.ret_rms.var, dtype=np.float64),
            "ret_count": np.asarray(venv.ret_rms.count, dtype=np.float64),
            "returns": np.asarray(venv.returns, dtype=np.float64),
            "gamma": np.asarray(venv.gamma, dtype=np.float64),
            "epsilon": np.asarray(venv.epsilon, dtype=np.float64),
            "clip_reward": np.asarray(venv.clip_reward, dtype=np.float64),
        },
    )
    return target


def load_reward_normalization(venv: Any, path: str | os.PathLike[str]) -> Any:
    """Restore what :func:`save_reward_normalization` saved into ``venv`` (a ``VecNormalize``); returns it.

    :raises TypeError: ``venv`` is not a ``VecNormalize``.
    :raises ValueError: the file is not such a save, or it was made with another ``gamma``, ``epsilon``,
        ``clip_reward`` or number of envs (``venv`` is left as it was).
    """
    from stable_baselines3.common.vec_env import VecNormalize

    from plr_gym.checkpoint import load_npz

    if not isinstance(venv, VecNormalize):
        raise TypeError(f"venv must be a VecNormalize, got {type(venv).__name__}")
    data = load_npz(path)
    keys = {"ret_mean", "ret_var", "ret_count", "returns", "gamma", "epsilon", "clip_reward"}
    if set(data) != keys:
        raise ValueError(f"{path} is not a reward-normalisation save (keys {sorted(data)})")
    for name in ("gamma", "epsilon", "clip_reward"):
        if float(data[name]) != float(getattr(venv, name)):
            raise ValueError(
                f"{path} was saved with {name}={float(data[name])}, this env has {getattr(venv, name)}"
            )
    if data["returns"].shape != (venv.num_envs,):
        raise ValueError(
            f"{path} holds {data['returns'].shape} running returns, this env has {venv.num_envs} envs"
        )
    stats = (float(data["ret_mean"]), float(data["ret_var"]), float(data["ret_count"]))
    if (
        not all(math.isfinite(x) for x in stats)
        or stats[1] < 0
        or stats[2] <= 0
        or not np.isfinite(data["returns"]).all()
    ):
        raise ValueError(f"{path} holds invalid statistics (mean, var, count) = {stats}")
    venv.ret_rms.mean = np.asarray(stats[0], dtype=np.float64)
    venv.ret_rms.var = np.asarray(stats[1], dtype=np.float64)
    venv.ret_rms.count = stats[2]
    venv.returns = data["returns"].copy()
    return venv


def returns_to_json(returns: Mapping[int, Sequence[float]]) -> dict[str, list[float]]:
    """Per-level returns as a JSON object: level ids become strings (JSON keys), returns floats.

    Example:
        >>> returns_to_json({10000: [0.5, 1.0]})
        {'10000': [0.5, 1.0]}
        >>> returns_from_json(returns_to_json({10000: [0.5, 1.0]}))
        {10000: [0.5, 1.0]}
    """
    return {str(level): [float(r) for r in values] for level, values in returns.items()}


def returns_from_json(record: Mapping[str, Sequence[float]]) -> dict[int, list[float]]:
    """The inverse of :func:`returns_to_json`: level id (int) -> list of returns."""
    return {int(level): [float(r) for r in values] for level, values in record.items()}


def run_dir_name(sampler: str, seed: int | None = None) -> str:
    """Name of a run directory of ``plr-gym compare --run``: ``"plr"``, or ``"plr-seed1"`` with a seed.

    Example:
        >>> run_dir_name("uniform"), run_dir_name("plr", 1)
        ('uniform', 'plr-seed1')
    """
    return sampler if seed is None else f"{sampler}-seed{seed}"


def load_final_returns(run_dir: str | os.PathLike[str]) -> dict[int, list[float]] | None:
    """Held-out returns of a run's final evaluation (``run_dir/evaluation.json``); ``None`` if absent."""
    path = Path(run_dir) / EVALUATION_FILE
    if not path.is_file():
        return None
    return returns_from_json(read_json(path)["returns"])
