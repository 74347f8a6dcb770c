"""RLlib integration (plr_gym.rllib): PPO with 2 env runners on a local Ray, levels from a shared source.

The end-to-end test checks, against records kept outside the code under test:
(1) the scores stored in the source equal the scores recomputed from the train batch (value targets minus
    an independent value forward pass = RLlib's raw GAE advantages, which standardised must give the
    batch's advantages), episode by episode, chunks of one episode stitched;
(2) every episode's level is one the source handed out to that env;
(3) the plr/* metrics are in the result dict.
"""

from __future__ import annotations

import os
import time
import warnings

import gymnasium as gym
import minigrid  # noqa: F401
import numpy as np
import pytest

from conftest import importorskip_on_stack

# `make test` installs RLlib on the Python 3.11 stack only: RLlib 2.60 pins gymnasium==1.2.2 and the 3.13
# stack's procgen-gym needs >= 1.2.3 (docs/install.md); on 3.11 CI allows no skip. On 3.13 the doctests of
# plr_gym/rllib.py skip too (the Makefile's --doctest-ignore-import-errors for that stack).
importorskip_on_stack("ray.rllib", "RLlib 2.60 pins gymnasium==1.2.2, procgen-gym needs >= 1.2.3")

import ray
import ray.rllib
from ray.rllib.algorithms.ppo import PPOConfig
from ray.rllib.connectors.connector_v2 import ConnectorV2
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.core.columns import Columns
from ray.rllib.evaluation.postprocessing import Postprocessing

from plr_gym import LevelSampler
from plr_gym.distributed import RemoteLevelSource, host_level_source
from plr_gym.rllib import (
    PLREnv,
    PLREnvCreator,
    PLRPPOTorchLearner,
    add_plr,
    plr_metrics,
    plr_ppo_config,
)

# ------------------------------------------------------------------------------------------------ records
FRONT: list[list[dict]] = []  # per update: the chunks as the learner received them (before RLlib's pieces)
BACK: list[dict] = []  # per update: the train batch after GAE (and PLR scoring)


class _Front(ConnectorV2):
    def __call__(self, *, rl_module, batch, episodes, **kwargs):
        FRONT.append(
            [
                {
                    "id": e.id_,
                    "t_started": int(e.t_started),
                    "len": len(e),
                    "done": bool(e.is_done),
                    "level": e.get_infos(-1)["level"],
                    "levels": {info["level"] for info in e.get_infos()},
                    "env": e.get_infos(-1)["plr_env"],
                    "pid": e.get_infos(-1)["pid"],
                    "return": float(np.sum(e.get_rewards())),
                }
                for e in episodes
            ]
        )
        return batch


