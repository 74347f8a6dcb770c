"""Sampling structures behind :class:`~plr_gym.LevelSampler`.

Each structure keeps one replay component (the score distribution ``P_S`` or the staleness distribution
``P_C``) sampleable in ``O(log n)`` per sampled level and ``O(log n)`` per changed score, instead of the
``O(N log N)`` re-sort the reference implementation performs on every draw.

- :class:`SumTree` — a binary tree of partial sums over non-negative weights (``power``/``softmax``).
- :class:`LinearStalenessTree` — two integer sum trees (seen count and sum of "last sampled" times) whose
  linear combination ``t·count − last`` is the staleness of every seen level at the current time ``t``.
  Staleness changes for *every* level at each draw, yet this tree needs one leaf update per draw.
- :class:`OrderedKeys` — ``(key, index)`` pairs in sorted blocks of a numpy array (16 bytes per level),
  giving the ``k``-th best level in ``O(log n)``: the rank, ``max`` and ``eps_greedy`` transforms only
  depend on the order of the keys.

All structures are pure functions of their inputs (no incremental floating-point drift: tree nodes are
recomputed from their children), so rebuilding them from a checkpoint reproduces them bit for bit.
"""

from __future__ import annotations

import math
from array import array
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt


def _tree_size(n: int) -> int:
    size = 1
    while size < n:
        size *= 2
    return size


def _zeros(typecode: str, n: int) -> array[Any]:
    """An ``array`` of ``n`` zeros, allocated once (no temporary ``bytes`` of the same size)."""
    return array(typecode, [0]) * n


def _fill_sums(
    tree: array[Any], leaves: npt.NDArray[Any], size: int, keep: npt.NDArray[np.bool_] | None = None
) -> None:
    """Overwrite the sum tree ``tree`` (``2 * size`` nodes, leaves at ``size + i``) from ``leaves``, in
    place and without temporary copies of the leaves; leaves where ``keep`` is ``False`` are 0."""
    full = np.frombuffer(tree, dtype=np.float64 if tree.typecode == "d" else np.int64)
    full[:size] = 0
    full[size : size + leaves.size] = leaves
    full[size + leaves.size :] = 0
    if keep is not None:
        np.copyto(full[size : size + leaves.size], 0, where=~keep)
    lo = size
    while lo > 1:
        half = lo // 2
        np.add(full[lo : 2 * lo : 2], full[lo + 1 : 2 * lo : 2], out=full[half:lo])
        lo = half


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
        self._t: array[float] = _zeros("d", 2 * self.size)

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
        _fill_sums(self._t, np.asarray(weights, dtype=np.float64), self.size)

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
        self._count: array[int] = _zeros("q", 2 * self.size)
        self._last: array[int] = _zeros("q", 2 * self.size)

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
        _fill_sums(self._count, seen, self.size)
        _fill_sums(self._last, last, self.size, keep=seen)

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


#: Entries per block of :class:`OrderedKeys` after a rebuild; a block splits in two above twice this.
_BLOCK = 1024


class _Blocks(NamedTuple):
    """One immutable snapshot of :class:`OrderedKeys`: every mutation builds a new one and swaps it in."""

    blocks: list[npt.NDArray[np.complex128]]  # sorted runs; together sorted, none empty
    lasts: npt.NDArray[np.complex128]  # last entry of each block
    ends: npt.NDArray[np.int64]  # ends[b]: number of entries in blocks[: b + 1]


_EMPTY = _Blocks([], np.zeros(0, dtype=np.complex128), np.zeros(0, dtype=np.int64))


def _with(state: _Blocks, v: complex) -> _Blocks:
    """``state`` with the entry ``v`` inserted (``state`` itself is not modified)."""
    blocks, lasts, ends = state
    if not blocks:
        one = np.array([v], dtype=np.complex128)
        return _Blocks([one], one.copy(), np.ones(1, dtype=np.int64))
    b = min(int(np.searchsorted(lasts, v)), len(blocks) - 1)
    block = blocks[b]
    p = int(np.searchsorted(block, v))
    grown = np.empty(block.size + 1, dtype=np.complex128)
    grown[:p] = block[:p]
    grown[p] = v
    grown[p + 1 :] = block[p:]
    blocks = list(blocks)
    ends = ends.copy()
    ends[b:] += 1
    if grown.size > 2 * _BLOCK:
        half = grown.size // 2
        blocks[b : b + 1] = [grown[:half], grown[half:]]
        lasts = np.insert(lasts, b, grown[half - 1])
        ends = np.insert(ends, b, ends[b] - (grown.size - half))
    else:
        blocks[b] = grown
        lasts = lasts.copy()
    lasts[b + (grown.size > 2 * _BLOCK)] = grown[-1]
    return _Blocks(blocks, lasts, ends)


def _without(state: _Blocks, v: complex) -> _Blocks:
    """``state`` with the entry ``v`` removed; ``ValueError`` if it holds no such entry."""
    blocks, lasts, ends = state
    b = int(np.searchsorted(lasts, v))
    if b < len(blocks):
        block = blocks[b]
        p = int(np.searchsorted(block, v))
        if p < block.size and block[p] == v:
            blocks = list(blocks)
            if block.size == 1:
                del blocks[b]
                lasts = np.delete(lasts, b)
                ends = np.delete(ends, b)
            else:
                shrunk = np.concatenate((block[:p], block[p + 1 :]))
                blocks[b] = shrunk
                lasts = lasts.copy()
                lasts[b] = shrunk[-1]
                ends = ends.copy()
            ends[b:] -= 1
            return _Blocks(blocks, lasts, ends)
    raise ValueError(f"no entry (key={v.real!r}, index={int(v.imag)}) in OrderedKeys")


