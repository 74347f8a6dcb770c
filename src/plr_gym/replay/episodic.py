"""Episodic information for replay buffers: steps to the episode's end and discounted return-to-go."""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Union

import numpy as np
import torch as th
from numpy.typing import NDArray
from stable_baselines3.common.vec_env import VecNormalize

from plr_gym.replay.buffers import PrioritizedReplayBuffer, timeout_flags

__all__ = ["EpisodicInfoMixin", "EpisodicReplayBuffer", "EpisodicReplayBufferSamples", "ValueFn"]

#: Maps a batch of (next) observations, as sampled (a tensor of shape ``(m, *obs_shape)`` on the
#: buffer's device), to their values, shape ``(m,)`` or ``(m, 1)`` (tensor or array).
ValueFn = Callable[[th.Tensor], Union[th.Tensor, NDArray[Any]]]


class EpisodicReplayBufferSamples(NamedTuple):
    """
    :class:`~plr_gym.replay.PrioritizedReplayBufferSamples`'s fields, in the same order, followed by
    each sampled step's episodic information.

    Fields:

    - ``observations``: shape ``(batch, *obs_shape)``
    - ``actions``: shape ``(batch, action_dim)``
    - ``next_observations``: observation after the steps summed in ``rewards``, shape ``(batch, *obs_shape)``
    - ``dones``: 1 where the episode truly terminated within those steps, shape ``(batch, 1)``
    - ``rewards``: discounted sum of the (n-step) rewards, shape ``(batch, 1)``
    - ``discounts``: ``gamma ** k`` to bootstrap with, or ``None`` for one-step transitions
    - ``weights``: importance-sampling weights, shape ``(batch, 1)``
    - ``indices``: flat slot index of each sample, shape ``(batch,)``
    - ``levels``: level id of each sample's episode (``-1`` if unknown), shape ``(batch,)``
    - ``steps_to_end``: steps from the sampled step to its episode's last step (0 for the last step),
      ``-1`` while the episode has not ended; int64 numpy array of shape ``(batch,)``
    - ``returns_to_go``: discounted return ``sum_i gamma**i * r_{t+i}`` from the sampled step to the
      episode's end, plus ``gamma**(steps_to_end + 1) * V(s_end)`` when the episode was truncated;
      ``NaN`` while it has not ended (or was truncated without a ``value_fn``), shape ``(batch, 1)``

    Example:
        >>> EpisodicReplayBufferSamples._fields[-2:]
        ('steps_to_end', 'returns_to_go')
    """

    observations: th.Tensor
    actions: th.Tensor
    next_observations: th.Tensor
    dones: th.Tensor
    rewards: th.Tensor
    discounts: th.Tensor | None
    weights: th.Tensor
    indices: NDArray[np.int64]
    levels: NDArray[np.int64] | None
    steps_to_end: NDArray[np.int64]
    returns_to_go: th.Tensor


