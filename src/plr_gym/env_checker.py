"""Check that an environment can be trained with PLR: :func:`check_level_env`.

Stable-Baselines3's ``check_env`` checks the Gymnasium API; this checks what Prioritized Level Replay needs
on top of it, for the level ids the env will be given:

1. every level id is accepted: ``reset(seed=level)`` raises nothing, and an env that reports its level in
   ``info["level"]`` reports that one;
2. a level is a level: two resets with the same seed (with another level and some steps in between) give
   the same first observation;
3. levels differ: different seeds give different first observations on a sample (an env whose levels all
   look alike to the first observation is reported);
4. episodes end: random actions end an episode (``terminated`` or ``truncated``) within a step budget.

Every check runs; if any fails, :func:`check_level_env` raises one :class:`LevelEnvError` (a
``ValueError``) listing each failure with its fix. Otherwise it returns a :class:`LevelEnvReport`, which
may hold notes (e.g. two sampled levels with the same first observation). ``plr-gym train`` runs it once
on an env that is not one of plr_gym's built-in families before it trains.

Example:
    >>> import gymnasium as gym
    >>> import minigrid  # registers the MiniGrid envs
    >>> from plr_gym import check_level_env
    >>> report = check_level_env(gym.make("MiniGrid-DoorKey-5x5-v0"), levels=range(100))
    >>> report.ok, report.distinct_levels, report.sampled_levels
    (True, 8, 8)
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["LevelEnvError", "LevelEnvReport", "check_level_env"]

#: How a reset must choose its level, said in every fix that concerns the seed.
SEED_RECIPE = (
    "make reset(seed=s) select level s: call super().reset(seed=seed) first and draw the whole layout from "
    "self.np_random (or look level s up in a table of level parameters); see docs/own_env.md"
)


class LevelEnvError(ValueError):
    """:func:`check_level_env` found problems; the message lists each with its fix.

    :param failures: one line per failed check.
    """

    def __init__(self, env: Any, failures: Sequence[str]) -> None:
        self.failures = list(failures)
        lines = "\n".join(f"  - {f}" for f in self.failures)
        super().__init__(
            f"{env} cannot be trained with PLR as it is ({len(self.failures)} problem(s)):\n{lines}"
        )


@dataclass
class LevelEnvReport:
    """What :func:`check_level_env` checked.

    :param sampled_levels: how many level ids were reset.
    :param distinct_levels: how many distinct first observations they gave.
    :param episode_steps: steps of the episode played on each checked level (random actions).
    :param notes: observations that are not failures (shown as warnings by ``warn=True``).
    :param failures: failed checks (empty when :func:`check_level_env` returns).
    """

    sampled_levels: int
    distinct_levels: int
    episode_steps: dict[int, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No check failed."""
        return not self.failures


def _sample_levels(levels: Iterable[int], n: int) -> list[int]:
    """Up to ``n`` level ids spread over ``levels``: the first, the last and evenly spaced ones between."""
    ids = [int(lvl) for lvl in levels]
    if not ids:
        raise ValueError("levels must name at least one level id")
    if len(ids) <= n:
        return list(dict.fromkeys(ids))
    picks = np.linspace(0, len(ids) - 1, n).round().astype(int)
    return list(dict.fromkeys(ids[i] for i in picks))


def _reset(env: Any, level: int) -> tuple[Any, str | None, Any]:
    """``env.reset(seed=level)``: ``(first observation, None, None)``; ``(None, "raised", exc)`` if it
    raised; ``(obs, "other", reported level)`` if the env reports another level in ``info["level"]``."""
    try:
        obs, info = env.reset(seed=level)
    except Exception as exc:  # any error: the env does not accept this level id
        return None, "raised", exc
    reported = info.get("level", level) if isinstance(info, dict) else level
    if isinstance(reported, (int, np.integer)) and int(reported) != level:
        return obs, "other", int(reported)
    return obs, None, None


def _check_accepted(env: Any, levels: list[int], failures: list[str]) -> dict[int, bytes]:
    """Reset every level once: the first observations of the levels the env accepts (one failure per kind
    of refusal, naming the levels)."""
    first: dict[int, bytes] = {}
    raised: dict[int, BaseException] = {}
    other: dict[int, int] = {}
    for level in levels:
        obs, problem, detail = _reset(env, level)
        if problem == "raised":
            raised[level] = detail
        elif problem == "other":
            other[level] = detail
        else:
            first[level] = _digest(obs)
    if raised:
        level, exc = next(iter(raised.items()))
        failures.append(
            f"reset(seed=s) raised for {len(raised)} of {len(levels)} sampled level ids ({_names(raised)}); "
            f"reset(seed={level}) raised {type(exc).__name__}: {exc}. The env must accept every level id it "
            "will be given: give training and held-out levels in the env's range, or make reset accept any "
            "int seed >= 0"
        )
    if other:
        level, played = next(iter(other.items()))
        failures.append(
            f"reset(seed={level}) played level {played} (info['level']), and so did {len(other) - 1} other "
            f"sampled level id(s) ({_names(other)}): the env has no such levels. Give levels in the env's "
            "range"
        )
    return first


def _names(levels: Iterable[int]) -> str:
    ids = list(levels)
    return ", ".join(map(str, ids[:5])) + (", ..." if len(ids) > 5 else "")


