"""Episode scores from ``(T, N)`` rollout arrays, in JAX: :class:`plr_gym.scoring.EpisodeScorer`'s twin.

:class:`EpisodeScorer` cuts a rollout of ``T`` steps of ``N`` envs into episodes and scores each one with a
PLR strategy, as pure functions on a pytree state (:class:`ScorerState`: the episodes still running at the
rollout's end, and each level's best return for ``max_mc``):

=========================  ===============================================================
strategy                   score of one episode
=========================  ===============================================================
``value_l1``               ``mean_t |A_t|`` (PLR's L1 value loss)
``positive_value_loss``    ``mean_t max(A_t, 0)`` (Robust PLR)
``max_mc``                 ``mean_t (R_max − V(s_t))``, ``R_max`` the level's best return
``learnability``           the episode's outcome (``successes`` at its last step)
=========================  ===============================================================

``partial_episodes="stitch"`` (default) keeps an episode that runs past the rollout's end open and scores
it once, over all its steps, when it completes; ``"commit"`` scores the running chunk at the rollout's
end (level-replay's behaviour: reported after the completed episodes, not when its score is 0, and for
``value_l1`` with level-replay's extra row ``|0 - V(s_T)|``) and its continuation as an episode of its
own. The scores come out in the numpy scorer's order (env by env, episodes in time order), as fixed-size
arrays with a mask, ready for :meth:`plr_gym.jax.LevelSampler.update`.

Declared difference: an episode with an unknown outcome (``successes`` NaN at its end) is not reported
and counts in ``num_dropped`` (the numpy scorer raises ``ValueError``).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar, cast

import jax
import jax.numpy as jnp

from plr_gym.jax._common import float_dtype, int_dtype
from plr_gym.scoring import PARTIAL_EPISODES, REFERENCE_TAIL_STRATEGIES

__all__ = ["JAX_STRATEGIES", "EpisodeScorer", "ScorerState"]

# jax.Array; Any for the type checker, which runs on a stack without JAX (Python 3.11)
Array = Any
_F = TypeVar("_F", bound=Callable[..., Any])

#: The strategies scored in array code.
JAX_STRATEGIES: tuple[str, ...] = ("value_l1", "positive_value_loss", "max_mc", "learnability")


def _jit(static: tuple[int, ...] = (0,)) -> Callable[[_F], _F]:
    return cast(Callable[[_F], _F], functools.partial(jax.jit, static_argnums=static))


class ScorerState(NamedTuple):
    """Open episodes (one accumulator per env) and each level's best return (``max_mc``)."""

    active: Array  # (N,) an episode with an observed start is accumulating
    level: Array  # (N,) its level
    sum_term: Array  # (N,) sum of |A| or max(A, 0) over its steps so far
    sum_value: Array  # (N,) sum of V(s_t) (max_mc)
    ret: Array  # (N,) its return so far (max_mc)
    steps: Array  # (N,) its steps so far
    max_returns: Array  # (num_levels,) best complete return per level, -inf if none
    num_scored: Array
    num_dropped: Array


class _Chunk(NamedTuple):
    """What one env's step emits: an episode (or a committed chunk) ending at that step."""

    emit: Array
    complete: Array
    level: Array
    mean_term: Array
    mean_value: Array
    ret: Array
    outcome: Array
    steps: Array  # the chunk's steps
    running: Array  # a committed chunk of an episode still running at the rollout's end


