"""SB3 off-policy algorithms that train with prioritized experience replay.

Each class is the SB3 (or sb3-contrib) algorithm with one mixin, :class:`PrioritizedReplayMixin`, and a
``train()`` copied from upstream with four marked changes (``# PER:``): β is annealed from training
progress, the TD target and current estimates come from :mod:`plr_gym.replay.td_error` (upstream's
code, moved there so that :class:`~plr_gym.OffPolicyPLRCallback` uses the same definition), the
per-sample loss is multiplied by the importance weights, and ``|TD error|``
(:func:`~plr_gym.replay.td_error.absolute_td_error`) is written back with ``update_priorities``.
Supported upstream versions: :data:`SUPPORTED_SB3`; the test suite checks :data:`UPSTREAM_TRAIN_SHA256`
against the installed upstream ``train()`` sources.
"""

from __future__ import annotations

import warnings
from typing import Callable, Union

import numpy as np
import stable_baselines3
import torch as th
from gymnasium import spaces
from stable_baselines3 import DQN, SAC, TD3
from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm
from stable_baselines3.common.utils import polyak_update
from torch.nn import functional as F

from plr_gym.replay.buffer_base import _PrioritizedBufferBase
from plr_gym.replay.buffers import (
    PrioritizedDictReplayBuffer,
    PrioritizedDictReplayBufferSamples,
    PrioritizedReplayBuffer,
    PrioritizedReplayBufferSamples,
)
from plr_gym.replay.td_error import (
    Discount,
    absolute_td_error,
    dqn_td_terms,
    qrdqn_td_terms,
    sac_td_terms,
    td3_td_terms,
)

try:
    from sb3_contrib import QRDQN
    from sb3_contrib.common.utils import quantile_huber_loss

    _HAS_SB3_CONTRIB = True
except ImportError:  # pragma: no cover - sb3-contrib is optional
    _HAS_SB3_CONTRIB = False

__all__ = ["PERDQN", "PERSAC", "PERTD3", "SUPPORTED_SB3", "UPSTREAM_TRAIN_SHA256", "PrioritizedReplayMixin"]

#: SB3 versions whose ``train()`` the overrides below mirror (major.minor): upstream's ``train()`` sources
#: hash to :data:`UPSTREAM_TRAIN_SHA256` in every release from 2.7.0 (n-step ``discounts``, which the
#: copies consume, and the ``n_steps`` argument the mixin forwards) to 2.9.2. pyproject.toml pins
#: ``stable-baselines3>=2.7,<2.10`` to match; add a minor here only after checking its ``train()``.
SUPPORTED_SB3 = ("2.7", "2.8", "2.9")
#: sha256 of ``inspect.getsource(cls.train)`` for the upstream methods copied here (SB3 / sb3-contrib
#: 2.7.0 to 2.9.2: the same source in each).
UPSTREAM_TRAIN_SHA256 = {
    "stable_baselines3.DQN": "696507cb4053336a892a34781e07fc6884c8d43673ea5cc7cb463f64e086c17e",
    "stable_baselines3.SAC": "0ac7abe1c18ba7fe1b8a5bbf2b301b6fff4f4573aa02c4342187a953600ce50c",
    "stable_baselines3.TD3": "4f3638f813b0efba78224a5bf37c407f045c868efa60fcbefc717c02b5ddbc78",
    "sb3_contrib.QRDQN": "a6f745272c74831864f8eeeb5b0d5de31c97d168e04d2a29c846ca2b568cfa41",
}

#: A batch of a prioritized buffer, as the steps of the ``train()`` methods below take it.
Batch = Union[PrioritizedReplayBufferSamples, PrioritizedDictReplayBufferSamples]


def warn_if_sb3_unsupported(owner: str, tests: str) -> None:
    """Warn (``UserWarning``) when the installed SB3 is not one of :data:`SUPPORTED_SB3`, whose ``train()``
    the copy in ``owner`` mirrors; ``tests`` names the test file that compares the source hashes."""
    version = ".".join(stable_baselines3.__version__.split(".")[:2])
    if version not in SUPPORTED_SB3:
        warnings.warn(
            f"{owner}.train() mirrors SB3 {'/'.join(SUPPORTED_SB3)}'s train(); the installed SB3 is "
            f"{stable_baselines3.__version__}. Check the upstream train() for changes ({tests} compares "
            "source hashes).",
            UserWarning,
            stacklevel=3,
        )