def _digest(obs: Any) -> bytes:
    from plr_gym.wrappers.level import observation_digest

    return observation_digest(obs)


def _play(env: Any, level: int, max_steps: int, seed: int) -> int | None:
    """Steps of one episode on ``level`` with random actions, or ``None`` if it did not end."""
    env.reset(seed=level)
    env.action_space.seed(seed)
    for step in range(1, max_steps + 1):
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            return step
    return None


def _check_same_seed(env: Any, levels: list[int], first: dict[int, bytes], failures: list[str]) -> None:
    """Reset each level again after other levels and a few steps: the first observation must repeat."""
    changed = []
    for k, level in enumerate(levels):
        env.reset(seed=levels[(k + 1) % len(levels)])  # another level of the sample in between
        for _ in range(3):
            _, _, terminated, truncated, _ = env.step(env.action_space.sample())
            if terminated or truncated:
                break
        obs, problem, _ = _reset(env, level)
        if problem is None and _digest(obs) != first[level]:
            changed.append(level)
    if changed:
        failures.append(
            f"two resets with the same seed gave different first observations (levels "
            f"{_names(changed)}): reset ignores its seed, so a level cannot be replayed. "
            f"Fix: {SEED_RECIPE}"
        )


def _check_distinct(first: dict[int, bytes], report: LevelEnvReport, failures: list[str]) -> None:
    """Different seeds must give different levels: all equal fails, some equal is a note."""
    report.distinct_levels = len(set(first.values()))
    if len(first) >= 2 and report.distinct_levels == 1:
        failures.append(
            f"all {len(first)} sampled levels gave the same first observation: the seed does not choose the "
            f"level (or every level looks alike at the start, which PLR cannot tell apart either). Fix: "
            f"{SEED_RECIPE}"
        )
    elif report.distinct_levels < len(first):
        report.notes.append(
            f"{len(first) - report.distinct_levels} of {len(first)} sampled levels share a first observation "
            "with another one (fine if levels differ only later, e.g. behind a partial view)"
        )


def _check_episodes_end(
    env: Any, levels: list[int], max_steps: int, seed: int, report: LevelEnvReport, failures: list[str]
) -> None:
    """Random actions must end an episode within ``max_steps`` on every checked level."""
    endless = []
    for level in levels:
        steps = _play(env, level, max_steps, seed)
        if steps is None:
            endless.append(level)
        else:
            report.episode_steps[level] = steps
    if endless:
        failures.append(
            f"episodes on levels {_names(endless)} did not end within {max_steps} steps of random "
            "actions: PLR scores a level when its episode ends. Fix: give the env a time limit "
            "(gym.register(..., max_episode_steps=N), gym.make(..., max_episode_steps=N) or "
            "gymnasium.wrappers.TimeLimit), or raise max_steps here if episodes are just long"
        )


def check_level_env(
    env: Any,
    levels: Iterable[int] = range(100),
    *,
    n_levels: int = 8,
    n_episodes: int = 2,
    max_steps: int = 10_000,
    seed: int = 0,
    warn: bool = True,
) -> LevelEnvReport:
    """Check that ``env`` plays level ``s`` on ``reset(seed=s)`` for the level ids it will be given.

    Runs every check of the module docstring on up to ``n_levels`` ids spread over ``levels`` (the first,
    the last, evenly spaced ones), then raises one :class:`LevelEnvError` that lists every failure with its
    fix. The env is reset and stepped (random actions); close it yourself afterwards.

    :param env: a Gymnasium env instance, or a registered id (built with ``gym.make`` and closed here).
    :param levels: the level ids the env will be given (training and held-out levels).
    :param n_levels: how many of them to reset (at least 2 for the "levels differ" check).
    :param n_episodes: on how many of them to play an episode to its end.
    :param max_steps: the step budget of each such episode.
    :param seed: seeds the action space's random actions.
    :param warn: show the report's notes as ``UserWarning``.
    :return: the report (its ``failures`` are empty).
    :raises LevelEnvError: a check failed (a ``ValueError``; ``.failures`` lists them).
    """
    if isinstance(env, str):
        import gymnasium as gym

        made: Any = gym.make(env)
        try:
            return check_level_env(
                made,
                levels,
                n_levels=n_levels,
                n_episodes=n_episodes,
                max_steps=max_steps,
                seed=seed,
                warn=warn,
            )
        finally:
            made.close()
    if n_levels < 1 or n_episodes < 0 or max_steps < 1:
        raise ValueError(
            f"need n_levels >= 1, n_episodes >= 0, max_steps >= 1; got {n_levels}, {n_episodes}, {max_steps}"
        )
    sample = _sample_levels(levels, n_levels)
    failures: list[str] = []
    first = _check_accepted(env, sample, failures)
    report = LevelEnvReport(sampled_levels=len(sample), distinct_levels=0)
    if first:
        _check_same_seed(env, list(first), first, failures)
        _check_distinct(first, report, failures)
        _check_episodes_end(env, list(first)[:n_episodes], max_steps, seed, report, failures)
    report.failures = failures
    if failures:
        raise LevelEnvError(env, failures)
    if warn:
        for note in report.notes:
            warnings.warn(f"check_level_env({env}): {note}", UserWarning, stacklevel=2)
    return report
