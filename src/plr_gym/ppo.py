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
by the test suite) with three marked changes (``# PLR:``).
``benchmarks/reference_equivalence.py`` runs one whole update of this class and of level-replay's code
from the same weights and data and prints the differences.

Example:
    >>> import torch
    >>> from plr_gym.ppo import clipped_max_value_loss
    >>> values, old, returns = torch.tensor([1.5, 0.0]), torch.tensor([1.0, 0.0]), torch.tensor([2.0, 1.0])
    >>> round(float(clipped_max_value_loss(values, old, returns, 0.2)), 6)  # 0.5 * mean(0.64, 1)
    0.41
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3 import PPO
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
        """
        # Switch to train mode (this affects batch norm / dropout)
        self.policy.set_training_mode(True)
        # Update optimizer learning rate
        self._update_learning_rate(self.policy.optimizer)
        # Compute current clip range
        clip_range = self.clip_range(self._current_progress_remaining)  # type: ignore[operator]
        # Optional: clip range for the value function
        if self.clip_range_vf is not None:
            clip_range_vf = self.clip_range_vf(self._current_progress_remaining)  # type: ignore[operator]

        # PLR: level-replay normalises the advantages once, with the whole rollout's mean and std
        if self.advantage_normalization == "rollout":
            adv_mean, adv_std = rollout_advantage_stats(self.rollout_buffer.advantages)
        # PLR: level-replay clips the value with PPO's clip range unless a value clip range is given
        value_clip = clip_range_vf if self.clip_range_vf is not None else clip_range

        entropy_losses = []
        pg_losses, value_losses = [], []
        clip_fractions = []

        continue_training = True
        # train for n_epochs epochs
        for epoch in range(self.n_epochs):
            approx_kl_divs = []
            # Do a complete pass on the rollout buffer
            for rollout_data in self.rollout_buffer.get(self.batch_size):
                actions = rollout_data.actions
                if isinstance(self.action_space, spaces.Discrete):
                    # Convert discrete action from float to long
                    actions = rollout_data.actions.long().flatten()

                values, log_prob, entropy = self.policy.evaluate_actions(rollout_data.observations, actions)
                values = values.flatten()
                # Normalize advantage
                advantages = rollout_data.advantages
                # PLR: per rollout (level-replay) or per minibatch (SB3)
                if self.advantage_normalization == "rollout":
                    advantages = (advantages - adv_mean) / (adv_std + ADVANTAGE_EPS["rollout"])
                # Normalization does not make sense if mini batchsize == 1, see GH issue #325
                elif self.normalize_advantage and len(advantages) > 1:
                    advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)

                # ratio between old and new policy, should be one at the first iteration
                ratio = th.exp(log_prob - rollout_data.old_log_prob)

                # clipped surrogate loss
                policy_loss_1 = advantages * ratio
                policy_loss_2 = advantages * th.clamp(ratio, 1 - clip_range, 1 + clip_range)
                policy_loss = -th.min(policy_loss_1, policy_loss_2).mean()

                # Logging
                pg_losses.append(policy_loss.item())
                clip_fraction = th.mean((th.abs(ratio - 1) > clip_range).float()).item()
                clip_fractions.append(clip_fraction)

                # PLR: level-replay's value loss, 0.5 * max of the clipped and unclipped squared errors
                if self.value_loss == "clipped_max":
                    value_loss = clipped_max_value_loss(
                        values, rollout_data.old_values, rollout_data.returns, value_clip
                    )
                else:
                    if self.clip_range_vf is None:
                        # No clipping
                        values_pred = values
                    else:
                        # Clip the difference between old and new value
                        # NOTE: this depends on the reward scaling
                        values_pred = rollout_data.old_values + th.clamp(
                            values - rollout_data.old_values, -clip_range_vf, clip_range_vf
                        )
                    # Value loss using the TD(gae_lambda) target
                    value_loss = F.mse_loss(rollout_data.returns, values_pred)
                value_losses.append(value_loss.item())

                # Entropy loss favor exploration
                if entropy is None:
                    # Approximate entropy when no analytical form
                    entropy_loss = -th.mean(-log_prob)
                else:
                    entropy_loss = -th.mean(entropy)

                entropy_losses.append(entropy_loss.item())

                loss = policy_loss + self.ent_coef * entropy_loss + self.vf_coef * value_loss

                # Calculate approximate form of reverse KL Divergence for early stopping
                # see issue #417: https://github.com/DLR-RM/stable-baselines3/issues/417
                # and discussion in PR #419: https://github.com/DLR-RM/stable-baselines3/pull/419
                # and Schulman blog: http://joschu.net/blog/kl-approx.html
                with th.no_grad():
                    log_ratio = log_prob - rollout_data.old_log_prob
                    approx_kl_div = th.mean((th.exp(log_ratio) - 1) - log_ratio).cpu().numpy()
                    approx_kl_divs.append(approx_kl_div)

                if self.target_kl is not None and approx_kl_div > 1.5 * self.target_kl:
                    continue_training = False
                    if self.verbose >= 1:
                        print(f"Early stopping at step {epoch} due to reaching max kl: {approx_kl_div:.2f}")
                    break

                # Optimization step
                self.policy.optimizer.zero_grad()
                loss.backward()  # type: ignore[no-untyped-call]
                # Clip grad norm
                th.nn.utils.clip_grad_norm_(self.policy.parameters(), self.max_grad_norm)
                self.policy.optimizer.step()

            self._n_updates += 1
            if not continue_training:
                break

        explained_var = explained_variance(
            self.rollout_buffer.values.flatten(), self.rollout_buffer.returns.flatten()
        )

        # Logs
        self.logger.record("train/entropy_loss", np.mean(entropy_losses))
        self.logger.record("train/policy_gradient_loss", np.mean(pg_losses))
        self.logger.record("train/value_loss", np.mean(value_losses))
        self.logger.record("train/approx_kl", np.mean(approx_kl_divs))
        self.logger.record("train/clip_fraction", np.mean(clip_fractions))
        self.logger.record("train/loss", loss.item())
        self.logger.record("train/explained_variance", explained_var)
        if hasattr(self.policy, "log_std"):
            self.logger.record("train/std", th.exp(self.policy.log_std).mean().item())

        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
        self.logger.record("train/clip_range", clip_range)
        if self.clip_range_vf is not None:
            self.logger.record("train/clip_range_vf", clip_range_vf)