class _Back(ConnectorV2):
    def __init__(self, *args, actor=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.actor = actor  # the recording source's actor: learners in other processes report there

    def __call__(self, *, rl_module, batch, episodes, **kwargs):
        import torch

        module_batch = batch[DEFAULT_MODULE_ID]
        with torch.no_grad():
            module = rl_module[DEFAULT_MODULE_ID]
            values = getattr(module, "unwrapped", lambda: module)().compute_values(module_batch)  # DDP
        BACK.append(
            {
                "values": values.numpy().astype(np.float64),
                "targets": module_batch[Postprocessing.VALUE_TARGETS].numpy().astype(np.float64),
                "advantages": module_batch[Postprocessing.ADVANTAGES].numpy().astype(np.float64),
                "mask": module_batch[Columns.LOSS_MASK].numpy(),
            }
        )
        if self.actor is not None:
            ray.get(self.actor.call.remote("record_update", (os.getpid(), FRONT[-1], BACK[-1])))
        return batch


class RecordingLearner(PLRPPOTorchLearner):
    def build(self) -> None:
        super().build()
        names = [type(c).__name__ for c in self._learner_connector.connectors]
        # RLlib's GAE replaced by PLR's (runs once), the episode marks before RLlib's one-step extension
        assert "GeneralAdvantageEstimation" not in names and names.count("PLRGeneralAdvantageEstimation") == 1
        assert names.index("_EpisodeMarks") < names.index("AddOneTsToEpisodesAndTruncate")
        self._learner_connector.prepend(_Front())
        source = self.config.learner_config_dict["plr_source"]
        self._learner_connector.append(_Back(actor=getattr(source, "actor", None)))


# ---------------------------------------------------------------------------------------- recording source
class RecordingSampler(LevelSampler):
    """The hosted source: a LevelSampler that keeps every score batch it stored and the hand-outs."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.stored: list[tuple[list[int], list[float]]] = []
        self.handed: list[tuple[int, int, int]] = []  # (process, env index given to the client, level)
        self.updates: list[tuple[int, list[dict], dict]] = []  # (learner process, FRONT, BACK) per update

    def update_batch(self, levels, scores):
        super().update_batch(levels, scores)
        self.stored.append(([int(x) for x in levels], [float(x) for x in scores]))

    def record_handout(self, pid, envs, levels):
        self.handed.extend((pid, int(e), int(x)) for e, x in zip(envs, levels))

    def record_update(self, pid, front, back):
        self.updates.append((pid, front, back))


class RecordingClient(RemoteLevelSource):
    """A RemoteLevelSource that reports to the hosted sampler which level it handed to which env."""

    def next_levels(self, envs):
        levels = super().next_levels(envs)
        record = (os.getpid(), list(np.asarray(envs)), list(levels))
        ray.get(self.actor.call.remote("record_handout", record))
        return levels


def make_doorkey(env_config):
    from gymnasium.wrappers import DtypeObservation, FlattenObservation
    from minigrid.wrappers import ImgObsWrapper

    env = FlattenObservation(ImgObsWrapper(gym.make("MiniGrid-DoorKey-5x5-v0", max_steps=40)))
    return _Pid(DtypeObservation(env, np.float32))


def make_doorkey_varied(env_config):
    """DoorKey whose episodes last 15 + level % 23 steps (a random policy rarely ends one earlier): unequal
    episodes, so RLlib's sharder cuts and deals them unevenly between learners."""
    return _LevelLength(make_doorkey(env_config))


class _LevelLength(gym.Wrapper):
    def reset(self, *, seed=None, options=None):
        self._left = 15 + int(seed) % 23  # LevelWrapper resets with seed = level
        return self.env.reset(seed=seed, options=options)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._left -= 1
        return obs, reward, terminated, truncated or self._left <= 0, info


class _Pid(gym.Wrapper):
    """Tags every info with the env's process id (to match an episode to its env runner's hand-outs)."""

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        return obs, {**info, "pid": os.getpid()}

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, reward, terminated, truncated, {**info, "pid": os.getpid()}


@pytest.fixture(scope="module")
def local_ray():
    import sys

    from ray import cloudpickle

    # the env runners cannot import this test module: ship its classes and functions by value
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()
    cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


# ------------------------------------------------------------------------------------------------ tests
@pytest.mark.slow
def test_ppo_two_env_runners_scores_levels_and_metrics(local_ray) -> None:
    FRONT.clear()
    BACK.clear()
    actor = host_level_source(RecordingSampler(range(30), strategy="value_l1", seed=0))
    source = RecordingClient(actor, prefetch=2)
    config = (
        PPOConfig()
        .env_runners(num_env_runners=2, num_envs_per_env_runner=2, rollout_fragment_length=50)
        .training(train_batch_size=400, minibatch_size=200, num_epochs=1, lr=3e-4)
        .learners(num_learners=0)
        .debugging(seed=0)
    )
    add_plr(config, source, make_doorkey, learner_class=RecordingLearner)
    algo = config.build_algo()
    try:
        results = [algo.train() for _ in range(2)]
    finally:
        algo.stop()
    handed = ray.get(actor.call.remote("handed"))
    updates = ray.get(actor.call.remote("stored"))

    # (1) stored scores == scores recomputed from the train batches
    assert len(FRONT) == len(BACK) == 2
    expected: list[tuple[int, float]] = []
    open_eps: dict[str, list[np.ndarray]] = {}
    stitched = 0
    for chunks, back in zip(FRONT, BACK):
        raw = back["targets"] - back["values"]  # RLlib's GAE advantages before standardisation
        std = (raw - raw.mean()) / max(1e-4, raw.std())
        np.testing.assert_allclose(std, back["advantages"], atol=1e-4)
        lens = [c["len"] + 1 for c in chunks]
        assert sum(lens) == raw.shape[0]
        ends = np.cumsum(lens) - 1
        assert not back["mask"][ends].any() and back["mask"].sum() == raw.shape[0] - len(chunks)
        offset = 0
        for chunk in chunks:
            adv = raw[offset : offset + chunk["len"]]
            offset += chunk["len"] + 1
            parts = open_eps.pop(chunk["id"], None)
            if chunk["t_started"] == 0:
                parts = []
            elif parts is None:
                continue
            parts.append(adv)
            if chunk["done"]:
                stitched += len(parts) > 1
                expected.append((chunk["level"], float(np.abs(np.concatenate(parts)).mean())))
            else:
                open_eps[chunk["id"]] = parts
    stored = [(level, score) for levels, scores in updates for level, score in zip(levels, scores)]
    assert len(expected) >= 4, "too few completed episodes to check"
    assert stitched >= 1, "no episode spanned two chunks: stitching was not exercised"
    assert [level for level, _ in stored] == [level for level, _ in expected]
    np.testing.assert_allclose([s for _, s in stored], [s for _, s in expected], rtol=1e-5, atol=1e-6)

    # (2) every episode's level was handed out to its env (sub-env k of a runner is env k of the runner's
    # source client; info["plr_env"] = worker_index * 2 + k)
    per_env: dict[tuple[int, int], list[int]] = {}
    for pid, env, level in handed:
        per_env.setdefault((pid, env), []).append(level)
    assert len({pid for pid, _ in per_env}) == 2 and {env for _, env in per_env} == {0, 1}
    index_of: dict[tuple[int, int], set[int]] = {}
    for chunks in FRONT:
        for chunk in chunks:
            key = (chunk["pid"], chunk["env"] % 2)
            index_of.setdefault(key, set()).add(chunk["env"])
            chunk["env"] = key
    assert all(len(v) == 1 for v in index_of.values())  # one global index per (runner, sub-env)
    assert sorted(i for v in index_of.values() for i in v) == [2, 3, 4, 5]  # env runners 1 and 2
    for chunks in FRONT:
        for chunk in chunks:
            assert chunk["levels"] == {chunk["level"]}, "one level per episode chunk"
            assert chunk["level"] in per_env[chunk["env"]]
    started = [(c["env"], c["level"]) for chunks in FRONT for c in chunks if c["t_started"] == 0]
    for env, level in set(started):
        assert started.count((env, level)) <= per_env[env].count(level)

    # (3) plr/* metrics
    for result in results:
        metrics = plr_metrics(result)
        for key in ("plr/episodes_scored", "plr/chunks_unscored", "plr/num_seen", "plr/replay_fraction"):
            assert key in metrics, (key, metrics)
    assert sum(plr_metrics(r)["plr/episodes_scored"] for r in results) == len(stored)
    assert plr_metrics(results[-1])["plr/num_seen"] == ray.get(actor.call.remote("num_seen"))


def _episodes_from_updates(updates) -> tuple[dict[str, list[tuple]], int]:
    """Each episode's parts from the learners' records: ``id -> [(start, stop, done, level, learner, raw
    advantages)]``; also checks every batch's GAE as the one-learner test does, and counts the chunks."""
    episodes: dict[str, list[tuple]] = {}
    n_chunks = 0
    for pid, chunks, back in updates:
        raw = back["targets"] - back["values"]  # RLlib's GAE advantages before standardisation
        std = (raw - raw.mean()) / max(1e-4, raw.std())
        np.testing.assert_allclose(std, back["advantages"], atol=1e-4)
        lens = [c["len"] + 1 for c in chunks]
        assert sum(lens) == raw.shape[0]
        offset = 0
        for chunk in chunks:
            adv = raw[offset : offset + chunk["len"]]
            offset += chunk["len"] + 1
            if chunk["len"] == 0:
                continue
            start = chunk["t_started"]
            part = (start, start + chunk["len"], chunk["done"], chunk["level"], pid, adv)
            episodes.setdefault(chunk["id"], []).append(part)
            n_chunks += 1
    return episodes, n_chunks


@pytest.mark.slow
def test_ppo_two_learners_scores_every_completed_episode_exactly_once(local_ray) -> None:
    """RLlib deals each of 2 learners a share of every batch's chunks (cutting chunks to balance them): the
    learners send partial aggregates, the source's actor joins them by episode id. Every completed episode
    is scored once, with the score of its whole run of steps (mean |raw GAE advantage|), recomputed here
    from the two learners' train batches."""
    actor = host_level_source(RecordingSampler(range(30), strategy="value_l1", seed=0))
    source = RemoteLevelSource(actor, prefetch=2)
    config = (
        PPOConfig()
        .env_runners(
            num_env_runners=2,
            num_envs_per_env_runner=2,
            rollout_fragment_length=15,
            num_cpus_per_env_runner=0.5,
        )
        .training(train_batch_size=400, minibatch_size=200, num_epochs=1, lr=3e-4)
        .learners(num_learners=2, num_cpus_per_learner=0.5)
        .debugging(seed=0)
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        add_plr(config, source, make_doorkey_varied, learner_class=RecordingLearner)
    assert not [w for w in caught if "plr" in str(w.message).lower()], [str(w.message) for w in caught]
    algo = config.build_algo()
    try:
        results = [algo.train() for _ in range(2)]
    finally:
        algo.stop()
    updates = ray.get(actor.call.remote("updates"))
    stored = ray.get(actor.call.remote("stored"))
    assert len({pid for pid, _, _ in updates}) == 2 and len(updates) == 4  # 2 learners x 2 batches

    episodes, n_chunks = _episodes_from_updates(updates)
    expected: list[tuple[int, float]] = []
    across = 0  # episodes whose parts were scored by both learners
    for parts in episodes.values():
        parts.sort(key=lambda p: p[0])
        assert all(a[1] == b[0] for a, b in zip(parts, parts[1:])), "parts overlap or miss steps"
        assert len({p[3] for p in parts}) == 1, "one level per episode"
        if parts[0][0] != 0 or not parts[-1][2]:
            continue  # still running after the last batch
        expected.append((parts[0][3], float(np.abs(np.concatenate([p[5] for p in parts])).mean())))
        across += len({p[4] for p in parts}) > 1
    got = [(level, score) for levels, scores in stored for level, score in zip(levels, scores)]
    assert len(expected) >= 8, "too few completed episodes to check"
    assert across >= 3, f"{across} episodes split between the learners: joining was hardly exercised"
    assert len(got) == len(expected)  # each completed episode exactly once
    got.sort()
    expected.sort()
    assert [level for level, _ in got] == [level for level, _ in expected]
    np.testing.assert_allclose([s for _, s in got], [s for _, s in expected], rtol=1e-5, atol=1e-6)

    stats = ray.get(actor.stats.remote())
    assert stats["episodes_joined"] == len(expected) and stats["parts_unscored"] == 0
    assert stats["parts_received"] == n_chunks
    metrics = [plr_metrics(r) for r in results]
    assert all(m["plr/chunks_unscored"] == 0 for m in metrics), metrics
    assert sum(m["plr/episodes_scored"] for m in metrics) == len(expected)  # summed over the learners
    assert metrics[-1]["plr/num_seen"] == ray.get(actor.call.remote("num_seen"))  # after both learners'


class _Recorder:
    """A plain Ray actor that keeps the learners' records (the source's actor restarts, and forgets)."""

    def __init__(self) -> None:
        self.updates: list[tuple[int, list[dict], dict]] = []

    def call(self, method, args=()):
        value = getattr(self, method)
        return value(*args) if callable(value) else value

    def record_update(self, pid, front, back):
        self.updates.append((pid, front, back))


_RECORDER = "plr-gym-test-restart-recorder"


class RestartRecordingLearner(PLRPPOTorchLearner):
    def build(self) -> None:
        super().build()
        self._learner_connector.prepend(_Front())
        self._learner_connector.append(_Back(actor=ray.get_actor(_RECORDER)))


@pytest.mark.slow
def test_two_learners_count_every_episode_once_across_an_actor_restart(local_ray, tmp_path) -> None:
    """Issue 43 item 6: the source's actor is killed between two updates of 2 learners and restarts from a
    checkpoint that predates the last update. The learners' clients resend that update's parts, the
    restarted actor joins its episodes again (it lost them) and reports none twice: ``plr/episodes_scored``,
    summed over the learners and the updates, counts every completed episode exactly once."""
    recorder = ray.remote(_Recorder).options(name=_RECORDER).remote()
    actor = host_level_source(
        LevelSampler(range(30), strategy="value_l1", seed=0),
        checkpoint_dir=tmp_path,
        checkpoint_every=1_000_000,  # checkpoints only when asked: the restart loses a whole update
        checkpoint_interval=0,
    )
    # an actor restart takes over 30 s on 2 loaded cores: the env runners' and learners' clients wait
    source = RemoteLevelSource(actor, prefetch=2, retry_timeout=300)
    config = (
        PPOConfig()
        .env_runners(
            num_env_runners=2,
            num_envs_per_env_runner=2,
            rollout_fragment_length=25,
            num_cpus_per_env_runner=0.5,
        )
        .training(train_batch_size=200, minibatch_size=100, num_epochs=1, lr=3e-4)
        .learners(num_learners=2, num_cpus_per_learner=0.5)
        .debugging(seed=0)
    )
    add_plr(config, source, make_doorkey_varied, learner_class=RestartRecordingLearner)
    algo = config.build_algo()
    try:
        results = [algo.train()]
        source.checkpoint()  # holds the first update (and the parts still waiting)
        held = source.actor_stats()
        results.append(algo.train())
        before = source.actor_stats()
        ray.kill(actor, no_restart=False)
        deadline = time.monotonic() + 300  # ray.kill does not wait: a call may still reach the old actor
        while source.actor_stats()["restores"] < 1:
            assert time.monotonic() < deadline, "the actor did not restart"
            time.sleep(0.1)
        results.append(algo.train())  # the learners' first pushes meet the restarted actor: they resend
    finally:
        algo.stop()
    updates = ray.get(recorder.call.remote("updates"))
    assert len(updates) == 6  # 2 learners x 3 updates
    episodes, _ = _episodes_from_updates(updates)
    completed = 0
    for parts in episodes.values():
        parts.sort(key=lambda p: p[0])
        assert all(a[1] == b[0] for a, b in zip(parts, parts[1:])), "parts overlap or miss steps"
        completed += parts[0][0] == 0 and parts[-1][2]
    stats = source.actor_stats()
    assert stats["restores"] == 1 and stats["parts_unscored"] == 0 and completed >= 6
    # the second update joined episodes that the checkpoint does not hold: the restarted actor joined them
    # again from the resent parts, and its source holds every completed episode once
    assert before["episodes_joined"] > held["episodes_joined"], (held, before)
    assert stats["episodes_joined"] == stats["scores_absorbed"] == completed, (stats, completed)
    metrics = [plr_metrics(r) for r in results]
    assert all(m["plr/chunks_unscored"] == 0 for m in metrics), metrics
    assert sum(m["plr/episodes_scored"] for m in metrics) == completed  # each once, restart or not


@pytest.mark.slow
def test_learnability_outcomes_reach_the_source_from_the_env_runners(local_ray) -> None:
    FRONT.clear()
    BACK.clear()
    actor = host_level_source(RecordingSampler(range(30), strategy="learnability", seed=0))
    source = RecordingClient(actor, prefetch=2, push_every=1)
    config = (
        PPOConfig()
        .env_runners(num_env_runners=2, num_envs_per_env_runner=2, rollout_fragment_length=50)
        .training(train_batch_size=400, minibatch_size=200, num_epochs=1)
        .learners(num_learners=0)
        .debugging(seed=0)
    )
    add_plr(config, source, make_doorkey, learner_class=RecordingLearner)
    algo = config.build_algo()
    try:
        result = algo.train()
    finally:
        algo.stop()
    stored = ray.get(actor.call.remote("stored"))
    # every completed episode's outcome (return > 0: MiniGrid's success), chunks stitched by episode id
    returns: dict[str, float] = {}
    outcomes = []
    for chunk in FRONT[0]:
        returns[chunk["id"]] = returns.get(chunk["id"], 0.0) + chunk["return"]
        if chunk["done"]:
            outcomes.append((chunk["level"], 1.0 if returns[chunk["id"]] > 0 else 0.0))
    assert len(outcomes) >= 4
    got = [(level, score) for levels, scores in stored for level, score in zip(levels, scores)]
    assert sorted(got) == sorted(outcomes)
    assert all(len(levels) == 1 for levels, _ in stored)  # one report per episode, from the env side
    assert "plr/episodes_scored" not in plr_metrics(result)  # the learner scores nothing
    assert plr_metrics(result)["plr/num_seen"] == ray.get(actor.call.remote("num_seen"))


def test_plr_env_plays_the_sources_levels_and_reports_outcomes() -> None:
    sampler = LevelSampler(range(5), strategy="learnability", seed=0)
    env = PLREnv(make_doorkey({}), sampler, env_index=3)
    _, info = env.reset(seed=999)
    assert info["level"] in range(5) and info["plr_env"] == 3 and env.level == info["level"]
    assert sampler.num_seen == 0
    done = False
    while not done:
        _, _, terminated, truncated, info = env.step(env.action_space.sample())
        assert info["level"] == env.level and info["plr_env"] == 3
        done = terminated or truncated
    assert sampler.has_scores  # the outcome reached the source from the env side


def test_plr_env_sends_the_outcomes_its_client_buffered_when_it_closes(local_ray) -> None:
    """A RemoteLevelSource buffers outcomes (pushed with its next refill, or after prefetch_seconds): an
    env runner that stops closes its envs, and PLREnv.close pushes them, so they are not lost."""
    client = RemoteLevelSource(host_level_source(LevelSampler(range(5), strategy="learnability", seed=0)))
    env = PLREnv(make_doorkey({}), client, env_index=0)
    env.reset()
    done = False
    while not done:
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        done = terminated or truncated
    stats = client.actor.stats  # straight to the actor: client.actor_stats() would push first
    assert ray.get(stats.remote())["scores_absorbed"] == 0  # buffered in the client
    env.close()
    assert ray.get(stats.remote())["scores_absorbed"] == 1  # Ray runs one caller's calls in order


def test_bad_input_names_the_argument() -> None:
    sampler = LevelSampler(range(5), seed=0)
    with pytest.raises(ValueError, match="env_index"):
        PLREnv(make_doorkey({}), sampler, env_index=-1)
    with pytest.raises(TypeError, match="source"):
        PLREnv(make_doorkey({}), object())
    with pytest.raises(ValueError, match="policy"):
        PLREnv(make_doorkey({}), LevelSampler(range(5), strategy="policy_entropy"))
    with pytest.raises(TypeError, match="make_env"):
        PLREnvCreator(42, sampler)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="use 'plr_gym/procgen-coinrun-v0'"):
        PLREnvCreator("procgen:procgen-coinrun-v0", sampler)
    with pytest.raises(TypeError, match="config"):
        add_plr(object(), sampler, make_doorkey)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="make_env"):
        add_plr(PPOConfig(), sampler)
    with pytest.raises(ValueError, match="multi"):
        add_plr(PPOConfig().multi_agent(policies={"a", "b"}, policy_mapping_fn=lambda *a, **k: "a"), sampler)
    with pytest.raises(TypeError, match="learner_class"):
        add_plr(PPOConfig(), sampler, make_doorkey, learner_class=object)
    with pytest.raises(ValueError, match="source= or LevelSampler"):
        plr_ppo_config(make_doorkey, source=sampler, levels=range(3))
    with pytest.raises(ValueError, match="num_learners=2 needs a source shared by the learners"):
        add_plr(PPOConfig().learners(num_learners=2), LevelSampler(range(5), strategy="gae"), make_doorkey)


