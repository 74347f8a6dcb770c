"""PPO with Prioritized Level Replay, fully jitted, on navix's DoorKey: one file, PureJaxRL style.

The whole run of every seed is one compiled function: ``jax.vmap`` over seeds of a ``jax.lax.scan`` over
PPO updates, each a ``scan`` over env steps, GAE, scoring, the sampler's update and the PPO epochs::

    LevelSampler.sample(mask=done) ─ level ids ─► reset from the level's key ─► rollout (T × N envs)
          ▲                                                                    │
          └── LevelSampler.update ◄── EpisodeScorer.process_rollout ◄── GAE ◄──┴──► PPO epochs

A level is an int id; its layout is ``env.reset(jax.random.PRNGKey(id))``. Training uses the ids
``0 .. num_levels − 1``; the held-out evaluation plays ids ``EVAL_START ..`` (never trained on), one
stochastic episode each, before training and at ``num_evals`` checkpoints.

Arms (``--arm``): ``uniform`` (each episode's level drawn uniformly; no scorer, no sampler),
``defaults`` (``plr_gym.jax.LevelSampler``'s defaults: ``value_l1``, rank, β = 1, ρ = 0.3, uniform mass
0.5), ``paper`` (the PLR paper's ``value_l1``, rank, β = 0.1, ρ = 0.1) and ``learnability`` (P ∝ p(1 − p)
of each level's success rate, half the mass uniform). The network (an MLP over the flat symbolic grid)
and Adam are written out below: the only dependencies are ``jax``, ``navix`` and ``plr_gym``.

    pip install "plr-gym[jax-examples]"   # jax and navix 4
    python examples/jax_ppo_plr.py --arm defaults --seeds 8 --total-steps 163840
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import time
from typing import Any

import jax
import jax.numpy as jnp
import navix as nx

from plr_gym.jax import EpisodeScorer, LevelSampler

EVAL_START = 1_000_000  # held-out level ids start here
SCALE = (10.0, 5.0, 3.0)  # navix's symbolic channels (entity tag, colour, state): their largest values
ARMS: dict[str, dict[str, Any] | None] = {
    "uniform": None,
    "defaults": {},
    "paper": {"temperature": 0.1, "staleness_coef": 0.1, "uniform_mass": 0.0},
    "learnability": {
        "strategy": "learnability",
        "score_transform": "power",
        "staleness_coef": 0.0,
        "uniform_mass": 0.5,
    },
}


@dataclasses.dataclass(frozen=True)
class Config:
    env_id: str = "Navix-DoorKey-Random-5x5-v0"
    arm: str = "defaults"
    num_levels: int = 200  # training levels 0 .. num_levels - 1
    num_eval_levels: int = 100  # held-out levels EVAL_START ..
    num_envs: int = 8
    num_steps: int = 256  # T: a rollout is T × num_envs steps
    updates_per_eval: int = 20  # PPO updates between held-out evaluations
    num_evals: int = 4  # 4 × 20 updates × 2,048 steps = 163,840 steps per seed
    epochs: int = 4
    minibatch_size: int = 512
    lr: float = 5e-4
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip: float = 0.2
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    hidden: int = 64
    max_steps: int | None = 250  # MiniGrid's DoorKey-5x5 limit (10·size²); None: navix's (4·size²)

    @property
    def steps_per_seed(self) -> int:
        return self.num_evals * self.updates_per_eval * self.num_envs * self.num_steps


def make_env(config: Config) -> Any:
    # MiniGrid's reward: 1 − 0.9·t/max_steps on reaching the goal, else 0
    return nx.make(config.env_id, max_steps=config.max_steps, penalty_coeff=0.9, disable_autoreset=True)


def make_sampler(config: Config) -> tuple[LevelSampler | None, EpisodeScorer | None]:
    options = ARMS[config.arm]
    if options is None:
        return None, None
    sampler = LevelSampler(num_levels=config.num_levels, **options)
    strategy = "learnability" if sampler.strategy == "learnability" else "value_l1"
    return sampler, EpisodeScorer(num_levels=config.num_levels, strategy=strategy)


# ---------------------------------------------------------------- actor-critic MLP and Adam, by hand
def encode(obs: jax.Array) -> jax.Array:
    flat = obs.reshape((*obs.shape[:-3], math.prod(obs.shape[-3:])))  # the grid, flat, in [0, 1]
    return flat / jnp.tile(jnp.asarray(SCALE), flat.shape[-1] // 3)


def init_params(key: jax.Array, n_in: int, n_act: int, hidden: int) -> dict[str, Any]:
    def dense(k: jax.Array, n: int, m: int, scale: float) -> dict[str, jax.Array]:
        return {"w": jax.nn.initializers.orthogonal(scale)(k, (n, m)), "b": jnp.zeros(m)}

    k = jax.random.split(key, 6)
    s = 2**0.5
    actor = [dense(k[0], n_in, hidden, s), dense(k[1], hidden, hidden, s), dense(k[2], hidden, n_act, 0.01)]
    critic = [dense(k[3], n_in, hidden, s), dense(k[4], hidden, hidden, s), dense(k[5], hidden, 1, 1.0)]
    return {"pi": actor, "v": critic}


def mlp(layers: list[dict[str, jax.Array]], x: jax.Array) -> jax.Array:
    for layer in layers[:-1]:
        x = jnp.tanh(x @ layer["w"] + layer["b"])
    return x @ layers[-1]["w"] + layers[-1]["b"]


def policy(params: dict[str, Any], obs: jax.Array) -> tuple[jax.Array, jax.Array]:
    x = encode(obs)
    return mlp(params["pi"], x), mlp(params["v"], x)[..., 0]  # logits, value


def adam(params: Any, grads: Any, opt: Any, config: Config) -> tuple[Any, Any]:
    norm = jnp.sqrt(sum(jnp.sum(g**2) for g in jax.tree.leaves(grads)))
    grads = jax.tree.map(lambda g: g * jnp.minimum(1.0, config.max_grad_norm / (norm + 1e-6)), grads)
    m, v, t = opt
    t = t + 1
    m = jax.tree.map(lambda m, g: 0.9 * m + 0.1 * g, m, grads)
    v = jax.tree.map(lambda v, g: 0.999 * v + 0.001 * g**2, v, grads)
    step = config.lr * jnp.sqrt(1 - 0.999**t) / (1 - 0.9**t)
    params = jax.tree.map(lambda p, m, v: p - step * m / (jnp.sqrt(v) + 1e-5), params, m, v)
    return params, (m, v, t)


# ---------------------------------------------------------------- one seed's whole run
def make_train(config: Config) -> Any:
    env = make_env(config)
    sampler, scorer = make_sampler(config)
    n_env, n_act = config.num_envs, env.action_space.maximum.item() + 1
    train_ids, eval_ids = jnp.arange(config.num_levels), EVAL_START + jnp.arange(config.num_eval_levels)

    def first_timesteps(ids: jax.Array) -> Any:  # a level's reset, from its id
        return jax.vmap(env.reset)(jax.vmap(jax.random.PRNGKey)(ids))

    def where(mask: jax.Array, a: Any, b: Any) -> Any:  # per env: a where mask, else b
        return jax.tree.map(lambda x, y: jnp.where(mask.reshape((-1,) + (1,) * (x.ndim - 1)), x, y), a, b)

    def draw(sstate: Any, key: jax.Array, mask: jax.Array) -> tuple[Any, jax.Array]:
        """The next level of each env where ``mask`` holds (its episode just ended)."""
        if sampler is None:
            return sstate, jax.random.randint(key, (n_env,), 0, config.num_levels)
        sstate, levels, _ = sampler.sample(sstate, key, n_env, mask=mask)
        return sstate, levels

    def evaluate(params: dict[str, Any], key: jax.Array) -> jax.Array:
        """Return of one stochastic episode on each held-out level."""
        eval_starts = first_timesteps(eval_ids)

        def step(carry: Any, k: jax.Array) -> tuple[Any, None]:
            ts, ret, live = carry
            logits, _ = policy(params, ts.observation)
            ts = jax.vmap(env.step)(ts, jax.random.categorical(k, logits))
            return (ts, ret + live * ts.reward, live & (ts.step_type == 0)), None

        live = jnp.ones(config.num_eval_levels, bool)
        init = (eval_starts, jnp.zeros(config.num_eval_levels), live)
        (_, ret, _), _ = jax.lax.scan(step, init, jax.random.split(key, env.max_steps))
        return ret

    def env_step(carry: Any, key: jax.Array) -> tuple[Any, dict[str, jax.Array]]:
        params, ts, levels, start, sstate, train_starts = carry
        k_act, k_level = jax.random.split(key)
        logits, value = policy(params, ts.observation)
        action = jax.random.categorical(k_act, logits)
        logp = jax.nn.log_softmax(logits)[jnp.arange(n_env), action]
        nxt = jax.vmap(env.step)(ts, action)
        reward, done = nxt.reward, nxt.step_type > 0  # done: goal reached or time limit
        sstate, new_levels = draw(sstate, k_level, done)
        next_levels = jnp.where(done, new_levels, levels)
        nxt = where(done, jax.tree.map(lambda x: x[next_levels], train_starts), nxt)
        out = {"obs": ts.observation, "action": action, "logp": logp, "value": value, "reward": reward}
        out |= {"done": done, "level": levels, "start": start}
        return (params, nxt, next_levels, done, sstate, train_starts), out

    def gae(batch: dict[str, jax.Array], last_value: jax.Array) -> jax.Array:
        def back(adv_next: Any, x: Any) -> tuple[Any, jax.Array]:
            adv, v_next = adv_next
            reward, done, value = x
            delta = reward + config.gamma * v_next * (1 - done) - value
            adv = delta + config.gamma * config.gae_lambda * (1 - done) * adv
            return (adv, value), adv

        xs = (batch["reward"], batch["done"].astype(jnp.float32), batch["value"])
        return jax.lax.scan(back, (jnp.zeros(n_env), last_value), xs, reverse=True)[1]

    def loss_fn(params: dict[str, Any], mb: dict[str, jax.Array]) -> jax.Array:
        logits, value = policy(params, mb["obs"])
        logp_all = jax.nn.log_softmax(logits)
        logp = jnp.take_along_axis(logp_all, mb["action"][:, None], 1)[:, 0]
        ratio = jnp.exp(logp - mb["logp"])
        adv = (mb["adv"] - mb["adv"].mean()) / (mb["adv"].std() + 1e-8)
        pg = -jnp.minimum(ratio * adv, jnp.clip(ratio, 1 - config.clip, 1 + config.clip) * adv).mean()
        v_loss = ((value - (mb["adv"] + mb["value"])) ** 2).mean()
        entropy = -(jnp.exp(logp_all) * logp_all).sum(-1).mean()
        return pg + config.vf_coef * v_loss - config.ent_coef * entropy

    def update(carry: Any, key: jax.Array) -> tuple[Any, dict[str, jax.Array]]:
        params, opt, ts, levels, start, sstate, scstate, train_starts = carry
        k_roll, k_perm = jax.random.split(key)
        roll = (params, ts, levels, start, sstate, train_starts)
        roll, batch = jax.lax.scan(env_step, roll, jax.random.split(k_roll, config.num_steps))
        params, ts, levels, start, sstate, _ = roll
        adv = gae(batch, policy(params, ts.observation)[1])
        if sampler is not None:  # score the completed episodes, then update the sampler
            scstate, out_levels, scores, mask = scorer.process_rollout(
                scstate, levels=batch["level"], episode_starts=batch["start"], dones=batch["done"],
                rewards=batch["reward"], values=batch["value"], advantages=adv,
                successes=(batch["reward"] > 0).astype(jnp.float32),
            )  # fmt: skip
            sstate = sampler.update(sstate, out_levels, scores, mask)
        flat = jax.tree.map(lambda x: x.reshape((-1, *x.shape[2:])), batch | {"adv": adv})
        n_mb = flat["adv"].shape[0] // config.minibatch_size

        def epoch(state: Any, k: jax.Array) -> tuple[Any, None]:
            perm = jax.random.permutation(k, flat["adv"].shape[0])
            mbs = jax.tree.map(lambda x: x[perm].reshape((n_mb, -1, *x.shape[1:])), flat)

            def minibatch(state: Any, mb: dict[str, jax.Array]) -> tuple[Any, None]:
                grads = jax.grad(loss_fn)(state[0], mb)
                return adam(state[0], grads, state[1], config), None

            return jax.lax.scan(minibatch, state, mbs)[0], None

        (params, opt), _ = jax.lax.scan(epoch, (params, opt), jax.random.split(k_perm, config.epochs))
        ended = batch["done"].sum()
        metrics = {"train_return": (batch["reward"] * batch["done"]).sum() / jnp.maximum(ended, 1)}
        return (params, opt, ts, levels, start, sstate, scstate, train_starts), metrics

    def train(key: jax.Array) -> dict[str, jax.Array]:
        k_init, k_levels, k_eval, k_run = jax.random.split(key, 4)
        train_starts = first_timesteps(train_ids)  # every training level's first timestep: resets are gathers
        params = init_params(k_init, encode(train_starts.observation[0]).size, n_act, config.hidden)
        zeros = jax.tree.map(jnp.zeros_like, params)
        opt = (zeros, zeros, jnp.zeros((), jnp.int32))  # Adam's moments and step
        sstate = sampler.init() if sampler is not None else None
        scstate = scorer.init(n_env) if scorer is not None else None
        sstate, levels = draw(sstate, k_levels, jnp.ones(n_env, bool))
        ts = jax.tree.map(lambda x: x[levels], train_starts)
        carry = (params, opt, ts, levels, jnp.ones(n_env, bool), sstate, scstate, train_starts)

        def chunk(carry: Any, key: jax.Array) -> tuple[Any, dict[str, jax.Array]]:
            k_upd, k_ev = jax.random.split(key)
            carry, metrics = jax.lax.scan(update, carry, jax.random.split(k_upd, config.updates_per_eval))
            return carry, {"eval_return": evaluate(carry[0], k_ev), "train_return": metrics["train_return"]}

        carry, out = jax.lax.scan(chunk, carry, jax.random.split(k_run, config.num_evals))
        out["eval_return_initial"] = evaluate(params, k_eval)  # (num_eval_levels,)
        if sampler is not None:
            out["sampler_weights"] = sampler.weights(carry[5])
        return out

    return train


def run(config: Config, seeds: list[int]) -> dict[str, Any]:
    """Train one run per seed (vmapped, one compile); held-out returns per checkpoint and level."""
    train = jax.jit(jax.vmap(make_train(config)))
    keys = jax.vmap(jax.random.PRNGKey)(jnp.asarray(seeds))
    start = time.perf_counter()
    out = jax.block_until_ready(train(keys))
    return {"seconds": time.perf_counter() - start, **jax.device_get(out)}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env-id", default=Config.env_id)
    parser.add_argument("--max-steps", type=int, default=Config.max_steps)
    parser.add_argument("--arm", choices=sorted(ARMS), default=Config.arm)
    parser.add_argument("--seeds", type=int, default=4, help="seeds 0 .. SEEDS-1, vmapped")
    parser.add_argument("--num-levels", type=int, default=Config.num_levels)
    parser.add_argument("--num-evals", type=int, default=Config.num_evals)
    steps = int(os.environ.get("PLR_GYM_EXAMPLE_STEPS", Config().steps_per_seed))
    parser.add_argument("--total-steps", type=int, default=steps, help="env steps per seed")
    args = parser.parse_args()
    per_update = Config.num_envs * Config.num_steps
    cfg = Config(
        env_id=args.env_id, max_steps=args.max_steps, arm=args.arm, num_levels=args.num_levels,
        num_evals=args.num_evals, updates_per_eval=max(1, args.total_steps // (per_update * args.num_evals)),
    )  # fmt: skip
    out = run(cfg, list(range(args.seeds)))
    initial, final = out["eval_return_initial"].mean(-1), out["eval_return"][:, -1].mean(-1)  # per seed
    report = {"arm": cfg.arm, "env": cfg.env_id, "steps_per_seed": cfg.steps_per_seed, "s": out["seconds"]}
    print(json.dumps(report | {"initial": initial.tolist(), "final": final.tolist()}))
    curve = [initial.mean(), *out["eval_return"].mean(axis=(0, 2)).tolist()]
    print(f"held-out return, mean over seeds, at each evaluation: {[round(float(x), 3) for x in curve]}")
