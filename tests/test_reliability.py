"""Nothing lost, nothing wrong: atomic saves, all-or-nothing loads and updates, scores on the right quantity.

- Every checkpoint writer is made to fail part-way in a subprocess (a file-size limit, and SIGKILL in the
  middle of writing); the previous checkpoint must load afterwards, unchanged.
- Every loader gets crafted files; each is refused with ``ValueError`` and the live object is unchanged.
- Updates: the half-stored PER add, interrupted sampler and buffer updates, the retryable report_rollout.
- Scores: the PLRCallback bootstrap value, max_mc's raw episodic return, the Gymnasium wrapper's
  truncation bootstrap and EpisodeScorer's ``partial_episodes="commit"``, each against a hand computation.
"""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import reliability_objects as ro
from conftest import run_cli
from plr_gym import LevelBuffer, LevelSampler, LevelWrapper, PLRCallback
from plr_gym._levels import save_values
from plr_gym.checkpoint import CURRENT_LINK, load_npz, save_npz
from plr_gym.scoring import EpisodeScorer

TESTS = Path(__file__).resolve().parent
SRC = TESTS.parent / "src"

# The child saves every writer's "old" checkpoint (5 rounds), then for each writer forks a process that
# saves the "new" state (9 rounds) while failing part-way: under RLIMIT_FSIZE (the write raises EFBIG),
# or killed with SIGKILL at the k-th array written (inside the archive; for the callback, inside the
# second file), or killed just after the callback's generation switch (before old generations are
# removed: then the *new* checkpoint must be the one that loads).
CHILD = r"""
import json, os, resource, signal, sys
from pathlib import Path
import numpy.lib.format as npformat
import reliability_objects as ro

out = Path(sys.argv[1])
report = {}
for kind in ro.KINDS:
    ro.save(kind, ro.build(kind, 5), out / ro.FILES[kind])
newer = {kind: ro.build(kind, 9) for kind in ro.KINDS}

def attempt(kind, mode):
    pid = os.fork()
    if pid == 0:
        try:
            if mode == "fsize":
                signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
                resource.setrlimit(resource.RLIMIT_FSIZE, (256, resource.RLIM_INFINITY))
            elif mode == "kill_after_switch":
                import shutil
                shutil.rmtree = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)
            else:
                calls = [0]
                limit = 7 if kind == "callback" else 2
                original = npformat.write_array
                def write_array(*args, **kwargs):
                    calls[0] += 1
                    if calls[0] == limit:
                        os.kill(os.getpid(), signal.SIGKILL)
                    return original(*args, **kwargs)
                npformat.write_array = write_array
            ro.save(kind, newer[kind], out / ro.FILES[kind])
        except OSError:
            os._exit(3)  # the save failed, as it should under the file-size limit
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)

for kind in ro.KINDS:
    report[kind] = {"fsize": attempt(kind, "fsize"), "kill": attempt(kind, "kill")}
report["callback"]["kill_after_switch"] = attempt("callback", "kill_after_switch")
print(json.dumps(report))
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork and POSIX resource limits")
def test_failed_saves_keep_the_previous_checkpoint(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), str(TESTS)]), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path)], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    for kind in ro.KINDS:
        # the file-size limit made the save raise OSError (exit 3); SIGKILL killed it (-9)
        assert report[kind] == {"fsize": 3, "kill": -signal.SIGKILL, **report[kind]}, (kind, report[kind])
    assert report["callback"]["kill_after_switch"] == -signal.SIGKILL
    for kind in ro.KINDS:
        if kind == "callback":
            continue
        path = tmp_path / ro.FILES[kind]
        assert ro.same(ro.saved_state(kind, path), ro.live_state(kind, ro.build(kind, 5))), kind
    # the callback's last save was killed after switching to the new generation: the new one loads,
    # complete, and no file of the old one is mixed in
    ckpt = tmp_path / "plr"
    assert ro.same(ro.saved_state("callback", ckpt), ro.live_state("callback", ro.build("callback", 9)))
    # leftovers of the failed saves are hidden files only, and the next save cleans the generations up
    visible = sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("."))
    assert visible == sorted(ro.FILES.values())
    ro.save("callback", ro.build("callback", 7), ckpt)
    gens = [p.name for p in ckpt.iterdir() if p.name.startswith(".plr-gen-")]
    assert len(gens) == 1 and os.readlink(ckpt / CURRENT_LINK) == gens[0]
    assert ro.same(ro.saved_state("callback", ckpt), ro.live_state("callback", ro.build("callback", 7)))


def test_single_file_writers_leave_no_temporary_file_when_they_fail(tmp_path: Path) -> None:
    sampler = ro.make_sampler(5)
    sampler.save(tmp_path / "s.npz")
    before = (tmp_path / "s.npz").read_bytes()

    class Boom(Exception):
        pass

    def fail(*args: Any, **kwargs: Any) -> None:
        raise Boom

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(np.lib.format, "write_array", fail)
        with pytest.raises(Boom):
            ro.make_sampler(9).save(tmp_path / "s.npz")
    assert sorted(os.listdir(tmp_path)) == ["s.npz"]
    assert (tmp_path / "s.npz").read_bytes() == before


def test_per_save_writes_exactly_the_given_path(tmp_path: Path) -> None:
    ro.make_per(3).save(tmp_path / "buffer")
    assert os.listdir(tmp_path) == ["buffer"]
    loaded = ro.make_per(0)
    loaded.load(tmp_path / "buffer")
    assert ro.same(ro.per_state(loaded), ro.per_state(ro.make_per(3)))


# --------------------------------------------------------------------------------------------------
# crafted checkpoints: refused, live object unchanged
# --------------------------------------------------------------------------------------------------
def _sampler_file(path: Path, **changes: Any) -> Path:
    state = ro.make_sampler(30).state_dict()
    arrays = {k: state.pop(k) for k in ("levels", "scores", "last_sampled", "order")}
    for k, v in changes.items():
        if k in arrays:
            arrays[k] = v
        else:
            state[k] = v
    save_npz(path, {"meta": np.array(json.dumps(state)), **arrays})
    return path


SAMPLER_CASES = {
    "num_seen beyond the levels": {"num_seen": 25},
    "negative num_seen": {"num_seen": -1},
    "num_seen not an int": {"num_seen": "3"},
    "negative num_samples": {"num_samples": -4},
    "last_sampled after num_samples": {"last_sampled": np.full(20, 10**6)},
    "NaN score": {"scores": np.r_[np.nan, np.zeros(19)]},
    "scores of the wrong length": {"scores": np.zeros(19)},
    "order not a permutation": {"order": np.zeros(20, dtype=np.int64)},
    "replays beyond samples": {"num_replay": 10**6},
    "next_index out of range": {"next_index": 20},
    "softmax_shift not finite": {"softmax_shift": None},
    "RNG state of another generator": {"rng": {"bit_generator": "MT19937", "state": {"key": [1], "pos": 3}}},
    "RNG state malformed": {"rng": {"bit_generator": "PCG64", "state": "x"}},
    "RNG not a dict": {"rng": 5},
    "other levels": {"levels": np.arange(1, 21)},
    "other configuration": {"config": {**ro.make_sampler(0)._config(), "temperature": 0.3}},
    "missing member": {"version": 1, "num_explore": None},
}


@pytest.mark.parametrize("case", sorted(SAMPLER_CASES))
def test_sampler_refuses_crafted_checkpoints_and_stays_unchanged(tmp_path: Path, case: str) -> None:
    path = _sampler_file(tmp_path / "s.npz", **SAMPLER_CASES[case])
    live = ro.make_sampler(12)
    before = copy.deepcopy(live.state_dict())
    with pytest.raises(ValueError):
        live.load_from(path)
    assert ro.same(live.state_dict(), before)
    twin = ro.make_sampler(12)
    assert live.sample(30).tolist() == twin.sample(30).tolist()  # the structures are intact too
    if case not in ("other levels", "other configuration"):  # those are valid files of another sampler
        with pytest.raises(ValueError):
            LevelSampler.load(path)


def test_sampler_refuses_files_that_are_not_checkpoints(tmp_path: Path) -> None:
    live = ro.make_sampler(12)
    before = copy.deepcopy(live.state_dict())
    good = tmp_path / "good.npz"
    live.save(good)
    (tmp_path / "truncated.npz").write_bytes(good.read_bytes()[:200])
    (tmp_path / "text.npz").write_text("hello")
    np.savez(tmp_path / "pickled.npz", meta=np.array([{"a": 1}], dtype=object))
    save_npz(tmp_path / "list_meta.npz", {"meta": np.array("[1, 2]")})
    for name in ("truncated.npz", "text.npz", "pickled.npz", "list_meta.npz"):
        with pytest.raises(ValueError):
            live.load_from(tmp_path / name)
    assert ro.same(live.state_dict(), before)


def _level_buffer_state(**changes: Any) -> dict[str, Any]:
    state = ro.make_level_buffer(9).state_dict()
    state.update(changes)
    return state


LEVEL_BUFFER_CASES = {
    "bad RNG after valid data": {"rng": {"bit_generator": "PCG64", "state": {"state": "x", "inc": 1}}},
    "NaN score": {"scores": np.array([np.nan, 1.0, 2.0, 3.0])},
    "timestamp after count": {"timestamps": np.array([1, 2, 3, 10**6])},
    "negative count": {"count": -1},
    "lengths differ": {"extras": [{}]},
    "more levels than capacity": {
        "levels": list(range(5)),
        "extras": [{}] * 5,
        "scores": np.zeros(5),
        "timestamps": np.zeros(5, dtype=np.int64),
    },
    "extras not dicts": {"extras": [1, 2, 3, 4]},
    "other configuration": {"config": {**ro.make_level_buffer(0)._config(), "capacity": 8}},
    "missing member": {"count": None},
}


@pytest.mark.parametrize("case", sorted(LEVEL_BUFFER_CASES))
def test_level_buffer_refuses_crafted_states_and_stays_unchanged(case: str) -> None:
    state = _level_buffer_state(**LEVEL_BUFFER_CASES[case])
    if state["count"] is None:
        del state["count"]
    live = ro.make_level_buffer(6)
    before = copy.deepcopy(live.state_dict())
    with pytest.raises(ValueError):
        live.load_state_dict(state)
    assert ro.same(live.state_dict(), before)
    twin = ro.make_level_buffer(6)
    assert [live.sample_replay_level()[0] for _ in range(10)] == [
        twin.sample_replay_level()[0] for _ in range(10)
    ]


def test_level_buffer_file_with_bad_rng_is_refused_before_anything_changes(tmp_path: Path) -> None:
    ro.make_level_buffer(9).save(tmp_path / "b.npz")
    npz = load_npz(tmp_path / "b.npz")
    meta = json.loads(str(npz["meta"]))
    meta["rng"]["state"]["state"] = "not a number"
    save_npz(tmp_path / "b.npz", {**npz, "meta": np.array(json.dumps(meta))})
    live = ro.make_level_buffer(6)
    before = copy.deepcopy(live.state_dict())
    with pytest.raises(ValueError, match="rng"):
        live.load_from(tmp_path / "b.npz")
    assert ro.same(live.state_dict(), before)


SCORER_CASES = {
    "other n_envs": {"n_envs": 3},
    "env out of range": {
        "open": [{"env": 5, "level": 1, "rewards": [1.0], "values": [0.0], "next_values": [0.0]}]
    },
    "ragged step arrays": {
        "open": [{"env": 0, "level": 1, "rewards": [1.0, 2.0], "values": [0.0], "next_values": [0.0]}]
    },
    "NaN in an open episode": {
        "open": [{"env": 0, "level": 1, "rewards": [np.nan], "values": [0.0], "next_values": [0.0]}]
    },
    "two open episodes for one env": {
        "open": [{"env": 0, "level": 1, "rewards": [1.0], "values": [0.0], "next_values": [0.0]}] * 2
    },
    "infinite max return": {"max_returns": [[3, float("inf")]]},
    "negative counter": {"num_scored": -2},
    "not a state": {"n_envs": None},
}


@pytest.mark.parametrize("case", sorted(SCORER_CASES))
def test_scorer_refuses_crafted_states_and_stays_unchanged(tmp_path: Path, case: str) -> None:
    state = ro.make_scorer(4).state_dict()
    state.update(SCORER_CASES[case])
    if state["n_envs"] is None:
        del state["n_envs"]
    live = ro.make_scorer(3)
    before = copy.deepcopy(live.state_dict())
    with pytest.raises(ValueError):
        live.load_state_dict(state)
    assert ro.same(live.state_dict(), before)
    try:
        save_values(tmp_path / "s.npz", state)
    except TypeError:  # not storable: the in-memory check above is the one that matters
        return
    with pytest.raises(ValueError):
        live.load(tmp_path / "s.npz")
    assert ro.same(live.state_dict(), before)


@pytest.mark.parametrize(
    "state",
    [
        {"rng": {"bit_generator": "PCG64", "state": None}, "children": []},
        {"rng": np.random.default_rng(0).bit_generator.state, "children": [None]},
        {"rng": np.random.default_rng(0).bit_generator.state, "children": "abc"},
        {"children": []},
    ],
)
def test_rollout_plan_refuses_crafted_states_and_stays_unchanged(
    tmp_path: Path, state: dict[str, Any]
) -> None:
    live = ro.make_plan(3)
    before = copy.deepcopy(live.state_dict())
    with pytest.raises(ValueError):
        live.load_state_dict({"buffer": live.buffer.state_dict(), "plan": state})
    assert ro.same(live.state_dict(), before)
    save_values(tmp_path / "p.npz", state)
    with pytest.raises(ValueError):  # the checkpoint file of the generator state
        live.checkpoint_files()["plr_generator.npz"][1](tmp_path / "p.npz")
    assert ro.same(live.state_dict(), before)


PER_CASES = {
    # the tree (leaves) is read after the data arrays: before the fix the data was already copied in
    "negative leaf": {"leaves": lambda d: np.r_[-1.0, d["leaves"][1:]]},
    "NaN priority": {"priorities": lambda d: np.r_[np.nan, d["priorities"][1:]]},
    "pos out of range": {"pos": lambda d: np.array(16)},
    "negative pos": {"pos": lambda d: np.array(-1)},
    "priority beyond the stored data": {"priorities": lambda d: np.r_[d["priorities"][:-1], 2.0]},
    "max_priority below a priority": {
        "max_priority": lambda d: np.array(1.0),
        "priorities": lambda d: d["priorities"] * 100,
    },
    "observations of another shape": {"observations": lambda d: d["observations"][:, :, :2]},
    "levels below -1": {"levels": lambda d: d["levels"] - 100},
    "rank counters negative": {"rank_counters": lambda d: np.array([-1, 0])},
    "RNG malformed": {"rng_state": lambda d: np.array(json.dumps({"bit_generator": "PCG64", "state": 1}))},
    "other settings": {
        "config": lambda d: np.array(json.dumps({**json.loads(str(d["config"])), "alpha": 0.1}))
    },
    "data missing": {"rewards": None},
}


@pytest.mark.parametrize("case", sorted(PER_CASES))
def test_per_buffer_refuses_crafted_files_and_stays_unchanged(tmp_path: Path, case: str) -> None:
    ro.make_per(6).save(tmp_path / "b.npz")
    data = load_npz(tmp_path / "b.npz")
    for key, change in PER_CASES[case].items():
        if change is None:
            del data[key]
        else:
            data[key] = change(data)
    save_npz(tmp_path / "b.npz", data)
    live = ro.make_per(3)
    before = ro.per_state(live)
    with pytest.raises(ValueError):
        live.load(tmp_path / "b.npz")
    assert ro.same(ro.per_state(live), before)


def test_callback_resume_with_other_n_envs_restores_nothing(tmp_path: Path) -> None:
    """The sampler file is fine, the scorer's n_envs differs: before the fix the sampler was restored."""
    ro.make_callback(9, n_envs=3).save(tmp_path / "plr")
    live = ro.make_callback(4, n_envs=2)
    before = ro.live_state("callback", live)
    with pytest.raises(ValueError, match="n_envs"):
        live.load(tmp_path / "plr")
    assert ro.same(ro.live_state("callback", live), before)