class PrioritizedReplayMixin(OffPolicyAlgorithm):
    """
    Sets up a prioritized buffer for an SB3 off-policy algorithm and gives its ``train()`` access to it.

    - ``replay_buffer_class`` defaults to :class:`~plr_gym.replay.PrioritizedReplayBuffer` (or the Dict
      variant); other buffer classes are refused with a ``TypeError``. Pass buffer options through
      ``replay_buffer_kwargs``, e.g. ``{"prioritization": "rank"}``.
    - The algorithm's ``n_steps`` argument is forwarded to the buffer, which computes n-step
      returns itself, together with ``gamma``; a buffer whose ``gamma`` differs is refused.
    - Each ``train()`` call anneals the buffer's β from its initial value to 1 with the training
      progress ``1 - progress_remaining``.

    Use it first in the bases: ``class PERAlgo(PrioritizedReplayMixin, Algo)``, then override
    ``train()`` as the classes in this module do.

    Example:
        >>> from stable_baselines3 import DQN
        >>> class MyPERDQN(PrioritizedReplayMixin, DQN):
        ...     pass  # a real subclass also overrides train() to use weights and update priorities
        >>> type(MyPERDQN("MlpPolicy", "CartPole-v1", buffer_size=500).replay_buffer).__name__
        'PrioritizedReplayBuffer'
    """

    def _setup_model(self) -> None:
        warn_if_sb3_unsupported(type(self).__name__, "tests/test_per_algorithms.py")
        if self.replay_buffer_class is None:
            if isinstance(self.observation_space, spaces.Dict):
                self.replay_buffer_class = PrioritizedDictReplayBuffer
            else:
                self.replay_buffer_class = PrioritizedReplayBuffer
        if not issubclass(self.replay_buffer_class, _PrioritizedBufferBase):
            raise TypeError(
                f"{type(self).__name__} needs a prioritized replay buffer (PrioritizedReplayBuffer or "
                f"PrioritizedDictReplayBuffer), got replay_buffer_class={self.replay_buffer_class.__name__}"
            )
        # a copy: the caller's dict (e.g. reused across a sweep) must not keep this model's settings
        if isinstance(self.n_steps, bool) or not isinstance(self.n_steps, int) or self.n_steps < 1:
            raise ValueError(f"n_steps must be an int >= 1, got {self.n_steps!r}")
        kwargs = dict(self.replay_buffer_kwargs)
        self.replay_buffer_kwargs = kwargs
        if self.n_steps > 1:
            if kwargs.get("n_steps", self.n_steps) != self.n_steps:
                raise ValueError(
                    f"n_steps={self.n_steps} conflicts with replay_buffer_kwargs "
                    f"n_steps={kwargs['n_steps']}; "
                    "pass n_steps once (either is forwarded to the prioritized buffer)"
                )
            kwargs.setdefault("n_steps", self.n_steps)
        if kwargs.get("n_steps", 1) > 1:
            kwargs.setdefault("gamma", self.gamma)
            if kwargs["gamma"] != self.gamma:
                raise ValueError(
                    f"replay_buffer_kwargs gamma={kwargs['gamma']} differs from the algorithm's "
                    f"gamma={self.gamma}; the n-step returns must use the algorithm's discount"
                )
        # The buffer computes n-step returns; hide n_steps from SB3 so it doesn't warn they are ignored.
        n_steps, self.n_steps = self.n_steps, 1
        try:
            super()._setup_model()
        finally:
            self.n_steps = n_steps

    def _prioritized_replay_buffer(self) -> _PrioritizedBufferBase:
        """The replay buffer, with β annealed to the current training progress."""
        buffer = self.replay_buffer
        if not isinstance(buffer, _PrioritizedBufferBase):
            raise TypeError(
                f"{type(self).__name__} needs a prioritized replay buffer, got {type(buffer).__name__} "
                "(was a plain buffer loaded with load_replay_buffer?)"
            )
        buffer.anneal_beta(min(max(1.0 - self._current_progress_remaining, 0.0), 1.0))
        return buffer


