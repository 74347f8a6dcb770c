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


# ---------------------------------------------------------------------------------- D13: silent accepts
@pytest.mark.parametrize("name", ["temperature", "temperature_end", "staleness_temperature"])
def test_d13_a_subnormal_temperature_is_refused(name: str) -> None:
    from plr_gym import LevelBuffer, LevelSampler

    with pytest.raises(ValueError, match=rf"{name} must be at least 2\.225e-308 \(1/{name} must be finite\)"):
        LevelSampler(range(4), **{name: 1e-320})
    LevelSampler(range(4), **{name: 1e-300})  # small, but 1/x is finite: accepted
    with pytest.raises(ValueError, match="temperature must be at least"):
        LevelBuffer(4, temperature=5e-324)


def test_d13_a_subnormal_evidence_half_life_is_refused() -> None:
    with pytest.raises(ValueError, match="evidence_half_life must be at least"):
        PromptCurriculum(4, evidence_half_life=1e-320)


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        (
            {"prefetch_seconds": float("inf")},
            r"prefetch_seconds must be a number of seconds >= 0 \(and finite\)",
        ),
        ({"prefetch": 10**12}, r"prefetch must be an int in \[0, 4096\]"),
        ({"min_refill": 10**12}, r"min_refill must be an int in \[0, 4096\]"),
    ],
)
def test_d13_the_remote_source_refuses_refills_it_could_not_size(kw: dict[str, Any], message: str) -> None:
    pytest.importorskip("ray")
    from plr_gym.distributed import RemoteLevelSource

    with pytest.raises(ValueError, match=message):
        RemoteLevelSource("x", **kw)
    RemoteLevelSource("x", prefetch_seconds=1e6, prefetch=4096, min_refill=4096)  # the bounds themselves


def test_d13_a_huge_rate_times_prefetch_seconds_caps_the_queue_instead_of_overflowing() -> None:
    pytest.importorskip("ray")
    from plr_gym.distributed import RemoteLevelSource
    from plr_gym.distributed.options import _MAX_AHEAD

    source = RemoteLevelSource("x", prefetch_seconds=1e300)
    source._rate = 1e10  # levels/s measured: rate x prefetch_seconds overflows to inf
    source._n_envs = 1
    assert source._target() == _MAX_AHEAD


def test_d13_the_actor_refuses_float_env_indices_and_draws_beyond_memory() -> None:
    pytest.importorskip("ray")
    from plr_gym import LevelSampler
    from plr_gym.distributed.actor import LevelSourceActor

    actor = LevelSourceActor(LevelSampler(range(5), seed=0))
    before = actor.source.state_dict()
    with pytest.raises(TypeError, match="envs must be a 1-D array of int env indices"):
        actor.plan([1.5])
    with pytest.raises(ValueError, match=r"n=1000000000000000 is too large"):
        actor.draw(10**15)
    assert ro.same(actor.source.state_dict(), before)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ({"next_serial": 2.7}, "'next_serial' must be an int >= 0"),
        ({"next_serial": True}, "'next_serial' must be an int >= 0"),
        ({"groups_without_outcome": -1}, "'groups_without_outcome' must be an int >= 0"),
        ({"outcomes": [[5, 0, [1.0]]]}, r"outcome draw 5 must be a distinct int in \[0, next_serial=3\)"),
        ({"outcomes": [[0, 0, [1.0]], [0, 1, [1.0]]]}, "outcome draw 0 must be a distinct int"),
        ({"outcomes": [[0, 99, [1.0]]]}, r"outcome prompt 99 must be an int in \[0, 12\)"),
        ({"outcomes": [[0, 1, [float("nan")]]]}, "outcome rewards must be finite"),
        ({"outcomes": [[0, 1, []]]}, "outcome rewards must be finite numbers, one per completion"),
        ({"outcomes": "x"}, "'outcomes' must be a list"),
    ],
)
def test_d13_the_verl_ledger_refuses_a_crafted_state_and_changes_nothing(
    edit: dict[str, Any], message: str
) -> None:
    pytest.importorskip("verl")
    from plr_gym.verl import _DrawLedger

    ledger = _DrawLedger(_curriculum(2))
    ledger.draw(3)
    (p0, s0) = ledger.take()
    ledger.record(s0, p0, [1.0, 0.0])
    state = ledger.state_dict()
    live = _DrawLedger(_curriculum(2))
    live.draw(2)
    before = (list(live.ready), dict(live.outstanding), live.next_serial, repr(live.outcomes))
    with pytest.raises(ValueError, match=message):
        live.load_state_dict({**state, **edit})
    assert (list(live.ready), dict(live.outstanding), live.next_serial, repr(live.outcomes)) == before
    live.load_state_dict(state)
    assert live.next_serial == 3 and sorted(live.outcomes) == [s0]