class EpisodicInfoMixin:
    """
    Adds opt-in episodic information (ALF's ``keep_episodic_info``/``record_episodic_return``) to a
    :class:`~plr_gym.replay.PrioritizedReplayBuffer` subclass; put it first among the bases.

    With ``episodic_info=True`` the buffer keeps, for every stored step, :attr:`steps_to_end` and
    :attr:`returns_to_go` (both ``(buffer_size, n_envs)``), filled for all of an episode's stored steps
    when the episode ends (``done``) and returned by :meth:`sample` as
    :class:`EpisodicReplayBufferSamples`. Until then a step has ``steps_to_end == -1`` and
    ``returns_to_go == NaN``. Per env, an episode begins after a ``done`` or when an observation does not
    continue the previous step's next observation (SB3's ``learn()`` resets envs without a ``done``;
    the abandoned episode's steps stay unfilled). Episodes longer than the buffer are filled for the
    steps still stored. Returns use the raw stored rewards and the buffer's ``gamma``.

    Truncation (a ``done`` with ``TimeLimit.truncated`` and ``handle_timeout_termination=True``): the
    return bootstraps from the final next observation, ``+ gamma**(steps_to_end + 1) * V(s_end)``, with
    ``V`` = :attr:`value_fn` called once when the episode ends; without a ``value_fn`` the truncated
    episode's returns stay ``NaN`` (its ``steps_to_end`` are filled). Set ``value_fn`` once the model
    exists, e.g. for DQN ``buffer.value_fn = lambda obs: model.q_net(obs).max(dim=1).values``.
    """

    n_envs: int
    buffer_size: int
    gamma: float
    pos: int
    full: bool
    rewards: NDArray[np.float32]
    dones: NDArray[np.float32]
    timeouts: NDArray[np.float32]
    handle_timeout_termination: bool
    observations: Any
    next_observations: Any

    def __init__(
        self, *args: Any, episodic_info: bool = False, value_fn: ValueFn | None = None, **kwargs: Any
    ):
        if not isinstance(episodic_info, (bool, np.bool_)):
            raise TypeError(f"episodic_info must be a bool, got {episodic_info!r}")
        if value_fn is not None and not callable(value_fn):
            raise TypeError(f"value_fn must be callable or None, got {type(value_fn).__name__}")
        super().__init__(*args, **kwargs)
        self.episodic_info = bool(episodic_info)
        self.value_fn = value_fn
        shape = (self.buffer_size, self.n_envs) if self.episodic_info else (0, self.n_envs)
        self.steps_to_end: NDArray[np.int64] = np.full(shape, -1, dtype=np.int64)
        self.returns_to_go: NDArray[np.float32] = np.full(shape, np.nan, dtype=np.float32)
        # Steps of each env's current, unfinished episode added so far; [-1] = nothing added yet.
        self._episode_lengths = np.zeros(self.n_envs if self.episodic_info else 0, dtype=np.int64)
        self._episodic_started = np.zeros(1, dtype=bool)
        # Each env's truncation bootstrap for the step being added, computed before it is stored.
        self._pending_bootstrap: NDArray[np.float64] | None = None

    # ------------------------------------------------------------------ hooks on the base buffer

    def add(
        self,
        obs: Any,
        next_obs: Any,
        action: NDArray[Any],
        reward: NDArray[Any],
        done: NDArray[Any],
        infos: list[dict[str, Any]],
    ) -> None:
        """
        Store one step of every env (see :meth:`PrioritizedReplayBuffer.add`); with ``episodic_info``
        a truncated episode's bootstrap value is computed first, so a refused ``value_fn`` result stores
        nothing.
        """
        if self.episodic_info and self._pending_bootstrap is None:
            self._check_observations(obs, next_obs)  # type: ignore[attr-defined]
            self._check_step(action, reward, done, infos)  # type: ignore[attr-defined]
            self._pending_bootstrap = self._truncation_bootstrap(next_obs, done, infos)
        try:
            super().add(obs, next_obs, action, reward, done, infos)  # type: ignore[misc]
        finally:
            self._pending_bootstrap = None

    def _truncation_bootstrap(
        self, next_obs: Any, done: Any, infos: list[dict[str, Any]]
    ) -> NDArray[np.float64]:
        """Each env's bootstrap value ``V(s_end)`` for this step: the ``value_fn`` of the final next
        observation where the step ends a truncated episode (NaN without a ``value_fn``), else 0. Stores
        nothing; call it with checked arguments before the step is stored."""
        ended = np.asarray(np.broadcast_to(np.asarray(done, dtype=np.float32), (self.n_envs,))) > 0
        if self.handle_timeout_termination:
            ended &= timeout_flags(infos, self.n_envs)
        else:
            ended[:] = False
        bootstrap = np.zeros(self.n_envs, dtype=np.float64)
        envs = np.flatnonzero(ended)
        if envs.size:
            if self.value_fn is None:
                bootstrap[envs] = np.nan
            else:
                bootstrap[envs] = self._values(self._value_obs(next_obs, envs))
        return bootstrap

    def _value_obs(self, next_obs: Any, envs: NDArray[np.int64]) -> th.Tensor:
        """The next observations of ``envs`` as :meth:`sample` would return them (stored dtype)."""
        obs_shape: tuple[int, ...] = self.obs_shape  # type: ignore[attr-defined]
        space_dtype = self.observation_space.dtype  # type: ignore[attr-defined]
        data = np.asarray(next_obs).reshape(self.n_envs, *obs_shape)[envs].astype(space_dtype)
        to_torch: Callable[[NDArray[Any]], th.Tensor] = self.to_torch  # type: ignore[attr-defined]
        return to_torch(data)

    def _episode_starts(self, row: int) -> NDArray[np.bool_]:
        """Which envs' step at ``row`` (just added) begins a new episode."""
        if not self._episodic_started[0]:
            return np.ones(self.n_envs, dtype=bool)
        prev = (row - 1) % self.buffer_size
        starts: NDArray[np.bool_] = np.asarray(self.dones[prev] > 0)
        for e in np.flatnonzero(~starts):
            starts[e] = not np.array_equal(self.observations[row, e], self.next_observations[prev, e])
        return starts

    def _after_add(self, row: int, infos: list[dict[str, Any]]) -> None:
        super()._after_add(row, infos)  # type: ignore[misc]
        if not self.episodic_info:
            return
        starts = self._episode_starts(row)
        self._episodic_started[0] = True
        self._episode_lengths[starts] = 0
        self._episode_lengths += 1
        self.steps_to_end[row] = -1
        self.returns_to_go[row] = np.nan
        ended = np.flatnonzero(self.dones[row] > 0)
        if ended.size == 0:
            return
        truncated = (
            self.timeouts[row, ended] > 0 if self.handle_timeout_termination else np.zeros(ended.size, bool)
        )
        assert self._pending_bootstrap is not None, "add() computes the bootstrap before storing"
        bootstrap = np.where(truncated, self._pending_bootstrap[ended], 0.0)
        for e, value in zip(ended.tolist(), bootstrap.tolist()):
            self._fill_episode(row, e, value)
            self._episode_lengths[e] = 0

    def _values(self, obs: th.Tensor) -> NDArray[np.float64]:
        assert self.value_fn is not None
        with th.no_grad():
            values = self.value_fn(obs)
        if isinstance(values, th.Tensor):
            values = values.detach().cpu().numpy()
        out = np.asarray(values, dtype=np.float64).reshape(-1)
        if out.shape != (obs.shape[0],):
            raise ValueError(
                f"value_fn must return one value per observation ({obs.shape[0]}), "
                f"got shape {np.shape(values)}"
            )
        if not np.all(np.isfinite(out)):
            raise ValueError(f"value_fn returned a NaN or infinite value: {out}")
        return out

    def _fill_episode(self, last_row: int, env: int, bootstrap: float) -> None:
        length = int(min(self._episode_lengths[env], self.buffer_size))
        rows = (last_row - np.arange(length)) % self.buffer_size  # last step first
        rewards = self.rewards[rows, env].astype(np.float64).tolist()
        returns = np.empty(length, dtype=np.float64)
        g = bootstrap
        for i, r in enumerate(rewards):
            g = r + self.gamma * g
            returns[i] = g
        self.returns_to_go[rows, env] = returns
        self.steps_to_end[rows, env] = np.arange(length)

    def sample(self, batch_size: int, env: VecNormalize | None = None) -> Any:
        """
        Sample a prioritized batch (see :meth:`PrioritizedReplayBuffer.sample`); with
        ``episodic_info=True`` it is an :class:`EpisodicReplayBufferSamples`.

        :param batch_size: number of transitions
        :param env: VecNormalize to normalise observations and rewards with, as in SB3
        """
        indices, weights = self.sample_indices(batch_size)  # type: ignore[attr-defined]
        return self._get_prioritized_samples(indices, weights, env)  # type: ignore[attr-defined]

    def _make_samples(self, **fields: Any) -> Any:
        samples = super()._make_samples(**fields)  # type: ignore[misc]
        if not self.episodic_info:
            return samples
        slots = fields["indices"]
        returns = self.returns_to_go.reshape(-1)[slots].reshape(-1, 1)
        return EpisodicReplayBufferSamples(
            **samples._asdict(),
            steps_to_end=self.steps_to_end.reshape(-1)[slots],
            returns_to_go=self.to_torch(returns),  # type: ignore[attr-defined]
        )

    def reset(self) -> None:
        super().reset()  # type: ignore[misc]
        self.steps_to_end[...] = -1
        self.returns_to_go[...] = np.nan
        self._episode_lengths[...] = 0
        self._episodic_started[0] = False

    def _config(self) -> dict[str, Any]:
        config: dict[str, Any] = super()._config()  # type: ignore[misc]
        config["episodic_info"] = self.episodic_info
        return config

    def _obs_arrays(self) -> dict[str, NDArray[Any]]:
        arrays: dict[str, NDArray[Any]] = super()._obs_arrays()  # type: ignore[misc]
        arrays.update(
            {
                "episodic.steps_to_end": self.steps_to_end,
                "episodic.returns_to_go": self.returns_to_go,
                "episodic.lengths": self._episode_lengths,
                "episodic.started": self._episodic_started,
            }
        )
        return arrays

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["value_fn"] = None  # usually a closure over the model: not part of the buffer's data
        return state


