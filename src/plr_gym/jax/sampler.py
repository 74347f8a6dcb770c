"""Prioritized Level Replay over a finite level set, in JAX: pure functions on a pytree state.

:class:`LevelSampler` is the array-code twin of :class:`plr_gym.LevelSampler`: the same keywords, defaults
and replay distribution, with a static, hashable configuration (the object itself) and the whole state in
one pytree (:class:`SamplerState`), so that every method can run inside ``jax.jit``, ``jax.vmap`` and
``jax.lax.scan``. Levels are the positions ``0 .. num_levels − 1``.

Declared differences from the numpy class (each an option or a documented rule):

- ``on_invalid="skip"`` (default): an update entry that the numpy class would refuse with ``ValueError``
  (a non-finite score, a level outside ``0 .. num_levels − 1``, a negative score for ``power``, an outcome
  outside ``[0, 1]`` for ``learnability``) is skipped and counted in :attr:`SamplerState.num_rejected`
  (array code cannot raise). ``on_invalid="raise"`` checks with :func:`jax.experimental.checkify.check`
  instead: wrap the call in ``checkify.checkify`` to get the error.
- Draws use ``jax.random`` keys, not the numpy generator: the same state gives the same distribution, not
  the same draws. A conversion to the numpy state (:meth:`LevelSampler.to_numpy`) starts the numpy
  generator from ``seed``.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar, cast

import jax
import jax.numpy as jnp
import numpy as np
import numpy.typing as npt
from jax.experimental import checkify

from plr_gym.jax._common import draw_index, float_dtype, int_dtype, transform_weights
from plr_gym.jax._incremental import Recent, add_seen, dense_slots, last_sampled_at, with_recent
from plr_gym.sampler import STRATEGIES
from plr_gym.sampler import LevelSampler as NumpyLevelSampler
from plr_gym.transforms import TRANSFORMS

__all__ = ["LevelSampler", "SamplerState"]

# jax.Array; Any for the type checker, which runs on a stack without JAX (Python 3.11)
Array = Any

_TRANSFORMS = ("rank", "power", "softmax", "eps_greedy", "constant", "max")
_ON_INVALID = ("skip", "raise")


#: options of the numpy :class:`plr_gym.LevelSampler` that reproduce level-replay's sampler outside the
#: paper's definitions (``unseen_rank``, ``power_offset``); plr_gym.jax has their defaults only
_NUMPY_ONLY: dict[str, Any] = {"unseen_rank": "seen", "power_offset": 0.0}


class SamplerState(NamedTuple):
    """The whole state of a :class:`LevelSampler` (a pytree; arrays of length ``num_levels``).

    Fields mirror :meth:`plr_gym.LevelSampler.state_dict`: ``order[:num_seen]`` are the seen levels in the
    order they became seen (``position`` is its inverse), ``last_sampled[i]`` the draw count when level
    ``i`` was last drawn, ``num_samples`` the draw count ``c``.

    Two fields are a cache that :meth:`LevelSampler.update`, :meth:`~LevelSampler.set_progress` and the
    constructors refresh (scores change once per rollout; draws happen at every env step): ``score_cdf``,
    the cumulative score distribution ``P_S`` over the positions (so that a draw needs no sort), and
    ``last_floor``, the least ``last_sampled`` of a seen level then (a bound on the staleness).
    """

    scores: Array
    last_sampled: Array
    order: Array
    position: Array
    num_seen: Array
    num_samples: Array
    next_index: Array
    num_replay: Array
    num_explore: Array
    success_rate: Array
    outcomes: Array
    progress: Array
    num_rejected: Array
    score_cdf: Array
    last_floor: Array

    @property
    def seen(self) -> Array:
        """Boolean mask of the levels that have a score."""
        return self.position < self.num_seen

    @property
    def staleness(self) -> Array:
        """Draws since each level was last drawn (``c − C_i``)."""
        return self.num_samples - self.last_sampled


#: float32 success rates (``strategy="learnability"``) are kept on the grid of multiples of ``2**-24``: every
#: such number in ``[0, 1]`` is a float32, and so is ``1 −`` it, so ``p`` and ``1 − p`` are exact partners.
_RATE_GRID = 2.0**24


def _to_grid(x: Array) -> Array:
    """``x`` rounded to the nearest multiple of ``2**-24``, half to even (so ``grid(−x) = −grid(x)``)."""
    return jnp.round(x * _RATE_GRID) / _RATE_GRID


def _is_x64() -> bool:
    return bool(float_dtype() == jnp.float64)


def _min_seen_count(num_levels: int, ratio: float) -> int:
    """The least ``k`` with ``k / num_levels >= ratio`` in float64 (the numpy class's comparison)."""
    k = min(num_levels, max(0, math.ceil(ratio * num_levels)))
    while k > 0 and (k - 1) / num_levels >= ratio:
        k -= 1
    while k < num_levels and k / num_levels < ratio:
        k += 1
    return k


_F = TypeVar("_F", bound=Callable[..., Any])

_INVALID_ENTRY = (
    "update: entry (level {level}, score {score}) is invalid: a level outside 0..num_levels-1, a non-finite "
    "score, a negative score for score_transform='power' or an outcome outside [0, 1] for "
    "strategy='learnability'"
)

# The fields of a SamplerState: its shape ("n": (num_levels,); "": a scalar) and dtype kind (numpy's
# ``dtype.kind``: i integer, f float). Checked, at trace time, wherever a state meets a sampler.
_STATE_FIELDS: dict[str, tuple[str, str]] = {
    "scores": ("n", "f"),
    "last_sampled": ("n", "i"),
    "order": ("n", "i"),
    "position": ("n", "i"),
    "num_seen": ("", "i"),
    "num_samples": ("", "i"),
    "next_index": ("", "i"),
    "num_replay": ("", "i"),
    "num_explore": ("", "i"),
    "success_rate": ("n", "f"),
    "outcomes": ("n", "i"),
    "progress": ("", "f"),
    "num_rejected": ("", "i"),
    "score_cdf": ("n", "f"),
    "last_floor": ("", "i"),
}


def _shape_dtype(value: Any) -> tuple[tuple[int, ...], np.dtype[Any]]:
    """Shape and dtype of an array, a tracer or a Python/numpy value (static at trace time)."""
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return tuple(value.shape), np.dtype(value.dtype)
    arr = np.asarray(value)
    return arr.shape, arr.dtype


def _int_ids(method: str, name: str, value: Any, accepted: str) -> Array:
    """``value`` as a 1-D integer array, refused (TypeError/ValueError) at trace time otherwise."""
    shape, dtype = _shape_dtype(value)
    if dtype.kind not in "iu":
        raise TypeError(
            f"{method}: {name} must be integer level positions ({accepted}), got dtype {dtype}: a float id "
            f"would be truncated to another level; convert with jnp.asarray({name}, int) if the values are "
            f"whole numbers"
        )
    if len(shape) != 1:
        raise ValueError(f"{method}: {name} must be 1-D ({accepted}), got shape {shape}")
    return jnp.asarray(value)


def _same_length(
    method: str, name: str, value: Any, length: int, kinds: str, what: str, per: str = "entry of levels"
) -> Array:
    """``value`` checked to be a ``(length,)`` array of dtype kind in ``kinds`` (trace time)."""
    shape, dtype = _shape_dtype(value)
    if dtype.kind not in kinds:
        raise TypeError(f"{method}: {name} must be {what}, got dtype {dtype}")
    if shape != (length,):
        raise ValueError(f"{method}: {name} must have shape ({length},), one per {per}, got shape {shape}")
    return jnp.asarray(value)


#: the scalar fields a draw changes (the loop of :meth:`LevelSampler.sample` carries these, not the arrays)
_COUNTERS = ("num_samples", "next_index", "num_replay", "num_explore")


def _jit(static: tuple[int, ...] = (0,)) -> Callable[[_F], _F]:
    """``jax.jit`` with the configuration (``self``) and the arguments at ``static`` static."""
    return cast(Callable[[_F], _F], functools.partial(jax.jit, static_argnums=static))


@dataclasses.dataclass(frozen=True)
class LevelSampler:
    """PLR over ``num_levels`` levels (positions ``0 .. num_levels − 1``) as pure JAX functions.

    The keywords, their defaults and their meaning are :class:`plr_gym.LevelSampler`'s (see there and
    ``docs/jax.md``); ``strategy`` is a name (scores are computed outside, e.g. by
    :mod:`plr_gym.jax.scoring`): the scoring strategies store what :meth:`update` gets, ``"learnability"``
    takes episode outcomes in ``[0, 1]``, ``"random"`` and ``"sequential"`` ignore scores. Score and
    staleness transforms: ``rank``, ``power``, ``softmax``, ``eps_greedy``, ``constant``, ``max``.

    :param on_invalid: ``"skip"`` (default): update entries the numpy class refuses are skipped and
        counted in ``state.num_rejected``; ``"raise"``: a ``checkify`` check (wrap in
        ``jax.experimental.checkify.checkify``).

    The object is the static configuration (frozen, hashable); every method is jitted with it static.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from plr_gym.jax import LevelSampler
        >>> sampler = LevelSampler(num_levels=4)
        >>> state = sampler.init()
        >>> state = sampler.update(state, jnp.arange(4), jnp.array([0.1, 0.9, 0.5, 0.3]))
        >>> [round(float(w), 4) for w in sampler.weights(state)]   # = plr_gym.LevelSampler.sample_weights()
        [0.2045, 0.3305, 0.2465, 0.2185]
        >>> state, levels, replayed = sampler.sample(state, jax.random.key(0), 8)
        >>> bool(replayed.all()), int(state.num_samples)      # every level seen: every draw replays
        (True, 8)
    """

    num_levels: int
    strategy: str = "value_l1"
    score_transform: str = "rank"
    temperature: float = 1.0
    staleness_coef: float = 0.3
    staleness_transform: str = "power"
    staleness_temperature: float = 1.0
    replay_schedule: str = "proportionate"
    replay_prob: float = 0.5
    min_seen_ratio: float = 1.0
    alpha: float = 1.0
    eps: float = 0.05
    uniform_mass: float = 0.5
    success_rate_alpha: float = 0.1
    temperature_end: float | None = None
    on_invalid: str = "skip"

    def __post_init__(self) -> None:
        n = self.num_levels
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
            raise TypeError(f"num_levels must be an int, got {type(n).__name__} {n!r}")
        if n < 1:
            raise ValueError(f"num_levels must be >= 1, got {n}")
        if not isinstance(self.strategy, str) or self.strategy not in STRATEGIES:
            raise ValueError(
                f"strategy={self.strategy!r} is not supported by plr_gym.jax (a name, not a callable); "
                f"choose one of {', '.join(STRATEGIES)}"
            )
        for name in ("score_transform", "staleness_transform"):
            value = getattr(self, name)
            if not isinstance(value, str) or value not in _TRANSFORMS:
                raise ValueError(f"{name}={value!r} is not supported; choose one of {', '.join(_TRANSFORMS)}")
        if self.on_invalid not in _ON_INVALID:
            raise ValueError(f"on_invalid={self.on_invalid!r} is not supported; choose one of skip, raise")
        # every other check (ranges, types, learnability with alpha) is the numpy class's, in one place
        NumpyLevelSampler(range(1), **self._numpy_kwargs())
        object.__setattr__(self, "num_levels", int(n))
        for name in (
            "temperature",
            "staleness_coef",
            "staleness_temperature",
            "replay_prob",
            "min_seen_ratio",
            "alpha",
            "eps",
            "uniform_mass",
            "success_rate_alpha",
        ):
            object.__setattr__(self, name, float(getattr(self, name)))
        if self.temperature_end is not None:
            object.__setattr__(self, "temperature_end", float(self.temperature_end))

    def _numpy_kwargs(self) -> dict[str, Any]:
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        del fields["num_levels"], fields["on_invalid"]
        return fields

    # ------------------------------------------------------------------ properties of the configuration
    @property
    def uses_scores(self) -> bool:
        """False for the ``random`` and ``sequential`` baselines."""
        return self.strategy not in ("random", "sequential")

    @property
    def learns_outcomes(self) -> bool:
        """True for ``strategy="learnability"`` (updates are outcomes; scores are ``p·(1 − p)``)."""
        return self.strategy == "learnability"

    @property
    def min_seen_count(self) -> int:
        """Levels that must be seen before any replay (``min_seen_ratio`` as a count)."""
        return _min_seen_count(self.num_levels, self.min_seen_ratio)

    # ------------------------------------------------------------------ state
    def check_state(self, state: Any, method: str = "state") -> SamplerState:
        """``state`` if it is a :class:`SamplerState` of this sampler (its arrays of length
        ``num_levels``, integer or float as :meth:`init` makes them); else ``TypeError``/``ValueError``.
        Shapes and dtypes only: free at trace time, inside ``jit`` too (every method calls it)."""
        if not isinstance(state, SamplerState):
            got = type(state).__name__
            raise TypeError(f"{method}: state must be a SamplerState (from init()), got {got}")
        n = self.num_levels
        for name, (size, kind) in _STATE_FIELDS.items():
            shape, dtype = _shape_dtype(getattr(state, name))
            want = (n,) if size == "n" else ()
            if shape != want:
                raise ValueError(
                    f"{method}: state.{name} has shape {shape}, this sampler (num_levels={n}) expects "
                    f"{want}: a SamplerState of another sampler (or a batched state outside vmap)"
                )
            if dtype.kind not in ("iu" if kind == "i" else "f"):
                what = "an integer" if kind == "i" else "a float"
                raise TypeError(f"{method}: state.{name} must have {what} dtype, got {dtype}")
        return state

    def init(self) -> SamplerState:
        """A fresh state: nothing seen, nothing drawn."""
        n = self.num_levels
        idt, fdt = int_dtype(), float_dtype()
        zero = jnp.zeros((), idt)
        return SamplerState(
            scores=jnp.zeros(n, fdt),
            last_sampled=jnp.zeros(n, idt),
            order=jnp.arange(n, dtype=idt),
            position=jnp.arange(n, dtype=idt),
            num_seen=zero,
            num_samples=zero,
            next_index=zero,
            num_replay=zero,
            num_explore=zero,
            success_rate=jnp.zeros(n, fdt),
            outcomes=jnp.zeros(n, idt),
            progress=jnp.zeros((), fdt),
            num_rejected=zero,
            score_cdf=jnp.zeros(n, fdt),
            last_floor=zero,
        )

    def current_temperature(self, state: SamplerState) -> Any:
        """``β`` now: ``temperature``, or annealed towards ``temperature_end`` by ``state.progress``."""
        if self.temperature_end is None:
            return self.temperature
        return self.temperature + (self.temperature_end - self.temperature) * state.progress

    @_jit()
    def set_progress(self, state: SamplerState, progress: Any) -> SamplerState:
        """``state`` with ``progress``, the share of training done in ``[0, 1]`` (``β`` follows it with
        ``temperature_end``). A value outside ``[0, 1]`` is invalid (see ``on_invalid``: skipped and
        counted, or a ``checkify`` error)."""
        self.check_state(state, "set_progress")
        shape, dtype = _shape_dtype(progress)
        if shape != () or dtype.kind not in "iuf":
            raise TypeError(f"set_progress: progress must be a real scalar in [0, 1], got {dtype} {shape}")
        p = jnp.asarray(progress, float_dtype())
        ok = (p >= 0.0) & (p <= 1.0)
        self._check(ok, "set_progress: progress {p} is outside [0, 1]", p=p)
        return self._refresh(
            state._replace(
                progress=jnp.where(ok, p, state.progress),
                num_rejected=state.num_rejected + (~ok).astype(state.num_rejected.dtype),
            )
        )

    def _refresh(self, state: SamplerState) -> SamplerState:
        """``state`` with its cache recomputed (after its scores, seen levels or temperature changed)."""
        if not self.uses_scores:
            return state
        seen = state.seen
        floor = jnp.where(seen, state.last_sampled, state.num_samples).min()
        return state._replace(
            score_cdf=jnp.cumsum(self._score_weights(state)), last_floor=floor.astype(state.last_floor.dtype)
        )

    # ------------------------------------------------------------------ the replay distribution
    def _score_weights(self, state: SamplerState) -> Array:
        keys = None
        if self.learns_outcomes and not _is_x64():
            # p(1 − p) rounds to 0.25 for every p within ~1e-4 of 1/2 in float32: order by min(p, 1 − p),
            # which increases with p(1 − p) and is exact on the rate grid
            keys = jnp.minimum(state.success_rate, 1.0 - state.success_rate)
        return transform_weights(
            self.score_transform,
            state.scores,
            state.seen,
            self.current_temperature(state),
            self.eps,
            order_keys=keys,
        )

    def _mix(self, ps: Array, state: SamplerState) -> Array:
        seen = state.seen
        p = ps
        if self.staleness_coef > 0.0:
            stale = state.num_samples - state.last_sampled
            pc = transform_weights(
                self.staleness_transform, stale, seen, self.staleness_temperature, self.eps
            )
            p = (1.0 - self.staleness_coef) * p + self.staleness_coef * pc
        if self.uniform_mass > 0.0:
            n_seen = jnp.maximum(state.num_seen, 1).astype(p.dtype)
            p = (1.0 - self.uniform_mass) * p + self.uniform_mass / n_seen
        return jnp.where(seen, p, 0.0)

    @_jit()
    def weights(self, state: SamplerState) -> Array:
        """The replay distribution over the levels: :meth:`plr_gym.LevelSampler.sample_weights`.

        Zero on unseen levels; all zeros before any level is seen; uniform for ``random``, one-hot on the
        next level for ``sequential``.
        """
        self.check_state(state, "weights")
        n, fdt = self.num_levels, float_dtype()
        if self.strategy == "random":
            return jnp.full(n, 1.0 / n, fdt)
        if self.strategy == "sequential":
            return jnp.zeros(n, fdt).at[state.next_index].set(1.0)
        return self._mix(self._score_weights(state), state)

    @_jit()
    def replay_probability(self, state: SamplerState) -> Array:
        """Probability that the next draw replays a seen level (0 for ``random``/``sequential``)."""
        self.check_state(state, "replay_probability")
        fdt = float_dtype()
        if not self.uses_scores:
            return jnp.zeros((), fdt)
        n_seen, n = state.num_seen, self.num_levels
        p = (
            n_seen.astype(fdt) / n
            if self.replay_schedule == "proportionate"
            else jnp.asarray(self.replay_prob, fdt)
        )
        p = jnp.where(n_seen < self.min_seen_count, 0.0, p)
        return jnp.where(n_seen == 0, 0.0, jnp.where(n_seen == n, 1.0, p))

    # ------------------------------------------------------------------ drawing
    def _mark(self, state: SamplerState, i: Array, replay: Array) -> SamplerState:
        state = self._count(state, i, replay)
        return state._replace(last_sampled=state.last_sampled.at[i].set(state.num_samples))

    def _count(self, state: SamplerState, i: Array, replay: Array) -> SamplerState:
        """:meth:`_mark` but for ``last_sampled``: the scalar counters after drawing ``i``."""
        state = state._replace(num_samples=state.num_samples + 1)
        if self.strategy == "sequential":
            state = state._replace(next_index=((i + 1) % self.num_levels).astype(state.next_index.dtype))
        if self.uses_scores:
            state = state._replace(
                num_replay=state.num_replay + replay.astype(state.num_replay.dtype),
                num_explore=state.num_explore + (~replay).astype(state.num_explore.dtype),
            )
        return state

    def _draw_replay(self, state: SamplerState, key: Array, recent: Recent) -> Array:
        """A seen level from ``weights(state)``, drawn as the numpy class draws it: the uniform part with
        probability ``uniform_mass``, else the staleness part with probability ``staleness_coef``, else the
        score part, from the cached ``score_cdf`` (``O(log N)``: no sort, no pass over the levels)."""
        k_part, k_uniform, k_stale, k_score = jax.random.split(key, 4)
        u = jax.random.uniform(k_part, (2,), float_dtype())
        uniform = self._uniform_seen(state, k_uniform)
        # the score part: inverse CDF (a position of zero weight never comes out: cdf[i] > x >= cdf[i - 1])
        total = state.score_cdf[-1]
        x = jnp.minimum(jax.random.uniform(k_score, dtype=total.dtype) * total, jnp.nextafter(total, 0.0))
        i_score = jnp.minimum(jnp.searchsorted(state.score_cdf, x, side="right"), self.num_levels - 1)
        i = jnp.where(total > 0.0, i_score.astype(state.order.dtype), uniform)
        if self.staleness_coef > 0.0:
            i = jnp.where(u[1] < self.staleness_coef, self._draw_stale(state, k_stale, uniform, recent), i)
        if self.uniform_mass > 0.0:
            i = jnp.where(u[0] < self.uniform_mass, uniform, i)
        return i

    def _uniform_seen(self, state: SamplerState, key: Array) -> Array:
        k = jax.random.randint(key, (), 0, jnp.maximum(state.num_seen, 1), dtype=state.order.dtype)
        return state.order[k]

    def _draw_stale(self, state: SamplerState, key: Array, uniform: Array, recent: Recent) -> Array:
        """A seen level from the staleness part ``P_C``. ``power`` with ``staleness_temperature=1`` (the
        default: ``P_C ∝ c − C_i``): rejection from the uniform over the seen levels, accepting ``i`` with
        probability ``(c − C_i) / (c − last_floor)`` (exact; expected tries: the largest staleness over the
        mean). ``constant``: uniform. Otherwise the weights over every level (``O(N)`` per draw)."""
        g, t = self.staleness_transform, state.num_samples
        if g == "constant":
            return uniform
        if g == "power" and self.staleness_temperature == 1.0:
            bound = jnp.maximum(t - state.last_floor, 1).astype(float_dtype())

            def rejected(carry: tuple[Array, Array, Array]) -> Array:
                return ~carry[2]

            def propose(carry: tuple[Array, Array, Array]) -> tuple[Array, Array, Array]:
                k, _, _ = carry
                k, k_level, k_accept = jax.random.split(k, 3)
                i = self._uniform_seen(state, k_level)
                stale = (t - last_sampled_at(state.last_sampled, i, recent)).astype(float_dtype())
                return k, i, jax.random.uniform(k_accept, dtype=float_dtype()) * bound < stale

            # one seen level (perhaps just drawn: no staleness, numpy's uniform fallback) or none
            done = (state.num_seen <= 1) | (t - state.last_floor <= 0)
            return jax.lax.while_loop(rejected, propose, (key, uniform, done))[1]
        stale = state.num_samples - with_recent(state.last_sampled, recent)
        pc = transform_weights(g, stale, state.seen, self.staleness_temperature, self.eps)
        return draw_index(key, pc).astype(state.order.dtype)

    def _draw(self, state: SamplerState, key: Array, recent: Recent) -> tuple[Array, Array]:
        """One draw from ``state`` whose ``last_sampled`` misses the draws in ``recent``: ``(level,
        replayed)``."""
        n = self.num_levels
        k_decide, k_replay, k_explore = jax.random.split(key, 3)
        if self.strategy == "random":
            i = jax.random.randint(k_explore, (), 0, n, dtype=state.order.dtype)
            replay = jnp.zeros((), bool)
        elif self.strategy == "sequential":
            i, replay = state.next_index, jnp.zeros((), bool)
        else:
            n_seen = state.num_seen
            p = self.replay_probability(state)
            replay = jnp.where(
                n_seen == 0,
                False,
                jnp.where(n_seen == n, True, jax.random.uniform(k_decide, dtype=p.dtype) < p),
            )
            i_replay = self._draw_replay(state, k_replay, recent)
            unseen = jnp.maximum(n - n_seen, 1)
            k = jax.random.randint(k_explore, (), 0, unseen, dtype=n_seen.dtype)
            i_explore = state.order[jnp.minimum(n_seen + k, n - 1)]
            i = jnp.where(replay, i_replay, i_explore).astype(state.order.dtype)
        return i, replay

    @_jit((0, 3))
    def sample(
        self, state: SamplerState, key: Array, n: int, mask: Array | None = None
    ) -> tuple[SamplerState, Array, Array]:
        """Draw ``n`` levels, one after the other (each draw updates staleness, as numpy's ``sample(n)``).

        :param mask: ``(n,)`` booleans (default: all True): draw only for the True slots, in slot order
            (the envs whose episode just ended, say); a False slot gets level ``-1`` and leaves the state
            as it was. The loop runs over the True slots only, so a step where a few of ``n`` envs reset
            costs a few draws. With ``mask`` all True the draws are those of ``sample(state, key, n)``.
        :return: ``(state, levels, replayed)``: the new state, ``n`` level positions, and whether each
            draw replayed a seen level (``False`` for exploring an unseen one, and for ``random`` and
            ``sequential``).
        """
        self.check_state(state, "sample")
        if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)):
            got = f"{type(n).__name__} {n!r}"
            raise TypeError(f"sample: n must be an int >= 0 (the number of draws), got {got}")
        if n < 0:
            raise ValueError(f"sample: n must be >= 0 (the number of draws), got {n}")
        n = int(n)
        if mask is not None:
            mask = _same_length("sample", "mask", mask, n, "b", "booleans (True: draw for this slot)", "draw")
        keys = jax.random.split(key, n)
        if n == 0:
            return state, jnp.zeros(0, state.order.dtype), jnp.zeros(0, bool)
        slots = jnp.arange(n) if mask is None else jnp.argsort(~mask, stable=True)  # True slots first
        count = n if mask is None else mask.sum()

        # The loop carries the counters and this call's draws only, not the (num_levels,) arrays: under
        # vmap a loop whose length differs across the batch selects its whole carry at every step, which
        # with last_sampled in it cost O(num_levels) per draw. Staleness reads see this call's draws
        # through ``recent``; last_sampled gets them after the loop.
        def body(j: Array, carry: tuple[Array, ...]) -> tuple[Array, ...]:
            *counters, out, rep, times = carry
            s = state._replace(**dict(zip(_COUNTERS, counters)))
            slot = slots[j]
            i, r = self._draw(s, keys[slot], (out, times))
            s = self._count(s, i, r)
            new = [getattr(s, name) for name in _COUNTERS]
            return (*new, out.at[slot].set(i), rep.at[slot].set(r), times.at[slot].set(s.num_samples))

        idt = state.order.dtype
        blank = (jnp.full(n, -1, idt), jnp.zeros(n, bool), jnp.zeros(n, state.last_sampled.dtype))
        init = (*[getattr(state, name) for name in _COUNTERS], *blank)
        *counters, levels, replayed, times = jax.lax.fori_loop(0, count, body, init)
        last = with_recent(state.last_sampled, (levels, times))
        state = state._replace(last_sampled=last, **dict(zip(_COUNTERS, counters)))
        return state, levels, replayed

    @_jit()
    def mark_sampled(self, state: SamplerState, levels: Array) -> SamplerState:
        """``state`` after drawing ``levels`` (in order) by any means: what :meth:`sample` does after each
        draw. A draw of a seen level counts as a replay. Levels outside the range are rejected (see
        ``on_invalid``)."""
        self.check_state(state, "mark_sampled")
        levels = _int_ids("mark_sampled", "levels", levels, "an (M,) integer array")

        def step(s: SamplerState, level: Array) -> tuple[SamplerState, None]:
            ok = (level >= 0) & (level < self.num_levels)
            self._check(ok, "mark_sampled: level {level} is outside 0..num_levels-1", level=level)
            i = jnp.clip(level, 0, self.num_levels - 1).astype(s.order.dtype)
            marked = self._mark(s, i, s.position[i] < s.num_seen)
            rejected = s._replace(num_rejected=s.num_rejected + 1)
            return jax.tree.map(lambda a, b: jnp.where(ok, a, b), marked, rejected), None

        out: SamplerState = jax.lax.scan(step, state, levels)[0]
        return out

    def _check(self, ok: Array, message: str, **values: Any) -> None:
        if self.on_invalid == "raise":
            checkify.check(ok, message, **values)

    # ------------------------------------------------------------------ scores
    @_jit()
    def update(
        self, state: SamplerState, levels: Array, scores: Array, mask: Array | None = None
    ) -> SamplerState:
        """Record the scores (outcomes, for ``learnability``) of completed episodes, in order.

        ``S ← (1 − alpha)·S + alpha·score`` for a seen level; an unseen level takes ``score`` and becomes
        seen. Entries where ``mask`` is False are ignored; invalid entries follow ``on_invalid``.

        :param levels: ``(M,)`` level positions.
        :param scores: ``(M,)`` scores.
        :param mask: ``(M,)`` booleans, which entries to apply (default: all).
        """
        self.check_state(state, "update")
        levels = _int_ids("update", "levels", levels, "an (M,) integer array")
        m = levels.shape[0]
        scores = _same_length("update", "scores", scores, m, "iuf", "real numbers").astype(float_dtype())
        if mask is None:
            mask = jnp.ones(m, bool)
        else:
            mask = _same_length("update", "mask", mask, m, "b", "booleans (True: apply this entry)")
        # the masked entries first, in order; then a loop over just those (a rollout's (T·N) arrays hold
        # a few completed episodes: the loop's length is theirs, not T·N)
        order = jnp.argsort(~mask, stable=True)
        if m == 0:
            return self._refresh(state)
        s0 = state.num_seen
        state, new = self._score_entries(state, levels[order], scores[order], mask.sum())
        order_, position = add_seen(state.order, state.position, new, s0, state.num_seen - s0)
        return self._refresh(state._replace(order=order_, position=position))

    def _valid(self, level: Array, score: Array) -> Array:
        ok = (level >= 0) & (level < self.num_levels) & jnp.isfinite(score)
        if self.learns_outcomes:
            ok &= (score >= 0.0) & (score <= 1.0)
        elif self.uses_scores and TRANSFORMS[self.score_transform].nonnegative:
            ok &= score >= 0.0
        return ok

    def _score_entries(
        self, state: SamplerState, levels: Array, scores: Array, count: Array
    ) -> tuple[SamplerState, Array]:
        """``state`` after the first ``count`` entries, in order, but for the seen levels' order: scores,
        success rates, outcome counts, ``num_seen``, ``num_rejected``; and the newly seen levels in the order
        they became seen (``-1`` after them). The loop runs over one local slot per distinct level of the
        entries (see :mod:`plr_gym.jax._incremental`: no ``(num_levels,)`` array in its carry)."""
        n = self.num_levels
        ids = jnp.clip(levels, 0, n - 1).astype(state.order.dtype)
        slot, slot_level = dense_slots(ids, n)
        at, d = jnp.minimum(slot_level, n - 1), slot_level.shape[0]
        fields = ("scores", "success_rate", "outcomes") if self.learns_outcomes else ("scores",)
        local = {name: getattr(state, name)[at] for name in fields}
        seen = state.position[at] < state.num_seen
        init = (local, seen, state.num_seen, state.num_rejected, jnp.full(d, -1, ids.dtype))

        def body(k: Array, carry: Any) -> Any:
            local, seen, num_seen, rejected, new = carry
            level, score, j = levels[k], scores[k], slot[k]
            valid = self._valid(level, score)
            self._check(valid, _INVALID_ENTRY, level=level, score=score)
            old = {name: local[name][j] for name in fields}
            values = self._entry_values(old, seen[j], score)
            local = {
                name: local[name].at[j].set(jnp.where(valid, values[name], old[name])) for name in fields
            }
            becomes_seen = valid & ~seen[j]  # the numpy class swaps it into order[num_seen]: add_seen
            at_new = jnp.minimum(num_seen - state.num_seen, d - 1)
            new = new.at[at_new].set(jnp.where(becomes_seen, ids[k], new[at_new]))
            num_seen = num_seen + becomes_seen.astype(num_seen.dtype)
            return (
                local,
                seen.at[j].set(seen[j] | valid),
                num_seen,
                rejected + (~valid).astype(rejected.dtype),
                new,
            )

        local, _, num_seen, rejected, new = jax.lax.fori_loop(0, count, body, init)
        written = {name: getattr(state, name).at[slot_level].set(local[name], mode="drop") for name in fields}
        return state._replace(**written, num_seen=num_seen, num_rejected=rejected), new

    def _entry_values(self, old: dict[str, Array], was_seen: Array, score: Array) -> dict[str, Array]:
        """A level's fields after one valid entry: ``S ← (1 − alpha)·S + alpha·score`` (``score`` if
        unseen), or for ``learnability`` the success rate, outcome count and ``p(1 − p)``."""
        if self.learns_outcomes:
            count = old["outcomes"] + 1
            rate = self._next_rate(old["success_rate"], count, score)
            return {"scores": rate * (1.0 - rate), "success_rate": rate, "outcomes": count}
        s = old["scores"]
        return {"scores": jnp.where(was_seen, (1.0 - self.alpha) * s + self.alpha * score, score)}

    @property
    def _mean_phase_end(self) -> int:
        """The last outcome count whose step ``max(1/count, success_rate_alpha)`` is ``1/count`` (float64,
        the numpy class's comparison): up to it the rate is the mean of the outcomes. At most ``2**20``."""
        c = min(2**20, max(1, int(1.0 / self.success_rate_alpha) + 1))
        while c > 1 and 1.0 / c < self.success_rate_alpha:
            c -= 1
        return c

    def _next_rate(self, rate: Array, count: Array, outcome: Array) -> Array:
        """The success rate after ``outcome``, the ``count``-th: ``rate + max(1/count, alpha)·(outcome −
        rate)``, the numpy class's arithmetic.

        With ``jax_enable_x64`` it is numpy's float64 arithmetic, bit for bit (so ties between levels break
        as numpy's do). In float32, which cannot reproduce numpy's float64 rounding, rates stay on the grid
        of multiples of ``2**-24`` so that levels whose rates are equal in exact arithmetic get bitwise-equal
        scores ``p(1 − p)`` and tie (broken by position, as numpy breaks exact ties): while the rate is the
        mean of the outcomes (``1/count >= alpha``) and the outcomes are 0 or 1, it is ``k/count`` rounded
        to the grid from the number of successes ``k`` (the same value whatever the order of the outcomes,
        and ``1 −`` it for ``count − k``); after that each step is rounded to the grid symmetrically (``p``
        and ``1 − p`` fed opposite outcomes stay partners).
        """
        fdt = rate.dtype
        step = jnp.maximum(1.0 / count.astype(fdt), self.success_rate_alpha)
        if _is_x64():
            return rate + step * (outcome - rate)
        c = count.astype(fdt)
        before = rate * (c - 1.0)  # the successes so far, if the rate is their mean
        k_before = jnp.round(before)
        k = k_before + outcome
        binary = (outcome == 0.0) | (outcome == 1.0)
        whole = jnp.abs(before - k_before) <= c * 2.0**-22
        low = _to_grid(jnp.minimum(k, c - k) / c)
        mean = jnp.where(k <= c - k, low, 1.0 - low)
        moved = jnp.clip(rate + _to_grid(step * (outcome - rate)), 0.0, 1.0)
        exact = (count <= self._mean_phase_end) & binary & whole
        return jnp.where(exact, mean, moved)

    # ------------------------------------------------------------------ the numpy state and checkpoint files
    @classmethod
    def from_numpy(cls, sampler: NumpyLevelSampler, **options: Any) -> tuple[LevelSampler, SamplerState]:
        """The JAX sampler with ``sampler``'s configuration and its state (``options``: ``on_invalid``).

        Level ids become positions in ``sampler.levels``; a callable strategy is refused."""
        config = dict(sampler.state_dict()["config"])
        del config["seed"]
        for name, default in _NUMPY_ONLY.items():  # level-replay's choices: the JAX sampler has the defaults
            value = config.pop(name, default)
            if value != default:
                raise ValueError(
                    f"from_numpy: the numpy sampler has {name}={value!r}, which plr_gym.jax does not "
                    f"implement (only {name}={default!r}, the default)"
                )
        jax_sampler = cls(num_levels=sampler.num_levels, **config, **options)
        return jax_sampler, jax_sampler.state_from_dict(sampler.state_dict())

    def state_from_dict(self, state_dict: dict[str, Any]) -> SamplerState:
        """A state from :meth:`plr_gym.LevelSampler.state_dict` (validated by the numpy class: the
        configuration must be this sampler's, the numpy generator's state is not used)."""
        levels = np.asarray(state_dict.get("levels", ()))
        if levels.shape != (self.num_levels,):
            raise ValueError(
                f"state_dict holds {levels.size} levels, this sampler has num_levels={self.num_levels}"
            )
        checked = NumpyLevelSampler(levels, **self._numpy_kwargs())
        checked.load_state_dict(state_dict)
        d = checked.state_dict()
        idt, fdt = int_dtype(), float_dtype()
        order = np.asarray(d["order"], np.int64)
        position = np.empty_like(order)
        position[order] = np.arange(order.size)
        n = self.num_levels
        scores = jnp.asarray(d["scores"], fdt)
        success_rate = jnp.asarray(d.get("success_rate", np.zeros(n)), fdt)
        if self.learns_outcomes:  # the scores as this sampler computes them (load(save(state)) is exact)
            if not _is_x64():
                grid = np.round(np.asarray(d["success_rate"]) * _RATE_GRID) / _RATE_GRID
                success_rate = jnp.asarray(grid, fdt)
            scores = success_rate * (1.0 - success_rate)
        state = SamplerState(
            scores=scores,
            last_sampled=jnp.asarray(d["last_sampled"], idt),
            order=jnp.asarray(order, idt),
            position=jnp.asarray(position, idt),
            num_seen=jnp.asarray(d["num_seen"], idt),
            num_samples=jnp.asarray(d["num_samples"], idt),
            next_index=jnp.asarray(d["next_index"], idt),
            num_replay=jnp.asarray(d["num_replay"], idt),
            num_explore=jnp.asarray(d["num_explore"], idt),
            success_rate=success_rate,
            outcomes=jnp.asarray(d.get("outcomes", np.zeros(n, np.int64)), idt),
            progress=jnp.asarray(d.get("progress", 0.0), fdt),
            num_rejected=jnp.zeros((), idt),
            score_cdf=jnp.zeros(n, fdt),
            last_floor=jnp.zeros((), idt),
        )
        return self._refresh(state)

    def to_numpy(self, state: SamplerState, levels: Any = None, seed: int | None = None) -> NumpyLevelSampler:
        """A :class:`plr_gym.LevelSampler` holding ``state`` (level ids ``levels``, default the positions;
        its generator seeded with ``seed``). ``num_rejected`` has no numpy counterpart and is dropped."""
        self.check_state(state, "to_numpy")
        n = self.num_levels
        host = jax.device_get(state)
        level_ids = np.arange(n) if levels is None else np.asarray(levels)
        out = NumpyLevelSampler(level_ids, seed=seed, **self._numpy_kwargs())
        d = out.state_dict()
        scores = np.asarray(host.scores, np.float64)
        success_rate = np.asarray(host.success_rate, np.float64)
        if self.learns_outcomes:  # the definition, in float64 (a float32 state rounds it differently)
            scores = success_rate * (1.0 - success_rate)
        order, num_seen = np.asarray(host.order, np.int64), int(host.num_seen)
        d.update(
            scores=scores,
            last_sampled=np.asarray(host.last_sampled, np.int64),
            order=order,
            num_seen=num_seen,
            num_samples=int(host.num_samples),
            next_index=int(host.next_index),
            num_replay=int(host.num_replay),
            num_explore=int(host.num_explore),
            progress=float(host.progress),
            softmax_shift=self._anchor(scores[order[:num_seen]], float(host.progress)),
        )
        if self.learns_outcomes:
            d.update(success_rate=success_rate, outcomes=np.asarray(host.outcomes, np.int64))
        out.load_state_dict(d)
        return out

    def _anchor(self, seen_scores: npt.NDArray[np.float64], progress: float) -> float:
        """The numpy sum tree's reference exponent for ``power``/``softmax`` (that of the best score)."""
        if self.score_transform not in ("power", "softmax") or seen_scores.size == 0:
            return 0.0
        top = float(seen_scores.max())
        g = (math.log(top) if top > 0 else -math.inf) if self.score_transform == "power" else top
        return g if math.isfinite(g) else 0.0

    def state_dict(self, state: SamplerState, levels: Any = None, seed: int | None = None) -> dict[str, Any]:
        """:meth:`plr_gym.LevelSampler.state_dict` of ``state`` (see :meth:`to_numpy`)."""
        return self.to_numpy(state, levels, seed).state_dict()

    def save(
        self, state: SamplerState, path: str | os.PathLike[str], levels: Any = None, seed: int | None = None
    ) -> None:
        """Write ``state`` as a :class:`plr_gym.LevelSampler` checkpoint file (``.npz``, atomic)."""
        self.to_numpy(state, levels, seed).save(path)

    def load(self, path: str | os.PathLike[str]) -> SamplerState:
        """The state in a :class:`plr_gym.LevelSampler` checkpoint file (its configuration must match)."""
        return self.state_from_dict(NumpyLevelSampler.load(path).state_dict())
