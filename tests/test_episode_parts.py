"""Episodes scored in parts (plr_gym.episode_parts): merged aggregates == the whole episode's score."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from plr_gym._levels import load_values, save_values
from plr_gym.episode_parts import EpisodeJoiner, EpisodePart, make_part, part_kind
from plr_gym.scoring import EpisodeData, strategy_spec

GAMMA = 0.9


def custom_score(ep: EpisodeData) -> float:
    """A score that is no mean of per-step terms: the advantage's spread times the discounted return."""
    assert ep.rewards is not None and ep.advantages is not None
    discounts = GAMMA ** np.arange(len(ep.rewards))
    return float(np.std(ep.advantages) * np.sum(discounts * ep.rewards))


def episode(rng: np.random.Generator, length: int, terminated: bool) -> dict[str, np.ndarray]:
    values = rng.normal(size=length + 1)
    if terminated:
        values[-1] = 0.0
    return {
        "rewards": rng.normal(size=length),
        "values": values[:-1],
        "next_values": values[1:],
        "advantages": rng.normal(size=length),
    }


def data(arrays: dict[str, np.ndarray], a: int, b: int, max_return: float | None = None) -> EpisodeData:
    return EpisodeData(
        rewards=arrays["rewards"][a:b],
        values=arrays["values"][a:b],
        advantages=arrays["advantages"][a:b],
        next_values=arrays["next_values"][a:b],
        next_value=float(arrays["next_values"][b - 1]),
        gamma=GAMMA,
        max_return=max_return,
    )


def cut(rng: np.random.Generator, length: int) -> list[tuple[int, int]]:
    """Random step ranges covering [0, length)."""
    k = int(rng.integers(0, min(4, length - 1) + 1))
    bounds = [0, *sorted(rng.choice(np.arange(1, length), size=k, replace=False).tolist()), length]
    return list(zip(bounds[:-1], bounds[1:]))


STRATEGIES: list[Any] = [
    "value_l1",
    "positive_value_loss",
    "gae",
    "one_step_td_error",
    "max_mc",
    custom_score,
]


@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: s if isinstance(s, str) else "callable")
def test_merged_parts_score_the_whole_episode(strategy: Any) -> None:
    """Episodes cut at random points, their parts sent in a shuffled order interleaved with other episodes'
    parts: each episode is scored once, when its last part arrives, with the strategy's score of the whole
    episode computed at once (max_mc: against the best return on the level so far, this episode included)."""
    info = strategy_spec(strategy)
    rng = np.random.default_rng(0)
    joiner = EpisodeJoiner(info)
    episodes = {}
    parts: list[EpisodePart] = []
    for e in range(40):
        length = int(rng.integers(1, 30))
        arrays = episode(rng, length, terminated=bool(e % 2))
        level = int(rng.integers(0, 5))  # several episodes per level: max_mc's best return matters
        episodes[f"ep{e}"] = (level, arrays, length)
        for a, b in cut(rng, length):
            parts.append(make_part(info, f"ep{e}", a, level, b == length, data(arrays, a, b)))
    order = rng.permutation(len(parts))
    got: list[tuple[str, int, float]] = []
    for batch in np.array_split(order, 7):
        result = joiner.add([parts[i] for i in batch], now=0.0)
        assert not result.refused and result.unscored == 0
        got.extend(zip(result.episodes, result.levels, result.scores))
    assert sorted(e for e, _, _ in got) == sorted(episodes)  # every episode exactly once
    assert joiner.num_pending == 0 and joiner.episodes_joined == 40 and joiner.parts_received == len(parts)
    best: dict[int, float] = {}
    for name, level, score in got:  # in the order they were completed
        _, arrays, length = episodes[name]
        max_return = None
        if info.name == "max_mc":
            max_return = best[level] = max(best.get(level, -math.inf), float(arrays["rewards"].sum()))
        assert info.score_fn is not None
        want = info.score_fn(data(arrays, 0, length, max_return))
        assert score == pytest.approx(want, rel=1e-12, abs=1e-12), name


def test_part_kinds() -> None:
    assert [part_kind(strategy_spec(s)) for s in STRATEGIES] == ["mean"] * 4 + ["max_mc", "steps"]
    for name in ("learnability", "random", "sequential", "policy_entropy"):
        with pytest.raises(ValueError, match="no partial aggregates"):
            part_kind(strategy_spec(name))


def test_a_refused_part_changes_nothing() -> None:
    info = strategy_spec("value_l1")
    joiner = EpisodeJoiner(info)
    adv = np.array([1.0, 2.0, 3.0, 4.0])
    first = make_part(info, "a", 0, 3, False, EpisodeData(advantages=adv[:2]))
    assert joiner.add([first]).scores == []
    bad = [
        first,  # sent twice: overlaps the part held
        make_part(info, "a", 1, 3, False, EpisodeData(advantages=adv[1:3])),  # overlaps
        make_part(info, "a", 2, 4, True, EpisodeData(advantages=adv[2:])),  # another level
        EpisodePart("a", 2, 4, 3, True, (float("nan"),)),  # not finite
        EpisodePart("a", 2, 4, 3, True, (1.0, 2.0)),  # the wrong aggregate
        EpisodePart("a", 3, 2, 3, True, (1.0,)),  # empty range
        ("a", 2, 4),  # not a part
    ]
    result = joiner.add(bad)
    assert [k for k, _ in result.refused] == list(range(len(bad)))
    assert [type(e) for _, e in result.refused][-1] is TypeError
    assert "overlap" in str(result.refused[0][1]) and "level" in str(result.refused[2][1])
    assert joiner.parts_pending == 1 and joiner.parts_received == 1
    done = joiner.add([make_part(info, "a", 2, 3, True, EpisodeData(advantages=adv[2:]))])
    assert done.scores == [pytest.approx(2.5)]
    # a terminal part ends the episode: a part beyond it, or a second terminal part, is refused
    joiner.add([make_part(info, "b", 2, 1, True, EpisodeData(advantages=adv[2:]))])
    beyond = joiner.add([make_part(info, "b", 4, 1, False, EpisodeData(advantages=adv[:1]))])
    twice = joiner.add([make_part(info, "b", 0, 1, True, EpisodeData(advantages=adv[:1]))])
    assert "beyond" in str(beyond.refused[0][1]) and "terminal" in str(twice.refused[0][1])


