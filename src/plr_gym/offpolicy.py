"""Prioritized Level Replay for Stable-Baselines3's off-policy algorithms (DQN, QR-DQN, SAC, TD3).

Off-policy algorithms have no rollout buffer with values and advantages, so the on-policy
:class:`~plr_gym.PLRCallback` cannot score their episodes. :class:`OffPolicyPLRCallback` scores each
completed episode by its mean one-step TD error under the algorithm's own critic, read back from the
replay buffer, and reports it to the sampler of the :class:`~plr_gym.PrioritizedLevelReplay` wrapper.

Design
------
- **Where the transitions are.** SB3's ``collect_rollouts`` calls ``callback.on_step()`` right after
  ``env.step`` and *before* storing the step, so at every call ``replay_buffer.pos`` is the row this
  step's transitions (one per env) will occupy. The callback keeps, per env, the row and the global
  step count at which the env's current episode began: a few numpy operations per step, no Python
  loop over envs (only a loop over the envs whose episode just ended, to queue those episodes).
- **When episodes are scored.** Completed episodes are queued and scored in ``on_rollout_end`` (after
  every step of the rollout is stored, before the gradient steps that follow it): all steps of all
  episodes that completed in the rollout are gathered from the buffer with fancy indexing and their
  TD errors computed in one batched no-grad pass (chunks of ``batch_size``), then averaged per episode
  with ``np.bincount`` and reported with ``sampler.update_batch(levels, scores)``.
- **Overwritten steps.** Rows are contiguous per step, so a step taken ``g`` steps ago is still in the
  buffer iff ``g < buffer_size``. An episode longer than the buffer, or partly overwritten before its
  rollout ended, is scored on the steps that are still there (its most recent ones); an episode with
  none left is not reported. ``plr/steps_overwritten`` counts the steps that could not be scored.
- **Consistency checks.** If the buffer's ``pos`` does not advance by exactly one row per step
  (someone else added to or reset the buffer), tracking restarts and open episodes are dropped, with a
  warning. With a :class:`~plr_gym.replay.PrioritizedReplayBuffer` (which stores each transition's
  level), every gathered step's level is checked against the episode's level.
- **Episodes already running** when tracking starts (``learn(..., reset_num_timesteps=False)`` with a
  new callback) are not scored: their first steps were never seen.

TD error: one definition, :mod:`plr_gym.replay.td_error`, shared with the PER algorithms' priorities
(``γ`` = the algorithm's ``gamma``, one step regardless of a buffer's ``n_steps``; ``d`` = terminated,
i.e. ``done`` and not a time-limit truncation; observations and rewards normalised by the algorithm's
``VecNormalize`` as in training; ``deterministic=True``):

- DQN (and ``PERDQN``): ``|r + γ(1−d)·max_a' Q_target(s', a') − Q(s, a)|``.
- QR-DQN: the same with ``Q`` = mean of the quantiles.
- SAC: ``mean_k |r + γ(1−d)·min_j Q_target_j(s', μ(s')) − Q_k(s, a)|`` with ``μ`` the actor's
  deterministic (mean) action and no entropy bonus, so a score does not depend on random draws.
- TD3 / DDPG: the same with ``μ = actor_target`` without target-policy smoothing noise.

For SAC/TD3 this is the PER priority of :class:`~plr_gym.replay.PERSAC`/``PERTD3`` (mean over critics of
``|TD error|``, same function) without the random parts (``deterministic=True``); for DQN and QR-DQN it
is the PER priority itself on one-step transitions. Other algorithms can pass ``td_error_fn``.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, NamedTuple

import numpy as np
import torch as th
from numpy.typing import NDArray
from stable_baselines3 import DQN, SAC, TD3
from stable_baselines3.common.buffers import ReplayBuffer
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm
from stable_baselines3.common.type_aliases import TensorDict

from plr_gym.callbacks.plr import _check_total_timesteps, find_plr_wrapper, report_progress
from plr_gym.replay.td_error import _QRDQN, td_errors
from plr_gym.scoring import STRATEGY_SPECS

__all__ = [
    "OFF_POLICY_STRATEGIES",
    "OffPolicyPLRCallback",
    "TransitionBatch",
    "gather_transitions",
    "one_step_td_errors",
]

#: Sampler strategies the off-policy path accepts: TD-error scoring, or none at all.
OFF_POLICY_STRATEGIES = tuple(name for name, spec in STRATEGY_SPECS.items() if spec.off_policy)


class TransitionBatch(NamedTuple):
    """One-step transitions gathered from a replay buffer, as tensors on the model's device.

    :param observations: ``(batch, *obs_shape)`` (a dict of such for ``Dict`` spaces)
    :param actions: ``(batch, action_dim)``, as stored in the buffer (scaled to [-1, 1] for Box actions)
    :param next_observations: ``(batch, *obs_shape)``
    :param rewards: ``(batch, 1)``
    :param dones: ``(batch, 1)``, 1 where the episode terminated (time-limit truncations excluded)
    """

    observations: th.Tensor | TensorDict
    actions: th.Tensor
    next_observations: th.Tensor | TensorDict
    rewards: th.Tensor
    dones: th.Tensor


TDErrorFn = Callable[[OffPolicyAlgorithm, TransitionBatch], th.Tensor]


def one_step_td_errors(model: OffPolicyAlgorithm, batch: TransitionBatch) -> th.Tensor:
    """``|one-step TD error|`` of each transition under ``model``'s current critic (see the module doc):
    :func:`plr_gym.replay.td_error.td_errors` with ``γ`` = the model's ``gamma`` and
    ``deterministic=True``, the definition PER's priorities use too.

    Call it under ``th.no_grad()``.

    :param model: a DQN, QR-DQN, SAC or TD3 (or subclass, e.g. the PER classes)
    :param batch: the transitions
    :return: shape ``(batch,)``
    :raises TypeError: for other algorithms
    """
    return td_errors(model, batch, float(model.gamma), deterministic=True)


def _take(arr: Any, rows: NDArray[np.int64], envs: NDArray[np.int64]) -> Any:
    if isinstance(arr, dict):
        return {key: value[rows, envs] for key, value in arr.items()}
    return arr[rows, envs]


def gather_transitions(
    buffer: ReplayBuffer, rows: NDArray[np.int64], envs: NDArray[np.int64], vec_normalize_env: Any = None
) -> TransitionBatch:
    """Transitions at ``(rows, envs)`` of an SB3 replay buffer, normalised as SB3's ``sample`` does.

    :param buffer: an SB3 ``ReplayBuffer``/``DictReplayBuffer`` (or a prioritized one)
    :param rows: buffer positions, shape ``(batch,)``
    :param envs: env indices, shape ``(batch,)``
    :param vec_normalize_env: the algorithm's ``_vec_normalize_env`` (or ``None``)
    """
    if getattr(buffer, "optimize_memory_usage", False):
        next_obs = _take(buffer.observations, (rows + 1) % buffer.buffer_size, envs)
    else:
        next_obs = _take(buffer.next_observations, rows, envs)
    obs = buffer._normalize_obs(_take(buffer.observations, rows, envs), vec_normalize_env)
    next_obs = buffer._normalize_obs(next_obs, vec_normalize_env)
    rewards = buffer._normalize_reward(buffer.rewards[rows, envs].reshape(-1, 1), vec_normalize_env)
    dones = buffer.dones[rows, envs] * (1.0 - buffer.timeouts[rows, envs])

    def tensor(x: Any) -> Any:
        if isinstance(x, dict):
            return {key: buffer.to_torch(value) for key, value in x.items()}
        return buffer.to_torch(x)

    return TransitionBatch(
        observations=tensor(obs),
        actions=buffer.to_torch(buffer.actions[rows, envs]),
        next_observations=tensor(next_obs),
        rewards=buffer.to_torch(np.asarray(rewards, dtype=np.float32)),
        dones=buffer.to_torch(dones.reshape(-1, 1).astype(np.float32)),
    )


class OffPolicyPLRCallback(BaseCallback):
    """Prioritized Level Replay for off-policy algorithms: scores every completed episode by its mean
    ``|one-step TD error|`` under the algorithm's critic and reports it to the PLR sampler.

    Use it with an env containing :class:`~plr_gym.PrioritizedLevelReplay` whose sampler has
    ``strategy="one_step_td_error"`` (``"random"``/``"sequential"`` need no scores: the callback then
    does nothing). Works with PERDQN, PERQRDQN, PERSAC, PERTD3 and plain SB3 DQN, SAC, TD3, DDPG,
    sb3-contrib QRDQN, with any of their replay buffers. See :mod:`plr_gym.offpolicy` for the design
    (buffer positions tracked per env, one batched no-grad pass per rollout, overwritten steps).

    Logged under ``plr/``: ``episodes_scored``, ``steps_overwritten``, ``num_seen``, ``score_mean``,
    ``score_max``.

    :param td_error_fn: ``fn(model, batch) -> |TD error|`` tensor of shape ``(batch,)`` (called under
        ``no_grad``); default :func:`one_step_td_errors`.
    :param batch_size: transitions per forward pass.
    :param verbose: verbosity level.
    :param total_timesteps: the run's whole budget in env steps, which the level source's schedules follow
        (``LevelSampler(temperature_end=...)``; see :class:`~plr_gym.PLRCallback`). Default: the budget
        of the current ``learn()`` call.

    Example:
        >>> from minigrid.wrappers import FlatObsWrapper
        >>> from stable_baselines3.common.env_util import make_vec_env
        >>> from plr_gym import LevelWrapper, PrioritizedLevelReplay
        >>> from plr_gym.replay import PERDQN
        >>> venv = make_vec_env("MiniGrid-Empty-5x5-v0", n_envs=2,
        ...                     wrapper_class=lambda e: LevelWrapper(FlatObsWrapper(e)))
        >>> venv = PrioritizedLevelReplay(venv, levels=range(10), strategy="one_step_td_error", seed=0)
        >>> model = PERDQN("MlpPolicy", venv, learning_starts=50, buffer_size=1000, seed=0)
        >>> model = model.learn(300, callback=OffPolicyPLRCallback())
        >>> venv.sampler.num_seen > 0
        True
    """

    def __init__(
        self,
        td_error_fn: TDErrorFn | None = None,
        batch_size: int = 4096,
        verbose: int = 0,
        total_timesteps: int | None = None,
    ) -> None:
        super().__init__(verbose)
        self.total_timesteps = _check_total_timesteps(total_timesteps)
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        self.td_error_fn: TDErrorFn = one_step_td_errors if td_error_fn is None else td_error_fn
        self.batch_size = batch_size
        self.wrapper: Any = None
        self.scoring = False
        self._model_id: int | None = None
        self._count = 0  # steps tracked so far (= rows added to the buffer while tracking)
        self._last_row: int | None = None
        # Per env: step count of the current episode's first step (-1: unknown, not scored).
        self._start_count = np.zeros(0, dtype=np.int64)
        self._start_row = np.zeros(0, dtype=np.int64)  # per env: buffer row of the episode's first step
        self._new = np.zeros(0, dtype=bool)  # per env: the next step starts an episode
        self._pending: list[tuple[int, int, int, int, int]] = []  # env, level, start count, start row, length
        self.steps_overwritten = 0

    @property
    def algorithm(self) -> OffPolicyAlgorithm:
        """The model being trained (checked to be an off-policy algorithm)."""
        assert isinstance(self.model, OffPolicyAlgorithm)
        return self.model

    @property
    def source(self) -> Any:
        """The training env's level source (:class:`~plr_gym.source.LevelSource`)."""
        return self.wrapper.source

    # ------------------------------------------------------------------ SB3 hooks
    def _init_callback(self) -> None:
        if not isinstance(self.model, OffPolicyAlgorithm):
            raise TypeError(
                f"OffPolicyPLRCallback works with off-policy algorithms (DQN, QRDQN, SAC, TD3 and plr_gym's "
                f"PER classes), got {type(self.model).__name__}; for on-policy algorithms use PLRCallback"
            )
        self.wrapper = find_plr_wrapper(self.model.get_env())
        source = self.source
        if source.plans_rollouts:  # Robust PLR: levels are planned per rollout, not per episode
            raise ValueError(
                "OffPolicyPLRCallback supports PrioritizedLevelReplay over a finite level set "
                "(levels=... or sampler=LevelSampler(...)), not buffer mode (buffer=LevelBuffer(...), Robust "
                "PLR / ACCEL), whose per-rollout plans need on-policy rollouts: use PLRCallback with PPO/A2C"
            )
        self.wrapper._score_watch.attached = True  # episodes will be scored
        strategy = source.strategy
        if not isinstance(strategy, str) or not source.strategy_info.off_policy:
            name = getattr(strategy, "__name__", strategy)
            raise ValueError(
                "OffPolicyPLRCallback scores episodes by their one-step TD error only; the sampler's "
                f"strategy is {name!r}. Accepted strategies: {', '.join(map(repr, OFF_POLICY_STRATEGIES))} "
                "(the others need on-policy rollout data: use PLRCallback with PPO/A2C)"
            )
        self.scoring = source.strategy_info.uses_scores
        if self.scoring and self.td_error_fn is one_step_td_errors:
            _check_supported(self.model)
        if not isinstance(self.model.replay_buffer, ReplayBuffer):
            raise TypeError(
                "OffPolicyPLRCallback needs an SB3 ReplayBuffer, got "
                f"{type(self.model.replay_buffer).__name__}"
            )
        n = self.model.n_envs
        if self._model_id != id(self.model) or self._start_count.size != n:
            # A new model (or the first learn call): nothing tracked yet.
            self._model_id = id(self.model)
            self._count = 0
            self._last_row = None
            self._start_count = np.full(n, -1, dtype=np.int64)
            self._start_row = np.zeros(n, dtype=np.int64)
            self._new = np.zeros(n, dtype=bool)
            self._pending = []

    def _on_training_start(self) -> None:
        # learn() resets the env when reset_num_timesteps=True or on the very first call.
        if self.locals.get("reset_num_timesteps", True) or self.model.num_timesteps == 0:
            self._start_count[:] = -1
            self._new[:] = True
            self._pending = []

    def _on_step(self) -> bool:
        if not self.scoring:
            return True
        buffer = self.algorithm.replay_buffer
        assert buffer is not None
        row = int(buffer.pos)  # where this step's transitions are about to be stored
        if self._last_row is not None and row != (self._last_row + 1) % buffer.buffer_size:
            warnings.warn(
                f"OffPolicyPLRCallback: the replay buffer position moved from {self._last_row} to {row} in "
                "one step (was it reset or written to by something else?); the episodes in progress are not "
                "scored",
                UserWarning,
                stacklevel=2,
            )
            self._start_count[:] = -1
            self._new[:] = False
            self._pending = []
        self._last_row = row
        new = self._new
        self._start_count[new] = self._count
        self._start_row[new] = row
        dones = np.asarray(self.locals["dones"], dtype=bool)
        done = np.flatnonzero(dones)
        if done.size:
            levels = self.wrapper.step_levels
            for i in done.tolist():  # once per completed episode
                start = int(self._start_count[i])
                if start >= 0:
                    self._pending.append(
                        (i, int(levels[i]), start, int(self._start_row[i]), self._count - start + 1)
                    )
        self._new = dones.copy()
        self._count += 1
        return True

    def _on_rollout_start(self) -> None:
        report_progress(self.source, self.model, self.total_timesteps)

    def _on_rollout_end(self) -> None:
        self.wrapper.score_rollout(None)  # episodes are scored from the replay buffer: drop the step log
        if not self.scoring:
            return
        scored = self.flush()
        self.logger.record("plr/episodes_scored", scored)
        self.logger.record("plr/steps_overwritten", self.steps_overwritten)
        for key, value in self.source.rollout_stats(full=False).items():
            self.logger.record(f"plr/{key}", value)

    # ------------------------------------------------------------------ scoring
    def flush(self) -> int:
        """Score the queued completed episodes (all their steps must be in the buffer) and report them.

        Called at the end of each rollout; returns the number of episodes reported.
        """
        if not self._pending:
            return 0
        pending = np.asarray(self._pending, dtype=np.int64)
        self._pending = []
        env_e, level_e, start_e, row_e, len_e = pending.T
        buffer = self.algorithm.replay_buffer
        assert buffer is not None
        size = buffer.buffer_size
        episode = np.repeat(np.arange(len(pending)), len_e)
        k = np.arange(episode.size) - np.repeat(np.cumsum(len_e) - len_e, len_e)
        # Step number `start + k` is still stored iff fewer than `size` steps were added after it.
        kept = start_e[episode] + k >= self._count - size
        self.steps_overwritten += int(episode.size - kept.sum())
        episode, k = episode[kept], k[kept]
        rows = (row_e[episode] + k) % size
        envs = env_e[episode]
        stored_levels = getattr(buffer, "levels", None)
        if stored_levels is not None:
            wrong = stored_levels[rows, envs] != level_e[episode]
            if wrong.any():
                j = int(np.argmax(wrong))
                raise RuntimeError(
                    f"OffPolicyPLRCallback: buffer slot (row {rows[j]}, env {envs[j]}) holds a transition of "
                    f"level {stored_levels[rows[j], envs[j]]}, expected level {level_e[episode[j]]}; the "
                    "buffer was written to outside the training loop"
                )
        td = self.td_errors(rows, envs)
        counts = np.bincount(episode, minlength=len(pending))
        sums = np.bincount(episode, weights=td, minlength=len(pending))
        has = counts > 0
        self.source.update_batch(level_e[has], sums[has] / counts[has])
        return int(has.sum())

    def td_errors(self, rows: NDArray[np.int64], envs: NDArray[np.int64]) -> NDArray[np.float64]:
        """``|TD error|`` of the buffer's transitions at ``(rows, envs)``, in no-grad passes of
        ``batch_size``."""
        buffer = self.algorithm.replay_buffer
        assert buffer is not None
        vec_normalize_env = self.model.get_vec_normalize_env()
        out = np.empty(rows.size, dtype=np.float64)
        with th.no_grad():
            for lo in range(0, rows.size, self.batch_size):
                hi = min(lo + self.batch_size, rows.size)
                batch = gather_transitions(buffer, rows[lo:hi], envs[lo:hi], vec_normalize_env)
                out[lo:hi] = self.td_error_fn(self.algorithm, batch).detach().cpu().numpy().reshape(-1)
        return out


def _check_supported(model: Any) -> None:
    supported: tuple[type, ...] = (DQN, SAC, TD3) + (() if _QRDQN is None else (_QRDQN,))
    if not isinstance(model, supported):
        raise TypeError(
            f"OffPolicyPLRCallback computes TD errors for DQN, QRDQN, SAC, TD3 and their subclasses (PERDQN, "
            f"PERQRDQN, PERSAC, PERTD3, DDPG), got {type(model).__name__}; pass td_error_fn= for other "
            "algorithms"
        )
