"""One PPO update of ``plr-gym train --preset paper-procgen`` against the PLR paper's own code, side by side.

The PLR paper's code is facebookresearch/level-replay (its only commit, ccecf45). It is not part of this
repository: give the path of your clone with ``--level-replay PATH``::

    git clone https://github.com/facebookresearch/level-replay /tmp/level-replay
    python benchmarks/reference/reference_equivalence.py --level-replay /tmp/level-replay

For each game and sampler (default: BigFish and Leaper, PLR and uniform) it

1. builds the run exactly as ``plr-gym train plr_gym/procgen-<game>-v0 --preset paper-procgen`` does
   (the CLI's own functions: 64 envs x 256 steps, IMPALA-CNN, reward normalisation, the PLR wrapper and
   callback, ``LevelReplayPPO``), then collects ``--warmup`` rollouts with the initial weights, scored by
   the PLR callback (so that the sampler has seen levels and episodes cross rollouts and reach Procgen's
   time limits), and records the next rollout: observations, actions, the env's (normalised) rewards,
   ``dones``, time-limit endings and each step's level;
2. switches both sides to float64 and runs, from the same initial weights and that same rollout,
   - plr_gym: the PLR callback's scoring of the rollout into the ``LevelSampler`` and one whole
     ``LevelReplayPPO.train()`` (3 epochs x 8 minibatches);
   - level-replay: its ``Policy`` (``arch="large"``: ``ResNetBase``), ``RolloutStorage.compute_returns``,
     ``LevelSampler.update_with_rollouts`` + ``after_update`` (its sampler state set to plr_gym's before the
     scoring) and ``PPO.update``;
   with the same minibatch permutations fed to both (level-replay's ``SubsetRandomSampler`` replaced by
   the permutation plr_gym uses);
3. prints one table, max absolute and max relative difference (``max|ours - reference| / max|reference|``)
   per quantity: logits, values, log-probabilities, returns, advantages, each level's score, seen flags,
   the replay distribution after the update, the three loss terms (means over the 24 minibatches), the
   gradients of all 24 optimiser steps (after clipping), and the parameters after the update; exits 1 if
   any relative difference exceeds ``--tolerance`` (default 1e-6).

What is replaced on level-replay's side, and why: ``level_replay/envs.py`` imports OpenAI Baselines
(TensorFlow 2.2), gym_minigrid and procgen at the top, to build its envs; the update does not use them,
so the harness gives ``level_replay.model`` a stand-in ``level_replay.envs`` with the one name it imports
(``PROCGEN_ENVS``). ``level_sampler.py`` uses ``np.float``, removed in numpy 1.24: the harness restores
the alias (``float``) before importing it. Nothing else of level-replay is changed or copied.

``--quick`` runs 8 envs x 64 steps on BigFish with PLR (a minute on a CPU) to check the machinery.
``--strategy``, ``--score-transform``, ``--staleness-coef``, ``--min-seen-ratio`` and ``--num-levels`` change
the sampler on both sides (the preset then keeps level-replay's ``--unseen-rank zero`` and ``--power-offset
without_staleness``, which matter for ``gae`` and for ``power`` without staleness).

``--curriculum`` compares the curriculum between updates instead: ``--rollouts`` rollouts (warm-up included)
in which level-replay's own ``step_wait`` and ``LevelSampler`` decide every level on its side and plr_gym's
wrapper and sampler on ours, the distribution of every draw compared (``curriculum_equivalence.py``).
``--ours KEY=VALUE`` builds plr_gym's side with another choice (e.g. ``--ours value_loss=mse``): the table
then shows what that choice changes (a check that the harness does fail when the code differs).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks" / "common"))

from _provenance import cpu_model, git_commit, load_average  # noqa: E402

GAMES = ("bigfish", "leaper")
SAMPLERS = ("plr", "uniform")
TOLERANCE = 1e-6
#: Frames per forward pass outside the update (network outputs on the whole rollout).
CHUNK = 512
#: plr_gym's ImpalaCNN / SB3 policy parameter -> level-replay's Policy parameter (same tensors, other names).
_NAMES = {
    "features_extractor.linear": "base.fc",
    "value_net": "base.critic_linear",
    "action_net": "dist.linear",
}
for _i in range(3):
    _NAMES[f"features_extractor.stacks.{_i}.conv"] = f"base.layer{_i + 1}.0"
    for _j, _ref_block in ((0, 2), (1, 3)):
        for _k, _ref_conv in ((0, "conv1"), (1, "conv2")):
            _NAMES[f"features_extractor.stacks.{_i}.res{_j}.conv{_k}"] = (
                f"base.layer{_i + 1}.{_ref_block}.{_ref_conv}"
            )


def reference_name(ours: str) -> str:
    """level-replay's name of one of plr_gym's parameters (``...weight``/``...bias`` kept)."""
    module, _, kind = ours.rpartition(".")
    return f"{_NAMES[module]}.{kind}"


# --------------------------------------------------------------------------------------------------
# level-replay's code, imported from the user's clone
# --------------------------------------------------------------------------------------------------
def import_level_replay(path: Path) -> types.SimpleNamespace:
    """level-replay's ``Policy``, ``RolloutStorage``, ``PPO``, ``LevelSampler`` and its ``storage`` module."""
    if not (path / "level_replay" / "algo" / "ppo.py").is_file():
        raise SystemExit(
            f"--level-replay {path}: not a clone of facebookresearch/level-replay "
            "(no level_replay/algo/ppo.py)"
        )
    if not hasattr(np, "float"):  # level_sampler.py uses np.float (removed in numpy 1.24)
        setattr(np, "float", float)  # noqa: B010 (the alias level-replay reads)
    stand_in = types.ModuleType("level_replay.envs")
    stand_in.PROCGEN_ENVS = {f"{g}": None for g in ("bigfish", "leaper")}  # type: ignore[attr-defined]
    stand_in.__doc__ = "stand-in: the update does not build envs (see benchmarks/reference/)"
    sys.modules["level_replay.envs"] = stand_in
    sys.path.insert(0, str(path))
    from level_replay import storage
    from level_replay.algo.ppo import PPO
    from level_replay.level_sampler import LevelSampler
    from level_replay.model import Policy

    return types.SimpleNamespace(Policy=Policy, RolloutStorage=storage.RolloutStorage, PPO=PPO,
                                 LevelSampler=LevelSampler, storage=storage)  # fmt: skip


