"""Array code that changes a few entries of ``(num_levels,)`` arrays at ``O(B)`` cost per entry, for the
JAX sampler's :meth:`~plr_gym.jax.LevelSampler.update` (``B`` entries, ``B`` static) and
:meth:`~plr_gym.jax.LevelSampler.sample` (``B`` draws).

Why: under ``jax.vmap`` a loop whose trip count differs across the batch (``fori_loop(0, mask.sum())``)
becomes a ``while_loop`` that selects its whole carry at every step, so a loop carrying the
``(num_levels,)`` state costs ``O(num_levels)`` per entry. These helpers loop over small local arrays
(one slot per distinct level of the batch) and write them back once, with scatters.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

# jax.Array; Any for the type checker, which runs on a stack without JAX (Python 3.11)
Array = Any

#: the draws of the current :meth:`~plr_gym.jax.LevelSampler.sample` call so far: ``(levels, times)``
#: (``-1``/``0`` where none yet); ``last_sampled`` gets them after the call's loop
Recent = tuple[Array, Array]


def last_sampled_at(last_sampled: Array, i: Array, recent: Recent) -> Array:
    """``last_sampled[i]`` counting the draws in ``recent`` (``O(len(recent))``)."""
    levels, times = recent
    return jnp.maximum(last_sampled[i], jnp.where(levels == i, times, 0).max())


def with_recent(last_sampled: Array, recent: Recent) -> Array:
    """``last_sampled`` counting the draws in ``recent`` (a level drawn twice: its last draw)."""
    levels, times = recent
    ids = jnp.where(levels >= 0, levels, last_sampled.shape[0])  # -1 (no draw): dropped
    return last_sampled.at[ids].max(times, mode="drop")


def dense_slots(ids: Array, n: int) -> tuple[Array, Array]:
    """``(slot, level)``: ``slot[k]`` numbers the distinct values of ``ids`` (``0 <= ids < n``) densely,
    ``level[s]`` is the value of slot ``s`` (``n`` for the slots past the number of distinct values); both
    of ``ids``' dtype, ``level`` of length ``min(len(ids), n)``."""
    b, d = ids.shape[0], min(ids.shape[0], n)
    perm = jnp.argsort(ids, stable=True)
    ranked = ids[perm]
    start = jnp.concatenate([jnp.ones(1, bool), ranked[1:] != ranked[:-1]])
    rank = (jnp.cumsum(start) - 1).astype(ids.dtype)
    slot = jnp.zeros(b, ids.dtype).at[perm].set(rank)
    level = jnp.full(d, n, ids.dtype).at[jnp.where(start, rank, d)].set(ranked, mode="drop")
    return slot, level


def add_seen(order: Array, position: Array, new: Array, s0: Array, k_new: Array) -> tuple[Array, Array]:
    """``(order, position)`` after the numpy sampler's swaps, one after the other: the ``k``-th newly seen
    level ``new[k]`` (``k < k_new``; distinct, unseen before: at positions ``>= s0``) is swapped with the
    level at position ``s0 + k``.

    The swaps touch only the positions ``s0 .. s0 + k_new − 1`` ("targets") and the new levels' first
    positions; the loop runs over local copies of those (``O(len(new))`` per swap, not ``O(num_levels)``).
    Local ids: ``t < d`` is the target ``s0 + t``; ``d + b`` is new level ``b``'s first position when that is
    not a target.
    """
    n, d = order.shape[0], new.shape[0]
    t = jnp.arange(d, dtype=order.dtype)
    first = position[jnp.clip(new, 0, n - 1)]  # each new level's position before the swaps
    target = first - s0 < k_new
    cur = jnp.where(target, first - s0, d + t)  # local id of each new level's place
    occ = jnp.concatenate([order[jnp.minimum(s0 + t, n - 1)], new])  # who is at each local id
    who = jnp.full(2 * d, -1, order.dtype).at[jnp.where(t < k_new, cur, 2 * d)].set(t, mode="drop")

    def swap(k: Array, carry: tuple[Array, Array, Array]) -> tuple[Array, Array, Array]:
        occ, who, cur = carry
        p, j, j_new = cur[k], occ[k], who[k]  # new[k] is at p; j (new level j_new, or -1) at target k
        occ, who, cur = occ.at[k].set(new[k]), who.at[k].set(k), cur.at[k].set(k)
        occ, who = occ.at[p].set(j), who.at[p].set(j_new)
        return occ, who, cur.at[jnp.where(j_new >= 0, j_new, d)].set(p, mode="drop")

    occ, _, _ = jax.lax.fori_loop(0, k_new, swap, (occ, who, cur))
    places = jnp.concatenate([s0 + t, first])
    used = jnp.concatenate([t < k_new, (t < k_new) & ~target])
    order = order.at[jnp.where(used, places, n)].set(occ, mode="drop")
    position = position.at[jnp.where(used, occ, n)].set(places, mode="drop")
    return order, position
