"""plr_gym.jax's incremental update: the cached rank order (``SamplerState.rank_order``) is the full stable
sort after every update, bit for bit, and so are the weights; the seen levels' swaps done on local copies
are the numpy class's swaps, one after the other.

Skipped where JAX is not installed (the jax extra needs Python >= 3.12). Few shapes: a compile each.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from conftest import importorskip_on_stack

jax = importorskip_on_stack(
    "jax", "JAX >= 0.11 needs Python >= 3.12 (the jax extra is tested on Python 3.13)"
)
import jax.numpy as jnp  # noqa: E402

from plr_gym.jax import LevelSampler, SamplerState  # noqa: E402
from plr_gym.jax._common import rank_keys  # noqa: E402
from plr_gym.jax._incremental import add_seen, merge_order  # noqa: E402

N = 23  # levels: small, so that batches repeat levels and chains of swaps happen
B = 9  # entries per update

#: the samplers whose rank order is cached (rank transform), each with ties forced by its scores
RANK_CONFIGS: dict[str, dict[str, Any]] = {
    "rank_alpha1": {},
    "rank_ewa_annealed": {"alpha": 0.5, "temperature": 0.3, "temperature_end": 2.0},
    "learnability_rank": {"strategy": "learnability", "success_rate_alpha": 0.25},
}


def _reference_order(sampler: LevelSampler, state: SamplerState) -> np.ndarray:
    """The rank transform's order by numpy: best key first, ties (``-0.0 == 0.0`` too) and unseen levels
    by position (a stable sort of ``−key``, ``+inf`` for the unseen)."""
    seen = np.asarray(state.seen)
    if sampler.learns_outcomes and not jax.config.jax_enable_x64:
        rate = np.asarray(state.success_rate)
        values = np.minimum(rate, rate.dtype.type(1.0) - rate)
    else:
        values = np.asarray(state.scores)
    return np.argsort(np.where(seen, -values, np.inf), kind="stable")


def _batch(rng: np.random.Generator, learns: bool) -> tuple[Any, Any, Any]:
    levels = rng.integers(0, N // 2, B) * 2 % N  # repeats within a batch
    if learns:
        scores = rng.integers(0, 2, B).astype(float)
    else:  # few distinct values: ties, negative zero and negatives (rank takes any finite score)
        scores = rng.choice([0.0, -0.0, 0.25, 0.5, 0.5, 1.0, -0.25], B)
    mask = rng.random(B) < 0.8
    if rng.random() < 0.3:  # an invalid entry: skipped and counted
        scores[0] = np.nan
        levels[1] = N + 2
    return jnp.asarray(levels), jnp.asarray(scores), jnp.asarray(mask)


def _assert_cache_is_the_full_sort(sampler: LevelSampler, state: SamplerState) -> None:
    np.testing.assert_array_equal(np.asarray(state.rank_order), _reference_order(sampler, state))
    fresh = sampler._refresh(state, changed=None)  # sorted afresh
    np.testing.assert_array_equal(np.asarray(fresh.rank_order), np.asarray(state.rank_order))
    unsorted = state._replace(rank_order=None)  # the weights by a full sort inside transform_weights
    for a, b in ((sampler.weights(state), sampler.weights(unsorted)), (state.score_cdf, fresh.score_cdf)):
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes()


def _run_sequence(name: str, seed: int) -> None:
    sampler = LevelSampler(num_levels=N, **RANK_CONFIGS[name])
    rng = np.random.default_rng(seed)
    update = jax.jit(sampler.update)
    state = sampler.init()
    _assert_cache_is_the_full_sort(sampler, state)
    for step in range(30):
        state = update(state, *_batch(rng, sampler.learns_outcomes))
        if step % 7 == 3:
            state = sampler.set_progress(state, step / 30)
        if step % 5 == 1:
            state, _, _ = sampler.sample(state, jax.random.key(step), 4)
        _assert_cache_is_the_full_sort(sampler, state)
    assert int(state.num_seen) > N // 3


@pytest.mark.parametrize("name", sorted(RANK_CONFIGS))
def test_cached_rank_order_is_the_full_stable_sort_after_every_update(name: str) -> None:
    _run_sequence(name, seed=sorted(RANK_CONFIGS).index(name))


@pytest.mark.parametrize("name", ["rank_alpha1", "learnability_rank"])
def test_cached_rank_order_is_the_full_stable_sort_in_x64(name: str) -> None:
    with jax.enable_x64(True):
        _run_sequence(name, seed=10)


def test_cached_rank_order_under_vmap_is_each_state_full_sort() -> None:
    sampler = LevelSampler(num_levels=N)
    rng = np.random.default_rng(3)
    update = jax.jit(jax.vmap(sampler.update))
    states = jax.vmap(lambda _: sampler.init())(jnp.arange(3))
    for _ in range(12):
        batches = [_batch(rng, False) for _ in range(3)]
        states = update(states, *map(jnp.stack, zip(*batches)))
        for k in range(3):
            _assert_cache_is_the_full_sort(sampler, jax.tree.map(lambda a, k=k: a[k], states))


def test_rank_order_round_trips_and_old_states_without_it_still_work(tmp_path: Any) -> None:
    sampler = LevelSampler(num_levels=N, alpha=0.5)
    rng = np.random.default_rng(5)
    state = sampler.init()
    for _ in range(6):
        state = sampler.update(state, *_batch(rng, False))
    path = tmp_path / "sampler.npz"
    sampler.save(state, path)
    loaded = sampler.load(path)  # the file has no rank order (the numpy format): sorted afresh
    np.testing.assert_array_equal(np.asarray(loaded.rank_order), np.asarray(state.rank_order))
    assert np.asarray(loaded.score_cdf).tobytes() == np.asarray(state.score_cdf).tobytes()
    # a state of the fields before rank_order (a pickle of an older plr_gym, say): weights, draws and the
    # next update work, and that update sorts it
    old = SamplerState(*tuple(state)[:-1])
    assert old.rank_order is None
    assert np.asarray(sampler.weights(old)).tobytes() == np.asarray(sampler.weights(state)).tobytes()
    sampler.sample(old, jax.random.key(0), 2)
    batch = _batch(rng, False)
    after_old, after = sampler.update(old, *batch), sampler.update(state, *batch)
    np.testing.assert_array_equal(np.asarray(after_old.rank_order), np.asarray(after.rank_order))
    _assert_cache_is_the_full_sort(sampler, after_old)


def test_merge_order_is_the_stable_sort_of_the_new_keys() -> None:
    rng = np.random.default_rng(0)
    merge = jax.jit(lambda order, changed, keys: merge_order(order, changed, lambda ids: keys[ids]))
    for trial in range(150):
        n = (1, 6, 29)[trial % 3]  # one compile per size: changed is padded to n
        old_keys = rng.integers(-3, 4, n).astype(np.int32)  # many ties
        order = np.argsort(old_keys, kind="stable")
        d = n
        changed = rng.choice(n, int(rng.integers(0, d + 1)), replace=False)
        new_keys = old_keys.copy()
        new_keys[changed] = rng.integers(-3, 4, changed.size)
        if rng.random() < 0.2:
            new_keys[changed] = np.iinfo(np.int32).max - 1  # near the pads' key
        padded = np.full(d, n)
        padded[: changed.size] = rng.permutation(changed)
        got = merge(jnp.asarray(order, jnp.int32), jnp.asarray(padded, jnp.int32), jnp.asarray(new_keys))
        np.testing.assert_array_equal(
            np.asarray(got), np.argsort(new_keys, kind="stable"), err_msg=str(trial)
        )


def test_rank_keys_order_floats_as_the_rank_transform() -> None:
    values = jnp.asarray([0.5, -0.0, 0.0, -1.5, np.inf, 2.0, 0.5], jnp.float32)
    seen = jnp.asarray([True, True, True, True, True, True, False])
    order = np.argsort(np.asarray(rank_keys(values, seen)), kind="stable")
    np.testing.assert_array_equal(order, [4, 5, 0, 1, 2, 3, 6])


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