class PERDQN(PrioritizedReplayMixin, DQN):
    """
    DQN (SB3) with prioritized experience replay: the Huber loss of each sample is weighted by its
    importance weight and its ``|TD error|`` becomes its new priority. All DQN arguments apply; buffer
    options go in ``replay_buffer_kwargs`` (see :class:`~plr_gym.replay.PrioritizedReplayBuffer`).

    Example:
        >>> model = PERDQN(
        ...     "MlpPolicy", "CartPole-v1", learning_starts=32, batch_size=16, buffer_size=500, seed=0
        ... )
        >>> model = model.learn(64)
        >>> bool((model.replay_buffer.priorities[:32] != 1.0).any())  # priorities came from TD errors
        True
    """

    def train(self, gradient_steps: int, batch_size: int = 100) -> None:
        # PER: anneal beta with training progress
        replay_buffer = self._prioritized_replay_buffer()
        # Switch to train mode (this affects batch norm / dropout)
        self.policy.set_training_mode(True)
        # Update learning rate according to schedule
        self._update_learning_rate(self.policy.optimizer)

        losses = []
        for _ in range(gradient_steps):
            # Sample replay buffer
            replay_data = replay_buffer.sample(batch_size, env=self._vec_normalize_env)
            # For n-step replay, discount factor is gamma**n_steps (when no early termination)
            discounts = replay_data.discounts if replay_data.discounts is not None else self.gamma

            # PER: the TD target (no grad) and current Q-values, upstream's code moved to
            # plr_gym.replay.td_error so that OffPolicyPLRCallback scores levels with the same definition
            current_q_values, target_q_values = dqn_td_terms(self, replay_data, discounts)

            # Compute Huber loss (less sensitive to outliers)
            # PER: per-sample loss weighted by the importance weights
            loss = (
                replay_data.weights * F.smooth_l1_loss(current_q_values, target_q_values, reduction="none")
            ).mean()
            losses.append(loss.item())

            # Optimize the policy
            self.policy.optimizer.zero_grad()
            loss.backward()  # type: ignore[no-untyped-call]
            # Clip gradient norm
            th.nn.utils.clip_grad_norm_(self.policy.parameters(), self.max_grad_norm)
            self.policy.optimizer.step()

            # PER: new priorities are the absolute TD errors
            replay_buffer.update_priorities(
                replay_data.indices, absolute_td_error(current_q_values, target_q_values)
            )

        # Increase update counter
        self._n_updates += gradient_steps

        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
        self.logger.record("train/loss", np.mean(losses))


