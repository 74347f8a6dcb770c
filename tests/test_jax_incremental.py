"""plr_gym.jax's update and sample without the ``(num_levels,)`` state in their loops' carry: the seen
levels' swaps done on local copies are the numpy class's swaps, one after the other; the rank transform's
sort keys order ``-0.0`` as ``0.0`` under ``jit``; batched updates and draws are each state's own.

Skipped where JAX is not installed (the jax extra needs Python >= 3.12). Few shapes: a compile each.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from conftest import importorskip_on_stack

jax = importorskip_on_stack(
    "jax", "JAX >= 0.11 needs Python >= 3.12 (the jax extra is tested on Python 3.13)"
)
import jax.numpy as jnp  # noqa: E402

from plr_gym.jax import LevelSampler  # noqa: E402
from plr_gym.jax._common import argsort_stable  # noqa: E402
from plr_gym.jax._incremental import add_seen, dense_slots  # noqa: E402

N = 23  # levels: small, so that batches repeat levels and chains of swaps happen
B = 9  # entries per update


def _batch(rng: np.random.Generator) -> tuple[Any, Any, Any]:
    levels = rng.integers(0, N // 2, B) * 2 % N  # repeats within a batch
    scores = rng.choice([0.0, -0.0, 0.25, 0.5, 0.5, 1.0, -0.25], B)  # ties, negative zero (rank: any score)
    mask = rng.random(B) < 0.8
    if rng.random() < 0.3:  # an invalid entry: skipped and counted
        scores[0] = np.nan
        levels[1] = N + 2
    return jnp.asarray(levels), jnp.asarray(scores), jnp.asarray(mask)


def test_add_seen_is_the_numpy_class_swaps_one_after_the_other() -> None:
    rng = np.random.default_rng(1)
    swaps = jax.jit(add_seen)
    for trial in range(300):
        n = (1, 4, 11)[trial % 3]  # one compile per size: the new levels are padded to n
        s0 = int(rng.integers(0, n + 1))
        order = rng.permutation(n)
        position = np.argsort(order)
        new = rng.permutation(order[s0:])[: int(rng.integers(0, n - s0 + 1))]
        want_order, want_position = order.copy(), position.copy()
        for k, i in enumerate(new):  # plr_gym.LevelSampler's swap into order[num_seen]
            q, p = s0 + k, want_position[i]
            j = want_order[q]
            want_order[p], want_order[q], want_position[j], want_position[i] = j, i, p, q
        padded = np.full(n, -1)
        padded[: new.size] = new
        args = [jnp.asarray(x, jnp.int32) for x in (order, position, padded, s0, new.size)]
        got_order, got_position = swaps(*args)
        np.testing.assert_array_equal(np.asarray(got_order), want_order, err_msg=str(trial))
        np.testing.assert_array_equal(np.asarray(got_position), want_position, err_msg=str(trial))


def test_dense_slots_number_the_distinct_levels() -> None:
    ids = jnp.asarray([5, 2, 5, 9, 2, 0], jnp.int32)
    slot, level = jax.jit(dense_slots, static_argnums=1)(ids, 10)
    np.testing.assert_array_equal(np.asarray(level)[np.asarray(slot)], np.asarray(ids))
    np.testing.assert_array_equal(np.asarray(level), [0, 2, 5, 9, 10, 10])  # 10: unused slots


def test_stable_sort_keys_tie_negative_and_positive_zero_under_jit() -> None:
    x = jnp.asarray([0.0, -0.0, 1.0, -0.0, 0.0, -1.0], jnp.float32)
    for fn in (argsort_stable, jax.jit(argsort_stable)):
        np.testing.assert_array_equal(np.asarray(fn(x)), [5, 0, 1, 3, 4, 2])  # numpy's stable order


def test_rank_weights_break_zero_ties_by_position_as_numpy() -> None:
    sampler = LevelSampler(num_levels=4, staleness_coef=0.0, uniform_mass=0.0)
    state = sampler.update(sampler.init(), jnp.arange(4), jnp.asarray([0.0, -0.0, 0.5, 0.0]))
    want = np.array([1 / 2, 1 / 3, 1, 1 / 4])  # ranks 2, 3, 1, 4: the zeros by position
    np.testing.assert_allclose(np.asarray(sampler.weights(state)), want / want.sum(), rtol=1e-6)


def test_batched_updates_and_draws_are_each_states_own() -> None:
    sampler = LevelSampler(num_levels=N, alpha=0.5, staleness_transform="rank")
    rng = np.random.default_rng(3)
    update, sample = (
        jax.jit(jax.vmap(sampler.update)),
        jax.jit(jax.vmap(sampler.sample, (0, 0, None, 0)), static_argnums=2),
    )
    one_update, one_sample = jax.jit(sampler.update), jax.jit(sampler.sample, static_argnums=2)
    states = jax.vmap(lambda _: sampler.init())(jnp.arange(3))
    for step in range(10):
        batches = [_batch(rng) for _ in range(3)]
        keys = jax.random.split(jax.random.key(step), 3)
        masks = jnp.asarray(rng.random((3, 5)) < 0.5)
        before = states
        states = update(states, *map(jnp.stack, zip(*batches)))
        states, levels, _ = sample(states, keys, 5, masks)
        for k in range(3):
            own = one_update(jax.tree.map(lambda a, k=k: a[k], before), *batches[k])
            own, own_levels, _ = one_sample(own, keys[k], 5, masks[k])
            np.testing.assert_array_equal(np.asarray(levels[k]), np.asarray(own_levels))
            for a, b in zip(jax.tree.leaves(own), jax.tree.leaves(jax.tree.map(lambda a, k=k: a[k], states))):
                assert np.asarray(a).tobytes() == np.asarray(b).tobytes()
