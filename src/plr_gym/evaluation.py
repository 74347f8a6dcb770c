"""Evaluate a policy on chosen levels (e.g. held-out seeds) and summarise with confidence intervals.

Generalization is measured on levels the agent never trained on: with training levels ``range(200)``,
evaluate on e.g. ``range(10_000, 10_100)``. :func:`evaluate_levels` plays a fixed number of episodes on
every given level with a vec env whose sub-envs are :class:`~plr_gym.LevelWrapper` s, and returns the
episodic returns per level. :func:`summarize` gives the mean and the interquartile mean (IQM, the mean of
the middle 50%; Agarwal et al., NeurIPS 2021) with stratified bootstrap 95% confidence intervals
(``scipy.stats.bootstrap``), and :func:`format_summary` one readable line of it.
:class:`HeldOutEvalCallback` evaluates during SB3 training and logs ``eval/heldout_*`` through SB3's
logger (TensorBoard, CSV).

**Greedy or sampled actions.** Everywhere in plr_gym (this module, the callback, ``plr-gym train`` and
``plr-gym evaluate``) the default is :data:`DEFAULT_DETERMINISTIC` ``= False``: actions are sampled from
the policy, as in the PLR paper's evaluation. Ask for greedy actions with ``deterministic=True``.
"""

from __future__ import annotations

import numbers
import os
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.vec_env import VecEnv, VecEnvWrapper

from plr_gym._eval_csv import append_rows
from plr_gym._levels import check_level_id

__all__ = [
    "DEFAULT_DETERMINISTIC",
    "EVAL_CSV_FIELDS",
    "HeldOutEvalCallback",
    "evaluate_levels",
    "format_summary",
    "iqm",
    "summarize",
]


def _base_venv(venv: VecEnv) -> VecEnv:
    from plr_gym.wrappers.sb3 import PrioritizedLevelReplay

    current: Any = venv
    while isinstance(current, VecEnvWrapper):
        if isinstance(current, PrioritizedLevelReplay):
            raise ValueError(
                "evaluate_levels needs a vec env without PrioritizedLevelReplay (it would draw levels from "
                "the training sampler); build a separate evaluation env with LevelWrapper sub-envs"
            )
        current = current.venv
    return venv


#: The default of every evaluation in plr_gym (:func:`evaluate_levels`, :class:`HeldOutEvalCallback`,
#: ``plr-gym train``/``evaluate``): actions are *sampled* from the policy, as in the PLR paper's
#: evaluation (level-replay's ``evaluate(..., deterministic=False)``). Greedy actions can loop forever in
#: MiniGrid-style mazes; pass ``deterministic=True`` (CLI: ``--eval-deterministic``/``--deterministic``)
#: for greedy evaluation.
DEFAULT_DETERMINISTIC = False


def _predictor(model: Any, deterministic: bool) -> Callable[[Any, Any, Any], tuple[Any, Any]]:
    """``act(obs, state, episode_start) -> (actions, state)`` from an SB3 model or a plain callable."""
    predict = getattr(model, "predict", None)
    if predict is not None and callable(predict):

        def act(obs: Any, state: Any, starts: Any) -> tuple[Any, Any]:
            actions, state = predict(obs, state=state, episode_start=starts, deterministic=deterministic)
            return actions, state

        return act
    if callable(model):

        def call(obs: Any, state: Any, starts: Any) -> tuple[Any, Any]:
            return model(obs), None

        return call
    raise TypeError(
        "model must be an SB3 model (with predict(obs, state, episode_start, deterministic)) or a callable "
        f"policy(obs) -> actions, got {type(model).__name__}"
    )


