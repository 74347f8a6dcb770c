"""The argument checks of :class:`~plr_gym.prompts.PromptCurriculum`: its options, and the prompt ids,
rewards and groups that :meth:`~plr_gym.prompts.PromptCurriculum.observe` takes. Each refuses bad input
with a ``TypeError``/``ValueError`` naming the argument."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from plr_gym._prompt_state import _is_int
from plr_gym.sampler import _check_real

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
FloatArray = npt.NDArray[np.float64]


def check_choice(name: str, value: Any, choices: tuple[str, ...]) -> None:
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name}={value!r} is not supported; choose one of {', '.join(choices)}")


def check_seed(seed: Any) -> int | None:
    if seed is not None and not _is_int(seed):
        raise TypeError(f"seed must be an int or None, got {type(seed).__name__} {seed!r}")
    if seed is not None and int(seed) < 0:
        raise ValueError(f"seed must be non-negative, got {seed!r}")
    return None if seed is None else int(seed)


def check_range(reward_range: Any) -> tuple[float, float] | None:
    if reward_range is None:
        return None
    if (
        isinstance(reward_range, (str, bytes))
        or not hasattr(reward_range, "__len__")
        or len(reward_range) != 2
    ):
        raise TypeError(f"reward_range must be a pair (low, high) of numbers or None, got {reward_range!r}")
    lo, hi = (_check_real("reward_range", v) for v in reward_range)
    if not lo < hi:
        raise ValueError(f"reward_range must be a pair (low, high) with low < high, got {reward_range!r}")
    return (lo, hi)


def check_threshold(threshold: Any, reward_range: tuple[float, float] | None) -> float:
    if threshold is None:  # the middle of the range: 0.5 for 0/1 rewards, 0 for -1/+1 rewards
        return 0.5 if reward_range is None else (reward_range[0] + reward_range[1]) / 2.0
    out = _check_real("success_threshold", threshold)
    if reward_range is not None and not reward_range[0] < out <= reward_range[1]:
        raise ValueError(
            f"success_threshold must lie in reward_range's ({reward_range[0]}, {reward_range[1]}], "
            f"got {threshold!r}"
        )
    return out


def check_labels(
    prompt_labels: Any, num_prompts: int, estimate: str, evidence_half_life: float | None
) -> IntArray | None:
    """``prompt_labels`` renumbered ``0 .. L - 1`` (``None`` for ``None``)."""
    if prompt_labels is None:
        return None
    if estimate == "posterior":
        raise ValueError("prompt_labels apply to estimate='running' (the posterior decays to its prior)")
    if evidence_half_life is None:
        raise ValueError(
            "prompt_labels set the prior that stale estimates decay towards: they need evidence_half_life"
        )
    try:
        labels = np.asarray(prompt_labels)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"prompt_labels must be a 1-D array of int labels: {exc}") from exc
    if labels.shape != (num_prompts,):
        raise ValueError(
            f"prompt_labels must hold one label per prompt, shape ({num_prompts},), got {labels.shape}"
        )
    if labels.dtype == np.bool_ or not np.issubdtype(labels.dtype, np.integer):
        raise TypeError(f"prompt_labels must be ints (a topic or difficulty label), got dtype {labels.dtype}")
    _, inv = np.unique(labels, return_inverse=True)
    return np.asarray(inv.reshape(-1), dtype=np.int64)  # labels renumbered 0 .. L - 1


def check_ids(prompt_ids: Any, num_prompts: int) -> IntArray:
    """``prompt_ids`` as a 1-D int array of ids in ``[0, num_prompts)``."""
    try:
        ids = np.asarray(prompt_ids)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"prompt_ids must be a 1-D array of int prompt ids: {exc}") from exc
    if ids.ndim != 1:
        raise ValueError(f"prompt_ids must be 1-D (one id per completion), got shape {ids.shape}")
    if ids.size and (ids.dtype == np.bool_ or not np.issubdtype(ids.dtype, np.integer)):
        raise TypeError(f"prompt_ids must be ints, got dtype {ids.dtype}")
    if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= num_prompts):
        bad = int(ids.min()) if int(ids.min()) < 0 else int(ids.max())
        raise ValueError(f"prompt_ids must lie in [0, {num_prompts}), got {bad}")
    return ids.astype(np.int64)


def outcomes(
    rewards: Any,
    shape: tuple[int, ...],
    success_fn: Callable[[FloatArray], Any] | None,
    reward_range: tuple[float, float] | None,
    success_threshold: float,
) -> tuple[FloatArray, BoolArray]:
    """The rewards as floats (the outcomes of ``success_fn``, as 0/1, if given) and the successes."""
    try:
        r = np.asarray(rewards)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"rewards must be a 1-D array of bools or numbers: {exc}") from exc
    if r.shape != shape:
        raise ValueError(f"rewards must have one entry per prompt id, shape {shape}, got {r.shape}")
    if r.size == 0:
        return np.zeros(0), np.zeros(0, dtype=bool)
    if r.dtype == np.bool_:
        return r.astype(np.float64), r.copy()
    if not (np.issubdtype(r.dtype, np.floating) or np.issubdtype(r.dtype, np.integer)):
        raise TypeError(f"rewards must be bools or real numbers, got dtype {r.dtype}")
    rf = r.astype(np.float64)
    if not np.isfinite(rf).all():
        raise ValueError(f"rewards must be finite, got {rf[~np.isfinite(rf)][0]!r}")
    if success_fn is not None:
        out = np.asarray(success_fn(rf.copy()))
        if out.shape != shape or out.dtype != np.bool_:
            raise TypeError(
                f"success_fn must return a bool array of shape {shape}, got {out.dtype} {out.shape}"
            )
        return out.astype(np.float64), out
    if reward_range is not None:
        lo, hi = reward_range
        outside = (rf < lo) | (rf > hi)
        if outside.any():
            raise ValueError(
                f"rewards must lie in reward_range=[{lo}, {hi}], got {float(rf[outside][0])!r}; widen "
                "reward_range (or leave it None: any finite reward)"
            )
    return rf, np.asarray(rf >= success_threshold)


def groups_of(ids: IntArray, groups: Any) -> tuple[IntArray, IntArray]:
    """Each entry's group (numbered by first entry) and each group's prompt id."""
    if groups is None:
        labels: Any = ids
    else:
        try:
            labels = np.asarray(groups)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"groups must be a 1-D array of group labels: {exc}") from exc
        if labels.shape != ids.shape:
            raise ValueError(
                f"groups must have one label per prompt id, shape {ids.shape}, got {labels.shape}"
            )
    if ids.size == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    try:
        _, first, inv = np.unique(labels, return_index=True, return_inverse=True)
    except TypeError as exc:
        raise TypeError(f"groups must be labels that compare with each other: {exc}") from exc
    inv = inv.reshape(-1)
    by_first = np.argsort(first, kind="stable")  # renumber groups by their first entry
    renumber = np.empty_like(by_first)
    renumber[by_first] = np.arange(by_first.size)
    inv = renumber[inv].astype(np.int64)
    prompt_of = ids[np.sort(first)]
    if not np.array_equal(prompt_of[inv], ids):
        bad = int(np.flatnonzero(prompt_of[inv] != ids)[0])
        raise ValueError(
            f"groups: a group holds one prompt's completions, but entry {bad} (prompt {int(ids[bad])}) "
            f"shares its group with prompt {int(prompt_of[inv[bad]])}"
        )
    return inv, prompt_of.astype(np.int64)