class FixedPermutations:
    """Stands in for ``torch.utils.data.SubsetRandomSampler`` in level-replay's ``storage`` module: each
    construction (one per epoch) iterates the next of the given permutations."""

    queue: ClassVar[list[list[int]]] = []

    def __init__(self, indices: Any) -> None:
        self.order = FixedPermutations.queue.pop(0)
        if sorted(self.order) != list(indices):
            raise RuntimeError("the permutation does not cover the rollout")

    def __iter__(self) -> Any:
        return iter(self.order)

    def __len__(self) -> int:
        return len(self.order)


# --------------------------------------------------------------------------------------------------
# plr_gym's side
# --------------------------------------------------------------------------------------------------
@dataclass
class Recording:
    """One rollout as the env produced it (``(T, N)`` arrays, ``obs`` with ``T + 1`` rows)."""

    rewards: list[Any] = field(default_factory=list)
    dones: list[Any] = field(default_factory=list)
    time_limits: list[Any] = field(default_factory=list)
    levels: list[Any] = field(default_factory=list)


def _build(game: str, sampler: str, n_envs: int, n_steps: int, seed: int, ours: list[str], out: Path) -> Any:
    """The run ``plr-gym train ... --preset paper-procgen`` builds (the CLI's own functions)."""
    from plr_gym import cli

    argv = ["train", f"plr_gym/procgen-{game}-v0", "--preset", "paper-procgen", "--sampler", sampler,
            "--n-envs", str(n_envs), "--n-steps", str(n_steps), "--seed", str(seed), "--device", "cpu",
            "--quiet", "--no-tensorboard", "--no-progress", "--eval-levels", "10000:10001",
            "--out", str(out)]  # fmt: skip
    for item in ours:
        key, _, value = item.partition("=")
        argv += ["--" + key.replace("_", "-"), value]
    args = cli.build_parser().parse_args(argv)
    train_levels, eval_levels, level_sampler, env_kwargs, device = cli._check_train_args(args)
    run = cli._build_training(args, level_sampler, env_kwargs, device, out)
    parts = cli._train_callbacks(args, run, out, train_levels, eval_levels, resumed=False)
    return args, train_levels, run, parts.plr


