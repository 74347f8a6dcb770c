"""The curriculum between updates: level-replay's draw logic and sampler against plr_gym's, per rollout.

``reference_equivalence.py --curriculum`` runs this (as does ``python
benchmarks/reference/curriculum_equivalence.py --level-replay PATH ...``). The single-update mode compares
one PPO update from a recorded rollout; this mode plays ``--rollouts`` rollouts (warm-up included) of
``plr-gym train --preset paper-procgen`` (the CLI's own run: batched Procgen, the PLR wrapper with the
preset's ``level_draw="episode_end"``, the PLR callback; the initial weights play, no update) and, in lock
step, drives level-replay's side with its own code:

- **its draw logic**: ``level_replay/envs.py``'s ``VecPyTorchProcgen.step_wait``, the class's own source
  (read from the clone, executed over a stand-in of Baselines' ``VecEnvWrapper``), whose ``venv`` replays
  each step's ``done`` flags and records every ``venv.seed(seed, e)``;
- **its sampler**: ``level_replay/level_sampler.py``'s ``LevelSampler``, started from plr_gym's state after
  the first reset (level-replay's own reset plays levels in order, ``sample('sequential')``), updated at
  every rollout's end by ``update_with_rollouts`` + ``after_update`` on a ``RolloutStorage`` holding the
  rollout (plr_gym's values and returns; the single-update mode shows they equal level-replay's).

**The same random draws.** The two samplers consume randomness differently (level-replay: ``np.random.rand``
for replay-or-explore, then ``np.random.choice`` over the whole mixture; plr_gym: its own generator, one
component at a time), so a seed cannot align them. Instead, at every draw, the harness compares the full
distribution each side draws from — the probability of a replay, and the distribution over levels of a
replay (``sample_weights``) or an exploration (uniform over the unseen levels) — and then hands level-replay
the outcome plr_gym drew (its ``np.random.rand`` / ``np.random.choice`` return the draw plr_gym made, after
checking that it has positive probability there). level-replay's sampler then updates its own staleness,
and its ``step_wait`` decides *when* each level is drawn and for which env: the table shows that every draw
happens at the same step for the same env, from the same distribution, and that scores, seen flags,
staleness and the replay distribution agree after every rollout.
"""

from __future__ import annotations

import ast
import tempfile
import types
from pathlib import Path
from typing import Any

import numpy as np


# --------------------------------------------------------------------------------------------------
# level-replay's step_wait, from its own source
# --------------------------------------------------------------------------------------------------
class DrawsDiffer(RuntimeError):
    """level-replay's step_wait drew other levels, or for other envs, than plr_gym at some step."""


class _VecEnvWrapperStandIn:
    """What ``VecPyTorchProcgen`` uses of Baselines' ``VecEnvWrapper``: ``self.venv``."""

    def __init__(self, venv: Any) -> None:
        self.venv = venv


def reference_step_wait_class(path: Path) -> type:
    """``VecPyTorchProcgen`` from ``level_replay/envs.py`` (its source, unchanged), over the stand-in base."""
    import torch
    from gymnasium.spaces import Box

    source = (path / "level_replay" / "envs.py").read_text()
    tree = ast.parse(source)
    node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "VecPyTorchProcgen")
    namespace: dict[str, Any] = {"VecEnvWrapper": _VecEnvWrapperStandIn, "torch": torch, "Box": Box, "np": np}
    exec(compile(ast.Module(body=[node], type_ignores=[]), str(path / "level_replay" / "envs.py"), "exec"),
         namespace)  # fmt: skip
    return namespace["VecPyTorchProcgen"]


class ReplayVenv:
    """The venv under level-replay's ``step_wait``: returns the step's ``done`` flags, records ``seed``."""

    def __init__(self, n: int) -> None:
        self.num_envs = n
        self.done = np.zeros(n, dtype=bool)
        self.seeded: list[tuple[int, int]] = []

    def step_wait(self) -> tuple[Any, ...]:
        n = self.num_envs
        return np.zeros((n, 3, 1, 1), np.uint8), np.zeros(n, np.float32), self.done.copy(), [{}] * n

    def seed(self, seed: int, index: int) -> None:
        self.seeded.append((int(index), int(seed)))

    def observe(self) -> dict[str, Any]:
        return {"rgb": np.zeros((self.num_envs, 3, 1, 1), np.uint8)}


