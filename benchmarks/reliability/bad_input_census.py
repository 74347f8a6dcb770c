"""Bad-input census: every public constructor and loader of plr_gym tried with bad input.

Each case calls one public entry point with one bad argument (or one crafted checkpoint) and is
classified as

- **clear error**: ``ValueError``/``TypeError``/``KeyError``/``IndexError``/``FileNotFoundError`` (or
  ``RuntimeError`` for a call made at the wrong time) whose message names the argument (or the
  checkpoint member) that is wrong;
- **unclear error**: any other exception, or a message that does not name it;
- **silently accepted**: no exception at all.

A case still running after ``CASE_SECONDS`` is stopped and counted as unclear (it would hang).

For loaders the census also checks that a refused load left the live object unchanged ("corrupted"
counts refusals that changed it anyway).

Run: ``python benchmarks/reliability/bad_input_census.py`` (about a minute on one core). ``--json PATH`` also
writes the per-case results.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import signal
import sys
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

warnings.filterwarnings("ignore")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "tests"))
sys.path.insert(0, str(HERE.parent / "common"))  # census_newer: issue 43's newer surfaces

import gymnasium as gym  # noqa: E402
from gymnasium import spaces  # noqa: E402
from stable_baselines3.common.env_util import make_vec_env  # noqa: E402

import census_newer  # noqa: E402
import reliability_objects as ro  # noqa: E402
from plr_gym import (  # noqa: E402
    PERDQN,
    LevelBuffer,
    LevelSampler,
    LevelWrapper,
    OffPolicyPLRCallback,
    PLRCallback,
    PrioritizedLevelReplay,
    PrioritizedReplayBuffer,
)
from plr_gym._levels import load_values, save_values  # noqa: E402
from plr_gym.checkpoint import load_npz, save_npz  # noqa: E402
from plr_gym.evaluation import evaluate_levels, iqm, summarize  # noqa: E402
from plr_gym.scoring import EpisodeScorer  # noqa: E402
from plr_gym.vector import PrioritizedLevelReplay as VectorPLR  # noqa: E402

CLEAR = (ValueError, TypeError, KeyError, IndexError, FileNotFoundError, RuntimeError)
#: A case still running after this many seconds is stopped and counted as unclear (it would hang).
CASE_SECONDS = 120.0


class _Hung(BaseException):
    pass


def _stop(signum: int, frame: Any) -> None:
    raise _Hung


signal.signal(signal.SIGALRM, _stop)
results: list[dict[str, Any]] = []


def attempt(
    component: str,
    name: str,
    fn: Callable[[], Any],
    keyword: str,
    check: Callable[[], bool] | None = None,
    on_purpose: str | None = None,
) -> None:
    """Run one bad-input case; ``keyword`` must appear in a clear error's message. ``on_purpose``: why the
    input is accepted on purpose (documented): then an accept counts as such, not as silent."""
    row: dict[str, Any] = {"component": component, "case": name}
    signal.setitimer(signal.ITIMER_REAL, CASE_SECONDS)
    try:
        try:
            fn()
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except _Hung:
        row["outcome"] = "unclear"
        row["message"] = f"still running after {CASE_SECONDS} s (stopped)"
    except CLEAR as exc:
        msg = str(exc)
        row["outcome"] = "clear" if keyword.lower() in msg.lower() else "unclear"
        row["message"] = f"{type(exc).__name__}: {msg[:160]}"
    except Exception as exc:
        row["outcome"] = "unclear"
        row["message"] = f"{type(exc).__name__}: {str(exc)[:160]}"
    else:
        row["outcome"] = "accepted" if on_purpose is None else "on_purpose"
        row["message"] = on_purpose or ""
    if check is not None and row["outcome"] not in ("accepted", "on_purpose") and not check():
        row["corrupted"] = True
    results.append(row)


NAN, INF = math.nan, math.inf
UNIT = [True, "0.5", None, NAN, INF, -0.1, 1.5]  # a number in [0, 1]
POSITIVE = [True, "1", None, NAN, INF, 0.0, -1.0]  # a number > 0
POS_INT = [True, 1.5, "3", None, 0, -2]  # an int >= 1
SEED = [True, 1.5, "3", -1]  # an int >= 0 or None


def constructor_cases(component: str, build: Callable[..., Any], params: dict[str, list[Any]]) -> None:
    for param, values in params.items():
        for value in values:
            attempt(component, f"{param}={value!r}", lambda p=param, v=value: build(**{p: v}), param)


def main() -> None:
    tmp = Path(tempfile.mkdtemp())

    # ---------------------------------------------------------------- LevelSampler
    def sampler(**kw: Any) -> LevelSampler:
        return LevelSampler(**{"levels": range(10), **kw})

    constructor_cases(
        "LevelSampler",
        sampler,
        {
            "levels": [
                [],
                [1, 1],
                [1.5, 2.0],
                "abc",
                5,
                [[1, 2]],
                [True, False],
                np.array([2**63], dtype=np.uint64),
                range(2**63 - 2, 2**63 + 2),  # would wrap to negative ids
                [-3, 1],
                range(-1, 3),
                np.ma.masked_array([1, 2], mask=[True, False]),
                [0, NAN],
                range(10**15),  # beyond memory
            ],
            "strategy": ["nope", None, 3],
            "score_transform": ["nope", None],
            "staleness_transform": ["nope"],
            "replay_schedule": ["sometimes"],
            "temperature": POSITIVE,
            "staleness_temperature": POSITIVE,
            "staleness_coef": UNIT,
            "replay_prob": UNIT,
            "min_seen_ratio": UNIT,
            "alpha": [*UNIT, 0.0],
            "eps": UNIT,
            "seed": SEED,
        },
    )
    s = sampler(seed=0)
    for name, fn, kw in [
        ("update(level not held)", lambda: s.update(99, 1.0), "level"),
        ("update(level=1.7)", lambda: s.update(1.7, 1.0), "level"),
        ("update(level=True)", lambda: s.update(True, 1.0), "level"),
        ("update(score=nan)", lambda: s.update(1, NAN), "score"),
        ("update(score='x')", lambda: s.update(1, "x"), "score"),
        ("update_batch(lengths differ)", lambda: s.update_batch([1, 2], [0.5]), "levels"),
        (
            "update_batch(uint64 2**63)",
            lambda: s.update_batch(np.array([2**63], dtype=np.uint64), [1.0]),
            "level",
        ),
        ("sample(n=-1)", lambda: s.sample(-1), "n"),
        ("sample(n=2.5)", lambda: s.sample(2.5), "n"),
        ("sample(n=10**15)", lambda: s.sample(10**15), "n"),
        ("update(score=10**400)", lambda: s.update(1, 10**400), "score"),
        ("update(level=nan)", lambda: s.update(NAN, 1.0), "level"),
        (
            "update_batch(masked levels)",
            lambda: s.update_batch(np.ma.masked_array([1, 2], mask=[True, False]), [1.0, 2.0]),
            "levels",
        ),
        (
            "update_batch(masked scores)",
            lambda: s.update_batch([1, 2], np.ma.masked_array([1.0, 2.0], mask=[False, True])),
            "scores",
        ),
    ]:
        s_before = s.state_dict()
        attempt("LevelSampler", name, fn, kw, lambda st=s_before: ro.same(s.state_dict(), st))

    # ---------------------------------------------------------------- LevelBuffer
    constructor_cases(
        "LevelBuffer",
        lambda **kw: LevelBuffer(**{"capacity": 4, **kw}),
        {
            "capacity": POS_INT,
            "replay_prob": UNIT,
            "staleness_coef": UNIT,
            "min_fill_ratio": UNIT,
            "score_transform": ["nope", None],
            "temperature": POSITIVE,
            "topk": POS_INT,
            "seed": SEED,
        },
    )
    b = LevelBuffer(capacity=2, seed=0)
    b.insert(1, 0.5)
    for name, fn, kw in [
        ("insert(score=nan)", lambda: b.insert(2, NAN), "score"),
        ("insert(extra=3)", lambda: b.insert(2, 1.0, extra=3), "extra"),  # type: ignore[arg-type]
        ("insert(unhashable level)", lambda: b.insert({1, 2}, 1.0), "level"),
        ("update(index=5)", lambda: b.update(5, 1.0), "index"),
        ("update(index=True)", lambda: b.update(True, 1.0), "index"),
        ("sample_replay_levels(n=-1)", lambda: b.sample_replay_levels(-1), "n"),
        ("sample_replay_levels(n=10**15)", lambda: b.sample_replay_levels(10**15), "n"),
        ("insert(level=nan)", lambda: b.insert(NAN, 1.0), "nan"),
        ("insert(array level with NaN)", lambda: b.insert(np.array([1.0, NAN]), 1.0), "nan"),
        ("insert(masked level)", lambda: b.insert(np.ma.masked_array([1, 2]), 1.0), "masked"),
        ("insert(score=10**400)", lambda: b.insert(2, 10**400), "score"),
        ("capacity=10**15", lambda: LevelBuffer(10**15), "capacity"),
        ("capacity=2**70", lambda: LevelBuffer(2**70), "capacity"),
    ]:
        b_before = b.state_dict()
        attempt("LevelBuffer", name, fn, kw, lambda st=b_before: ro.same(b.state_dict(), st))

    # ---------------------------------------------------------------- EpisodeScorer
    constructor_cases(
        "EpisodeScorer",
        lambda **kw: EpisodeScorer(**{"target": sampler(), "n_envs": 2, **kw}),
        {
            "n_envs": POS_INT,
            "gamma": UNIT,
            "strategy": ["nope"],
            "partial_episodes": ["merge", None],
            "target": [None, 3],
        },
    )
    sc = EpisodeScorer(sampler(), n_envs=1)
    good = dict(
        levels=np.zeros((3, 1), dtype=np.int64),
        episode_starts=np.array([[1], [0], [0]], dtype=bool),
        dones=np.array([True]),
        rewards=np.zeros((3, 1)),
        values=np.zeros((3, 1)),
        advantages=np.zeros((3, 1)),
    )
    for field, value, kw in [
        ("rewards", np.full((3, 1), NAN), "rewards"),
        ("values", np.zeros((2, 1)), "values"),
        ("advantages", np.full((3, 1), INF), "advantages"),
        ("levels", np.zeros((3, 2)), "levels"),
        ("dones", np.zeros(5, dtype=bool), "dones"),
        ("last_values", np.array([NAN]), "last_values"),
        ("levels", np.array([[0], [1], [0]]), "level"),
    ]:
        attempt(
            "EpisodeScorer",
            f"process_rollout({field} bad)",
            lambda f=field, v=value: sc.process_rollout(**{**good, f: v}),
            kw,
        )

    # ---------------------------------------------------------------- LevelWrapper and the wrappers
    constructor_cases(
        "LevelWrapper",
        lambda **kw: LevelWrapper(gym.make("CartPole-v1"), **kw),
        {"max_checked_levels": [True, -1, 1.5, "3"]},
    )
    w = LevelWrapper(gym.make("CartPole-v1"))
    attempt("LevelWrapper", "reset(options level=True)", lambda: w.reset(options={"level": True}), "level")
    attempt(
        "LevelWrapper",
        "reset(level 1.7, env ignores options)",
        lambda: w.reset(options={"level": 1.7}),
        "level",
    )
    attempt(
        "LevelWrapper",
        "reset(level 'easy', env ignores options)",
        lambda: w.reset(options={"level": "easy"}),
        "level",
    )
    attempt("LevelWrapper", "next_level=True", lambda: setattr(w, "next_level", True), "level")
    attempt("LevelWrapper", "next_level=-1", lambda: setattr(w, "next_level", -1), "next_level")
    attempt("LevelWrapper", "next_level=2**63", lambda: setattr(w, "next_level", 2**63), "next_level")
    attempt("LevelWrapper", "reset(options level -1)", lambda: w.reset(options={"level": -1}), "level")
    attempt("LevelWrapper", "reset(seed=-1)", lambda: w.reset(seed=-1), "seed")
    attempt("LevelWrapper", "reset(options level NaN)", lambda: w.reset(options={"level": NAN}), "level")
    for method in ("reset", "step"):
        attempt(
            "LevelWrapper",
            f"env {method}() returns a list as info",
            lambda m=method: _list_info_env(m),
            "info",
        )

    venv = make_vec_env(lambda: LevelWrapper(gym.make("CartPole-v1")), n_envs=2, seed=0)
    raw_venv = make_vec_env(lambda: gym.make("CartPole-v1"), n_envs=2, seed=0)
    for name, fn, kw in [
        ("no levels", lambda: PrioritizedLevelReplay(venv), "levels"),
        (
            "sampler and kwargs",
            lambda: PrioritizedLevelReplay(venv, sampler=sampler(), levels=range(3)),
            "sampler",
        ),
        ("sampler=3", lambda: PrioritizedLevelReplay(venv, sampler=3), "sampler"),  # type: ignore[arg-type]
        (
            "unknown kwarg",
            lambda: PrioritizedLevelReplay(venv, levels=range(3), tempreature=1.0),
            "tempreature",
        ),
        (
            "sub-envs without LevelWrapper",
            lambda: PrioritizedLevelReplay(raw_venv, levels=range(3)),
            "LevelWrapper",
        ),
        (
            "buffer without generator",
            lambda: PrioritizedLevelReplay(venv, buffer=LevelBuffer(4)),
            "generator",
        ),
        ("buffer=3", lambda: PrioritizedLevelReplay(venv, buffer=3, generator=lambda r: 1), "buffer"),  # type: ignore[arg-type]
        (
            "generator without buffer",
            lambda: PrioritizedLevelReplay(venv, levels=range(3), generator=lambda r: 1),
            "buffer",
        ),
        (
            "n_mutations=0",
            lambda: PrioritizedLevelReplay(venv, buffer=LevelBuffer(4), generator=lambda r: 1, n_mutations=0),
            "n_mutations",
        ),
        (
            "buffer seed=-1",
            lambda: PrioritizedLevelReplay(venv, buffer=LevelBuffer(4), generator=lambda r: 1, seed=-1),
            "seed",
        ),
        (
            "buffer strategy=random",
            lambda: PrioritizedLevelReplay(
                venv, buffer=LevelBuffer(4), generator=lambda r: 1, strategy="random"
            ),
            "strategy",
        ),
        (
            "set_options(level)",
            lambda: PrioritizedLevelReplay(venv, levels=range(3)).set_options({"level": 3}),
            "level",
        ),
    ]:
        attempt("PrioritizedLevelReplay (SB3)", name, fn, kw)

    def gen_none_reset() -> None:
        v = PrioritizedLevelReplay(venv, buffer=LevelBuffer(4, seed=0), generator=lambda r: None)
        v.reset()

    attempt("PrioritizedLevelReplay (SB3)", "generator returns None", gen_none_reset, "generator")

    envs = gym.vector.SyncVectorEnv(
        [lambda: LevelWrapper(gym.make("CartPole-v1", max_episode_steps=5)) for _ in range(2)]
    )
    for name, fn, kw in [
        ("no levels", lambda: VectorPLR(envs), "levels"),
        (
            "reset(options level)",
            lambda: VectorPLR(envs, levels=range(3)).reset(options={"level": 1}),
            "level",
        ),
        (
            "reset(reset_mask ints)",
            lambda: VectorPLR(envs, levels=range(3)).reset(options={"reset_mask": np.ones(2)}),
            "reset_mask",
        ),
    ]:
        attempt("PrioritizedLevelReplay (Gymnasium)", name, fn, kw)
    vplr = VectorPLR(envs, levels=range(3), seed=0)
    vplr.reset()
    for _ in range(4):
        vplr.step(np.zeros(2, dtype=np.int64))
    ok = dict(rewards=np.zeros((4, 2)), values=np.zeros((4, 2)), advantages=np.zeros((4, 2)))
    for name, kwargs, kw in [
        ("fewer rows than steps", {**ok, "rewards": np.zeros((3, 2))}, "rows"),
        ("values NaN", {**ok, "values": np.full((4, 2), NAN)}, "values"),
        ("gamma=5", {**ok, "gamma": 5}, "gamma"),
        ("gamma=True", {**ok, "gamma": True}, "gamma"),
        ("rewards 1-D", {**ok, "rewards": np.zeros(4)}, "rewards"),
    ]:
        attempt(
            "PrioritizedLevelReplay (Gymnasium)",
            f"report_rollout({name})",
            lambda k=kwargs: vplr.report_rollout(**k),
            kw,
        )

    constructor_cases(
        "PLRCallback",
        PLRCallback,
        {"save_freq": POS_INT, "stats_every": [True, 0, 1.5]},
    )
    attempt("PLRCallback", "load before training", lambda: PLRCallback().load(tmp), "resume_from")

    # ---------------------------------------------------------------- PER
    def per(**kw: Any) -> PrioritizedReplayBuffer:
        args = {"buffer_size": 16, "observation_space": spaces.Box(-1, 1, (3,)), **kw}
        return PrioritizedReplayBuffer(
            args.pop("buffer_size"),
            args.pop("observation_space"),
            spaces.Discrete(2),
            **{"device": "cpu", **args},
        )

    constructor_cases(
        "PrioritizedReplayBuffer",
        per,
        {
            "prioritization": ["nope"],
            "alpha": [True, "0.6", NAN, -1.0],
            "beta": [v for v in UNIT if v is not None],  # None means the prioritization's default
            "eps": [True, NAN, -1.0],
            "n_steps": POS_INT,
            "gamma": UNIT,
            "recent_data_ratio": UNIT,
            "rank_refresh_interval": POS_INT,
            "seed": SEED,
            "optimize_memory_usage": [True],
        },
    )
    attempt(
        "PrioritizedReplayBuffer",
        "recent_data_ratio without steps",
        lambda: per(recent_data_ratio=0.5),
        "recent_data_steps",
    )
    pb = per(n_envs=1, seed=0)
    o = np.zeros((1, 3), dtype=np.float32)
    pb.add(o, o, np.zeros((1, 1)), np.zeros(1), np.zeros(1), [{}])
    for name, fn, kw in [
        ("sample(batch_size=True)", lambda: pb.sample(True), "batch_size"),
        ("sample(batch_size=0)", lambda: pb.sample(0), "batch_size"),
        (
            "add(level 2**63)",
            lambda: pb.add(o, o, np.zeros((1, 1)), np.zeros(1), np.zeros(1), [{"level": 2**63}]),
            "level",
        ),
        ("update_priorities(nan)", lambda: pb.update_priorities([0], [NAN]), "priorit"),
        ("anneal_beta(2)", lambda: pb.anneal_beta(2.0), "progress"),
        ("update_priorities(bool)", lambda: pb.update_priorities([0], [True]), "priorities"),
        ("sample(batch_size=10**15)", lambda: pb.sample(10**15), "batch_size"),
        (
            "Dict observation space",
            lambda: per(observation_space=spaces.Dict({"x": spaces.Box(-1, 1, (3,))})),
            "Dict",
        ),
        ("buffer_size=10**15", lambda: per(buffer_size=10**15), "buffer_size"),
    ]:
        attempt("PrioritizedReplayBuffer", name, fn, kw)
    full = per(n_envs=1, seed=0)
    for t in range(16):  # full: a torn step would overwrite a live slot
        _per_step(full, obs=np.full((1, 3), t / 16, dtype=np.float32), reward=np.array([t / 16]))
    for name, bad, kw in [
        ("next_obs of another shape", {"next_obs": np.zeros((1, 2))}, "next_obs"),
        ("obs without the env axis", {"obs": np.zeros(3), "next_obs": np.zeros(3)}, "obs"),
        ("next_obs masked", {"next_obs": np.ma.masked_array(np.zeros((1, 3)), mask=True)}, "next_obs"),
        ("next_obs complex", {"next_obs": np.zeros((1, 3)) + 1j}, "next_obs"),
        ("reward NaN", {"reward": np.array([NAN])}, "reward"),
        ("reward complex", {"reward": np.array([1 + 2j])}, "reward"),
        ("action NaN", {"action": np.array([[NAN]])}, "action"),
    ]:
        full_before = ro.per_state(full)
        attempt(
            "PrioritizedReplayBuffer",
            f"add({name}) into a full buffer",
            lambda b=bad: _per_step(full, **b),
            kw,
            lambda st=full_before: ro.same(ro.per_state(full), st),
        )
    shared_census()
    for name, kwargs, kw in [
        ("conflicting n_steps", {"n_steps": 3, "replay_buffer_kwargs": {"n_steps": 2}}, "n_steps"),
        ("n_steps=True", {"n_steps": True}, "n_steps"),
        ("gamma differs", {"n_steps": 3, "replay_buffer_kwargs": {"gamma": 0.5}}, "gamma"),
    ]:
        attempt("PERDQN", name, lambda k=kwargs: PERDQN("MlpPolicy", "CartPole-v1", **k), kw)

    # ---------------------------------------------------------------- evaluation
    for name, fn, kw in [
        ("summarize(NaN return)", lambda: summarize([1.0, NAN, 2.0]), "returns"),
        ("summarize(inf return)", lambda: summarize({1: [INF], 2: [1.0]}), "returns"),
        ("summarize(confidence=1.5)", lambda: summarize([1.0, 2.0, 3.0], confidence=1.5), "confidence"),
        ("summarize(confidence=0)", lambda: summarize([1.0, 2.0, 3.0], confidence=0.0), "confidence"),
        ("summarize(empty)", lambda: summarize([]), "returns"),
        ("iqm(NaN)", lambda: iqm([1.0, NAN]), "values"),
        ("evaluate_levels(float levels)", lambda: evaluate_levels(None, venv, [1.7]), "levels"),
        ("evaluate_levels(duplicates)", lambda: evaluate_levels(None, venv, [1, 1]), "levels"),
        (
            "evaluate_levels(n_episodes=0)",
            lambda: evaluate_levels(None, venv, [1], n_episodes=0),
            "n_episodes",
        ),
        ("evaluate_levels(negative level)", lambda: evaluate_levels(None, venv, [-3]), "level"),
    ]:
        attempt("evaluation", name, fn, kw)
    attempt("OffPolicyPLRCallback", "buffer-mode env", lambda: _offpolicy_buffer_mode(venv), "buffer mode")

    # ---------------------------------------------------------------- the level source actor's push
    actor_census()

    # ---------------------------------------------------------------- loaders (crafted checkpoints)
    loader_census(tmp)
    bit_flip_census(tmp)

    # ---------------------------------------------------------------- issue 43's newer surfaces
    census_newer.run(attempt, tmp)

    venv.close()
    raw_venv.close()
    envs.close()


def _list_info_env(method: str) -> None:
    class ListInfo(gym.Env[Any, Any]):
        observation_space = spaces.Box(0, 1, (1,), np.float32)
        action_space = spaces.Discrete(2)

        def reset(self, *, seed: Any = None, options: Any = None) -> Any:
            return np.zeros(1, np.float32), ([] if method == "reset" else {})

        def step(self, action: Any) -> Any:
            return np.zeros(1, np.float32), 0.0, False, False, []

    env = LevelWrapper(ListInfo())
    env.reset(seed=1)
    env.step(0)


def _per_step(b: PrioritizedReplayBuffer, **bad: Any) -> None:
    o = np.full((1, 3), 0.5, dtype=np.float32)
    step = {"obs": o, "next_obs": o, "action": np.zeros((1, 1)), "reward": np.zeros(1), "done": np.zeros(1)}
    step.update(bad)
    b.add(step["obs"], step["next_obs"], step["action"], step["reward"], step["done"], [{}])


def _offpolicy_buffer_mode(venv: Any) -> None:
    from stable_baselines3 import DQN

    v = PrioritizedLevelReplay(venv, buffer=LevelBuffer(4, seed=0), generator=lambda r: int(r.integers(100)))
    DQN("MlpPolicy", v, learning_starts=10, buffer_size=100).learn(5, callback=OffPolicyPLRCallback())


def loader_census(tmp: Path) -> None:
    """Crafted files for every loader; a refusal must leave the live object unchanged."""
    # LevelSampler: one member changed at a time
    base = ro.make_sampler(30).state_dict()
    mutations: dict[str, Any] = {
        "num_seen=25 of 20": ("num_seen", 25),
        "num_seen=-1": ("num_seen", -1),
        "num_seen='3'": ("num_seen", "3"),
        "num_samples=-4": ("num_samples", -4),
        "num_samples=2**63-1 (every sample would fail)": ("num_samples", 2**63 - 1),
        "last_sampled beyond num_samples": ("last_sampled", np.full(20, 10**6)),
        "score NaN": ("scores", np.r_[NAN, np.zeros(19)]),
        "scores too short": ("scores", np.zeros(19)),
        "order not a permutation": ("order", np.zeros(20, dtype=np.int64)),
        "num_replay beyond samples": ("num_replay", 10**6),
        "num_explore=-1": ("num_explore", -1),
        "next_index=20": ("next_index", 20),
        "softmax_shift=None": ("softmax_shift", None),
        "rng malformed": ("rng", {"bit_generator": "PCG64", "state": "x"}),
        "rng=5": ("rng", 5),
        "other levels": ("levels", np.arange(1, 21)),
        "version=2": ("version", 2),
    }
    for name, (key, value) in mutations.items():
        state = copy.deepcopy(base)
        state[key] = value
        arrays = {k: state.pop(k) for k in ("levels", "scores", "last_sampled", "order")}
        path = tmp / "sampler.npz"
        save_npz(path, {"meta": np.array(json.dumps(state)), **arrays})
        live = ro.make_sampler(12)
        before = copy.deepcopy(live.state_dict())
        attempt(
            "LevelSampler.load_from",
            name,
            lambda p=path, s=live: s.load_from(p),
            _member(key),
            lambda s=live, b=before: ro.same(s.state_dict(), b),
        )
    for name, content in [("truncated file", None), ("text file", b"hello"), ("missing file", "missing")]:
        path = tmp / "bad.npz"
        if content is None:
            ro.make_sampler(3).save(path)
            path.write_bytes(path.read_bytes()[:300])
        elif content == "missing":
            path = tmp / "does_not_exist.npz"
        else:
            path.write_bytes(content)
        attempt("LevelSampler.load", name, lambda p=path: LevelSampler.load(p), str(path.name))

    # LevelBuffer
    lb_base = ro.make_level_buffer(9).state_dict()
    for name, changes in {
        "rng malformed (after valid data)": {
            "rng": {"bit_generator": "PCG64", "state": {"state": "x", "inc": 1}}
        },
        "score NaN": {"scores": np.array([NAN, 1.0, 2.0, 3.0])},
        "timestamp beyond count": {"timestamps": np.array([1, 2, 3, 10**6])},
        "count=-1": {"count": -1},
        "extras length differs": {"extras": [{}]},
        "extras not dicts": {"extras": [1, 2, 3, 4]},
        "5 levels, capacity 4": {
            "levels": list(range(5)),
            "extras": [{}] * 5,
            "scores": np.zeros(5),
            "timestamps": np.zeros(5, dtype=np.int64),
        },
        "other capacity": {"config": {**lb_base["config"], "capacity": 8}},
    }.items():
        state = {**copy.deepcopy(lb_base), **changes}
        live = ro.make_level_buffer(6)
        before = copy.deepcopy(live.state_dict())
        attempt(
            "LevelBuffer.load_state_dict",
            name,
            lambda st=state, b=live: b.load_state_dict(st),
            _member(next(iter(changes))),
            lambda b=live, s=before: ro.same(b.state_dict(), s),
        )

    # EpisodeScorer
    sc_base = ro.make_scorer(4).state_dict()
    for name, changes in {
        "other n_envs": {"n_envs": 3},
        "open env out of range": {
            "open": [{"env": 5, "level": 1, "rewards": [1.0], "values": [0.0], "next_values": [0.0]}]
        },
        "open arrays ragged": {
            "open": [{"env": 0, "level": 1, "rewards": [1.0, 2.0], "values": [0.0], "next_values": [0.0]}]
        },
        "open NaN": {
            "open": [{"env": 0, "level": 1, "rewards": [NAN], "values": [0.0], "next_values": [0.0]}]
        },
        "max return inf": {"max_returns": [[3, INF]]},
        "num_scored=-2": {"num_scored": -2},
    }.items():
        state = {**copy.deepcopy(sc_base), **changes}
        path = tmp / "scorer.npz"
        save_values(path, state)
        live = ro.make_scorer(3)
        before = copy.deepcopy(live.state_dict())
        attempt(
            "EpisodeScorer.load",
            name,
            lambda p=path, s=live: s.load(p),
            _member(next(iter(changes))),
            lambda s=live, b=before: ro.same(s.state_dict(), b),
        )

    # RolloutPlan (the generator state of buffer mode)
    for name, state in {
        "rng malformed": {"rng": {"bit_generator": "PCG64", "state": None}, "children": []},
        "children [None]": {"rng": np.random.default_rng(0).bit_generator.state, "children": [None]},
        "children not a list": {"rng": np.random.default_rng(0).bit_generator.state, "children": "abc"},
    }.items():
        path = tmp / "plan.npz"
        save_values(path, state)
        live = ro.make_plan(3)
        before = copy.deepcopy(live.state_dict())
        key = "rng" if "rng" in name else "children"
        attempt(
            "RolloutPlan.load_state_dict",
            name,
            lambda p=path, pl=live: pl.load_state_dict(
                {"buffer": pl.buffer.state_dict(), "plan": load_values(p)}
            ),
            key,
            lambda pl=live, b=before: ro.same(pl.state_dict(), b),
        )

    # PrioritizedReplayBuffer
    ro.make_per(6).save(tmp / "per.npz")
    good = load_npz(tmp / "per.npz")
    for name, (key, change) in {
        "negative leaf": ("leaves", lambda d: np.r_[-1.0, d["leaves"][1:]]),
        "NaN priority": ("priorities", lambda d: np.r_[NAN, d["priorities"][1:]]),
        "pos=16 of 16": ("pos", lambda d: np.array(16)),
        "pos=-1": ("pos", lambda d: np.array(-1)),
        "priority beyond stored data": ("priorities", lambda d: np.r_[d["priorities"][:-1], 2.0]),
        "observations of another shape": ("observations", lambda d: d["observations"][:, :, :2]),
        "levels below -1": ("levels", lambda d: d["levels"] - 100),
        "rank counters negative": ("rank_counters", lambda d: np.array([-1, 0])),
        "rng malformed": (
            "rng_state",
            lambda d: np.array(json.dumps({"bit_generator": "PCG64", "state": 1})),
        ),
        "other alpha": (
            "config",
            lambda d: np.array(json.dumps({**json.loads(str(d["config"])), "alpha": 0.1})),
        ),
        "rewards missing": ("rewards", None),
    }.items():
        data = dict(good)
        if change is None:
            del data[key]
        else:
            data[key] = change(data)
        save_npz(tmp / "crafted.npz", data)
        live = ro.make_per(3)
        before = ro.per_state(live)
        kw = {"rng_state": "rng", "config": "alpha", "leaves": "leaves"}.get(key, key)
        attempt(
            "PrioritizedReplayBuffer.load",
            name,
            lambda b=live: b.load(tmp / "crafted.npz"),
            kw,
            lambda b=live, s=before: ro.same(ro.per_state(b), s),
        )

    # PLRCallback: resume into a run with another n_envs, and a checkpoint with a missing file
    ro.make_callback(9, n_envs=3).save(tmp / "plr")
    live = ro.make_callback(4, n_envs=2)
    before = ro.live_state("callback", live)
    attempt(
        "PLRCallback.load",
        "other n_envs",
        lambda: live.load(tmp / "plr"),
        "n_envs",
        lambda: ro.same(ro.live_state("callback", live), before),
    )
    attempt(
        "PLRCallback.load",
        "empty directory",
        lambda: live.load(tmp / "empty_dir"),
        "plr_sampler.npz",
        lambda: ro.same(ro.live_state("callback", live), before),
    )


def shared_census() -> None:
    from plr_gym.replay import SharedReplayBuffer

    buffer = SharedReplayBuffer(
        4, spaces.Box(-1, 1, (3,), np.float32), spaces.Discrete(2), device="cpu", seed=0
    )
    writer = buffer.writer(0)
    good = np.zeros(3, np.float32)
    for name, bad, kw in [
        ("next_obs of another shape", {"next_obs": np.zeros(2, np.float32)}, "next_obs"),
        ("obs masked", {"obs": np.ma.masked_array(good)}, "obs"),
        ("reward NaN", {"reward": NAN}, "reward"),
        ("reward complex", {"reward": 1 + 2j}, "reward"),
    ]:
        step = {"obs": good, "next_obs": good, "reward": 0.0, **bad}
        attempt(
            "SharedReplayWriter",
            f"add({name})",
            lambda s=step: writer.add(s["obs"], s["next_obs"], 0, s["reward"], False, False),
            kw,
            lambda: (
                buffer.counts.tolist() == [0] and getattr(buffer, "writing", np.array([-1])).tolist() == [-1]
            ),
        )
    writer.close()
    buffer.close()


def actor_census() -> None:
    from plr_gym.distributed import LevelSourceActor

    good = (np.array([1, 2]), [0.5, 0.25])
    for name, call, kw in [
        ("a good batch, then garbage", {"batches": [good, 7]}, "batches[1]"),
        ("levels and scores of other lengths", {"batches": [good, ([1, 2], [0.5])]}, "batches[1]"),
        (
            "packed sizes beyond the data",
            {"batches": ("packed", np.array([1, 2, 3]), np.array([0.1, 0.2, 0.3]), np.array([2, 5]))},
            "packed",
        ),
        ("draw=-1", {"draw": -1}, "draw"),
        ("seq=0", {"seq": 0}, "seq"),
        ("client=None", {"client": None}, "client"),
    ]:
        actor = LevelSourceActor(LevelSampler(range(8), seed=0))
        args = {"client": "a", "seq": 1, "batches": [good], "draw": 0, **call}
        before = actor.source.state_dict()
        attempt(
            "LevelSourceActor.push",
            name,
            lambda a=actor, x=args: a.push(x["client"], x["seq"], x["batches"], x["draw"]),
            kw,
            lambda a=actor, b=before: ro.same(a.source.state_dict(), b) and a.stats()["scores_absorbed"] == 0,
        )


class _NotValueError(Exception):
    """A loader refused a corrupt file with another exception than the documented ``ValueError``."""


def _only_value_error(load: Any, obj: Any, path: Path) -> None:
    try:
        load(obj, path)
    except (ValueError, _Hung):
        raise
    except Exception as exc:  # documented: ValueError (RuntimeError etc. would count as clear otherwise)
        raise _NotValueError(f"{type(exc).__name__}: {exc}") from exc


def bit_flip_census(tmp: Path) -> None:
    """Single bit flips in each loader's file: a zip header's encryption flag and compression method,
    and a fixed-seed sample of 10 other bits."""
    loaders: dict[str, tuple[Any, Any, Any]] = {
        "LevelSampler.load_from": (
            ro.make_sampler(30),
            lambda: ro.make_sampler(12),
            lambda o, p: o.load_from(p),
        ),
        "LevelBuffer.load": (
            ro.make_level_buffer(9),
            lambda: ro.make_level_buffer(6),
            lambda o, p: o.load(p),
        ),
        "PrioritizedReplayBuffer.load": (ro.make_per(6), lambda: ro.make_per(3), lambda o, p: o.load(p)),
        "EpisodeScorer.load": (ro.make_scorer(4), lambda: ro.make_scorer(3), lambda o, p: o.load(p)),
    }
    rng = np.random.default_rng(0)
    for component, (obj, make_live, load) in loaders.items():
        good = tmp / "flip_good.npz"
        obj.save(good)
        data = good.read_bytes()
        central = data.find(b"PK\x01\x02")
        named = {"encryption flag": (central + 8) * 8, "compression method": (central + 10) * 8 + 1}
        named.update({f"bit {int(b)}": int(b) for b in rng.integers(len(data) * 8, size=10)})
        for name, bit in named.items():
            flipped = bytearray(data)
            flipped[bit // 8] ^= 1 << (bit % 8)
            path = tmp / "flip.npz"
            path.write_bytes(bytes(flipped))
            live = make_live()
            kind = "per" if component.startswith("Prioritized") else "sampler"
            before = ro.live_state(kind, live)
            row_count = len(results)
            attempt(
                f"{component} (bit flip)",
                name,
                lambda o=live, p=path, f=load: _only_value_error(f, o, p),
                "",
                lambda o=live, b=before, k=kind: ro.same(ro.live_state(k, o), b),
            )
            if results[row_count]["outcome"] == "accepted":  # a byte nothing reads (a zip timestamp...)
                results[row_count]["outcome"] = "clear"
                results[row_count]["message"] = "loaded: the flipped byte is not read"


def _member(key: str) -> str:
    return {"last_sampled": "last_sampled", "version": "LevelSampler state"}.get(key, key)


def report() -> dict[str, Any]:
    comps: dict[str, dict[str, int]] = {}
    for r in results:
        c = comps.setdefault(
            r["component"],
            {"tried": 0, "clear": 0, "unclear": 0, "accepted": 0, "on_purpose": 0, "corrupted": 0},
        )
        c["tried"] += 1
        c[r["outcome"]] += 1
        c["corrupted"] += int(r.get("corrupted", False))
    total = {
        k: sum(c[k] for c in comps.values())
        for k in ("tried", "clear", "unclear", "accepted", "on_purpose", "corrupted")
    }
    return {"components": comps, "total": total}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, default=None, help="also write the per-case results here")
    args = parser.parse_args()
    main()
    summary = report()
    print(
        "| component | tried | clear error | unclear error | silently accepted | accepted on purpose "
        "| refused but changed |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, c in summary["components"].items():
        print(
            f"| {name} | {c['tried']} | {c['clear']} | {c['unclear']} | {c['accepted']} | {c['on_purpose']} "
            f"| {c['corrupted']} |"
        )
    t = summary["total"]
    print(
        f"| **total** | **{t['tried']}** | **{t['clear']}** | **{t['unclear']}** | **{t['accepted']}** | "
        f"**{t['on_purpose']}** | **{t['corrupted']}** |"
    )
    for r in results:
        if r["outcome"] != "clear" or r.get("corrupted"):
            print(
                f"- {r['component']} / {r['case']}: {r['outcome']}"
                f"{' (changed the object)' if r.get('corrupted') else ''} {r['message']}"
            )
    if args.json is not None:
        args.json.write_text(json.dumps({"summary": summary, "cases": results}, indent=2, default=str) + "\n")
