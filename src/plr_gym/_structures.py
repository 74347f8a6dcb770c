"""Sampling structures behind :class:`~plr_gym.LevelSampler`.

Each structure keeps one replay component (the score distribution ``P_S`` or the staleness distribution
``P_C``) sampleable in ``O(log n)`` per sampled level and ``O(log n)`` per changed score, instead of the
``O(N log N)`` re-sort the reference implementation performs on every draw.

- :class:`SumTree` — a binary tree of partial sums over non-negative weights (``power``/``softmax``).
- :class:`LinearStalenessTree` — two integer sum trees (seen count and sum of "last sampled" times) whose
  linear combination ``t·count − last`` is the staleness of every seen level at the current time ``t``.
  Staleness changes for *every* level at each draw, yet this tree needs one leaf update per draw.
- :class:`OrderedKeys` — a sorted list of ``(key, index)`` pairs giving the ``k``-th best level in
  ``O(log n)``: the rank, ``max`` and ``eps_greedy`` transforms only depend on the order of the keys.

All structures are pure functions of their inputs (no incremental floating-point drift: tree nodes are
recomputed from their children), so rebuilding them from a checkpoint reproduces them bit for bit.
"""

from __future__ import annotations

from array import array
from typing import Any

import numpy as np
import numpy.typing as npt
from sortedcontainers import SortedList


def _tree_size(n: int) -> int:
    size = 1
    while size < n:
        size *= 2
    return size


class SumTree:
    """Partial sums of ``n`` non-negative float weights with prefix-sum search.

    Example:
        >>> tree = SumTree(4)
        >>> tree.set(1, 3.0); tree.set(3, 1.0)
        >>> tree.total
        4.0
        >>> [tree.find(u) for u in (0.0, 2.9, 3.0, 3.9)]
        [1, 1, 3, 3]
    """

    def __init__(self, n: int) -> None:
        self.n = n
        self.size = _tree_size(n)
        self._t = array("d", bytes(8 * 2 * self.size))

    @property
    def total(self) -> float:
        return self._t[1]

    def get(self, i: int) -> float:
        return self._t[self.size + i]

    def set(self, i: int, w: float) -> None:
        t = self._t
        p = self.size + i
        t[p] = w
        p >>= 1
        while p:
            t[p] = t[2 * p] + t[2 * p + 1]
            p >>= 1

    def rebuild(self, weights: npt.NDArray[np.float64]) -> None:
        """Replace all leaves at once (``weights`` has length ``n``) in ``O(n)``."""
        full = np.zeros(2 * self.size, dtype=np.float64)
        full[self.size : self.size + self.n] = weights
        lo = self.size
        while lo > 1:
            half = lo // 2
            full[half:lo] = full[lo : 2 * lo : 2] + full[lo + 1 : 2 * lo : 2]
            lo = half
        self._t = array("d", full.tobytes())

    def find(self, u: float) -> int:
        """Leaf ``i`` with ``prefix(i) <= u < prefix(i + 1)``; never a zero-weight leaf if ``total > 0``."""
        t = self._t
        p = 1
        size = self.size
        while p < size:
            left = t[2 * p]
            if u < left or t[2 * p + 1] <= 0.0:
                p = 2 * p
            else:
                u -= left
                p = 2 * p + 1
        return p - size


class LinearStalenessTree:
    """Samples seen level ``i`` with probability ``∝ t − last_i`` in ``O(log n)``.

    Keeps, per tree node, the number of seen levels below it and the sum of their ``last_i`` (the
    draw count at which each was last sampled). The staleness mass below a node at time ``t`` is
    ``t·count − last_sum``; both terms are integers, so the arithmetic is exact.
    """

    def __init__(self, n: int) -> None:
        self.n = n
        self.size = _tree_size(n)
        self._count = array("q", bytes(8 * 2 * self.size))
        self._last = array("q", bytes(8 * 2 * self.size))

    def total(self, t: int) -> int:
        return t * self._count[1] - self._last[1]

    def set(self, i: int, seen: bool, last: int) -> None:
        c, s = self._count, self._last
        p = self.size + i
        c[p] = 1 if seen else 0
        s[p] = last if seen else 0
        p >>= 1
        while p:
            c[p] = c[2 * p] + c[2 * p + 1]
            s[p] = s[2 * p] + s[2 * p + 1]
            p >>= 1

    def move(self, i: int, old_last: int, new_last: int) -> None:
        """A seen level was sampled again: only the ``last`` sums change (count is unchanged)."""
        s = self._last
        delta = new_last - old_last
        p = self.size + i
        while p:
            s[p] += delta
            p >>= 1

    def rebuild(self, seen: npt.NDArray[np.bool_], last: npt.NDArray[np.int64]) -> None:
        for src, attr in ((seen.astype(np.int64), "_count"), (np.where(seen, last, 0), "_last")):
            full = np.zeros(2 * self.size, dtype=np.int64)
            full[self.size : self.size + self.n] = src
            lo = self.size
            while lo > 1:
                half = lo // 2
                full[half:lo] = full[lo : 2 * lo : 2] + full[lo + 1 : 2 * lo : 2]
                lo = half
            setattr(self, attr, array("q", full.tobytes()))

    def find(self, u: int, t: int) -> int:
        """Seen leaf ``i`` with ``prefix(i) <= u < prefix(i + 1)`` for integer ``0 <= u < total(t)``."""
        c, s = self._count, self._last
        p = 1
        size = self.size
        while p < size:
            left = t * c[2 * p] - s[2 * p]
            if u < left:
                p = 2 * p
            else:
                u -= left
                p = 2 * p + 1
        return p - size


class OrderedKeys:
    """Indices ordered by ``(key, index)`` ascending: position 0 holds the best level.

    Scores are stored with ``key = -score`` (highest score first) and staleness with ``key = last``
    (stalest first), so ties are always broken towards the lower level index.
    """

    def __init__(self) -> None:
        self._keys: SortedList = SortedList()

    def __len__(self) -> int:
        return len(self._keys)

    def add(self, index: int, key: float) -> None:
        self._keys.add((key, index))

    def remove(self, index: int, key: float) -> None:
        self._keys.remove((key, index))

    def replace(self, index: int, old_key: float, new_key: float) -> None:
        if old_key != new_key:
            self._keys.remove((old_key, index))
            self._keys.add((new_key, index))

    def kth(self, k: int) -> int:
        """Index of the level at 0-based position ``k``."""
        return int(self._keys[k][1])

    def count_tied_first(self) -> int:
        """Number of levels whose key equals the best key."""
        best = self._keys[0][0]
        return int(self._keys.bisect_right((best, float("inf"))))

    def rebuild(self, indices: npt.NDArray[np.int64], keys: npt.NDArray[Any]) -> None:
        self._keys = SortedList(zip(keys.tolist(), indices.tolist()))
