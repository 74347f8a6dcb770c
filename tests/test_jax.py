"""plr_gym.jax against the numpy classes: same state, same weights; same operations, same state.

Skipped where JAX is not installed (the jax extra needs Python >= 3.12: the 3.11 stack has no JAX).
Few shapes on purpose: every configuration and shape compiles once (seconds on CI's cores).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy import stats

from conftest import importorskip_on_stack
from plr_gym import LevelSampler as NumpyLevelSampler

jax = importorskip_on_stack(
    "jax", "JAX >= 0.11 needs Python >= 3.12 (the jax extra is tested on Python 3.13)"
)
import jax.numpy as jnp  # noqa: E402
from jax.experimental import checkify  # noqa: E402

from plr_gym.jax import LevelBuffer, LevelSampler  # noqa: E402

N = 7  # levels
M = 3  # updates and draws per step: one shape per configuration


@pytest.fixture
def x64() -> Iterator[None]:
    with jax.enable_x64(True):
        yield


# Each configuration exercises one corner (a compile each, so few): score transforms, staleness
# transforms, schedules, the EWA, learnability, an annealed temperature, the baselines.
CONFIGS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "paper_rank_fixed_min_seen": {
        "temperature": 0.1,
        "staleness_coef": 0.1,
        "uniform_mass": 0.0,
        "replay_schedule": "fixed",
        "replay_prob": 0.6,
        "min_seen_ratio": 0.4,
    },
    "power_alpha_stale_rank": {
        "score_transform": "power",
        "temperature": 0.5,
        "alpha": 0.3,
        "staleness_transform": "rank",
        "min_seen_ratio": 0.0,
    },
    "softmax_stale_softmax": {
        "score_transform": "softmax",
        "temperature": 0.2,
        "staleness_transform": "softmax",
        "staleness_temperature": 2.0,
        "staleness_coef": 0.5,
        "min_seen_ratio": 0.5,
    },
    "eps_greedy_stale_power_t2": {
        "score_transform": "eps_greedy",
        "eps": 0.2,
        "staleness_transform": "power",
        "staleness_temperature": 2.0,
        "uniform_mass": 0.1,
        "min_seen_ratio": 0.0,
    },
    "max_stale_eps_greedy": {
        "score_transform": "max",
        "staleness_transform": "eps_greedy",
        "staleness_coef": 1.0,
        "min_seen_ratio": 0.0,
    },
    "constant_stale_max_annealed": {
        "score_transform": "constant",
        "staleness_transform": "max",
        "temperature_end": 0.1,
        "min_seen_ratio": 0.0,
    },
    "learnability": {"strategy": "learnability", "min_seen_ratio": 0.0, "success_rate_alpha": 0.25},
    "sequential": {"strategy": "sequential"},
    "random": {"strategy": "random"},
}


def _scores(rng: np.random.Generator, config: dict[str, Any], size: int) -> np.ndarray:
    if config.get("strategy") == "learnability":
        return rng.integers(0, 2, size).astype(np.float64)
    if config.get("score_transform") == "max":  # ties matter
        return rng.integers(0, 3, size).astype(np.float64)
    scores = rng.random(size) * 2.0
    scores[rng.random(size) < 0.2] = 0.0  # ties (rank) and zero weights (power)
    if config.get("score_transform") in ("softmax", "rank", None):
        scores -= 0.5  # signed scores
    return scores


def _assert_same_state(
    jsampler: LevelSampler, state: Any, numpy_sampler: NumpyLevelSampler, tol: float
) -> None:
    mine = jsampler.state_dict(state)
    ref = numpy_sampler.state_dict()
    np.testing.assert_allclose(mine["scores"], ref["scores"], rtol=0, atol=tol)
    for key in ("last_sampled", "order"):
        np.testing.assert_array_equal(mine[key], ref[key], err_msg=key)
    for key in ("num_seen", "num_samples", "next_index", "num_replay", "num_explore"):
        assert mine[key] == ref[key], key
    if "outcomes" in ref:
        np.testing.assert_array_equal(mine["outcomes"], ref["outcomes"])
        np.testing.assert_allclose(mine["success_rate"], ref["success_rate"], rtol=0, atol=tol)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_same_operations_fed_the_numpy_draws_give_the_same_state_and_weights(x64: None, name: str) -> None:
    config = CONFIGS[name]
    rng = np.random.default_rng(sum(map(ord, name)))
    ref = NumpyLevelSampler(range(N), seed=1, **config)
    jsampler, state = LevelSampler.from_numpy(ref)
    assert jsampler == LevelSampler(num_levels=N, **config)
    progress = 0.0
    for step in range(14):
        draws = ref.sample(M)  # the numpy draws, fed to the JAX state
        state = jsampler.mark_sampled(state, jnp.asarray(draws))
        levels = rng.integers(0, N, M)
        scores = _scores(rng, config, M)
        mask = rng.random(M) < 0.8
        ref.update_batch(levels[mask], scores[mask])
        state = jsampler.update(state, jnp.asarray(levels), jnp.asarray(scores), jnp.asarray(mask))
        if "temperature_end" in config and step % 4 == 3:
            progress += 0.25
            ref.set_progress(progress)
            state = jsampler.set_progress(state, progress)
        np.testing.assert_allclose(
            np.asarray(jsampler.weights(state)), ref.sample_weights(), rtol=0, atol=1e-12
        )
        assert float(jsampler.replay_probability(state)) == pytest.approx(ref.replay_probability(), abs=1e-15)
        _assert_same_state(jsampler, state, ref, 1e-12)
    assert ref.num_seen > 0 and int(state.num_rejected) == 0


def test_sample_is_mark_sampled_of_its_draws_and_runs_under_vmap(x64: None) -> None:
    jsampler = LevelSampler(num_levels=N, min_seen_ratio=0.5)
    state = jsampler.update(jsampler.init(), jnp.arange(4), jnp.array([0.3, -1.0, 2.0, 0.5]))
    after, levels, replayed = jsampler.sample(state, jax.random.key(3), 5)
    for x, y in zip(jax.tree.leaves(after), jax.tree.leaves(jsampler.mark_sampled(state, levels))):
        np.testing.assert_array_equal(x, y)
    # a replay is a draw of a seen level, an exploration one of an unseen level
    np.testing.assert_array_equal(np.asarray(replayed), np.asarray(state.seen[levels]))
    # vmap over keys and over states: each batch member is the unbatched call
    keys = jax.random.split(jax.random.key(4), 3)
    states = jax.tree.map(lambda a: jnp.stack([a] * 3), state)
    batched = jax.device_get(jax.vmap(lambda s, k: jsampler.sample(s, k, 5))(states, keys))
    for b in range(3):
        one = jax.device_get(jsampler.sample(state, keys[b], 5))
        for x, y in zip(jax.tree.leaves(batched), jax.tree.leaves(one)):
            np.testing.assert_array_equal(x[b], y)


def test_masked_sample_draws_for_the_true_slots_only_in_order(x64: None) -> None:
    """sample(..., mask=m): the True slots get sequential draws (the state is mark_sampled of them, in slot
    order), the False slots -1 and no state change; an all-True mask is the unmasked call."""
    jsampler = LevelSampler(num_levels=N, min_seen_ratio=0.5)
    state = jsampler.update(jsampler.init(), jnp.arange(4), jnp.array([0.3, -1.0, 2.0, 0.5]))
    key = jax.random.key(8)
    full = jax.device_get(jsampler.sample(state, key, 5))
    every = jax.device_get(jsampler.sample(state, key, 5, mask=jnp.ones(5, bool)))
    for x, y in zip(jax.tree.leaves(full), jax.tree.leaves(every)):
        np.testing.assert_array_equal(x, y)
    mask = jnp.array([False, True, False, True, True])
    after, levels, replayed = jsampler.sample(state, key, 5, mask=mask)
    levels, replayed = np.asarray(levels), np.asarray(replayed)
    np.testing.assert_array_equal(levels[~np.asarray(mask)], -1)
    assert not replayed[~np.asarray(mask)].any()
    drawn = levels[np.asarray(mask)]
    assert ((drawn >= 0) & (drawn < N)).all()
    for x, y in zip(jax.tree.leaves(after), jax.tree.leaves(jsampler.mark_sampled(state, drawn))):
        np.testing.assert_array_equal(x, y)
    nothing = jsampler.sample(state, key, 5, mask=jnp.zeros(5, bool))[0]
    for x, y in zip(jax.tree.leaves(nothing), jax.tree.leaves(state)):
        np.testing.assert_array_equal(x, y)


def _chi_square(counts: np.ndarray, probs: np.ndarray) -> float:
    keep = probs > 0
    assert counts[~keep].sum() == 0  # never a level of probability 0
    expected = probs[keep] * counts.sum()
    return float(stats.chisquare(counts[keep], expected).pvalue)


@pytest.mark.parametrize(
    "name", ["defaults", "paper_rank_fixed_min_seen", "softmax_stale_softmax", "max_stale_eps_greedy"]
)
def test_jax_draws_follow_the_weights(x64: None, name: str) -> None:
    """χ² of 40,000 single draws from one fixed state: a replay follows weights(), an exploration is
    uniform over the unseen levels, with probability replay_probability()."""
    config = CONFIGS[name]
    ref = NumpyLevelSampler(range(N), seed=5, **config)
    ref.sample(10)
    ref.update_batch([0, 1, 2, 3, 5], [0.4, 1.5, -0.2, 0.4, 0.9])
    ref.sample(6)
    jsampler, state = LevelSampler.from_numpy(ref)
    keys = jax.random.split(jax.random.key(11), 40_000)
    _, levels, replayed = jax.vmap(lambda k: jsampler.sample(state, k, 1))(keys)
    levels, replayed = np.asarray(levels[:, 0]), np.asarray(replayed[:, 0])
    p_replay = ref.replay_probability()
    unseen = ~ref.seen
    probs = p_replay * ref.sample_weights() + (1 - p_replay) * unseen / unseen.sum()
    assert _chi_square(np.bincount(levels, minlength=N), probs) > 1e-3
    assert stats.binomtest(int(replayed.sum()), replayed.size, p_replay).pvalue > 1e-3
    np.testing.assert_array_equal(replayed, ref.seen[levels])


def test_float32_weights_within_1e_6_of_numpy() -> None:
    ref = NumpyLevelSampler(range(N), seed=2, temperature=0.3, staleness_transform="rank", min_seen_ratio=0.0)
    for _ in range(5):
        ref.sample(3)
        ref.update_batch(np.arange(N)[::2], np.linspace(-1, 3, 4))
    jsampler, state = LevelSampler.from_numpy(ref)
    assert state.scores.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(jsampler.weights(state)), ref.sample_weights(), rtol=0, atol=1e-6)


def _numpy_weights_with_exact_ties(ref: NumpyLevelSampler) -> np.ndarray:
    """``ref.sample_weights()`` with scores that differ by float64 rounding alone (<= 1e-12: p(1 − p) of
    rates equal in exact arithmetic, reached by other paths) made equal, so that they tie and break by
    position, as float32's exact ties do (numpy's own order between them is its float64 rounding)."""
    d = ref.state_dict()
    scores = np.array(d["scores"], dtype=np.float64)
    by_score = np.argsort(scores, kind="stable")
    for a, b in zip(by_score[:-1], by_score[1:]):
        if scores[b] - scores[a] <= 1e-12:
            scores[b] = scores[a]
    d["scores"] = scores
    tied = NumpyLevelSampler(ref.levels, **d["config"])
    tied.load_state_dict(d)
    return tied.sample_weights()


FUZZ_SIZES = (10, 200)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_float32_same_operations_as_numpy_at_10_and_200_levels(name: str) -> None:
    """The fuzz of every setting in float32 (JAX's default): fed the numpy draws and the same random
    updates, at 10 and 200 levels, the JAX state keeps numpy's order, draws and counters exactly, its
    scores within 1e-6 and its weights within 1e-6 of numpy's (exact ties broken by position, as numpy
    breaks them; for learnability, rates equal in exact arithmetic stay ties in float32)."""
    config = CONFIGS[name]
    for n in FUZZ_SIZES:
        rng = np.random.default_rng(n + sum(map(ord, name)))
        ref = NumpyLevelSampler(range(n), seed=3, **config)
        jsampler, state = LevelSampler.from_numpy(ref)
        assert state.scores.dtype == jnp.float32
        step = jax.jit(functools.partial(_mark_update_weights, jsampler))
        progress = 0.0
        for k in range(12):
            draws = ref.sample(6)
            levels = rng.integers(0, n, 16)
            scores = _scores(rng, config, 16)
            mask = rng.random(16) < 0.8
            ref.update_batch(levels[mask], scores[mask])
            state, weights = step(state, jnp.asarray(draws), jnp.asarray(levels), jnp.asarray(scores), mask)
            if "temperature_end" in config and k % 4 == 3:
                progress += 0.25
                ref.set_progress(progress)
                state = jsampler.set_progress(state, progress)
                weights = jsampler.weights(state)
            np.testing.assert_allclose(
                np.asarray(weights), _numpy_weights_with_exact_ties(ref), rtol=0, atol=1e-6, err_msg=f"{n}"
            )
            _assert_same_state(jsampler, state, ref, 1e-6)
        assert int(state.num_rejected) == 0
        # the checkpoint round trip is exact in float32: the state, and so the weights (the cached score
        # CDF is recomputed, to float32 rounding: XLA may fuse its sum differently inside a jit)
        back = jsampler.load(_save(jsampler, state))
        cache = {"score_cdf": state.score_cdf}
        assert jax.tree.all(jax.tree.map(jnp.array_equal, back._replace(**cache), state)), n
        np.testing.assert_allclose(np.asarray(back.score_cdf), np.asarray(state.score_cdf), rtol=1e-6)
        assert np.array_equal(np.asarray(jsampler.weights(back)), np.asarray(jsampler.weights(state)))


def _mark_update_weights(
    jsampler: LevelSampler, state: Any, draws: Any, levels: Any, scores: Any, mask: Any
) -> tuple[Any, Any]:
    state = jsampler.update(jsampler.mark_sampled(state, draws), levels, scores, mask)
    return state, jsampler.weights(state)


def _save(jsampler: LevelSampler, state: Any) -> Path:
    import tempfile

    path = Path(tempfile.mkdtemp()) / "sampler.npz"
    jsampler.save(state, path)
    return path


def test_learnability_ties_stay_ties_in_float32() -> None:
    """p = 1/2 reached in any order, p and 1 − p, and equal means of outcomes are bitwise-equal scores in
    float32, so rank breaks their ties by position as numpy does for exact ties."""
    sampler = LevelSampler(num_levels=6, strategy="learnability", success_rate_alpha=0.1)
    outcomes = [[1, 0], [0, 1], [1, 0, 0], [0, 1, 1], [0, 0, 1], [1, 1, 0, 0, 1, 0]]
    state = sampler.init()
    for level, seq in enumerate(outcomes):
        state = sampler.update(state, jnp.full(len(seq), level), jnp.asarray(seq, float))
    scores = np.asarray(state.scores)
    assert scores[0] == scores[1] == scores[5] == 0.25  # p = 1/2, in three orders
    assert scores[2] == scores[3] == scores[4]  # p = 1/3 and p = 2/3
    w = np.asarray(sampler.weights(state))
    assert w[0] > w[1] > w[5] > w[2] > w[3] > w[4]  # ties by position


def test_round_trips_through_the_numpy_state_and_checkpoint_files(x64: None, tmp_path: Path) -> None:
    ref = NumpyLevelSampler(range(10, 17), seed=0, strategy="learnability", min_seen_ratio=0.0)
    ref.sample(5)
    ref.update_batch([11, 12, 16, 11], [1.0, 0.0, 1.0, 1.0])
    ref.sample(4)
    jsampler, state = LevelSampler.from_numpy(ref)
    back = jsampler.to_numpy(state, levels=ref.levels, seed=0)
    a, b = ref.state_dict(), back.state_dict()
    for key in a:
        if key != "rng":  # the numpy generator is not part of the JAX state: `seed` starts a new one
            np.testing.assert_equal(a[key], b[key], err_msg=key)
    path = tmp_path / "sampler.npz"
    jsampler.save(state, path, levels=ref.levels)
    again = jsampler.load(path)
    assert jax.tree.all(jax.tree.map(jnp.array_equal, again, state))
    assert np.array_equal(NumpyLevelSampler.load(path).sample_weights(), ref.sample_weights())
    with pytest.raises(ValueError, match="different configuration"):
        LevelSampler(num_levels=7, strategy="learnability").load(path)


def test_invalid_updates_are_skipped_and_counted_or_raised_with_checkify(x64: None) -> None:
    """The declared difference: numpy raises ValueError (and stores nothing); array code skips the entry
    and counts it (on_invalid="skip"), or fails a checkify check (on_invalid="raise")."""
    levels, scores = jnp.array([0, 1, 9, 2]), jnp.array([0.5, jnp.nan, 0.3, -0.2])
    ref = NumpyLevelSampler(range(N), score_transform="power", seed=0)
    with pytest.raises(ValueError, match="finite"):
        ref.update_batch([0, 1], [0.5, np.nan])
    skip = LevelSampler(num_levels=N, score_transform="power")
    state = skip.update(skip.init(), levels, scores)
    assert int(state.num_rejected) == 3 and int(state.num_seen) == 1 and float(state.scores[0]) == 0.5
    ref.update(0, 0.5)
    assert np.array_equal(np.asarray(skip.weights(state)), ref.sample_weights())
    annealed = LevelSampler(num_levels=N, temperature_end=0.1)
    state1 = annealed.set_progress(annealed.init(), 1.5)  # numpy: ValueError; here skipped and counted
    assert float(state1.progress) == 0.0 and int(state1.num_rejected) == 1
    # masked-out entries are neither applied nor counted
    state = skip.update(skip.init(), levels, scores, jnp.array([True, False, False, False]))
    assert int(state.num_rejected) == 0 and int(state.num_seen) == 1
    strict = LevelSampler(num_levels=N, score_transform="power", on_invalid="raise")
    err, _ = checkify.checkify(strict.update)(strict.init(), levels, scores)
    with pytest.raises(checkify.JaxRuntimeError, match="invalid"):
        err.throw()
    err, _ = checkify.checkify(strict.update)(strict.init(), levels[:1], scores[:1])
    assert err.get() is None


BAD_CALLS: dict[str, tuple[type[Exception], str, Any]] = {
    # name: (error, what the message names, the call on (sampler of 4 levels, its state))
    "float level ids": (
        TypeError,
        "levels must be integer",
        lambda s, st: s.update(st, jnp.array([3.7]), jnp.array([1.0])),
    ),
    "scores shorter than levels": (
        ValueError,
        r"scores must have shape \(2,\)",
        lambda s, st: s.update(st, jnp.array([1, 2]), jnp.array([1.0])),
    ),
    "scores longer than levels": (
        ValueError,
        r"scores must have shape \(1,\)",
        lambda s, st: s.update(st, jnp.array([1]), jnp.array([1.0, 2.0])),
    ),
    "mask longer than levels": (
        ValueError,
        r"mask must have shape \(1,\)",
        lambda s, st: s.update(st, jnp.array([1]), jnp.array([1.0]), jnp.ones(3, bool)),
    ),
    "mask shorter than levels": (
        ValueError,
        r"mask must have shape \(2,\)",
        lambda s, st: s.update(st, jnp.array([1, 2]), jnp.array([1.0, 2.0]), jnp.ones(1, bool)),
    ),
    "float update mask": (
        TypeError,
        "mask must be booleans",
        lambda s, st: s.update(st, jnp.array([1]), jnp.array([1.0]), jnp.array([1.0])),
    ),
    "float mark_sampled ids": (
        TypeError,
        "levels must be integer",
        lambda s, st: s.mark_sampled(st, jnp.array([1.5])),
    ),
    "a (2, 2) sample mask for n = 4": (
        ValueError,
        r"mask must have shape \(4,\)",
        lambda s, st: s.sample(st, jax.random.key(0), 4, mask=jnp.ones((2, 2), bool)),
    ),
    "float sample mask": (
        TypeError,
        "mask must be booleans",
        lambda s, st: s.sample(st, jax.random.key(0), 2, mask=jnp.ones(2)),
    ),
    "sample n = -1": (ValueError, "n must be >= 0", lambda s, st: s.sample(st, jax.random.key(0), -1)),
    "sample n = 2.0": (TypeError, "n must be an int", lambda s, st: s.sample(st, jax.random.key(0), 2.0)),
    "a state of another size (sample)": (
        ValueError,
        r"state.scores has shape \(5,\), this sampler \(num_levels=4\)",
        lambda s, st: s.sample(LevelSampler(num_levels=5).init(), jax.random.key(0), 2),
    ),
    "a state of another size (update)": (
        ValueError,
        "num_levels=4",
        lambda s, st: s.update(LevelSampler(num_levels=5).init(), jnp.array([1]), jnp.array([1.0])),
    ),
    "a state of another size (weights)": (
        ValueError,
        "num_levels=4",
        lambda s, st: s.weights(LevelSampler(num_levels=5).init()),
    ),
    "a state of another size (mark_sampled)": (
        ValueError,
        "num_levels=4",
        lambda s, st: s.mark_sampled(LevelSampler(num_levels=5).init(), jnp.array([1])),
    ),
}


@pytest.mark.parametrize("case", list(BAD_CALLS))
def test_bad_shapes_and_dtypes_are_refused_at_trace_time_inside_and_outside_jit(case: str) -> None:
    """#43: float ids, scores/mask of another length, a mask of another shape, float masks, n < 0 and a
    state of another sampler raise TypeError/ValueError naming the argument, outside jit and inside it
    (shapes and dtypes are static: the check costs nothing at run time)."""
    error, message, call = BAD_CALLS[case]
    sampler = LevelSampler(num_levels=4)
    state = sampler.init()
    with pytest.raises(error, match=message):
        call(sampler, state)
    with pytest.raises(error, match=message):
        jax.jit(lambda st: call(sampler, st))(state)


def test_the_configuration_is_checked_by_the_numpy_rules() -> None:
    with pytest.raises(ValueError, match="staleness_coef must lie in"):
        LevelSampler(num_levels=3, staleness_coef=1.5)
    with pytest.raises(ValueError, match="a name, not a callable"):
        LevelSampler(num_levels=3, strategy=lambda ep: 0.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="num_levels must be >= 1"):
        LevelSampler(num_levels=0)
    with pytest.raises(ValueError, match="on_invalid"):
        LevelSampler(num_levels=3, on_invalid="ignore")
    assert hash(LevelSampler(num_levels=3)) == hash(LevelSampler(num_levels=3, temperature=1))


# ---------------------------------------------------------------------------------------------- LevelBuffer
BUFFER_CONFIGS: dict[str, dict[str, Any]] = {
    "rank_duplicates": {"capacity": 5, "duplicate_check": True, "temperature": 0.3},
    "topk_fill": {
        "capacity": 5,
        "score_transform": "topk",
        "topk": 2,
        "staleness_coef": 0.3,
        "min_fill_ratio": 0.5,
    },
    "max_no_staleness": {"capacity": 4, "score_transform": "max", "staleness_coef": 0.0},
}


def _assert_same_buffer(jbuffer: LevelBuffer, state: Any, ref: Any) -> None:
    mine, theirs = jbuffer.state_dict(state), ref.state_dict()
    assert mine["levels"] == theirs["levels"] and mine["count"] == theirs["count"]
    assert mine["extras"] == theirs["extras"]
    np.testing.assert_array_equal(mine["timestamps"], theirs["timestamps"])
    np.testing.assert_allclose(mine["scores"], theirs["scores"], rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", list(BUFFER_CONFIGS))
def test_buffer_fed_the_numpy_operations_keeps_the_same_contents_indices_and_timestamps(
    x64: None, name: str
) -> None:
    from plr_gym import LevelBuffer as NumpyLevelBuffer

    config = BUFFER_CONFIGS[name]
    rng = np.random.default_rng(sum(map(ord, name)))
    ref = NumpyLevelBuffer(seed=3, **config)
    jbuffer = LevelBuffer(**config)
    state = jbuffer.init(jnp.zeros((), int), {"max_return": 0.0})
    rejected = replays = 0
    for _ in range(12):
        levels = rng.integers(0, 9, M)  # repeats: duplicates and re-inserts
        scores = rng.integers(0, 4, M) / 2.0 if name.startswith("max") else rng.random(M)
        extras = rng.random(M)
        want = ref.insert_batch(levels.tolist(), scores, [{"max_return": float(e)} for e in extras])
        state, got = jbuffer.insert_batch(
            state, jnp.asarray(levels), jnp.asarray(scores), {"max_return": jnp.asarray(extras)}
        )
        np.testing.assert_array_equal(np.asarray(got), want)
        rejected += int((want == -1).sum())
        np.testing.assert_allclose(
            np.asarray(jbuffer.weights(state))[: ref.size], ref.sample_weights(), rtol=0, atol=1e-12
        )
        if ref.sample_replay_decision():
            indices, _ = ref.sample_replay_levels(M)  # the numpy draws, fed to the JAX state
            replays += 1
            state = jbuffer.mark_replayed(state, jnp.asarray(indices))
            new_scores = rng.random(M)
            ref.update_batch(indices.tolist(), new_scores)
            state = jbuffer.update_batch(state, jnp.asarray(indices), jnp.asarray(new_scores))
        _assert_same_buffer(jbuffer, state, ref)
    assert ref.size == config["capacity"] and int(state.num_rejected) == 0
    assert rejected > 0 and replays > 3  # evictions, rejections and replays were all exercised


def test_buffer_draws_follow_the_weights_and_round_trip_through_numpy(x64: None, tmp_path: Path) -> None:
    from plr_gym import LevelBuffer as NumpyLevelBuffer

    ref = NumpyLevelBuffer(capacity=6, seed=0, staleness_coef=0.3)
    ref.insert_batch([np.array([i, i + 1]) for i in range(6)], [0.3, 0.9, 0.1, 0.5, 0.5, 0.2])
    ref.sample_replay_levels(4)
    jbuffer, state = LevelBuffer.from_numpy(ref)
    keys = jax.random.split(jax.random.key(7), 40_000)
    _, indices, levels = jax.vmap(lambda k: jbuffer.sample_replay_level(state, k))(keys)
    assert _chi_square(np.bincount(np.asarray(indices), minlength=6), ref.sample_weights()) > 1e-3
    np.testing.assert_array_equal(np.asarray(levels)[:, 0], np.asarray(indices))  # level i is [i, i + 1]
    back = jbuffer.to_numpy(state)
    assert [lv.tolist() for lv in back.levels] == [lv.tolist() for lv in ref.levels]
    np.testing.assert_array_equal(back.state_dict()["timestamps"], ref.state_dict()["timestamps"])
    path = tmp_path / "buffer.npz"
    jbuffer.save(state, path)
    again = jbuffer.load(path, level=jnp.zeros(2, int))
    for x, y in zip(jax.tree.leaves(again), jax.tree.leaves(state)):
        np.testing.assert_array_equal(x, y)


def test_buffer_declared_differences_are_options(x64: None) -> None:
    """An empty buffer never replays (index -1, state unchanged); JaxUED's clock and top-k softmax are
    options; a NaN score is skipped and counted."""
    buffer = LevelBuffer(capacity=3, min_fill_ratio=0.0)
    empty = buffer.init(jnp.zeros((), int))
    assert not bool(buffer.sample_replay_decision(empty, jax.random.key(0)))
    after, index, _ = buffer.sample_replay_level(empty, jax.random.key(0))
    assert int(index) == -1 and int(after.count) == 0 and float(buffer.weights(empty).sum()) == 0.0
    levels, scores = jnp.array([5, 6, 5, 7, 8]), jnp.array([2.0, 1.0, 3.0, 0.5, jnp.nan])
    for clock, count, stamps in (("plr_gym", 3, [1, 2, 3]), ("jaxued", 4, [3, 2, 4])):
        b = LevelBuffer(capacity=3, duplicate_check=True, clock=clock)
        s, idx = b.insert_batch(b.init(jnp.zeros((), int)), levels, scores)
        assert idx.tolist() == [0, 1, 0, 2, -1] and int(s.num_rejected) == 1
        assert int(s.count) == count and s.timestamps.tolist() == stamps, clock
    topk = {"capacity": 3, "score_transform": "topk", "topk": 2, "staleness_coef": 0.0}
    s, _ = LevelBuffer(**topk).insert_batch(
        LevelBuffer(**topk).init(jnp.zeros((), int)), levels[:2], scores[:2]
    )
    assert LevelBuffer(**topk).weights(s).tolist() == [0.5, 0.5, 0.0]
    soft = LevelBuffer(**topk, topk_softmax=True).weights(s)
    np.testing.assert_allclose(np.asarray(soft), [np.e / (np.e + 1), 1 / (np.e + 1), 0.0], rtol=1e-12)


# ---------------------------------------------------------------------------------------------- scorers
class _Recorder:
    def __init__(self) -> None:
        self.levels: list[Any] = []
        self.scores: list[float] = []

    def update_batch(self, levels: Any, scores: Any) -> None:
        self.levels += list(levels)
        self.scores += list(np.asarray(scores))


SCORER_CASES = [
    ("value_l1", "stitch"),
    ("value_l1", "commit"),
    ("positive_value_loss", "commit"),
    ("max_mc", "stitch"),
    ("max_mc", "commit"),
    ("learnability", "stitch"),
]


@pytest.mark.parametrize(("strategy", "partial"), SCORER_CASES)
def test_jax_scorer_equals_the_numpy_episode_scorer_on_the_same_rollouts(
    x64: None, strategy: str, partial: str
) -> None:
    from plr_gym.jax.scoring import EpisodeScorer
    from plr_gym.scoring import EpisodeScorer as NumpyEpisodeScorer

    n_steps, n_envs, n_levels = 9, 3, 4
    rng = np.random.default_rng(len(strategy) + len(partial))
    recorder = _Recorder()
    ref = NumpyEpisodeScorer(recorder, n_envs, strategy=strategy, partial_episodes=partial)
    scorer = EpisodeScorer(num_levels=n_levels, strategy=strategy, partial_episodes=partial)
    state = scorer.init(n_envs)
    current = rng.integers(0, n_levels, n_envs)
    for rollout in range(4):
        starts = rng.random((n_steps, n_envs)) < 0.25
        starts[0] |= rollout == 0 and rng.random() < 0.7  # some episodes' starts are never observed
        if rollout == 2:
            starts[0, 0] = True  # an env reset under an open episode: it never completes
        levels = np.empty((n_steps, n_envs), np.int64)
        for t in range(n_steps):
            current = np.where(starts[t], rng.integers(0, n_levels, n_envs), current)
            levels[t] = current
        dones = rng.random(n_envs) < 0.3
        rewards = rng.integers(0, 2, (n_steps, n_envs)) * rng.random((n_steps, n_envs))
        values, advantages = rng.normal(size=(n_steps, n_envs)), rng.normal(size=(n_steps, n_envs))
        successes = (rng.random((n_steps, n_envs)) < 0.5).astype(float)
        arrays = {
            "levels": levels,
            "episode_starts": starts,
            "dones": dones,
            "rewards": rewards,
            "values": values,
            "advantages": advantages,
            "successes": successes,
            "last_values": rng.normal(size=n_envs),
        }
        before = len(recorder.scores)
        ref.process_rollout(**arrays)
        state, out_levels, scores, mask = scorer.process_rollout(
            state, **{k: jnp.asarray(v) for k, v in arrays.items()}
        )
        mask = np.asarray(mask)
        assert np.asarray(out_levels)[mask].tolist() == recorder.levels[before:]
        np.testing.assert_allclose(np.asarray(scores)[mask], recorder.scores[before:], rtol=0, atol=1e-12)
    assert int(state.num_scored) == ref.num_scored > 6 and int(state.num_dropped) == ref.num_dropped
    assert int(state.active.sum()) == ref.num_open_episodes
    if strategy == "max_mc":
        want = np.full(n_levels, -np.inf)
        for level, best in ref.max_returns.items():
            want[level] = best
        np.testing.assert_allclose(np.asarray(state.max_returns), want, rtol=0, atol=1e-12)


# ------------------------------------------------------------------------------------------ JaxUED adapter
def test_jaxued_adapter_keeps_jaxueds_dict_and_calls_inside_jit_and_equals_the_buffer(x64: None) -> None:
    from plr_gym.jax.jaxued import LevelSampler as JaxUEDLevelSampler

    # maze_plr.py passes both keys; "rank" reads the temperature
    level_sampler = JaxUEDLevelSampler(
        4, staleness_coeff=0.3, prioritization_params={"temperature": 0.5, "k": 4}
    )
    pholder = {"wall_map": jnp.zeros((3, 3), bool), "goal_pos": jnp.zeros(2, int)}
    sampler = level_sampler.initialize(pholder, {"max_return": -jnp.inf})
    assert sorted(sampler) == ["episode_count", "levels", "levels_extra", "scores", "size", "timestamps"]
    assert sampler["levels"]["wall_map"].shape == (4, 3, 3)

    def levels_of(seed: Any) -> dict[str, Any]:
        walls = jax.random.bernoulli(jax.random.key(seed), 0.5, (3, 3, 3))
        return {"wall_map": walls, "goal_pos": jax.random.randint(jax.random.key(seed + 1), (3, 2), 0, 3)}

    @jax.jit
    def train_step(sampler: dict[str, Any], rng: Any) -> tuple[dict[str, Any], Any]:
        # maze_plr.py's three branches: new levels, replay + update, mutate (insert children)
        rng_new, rng_replay, rng_score = jax.random.split(rng, 3)
        new = levels_of(jax.random.randint(rng_new, (), 0, 1000))
        scores = jax.random.uniform(rng_score, (3,))
        sampler, _ = level_sampler.insert_batch(sampler, new, scores, {"max_return": scores})
        sampler, (idx, levels) = level_sampler.sample_replay_levels(sampler, rng_replay, 2)
        old = level_sampler.get_levels_extra(sampler, idx)["max_return"]
        sampler = level_sampler.update_batch(sampler, idx, scores[:2], {"max_return": jnp.maximum(old, 0.5)})
        return sampler, levels

    for i in range(5):
        sampler, levels = train_step(sampler, jax.random.key(i))
    assert levels["wall_map"].shape == (2, 3, 3) and int(sampler["size"]) == 4
    # the dict is the plr_gym buffer's state: same weights, same numpy twin
    state = level_sampler._state(sampler)
    np.testing.assert_array_equal(level_sampler.level_weights(sampler), level_sampler.buffer.weights(state))
    twin = level_sampler.buffer.to_numpy(state)
    np.testing.assert_allclose(
        np.asarray(level_sampler.level_weights(sampler)), twin.sample_weights(), atol=1e-12
    )
    assert int(level_sampler.find(sampler, level_sampler.get_levels(sampler, 2))) == 2


def test_jaxued_adapter_options_reproduce_jaxued_0_0_1(x64: None) -> None:
    """Uniform top-k by default, JaxUED 0.0.1's softmax with topk_softmax=True; JaxUED's clock (ticks on
    rejected and duplicate inserts) by default, plr_gym's with clock="plr_gym"; no replay from an empty
    buffer."""
    from plr_gym.jax.jaxued import LevelSampler as JaxUEDLevelSampler

    assert JaxUEDLevelSampler(3).buffer.clock == "jaxued"  # the drop-in keeps JaxUED's curriculum
    levels, scores = jnp.array([1, 2, 1, 3, 4]), jnp.array([2.0, 1.0, 3.0, 0.5, 0.1])
    for options, weights, count in (
        ({}, [0.5, 0.5, 0.0], 5),
        ({"clock": "plr_gym"}, [0.5, 0.5, 0.0], 3),
        (
            {"topk_softmax": True},
            [np.e**3 / (np.e**3 + np.e), np.e / (np.e**3 + np.e), 0.0],
            5,
        ),
    ):
        ls = JaxUEDLevelSampler(3, 0.95, 0.0, 1.0, "topk", {"k": 2}, duplicate_check=True, **options)
        sampler, idx = ls.insert_batch(ls.initialize(jnp.zeros((), int)), levels, scores)
        assert idx.tolist() == [0, 1, 0, 2, -1]  # 4 (score 0.1) does not beat the weakest (0.5)
        np.testing.assert_allclose(np.asarray(ls.score_weights(sampler)), weights, rtol=1e-12)
        assert int(sampler["episode_count"]) == count
    ls = JaxUEDLevelSampler(3, replay_prob=1.0, minimum_fill_ratio=0.0)
    empty = ls.initialize(jnp.zeros((), int))
    assert not bool(ls.sample_replay_decision(empty, jax.random.key(0)))
    after, (idx, _) = ls.sample_replay_level(empty, jax.random.key(0))
    assert int(idx) == -1 and int(after["episode_count"]) == 0


def test_from_numpy_refuses_level_replays_sampler_options() -> None:
    """The numpy sampler's ``unseen_rank``/``power_offset`` (level-replay's behaviours) have no JAX
    counterpart: ``from_numpy`` takes their defaults and refuses other values by name."""
    levels = np.arange(5)
    LevelSampler.from_numpy(NumpyLevelSampler(levels, seed=0))  # defaults: accepted
    for option in ({"unseen_rank": "zero"}, {"power_offset": 1e-3, "score_transform": "power"}):
        name = next(iter(option))
        with pytest.raises(ValueError, match=f"has {name}=.*does not implement"):
            LevelSampler.from_numpy(NumpyLevelSampler(levels, seed=0, staleness_coef=0.0, **option))