def _float64_buffer_class() -> Any:
    from stable_baselines3.common.buffers import RolloutBuffer

    class Float64RolloutBuffer(RolloutBuffer):
        """SB3's rollout buffer with float64 rewards, values, returns, advantages and log-probabilities,
        and minibatches in a given order (``orders``: one permutation per epoch)."""

        orders: ClassVar[list[Any]] = []

        def reset(self) -> None:
            super().reset()
            for name in ("rewards", "returns", "episode_starts", "values", "log_probs", "advantages"):
                setattr(self, name, getattr(self, name).astype(np.float64))

        def get(self, batch_size: int | None = None) -> Any:
            if not self.orders:
                yield from super().get(batch_size)
                return
            order = self.orders.pop(0)
            if not self.generator_ready:
                for name in ("observations", "actions", "values", "log_probs", "advantages", "returns"):
                    self.__dict__[name] = self.swap_and_flatten(self.__dict__[name])
                self.generator_ready = True
            size = batch_size or len(order)
            for start in range(0, len(order), size):
                yield self._get_samples(np.asarray(order[start : start + size]))

    return Float64RolloutBuffer


def _recorder(recording: Recording) -> Any:
    from stable_baselines3.common.callbacks import BaseCallback

    class Recorder(BaseCallback):
        """Records each step's env outputs while ``active`` (before SB3 touches the rewards)."""

        active = False
        sampler_state: Any = None

        def _on_step(self) -> bool:
            if self.active:
                infos = self.locals["infos"]
                recording.rewards.append(np.asarray(self.locals["rewards"], dtype=np.float64).copy())
                recording.dones.append(np.asarray(self.locals["dones"], dtype=bool).copy())
                recording.time_limits.append(
                    np.array(
                        [bool(i.get("TimeLimit.terminal") or i.get("TimeLimit.truncated")) for i in infos]
                    )
                )
                recording.levels.append(np.array([int(i["level"]) for i in infos]))
            return True

        def _on_rollout_end(self) -> None:  # before the PLR callback scores the rollout
            if self.active:
                self.sampler_state = {
                    "scores": self.sampler.scores.copy(),
                    "seen": self.sampler.seen.copy(),
                    "staleness": self.sampler.staleness.copy(),
                }

    return Recorder()


def _cast_input_hook(module: Any, inputs: tuple[Any, ...]) -> tuple[Any, ...]:
    """Frames reach the encoder as float32 (SB3's ``preprocess_obs``); cast them to the encoder's dtype."""
    dtype = next(module.parameters()).dtype
    return tuple(x.to(dtype) for x in inputs)


# --------------------------------------------------------------------------------------------------
# the comparison
# --------------------------------------------------------------------------------------------------
class Table:
    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def add(self, name: str, ours: Any, ref: Any) -> None:
        a = np.asarray(ours, dtype=np.float64)
        b = np.asarray(ref, dtype=np.float64)
        if a.shape != b.shape:
            raise RuntimeError(f"{name}: shapes differ, {a.shape} and {b.shape}")
        diff = float(np.max(np.abs(a - b))) if a.size else 0.0
        scale = float(np.max(np.abs(b))) if b.size else 0.0
        rel = diff / scale if scale > 0 else (0.0 if diff == 0 else float("inf"))
        self.rows.append(
            {"quantity": name, "n": int(a.size), "max_abs": diff, "max_rel": rel, "scale": scale}
        )

    def worst(self) -> float:
        return max(r["max_rel"] for r in self.rows)