class PERSAC(PrioritizedReplayMixin, SAC):
    """
    SAC (SB3) with prioritized experience replay: each critic's squared error is weighted by the
    importance weights and the mean over critics of ``|TD error|`` becomes the new priority. The actor
    and entropy losses stay unweighted (the weights correct the critic's regression target
    distribution). Buffer options go in ``replay_buffer_kwargs``.

    Example:
        >>> model = PERSAC(
        ...     "MlpPolicy", "Pendulum-v1", learning_starts=32, batch_size=16, buffer_size=500, seed=0
        ... )
        >>> model = model.learn(48)
        >>> bool((model.replay_buffer.priorities[:32] != 1.0).any())
        True
    """

    def train(self, gradient_steps: int, batch_size: int = 64) -> None:
        # PER: anneal beta with training progress
        replay_buffer = self._prioritized_replay_buffer()
        # Switch to train mode (this affects batch norm / dropout)
        self.policy.set_training_mode(True)
        # Update optimizers learning rate
        optimizers = [self.actor.optimizer, self.critic.optimizer]
        if self.ent_coef_optimizer is not None:
            optimizers += [self.ent_coef_optimizer]

        # Update learning rate according to lr schedule
        self._update_learning_rate(optimizers)

        ent_coef_losses, ent_coefs = [], []
        actor_losses, critic_losses = [], []

        for gradient_step in range(gradient_steps):
            # Sample replay buffer
            replay_data = replay_buffer.sample(batch_size, env=self._vec_normalize_env)
            # For n-step replay, discount factor is gamma**n_steps (when no early termination)
            discounts = replay_data.discounts if replay_data.discounts is not None else self.gamma

            # We need to sample because `log_std` may have changed between two gradient steps
            if self.use_sde:
                self.actor.reset_noise()

            # Action by the current actor for the sampled state
            actions_pi, log_prob = self.actor.action_log_prob(replay_data.observations)
            log_prob = log_prob.reshape(-1, 1)

            ent_coef, ent_coef_loss = self._entropy_coefficient_step(log_prob)
            if ent_coef_loss is not None:
                ent_coef_losses.append(ent_coef_loss)
            ent_coefs.append(ent_coef.item())

            critic_losses.append(self._critic_step(replay_buffer, replay_data, discounts, ent_coef))
            actor_losses.append(self._actor_step(replay_data, actions_pi, log_prob, ent_coef))

            # Update target networks
            if gradient_step % self.target_update_interval == 0:
                polyak_update(self.critic.parameters(), self.critic_target.parameters(), self.tau)
                # Copy running stats, see GH issue #996
                polyak_update(self.batch_norm_stats, self.batch_norm_stats_target, 1.0)

        self._n_updates += gradient_steps

        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
        self.logger.record("train/ent_coef", np.mean(ent_coefs))
        self.logger.record("train/actor_loss", np.mean(actor_losses))
        self.logger.record("train/critic_loss", np.mean(critic_losses))
        if len(ent_coef_losses) > 0:
            self.logger.record("train/ent_coef_loss", np.mean(ent_coef_losses))

    def _entropy_coefficient_step(self, log_prob: th.Tensor) -> tuple[th.Tensor, float | None]:
        """The entropy coefficient of this gradient step and, when it is learned, one optimisation step
        of its loss (returned as a float; ``None`` when the coefficient is fixed)."""
        ent_coef_loss = None
        if self.ent_coef_optimizer is not None and self.log_ent_coef is not None:
            # Important: detach the variable from the graph
            # so we don't change it with other losses
            # see https://github.com/rail-berkeley/softlearning/issues/60
            ent_coef = th.exp(self.log_ent_coef.detach())
            assert isinstance(self.target_entropy, float)
            ent_coef_loss = -(self.log_ent_coef * (log_prob + self.target_entropy).detach()).mean()
        else:
            ent_coef = self.ent_coef_tensor

        if ent_coef_loss is None or self.ent_coef_optimizer is None:
            return ent_coef, None
        # Optimize entropy coefficient, also called
        # entropy temperature or alpha in the paper
        self.ent_coef_optimizer.zero_grad()
        ent_coef_loss.backward()  # type: ignore[no-untyped-call]
        self.ent_coef_optimizer.step()
        return ent_coef, ent_coef_loss.item()

    def _critic_step(
        self,
        replay_buffer: _PrioritizedBufferBase,
        replay_data: Batch,
        discounts: Discount,
        ent_coef: th.Tensor,
    ) -> float:
        """One optimisation step of the critics on a batch, whose ``|TD error|`` become its priorities;
        returns the critic loss."""
        # PER: the soft TD target (sampled next action, entropy term; no grad) and each critic's
        # Q-values, upstream's code moved to plr_gym.replay.td_error (shared with OffPolicyPLRCallback)
        current_q_values, target_q_values = sac_td_terms(
            self, replay_data, discounts, deterministic=False, ent_coef=ent_coef
        )

        # Compute critic loss
        # PER: per-sample squared errors weighted by the importance weights
        critic_loss = 0.5 * sum(
            (replay_data.weights * F.mse_loss(current_q, target_q_values, reduction="none")).mean()
            for current_q in current_q_values
        )
        assert isinstance(critic_loss, th.Tensor)  # for type checker

        # Optimize the critic
        self.critic.optimizer.zero_grad()
        critic_loss.backward()  # type: ignore[no-untyped-call]
        self.critic.optimizer.step()

        # PER: new priorities are the absolute TD errors, averaged over critics
        replay_buffer.update_priorities(
            replay_data.indices, absolute_td_error(current_q_values, target_q_values)
        )
        return critic_loss.item()

    def _actor_step(
        self,
        replay_data: Batch,
        actions_pi: th.Tensor,
        log_prob: th.Tensor,
        ent_coef: th.Tensor,
    ) -> float:
        """One optimisation step of the actor (unweighted, as upstream); returns the actor loss."""
        # Compute actor loss
        # Alternative: actor_loss = th.mean(log_prob - qf1_pi)
        # Min over all critic networks
        q_values_pi = th.cat(self.critic(replay_data.observations, actions_pi), dim=1)
        min_qf_pi, _ = th.min(q_values_pi, dim=1, keepdim=True)
        actor_loss = (ent_coef * log_prob - min_qf_pi).mean()

        # Optimize the actor
        self.actor.optimizer.zero_grad()
        actor_loss.backward()  # type: ignore[no-untyped-call]
        self.actor.optimizer.step()
        return actor_loss.item()


