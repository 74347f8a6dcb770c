"""plr_gym.jax.jaxued.LevelSampler next to JaxUED's own LevelSampler: same operations, same draws.

Needs JaxUED (``pip install jaxued==0.0.1``; its ``initialize`` calls ``jax.tree_map``, removed from JAX:
replace it by ``jax.tree_util.tree_map`` in the installed copy, as upstream did after the release). Not
part of the test suite (JaxUED is not a dependency); its output is quoted in ``docs/jax.md``.

Both samplers get the same inserts (levels drawn with repeats, so duplicates occur), and the replay
indices JaxUED draws are fed to ours (``mark_replayed``), so the states can be compared step by step:
weights, insert indices, clock, timestamps, sizes and scores.

    python benchmarks/reference/jaxued_equivalence.py [--seeds 20] [--steps 60]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))  # benchmarks/common: _provenance

import jax
import jax.numpy as jnp
import numpy as np

from _provenance import cpu_model, git_commit, load_average
from plr_gym.jax.jaxued import LevelSampler


def run(
    prioritization: str, params: dict[str, float], options: dict[str, object], seeds: int, steps: int
) -> str:
    from jaxued.level_sampler import LevelSampler as Reference

    capacity, batch = 16, 4
    kwargs = {
        "capacity": capacity,
        "replay_prob": 0.8,
        "staleness_coeff": 0.3,
        "minimum_fill_ratio": 0.5,
        "prioritization": prioritization,
        "prioritization_params": params,
        "duplicate_check": True,
    }
    ref, ours = Reference(**kwargs), LevelSampler(**kwargs, **options)  # type: ignore[arg-type]

    @jax.jit
    def ref_step(sampler, levels, scores, key):  # type: ignore[no-untyped-def]
        sampler, idx = ref.insert_batch(sampler, levels, scores)
        w = ref.level_weights(sampler)
        sampler, (replayed, _) = ref.sample_replay_levels(sampler, key, batch)
        return sampler, idx, w, replayed

    @jax.jit
    def our_step(sampler, levels, scores, replayed):  # type: ignore[no-untyped-def]
        sampler, idx = ours.insert_batch(sampler, levels, scores)
        w = ours.level_weights(sampler)
        state = ours.buffer.mark_replayed(ours._state(sampler), replayed)
        return ours._dict(state, sampler), idx, w

    max_dw = 0.0
    mismatched = {"insert indices": 0, "clock": 0, "timestamps": 0, "sizes": 0, "scores": 0}
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        a = ref.initialize(jnp.zeros((), jnp.int32))
        b = ours.initialize(jnp.zeros((), jnp.int32))
        for t in range(steps):
            levels = jnp.asarray(rng.integers(0, 40, batch), jnp.int32)
            scores = jnp.asarray(rng.random(batch), jnp.float32)
            a, ia, wa, replayed = ref_step(a, levels, scores, jax.random.key(seed * 1000 + t))
            b, ib, wb = our_step(b, levels, scores, replayed)
            max_dw = max(max_dw, float(jnp.abs(wa - wb).max()))
            size = int(a["size"])
            mismatched["insert indices"] += int((ia != ib).any())
            mismatched["clock"] += int(int(a["episode_count"]) != int(b["episode_count"]))
            mismatched["timestamps"] += int((a["timestamps"][:size] != b["timestamps"][:size]).any())
            mismatched["sizes"] += int(size != int(b["size"]))
            mismatched["scores"] += int((a["scores"][:size] != b["scores"][:size]).any())
    bad = ", ".join(f"{k} {v}" for k, v in mismatched.items())
    return f"max |weight difference| {max_dw:.2e}; steps with a difference ({seeds * steps} steps): {bad}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--steps", type=int, default=60)
    args = parser.parse_args()
    import jaxued

    print(f"# plr_gym.jax.jaxued vs jaxued {getattr(jaxued, '__version__', '0.0.1')} (jax {jax.__version__})")
    print(f"commit {git_commit()}, {cpu_model()}, load {load_average()}")
    command = "python benchmarks/reference/jaxued_equivalence.py"
    print(f"command: {command} --seeds {args.seeds} --steps {args.steps}")
    cases = [
        ("rank", {"temperature": 0.3}, {}, "rank, clock='jaxued' (default)"),
        ("rank", {"temperature": 0.3}, {"clock": "plr_gym"}, "rank, clock='plr_gym'"),
    ]
    for prioritization, params, options, label in cases:
        print(f"- {label}: {run(prioritization, params, options, args.seeds, args.steps)}")
    try:
        out = run("topk", {"k": 4}, {"topk_softmax": True}, 1, 2)
        print(f"- topk, topk_softmax=True (clock='jaxued', the default): {out}")
    except Exception as exc:  # JaxUED 0.0.1's topk on current JAX
        print(f"- topk: JaxUED raises {type(exc).__name__}: {str(exc).splitlines()[0][:120]}")


if __name__ == "__main__":
    main()
