"""PPO with the update of the PLR paper's code available: :class:`LevelReplayPPO`.

SB3's PPO and the PPO of the PLR paper's code (level-replay's ``algo/ppo.py``, Kostrikov's PyTorch PPO)
differ in two places of the update that SB3 has no option for:

- **The value loss** (:data:`VALUE_LOSSES`). SB3 (``"mse"``): ``mean((R - V)^2)``, optionally with
  SB3's own clipping (``clip_range_vf``: the clipped prediction replaces the prediction). level-replay
  (``"clipped_max"``, as OpenAI Baselines' PPO2): ``0.5 * mean(max((V - R)^2, (V_clip - R)^2))`` with
  ``V_clip = V_old + clamp(V - V_old, -c, c)`` and ``c`` = ``clip_range_vf`` if given, else PPO's
  ``clip_range`` (level-replay clips the value with ``--clip_param``). Both are multiplied by
  ``vf_coef``: with the paper's 0.5, SB3's value term weighs twice level-replay's.
- **Advantage normalisation** (:data:`ADVANTAGE_NORMALIZATIONS`). SB3 (``"minibatch"``): each minibatch's
  advantages by their own mean and standard deviation (``std + 1e-8``). level-replay (``"rollout"``):
  once per rollout, by the whole rollout's mean and standard deviation (``std + 1e-5``; both are
  PyTorch's unbiased ``std``). ``"none"`` uses the raw advantages.

With the defaults (``value_loss="mse"``, ``advantage_normalization="minibatch"``) :class:`LevelReplayPPO`
trains exactly as SB3's ``PPO``. ``plr-gym train --preset paper-procgen`` selects level-replay's two
choices (``--value-loss clipped_max --advantage-normalization rollout``).

:meth:`LevelReplayPPO.train` is SB3's ``PPO.train`` (the SB3 releases of
``plr_gym.replay.algorithms.SUPPORTED_SB3``, whose source hashes to :data:`UPSTREAM_TRAIN_SHA256`, checked
by the test suite) with three marked changes (``# PLR:``), its loop kept in ``train`` and its steps named
(clip ranges, minibatch losses, optimisation step, logs) in upstream's order, so that it reads side by
side with upstream's. ``benchmarks/reference/reference_equivalence.py`` runs one whole update of this
class and of level-replay's code from the same weights and data and prints the differences.

Example:
    >>> import torch
    >>> from plr_gym.ppo import clipped_max_value_loss
    >>> values, old, returns = torch.tensor([1.5, 0.0]), torch.tensor([1.0, 0.0]), torch.tensor([2.0, 1.0])
    >>> round(float(clipped_max_value_loss(values, old, returns, 0.2)), 6)  # 0.5 * mean(0.64, 1)
    0.41
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3 import PPO
from stable_baselines3.common.type_aliases import RolloutBufferSamples
from stable_baselines3.common.utils import explained_variance
from torch.nn import functional as F

from plr_gym.reference import ADVANTAGE_NORMALIZATIONS, VALUE_LOSSES
from plr_gym.replay.algorithms import warn_if_sb3_unsupported

__all__ = [
    "ADVANTAGE_NORMALIZATIONS",
    "UPSTREAM_TRAIN_SHA256",
    "VALUE_LOSSES",
    "LevelReplayPPO",
    "clipped_max_value_loss",
    "rollout_advantage_stats",
]

#: The epsilon added to the standard deviation by each normalisation (SB3's and level-replay's).
ADVANTAGE_EPS: dict[str, float] = {"minibatch": 1e-8, "rollout": 1e-5}
#: sha256 of ``inspect.getsource(stable_baselines3.PPO.train)`` in SB3 2.7.0 to 2.9.2 (the same source),
#: the method :meth:`LevelReplayPPO.train` copies.
UPSTREAM_TRAIN_SHA256 = {
    "stable_baselines3.PPO": "7c8d09940123242f0ac401c5ec2cc858b8bf3339f571c222382f048ffd8306ae",
}


def clipped_max_value_loss(
    values: th.Tensor, old_values: th.Tensor, returns: th.Tensor, clip: float
) -> th.Tensor:
    """level-replay's value loss: ``0.5 * mean(max((V - R)^2, (V_clip - R)^2))``,
    ``V_clip = V_old + clamp(V - V_old, -clip, clip)`` (``algo/ppo.py``; OpenAI Baselines' PPO2).

    :param values: the current value predictions ``V``, shape ``(batch,)``.
    :param old_values: the rollout's predictions ``V_old``, same shape.
    :param returns: the targets ``R`` (GAE returns), same shape.
    :param clip: how far ``V_clip`` may move from ``V_old``.
    """
    clipped = old_values + th.clamp(values - old_values, -clip, clip)
    return 0.5 * th.max((values - returns) ** 2, (clipped - returns) ** 2).mean()


def rollout_advantage_stats(advantages: np.ndarray[Any, Any] | th.Tensor) -> tuple[float, float]:
    """Mean and unbiased standard deviation of a whole rollout's advantages (level-replay's
    normalisation divides by ``std + 1e-5``), computed in float64.

    Example:
        >>> rollout_advantage_stats(np.array([[1.0, 2.0], [3.0, 6.0]]))
        (3.0, 2.160246899469287)
    """
    a = advantages if isinstance(advantages, th.Tensor) else th.as_tensor(np.asarray(advantages))
    a = a.detach().to(th.float64).reshape(-1)
    return float(a.mean()), float(a.std()) if a.numel() > 1 else 0.0


class _UpdateSettings(NamedTuple):
    """What one call of :meth:`LevelReplayPPO.train` uses for every minibatch."""

    #: PPO's clip range at the current progress.
    clip_range: float
    #: SB3's clip range of the value (``None``: the value is not clipped).
    clip_range_vf: float | None
    #: level-replay's clip of the value (``"clipped_max"``): ``clip_range_vf``, else ``clip_range``.
    value_clip: float
    #: The whole rollout's advantage mean and standard deviation (``"rollout"`` normalisation only).
    advantage_stats: tuple[float, float] | None


@dataclass
class _TrainLogs:
    """The per-minibatch values :meth:`LevelReplayPPO.train` logs as means (SB3's lists)."""

    entropy_losses: list[float] = field(default_factory=list)
    pg_losses: list[float] = field(default_factory=list)
    value_losses: list[float] = field(default_factory=list)
    clip_fractions: list[float] = field(default_factory=list)
    #: this epoch's only (reset at each epoch, as SB3's)
    approx_kl_divs: list[Any] = field(default_factory=list)


class LevelReplayPPO(PPO):
    """SB3's PPO with level-replay's value loss and advantage normalisation as options.

    :param value_loss: ``"mse"`` (default, SB3's) or ``"clipped_max"`` (level-replay's), see the module
        docstring. With ``"clipped_max"``, ``clip_range_vf`` (default ``None``: ``clip_range``) is the
        value clipping range.
    :param advantage_normalization: ``"minibatch"`` (default, SB3's), ``"rollout"`` (level-replay's) or
        ``"none"``. SB3's ``normalize_advantage=False`` is ``"none"``; giving it with another choice is
        an error.
    :param args: and ``kwargs``: SB3 ``PPO``'s.
    :raises ValueError: an unknown choice, or ``normalize_advantage=False`` with a normalisation.

    Example:
        >>> model = LevelReplayPPO("MlpPolicy", "CartPole-v1", n_steps=64, batch_size=32, n_epochs=1,
        ...                        value_loss="clipped_max", advantage_normalization="rollout")
        >>> model = model.learn(64)
        >>> model.value_loss, model.advantage_normalization
        ('clipped_max', 'rollout')
    """

    def __init__(
        self,
        *args: Any,
        value_loss: str = "mse",
        advantage_normalization: str = "minibatch",
        **kwargs: Any,
    ) -> None:
        if not isinstance(value_loss, str) or value_loss not in VALUE_LOSSES:
            raise ValueError(f"value_loss must be one of {', '.join(VALUE_LOSSES)}, got {value_loss!r}")
        if (
            not isinstance(advantage_normalization, str)
            or advantage_normalization not in ADVANTAGE_NORMALIZATIONS
        ):
            raise ValueError(
                f"advantage_normalization must be one of {', '.join(ADVANTAGE_NORMALIZATIONS)}, got "
                f"{advantage_normalization!r}"
            )
        if kwargs.get("normalize_advantage", True) is False:
            if advantage_normalization not in ("minibatch", "none"):
                raise ValueError(
                    "normalize_advantage=False contradicts "
                    f"advantage_normalization={advantage_normalization!r}; give 'none' instead"
                )
            advantage_normalization = "none"
        kwargs["normalize_advantage"] = advantage_normalization != "none"
        self.value_loss = value_loss
        self.advantage_normalization = advantage_normalization
        super().__init__(*args, **kwargs)

    def _setup_model(self) -> None:
        warn_if_sb3_unsupported("LevelReplayPPO", "tests/test_reference_choices.py")
        super()._setup_model()

    def train(self) -> None:
        """
        Update policy using the currently gathered rollout buffer.

        SB3's ``PPO.train``, in its order and with its comments, cut into named steps: this update's clip
        ranges (:meth:`_update_settings`), each minibatch's losses (:meth:`_minibatch_losses`, with
        :meth:`_normalized_advantages` and :meth:`_value_loss`), the early stop on the approximate KL
        divergence, the optimisation step (:meth:`_optimization_step`) and the logs
        (:meth:`_record_train_logs`). The three changes are marked ``# PLR:``.
        """
        # Switch to train mode (this affects batch norm / dropout)
        self.policy.set_training_mode(True)
        # Update optimizer learning rate
        self._update_learning_rate(self.policy.optimizer)
        # Compute current clip range (and the value function's)
        settings = self._update_settings()

        logs = _TrainLogs()

        continue_training = True
        # train for n_epochs epochs
        for epoch in range(self.n_epochs):
            logs.approx_kl_divs = []
            # Do a complete pass on the rollout buffer
            for rollout_data in self.rollout_buffer.get(self.batch_size):
                loss, approx_kl_div = self._minibatch_losses(rollout_data, settings, logs)

                if self.target_kl is not None and approx_kl_div > 1.5 * self.target_kl:
                    continue_training = False
                    if self.verbose >= 1:
                        print(f"Early stopping at step {epoch} due to reaching max kl: {approx_kl_div:.2f}")
                    break

                # Optimization step
                self._optimization_step(loss)

            self._n_updates += 1
            if not continue_training:
                break

        self._record_train_logs(logs, loss, settings)

    def _update_settings(self) -> _UpdateSettings:
        """This update's clip ranges (SB3's schedules at the current progress) and, for level-replay's
        normalisation, the whole rollout's advantage mean and standard deviation."""
        # Compute current clip range
        clip_range = self.clip_range(self._current_progress_remaining)  # type: ignore[operator]
        # Optional: clip range for the value function
        clip_range_vf = None
        if self.clip_range_vf is not None:
            clip_range_vf = self.clip_range_vf(self._current_progress_remaining)  # type: ignore[operator]

        # PLR: level-replay normalises the advantages once, with the whole rollout's mean and std
        advantage_stats = None
        if self.advantage_normalization == "rollout":
            advantage_stats = rollout_advantage_stats(self.rollout_buffer.advantages)
        # PLR: level-replay clips the value with PPO's clip range unless a value clip range is given
        value_clip = clip_range_vf if clip_range_vf is not None else clip_range
        return _UpdateSettings(clip_range, clip_range_vf, value_clip, advantage_stats)

    def _minibatch_losses(
        self, rollout_data: RolloutBufferSamples, settings: _UpdateSettings, logs: _TrainLogs
    ) -> tuple[th.Tensor, Any]:
        """One minibatch's loss (clipped surrogate, entropy and value terms) and approximate KL divergence
        (a numpy scalar), each term's value appended to ``logs``: the body of SB3's minibatch loop up to
        the early stop."""
        clip_range = settings.clip_range
        actions = rollout_data.actions
        if isinstance(self.action_space, spaces.Discrete):
            # Convert discrete action from float to long
            actions = rollout_data.actions.long().flatten()

        values, log_prob, entropy = self.policy.evaluate_actions(rollout_data.observations, actions)
        values = values.flatten()
        # Normalize advantage
        advantages = self._normalized_advantages(rollout_data.advantages, settings)

        # ratio between old and new policy, should be one at the first iteration
        ratio = th.exp(log_prob - rollout_data.old_log_prob)

        # clipped surrogate loss
        policy_loss_1 = advantages * ratio
        policy_loss_2 = advantages * th.clamp(ratio, 1 - clip_range, 1 + clip_range)
        policy_loss = -th.min(policy_loss_1, policy_loss_2).mean()

        # Logging
        logs.pg_losses.append(policy_loss.item())
        clip_fraction = th.mean((th.abs(ratio - 1) > clip_range).float()).item()
        logs.clip_fractions.append(clip_fraction)

        value_loss = self._value_loss(values, rollout_data, settings)
        logs.value_losses.append(value_loss.item())

        # Entropy loss favor exploration
        if entropy is None:
            # Approximate entropy when no analytical form
            entropy_loss = -th.mean(-log_prob)
        else:
            entropy_loss = -th.mean(entropy)

        logs.entropy_losses.append(entropy_loss.item())

        loss = policy_loss + self.ent_coef * entropy_loss + self.vf_coef * value_loss

        # Calculate approximate form of reverse KL Divergence for early stopping
        # see issue #417: https://github.com/DLR-RM/stable-baselines3/issues/417
        # and discussion in PR #419: https://github.com/DLR-RM/stable-baselines3/pull/419
        # and Schulman blog: http://joschu.net/blog/kl-approx.html
        with th.no_grad():
            log_ratio = log_prob - rollout_data.old_log_prob
            approx_kl_div = th.mean((th.exp(log_ratio) - 1) - log_ratio).cpu().numpy()
            logs.approx_kl_divs.append(approx_kl_div)
        return loss, approx_kl_div

    def _normalized_advantages(self, advantages: th.Tensor, settings: _UpdateSettings) -> th.Tensor:
        """A minibatch's advantages as the loss uses them."""
        # PLR: per rollout (level-replay) or per minibatch (SB3)
        if self.advantage_normalization == "rollout":
            assert settings.advantage_stats is not None
            adv_mean, adv_std = settings.advantage_stats
            return (advantages - adv_mean) / (adv_std + ADVANTAGE_EPS["rollout"])
        # Normalization does not make sense if mini batchsize == 1, see GH issue #325
        if self.normalize_advantage and len(advantages) > 1:
            return (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        return advantages

    def _value_loss(
        self, values: th.Tensor, rollout_data: RolloutBufferSamples, settings: _UpdateSettings
    ) -> th.Tensor:
        """The value term of a minibatch's loss (before ``vf_coef``)."""
        # PLR: level-replay's value loss, 0.5 * max of the clipped and unclipped squared errors
        if self.value_loss == "clipped_max":
            return clipped_max_value_loss(
                values, rollout_data.old_values, rollout_data.returns, settings.value_clip
            )
        if settings.clip_range_vf is None:
            # No clipping
            values_pred = values
        else:
            # Clip the difference between old and new value
            # NOTE: this depends on the reward scaling
            values_pred = rollout_data.old_values + th.clamp(
                values - rollout_data.old_values, -settings.clip_range_vf, settings.clip_range_vf
            )
        # Value loss using the TD(gae_lambda) target
        return F.mse_loss(rollout_data.returns, values_pred)

    def _optimization_step(self, loss: th.Tensor) -> None:
        """One gradient step on a minibatch's loss, the gradient's norm clipped to ``max_grad_norm``."""
        self.policy.optimizer.zero_grad()
        loss.backward()  # type: ignore[no-untyped-call]
        # Clip grad norm
        th.nn.utils.clip_grad_norm_(self.policy.parameters(), self.max_grad_norm)
        self.policy.optimizer.step()

    def _record_train_logs(self, logs: _TrainLogs, loss: th.Tensor, settings: _UpdateSettings) -> None:
        """SB3's ``train/*`` records of one update (``loss``: the last minibatch's)."""
        explained_var = explained_variance(
            self.rollout_buffer.values.flatten(), self.rollout_buffer.returns.flatten()
        )

        # Logs
        self.logger.record("train/entropy_loss", np.mean(logs.entropy_losses))
        self.logger.record("train/policy_gradient_loss", np.mean(logs.pg_losses))
        self.logger.record("train/value_loss", np.mean(logs.value_losses))
        self.logger.record("train/approx_kl", np.mean(logs.approx_kl_divs))
        self.logger.record("train/clip_fraction", np.mean(logs.clip_fractions))
        self.logger.record("train/loss", loss.item())
        self.logger.record("train/explained_variance", explained_var)
        if hasattr(self.policy, "log_std"):
            self.logger.record("train/std", th.exp(self.policy.log_std).mean().item())

        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
        self.logger.record("train/clip_range", settings.clip_range)
        if self.clip_range_vf is not None:
            self.logger.record("train/clip_range_vf", settings.clip_range_vf)