class PERTD3(PrioritizedReplayMixin, TD3):
    """
    TD3 (SB3) with prioritized experience replay: each critic's squared error is weighted by the
    importance weights and the mean over critics of ``|TD error|`` becomes the new priority; the
    delayed actor loss stays unweighted. Buffer options go in ``replay_buffer_kwargs``.

    Example:
        >>> model = PERTD3(
        ...     "MlpPolicy", "Pendulum-v1", learning_starts=32, batch_size=16, buffer_size=500, seed=0
        ... )
        >>> model = model.learn(48)
        >>> bool((model.replay_buffer.priorities[:32] != 1.0).any())
        True
    """

    def train(self, gradient_steps: int, batch_size: int = 100) -> None:
        # PER: anneal beta with training progress
        replay_buffer = self._prioritized_replay_buffer()
        # Switch to train mode (this affects batch norm / dropout)
        self.policy.set_training_mode(True)

        # Update learning rate according to lr schedule
        self._update_learning_rate([self.actor.optimizer, self.critic.optimizer])

        actor_losses, critic_losses = [], []
        for _ in range(gradient_steps):
            self._n_updates += 1
            # Sample replay buffer
            replay_data = replay_buffer.sample(batch_size, env=self._vec_normalize_env)
            # For n-step replay, discount factor is gamma**n_steps (when no early termination)
            discounts = replay_data.discounts if replay_data.discounts is not None else self.gamma

            critic_losses.append(self._critic_step(replay_buffer, replay_data, discounts))

            # Delayed policy updates
            if self._n_updates % self.policy_delay == 0:
                actor_losses.append(self._delayed_actor_step(replay_data))

        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
        if len(actor_losses) > 0:
            self.logger.record("train/actor_loss", np.mean(actor_losses))
        self.logger.record("train/critic_loss", np.mean(critic_losses))

    def _critic_step(
        self,
        replay_buffer: _PrioritizedBufferBase,
        replay_data: Batch,
        discounts: Discount,
    ) -> float:
        """One optimisation step of the critics on a batch, whose ``|TD error|`` become its priorities;
        returns the critic loss."""
        # PER: the TD target (clipped target-policy noise; no grad) and each critic's Q-values,
        # upstream's code moved to plr_gym.replay.td_error (shared with OffPolicyPLRCallback)
        current_q_values, target_q_values = td3_td_terms(self, replay_data, discounts, deterministic=False)

        # Compute critic loss
        # PER: per-sample squared errors weighted by the importance weights
        critic_loss = sum(
            (replay_data.weights * F.mse_loss(current_q, target_q_values, reduction="none")).mean()
            for current_q in current_q_values
        )
        assert isinstance(critic_loss, th.Tensor)

        # Optimize the critics
        self.critic.optimizer.zero_grad()
        critic_loss.backward()  # type: ignore[no-untyped-call]
        self.critic.optimizer.step()

        # PER: new priorities are the absolute TD errors, averaged over critics
        replay_buffer.update_priorities(
            replay_data.indices, absolute_td_error(current_q_values, target_q_values)
        )
        return critic_loss.item()

    def _delayed_actor_step(self, replay_data: Batch) -> float:
        """One optimisation step of the actor (unweighted, as upstream), then the target networks' soft
        update; returns the actor loss."""
        # Compute actor loss
        actor_loss = -self.critic.q1_forward(
            replay_data.observations,  # type: ignore[arg-type]
            self.actor(replay_data.observations),
        ).mean()

        # Optimize the actor
        self.actor.optimizer.zero_grad()
        actor_loss.backward()  # type: ignore[no-untyped-call]
        self.actor.optimizer.step()

        polyak_update(self.critic.parameters(), self.critic_target.parameters(), self.tau)
        polyak_update(self.actor.parameters(), self.actor_target.parameters(), self.tau)
        # Copy running stats, see GH issue #996
        polyak_update(self.critic_batch_norm_stats, self.critic_batch_norm_stats_target, 1.0)
        polyak_update(self.actor_batch_norm_stats, self.actor_batch_norm_stats_target, 1.0)
        return actor_loss.item()


