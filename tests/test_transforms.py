"""Score transforms: one registry, and every transform's fast sampling draws from its own definition."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from scipy import stats

from plr_gym import LevelBuffer, LevelSampler
from plr_gym.level_buffer import buffer_transforms
from plr_gym.sampler import SCORE_TRANSFORMS, STALENESS_TRANSFORMS
from plr_gym.transforms import (
    TRANSFORMS,
    ExponentialTransform,
    OrderedTransform,
    ScoreTransform,
    UniformTransform,
    register_transform,
    transform_names,
)

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "guide.md"
#: Scores with ties (0.9 twice, 0.0 twice, a negative score for the transforms that take one).
SCORES = np.array([0.2, 0.9, 0.5, 0.0, 0.9, 0.3, 0.0, 0.7, 0.05, 0.6])
DRAWS = 20_000
#: Reject "the fast draws follow the definition" below this p-value (fixed seeds: a deterministic test).
ALPHA = 1e-4


def sampler_names() -> tuple[str, ...]:
    return transform_names(("temperature", "eps"))


def scores_for(name: str) -> npt.NDArray[np.float64]:
    if TRANSFORMS[name].nonnegative:
        return SCORES
    return SCORES - 0.4  # signed scores for the transforms that accept them


def check_counts(counts: npt.NDArray[Any], expected: npt.NDArray[np.float64], what: str) -> None:
    """Levels of probability 0 are never drawn; the others follow ``expected`` (chi-square)."""
    zero = expected <= 1e-12
    assert counts[zero].sum() == 0, (
        f"{what}: drew levels of probability 0: {np.flatnonzero(zero & (counts > 0))}"
    )
    live = ~zero
    if live.sum() > 1:
        f_exp = expected[live] / expected[live].sum() * counts.sum()
        p = stats.chisquare(counts[live], f_exp).pvalue
        assert p > ALPHA, (
            f"{what}: counts {counts.tolist()} vs expected {np.round(f_exp, 1).tolist()} (p={p:.2g})"
        )


class TestRegistry:
    def test_sampler_tuples_are_the_registry(self) -> None:
        assert SCORE_TRANSFORMS == ("rank", "power", "softmax", "eps_greedy", "constant", "max")
        assert STALENESS_TRANSFORMS == SCORE_TRANSFORMS == sampler_names()
        assert all(name in TRANSFORMS for name in SCORE_TRANSFORMS)

    def test_buffer_choices_are_the_ordered_transforms_it_can_parameterise(self) -> None:
        assert buffer_transforms() == ("rank", "max", "topk")
        assert all(issubclass(TRANSFORMS[name], OrderedTransform) for name in buffer_transforms())

    def test_every_transform_is_usable_by_an_owner_and_documented(self) -> None:
        guide = GUIDE.read_text()
        section = guide[guide.index("## Score transforms") :]
        for name, cls in TRANSFORMS.items():
            assert cls.name == name
            assert cls.__doc__, f"{cls.__name__} has no docstring"
            assert f"`{name}`" in section, f"transform {name!r} is missing from docs/guide.md"
            in_sampler, in_buffer = name in sampler_names(), name in buffer_transforms()
            assert in_sampler or in_buffer, f"no owner accepts transform {name!r}"
            if in_sampler:
                s = LevelSampler(range(3), score_transform=name, staleness_transform=name, seed=0)
                assert (s.score_transform, s.staleness_transform) == (name, name)
            if in_buffer:
                assert LevelBuffer(capacity=3, score_transform=name).score_transform == name

    def test_owners_refuse_transforms_they_cannot_parameterise(self) -> None:
        with pytest.raises(
            ValueError, match=r"score_transform='topk' is not supported; choose one of rank, "
        ):
            LevelSampler(range(3), score_transform="topk")
        with pytest.raises(ValueError, match=r"staleness_transform='topk'"):
            LevelSampler(range(3), staleness_transform="topk")
        with pytest.raises(
            ValueError, match=r"score_transform='softmax' is not supported; choose one of rank, max"
        ):
            LevelBuffer(capacity=3, score_transform="softmax")

    def test_registration_errors_name_the_problem(self) -> None:
        class Nameless(ScoreTransform):
            pass

        class Taken(ScoreTransform):
            name = "rank"

        class Odd(ScoreTransform):
            name = "odd"
            params = ("beta",)

        with pytest.raises(ValueError, match="name must be a non-empty string"):
            register_transform(Nameless)
        with pytest.raises(ValueError, match="'rank' is already registered"):
            register_transform(Taken)
        with pytest.raises(ValueError, match=r"unknown parameters \['beta'\]"):
            register_transform(Odd)
        with pytest.raises(TypeError, match="ScoreTransform subclass"):
            register_transform(int)  # type: ignore[type-var]
        assert "odd" not in TRANSFORMS and TRANSFORMS["rank"].__name__ == "Rank"


class Linear(ScoreTransform):
    """Toy transform with no fast structure: weights proportional to the values."""

    name = "test_linear"
    nonnegative = True

    def unnormalised(self, values: npt.NDArray[Any]) -> npt.NDArray[np.float64]:
        out: npt.NDArray[np.float64] = values.astype(np.float64)
        return out


class SecondBest(OrderedTransform):
    """Toy ordered transform: always the second-best level (the best when alone)."""

    name = "test_second_best"

    def unnormalised(self, values: npt.NDArray[Any]) -> npt.NDArray[np.float64]:
        order = np.argsort(-values, kind="stable")
        w = np.zeros(values.size)
        w[order[min(1, values.size - 1)]] = 1.0
        return w

    def draw(self, keys: Any, n: int, rng: np.random.Generator) -> int | None:
        return int(keys.kth(min(1, n - 1)))


class Cube(ExponentialTransform):
    """Toy exponential transform: ``v^(3/β)`` (non-negative values)."""

    name = "test_cube"
    nonnegative = True

    def exponent(self, value: float) -> float:
        return 3.0 * float(np.log(value)) if value > 0.0 else -np.inf

    def exponents(self, values: npt.NDArray[Any]) -> npt.NDArray[np.float64]:
        out: npt.NDArray[np.float64] = 3.0 * np.log(values)
        return out


TOYS: tuple[type[ScoreTransform], ...] = (Linear, SecondBest, Cube)


@pytest.fixture
def toys() -> Iterator[tuple[str, ...]]:
    """The toy transforms, registered for one test (the registry is restored afterwards)."""
    before = dict(TRANSFORMS)
    try:
        for cls in TOYS:
            register_transform(cls)
        yield tuple(cls.name for cls in TOYS)
    finally:
        TRANSFORMS.clear()
        TRANSFORMS.update(before)


class TestRegisteringANewTransform:
    def test_registered_transform_is_accepted_everywhere_it_can_be(self, toys: tuple[str, ...]) -> None:
        for name in toys:
            assert name in sampler_names()
            s = LevelSampler(range(4), score_transform=name, staleness_transform=name, seed=0)
            s.update_batch(range(4), [0.1, 0.4, 0.2, 0.3])
            assert int(s.sample()) in range(4)
            assert s.sample_weights().sum() == pytest.approx(1.0)
        assert "test_second_best" in buffer_transforms() and "test_linear" not in buffer_transforms()

    def test_definition_drives_sample_weights(self, toys: tuple[str, ...]) -> None:
        s = LevelSampler(
            range(4), score_transform="test_linear", staleness_coef=0.0, uniform_mass=0.0, seed=0
        )
        s.update_batch(range(4), [1.0, 3.0, 0.0, 4.0])
        np.testing.assert_allclose(s.sample_weights(), [0.125, 0.375, 0.0, 0.5])

    def test_nonnegative_transform_refuses_negative_scores(self, toys: tuple[str, ...]) -> None:
        s = LevelSampler(range(4), score_transform="test_cube", seed=0)
        with pytest.raises(ValueError, match=r"score_transform='test_cube' needs non-negative scores"):
            s.update(0, -0.5)
        assert s.num_seen == 0

    def test_checkpoint_round_trip(self, toys: tuple[str, ...], tmp_path: Path) -> None:
        live = LevelSampler(range(6), score_transform="test_cube", staleness_transform="test_linear", seed=3)
        live.update_batch(range(6), [0.1, 0.5, 0.2, 0.9, 0.3, 0.4])
        live.sample(10)
        live.save(tmp_path / "s.npz")
        twin = LevelSampler.load(tmp_path / "s.npz")
        assert live.sample(50).tolist() == twin.sample(50).tolist()


def all_names_with_toys() -> list[str]:
    return [*SCORE_TRANSFORMS, *(cls.name for cls in TOYS)]


@pytest.mark.parametrize("name", all_names_with_toys())
def test_fast_score_draws_follow_the_definition(name: str, toys: tuple[str, ...]) -> None:
    """P_S alone (no staleness, no uniform floor): the draws of ``sample()`` follow ``sample_weights()``."""
    scores = scores_for(name)
    s = LevelSampler(
        range(scores.size),
        score_transform=name,
        temperature=0.5,
        eps=0.3,
        staleness_coef=0.0,
        uniform_mass=0.0,
        seed=11,
    )
    s.update_batch(range(scores.size), scores)
    expected = s.sample_weights()
    np.testing.assert_allclose(expected, TRANSFORMS[name](temperature=0.5, eps=0.3).weights(scores))
    counts = np.bincount(s.sample(DRAWS), minlength=scores.size)
    check_counts(counts, expected, f"score_transform={name!r}")


@pytest.mark.parametrize("staleness_temperature", [1.0, 0.7])
@pytest.mark.parametrize("name", all_names_with_toys())
def test_fast_staleness_draws_follow_the_definition(
    name: str, staleness_temperature: float, toys: tuple[str, ...]
) -> None:
    """P_C alone: staleness changes at every draw, so each draw is compared with the distribution
    ``sample_weights()`` gives just before it (observed counts vs the sum of those distributions)."""
    n, draws = 8, 6000
    s = LevelSampler(
        range(n),
        score_transform="constant",
        staleness_transform=name,
        staleness_temperature=staleness_temperature,
        eps=0.3,
        staleness_coef=1.0,
        uniform_mass=0.0,
        seed=5,
    )
    s.update_batch(range(n), np.linspace(0.1, 0.8, n))
    expected = np.zeros(n)
    counts = np.zeros(n, dtype=np.int64)
    # pearson statistic of a sequence of categorical draws with changing probabilities: per level,
    # (observed - Σp)² / Σp(1-p) is ~chi-square(1) for many draws; a deterministic transform (one level
    # with probability 1 each time) has zero variance and must match exactly
    variance = np.zeros(n)
    for _ in range(draws):
        p = s.sample_weights()
        level = int(s.sample())
        expected += p
        variance += p * (1.0 - p)
        counts[level] += 1
    exact = variance < 1e-9
    np.testing.assert_allclose(counts[exact], expected[exact], atol=1e-6)
    z = (counts[~exact] - expected[~exact]) / np.sqrt(variance[~exact])
    # Bonferroni over the levels at ALPHA
    bound = stats.norm.isf(ALPHA / (2 * n))
    assert np.all(np.abs(z) < bound), f"staleness_transform={name!r}: z-scores {np.round(z, 2).tolist()}"


@pytest.mark.parametrize("name", [*buffer_transforms(), SecondBest.name])
def test_fast_buffer_draws_follow_the_definition(name: str, toys: tuple[str, ...]) -> None:
    buf = LevelBuffer(
        capacity=SCORES.size, score_transform=name, temperature=0.5, topk=3, staleness_coef=0.0, seed=2
    )
    for i, score in enumerate(SCORES):
        assert buf.insert(100 + i, float(score)) == i
    expected = buf.sample_weights()
    np.testing.assert_allclose(expected, TRANSFORMS[name](temperature=0.5, topk=3).weights(SCORES))
    counts = np.bincount(buf.sample_replay_levels(DRAWS)[0], minlength=SCORES.size)
    check_counts(counts, expected, f"LevelBuffer score_transform={name!r}")


@pytest.mark.parametrize(
    ("name", "values", "weights"),
    [
        ("rank", [0.2, 0.9, 0.2], [1 / 4, 1, 1 / 9]),
        ("power", [1.0, 2.0, 0.0], [1, 4, 0]),
        ("softmax", [0.0, np.log(3.0), 0.0], [1, 9, 1]),
        ("eps_greedy", [0.9, 0.1, 0.9], [0.7 + 0.1, 0.1, 0.1]),
        ("constant", [5.0, -1.0, 0.0], [1, 1, 1]),
        ("max", [0.9, 0.1, 0.9], [1, 0, 1]),
        ("topk", [0.1, 0.9, 0.5, 0.9], [0, 1, 0, 1]),
    ],
)
def test_definitions_by_hand(name: str, values: list[float], weights: list[float]) -> None:
    """Each built-in transform's definition at ``temperature=0.5``, ``eps=0.3``, ``topk=2``."""
    w = np.asarray(weights, dtype=np.float64)
    got = TRANSFORMS[name](temperature=0.5, eps=0.3, topk=2).weights(np.asarray(values))
    np.testing.assert_allclose(got, w / w.sum(), rtol=1e-12)


def test_families() -> None:
    assert issubclass(TRANSFORMS["constant"], UniformTransform)
    assert {n for n in TRANSFORMS if issubclass(TRANSFORMS[n], ExponentialTransform)} == {"power", "softmax"}
    assert TRANSFORMS["power"](temperature=1.0).linear  # type: ignore[attr-defined]
    assert not TRANSFORMS["power"](temperature=0.5).linear  # type: ignore[attr-defined]
    assert not TRANSFORMS["softmax"](temperature=1.0).linear  # type: ignore[attr-defined]
    assert re.fullmatch(r"Rank\(temperature=0\.5\)", repr(TRANSFORMS["rank"](temperature=0.5)))
