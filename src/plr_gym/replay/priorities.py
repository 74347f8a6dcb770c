"""Priorities of a replay memory's slots and prioritized sampling from them (Schaul et al., 2015).

This module is the prioritized-replay core: numpy and :class:`~plr_gym.replay.sum_tree.SumTree` only, no
PyTorch and no Stable-Baselines3. :class:`ReplayPriorities` keeps one raw priority per slot of a ring
of ``n_rows`` rows by ``n_envs`` columns (slot ``row * n_envs + env``, the layout of SB3's replay
buffers), draws batches of slots by priority and returns their importance weights. The SB3 buffers in
:mod:`plr_gym.replay.buffers` store the transitions and hand the slot bookkeeping to it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from plr_gym.replay.sum_tree import SumTree

__all__ = ["DEFAULT_ALPHA_BETA", "PRIORITIZATIONS", "ReplayPriorities"]

#: Prioritization variants of Schaul et al. (2015).
PRIORITIZATIONS = ("proportional", "rank")
#: Defaults from Schaul et al. (2015), Table 3: ``(alpha, beta0)`` per prioritization variant.
DEFAULT_ALPHA_BETA = {"proportional": (0.6, 0.4), "rank": (0.7, 0.5)}


def check_fraction(name: str, value: Any) -> float:
    """``value`` as a float in ``[0, 1]``, else ``ValueError`` naming ``name``."""
    if (
        isinstance(value, (bool, np.bool_))
        or not isinstance(value, (int, float, np.integer, np.floating))
        or not 0.0 <= float(value) <= 1.0
    ):
        raise ValueError(f"{name} must be a number in [0, 1], got {value!r}")
    return float(value)


def is_int(value: Any) -> bool:
    """Whether ``value`` is an int (numpy ints included, bools excluded)."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _check_non_negative(name: str, value: Any) -> float:
    if (
        isinstance(value, (bool, np.bool_))
        or not isinstance(value, (int, float, np.integer, np.floating))
        or not np.isfinite(value)
        or value < 0
    ):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return float(value)


