"""The Ray-hosted level source: exactness, checkpoints, restarts, bad input, SB3, pickling."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import ray  # `make test` installs the distributed extra on both stacks: a missing Ray is an error, not a skip

from conftest import run_benchmark
from plr_gym import LevelBuffer, LevelSampler, distributed
from plr_gym.checkpoint import checkpoint_files, write_checkpoint_dir
from plr_gym.distributed import (
    REMOTE_FILE,
    LevelSourceActor,
    LevelSourceUnavailable,
    RemoteLevelSource,
    host_level_source,
)
from plr_gym.source import BufferLevelSource, LevelSource, next_rollout


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def sampler(**kwargs: Any) -> LevelSampler:
    kwargs.setdefault("seed", 0)
    return LevelSampler(range(kwargs.pop("n", 12)), **kwargs)


def assert_same_state(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert a.keys() == b.keys()
    for key in a:
        if isinstance(a[key], np.ndarray):
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)
        else:
            assert a[key] == b[key], key


# ------------------------------------------------------------------------------------------------ exactness
def test_prefetch_serves_the_local_sequence_and_weights(local_ray: None) -> None:
    """With prefetch=1 a client serves exactly the levels the hosted sampler draws, in order; a local
    sampler that draws when the actor drew (the client's queue) and gets the same scores when the actor
    got them (score pushes, each followed by the draw of the levels that ride on it) holds the same replay
    distribution and state."""
    client = RemoteLevelSource(host_level_source(sampler()), prefetch=1, prefetch_seconds=0, push_every=2)
    local = sampler()
    queue: list[int] = []  # the local mirror of the client's queue
    unpushed: list[tuple[np.ndarray, np.ndarray]] = []
    rng = np.random.default_rng(1)

    def mirror(requested: int, topped_up: int, pushes: int) -> None:
        """What the actor did during one client call: plain draws, then a push and its top-up draw."""
        nonlocal unpushed
        topped = client.levels_topped_up - topped_up
        queue.extend(local.sample(client.levels_requested - requested - topped).tolist())
        if client.pushes > pushes:
            for levels, batch_scores in unpushed:
                local.update_batch(levels, batch_scores)
            unpushed = []
        else:
            assert not topped  # a top-up only rides on a push
        queue.extend(local.sample(topped).tolist())

    def counters() -> tuple[int, int, int]:
        return client.levels_requested, client.levels_topped_up, client.pushes

    for step in range(40):
        envs = np.sort(rng.choice(4, size=int(rng.integers(1, 5)), replace=False))
        before = counters()
        served = client.next_levels(envs)
        assert served.dtype == np.int64
        mirror(*before)
        expected, queue = queue[: envs.size], queue[envs.size :]
        assert served.tolist() == expected, step
        scores = rng.random(envs.size)
        before = counters()
        unpushed.append((served, scores))
        client.update_batch(served, scores)
        mirror(*before)
    client.flush()
    for levels, batch_scores in unpushed:
        local.update_batch(levels, batch_scores)
    np.testing.assert_array_equal(client.sample_weights(), local.sample_weights())
    assert_same_state(client.state_dict(), local.state_dict())
    assert client.actor_stats()["levels_served"] == local.num_samples
    assert client.levels_topped_up == 82  # fixed seeds: levels that came with pushes, no extra round trip


def test_a_push_that_failed_is_raised_once_and_the_queue_keeps_serving(
    local_ray: None, tmp_path: Path
) -> None:
    """A push whose call raised in the actor (here: its checkpoint could not be written) while it also drew
    levels for the queue: the error reaches the client once, and the queue refills afterwards."""
    ck = tmp_path / "ck"
    actor = host_level_source(sampler(n=12), checkpoint_dir=ck, checkpoint_every=1, checkpoint_interval=0.0)
    client = RemoteLevelSource(actor, prefetch=4, prefetch_seconds=0, push_every=1)
    levels = client.next_levels(np.arange(2))
    for _ in range(3):
        client.next_levels(np.arange(2))  # drain the queue: the next push also draws
    shutil.rmtree(ck, ignore_errors=True)
    ck.write_text("")  # the checkpoint directory is a file: the push's checkpoint raises
    before = client.levels_topped_up
    client.update_batch(levels, [0.5, 0.5])
    assert client.levels_topped_up > before
    client.actor_stats()  # runs after the push in the actor
    ck.unlink()
    with pytest.raises(FileExistsError):
        client.flush()
    client.flush()  # raised once
    for _ in range(12):
        assert client.next_levels(np.arange(2)).shape == (2,)


def test_levels_are_drawn_in_blocks_sized_to_the_reset_rate(
    local_ray: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """prefetch_seconds (the default; min_refill=0, see the next test): one env resetting 25 times a
    (client-clock) second keeps ~25 × 4 levels ready, refilled when an eighth is left, so a refill call
    brings ~87 levels; the scores ride on
    those calls (no calls of their
    own), every score is absorbed once, and the levels served are still exactly the hosted sampler's
    draws in order. prefetch_seconds=0 is the old behaviour: prefetch per env, one call per reset here."""
    now = [0.0]
    monkeypatch.setattr(distributed.options, "_clock", lambda: now[0])
    client = RemoteLevelSource(
        host_level_source(sampler(n=60)), prefetch=2, prefetch_seconds=4.0, min_refill=0
    )
    old = RemoteLevelSource(host_level_source(sampler(n=60)), prefetch=2, prefetch_seconds=0, push_every=8)
    local = sampler(n=60)
    served = []
    calls = []  # the client's calls to the actor after each reset
    for k in range(400):
        level = client.next_levels(np.arange(1))
        served.append(int(level[0]))
        if k >= 60:  # no score yet in the first 60 episodes: the actor draws what a local sampler does
            client.update_batch(level, [0.25])
        calls.append(client.draw_calls + client.pushes)
        old.update_batch(old.next_levels(np.arange(1)), [0.25])
        now[0] += 0.04
    assert served[:60] == local.sample(60).tolist()
    late = calls[-1] - calls[199]  # the last 200 resets, at a measured rate of 25/s: ~75 levels per call
    assert 2 <= late <= 4, calls
    assert client.levels_requested - len(served) <= 100 + 2
    assert old.draw_calls + old.pushes >= 200  # a call per reset (prefetch 2, one env) plus the pushes
    # a score waits at most prefetch_seconds while the client is in use, then goes
    client.flush()
    pushes = client.pushes
    client.update_batch([served[-1]], [0.5])
    now[0] += 3.9
    client.update_batch([served[-1]], [0.5])
    assert client.pushes == pushes
    now[0] += 0.1
    client.update_batch([served[-1]], [0.5])  # the first is 4 s old
    assert client.pushes == pushes + 1
    client.flush()
    old.flush()
    assert client.actor_stats()["scores_absorbed"] == 343 and old.actor_stats()["scores_absorbed"] == 400
    assert client.actor_stats()["levels_served"] == client.levels_requested


def test_min_refill_sizes_the_blocks_of_envs_that_reset_rarely(
    local_ray: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An env resetting twice a (client-clock) second takes 40 levels in prefetch_seconds=20: min_refill=64
    makes the queue hold 8/7 x 64 = 74 and each refill bring 64 (min_refill=0: ~35 a call); an env resetting
    0.5 times a second keeps at most 3 x 20 s of resets (30 levels). The levels served are still the
    hosted sampler's draws, in order, and the scores ride on the refills."""
    now = [0.0]
    monkeypatch.setattr(distributed.options, "_clock", lambda: now[0])

    def run(rate: float, min_refill: int, resets: int) -> tuple[RemoteLevelSource, list[int], list[int]]:
        client = RemoteLevelSource(
            host_level_source(sampler(n=500)), prefetch_seconds=20, min_refill=min_refill
        )
        served, calls = [], []
        for k in range(resets):
            level = client.next_levels(np.arange(1))
            served.append(int(level[0]))
            if k >= 100:  # no score in the first 100 episodes: the actor draws what a local sampler does
                client.update_batch(level, [0.25])
            calls.append(client.draw_calls + client.pushes)
            now[0] += 1.0 / rate
        return client, served, calls

    client, served, calls = run(2.0, 64, 400)
    assert served[:100] == sampler(n=500).sample(100).tolist()
    assert client._target() == 74 and client._refill_at(74) == 64
    assert 4 <= calls[-1] - calls[99] <= 6  # 300 resets, 64 levels a call (the scores ride on them)
    assert client.levels_requested - len(served) <= 74
    client.flush()
    assert client.actor_stats()["scores_absorbed"] == 300
    assert client.actor_stats()["levels_served"] == client.levels_requested
    floorless, _, calls0 = run(2.0, 0, 400)
    assert floorless._target() == 40 and calls0[-1] - calls0[99] >= 8
    slow, _, _ = run(0.5, 64, 60)
    assert slow._target() == 30  # 3 x prefetch_seconds of resets, not 74
    # the first second (no rate measured yet): the blocks double instead of one call per reset
    _, _, calls = run(50.0, 64, 50)
    assert calls[49] <= 8, calls
    with pytest.raises(ValueError, match="min_refill must be an int >= 0"):
        RemoteLevelSource("x", min_refill=-1)


def test_next_rollout_is_one_call_with_the_buffered_scores(
    local_ray: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A learner's step (plr_gym.source.next_rollout): the scores, end_rollout, rollout_stats and
    begin_rollout in one push; the same statistics as a local sampler given the same calls."""
    client = RemoteLevelSource(host_level_source(sampler(n=20)), prefetch=0)
    local = sampler(n=20)
    blocking: list[str] = []
    real_call = RemoteLevelSource._call
    monkeypatch.setattr(
        RemoteLevelSource, "_call", lambda self, m, *a: blocking.append(m) or real_call(self, m, *a)
    )
    for k in range(3):
        levels = client.next_levels(np.arange(6))
        assert levels.tolist() == local.next_levels(np.arange(6)).tolist()
        scores = (levels % 7) / 7.0 + k
        client.update_batch(levels, scores)
        local.update_batch(levels, scores)
        blocking.clear()
        pushes = client.pushes
        stats = next_rollout(client)
        assert blocking == [] and client.pushes == pushes + 1  # one call: the push
        local.end_rollout()
        expected = local.rollout_stats(False)
        local.begin_rollout()
        assert stats.keys() == expected.keys()
        for key, value in expected.items():
            np.testing.assert_allclose(stats[key], value, err_msg=key)
    assert next_rollout(client)["num_seen"] == local.rollout_stats(False)["num_seen"]  # nothing buffered
    with pytest.raises(TypeError, match="rollout must be None or a bool"):
        LevelSourceActor(sampler()).push("c", 1, [], rollout="yes")


def test_prefetch_zero_is_exact(local_ray: None) -> None:
    """prefetch=0: one blocking call per next_levels, the actor draws exactly when a local sampler would."""
    client = RemoteLevelSource(host_level_source(sampler(n=8)), prefetch=0, push_every=1)
    local = sampler(n=8)
    for _ in range(20):
        served = client.next_levels(np.arange(3))
        assert served.tolist() == local.next_levels(np.arange(3)).tolist()
        scores = (served % 5) / 5.0
        client.update_batch(served, scores)
        client.flush()
        local.update_batch(served, scores)
        np.testing.assert_array_equal(client.sample_weights(), local.sample_weights())
    assert client.levels_requested == local.num_samples == 60


def test_levels_cross_ray_as_python_ints_and_task_events_are_an_option(local_ray: None) -> None:
    """The actor replies with lists of ints (cheaper for Ray than small arrays); clients still serve int64
    arrays, the same as a local sampler's, with Ray's task events off (the default) or on."""
    _, drawn = LevelSourceActor(sampler(n=8)).draw(5)
    assert type(drawn) is list and all(type(v) is int for v in drawn)
    assert drawn == sampler(n=8).sample(5).tolist()
    for task_events in (False, True):
        client = RemoteLevelSource(host_level_source(sampler(n=8), task_events=task_events), prefetch=2)
        local = sampler(n=8)
        served = np.concatenate([client.next_levels(np.arange(1)) for _ in range(6)])
        assert served.dtype == np.int64 and served.tolist() == local.sample(6).tolist()
    with pytest.raises(TypeError, match="task_events must be a bool"):
        host_level_source(sampler(), task_events=1)


def test_client_is_a_level_source_with_the_hosted_attributes(local_ray: None) -> None:
    client = RemoteLevelSource(host_level_source(sampler(strategy="gae")))
    assert isinstance(client, LevelSource)
    assert (client.strategy, client.num_levels, client.plans_rollouts) == ("gae", 12, False)
    assert client.level_dtype == np.dtype(np.int64)
    assert client.strategy_info.uses_scores
    assert client.begin_rollout() is False and client.rollout_mode == "none"
    assert client.retained_levels() is None and client.has_scores is False
    client.set_progress(0.25)
    assert client.call("progress") == 0.25
    with pytest.raises(ValueError, match="progress must be a number in"):
        client.set_progress(1.5)
    assert client.next_levels(np.arange(0)).shape == (0,)


# ------------------------------------------------------------------------------------------------ checkpoints
def test_state_and_checkpoints_round_trip(local_ray: None, tmp_path: Path) -> None:
    client = RemoteLevelSource(host_level_source(sampler(), checkpoint_dir=tmp_path / "actor"))
    for _ in range(5):
        levels = client.next_levels(np.arange(3))
        client.update_batch(levels, levels / 10.0)
    state = client.state_dict()  # pushes the buffered scores first
    restored = sampler()
    restored.load_state_dict(state)
    np.testing.assert_array_equal(restored.sample_weights(), client.sample_weights())
    # the actor's own checkpoint, in plr_gym's format: a fresh sampler loads it
    written = Path(client.checkpoint())
    from_dir = LevelSampler.load(checkpoint_files(written) / "plr_sampler.npz")
    assert_same_state(from_dir.state_dict(), client.state_dict())
    assert (checkpoint_files(written) / REMOTE_FILE).exists()
    # checkpoint_files(): written here (PLRCallback.save does this), read back into another sampler
    files = client.checkpoint_files()
    assert list(files) == ["plr_sampler.npz"]
    write_checkpoint_dir(tmp_path / "here", {name: save for name, (save, _) in files.items()})
    assert_same_state(LevelSampler.load(tmp_path / "here" / "plr_sampler.npz").state_dict(), state)
    # and loaded into the actor through the client: the hosted state goes back to it
    client.update_batch([0, 1], [5.0, 6.0])
    files["plr_sampler.npz"][1](tmp_path / "here" / "plr_sampler.npz")
    assert_same_state(client.state_dict(), state)


def test_a_new_actor_resumes_from_its_checkpoint_dir(local_ray: None, tmp_path: Path) -> None:
    first = RemoteLevelSource(
        host_level_source(sampler(), checkpoint_dir=tmp_path, checkpoint_every=4, checkpoint_interval=0)
    )
    levels = first.next_levels(np.arange(4))
    first.update_batch(levels, [0.1, 0.2, 0.3, 0.4])
    first.flush()  # 4 scores: a checkpoint
    saved = first.state_dict()
    second = RemoteLevelSource(host_level_source(sampler(), checkpoint_dir=tmp_path))
    assert_same_state(second.state_dict(), saved)
    assert second.actor_stats()["restores"] == 1


# ------------------------------------------------------------------------------------------------ restarts
def test_killed_actor_restarts_from_its_checkpoint_without_double_counting(
    local_ray: None, tmp_path: Path
) -> None:
    """learnability counts outcomes per level: every reported episode must be counted exactly once."""
    actor = host_level_source(
        sampler(strategy="learnability"), checkpoint_dir=tmp_path, checkpoint_every=5, checkpoint_interval=0
    )
    client = RemoteLevelSource(actor, prefetch=1, push_every=1, retry_timeout=300)
    other = RemoteLevelSource(actor, prefetch=1, push_every=1)
    reported = 0
    for _ in range(12):  # checkpoints after 5 and 10 scores; 2 scores after the last one
        level = client.next_levels(np.arange(1))
        client.update_batch(level, [1.0])
        reported += 1
    client.flush()
    assert client.actor_stats()["checkpoints"] == 2
    held = LevelSampler.load(checkpoint_files(tmp_path) / "plr_sampler.npz", strategy=None)
    assert int(held.state_dict()["outcomes"].sum()) == 10  # what the checkpoint holds
    assert sorted(client._log) == [11, 12]  # the pushes no checkpoint holds yet

    ray.kill(actor, no_restart=False)
    for _ in range(3):  # the client continues through the restart
        level = client.next_levels(np.arange(1))
        client.update_batch(level, [0.0])
        reported += 1
    client.flush()
    stats = client.actor_stats()
    assert stats["restores"] == 1 and stats["restored_from"] == str(tmp_path)
    outcomes = client.state_dict()["outcomes"]
    assert int(outcomes.sum()) == reported == 15  # 10 from the checkpoint + 2 resent + 3 new
    assert stats["scores_absorbed"] == 15
    other.update_batch(other.next_levels(np.arange(1)), [1.0])  # the other client reconnects too
    other.flush()
    assert int(client.state_dict()["outcomes"].sum()) == 16


def _wait_until_dead(actor: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            ray.get(actor.__ray_ready__.remote(), timeout=1.0)
        except ray.exceptions.RayActorError:
            return
        except ray.exceptions.GetTimeoutError:
            pass
        time.sleep(0.05)
    raise AssertionError(f"the actor was killed but still answers after {timeout} s")


def test_dead_actor_gives_a_clear_error(local_ray: None) -> None:
    actor = host_level_source(sampler(), max_restarts=0)
    client = RemoteLevelSource(actor, prefetch=0, retry_timeout=0.5)
    client.next_levels(np.arange(2))
    ray.kill(actor)
    _wait_until_dead(actor)  # ray.kill is asynchronous: under load a call could still reach the actor
    with pytest.raises(LevelSourceUnavailable, match="dead and will not restart"):
        client.next_levels(np.arange(2))
    restartable = RemoteLevelSource(actor, prefetch=0, retry_timeout=0.5)
    restartable._info = {**client.info, "max_restarts": -1}  # as if it could restart: wait, then give up
    with pytest.raises(LevelSourceUnavailable, match="dead or unreachable for 0 s"):
        restartable.next_levels(np.arange(2))


def test_actor_that_cannot_start_fails_fast(local_ray: None, tmp_path: Path) -> None:
    (tmp_path / "plr_sampler.npz").write_bytes(b"not a checkpoint")
    (tmp_path / REMOTE_FILE).write_bytes(b"not a checkpoint")
    client = RemoteLevelSource(host_level_source(sampler(), checkpoint_dir=tmp_path), retry_timeout=600)
    start = time.monotonic()
    with pytest.raises(LevelSourceUnavailable, match="failed to start"):
        client.next_levels(np.arange(1))
    # at once, not after retry_timeout: the bound leaves room for Ray's own start on a loaded machine
    assert time.monotonic() - start < 120


# ------------------------------------------------------------------------------------------------ bad input
def test_bad_input_raises_at_its_client_and_the_others_keep_working(local_ray: None) -> None:
    actor = host_level_source(sampler())
    bad = RemoteLevelSource(actor, push_every=1)
    good = RemoteLevelSource(actor, push_every=1)
    levels = bad.next_levels(np.arange(2))
    with pytest.raises(ValueError, match="finite"):
        bad.update_batch(levels, [0.5, float("nan")])  # caught by the client, at once
    with pytest.raises(ValueError, match="equal length"):
        bad.update_batch(levels, [0.5])
    with pytest.raises(TypeError, match="levels must be int level ids"):
        bad.update_batch([1.5, 2.0], [0.5, 0.5])
    bad.update_batch([3, 999], [0.5, 0.5])  # level 999 is unknown: only the actor knows
    with pytest.raises(KeyError, match=r"refused scores this client pushed.*999"):  # as LevelSampler's
        bad.flush()
    bad.flush()  # raised once
    good_levels = good.next_levels(np.arange(3))
    scores = np.array([0.1, 0.2, 0.3])
    good.update_batch(good_levels, scores)
    scores[:] = 9.0  # the caller reuses its array before the push: the client kept a copy
    good.flush()
    assert good.call("scores")[good_levels].max() < 1
    stats = good.actor_stats()
    assert stats["batches_refused"] == 1 and stats["scores_absorbed"] == 3
    assert good.rollout_stats(full=False)["num_seen"] == len(set(good_levels.tolist()))
    # a NaN that bypasses the client's check is refused by the actor, which stays up
    reply = ray.get(actor.push.remote("raw", 1, [([1, 2], [0.1, float("nan")])]))
    assert isinstance(reply["errors"][0][1], ValueError)
    assert good.actor_stats()["batches_refused"] == 2
    good.update_batch(good.next_levels(np.arange(1)), [0.4])
    good.flush()


def test_constructor_arguments_are_checked(local_ray: None) -> None:
    with pytest.raises(TypeError, match="source must be a plr_gym level source"):
        host_level_source(object())
    with pytest.raises(ValueError, match="checkpoint_every must be an int >= 1"):
        host_level_source(sampler(), checkpoint_every=0)
    with pytest.raises(ValueError, match="checkpoint_interval must be a number of seconds >= 0"):
        host_level_source(sampler(), checkpoint_interval=-1)
    with pytest.raises(ValueError, match="detached actor needs a name"):
        host_level_source(sampler(), detached=True)
    with pytest.raises(TypeError, match="actor must be the handle"):
        RemoteLevelSource(42)
    with pytest.raises(ValueError, match="prefetch must be an int >= 0"):
        RemoteLevelSource("x", prefetch=-1)
    with pytest.raises(ValueError, match="push_every must be an int >= 1"):
        RemoteLevelSource("x", push_every=0)
    with pytest.raises(ValueError, match="prefetch_seconds must be a number of seconds >= 0"):
        RemoteLevelSource("x", prefetch_seconds=-1.0)
    with pytest.raises(ValueError, match="no checkpoint_dir"):
        RemoteLevelSource(host_level_source(sampler())).checkpoint()


# -------------------------------------------------------------------------------------------- other sources
def test_hosted_buffer_source_plans_rollouts(local_ray: None) -> None:
    source = BufferLevelSource(
        LevelBuffer(capacity=4, seed=0), lambda rng: int(rng.integers(1000)), 2, seed=0
    )
    client = RemoteLevelSource(host_level_source(source))
    assert client.plans_rollouts and client.level_dtype == np.dtype(object)
    assert client.begin_rollout() is True and client.rollout_mode == "new"
    levels = client.next_levels(np.arange(2))
    assert client.next_levels(np.arange(2)) == levels  # fixed for the rollout
    client.update_batch(levels, [0.3, 0.7])
    client.end_rollout()
    assert client.last_rollout_mode == "new"
    assert sorted(client.retained_levels() or []) == sorted(levels)
    assert set(client.checkpoint_files()) == {"plr_buffer.npz", "plr_generator.npz"}


# ------------------------------------------------------------------------------------------- SB3, pickling
def test_sb3_ppo_with_a_remote_source(local_ray: None, tmp_path: Path) -> None:
    from minigrid.wrappers import FlatObsWrapper
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env

    from plr_gym import LevelWrapper, PLRCallback, PrioritizedLevelReplay

    actor = host_level_source(sampler(n=20))
    venv = make_vec_env(
        "MiniGrid-Empty-5x5-v0",
        n_envs=2,
        wrapper_class=lambda env: LevelWrapper(FlatObsWrapper(env)),
        env_kwargs={"max_steps": 20},
    )
    client = RemoteLevelSource(actor, prefetch=1)
    wrapped = PrioritizedLevelReplay(venv, sampler=client)
    model = PPO("MlpPolicy", wrapped, n_steps=64, batch_size=64, n_epochs=1, seed=0)
    model.learn(256, callback=PLRCallback(save_path=tmp_path))  # saves through the client at the end
    client.flush()
    saved = LevelSampler.load(tmp_path / "plr_sampler.npz")
    assert_same_state(saved.state_dict(), client.state_dict())
    stats = client.actor_stats()
    assert stats["scores_absorbed"] > 0 and stats["batches_refused"] == 0
    assert client.rollout_stats(full=False)["num_seen"] > 0
    assert stats["levels_served"] == client.levels_requested


def test_gymnasium_vector_wrapper_with_a_remote_source(local_ray: None) -> None:
    import gymnasium as gym
    from minigrid.wrappers import ImgObsWrapper

    from plr_gym import LevelWrapper
    from plr_gym.vector import PrioritizedLevelReplay as VectorPLR

    client = RemoteLevelSource(host_level_source(sampler(n=12)), prefetch=1)
    envs = gym.make_vec(
        "MiniGrid-Empty-5x5-v0", num_envs=3, wrappers=[lambda e: LevelWrapper(ImgObsWrapper(e))], max_steps=6
    )
    envs = VectorPLR(envs, sampler=client)
    envs.reset(seed=0)
    rng = np.random.default_rng(0)
    played: set[int] = set()
    for _ in range(30):
        _, _, _, _, info = envs.step(rng.integers(0, 3, size=3))
        played.update(info["level"][info["_level"]].tolist())
    reported = envs.report_rollout(
        rewards=rng.random((30, 3)), values=np.zeros((30, 3)), advantages=rng.normal(size=(30, 3))
    )
    client.flush()
    assert reported and client.actor_stats()["scores_absorbed"] == len(reported)
    assert {level for level, _ in reported} <= played
    assert client.rollout_stats(full=False)["num_seen"] == len({level for level, _ in reported})
    envs.close()


def test_client_pickles_into_another_worker(local_ray: None) -> None:
    import cloudpickle

    actor = host_level_source(sampler(), name="plr-pickle-test")
    client = RemoteLevelSource(actor, prefetch=2)
    client.next_levels(np.arange(2))
    copy = cloudpickle.loads(cloudpickle.dumps(client))
    assert copy.client_id != client.client_id and not copy._pool

    @ray.remote(num_cpus=0)
    def play(source: RemoteLevelSource) -> tuple[list[int], int]:
        levels = source.next_levels(np.arange(4))
        source.update_batch(levels, np.full(4, 0.5))
        source.flush()
        return levels.tolist(), source.actor_stats()["scores_absorbed"]

    levels, absorbed = ray.get(play.remote(client))
    assert len(levels) == 4 and absorbed == 4
    by_name = ray.get(play.remote(RemoteLevelSource("plr-pickle-test")))
    assert by_name[1] == 8


def test_actor_class_works_in_process(tmp_path: Path) -> None:
    actor = LevelSourceActor(
        sampler(), checkpoint_dir=str(tmp_path), checkpoint_every=2, checkpoint_interval=0
    )
    _, levels = actor.draw(2)
    reply = actor.push("c", 1, [(levels, [0.5, 0.25])])
    assert reply["errors"] == [] and reply["committed"] == 1  # checkpointed
    assert actor.push("c", 1, [(levels, [0.5, 0.25])])["committed"] == 1  # a duplicate: skipped
    assert actor.stats()["pushes_duplicate"] == 1 and actor.stats()["scores_absorbed"] == 2
    again = LevelSourceActor(sampler(), checkpoint_dir=str(tmp_path))
    assert again.push("c", 1, [(levels, [0.5, 0.25])])["committed"] == 1  # the checkpoint remembers it
    assert again.stats()["scores_absorbed"] == 2


def test_checkpoints_are_at_most_one_per_interval(tmp_path: Path) -> None:
    actor = LevelSourceActor(
        sampler(), checkpoint_dir=str(tmp_path), checkpoint_every=1, checkpoint_interval=60
    )
    for seq in range(1, 6):
        actor.push("c", seq, [([seq], [0.5])])
    assert actor.stats()["checkpoints"] == 0  # 5 scores, but the interval has not passed
    actor._last_checkpoint -= 61
    actor.push("c", 6, [([6], [0.5])])
    assert actor.stats()["checkpoints"] == 1


def test_waits_for_a_named_actor(local_ray: None) -> None:
    client = RemoteLevelSource("plr-not-there", retry_timeout=0.3)
    start = time.monotonic()
    with pytest.raises(LevelSourceUnavailable, match="no level source actor named 'plr-not-there'"):
        client.next_levels(np.arange(1))
    assert time.monotonic() - start < 5


def test_remote_source_benchmark_quick() -> None:
    """``benchmarks/distributed/remote_source.py --quick`` runs both systems and the load test (4 emulated env
    runners at the defaults, with envs and with the event emulation) and reports the tables, with every score
    and level exactly once (no timing asserts)."""
    out = run_benchmark("distributed/remote_source.py", "--quick", timeout=300)
    for header in ("- command:", "- commit:", "- machine:", "- load average at start:"):
        assert header in out, out
    rows = [line for line in out.splitlines() if line.startswith("| ")]
    assert any(line.startswith("| 1 | plr_gym RemoteLevelSource (prefetch 16) |") for line in rows), out
    if "Syllabus not run" not in out:
        assert any(line.startswith("| 1 | Syllabus RayCurriculumWrapper |") for line in rows), out
    loads = [line for line in rows if line.startswith("| 20 | 4 |")]  # prefetch_seconds 20, 4 runners
    assert len(loads) == 2 and all("| yes (" in load for load in loads), out  # envs and events emulation
    assert "CHECK FAILED" not in out


# ---------------------------------------------------------------------------------------------- episode parts
def _value_l1_parts(episode: str, level: int, adv: np.ndarray, cuts: list[int]) -> list[Any]:
    from plr_gym.episode_parts import make_part
    from plr_gym.scoring import EpisodeData, strategy_spec

    info = strategy_spec("value_l1")
    bounds = [0, *cuts, len(adv)]
    return [
        make_part(info, episode, a, level, b == len(adv), EpisodeData(advantages=adv[a:b]))
        for a, b in zip(bounds[:-1], bounds[1:])
    ]


def test_actor_joins_parts_from_several_clients_once_and_checkpoints_the_pending_ones(tmp_path: Path) -> None:
    """Two learners' parts of one episode, in any order: the episode is scored once, when its last part
    arrives; a push sent again is skipped; a checkpoint holds the parts still waiting, so an actor restored
    from it completes the episode when the rest arrives, and a resent push is still applied once."""
    adv = np.array([1.0, -2.0, 3.0, -4.0, 5.0, 0.5])
    p0, p1, p2 = _value_l1_parts("ep", 4, adv, [2, 4])
    actor = LevelSourceActor(
        sampler(strategy="value_l1"), checkpoint_dir=str(tmp_path), checkpoint_every=2, checkpoint_interval=0
    )
    reply = actor.push("learner-1", 1, [], 0, [p2])
    assert reply["parts"] == {"joined": [], "unscored": 0, "errors": []} and reply["committed"] == 0
    actor.checkpoint()  # holds p2, waiting
    reply = actor.push("learner-0", 1, [], 0, [p0])  # applied, not yet in a checkpoint
    assert actor.push("learner-0", 1, [], 0, [p0])["parts"] is None  # the same push again: skipped
    assert actor.stats()["pushes_duplicate"] == 1 and actor.stats()["parts_pending"] == 2

    again = LevelSourceActor(sampler(strategy="value_l1"), checkpoint_dir=str(tmp_path))  # restarted
    assert again.stats()["parts_pending"] == 1 and again.stats()["parts_received"] == 1
    assert again.push("learner-0", 1, [], 0, [p0])["parts"]["joined"] == []  # resent: not in the checkpoint
    reply = again.push("learner-0", 2, [], 0, [p1])
    ((level, score, episode),) = reply["parts"]["joined"]
    assert (level, episode) == (4, "ep") and score == pytest.approx(np.abs(adv).mean())
    assert again.stats()["episodes_joined"] == 1 and again.stats()["scores_absorbed"] == 1
    assert again.source.scores[4] == pytest.approx(np.abs(adv).mean())  # one update of level 4, alpha = 1
    assert again.source.state_dict()["num_samples"] == 0 and int(again.source.seen.sum()) == 1
    # a part of an unknown level completes its episode, then the sampler refuses the score: reported
    (bad,) = _value_l1_parts("other", 999, adv, [])
    errors = again.push("learner-0", 3, [], 0, [bad])["parts"]["errors"]
    assert len(errors) == 1 and isinstance(errors[0][1], KeyError)
    assert again.stats()["batches_refused"] == 1 and again.stats()["episodes_joined"] == 2
    # parts sent to a source whose strategy has none (outcomes): refused, nothing changes
    outcomes = LevelSourceActor(sampler(strategy="learnability"))
    ((_, error),) = outcomes.push("learner-0", 1, [], 0, [p0])["parts"]["errors"]
    assert "no partial aggregates" in str(error) and outcomes.stats()["parts_received"] == 0


def test_an_episode_joined_again_after_a_restart_is_applied_but_reported_once(tmp_path: Path) -> None:
    """A push whose reply reported an episode, resent to an actor restored from an older checkpoint with
    ``reported``: the episode is scored into the source again (it lost it) but not reported again, also when
    another client's resent part completes it, and also across a second restart (the checkpoint keeps the
    note)."""
    adv = np.array([0.5, -1.5, 2.0, 1.0])
    p0, p1 = _value_l1_parts("ep", 4, adv, [2])
    actor = LevelSourceActor(
        sampler(strategy="value_l1"), checkpoint_dir=str(tmp_path), checkpoint_interval=0
    )
    actor.checkpoint()  # before the episode
    assert actor.push("learner-0", 1, [], 0, [p0])["parts"]["joined"] == []
    assert [e for _, _, e in actor.push("learner-1", 1, [], 0, [p1])["parts"]["joined"]] == ["ep"]
    # restart: both learners resend (learner-1 was told "ep" was scored); learner-0's part completes it
    again = LevelSourceActor(sampler(strategy="value_l1"), checkpoint_dir=str(tmp_path))
    assert again.push("learner-1", 1, [], 0, [p1], ["ep"])["parts"]["joined"] == []
    again.checkpoint()  # holds p1 and the note, not yet the episode
    third = LevelSourceActor(sampler(strategy="value_l1"), checkpoint_dir=str(tmp_path))
    assert third.push("learner-0", 1, [], 0, [p0])["parts"]["joined"] == []  # completes "ep": not reported
    assert third.stats()["episodes_joined"] == 1 and third.stats()["scores_absorbed"] == 1
    assert third.source.scores[4] == pytest.approx(np.abs(adv).mean())  # applied: the source lost it
    assert third._reported == set()


def test_remote_parts_survive_an_actor_restart_exactly_once(local_ray: None, tmp_path: Path) -> None:
    """Learner A's part is checkpointed, learner B's is not when the actor is killed: B's client resends it
    to the restarted actor, A's last part completes the episode, scored exactly once."""
    actor = host_level_source(
        sampler(strategy="value_l1"), checkpoint_dir=tmp_path, checkpoint_every=1_000, checkpoint_interval=0
    )
    # an actor restart takes seconds when idle, over 30 s on 2 loaded cores: this test is about exactly-once
    a = RemoteLevelSource(actor, retry_timeout=300)
    b = RemoteLevelSource(actor, retry_timeout=300)
    adv = np.linspace(-1.0, 2.0, 9)
    p0, p1, p2 = _value_l1_parts("ep", 7, adv, [3, 5])
    a.update_parts([p0])
    assert a.take_joined() == ([], 0)
    a.checkpoint()
    b.update_parts([p1, *_value_l1_parts("whole", 5, adv[:4], [])])
    joined, _ = b.take_joined()  # applied, in no checkpoint: b keeps it to resend
    assert [(level, episode) for level, _, episode in joined] == [(5, "whole")]
    assert sorted(b._log_parts) == [1]
    ray.kill(actor, no_restart=False)
    deadline = time.monotonic() + 300  # ray.kill does not wait: a call may still reach the old actor
    while a.actor_stats()["restores"] < 1:
        assert time.monotonic() < deadline, "the actor did not restart"
        time.sleep(0.05)
    a.update_parts([p2])
    assert a.take_joined() == ([], 0)  # the restarted actor holds p0 (its checkpoint) and p2
    b.update_parts(_value_l1_parts("next", 3, adv[:2], []))  # b's next push meets the new actor...
    joined, unscored = b.take_joined()  # ... so b resends p1, which completes the episode, and "whole",
    stats = a.actor_stats()  # scored again by the restarted actor but reported once (plr/episodes_scored)
    assert stats["restores"] == 1 and unscored == 0
    assert sorted((level, episode) for level, _, episode in joined) == [(3, "next"), (7, "ep")]
    assert a.call("scores")[5] == pytest.approx(np.abs(adv[:4]).mean()) and stats["scores_absorbed"] == 3
    assert dict((e, score) for _, score, e in joined)["ep"] == pytest.approx(np.abs(adv).mean())
    assert stats["episodes_joined"] == 3 and stats["parts_pending"] == 0
    assert a.call("scores")[7] == pytest.approx(np.abs(adv).mean())
    with pytest.raises(TypeError, match="EpisodePart"):
        a.update_parts([("ep", 0, 3)])


def test_a_client_is_not_hosted_again(local_ray: None) -> None:
    """``host_level_source`` refuses a ``RemoteLevelSource`` (a client) before it starts anything: the check
    reads the client's ``is_remote_client`` marker, so the options module needs no import of the client."""
    from plr_gym.distributed import RemoteLevelSource, host_level_source

    client = object.__new__(RemoteLevelSource)  # no actor behind it: the refusal comes before any is started
    with pytest.raises(TypeError, match="already a RemoteLevelSource; host the LevelSampler itself"):
        host_level_source(client)
