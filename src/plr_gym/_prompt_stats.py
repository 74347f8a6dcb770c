"""PromptCurriculum's per-group statistics and the dataset-size rule of ``replay_prob="auto"`` (split from
:mod:`plr_gym.prompts`, which re-exports nothing of it: these are private helpers)."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
FloatArray = npt.NDArray[np.float64]

#: round 3's default replay probability, which ``"auto"`` keeps up to ``_AUTO_SMALL`` prompts
_DEFAULT_REPLAY_PROB = 0.6
#: ``replay_prob="auto"`` (round 4): 0.6 up to this many prompts, rising with log10 of the dataset size to
#: ``_LARGE_REPLAY_PROB`` at ten times as many (a large dataset is not exhausted by the budget: fewer of
#: its draws go to unseen prompts); see :func:`_auto_replay_prob`
_AUTO_SMALL = 2000
_LARGE_REPLAY_PROB = 0.8


def _group_stats(values: FloatArray, success: BoolArray, inv: IntArray, k: int) -> tuple[Any, ...]:
    """Per group (``inv``: each entry's group of ``k``): its size ``n``, successes ``s``, mean reward, reward
    variance (0 when its rewards are all equal) and whether its rewards differ."""
    n = np.bincount(inv, minlength=k)
    s = np.bincount(inv, weights=success.astype(np.float64), minlength=k)
    group_mean = np.bincount(inv, weights=values, minlength=k) / n
    dev = values - group_mean[inv]
    low = np.full(k, np.inf)
    high = np.full(k, -np.inf)
    np.minimum.at(low, inv, values)
    np.maximum.at(high, inv, values)
    mixed = high > low
    with np.errstate(over="ignore", invalid="ignore"):
        group_var = np.where(mixed, np.bincount(inv, weights=dev * dev, minlength=k) / n, 0.0)
    return n, s, group_mean, group_var, mixed


def _rounds(prompt_of: IntArray) -> IntArray:
    """Each group's round: a prompt with several groups in a batch takes them one after the other, in
    order (its first group in round 0, its second in round 1, ...)."""
    k = prompt_of.size
    order = np.argsort(prompt_of, kind="stable")
    rank = np.empty(k, dtype=np.int64)
    first = np.r_[True, prompt_of[order][1:] != prompt_of[order][:-1]]
    starts = np.maximum.accumulate(np.where(first, np.arange(k), 0))
    rank[order] = np.arange(k) - starts
    return rank


def _auto_replay_prob(num_prompts: int) -> float:
    """``replay_prob="auto"``: ``0.6 + 0.2·clip(log10(num_prompts / 2000), 0, 1)``: 0.6 (round 3's
    default) up to 2000 prompts, 0.8 from 20,000 (round 4 of the study in docs/prompts.md)."""
    rise = float(np.clip(np.log10(num_prompts / _AUTO_SMALL), 0.0, 1.0))
    return _DEFAULT_REPLAY_PROB + (_LARGE_REPLAY_PROB - _DEFAULT_REPLAY_PROB) * rise
