"""Array code shared by the JAX sampler and buffer: the transforms as masked, normalised weights."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

# jax.Array; Any for the type checker, which runs on a stack without JAX (Python 3.11)
Array = Any

#: The transforms written in array code here (the built-ins of :mod:`plr_gym.transforms`).
JAX_TRANSFORMS: tuple[str, ...] = ("rank", "power", "softmax", "eps_greedy", "constant", "max", "topk")


def float_dtype() -> Any:
    """float64 when ``jax_enable_x64`` is on, else float32 (JAX's default float)."""
    return jnp.zeros(()).dtype


def int_dtype() -> Any:
    """int64 when ``jax_enable_x64`` is on, else int32."""
    return jnp.zeros((), dtype=int).dtype


def argsort_stable(x: Array) -> Array:
    """``jnp.argsort(x, stable=True)`` for a float array without NaN, faster: the floats become integers of
    the same order (their bits, the negative ones' flipped; ``-0.0`` as ``0.0``) and a stable integer sort
    carries the positions (XLA's CPU sort of floats, with its total-order comparator, is 2-4x slower)."""
    itype = jnp.int64 if x.dtype == jnp.float64 else jnp.int32
    # -0.0 as 0.0 (not ``x + 0.0``: XLA simplifies that to ``x`` under jit, and -0.0 sorted before 0.0)
    bits = jax.lax.bitcast_convert_type(jnp.where(x == 0.0, jnp.zeros((), x.dtype), x), itype)
    keys = bits ^ ((bits >> (jnp.iinfo(itype).bits - 1)) & jnp.iinfo(itype).max)
    positions = jnp.arange(x.shape[0], dtype=itype)
    return jax.lax.sort((keys, positions), num_keys=1, is_stable=True)[1]


def transform_weights(
    name: str,
    values: Array,
    mask: Array,
    temperature: Any,
    eps: float = 0.05,
    topk: int = 1,
    order_keys: Array | None = None,
) -> Array:
    """Normalised weights of transform ``name`` over the entries of ``values`` where ``mask`` holds (0
    elsewhere), as :meth:`plr_gym.transforms.ScoreTransform.weights` computes over ``values[mask]``: ties
    break towards the earlier position, and weights with no mass become uniform over the masked entries.
    All zeros when nothing is masked. ``order_keys`` (default ``values``): what the order-based transforms
    (``rank``, ``topk``, ``eps_greedy``, ``max``) compare, a key increasing with ``values``.
    """
    n = values.shape[0]
    fdt = float_dtype()
    values = values.astype(fdt)
    if order_keys is not None and name in ("rank", "topk", "eps_greedy", "max"):
        values = order_keys.astype(fdt)
    count = mask.sum()
    if name in ("rank", "topk"):
        order = argsort_stable(jnp.where(mask, -values, jnp.inf))
        ranks = jnp.zeros(n, fdt).at[order].set(jnp.arange(1, n + 1, dtype=fdt))
        if name == "rank":
            w = ranks ** (-1.0 / temperature)
        else:
            w = (ranks <= topk).astype(fdt)
    elif name in ("power", "softmax"):
        g = jnp.log(values) if name == "power" else values
        g = jnp.where(mask, g, -jnp.inf)
        top = g.max()
        shift = jnp.where(jnp.isfinite(top), top, 0.0)
        w = jnp.exp((g - shift) / temperature)
    elif name == "eps_greedy":
        best = jnp.argmax(jnp.where(mask, values, -jnp.inf))
        w = jnp.full(n, eps, fdt) / count.astype(fdt)
        w = w.at[best].add(1.0 - eps)
    elif name == "constant":
        w = jnp.ones(n, fdt)
    elif name == "max":
        top = jnp.where(mask, values, -jnp.inf).max()
        w = (values == top).astype(fdt)
    else:  # pragma: no cover - the constructors check the names
        raise ValueError(f"no array code for transform {name!r}; choose one of {', '.join(JAX_TRANSFORMS)}")
    w = jnp.where(mask, w, 0.0)
    total = w.sum()
    uniform = mask.astype(fdt) / jnp.maximum(count, 1).astype(fdt)
    return jnp.where(total > 0.0, w / jnp.where(total > 0.0, total, 1.0), uniform)


def draw_index(key: Array, weights: Array) -> Array:
    """An index drawn from ``weights`` (non-negative, some positive) by inverse CDF; never an index of
    weight 0."""
    cdf = jnp.cumsum(weights)
    u = jax.random.uniform(key, dtype=cdf.dtype) * cdf[-1]
    i = jnp.searchsorted(cdf, u, side="right")
    # u rounded up to the total: the last index of positive weight (otherwise cdf[i-1] <= u < cdf[i])
    last = weights.shape[0] - 1 - jnp.argmax(weights[::-1] > 0.0)
    return jnp.minimum(i, last)
