"""Robust PLR / ACCEL level plans, shared by the SB3 and the Gymnasium ``PrioritizedLevelReplay``.

With ``buffer=LevelBuffer(...)`` a vector wrapper does not draw a level per episode: at the start of each
rollout a :class:`RolloutPlan` decides between replaying buffer levels and trying new ones (or, with an
ACCEL mutator, evaluating the children of the levels replayed in the previous rollout) and assigns one
level per env, which the env plays in every episode of the rollout (as Robust PLR's dcd code and JaxUED
do). At the end of the rollout the plan receives the episode scores and updates the buffer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from plr_gym._levels import level_key
from plr_gym.level_buffer import LevelBuffer
from plr_gym.scoring import OUTCOME_STRATEGIES, SCORE_FUNCTIONS

__all__ = ["RolloutPlan", "level_source"]


class RolloutPlan:
    """Per-rollout replay decisions, level assignment, ACCEL children and buffer updates.

    :param owner: name used in error messages.
    :param n_envs: number of envs (one assigned level each).
    :param buffer: the level buffer.
    :param generator: ``generator(rng) -> level``, a new level.
    :param mutator: ``mutator(level, rng) -> level`` (ACCEL), or ``None``.
    :param n_mutations: edits per child (``mutator`` applied this many times).
    :param strategy: scoring strategy (default ``positive_value_loss``, Robust PLR's); not random/sequential.
    :param seed: seed of the generator's and mutator's random generator.
    """

    def __init__(
        self,
        owner: str,
        n_envs: int,
        buffer: Any,
        generator: Any,
        mutator: Any = None,
        n_mutations: int = 1,
        strategy: Any = "positive_value_loss",
        seed: int | None = None,
    ) -> None:
        if not isinstance(buffer, LevelBuffer):
            raise TypeError(f"{owner}: buffer must be a plr_gym.LevelBuffer, got {type(buffer).__name__}")
        if not callable(generator):
            raise ValueError(f"{owner}: buffer= needs generator=fn, a callable fn(rng) -> new level")
        if mutator is not None and not callable(mutator):
            raise TypeError(f"{owner}: mutator must be a callable mutator(level, rng) -> level")
        if isinstance(n_mutations, bool) or not isinstance(n_mutations, int) or n_mutations < 1:
            raise ValueError(f"{owner}: n_mutations must be an int >= 1, got {n_mutations!r}")
        if strategy in ("random", "sequential", *OUTCOME_STRATEGIES) or not (
            callable(strategy) or strategy in SCORE_FUNCTIONS
        ):
            raise ValueError(
                f"{owner}: strategy={strategy!r} cannot score levels for a LevelBuffer; choose one of "
                f"{', '.join(k for k in SCORE_FUNCTIONS if k not in OUTCOME_STRATEGIES)} or a callable "
                "('learnability' needs a finite LevelSampler, which keeps each level's success rate)"
            )
        if seed is not None and (
            isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)) or seed < 0
        ):
            raise ValueError(f"{owner}: seed must be a non-negative int or None, got {seed!r}")
        self.owner = owner
        self.n_envs = n_envs
        self.buffer: LevelBuffer = buffer
        self.generator: Callable[[np.random.Generator], Any] = generator
        self.mutator: Callable[[Any, np.random.Generator], Any] | None = mutator
        self.n_mutations = n_mutations
        self.strategy = strategy
        self.rng = np.random.default_rng(seed)
        self.mode = "none"  # of the current rollout: replay | new | mutate
        self.last_mode = "none"  # of the rollout closed by end()
        self.assigned: list[Any] = []
        self.replayed: list[int] = []  # buffer slots of the assigned levels in a replay rollout
        self.steps = -1  # steps taken under the current plan (-1: no plan)
        self.children: list[Any] = []
        self.inserted = 0
        self.rejected = 0

    def begin(self) -> str:
        """Decide the next rollout's mode and assign one level per env (a plan no step used is kept)."""
        if self.steps == 0:
            return self.mode
        n = self.n_envs
        if self.children:
            self.mode = "mutate"
            self.assigned, self.children = self.children[:n], self.children[n:]
            # fewer children than envs: top up with new levels
            self.assigned += [self._generate() for _ in range(n - len(self.assigned))]
        elif self.buffer.sample_replay_decision():
            self.mode = "replay"
            indices, self.assigned = self.buffer.sample_replay_levels(n)
            self.replayed = indices.tolist()
        else:
            self.mode = "new"
            self.assigned = [self._generate() for _ in range(n)]
        self.steps = 0
        return self.mode

    def _generate(self) -> Any:
        level = self.generator(self.rng)
        if level is None:
            raise ValueError(f"{self.owner}: the generator returned None; it must return a level")
        return level

    def discard(self) -> None:
        """Forget a plan no step used yet, so that the next :meth:`begin` plans afresh (after a restore)."""
        if self.steps == 0:
            self.steps = -1
            self.mode = "none"
            self.assigned = []
            self.replayed = []

    def end(self) -> None:
        """Close the rollout; after a replay rollout the mutator makes one child per replayed level."""
        if self.mode == "replay" and self.mutator is not None:
            children = []
            for level in self.assigned:
                child = level
                for _ in range(self.n_mutations):
                    child = self.mutator(child, self.rng)
                if child is None:
                    raise ValueError(f"{self.owner}: the mutator returned None; it must return a level")
                children.append(child)
            self.children = children
        self.last_mode = self.mode
        self.steps = -1

    def update_batch(self, levels: Any, scores: Any) -> None:
        """The score target of the :class:`~plr_gym.scoring.EpisodeScorer`: write a rollout's scores.

        Scores of several episodes on one level are averaged. Replayed levels get their score updated;
        new and mutated levels are inserted (kept only if they beat the lowest-weighted stored level once
        the buffer is full).

        All or nothing: every score is checked first (a NaN or infinite score raises ``ValueError``), and
        if anything fails part-way the buffer and the counters are restored, so the report can be retried.
        """
        level_list, values = list(levels), np.asarray(scores, dtype=np.float64).reshape(-1).tolist()
        if len(level_list) != len(values):
            raise ValueError(
                f"{self.owner}: got {len(level_list)} levels but {len(values)} scores (one per level)"
            )
        for value in values:
            self.buffer._check_score(value)
        groups: dict[Any, list[float]] = {}
        first: dict[Any, Any] = {}
        for level, score in zip(level_list, values):
            key = level_key(level)
            groups.setdefault(key, []).append(score)
            first.setdefault(key, level)
        with np.errstate(over="ignore"):  # an overflowing mean is refused as infinite just below
            means = {key: float(np.mean(v)) for key, v in groups.items()}
        for mean in means.values():
            self.buffer._check_score(mean)
        snapshot, counters = self.buffer.state_dict(), (self.inserted, self.rejected)
        try:
            for key, score in means.items():
                if self.mode == "replay":  # the slots replayed (copies of a level may sit in several slots)
                    slots = {i for i, lvl in zip(self.replayed, self.assigned) if level_key(lvl) == key}
                    for idx in sorted(slots):
                        self.buffer.update(idx, score)
                    if slots:
                        continue
                if self.buffer.insert(first[key], score) >= 0:
                    self.inserted += 1
                else:
                    self.rejected += 1
        except BaseException:
            self.buffer.load_state_dict(snapshot)
            self.inserted, self.rejected = counters
            raise

    def state_dict(self) -> dict[str, Any]:
        """The generator's RNG state and the children waiting for evaluation."""
        return {"rng": self.rng.bit_generator.state, "children": list(self.children)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict`; checked first, a refused state (``ValueError``) changes nothing."""
        from plr_gym.sampler import _state_rng

        if not isinstance(state, dict) or "rng" not in state or not isinstance(state.get("children"), list):
            raise ValueError("not a RolloutPlan state (needs 'rng' and a 'children' list)")
        if any(child is None for child in state["children"]):
            raise ValueError("RolloutPlan state 'children' holds None, which is not a level")
        rng = _state_rng(state["rng"])
        self.rng = rng
        self.children = list(state["children"])


def level_source(
    owner: str,
    n_envs: int,
    sampler: Any,
    sampler_kwargs: dict[str, Any],
    buffer: Any,
    generator: Any,
    mutator: Any,
    n_mutations: int,
) -> tuple[Any, RolloutPlan | None]:
    """A vector wrapper's ``(sampler, plan)``: a LevelSampler (finite levels) or a RolloutPlan (buffer)."""
    from plr_gym.wrappers.level import build_sampler

    if buffer is None:
        if generator is not None or mutator is not None:
            raise ValueError(f"{owner}: generator= and mutator= need buffer=LevelBuffer(...)")
        return build_sampler(sampler, sampler_kwargs, owner), None
    extra = split_buffer_kwargs(owner, sampler, sampler_kwargs)
    return None, RolloutPlan(owner, n_envs, buffer, generator, mutator, n_mutations, **extra)


def split_buffer_kwargs(owner: str, sampler: Any, sampler_kwargs: dict[str, Any]) -> dict[str, Any]:
    """The ``strategy``/``seed`` keywords allowed next to ``buffer=``; anything else is an error."""
    extra = dict(sampler_kwargs)
    out = {"strategy": extra.pop("strategy", "positive_value_loss"), "seed": extra.pop("seed", None)}
    if sampler is not None or extra:
        given = "sampler=" if sampler is not None else ", ".join(f"{k}=" for k in extra)
        raise ValueError(
            f"{owner}: with buffer= pass only generator=, mutator=, n_mutations=, strategy= and seed= "
            f"(got {given})"
        )
    return out
