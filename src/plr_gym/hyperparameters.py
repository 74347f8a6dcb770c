"""The model of a training run: algorithms, the policy for an observation space, and :class:`Hyperparameters`.

:func:`algorithm_class` names the SB3 class of ``--algo``, :func:`policy_for` the policy (a CNN for frames:
SB3's NatureCNN or the paper's IMPALA-CNN; an MLP for MiniGrid's grid codes), and :class:`Hyperparameters`
the on-policy settings with their checks. :mod:`plr_gym.training` builds a whole run from these and
re-exports them.

Importing this module imports neither torch nor Stable-Baselines3.
"""

from __future__ import annotations

import importlib.util
import math
from dataclasses import asdict, dataclass
from typing import Any

from plr_gym.level_envs import SetupError

__all__ = ["ALGORITHMS", "ENCODERS", "Hyperparameters", "algorithm_class", "policy_for"]

#: Algorithms :func:`algorithm_class` knows (``recurrentppo`` needs sb3-contrib).
ALGORITHMS: tuple[str, ...] = ("ppo", "a2c", "recurrentppo")
#: Image encoders of :func:`policy_for`: ``auto`` (SB3's NatureCNN ``CnnPolicy``), ``nature`` (the same),
#: ``impala`` (:class:`plr_gym.policies.ImpalaCnnPolicy`, the PLR paper's).
ENCODERS: tuple[str, ...] = ("auto", "nature", "impala")


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
