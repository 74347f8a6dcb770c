"""``OrderedKeys``: the blocked ordering behind rank/max/eps_greedy sampling, and its interrupt safety."""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

import numpy as np
import pytest

from plr_gym import _structures
from plr_gym._structures import OrderedKeys


@pytest.fixture
def tiny_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks of 2 entries (split above 4), so that small tests cross, split and drop blocks."""
    monkeypatch.setattr(_structures, "_BLOCK", 2)


def check_invariants(keys: OrderedKeys, expected: list[tuple[float, int]]) -> None:
    """The structure is internally consistent and holds exactly ``expected`` (sorted)."""
    blocks, lasts, ends = keys._state
    assert all(block.size for block in blocks)
    assert lasts.tolist() == [block[-1] for block in blocks]
    assert ends.tolist() == np.cumsum([block.size for block in blocks]).tolist()
    assert keys.entries() == sorted(expected)
    assert len(keys) == len(expected)
    order = [i for _, i in sorted(expected)]
    assert [keys.kth(k) for k in range(len(expected))] == order
    if expected:
        best = min(expected)[0]
        assert keys.count_tied_first() == sum(1 for k, _ in expected if k == best)


def test_random_operations_match_a_sorted_list(tiny_blocks: None) -> None:
    rng = np.random.default_rng(0)
    keys = OrderedKeys()
    current: dict[int, float] = {}
    ops = {"add": 0, "remove": 0, "replace": 0}
    for step in range(600):
        op = rng.choice(["add", "remove", "replace"], p=[0.4, 0.2, 0.4])
        if step % 150 == 0:  # a rebuild from arrays now and then
            indices = np.array(sorted(current), dtype=np.int64)
            keys.rebuild(indices, np.array([current[i] for i in indices.tolist()], dtype=np.float64))
        elif op == "add" or not current:
            i = int(rng.integers(1000))
            if i in current:
                continue
            current[i] = float(rng.integers(-3, 4))  # few distinct keys: many ties, across blocks
            keys.add(i, current[i])
            ops["add"] += 1
        elif op == "remove":
            i = int(rng.choice(sorted(current)))
            keys.remove(i, current.pop(i))
            ops["remove"] += 1
        else:
            i = int(rng.choice(sorted(current)))
            new = float(rng.integers(-3, 4))
            keys.replace(i, current[i], new)
            current[i] = new
            ops["replace"] += 1
        check_invariants(keys, [(k, i) for i, k in current.items()])
    assert len(keys._state.blocks) > 3 and min(ops.values()) > 50


def test_remove_absent_entry_raises() -> None:
    keys = OrderedKeys()
    keys.add(3, -0.5)
    with pytest.raises(ValueError, match=r"no entry \(key=-0.25, index=3\)"):
        keys.remove(3, -0.25)
    with pytest.raises(ValueError, match="no entry"):
        keys.replace(4, -0.5, -0.1)
    check_invariants(keys, [(-0.5, 3)])
    with pytest.raises(IndexError):
        keys.kth(1)


def interrupt_at(n_lines: int, call: Callable[[], Any]) -> bool:
    """Run ``call`` and raise ``KeyboardInterrupt`` before the ``n_lines``-th line it executes in
    ``plr_gym._structures`` (i.e. between two statements); ``True`` if the interrupt happened."""
    count = 0

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal count
        if event == "line":
            count += 1
            if count == n_lines:
                raise KeyboardInterrupt
        return local

    def global_(frame: FrameType, event: str, arg: Any) -> Any:
        return local if frame.f_code.co_filename == _structures.__file__ else None

    sys.settrace(global_)
    try:
        call()
    except KeyboardInterrupt:
        return True
    finally:
        sys.settrace(None)
    return False


@pytest.mark.parametrize(
    ("index", "old", "new", "full_last_block"),
    [
        (5, 2.0, 2.5, False),  # within one block (the one-pass path)
        (0, 0.0, 9.0, False),  # from the first block to the last
        (9, 4.0, -1.0, False),  # from the last block to the first
        (0, 0.0, 9.0, True),  # into a full block: remove, insert and split
        (1, 0.0, 9.0, True),  # ... and the emptied first block is dropped
    ],
)
def test_interrupted_replace_leaves_old_or_new_ordering(
    tiny_blocks: None, index: int, old: float, new: float, full_last_block: bool
) -> None:
    """issue 12: a KeyboardInterrupt between any two statements of replace() leaves a consistent ordering."""
    base = {i: float(i // 2) for i in range(10)}  # blocks of two tied levels: keys 0, 1, 2, 3, 4
    if full_last_block:
        base.update({10: 4.0, 11: 4.0})
    before = [(k, i) for i, k in base.items()]
    after = [(new if i == index else k, i) for i, k in base.items()]
    outcomes = set()
    n_lines = 1
    while True:
        keys = OrderedKeys()
        keys.rebuild(np.arange(10), np.array([base[i] for i in range(10)]))
        if full_last_block:
            keys.add(10, 4.0)
            keys.add(11, 4.0)  # the last block now holds 4 entries, the most before a split
        if index == 1:
            keys.remove(0, 0.0)
            before.remove((0.0, 0))
            after.remove((0.0, 0))
            base.pop(0)
        interrupted = interrupt_at(n_lines, lambda keys=keys: keys.replace(index, old, new))
        entries = keys.entries()
        assert entries in (sorted(before), sorted(after))
        check_invariants(keys, before if entries == sorted(before) else after)
        outcomes.add(entries == sorted(after))
        if index == 1:
            base[0] = 0.0
            before.append((0.0, 0))
            after.append((0.0, 0))
        if not interrupted:
            break
        n_lines += 1
    assert n_lines > 10 and outcomes == {False, True}  # interrupted at every statement, then completed


@pytest.mark.parametrize("op", ["add", "remove"])
def test_interrupted_add_or_remove_leaves_old_or_new_ordering(tiny_blocks: None, op: str) -> None:
    n_lines = 1
    while True:
        keys = OrderedKeys()
        keys.rebuild(np.arange(4), np.array([0.0, 1.0, 1.0, 2.0]))  # blocks [0, 1], [1, 2]
        before = [(0.0, 0), (1.0, 1), (1.0, 2), (2.0, 3)]
        if op == "add":
            after = [*before, (1.0, 7)]
            interrupted = interrupt_at(n_lines, lambda keys=keys: keys.add(7, 1.0))
        else:
            after = [e for e in before if e != (1.0, 2)]
            interrupted = interrupt_at(n_lines, lambda keys=keys: keys.remove(2, 1.0))
        entries = keys.entries()
        assert entries in (sorted(before), sorted(after))
        check_invariants(keys, before if entries == sorted(before) else after)
        if not interrupted:
            break
        n_lines += 1
    assert n_lines > 5