# ------------------------------------------------------------------------------------------------ scorer unit
def _mark(eid, t_started, rewards, level, done, terminated=None):
    rewards = np.asarray(rewards, dtype=np.float64)
    return {
        "id": eid,
        "t_started": t_started,
        "len": len(rewards),
        "terminated": done if terminated is None else terminated,
        "done": done,
        "level": level,
        "env": 0,
        "rewards": rewards,
    }


def _scorer(strategy, part_timeout=600.0):
    from plr_gym.rllib import PLRGeneralAdvantageEstimation

    sampler = LevelSampler(range(10), strategy=strategy, seed=0)
    return PLRGeneralAdvantageEstimation(gamma=0.9, lambda_=0.95, source=sampler, part_timeout=part_timeout)


def _levels_scores(scored):
    return [level for level, _, _ in scored], [score for _, score, _ in scored]


def test_scorer_stitches_chunks_in_any_order_and_uses_the_bootstrap_values() -> None:
    from plr_gym.scoring import EpisodeData, one_step_td_error

    scorer = _scorer("one_step_td_error")
    # batch 1: episode a (level 4) cut after 3 steps; episode b (level 7) terminates after 2 steps; the
    # end of episode c (level 2), whose start another learner holds. Each chunk has one more value row:
    # RLlib's appended bootstrap step.
    marks1 = [
        _mark("a", 0, [0.0, 0.0, 0.0], 4, done=False),
        _mark("b", 0, [0.0, 1.0], 7, done=True),
        _mark("c", 1, [1.0], 2, done=True),
    ]
    values1 = np.array([0.1, 0.2, 0.3, 0.35, 0.5, 0.6, 0.65, 0.9, 0.0])
    adv1 = np.array([0.5, -0.5, 1.0, 0.0, 2.0, -1.0, 0.0, 3.0, 0.0])
    levels, scores = _levels_scores(scorer._score(marks1, values1, adv1))
    want_b = one_step_td_error(
        EpisodeData(rewards=np.array([0.0, 1.0]), values=np.array([0.5, 0.6]), next_value=0.0, gamma=0.9)
    )
    assert levels == [7] and scores == pytest.approx([want_b])  # terminated: V(s_T) = 0, not 0.65
    assert scorer.joiner.num_pending == 2  # a and c wait for their other parts
    # batch 2: a continues (truncated at the end: bootstrap with its last value row) and ends; c's start
    # arrives: both complete, c scored over its 2 steps
    marks2 = [_mark("a", 3, [0.0, 1.0], 4, done=True, terminated=False), _mark("c", 0, [0.0], 2, done=False)]
    values2 = np.array([0.4, 0.45, 0.7, 0.8, 0.85])
    adv2 = np.array([0.25, 0.75, 0.0, -0.5, 0.0])
    scored = scorer._score(marks2, values2, adv2)
    want_a = one_step_td_error(
        EpisodeData(
            rewards=np.array([0.0, 0.0, 0.0, 0.0, 1.0]),
            values=np.array([0.1, 0.2, 0.3, 0.4, 0.45]),
            next_values=np.array([0.2, 0.3, 0.35, 0.45, 0.7]),  # the cut bootstraps with V = 0.35
            gamma=0.9,
        )
    )
    want_c = one_step_td_error(
        EpisodeData(
            rewards=np.array([0.0, 1.0]),
            values=np.array([0.8, 0.9]),
            next_values=np.array([0.85, 0.0]),  # c's first part bootstraps with its own next value
            gamma=0.9,
        )
    )
    assert sorted(scored) == sorted([(4, pytest.approx(want_a), "a"), (2, pytest.approx(want_c), "c")])
    assert [len(a) for a in scorer.last_advantages] == [2, 1]
    assert (scorer.last_unscored, scorer.chunks_unscored, scorer.joiner.num_pending) == (0, 0, 0)


