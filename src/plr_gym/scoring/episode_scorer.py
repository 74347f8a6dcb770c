"""The scoring engine: :class:`EpisodeScorer` cuts rollouts into episodes and scores each once.

:meth:`EpisodeScorer.process_rollout` is four named steps:

1. **check** the rollout's arrays (``_checked_rollout``, giving a ``_Rollout``);
2. **cut** each env's valid steps into episodes (``_env_steps``, ``_episode_bounds``), with the value that
   bootstraps each step (``_next_values``);
3. **stitch** an episode carried over from the last rollout to its continuation (``_stitched``) and
   **score** each completed one with the strategy's function (``_episode``, ``_score``);
4. **report** the rollout's scores to the target in one ``update_batch`` (``_report``).

The score functions themselves live in :mod:`plr_gym.scoring.strategies`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from plr_gym._levels import level_key, load_values, save_values
from plr_gym._sizes import allocating
from plr_gym.scoring.strategies import OUTCOME_STRATEGIES, EpisodeData, get_score_function, strategy_spec

#: Fields an :class:`EpisodeScorer` keeps per step, and their per-step shape suffix.
_STEP_FIELDS = (
    "rewards",
    "raw_rewards",
    "values",
    "next_values",
    "advantages",
    "log_policy",
    "entropies",
    "successes",
)
#: How :class:`EpisodeScorer` treats an episode still running when a rollout ends.
PARTIAL_EPISODES = ("stitch", "commit")
#: Strategies whose score level-replay computes from ``returns[start:] - value_preds[start:]``: for a
#: rollout's last, running chunk those slices of its ``(T + 1)``-row storage run one row past the
#: rollout, adding the pair ``(returns[T], value_preds[T]) = (0, V(s_T))`` to the chunk. ``"commit"``
#: reproduces it (:func:`_with_reference_tail`).
REFERENCE_TAIL_STRATEGIES = ("value_l1", "gae")


def _with_reference_tail(chunk: dict[str, Any], last_value: float) -> dict[str, Any]:
    """The running chunk as level-replay scores it: one more step with advantage ``0 - V(s_T)``, value
    ``V(s_T)`` and nothing else (its storage's row ``T`` after ``compute_returns``)."""
    extra = {"advantages": -last_value, "values": last_value}
    return {k: np.append(v, extra.get(k, 0.0)) if v.ndim == 1 else v for k, v in chunk.items()}


def _check_gamma(gamma: Any) -> float:
    if isinstance(gamma, (bool, np.bool_)) or not isinstance(gamma, (int, float, np.integer, np.floating)):
        raise TypeError(f"gamma must be a number in [0, 1], got {type(gamma).__name__} {gamma!r}")
    if not 0.0 <= float(gamma) <= 1.0:
        raise ValueError(f"gamma must be a number in [0, 1], got {gamma!r}")
    return float(gamma)


class ScoreTarget(Protocol):
    """What an :class:`EpisodeScorer` reports to: a :class:`~plr_gym.LevelSampler` or anything alike."""

    def update_batch(self, levels: Any, scores: Any) -> None: ...


def _flags(name: str, value: Any) -> npt.NDArray[np.bool_]:
    """A mask of ``process_rollout`` as booleans: bools, or numbers that are all 0 or 1 (SB3 stores
    ``episode_starts`` as float32); anything else (0.5, a complex number, strings) is a ``TypeError``."""
    arr = np.asarray(value)
    if arr.dtype == np.bool_:
        return arr
    if arr.dtype.kind in "iuf" and np.isin(arr, (0, 1)).all():
        return arr.astype(bool)
    raise TypeError(
        f"{name} must hold booleans (or 0 and 1), got dtype {arr.dtype}"
        + (f" with values {np.unique(arr)[:4].tolist()}" if arr.dtype.kind in "iufc" else "")
    )


def _reals(name: str, value: Any) -> npt.NDArray[np.float64]:
    """An array of ``process_rollout`` as float64: bools, ints or floats only (a complex array would lose
    its imaginary part, silently)."""
    arr = np.asarray(value)
    if arr.dtype.kind not in "biuf":
        raise TypeError(f"{name} must hold real numbers, got dtype {arr.dtype}")
    return arr.astype(np.float64)


@dataclass(frozen=True)
class _Rollout:
    """One rollout's checked arrays (step 1), ``(n_steps, n_envs)`` unless stated."""

    n_steps: int
    n_envs: int
    starts: npt.NDArray[np.bool_]  # whether s_t starts an episode
    levels: npt.NDArray[Any]  # (n_steps, n_envs) level ids or level objects
    dones: npt.NDArray[np.bool_]  # (n_envs,) for the last step only, or (n_steps, n_envs)
    valid: npt.NDArray[np.bool_]  # steps that belong to an episode
    fields: dict[str, npt.NDArray[np.float64]]  # rewards, values, ... (log_policy: (n_steps, n_envs, A))
    last_values: npt.NDArray[np.float64]  # (n_envs,) V after the last step
    truncations: npt.NDArray[np.bool_] | None  # valid steps that ended their episode by truncation


@dataclass(frozen=True)
class _EnvSteps:
    """One env's valid steps of a rollout, in time order (step 2): ``T`` of them."""

    env: int
    rows: npt.NDArray[np.int64]  # (T,) their rows in the rollout
    starts: npt.NDArray[np.bool_]  # (T,) whether each step starts an episode
    levels: npt.NDArray[Any]  # (T,) each step's level
    steps: dict[str, npt.NDArray[np.float64]]  # the rollout's fields, plus next_values
    ends: npt.NDArray[np.bool_]  # (T,) whether each step ends its episode
    last_value: Any  # V after the rollout's last step (GAE's bootstrap)


def _checked_levels(levels: Any, n_steps: int, n_envs: int) -> npt.NDArray[Any]:
    lv = np.asarray(levels)
    if lv.dtype.kind in "bfc":
        raise TypeError(
            f"levels must be int level ids (or a generator's level objects), got dtype {lv.dtype}"
        )
    if lv.shape[:2] != (n_steps, n_envs):
        raise ValueError(f"levels must have shape {(n_steps, n_envs)}, got {lv.shape}")
    return lv


def _checked_dones(dones: Any, n_steps: int, n_envs: int) -> npt.NDArray[np.bool_]:
    done_arr = _flags("dones", dones)
    if done_arr.shape not in ((n_envs,), (n_steps, n_envs)) and done_arr.size != n_envs:
        raise ValueError(f"dones must have shape ({n_envs},) or ({n_steps}, {n_envs}), got {done_arr.shape}")
    if done_arr.shape != (n_steps, n_envs):
        done_arr = done_arr.reshape(n_envs)
    return done_arr


def _checked_last_values(last_values: Any, n_envs: int) -> npt.NDArray[np.float64]:
    boot = np.zeros(n_envs) if last_values is None else _reals("last_values", last_values).reshape(-1)
    if boot.shape != (n_envs,):
        raise ValueError(f"last_values must have shape ({n_envs},), got {boot.shape}")
    if not np.isfinite(boot).all():
        raise ValueError("last_values contains NaN or inf")
    return boot


def _env_steps(rollout: _Rollout, e: int) -> _EnvSteps | None:
    """Env ``e``'s valid steps, where its episodes end and the value bootstrapping each step (``None``:
    no valid step)."""
    rows = np.flatnonzero(rollout.valid[:, e])
    if rows.size == 0:
        return None
    starts = rollout.starts[rows, e]
    steps = {k: v[rows, e] for k, v in rollout.fields.items()}
    if rollout.dones.ndim == 2:
        ends = rollout.dones[rows, e]
    else:
        ends = np.append(starts[1:], rollout.dones[e])
    steps["next_values"] = _next_values(rollout, e, rows, steps["values"], ends)
    return _EnvSteps(e, rows, starts, rollout.levels[rows, e], steps, ends, rollout.last_values[e])


def _next_values(
    rollout: _Rollout, e: int, rows: npt.NDArray[np.int64], values: Any, ends: Any
) -> npt.NDArray[np.float64]:
    """``V(s_{t+1})`` of each step: the next step's value, ``last_values`` after the rollout's last step,
    0 at an episode's end, ``V(final observation)`` at a truncated episode's end."""
    nxt = np.append(values[1:], rollout.last_values[e])
    nxt[ends] = 0.0
    if rollout.truncations is not None:  # a truncated episode bootstraps with V(final observation)
        full_next = np.append(rollout.fields["values"][1:, e], rollout.last_values[e])
        cut = ends & rollout.truncations[rows, e]
        nxt[cut] = full_next[rows[cut]]
    return nxt


def _episode_bounds(ends: npt.NDArray[np.bool_]) -> Iterator[tuple[int, int]]:
    """``[begin, stop)`` of each episode (or chunk) of one env's steps, in time order: each ends at an
    episode end, the last one may run past the rollout's end."""
    bounds = np.flatnonzero(ends).tolist()
    begin = 0
    for stop in [b + 1 for b in bounds] + ([ends.size] if not bounds or bounds[-1] + 1 < ends.size else []):
        yield begin, stop
        begin = stop


def _stitched(env: int, carried: dict[str, Any], chunk: dict[str, Any], level: Any) -> dict[str, Any]:
    """An episode carried over from the last rollout joined to its continuation ``chunk``."""
    if level_key(carried["level"]) != level_key(level):
        raise ValueError(f"env {env}: episode on level {carried['level']!r} continued on level {level!r}")
    return {k: np.concatenate([carried[k], chunk[k]]) for k in chunk}


class EpisodeScorer:
    """Cuts rollouts into episodes and reports each completed episode's score exactly once.

    One scoring engine for every front end (the SB3 :class:`~plr_gym.PLRCallback` and the Gymnasium
    vector wrapper). Call :meth:`process_rollout` once per rollout with arrays shaped
    ``(n_steps, n_envs)``, as in SB3's ``RolloutBuffer``: step ``t`` of env ``e`` holds the observation
    ``s_t``, whether ``s_t`` starts an episode (``episode_starts``), the reward of the action taken in it,
    ``V(s_t)`` and the GAE advantage.

    - ``partial_episodes="stitch"`` (default): an episode that runs past the end of a rollout stays
      *open*; its arrays are concatenated with its continuation in the next rollout and it is scored
      once, when it completes, over all its steps. ``max_mc`` uses the best return known when the
      episode completes; ``one_step_td_error`` bootstraps the chunk's last step with the ``last_values``
      GAE used. An episode whose start was not observed (the scorer was attached mid-episode), or whose
      continuation never came (the env was reset in between, e.g. a new ``learn()`` call), is dropped,
      never scored: a level with no completed episode stays unscored.
    - ``partial_episodes="commit"``: what PLR's reference code (level-replay) computes. Its sampler
      keeps the score of a rollout's last, unfinished chunk as a *partial* score and commits it as a
      full update of the level's score in ``after_update``, called after every rollout; the rest of the
      episode, in the next rollout, is then scored as an episode of its own. Here the running chunk is
      scored as if the episode ended at the rollout's end (bootstrapped with ``last_values``) and
      reported; its continuation is scored separately. As in level-replay, the running chunks are
      reported after all of the rollout's completed episodes, a chunk whose score is exactly 0 is
      not reported (level-replay's ``after_update`` commits only non-zero partial scores), and for
      ``value_l1`` and ``gae`` the running chunk's mean includes one more term, ``0 - V(s_T)`` (level-replay
      slices ``returns[start:]`` and ``value_preds[start:]`` of its ``T + 1`` rows: see
      :data:`REFERENCE_TAIL_STRATEGIES`). ``max_mc``
      records best returns from completed episodes only; a chunk uses the best known return (its own
      return if none is known yet). Use it to compare with level-replay or Syllabus runs (``plr-gym
      train --preset paper-procgen`` does); ``"stitch"`` scores each episode once, as the paper defines.
    - All scores of one rollout reach the target in one ``update_batch`` call, env by env (env 0's
      episodes in time order, then env 1's...), not in completion order across envs; with ``"commit"``
      the running chunks follow, env by env.

    :param target: where scores go: a :class:`~plr_gym.LevelSampler` (or an object with ``update_batch``).
    :param n_envs: number of parallel envs (columns of the rollout arrays).
    :param strategy: a strategy name of :data:`SCORE_FUNCTIONS` or a callable ``fn(EpisodeData) -> float``.
    :param gamma: the algorithm's discount, passed to the score function (``one_step_td_error``).
    :param partial_episodes: ``"stitch"`` (default) or ``"commit"`` (level-replay's behaviour), see above.

    Example:
        >>> import numpy as np
        >>> from plr_gym import LevelSampler
        >>> from plr_gym.scoring import EpisodeScorer
        >>> sampler = LevelSampler(levels=range(10))
        >>> scorer = EpisodeScorer(sampler, n_envs=1, strategy="value_l1")
        >>> starts = np.array([[1], [0], [0], [1]], dtype=bool)   # episodes: steps 0-2, then 3-...
        >>> levels = np.array([[4], [4], [4], [7]])
        >>> adv = np.array([[0.5], [-0.5], [1.0], [2.0]])
        >>> scorer.process_rollout(levels=levels, episode_starts=starts, dones=np.array([False]),
        ...                        rewards=np.zeros((4, 1)), values=np.zeros((4, 1)), advantages=adv)
        [(4, 0.6666666666666666)]
        >>> scorer.num_open_episodes      # level 7's episode continues in the next rollout
        1
    """

    def __init__(
        self,
        target: ScoreTarget,
        n_envs: int,
        strategy: str | Callable[[EpisodeData], float] = "value_l1",
        gamma: float = 0.99,
        partial_episodes: str = "stitch",
    ) -> None:
        if isinstance(n_envs, bool) or not isinstance(n_envs, (int, np.integer)) or n_envs < 1:
            raise ValueError(f"n_envs must be a positive int, got {n_envs!r}")
        if not isinstance(partial_episodes, str) or partial_episodes not in PARTIAL_EPISODES:
            raise ValueError(
                f"partial_episodes={partial_episodes!r} is not supported; choose 'stitch' or 'commit'"
            )
        if partial_episodes == "commit" and isinstance(strategy, str) and strategy in OUTCOME_STRATEGIES:
            raise ValueError(
                f"strategy={strategy!r} scores episode outcomes, which an unfinished episode does not have: "
                "use partial_episodes='stitch'"
            )
        if not hasattr(target, "update_batch"):
            raise TypeError(
                f"target must have an update_batch(levels, scores) method, got {type(target).__name__}"
            )
        self.target = target
        self.n_envs = int(n_envs)
        self.strategy = strategy
        self.score_fn = get_score_function(strategy)
        self.gamma = _check_gamma(gamma)
        self.partial_episodes = partial_episodes
        with allocating("n_envs", n_envs):
            self._open: list[dict[str, Any] | None] = [None] * self.n_envs
        self.max_returns: dict[Any, float] = {}
        self._level_of_key: dict[Any, Any] = {}
        self.num_scored = 0
        self.num_dropped = 0

    @property
    def num_open_episodes(self) -> int:
        return sum(o is not None for o in self._open)

    @property
    def needs_policy(self) -> bool:
        """True if the strategy needs the action distribution (``log_policy`` or ``entropies``)."""
        return strategy_spec(self.strategy).needs_policy

    def process_rollout(
        self,
        *,
        levels: Any,
        episode_starts: Any,
        dones: Any,
        rewards: Any,
        values: Any,
        advantages: Any = None,
        last_values: Any = None,
        log_policy: Any = None,
        entropies: Any = None,
        valid: Any = None,
        successes: Any = None,
        raw_rewards: Any = None,
        truncations: Any = None,
    ) -> list[tuple[Any, float]]:
        """Score the episodes that complete in this rollout and report them to the target.

        :param levels: ``(n_steps, n_envs)`` level of each step's episode (``infos[e]["level"]``).
        :param episode_starts: ``(n_steps, n_envs)`` whether ``s_t`` is the first observation of an episode.
        :param dones: whether a step ended its episode: ``(n_envs,)`` for the rollout's last step only (SB3:
            the other ends follow from ``episode_starts``), or ``(n_steps, n_envs)`` for every step.
        :param rewards: ``(n_steps, n_envs)`` rewards (SB3 folds ``γ·V(terminal obs)`` into the reward of a
            truncated episode's last step, so episode ends bootstrap with 0 here).
        :param values: ``(n_steps, n_envs)`` value predictions ``V(s_t)``.
        :param advantages: ``(n_steps, n_envs)`` GAE advantages (value_l1, positive_value_loss, gae).
        :param last_values: ``(n_envs,)`` ``V`` of the observation after the last step (GAE's bootstrap);
            zeros if omitted.
        :param log_policy: ``(n_steps, n_envs, n_actions)`` normalised log-probabilities of the policy.
        :param entropies: ``(n_steps, n_envs)`` policy entropies (continuous actions).
        :param valid: ``(n_steps, n_envs)`` steps that belong to an episode (default: all). Invalid steps,
            e.g. the reset steps of Gymnasium's ``NEXT_STEP`` autoreset, are removed before cutting.
        :param raw_rewards: ``(n_steps, n_envs)`` the env's rewards before any bootstrap was folded in
            (SB3 adds ``γ·V(terminal obs)`` to a truncated episode's last reward). Episodic returns
            (``max_mc``'s best return) are summed from these; default ``rewards``.
        :param truncations: ``(n_steps, n_envs)`` valid steps that ended their episode by truncation
            (time limit), with ``valid`` marking the ``NEXT_STEP`` reset rows: such a step's one-step
            bootstrap is ``values`` of the next row (the reset row, whose observation is the final one),
            or ``last_values`` on the rollout's last row, instead of 0.
        :param successes: ``(n_steps, n_envs)`` outcome of the episode that ends at each step (1 success,
            0 failure, NaN unknown; read at episode ends only), for ``learnability``.
        :return: the ``(level, score)`` pairs reported, env by env.
        """
        # long by its docstring only (one :param per rollout array); the work is the four steps below
        arrays = {
            "rewards": rewards,
            "values": values,
            "advantages": advantages,
            "log_policy": log_policy,
            "entropies": entropies,
            "successes": successes,
            "raw_rewards": raw_rewards,
        }
        rollout = self._checked_rollout(
            levels, episode_starts, dones, valid, last_values, truncations, arrays
        )
        snapshot = (dict(self.max_returns), dict(self._level_of_key), self.num_dropped)
        try:
            return self._process(rollout)
        except BaseException:  # leave the scorer as it was: the same rollout may be retried
            self.max_returns, self._level_of_key, self.num_dropped = snapshot
            raise

    # ------------------------------------------------------------------ step 1: check
    def _checked_rollout(
        self,
        levels: Any,
        episode_starts: Any,
        dones: Any,
        valid: Any,
        last_values: Any,
        truncations: Any,
        arrays: dict[str, Any],
    ) -> _Rollout:
        """Every array of :meth:`process_rollout` checked (dtype, shape, finite where it must be)."""
        starts = _flags("episode_starts", episode_starts)
        n_steps, n_envs = self._check_shape("episode_starts", starts, None)
        lv = _checked_levels(levels, n_steps, n_envs)
        done_arr = _checked_dones(dones, n_steps, n_envs)
        mask = np.ones((n_steps, n_envs), dtype=bool) if valid is None else _flags("valid", valid)
        self._check_shape("valid", mask, (n_steps, n_envs))
        fields = self._checked_fields(arrays, mask, (n_steps, n_envs))
        boot = _checked_last_values(last_values, n_envs)
        trunc = None
        if truncations is not None:
            trunc = self._checked_truncations(truncations, mask, fields["values"], (n_steps, n_envs))
        return _Rollout(n_steps, n_envs, starts, lv, done_arr, mask, fields, boot, trunc)

    def _checked_fields(
        self, arrays: dict[str, Any], mask: npt.NDArray[np.bool_], shape: tuple[int, int]
    ) -> dict[str, Any]:
        """The per-step arrays as float64 (``raw_rewards`` defaults to ``rewards``), finite on valid steps."""
        fields: dict[str, Any] = {
            "rewards": self._check_shape("rewards", _reals("rewards", arrays["rewards"]), shape),
            "values": self._check_shape("values", _reals("values", arrays["values"]), shape),
        }
        for name in ("advantages", "log_policy", "entropies", "successes", "raw_rewards"):
            if arrays[name] is not None:
                fields[name] = self._check_shape(name, _reals(name, arrays[name]), shape)
        if "successes" in fields:
            known = fields["successes"][~np.isnan(fields["successes"])]
            if not np.isin(known, (0.0, 1.0)).all():
                raise ValueError("successes must hold 1 (success), 0 (failure) or NaN (unknown)")
        fields.setdefault("raw_rewards", fields["rewards"])
        for name, arr in fields.items():
            if name not in ("log_policy", "successes") and not np.isfinite(arr[mask]).all():
                raise ValueError(f"{name} contains NaN or inf")
        return fields

    def _checked_truncations(
        self, truncations: Any, mask: npt.NDArray[np.bool_], values: Any, shape: tuple[int, int]
    ) -> npt.NDArray[np.bool_]:
        """Valid truncated steps; the rows after them (their final observations) must have finite values."""
        trunc: npt.NDArray[np.bool_] = self._check_shape(
            "truncations", _flags("truncations", truncations), shape
        )
        trunc = trunc & mask
        rows, cols = np.nonzero(trunc[:-1])
        if not np.isfinite(values[rows + 1, cols]).all():
            raise ValueError(
                "values of the rows after truncated steps (the final observations) contain NaN or inf"
            )
        return trunc

    # ------------------------------------------------------------------ steps 2-4: cut, stitch, score, report
    def _process(self, rollout: _Rollout) -> list[tuple[Any, float]]:
        """Cut each env's steps into episodes, stitch, score, and report: completed episodes env by env,
        then (``"commit"``) the running chunks, which level-replay commits in ``after_update``, once the
        whole rollout was scored."""
        done: list[tuple[Any, float]] = []
        running: list[tuple[Any, float]] = []
        new_open = list(self._open)
        for e in range(rollout.n_envs):
            env = _env_steps(rollout, e)
            if env is None:
                continue
            carried = self._carried(new_open[e], env)
            new_open[e] = None
            for begin, stop in _episode_bounds(env.ends):
                opened = self._episode(env, begin, stop, carried if begin == 0 else None, done, running)
                if opened is not None:
                    new_open[e] = opened
        return self._report(done + running, new_open)

    def _carried(self, carried: dict[str, Any] | None, env: _EnvSteps) -> dict[str, Any] | None:
        """The episode left open on this env by the last rollout, unless the env was reset in between."""
        if carried is not None and env.starts[0]:
            self.num_dropped += 1  # the env was reset: the open episode never completes
            return None
        return carried

    def _episode(
        self,
        env: _EnvSteps,
        begin: int,
        stop: int,
        carried: dict[str, Any] | None,
        done: list[tuple[Any, float]],
        running: list[tuple[Any, float]],
    ) -> dict[str, Any] | None:
        """Steps ``[begin, stop)`` of one env, stitched to ``carried``: scored into ``done`` (or, a running
        chunk under ``"commit"``, ``running``), dropped, or returned to stay open into the next rollout."""
        chunk = {k: v[begin:stop] for k, v in env.steps.items()}
        level = self._episode_level(env.env, env.levels[begin:stop], env.rows[begin])
        observed_start = bool(env.starts[begin])
        if carried is not None:
            chunk = _stitched(env.env, carried, chunk, level)
            observed_start = True
        ended = bool(env.ends[stop - 1])
        if not ended and self.partial_episodes == "commit":
            self._commit_running(level, chunk, env.last_value, running)
        elif not ended:  # runs past the rollout's end
            if observed_start:
                return {"level": level, **chunk}
            self.num_dropped += 1
        elif self.partial_episodes == "commit":
            done.append((level, self._score(level, chunk, complete=observed_start)))
        elif observed_start:
            done.append((level, self._score(level, chunk)))
        else:
            self.num_dropped += 1
        return None

    def _commit_running(
        self, level: Any, chunk: dict[str, Any], last_value: Any, running: list[tuple[Any, float]]
    ) -> None:
        """level-replay: the running chunk's score is committed as if the episode ended here, unless it is
        exactly 0 (its after_update skips zero partial scores)."""
        if isinstance(self.strategy, str) and self.strategy in REFERENCE_TAIL_STRATEGIES:
            chunk = _with_reference_tail(chunk, float(last_value))
        score = self._score(level, chunk, complete=False)
        if score != 0.0:
            running.append((level, score))

    def _report(
        self, scored: list[tuple[Any, float]], new_open: list[dict[str, Any] | None]
    ) -> list[tuple[Any, float]]:
        """All of the rollout's scores to the target in one ``update_batch``; the open episodes kept."""
        levels = [level for level, _ in scored]
        if levels:
            self.target.update_batch(levels, np.asarray([s for _, s in scored], dtype=np.float64))
        self._open = new_open
        self.num_scored += len(levels)
        return scored

    @staticmethod
    def _episode_level(env: int, levels: Any, first_row: int) -> Any:
        """The level of one episode's steps; they must all agree."""
        first = levels[0]
        if levels.dtype != object:
            if (levels != first).any():
                raise ValueError(
                    f"env {env} reported levels {np.unique(levels).tolist()} within one episode (from step "
                    f"{first_row}); the level must only change at episode starts"
                )
            return first.item()
        key = level_key(first)
        if any(level_key(x) != key for x in levels[1:]):
            raise ValueError(
                f"env {env} reported different levels within one episode (from step {first_row})"
            )
        return first

    def _check_shape(self, name: str, arr: Any, shape: tuple[int, int] | None) -> Any:
        """With ``shape=None``: check ``(n_steps, n_envs)`` and return it; else check and return ``arr``."""
        if shape is None:
            if arr.ndim != 2 or arr.shape[1] != self.n_envs or arr.shape[0] < 1:
                raise ValueError(f"{name} must have shape (n_steps, {self.n_envs}), got {arr.shape}")
            return arr.shape[0], arr.shape[1]
        if arr.shape[:2] != shape:
            raise ValueError(
                f"{name} must have shape {shape}{'...' if arr.ndim > 2 else ''}, got {arr.shape}"
            )
        return arr

    def _max_key(self, level: Any) -> Any:
        """Key of ``max_returns``: the level itself for ints and strings, else its value key."""
        if isinstance(level, (int, str)):
            return level
        key = level_key(level)
        self._level_of_key[key] = level
        return key

    def prune_max_returns(self, keep: Iterable[Any]) -> None:
        """Forget the max returns of levels not in ``keep`` (e.g. levels evicted from a LevelBuffer)."""
        keys = {self._max_key(level) for level in keep}
        self.max_returns = {k: v for k, v in self.max_returns.items() if k in keys}
        self._level_of_key = {k: v for k, v in self._level_of_key.items() if k in keys}

    def _score(self, level: Any, ep: dict[str, Any], complete: bool = True) -> float:
        """Score one episode; ``complete=False`` for a chunk whose start or end was not observed, whose
        return is not an episodic return (it is not recorded as a best return)."""
        max_return = None
        if self.strategy == "max_mc" or callable(self.strategy):
            ret = float(ep.get("raw_rewards", ep["rewards"]).sum())  # the raw episodic return
            key = self._max_key(level)
            if complete:
                max_return = max(self.max_returns.get(key, -np.inf), ret)
                self.max_returns[key] = max_return
            else:
                max_return = self.max_returns.get(key, ret)
        data = EpisodeData(
            rewards=ep["rewards"],
            values=ep["values"],
            advantages=ep.get("advantages"),
            next_values=ep["next_values"],
            gamma=self.gamma,
            log_policy=ep.get("log_policy"),
            entropies=ep.get("entropies"),
            max_return=max_return,
            success=self._success(ep),
        )
        return float(self.score_fn(data))

    @staticmethod
    def _success(ep: dict[str, Any]) -> bool | None:
        outcomes = ep.get("successes")
        if outcomes is None or np.isnan(outcomes[-1]):
            return None
        return bool(outcomes[-1] == 1.0)

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """Open episodes and per-level max returns (levels may be any value :func:`save_values` can store)."""
        open_eps = [
            {"env": e, "level": ep["level"], **{k: ep[k] for k in _STEP_FIELDS if k in ep}}
            for e, ep in enumerate(self._open)
            if ep is not None
        ]
        return {
            "n_envs": self.n_envs,
            "open": open_eps,
            "max_returns": [[self._level_of_key.get(k, k), v] for k, v in self.max_returns.items()],
            "num_scored": self.num_scored,
            "num_dropped": self.num_dropped,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict`. Everything is checked first; a refused state (``ValueError``)
        leaves the scorer exactly as it was."""
        if not isinstance(state, dict) or any(
            k not in state for k in ("n_envs", "open", "max_returns", "num_scored", "num_dropped")
        ):
            raise ValueError(
                "not an EpisodeScorer state (needs n_envs, open, max_returns, num_scored, num_dropped)"
            )
        n_envs = state["n_envs"]
        if (
            isinstance(n_envs, bool)
            or not isinstance(n_envs, (int, np.integer))
            or int(n_envs) != self.n_envs
        ):
            raise ValueError(f"state has n_envs={n_envs!r}, this scorer has {self.n_envs}")
        counters = {}
        for name in ("num_scored", "num_dropped"):
            v = state[name]
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
                raise ValueError(f"state '{name}' must be an int >= 0, got {v!r}")
            counters[name] = int(v)
        if not isinstance(state["open"], list) or not isinstance(state["max_returns"], list):
            raise ValueError("state 'open' and 'max_returns' must be lists")
        opened: list[dict[str, Any] | None] = [None] * self.n_envs
        for ep in state["open"]:
            opened_ep = self._validated_open(ep)
            e = int(ep["env"])
            if opened[e] is not None:
                raise ValueError(f"state 'open' has two episodes for env {e}")
            opened[e] = opened_ep
        max_returns, level_of_key = _checked_max_returns(state["max_returns"])
        self._open = opened
        self.max_returns = max_returns
        self._level_of_key = level_of_key
        self.num_scored = counters["num_scored"]
        self.num_dropped = counters["num_dropped"]

    def _validated_open(self, ep: Any) -> dict[str, Any]:
        """One open episode of a state: env in range, a level, equal-length finite step arrays."""
        if not isinstance(ep, dict) or "env" not in ep or "level" not in ep:
            raise ValueError("state 'open' entries must be dicts with 'env', 'level' and step arrays")
        e = ep["env"]
        if isinstance(e, bool) or not isinstance(e, (int, np.integer)) or not 0 <= int(e) < self.n_envs:
            raise ValueError(f"state 'open' env must be an int in [0, {self.n_envs}), got {e!r}")
        unknown = sorted(set(ep) - {"env", "level", *_STEP_FIELDS})
        if unknown:
            raise ValueError(f"state 'open' episode has unknown fields {unknown}")
        out: dict[str, Any] = {"level": ep["level"]}
        length = None
        for k in _STEP_FIELDS:
            if k not in ep:
                continue
            try:
                arr = np.asarray(ep[k], dtype=np.float64)
            except (TypeError, ValueError) as exc:
                raise ValueError(f"state 'open' field {k!r} is not numeric: {exc}") from exc
            if arr.ndim < 1 or arr.shape[0] == 0 or (length is not None and arr.shape[0] != length):
                raise ValueError(
                    f"state 'open' field {k!r} must have one entry per step, got shape {arr.shape}"
                )
            if k not in ("log_policy", "successes") and not np.isfinite(arr).all():
                raise ValueError(f"state 'open' field {k!r} contains NaN or inf")
            length = arr.shape[0]
            out[k] = arr
        for k in ("rewards", "values", "next_values"):
            if k not in out:
                raise ValueError(f"state 'open' episode lacks {k!r}")
        if "raw_rewards" not in out:  # states saved before raw rewards were kept
            out["raw_rewards"] = out["rewards"].copy()
        return out

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write :meth:`state_dict` as ``.npz`` (arrays + JSON; loading never unpickles)."""
        save_values(path, self.state_dict())

    def load(self, path: str | os.PathLike[str]) -> None:
        """Restore a file written by :meth:`save`."""
        self.load_state_dict(load_values(path))


def _checked_max_returns(items: list[Any]) -> tuple[dict[Any, float], dict[Any, Any]]:
    """A state's ``max_returns`` (``[level, return]`` pairs, finite returns) as the scorer keeps them:
    returns by key, and the level of each key that is not the level itself."""
    max_returns: dict[Any, float] = {}
    level_of_key: dict[Any, Any] = {}
    for item in items:
        if not isinstance(item, (list, tuple)) or len(item) != 2:
            raise ValueError(f"state 'max_returns' entries must be [level, return] pairs, got {item!r}")
        level, value = item
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise ValueError(f"state 'max_returns' value for level {level!r} must be a float, got {value!r}")
        if not np.isfinite(value):
            raise ValueError(f"state 'max_returns' value for level {level!r} must be finite, got {value!r}")
        try:
            key = level if isinstance(level, (int, str)) else level_key(level)
        except TypeError as exc:
            raise ValueError(f"state 'max_returns' level {level!r}: {exc}") from exc
        if key is not level:
            level_of_key[key] = level
        max_returns[key] = float(value)
    return max_returns, level_of_key
