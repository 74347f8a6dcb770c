"""Score transforms: each one defined once, next to its fast sampling.

A *transform* ``h`` turns a vector of "higher is more likely" values (level scores, or staleness counts)
into replay weights. Each transform is one small class holding

- its **definition**, :meth:`ScoreTransform.weights`: the normalised weights over a value vector
  (``O(N log N)``; :meth:`LevelSampler.sample_weights` and :meth:`LevelBuffer.sample_weights` use it), and
- its **fast sampling**, chosen by the family it derives from:

  - :class:`OrderedTransform`: the weights depend only on the order of the values (ties towards the
    earlier position). Its structure is an ordered set of keys (:meth:`~OrderedTransform.structure`),
    sampled by :meth:`~OrderedTransform.draw` in ``O(log N)``.
  - :class:`ExponentialTransform`: weights ``exp(g(v)/temperature)``. Scores live in a sum tree of
    per-level weights (:meth:`~ExponentialTransform.leaf_weight`), ``O(log N)`` per draw and per changed
    score; staleness only when the weight is proportional to it (:attr:`~ExponentialTransform.linear`),
    else ``O(N)`` per draw.
  - :class:`UniformTransform`: uniform, no structure; the owner draws uniformly.
  - :class:`ScoreTransform` itself: no structure; every draw recomputes :meth:`~ScoreTransform.weights`
    (``O(N)``, :meth:`~ScoreTransform.draw_position`).

:data:`TRANSFORMS` maps each name to its class; :class:`~plr_gym.LevelSampler`,
:class:`~plr_gym.LevelBuffer` and the ``plr-gym`` command read their choices from it
(:func:`transform_names`). Adding a transform is one class decorated with :func:`register_transform`
(plus its tests): see "Adding a score transform" in ``docs/guide.md``.

Example:
    >>> import numpy as np
    >>> from plr_gym.transforms import TRANSFORMS
    >>> rank = TRANSFORMS["rank"]
    >>> rank(temperature=1.0).weights(np.array([0.1, 0.9, 0.5])).round(3)
    array([0.182, 0.545, 0.273])
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, TypeVar

import numpy as np
import numpy.typing as npt

from plr_gym._structures import OrderedKeys

__all__ = [
    "TRANSFORMS",
    "ExponentialTransform",
    "OrderedTransform",
    "ScoreTransform",
    "UniformTransform",
    "register_transform",
    "transform_names",
]

FloatArray = npt.NDArray[np.float64]

#: Parameters a transform may read, named as the owners' keywords (``LevelSampler`` passes ``temperature``
#: and ``eps``, ``LevelBuffer`` passes ``temperature`` and ``topk``).
PARAMS: tuple[str, ...] = ("temperature", "eps", "topk")


class ScoreTransform:
    """Base of every transform: the definition :meth:`weights`, and an ``O(N)`` draw from it.

    Subclasses set :attr:`name` and :attr:`params` and implement :meth:`unnormalised`. Deriving from
    :class:`OrderedTransform`, :class:`ExponentialTransform` or :class:`UniformTransform` instead gives
    the transform an ``O(log N)`` sampling structure; deriving from this class directly is enough for
    correctness (each draw then costs ``O(N)``).

    :param temperature: temperature ``β`` (> 0), for transforms listing ``"temperature"`` in :attr:`params`.
    :param eps: exploration mass in ``[0, 1]``, for transforms listing ``"eps"``.
    :param topk: number of best levels (>= 1), for transforms listing ``"topk"``.

    The owner (sampler or buffer) validates these values; a transform reads only those in :attr:`params`.

    Example:
        >>> import numpy as np
        >>> class Linear(ScoreTransform):
        ...     '''Weights proportional to the values (non-negative values).'''
        ...     name = "linear"
        ...     nonnegative = True
        ...     def unnormalised(self, values):
        ...         return values.astype(np.float64)
        >>> Linear().weights(np.array([1.0, 3.0]))
        array([0.25, 0.75])
        >>> Linear().weights(np.array([0.0, 0.0]))   # no mass: uniform
        array([0.5, 0.5])
    """

    #: The name users pass (``score_transform=name``); unique in :data:`TRANSFORMS`.
    name: ClassVar[str] = ""
    #: The owner keywords this transform reads (a subset of ``("temperature", "eps", "topk")``). An owner
    #: offers the transforms whose parameters it has.
    params: ClassVar[tuple[str, ...]] = ()
    #: True when negative values have no weight defined (the owner then refuses negative scores).
    nonnegative: ClassVar[bool] = False

    def __init__(self, temperature: float = 1.0, eps: float = 0.05, topk: int = 1) -> None:
        self.temperature = temperature
        self.eps = eps
        self.topk = topk

    def unnormalised(self, values: npt.NDArray[Any]) -> FloatArray:
        """Non-negative weights (any common factor) of ``values`` (1-D, at least one entry).

        ``values`` are ordered by level position; a transform that breaks ties breaks them towards the
        earlier position.
        """
        raise NotImplementedError(f"{type(self).__name__} must implement unnormalised(values)")

    def weights(self, values: npt.NDArray[Any]) -> FloatArray:
        """The definition: normalised weights over ``values``; uniform when the weights have no mass."""
        n = values.size
        w = self.unnormalised(values)
        total = float(w.sum())
        if not total > 0.0:
            return np.full(n, 1.0 / n)
        out: FloatArray = w / total
        return out

    def draw_position(self, values: npt.NDArray[Any], rng: np.random.Generator) -> int:
        """Position ``k`` drawn from :meth:`weights` of ``values`` (``O(N)``; one ``rng.random()``)."""
        w = self.weights(values)
        cdf = np.cumsum(w)
        return min(int(np.searchsorted(cdf, rng.random() * cdf[-1], side="right")), w.size - 1)

    def __repr__(self) -> str:
        shown = ", ".join(f"{p}={getattr(self, p)!r}" for p in self.params)
        return f"{type(self).__name__}({shown})"


class OrderedTransform(ScoreTransform):
    """A transform whose weights depend only on the order of the values (ties: earlier position first).

    Its fast structure is an :class:`~plr_gym._structures.OrderedKeys` holding the owner's entries best
    first (the owner keys scores by ``-score`` and staleness by the time of the last draw); :meth:`draw`
    picks an entry in ``O(log N)``.
    """

    def structure(self, capacity: int) -> OrderedKeys:
        """A new, empty structure for up to ``capacity`` entries (prepares any table the draws need)."""
        return OrderedKeys()

    def draw(self, keys: OrderedKeys, n: int, rng: np.random.Generator) -> int | None:
        """Index of an entry drawn from ``keys`` (``n = len(keys) >= 1`` entries), or ``None`` when the
        draw is uniform over the entries (the owner then draws uniformly with its own generator)."""
        raise NotImplementedError(f"{type(self).__name__} must implement draw(keys, n, rng)")


class ExponentialTransform(ScoreTransform):
    """``h(v) = exp(g(v) / temperature)`` for an exponent ``g`` (``g = -inf`` means weight 0).

    The weights are computed relative to a reference exponent ``shift`` (``exp((g(v) − shift)/β)``), so
    large values do not overflow; the sampler keeps ``shift`` and re-anchors its sum tree when needed.
    """

    params = ("temperature",)

    def exponent(self, value: float) -> float:
        """``g(value)`` for one value (``-inf`` for weight 0)."""
        raise NotImplementedError(f"{type(self).__name__} must implement exponent(value)")

    def exponents(self, values: npt.NDArray[Any]) -> FloatArray:
        """``g`` of every value (``-inf`` for weight 0)."""
        raise NotImplementedError(f"{type(self).__name__} must implement exponents(values)")

    @property
    def linear(self) -> bool:
        """True when the weight is exactly proportional to the value (then staleness sampling is exact in
        integers, ``O(log N)``, with :class:`~plr_gym._structures.LinearStalenessTree`)."""
        return False

    def unnormalised(self, values: npt.NDArray[Any]) -> FloatArray:
        """``exp((g(v) − max g)/β)`` (all zeros when every weight is 0)."""
        with np.errstate(divide="ignore"):
            g = self.exponents(values)
        top = float(g.max()) if g.size else 0.0
        shift = top if math.isfinite(top) else 0.0
        out: FloatArray = np.exp((g - shift) / self.temperature)
        return out

    def leaf_weight(self, value: float, shift: float) -> float:
        """``exp((g(value) − shift)/β)`` for one value, computed the same way on every path (so
        structures rebuilt from a checkpoint are identical bit for bit)."""
        z = (self.exponent(value) - shift) / self.temperature
        return math.exp(z) if z > -math.inf else 0.0


class UniformTransform(ScoreTransform):
    """Uniform weights: no structure; the owner draws uniformly."""

    def unnormalised(self, values: npt.NDArray[Any]) -> FloatArray:
        return np.ones(values.size)


#: Every registered transform, by name, in registration order (the built-ins first).
TRANSFORMS: dict[str, type[ScoreTransform]] = {}

_T = TypeVar("_T", bound=type[ScoreTransform])


def register_transform(cls: _T) -> _T:
    """Class decorator adding a transform to :data:`TRANSFORMS` under ``cls.name``.

    ``ValueError`` if the name is empty or taken, or if ``params`` names a parameter no owner has;
    ``TypeError`` if ``cls`` is not a :class:`ScoreTransform` subclass.

    Example:
        >>> import numpy as np
        >>> from plr_gym import LevelSampler
        >>> @register_transform
        ... class Square(ScoreTransform):
        ...     '''Weights ``S²`` (non-negative scores).'''
        ...     name = "doctest_square"
        ...     nonnegative = True
        ...     def unnormalised(self, values):
        ...         return np.square(values, dtype=np.float64)
        >>> s = LevelSampler(range(2), score_transform="doctest_square", staleness_coef=0.0,
        ...                  uniform_mass=0.0, seed=0)
        >>> s.update(0, 1.0); s.update(1, 2.0)
        >>> s.sample_weights()
        array([0.2, 0.8])
        >>> del TRANSFORMS["doctest_square"]      # (tests only: keep the registry as it was)
    """
    if not isinstance(cls, type) or not issubclass(cls, ScoreTransform):
        raise TypeError(f"register_transform takes a ScoreTransform subclass, got {cls!r}")
    name = cls.name
    if not isinstance(name, str) or not name:
        raise ValueError(f"{cls.__name__}.name must be a non-empty string, got {name!r}")
    if name in TRANSFORMS:
        raise ValueError(f"a transform named {name!r} is already registered ({TRANSFORMS[name].__name__})")
    unknown = [p for p in cls.params if p not in PARAMS]
    if unknown:
        raise ValueError(
            f"{cls.__name__}.params has unknown parameters {unknown}; known: {', '.join(PARAMS)}"
        )
    TRANSFORMS[name] = cls
    return cls


def transform_names(
    offered: tuple[str, ...], family: type[ScoreTransform] = ScoreTransform
) -> tuple[str, ...]:
    """Names of the registered transforms of ``family`` whose :attr:`~ScoreTransform.params` are all in
    ``offered``: the choices of an owner that passes the parameters ``offered``.

    Example:
        >>> transform_names(("temperature", "topk"), OrderedTransform)
        ('rank', 'max', 'topk')
    """
    return tuple(
        name
        for name, cls in TRANSFORMS.items()
        if issubclass(cls, family) and all(p in offered for p in cls.params)
    )


@register_transform
class Rank(OrderedTransform):
    """``1 / rank(v)^(1/β)``, rank 1 for the highest value (ties: earlier position first)."""

    name = "rank"
    params = ("temperature",)

    def __init__(self, temperature: float = 1.0, eps: float = 0.05, topk: int = 1) -> None:
        super().__init__(temperature, eps, topk)
        self._cdf: FloatArray = np.zeros(0)

    def unnormalised(self, values: npt.NDArray[Any]) -> FloatArray:
        n = values.size
        order = np.argsort(-values, kind="stable")
        ranks = np.empty(n, dtype=np.float64)
        ranks[order] = np.arange(1, n + 1, dtype=np.float64)
        out: FloatArray = ranks ** (-1.0 / self.temperature)
        return out

    def structure(self, capacity: int) -> OrderedKeys:
        # cumulative weights of ranks 1..capacity; a draw over n entries searches its first n
        self._cdf = np.cumsum(np.arange(1, capacity + 1, dtype=np.float64) ** (-1.0 / self.temperature))
        return OrderedKeys()

    def draw(self, keys: OrderedKeys, n: int, rng: np.random.Generator) -> int | None:
        cdf = self._cdf
        u = rng.random() * cdf[n - 1]
        return keys.kth(min(int(np.searchsorted(cdf[:n], u, side="right")), n - 1))


@register_transform
class Power(ExponentialTransform):
    """``v^(1/β)`` (non-negative values; zero has weight 0)."""

    name = "power"
    nonnegative = True
    #: Added to every value before the power (``(v + offset)^(1/β)``): 0 here; level-replay adds 1e-3 to the
    #: scores when its staleness coefficient is 0 (``LevelSampler(power_offset=...)`` sets it).
    offset: float = 0.0

    def exponent(self, value: float) -> float:
        value = value + self.offset
        return math.log(value) if value > 0.0 else -math.inf

    def exponents(self, values: npt.NDArray[Any]) -> FloatArray:
        out: FloatArray = np.log(values + self.offset) if self.offset else np.log(values)
        return out

    @property
    def linear(self) -> bool:
        return self.temperature == 1.0 and self.offset == 0.0


@register_transform
class Softmax(ExponentialTransform):
    """``exp(v/β)``."""

    name = "softmax"

    def exponent(self, value: float) -> float:
        return value

    def exponents(self, values: npt.NDArray[Any]) -> FloatArray:
        out: FloatArray = values.astype(np.float64)
        return out


@register_transform
class EpsGreedy(OrderedTransform):
    """``1 − eps`` on the best value (ties: earlier position) plus ``eps`` spread uniformly."""

    name = "eps_greedy"
    params = ("eps",)

    def unnormalised(self, values: npt.NDArray[Any]) -> FloatArray:
        n = values.size
        w = np.full(n, self.eps / n)
        w[int(np.argmax(values))] += 1.0 - self.eps
        return w

    def draw(self, keys: OrderedKeys, n: int, rng: np.random.Generator) -> int | None:
        if self.eps > 0.0 and rng.random() < self.eps:
            return None
        return keys.kth(0)


@register_transform
class Constant(UniformTransform):
    """Uniform: every value has the same weight."""

    name = "constant"


@register_transform
class Max(OrderedTransform):
    """Uniform over the values tied for the highest."""

    name = "max"

    def unnormalised(self, values: npt.NDArray[Any]) -> FloatArray:
        out: FloatArray = (values == values.max()).astype(np.float64)
        return out

    def draw(self, keys: OrderedKeys, n: int, rng: np.random.Generator) -> int | None:
        return keys.kth(int(rng.integers(keys.count_tied_first())))


@register_transform
class TopK(OrderedTransform):
    """Uniform over the ``topk`` highest values (ties: earlier position first)."""

    name = "topk"
    params = ("topk",)

    def unnormalised(self, values: npt.NDArray[Any]) -> FloatArray:
        order = np.argsort(-values, kind="stable")
        w = np.zeros(values.size)
        w[order[: self.topk]] = 1.0
        return w

    def draw(self, keys: OrderedKeys, n: int, rng: np.random.Generator) -> int | None:
        return keys.kth(int(rng.integers(min(self.topk, n))))