def evaluate_levels(
    model: Any,
    venv: Any,
    levels: Iterable[int],
    n_episodes: int = 1,
    deterministic: bool = DEFAULT_DETERMINISTIC,
    progress: bool = False,
) -> dict[int, list[float]]:
    """Play ``n_episodes`` on every level and return the episodic returns, per level.

    :param model: an SB3 model (anything with ``predict(obs, state, episode_start, deterministic)``:
        PPO, A2C, DQN, RecurrentPPO, ...) or a plain callable ``policy(obs) -> actions`` taking and
        returning a batch (one row per env), e.g. a CleanRL agent's greedy or sampled action function.
    :param venv: where to play: an SB3 VecEnv whose sub-envs are wrapped in :class:`~plr_gym.LevelWrapper`
        (e.g. ``make_vec_env(env_id, n_envs=8, wrapper_class=LevelWrapper)``; it may be wrapped in
        VecNormalize/VecFrameStack/VecTransposeImage, but not in ``PrioritizedLevelReplay``), or a
        Gymnasium vector env (``gymnasium.vector.SyncVectorEnv``/``AsyncVectorEnv``, any autoreset mode)
        whose sub-envs play level ``s`` on ``reset(seed=s)`` (``LevelWrapper``, MiniGrid, our Procgen
        adapter), not wrapped in :class:`plr_gym.vector.PrioritizedLevelReplay`. SB3: returns are read from
        ``infos[i]["episode"]["r"]`` (SB3's ``Monitor``, added by ``make_vec_env``) when present, which
        are the raw rewards even under ``VecNormalize``; otherwise they are summed from the VecEnv.
        Gymnasium: the rewards the vector env returns are summed; levels are played in waves of
        ``num_envs`` episodes, each wave starting with ``reset(seed=[its levels])``.
    :param levels: the level ids to evaluate on (distinct ints).
    :param n_episodes: episodes per level (more than one only helps if the policy or the env is random).
    :param deterministic: greedy actions (SB3 models only; a callable policy chooses its own actions).
        Default :data:`DEFAULT_DETERMINISTIC` (``False``: sampled actions, as in the PLR paper).
    :param progress: show a progress bar over the episodes (needs ``tqdm``, the ``cli`` extra).
    :return: ``{level: [return of each episode]}`` in the order of ``levels``.

    Example:
        >>> from minigrid.wrappers import FlatObsWrapper
        >>> from stable_baselines3 import PPO
        >>> from stable_baselines3.common.env_util import make_vec_env
        >>> from plr_gym import LevelWrapper
        >>> from plr_gym.evaluation import evaluate_levels, summarize
        >>> venv = make_vec_env("MiniGrid-Empty-5x5-v0", n_envs=2,
        ...                     wrapper_class=lambda e: LevelWrapper(FlatObsWrapper(e)))
        >>> model = PPO("MlpPolicy", venv, seed=0)
        >>> returns = evaluate_levels(model, venv, levels=range(1000, 1004))
        >>> sorted(returns)
        [1000, 1001, 1002, 1003]
        >>> stats = summarize(returns)
        >>> sorted(stats)
        ['iqm', 'iqm_ci', 'mean', 'mean_ci', 'n_levels']

        A Gymnasium vector env and a plain policy function:

        >>> import gymnasium as gym
        >>> import numpy as np
        >>> envs = gym.vector.SyncVectorEnv(
        ...     [lambda: FlatObsWrapper(gym.make("MiniGrid-Empty-5x5-v0", max_steps=10))] * 2)
        >>> returns = evaluate_levels(lambda obs: np.zeros(len(obs), dtype=int), envs, range(3))
        >>> returns  # always turning left never reaches the goal
        {0: [0.0], 1: [0.0], 2: [0.0]}
    """
    level_list = _check_levels(levels)
    if isinstance(n_episodes, bool) or not isinstance(n_episodes, int) or n_episodes < 1:
        raise ValueError(f"n_episodes must be an int >= 1, got {n_episodes!r}")
    if not isinstance(deterministic, (bool, np.bool_)):
        raise TypeError(f"deterministic must be a bool, got {deterministic!r}")
    act = _predictor(model, bool(deterministic))
    bar = _progress_bar(len(level_list) * n_episodes) if progress else None
    try:
        return _evaluate(act, venv, level_list, n_episodes, bar)
    finally:
        if bar is not None:
            bar.close()


def _check_levels(levels: Any) -> list[int]:
    """``evaluate_levels``'s ``levels`` as a list of distinct int level ids."""
    if isinstance(levels, (str, bytes)) or not isinstance(levels, Iterable):
        raise TypeError(f"levels must be an iterable of int level ids, got {type(levels).__name__}")
    level_list: list[int] = []
    for lvl in levels:
        if isinstance(lvl, (bool, np.bool_)) or not isinstance(lvl, (numbers.Integral, np.integer)):
            raise TypeError(
                f"levels must be int level ids (reset seeds), got {type(lvl).__name__} {lvl!r}; a float "
                "level "
                "would be played as its integer part"
            )
        level_list.append(check_level_id(lvl, "levels[i]"))
    if not level_list:
        raise ValueError("levels must not be empty")
    if len(set(level_list)) != len(level_list):
        raise ValueError("levels must be distinct")
    return level_list