def test_callback_refuses_a_checkpoint_with_a_missing_file(tmp_path: Path) -> None:
    ro.make_callback(9).save(tmp_path / "plr")
    os.unlink(tmp_path / "plr" / os.readlink(tmp_path / "plr" / CURRENT_LINK) / "plr_sampler.npz")
    live = ro.make_callback(4)
    before = ro.live_state("callback", live)
    with pytest.raises(FileNotFoundError):
        live.load(tmp_path / "plr")
    assert ro.same(ro.live_state("callback", live), before)


def test_callback_reads_a_plain_directory_of_an_older_version(tmp_path: Path) -> None:
    saved = ro.make_callback(9)
    (tmp_path / "old").mkdir()
    saved.wrapper.sampler.save(tmp_path / "old" / "plr_sampler.npz")
    saved.scorer.save(tmp_path / "old" / "plr_scorer.npz")
    live = ro.make_callback(2)
    live.load(tmp_path / "old")
    assert ro.same(ro.live_state("callback", live), ro.live_state("callback", saved))


# --------------------------------------------------------------------------------------------------
# all-or-nothing updates
# --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("level", [None, {"walls": [1, 0]}, "level-7", 2.5])
def test_per_add_with_a_non_int_level_stores_a_whole_step_as_unknown(level: Any) -> None:
    buf = ro.make_per(2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        obs = np.ones((2, 3), dtype=np.float32)
        buf.add(obs, obs, np.zeros((2, 1)), np.ones(2), np.zeros(2), [{"level": level}, {"level": 4}])
    assert buf.pos == 3
    assert buf.levels[2].tolist() == [-1, 4]
    assert buf.priorities[2].tolist() == [buf.max_priority] * 2  # not a half-stored row with priority 0


def test_per_add_refuses_a_level_id_beyond_int64_before_storing_anything() -> None:
    buf = ro.make_per(2)
    before = ro.per_state(buf)
    obs = np.ones((2, 3), dtype=np.float32)
    with pytest.raises(ValueError, match=r'infos\[1\]\["level"\]'):
        buf.add(obs, obs, np.zeros((2, 1)), np.ones(2), np.zeros(2), [{"level": 1}, {"level": 2**63}])
    assert ro.same(ro.per_state(buf), before)


def test_interrupted_sampler_update_is_undone() -> None:
    for transform in ("rank", "power", "softmax"):
        live = LevelSampler(levels=range(8), score_transform=transform, seed=3)
        twin = LevelSampler(levels=range(8), score_transform=transform, seed=3)
        for s in (live, twin):
            for lvl in range(5):
                s.update(lvl, 0.1 * lvl + 0.05)
        before = copy.deepcopy(live.state_dict())
        structure = live._score_keys if live._score_keys is not None else live._score_tree

        def interrupt(*args: Any, **kwargs: Any) -> None:
            raise KeyboardInterrupt

        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(structure, "add" if transform == "rank" else "set", interrupt)
            with pytest.raises(KeyboardInterrupt):
                live.update(6, 0.9)  # a new level: marks it seen, then inserts it
        assert ro.same(live.state_dict(), before), transform
        assert live.sample(40).tolist() == twin.sample(40).tolist(), transform


def test_interrupted_level_buffer_eviction_is_undone() -> None:
    live, twin = ro.make_level_buffer(9), ro.make_level_buffer(9)
    before = copy.deepcopy(live.state_dict())

    def interrupt(*args: Any, **kwargs: Any) -> None:
        raise KeyboardInterrupt

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(live._order, "add", interrupt)  # after the evicted level was removed
        with pytest.raises(KeyboardInterrupt):
            assert live.insert("new", score=100.0) >= 0
    assert ro.same(live.state_dict(), before)
    assert live.find("new") == -1
    assert live.insert("new", 100.0) == twin.insert("new", 100.0)
    assert [live.sample_replay_level()[0] for _ in range(10)] == [
        twin.sample_replay_level()[0] for _ in range(10)
    ]


def _vector_env(n_envs: int = 2, max_steps: int = 3) -> Any:
    from plr_gym.vector import PrioritizedLevelReplay as VectorPLR

    envs = gym.vector.SyncVectorEnv(
        [lambda: LevelWrapper(gym.make("CartPole-v1", max_episode_steps=max_steps)) for _ in range(n_envs)]
    )
    return VectorPLR(envs, levels=range(10), strategy="one_step_td_error", seed=0)


def test_report_rollout_refused_for_nan_can_be_retried() -> None:
    envs, twin = _vector_env(), _vector_env()
    results = []
    for e in (envs, twin):
        e.reset()
        for _ in range(7):
            e.step(np.zeros(2, dtype=np.int64))
    rewards, values = np.ones((7, 2)), np.linspace(0, 1, 14).reshape(7, 2)
    bad = values.copy()
    bad[2, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        envs.report_rollout(rewards=rewards, values=bad, gamma=0.9)
    with pytest.raises(ValueError, match="6 rows"):  # fewer rows than steps taken: refused
        envs.report_rollout(rewards=rewards[1:], values=values[1:], gamma=0.9)
    with pytest.raises((TypeError, ValueError), match="gamma"):
        envs.report_rollout(rewards=rewards, values=values, gamma=5)
    results = [e.report_rollout(rewards=rewards, values=values, gamma=0.9) for e in (envs, twin)]
    assert results[0] == results[1] and results[0]
    np.testing.assert_array_equal(envs.sampler.scores, twin.sampler.scores)
    envs.close()
    twin.close()


def test_buffer_mode_report_refused_for_a_nan_score_changes_nothing_and_can_be_retried() -> None:
    """Before the fix, env 0's level was inserted though env 1's NaN score was refused."""
    from plr_gym.vector import PrioritizedLevelReplay as VectorPLR

    poison = [True]

    def strategy(ep: Any) -> float:  # NaN for env 1's episodes (values >= 100) while poisoned
        return float("nan") if poison[0] and ep.values.max() >= 100 else float(ep.values.sum())

    def make() -> Any:
        envs = gym.vector.SyncVectorEnv(
            [lambda: LevelWrapper(gym.make("CartPole-v1", max_episode_steps=3)) for _ in range(2)]
        )
        buffer = LevelBuffer(capacity=4, seed=0)
        return VectorPLR(
            envs, buffer=buffer, generator=lambda rng: int(rng.integers(10**6)), strategy=strategy, seed=0
        )

    envs, twin = make(), make()
    for e in (envs, twin):
        e.reset(seed=0)
        for _ in range(7):  # per env: episode rows 0-2, reset row 3, episode rows 4-6
            e.step(np.zeros(2, dtype=np.int64))
    rewards = np.ones((7, 2))
    values = np.stack([np.arange(7.0), 100 + np.arange(7.0)], axis=1)
    before = envs.source.buffer.state_dict()
    with pytest.raises(ValueError, match="finite"):
        envs.report_rollout(rewards=rewards, values=values, advantages=np.zeros((7, 2)))
    assert envs.source.buffer.size == 0 and ro.same(envs.source.buffer.state_dict(), before)
    assert (envs.source.inserted, envs.source.rejected) == (0, 0)
    poison[0] = False
    results = [
        e.report_rollout(rewards=rewards, values=values, advantages=np.zeros((7, 2))) for e in (envs, twin)
    ]
    assert results[0] == results[1]
    assert sorted(score for _, score in results[0]) == [3.0, 15.0, 303.0, 315.0]
    assert ro.same(envs.source.buffer.state_dict(), twin.source.buffer.state_dict())
    assert sorted(envs.source.buffer.scores.tolist()) == [9.0, 309.0]  # each level's two episodes averaged
    assert (envs.source.inserted, envs.source.rejected) == (2, 0)
    envs.close()
    twin.close()


def test_rollout_plan_update_interrupted_part_way_is_undone() -> None:
    from plr_gym.source import BufferLevelSource

    buffer = LevelBuffer(capacity=4, seed=0)
    buffer.insert(5, 1.0)
    plan = BufferLevelSource(buffer, generator=lambda rng: int(rng.integers(100)), n_envs=2)
    before = buffer.state_dict()
    real_insert, calls = buffer.insert, []

    def insert(level: Any, score: float, extra: Any = None) -> int:
        calls.append(level)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real_insert(level, score, extra)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(buffer, "insert", insert)
        with pytest.raises(KeyboardInterrupt):
            plan.update_batch([7, 8], np.array([2.0, 3.0]))
    assert calls == [7, 8] and ro.same(buffer.state_dict(), before) and plan.inserted == 0
    with pytest.raises(ValueError, match="finite"):  # each level's mean overflows: refused before any insert
        plan.update_batch([7, 7, 8], np.array([1e308, 1e308, 1.0]))
    assert ro.same(buffer.state_dict(), before)
    plan.update_batch([7, 8], np.array([2.0, 3.0]))
    assert buffer.levels == [5, 7, 8] and buffer.scores.tolist() == [1.0, 2.0, 3.0] and plan.inserted == 2


def test_report_after_more_steps_than_the_log_keeps_is_refused_clearly(monkeypatch: Any) -> None:
    import plr_gym.wrappers.vector as vector_module

    monkeypatch.setattr(vector_module, "_MAX_LOGGED_STEPS", 5)  # instead of 65,536
    envs = _vector_env()
    envs.reset(seed=0)
    for _ in range(7):
        envs.step(np.zeros(2, dtype=np.int64))
    assert len(envs._log) == 5  # the two oldest rows are gone: 7 rows can no longer be reported
    with pytest.raises(
        ValueError, match="7 steps were taken since the last report_rollout, but only the newest 5 "
    ):
        envs.report_rollout(rewards=np.ones((5, 2)), values=np.zeros((5, 2)), gamma=0.9)
    with pytest.raises(RuntimeError, match="reset"):
        envs.step(np.zeros(2, dtype=np.int64))
    envs.reset(seed=1)
    for _ in range(4):
        envs.step(np.zeros(2, dtype=np.int64))
    reported = envs.report_rollout(rewards=np.ones((4, 2)), values=np.zeros((4, 2)), gamma=0.9)
    # one episode per env (rows 0-2, truncated; row 3 its reset step): |1 + 0.9 * 0 - 0| per step
    assert [score for _, score in reported] == [1.0, 1.0]
    envs.close()


# --------------------------------------------------------------------------------------------------
# scores on the right quantity
# --------------------------------------------------------------------------------------------------
def test_vector_truncation_bootstraps_with_the_final_observation_value() -> None:
    """NEXT_STEP, CartPole cut at 3 steps: rows 0-2 are episode 1, row 3 its reset step (final obs)."""
    envs = _vector_env(n_envs=1, max_steps=3)
    envs.reset()
    truncated = []
    for _ in range(5):
        *_, term, trunc, _ = envs.step(np.zeros(1, dtype=np.int64))
        truncated.append(bool(trunc[0]) and not bool(term[0]))
    assert truncated[2]  # CartPole does not fall in 3 steps
    values = np.array([[0.5], [0.2], [0.7], [0.9], [0.4]])
    rewards = np.array([[1.0], [1.0], [1.0], [0.0], [1.0]])
    ((_level, score),) = envs.report_rollout(rewards=rewards, values=values, gamma=0.5)
    # |r + γ V' − V| with V' = V(final obs) = values[3] on the truncated last step (not 0)
    hand = (abs(1 + 0.5 * 0.2 - 0.5) + abs(1 + 0.5 * 0.7 - 0.2) + abs(1 + 0.5 * 0.9 - 0.7)) / 3
    assert score == pytest.approx(hand, abs=1e-12)
    envs.close()


def test_max_mc_best_return_is_the_raw_episodic_return() -> None:
    """SB3 folds γ·V(terminal) into a truncated episode's last reward; the best return must not."""
    sampler = LevelSampler(levels=range(5), strategy="max_mc")
    scorer = EpisodeScorer(sampler, n_envs=1, strategy="max_mc", gamma=0.9)
    raw = np.array([[1.0], [1.0], [1.0]])
    folded = raw.copy()
    folded[-1] += 0.9 * 4.0  # γ·V(terminal obs)
    values = np.array([[2.0], [1.5], [1.0]])
    ((_level, score),) = scorer.process_rollout(
        levels=np.full((3, 1), 2),
        episode_starts=np.array([[True], [False], [False]]),
        dones=np.array([True]),
        rewards=folded,
        raw_rewards=raw,
        values=values,
    )
    assert scorer.max_returns[2] == 3.0
    assert score == pytest.approx(np.mean(3.0 - values))


def test_plr_callback_max_mc_uses_raw_returns_under_time_limits() -> None:
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env

    from plr_gym import PrioritizedLevelReplay

    venv = make_vec_env(lambda: LevelWrapper(gym.make("CartPole-v1", max_episode_steps=6)), n_envs=2, seed=0)
    venv = PrioritizedLevelReplay(venv, levels=range(4), strategy="max_mc", seed=0)
    episodes: dict[int, list[float]] = {}

    class Record(PLRCallback):
        def _on_step(self) -> bool:
            for info in self.locals["infos"]:
                if "episode" in info:
                    episodes.setdefault(int(info["level"]), []).append(float(info["episode"]["r"]))
            return super()._on_step()

    callback = Record()
    PPO("MlpPolicy", venv, n_steps=32, batch_size=64, n_epochs=1, seed=0).learn(64, callback=callback)
    assert callback.scorer is not None and callback.scorer.max_returns
    for level, best in callback.scorer.max_returns.items():
        assert best == max(episodes[level])  # integers <= 6: no γ·V(terminal) folded in
    venv.close()


def test_plr_callback_bootstraps_with_the_value_sb3_used() -> None:
    """MaskablePPO does not refresh ``locals`` before on_rollout_end: ``locals["values"]`` is V(s_{T-1})."""
    pytest.importorskip("sb3_contrib")
    import torch as th
    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.utils import obs_as_tensor

    from plr_gym import PrioritizedLevelReplay

    class Masked(gym.Wrapper[Any, Any, Any, Any]):
        def action_masks(self) -> np.ndarray[Any, Any]:
            return np.ones(2, dtype=bool)

    venv = make_vec_env(lambda: Masked(LevelWrapper(gym.make("CartPole-v1"))), n_envs=2, seed=0)
    venv = PrioritizedLevelReplay(venv, levels=range(4), strategy="one_step_td_error", seed=0)
    seen: dict[str, Any] = {}

    class Capture(PLRCallback):
        def _on_rollout_end(self) -> None:
            assert self._bootstrap is not None
            seen["last_values"] = self._bootstrap[0].copy()
            seen["locals_values"] = self.locals["values"].detach().numpy().reshape(-1).copy()
            with th.no_grad():
                obs = obs_as_tensor(self.model._last_obs, self.model.device)  # type: ignore[attr-defined]
                seen["hand"] = self.model.policy.predict_values(obs).numpy().reshape(-1)
            super()._on_rollout_end()

    MaskablePPO("MlpPolicy", venv, n_steps=16, batch_size=32, n_epochs=1, seed=0).learn(
        32, callback=Capture()
    )
    np.testing.assert_allclose(seen["last_values"], seen["hand"], rtol=1e-6)
    assert not np.allclose(seen["locals_values"], seen["hand"])  # what the callback used before the fix
    venv.close()


def test_commit_partial_episodes_matches_level_replay() -> None:
    """level-replay commits the running chunk's score after each rollout and scores the rest anew."""
    adv = np.array([[1.0], [3.0], [-2.0], [4.0], [0.5]])
    starts = np.array([[True], [False], [False], [False], [False]])
    stitched = EpisodeScorer(LevelSampler(levels=range(3)), n_envs=1, strategy="value_l1")
    committed = EpisodeScorer(
        LevelSampler(levels=range(3)), n_envs=1, strategy="value_l1", partial_episodes="commit"
    )
    first = dict(
        rewards=np.zeros((3, 1)), values=np.zeros((3, 1)), levels=np.full((3, 1), 1), dones=np.array([False])
    )
    second = dict(
        rewards=np.zeros((2, 1)), values=np.zeros((2, 1)), levels=np.full((2, 1), 1), dones=np.array([True])
    )
    assert stitched.process_rollout(episode_starts=starts[:3], advantages=adv[:3], **first) == []
    # the running chunk: mean of |1|, |3|, |-2| and level-replay's extra row |0 - V(s_T)| (V(s_T) = 0 here)
    assert committed.process_rollout(episode_starts=starts[:3], advantages=adv[:3], **first) == [(1, 1.5)]
    assert stitched.process_rollout(episode_starts=starts[3:], advantages=adv[3:], **second) == [
        (1, 10.5 / 5)
    ]
    assert committed.process_rollout(episode_starts=starts[3:], advantages=adv[3:], **second) == [(1, 2.25)]
    assert committed.num_open_episodes == 0
    with pytest.raises(ValueError, match="partial_episodes"):
        EpisodeScorer(LevelSampler(levels=range(3)), n_envs=1, partial_episodes="merge")


def test_buffer_mode_resume_plans_from_the_restored_buffer(tmp_path: Path) -> None:
    from plr_gym.source import BufferLevelSource

    buffer = LevelBuffer(capacity=2, min_fill_ratio=1.0, replay_prob=1.0, seed=0)
    plan = BufferLevelSource(buffer, generator=lambda rng: int(rng.integers(100, 200)), n_envs=2)
    plan.next_levels(np.arange(2))  # what learn()'s reset does before the callback restores the checkpoint
    assert plan.rollout_mode == "new"
    full = LevelBuffer(capacity=2, min_fill_ratio=1.0, replay_prob=1.0, seed=0)
    full.insert(7, 1.0)
    full.insert(8, 2.0)
    buffer.load_state_dict(full.state_dict())
    plan.discard_unplayed()  # PLRCallback does this after restoring
    assert plan.begin_rollout() and plan.rollout_mode == "replay" and sorted(set(plan.assigned)) <= [7, 8]


def test_offpolicy_callback_refuses_buffer_mode() -> None:
    from stable_baselines3 import DQN
    from stable_baselines3.common.env_util import make_vec_env

    from plr_gym import OffPolicyPLRCallback, PrioritizedLevelReplay

    venv = make_vec_env(lambda: LevelWrapper(gym.make("CartPole-v1")), n_envs=1, seed=0)
    venv = PrioritizedLevelReplay(
        venv, buffer=LevelBuffer(capacity=4, seed=0), generator=lambda rng: int(rng.integers(100))
    )
    model = DQN("MlpPolicy", venv, learning_starts=10, buffer_size=100, seed=0)
    with pytest.raises(ValueError, match="buffer mode"):
        model.learn(10, callback=OffPolicyPLRCallback())
    venv.close()


def test_buffer_mode_resume_from_starts_with_a_replay_rollout(tmp_path: Path) -> None:
    """Before the fix, the first resumed rollout was planned from the empty buffer: mode "new"."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback, CallbackList
    from stable_baselines3.common.env_util import make_vec_env

    from plr_gym import PrioritizedLevelReplay

    def make(buffer: LevelBuffer) -> Any:
        venv = make_vec_env(
            lambda: LevelWrapper(gym.make("CartPole-v1", max_episode_steps=8)), n_envs=2, seed=0
        )
        return PrioritizedLevelReplay(
            venv, buffer=buffer, generator=lambda rng: int(rng.integers(10**6)), seed=0
        )

    venv = make(LevelBuffer(capacity=2, replay_prob=1.0, min_fill_ratio=1.0, seed=0))
    model = PPO("MlpPolicy", venv, n_steps=16, batch_size=32, n_epochs=1, seed=0)
    model.learn(16 * 2 * 3, callback=PLRCallback(save_path=tmp_path))
    assert venv.buffer.size == 2
    venv.close()

    modes: list[str] = []

    class Modes(BaseCallback):
        def _on_rollout_start(self) -> None:
            modes.append(fresh.rollout_mode)

        def _on_step(self) -> bool:
            return True

    fresh = make(LevelBuffer(capacity=2, replay_prob=1.0, min_fill_ratio=1.0, seed=0))
    model = PPO("MlpPolicy", fresh, n_steps=16, batch_size=32, n_epochs=1, seed=0)
    model.learn(16 * 2, callback=CallbackList([PLRCallback(resume_from=tmp_path), Modes()]))
    assert modes == ["replay"]
    fresh.close()


# --------------------------------------------------------------------------------------------------
# PER and bad input named by the review
# --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("ratio", "batch"), [(1.0, 8), (0.99, 32)])
def test_all_recent_batches_come_from_the_recent_window_with_weight_one(ratio: float, batch: int) -> None:
    from gymnasium import spaces

    from plr_gym import PrioritizedReplayBuffer

    buf = PrioritizedReplayBuffer(
        50,
        spaces.Box(-1, 1, (2,)),
        spaces.Discrete(2),
        device="cpu",
        n_envs=2,
        seed=0,
        recent_data_ratio=ratio,
        recent_data_steps=3,
    )
    for t in range(10):
        obs = np.full((2, 2), t, dtype=np.float32)
        buf.add(obs, obs, np.zeros((2, 1)), np.ones(2), np.zeros(2), [{}, {}])
    buf.update_priorities(np.arange(20), np.arange(20, dtype=np.float64))
    indices, weights = buf.sample_indices(batch)
    assert indices.size == batch
    assert set((indices // 2).tolist()) <= {7, 8, 9}  # the 3 newest rows
    np.testing.assert_array_equal(weights, np.ones(batch))


def test_per_algorithms_copy_the_callers_replay_buffer_kwargs() -> None:
    from plr_gym import PERDQN

    shared: dict[str, Any] = {"prioritization": "rank"}
    first = PERDQN("MlpPolicy", "CartPole-v1", n_steps=3, replay_buffer_kwargs=shared, learning_starts=10)
    second = PERDQN("MlpPolicy", "CartPole-v1", replay_buffer_kwargs=shared, learning_starts=10)
    assert shared == {"prioritization": "rank"}
    assert first.replay_buffer.n_steps == 3 and second.replay_buffer.n_steps == 1
    with pytest.raises(ValueError, match="n_steps=3 conflicts"):
        PERDQN("MlpPolicy", "CartPole-v1", n_steps=3, replay_buffer_kwargs={"n_steps": 2})


def _per(**kwargs: Any) -> Any:
    from gymnasium import spaces

    from plr_gym import PrioritizedReplayBuffer

    return PrioritizedReplayBuffer(10, spaces.Box(-1, 1, (2,)), spaces.Discrete(2), device="cpu", **kwargs)


class _IgnoresOptions(gym.Env[Any, Any]):
    observation_space = gym.spaces.Discrete(2)
    action_space = gym.spaces.Discrete(2)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        return 0, {}


BAD_INPUT = {
    "uint64 level id >= 2**63": (
        lambda: LevelSampler(levels=np.array([2**63, 1], dtype=np.uint64)),
        ValueError,
        r"\[0, 2\*\*63 - 1\]",
    ),
    "uint64 level in update_batch (wrapped to -1 before the fix)": (
        lambda: LevelSampler(levels=[0, 1, 2]).update_batch(np.array([2**64 - 1], dtype=np.uint64), [1.0]),
        KeyError,
        "not one of",
    ),
    "summarize NaN return": (
        lambda: __import__("plr_gym.evaluation").evaluation.summarize([1.0, np.nan]),
        ValueError,
        "finite",
    ),
    "summarize confidence 1": (
        lambda: __import__("plr_gym.evaluation").evaluation.summarize([1.0, 2.0, 3.0], confidence=1.0),
        ValueError,
        "confidence",
    ),
    "iqm inf": (lambda: __import__("plr_gym.evaluation").evaluation.iqm([1.0, np.inf]), ValueError, "finite"),
    "LevelBuffer negative seed": (lambda: LevelBuffer(capacity=2, seed=-3), ValueError, "seed"),
    "PER negative seed": (lambda: _per(seed=-1), ValueError, "seed"),
    "PER bool alpha": (lambda: _per(alpha=True), ValueError, "alpha"),
    "PER bool n_steps": (lambda: _per(n_steps=True), ValueError, "n_steps"),
    "PER bool batch_size": (lambda: ro.make_per(2).sample(True), ValueError, "batch_size"),
    "float level on an env that ignores options": (
        lambda: LevelWrapper(_IgnoresOptions()).reset(options={"level": 1.7}),
        ValueError,
        "ignored options",
    ),
    "string level on an env that ignores options": (
        lambda: LevelWrapper(_IgnoresOptions()).reset(options={"level": "hard"}),
        ValueError,
        "ignored options",
    ),
    "generator returning None": (
        lambda: (
            __import__("plr_gym.source")
            .source.BufferLevelSource(LevelBuffer(capacity=2), generator=lambda rng: None, n_envs=2)
            .begin_rollout()
        ),
        ValueError,
        "generator returned None",
    ),
    "rollout plan seed -1": (
        lambda: __import__("plr_gym.source").source.BufferLevelSource(
            LevelBuffer(capacity=2), generator=lambda rng: 1, n_envs=2, seed=-1
        ),
        ValueError,
        "seed",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUT))
def test_bad_input_named_by_the_review_is_refused_clearly(case: str) -> None:
    fn, error, words = BAD_INPUT[case]
    with pytest.raises(error, match=words):
        fn()


def test_evaluate_levels_refuses_float_levels() -> None:
    from stable_baselines3.common.env_util import make_vec_env

    from plr_gym.evaluation import evaluate_levels

    venv = make_vec_env(lambda: LevelWrapper(gym.make("CartPole-v1")), n_envs=1, seed=0)
    with pytest.raises(TypeError, match=r"float 1\.7"):
        evaluate_levels(None, venv, [1.7])
    venv.close()


def test_cli_bad_input_exits_with_code_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "file").write_text("x")
    out_below_file = str(tmp_path / "file" / "run")
    code, _, err = run_cli(
        ["train", "MiniGrid-Empty-5x5-v0", "--timesteps", "64", "--out", out_below_file], capsys
    )
    assert code == 2 and f"cannot use run directory {out_below_file}: Not a directory" in err
    code, _, err = run_cli(["evaluate", str(tmp_path), "--levels", "0:100000000000"], capsys)
    assert code == 2 and "at most" in err
    run = tmp_path / "run"
    run.mkdir()
    (run / "model.zip").write_bytes(b"PK")
    (run / "config.json").write_text("{not json")
    code, _, err = run_cli(["evaluate", str(run)], capsys)
    assert code == 2 and "not valid JSON" in err


def test_cli_failed_train_leaves_no_checkpoint_and_releases_the_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from stable_baselines3 import PPO

    from plr_gym.cli import main

    out = tmp_path / "run"
    out.mkdir()
    (out / "config.json").write_text("{}")  # a previous run's

    def crash(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("the run died")

    monkeypatch.setattr(PPO, "learn", crash)
    with pytest.raises(RuntimeError, match="the run died"):
        main(
            [
                "train",
                "MiniGrid-Empty-5x5-v0",
                "--timesteps",
                "64",
                "--n-envs",
                "1",
                "--quiet",
                "--out",
                str(out),
                "--overwrite",  # a non-empty --out is refused without it
            ]
        )
    from plr_gym.run import RunDirectory

    # the run's config.json is written when it starts (so that --resume can check it); no checkpoint
    assert json.loads((out / "config.json").read_text())["timesteps"] == 64
    assert not os.path.lexists(out / "checkpoint.json") and not (out / "evaluation.json").exists()
    with RunDirectory(out) as run:  # the lock was released
        assert run.current() is None


def test_cli_evaluate_help_says_model_files_are_code(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["evaluate", "--help"], capsys)
    assert code == 0
    assert "trusted source" in " ".join(out.split())


def test_checkpoint_files_honour_the_umask(tmp_path: Path) -> None:
    # mkstemp would give 0600 whatever the umask; a checkpoint must get the mode a plain open() gives.
    old = os.umask(0o022)
    try:
        save_npz(tmp_path / "a.npz", {"x": np.arange(3)})
        ro.make_sampler(5).save(tmp_path / "s.npz")
        os.umask(0o027)
        save_npz(tmp_path / "b.npz", {"x": np.arange(3)})
    finally:
        os.umask(old)
    assert (tmp_path / "a.npz").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "s.npz").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "b.npz").stat().st_mode & 0o777 == 0o640
    assert sorted(os.listdir(tmp_path)) == ["a.npz", "b.npz", "s.npz"]
