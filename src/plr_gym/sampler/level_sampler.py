"""LevelSampler: PLR over a finite set of levels (the class; its parts are the sibling modules)."""

from __future__ import annotations

import functools
import inspect
import numbers
import os
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import numpy.typing as npt

from plr_gym._sizes import allocating
from plr_gym.sampler.options import (
    _TRANSFORM_PARAMS,
    PAPER_PRESETS,
    REPLAY_SCHEDULES,
    STRATEGIES,
    UNSEEN_RANKS,
    _check_choice,
    _check_positive,
    _check_power_offset,
    _check_progress,
    _check_seed,
    _check_unit,
    _max_samples,
)
from plr_gym.sampler.record import FloatArray, IntArray, Strategy
from plr_gym.sampler.sampling import _Sampling
from plr_gym.sampler.schedule import replay_probability
from plr_gym.sampler.state import _Checkpoints, _read_state, _saved_config, _write_state
from plr_gym.sampler.updates import _Updates
from plr_gym.scoring import Strategy as StrategyInfo
from plr_gym.scoring import strategy_spec
from plr_gym.transforms import TRANSFORMS, transform_names


class LevelSampler(_Sampling, _Updates, _Checkpoints):
    """Prioritized Level Replay over a finite set of level ids.

    :param levels: the training levels: any 1-D collection of distinct ``int`` level ids (seeds), e.g.
        ``range(200)``. ``sampler.levels`` keeps their order; all per-level arrays align with it.
    :param strategy: how episodes are scored (see :mod:`plr_gym.scoring`): ``"value_l1"`` (default, the
        paper's L1 value loss), ``"positive_value_loss"``, ``"gae"``, ``"max_mc"``, ``"policy_entropy"``,
        ``"least_confidence"``, ``"min_margin"``, ``"one_step_td_error"``, a callable
        ``fn(episode: EpisodeData) -> float``, or the baselines ``"random"`` (uniform over all levels) and
        ``"sequential"`` (levels in order, cycling). The sampler itself only stores the scores it is given.
    :param score_transform: ``h`` in the paper: ``"rank"`` (``1/rank(S_i)^(1/β)``, default), ``"power"``
        (``S_i^(1/β)``, non-negative scores only), ``"softmax"`` (``exp(S_i/β)``), ``"eps_greedy"``
        (``1 − eps`` on the best level plus ``eps`` spread uniformly), ``"constant"`` (uniform) or
        ``"max"`` (uniform over the levels tied for the best score); or a transform added with
        :func:`plr_gym.transforms.register_transform`.
    :param temperature: ``β`` in the paper (> 0); lower is greedier. Default 1.0 (the paper: 0.1).
    :param staleness_coef: ``ρ`` in the paper, in ``[0, 1]``: weight of the staleness distribution
        ``P_C`` in the replay mixture. Default 0.3 (the paper: 0.1 on Procgen, 0.3 on MiniGrid). (Not the
        reference code's ``rho``: see below.)
    :param staleness_transform: transform applied to the staleness counts ``c − C_i`` (same choices as
        ``score_transform``). Default ``"power"``, which with ``staleness_temperature=1`` is the paper's
        ``P_C ∝ c − C_i``.
    :param staleness_temperature: temperature of the staleness transform (> 0). Default 1.
    :param replay_schedule: when to replay a seen level instead of exploring an unseen one.
        ``"proportionate"`` (default): replay with probability = fraction of levels seen.
        ``"fixed"``: replay with probability ``replay_prob``. Either way no replay happens before a
        fraction ``min_seen_ratio`` of the levels has been seen, and replay is certain once all are.
    :param replay_prob: probability of a replay under the ``"fixed"`` schedule, in ``[0, 1]``
        (the reference's ``1 − nu``). Default 0.5.
    :param min_seen_ratio: fraction of levels, in ``[0, 1]``, that must have a score before any replay
        (the reference's ``rho``). Default 1.0, the paper's Procgen setting.
    :param alpha: step size of the exponentially weighted average of a level's scores, in ``(0, 1]``:
        ``S_i ← (1 − α)·S_i + α·score`` (the first score is stored as is). Default 1.0 (keep the latest).
    :param eps: exploration mass of the ``eps_greedy`` transform, in ``[0, 1]``. Default 0.05.
    :param uniform_mass: ``λ`` in ``[0, 1]``, a floor of uniform mass in the replay distribution:
        ``P_replay = (1 − λ)·((1 − ρ)·P_S + ρ·P_C) + λ·U``, ``U`` uniform over the seen levels (all levels
        once every level has been seen). Every seen level keeps at least ``λ/N_seen`` of the replay mass,
        so prioritisation can never starve a level. Default 0.5 (the paper has no floor: 0).
    :param success_rate_alpha: ``strategy="learnability"`` only: step size, in ``(0, 1]``, of each level's
        running success rate ``p ← p + max(1/n, success_rate_alpha)·(outcome − p)`` (``n`` = the level's
        episodes so far: the plain mean of the first ``1/success_rate_alpha`` outcomes, then an
        exponentially weighted one). The level's score is ``p·(1 − p)``. Default 0.1.
    :param seed: seed of the sampler's own ``numpy.random.Generator``; same seed, same draws.
    :param unseen_rank: ``score_transform="rank"`` while some levels are unseen: ``"seen"`` (default) ranks
        a seen level among the seen levels; ``"zero"`` ranks it among all levels with the unseen ones at
        score 0, as level-replay does (a seen level with a negative score, e.g. ``strategy="gae"``, then
        ranks below every unseen one; ties at 0: seen levels first). ``O(N)`` per score draw in that case.
    :param power_offset: ``score_transform="power"`` only: ``(S_i + power_offset)^(1/β)``. Default 0 (the
        paper's ``S_i^(1/β)``); level-replay adds ``1e-3`` when ``staleness_coef`` is 0.
    :param temperature_end: anneal ``β`` linearly from ``temperature`` (at the start of training) to this
        value (at its end), following :meth:`set_progress`, which :class:`~plr_gym.PLRCallback` calls at
        every rollout with the share of ``total_timesteps`` done (your own loop calls it yourself).
        ``None`` (default): ``β`` stays ``temperature``. The current ``β`` is :attr:`temperature`.

    **Defaults** were chosen by the pre-registered rule of the evidence study (``docs/study.md``):
    ``value_l1``, ``rank`` with ``β = 1``, ``ρ = 0.3``, ``uniform_mass = 0.5``, proportionate schedule,
    ``min_seen_ratio = 1``, ``alpha = 1``. The paper's settings (``β = 0.1``, ``ρ = 0.1``, no floor) put
    ~90% of the replay mass on one level once scores settle; they are one call away for reproductions:
    :meth:`LevelSampler.paper_defaults` (``preset="paper-procgen"`` or ``"paper-minigrid"``).

    .. note:: **The two rhos.** The paper's ``ρ`` is ``staleness_coef``. The reference code's ``rho`` is
       ``min_seen_ratio`` and its ``nu`` is ``1 − replay_prob``.

    **Cost.** :meth:`sample` and :meth:`update` are ``O(log N)`` for every score transform and for the
    staleness transforms ``power`` with ``staleness_temperature=1`` (the default), ``rank``, ``max``,
    ``eps_greedy`` and ``constant``. ``power`` with another temperature, and ``softmax``, change every
    level's staleness weight at every draw; with ``staleness_coef > 0`` they cost ``O(N)`` per replay
    draw. :meth:`sample_weights` always computes the full distribution in ``O(N log N)``.

    **Seen levels.** A level becomes *seen* when its first score arrives through :meth:`update`, not when
    it is sampled: until then it can be drawn again as an unseen level (e.g. by another env).

    Example:
        >>> from plr_gym import LevelSampler
        >>> sampler = LevelSampler(levels=range(4), seed=0)
        >>> paper = LevelSampler.paper_defaults(levels=range(4), seed=0)
        >>> for s in (sampler, paper):
        ...     first = [s.sample() for _ in range(4)]        # nothing seen yet: uniform over unseen
        ...     for level, score in zip(range(4), [0.1, 0.9, 0.5, 0.3]):
        ...         s.update(level, score)
        >>> sampler.sample_weights().round(3)   # rank ** -1, staleness 0.3, half of the mass uniform
        array([0.242, 0.293, 0.228, 0.237])
        >>> paper.sample_weights().round(3)     # the paper's rank ** -10, staleness 0.1
        array([0.05 , 0.899, 0.013, 0.038])
        >>> int(sampler.sample()) in range(4)
        True
    """

    def __init__(
        self,
        levels: Iterable[int] | npt.NDArray[np.integer[Any]] = range(200),
        strategy: Strategy = "value_l1",
        score_transform: str = "rank",
        temperature: float = 1.0,
        staleness_coef: float = 0.3,
        staleness_transform: str = "power",
        staleness_temperature: float = 1.0,
        replay_schedule: str = "proportionate",
        replay_prob: float = 0.5,
        min_seen_ratio: float = 1.0,
        alpha: float = 1.0,
        eps: float = 0.05,
        uniform_mass: float = 0.5,
        success_rate_alpha: float = 0.1,
        seed: int | None = None,
        temperature_end: float | None = None,
        unseen_rank: str = "seen",
        power_offset: float = 0.0,
    ) -> None:
        if callable(strategy):
            self.strategy: Strategy = strategy
        else:
            self.strategy = _check_choice("strategy", strategy, STRATEGIES)
        choices = transform_names(_TRANSFORM_PARAMS)
        self.score_transform = _check_choice("score_transform", score_transform, choices)
        self.staleness_transform = _check_choice("staleness_transform", staleness_transform, choices)
        self.replay_schedule = _check_choice("replay_schedule", replay_schedule, REPLAY_SCHEDULES)
        self.temperature = _check_positive("temperature", temperature)
        self.temperature_start = self.temperature
        self.temperature_end = (
            None if temperature_end is None else _check_positive("temperature_end", temperature_end)
        )
        self._progress = 0.0
        self.staleness_temperature = _check_positive("staleness_temperature", staleness_temperature)
        self.staleness_coef = _check_unit("staleness_coef", staleness_coef)
        self.replay_prob = _check_unit("replay_prob", replay_prob)
        self.min_seen_ratio = _check_unit("min_seen_ratio", min_seen_ratio)
        self.alpha = _check_unit("alpha", alpha, open_low=True)
        self.eps = _check_unit("eps", eps)
        self.uniform_mass = _check_unit("uniform_mass", uniform_mass)
        self.success_rate_alpha = _check_unit("success_rate_alpha", success_rate_alpha, open_low=True)
        self.unseen_rank = _check_choice("unseen_rank", unseen_rank, UNSEEN_RANKS)
        self.power_offset = _check_power_offset(power_offset, self.score_transform)
        # h and g: the transform objects behind P_S and P_C (definition + fast sampling)
        self._h = self._score_transform_object(self.temperature)
        self._g = TRANSFORMS[self.staleness_transform](temperature=self.staleness_temperature, eps=self.eps)
        if self.learns_outcomes and self.alpha != 1.0:
            raise ValueError(
                f"alpha={alpha!r} is the step size of score averages; strategy='learnability' scores a level "
                "by its running success rate p as p*(1 - p): set its averaging with success_rate_alpha "
                "and leave alpha=1.0"
            )
        self.seed = _check_seed(seed)
        self._init_record(levels)  # the fields of record.py: nothing seen, nothing sampled

    @classmethod
    def paper_defaults(
        cls,
        levels: Iterable[int] | npt.NDArray[np.integer[Any]] = range(200),
        preset: str = "paper-procgen",
        **overrides: Any,
    ) -> LevelSampler:
        """A sampler with the PLR paper's settings, for reproductions (see :data:`PAPER_PRESETS`).

        :param preset: ``"paper-procgen"`` (``value_l1``, rank, ``β = 0.1``, ``ρ = 0.1``) or
            ``"paper-minigrid"`` (the same with ``ρ = 0.3``).
        :param overrides: any other :class:`LevelSampler` keyword (``seed``, ``min_seen_ratio``, ...).

        Example:
            >>> s = LevelSampler.paper_defaults(range(200), seed=0)
            >>> (s.strategy, s.score_transform, s.temperature, s.staleness_coef, s.uniform_mass)
            ('value_l1', 'rank', 0.1, 0.1, 0.0)
        """
        if not isinstance(preset, str) or preset not in PAPER_PRESETS:
            raise ValueError(f"preset={preset!r} is not supported; choose one of {', '.join(PAPER_PRESETS)}")
        return cls(levels=levels, **{**PAPER_PRESETS[preset], **overrides})

    # ------------------------------------------------------------------ public read-only state
    @property
    def levels(self) -> IntArray:
        """Level ids, in the order given at construction (read-only)."""
        return self._levels

    @property
    def scores(self) -> FloatArray:
        """Current score ``S_i`` of every level (0 for unseen levels); a copy."""
        return self._scores.copy()

    @property
    def staleness(self) -> IntArray:
        """Number of levels sampled since each level was last sampled (``c − C_i``); a copy."""
        return self._t - self._last

    @property
    def seen(self) -> npt.NDArray[np.bool_]:
        """Boolean mask of levels that have received at least one score; a copy."""
        mask = np.zeros(self._levels.size, dtype=bool)
        mask[self._perm[: self._n_seen]] = True
        return mask

    @property
    def num_levels(self) -> int:
        return int(self._levels.size)

    @property
    def num_seen(self) -> int:
        return self._n_seen

    @property
    def proportion_seen(self) -> float:
        return self._n_seen / self._levels.size

    @property
    def num_samples(self) -> int:
        """Number of levels sampled so far (the paper's episode count ``c``)."""
        return self._t

    @property
    def num_replay_samples(self) -> int:
        """How many samples replayed a seen level (PLR strategies only)."""
        return self._num_replay

    @property
    def num_explore_samples(self) -> int:
        """How many samples explored an unseen level (PLR strategies only)."""
        return self._num_explore

    @property
    def uses_scores(self) -> bool:
        """False for the ``random`` and ``sequential`` baselines, which ignore scores."""
        return self.strategy_info.uses_scores

    @functools.cached_property
    def strategy_info(self) -> StrategyInfo:
        """What the strategy needs (:class:`plr_gym.scoring.Strategy`, from the one registry)."""
        return strategy_spec(self.strategy)

    @property
    def learns_outcomes(self) -> bool:
        """True for ``strategy="learnability"``: updates are episode outcomes, scores are ``p·(1 − p)``."""
        return self.strategy_info.outcome

    @property
    def success_rate(self) -> FloatArray:
        """``strategy="learnability"``: each level's running success rate ``p`` (0 for unseen levels)."""
        if self._success_rate is None:
            raise AttributeError(
                f"success_rate is tracked for strategy='learnability', not {self.strategy!r}"
            )
        return self._success_rate.copy()

    def __len__(self) -> int:
        return int(self._levels.size)

    def __repr__(self) -> str:
        strat = getattr(self.strategy, "__name__", self.strategy)
        return (
            f"LevelSampler(num_levels={self.num_levels}, strategy={strat!r}, score_transform="
            f"{self.score_transform!r}, temperature={self.temperature}, staleness_coef={self.staleness_coef},"
            f" replay_schedule={self.replay_schedule!r}, seen={self._n_seen})"
        )

    # ------------------------------------------------------------------ sampling
    def sample(self, n: int | None = None) -> Any:
        """Draw the level for the next episode, or an array of ``n`` levels.

        ``sample(n)`` is exactly ``n`` consecutive calls to ``sample()``: each draw updates staleness.

        :param n: number of levels to draw; ``None`` (default) returns one ``int``.
        :return: a level id (``int``) or an ``np.ndarray`` of ``n`` level ids.
        """
        if n is None:
            self._check_draws_left(1)
            return int(self._levels[self._sample_index()])
        if isinstance(n, (bool, np.bool_)) or not isinstance(n, (numbers.Integral, np.integer)):
            raise TypeError(f"n must be an int or None, got {type(n).__name__} {n!r}")
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        self._check_draws_left(int(n))
        with allocating("n", n, "draw the levels in smaller batches"):
            idx = np.empty(int(n), dtype=np.int64)
        rng = self._rng.bit_generator
        saved = (rng.state, self._t, self._next_index, self._num_replay, self._num_explore)
        journal: list[tuple[int, int]] = []  # (level position, its last_sampled before this call)
        try:
            for k in range(idx.size):
                idx[k] = self._sample_index(journal)
        except BaseException:  # interrupted: undo every draw of this call
            rng_state, self._t, self._next_index, self._num_replay, self._num_explore = saved
            self._rng.bit_generator.state = rng_state
            for i, last in reversed(journal):
                self._last[i] = last
            self._build_structures()
            raise
        return self._levels[idx]

    @property
    def max_samples(self) -> int:
        """The most levels this sampler can draw in its life: the draw counter and the staleness sums
        (``num_levels`` times the counter) must stay exact (``2**53``, ``int64``)."""
        return _max_samples(self._levels.size)

    def _check_draws_left(self, n: int) -> None:
        if self._t + n > self.max_samples:
            raise ValueError(
                f"n={n} draws would take num_samples from {self._t} beyond {self.max_samples}, the most a "
                f"sampler of {self._levels.size} levels can count exactly; nothing was drawn"
            )

    # ------------------------------------------------------------------ weights
    def sample_weights(self) -> FloatArray:
        """The replay distribution ``P_replay`` over ``levels`` (zero on unseen levels).

        For the ``random`` strategy this is uniform over all levels and for ``sequential`` it is one-hot
        on the next level. With no level seen yet, it is all zeros (the next draw explores).
        """
        return self._replay_weights()

    def replay_probability(self) -> float:
        """Probability that the next :meth:`sample` replays a seen level (PLR strategies)."""
        if not self.uses_scores:
            return 0.0
        return replay_probability(
            self._n_seen, self._levels.size, self.replay_schedule, self.replay_prob, self.min_seen_ratio
        )

    # ------------------------------------------------------------------ updates
    def update(self, level: int, score: float) -> None:
        """Record the score of one completed episode on ``level``.

        ``S ← (1 − alpha)·S + alpha·score`` for a seen level; an unseen level takes ``score`` and becomes
        seen. NaN/inf scores raise ``ValueError`` and leave the sampler unchanged.
        """
        i = self._index.index(level)
        self._update_index(i, self._check_score(score, level))

    def update_batch(
        self, levels: Iterable[int] | npt.NDArray[Any], scores: Iterable[float] | npt.NDArray[Any]
    ) -> None:
        """Apply :meth:`update` to each ``(level, score)`` pair, in order.

        All inputs are validated before anything is stored: one bad pair leaves the sampler unchanged.
        """
        self._update_batch(levels, scores)

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue exactly where this sampler is: config, scores, staleness, RNG.

        Values are numpy arrays and JSON-compatible Python objects (no pickling needed); the record's
        fields, types and shapes are listed in :mod:`plr_gym.sampler.state`.
        """
        return self._state_record()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict`. The levels and configuration must match this sampler's.

        Every member is checked (shapes, dtypes, ranges, consistency of the counters, the RNG state)
        before anything is assigned: a state that is refused (``ValueError``) leaves the sampler exactly
        as it was.
        """
        self._assign_state(self._validated_state(state))

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write :meth:`state_dict` to ``path`` as ``.npz`` (arrays + JSON; loading never unpickles)."""
        _write_state(self.state_dict(), path)

    @classmethod
    def load(cls, path: str | os.PathLike[str], strategy: Strategy | None = None) -> LevelSampler:
        """Build a sampler from a file written by :meth:`save`; it draws what the saved one would have.

        :param strategy: the callable, if the sampler was saved with a callable strategy (code is
            never stored in the file).
        """
        state = _read_state(path)
        config = _saved_config(state, path, cls.__init__, strategy)
        try:
            sampler = cls(levels=state["levels"], **config)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{os.fspath(path)} holds an invalid LevelSampler configuration: {exc}") from exc
        sampler.load_state_dict(state)
        return sampler

    def load_from(self, path: str | os.PathLike[str]) -> None:
        """Restore this sampler's state from a file written by :meth:`save`."""
        self.load_state_dict(_read_state(path))

    def set_progress(self, progress: float) -> None:
        """Tell the sampler how far training is, ``progress`` in ``[0, 1]`` (share of the budget done).

        With ``temperature_end``, ``β`` becomes ``temperature + (temperature_end − temperature)·progress``
        and the sampling structures are rebuilt (``O(N log N)``, once per call: call it per rollout, not
        per episode). Without it, only the progress is recorded. Part of the level-source protocol;
        saved in :meth:`state_dict`.

        Example:
            >>> s = LevelSampler(range(4), temperature=1.0, temperature_end=0.1)
            >>> s.set_progress(0.5)
            >>> round(s.temperature, 2)
            0.55
        """
        self._apply_progress(_check_progress("progress", progress))

    @property
    def progress(self) -> float:
        """The last :meth:`set_progress` value (0 before any)."""
        return self._progress

    # The level-source protocol (:class:`plr_gym.source.LevelSource`), through which the wrappers and
    # callbacks use a sampler: a level per episode, no rollout plan.
    level_dtype: np.dtype[Any] = np.dtype(np.int64)
    plans_rollouts = False
    rollout_mode = "none"
    last_rollout_mode = "none"

    @property
    def has_scores(self) -> bool:
        """True once a score has been recorded (a level is seen)."""
        return self._n_seen > 0

    def begin_rollout(self) -> bool:
        """Level source: start a rollout (remembers the sample counters for ``replay_fraction``).

        :return: ``False``: levels are drawn per episode, the envs never need to restart.
        """
        self._rollout_counts = (self._num_replay, self._num_explore)
        return False

    def next_levels(self, envs: npt.NDArray[np.int64]) -> IntArray:
        """Level source: one freshly sampled level per env of ``envs``, as an ``int64`` array."""
        n = int(np.asarray(envs).size)
        levels = np.asarray(self.sample(n))
        if levels.shape != (n,):  # a subclass overriding sample()
            raise ValueError(
                f"sampler.sample({n}) must return {n} level ids, got an array of shape {levels.shape}"
            )
        if type(self).sample is not LevelSampler.sample:  # only an overriding sample() can stray
            try:
                self._index.indices(levels)
            except (KeyError, TypeError) as exc:
                msg = exc.args[0] if exc.args else str(exc)
                raise ValueError(f"the sampler returned a level it does not hold: {msg}") from exc
        return levels.astype(np.int64, copy=False)

    def end_rollout(self) -> None:
        """Level source: nothing to close (levels are drawn per episode)."""

    def discard_unplayed(self) -> None:
        """Level source: nothing to forget (each level is drawn when its episode starts)."""

    def retained_levels(self) -> None:
        """Level source: ``None``, a sampler keeps every level."""
        return None

    def refused(self, exc: BaseException, levels: list[Any]) -> Exception | None:
        """Level source: an env refusing a level id is the env's error, re-raised as it is."""
        return None

    def rollout_stats(self, full: bool) -> dict[str, Any]:
        """Level source: ``replay_fraction`` (of the episodes started since :meth:`begin_rollout`),
        ``num_seen``, ``score_mean``, ``score_max`` and, with ``full`` (``O(N log N)``),
        ``weight_entropy`` of the replay distribution and the ``scores`` of the seen levels."""
        replay0, explore0 = getattr(self, "_rollout_counts", (self._num_replay, self._num_explore))
        replays = self._num_replay - replay0
        started = replays + self._num_explore - explore0
        stats: dict[str, Any] = {"num_seen": self.num_seen}
        if started:
            stats["replay_fraction"] = replays / started
        if self.num_seen:
            scores = self.scores[self.seen]
            stats["score_mean"] = float(scores.mean())
            stats["score_max"] = float(scores.max())
            if full:
                w = self.sample_weights()
                w = w[w > 0]
                stats["weight_entropy"] = float(-(w * np.log(w)).sum())
                stats["scores"] = scores
        return stats

    def checkpoint_files(self) -> dict[str, tuple[Callable[[Any], None], Callable[[Any], None]]]:
        """Level source: ``plr_sampler.npz`` in a checkpoint directory."""
        return {"plr_sampler.npz": (self.save, self.load_from)}


def sampler_defaults() -> dict[str, Any]:
    """:class:`LevelSampler`'s keyword defaults (``levels`` excluded): the one place the CLI reads them from.

    Example:
        >>> sampler_defaults()["replay_schedule"]
        'proportionate'
    """
    params = inspect.signature(LevelSampler.__init__).parameters
    return {
        name: p.default
        for name, p in params.items()
        if name not in ("self", "levels") and p.default is not inspect.Parameter.empty
    }