# --------------------------------------------------------------------------------------------------
# the same draws on both sides
# --------------------------------------------------------------------------------------------------
class Draws:
    """plr_gym's draws, each with the distribution it came from; and level-replay's ``np.random`` stand-in
    that compares its distributions with them and returns plr_gym's outcome."""

    def __init__(self, sampler: Any) -> None:
        self.sampler = sampler
        self.queue: list[dict[str, Any]] = []
        self.diffs = {"replay probability": 0.0, "replay distribution": 0.0, "exploration distribution": 0.0}
        self.count = {"replay": 0, "explore": 0}
        self.current: dict[str, Any] | None = None
        real = sampler.next_levels

        def spy(envs: Any) -> Any:
            out = []
            for e in np.asarray(envs).tolist():
                before = {
                    "env": int(e),
                    "p_replay": sampler.replay_probability(),
                    "weights": sampler.sample_weights(),
                    "unseen": ~sampler.seen,
                    "replays": sampler.num_replay_samples,
                }
                level = real(np.array([e]))
                before["level"] = int(level[0])
                before["replay"] = sampler.num_replay_samples > before["replays"]
                self.queue.append(before)
                out.append(level[0])
            return np.asarray(out, dtype=np.int64)

        sampler.next_levels = spy

    # np.random as level_sampler.py uses it
    def rand(self) -> float:
        draw = self.queue[0]
        self.current = draw
        self.diffs["replay probability"] = max(
            self.diffs["replay probability"], abs(self._ref_p_replay - draw["p_replay"])
        )
        return 0.0 if draw["replay"] else 1.0 - 1e-12

    def choice(self, a: Any, size: Any = None, p: Any = None) -> Any:
        draw = self.queue.pop(0)
        index = int(np.flatnonzero(self.sampler.levels == draw["level"])[0])
        p = np.asarray(p, dtype=np.float64)
        if draw["replay"]:
            ours = draw["weights"]
            key = "replay distribution"
        else:
            ours = draw["unseen"] / draw["unseen"].sum()
            key = "exploration distribution"
        self.count["replay" if draw["replay"] else "explore"] += 1
        self.diffs[key] = max(self.diffs[key], float(np.max(np.abs(p - ours))))
        if not p[index] > 0:
            raise RuntimeError(f"level-replay gives plr_gym's draw {draw['level']} probability {p[index]}")
        return np.array([index])

    _ref_p_replay = 0.0


def reference_random(draws: Draws, ref_sampler: Any) -> Any:
    """A stand-in for ``np`` inside ``level_sampler.py``: ``np.random`` is ``draws``; the rest is numpy.
    Before each draw it records level-replay's probability of a replay (from its own unseen weights)."""

    class _Random:
        def rand(self) -> float:
            n = len(ref_sampler.seeds)
            seen = n - int((ref_sampler.unseen_seed_weights > 0).sum())
            draws._ref_p_replay = seen / n if seen / n >= ref_sampler.rho else 0.0
            return draws.rand()

        def choice(self, a: Any, size: Any = None, p: Any = None) -> Any:
            if draws.current is None or draws.current is not draws.queue[0]:  # no rand(): before rho
                draws._ref_p_replay = 0.0
                draws.rand()
            draws.current = None
            return draws.choice(a, size, p)

    shim = types.SimpleNamespace(**{k: getattr(np, k) for k in dir(np) if not k.startswith("__")})
    shim.random = _Random()
    return shim


# --------------------------------------------------------------------------------------------------
# the run
# --------------------------------------------------------------------------------------------------
def reference_sampler(lr: Any, args: Any, levels: list[int], n: int, action_space: Any) -> Any:
    return lr.LevelSampler(
        list(levels), None, action_space, num_actors=n, strategy=args.strategy,
        replay_schedule=args.replay_schedule, score_transform=args.score_transform,
        temperature=args.temperature, eps=args.eps, rho=args.min_seen_ratio, nu=1.0 - args.replay_prob,
        alpha=args.alpha, staleness_coef=args.staleness_coef, staleness_transform=args.staleness_transform,
        staleness_temperature=args.staleness_temperature,
    )  # fmt: skip


