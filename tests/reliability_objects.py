"""Deterministic objects for tests/test_reliability.py: every checkpoint writer, built at two ages.

Imported by the test and by the subprocess that saves under a file-size limit and under SIGKILL.
``build(kind, rounds)`` returns an object whose saved state depends on ``rounds``; ``save`` writes it,
``saved_state`` reads a checkpoint back as plain comparable data.
"""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

import numpy as np

from plr_gym import LevelBuffer, LevelSampler, PLRCallback, PrioritizedReplayBuffer
from plr_gym._levels import load_values, save_values
from plr_gym.scoring import EpisodeScorer
from plr_gym.source import BufferLevelSource

KINDS = ("sampler", "level_buffer", "scorer", "plan", "per", "callback")
#: file (or directory, for the callback) each kind is saved to
FILES = {
    "sampler": "sampler.npz",
    "level_buffer": "level_buffer.npz",
    "scorer": "scorer.npz",
    "plan": "plan.npz",
    "per": "per.npz",
    "callback": "plr",
}


def make_sampler(rounds: int) -> LevelSampler:
    sampler = LevelSampler(levels=range(20), seed=0)
    for i in range(rounds):
        sampler.update(sampler.sample(), (i % 7) / 7)
    return sampler


def make_level_buffer(rounds: int) -> LevelBuffer:
    buf = LevelBuffer(capacity=4, seed=0)
    for i in range(rounds):
        buf.insert({"id": i, "walls": np.arange(i % 5)}, score=float((i * 3) % 11), extra={"max_return": i})
        if buf.size > 1:
            buf.sample_replay_level()
    return buf


def make_scorer(rounds: int, n_envs: int = 2) -> EpisodeScorer:
    scorer = EpisodeScorer(make_sampler(0), n_envs=n_envs, strategy="max_mc")
    rng = np.random.default_rng(rounds)
    for r in range(rounds):
        n_steps = 6
        starts = np.zeros((n_steps, n_envs), dtype=bool)
        starts[0] = r == 0
        starts[3, 0] = True
        levels = np.full((n_steps, n_envs), r % 20)
        levels[3:, 0] = (r + 1) % 20
        if r > 0:
            levels[:3, 0] = r % 20
            levels[:, 1:] = 0
        scorer.process_rollout(
            levels=levels,
            episode_starts=starts,
            dones=np.zeros(n_envs, dtype=bool),
            rewards=rng.random((n_steps, n_envs)),
            values=rng.random((n_steps, n_envs)),
        )
    return scorer


def make_plan(rounds: int) -> BufferLevelSource:
    plan = BufferLevelSource(
        LevelBuffer(capacity=4, seed=0), generator=lambda rng: int(rng.integers(1000)), n_envs=2
    )
    plan.rng = np.random.default_rng(0)
    for _ in range(rounds):
        plan.begin_rollout()
        plan.update_batch(list(plan.assigned), [0.5, 0.25])
        plan.end_rollout()
    plan.children = [{"child": np.arange(rounds)}]
    return plan


def make_per(rounds: int) -> PrioritizedReplayBuffer:
    from gymnasium import spaces

    buf = PrioritizedReplayBuffer(
        16, spaces.Box(-1, 1, (3,)), spaces.Discrete(2), device="cpu", n_envs=2, seed=0
    )
    rng = np.random.default_rng(1)
    for t in range(rounds):
        obs = rng.random((2, 3)).astype(np.float32)
        buf.add(obs, obs, np.zeros((2, 1)), rng.random(2), np.zeros(2), [{"level": t}, {"level": t + 1}])
    if rounds:
        samples = buf.sample(4)
        buf.update_priorities(samples.indices, rng.random(4) * 3)
    return buf


def make_callback(rounds: int, n_envs: int = 2) -> PLRCallback:
    callback = PLRCallback()
    sampler = make_sampler(rounds)
    callback.wrapper = types.SimpleNamespace(source=sampler, sampler=sampler)
    callback.scorer = make_scorer(rounds, n_envs)
    callback.scorer.target = sampler
    return callback


def build(kind: str, rounds: int) -> Any:
    return {
        "sampler": make_sampler,
        "level_buffer": make_level_buffer,
        "scorer": make_scorer,
        "plan": make_plan,
        "per": make_per,
        "callback": make_callback,
    }[kind](rounds)


def save(kind: str, obj: Any, path: Path) -> None:
    if kind == "plan":
        save_values(path, obj.state_dict())
    else:
        obj.save(path)


def per_state(buf: PrioritizedReplayBuffer) -> dict[str, Any]:
    return {
        "pos": buf.pos,
        "full": buf.full,
        "priorities": buf.priorities,
        "leaves": np.asarray(buf._tree.leaves).copy(),
        "levels": buf.levels.copy(),
        "observations": buf.observations.copy(),
        "rewards": buf.rewards.copy(),
        "rng": buf._rng.bit_generator.state,
        "max_priority": buf.max_priority,
    }


def live_state(kind: str, obj: Any) -> Any:
    """Comparable state of a live object."""
    if kind == "per":
        return per_state(obj)
    if kind == "callback":
        return (obj.wrapper.sampler.state_dict(), obj.scorer.state_dict())
    return obj.state_dict()


def saved_state(kind: str, path: Path) -> Any:
    """Comparable state of what is saved at ``path``."""
    if kind == "sampler":
        return LevelSampler.load(path).state_dict()
    if kind == "level_buffer":
        return LevelBuffer.load(path).state_dict()
    if kind == "scorer":
        scorer = make_scorer(0)
        scorer.load(path)
        return scorer.state_dict()
    if kind == "plan":
        plan = make_plan(0)
        plan.load_state_dict(load_values(path))
        return plan.state_dict()
    if kind == "per":
        buf = make_per(0)
        buf.load(path)
        return per_state(buf)
    callback = make_callback(0)
    callback.load(path)
    return live_state("callback", callback)


def same(a: Any, b: Any) -> bool:
    """Deep equality of nested dicts/lists/tuples/arrays (arrays bit for bit, NaN-free)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        return a.shape == b.shape and a.dtype.kind == b.dtype.kind and bool(np.array_equal(a, b))
    return bool(a == b)