class ReplayPriorities:
    """
    Raw priorities ``p_i = |delta_i| + eps`` of the slots of a ring of ``n_rows × n_envs`` slots, and
    prioritized sampling from them.

    Slot ``row * n_envs + env`` is leaf ``row * n_envs + env`` of one :class:`SumTree` (with a min tree
    beside it). The caller owns the storage and tells this object where the ring stands: ``rows`` (the
    number of stored rows, so slots ``[0, rows * n_envs)`` hold data) and ``pos`` (the row written
    next). Rows fill from 0 before the ring wraps.

    - ``"proportional"``: leaf ``p_i ** alpha``, so ``P(i) = p_i^alpha / sum_k p_k^alpha`` exactly.
    - ``"rank"``: leaf ``rank(i) ** -alpha`` (rank 1 = largest ``p``). :meth:`refresh_ranks` sorts all
      priorities; it runs every ``rank_refresh_interval`` draws and whenever the stored slots have doubled
      since the last sort. In between, an updated priority gets its rank within the last sorted snapshot
      (binary search) and a new slot rank 1.
    - New slots (:meth:`add`) enter at the largest raw priority seen so far (at least 1).
    - :meth:`sample`: stratified draws (the total mass cut into equal segments, one uniform value per
      segment, all descending the tree together); a share ``recent_data_ratio`` of each batch is drawn
      uniformly from the ``recent_data_steps`` newest rows instead; ``replacement=False`` redraws
      duplicates from the remaining mass. Importance weights are ``(N·P(i))^-beta / max_j (N·P(j))^-beta``
      (``P`` the mixture probability when a recent share is drawn), so ``w <= 1``.

    :param n_rows: rows of the ring (SB3's ``buffer_size`` after division by ``n_envs``)
    :param n_envs: columns (parallel envs)
    :param prioritization: ``"proportional"`` or ``"rank"``
    :param alpha: priority exponent (0 = uniform); default 0.6 (proportional) or 0.7 (rank)
    :param beta: initial importance-sampling exponent; default 0.4 (proportional) or 0.5 (rank)
    :param eps: added to every priority so that no slot gets probability 0
    :param replacement: allow one slot several times in a batch
    :param recent_data_ratio: share of each batch drawn uniformly from the newest rows
    :param recent_data_steps: number of newest rows for that share (needed when the share is > 0)
    :param rank_refresh_interval: rank mode: draws between full re-sorts
    :param seed: seed of the random generator; ``None`` draws one from numpy's global generator

    Example:
        >>> prio = ReplayPriorities(4, n_envs=2, seed=0)
        >>> prio.add(0).tolist()  # the slots of row 0, at priority 1 (the largest seen so far)
        [0, 1]
        >>> for row in (1, 2):
        ...     _ = prio.add(row)
        >>> prio.update([0, 1], [3.0, 0.0], rows=3)
        >>> _ = prio.add(3)  # a new row enters at the largest priority seen so far
        >>> prio.raw.round(6).tolist()
        [3.000001, 1e-06, 1.0, 1.0, 1.0, 1.0, 3.000001, 3.000001]
        >>> indices, weights = prio.sample(4, rows=4, pos=0)
        >>> indices.shape, bool((weights <= 1).all())
        ((4,), True)
    """

    def __init__(
        self,
        n_rows: int,
        n_envs: int = 1,
        *,
        prioritization: str = "proportional",
        alpha: float | None = None,
        beta: float | None = None,
        eps: float = 1e-6,
        replacement: bool = True,
        recent_data_ratio: float = 0.0,
        recent_data_steps: int | None = None,
        rank_refresh_interval: int = 1000,
        seed: int | None = None,
    ) -> None:
        if not is_int(n_rows) or n_rows < 1:
            raise ValueError(f"n_rows must be an int >= 1, got {n_rows!r}")
        if not is_int(n_envs) or n_envs < 1:
            raise ValueError(f"n_envs must be an int >= 1, got {n_envs!r}")
        if prioritization not in PRIORITIZATIONS:
            raise ValueError(f"prioritization must be one of {PRIORITIZATIONS}, got {prioritization!r}")
        default_alpha, default_beta = DEFAULT_ALPHA_BETA[prioritization]
        self.alpha = _check_non_negative("alpha", default_alpha if alpha is None else alpha)
        self.eps = _check_non_negative("eps", eps)
        ratio = check_fraction("recent_data_ratio", recent_data_ratio)
        if ratio > 0 and (
            recent_data_steps is None or not is_int(recent_data_steps) or recent_data_steps < 1
        ):
            raise ValueError(
                "recent_data_ratio > 0 needs recent_data_steps, the number of most recent steps (per env) "
                f"to draw that share from, as an int >= 1; got recent_data_steps={recent_data_steps!r}"
            )
        if not is_int(rank_refresh_interval) or rank_refresh_interval < 1:
            raise ValueError(f"rank_refresh_interval must be an int >= 1, got {rank_refresh_interval!r}")
        if seed is not None and (not is_int(seed) or seed < 0):
            raise ValueError(f"seed must be a non-negative int or None, got {seed!r}")
        self.n_rows = int(n_rows)
        self.n_envs = int(n_envs)
        self.capacity = self.n_rows * self.n_envs
        self.prioritization = prioritization
        self.beta0 = check_fraction("beta", default_beta if beta is None else beta)
        self._beta = self.beta0
        self.replacement = bool(replacement)
        self.recent_data_ratio = ratio
        self.recent_data_steps = None if recent_data_steps is None else int(recent_data_steps)
        self.rank_refresh_interval = int(rank_refresh_interval)
        if seed is None:
            # Follow numpy's global RNG (which SB3 seeds from the algorithm's `seed=`).
            seed = int(np.random.randint(0, 2**31 - 1))  # noqa: NPY002
        self.rng = np.random.default_rng(seed)
        self.tree = SumTree(self.capacity)
        #: Raw priority of every slot (0 for empty slots), shape ``(capacity,)``.
        self.raw: NDArray[np.float64] = np.zeros(self.capacity, dtype=np.float64)
        self.max_priority = 1.0
        self.rank_snapshot: NDArray[np.float64] = np.zeros(0, dtype=np.float64)  # ascending, at last sort
        self.samples_since_refresh = 0
        self.size_at_refresh = 0
        #: Draws (:meth:`sample` calls) since the last :meth:`update`.
        self.samples_since_update = 0

    # ------------------------------------------------------------------ beta

    @property
    def beta(self) -> float:
        """Current importance-sampling exponent (annealed from ``beta0`` to 1 by :meth:`anneal_beta`)."""
        return self._beta

    @beta.setter
    def beta(self, value: float) -> None:
        self._beta = check_fraction("beta", value)

    def anneal_beta(self, progress: float) -> None:
        """
        Set ``beta = beta0 + progress * (1 - beta0)`` (linear annealing to 1, Schaul et al. 2015).

        :param progress: fraction of training done, in ``[0, 1]``
        """
        progress = check_fraction("progress", progress)
        self._beta = self.beta0 + progress * (1.0 - self.beta0)

    # ------------------------------------------------------------------ priorities

    def reset(self) -> None:
        """Forget every priority (the ring is empty again); settings and RNG state are kept."""
        self.tree = SumTree(self.capacity)
        self.raw[:] = 0.0
        self.max_priority = 1.0
        self.rank_snapshot = np.zeros(0, dtype=np.float64)
        self.samples_since_refresh = 0
        self.size_at_refresh = 0
        self.samples_since_update = 0

    def add(self, row: int) -> NDArray[np.int64]:
        """
        Give the slots of ``row`` (just written) the largest raw priority seen so far.

        :param row: the row, in ``[0, n_rows)``
        :return: the row's flat slot indices, shape ``(n_envs,)``
        """
        slots = row * self.n_envs + np.arange(self.n_envs)
        self.raw[slots] = self.max_priority
        # Rank mode: the largest priority ranks first, 1 ** -alpha.
        leaf = 1.0 if self.prioritization == "rank" else self.max_priority**self.alpha
        self.tree.update(slots, np.full(self.n_envs, leaf))
        return slots

    def update(self, indices: ArrayLike, priorities: ArrayLike, rows: int) -> None:
        """
        Set the raw priority of slots to ``priority + eps`` (``priority`` is typically ``|TD error|``).

        :param indices: flat slot indices, shape ``(batch,)``
        :param priorities: non-negative finite priorities, shape ``(batch,)`` (or ``(batch, 1)``)
        :param rows: stored rows; indices must lie in ``[0, rows * n_envs)``
        :raises ValueError: on a NaN, infinite or negative priority, a shape mismatch, or an index
            outside the stored slots
        """
        for name, value in (("indices", indices), ("priorities", priorities)):
            if isinstance(value, np.ma.MaskedArray):
                raise TypeError(f"{name} must not be a numpy masked array (its mask would be ignored)")
        idx = np.asarray(indices).reshape(-1)
        given = np.asarray(priorities)
        if given.dtype == np.bool_ or given.dtype.kind not in "iuf":
            raise TypeError(
                f"priorities must be real numbers (e.g. |TD error| as floats), got dtype {given.dtype}"
            )
        prio = given.astype(np.float64).reshape(-1)
        if idx.shape != prio.shape:
            raise ValueError(
                f"indices and priorities must have the same length, got {idx.size} and {prio.size}"
            )
        if not idx.size:
            self.samples_since_update = 0
            return
        if idx.dtype == np.bool_ or not np.issubdtype(idx.dtype, np.integer):
            raise ValueError(f"indices must be integers, got dtype {idx.dtype}")
        # Two reductions check every priority: a NaN fails both comparisons, inf the second.
        highest = prio.max()
        if not (prio.min() >= 0.0 and highest < np.inf):
            if not np.all(np.isfinite(prio)):
                raise ValueError(
                    "priorities must be finite, got NaN or inf at positions "
                    f"{np.flatnonzero(~np.isfinite(prio))}"
                )
            raise ValueError(
                f"priorities must be >= 0, got negative values at positions {np.flatnonzero(prio < 0)}"
            )
        n_valid = rows * self.n_envs
        low, high = idx.min(), idx.max()
        if low < 0 or high >= n_valid:
            raise ValueError(
                f"indices must point at stored transitions, in [0, {n_valid}); got range [{low}, {high}]"
            )
        raw = prio + self.eps
        self.raw[idx] = raw
        # Rounding is monotonic, so max(prio) + eps is exactly max(prio + eps).
        self.max_priority = max(self.max_priority, float(highest + self.eps))
        self.tree.update(idx, self._leaf_values(raw))
        self.samples_since_update = 0

    def _leaf_values(self, raw: NDArray[np.float64]) -> NDArray[np.float64]:
        if self.prioritization == "proportional":
            raw **= self.alpha  # in place: `raw` is update()'s temporary (same result as raw ** alpha)
            return raw
        # Rank among the last sorted snapshot: 1 + number of snapshot priorities strictly above.
        snapshot = self.rank_snapshot
        ranks = 1 + snapshot.size - np.searchsorted(snapshot, raw, side="right")
        return np.asarray(ranks.astype(np.float64) ** -self.alpha, dtype=np.float64)

    def refresh_ranks(self, rows: int) -> None:
        """
        Rank mode: sort the stored priorities (``O(N log N)``) and give every slot the exact leaf
        ``rank ** -alpha`` (rank 1 = largest priority, ties broken by slot order).

        :param rows: stored rows (slots ``[0, rows * n_envs)`` are ranked)
        """
        n = rows * self.n_envs
        raw = self.raw[:n]
        order = np.argsort(-raw, kind="stable")
        ranks = np.empty(n, dtype=np.float64)
        ranks[order] = np.arange(1, n + 1, dtype=np.float64)
        leaves = np.zeros(self.capacity, dtype=np.float64)
        leaves[:n] = ranks**-self.alpha
        self.tree.build(leaves)
        self.rank_snapshot = np.sort(raw)
        self.samples_since_refresh = 0
        self.size_at_refresh = n

    def probabilities(self) -> NDArray[np.float64]:
        """
        :return: probability ``P(i)`` that one prioritized draw picks each slot, shape ``(capacity,)``
            (ignores ``recent_data_ratio``)
        """
        leaves = np.asarray(self.tree.leaves, dtype=np.float64)
        total = self.tree.total
        return leaves / total if total > 0 else np.zeros_like(leaves)

    # ------------------------------------------------------------------ sampling

    def sample(self, batch_size: int, rows: int, pos: int) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
        """
        Draw slots by priority (see the class docstring).

        :param batch_size: number of slots to draw
        :param rows: stored rows
        :param pos: row written next (the newest row is ``pos - 1``, modulo ``n_rows``)
        :return: flat slot indices, shape ``(batch_size,)``, and importance weights, shape ``(batch_size,)``
        """
        if not is_int(batch_size) or batch_size < 1:
            raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}")
        n = rows * self.n_envs
        if n == 0:
            raise ValueError("cannot sample from an empty buffer: add transitions first")
        if not self.replacement and batch_size > n:
            raise ValueError(
                f"replacement=False needs batch_size <= stored transitions ({n}), got {batch_size}"
            )
        self.samples_since_update += 1
        if self.prioritization == "rank":
            self.samples_since_refresh += 1
            if self.samples_since_refresh > self.rank_refresh_interval or n > 2 * self.size_at_refresh:
                self.refresh_ranks(rows)

        n_recent = round(self.recent_data_ratio * batch_size) if self.recent_data_ratio > 0 else 0
        recent_slots = self._recent_slot_count(rows)
        if not self.replacement:
            n_recent = min(n_recent, recent_slots)
        recent = np.zeros(0, dtype=np.int64)
        if n_recent > 0:
            picks = self.rng.choice(recent_slots, size=n_recent, replace=self.replacement)
            recent = self._recent_slot(picks, pos)
        if n_recent == batch_size:  # the whole batch comes from the recent window (weights 1)
            prioritized = np.zeros(0, dtype=np.int64)
        elif self.replacement:
            prioritized = self.tree.find(self._stratified(batch_size - n_recent, self.tree.total))
        else:
            prioritized = self._sample_distinct(batch_size - n_recent, exclude=recent)
        if n_recent == 0:  # find() returns a new int64 array: nothing to join
            indices = np.asarray(prioritized, dtype=np.int64)
        else:
            indices = np.concatenate([recent, prioritized]).astype(np.int64)
        return indices, self._weights(indices, n_recent / batch_size, recent_slots, pos)

    def _stratified(self, count: int, total: float) -> NDArray[np.float64]:
        segment = total / count
        values = self.rng.random(count)
        values += np.arange(count)  # in place, as (arange + random) * segment
        values *= segment
        return values

    def _sample_distinct(self, count: int, exclude: NDArray[np.int64]) -> NDArray[np.int64]:
        """Stratified draws, redrawing duplicates from the mass that is left until ``count`` are distinct."""
        taken = np.unique(exclude)
        saved_idx = [taken]
        saved_val = [self.tree.get(taken)]
        self.tree.update(taken, np.zeros(taken.size))
        chosen: list[NDArray[np.int64]] = []
        try:
            while count > 0:
                if not self.tree.total > 0.0:
                    raise ValueError(
                        "replacement=False: fewer transitions with positive priority than batch_size"
                    )
                draw = self.tree.find(self._stratified(count, self.tree.total))
                _, first = np.unique(draw, return_index=True)
                new = draw[np.sort(first)]  # keep draw order
                saved_idx.append(new)
                saved_val.append(self.tree.get(new))
                self.tree.update(new, np.zeros(new.size))
                chosen.append(new)
                count -= new.size
        finally:
            self.tree.update(np.concatenate(saved_idx), np.concatenate(saved_val))
        return np.concatenate(chosen) if chosen else np.zeros(0, dtype=np.int64)

    def _recent_slot_count(self, rows: int) -> int:
        if self.recent_data_steps is None:
            return 0
        return min(self.recent_data_steps, rows) * self.n_envs

    def _recent_slot(self, picks: NDArray[np.int64], pos: int) -> NDArray[np.int64]:
        age, env = np.divmod(picks, self.n_envs)  # age 0 = newest row
        rows = (pos - 1 - age) % self.n_rows
        return np.asarray(rows * self.n_envs + env, dtype=np.int64)

    def _weights(
        self, indices: NDArray[np.int64], recent_share: float, recent_slots: int, pos: int
    ) -> NDArray[np.float64]:
        total, min_leaf = self.tree.total, self.tree.min
        if recent_share >= 1.0:
            return np.ones(indices.size, dtype=np.float64)
        if recent_share == 0.0:  # (1 - 0) * x is x: skip the products
            prob = self.tree.get(indices)
            prob /= total
            p_min = min_leaf / total
        else:
            prob = (1.0 - recent_share) * self.tree.get(indices) / total
            # Mixture probability; the normaliser (1 - r) * p_min / total lower-bounds min_j P(j), so the
            # largest weight is at most 1 (exactly 1 unless the lowest-priority slot is also recent).
            age = (pos - 1 - indices // self.n_envs) % self.n_rows
            prob = prob + recent_share * (age < recent_slots // self.n_envs) / recent_slots
            p_min = (1.0 - recent_share) * min_leaf / total
        # In place, as np.minimum((p_min / prob) ** beta, 1.0).
        weights = np.divide(p_min, prob, out=prob)
        weights **= self._beta
        return np.minimum(weights, 1.0, out=weights)

    # ------------------------------------------------------------------ state

    def config(self) -> dict[str, Any]:
        """The settings a saved state must match to be loaded (JSON-serialisable)."""
        return {
            "prioritization": self.prioritization,
            "alpha": self.alpha,
            "beta0": self.beta0,
            "eps": self.eps,
            "replacement": self.replacement,
            "recent_data_ratio": self.recent_data_ratio,
            "recent_data_steps": self.recent_data_steps,
            "rank_refresh_interval": self.rank_refresh_interval,
        }

    def state_arrays(self) -> dict[str, NDArray[Any]]:
        """The state as named arrays for an ``.npz`` file (the RNG state is the caller's to write)."""
        return {
            "beta": np.array(self._beta),
            "max_priority": np.array(self.max_priority),
            "priorities": self.raw,
            "leaves": np.asarray(self.tree.leaves),
            "rank_snapshot": self.rank_snapshot,
            "rank_counters": np.array([self.samples_since_refresh, self.size_at_refresh]),
        }

    def checked_state(self, data: Mapping[str, Any], rows: int) -> dict[str, Any]:
        """
        Validate arrays written by :meth:`state_arrays` for a ring holding ``rows`` rows; change nothing.

        :param data: the arrays by name (``priorities``, ``leaves``, ``beta``, ``max_priority``,
            ``rank_snapshot``, ``rank_counters``)
        :param rows: stored rows of the ring being loaded
        :return: the values for :meth:`set_state`
        :raises ValueError: naming the first invalid member
        """

        prio, leaves = self._checked_slot_arrays(data, rows)
        beta, max_priority = _checked_scalars(data, prio)
        snapshot, counters = _checked_rank_state(data)
        return {
            "priorities": prio,
            "leaves": leaves,
            "beta": beta,
            "max_priority": max_priority,
            "rank_snapshot": snapshot,
            "rank_counters": counters,
        }

    def _checked_slot_arrays(
        self, data: Mapping[str, Any], rows: int
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """The raw priorities and tree leaves of a saved state, as float64 arrays of ``capacity``."""
        prio = data.get("priorities")
        if prio is None or np.shape(prio) != (self.capacity,) or np.asarray(prio).dtype.kind not in "iuf":
            raise ValueError(f"'priorities' must be {self.capacity} floats")
        prio = np.asarray(prio, dtype=np.float64)
        if not np.isfinite(prio).all() or (prio < 0).any():
            raise ValueError("priorities must be finite and >= 0")
        leaves = data.get("leaves")
        if (
            leaves is None
            or np.shape(leaves) != (self.capacity,)
            or np.asarray(leaves).dtype.kind not in "iuf"
        ):
            raise ValueError(f"'leaves' must be {self.capacity} floats")
        leaves = np.asarray(leaves, dtype=np.float64)
        if not np.isfinite(leaves).all() or (leaves < 0).any():
            raise ValueError("tree leaves must be finite and >= 0")
        stored = rows * self.n_envs
        if (prio[stored:] != 0).any() or (leaves[stored:] != 0).any():
            raise ValueError("priorities (or leaves) of slots beyond the stored data are not 0")
        if ((leaves[:stored] > 0) != (prio[:stored] > 0)).any():
            raise ValueError("tree leaves and priorities disagree on which slots are empty")
        return prio, leaves

    def set_state(self, checked: Mapping[str, Any]) -> None:
        """Assign a state returned by :meth:`checked_state` (the RNG is the caller's to set)."""
        self.raw[...] = checked["priorities"]
        self._beta = checked["beta"]
        self.max_priority = checked["max_priority"]
        self.tree.build(checked["leaves"])
        self.rank_snapshot = checked["rank_snapshot"]
        self.samples_since_refresh, self.size_at_refresh = checked["rank_counters"]
        self.samples_since_update = 0


def _scalar(data: Mapping[str, Any], key: str) -> Any:
    """``data[key]`` of a saved state as a Python scalar, else ``ValueError``."""
    if key not in data:
        raise ValueError(f"it has no {key!r} (not a prioritized buffer file)")
    value = np.asarray(data[key])
    if value.shape != ():
        raise ValueError(f"{key!r} must be a scalar, got shape {value.shape}")
    return value.item()


def _checked_scalars(data: Mapping[str, Any], prio: NDArray[np.float64]) -> tuple[float, float]:
    """``beta`` and ``max_priority`` of a saved state (``prio``: its checked raw priorities)."""
    beta, max_priority = _scalar(data, "beta"), _scalar(data, "max_priority")
    if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not 0.0 <= beta <= 1.0:
        raise ValueError(f"beta={beta!r} must be in [0, 1]")
    if (
        isinstance(max_priority, bool)
        or not isinstance(max_priority, (int, float))
        or not (np.isfinite(max_priority) and max_priority >= 1.0 and max_priority >= prio.max(initial=0.0))
    ):
        raise ValueError(f"max_priority={max_priority!r} must be finite, >= 1 and >= every priority")
    return float(beta), float(max_priority)


def _checked_rank_state(data: Mapping[str, Any]) -> tuple[NDArray[np.float64], tuple[int, int]]:
    """The rank mode's sorted snapshot and its two counters of a saved state."""
    snapshot = np.asarray(data.get("rank_snapshot", np.zeros(0)))
    if snapshot.ndim != 1 or snapshot.dtype.kind not in "iuf" or not np.isfinite(snapshot).all():
        raise ValueError("'rank_snapshot' must be a 1-D array of finite floats")
    counters = np.asarray(data.get("rank_counters", np.zeros(0)))
    if counters.shape != (2,) or counters.dtype.kind not in "iu" or (counters < 0).any():
        raise ValueError("'rank_counters' must be two ints >= 0")
    return np.array(snapshot, dtype=np.float64), (int(counters[0]), int(counters[1]))
