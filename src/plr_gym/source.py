"""Level sources: the one interface every front end uses to choose levels and report their scores.

A *level source* decides which level each env plays next and absorbs the scores of completed episodes.
The front ends (:class:`plr_gym.PrioritizedLevelReplay` for SB3,
:class:`plr_gym.vector.PrioritizedLevelReplay` for Gymnasium, :class:`~plr_gym.PLRCallback`,
:class:`~plr_gym.OffPolicyPLRCallback`) hold one in
``self.source`` and talk to it only through :class:`LevelSource`; they never ask which kind it is.

Two sources ship with the library:

- :class:`~plr_gym.LevelSampler` (PLR over a finite level set): every new episode draws its level;
- :class:`BufferLevelSource` (Robust PLR / ACCEL over an open-ended generator, wrapping a
  :class:`~plr_gym.LevelBuffer`): at the start of each rollout it replays buffer levels, tries new ones
  or evaluates the mutated children of the last replayed ones, and every episode of env ``i`` during the
  rollout plays the level assigned to ``i``.

A new source (e.g. one hosted in another process) implements the same methods; no front end changes.

The life of a rollout, as a front end drives it::

    restart = source.begin_rollout()          # True: the envs must start again on new levels now
    levels = source.next_levels(env_indices)  # whenever envs start episodes (reset, autoreset)
    ...                                       # the envs play; the scorer cuts episodes
    source.update_batch(levels, scores)       # (EpisodeScorer) scores of the completed episodes
    source.end_rollout()
    source.rollout_stats(full=True)           # plr/* numbers to log

Example:
    >>> import numpy as np
    >>> from plr_gym import LevelSampler
    >>> from plr_gym.source import LevelSource
    >>> source = LevelSampler(range(10), seed=0)
    >>> isinstance(source, LevelSource)
    True
    >>> source.begin_rollout()                # a sampler draws per episode: no restart needed
    False
    >>> levels = source.next_levels(np.arange(2))
    >>> source.update_batch(levels, [0.5, 0.1])
    >>> source.end_rollout()
    >>> source.rollout_stats(full=False)["num_seen"]
    2
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from plr_gym._levels import as_sequence, level_key, load_values, save_values
from plr_gym.level_buffer import LevelBuffer
from plr_gym.scoring import Strategy, strategy_spec

__all__ = [
    "BufferLevelSource",
    "LevelSource",
    "NoScoresWarning",
    "ScoreWatch",
    "make_level_source",
    "next_rollout",
]

#: ``checkpoint_files()`` values: ``(save(path), load(path))`` of one file of a checkpoint directory.
FileIO = tuple[Callable[[Any], None], Callable[[Any], None]]


@runtime_checkable
class LevelSource(Protocol):
    """What a front end needs from a level source (see the module docstring for the call order).

    Attributes: ``strategy`` (the scoring strategy name or callable), ``strategy_info``
    (:class:`plr_gym.scoring.Strategy`, what that strategy needs), ``level_dtype`` (``int64`` for level
    ids, ``object`` for level objects), ``rollout_mode`` / ``last_rollout_mode`` (``"replay"``, ``"new"``,
    ``"mutate"`` for a source that plans whole rollouts, else ``"none"``), ``plans_rollouts`` (levels are
    fixed per env for a whole rollout rather than drawn per episode), ``num_levels`` (levels the source
    keeps scores for) and ``has_scores`` (a score has been received).
    """

    strategy: Any
    level_dtype: np.dtype[Any]
    plans_rollouts: bool

    @property
    def strategy_info(self) -> Strategy: ...

    @property
    def rollout_mode(self) -> str: ...

    @property
    def last_rollout_mode(self) -> str: ...

    @property
    def num_levels(self) -> int: ...

    @property
    def has_scores(self) -> bool: ...

    def begin_rollout(self) -> bool:
        """Start a rollout; ``True`` if the envs must start again on new levels now."""
        ...

    def next_levels(self, envs: npt.NDArray[np.int64]) -> list[Any] | npt.NDArray[Any]:
        """The levels of the next episode of each env in ``envs`` (indices), in that order."""
        ...

    def update_batch(self, levels: Any, scores: Any) -> None:
        """Absorb the scores of completed episodes (all or nothing: a refused batch changes nothing)."""
        ...

    def end_rollout(self) -> None:
        """Close the rollout."""
        ...

    def set_progress(self, progress: float) -> None:
        """How far training is, in ``[0, 1]`` (front ends call it per rollout; schedules follow it)."""
        ...

    def discard_unplayed(self) -> None:
        """Forget levels handed out for a rollout no env has played yet (after restoring a checkpoint)."""
        ...

    def rollout_stats(self, full: bool) -> dict[str, Any]:
        """Numbers to log as ``plr/<key>`` (arrays: TensorBoard histograms); ``full`` adds the costly ones."""
        ...

    def retained_levels(self) -> list[Any] | None:
        """The levels the source still keeps (``None``: it never forgets one), so that a scorer can forget
        per-level state (``max_mc``'s best returns) of the others."""
        ...

    def refused(self, exc: BaseException, levels: list[Any]) -> Exception | None:
        """An error explaining that an env refused ``levels`` (``None``: re-raise ``exc`` as it is)."""
        ...

    def checkpoint_files(self) -> dict[str, FileIO]:
        """The files of this source in a checkpoint directory: ``{name: (save(path), load(path))}``."""
        ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


def next_rollout(source: LevelSource, full: bool = False) -> dict[str, Any]:
    """Close ``source``'s rollout, return its :meth:`~LevelSource.rollout_stats` and open the next one: a
    learner's step between two training batches.

    ``source.end_rollout()``, ``source.rollout_stats(full)``, ``source.begin_rollout()``, or, for a source
    that has a ``next_rollout(full)`` method doing the same at once (a
    :class:`~plr_gym.distributed.RemoteLevelSource`: one round trip to its actor, with the buffered
    scores, instead of four), that method.

    Example:
        >>> from plr_gym import LevelSampler
        >>> sampler = LevelSampler(range(4), seed=0)
        >>> _ = sampler.next_levels(np.arange(2))
        >>> next_rollout(sampler)["num_seen"]
        0
    """
    step = getattr(source, "next_rollout", None)
    if callable(step):
        stats: dict[str, Any] = step(full)
        return stats
    source.end_rollout()
    stats = source.rollout_stats(full)
    source.begin_rollout()
    return stats


def weight_entropy(weights: npt.NDArray[np.float64]) -> float:
    """Entropy (nats) of a replay distribution."""
    w = weights[weights > 0]
    return float(-(w * np.log(w)).sum())


# ------------------------------------------------------------------------------------------------ buffer
class BufferLevelSource:
    """Robust PLR / ACCEL as a :class:`LevelSource`: per-rollout plans over a :class:`~plr_gym.LevelBuffer`.

    At the start of each rollout (:meth:`begin_rollout`) it decides between replaying buffer levels and
    trying new ones from ``generator`` (or, with an ACCEL ``mutator``, evaluating one child of each level
    replayed in the previous rollout) and assigns one level per env, which the env plays in every episode
    of the rollout (as Robust PLR's dcd code and JaxUED do). The rollout's scores (:meth:`update_batch`)
    update the replayed levels or are offered to the buffer with the new levels; :meth:`end_rollout` closes
    the plan and makes the ACCEL children.

    :param buffer: the level buffer.
    :param generator: ``generator(rng) -> level``, a new level (an int seed or any value the env accepts as
        ``reset(options={"level": level})``).
    :param n_envs: number of envs (one assigned level each).
    :param mutator: ``mutator(level, rng) -> level`` (ACCEL), or ``None``.
    :param n_mutations: edits per child (``mutator`` applied this many times).
    :param strategy: scoring strategy (default ``positive_value_loss``, Robust PLR's); one whose
        :class:`~plr_gym.scoring.Strategy` allows a level buffer, or a callable.
    :param seed: seed of the generator's and mutator's random generator.
    :param owner: name used in error messages.

    Example:
        >>> import numpy as np
        >>> from plr_gym import LevelBuffer
        >>> new_level = lambda rng: int(rng.integers(1000))
        >>> source = BufferLevelSource(LevelBuffer(capacity=4, seed=0), new_level, n_envs=2, seed=0)
        >>> source.begin_rollout(), source.rollout_mode     # an empty buffer: try new levels
        (True, 'new')
        >>> levels = source.next_levels(np.arange(2))
        >>> source.update_batch(levels, [0.3, 0.7])        # both are inserted
        >>> source.end_rollout()
        >>> source.buffer.size
        2
    """

    level_dtype: np.dtype[Any] = np.dtype(object)
    plans_rollouts = True

    def __init__(
        self,
        buffer: LevelBuffer,
        generator: Callable[[np.random.Generator], Any],
        n_envs: int,
        mutator: Callable[[Any, np.random.Generator], Any] | None = None,
        n_mutations: int = 1,
        strategy: Any = "positive_value_loss",
        seed: int | None = None,
        owner: str = "BufferLevelSource",
    ) -> None:
        if not isinstance(buffer, LevelBuffer):
            raise TypeError(f"{owner}: buffer must be a plr_gym.LevelBuffer, got {type(buffer).__name__}")
        if not callable(generator):
            raise ValueError(f"{owner}: buffer= needs generator=fn, a callable fn(rng) -> new level")
        if mutator is not None and not callable(mutator):
            raise TypeError(f"{owner}: mutator must be a callable mutator(level, rng) -> level")
        if isinstance(n_mutations, bool) or not isinstance(n_mutations, int) or n_mutations < 1:
            raise ValueError(f"{owner}: n_mutations must be an int >= 1, got {n_mutations!r}")
        if isinstance(n_envs, bool) or not isinstance(n_envs, (int, np.integer)) or n_envs < 1:
            raise ValueError(f"{owner}: n_envs must be a positive int, got {n_envs!r}")
        try:
            info = strategy_spec(strategy)
        except ValueError:
            info = None
        if info is None or not info.level_buffer:
            from plr_gym.scoring import STRATEGY_SPECS

            allowed = ", ".join(k for k, s in STRATEGY_SPECS.items() if s.level_buffer)
            raise ValueError(
                f"{owner}: strategy={strategy!r} cannot score levels for a LevelBuffer; choose one of "
                f"{allowed} or a callable ('learnability' needs a finite LevelSampler, which keeps each "
                "level's success rate)"
            )
        if seed is not None and (
            isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)) or seed < 0
        ):
            raise ValueError(f"{owner}: seed must be a non-negative int or None, got {seed!r}")
        self.owner = owner
        self.n_envs = int(n_envs)
        self.buffer: LevelBuffer = buffer
        self.generator = generator
        self.mutator = mutator
        self.n_mutations = n_mutations
        self.strategy = strategy
        self.strategy_info: Strategy = info
        self.rng = np.random.default_rng(seed)
        self._mode = "none"  # of the latest plan: replay | new | mutate ("none": none yet)
        self._open = False  # a plan is open: its levels are handed out until end_rollout()
        self._last_mode = "none"  # of the plan closed by end_rollout()
        self.assigned: list[Any] = []
        self.replayed: list[int] = []  # buffer slots of the assigned levels in a replay rollout
        self.children: list[Any] = []
        self.inserted = 0
        self.rejected = 0
        self.num_updates = 0

    # -------------------------------------------------------------------- protocol: attributes
    @property
    def rollout_mode(self) -> str:
        """``"replay"``, ``"new"`` or ``"mutate"``: the mode of the current (or just closed) plan; ``"none"``
        before the first plan."""
        return self._mode

    @property
    def last_rollout_mode(self) -> str:
        """The mode of the plan closed by the last :meth:`end_rollout`."""
        return self._last_mode

    @property
    def num_levels(self) -> int:
        """The buffer's capacity."""
        return int(self.buffer.capacity)

    @property
    def has_scores(self) -> bool:
        return self.num_updates > 0

    # -------------------------------------------------------------------- protocol: rollouts
    def begin_rollout(self) -> bool:
        """Open a plan unless one is open: decide replay / new / mutate and assign one level per env.

        :return: ``True`` if a plan was opened (the envs must start on its levels now), ``False`` if the
            open plan is kept.
        """
        if self._open:
            return False
        n = self.n_envs
        if self.children:
            mode = "mutate"
            assigned, children = self.children[:n], self.children[n:]
            assigned = assigned + [self._generate() for _ in range(n - len(assigned))]  # top up
            replayed: list[int] = []
        elif self.buffer.sample_replay_decision():
            mode, children = "replay", self.children
            indices, assigned = self.buffer.sample_replay_levels(n)
            replayed = indices.tolist()
        else:
            mode, children, replayed = "new", self.children, []
            assigned = [self._generate() for _ in range(n)]
        self._mode, self.assigned, self.children, self.replayed = mode, list(assigned), children, replayed
        self._open = True
        return True

    def next_levels(self, envs: npt.NDArray[np.int64]) -> list[Any]:
        """The level assigned to each env of ``envs`` by the open plan; between :meth:`end_rollout` and the
        next :meth:`begin_rollout`, by the plan just closed. Opens a plan if there is none yet."""
        if not self._open and not self.assigned:
            self.begin_rollout()
        return [self.assigned[i] for i in np.asarray(envs).tolist()]

    def end_rollout(self) -> None:
        """Close the plan; after a replay rollout the mutator makes one child per replayed level."""
        if self._open and self._mode == "replay" and self.mutator is not None:
            children = []
            for level in self.assigned:
                child = level
                for _ in range(self.n_mutations):
                    child = self.mutator(child, self.rng)
                if child is None:
                    raise ValueError(f"{self.owner}: the mutator returned None; it must return a level")
                children.append(child)
            self.children = children
        if self._open:
            self._last_mode, self._open = self._mode, False

    def set_progress(self, progress: float) -> None:
        """Nothing is scheduled in Robust PLR's plan: accepted and ignored (checked to lie in ``[0, 1]``)."""
        if isinstance(progress, bool) or not isinstance(progress, (int, float)) or not 0 <= progress <= 1:
            raise ValueError(f"progress must be a number in [0, 1], got {progress!r}")

    def discard_unplayed(self) -> None:
        """Forget the open plan without closing it (no ACCEL children; ``rollout_mode`` is ``"none"``
        again): the next :meth:`begin_rollout` plans afresh, e.g. from a buffer just restored from a
        checkpoint. Call it only when the plan's levels were not played (PLRCallback does, right after
        ``learn()``'s reset)."""
        if self._open:
            self._mode, self._open, self.assigned, self.replayed = "none", False, [], []

    def _generate(self) -> Any:
        level = self.generator(self.rng)
        if level is None:
            raise ValueError(f"{self.owner}: the generator returned None; it must return a level")
        return level

    def retained_levels(self) -> list[Any]:
        """The levels in the buffer (evicted ones are forgotten)."""
        return list(self.buffer.levels)

    def refused(self, exc: BaseException, levels: list[Any]) -> Exception | None:
        if self._mode in ("new", "mutate"):
            origin = "mutator" if self._mode == "mutate" else "generator"
            return ValueError(
                f"an env refused a level made by the {origin} ({type(exc).__name__}: {exc}); "
                f"the levels were {levels!r}"
            )
        return None

    # -------------------------------------------------------------------- protocol: scores
    def update_batch(self, levels: Any, scores: Any) -> None:
        """Write a rollout's scores: replayed levels are updated, new and mutated ones offered to the buffer.

        Scores of several episodes on one level are averaged. New and mutated levels are inserted (kept
        only if they beat the lowest-weighted stored level once the buffer is full).

        All or nothing: every score is checked first (a NaN or infinite score raises ``ValueError``), and
        if anything fails part-way the buffer and the counters are restored, so the report can be retried.
        """
        level_list = list(as_sequence("levels", levels, "levels (one per score)"))
        raw = np.asarray(as_sequence("scores", scores, "numbers (one per level)"))
        if raw.dtype.kind not in "biuf":
            raise TypeError(f"{self.owner}: scores must be real numbers, got dtype {raw.dtype}")
        values = raw.astype(np.float64).reshape(-1).tolist()
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
        snapshot, counters = self.buffer.state_dict(), (self.inserted, self.rejected, self.num_updates)
        try:
            for key, score in means.items():
                if self._mode == "replay":  # the slots replayed (copies of a level may sit in several)
                    slots = {i for i, lvl in zip(self.replayed, self.assigned) if level_key(lvl) == key}
                    for idx in sorted(slots):
                        self.buffer.update(idx, score)
                    if slots:
                        continue
                if self.buffer.insert(first[key], score) >= 0:
                    self.inserted += 1
                else:
                    self.rejected += 1
            self.num_updates += len(means)
        except BaseException:
            self.buffer.load_state_dict(snapshot)
            self.inserted, self.rejected, self.num_updates = counters
            raise

    def rollout_stats(self, full: bool) -> dict[str, Any]:
        buffer = self.buffer
        stats: dict[str, Any] = {
            "replay_rollout": float(self._last_mode == "replay"),
            "buffer_size": buffer.size,
            "levels_inserted": self.inserted,
            "levels_rejected": self.rejected,
        }
        if buffer.size:
            scores = buffer.scores
            stats["score_mean"] = float(scores.mean())
            stats["score_max"] = float(scores.max())
            if full:
                stats["weight_entropy"] = weight_entropy(buffer.sample_weights())
                stats["scores"] = scores
        return stats

    # -------------------------------------------------------------------- protocol: state
    def state_dict(self) -> dict[str, Any]:
        """The buffer's state, the generator's RNG state and the children waiting for evaluation."""
        return {"buffer": self.buffer.state_dict(), "plan": self._plan_state()}

    def _plan_state(self) -> dict[str, Any]:
        return {"rng": self.rng.bit_generator.state, "children": list(self.children)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict`; checked first, a refused state (``ValueError``) changes nothing."""
        if not isinstance(state, dict) or not {"buffer", "plan"} <= state.keys():
            raise ValueError("not a BufferLevelSource state (needs 'buffer' and 'plan')")
        rng, children = self._checked_plan(state["plan"])
        snapshot = self.buffer.state_dict()
        self.buffer.load_state_dict(state["buffer"])
        try:
            self.rng, self.children = rng, children
        except BaseException:  # pragma: no cover - plain assignments
            self.buffer.load_state_dict(snapshot)
            raise

    def _checked_plan(self, state: Any) -> tuple[np.random.Generator, list[Any]]:
        from plr_gym.sampler.state import _state_rng

        if not isinstance(state, dict) or "rng" not in state or not isinstance(state.get("children"), list):
            raise ValueError("not a Robust PLR generator state (needs 'rng' and a 'children' list)")
        if any(child is None for child in state["children"]):
            raise ValueError("generator state 'children' holds None, which is not a level")
        return _state_rng(state["rng"]), list(state["children"])

    def _load_plan(self, path: Any) -> None:
        self.rng, self.children = self._checked_plan(load_values(path))

    def checkpoint_files(self) -> dict[str, FileIO]:
        """``plr_buffer.npz`` (the buffer) and ``plr_generator.npz`` (RNG and waiting children)."""
        return {
            "plr_buffer.npz": (self.buffer.save, self.buffer.load_from),
            "plr_generator.npz": (lambda p: save_values(p, self._plan_state()), self._load_plan),
        }


# ------------------------------------------------------------------------------------------------ building
def make_level_source(
    owner: str,
    n_envs: int,
    sampler: Any,
    sampler_kwargs: dict[str, Any],
    buffer: Any,
    generator: Any,
    mutator: Any,
    n_mutations: int,
) -> LevelSource:
    """A front end's level source from its constructor arguments.

    ``sampler=`` (a :class:`~plr_gym.LevelSampler`, or any :class:`LevelSource`) is used as it is;
    ``buffer=`` builds a :class:`BufferLevelSource` (only ``strategy`` and ``seed`` may come with it);
    otherwise the keyword arguments build a :class:`~plr_gym.LevelSampler` (at least ``levels=``).
    """
    from plr_gym.sampler import LevelSampler

    if buffer is not None:
        extra = dict(sampler_kwargs)
        kwargs = {"strategy": extra.pop("strategy", "positive_value_loss"), "seed": extra.pop("seed", None)}
        if sampler is not None or extra:
            given = "sampler=" if sampler is not None else ", ".join(f"{k}=" for k in extra)
            raise ValueError(
                f"{owner}: with buffer= pass only generator=, mutator=, n_mutations=, strategy= and seed= "
                f"(got {given})"
            )
        if not isinstance(buffer, LevelBuffer):
            raise TypeError(f"{owner}: buffer must be a plr_gym.LevelBuffer, got {type(buffer).__name__}")
        return BufferLevelSource(buffer, generator, n_envs, mutator, n_mutations, owner=owner, **kwargs)
    if generator is not None or mutator is not None:
        raise ValueError(f"{owner}: generator= and mutator= need buffer=LevelBuffer(...)")
    if sampler is not None:
        if sampler_kwargs:
            raise ValueError(
                f"{owner}: pass either sampler=LevelSampler(...) or the LevelSampler keyword arguments "
                f"(got both sampler= and {', '.join(sorted(sampler_kwargs))}=)"
            )
        if not isinstance(sampler, LevelSource) or isinstance(sampler, type):
            raise TypeError(f"{owner}: sampler must be a plr_gym.LevelSampler, got {type(sampler).__name__}")
        planned = getattr(sampler, "n_envs", None)  # a source that assigns levels per env
        if planned is not None and planned != n_envs:
            raise ValueError(f"{owner}: the level source has n_envs={planned}, the vector env {n_envs} envs")
        return sampler
    if "levels" not in sampler_kwargs:
        raise ValueError(
            f"{owner}: pass sampler=LevelSampler(levels=..., ...) or the LevelSampler keyword arguments, "
            "at least levels=... (e.g. levels=range(200))"
        )
    try:
        return LevelSampler(**sampler_kwargs)
    except TypeError as exc:
        if "unexpected keyword argument" in str(exc):
            raise TypeError(
                f"{owner}: {exc} (keyword arguments other than the env go to LevelSampler)"
            ) from exc
        raise


# ------------------------------------------------------------------------------------------------ watch
class NoScoresWarning(UserWarning):
    """Episodes complete but no score reaches the level source (the scoring side is not wired up)."""


class ScoreWatch:
    """Warns once when episodes have completed and the level source has not received a single score,
    unless a scorer (``PLRCallback``, ``report_rollout``) is attached: levels are then never prioritised,
    which is almost always a forgotten callback.

    When the wrapper is stepped by a Stable-Baselines3 on-policy algorithm (``model.learn``), the check
    runs at the end of every rollout: the first rollout that ends with completed episodes and no score
    warns. Otherwise (a hand-written loop) it runs once, after ``NO_SCORE_STEPS`` vector steps. The
    warning points at the first line of the stack outside plr_gym and the libraries it drives (SB3,
    Gymnasium, torch): the user's ``model.learn(...)`` or ``env.step(...)`` call.

    :param owner: the wrapper's name, for the message.
    :param hint: what to do, for the message.
    """

    #: vector steps before the check outside SB3: three rollouts of SB3 PPO's default ``n_steps=2048``
    NO_SCORE_STEPS = 3 * 2048

    def __init__(self, owner: str, hint: str) -> None:
        self.owner = owner
        self.hint = hint
        self.attached = False
        self.steps = 0
        self.episodes = 0
        self.done = False
        # SB3 rollouts: (offset, length); step t (1-based) is index (offset + t) % length of its rollout
        self._rollout: tuple[int, int] | None = None

    def step(self, n_ended: int, source: LevelSource) -> None:
        """Count one vector step in which ``n_ended`` episodes ended; warn if the check fails."""
        if self.done:
            return
        if self.attached or not source.strategy_info.uses_scores:
            self.done = True
            return
        if self._rollout is None:
            position = _sb3_rollout_position()
            if position is not None:
                index, length = position
                self._rollout = (index - self.steps - 1, length)
        self.steps += 1
        self.episodes += n_ended
        if self._rollout is not None:
            offset, length = self._rollout
            if (offset + self.steps) % length != length - 1 or self.episodes == 0:
                return  # not a rollout's last step, or nothing to score yet
            rollout = (offset + self.steps + 1) // length
            where = f"{self.steps} steps (by the end of rollout {rollout} of model.learn)"
        elif self.steps < self.NO_SCORE_STEPS or self.episodes == 0:
            return
        else:
            where = f"{self.steps} steps"
        self.done = True
        if not source.has_scores:
            warnings.warn(
                f"{self.owner}: {self.episodes} episodes completed in {where} but no score has "
                f"reached the level source, so levels are not prioritised. {self.hint}",
                NoScoresWarning,
                stacklevel=_user_stacklevel(),
            )


#: Top-level packages whose frames a :class:`NoScoresWarning` skips to reach the user's line.
_LIBRARY_PACKAGES = frozenset(
    {"plr_gym", "stable_baselines3", "sb3_contrib", "gymnasium", "torch", "contextlib"}
)


def _user_stacklevel() -> int:
    """``warnings.warn``'s ``stacklevel`` (for a warning raised by the caller of this function) that
    lands on the innermost frame outside :data:`_LIBRARY_PACKAGES`: the user's call."""
    frame = sys._getframe(1)  # the caller: stacklevel 1
    level = 1
    while frame is not None:
        if str(frame.f_globals.get("__name__", "")).split(".")[0] not in _LIBRARY_PACKAGES:
            return level
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    return 1


def _sb3_rollout_position() -> tuple[int, int] | None:
    """``(index of this step in its rollout, steps per rollout)`` when an SB3 on-policy algorithm's
    ``collect_rollouts`` (PPO, A2C, RecurrentPPO, MaskablePPO) is on the stack, else ``None``."""
    frame = sys._getframe(1)
    for _ in range(40):
        if frame is None:
            return None
        if frame.f_code.co_name == "collect_rollouts":
            local = frame.f_locals
            index, length = local.get("n_steps"), local.get("n_rollout_steps")
            if isinstance(index, int) and isinstance(length, int) and 0 <= index < length:
                return index, length
            return None  # off-policy algorithms collect by train_freq: the step count applies
        frame = frame.f_back  # type: ignore[assignment]
    return None