def _moved(state: _Blocks, old: complex, new: complex) -> _Blocks | None:
    """``state`` with entry ``old`` replaced by ``new`` in one pass, or ``None`` when a block would have to
    be split or dropped (then the caller removes and inserts); ``ValueError`` if ``old`` is absent."""
    blocks, lasts, ends = state
    found = lasts.searchsorted([old, new])
    bo, bn = int(found[0]), min(int(found[1]), len(blocks) - 1)
    if bo == len(blocks):
        return None
    block = blocks[bo]
    po = int(block.searchsorted(old))
    if po == block.size or block[po] != old:
        return None
    blocks = list(blocks)
    lasts = lasts.copy()
    if bn == bo:
        pn = int(block.searchsorted(new))
        moved = np.empty_like(block)
        if pn <= po:
            moved[:pn] = block[:pn]
            moved[pn] = new
            moved[pn + 1 : po + 1] = block[pn:po]
            moved[po + 1 :] = block[po + 1 :]
        else:
            moved[:po] = block[:po]
            moved[po : pn - 1] = block[po + 1 : pn]
            moved[pn - 1] = new
            moved[pn:] = block[pn:]
        blocks[bo] = moved
        lasts[bo] = moved[-1]
        return _Blocks(blocks, lasts, ends)
    target = blocks[bn]
    if block.size == 1 or target.size >= 2 * _BLOCK:
        return None
    shrunk = np.concatenate((block[:po], block[po + 1 :]))
    pn = int(target.searchsorted(new))
    grown = np.empty(target.size + 1, dtype=np.complex128)
    grown[:pn] = target[:pn]
    grown[pn] = new
    grown[pn + 1 :] = target[pn:]
    blocks[bo] = shrunk
    blocks[bn] = grown
    lasts[bo] = shrunk[-1]
    lasts[bn] = grown[-1]
    ends = ends.copy()
    if bo < bn:
        ends[bo:bn] -= 1
    else:
        ends[bn:bo] += 1
    return _Blocks(blocks, lasts, ends)


class OrderedKeys:
    """Indices ordered by ``(key, index)`` ascending: position 0 holds the best level.

    Scores are stored with ``key = -score`` (highest score first) and staleness with ``key = last``
    (stalest first), so ties are always broken towards the lower level index.

    An entry is one ``complex128`` (``key + 1j * index``; numpy orders complex numbers by real part, then
    imaginary part), kept in sorted blocks of about a thousand entries: 16 bytes per level, ``O(log n)``
    search and ``O(block + n / block)`` copying per change. Every change builds the new block list next to
    the old one and installs it in one assignment, so an exception raised at any point of
    :meth:`add`, :meth:`remove` or :meth:`replace` (e.g. ``KeyboardInterrupt``) leaves either the old or
    the new ordering, never a mix. Keys must be exact in float64 (``last`` counts below ``2**53``).

    Example:
        >>> import numpy as np
        >>> keys = OrderedKeys()
        >>> keys.rebuild(np.array([0, 1, 2]), np.array([-0.5, -0.9, -0.5]))
        >>> [keys.kth(k) for k in range(len(keys))], keys.count_tied_first()
        ([1, 0, 2], 1)
        >>> keys.replace(2, -0.5, -1.0)
        >>> [keys.kth(k) for k in range(len(keys))]
        [2, 1, 0]
    """

    def __init__(self) -> None:
        self._state: _Blocks = _EMPTY

    def __len__(self) -> int:
        ends = self._state.ends
        return int(ends[-1]) if ends.size else 0

    def add(self, index: int, key: float) -> None:
        self._state = _with(self._state, complex(key, index))

    def remove(self, index: int, key: float) -> None:
        self._state = _without(self._state, complex(key, index))

    def replace(self, index: int, old_key: float, new_key: float) -> None:
        if old_key != new_key:
            old, new = complex(old_key, index), complex(new_key, index)
            state = self._state
            self._state = _moved(state, old, new) or _with(_without(state, old), new)

    def kth(self, k: int) -> int:
        """Index of the level at 0-based position ``k``."""
        blocks, _, ends = self._state
        if not 0 <= k < len(self):
            raise IndexError(f"position {k} out of range for {len(self)} entries")
        b = int(np.searchsorted(ends, k, side="right"))
        start = int(ends[b - 1]) if b else 0
        return int(blocks[b][k - start].imag)

    def count_tied_first(self) -> int:
        """Number of levels whose key equals the best key."""
        blocks, lasts, ends = self._state
        if not blocks:
            raise IndexError("no entries")
        probe = complex(blocks[0][0].real, math.inf)
        b = int(np.searchsorted(lasts, probe, side="right"))
        if b == len(blocks):
            return int(ends[-1])
        return (int(ends[b - 1]) if b else 0) + int(np.searchsorted(blocks[b], probe, side="right"))

    def rebuild(self, indices: npt.NDArray[np.int64], keys: npt.NDArray[Any]) -> None:
        values = np.empty(len(indices), dtype=np.complex128)
        values.real = keys
        values.imag = indices
        values.sort()
        blocks = [values[i : i + _BLOCK] for i in range(0, values.size, _BLOCK)]
        lasts = np.array([block[-1] for block in blocks], dtype=np.complex128)
        ends = np.cumsum([block.size for block in blocks], dtype=np.int64)
        self._state = _Blocks(blocks, lasts, ends)

    def entries(self) -> list[tuple[float, int]]:
        """All ``(key, index)`` pairs in order (for tests and debugging)."""
        return [(v.real, int(v.imag)) for block in self._state.blocks for v in block.tolist()]
