"""The TD error of SB3's value-based and actor-critic algorithms: one definition, two users.

:class:`~plr_gym.replay.PERDQN`, ``PERQRDQN``, ``PERSAC`` and ``PERTD3`` train on the terms returned here
and store their ``|TD error|`` as priorities; :class:`~plr_gym.OffPolicyPLRCallback` scores levels with
the same functions (through :func:`td_errors`, ``deterministic=True``). Notation: ``r`` the (n-step
discounted) reward, ``d`` 1 where the episode terminated (time-limit truncations excluded), ``γ'`` the
discount to bootstrap with (the algorithm's ``gamma``, or ``gamma ** k`` for an n-step sample of ``k``
steps), ``Q`` the online critic(s), ``Q_target`` the target critic(s).

- DQN: ``target = r + γ'(1 − d)·max_a' Q_target(s', a')``, ``current = Q(s, a)``.
- QR-DQN: per quantile ``j``, ``target_j = r + γ'(1 − d)·θ_target_j(s', a*)`` with
  ``a* = argmax_a' mean_j θ_target_j(s', a')``, ``current_j = θ_j(s, a)``.
- SAC: ``target = r + γ'(1 − d)·(min_k Q_target_k(s', a') − α·log π(a'|s'))``, ``current_k = Q_k(s, a)``,
  with ``a' ~ π(·|s')`` sampled; ``deterministic=True`` takes the actor's mean action ``a' = μ(s')``
  and drops the entropy term, so the value does not depend on random draws.
- TD3 / DDPG: ``target = r + γ'(1 − d)·min_k Q_target_k(s', a')`` with
  ``a' = clip(μ_target(s') + clip(ε, −c, c), −1, 1)``, ``ε ~ N(0, σ²)`` (target policy smoothing);
  ``deterministic=True`` takes ``a' = μ_target(s')`` without noise.

:func:`absolute_td_error` reduces the terms to one value per sample,
``|δ| = mean_k |mean_j target_j − mean_j current_k,j|``: the mean over critics ``k`` of the absolute
error of the Q-value (for QR-DQN the Q-value is the mean of the quantiles ``j``; other algorithms have one
"quantile"). This is PER's priority and the callback's per-step score.

PER's training uses the sampled (non-deterministic) terms, exactly those of its loss; the level scores
use ``deterministic=True`` and one-step targets (``γ' = gamma``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, Union

import torch as th
from stable_baselines3 import DQN, SAC, TD3
from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm
from stable_baselines3.common.type_aliases import TensorDict

_QRDQN: type[OffPolicyAlgorithm] | None
try:
    from sb3_contrib import QRDQN as _QRDQN
except ImportError:  # pragma: no cover - sb3-contrib is optional
    _QRDQN = None

__all__ = [
    "Transitions",
    "absolute_td_error",
    "dqn_td_terms",
    "qrdqn_td_terms",
    "sac_td_terms",
    "td3_td_terms",
    "td_errors",
]

Discount = Union[float, th.Tensor]


class Transitions(Protocol):
    """What the TD error reads from a batch: SB3's ``ReplayBufferSamples``, plr_gym's prioritized
    samples and :class:`plr_gym.offpolicy.TransitionBatch` all have these fields."""

    @property
    def observations(self) -> th.Tensor | TensorDict: ...  # (batch, *obs_shape)

    @property
    def actions(self) -> th.Tensor: ...  # (batch, action_dim)

    @property
    def next_observations(self) -> th.Tensor | TensorDict: ...  # (batch, *obs_shape)

    @property
    def rewards(self) -> th.Tensor: ...  # (batch, 1)

    @property
    def dones(self) -> th.Tensor: ...  # (batch, 1), terminations only


def dqn_td_terms(model: DQN, batch: Transitions, discounts: Discount) -> tuple[th.Tensor, th.Tensor]:
    """
    DQN's ``(current, target)``: ``Q(s, a)`` (with gradient) and ``r + γ'(1 − d)·max_a' Q_target(s', a')``
    (without), each of shape ``(batch, 1)``.

    :param model: a DQN (or subclass)
    :param batch: the transitions
    :param discounts: ``γ'``, a float or a ``(batch, 1)`` tensor
    """
    with th.no_grad():
        # Compute the next Q-values using the target network
        next_q_values = model.q_net_target(batch.next_observations)
        # Follow greedy policy: use the one with the highest value
        next_q_values, _ = next_q_values.max(dim=1)
        # Avoid potential broadcast issue
        next_q_values = next_q_values.reshape(-1, 1)
        # 1-step TD target
        target_q_values = batch.rewards + (1 - batch.dones) * discounts * next_q_values
    # Get current Q-values estimates
    current_q_values = model.q_net(batch.observations)
    # Retrieve the q-values for the actions from the replay buffer
    current_q_values = th.gather(current_q_values, dim=1, index=batch.actions.long())
    return current_q_values, target_q_values


def qrdqn_td_terms(model: Any, batch: Transitions, discounts: Discount) -> tuple[th.Tensor, th.Tensor]:
    """
    QR-DQN's ``(current, target)`` quantiles, each of shape ``(batch, n_quantiles)``: ``θ_j(s, a)`` (with
    gradient) and ``r + γ'(1 − d)·θ_target_j(s', a*)``, ``a*`` greedy for the mean of the quantiles.

    :param model: an sb3-contrib QRDQN (or subclass)
    :param batch: the transitions
    :param discounts: ``γ'``, a float or a ``(batch, 1)`` tensor
    """
    n_quantiles = model.n_quantiles
    batch_size = batch.actions.shape[0]
    with th.no_grad():
        # Compute the quantiles of next observation
        next_quantiles = model.quantile_net_target(batch.next_observations)
        # Compute the greedy actions which maximize the next Q values
        next_greedy_actions = next_quantiles.mean(dim=1, keepdim=True).argmax(dim=2, keepdim=True)
        # Make "n_quantiles" copies of actions, and reshape to (batch_size, n_quantiles, 1)
        next_greedy_actions = next_greedy_actions.expand(batch_size, n_quantiles, 1)
        # Follow greedy policy: use the one with the highest Q values
        next_quantiles = next_quantiles.gather(dim=2, index=next_greedy_actions).squeeze(dim=2)
        # 1-step TD target
        target_quantiles = batch.rewards + (1 - batch.dones) * discounts * next_quantiles
    # Get current quantile estimates
    current_quantiles = model.quantile_net(batch.observations)
    # Make "n_quantiles" copies of actions, and reshape to (batch_size, n_quantiles, 1).
    actions = batch.actions[..., None].long().expand(batch_size, n_quantiles, 1)
    # Retrieve the quantiles for the actions from the replay buffer
    current_quantiles = th.gather(current_quantiles, dim=2, index=actions).squeeze(dim=2)
    return current_quantiles, target_quantiles


def sac_td_terms(
    model: SAC,
    batch: Transitions,
    discounts: Discount,
    *,
    deterministic: bool,
    ent_coef: th.Tensor | None = None,
) -> tuple[tuple[th.Tensor, ...], th.Tensor]:
    """
    SAC's ``(current, target)``: one ``Q_k(s, a)`` per critic (with gradient) and the soft target (without),
    each of shape ``(batch, 1)``.

    :param model: a SAC (or subclass)
    :param batch: the transitions
    :param discounts: ``γ'``, a float or a ``(batch, 1)`` tensor
    :param deterministic: ``True``: the actor's mean action and no entropy term; ``False``: a sampled
        action and the entropy term ``−α·log π(a'|s')`` (as SAC's training)
    :param ent_coef: ``α`` for ``deterministic=False``; ``None`` reads the model's current coefficient
    """
    with th.no_grad():
        if deterministic:
            next_actions = model.actor(batch.next_observations, deterministic=True)
        else:
            # Select action according to policy
            next_actions, next_log_prob = model.actor.action_log_prob(batch.next_observations)
        # Compute the next Q values: min over all critics targets
        next_q_values = th.cat(model.critic_target(batch.next_observations, next_actions), dim=1)
        next_q_values, _ = th.min(next_q_values, dim=1, keepdim=True)
        if not deterministic:
            if ent_coef is None:
                ent_coef = _sac_ent_coef(model)
            # add entropy term
            next_q_values = next_q_values - ent_coef * next_log_prob.reshape(-1, 1)
        # td error + entropy term
        target_q_values = batch.rewards + (1 - batch.dones) * discounts * next_q_values
    # Get current Q-values estimates for each critic network
    # using action from the replay buffer
    current_q_values = model.critic(batch.observations, batch.actions)
    return current_q_values, target_q_values


def td3_td_terms(
    model: TD3, batch: Transitions, discounts: Discount, *, deterministic: bool
) -> tuple[tuple[th.Tensor, ...], th.Tensor]:
    """
    TD3's (and DDPG's) ``(current, target)``: one ``Q_k(s, a)`` per critic (with gradient) and the target
    (without), each of shape ``(batch, 1)``.

    :param model: a TD3 or DDPG (or subclass)
    :param batch: the transitions
    :param discounts: ``γ'``, a float or a ``(batch, 1)`` tensor
    :param deterministic: ``True``: ``μ_target(s')`` without noise; ``False``: with TD3's clipped target
        policy smoothing noise (as TD3's training)
    """
    with th.no_grad():
        if deterministic:
            next_actions = model.actor_target(batch.next_observations)
        else:
            # Select action according to policy and add clipped noise
            noise = batch.actions.clone().data.normal_(0, model.target_policy_noise)
            noise = noise.clamp(-model.target_noise_clip, model.target_noise_clip)
            next_actions = (model.actor_target(batch.next_observations) + noise).clamp(-1, 1)
        # Compute the next Q-values: min over all critics targets
        next_q_values = th.cat(model.critic_target(batch.next_observations, next_actions), dim=1)
        next_q_values, _ = th.min(next_q_values, dim=1, keepdim=True)
        target_q_values = batch.rewards + (1 - batch.dones) * discounts * next_q_values
    # Get current Q-values estimates for each critic network
    current_q_values = model.critic(batch.observations, batch.actions)
    return current_q_values, target_q_values


def absolute_td_error(current: th.Tensor | Sequence[th.Tensor], target: th.Tensor) -> th.Tensor:
    """
    ``|δ| = mean_k |mean_j target_j − mean_j current_k,j|``, detached, shape ``(batch,)``.

    :param current: one tensor (DQN ``(batch, 1)``, QR-DQN quantiles ``(batch, n_quantiles)``) or one per
        critic (SAC, TD3)
    :param target: shape ``(batch, 1)`` or ``(batch, n_quantiles)``

    Example:
        >>> critics = (th.tensor([[1.0], [2.0]]), th.tensor([[3.0], [2.0]]))
        >>> absolute_td_error(critics, th.tensor([[2.0], [0.0]])).tolist()
        [1.0, 2.0]
    """
    currents = (current,) if isinstance(current, th.Tensor) else tuple(current)
    target_value = target.mean(dim=1)
    errors = th.stack([(target_value - q.mean(dim=1)).abs() for q in currents]).mean(dim=0)
    return errors.detach()


def td_errors(
    model: OffPolicyAlgorithm,
    batch: Transitions,
    discounts: Discount | None = None,
    *,
    deterministic: bool = True,
) -> th.Tensor:
    """
    ``|TD error|`` of each transition under ``model``'s current critic(s), shape ``(batch,)``: the terms of
    the model's algorithm (:func:`dqn_td_terms`, :func:`qrdqn_td_terms`, :func:`sac_td_terms`,
    :func:`td3_td_terms`) reduced by :func:`absolute_td_error`. Call it under ``th.no_grad()``.

    :param model: a DQN, QR-DQN, SAC, TD3 or DDPG (or subclass, e.g. the PER classes)
    :param batch: the transitions
    :param discounts: ``γ'``; ``None`` is the model's ``gamma`` (one-step targets)
    :param deterministic: SAC/TD3: mean action and no noise or entropy term (see the module doc)
    :raises TypeError: for other algorithms
    """
    supported: tuple[type, ...] = (DQN, SAC, TD3) + (() if _QRDQN is None else (_QRDQN,))
    if not isinstance(model, supported):
        raise TypeError(
            f"TD errors are implemented for DQN, QRDQN, SAC, TD3 (and subclasses such as PERDQN, PERSAC, "
            f"PERTD3, PERQRDQN, DDPG), got {type(model).__name__}; pass td_error_fn= to "
            "OffPolicyPLRCallback for other algorithms"
        )
    gamma: Discount = float(model.gamma) if discounts is None else discounts
    if isinstance(model, DQN):
        return absolute_td_error(*dqn_td_terms(model, batch, gamma))
    if _QRDQN is not None and isinstance(model, _QRDQN):
        return absolute_td_error(*qrdqn_td_terms(model, batch, gamma))
    if isinstance(model, SAC):
        return absolute_td_error(*sac_td_terms(model, batch, gamma, deterministic=deterministic))
    assert isinstance(model, TD3)
    return absolute_td_error(*td3_td_terms(model, batch, gamma, deterministic=deterministic))


def _sac_ent_coef(model: SAC) -> th.Tensor:
    """SAC's current entropy coefficient ``α`` (learned or fixed), detached."""
    if model.ent_coef_optimizer is not None and model.log_ent_coef is not None:
        return th.exp(model.log_ent_coef.detach())
    return model.ent_coef_tensor