def compare(
    lr: types.SimpleNamespace, game: str, sampler_name: str, n_envs: int, n_steps: int, warmup: int,
    seed: int, ours: list[str], time_limit_steps: int | None = None,
) -> tuple[Table, dict[str, Any]]:  # fmt: skip
    import torch
    from stable_baselines3.common.callbacks import CallbackList

    torch.manual_seed(seed)
    with tempfile.TemporaryDirectory() as tmp:
        args, train_levels, run, plr = _build(
            game, sampler_name, n_envs, n_steps, seed, ours, Path(tmp) / "run"
        )
    model = run.model
    if time_limit_steps is not None:  # plr_gym's batched Procgen engine ends episodes at this many steps
        run.plr_venv.venv._batch.max_episode_steps = time_limit_steps
    recording = Recording()
    recorder = _recorder(recording)
    buffer_class = _float64_buffer_class()
    model.rollout_buffer = buffer_class(
        model.n_steps, model.observation_space, model.action_space, device=model.device, gamma=model.gamma,
        gae_lambda=model.gae_lambda, n_envs=model.n_envs,
    )  # fmt: skip
    model.policy.features_extractor.register_forward_pre_hook(_cast_input_hook)
    callbacks = CallbackList([recorder, plr])
    _, callback = model._setup_learn(10**9, callback=callbacks, tb_log_name="ref", progress_bar=False)
    callback.on_training_start(locals(), globals())
    recorder.sampler = run.sampler
    for _ in range(warmup):  # the initial weights play; the PLR callback scores; no update
        model.collect_rollouts(model.env, callback, model.rollout_buffer, n_rollout_steps=model.n_steps)
    initial = {k: v.detach().clone().double() for k, v in model.policy.state_dict().items()}
    model.policy.double()
    recorder.active = True
    model.collect_rollouts(model.env, callback, model.rollout_buffer, n_rollout_steps=model.n_steps)
    buffer = model.rollout_buffer
    T, N = buffer.buffer_size, buffer.n_envs
    # the rollout as plr_gym holds it, (T, N) arrays, before the update flattens the buffer
    obs = np.concatenate([buffer.observations, model._last_obs[None]], axis=0)  # (T + 1, N, C, H, W) uint8
    held = {name: getattr(buffer, name).copy() for name in ("values", "log_probs", "returns", "advantages")}
    actions = buffer.actions[..., 0].astype(np.int64)
    first_starts = buffer.episode_starts[0].astype(bool)  # the rollout's first step starts an episode
    ours_after_scoring = {
        "scores": run.sampler.scores.copy(),
        "seen": run.sampler.seen.copy(),
        "weights": run.sampler.sample_weights().copy(),
    }
    # the minibatch order: one permutation per epoch in level-replay's flat index (step * N + env)
    rng = np.random.default_rng(seed + 1)
    perms = [rng.permutation(T * N) for _ in range(model.n_epochs)]
    buffer.orders = [(p % N) * T + (p // N) for p in perms]  # SB3 flattens (step, env) as env * T + step
    # ours: logits and values on the rollout, then one update, recording each step's gradients
    frames = torch.as_tensor(obs[:-1].reshape(T * N, *obs.shape[2:]))
    logits_parts, values_parts = [], []
    with torch.no_grad():  # in chunks: a float64 IMPALA-CNN pass over 16,384 frames at once needs ~10 GB
        for chunk in torch.split(frames, CHUNK):
            logits_parts.append(model.policy.get_distribution(chunk).distribution.logits)
            values_parts.append(model.policy.predict_values(chunk))
    our_logits = torch.cat(logits_parts).reshape(T, N, -1).numpy()
    our_values = torch.cat(values_parts).reshape(T, N).numpy()
    our_grads: list[dict[str, Any]] = []
    optimizer = model.policy.optimizer
    step_fn = optimizer.step

    def recording_step(*a: Any, **k: Any) -> Any:
        our_grads.append({n: p.grad.detach().clone() for n, p in model.policy.named_parameters()})
        return step_fn(*a, **k)

    optimizer.step = recording_step
    model.train()
    optimizer.step = step_fn
    log = model.logger.name_to_value
    our_losses = {
        "value_loss": log["train/value_loss"],
        "policy_loss": log["train/policy_gradient_loss"],
        "entropy": -log["train/entropy_loss"],
    }
    our_params = {n: p.detach().clone() for n, p in model.policy.named_parameters()}
    run.close()

    # ---------------------------------------------------------------- level-replay
    policy = lr.Policy(obs.shape[2:], int(model.action_space.n), arch="large",
                       base_kwargs={"recurrent": False, "hidden_size": 256}).double()  # fmt: skip
    names = {reference_name(n): n for n in our_params}
    ref_state = policy.state_dict()
    missing = set(ref_state) ^ set(names)
    if missing:
        raise RuntimeError(f"parameters without a counterpart: {sorted(missing)}")
    policy.load_state_dict({k: initial[names[k]] for k in ref_state})
    storage = lr.RolloutStorage(T, N, obs.shape[2:], model.action_space, policy.recurrent_hidden_state_size)
    for name in ("obs", "recurrent_hidden_states", "rewards", "value_preds", "returns", "action_log_probs",
                 "action_log_dist", "masks", "bad_masks"):  # fmt: skip
        setattr(storage, name, getattr(storage, name).double())
    storage.obs.copy_((torch.as_tensor(obs).float() / 255.0).double())  # as SB3's preprocess: float32 / 255
    storage.actions.copy_(torch.as_tensor(actions).reshape(T, N, 1))
    dones = np.stack(recording.dones)
    limits = np.stack(recording.time_limits)
    storage.rewards.copy_(torch.as_tensor(np.stack(recording.rewards)).reshape(T, N, 1))
    storage.masks[0].copy_(torch.as_tensor(1.0 - first_starts.astype(np.float64)).reshape(N, 1))
    storage.masks[1:].copy_(torch.as_tensor(1.0 - dones.astype(np.float64)).reshape(T, N, 1))
    storage.bad_masks[1:].copy_(torch.as_tensor(1.0 - limits.astype(np.float64)).reshape(T, N, 1))
    storage.level_seeds.copy_(torch.as_tensor(np.stack(recording.levels), dtype=torch.int).reshape(T, N, 1))
    hxs = torch.zeros(T * N, policy.recurrent_hidden_state_size, dtype=torch.float64)
    with torch.no_grad():
        flat = storage.obs[:-1].reshape(T * N, *obs.shape[2:])
        flat_masks = storage.masks[:-1].reshape(-1, 1)
        flat_actions = storage.actions.reshape(-1, 1)
        values, dists, log_probs = [], [], []
        for start in range(0, T * N, CHUNK):
            part = slice(start, start + CHUNK)
            value, features, _ = policy.base(flat[part], hxs[part], flat_masks[part])
            ref_dist = policy.dist(features)
            values.append(value)
            dists.append(ref_dist.logits)
            log_probs.append(ref_dist.log_probs(flat_actions[part]))
        storage.value_preds[:-1].copy_(torch.cat(values).reshape(T, N, 1))
        storage.action_log_dist.copy_(torch.cat(dists).reshape(T, N, -1))
        storage.action_log_probs.copy_(torch.cat(log_probs).reshape(T, N, 1))
        next_value = policy.get_value(storage.obs[-1], hxs[:N], storage.masks[-1])
    storage.compute_returns(next_value, float(model.gamma), float(model.gae_lambda))
    # the sampler, from plr_gym's state before the scoring
    level_sampler = lr.LevelSampler(
        list(train_levels), None, model.action_space, num_actors=N,
        strategy=args.strategy if sampler_name == "plr" else "random", replay_schedule=args.replay_schedule,
        score_transform=args.score_transform, temperature=args.temperature, eps=args.eps,
        rho=args.min_seen_ratio, nu=1.0 - args.replay_prob, alpha=args.alpha,
        staleness_coef=args.staleness_coef, staleness_transform=args.staleness_transform,
        staleness_temperature=args.staleness_temperature,
    )  # fmt: skip
    before = recorder.sampler_state
    level_sampler.seed_scores[:] = before["scores"]
    level_sampler.unseen_seed_weights[:] = 1.0 - before["seen"].astype(np.float64)
    level_sampler.seed_staleness[:] = before["staleness"]
    level_sampler.update_with_rollouts(storage)
    level_sampler.after_update()
    # the update, with plr_gym's minibatch order
    agent = lr.PPO(policy, args.clip_range, args.n_epochs, args.n_minibatches or (T * N) // args.batch_size,
                   0.5 if args.vf_coef is None else args.vf_coef, args.ent_coef, lr=args.learning_rate,
                   eps=args.optimizer_eps, max_grad_norm=args.max_grad_norm)  # fmt: skip
    FixedPermutations.queue = [p.tolist() for p in perms]
    original_sampler = lr.storage.SubsetRandomSampler
    lr.storage.SubsetRandomSampler = FixedPermutations
    ref_grads: list[dict[str, Any]] = []
    ref_step = agent.optimizer.step

    def ref_recording_step(*a: Any, **k: Any) -> Any:
        ref_grads.append({n: p.grad.detach().clone() for n, p in policy.named_parameters()})
        return ref_step(*a, **k)

    agent.optimizer.step = ref_recording_step
    try:
        value_loss, action_loss, entropy = agent.update(storage)
    finally:
        lr.storage.SubsetRandomSampler = original_sampler
    ref_params = dict(policy.named_parameters())

    # ---------------------------------------------------------------- the table
    table = Table()
    table.add("logits (log-softmax)", our_logits, storage.action_log_dist.numpy())
    table.add("values V(s_t)", our_values, storage.value_preds[:-1, :, 0].numpy())
    table.add("values in the rollout buffer", held["values"], storage.value_preds[:-1, :, 0].numpy())
    table.add(
        "log-probabilities of the actions", held["log_probs"], storage.action_log_probs[:, :, 0].numpy()
    )
    table.add("returns", held["returns"], storage.returns[:-1, :, 0].numpy())
    reference_advantages = (storage.returns[:-1] - storage.value_preds[:-1])[:, :, 0].numpy()
    table.add("advantages (GAE)", held["advantages"], reference_advantages)
    if sampler_name == "plr":  # uniform sampling scores nothing (level-replay's strategy "random" neither)
        table.add("level scores after scoring", ours_after_scoring["scores"], level_sampler.seed_scores)
        table.add(
            "seen levels after scoring", ours_after_scoring["seen"], 1.0 - level_sampler.unseen_seed_weights
        )
        table.add(
            "replay distribution after scoring", ours_after_scoring["weights"], level_sampler.sample_weights()
        )
    table.add("value loss (mean over minibatches)", our_losses["value_loss"], value_loss)
    table.add("policy loss (mean over minibatches)", our_losses["policy_loss"], action_loss)
    table.add("entropy (mean over minibatches)", our_losses["entropy"], entropy)
    if len(our_grads) != len(ref_grads):
        raise RuntimeError(f"optimiser steps differ: {len(our_grads)} and {len(ref_grads)}")
    table.add(
        f"gradients of the {len(our_grads)} optimiser steps",
        np.concatenate([g[n].numpy().ravel() for g in our_grads for n in sorted(g)]),
        np.concatenate(
            [g[reference_name(n)].numpy().ravel() for g in ref_grads for n in sorted(our_grads[0])]
        ),
    )
    table.add(
        "parameters after the update",
        np.concatenate([our_params[n].numpy().ravel() for n in sorted(our_params)]),
        np.concatenate([ref_params[reference_name(n)].detach().numpy().ravel() for n in sorted(our_params)]),
    )
    crossing = int((~dones[-1]).sum())  # episodes still running at the rollout's end (scored as chunks)
    facts = {
        "episodes_ended": int(dones.sum()),
        "time_limit_endings": int(limits.sum()),
        "running_at_rollout_end": crossing,
        "continuing_from_previous_rollout": int((~first_starts).sum()),
        "levels_scored": int(np.sum(ours_after_scoring["seen"]) - np.sum(before["seen"]))
        if sampler_name == "plr"
        else 0,
        "optimizer_steps": len(our_grads),
    }
    return table, facts


def format_table(table: Table, tolerance: float) -> str:
    lines = [
        "| quantity | values | max abs. difference | max rel. difference | within |",
        "| --- | --- | --- | --- | --- |",
    ]
    for r in table.rows:
        ok = "yes" if r["max_rel"] <= tolerance else "**no**"
        lines.append(f"| {r['quantity']} | {r['n']:,} | {r['max_abs']:.3g} | {r['max_rel']:.3g} | {ok} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument(
        "--level-replay", type=Path, required=True, help="path of a clone of facebookresearch/level-replay"
    )
    p.add_argument("--games", nargs="+", choices=GAMES, default=list(GAMES))
    p.add_argument("--samplers", nargs="+", choices=SAMPLERS, default=list(SAMPLERS))
    p.add_argument("--n-envs", type=int, default=64)
    p.add_argument("--n-steps", type=int, default=256)
    p.add_argument(
        "--warmup", type=int, default=1, help="rollouts played before the recorded one (default 1)"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--tolerance", type=float, default=TOLERANCE, help=f"max relative difference (default {TOLERANCE})"
    )
    p.add_argument(
        "--ours", action="append", default=[], metavar="KEY=VALUE", help="another choice on plr_gym's side"
    )
    p.add_argument(
        "--time-limit-steps",
        type=int,
        default=None,
        help="end episodes at this many steps (default: the game's own limit, 1,000 or 500, which "
        "the initial policy rarely reaches): makes the recorded rollout hold time-limit endings",
    )
    p.add_argument("--quick", action="store_true", help="8 envs x 64 steps, BigFish, PLR")
    for flag in ("--strategy", "--score-transform", "--staleness-coef", "--min-seen-ratio", "--num-levels"):
        p.add_argument(flag, default=None, help="the sampler on both sides (default: the preset's)")
    p.add_argument(
        "--curriculum", action="store_true", help="compare the curriculum over --rollouts rollouts"
    )
    p.add_argument("--rollouts", type=int, default=4, help="--curriculum: rollouts, warm-up included")
    p.add_argument("--out", type=Path, default=None, help="write the tables and facts as JSON here")
    args = p.parse_args(argv)
    if args.quick:
        args.games, args.samplers, args.n_envs, args.n_steps = ["bigfish"], ["plr"], 8, 64
    sampler_flags = ("strategy", "score_transform", "staleness_coef", "min_seen_ratio", "num_levels")
    extra = [f"{k}={v}" for k in sampler_flags if (v := getattr(args, k)) is not None]
    if args.curriculum:
        return curriculum_main(args, extra)
    import torch

    torch.set_num_threads(1)
    commit = git_commit()  # the code compared: HEAD when the run starts
    lr = import_level_replay(args.level_replay.resolve())
    results = []
    worst = 0.0
    print(f"# plr_gym {commit} against level-replay ({args.level_replay})")
    print(f"# {cpu_model()}, load {load_average()}")
    for game in args.games:
        for sampler in args.samplers:
            start = time.perf_counter()
            table, facts = compare(
                lr,
                game,
                sampler,
                args.n_envs,
                args.n_steps,
                args.warmup,
                args.seed,
                args.ours + extra,
                args.time_limit_steps,
            )
            seconds = time.perf_counter() - start
            worst = max(worst, table.worst())
            size = f"{args.n_envs} envs x {args.n_steps} steps"
            print(f"\n## {game}, {sampler}: {size}, float64 ({seconds:.0f} s)")
            print("facts: " + ", ".join(f"{k} {v}" for k, v in facts.items()))
            print(format_table(table, args.tolerance), flush=True)
            results.append({"game": game, "sampler": sampler, "seconds": round(seconds, 1), "facts": facts,
                            "rows": table.rows})  # fmt: skip
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({
            "commit": commit, "cpu": cpu_model(), "n_envs": args.n_envs, "n_steps": args.n_steps,
            "warmup": args.warmup, "seed": args.seed, "ours": args.ours, "tolerance": args.tolerance,
            "time_limit_steps": args.time_limit_steps,
            "results": results,
        }, indent=1))  # fmt: skip
    verdict = "within" if worst <= args.tolerance else "ABOVE"
    print(f"\nlargest relative difference {worst:.3g}: {verdict} the tolerance {args.tolerance:g}")
    return 0 if worst <= args.tolerance else 1


def curriculum_main(args: argparse.Namespace, extra: list[str]) -> int:
    """``--curriculum``: the curriculum of ``--rollouts`` rollouts both ways, per game (PLR only)."""
    import torch
    from curriculum_equivalence import compare_curriculum

    torch.set_num_threads(1)
    commit = git_commit()
    lr = import_level_replay(args.level_replay.resolve())
    worst, results = 0.0, []
    print(f"# plr_gym {commit} against level-replay ({args.level_replay}): the curriculum")
    print(f"# {cpu_model()}, load {load_average()}")
    for game in args.games:
        start = time.perf_counter()
        rows, facts = compare_curriculum(
            lr, args.level_replay.resolve(), game, args.n_envs, args.n_steps, args.rollouts, args.seed,
            args.ours, args.time_limit_steps, extra,
        )  # fmt: skip
        seconds = time.perf_counter() - start
        worst = max([worst, *(r["max_abs"] for r in rows)])
        print(
            f"\n## {game}: {args.n_envs} envs x {args.n_steps} steps x {args.rollouts} rollouts "
            f"({seconds:.0f} s)"
        )
        print("facts: " + ", ".join(f"{k} {v}" for k, v in facts.items() if k != "per_rollout"))
        for r in facts["per_rollout"]:
            print(f"  after rollout {r['rollout']}: {r['seen']} levels seen ({r['negative scores']} with a "
                  f"negative score), {r['draws']} draws ({r['replay draws']} replays)")  # fmt: skip
        print("| quantity | max abs. difference | within |\n| --- | --- | --- |")
        for r in rows:
            ok = "yes" if r["max_abs"] <= args.tolerance else "**no**"
            print(f"| {r['quantity']} | {r['max_abs']:.3g} | {ok} |", flush=True)
        results.append({"game": game, "seconds": round(seconds, 1), "facts": facts, "rows": rows})
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({
            "commit": commit, "cpu": cpu_model(), "mode": "curriculum", "n_envs": args.n_envs,
            "n_steps": args.n_steps, "rollouts": args.rollouts, "seed": args.seed, "ours": args.ours,
            "sampler": extra, "tolerance": args.tolerance, "time_limit_steps": args.time_limit_steps,
            "results": results,
        }, indent=1))  # fmt: skip
    verdict = "within" if worst <= args.tolerance else "ABOVE"
    print(f"\nlargest difference {worst:.3g}: {verdict} the tolerance {args.tolerance:g}")
    return 0 if worst <= args.tolerance else 1


if __name__ == "__main__":
    sys.exit(main())
