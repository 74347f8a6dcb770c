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
    def __call__(self, *, rl_module, batch, episodes, **kwargs):
        import torch

        module_batch = batch[DEFAULT_MODULE_ID]
        with torch.no_grad():
            values = rl_module[DEFAULT_MODULE_ID].compute_values(module_batch)
        BACK.append(
            {
                "values": values.numpy().astype(np.float64),
                "targets": module_batch[Postprocessing.VALUE_TARGETS].numpy().astype(np.float64),
                "advantages": module_batch[Postprocessing.ADVANTAGES].numpy().astype(np.float64),
                "mask": module_batch[Columns.LOSS_MASK].numpy(),
            }
        )
        return batch


class RecordingLearner(PLRPPOTorchLearner):
    def build(self) -> None:
        super().build()
        names = [type(c).__name__ for c in self._learner_connector.connectors]
        # RLlib's GAE replaced by PLR's (runs once), the episode marks before RLlib's one-step extension
        assert "GeneralAdvantageEstimation" not in names and names.count("PLRGeneralAdvantageEstimation") == 1
        assert names.index("_EpisodeMarks") < names.index("AddOneTsToEpisodesAndTruncate")
        self._learner_connector.prepend(_Front())
        self._learner_connector.append(_Back())


# ---------------------------------------------------------------------------------------- recording source
class RecordingSampler(LevelSampler):
    """The hosted source: a LevelSampler that keeps every score batch it stored and the hand-outs."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.stored: list[tuple[list[int], list[float]]] = []
        self.handed: list[tuple[int, int, int]] = []  # (process, env index given to the client, level)

    def update_batch(self, levels, scores):
        super().update_batch(levels, scores)
        self.stored.append(([int(x) for x in levels], [float(x) for x in scores]))

    def record_handout(self, pid, envs, levels):
        self.handed.extend((pid, int(e), int(x)) for e, x in zip(envs, levels))


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
    with pytest.warns(UserWarning, match=r"num_learners=2: .* plr/chunks_unscored"):
        add_plr(PPOConfig().learners(num_learners=2), sampler, make_doorkey)


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


def _scorer(strategy):
    from plr_gym.rllib import PLRGeneralAdvantageEstimation

    sampler = LevelSampler(range(10), strategy=strategy, seed=0)
    return PLRGeneralAdvantageEstimation(gamma=0.9, lambda_=0.95, source=sampler)


def test_scorer_stitches_chunks_drops_unseen_starts_and_uses_the_bootstrap_values() -> None:
    from plr_gym.scoring import EpisodeData, one_step_td_error

    scorer = _scorer("one_step_td_error")
    # batch 1: episode a (level 4) cut after 3 steps; episode b (level 7) terminates after 2 steps.
    # Each chunk has one more value row: RLlib's appended bootstrap step.
    marks1 = [_mark("a", 0, [0.0, 0.0, 0.0], 4, done=False), _mark("b", 0, [0.0, 1.0], 7, done=True)]
    values1 = np.array([0.1, 0.2, 0.3, 0.35, 0.5, 0.6, 0.65])
    adv1 = np.array([0.5, -0.5, 1.0, 0.0, 2.0, -1.0, 0.0])
    levels, scores = scorer._score(marks1, values1, adv1)
    want_b = one_step_td_error(
        EpisodeData(rewards=np.array([0.0, 1.0]), values=np.array([0.5, 0.6]), next_value=0.0, gamma=0.9)
    )
    assert levels == [7] and scores == pytest.approx([want_b])  # terminated: V(s_T) = 0, not 0.65
    # batch 2: a continues (truncated at the end: bootstrap with its last value row) and ends;
    # c's start was never seen: dropped
    marks2 = [
        _mark("a", 3, [0.0, 1.0], 4, done=True, terminated=False),
        _mark("c", 5, [1.0], 2, done=True),
    ]
    values2 = np.array([0.4, 0.45, 0.7, 0.9, 0.0])
    adv2 = np.array([0.25, 0.75, 0.0, 3.0, 0.0])
    levels, scores = scorer._score(marks2, values2, adv2)
    want_a = one_step_td_error(
        EpisodeData(
            rewards=np.array([0.0, 0.0, 0.0, 0.0, 1.0]),
            values=np.array([0.1, 0.2, 0.3, 0.4, 0.45]),
            next_values=np.array([0.2, 0.3, 0.35, 0.45, 0.7]),  # the cut bootstraps with V = 0.35
            gamma=0.9,
        )
    )
    assert levels == [4] and scores == pytest.approx([want_a])
    assert [len(a) for a in scorer.last_advantages] == [2, 1]
    assert (scorer.last_unscored, scorer.chunks_unscored) == (1, 1)  # c's chunk, counted


def test_scorer_value_l1_is_the_step_weighted_mean_over_chunks_and_max_mc_keeps_best_returns() -> None:
    scorer = _scorer("value_l1")
    scorer._score([_mark("a", 0, [0.0, 0.0], 3, done=False)], np.zeros(3), np.array([1.0, -3.0, 9.0]))
    levels, scores = scorer._score([_mark("a", 2, [1.0], 3, done=True)], np.zeros(2), np.array([2.0, 9.0]))
    assert levels == [3] and scores == pytest.approx([(1 + 3 + 2) / 3])

    scorer = _scorer("max_mc")
    values = np.array([0.25, 0.5, 0.0])
    _, first = scorer._score([_mark("x", 0, [0.0, 1.0], 5, done=True)], values, np.zeros(3))
    _, second = scorer._score([_mark("y", 0, [0.0, 0.0], 5, done=True)], values, np.zeros(3))
    assert first == second == pytest.approx([1.0 - 0.375])  # the best return on level 5 stays 1.0


def test_scorer_forgets_episodes_never_continued() -> None:
    scorer = _scorer("value_l1")
    scorer._score([_mark("a", 0, [0.0], 1, done=False)], np.zeros(2), np.ones(2))
    for k in range(scorer.max_open_updates + 1):
        scorer._score([_mark(f"z{k}", 0, [0.0], 2, done=True)], np.zeros(2), np.ones(2))
    assert scorer.chunks_unscored == 1  # a's first chunk, given up when it expired
    levels, _ = scorer._score([_mark("a", 1, [0.0], 1, done=True)], np.zeros(2), np.ones(2))
    assert levels == []  # too late: its first chunk was dropped, so the rest is not scored either
    assert (scorer.last_unscored, scorer.chunks_unscored) == (1, 2)