def _progress_bar(total: int) -> Any:
    try:
        from tqdm.auto import tqdm
    except ImportError:
        raise ImportError("evaluate_levels(progress=True) needs tqdm: pip install tqdm") from None
    return tqdm(total=total, desc="evaluating", unit="episode", leave=False)


def _evaluate(
    act: Callable[[Any, Any, Any], tuple[Any, Any]],
    venv: Any,
    level_list: list[int],
    n_episodes: int,
    bar: Any,
) -> dict[int, list[float]]:
    from gymnasium.vector import VectorEnv

    if isinstance(venv, VectorEnv):
        return _evaluate_gymnasium(act, venv, level_list, n_episodes, bar)
    if not isinstance(venv, VecEnv):
        raise TypeError(
            "venv must be a stable_baselines3 VecEnv or a gymnasium.vector.VectorEnv, got "
            f"{type(venv).__name__}"
        )
    _base_venv(venv)
    n_envs = venv.num_envs
    queue = [lvl for lvl in level_list for _ in range(n_episodes)]
    queue.reverse()  # pop() from the end
    results: dict[int, list[float]] = {lvl: [] for lvl in level_list}
    running: list[int | None] = [None] * n_envs  # level of each env's current episode (None: idle)

    def queue_next(i: int) -> int | None:
        nxt = queue.pop() if queue else None
        venv.env_method("set_next_level", nxt, indices=[i])
        return nxt

    # The first levels go in as reset options: they beat the seeds SB3's VecEnv passes to its first
    # reset (make_vec_env seeds every VecEnv), which LevelWrapper would otherwise play as levels.
    first = [queue.pop() if queue else None for _ in range(n_envs)]
    venv.set_options([{} if lvl is None else {"level": lvl} for lvl in first])
    obs = venv.reset()
    queued: list[int | None] = [None] * n_envs
    for i in range(n_envs):
        running[i] = first[i]
        queued[i] = queue_next(i)
    ep_returns = np.zeros(n_envs)
    states = None
    starts = np.ones(n_envs, dtype=bool)
    remaining = len(level_list) * n_episodes
    while remaining:
        actions, states = act(obs, states, starts)
        obs, rewards, dones, infos = venv.step(actions)
        ep_returns += rewards
        starts = dones
        for i in np.flatnonzero(dones).tolist():
            level = running[i]
            if level is not None:
                episode = infos[i].get("episode")
                results[level].append(float(episode["r"]) if episode is not None else float(ep_returns[i]))
                remaining -= 1
                if bar is not None:
                    bar.update(1)
            ep_returns[i] = 0.0
            running[i] = queued[i]
            queued[i] = queue_next(i)
    return results


def _evaluate_gymnasium(
    act: Callable[[Any, Any, Any], tuple[Any, Any]], envs: Any, levels: list[int], n_episodes: int, bar: Any
) -> dict[int, list[float]]:
    """:func:`evaluate_levels` on a Gymnasium vector env: waves of ``num_envs`` episodes."""
    from plr_gym.wrappers.vector import PrioritizedLevelReplay

    current: Any = envs
    while current is not None:
        if isinstance(current, PrioritizedLevelReplay):
            raise ValueError(
                "evaluate_levels needs a vector env without plr_gym.vector.PrioritizedLevelReplay (it would "
                "draw levels from the training sampler); build a separate evaluation env"
            )
        current = getattr(current, "env", None)
    n = int(envs.num_envs)
    todo = [lvl for lvl in levels for _ in range(n_episodes)]
    results: dict[int, list[float]] = {lvl: [] for lvl in levels}
    for start in range(0, len(todo), n):
        wave = todo[start : start + n]
        seeds = wave + [wave[0]] * (n - len(wave))  # idle envs replay the wave's first level, unrecorded
        obs, _ = envs.reset(seed=seeds)
        active = np.zeros(n, dtype=bool)
        active[: len(wave)] = True
        returns = np.zeros(n)
        states = None
        starts = np.ones(n, dtype=bool)
        while active.any():
            actions, states = act(obs, states, starts)
            obs, rewards, terminated, truncated, _ = envs.step(actions)
            ended = np.logical_or(terminated, truncated)
            returns[active] += np.asarray(rewards, dtype=np.float64)[active]
            for i in np.flatnonzero(ended & active).tolist():
                results[wave[i]].append(float(returns[i]))
                active[i] = False
                if bar is not None:
                    bar.update(1)
            starts = ended
    return results


