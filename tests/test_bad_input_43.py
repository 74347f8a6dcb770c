"""Issue 43's findings ("nothing lost, round 4"): each test failed before its fix (the finding it is named
after). The run directory's findings (M1, M2, N3) are in tests/test_run_directory.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import reliability_objects as ro
from plr_gym.prompts import PromptCurriculum


# ---------------------------------------------------------------------------------- M5/M6: prompt files
def _curriculum(rounds: int) -> PromptCurriculum:
    cur = PromptCurriculum(12, seed=0)
    rng = np.random.default_rng(1)
    for _ in range(rounds):
        ids = np.repeat(cur.next_prompts(3), 4)
        cur.observe(ids, rng.random(ids.size) < 0.5)
    return cur


def _with_meta(src: Path, dst: Path, edit: Any) -> None:
    """``src`` with its JSON ``meta`` member edited by ``edit`` (a crafted file, every array intact)."""
    from plr_gym.checkpoint import load_npz, save_npz

    arrays = load_npz(src)
    meta = json.loads(str(arrays["meta"]))
    edit(meta)
    save_npz(dst, {**arrays, "meta": np.array(json.dumps(meta))})


@pytest.mark.parametrize("extra", [[1, 2], "ab", 3, True], ids=["list", "str", "int", "bool"])
def test_m5_a_bad_extra_is_refused_before_the_state_is_replaced(tmp_path: Path, extra: Any) -> None:
    good = tmp_path / "good.npz"
    _curriculum(5).save(good, extra={"step": 7})
    crafted = tmp_path / "crafted.npz"
    _with_meta(good, crafted, lambda meta: meta.__setitem__("extra", extra))
    live = _curriculum(2)
    before = live.state_dict()
    with pytest.raises(ValueError, match=r"crafted\.npz is not a PromptCurriculum checkpoint: its 'extra'"):
        live.load_from(crafted)
    assert ro.same(live.state_dict(), before)
    assert live.load_from(good) == {"step": 7}  # the intact file still loads
    assert ro.same(live.state_dict(), _curriculum(5).state_dict())


def test_m5_a_refused_state_names_the_file_and_changes_nothing(tmp_path: Path) -> None:
    good = tmp_path / "good.npz"
    _curriculum(5).save(good)
    crafted = tmp_path / "crafted.npz"
    _with_meta(good, crafted, lambda meta: meta["state"].__setitem__("num_batches", -1))
    live = _curriculum(2)
    before = live.state_dict()
    with pytest.raises(ValueError, match=r"crafted\.npz: state 'num_batches' must be a non-negative int"):
        live.load_from(crafted)
    assert ro.same(live.state_dict(), before)


def test_m6_every_bit_flip_in_an_npy_header_is_a_value_error_naming_the_file(tmp_path: Path) -> None:
    good = tmp_path / "good.npz"
    _curriculum(5).save(good)
    data = good.read_bytes()
    start = data.find(b"\x93NUMPY")  # the first member's .npy header (TokenError/SyntaxError before the fix)
    live = _curriculum(2)
    before = live.state_dict()
    path = tmp_path / "flipped.npz"
    for bit in range(start * 8, (start + 128) * 8):
        flipped = bytearray(data)
        flipped[bit // 8] ^= 1 << (bit % 8)
        path.write_bytes(bytes(flipped))
        with pytest.raises(ValueError, match=r"flipped\.npz"):
            live.load_from(path)
        assert ro.same(live.state_dict(), before), f"bit {bit}: a refused load changed the curriculum"