class EpisodicReplayBuffer(EpisodicInfoMixin, PrioritizedReplayBuffer):
    """
    :class:`~plr_gym.replay.PrioritizedReplayBuffer` whose batches also carry each step's steps to its
    episode's end and discounted return-to-go (:class:`EpisodicReplayBufferSamples`), filled when the
    episode ends, with a value bootstrap on truncation (see :class:`EpisodicInfoMixin`).

    Takes :class:`~plr_gym.replay.PrioritizedReplayBuffer`'s arguments plus ``value_fn``
    (:data:`ValueFn`, may be set later as an attribute); ``episodic_info`` is always on.

    Example:
        >>> import numpy as np
        >>> from gymnasium import spaces
        >>> buffer = EpisodicReplayBuffer(10, spaces.Box(-1, 1, (1,)), spaces.Discrete(2), device="cpu",
        ...                               gamma=0.5, alpha=0.0, seed=0)
        >>> for t, done in enumerate([0, 0, 1]):  # rewards 1, 2, 4, then the episode terminates
        ...     buffer.add(np.full((1, 1), t), np.full((1, 1), t + 1), np.zeros(1), np.array([2.0**t]),
        ...                np.array([done]), [{}])
        >>> buffer.returns_to_go[:3, 0].tolist(), buffer.steps_to_end[:3, 0].tolist()
        ([3.0, 4.0, 4.0], [2, 1, 0])
    """

    def __init__(self, *args: Any, value_fn: ValueFn | None = None, **kwargs: Any) -> None:
        if "episodic_info" in kwargs:
            raise TypeError("EpisodicReplayBuffer always keeps episodic info; do not pass episodic_info")
        super().__init__(*args, episodic_info=True, value_fn=value_fn, **kwargs)
        if self.alpha == 0.0:
            self._warned_no_update = True  # uniform replay: no priorities to update

    def sample(  # type: ignore[override]
        self, batch_size: int, env: VecNormalize | None = None
    ) -> EpisodicReplayBufferSamples:
        """
        Sample a prioritized batch with episodic information.

        :param batch_size: number of transitions
        :param env: VecNormalize to normalise observations and rewards with, as in SB3
        :return: :class:`EpisodicReplayBufferSamples`
        """
        samples = super().sample(batch_size, env)
        assert isinstance(samples, EpisodicReplayBufferSamples)
        return samples