def _storage(lr: Any, buffer: Any, last_value: Any, masks: np.ndarray, levels: np.ndarray, space: Any) -> Any:
    """level-replay's ``RolloutStorage`` of one rollout, with plr_gym's values and returns (float64)."""
    import torch

    T, N = masks.shape[0] - 1, masks.shape[1]
    storage = lr.RolloutStorage(T, N, (3, 1, 1), space, 1)
    for name in ("value_preds", "returns", "masks", "rewards", "action_log_dist"):
        setattr(storage, name, getattr(storage, name).double())
    storage.value_preds[:-1].copy_(torch.as_tensor(buffer.values).reshape(T, N, 1))
    storage.value_preds[-1].copy_(torch.as_tensor(np.asarray(last_value, np.float64)).reshape(N, 1))
    storage.returns[:-1].copy_(torch.as_tensor(buffer.returns).reshape(T, N, 1))
    storage.masks.copy_(torch.as_tensor(masks).reshape(T + 1, N, 1))
    storage.level_seeds.copy_(torch.as_tensor(levels, dtype=torch.int).reshape(T, N, 1))
    return storage


_SEQUENCE = "level sequence (1: the draws or the levels played differ)"
#: The run's options recorded with the facts.
_RECORDED = ("level_draw", "strategy", "score_transform", "unseen_rank", "power_offset")


def _lock_step(side: types.SimpleNamespace) -> Any:
    """The callback that, after each env step, runs level-replay's ``step_wait`` on the same done flags and
    checks the levels played and drawn against plr_gym's."""
    from stable_baselines3.common.callbacks import BaseCallback

    class LockStep(BaseCallback):
        def _on_step(self) -> bool:
            dones = np.asarray(self.locals["dones"], dtype=bool)
            side.record["dones"].append(dones.copy())
            played = np.array([int(i["level"]) for i in self.locals["infos"]])
            step = side.state["steps"]
            if not np.array_equal(played, side.playing):
                raise DrawsDiffer(
                    f"step {step}: plr_gym's envs played {played.tolist()}, level-replay's "
                    f"{side.playing.tolist()}"
                )
            side.record["levels"].append(side.playing.copy())  # level-replay's own sequence, for its storage
            ours_now = [(d["env"], d["level"]) for d in side.draws.queue]
            side.venv.done, side.venv.seeded = dones, []
            side.wrapper.step_wait()
            for e, level in side.venv.seeded:  # level-replay's env e plays its drawn level from the next step
                side.playing[e] = level
            if side.venv.seeded != ours_now or side.draws.queue:
                raise DrawsDiffer(
                    f"step {step}: level-replay drew (env, level) {side.venv.seeded}, plr_gym {ours_now}"
                )
            side.state["steps"] += 1
            side.state["draws"] += len(side.venv.seeded)
            side.state["ends"] += int(dones.sum())
            return True

    return LockStep()


def _reference_update(lr: Any, side: types.SimpleNamespace, model: Any, first: np.ndarray) -> None:
    """level-replay's ``update_with_rollouts`` + ``after_update`` on the rollout just played."""
    import torch
    from stable_baselines3.common.utils import obs_as_tensor

    with torch.no_grad():
        last = model.policy.predict_values(obs_as_tensor(model._last_obs, model.device)).numpy()[:, 0]
    masks = np.concatenate([[~first], ~np.stack(side.record["dones"])]).astype(np.float64)
    levels = np.stack(side.record["levels"])
    side.ref.update_with_rollouts(_storage(lr, model.rollout_buffer, last, masks, levels, model.action_space))
    side.ref.after_update()


def _compare_after_rollout(sampler: Any, ref: Any, staleness_coef: float, diffs: dict[str, float]) -> None:
    """Scores, seen flags, staleness (not with ``staleness_coef`` 0: level-replay stops counting it then,
    plr_gym counts on) and the replay distribution, into ``diffs`` (maxima over the rollouts)."""
    compared = [
        ("level scores", sampler.scores, ref.seed_scores),
        ("seen levels", sampler.seen.astype(float), 1.0 - ref.unseen_seed_weights),
        ("staleness", sampler.staleness.astype(float), ref.seed_staleness),
        ("replay distribution", sampler.sample_weights(), ref.sample_weights()),
    ]
    if staleness_coef == 0:
        del compared[2]
    for name, a, b in compared:
        diff = float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))
        diffs[f"{name} after each rollout"] = max(diffs.get(f"{name} after each rollout", 0.0), diff)