def iqm(values: Sequence[float] | npt.NDArray[Any], axis: int = -1) -> Any:
    """Interquartile mean: the mean of the middle 50% of the values (``scipy.stats.trim_mean(x, 0.25)``).

    NaN or infinite values raise ``ValueError`` (they would make the result NaN).
    """
    from scipy.stats import trim_mean

    arr = _finite_returns(values, "values")
    return trim_mean(arr, 0.25, axis=axis)


def _finite_returns(values: Any, name: str) -> npt.NDArray[np.float64]:
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be real numbers: {exc}") from exc
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} must be finite, got NaN or inf")
    return arr


def summarize(
    returns: dict[int, list[float]] | Sequence[float],
    confidence: float = 0.95,
    n_resamples: int = 2000,
    seed: int = 0,
) -> dict[str, Any]:
    """Mean and IQM over levels of the per-level mean returns, with bootstrap confidence intervals.

    :param returns: the output of :func:`evaluate_levels`, or one number per level.
    :param confidence: confidence level of the intervals.
    :param n_resamples: bootstrap resamples (percentile method, levels resampled with replacement).
    :param seed: seed of the bootstrap.
    :return: ``{"mean", "mean_ci": (lo, hi), "iqm", "iqm_ci": (lo, hi), "n_levels"}``.
    """
    from scipy.stats import bootstrap

    if (
        isinstance(confidence, (bool, np.bool_))
        or not isinstance(confidence, (numbers.Real, np.floating))
        or not 0.0 < float(confidence) < 1.0
    ):
        raise ValueError(f"confidence must be a number in (0, 1), got {confidence!r}")
    if (
        isinstance(n_resamples, (bool, np.bool_))
        or not isinstance(n_resamples, (int, np.integer))
        or n_resamples < 1
    ):
        raise ValueError(f"n_resamples must be an int >= 1, got {n_resamples!r}")
    if isinstance(returns, dict):
        per_level = np.array(
            [np.mean(_finite_returns(v, f"returns[{k!r}]")) for k, v in returns.items() if len(v)],
            dtype=np.float64,
        )
    else:
        per_level = _finite_returns(returns, "returns")
        if per_level.ndim != 1:
            raise ValueError(f"returns must be one number per level (1-D), got shape {per_level.shape}")
    if per_level.size == 0:
        raise ValueError("returns must hold at least one level with an episode")
    out: dict[str, Any] = {"n_levels": int(per_level.size), "mean": float(per_level.mean())}
    out["iqm"] = float(iqm(per_level))
    for name, stat in (("mean", np.mean), ("iqm", iqm)):
        if per_level.size < 2 or np.ptp(per_level) == 0:
            out[f"{name}_ci"] = (out[name], out[name])
            continue
        res = bootstrap(
            (per_level,),
            stat,
            confidence_level=confidence,
            n_resamples=n_resamples,
            method="percentile",
            random_state=np.random.default_rng(seed),
            vectorized=True,
        )
        out[f"{name}_ci"] = (float(res.confidence_interval.low), float(res.confidence_interval.high))
    return out


def format_summary(summary: dict[str, Any], digits: int = 3) -> str:
    """One readable line for the output of :func:`summarize`.

    Example:
        >>> format_summary(summarize([0.0, 0.5, 1.0, 1.0]))
        'mean 0.625 [0.250, 1.000], IQM 0.750 [0.000, 1.000] over 4 levels (95% bootstrap CIs)'
    """
    f = f"{{:.{digits}f}}".format
    mean_lo, mean_hi = summary["mean_ci"]
    iqm_lo, iqm_hi = summary["iqm_ci"]
    return (
        f"mean {f(summary['mean'])} [{f(mean_lo)}, {f(mean_hi)}], IQM {f(summary['iqm'])} "
        f"[{f(iqm_lo)}, {f(iqm_hi)}] over {summary['n_levels']} levels (95% bootstrap CIs)"
    )


