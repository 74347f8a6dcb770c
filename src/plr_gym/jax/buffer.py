"""Robust PLR / ACCEL level buffer in JAX: pure functions on a pytree state.

:class:`LevelBuffer` is the array-code twin of :class:`plr_gym.LevelBuffer`: the same keywords, defaults,
replay distribution, insert/evict rule and staleness clock. Levels are any pytree of arrays (one level's
shape is fixed by the placeholder given to :meth:`LevelBuffer.init`), stored with a leading ``capacity``
axis; each level may carry ``extras`` (a dict of per-level values, e.g. ``{"max_return": ...}``).

The staleness clock (``count``, the buffer's ``c``) ticks once per *stored* level (an insert that adds or
replaces a level) and once per replayed level; a rejected insert, and with ``duplicate_check`` an insert
of a level already stored (which updates that level's score), do not tick it. ``clock="jaxued"`` ticks it
on every insert instead, and refreshes a re-inserted duplicate's timestamp, as JaxUED 0.0.1 does.

Declared differences from the numpy class: invalid entries (non-finite scores, indices outside the stored
levels) are skipped and counted in ``state.num_rejected`` (``on_invalid="skip"``), or fail a ``checkify``
check (``on_invalid="raise"``); a replay from an empty buffer returns index ``-1`` and leaves the state as
it was (the numpy class raises ``RuntimeError``); an insert without ``extras`` keeps the slot's extras
(the numpy class resets them to ``{}``).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers
import os
from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar, cast

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import checkify

from plr_gym.jax._common import draw_index, float_dtype, int_dtype, transform_weights
from plr_gym.level_buffer import LevelBuffer as NumpyLevelBuffer

__all__ = ["BufferState", "LevelBuffer"]

# jax.Array; Any for the type checker, which runs on a stack without JAX (Python 3.11)
Array = Any
_F = TypeVar("_F", bound=Callable[..., Any])


def _jit(static: tuple[int, ...] = (0,)) -> Callable[[_F], _F]:
    """``jax.jit`` with the configuration (``self``) and the arguments at ``static`` static."""
    return cast(Callable[[_F], _F], functools.partial(jax.jit, static_argnums=static))


class BufferState(NamedTuple):
    """The whole state of a :class:`LevelBuffer` (a pytree; per-level arrays of length ``capacity``,
    meaningful at indices ``< size``)."""

    levels: Any
    scores: Array
    timestamps: Array
    size: Array
    count: Array
    extras: dict[str, Array]
    num_rejected: Array

    @property
    def staleness(self) -> Array:
        """Level episodes since each level was last inserted or replayed."""
        return self.count - self.timestamps


@dataclasses.dataclass(frozen=True)
class LevelBuffer:
    """A bounded buffer of levels with PLR scores (Robust PLR, ACCEL) as pure JAX functions.

    Keywords, defaults and meaning are :class:`plr_gym.LevelBuffer`'s; ``score_transform`` is ``"rank"``,
    ``"topk"`` or ``"max"``. JAX-only options:

    :param on_invalid: ``"skip"`` (default) or ``"raise"`` (a ``checkify`` check), for entries the numpy
        class refuses.
    :param clock: ``"plr_gym"`` (default: the clock ticks per stored or replayed level) or ``"jaxued"``
        (also per rejected insert and per duplicate re-insert, which refreshes its timestamp).
    :param topk_softmax: ``False`` (default): ``topk`` is uniform over the ``topk`` best levels; ``True``:
        a softmax of their scores, as JaxUED 0.0.1 computed it (to reproduce old runs).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from plr_gym.jax import LevelBuffer
        >>> buffer = LevelBuffer(capacity=2)
        >>> state = buffer.init(jnp.zeros((), int))            # the placeholder fixes a level's shape
        >>> levels, scores = jnp.array([101, 202, 303, 404]), jnp.array([0.5, 0.1, 0.05, 0.9])
        >>> state, idx = buffer.insert_batch(state, levels, scores)
        >>> idx.tolist()                                        # 303 rejected, 404 replaces 202
        [0, 1, -1, 1]
        >>> state.levels.tolist(), int(state.count)
        ([101, 404], 3)
        >>> state, index, level = buffer.sample_replay_level(state, jax.random.key(0))
        >>> int(level) in (101, 404)
        True
    """

    capacity: int
    replay_prob: float = 0.95
    staleness_coef: float = 0.5
    min_fill_ratio: float = 1.0
    score_transform: str = "rank"
    temperature: float = 1.0
    topk: int = 1
    duplicate_check: bool = False
    on_invalid: str = "skip"
    clock: str = "plr_gym"
    topk_softmax: bool = False

    def __post_init__(self) -> None:
        if self.on_invalid not in ("skip", "raise"):
            raise ValueError(f"on_invalid={self.on_invalid!r} is not supported; choose one of skip, raise")
        if self.clock not in ("plr_gym", "jaxued"):
            raise ValueError(f"clock={self.clock!r} is not supported; choose one of plr_gym, jaxued")
        if not isinstance(self.topk_softmax, bool):
            raise TypeError(f"topk_softmax must be a bool, got {type(self.topk_softmax).__name__}")
        NumpyLevelBuffer(**self._numpy_kwargs())  # every other check, in one place (numpy's)
        for name in ("replay_prob", "staleness_coef", "min_fill_ratio", "temperature"):
            object.__setattr__(self, name, float(getattr(self, name)))
        for name in ("capacity", "topk"):
            object.__setattr__(self, name, int(getattr(self, name)))
        object.__setattr__(self, "duplicate_check", bool(self.duplicate_check))

    def _numpy_kwargs(self) -> dict[str, Any]:
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        for jax_only in ("on_invalid", "clock", "topk_softmax"):
            del fields[jax_only]
        return fields

    @property
    def min_fill_count(self) -> int:
        """Stored levels needed before any replay (``size >= min_fill_ratio·capacity``, as numpy compares)."""
        return max(1, math.ceil(self.min_fill_ratio * self.capacity))

    # ------------------------------------------------------------------ state
    def init(self, level: Any, extras: dict[str, Any] | None = None) -> BufferState:
        """An empty buffer for levels shaped like ``level`` (any pytree of arrays), with per-level
        ``extras`` shaped like the given dict (its values are the placeholders)."""
        c = self.capacity

        def stack(x: Any) -> Array:
            x = jnp.asarray(x)
            return jnp.broadcast_to(x[None], (c, *x.shape))

        idt = int_dtype()
        return BufferState(
            levels=jax.tree.map(stack, level),
            scores=jnp.full(c, -jnp.inf, float_dtype()),
            timestamps=jnp.zeros(c, idt),
            size=jnp.zeros((), idt),
            count=jnp.zeros((), idt),
            extras={} if extras is None else jax.tree.map(stack, dict(extras)),
            num_rejected=jnp.zeros((), idt),
        )

    @_jit()
    def flush(self, state: BufferState) -> BufferState:
        """Remove every level (the clock keeps going)."""
        return state._replace(size=jnp.zeros_like(state.size), scores=jnp.full_like(state.scores, -jnp.inf))

    # ------------------------------------------------------------------ weights
    def _mask(self, state: BufferState) -> Array:
        return jnp.arange(self.capacity) < state.size

    @_jit()
    def score_weights(self, state: BufferState) -> Array:
        """``P_S`` over the slots (0 beyond ``size``)."""
        mask = self._mask(state)
        if self.score_transform == "topk" and self.topk_softmax:
            top = transform_weights("topk", state.scores, mask, 1.0, topk=self.topk) > 0.0
            z = jnp.where(top, state.scores, -jnp.inf)
            w = jnp.where(top, jnp.exp(z - jnp.where(top.any(), z.max(), 0.0)), 0.0)
            return w / jnp.where(w.sum() > 0.0, w.sum(), 1.0)
        return transform_weights(self.score_transform, state.scores, mask, self.temperature, topk=self.topk)

    @_jit()
    def staleness_weights(self, state: BufferState) -> Array:
        """``P_C ∝ c − C_i`` over the stored levels (uniform if every staleness is 0)."""
        mask = self._mask(state)
        s = jnp.where(mask, state.count - state.timestamps, 0).astype(float_dtype())
        total = s.sum()
        uniform = mask / jnp.maximum(state.size, 1).astype(s.dtype)
        return jnp.where(total > 0, s / jnp.where(total > 0, total, 1.0), uniform)

    @_jit()
    def weights(self, state: BufferState) -> Array:
        """The replay distribution over the slots: :meth:`plr_gym.LevelBuffer.sample_weights` (0 beyond
        ``size``; all zeros when empty)."""
        out = (1.0 - self.staleness_coef) * self.score_weights(state)
        if self.staleness_coef > 0.0:
            out = out + self.staleness_coef * self.staleness_weights(state)
        return out

    # ------------------------------------------------------------------ find / insert / update
    @_jit()
    def find(self, state: BufferState, level: Any) -> Array:
        """Index of the first stored level equal to ``level``, or -1."""
        c = self.capacity
        eq = self._mask(state)
        for stored, lvl in zip(jax.tree.leaves(state.levels), jax.tree.leaves(level)):
            eq &= (stored == jnp.asarray(lvl)[None]).reshape(c, -1).all(axis=1)
        return jnp.where(eq.any(), jnp.argmax(eq), -1).astype(state.size.dtype)

    def _check(self, ok: Array, message: str, **values: Any) -> None:
        if self.on_invalid == "raise":
            checkify.check(ok, message, **values)

    def _set_extras(self, extras: dict[str, Array], idx: Array, new: dict[str, Any] | None, do: Array) -> Any:
        if not new:
            return extras
        out = dict(extras)
        for k, v in new.items():
            out[k] = extras[k].at[idx].set(jnp.where(do, jnp.asarray(v, extras[k].dtype), extras[k][idx]))
        return out

    def _insert_one(
        self, state: BufferState, level: Any, score: Array, extra: dict[str, Any] | None, m: Array
    ) -> tuple[BufferState, Array]:
        c, idt = self.capacity, state.size.dtype
        score = jnp.asarray(score, state.scores.dtype)
        valid = jnp.isfinite(score)
        self._check(valid | ~m, "insert: score {score} is not finite", score=score)
        do = m & valid
        dup = self.find(state, level) if self.duplicate_check else jnp.asarray(-1, idt)
        is_dup = do & (dup >= 0)
        has_room = state.size < c
        slot = jnp.where(has_room, state.size, jnp.argmin(self.weights(state))).astype(idt)
        stored = do & ~is_dup & (has_room | (score > state.scores[slot]))
        idx = jnp.where(is_dup, dup, slot)
        write = stored | is_dup
        tick = (do if self.clock == "jaxued" else stored).astype(idt)
        count = state.count + tick
        stamp_now = stored | (is_dup if self.clock == "jaxued" else False)
        new_state = state._replace(
            levels=jax.tree.map(
                lambda x, y: x.at[idx].set(jnp.where(stored, jnp.asarray(y, x.dtype), x[idx])),
                state.levels,
                level,
            ),
            scores=state.scores.at[idx].set(jnp.where(write, score, state.scores[idx])),
            timestamps=state.timestamps.at[idx].set(jnp.where(stamp_now, count, state.timestamps[idx])),
            size=state.size + (stored & has_room).astype(idt),
            count=count,
            extras=self._set_extras(state.extras, idx, extra, write),
            num_rejected=state.num_rejected + (m & ~valid).astype(idt),
        )
        return new_state, jnp.where(write, idx, -1).astype(idt)

    @_jit()
    def insert(
        self, state: BufferState, level: Any, score: Any, extras: dict[str, Any] | None = None
    ) -> tuple[BufferState, Array]:
        """Add a level; return ``(state, index)``, index -1 if it was not added.

        While there is room the level is added. When full, it replaces the lowest-weighted level if its
        score is strictly higher than that level's score, else it is rejected. With ``duplicate_check``,
        a level already stored gets its score (and ``extras``) updated instead.
        """
        return self._insert_one(state, level, score, extras, jnp.asarray(True))

    @_jit()
    def insert_batch(
        self,
        state: BufferState,
        levels: Any,
        scores: Array,
        extras: dict[str, Array] | None = None,
        mask: Array | None = None,
    ) -> tuple[BufferState, Array]:
        """:meth:`insert` each level (leading axis of ``levels``) in order; returns the indices (-1 where
        rejected or masked out)."""
        scores = jnp.asarray(scores)
        mask = jnp.ones(scores.shape, bool) if mask is None else jnp.asarray(mask, bool)

        def step(s: BufferState, x: tuple[Any, Array, Any, Array]) -> tuple[BufferState, Array]:
            lvl, sc, ex, m = x
            return self._insert_one(s, lvl, sc, ex, m)

        out: tuple[BufferState, Array] = jax.lax.scan(step, state, (levels, scores, extras, mask))
        return out

    def _update_one(
        self, state: BufferState, index: Array, score: Array, extra: dict[str, Any] | None, m: Array
    ) -> BufferState:
        score = jnp.asarray(score, state.scores.dtype)
        valid = jnp.isfinite(score) & (index >= 0) & (index < state.size)
        self._check(valid | ~m, "update: index {index} or score {score} is invalid", index=index, score=score)
        do = m & valid
        idx = jnp.clip(index, 0, self.capacity - 1)
        return state._replace(
            scores=state.scores.at[idx].set(jnp.where(do, score, state.scores[idx])),
            extras=self._set_extras(state.extras, idx, extra, do),
            num_rejected=state.num_rejected + (m & ~valid).astype(state.size.dtype),
        )

    @_jit()
    def update(
        self, state: BufferState, index: Any, score: Any, extras: dict[str, Any] | None = None
    ) -> BufferState:
        """Set the score (and the given ``extras``) of the level at ``index``."""
        return self._update_one(state, jnp.asarray(index), score, extras, jnp.asarray(True))

    @_jit()
    def update_batch(
        self,
        state: BufferState,
        indices: Array,
        scores: Array,
        extras: dict[str, Array] | None = None,
        mask: Array | None = None,
    ) -> BufferState:
        """:meth:`update` each ``(index, score)`` pair, in order."""
        indices = jnp.asarray(indices)
        mask = jnp.ones(indices.shape, bool) if mask is None else jnp.asarray(mask, bool)

        def step(s: BufferState, x: tuple[Array, Array, Any, Array]) -> tuple[BufferState, None]:
            return self._update_one(s, *x), None

        out: BufferState = jax.lax.scan(step, state, (indices, jnp.asarray(scores), extras, mask))[0]
        return out

    # ------------------------------------------------------------------ replay
    @_jit()
    def sample_replay_decision(self, state: BufferState, key: Array) -> Array:
        """True to replay a stored level, False to try a new one; never True below ``min_fill_ratio``
        (nor from an empty buffer)."""
        return (state.size >= self.min_fill_count) & (jax.random.uniform(key) < self.replay_prob)

    def _mark(self, state: BufferState, idx: Array) -> BufferState:
        ok = (idx >= 0) & (idx < state.size)
        i = jnp.clip(idx, 0, self.capacity - 1)
        count = state.count + ok.astype(state.count.dtype)
        return state._replace(
            count=count, timestamps=state.timestamps.at[i].set(jnp.where(ok, count, state.timestamps[i]))
        )

    def _replay_one(self, state: BufferState, key: Array, ps: Array) -> tuple[BufferState, tuple[Array, Any]]:
        """One replay; ``ps`` is :meth:`score_weights` (unchanged by replays: computed once per batch)."""
        empty = state.size == 0
        self._check(~empty, "sample_replay_level: the buffer is empty")
        weights = (1.0 - self.staleness_coef) * ps
        if self.staleness_coef > 0.0:  # the formula of weights(), term by term
            weights = weights + self.staleness_coef * self.staleness_weights(state)
        idx = jnp.where(empty, -1, draw_index(key, weights)).astype(state.size.dtype)
        level = jax.tree.map(lambda x: x[jnp.maximum(idx, 0)], state.levels)
        return self._mark(state, idx), (idx, level)

    @_jit()
    def sample_replay_level(self, state: BufferState, key: Array) -> tuple[BufferState, Array, Any]:
        """Draw ``(state, index, level)`` from :meth:`weights` and mark the level as just replayed (index
        -1 and the state unchanged when the buffer is empty)."""
        state, (idx, level) = self._replay_one(state, key, self.score_weights(state))
        return state, idx, level

    @_jit((0, 3))
    def sample_replay_levels(self, state: BufferState, key: Array, n: int) -> tuple[BufferState, Array, Any]:
        """``n`` consecutive :meth:`sample_replay_level` draws: ``(state, indices, levels)``."""
        ps = self.score_weights(state)
        state, (indices, levels) = jax.lax.scan(
            lambda s, k: self._replay_one(s, k, ps), state, jax.random.split(key, n)
        )
        return state, indices, levels

    @_jit()
    def mark_replayed(self, state: BufferState, indices: Array) -> BufferState:
        """``state`` after replaying the levels at ``indices`` (in order), however they were drawn: what
        :meth:`sample_replay_levels` does after each draw (indices outside the stored levels: no change)."""
        out: BufferState = jax.lax.scan(lambda s, i: (self._mark(s, i), None), state, jnp.asarray(indices))[0]
        return out

    # ------------------------------------------------------------------ the numpy state and checkpoint files
    def to_numpy(self, state: BufferState, seed: int | None = None) -> NumpyLevelBuffer:
        """A :class:`plr_gym.LevelBuffer` holding ``state`` (levels as numpy arrays, 0-d ones as Python
        scalars; extras as dicts; its generator seeded with ``seed``). ``num_rejected`` is dropped."""
        host = jax.device_get(state)
        size = int(host.size)
        out = NumpyLevelBuffer(**self._numpy_kwargs(), seed=seed)
        d = out.state_dict()
        d.update(
            levels=[_host_item(host.levels, i) for i in range(size)],
            extras=[{k: _host_value(np.asarray(v)[i]) for k, v in host.extras.items()} for i in range(size)],
            scores=np.asarray(host.scores, np.float64)[:size],
            timestamps=np.asarray(host.timestamps, np.int64)[:size],
            count=int(host.count),
        )
        out.load_state_dict(d)
        return out

    def state_dict(self, state: BufferState, seed: int | None = None) -> dict[str, Any]:
        """:meth:`plr_gym.LevelBuffer.state_dict` of ``state`` (see :meth:`to_numpy`)."""
        return self.to_numpy(state, seed).state_dict()

    def state_from_dict(
        self, state_dict: dict[str, Any], level: Any, extras: dict[str, Any] | None = None
    ) -> BufferState:
        """A state from :meth:`plr_gym.LevelBuffer.state_dict` (validated by the numpy class; the
        configuration must be this buffer's). ``level`` and ``extras`` are placeholders as for
        :meth:`init`; every stored level must have that structure."""
        checked = NumpyLevelBuffer(**self._numpy_kwargs())
        checked.load_state_dict(state_dict)
        d = checked.state_dict()
        state = self.init(level, extras)
        size = len(d["levels"])
        if size:
            try:
                stacked = jax.tree.map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *d["levels"])
            except (ValueError, TypeError) as exc:
                raise ValueError(f"the stored levels do not share one structure and shape: {exc}") from exc
            if jax.tree.structure(stacked) != jax.tree.structure(state.levels):
                raise ValueError("the stored levels do not have the placeholder level's structure")
            state = state._replace(
                levels=jax.tree.map(
                    lambda x, y: x.at[:size].set(jnp.asarray(y, x.dtype)), state.levels, stacked
                )
            )
            new_extras = dict(state.extras)
            for k in new_extras:
                if not all(k in e for e in d["extras"]):
                    raise ValueError(f"every stored level's extras must hold {k!r}")
                values = np.stack([np.asarray(e[k]) for e in d["extras"]])
                new_extras[k] = new_extras[k].at[:size].set(jnp.asarray(values, new_extras[k].dtype))
            state = state._replace(extras=new_extras)
        idt = state.size.dtype
        return state._replace(
            scores=state.scores.at[:size].set(jnp.asarray(d["scores"], state.scores.dtype)),
            timestamps=state.timestamps.at[:size].set(jnp.asarray(d["timestamps"], idt)),
            size=jnp.asarray(size, idt),
            count=jnp.asarray(d["count"], idt),
        )

    @classmethod
    def from_numpy(
        cls, buffer: NumpyLevelBuffer, level: Any = None, extras: dict[str, Any] | None = None, **options: Any
    ) -> tuple[LevelBuffer, BufferState]:
        """The JAX buffer with ``buffer``'s configuration and its state (``level``/``extras``
        placeholders: by default the first stored level and its extras; ``options``: the JAX-only
        keywords)."""
        d = buffer.state_dict()
        config = dict(d["config"])
        del config["seed"]
        out = cls(**config, **options)
        if level is None:
            if not d["levels"]:
                raise ValueError("an empty buffer: pass level=<a placeholder level>")
            level = d["levels"][0]
            extras = dict(d["extras"][0]) if extras is None else extras
        return out, out.state_from_dict(d, level, extras)

    def save(self, state: BufferState, path: str | os.PathLike[str], seed: int | None = None) -> None:
        """Write ``state`` as a :class:`plr_gym.LevelBuffer` checkpoint file (``.npz``, atomic)."""
        self.to_numpy(state, seed).save(path)

    def load(
        self, path: str | os.PathLike[str], level: Any, extras: dict[str, Any] | None = None
    ) -> BufferState:
        """The state in a :class:`plr_gym.LevelBuffer` checkpoint file (same configuration)."""
        return self.state_from_dict(NumpyLevelBuffer.load(path).state_dict(), level, extras)


def _host_value(x: np.ndarray[Any, Any]) -> Any:
    return x.item() if x.ndim == 0 else x


def _host_item(levels: Any, i: int) -> Any:
    """Level ``i`` of a stacked host pytree, as the numpy buffer stores levels (0-d: a Python scalar)."""
    item = jax.tree.map(lambda a: _host_value(np.asarray(a)[i]), levels)
    if isinstance(item, numbers.Number | np.ndarray | dict | list | tuple):
        return item
    raise TypeError(
        f"a level of type {type(item).__name__} has no numpy LevelBuffer form; use arrays, dicts, lists or "
        "tuples of arrays"
    )