def test_d13_num_prompts_beyond_memory_names_num_prompts() -> None:
    with pytest.raises(ValueError, match=r"^num_prompts=1000000000000000 is too large"):
        PromptCurriculum(10**15)


# ---------------------------------------------------------------------------------- M4: eval.csv
FIELDS = ("timesteps", "split", "mean")


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (Linux)")
def test_m4_a_full_disk_during_an_eval_csv_append_leaves_the_file_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import contextlib

    import plr_gym._eval_csv as eval_csv

    log = tmp_path / "eval.csv"
    eval_csv.append_rows(log, [{"timesteps": 128, "split": "test", "mean": 0.5}], FIELDS)
    before = log.read_bytes()

    @contextlib.contextmanager
    def full(path: Any) -> Any:  # the kernel's "No space left on device" on the flush
        with open("/dev/full", "wb") as f:
            yield f
            f.flush()

    monkeypatch.setattr(eval_csv, "atomic_open", full)
    with pytest.raises(OSError, match="No space left on device"):
        eval_csv.append_rows(log, [{"timesteps": 256, "split": "test", "mean": 0.75}] * 200, FIELDS)
    assert log.read_bytes() == before  # whole rows only, as before the append
    assert eval_csv.read_rows(log) == [{"timesteps": "128", "split": "test", "mean": "0.5"}]


def test_m4_a_torn_last_row_is_ignored_with_a_warning_by_every_reader(tmp_path: Path) -> None:
    from plr_gym._eval_csv import append_rows, read_rows
    from plr_gym.evaluation import EVAL_CSV_FIELDS
    from plr_gym.plotting import load_run

    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"sampler": "uniform"}))
    log = run / "eval.csv"
    rows = [{**dict.fromkeys(EVAL_CSV_FIELDS, 0.5), "timesteps": t, "split": "test"} for t in (128, 256)]
    append_rows(log, rows, EVAL_CSV_FIELDS)
    log.write_bytes(log.read_bytes() + b"384,te")  # what an older plr-gym left on a full disk
    with pytest.warns(RuntimeWarning, match=r"eval\.csv: its last row is torn"):
        assert [r["timesteps"] for r in read_rows(log)] == ["128", "256"]
    with pytest.warns(RuntimeWarning, match="torn"):
        curve = load_run(run).split("test")
    assert curve["timesteps"].tolist() == [128.0, 256.0]
    with pytest.warns(RuntimeWarning, match="torn"):  # the next append drops the torn tail first
        append_rows(log, [{**rows[0], "timesteps": 384}], EVAL_CSV_FIELDS)
    assert [r["timesteps"] for r in read_rows(log)] == ["128", "256", "384"]


# ---------------------------------------------------------------------------------- D12: nested spaces
def test_d12_a_nested_dict_observation_space_is_a_clear_type_error() -> None:
    from gymnasium import spaces

    from plr_gym import PrioritizedReplayBuffer
    from plr_gym.replay import PrioritizedDictReplayBuffer

    nested = spaces.Dict({"a": spaces.Dict({"b": spaces.Box(0, 1, (2,))}), "c": spaces.Box(0, 1, (3,))})
    with pytest.raises(TypeError, match=r"^observation_space: .* flat Dict of Box, .*got a Dict under 'a'"):
        PrioritizedDictReplayBuffer(8, nested, spaces.Discrete(2), device="cpu")
    with pytest.raises(TypeError, match=r"^observation_space must be a Box, .* got Tuple"):
        PrioritizedReplayBuffer(8, spaces.Tuple((spaces.Discrete(2),)), spaces.Discrete(2), device="cpu")
    flat = spaces.Dict({"b": spaces.Box(0, 1, (2,)), "c": spaces.MultiBinary(3)})
    assert PrioritizedDictReplayBuffer(8, flat, spaces.Discrete(2), device="cpu").buffer_size == 8