#: Columns of the CSV written by :class:`HeldOutEvalCallback` (``log_path``), one row per evaluation
#: and split.
EVAL_CSV_FIELDS: tuple[str, ...] = (
    "timesteps",
    "split",
    "n_levels",
    "mean",
    "mean_lo",
    "mean_hi",
    "iqm",
    "iqm_lo",
    "iqm_hi",
    "wall_time",
)


class HeldOutEvalCallback(BaseCallback):
    """Evaluate on held-out levels every ``eval_freq`` steps and log the result through SB3's logger.

    Every evaluation plays ``n_episodes`` episodes on each held-out level (:func:`evaluate_levels`) and
    records, through the model's logger (so TensorBoard, CSV, stdout... as configured with
    ``tensorboard_log=`` or ``configure()``), the mean and the interquartile mean over levels with their
    bootstrap 95% confidence intervals (:func:`summarize`): ``eval/heldout_mean``,
    ``eval/heldout_mean_lo``, ``eval/heldout_mean_hi``, ``eval/heldout_iqm``, ``eval/heldout_iqm_lo``,
    ``eval/heldout_iqm_hi``; with ``train_levels``, the same under ``eval/train_*`` (the generalization gap
    is the difference). The logger is dumped at the evaluation's step, as SB3's ``EvalCallback`` does.

    Unlike SB3's ``EvalCallback``, ``eval_freq`` counts environment steps (``model.num_timesteps``), not
    callback calls, and every evaluation covers a fixed list of levels, the same at every evaluation.
    Evaluations happen when training starts (unless ``eval_at_start=False``), whenever ``eval_freq`` steps
    have passed since the last one, and when training ends.

    :param eval_env: an evaluation env separate from the training env: an SB3 VecEnv of
        :class:`~plr_gym.LevelWrapper` sub-envs or a Gymnasium vector env (see :func:`evaluate_levels`).
    :param levels: the held-out level ids (distinct ints, none of them a training level).
    :param eval_freq: evaluate every this many environment steps.
    :param n_episodes: episodes per level.
    :param deterministic: greedy actions; default :data:`DEFAULT_DETERMINISTIC` (sampled actions).
    :param train_levels: training levels to evaluate on as well (``None``: held-out levels only).
    :param log_path: a CSV file to append one row per evaluation and split to (columns
        :data:`EVAL_CSV_FIELDS`); ``None``: no file.
    :param eval_at_start: evaluate when training starts (step 0, or the resumed step).
    :param eval_at_end: evaluate when training ends (unless it just did). The attribute can be changed
        during training: ``plr-gym train`` clears it when a signal stops training, so that the run exits
        at once (the run resumes later and evaluates then).
    :param verbose: 1 prints one line per evaluation.

    After training, :attr:`last_returns` holds the last evaluation's per-level returns per split
    (``"test"`` and, with ``train_levels``, ``"train"``) and :attr:`rows` every evaluation's summary.

    Example:
        >>> from minigrid.wrappers import FlatObsWrapper
        >>> from stable_baselines3 import PPO
        >>> from stable_baselines3.common.env_util import make_vec_env
        >>> from plr_gym import LevelWrapper, PLRCallback, PrioritizedLevelReplay
        >>> from plr_gym.evaluation import HeldOutEvalCallback
        >>> def make(seed):
        ...     return make_vec_env("MiniGrid-Empty-5x5-v0", n_envs=2, seed=seed,
        ...                         wrapper_class=lambda e: LevelWrapper(FlatObsWrapper(e)))
        >>> venv = PrioritizedLevelReplay(make(0), levels=range(10), seed=0)
        >>> model = PPO("MlpPolicy", venv, n_steps=64, batch_size=64, n_epochs=1, seed=0)
        >>> held_out = HeldOutEvalCallback(make(1), levels=range(1000, 1004), eval_freq=128)
        >>> model = model.learn(256, callback=[PLRCallback(), held_out])
        >>> [row["timesteps"] for row in held_out.rows]
        [0, 128, 256]
        >>> sorted(held_out.last_returns["test"])
        [1000, 1001, 1002, 1003]
    """

    def __init__(
        self,
        eval_env: Any,
        levels: Iterable[int],
        eval_freq: int = 10_000,
        n_episodes: int = 1,
        deterministic: bool = DEFAULT_DETERMINISTIC,
        train_levels: Iterable[int] | None = None,
        log_path: str | os.PathLike[str] | None = None,
        eval_at_start: bool = True,
        verbose: int = 0,
        eval_at_end: bool = True,
    ) -> None:
        super().__init__(verbose)
        from gymnasium.vector import VectorEnv

        if not isinstance(eval_env, (VecEnv, VectorEnv)):
            raise TypeError(
                "eval_env must be a stable_baselines3 VecEnv or a gymnasium.vector.VectorEnv, got "
                f"{type(eval_env).__name__}"
            )
        if isinstance(eval_freq, bool) or not isinstance(eval_freq, int) or eval_freq < 1:
            raise ValueError(f"eval_freq must be a positive int, got {eval_freq!r}")
        if isinstance(n_episodes, bool) or not isinstance(n_episodes, int) or n_episodes < 1:
            raise ValueError(f"n_episodes must be an int >= 1, got {n_episodes!r}")
        if not isinstance(deterministic, (bool, np.bool_)):
            raise TypeError(f"deterministic must be a bool, got {deterministic!r}")
        self.eval_env = eval_env
        self.splits: dict[str, list[int]] = {"test": [int(lvl) for lvl in levels]}
        if not self.splits["test"]:
            raise ValueError("levels must not be empty")
        if train_levels is not None:
            train = [int(lvl) for lvl in train_levels]
            if not train:
                raise ValueError("train_levels must not be empty (or None)")
            overlap = sorted(set(train) & set(self.splits["test"]))
            if overlap:
                raise ValueError(
                    f"levels must be held out, but {len(overlap)} of them are in train_levels "
                    f"(e.g. {overlap[0]})"
                )
            self.splits["train"] = train
        self.eval_freq = eval_freq
        self.n_episodes = n_episodes
        self.deterministic = bool(deterministic)
        self.log_path = None if log_path is None else Path(log_path)
        self.eval_at_start = bool(eval_at_start)
        self.eval_at_end = bool(eval_at_end)
        self.last_eval = -1
        self.rows: list[dict[str, Any]] = []
        self.last_returns: dict[str, dict[int, list[float]]] = {}
        self._start = time.perf_counter()

    def evaluate(self) -> list[dict[str, Any]]:
        """Evaluate now, log and return this evaluation's rows (one per split)."""
        self.last_eval = self.num_timesteps
        rows = []
        for split, levels in self.splits.items():
            returns = evaluate_levels(
                self.model,
                self.eval_env,
                levels,
                n_episodes=self.n_episodes,
                deterministic=self.deterministic,
            )
            self.last_returns[split] = returns
            s = summarize(returns)
            row = {
                "timesteps": int(self.num_timesteps),
                "split": split,
                "n_levels": s["n_levels"],
                "mean": s["mean"],
                "mean_lo": s["mean_ci"][0],
                "mean_hi": s["mean_ci"][1],
                "iqm": s["iqm"],
                "iqm_lo": s["iqm_ci"][0],
                "iqm_hi": s["iqm_ci"][1],
                "wall_time": round(time.perf_counter() - self._start, 2),
            }
            rows.append(row)
            prefix = "eval/heldout" if split == "test" else "eval/train"
            for key in ("mean", "mean_lo", "mean_hi", "iqm", "iqm_lo", "iqm_hi"):
                self.logger.record(f"{prefix}_{key}", row[key])
        self.rows.extend(rows)
        self.logger.record("time/total_timesteps", self.num_timesteps, exclude="tensorboard")
        self.logger.dump(self.num_timesteps)
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            append_rows(self.log_path, rows, EVAL_CSV_FIELDS)  # atomic: never half a row (a full disk)
        if self.verbose:
            parts = [f"{r['split']} {r['mean']:.3f} [{r['mean_lo']:.3f}, {r['mean_hi']:.3f}]" for r in rows]
            print(f"  step {self.num_timesteps:>8}: mean return  " + "  ".join(parts), flush=True)
        return rows

    def _on_training_start(self) -> None:
        if self.eval_at_start:
            self.evaluate()
        elif not 0 <= self.last_eval <= self.num_timesteps:  # a resumed run may set its last evaluation
            self.last_eval = self.num_timesteps

    def _on_step(self) -> bool:
        if self.num_timesteps - self.last_eval >= self.eval_freq:
            self.evaluate()
        return True

    def _on_training_end(self) -> None:
        if self.eval_at_end and self.num_timesteps != self.last_eval:
            self.evaluate()
