"""Scores of episodes whose steps were scored in parts, by different processes: partial aggregates that merge.

A data-parallel learner setup (RLlib with ``num_learners > 1``) hands each learner a share of a batch's
episode chunks; the chunks of one episode (and even the pieces of one chunk) may reach different learners,
in different training batches. Each learner turns the steps it holds into an :class:`EpisodePart`: the
episode's id, the part's step range ``[start, stop)``, the level, whether the part ends the episode, and
the strategy's *partial aggregate* of those steps. An :class:`EpisodeJoiner` (in the level source's actor,
or in-process for a local source) collects the parts by episode id and scores the episode once, when its
parts cover every step ``0 .. length − 1`` (``length`` is the terminal part's ``stop``). The merged score
equals the strategy's score of the whole episode computed at once (up to float rounding).

The partial aggregate of each strategy the RLlib integration scores on the learner
(:func:`part_kind`):

- ``"mean"`` — ``value_l1``, ``positive_value_loss``, ``gae``, ``one_step_td_error``: the score is a mean
  of per-step terms (``|A_t|``, ``max(A_t, 0)``, ``A_t``, ``|r_t + γ V(s_{t+1}) − V(s_t)|``). A part
  carries ``(Σ terms,)``, the strategy's own score of the part times its length; the count is the part's
  length. Merged: ``Σ sums / Σ lengths``.
- ``"max_mc"`` — ``mean_t (R_max − V(s_t)) = R_max − mean_t V(s_t)``: a part carries
  ``(Σ V(s_t), Σ r_t)``. Merged: the episode's return is ``Σ Σ r_t``; the level's best return ``R_max``
  is the maximum over every return joined on that level (kept by the joiner, in its checkpoint);
  score ``R_max − Σ Σ V / length``.
- ``"steps"`` — a callable ``fn(EpisodeData) -> float`` (nothing is known about how it aggregates): a part
  carries its steps (rewards, values, advantages, bootstrap values); merged: the arrays concatenated in
  step order and ``fn`` called once on the whole episode.

Outcome strategies (``learnability``: one outcome per episode, reported whole by the env that played it)
and the baselines without scores (``random``, ``sequential``) have no parts.

Example:
    >>> import numpy as np
    >>> from plr_gym.scoring import EpisodeData, strategy_spec, value_l1
    >>> info = strategy_spec("value_l1")
    >>> adv = np.array([1.0, -2.0, 3.0, -4.0, 5.0])
    >>> first = make_part(info, "ep", 0, 7, False, EpisodeData(advantages=adv[:2]))
    >>> last = make_part(info, "ep", 2, 7, True, EpisodeData(advantages=adv[2:]))
    >>> joiner = EpisodeJoiner(info)
    >>> joiner.add([last]).scores                  # parts may arrive in any order
    []
    >>> done = joiner.add([first])
    >>> done.levels, done.scores, value_l1(EpisodeData(advantages=adv))
    ([7], [3.0], 3.0)
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from plr_gym._levels import level_key
from plr_gym.scoring import STRATEGY_SPECS, EpisodeData, Strategy

__all__ = ["EpisodeJoiner", "EpisodePart", "JoinResult", "make_part", "part_kind"]

#: Built-in strategies whose score is the mean of a per-step term.
MEAN_STRATEGIES = ("value_l1", "positive_value_loss", "gae", "one_step_td_error")
#: The per-step arrays a ``"steps"`` part carries (``None`` where the learner has none).
STEP_FIELDS = ("rewards", "values", "advantages", "next_values")


def part_kind(info: Strategy) -> str:
    """``"mean"``, ``"max_mc"`` or ``"steps"``: how a strategy's score is split into parts (see module).

    :raises ValueError: for strategies whose episodes are never scored in parts (outcomes, policy-based
        ones, and the baselines without scores).
    """
    if not info.uses_scores or info.outcome or info.needs_policy:
        raise ValueError(
            f"strategy {info.name!r} has no partial aggregates: outcomes are reported whole by the env, "
            "policy-based strategies and baselines without scores are not scored by parts"
        )
    builtin = STRATEGY_SPECS.get(info.name)
    if builtin is not None and builtin.score_fn is info.score_fn:
        if info.name in MEAN_STRATEGIES:
            return "mean"
        if info.name == "max_mc":
            return "max_mc"
    return "steps"


@dataclass(frozen=True)
class EpisodePart:
    """The steps ``[start, stop)`` of episode ``episode``, scored by one process.

    :param episode: the episode's id (RLlib's ``episode.id_``), the same for all its parts.
    :param start: the part's first step, counted from the episode's first step (``0``).
    :param stop: one past its last step.
    :param level: the episode's level.
    :param terminal: the part ends the episode (terminated or truncated): ``stop`` is the episode's length.
    :param stats: the strategy's partial aggregate (see the module docstring).
    :param steps: for a ``"steps"`` strategy, the part's arrays (:data:`STEP_FIELDS`, each of shape
        ``(stop − start,)``).
    :param gamma: the discount the terms were computed with (passed to a callable strategy).
    """

    episode: str
    start: int
    stop: int
    level: Any
    terminal: bool
    stats: tuple[float, ...]
    steps: dict[str, npt.NDArray[np.float64]] | None = None
    gamma: float = 0.99


def make_part(
    info: Strategy, episode: str, start: int, level: Any, terminal: bool, data: EpisodeData
) -> EpisodePart:
    """The part of episode ``episode`` made of the steps in ``data`` (which start at step ``start``).

    ``data`` holds the part's steps only: rewards, values, advantages and the bootstrap value of each step
    (``next_values``, set for ``one_step_td_error`` and callables), as the strategy needs them.
    """
    kind = part_kind(info)
    if kind == "mean":
        n = _length(data)
        fn = info.score_fn
        assert fn is not None
        stats: tuple[float, ...] = (float(fn(data)) * n,)
    elif kind == "max_mc":
        if data.values is None or data.rewards is None:
            raise ValueError("make_part: strategy 'max_mc' needs EpisodeData.values and rewards")
        n = _length(data)
        stats = (float(np.sum(data.values, dtype=np.float64)), float(np.sum(data.rewards, dtype=np.float64)))
    else:
        n = _length(data)
        stats = ()
    steps = None
    if kind == "steps":
        steps = {
            name: np.asarray(getattr(data, name), dtype=np.float64).reshape(-1)
            for name in STEP_FIELDS
            if getattr(data, name) is not None
        }
    return EpisodePart(
        str(episode), int(start), int(start) + n, level, bool(terminal), stats, steps, data.gamma
    )


def _length(data: EpisodeData) -> int:
    for name in ("advantages", "values", "rewards"):
        arr = getattr(data, name)
        if arr is not None:
            n = int(np.shape(arr)[0])
            if n < 1:
                raise ValueError("make_part: a part needs at least one step")
            return n
    raise ValueError("make_part: EpisodeData has no per-step arrays")


@dataclass
class JoinResult:
    """What one :meth:`EpisodeJoiner.add` completed and refused.

    :param levels: the level of each episode completed by the call.
    :param scores: its score (same order).
    :param episodes: its episode id (same order).
    :param refused: ``(index of the part in the call, exception)`` of each part refused (it changed
        nothing).
    :param unscored: parts given up unscored by the call (:meth:`EpisodeJoiner.expire`).
    """

    levels: list[Any] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)
    episodes: list[str] = field(default_factory=list)
    refused: list[tuple[int, Exception]] = field(default_factory=list)
    unscored: int = 0


class EpisodeJoiner:
    """Collects :class:`EpisodePart` s by episode id and scores each episode once, when the last part arrives.

    An episode is complete when its terminal part has arrived (its ``stop`` is the episode's length) and
    the parts' step ranges, which must not overlap, cover every step. An episode whose parts stop arriving
    (its start was never scored, an env runner died, training stopped) is given up after ``timeout``
    seconds without a new part: :meth:`expire` drops it and counts its parts in ``parts_unscored``.

    :param strategy: the strategy (a :class:`~plr_gym.scoring.Strategy`) the parts were made for.
    :param timeout: seconds an incomplete episode waits for its next part.

    The state (pending parts, the best return per level of ``max_mc``, counters) round-trips through
    :meth:`state_dict` / :meth:`load_state_dict` (plain values and arrays, saved by the level source actor
    in its checkpoint).
    """

    def __init__(self, strategy: Strategy, timeout: float = 600.0) -> None:
        self.strategy = strategy
        self.kind = part_kind(strategy)
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout >= 0:
            raise ValueError(f"EpisodeJoiner: timeout must be a number of seconds >= 0, got {timeout!r}")
        self.timeout = float(timeout)
        # episode id -> {"level", "parts": [part...], "covered": steps, "length": int | None, "last": time}
        self._open: dict[str, dict[str, Any]] = {}
        self._best: dict[Any, tuple[Any, float]] = {}  # level key -> (level, best return), max_mc
        self.episodes_joined = 0
        self.parts_received = 0
        self.parts_unscored = 0

    @property
    def num_pending(self) -> int:
        """Episodes with parts waiting for the rest."""
        return len(self._open)

    @property
    def parts_pending(self) -> int:
        """Parts waiting for the rest of their episode."""
        return sum(len(r["parts"]) for r in self._open.values())

    # ------------------------------------------------------------------ joining
    def add(self, parts: Iterable[EpisodePart], now: float | None = None) -> JoinResult:
        """Add parts; score the episodes they complete (then forget them); expire stale ones.

        Each part is checked on its own (type, step range, finite aggregates, no overlap with the parts
        held, the same level as its episode's other parts); a refused part changes nothing and is
        returned in ``refused``. So is a part that completes an episode the strategy fails to score (a
        callable that raises): the episode keeps waiting with its other parts.
        """
        now = time.monotonic() if now is None else float(now)
        result = JoinResult()
        for k, part in enumerate(parts):
            try:
                record = self._check(part)
            except (TypeError, ValueError) as exc:
                result.refused.append((k, exc))
                continue
            held = (
                {"level": part.level, "parts": [], "covered": 0, "length": None} if record is None else record
            )
            length = part.stop if part.terminal else held["length"]
            if length is not None and held["covered"] + part.stop - part.start == length:
                whole = {"level": held["level"], "parts": [*held["parts"], part], "length": length}
                try:  # a callable strategy may fail on this episode: then the part is refused, like others
                    score = self._score(whole)
                except Exception as exc:
                    result.refused.append((k, exc))
                    continue
                self._open.pop(part.episode, None)
                self.parts_received += 1
                result.levels.append(held["level"])
                result.scores.append(score)
                result.episodes.append(part.episode)
                self.episodes_joined += 1
                continue
            self.parts_received += 1
            self._open[part.episode] = held
            held["parts"].append(part)
            held["covered"] += part.stop - part.start
            held["last"] = now
            held["length"] = length
        result.unscored = self.expire(now)
        return result

    def _check(self, part: Any) -> dict[str, Any] | None:
        if not isinstance(part, EpisodePart):
            raise TypeError(f"EpisodeJoiner: parts must be EpisodePart, got {type(part).__name__}")
        if not isinstance(part.episode, str):
            raise TypeError(f"EpisodeJoiner: EpisodePart.episode must be a str id, got {part.episode!r}")
        for name in ("start", "stop"):
            value = getattr(part, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise TypeError(f"EpisodeJoiner: EpisodePart.{name} must be an int, got {value!r}")
        if not 0 <= part.start < part.stop:
            raise ValueError(
                f"EpisodeJoiner: a part's steps must be 0 <= start < stop, got [{part.start}, {part.stop})"
            )
        want = {"mean": 1, "max_mc": 2, "steps": 0}[self.kind]
        if len(part.stats) != want or not all(math.isfinite(float(x)) for x in part.stats):
            raise ValueError(
                f"EpisodeJoiner: strategy {self.strategy.name!r} parts carry {want} finite aggregate(s), "
                f"got {part.stats!r}"
            )
        if self.kind == "steps":
            n = part.stop - part.start
            if not part.steps or any(np.shape(a) != (n,) for a in part.steps.values()):
                raise ValueError(f"EpisodeJoiner: a callable strategy's part carries its {n} steps' arrays")
        record = self._open.get(part.episode)
        if record is None:
            return None
        if level_key(part.level) != level_key(record["level"]):
            raise ValueError(
                f"EpisodeJoiner: episode {part.episode!r} is on level {record['level']!r}, a part says "
                f"{part.level!r}"
            )
        for held in record["parts"]:
            if part.start < held.stop and held.start < part.stop:
                raise ValueError(
                    f"EpisodeJoiner: episode {part.episode!r}: steps [{part.start}, {part.stop}) overlap "
                    f"the part [{held.start}, {held.stop}) already held (a part sent twice?)"
                )
        length = record["length"]
        if part.terminal and length is not None:
            raise ValueError(f"EpisodeJoiner: episode {part.episode!r} already has its terminal part")
        beyond = part.terminal and any(held.stop > part.stop for held in record["parts"])
        if beyond or (length is not None and part.stop > length):
            raise ValueError(
                f"EpisodeJoiner: episode {part.episode!r}: steps [{part.start}, {part.stop}) lie beyond its "
                "end"
            )
        return record

    def _score(self, record: dict[str, Any]) -> float:
        parts: list[EpisodePart] = sorted(record["parts"], key=lambda p: p.start)
        length = int(record["length"])
        if self.kind == "mean":
            return math.fsum(p.stats[0] for p in parts) / length
        if self.kind == "max_mc":
            episode_return = math.fsum(p.stats[1] for p in parts)
            key = level_key(record["level"])
            best = max(self._best.get(key, (None, -math.inf))[1], episode_return)
            self._best[key] = (record["level"], best)
            return best - math.fsum(p.stats[0] for p in parts) / length
        arrays = {
            name: np.concatenate([p.steps[name] for p in parts])  # type: ignore[index]
            for name in STEP_FIELDS
            if all(p.steps is not None and name in p.steps for p in parts)
        }
        next_values = arrays.get("next_values")
        data = EpisodeData(
            rewards=arrays.get("rewards"),
            values=arrays.get("values"),
            advantages=arrays.get("advantages"),
            next_values=next_values,
            next_value=0.0 if next_values is None else float(next_values[-1]),
            gamma=parts[-1].gamma,
        )
        fn = self.strategy.score_fn
        assert fn is not None
        return float(fn(data))

    def expire(self, now: float | None = None) -> int:
        """Give up the episodes without a new part for ``timeout`` seconds; returns their parts' count."""
        now = time.monotonic() if now is None else float(now)
        stale = [k for k, r in self._open.items() if now - r["last"] > self.timeout]
        dropped = sum(len(self._open.pop(k)["parts"]) for k in stale)
        self.parts_unscored += dropped
        return dropped

    # ------------------------------------------------------------------ state
    def state_dict(self, now: float | None = None) -> dict[str, Any]:
        """Pending parts (with their age in seconds), best returns and counters, as plain values."""
        now = time.monotonic() if now is None else float(now)
        pending = []
        for episode, record in self._open.items():
            pending.append(
                {
                    "episode": episode,
                    "level": record["level"],
                    "age": now - record["last"],
                    "parts": [_part_state(p) for p in record["parts"]],
                }
            )
        return {
            "kind": self.kind,
            "pending": pending,
            "best": [[level, best] for level, best in self._best.values()],
            "counters": [self.episodes_joined, self.parts_received, self.parts_unscored],
        }

    def load_state_dict(self, state: dict[str, Any], now: float | None = None) -> None:
        """Restore :meth:`state_dict`'s output (all or nothing)."""
        now = time.monotonic() if now is None else float(now)
        if state.get("kind") != self.kind:
            raise ValueError(
                f"EpisodeJoiner: the state holds {state.get('kind')!r} parts, strategy "
                f"{self.strategy.name!r} makes {self.kind!r} parts"
            )
        restored = EpisodeJoiner(self.strategy, self.timeout)
        for entry in state["pending"]:
            for values in entry["parts"]:
                part = _part_from_state(str(entry["episode"]), entry["level"], values)
                record = restored._check(part)
                if record is None:
                    record = restored._open[part.episode] = {
                        "level": part.level,
                        "parts": [],
                        "covered": 0,
                        "length": None,
                    }
                record["parts"].append(part)
                record["covered"] += part.stop - part.start
                record["last"] = now - float(entry["age"])
                if part.terminal:
                    record["length"] = part.stop
        restored._best = {level_key(level): (level, float(best)) for level, best in state["best"]}
        joined, received, unscored = (int(x) for x in state["counters"])
        self._open, self._best = restored._open, restored._best
        self.episodes_joined, self.parts_received, self.parts_unscored = joined, received, unscored


def _part_state(part: EpisodePart) -> list[Any]:
    return [part.start, part.stop, part.terminal, list(part.stats), part.steps, part.gamma]


def _part_from_state(episode: str, level: Any, values: Sequence[Any]) -> EpisodePart:
    start, stop, terminal, stats, steps, gamma = values
    if steps is not None:
        steps = {str(k): np.asarray(v, dtype=np.float64) for k, v in steps.items()}
    return EpisodePart(
        episode,
        int(start),
        int(stop),
        level,
        bool(terminal),
        tuple(float(x) for x in stats),
        steps,
        float(gamma),
    )