def test_episodes_whose_parts_stop_arriving_expire_and_are_counted() -> None:
    info = strategy_spec("gae")
    joiner = EpisodeJoiner(info, timeout=10.0)
    adv = np.ones(3)
    joiner.add([make_part(info, "late", 1, 0, True, EpisodeData(advantages=adv[1:]))], now=0.0)  # no start
    joiner.add([make_part(info, "open", 0, 1, False, EpisodeData(advantages=adv))], now=5.0)
    result = joiner.add([make_part(info, "x", 0, 2, True, EpisodeData(advantages=adv))], now=10.5)
    assert result.levels == [2] and result.unscored == 1  # "late" waited 10.5 s > 10 s
    assert joiner.num_pending == 1 and joiner.expire(now=15.0) == 0 and joiner.expire(now=15.5) == 1
    assert joiner.parts_unscored == 2 and joiner.num_pending == 0
    with pytest.raises(ValueError, match="timeout"):
        EpisodeJoiner(info, timeout=-1)


@pytest.mark.parametrize("strategy", ["max_mc", custom_score], ids=["max_mc", "callable"])
def test_state_round_trips_through_a_values_file(tmp_path: Any, strategy: Any) -> None:
    """The pending parts (ages included), max_mc's best returns and the counters survive save/load: an
    episode begun before the save completes after the load with the same score."""
    info = strategy_spec(strategy)
    rng = np.random.default_rng(1)
    arrays = episode(rng, 6, terminated=True)
    old = episode(rng, 3, terminated=True)
    joiner = EpisodeJoiner(info, timeout=100.0)
    joiner.add([make_part(info, "old", 0, 4, True, data(old, 0, 3))], now=0.0)
    joiner.add([make_part(info, "e", 0, 4, False, data(arrays, 0, 4))], now=50.0)
    save_values(tmp_path / "j.npz", joiner.state_dict(now=60.0))
    restored = EpisodeJoiner(info, timeout=100.0)
    restored.load_state_dict(load_values(tmp_path / "j.npz"), now=1000.0)
    assert restored.parts_pending == 1 and restored.episodes_joined == 1 and restored.parts_received == 2
    assert restored.expire(now=1089.0) == 0 and restored.expire(now=1090.5) == 1  # aged 10 s at the save
    restored.load_state_dict(load_values(tmp_path / "j.npz"), now=0.0)
    last = make_part(info, "e", 4, 4, True, data(arrays, 4, 6))
    want = joiner.add([last], now=60.0).scores
    assert restored.add([last], now=0.0).scores == pytest.approx(want, rel=1e-12)
    if info.name == "max_mc":
        best = max(float(old["rewards"].sum()), float(arrays["rewards"].sum()))
        assert want == [pytest.approx(best - arrays["values"].mean())]
    with pytest.raises(ValueError, match="parts"):
        EpisodeJoiner(strategy_spec("value_l1")).load_state_dict(joiner.state_dict())


def test_a_part_whose_episode_id_is_no_str_is_refused() -> None:
    """Episode ids are strings (``make_part`` makes them so; the state stores them as such): a part built by
    hand with an int id is refused, not held under a key that a save/load turns into another one."""
    info = strategy_spec("value_l1")
    joiner = EpisodeJoiner(info)
    result = joiner.add([EpisodePart(5, 0, 2, 1, False, (3.0,))])  # type: ignore[arg-type]
    assert [k for k, _ in result.refused] == [0] and isinstance(result.refused[0][1], TypeError)
    assert "episode" in str(result.refused[0][1]) and joiner.parts_received == 0 and joiner.num_pending == 0


def test_a_part_whose_episode_the_strategy_cannot_score_is_refused_and_changes_nothing() -> None:
    """A callable strategy that raises on one episode: the part that completed it is refused (returned in
    ``refused``, the episode still waits with its other parts), and the call goes on with the other parts
    instead of dropping them unreported."""

    def picky(ep: EpisodeData) -> float:
        assert ep.advantages is not None
        if len(ep.advantages) < 3:
            raise ValueError("picky: needs 3 steps")
        return float(ep.advantages.sum())

    info = strategy_spec(picky)
    joiner = EpisodeJoiner(info)
    adv = np.array([1.0, 2.0, 3.0])
    parts = [
        make_part(info, "short", 0, 1, False, EpisodeData(advantages=adv[:1])),
        make_part(info, "short", 1, 1, True, EpisodeData(advantages=adv[1:2])),  # completes: picky raises
        make_part(info, "long", 0, 2, True, EpisodeData(advantages=adv)),
    ]
    before = joiner.state_dict(now=0.0)
    result = joiner.add(parts, now=0.0)
    assert [k for k, _ in result.refused] == [1] and "3 steps" in str(result.refused[0][1])
    assert result.episodes == ["long"] and result.scores == [6.0]
    assert joiner.parts_received == 2 and joiner.episodes_joined == 1 and joiner.parts_pending == 1
    assert before["pending"] == [] and joiner.state_dict(now=0.0)["pending"][0]["episode"] == "short"