@dataclasses.dataclass(frozen=True)
class EpisodeScorer:
    """Scores the episodes of ``(T, N)`` rollouts of levels ``0 .. num_levels − 1``.

    :param num_levels: levels are positions below this (``max_mc`` keeps a best return per level).
    :param strategy: one of :data:`JAX_STRATEGIES`.
    :param partial_episodes: ``"stitch"`` (default) or ``"commit"``, as in
        :class:`plr_gym.scoring.EpisodeScorer`.

    Example:
        >>> import jax.numpy as jnp
        >>> from plr_gym.jax.scoring import EpisodeScorer
        >>> scorer = EpisodeScorer(num_levels=10)
        >>> state = scorer.init(n_envs=1)
        >>> starts = jnp.array([[1], [0], [0], [1]], bool)            # episodes: steps 0-2, then 3-...
        >>> levels = jnp.array([[4], [4], [4], [7]])
        >>> adv = jnp.array([[0.5], [-0.5], [1.0], [2.0]])
        >>> state, out_levels, scores, mask = scorer.process_rollout(
        ...     state, levels=levels, episode_starts=starts, dones=jnp.array([False]),
        ...     rewards=jnp.zeros((4, 1)), values=jnp.zeros((4, 1)), advantages=adv)
        >>> out_levels[mask].tolist(), [round(float(s), 6) for s in scores[mask]]
        ([4], [0.666667])
        >>> bool(state.active[0])                                    # level 7's episode stays open
        True
    """

    num_levels: int
    strategy: str = "value_l1"
    partial_episodes: str = "stitch"

    def __post_init__(self) -> None:
        n = self.num_levels
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"num_levels must be an int >= 1, got {n!r}")
        if self.strategy not in JAX_STRATEGIES:
            raise ValueError(
                f"strategy={self.strategy!r} is not scored by plr_gym.jax; choose one of "
                f"{', '.join(JAX_STRATEGIES)}"
            )
        if self.partial_episodes not in PARTIAL_EPISODES:
            raise ValueError(
                f"partial_episodes={self.partial_episodes!r} is not supported; choose stitch or commit"
            )
        if self.partial_episodes == "commit" and self.strategy == "learnability":
            raise ValueError(
                "strategy='learnability' scores episode outcomes, which an unfinished episode does not have: "
                "use partial_episodes='stitch'"
            )

    def init(self, n_envs: int) -> ScorerState:
        """No open episode, no best return."""
        fdt, idt = float_dtype(), int_dtype()
        zf, zi = jnp.zeros(n_envs, fdt), jnp.zeros(n_envs, idt)
        return ScorerState(
            active=jnp.zeros(n_envs, bool),
            level=zi,
            sum_term=zf,
            sum_value=zf,
            ret=zf,
            steps=zi,
            max_returns=jnp.full(self.num_levels, -jnp.inf, fdt),
            num_scored=jnp.zeros((), idt),
            num_dropped=jnp.zeros((), idt),
        )

    def _term(self, advantages: Array) -> Array:
        if self.strategy == "value_l1":
            return jnp.abs(advantages)
        if self.strategy == "positive_value_loss":
            return jnp.maximum(advantages, 0.0)
        return jnp.zeros_like(advantages)

    def _env(self, carry: tuple[Array, ...], column: tuple[Array, ...]) -> tuple[_Chunk, Any]:
        """One env's rollout: scan over its steps. Returns the final accumulator, the chunks emitted at
        each step, and the episodes dropped."""
        commit = self.partial_episodes == "commit"
        starts, ends, levels, terms, values, rewards, outcomes = column
        n_steps = starts.shape[0]
        active, level, sum_term, sum_value, ret, steps = carry
        # a carried episode whose env was reset never completes
        dropped0 = (active & starts[0]).astype(int_dtype())

        def step(acc: tuple[Array, ...], x: tuple[Array, ...]) -> tuple[tuple[Array, ...], _Chunk]:
            observed, level, s_term, s_val, r, n = acc
            t, start, end, lvl, term, val, rew, outcome = x
            fresh = start | (n == 0)  # a new chunk begins here
            observed = jnp.where(start, True, jnp.where(n == 0, False, observed))
            s_term = jnp.where(fresh, 0.0, s_term) + term
            s_val = jnp.where(fresh, 0.0, s_val) + val
            r = jnp.where(fresh, 0.0, r) + rew
            n = jnp.where(fresh, 0, n) + 1
            level = jnp.where(fresh, lvl, level)
            last = t == n_steps - 1
            emit = end & (observed | commit)
            emit |= commit & last & ~end
            chunk = _Chunk(
                emit=emit,
                complete=end & observed,
                level=level,
                mean_term=s_term / n,
                mean_value=s_val / n,
                ret=r,
                outcome=outcome,
                steps=n,
                running=commit & last & ~end,
            )
            n = jnp.where(end | (commit & last), 0, n)
            return (observed, level, s_term, s_val, r, n), chunk

        # the carried episode continues into step 0 unless the env was reset there
        carried = active & ~starts[0]
        init = (
            carried,
            level,
            jnp.where(carried, sum_term, 0.0),
            jnp.where(carried, sum_value, 0.0),
            jnp.where(carried, ret, 0.0),
            jnp.where(carried, steps, 0),
        )
        xs = (jnp.arange(n_steps), starts, ends, levels, terms, values, rewards, outcomes)
        (observed, level, s_term, s_val, r, n), chunks = jax.lax.scan(step, init, xs)
        # what is still running at the rollout's end: open if its start was observed (stitch), else dropped
        running = n > 0
        unobserved = (running & ~observed).astype(int_dtype())
        # an episode that neither ended nor was observed from its start: dropped when it ends (stitch)
        lost = (ends & ~chunks.emit).sum().astype(int_dtype())
        dropped = dropped0 + (0 if commit else unobserved + lost)
        final = (running & observed, level, s_term, s_val, r, n)
        return chunks, (final, dropped)

    @_jit()
    def process_rollout(
        self,
        state: ScorerState,
        *,
        levels: Array,
        episode_starts: Array,
        dones: Array,
        rewards: Array,
        values: Array,
        advantages: Array | None = None,
        successes: Array | None = None,
        last_values: Array | None = None,
    ) -> tuple[ScorerState, Array, Array, Array]:
        """Score the episodes that complete in this rollout (arrays as :meth:`plr_gym.scoring.EpisodeScorer.
        process_rollout`: ``(T, N)``, ``dones`` ``(N,)`` for the last step or ``(T, N)`` for every step;
        ``last_values`` ``(N,)``, ``V(s_T)``, default 0, read by ``"commit"``'s ``value_l1`` chunks).

        :return: ``(state, levels, scores, mask)``, each of ``N·T`` entries in the numpy scorer's order
            (env by env, in time order; with ``"commit"`` the running chunks after every completed
            episode, env by env); ``mask`` marks the reported episodes.
        """
        starts = jnp.asarray(episode_starts, bool)
        n_steps, n_envs = starts.shape
        columns = self._columns(state, starts, levels, dones, rewards, values, advantages, successes)
        carry = (state.active, state.level, state.sum_term, state.sum_value, state.ret, state.steps)
        chunks, (final, dropped) = jax.vmap(self._env)(carry, columns)
        flat = jax.tree.map(lambda a: a.reshape(-1), chunks)  # env-major: the numpy scorer's order
        max_returns, scores, emit, unknown = self._scores(state.max_returns, flat)
        out_levels = flat.level
        if self.partial_episodes == "commit":  # as level-replay (plr_gym.scoring.EpisodeScorer)
            out_levels, scores, emit = self._committed(flat, scores, emit, last_values, n_steps, n_envs)
        active, level, s_term, s_val, r, n = final
        new_state = ScorerState(
            active=active,
            level=level,
            sum_term=s_term,
            sum_value=s_val,
            ret=r,
            steps=n,
            max_returns=max_returns,
            num_scored=state.num_scored + emit.sum(),
            num_dropped=(state.num_dropped + dropped.sum() + unknown).astype(state.num_dropped.dtype),
        )
        return new_state, out_levels, jnp.where(emit, scores, 0.0), emit

    def _columns(
        self,
        state: ScorerState,
        starts: Array,
        levels: Array,
        dones: Array,
        rewards: Array,
        values: Array,
        advantages: Array | None,
        successes: Array | None,
    ) -> tuple[Array, ...]:
        """The rollout's arrays as one row per env (``(N, T)``): starts, ends, levels, per-step score terms,
        values, rewards, outcomes (NaN without ``successes``)."""
        fdt = float_dtype()
        n_steps, n_envs = starts.shape
        dones = jnp.asarray(dones, bool)
        if dones.ndim == 2:
            ends = dones
        else:
            ends = jnp.concatenate([starts[1:], dones.reshape(1, n_envs)], axis=0)
        adv = jnp.zeros((n_steps, n_envs), fdt) if advantages is None else jnp.asarray(advantages, fdt)
        outcomes = (
            jnp.full((n_steps, n_envs), jnp.nan, fdt) if successes is None else jnp.asarray(successes, fdt)
        )
        return (
            starts.T,
            ends.T,
            jnp.asarray(levels).astype(state.level.dtype).T,
            self._term(adv).T,
            jnp.asarray(values, fdt).T,
            jnp.asarray(rewards, fdt).T,
            outcomes.T,
        )

    def _scores(self, max_returns: Array, flat: _Chunk) -> tuple[Array, Array, Array, Array]:
        """Each chunk's score by the strategy: ``(max_returns, scores, emit, unknown)``, ``unknown`` the
        episodes dropped for want of an outcome (``learnability``)."""
        emit, unknown = flat.emit, jnp.zeros((), flat.emit.dtype).sum()
        if self.strategy == "max_mc":

            def best(mr: Array, x: _Chunk) -> tuple[Array, Array]:
                known = mr[x.level]
                r_max = jnp.where(
                    x.complete, jnp.maximum(known, x.ret), jnp.where(jnp.isfinite(known), known, x.ret)
                )
                mr = mr.at[x.level].set(jnp.where(x.emit & x.complete, r_max, known))
                return mr, r_max

            max_returns, r_max = jax.lax.scan(best, max_returns, flat)
            return max_returns, r_max - flat.mean_value, emit, unknown
        if self.strategy == "learnability":
            known = ~jnp.isnan(flat.outcome)
            return max_returns, jnp.where(flat.outcome == 1.0, 1.0, 0.0), emit & known, (emit & ~known).sum()
        return max_returns, flat.mean_term, emit, unknown

    def _committed(
        self, flat: _Chunk, scores: Array, emit: Array, last_values: Array | None, n_steps: int, n_envs: int
    ) -> tuple[Array, Array, Array]:
        """``partial_episodes="commit"``: running chunks scored as level-replay does (``value_l1``'s extra
        row ``|0 - V(s_T)|``), a zero chunk not committed, and the running chunks after every completed
        episode."""
        fdt = float_dtype()
        running = flat.running
        if self.strategy in REFERENCE_TAIL_STRATEGIES:  # one more row: |0 - V(s_T)|
            boot = jnp.zeros(n_envs, fdt) if last_values is None else jnp.asarray(last_values, fdt)
            tail = jnp.abs(jnp.repeat(boot.reshape(n_envs), n_steps))
            steps = flat.steps.astype(fdt)
            scores = jnp.where(running, (flat.mean_term * steps + tail) / (steps + 1.0), scores)
        emit = emit & ~(running & (scores == 0.0))  # a zero chunk is not committed
        size = n_steps * n_envs
        order = jnp.argsort(running.astype(int_dtype()) * size + jnp.arange(size))  # chunks last
        return flat.level[order], scores[order], emit[order]