if _HAS_SB3_CONTRIB:
    __all__ += ["PERQRDQN"]

    def _per_sample_quantile_loss() -> Callable[[th.Tensor, th.Tensor], th.Tensor]:
        """sb3-contrib's quantile Huber loss, one value per sample (vmapped over the batch)."""
        loss: Callable[[th.Tensor, th.Tensor], th.Tensor] = th.func.vmap(
            lambda current, target: quantile_huber_loss(current[None], target[None], sum_over_quantiles=True)
        )
        return loss

    class PERQRDQN(PrioritizedReplayMixin, QRDQN):
        """
        QR-DQN (sb3-contrib) with prioritized experience replay: the quantile Huber loss of each sample
        is weighted by its importance weight, and ``|mean(target quantiles) - mean(current quantiles)|``
        (the TD error of the Q-value) becomes its priority.

        Example:
            >>> model = PERQRDQN(
            ...     "MlpPolicy", "CartPole-v1", learning_starts=32, batch_size=16, buffer_size=500, seed=0
            ... )
            >>> model = model.learn(64)
            >>> bool((model.replay_buffer.priorities[:32] != 1.0).any())
            True
        """

        def train(self, gradient_steps: int, batch_size: int = 100) -> None:
            # PER: anneal beta with training progress
            replay_buffer = self._prioritized_replay_buffer()
            per_sample_loss = _per_sample_quantile_loss()
            # Switch to train mode (this affects batch norm / dropout)
            self.policy.set_training_mode(True)
            # Update learning rate according to schedule
            self._update_learning_rate(self.policy.optimizer)

            losses = []
            for _ in range(gradient_steps):
                # Sample replay buffer
                replay_data = replay_buffer.sample(batch_size, env=self._vec_normalize_env)
                # For n-step replay, discount factor is gamma**n_steps (when no early termination)
                discounts = replay_data.discounts if replay_data.discounts is not None else self.gamma

                # PER: the target quantiles (no grad) and current quantiles, upstream's code moved to
                # plr_gym.replay.td_error (shared with OffPolicyPLRCallback)
                current_quantiles, target_quantiles = qrdqn_td_terms(self, replay_data, discounts)

                # Compute Quantile Huber loss, summing over a quantile dimension as in the paper.
                # PER: per-sample loss weighted by the importance weights
                loss = (
                    replay_data.weights.flatten() * per_sample_loss(current_quantiles, target_quantiles)
                ).mean()
                losses.append(loss.item())

                # Optimize the policy
                self.policy.optimizer.zero_grad()
                loss.backward()  # type: ignore[no-untyped-call]
                # Clip gradient norm
                if self.max_grad_norm is not None:
                    th.nn.utils.clip_grad_norm_(self.policy.parameters(), self.max_grad_norm)
                self.policy.optimizer.step()

                # PER: new priorities are the absolute TD errors of the Q-values (quantile means)
                replay_buffer.update_priorities(
                    replay_data.indices, absolute_td_error(current_quantiles, target_quantiles)
                )

            # Increase update counter
            self._n_updates += gradient_steps

            self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
            self.logger.record("train/loss", np.mean(losses))
