"""Array-backed sum tree (with a min tree beside it) for prioritized sampling, vectorized over a batch."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = ["SumTree"]


class SumTree:
    """
    Complete binary tree over ``capacity`` non-negative leaf values, stored in flat arrays.

    Every internal node holds the sum (``sums``) and the minimum of the positive leaves (``mins``) of its
    subtree, so the total mass, the smallest positive leaf and a prefix-sum search all cost ``O(log n)``.
    Node ``1`` is the root, node ``i`` has children ``2i`` and ``2i + 1``, and leaf ``j`` is node
    ``size + j`` where ``size`` is ``capacity`` rounded up to a power of two (padding leaves stay 0).
    :meth:`update` and :meth:`find` process a whole batch together, one tree level per numpy
    operation, so their cost is ``O(batch · log n)`` in C with ``O(log n)`` Python steps.

    Internal nodes are always recomputed from their two children (never updated by adding a delta),
    so the sums carry no accumulated rounding drift and rebuilding a tree from its leaves reproduces
    it bit for bit. The top 10 levels (at most 1023 nodes) are recomputed whole with slice operations
    after each update, and searched with one binary search over their prefix sums, which costs less
    than 10 more per-level steps.

    :param capacity: number of leaves, at least 1

    Example:
        >>> tree = SumTree(4)
        >>> tree.update([0, 1, 2, 3], [1.0, 2.0, 3.0, 4.0])
        >>> float(tree.total), float(tree.min)
        (10.0, 1.0)
        >>> tree.find([0.5, 1.5, 9.9]).tolist()  # leaf whose prefix-sum interval holds each value
        [0, 1, 3]
    """

    def __init__(self, capacity: int) -> None:
        if not isinstance(capacity, (int, np.integer)) or capacity < 1:
            raise ValueError(f"capacity must be a positive int, got {capacity!r}")
        self.capacity = int(capacity)
        self.size = 1 << max(self.capacity - 1, 0).bit_length()
        self.depth = self.size.bit_length() - 1
        # Levels above this one (at most 1023 nodes) are handled with slices instead of per node.
        self._top = min(self.depth, 10)
        self.sums: NDArray[np.float64] = np.zeros(2 * self.size, dtype=np.float64)
        self.mins: NDArray[np.float64] = np.full(2 * self.size, np.inf, dtype=np.float64)

    @property
    def total(self) -> float:
        """Sum of all leaves."""
        return float(self.sums[1])

    @property
    def min(self) -> float:
        """Smallest positive leaf (``inf`` when no leaf is positive)."""
        return float(self.mins[1])

    @property
    def leaves(self) -> NDArray[np.float64]:
        """Read-only view of the ``capacity`` leaf values."""
        view = self.sums[self.size : self.size + self.capacity]
        view.flags.writeable = False
        return view

    def get(self, indices: ArrayLike) -> NDArray[np.float64]:
        """
        :param indices: leaf indices, shape ``(batch,)``
        :return: the leaf values, shape ``(batch,)``
        """
        return np.asarray(self.sums[np.asarray(indices, dtype=np.int64) + self.size], dtype=np.float64)

    def update(self, indices: ArrayLike, values: ArrayLike) -> None:
        """
        Set leaves and refresh their ancestors, level by level for the whole batch at once.

        Repeated indices are allowed (the last value wins, as in numpy assignment). Values are not
        validated here: callers check them (the buffer rejects NaN, infinite and negative priorities).

        :param indices: leaf indices in ``[0, capacity)``, shape ``(batch,)``
        :param values: non-negative leaf values, shape ``(batch,)``
        """
        nodes = np.add(np.asarray(indices, dtype=np.int64), self.size)
        cur_sum = np.array(values, dtype=np.float64)  # each entry's new value of its node, level by level
        cur_min = np.where(cur_sum > 0.0, cur_sum, np.inf)
        sums, mins = self.sums, self.mins
        sums[nodes] = cur_sum
        mins[nodes] = cur_min
        sibling = np.empty_like(nodes)
        # Per level: parent = own value (op) sibling, with the sibling read after this level's writes. When
        # several entries share a parent, the last one writes it last and is right: it is the last entry
        # of the parent's subtree, so its own value won every write below (as in numpy assignment), and
        # + and min are commutative, so the parent equals left (op) right bit for bit.
        for _ in range(self.depth - self._top):
            np.bitwise_xor(nodes, 1, out=sibling)
            np.right_shift(nodes, 1, out=nodes)
            np.add(cur_sum, sums[sibling], out=cur_sum)
            sums[nodes] = cur_sum
            np.minimum(cur_min, mins[sibling], out=cur_min)
            mins[nodes] = cur_min
        # The few top levels are cheaper to recompute whole, with slices, than node by node.
        self._rebuild_levels(self._top)

    def _rebuild_levels(self, below: int) -> None:
        """Recompute every node above tree level ``below`` (root = level 0) from its children."""
        sums, mins = self.sums, self.mins
        for level in range(below - 1, -1, -1):
            lo, hi = 1 << level, 1 << (level + 1)
            np.add(sums[2 * lo : 2 * hi : 2], sums[2 * lo + 1 : 2 * hi : 2], out=sums[lo:hi])
            np.minimum(mins[2 * lo : 2 * hi : 2], mins[2 * lo + 1 : 2 * hi : 2], out=mins[lo:hi])

    def build(self, values: ArrayLike) -> None:
        """
        Replace all leaves at once and rebuild every internal node in ``O(capacity)``.

        :param values: non-negative leaf values, shape ``(capacity,)``
        """
        vals = np.asarray(values, dtype=np.float64)
        if vals.shape != (self.capacity,):
            raise ValueError(f"values must have shape ({self.capacity},), got {vals.shape}")
        self.sums[:] = 0.0
        self.mins[:] = np.inf
        self.sums[self.size : self.size + self.capacity] = vals
        self.mins[self.size : self.size + self.capacity] = np.where(vals > 0.0, vals, np.inf)
        self._rebuild_levels(self.depth)

    def find(self, prefix_sums: ArrayLike) -> NDArray[np.int64]:
        """
        For each value ``v`` find the leaf ``j`` with ``sum(leaves[:j]) <= v < sum(leaves[:j + 1])``.

        All values descend together, one level per step. Values are expected in ``[0, total)``;
        a value at or beyond ``total`` (floating-point rounding) still lands on a positive leaf, so a
        leaf with value 0 is never returned while ``total > 0``.

        :param prefix_sums: values in ``[0, total)``, shape ``(batch,)``
        :return: leaf indices, shape ``(batch,)``
        """
        if not self.sums[1] > 0.0:
            raise ValueError("cannot sample from a tree whose total is 0")
        sums = self.sums
        # Top levels in one step: binary search in the prefix sums of the nodes at level `_top`.
        first = 1 << self._top
        level = sums[first : 2 * first]
        prefix = np.cumsum(level)
        given = np.asarray(prefix_sums, dtype=np.float64)
        value = given.reshape(-1)  # one dimension for the in-place steps (a scalar becomes one value)
        node = np.searchsorted(prefix, value, side="right").astype(np.int64, copy=False)
        np.minimum(node, first - 1, out=node)
        start = prefix.take(node)
        start -= level.take(node)  # prefix sum before the node
        value = value - start  # a new array: the caller's values are not changed
        np.maximum(value, 0.0, out=value)
        node += first
        # Below: one level per step, in place (node = left child, +1 if the value lies right of it).
        for _ in range(self.depth - self._top):
            node += node
            left = sums.take(node)
            go_right = value >= left
            left *= go_right
            value -= left
            node |= go_right
        # Rounding can walk past the last positive leaf of a subtree (never in exact arithmetic).
        bad = sums.take(node) <= 0.0
        node -= self.size
        if bad.any():
            node[bad] = self._find_guarded(np.minimum(given.reshape(-1)[bad], self.total))
        return node.reshape(given.shape)[()]  # the shape given (a scalar for a scalar, as before)

    def _find_guarded(self, value: NDArray[np.float64]) -> NDArray[np.int64]:
        """Slow-path descent that never enters a subtree of mass 0."""
        value = value.copy()
        node = np.ones(value.shape, dtype=np.int64)
        for _ in range(self.depth):
            node <<= 1
            left = self.sums[node]
            go_right = ((value >= left) & (self.sums[node + 1] > 0.0)) | (left <= 0.0)
            value = np.where(go_right, value - left, value)
            node += go_right
        return node - self.size
