"""Prioritized Level Replay for Gymnasium vector environments (``SyncVectorEnv``, ``AsyncVectorEnv``).

The Gymnasium counterpart of :class:`plr_gym.wrappers.sb3.PrioritizedLevelReplay`, for your own training
loop (CleanRL style). Public as :class:`plr_gym.vector.PrioritizedLevelReplay`.
"""

from __future__ import annotations

import warnings
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
from gymnasium.vector import AutoresetMode, SyncVectorEnv, VectorEnv, VectorWrapper

from plr_gym._levels import level_key
from plr_gym.level_buffer import LevelBuffer
from plr_gym.sampler import LevelSampler
from plr_gym.scoring import EpisodeScorer, _check_gamma, episode_success
from plr_gym.source import LevelSource, ScoreWatch, make_level_source
from plr_gym.wrappers._access import SourceAccess
from plr_gym.wrappers._draw import check_level_draw, level_provider

__all__ = ["PrioritizedLevelReplay"]

#: Steps remembered for report_rollout (a rollout may not be longer).
_MAX_LOGGED_STEPS = 1 << 16


def _log_policy(logits: Any) -> npt.NDArray[np.float64] | None:
    """Log-probabilities of ``(..., n_actions)`` logits (``None`` for ``None``)."""
    if logits is None:
        return None
    lg = np.asarray(logits, dtype=np.float64)
    lg = lg - lg.max(axis=-1, keepdims=True)
    return np.asarray(lg - np.log(np.exp(lg).sum(axis=-1, keepdims=True)))