def _start(lr: Any, level_replay: Path, game: str, n_envs: int, n_steps: int, seed: int, flags: list[str],
           time_limit_steps: int | None) -> tuple[Any, Any, Any, types.SimpleNamespace]:  # fmt: skip
    """The preset's run (float64 rollout buffer) and level-replay's side: sampler, step_wait, replay venv."""
    from reference_equivalence import _build, _float64_buffer_class

    with tempfile.TemporaryDirectory() as tmp:
        args, train_levels, run, plr = _build(game, "plr", n_envs, n_steps, seed, flags, Path(tmp) / "r")
    if args.replay_schedule != "proportionate":
        raise SystemExit("--curriculum compares the proportionate replay schedule (the preset's) only")
    if time_limit_steps is not None:
        run.plr_venv.venv._batch.max_episode_steps = time_limit_steps
    model = run.model
    model.rollout_buffer = _float64_buffer_class()(
        model.n_steps, model.observation_space, model.action_space, device=model.device, gamma=model.gamma,
        gae_lambda=model.gae_lambda, n_envs=model.n_envs,
    )  # fmt: skip
    side = types.SimpleNamespace(
        draws=Draws(run.sampler), ref=reference_sampler(lr, args, train_levels, n_envs, model.action_space),
        venv=ReplayVenv(n_envs), wrapper=object.__new__(reference_step_wait_class(level_replay)),
        record={"dones": [], "levels": []}, state={"draws": 0, "ends": 0, "steps": 0},
        playing=np.zeros(n_envs, dtype=np.int64),  # the level each of level-replay's envs plays
    )  # fmt: skip
    side.wrapper.venv, side.wrapper.device, side.wrapper.level_sampler = side.venv, "cpu", side.ref
    return args, run, plr, side


def compare_curriculum(lr: Any, level_replay: Path, game: str, n_envs: int, n_steps: int, rollouts: int,
                       seed: int, ours: list[str], time_limit_steps: int | None,
                       extra: list[str]) -> tuple[list[dict[str, Any]], dict[str, Any]]:  # fmt: skip
    """Play ``rollouts`` rollouts both ways; rows of (quantity, max abs difference) and facts."""
    import level_replay.level_sampler as ref_module
    import torch
    from stable_baselines3.common.callbacks import CallbackList

    torch.manual_seed(seed)
    args, run, plr, side = _start(
        lr, level_replay, game, n_envs, n_steps, seed, ours + extra, time_limit_steps
    )
    model, sampler, ref, draws = run.model, run.sampler, side.ref, side.draws
    original_np, ref_module.np = ref_module.np, reference_random(draws, ref)
    diffs: dict[str, float] = {_SEQUENCE: 0.0}
    rows: list[dict[str, Any]] = []
    try:
        _, callback = model._setup_learn(
            10**9, callback=CallbackList([_lock_step(side), plr]), tb_log_name="ref", progress_bar=False
        )
        callback.on_training_start(locals(), globals())
        draws.queue.clear()  # the reset's draws (level-replay's reset plays levels in order: not compared)
        side.playing[:] = run.plr_venv.current_levels  # both sides start on plr_gym's first levels
        ref.seed_scores[:], ref.seed_staleness[:] = sampler.scores, sampler.staleness
        ref.unseen_seed_weights[:] = 1.0 - sampler.seen
        first = np.ones(n_envs, dtype=bool)  # the first rollout starts every episode
        for r in range(rollouts):
            side.record["dones"].clear()
            side.record["levels"].clear()
            model.collect_rollouts(model.env, callback, model.rollout_buffer, n_rollout_steps=model.n_steps)
            _reference_update(lr, side, model, first)
            first = side.record["dones"][-1].copy()
            _compare_after_rollout(sampler, ref, args.staleness_coef, diffs)
            rows.append({"rollout": r + 1, "seen": int(sampler.seen.sum()), "draws": side.state["draws"],
                         "replay draws": draws.count["replay"],
                         "negative scores": int((sampler.scores[sampler.seen] < 0).sum())})  # fmt: skip
    except (DrawsDiffer, IndexError) as exc:  # IndexError: level-replay drew where plr_gym did not
        diffs[_SEQUENCE] = 1.0
        side.state["first_difference"] = str(exc) or f"step {side.state['steps']}: only level-replay drew"
    finally:
        ref_module.np = original_np
        run.close()
    diffs.update({f"{k} at every draw": v for k, v in draws.diffs.items()})
    state = side.state
    facts = {
        "first_difference": state.get("first_difference"), "rollouts": rollouts,
        "episodes_ended": state["ends"], "draws": state["draws"], "replay_draws": draws.count["replay"],
        "explore_draws": draws.count["explore"], "per_rollout": rows,
        **{k: getattr(args, k) for k in _RECORDED},
    }  # fmt: skip
    return [{"quantity": k, "max_abs": v} for k, v in diffs.items()], facts


if __name__ == "__main__":  # the same as reference_equivalence.py --curriculum
    import sys

    from reference_equivalence import main

    sys.exit(main([*sys.argv[1:], "--curriculum"]))