def test_scorer_value_l1_is_the_step_weighted_mean_over_chunks_and_max_mc_keeps_best_returns() -> None:
    scorer = _scorer("value_l1")
    scorer._score([_mark("a", 0, [0.0, 0.0], 3, done=False)], np.zeros(3), np.array([1.0, -3.0, 9.0]))
    scored = scorer._score([_mark("a", 2, [1.0], 3, done=True)], np.zeros(2), np.array([2.0, 9.0]))
    assert _levels_scores(scored) == ([3], [pytest.approx((1 + 3 + 2) / 3)])

    scorer = _scorer("max_mc")
    values = np.array([0.25, 0.5, 0.0])
    _, first = _levels_scores(scorer._score([_mark("x", 0, [0.0, 1.0], 5, done=True)], values, np.zeros(3)))
    _, second = _levels_scores(scorer._score([_mark("y", 0, [0.0, 0.0], 5, done=True)], values, np.zeros(3)))
    assert first == second == pytest.approx([1.0 - 0.375])  # the best return on level 5 stays 1.0


def test_scorer_gives_up_episodes_whose_parts_stop_arriving() -> None:
    scorer = _scorer("value_l1", part_timeout=0.0)  # any episode still open at the next batch expires
    scorer._score([_mark("a", 0, [0.0], 1, done=False)], np.zeros(2), np.ones(2))
    scorer._score([_mark("z", 0, [0.0], 2, done=True)], np.zeros(2), np.ones(2))
    assert (scorer.last_unscored, scorer.chunks_unscored) == (1, 1)  # a's first chunk, given up
    levels, _ = _levels_scores(scorer._score([_mark("a", 1, [0.0], 1, done=True)], np.zeros(2), np.ones(2)))
    assert levels == []  # too late: its first chunk was dropped, so the rest waits in vain...
    scorer._score([_mark("z2", 0, [0.0], 2, done=True)], np.zeros(2), np.ones(2))
    assert (scorer.last_unscored, scorer.chunks_unscored) == (1, 2)  # ... and is counted when it expires