# Gymnasium < 1.3's VectorWrapper takes no type parameters (RLlib pins gymnasium 1.2); later ones take five.
class PrioritizedLevelReplay(SourceAccess, VectorWrapper):  # type: ignore[type-arg, unused-ignore]
    """Play the levels a :class:`~plr_gym.LevelSampler` chooses, in ``SyncVectorEnv``/``AsyncVectorEnv``.

    Each sub-environment must be wrapped in :class:`~plr_gym.wrappers.LevelWrapper`, e.g.
    ``gym.make_vec(env_id, num_envs, wrappers=[LevelWrapper])``. Levels reach the sub-environments through
    ``set_attr("next_level", ...)``, consumed by their next reset or autoreset; only level ids (or level
    objects) cross process boundaries and the level source stays in the main process.

    Info keys, on every :meth:`reset` and :meth:`step` (Gymnasium's vector convention):

    - ``info["level"]``: ``int64`` array, shape ``(num_envs,)``: the level of the episode each env's
      transition belongs to;
    - ``info["_level"]``: boolean mask, shape ``(num_envs,)``: which entries are set (all of them on a step;
      the reset envs on a partial reset).

    Behaviour per ``metadata["autoreset_mode"]``:

    - ``NEXT_STEP`` (Gymnasium's default): the step that ends an episode reports the finished episode's
      level; the following *reset step* (action ignored, reward 0, the observation is the new episode's
      first) reports the new episode's level. The new level is drawn at the start of that reset step, after
      the previous episode ended: no lag.
    - ``SAME_STEP``: the step that ends an episode reports the finished episode's level (also in
      ``info["final_info"]["level"]``), while the observation it returns is the first of the next episode,
      whose level is :attr:`current_levels` after the step. As in SB3 the env resets inside the step, so
      the next level is queued when the current episode starts: at most one episode of lag per env
      (:attr:`next_levels`).
    - ``DISABLED``: call ``reset(options={"reset_mask": done})`` yourself; the wrapper draws the levels of
      the reset envs then: no lag.

    **When levels are drawn** (``level_draw``). ``"episode_start"`` (default): as above. ``"episode_end"``:
    each env's next level is drawn from the source as it is when its previous episode ends, as level-replay
    does (``level_replay/envs.py`` L151-155): in ``NEXT_STEP`` mode at the end of the step that ends it (and
    queued for the reset step, so a :meth:`report_rollout` in between does not change it); in ``SAME_STEP``
    mode by the sub-env itself at its autoreset (:attr:`~plr_gym.wrappers.LevelWrapper.level_provider`),
    which needs the sub-envs in this process: ``SyncVectorEnv`` or plr_gym's ``ProcgenVectorEnv``
    (``AsyncVectorEnv`` is refused: each ended episode would cost a round trip to the learner); in
    ``DISABLED`` mode at your ``reset(options={"reset_mask": done})``, as with ``"episode_start"``. A level
    source that plans whole rollouts (``buffer=``) is refused.

    A ``seed`` passed to :meth:`reset` does not choose levels: each sub-env's reset seed is its level, and
    the sequence of levels is set by the sampler's own ``seed``. If a sub-environment raises, the exception
    reaches the caller and the sampler stays consistent; call :meth:`reset` (or ``close()``) before stepping
    again.

    **Buffer mode** (Robust PLR, ACCEL): ``PrioritizedLevelReplay(envs, buffer=LevelBuffer(...),
    generator=fn, mutator=fn)``. Before each rollout call :meth:`begin_rollout` (replay buffer levels, try
    new ones, or evaluate the mutated children of the last replayed levels; one level per env) and
    :meth:`reset`; every episode of an env then plays its assigned level until :meth:`report_rollout`,
    which scores the completed episodes, updates the buffer and closes the rollout. Train on the rollout
    only if :attr:`last_rollout_mode` is ``"replay"`` for Robust PLR's replay-only gradient updates.

    Scores reach the sampler through :meth:`report_rollout`; if it is never called, the wrapper warns once
    (:class:`~plr_gym.source.NoScoresWarning`) after ``ScoreWatch.NO_SCORE_STEPS`` (6,144) steps
    with completed episodes and no score.

    :param env: the vector environment; its sub-environments wrapped in ``LevelWrapper``.
    :param sampler: the level sampler (or any :class:`~plr_gym.source.LevelSource`). Alternatively pass
        :class:`~plr_gym.LevelSampler`'s keyword arguments (at least ``levels=``) and the wrapper builds its
        own; not both. The wrapper talks to it as :attr:`source`.
    :param sampler_kwargs: keyword arguments for :class:`~plr_gym.LevelSampler` when ``sampler`` is ``None``.
    :param buffer: a :class:`~plr_gym.LevelBuffer` for open-ended generators (buffer mode).
    :param generator: buffer mode: ``generator(rng) -> level``.
    :param mutator: buffer mode, ACCEL: ``mutator(level, rng) -> level``.
    :param n_mutations: edits per ACCEL child.
    :param level_draw: ``"episode_start"`` (default) or ``"episode_end"``: when each env's next level is
        drawn (see above).

    Example:
        >>> import gymnasium as gym
        >>> import minigrid  # registers the MiniGrid envs
        >>> from plr_gym.wrappers import LevelWrapper
        >>> from plr_gym.vector import PrioritizedLevelReplay
        >>> envs = gym.make_vec("MiniGrid-DoorKey-5x5-v0", num_envs=2, wrappers=[LevelWrapper])
        >>> envs = PrioritizedLevelReplay(envs, levels=range(10), seed=0)
        >>> obs, info = envs.reset()
        >>> bool((info["level"] == envs.current_levels).all()), info["_level"].tolist()
        (True, [True, True])
        >>> obs, rewards, terminated, truncated, info = envs.step(envs.action_space.sample())
        >>> info["level"].shape
        (2,)
        >>> envs.close()
    """

    def __init__(
        self,
        env: VectorEnv[Any, Any, Any],
        sampler: LevelSampler | None = None,
        *,
        buffer: LevelBuffer | None = None,
        generator: Callable[[np.random.Generator], Any] | None = None,
        mutator: Callable[[Any, np.random.Generator], Any] | None = None,
        n_mutations: int = 1,
        level_draw: str = "episode_start",
        **sampler_kwargs: Any,
    ) -> None:
        super().__init__(env)
        owner = f"plr_gym.vector.{type(self).__name__}"
        self.source: LevelSource = make_level_source(
            owner, env.num_envs, sampler, sampler_kwargs, buffer, generator, mutator, n_mutations
        )
        # episode outcomes are read from the infos only for strategies that score them (learnability)
        self._reads_outcomes = self.source.strategy_info.outcome
        mode = env.metadata.get("autoreset_mode")
        if mode is None:
            warnings.warn(
                f"{owner}: {type(env).__name__}.metadata has no 'autoreset_mode'; assuming NEXT_STEP",
                stacklevel=2,
            )
            mode = AutoresetMode.NEXT_STEP
        self.autoreset_mode = AutoresetMode(mode)
        base = env.unwrapped
        if not (hasattr(base, "call") and hasattr(base, "set_attr")):
            raise TypeError(
                f"{owner} needs a vector env with call() and set_attr() (SyncVectorEnv, AsyncVectorEnv), "
                f"got {type(base).__name__}"
            )
        self._base = base
        wrapped = base.call("has_wrapper_attr", "set_next_level")
        if not all(wrapped):
            missing = [i for i, w in enumerate(wrapped) if not w]
            raise ValueError(
                f"{owner}: sub-environments {missing} are not wrapped in plr_gym.wrappers.LevelWrapper, "
                "so they cannot be told which level to play. Build the vector env with "
                "gym.make_vec(env_id, num_envs, wrappers=[..., LevelWrapper]) or "
                "SyncVectorEnv([lambda: LevelWrapper(gym.make(env_id)), ...])"
            )
        n = self.num_envs
        dtype = self.source.level_dtype
        self._current: npt.NDArray[Any] = np.zeros(n, dtype=dtype)
        self._next: npt.NDArray[Any] = np.zeros(n, dtype=dtype)  # the next episode's level: see next_levels
        self._autoreset = np.zeros(n, dtype=bool)  # NEXT_STEP only: envs that reset on the next step
        self._needs_reset = True  # before the first reset, and after anything raised mid-step
        # per-step record for report_rollout: (levels, episode starts, valid rows, dones)
        self._start = np.ones(n, dtype=bool)  # the next step's observation starts an episode
        self._log: deque[tuple[npt.NDArray[Any], ...]] = deque(maxlen=_MAX_LOGGED_STEPS)
        self._log_dropped = 0  # oldest rows pushed out of the full log since the last report
        # constant log rows, shared by every step that logs them (report_rollout stacks them into new arrays)
        self._all_rows = _constant_row(np.ones(n, dtype=bool))
        self._no_rows = _constant_row(np.zeros(n, dtype=bool))
        self._nan_row = _constant_row(np.full(n, np.nan))
        self.scorer: EpisodeScorer | None = None
        self._score_watch = ScoreWatch(
            owner, "Call report_rollout(...) after each rollout to score the episodes (see its docstring)."
        )
        self._start_level_draw(owner, level_draw)

    def _start_level_draw(self, owner: str, level_draw: str) -> None:
        """``level_draw`` checked; SAME_STEP + ``"episode_end"``: each sub-env gets a level provider, which it
        calls at its autoreset (NEXT_STEP: drawn at the end step and queued, see :meth:`_step_next_step`)."""
        self.level_draw = check_level_draw(owner, level_draw, self.source)
        self._provides = self.level_draw == "episode_end" and self.autoreset_mode == AutoresetMode.SAME_STEP
        if self._provides:
            _check_in_process(owner, self._base)
            providers = [level_provider(self.source, i, self._next) for i in range(self.num_envs)]
            self._base.set_attr("level_provider", providers)

    # ------------------------------------------------------------------ levels
    @property
    def current_levels(self) -> npt.NDArray[np.int64]:
        """Level of each env's latest observation; shape ``(num_envs,)``, a copy. Valid after :meth:`reset`.

        In ``NEXT_STEP`` mode an env that just finished keeps its finished level until its reset step.
        """
        return self._current.copy()

    @property
    def next_levels(self) -> npt.NDArray[np.int64]:
        """``SAME_STEP`` mode: the level queued for each env's next episode; shape ``(num_envs,)``, a copy.

        With ``level_draw="episode_end"``: the level drawn last for each env (``NEXT_STEP``: for the reset
        step of an env whose episode just ended)."""
        return self._next.copy()

    def _set_next_levels(self, indices: npt.NDArray[np.int64], levels: Sequence[Any]) -> None:
        """Queue ``levels`` in the ``LevelWrapper`` of the envs ``indices`` (one ``set_attr`` call)."""
        values: list[Any] = [None] * self.num_envs
        if self.autoreset_mode == AutoresetMode.SAME_STEP and not self._provides:
            for i, level in zip(indices.tolist(), levels):
                self._next[i] = level
            values = self._next.tolist()
        else:
            for i, level in zip(indices.tolist(), levels):
                values[i] = level
        self._base.set_attr("next_level", values)

    def _draw(self, indices: npt.NDArray[np.int64]) -> list[Any]:
        """Levels of the new episodes of the envs ``indices``, from the level source."""
        levels = self.source.next_levels(indices)
        return levels.tolist() if isinstance(levels, np.ndarray) else list(levels)

    def _set_current(self, indices: npt.NDArray[np.int64], levels: Sequence[Any]) -> None:
        for i, level in zip(indices.tolist(), levels):
            self._current[i] = level

    def _check_reported(self, info: dict[str, Any], indices: npt.NDArray[np.int64]) -> None:
        """Check that the envs ``indices`` report in ``info["level"]`` the level they were told to play."""
        reported = info.get("level")
        if not isinstance(reported, np.ndarray) or indices.size == 0:
            # none reported, or levels that are dicts, which Gymnasium's info merge splits by key:
            # the check is for int and array-like levels only
            return
        bad = [i for i in indices.tolist() if level_key(reported[i]) != level_key(self._current[i])]
        if bad:
            i = bad[0]
            raise RuntimeError(
                f"env {i} started an episode on level {reported[i]!r} but {type(self).__name__} chose level "
                f"{self._current[i]!r}: something between the vector env and the LevelWrapper passes its "
                "own seed or level to reset(); make LevelWrapper the outermost wrapper of each sub-env"
            )

    # ------------------------------------------------------------------ VectorEnv API
    def reset(  # type: ignore[override, unused-ignore]  # gymnasium 1.2: seed list[int]
        self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Reset all envs, or those in ``options["reset_mask"]``, on freshly sampled levels.

        :param seed: accepted for API compatibility; it does not choose levels (each sub-env's reset seed is
            its level; the sampler's ``seed`` fixes the sequence of levels).
        :param options: passed to every reset sub-env; may hold ``"reset_mask"`` (boolean array, shape
            ``(num_envs,)``) for a partial reset, must not hold ``"level"``.
        :return: ``(obs, info)`` with ``info["level"]``/``info["_level"]`` as in the class docstring.
        """
        n = self.num_envs
        opts = dict(options) if options is not None else None
        if opts is not None and "level" in opts:
            raise ValueError("options must not contain 'level': the sampler chooses each env's level")
        mask = np.ones(n, dtype=bool)
        if opts is not None and "reset_mask" in opts:
            mask = opts["reset_mask"]
            if not isinstance(mask, np.ndarray) or mask.dtype != np.bool_ or mask.shape != (n,):
                raise TypeError(
                    f"options['reset_mask'] must be a boolean numpy array of shape ({n},), got {mask!r}"
                )
        indices = np.flatnonzero(mask)
        self._needs_reset = True
        self.source.begin_rollout()  # a plan-making source plans one if none is open (else: a no-op)
        levels = self._draw(indices)
        # each reset env's LevelWrapper consumes the level queued in it (ids and level objects alike)
        queued = self._queued_elsewhere()
        for i, level in zip(indices.tolist(), levels):
            queued[i] = level
        self._base.set_attr("next_level", queued)
        obs, info = self.env.reset(options=opts)
        self._set_current(indices, levels)
        self._autoreset[indices] = False
        self._start[indices] = True
        self._check_reported(info, indices)
        if self.autoreset_mode == AutoresetMode.SAME_STEP and not self._provides:
            self._set_next_levels(indices, self._draw(indices))
        info["level"] = self._current.copy()
        info["_level"] = mask.copy()
        self._needs_reset = False
        return obs, info

    def _queued_elsewhere(self) -> list[Any]:
        """What a reset leaves queued in each sub-env (the reset envs' entries are then overwritten)."""
        n = self.num_envs
        if self.autoreset_mode == AutoresetMode.SAME_STEP and not self._provides:
            queued: list[Any] = self._next.tolist()
            return queued
        if self.autoreset_mode == AutoresetMode.NEXT_STEP and self.level_draw == "episode_end":
            # envs whose episode ended keep the level drawn for their reset step
            return [self._next[i].item() if self._autoreset[i] else None for i in range(n)]
        return [None] * n

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        """Step every env; ``info["level"]`` is the level of each env's transition (see the class doc)."""
        if self._needs_reset:
            raise RuntimeError(
                f"{type(self).__name__}: call reset() before step() (first use, or a previous call raised)"
            )
        self._needs_reset = True
        if self.autoreset_mode == AutoresetMode.NEXT_STEP:
            obs, rewards, terminated, truncated, info, levels, ended = self._step_next_step(actions)
        else:
            obs, rewards, terminated, truncated, info, levels, ended = self._step_same_step(actions)
        self._score_watch.step(int(ended.sum()), self.source)
        info["level"] = levels
        info["_level"] = self._all_rows.copy()
        self._needs_reset = False
        return obs, rewards, terminated, truncated, info

    def _step_next_step(self, actions: Any) -> tuple[Any, ...]:
        """:meth:`step` in ``NEXT_STEP`` mode: envs that ended last step reset now (a row of no episode)."""
        starting = np.flatnonzero(self._autoreset)
        drawn_at_end = self.level_draw == "episode_end"
        if starting.size:
            if drawn_at_end:  # drawn and queued when the episode ended (the previous step)
                new = [self._next[i].item() for i in starting.tolist()]
            else:
                new = self._draw(starting)
                self._set_next_levels(starting, new)
        obs, rewards, terminated, truncated, info = self.env.step(actions)
        if starting.size:
            self._set_current(starting, new)
            self._check_reported(info, starting)
        ended = np.logical_or(terminated, truncated)
        self._autoreset = ended
        if drawn_at_end and ended.any():
            finished = np.flatnonzero(ended)
            levels_next = self._draw(finished)
            self._set_next_levels(finished, levels_next)
            for i, level in zip(finished.tolist(), levels_next):
                self._next[i] = level
        levels = self._current.copy()
        valid = np.ones(self.num_envs, dtype=bool)
        valid[starting] = False  # reset steps: no transition of any episode
        self._log_dropped += int(len(self._log) == self._log.maxlen)
        self._log.append(
            (
                levels,
                self._start.copy(),
                valid,
                ended,
                np.logical_and(truncated, ~terminated),
                self._step_outcomes(info, ended),
            )
        )
        self._start[starting] = True
        self._start[valid] = False
        return obs, rewards, terminated, truncated, info, levels, ended

    def _step_same_step(self, actions: Any) -> tuple[Any, ...]:
        """:meth:`step` in ``SAME_STEP`` and ``DISABLED`` modes: every row is a transition."""
        mode = self.autoreset_mode
        obs, rewards, terminated, truncated, info = self.env.step(actions)
        levels = self._current.copy()
        ended = np.logical_or(terminated, truncated)
        self._log_dropped += int(len(self._log) == self._log.maxlen)
        self._log.append(
            (
                levels,
                self._start.copy(),
                self._all_rows,
                ended,
                self._no_rows,  # no truncation row: the final observation is not on a next row
                self._step_outcomes(info, ended),
            )
        )
        self._start[:] = ended if mode == AutoresetMode.SAME_STEP else False
        if mode == AutoresetMode.SAME_STEP:
            done = ended.nonzero()[0]
            if done.size:
                self._set_current(done, [self._next[i] for i in done.tolist()])  # episode_end: just drawn
                self._check_reported(info, done)
                if not self._provides:
                    self._set_next_levels(done, self._draw(done))
        return obs, rewards, terminated, truncated, info, levels, ended

    def _step_outcomes(self, info: dict[str, Any], ended: npt.NDArray[Any]) -> npt.NDArray[np.float64]:
        """Outcomes of the episodes ended at this step (learnability), else an all-NaN row at no cost."""
        if self._reads_outcomes and ended.any():
            return _outcomes(info, ended)
        return self._nan_row

    # ------------------------------------------------------------------ scoring
    def report_rollout(
        self,
        rewards: Any,
        values: Any,
        advantages: Any = None,
        last_values: Any = None,
        logits: Any = None,
        entropies: Any = None,
        gamma: float = 0.99,
        successes: Any = None,
    ) -> list[tuple[int, float]]:
        """Score the episodes completed in the last ``n_steps`` steps and update the sampler.

        For your own training loop (CleanRL style): after computing advantages, pass the rollout's arrays,
        shaped ``(n_steps, num_envs)`` and aligned with the last ``n_steps`` calls to :meth:`step` (row
        ``t`` = the step taken from observation ``obs[t]``). The wrapper knows each step's level, episode
        starts and ends, and in ``NEXT_STEP`` mode which rows are reset steps (left out of every episode);
        the shared :class:`~plr_gym.scoring.EpisodeScorer` stitches episodes across rollouts and reports
        each completed episode once, with the sampler's ``strategy``.

        :param rewards: ``(n_steps, num_envs)`` rewards.
        :param values: ``(n_steps, num_envs)`` value predictions ``V(s_t)``.
        :param advantages: ``(n_steps, num_envs)`` advantages (GAE); needed by value_l1, gae,
            positive_value_loss.
        :param last_values: ``(num_envs,)`` ``V`` of the observation after the last step (bootstrap of
            ``one_step_td_error``); zeros if omitted.

        Truncated episodes (``NEXT_STEP`` mode): ``one_step_td_error`` bootstraps a truncated episode's
        last step with ``V(final observation)``, which is ``values`` on the following reset-step row (its
        observation is the final one), or ``last_values`` if the episode was truncated on the rollout's
        last step. In ``SAME_STEP`` and ``DISABLED`` modes the final observation is not on any row: fold
        ``gamma * V(info["final_obs"])`` into the truncated step's reward yourself (as SB3 does), and the
        step is bootstrapped with 0.
        :param logits: ``(n_steps, num_envs, n_actions)`` action logits (normalised here), for
            policy_entropy, least_confidence and min_margin with discrete actions.
        :param entropies: ``(n_steps, num_envs)`` policy entropies (policy_entropy, continuous actions).
        :param gamma: discount factor (``one_step_td_error``), in ``[0, 1]``.
        :param successes: ``(n_steps, num_envs)`` outcome of the episode ending at each step (1 success, 0
            failure, NaN unknown), for ``strategy="learnability"``. Default: read by the wrapper at each
            episode end from ``info["is_success"]``, else from ``info["episode"]["r"] > 0`` (Gymnasium's
            ``RecordEpisodeStatistics``), see :func:`plr_gym.scoring.episode_success`.
        :return: the ``(level, score)`` pairs reported to the sampler.
        :raises ValueError: if the arrays do not have one row per step taken since the last report, or
            hold NaN/inf. Nothing is consumed then: fix the arrays and call again. Also if more than
            65,536 steps were taken since the last report: the older rows were not kept, so the steps are
            discarded and :meth:`reset` must be called before the next :meth:`step`.
        """
        self._score_watch.attached = True
        if not self.source.strategy_info.uses_scores:
            self._log.clear()
            self._log_dropped = 0
            return []
        rew = self._checked_rewards(rewards)
        gamma = _check_gamma(gamma)
        reported = self._score_logged_steps(
            rew, gamma, values, advantages, last_values, logits, entropies, successes
        )
        self._log.clear()  # only once the report was accepted: a refused one can be retried
        self.source.end_rollout()
        kept = self.source.retained_levels()
        if (
            kept is not None and self.scorer is not None
        ):  # levels the source forgot: forget their best returns
            self.scorer.prune_max_returns(kept)
        return reported

    def _checked_rewards(self, rewards: Any) -> npt.NDArray[Any]:
        """``rewards`` as an array, refused unless it has one row per logged step (all of them kept)."""
        if self._log_dropped:
            taken, self._log_dropped = self._log_dropped + len(self._log), 0
            self._log.clear()
            self._needs_reset = True  # the scorer's open episodes cannot continue across the lost rows
            raise ValueError(
                f"{taken} steps were taken since the last report_rollout, but only the newest "
                f"{_MAX_LOGGED_STEPS} are kept: these steps cannot be scored and were discarded. Call "
                "reset(), then report_rollout at least once per rollout (at most every "
                f"{_MAX_LOGGED_STEPS} steps)"
            )
        rew = np.asarray(rewards)
        if rew.ndim != 2 or rew.shape[1] != self.num_envs:
            raise ValueError(f"rewards must have shape (n_steps, {self.num_envs}), got {rew.shape}")
        n_steps = rew.shape[0]
        if n_steps != len(self._log):
            raise ValueError(
                f"got {n_steps} rows of rollout data but {len(self._log)} steps were taken since the last "
                "report_rollout: pass one row per step taken (rows of different rollouts would join "
                "unrelated episodes)"
            )
        return rew

    def _score_logged_steps(
        self,
        rew: Any,
        gamma: float,
        values: Any,
        advantages: Any,
        last_values: Any,
        logits: Any,
        entropies: Any,
        successes: Any,
    ) -> list[tuple[Any, float]]:
        """The logged steps and the rollout's arrays to the scorer, which scores with ``gamma`` from now on
        (a refused call leaves its discount as it was)."""
        if self.scorer is None:
            self.scorer = EpisodeScorer(self.source, n_envs=self.num_envs, strategy=self.source.strategy)
        steps = list(self._log)
        levels, starts, valid, ended, truncated, outcomes = (
            np.stack([row[k] for row in steps]) for k in range(6)
        )
        if successes is not None:
            outcomes = np.asarray(successes, dtype=np.float64)
        log_policy = _log_policy(logits)
        old_gamma, self.scorer.gamma = self.scorer.gamma, gamma
        try:
            return self._process(
                levels,
                starts,
                ended,
                truncated,
                valid,
                rew,
                values,
                advantages,
                last_values,
                log_policy,
                entropies,
                outcomes,
            )
        except BaseException:
            self.scorer.gamma = old_gamma
            raise

    def _process(
        self,
        levels: Any,
        starts: Any,
        ended: Any,
        truncated: Any,
        valid: Any,
        rew: Any,
        values: Any,
        advantages: Any,
        last_values: Any,
        log_policy: Any,
        entropies: Any,
        outcomes: Any,
    ) -> list[tuple[Any, float]]:
        assert self.scorer is not None
        return self.scorer.process_rollout(
            levels=levels,
            episode_starts=starts,
            dones=ended,
            rewards=rew,
            values=values,
            advantages=advantages,
            last_values=last_values,
            log_policy=log_policy,
            entropies=entropies,
            valid=valid,
            truncations=truncated,
            successes=outcomes,
        )

    # ------------------------------------------------------------------ the level source
    # sampler, buffer, rollout_mode, last_rollout_mode: SourceAccess
    def begin_rollout(self) -> str:
        """Start a rollout of the level source; returns its :attr:`rollout_mode`.

        Buffer mode: decide the next rollout (replay, new or mutate) and assign one level per env, then
        call :meth:`reset`: every env plays its assigned level in every episode of the rollout.
        :meth:`report_rollout` closes the rollout (and, with a mutator, makes the children of the
        replayed levels, played by the next rollout). With a :class:`~plr_gym.LevelSampler` levels are
        drawn per episode and the mode is ``"none"``.
        """
        self.source.begin_rollout()
        return self.source.rollout_mode


def _check_in_process(owner: str, base: Any) -> None:
    """SAME_STEP with ``level_draw="episode_end"`` needs sub-envs that can call the wrapper at their
    autoreset: in this process."""
    if isinstance(base, SyncVectorEnv) or getattr(base, "level_providers_in_process", False):
        return
    raise ValueError(
        f"{owner}: level_draw='episode_end' cannot be used with {type(base).__name__} in SAME_STEP "
        "autoreset mode: its sub-envs reset inside the step (in their worker processes for "
        "AsyncVectorEnv), so drawing each level when the previous episode ends would need a round "
        "trip to the learner's process per ended episode. Use SyncVectorEnv (or "
        "plr_gym.envs.ProcgenVectorEnv for Procgen), NEXT_STEP autoreset, or "
        "level_draw='episode_start'"
    )


def _constant_row(row: npt.NDArray[Any]) -> npt.NDArray[Any]:
    row.flags.writeable = False
    return row


def _env_info(info: dict[str, Any], e: int) -> dict[str, Any]:
    """Env ``e``'s entries of a Gymnasium vector ``info`` (dict of arrays with ``_key`` masks), as a dict."""
    out: dict[str, Any] = {}
    for key, value in info.items():
        if key.startswith("_"):
            continue
        mask = info.get("_" + key)
        if mask is not None and not bool(np.asarray(mask)[e]):
            continue
        if isinstance(value, dict):
            out[key] = _env_info(value, e)
        elif isinstance(value, np.ndarray) and value.ndim >= 1 and value.shape[0] > e:
            out[key] = value[e]
    return out


def _outcomes(info: dict[str, Any], ended: npt.NDArray[Any]) -> npt.NDArray[np.float64]:
    """Per env: 1/0 outcome of the episode that ended at this step, NaN where none ended or it is unknown."""
    out = np.full(ended.shape, np.nan)
    for e in np.flatnonzero(ended).tolist():
        env_info = _env_info(info, e)
        final = env_info.get("final_info")  # SAME_STEP autoreset: the ended episode's last info
        outcome = episode_success(final if isinstance(final, dict) and final else env_info)
        if outcome is None and isinstance(final, dict):
            outcome = episode_success(env_info)
        if outcome is not None:
            out[e] = float(outcome)
    return out
