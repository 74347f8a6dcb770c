"""Evaluate a policy on chosen levels (e.g. held-out seeds) and summarise with confidence intervals.

Generalization is measured on levels the agent never trained on: with training levels ``range(200)``,
evaluate on e.g. ``range(10_000, 10_100)``. :func:`evaluate_levels` plays a fixed number of episodes on
every given level with a vec env whose sub-envs are :class:`~plr_gym.LevelWrapper` s, and returns the
episodic returns per level. :func:`summarize` gives the mean and the interquartile mean (IQM, the mean of
the middle 50%; Agarwal et al., NeurIPS 2021) with stratified bootstrap 95% confidence intervals
(``scipy.stats.bootstrap``).
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
from stable_baselines3.common.vec_env import VecEnv, VecEnvWrapper

__all__ = ["evaluate_levels", "iqm", "summarize"]

_INT64_MAX = int(np.iinfo(np.int64).max)


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


def evaluate_levels(
    model: Any,
    venv: VecEnv,
    levels: Iterable[int],
    n_episodes: int = 1,
    deterministic: bool = True,
) -> dict[int, list[float]]:
    """Play ``n_episodes`` on every level and return the episodic returns, per level.

    :param model: anything with SB3's ``predict(obs, state, episode_start, deterministic)`` (PPO, A2C,
        DQN, RecurrentPPO, ...).
    :param venv: an SB3 VecEnv whose sub-envs are wrapped in :class:`~plr_gym.LevelWrapper` (e.g.
        ``make_vec_env(env_id, n_envs=8, wrapper_class=LevelWrapper)``); it may be wrapped in
        VecNormalize/VecFrameStack/VecTransposeImage, but not in ``PrioritizedLevelReplay``. Returns are
        read from ``infos[i]["episode"]["r"]`` (SB3's ``Monitor``, added by ``make_vec_env``) when present,
        which are the raw rewards even under ``VecNormalize``; otherwise they are summed from the VecEnv.
    :param levels: the level ids to evaluate on (distinct ints).
    :param n_episodes: episodes per level (more than one only helps if the policy or the env is random).
    :param deterministic: use the policy's deterministic action.
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
    """
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
        if not 0 <= int(lvl) <= _INT64_MAX:
            raise ValueError(f"level ids must lie in [0, 2**63 - 1], got {lvl!r}")
        level_list.append(int(lvl))
    if not level_list:
        raise ValueError("levels must not be empty")
    if len(set(level_list)) != len(level_list):
        raise ValueError("levels must be distinct")
    if isinstance(n_episodes, bool) or not isinstance(n_episodes, int) or n_episodes < 1:
        raise ValueError(f"n_episodes must be an int >= 1, got {n_episodes!r}")
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
        actions, states = model.predict(obs, state=states, episode_start=starts, deterministic=deterministic)
        obs, rewards, dones, infos = venv.step(actions)
        ep_returns += rewards
        starts = dones
        for i in np.flatnonzero(dones).tolist():
            level = running[i]
            if level is not None:
                episode = infos[i].get("episode")
                results[level].append(float(episode["r"]) if episode is not None else float(ep_returns[i]))
                remaining -= 1
            ep_returns[i] = 0.0
            running[i] = queued[i]
            queued[i] = queue_next(i)
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