def test_a_learner_whose_parts_are_refused_still_meets_the_others_at_the_barrier(monkeypatch) -> None:
    """With several learners each one waits at a barrier after sending its parts. A learner whose send
    fails (a part refused by the actor, the actor gone) must reach the barrier before raising, or the other
    learners wait there until the process group's timeout instead of the run failing at once."""
    import plr_gym.rllib as plr_rllib

    class SharedSource(LevelSampler):  # stands in for a RemoteLevelSource: joins in "the actor"
        def update_parts(self, parts):
            self.sent = list(parts)

        def take_joined(self):
            raise KeyError("level 99 is not one of the sampler's levels")

    source = SharedSource(range(10), strategy="value_l1", seed=0)
    scorer = plr_rllib.PLRGeneralAdvantageEstimation(gamma=0.9, lambda_=0.95, source=source)
    assert scorer.joiner is None  # parts go to the shared source
    met = []
    monkeypatch.setattr(plr_rllib, "_sync_learners", lambda: met.append(True))
    with pytest.raises(KeyError, match="level 99"):
        scorer._score([_mark("a", 0, [0.0], 99, done=True)], np.zeros(2), np.ones(2))
    assert met == [True] and len(source.sent) == 1


_DEAD_LEARNER = """
import datetime, os, socket
import torch.distributed as dist
from plr_gym.rllib import _sync_learners
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
pid = os.fork()
rank = 1 if pid == 0 else 0
dist.init_process_group(
    "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2,
    timeout=datetime.timedelta(seconds=60),
)
if rank == 1:
    os._exit(0)  # this learner dies before the barrier
os.waitpid(pid, 0)
try:
    _sync_learners()
except RuntimeError as exc:
    print("RAISED:", exc)
"""


def test_a_dead_learner_is_named_when_the_barrier_fails() -> None:
    """Two gloo ranks as RLlib's learners are; one dies; the other's barrier after sending its parts fails
    with an error that says a learner died (torch's says only that a connection closed)."""
    import subprocess
    import sys
    from pathlib import Path

    src = str(Path(__file__).resolve().parents[1] / "src")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p)}
    out = subprocess.run(
        [sys.executable, "-c", _DEAD_LEARNER], capture_output=True, text=True, timeout=300, env=env
    )
    assert "RAISED: PLR scoring: learner 0 of 2 could not meet the other learners" in out.stdout, out
    assert "another learner of this run has most likely died" in out.stdout, out
