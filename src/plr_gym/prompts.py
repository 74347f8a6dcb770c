"""Prompts as levels: a learnability curriculum for RL post-training of language models.

In GRPO-style training with verifiable rewards each prompt is answered ``G`` times and every completion is
scored; a prompt whose ``G`` completions all fail or all succeed has zero advantage and teaches nothing.
:class:`PromptCurriculum` picks the prompts of each generation batch so that the compute goes to the prompts
the policy solves *sometimes*. It is numpy only (no torch, no transformers) and drives
:class:`~plr_gym.LevelSampler`, with prompt indices as levels.

Two selection rules, each from its paper:

``method="learnability"`` (default)
    Score each prompt by ``p·(1 − p)``, ``p`` its success rate: the variance of a Bernoulli outcome, maximal
    at ``p = 1/2`` and zero for prompts always or never solved. For rewards that are not 0/1 (-1/+1,
    partial credit, a sum of reward functions) the score is the variance of the prompt's rewards, which is
    ``p·(1 − p)`` for 0/1 rewards and, like GRPO's advantage, zero exactly when a group's rewards are all
    equal (``spread="std"``: its square root). "Learning to Reason at the Frontier of
    Learnability" (Foster & Foerster 2025, arXiv 2502.12272) selects prompts by this score (they take it
    from "No Regrets", Rutherford et al. 2024, which used it for environment levels). Here prompts are drawn
    with probability ``(1 − λ)·p(1 − p)/Σ p(1 − p) + λ/N_seen`` (``λ`` = ``uniform_mass``, 0 by default),
    plus an optional staleness term; that sampling rule is plr_gym's, the score is the paper's. By default
    the estimates of prompts solved less than half the time age (``evidence_half_life=50``,
    ``ageing="unsolved"``): a prompt read as never solved is measured again as the policy moves, which
    replaces the uniform floor; unseen prompts get 40% of the draws while some remain, 20% on datasets of
    20,000 prompts or more (``replay_prob="auto"``). These are the settings chosen by the study "Estimates
    that keep up" in docs/prompts.md. Rewards that an LLM judge or a flaky verifier flips now and then:
    ``reward_noise`` (not by default; docs/prompts.md, "Noisy rewards and large datasets").
``method="thompson"``
    Model Predictive Prompt Selection (MoPPS; Qu et al. 2025, arXiv 2507.04632): a ``Beta(a, b)`` posterior
    on each prompt's success rate, updated with the successes and failures of every group; each batch
    draws one ``θ_i ~ Beta(a_i, b_i)`` per prompt and takes the ``k`` prompts whose ``θ_i`` is closest to
    ``target`` (0.5). ``posterior_decay`` (``λ`` in the paper) discounts old evidence:
    ``a ← decay·a + (1 − decay)·a₀ + successes``, likewise ``b`` with failures.

Groups whose ``G`` outcomes are all equal can also be reported for filtering (``filter_groups=True``), as
DAPO's dynamic sampling drops them (Yu et al. 2025, arXiv 2503.14476): :meth:`PromptCurriculum.observe`
returns which completions to keep. GRESO (arXiv 2506.02177) skips such prompts before generating them;
the learnability score does the same in expectation (their weight is ``λ/N_seen`` only).

Example:
    >>> import numpy as np
    >>> from plr_gym.prompts import PromptCurriculum
    >>> cur = PromptCurriculum(num_prompts=6, seed=0)
    >>> true_p = np.array([0.0, 0.0, 0.5, 0.5, 1.0, 1.0])
    >>> rng = np.random.default_rng(0)
    >>> for _ in range(200):
    ...     ids = cur.next_prompts(4)                      # 4 prompts, each answered G = 8 times
    ...     per_completion = np.repeat(ids, 8)
    ...     keep = cur.observe(per_completion, rng.random(per_completion.size) < true_p[per_completion])
    >>> weights = cur.sampler.sample_weights()
    >>> bool(weights[2:4].sum() > 0.85)                # the p = 0.5 prompts get the draws
    True
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from plr_gym._prompt_checks import (
    check_choice,
    check_ids,
    check_labels,
    check_range,
    check_seed,
    check_threshold,
    groups_of,
    outcomes,
)
from plr_gym._prompt_state import (
    _STATE_VERSION,
    _is_int,
    check_config,
    check_header,
    checked_arrays,
    checked_counters,
    checked_seed,
    load_state,
    save_state,
)
from plr_gym._prompt_stats import _DEFAULT_REPLAY_PROB, _auto_replay_prob, _group_stats, _rounds
from plr_gym._sizes import allocating
from plr_gym.sampler import LevelSampler, _check_positive, _check_real, _check_unit, _state_rng

__all__ = ["AGEINGS", "ESTIMATES", "METHODS", "P_HISTOGRAM_BINS", "SPREADS", "PromptCurriculum"]

#: Prompt selection rules of :class:`PromptCurriculum`.
METHODS: tuple[str, ...] = ("learnability", "thompson")
#: Estimates of a prompt's learnability score: running averages over its groups, or the Beta posterior's.
ESTIMATES: tuple[str, ...] = ("running", "posterior")
#: Which measured prompts' estimates age with ``evidence_half_life``: all, or those whose success rate is
#: below 1/2 (training raises ``p``: a prompt never solved may come within reach, one solved stays solved).
AGEINGS: tuple[str, ...] = ("all", "unsolved")
#: the defaults chosen by the study "Estimates that keep up" (docs/prompts.md, rounds 2 and 3)
_DEFAULT_HALF_LIFE = 50.0
_DEFAULT_AGEING = "unsolved"
#: ``uniform_mass=None`` means: no floor for ``learnability`` whose estimates age (round 3: ageing re-measures
#: instead), else 0.1 (estimates that never age; MoPPS's uniform slots for ``thompson``, not in the study)
_FLOOR = 0.1
#: Learnability scores of a prompt's reward spread: its variance (``p·(1 − p)`` for 0/1 rewards) or its std.
SPREADS: tuple[str, ...] = ("variance", "std")

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
FloatArray = npt.NDArray[np.float64]
#: Monte Carlo posterior draws behind ``stats()["effective_prompts"]`` for ``method="thompson"``.
_THOMPSON_STAT_DRAWS = 16
#: Bins of the success-rate histogram of :meth:`PromptCurriculum.stats`.
P_HISTOGRAM_BINS: tuple[str, ...] = ("p=0", "0<p<.25", ".25<=p<=.75", ".75<p<1", "p=1")


def _reward_spread(episode: Any) -> float:
    """The strategy of a :class:`PromptCurriculum`'s sampler: its scores are the reward spreads that
    :meth:`PromptCurriculum.observe` computes from whole groups, not scores of single episodes."""
    raise TypeError(
        "a PromptCurriculum's sampler is fed by PromptCurriculum.observe, not by an episode scorer"
    )


class PromptCurriculum:
    """Choose the prompts of each generation batch by how learnable they are; numpy only.

    The loop: ``ids = cur.next_prompts(k)`` gives the ``k`` prompt indices (into your dataset) of the next
    generation batch; each is answered ``G`` times; ``cur.observe(per_completion_ids, rewards)`` takes one
    entry per completion. A prompt's reward mean, reward variance and success rate ``p`` are estimated
    from each group and averaged over groups with the step ``max(1/n, success_rate_alpha)`` after its
    ``n``-th group (the first group is taken as is; see :meth:`observe`); by default
    (``success_rate_alpha=1``) the latest group is the estimate.

    :param num_prompts: number of prompts in the dataset; prompt ids are ``0 .. num_prompts − 1``.
    :param method: ``"learnability"`` (draws ``∝ p(1 − p)``, arXiv 2502.12272) or ``"thompson"`` (MoPPS,
        Thompson sampling on a Beta posterior towards ``p ≈ target``, arXiv 2507.04632). See the module.
    :param seed: seed of the curriculum's random generators; same seed and same outcomes, same draws (every
        process of a data-parallel run builds its curriculum with the same seed and observes the same
        gathered outcomes, so all of them draw the same prompts).
    :param uniform_mass: ``λ`` in ``[0, 1]``, a uniform floor, or ``None`` (default): 0 for
        ``learnability`` with ``evidence_half_life`` (the default since round 3 of the study in
        docs/prompts.md; it was 0.1), else 0.1 (``thompson``; ``learnability`` with estimates that never
        age). ``learnability``: every seen prompt keeps at least ``λ/N_seen`` of the replay distribution,
        so a prompt whose ``p`` was 0 or 1 is re-measured now and then. Without a floor, prompts read as
        never solved are re-measured as their estimates age, and a prompt whose group was all solved is not
        drawn again (``ageing="unsolved"`` keeps its estimate): set ``uniform_mass=0.1`` if the policy may
        forget. ``thompson``: each slot of a batch is, with probability ``λ``, a uniformly drawn prompt.
    :param replay_prob: ``learnability`` only: probability, in ``[0, 1]``, that a draw replays a prompt
        already measured rather than trying an unseen one, while some are unseen (afterwards every draw
        replays). Replay starts with the first measured prompt: there is no uniform epoch first. Default
        ``"auto"``: set from the dataset's size, ``0.6 + 0.2·clip(log10(num_prompts / 2000), 0, 1)``
        (0.6 up to 2000 prompts, 0.8 from 20,000: on a dataset the budget does not exhaust, fewer draws go
        to unseen prompts; round 4 of the study in docs/prompts.md). It was 0.6 for every size until round
        4, 0.5 until round 3. A state saved before round 4 with 0.6 resumes with 0.6 under ``"auto"``.
    :param staleness_coef: ``learnability`` only: weight in ``[0, 1)`` of the PLR staleness distribution
        (prompts not drawn for long come back; see :class:`~plr_gym.LevelSampler`). Default 0.
    :param success_rate_alpha: smallest step of the running average of ``p`` over groups, in ``(0, 1]``.
        Default 1: each group replaces the estimate (0.5 until 2026-11-27: each new group counted half;
        the pre-registered study in docs/prompts.md, "Study: estimates that keep up", chose 1).
    :param spread: ``learnability``'s score of a prompt's rewards: ``"variance"`` (default; ``p·(1 − p)``
        for 0/1 rewards, the paper's score) or ``"std"`` (its square root). Both are computed from the
        rewards themselves, so partial credit (rewards 0.1 to 0.45 in a group) scores above 0 and a group
        whose rewards are all equal (zero GRPO advantage) adds 0, whatever the reward's scale.
    :param reward_range: ``(low, high)``: the rewards' range. Rewards outside it are refused
        (``ValueError``) and the scores are on its unit scale (variance divided by ``(high − low)²``).
        ``None`` (default): any finite reward is taken (the draws do not depend on the reward's scale: they
        are proportional to the scores, and every score scales alike).
    :param success_threshold: a reward ``r`` counts as a success when ``r >= success_threshold`` (inside
        ``reward_range``'s ``(low, high]`` if one is set). Successes make the success rate ``p`` (stats,
        the Beta posterior of ``thompson``), not the ``learnability`` score. ``None`` (default): the middle
        of ``reward_range`` (0 for -1/+1 rewards), else 0.5.
    :param success_fn: instead of the threshold, a function ``rewards (float array) -> bool array`` of the
        same shape; every statistic, the score included, is then of these 0/1 outcomes. Not with
        ``reward_range`` or ``success_threshold``.
    :param filter_groups: if True, :meth:`observe` marks the completions of groups whose outcomes are all
        equal (all failures or all successes) as not to keep, as DAPO's dynamic sampling drops them
        (arXiv 2503.14476). If False (default) it keeps every completion. The curriculum learns from every
        group either way.
    :param target: ``thompson`` only: the success rate to aim at, in ``(0, 1)``. Default 0.5.
    :param prior: ``thompson`` only: ``(a₀, b₀)`` of the Beta prior, both > 0. Default ``(1, 1)`` (uniform).
    :param posterior_decay: ``thompson`` only: MoPPS's ``λ`` in ``(0, 1]``; 1 keeps all evidence. Default 1.
    :param estimate: ``learnability`` only: the score the draws use. ``"running"`` (default): the running
        reward spread above. ``"posterior"``: ``E[p(1 − p)] = a·b/((a + b)(a + b + 1))`` under each prompt's
        Beta posterior (``prior``, ``posterior_decay``; its square root with ``spread="std"``), which keeps
        prompts whose groups were all equal above 0.
    :param evidence_half_life: ``learnability`` only: ``h > 0``, or ``None`` (estimates never age). Default
        50 (chosen by the study in docs/prompts.md, "Estimates that keep up", round 2). The clock is the
        :meth:`observe` calls that held a group (one per generation batch). A prompt last measured ``τ``
        calls ago has ``w = 2^(−τ/h)``; its score is ``w·v + (1 − w)·v̄``, ``v`` its estimate and ``v̄``
        the ``w``-weighted mean estimate of the measured prompts (of its label, with ``prompt_labels``),
        so prompts not measured for long are drawn again as the policy moves. With
        ``estimate="posterior"`` the evidence decays instead: ``a ← a₀ + w·(a − a₀)``, likewise ``b``.
    :param ageing: which measured prompts age: ``"unsolved"`` (default), those whose success rate is
        below 1/2 (training raises ``p``: a prompt never solved may since have come within reach, while
        one solved stays solved; the others keep ``w = 1``), or ``"all"``. Needs ``evidence_half_life``.
    :param prompt_labels: with ``evidence_half_life``: one int label per prompt (a topic, a difficulty
        level), so that stale estimates decay towards what prompts *like them* score now. ``None``
        (default): one label for all.
    :param reward_noise: ``learnability`` with ``estimate="running"`` only: ``ε`` in ``[0, 1/2)``, the
        probability that a 0/1 reward is flipped (an LLM judge, a flaky verifier). A prompt solved with
        probability ``p`` is then seen succeed with ``p_obs = ε + (1 − 2ε)·p``, whose variance is
        ``p_obs(1 − p_obs) = ε(1 − ε) + (1 − 2ε)²·p(1 − p)``: every prompt, solved or out of reach, looks
        learnable by ``ε(1 − ε)``. The score is de-biased: ``max(0, v − ε(1 − ε)) / (1 − 2ε)²``, ``v`` the
        running variance on the unit scale (0/1 rewards, or ``reward_range``'s ends); with ``spread="std"``
        its square root. Default 0 (the scores as measured). ``success_rate`` and the stats stay the
        observed ones. See docs/prompts.md, "Noisy rewards and large datasets" (round 4).

    An option of one method set away from its default with the other (``replay_prob``, ``staleness_coef``
    with ``thompson``; ``target`` with ``learnability``) is refused (``ValueError``), not ignored. ``prior``
    and ``posterior_decay`` apply to both: the posterior is kept for both methods.

    Example:
        >>> cur = PromptCurriculum(100, seed=0)
        >>> ids = cur.next_prompts(8)
        >>> ids.shape, ids.dtype
        ((8,), dtype('int64'))
        >>> keep = cur.observe(np.repeat(ids, 4), np.tile([1.0, 0.0, 0.0, 0.0], 8))
        >>> cur.success_rate[ids].tolist() == [0.25] * 8
        True
        >>> restored = PromptCurriculum(100, seed=0)
        >>> restored.load_state_dict(cur.state_dict())
        >>> bool((restored.next_prompts(8) == cur.next_prompts(8)).all())
        True
    """

    def __init__(
        self,
        num_prompts: int,
        *,
        method: str = "learnability",
        seed: int | None = None,
        uniform_mass: float | None = None,
        replay_prob: float | str = "auto",
        staleness_coef: float = 0.0,
        success_rate_alpha: float = 1.0,
        spread: str = "variance",
        reward_range: tuple[float, float] | None = None,
        success_threshold: float | None = None,
        success_fn: Callable[[FloatArray], Any] | None = None,
        filter_groups: bool = False,
        target: float = 0.5,
        prior: tuple[float, float] = (1.0, 1.0),
        posterior_decay: float = 1.0,
        estimate: str = "running",
        evidence_half_life: float | None = _DEFAULT_HALF_LIFE,
        prompt_labels: Any = None,
        ageing: str = _DEFAULT_AGEING,
        reward_noise: float = 0.0,
    ) -> None:
        if not _is_int(num_prompts) or int(num_prompts) < 1:
            raise ValueError(f"num_prompts must be a positive int, got {num_prompts!r}")
        check_choice("method", method, METHODS)
        self.num_prompts = int(num_prompts)
        self.method = method
        self._set_draw_options(uniform_mass, replay_prob, staleness_coef, success_rate_alpha, spread)
        self._set_reward_options(reward_range, success_threshold, success_fn, filter_groups)
        self._set_posterior_options(target, prior, posterior_decay)
        self._set_ageing_options(estimate, evidence_half_life, prompt_labels, ageing)
        self._set_noise_option(reward_noise)
        if uniform_mass is None and self.evidence_half_life is not None:
            self.uniform_mass = 0.0  # ageing re-measures the prompts read as never solved: no floor
        self._refuse_other_methods_options()
        self.seed = check_seed(seed)
        with allocating(
            "num_prompts", self.num_prompts
        ):  # refused as this class's argument, not the sampler's
            np.empty((16, self.num_prompts))  # about the arrays the curriculum and its sampler hold
        self.sampler = self._new_sampler(self.replay_prob)
        self._start_estimates()

    def _new_sampler(self, replay_prob: float) -> LevelSampler:
        """The sampler: it stores the spread that observe() computes (alpha = 1: each update replaces it)."""
        return LevelSampler(
            levels=range(self.num_prompts),
            strategy=_reward_spread,
            score_transform="power",
            temperature=1.0,
            staleness_coef=self.staleness_coef,
            replay_schedule="fixed",
            replay_prob=replay_prob,
            min_seen_ratio=0.0,
            uniform_mass=self.uniform_mass,
            alpha=1.0,
            seed=self.seed,
        )

    # ------------------------------------------------------------------ construction steps
    def _set_draw_options(
        self, uniform_mass: Any, replay_prob: Any, staleness_coef: Any, success_rate_alpha: Any, spread: Any
    ) -> None:
        self.uniform_mass = _FLOOR if uniform_mass is None else _check_unit("uniform_mass", uniform_mass)
        self._replay_auto = isinstance(replay_prob, str) and replay_prob == "auto"
        self.replay_prob = (
            (_auto_replay_prob(self.num_prompts) if self.method == "learnability" else _DEFAULT_REPLAY_PROB)
            if self._replay_auto
            else _check_unit("replay_prob", replay_prob)
        )
        self.staleness_coef = _check_unit("staleness_coef", staleness_coef)
        if self.staleness_coef == 1.0:
            raise ValueError("staleness_coef must be < 1 (at 1 the success rates would play no part)")
        self.success_rate_alpha = _check_unit("success_rate_alpha", success_rate_alpha, open_low=True)
        check_choice("spread", spread, SPREADS)
        self.spread = spread

    def _set_reward_options(
        self, reward_range: Any, success_threshold: Any, success_fn: Any, filter_groups: Any
    ) -> None:
        if success_fn is not None and not callable(success_fn):
            raise TypeError(f"success_fn must be a callable or None, got {type(success_fn).__name__}")
        self.success_fn = success_fn
        self.reward_range = check_range(reward_range)
        if success_fn is not None and (reward_range is not None or success_threshold is not None):
            raise ValueError(
                "success_fn judges each reward itself: reward_range and success_threshold would be ignored "
                "with it; pass one or the other"
            )
        self.success_threshold = check_threshold(success_threshold, self.reward_range)
        if not isinstance(filter_groups, (bool, np.bool_)):
            raise TypeError(f"filter_groups must be a bool, got {type(filter_groups).__name__}")
        self.filter_groups = bool(filter_groups)

    def _set_posterior_options(self, target: Any, prior: Any, posterior_decay: Any) -> None:
        self.target = _check_real("target", target)
        if not 0.0 < self.target < 1.0:
            raise ValueError(f"target must lie in (0, 1), got {target!r}")
        if not isinstance(prior, (tuple, list)) or len(prior) != 2:
            raise TypeError(f"prior must be a pair (a0, b0) of positive numbers, got {prior!r}")
        a0, b0 = (_check_real("prior", v) for v in prior)
        if a0 <= 0 or b0 <= 0:
            raise ValueError(f"prior must be a pair (a0, b0) of positive numbers, got {prior!r}")
        self.prior = (a0, b0)
        self.posterior_decay = _check_unit("posterior_decay", posterior_decay, open_low=True)

    def _set_ageing_options(
        self, estimate: Any, evidence_half_life: Any, prompt_labels: Any, ageing: Any
    ) -> None:
        method = self.method
        check_choice("estimate", estimate, ESTIMATES)
        if estimate != "running" and method != "learnability":
            raise ValueError(
                f"estimate={estimate!r} applies to method='learnability' only "
                f"(method={method!r} would ignore it)"
            )
        self.estimate = estimate
        if method != "learnability":
            for name, value, default in (
                ("evidence_half_life", evidence_half_life, _DEFAULT_HALF_LIFE),
                ("ageing", ageing, _DEFAULT_AGEING),
            ):
                if value is not None and value != default:
                    raise ValueError(
                        f"{name}={value!r} applies to method='learnability' only (method={method!r} would "
                        "ignore it)"
                    )
            evidence_half_life, ageing = None, "all"  # Thompson sampling keeps its own posterior_decay
        self.evidence_half_life = (
            None if evidence_half_life is None else _check_positive("evidence_half_life", evidence_half_life)
        )
        self.prompt_labels = check_labels(
            prompt_labels, self.num_prompts, self.estimate, self.evidence_half_life
        )
        check_choice("ageing", ageing, AGEINGS)
        if method == "learnability" and ageing != _DEFAULT_AGEING and self.evidence_half_life is None:
            raise ValueError(
                f"ageing={ageing!r} chooses which estimates age: it needs evidence_half_life (it is None)"
            )
        self.ageing = ageing

    def _set_noise_option(self, reward_noise: Any) -> None:
        self.reward_noise = _check_real("reward_noise", reward_noise)
        if not 0.0 <= self.reward_noise < 0.5:
            raise ValueError(f"reward_noise must lie in [0, 0.5), got {reward_noise!r}")
        if self.reward_noise > 0 and (self.method != "learnability" or self.estimate != "running"):
            raise ValueError(
                f"reward_noise={reward_noise!r} de-biases the running learnability score: it applies to "
                f"method='learnability' with estimate='running' only (method={self.method!r}, "
                f"estimate={self.estimate!r} would ignore it)"
            )

    def _refuse_other_methods_options(self) -> None:
        """An option of the other method, set away from its default, is refused, not ignored."""
        method = self.method
        unused = (
            [("target", self.target, 0.5)]
            if method == "learnability"
            else [
                ("replay_prob", self.replay_prob, _DEFAULT_REPLAY_PROB),
                ("staleness_coef", self.staleness_coef, 0.0),
            ]
        )
        for name, value, default in unused:
            if value != default:
                other = "thompson" if method == "learnability" else "learnability"
                raise ValueError(
                    f"{name}={value!r} applies to method={other!r} only (method={method!r} would ignore it)"
                )

    def _start_estimates(self) -> None:
        """Every prompt unmeasured: the running estimates, the posteriors at the prior, the counters at 0."""
        n = self.num_prompts
        a0, b0 = self.prior
        self._groups = np.zeros(n, dtype=np.int64)  # groups observed per prompt
        self._mean = np.zeros(n)  # running mean reward (reward units)
        self._var = np.zeros(n)  # running reward variance (reward units squared)
        self._rate = np.zeros(n)  # running success rate p
        # Thompson sampling's own generator (a separate stream, so that both methods' draws are reproducible)
        self._rng = np.random.default_rng(None if self.seed is None else [self.seed, 1])
        self._a = np.full(self.num_prompts, a0)
        self._b = np.full(self.num_prompts, b0)
        self._draws = np.zeros(self.num_prompts, dtype=np.int64)
        self._num_batches = 0
        self._num_groups = 0
        self._num_filtered = 0
        self._num_completions = 0
        self._clock = 0  # observe() calls that held at least one group
        self._measured_at = np.zeros(n, dtype=np.int64)  # the clock when each prompt's last group came

    def _decayed(
        self,
        var: FloatArray,
        post: tuple[FloatArray, FloatArray],
        rate: FloatArray,
        measured: BoolArray,
        measured_at: IntArray,
        clock: int,
    ) -> FloatArray:
        """The scores the draws use, for every prompt (0 where never measured): with ``evidence_half_life``
        ``h``, each measured prompt's score relaxes from its estimate ``v`` towards a prior ``v̄`` as it ages,
        ``w·v + (1 − w)·v̄`` with ``w = 2^(−τ/h)``, ``τ`` the observe() calls since its last group; ``v̄`` is
        the ``w``-weighted mean estimate of the measured prompts (of the same label, with
        ``prompt_labels``); with ``ageing="unsolved"`` only prompts whose success rate is below 1/2 relax
        (the others keep ``v``; ``v̄`` is computed alike). ``estimate="posterior"``:
        ``E[p(1 − p)] = a·b/((a + b)(a + b + 1))`` under each prompt's Beta posterior, whose evidence decays
        instead (where it ages): ``a ← a₀ + w·(a − a₀)``, likewise ``b``."""
        w = (
            np.ones(self.num_prompts)
            if self.evidence_half_life is None
            else np.exp2(-(clock - measured_at) / self.evidence_half_life)
        )
        # the weights of relaxing (only prompts solved less than half the time, with ageing="unsolved");
        # the prior below weighs every measured prompt by its own w
        relax = np.where(rate < 0.5, w, 1.0) if self.ageing == "unsolved" else w
        if self.estimate == "posterior":
            (a0, b0), (a, b) = self.prior, post
            a, b = a0 + relax * (a - a0), b0 + relax * (b - b0)
            score = a * b / ((a + b) * (a + b + 1.0))
            if self.spread == "std":
                score = np.sqrt(score)
            return np.asarray(np.where(measured, score, 0.0))
        score = np.where(measured, self._score_of(var), 0.0)
        if self.evidence_half_life is None:
            return np.asarray(score)
        w = np.where(measured, w, 0.0)
        labels = (
            np.zeros(self.num_prompts, dtype=np.int64) if self.prompt_labels is None else self.prompt_labels
        )
        size = int(labels.max()) + 1
        total = np.bincount(labels, weights=w, minlength=size)
        mass = np.bincount(labels, weights=w * score, minlength=size)
        with np.errstate(invalid="ignore", divide="ignore"):
            prior = np.where(total > 0, mass / np.where(total > 0, total, 1.0), 0.0)[labels]
        return np.asarray(np.where(measured, relax * score + (1.0 - relax) * prior, 0.0))

    # ------------------------------------------------------------------ read-only state
    @property
    def success_rate(self) -> FloatArray:
        """Each prompt's running success rate ``p`` (0 for prompts never measured); a copy."""
        return self._rate.copy()

    @property
    def reward_mean(self) -> FloatArray:
        """Each prompt's running mean reward, in reward units (0 for prompts never measured); a copy."""
        return self._mean.copy()

    @property
    def reward_variance(self) -> FloatArray:
        """Each prompt's running reward variance, in reward units squared (0 if never measured); a copy.
        With 0/1 rewards it equals ``p·(1 − p)``."""
        return self._var.copy()

    @property
    def scores(self) -> FloatArray:
        """The learnability score of each prompt that the draws use (see ``spread``; with
        ``evidence_half_life``, decayed as of the last :meth:`observe`); a copy. 0 for prompts never
        measured."""
        return self._decayed(
            self._var, (self._a, self._b), self._rate, self._groups > 0, self._measured_at, self._clock
        )

    @property
    def measured_at(self) -> IntArray:
        """For each prompt, the number of :meth:`observe` calls with groups (the clock of
        ``evidence_half_life``) when its last group came (0 if never measured); a copy."""
        return self._measured_at.copy()

    @property
    def seen(self) -> BoolArray:
        """Mask of the prompts measured at least once; a copy."""
        return self.sampler.seen

    @property
    def posterior(self) -> tuple[FloatArray, FloatArray]:
        """``(a, b)`` of each prompt's Beta posterior (kept for both methods; drives ``thompson``); copies."""
        return self._a.copy(), self._b.copy()

    @property
    def draws(self) -> IntArray:
        """How many times each prompt was drawn by :meth:`next_prompts`; a copy."""
        return self._draws.copy()

    @property
    def num_batches(self) -> int:
        """Number of :meth:`next_prompts` calls so far."""
        return self._num_batches

    def __len__(self) -> int:
        return self.num_prompts

    def __repr__(self) -> str:
        return (
            f"PromptCurriculum(num_prompts={self.num_prompts}, method={self.method!r}, "
            f"uniform_mass={self.uniform_mass}, seen={self.sampler.num_seen}, batches={self._num_batches})"
        )

    # ------------------------------------------------------------------ drawing
    def next_prompts(self, k: int) -> IntArray:
        """The ``k`` prompt indices of the next generation batch (``int64``; each is answered ``G`` times).

        ``learnability`` draws with replacement (a prompt may appear twice in a batch when few prompts are
        learnable); ``thompson`` returns ``k`` distinct prompts, so ``k <= num_prompts``.
        """
        if not _is_int(k) or int(k) < 1:
            raise ValueError(f"k must be a positive int, got {k!r}")
        k = int(k)
        if self.method == "thompson":
            if k > self.num_prompts:
                raise ValueError(
                    f"k={k} distinct prompts asked of method='thompson', but num_prompts={self.num_prompts}"
                )
            ids = self._thompson(k, self._rng)
        else:
            ids = np.asarray(self.sampler.sample(k), dtype=np.int64)
        np.add.at(self._draws, ids, 1)
        self._num_batches += 1
        return ids

    def _thompson(self, k: int, rng: np.random.Generator) -> IntArray:
        theta = rng.beta(self._a, self._b)
        n_uniform = int(rng.binomial(k, self.uniform_mass)) if self.uniform_mass > 0 else 0
        closest = k - n_uniform
        distance = np.abs(theta - self.target)
        if closest == self.num_prompts:
            chosen = np.argsort(distance, kind="stable")
        elif closest > 0:
            part = np.argpartition(distance, closest - 1)[:closest]
            chosen = part[np.argsort(distance[part], kind="stable")]
        else:
            chosen = np.empty(0, dtype=np.int64)
        if n_uniform:
            rest = np.ones(self.num_prompts, dtype=bool)
            rest[chosen] = False
            chosen = np.concatenate([chosen, rng.choice(np.flatnonzero(rest), n_uniform, replace=False)])
        return chosen.astype(np.int64)

    # ------------------------------------------------------------------ outcomes
    def observe(self, prompt_ids: Any, rewards: Any, groups: Any = None) -> BoolArray:
        """Record one generation batch's outcomes: one ``(prompt id, reward)`` entry per completion.

        Entries with the same prompt id form that prompt's group (in any order); or, with ``groups`` (one
        label per entry: the group each completion was generated in, as the trainer forms GRPO's groups),
        a prompt drawn twice in a batch has two groups: each is judged on its own (``filter_groups``) and
        they update the prompt one after the other, in the order of their first entries. A reward is a
        ``bool`` (a success or a failure, counted as 1 or 0) or a finite number, a success when ``>=
        success_threshold`` (inside ``reward_range`` if one is set), or judged by ``success_fn``. Every
        input is checked before anything is stored: a refused call (``TypeError``/``ValueError`` naming the
        argument) leaves the curriculum unchanged.

        Per group: its mean reward ``m_g``, its reward variance ``v_g = mean((r − m_g)²)`` (0 when all its
        rewards are equal) and its success share ``p_g``. Per prompt, after its ``n``-th group, with ``s =
        max(1/n, success_rate_alpha)`` and ``d = m_g − m``: ``m ← m + s·d``, ``v ← (1 − s)·v + s·v_g +
        s·(1 − s)·d²``, ``p ← p + s·(p_g − p)``; ``v`` is then the variance of the rewards pooled with
        weights ``s`` (for 0/1 rewards ``v = p·(1 − p)`` exactly).

        :return: a boolean mask over the entries: the completions to train on. All True unless
            ``filter_groups=True``, which marks False the completions of groups whose rewards are all
            equal (zero GRPO advantage).
        """
        ids = check_ids(prompt_ids, self.num_prompts)
        values, success = outcomes(
            rewards, ids.shape, self.success_fn, self.reward_range, self.success_threshold
        )
        inv, prompt_of = groups_of(ids, groups)
        if ids.size == 0:
            return np.zeros(0, dtype=bool)
        k = prompt_of.size  # number of groups, in order of their first entry
        n, s, group_mean, group_var, mixed = _group_stats(values, success, inv, k)
        touched = np.unique(prompt_of)
        count, mean, var, rate, a, b = self._updated_estimates(prompt_of, n, s, group_mean, group_var)
        if not (np.isfinite(mean[touched]).all() and np.isfinite(var[touched]).all()):
            raise ValueError("rewards are too large: their mean or variance overflows float64")
        clock = self._clock + 1
        measured_at = self._measured_at.copy()
        measured_at[touched] = clock
        self.sampler.update_batch(touched, self._score_of(var[touched]))  # cannot fail after our checks
        if self.evidence_half_life is not None or self.estimate != "running":
            seen = np.flatnonzero(count > 0)
            decayed = self._decayed(var, (a, b), rate, count > 0, measured_at, clock)
            self.sampler._replace_seen_scores(seen, decayed[seen])
        self._groups, self._mean, self._var, self._rate, self._a, self._b = count, mean, var, rate, a, b
        self._clock, self._measured_at = clock, measured_at
        self._num_groups += k
        self._num_filtered += int((~mixed).sum()) if self.filter_groups else 0
        self._num_completions += int(ids.size)
        if not self.filter_groups:
            return np.ones(ids.size, dtype=bool)
        return np.asarray(mixed[inv], dtype=bool)

    def _updated_estimates(
        self, prompt_of: IntArray, n: Any, s: Any, group_mean: FloatArray, group_var: FloatArray
    ) -> tuple[Any, ...]:
        """Copies of the per-prompt estimates (groups, mean, variance, success rate, posterior ``a``, ``b``)
        updated with each group, a prompt's groups one after the other in the order of their first entry."""
        rank = _rounds(prompt_of)
        count, mean, var = self._groups.copy(), self._mean.copy(), self._var.copy()
        rate, a, b = self._rate.copy(), self._a.copy(), self._b.copy()
        d, (a0, b0) = self.posterior_decay, self.prior
        with np.errstate(over="ignore", invalid="ignore"):
            for r in range(int(rank.max()) + 1):
                g = np.flatnonzero(rank == r)
                u = prompt_of[g]
                count[u] += 1
                step = np.maximum(1.0 / count[u], self.success_rate_alpha)
                delta = group_mean[g] - mean[u]
                var[u] = (1.0 - step) * var[u] + step * group_var[g] + step * (1.0 - step) * delta * delta
                mean[u] = mean[u] + step * delta
                rate[u] = rate[u] + step * (s[g] / n[g] - rate[u])
                a[u] = d * a[u] + (1.0 - d) * a0 + s[g]
                b[u] = d * b[u] + (1.0 - d) * b0 + (n[g] - s[g])
        return count, mean, var, rate, a, b

    def _score_of(self, var: FloatArray) -> FloatArray:
        """The learnability score of running variances: on ``reward_range``'s unit scale if one is set."""
        scale = 1.0 if self.reward_range is None else self.reward_range[1] - self.reward_range[0]
        if self.reward_noise > 0:  # de-biased for flipped rewards: (v − ε(1 − ε)) / (1 − 2ε)², at least 0
            eps = self.reward_noise
            unit = np.maximum(var / (scale * scale) - eps * (1.0 - eps), 0.0) / (1.0 - 2.0 * eps) ** 2
            return np.asarray(np.sqrt(unit) if self.spread == "std" else unit)
        if self.spread == "std":
            return np.asarray(np.sqrt(var) / scale)
        return np.asarray(var / (scale * scale))

    # ------------------------------------------------------------------ monitoring
    def sample_weights(self) -> FloatArray:
        """Probability that one slot of the next batch is each prompt.

        ``learnability``: the replay distribution (exact; unseen prompts share the exploration mass
        ``1 − replay_prob`` uniformly while some are unseen). ``thompson``: a Monte Carlo estimate from
        16 posterior draws of a fixed generator (does not touch the curriculum's own), for batches of the
        mean size drawn so far (``min(num_prompts, 64)`` before the first draw): a slot's distribution
        depends on the batch size, since a batch holds distinct prompts.
        """
        if self.method == "thompson":
            rng = np.random.default_rng([self._num_batches, 7])
            counts = np.zeros(self.num_prompts)
            k = round(self._draws.sum() / self._num_batches) if self._num_batches else 64
            k = max(1, min(self.num_prompts, k))
            for _ in range(_THOMPSON_STAT_DRAWS):
                np.add.at(counts, self._thompson(k, rng), 1.0)
            return np.asarray(counts / counts.sum())
        replay = self.sampler.sample_weights()
        p_replay = self.sampler.replay_probability()
        unseen = ~self.sampler.seen
        if unseen.any():
            explore = np.where(unseen, 1.0 / unseen.sum(), 0.0)
            return np.asarray(p_replay * replay + (1.0 - p_replay) * explore)
        return replay

    def stats(self) -> dict[str, float]:
        """Numbers to log (floats): ``seen_fraction``, ``replay_share`` (share of draws so far that replayed
        a measured prompt, ``learnability``), ``effective_prompts`` (``exp`` of the entropy of
        :meth:`sample_weights`: how many prompts the draws are spread over), ``mean_p`` and the histogram of
        the measured prompts' ``p`` (``p_hist/<bin>``, shares over :data:`P_HISTOGRAM_BINS`), and
        ``filtered_share`` (share of groups marked to drop, with ``filter_groups``). ``O(N log N)``."""
        seen = self.sampler.seen
        out: dict[str, float] = {"seen_fraction": float(seen.mean())}
        replays, explores = self.sampler.num_replay_samples, self.sampler.num_explore_samples
        if self.method == "learnability" and replays + explores:
            out["replay_share"] = replays / (replays + explores)
        w = self.sample_weights()
        w = w[w > 0]
        out["effective_prompts"] = float(np.exp(-(w * np.log(w)).sum()))
        if seen.any():
            p = self.success_rate[seen]
            out["mean_p"] = float(p.mean())
            bins = (p == 0, (p > 0) & (p < 0.25), (p >= 0.25) & (p <= 0.75), (p > 0.75) & (p < 1), p == 1)
            for name, mask in zip(P_HISTOGRAM_BINS, bins):
                out[f"p_hist/{name}"] = float(mask.mean())
        if self._num_groups:
            out["filtered_share"] = self._num_filtered / self._num_groups
        return out

    # ------------------------------------------------------------------ checkpoints
    def _config(self) -> dict[str, Any]:
        return {
            "num_prompts": self.num_prompts,
            "method": self.method,
            "uniform_mass": self.uniform_mass,
            "replay_prob": self.replay_prob,
            "staleness_coef": self.staleness_coef,
            "success_rate_alpha": self.success_rate_alpha,
            "spread": self.spread,
            "reward_range": None if self.reward_range is None else list(self.reward_range),
            "success_threshold": self.success_threshold,
            "success_fn": None
            if self.success_fn is None
            else getattr(self.success_fn, "__qualname__", "callable"),
            "filter_groups": self.filter_groups,
            "target": self.target,
            "prior": list(self.prior),
            "posterior_decay": self.posterior_decay,
            "estimate": self.estimate,
            "evidence_half_life": self.evidence_half_life,
            "prompt_labels": None if self.prompt_labels is None else self.prompt_labels.tolist(),
            "ageing": self.ageing,
            "reward_noise": self.reward_noise,
            "seed": self.seed,
        }

    def state_dict(self) -> dict[str, Any]:
        """The whole state (config, the sampler's state, posteriors, counters, generator): numpy arrays and
        JSON-compatible values. :meth:`load_state_dict` of a curriculum built alike continues exactly."""
        return {
            "version": _STATE_VERSION,
            "config": self._config(),
            "sampler": self.sampler.state_dict(),
            "posterior_a": self._a.copy(),
            "posterior_b": self._b.copy(),
            "draws": self._draws.copy(),
            "groups": self._groups.copy(),
            "reward_mean": self._mean.copy(),
            "reward_variance": self._var.copy(),
            "success_rate": self._rate.copy(),
            "measured_at": self._measured_at.copy(),
            "num_batches": self._num_batches,
            "num_groups": self._num_groups,
            "num_filtered": self._num_filtered,
            "num_completions": self._num_completions,
            "clock": self._clock,
            "rng": self._rng.bit_generator.state,
        }

    def load_state_dict(self, state: Any) -> None:
        """Restore a :meth:`state_dict`; every member is checked first, a refused state (``ValueError``)
        leaves the curriculum unchanged."""
        check_header(state, self.state_dict())
        mine = self._config()
        if self._adopts_old_replay_prob(state["config"]):
            mine["replay_prob"] = _DEFAULT_REPLAY_PROB
        theirs = check_config(mine, state["config"])
        arrays = checked_arrays(state, self.num_prompts)
        counters = checked_counters(state, arrays)
        rng = _state_rng(state["rng"])
        seed = checked_seed(theirs.get("seed"))
        sampler_state = state["sampler"]
        measured = arrays["groups"] > 0
        scores = np.asarray(sampler_state.get("scores") if isinstance(sampler_state, dict) else None)
        expected = self._decayed(
            arrays["reward_variance"],
            (arrays["posterior_a"], arrays["posterior_b"]),
            arrays["success_rate"],
            measured,
            arrays["measured_at"],
            counters["clock"],
        )
        if scores.shape != (self.num_prompts,) or not np.array_equal(scores[measured], expected[measured]):
            raise ValueError("state 'sampler' scores do not match 'reward_variance': the state is corrupt")
        sampler = (
            self.sampler
            if mine["replay_prob"] == self.replay_prob
            else self._new_sampler(mine["replay_prob"])
        )
        sampler.load_state_dict(sampler_state)  # checks everything before it assigns anything
        self.sampler, self.replay_prob = sampler, mine["replay_prob"]
        self.seed = seed
        self._a = arrays["posterior_a"]
        self._b = arrays["posterior_b"]
        self._draws = arrays["draws"]
        self._groups = arrays["groups"]
        self._mean = arrays["reward_mean"]
        self._var = arrays["reward_variance"]
        self._rate = arrays["success_rate"]
        self._num_batches = counters["num_batches"]
        self._num_groups = counters["num_groups"]
        self._num_filtered = counters["num_filtered"]
        self._num_completions = counters["num_completions"]
        self._clock = counters["clock"]
        self._measured_at = arrays["measured_at"]
        self._rng = rng

    def _adopts_old_replay_prob(self, theirs: Any) -> bool:
        """A state written before round 4 (its config has no ``reward_noise``) with round 3's default
        ``replay_prob=0.6`` resumes with it under ``replay_prob="auto"``, whatever the dataset's size."""
        return (
            self._replay_auto
            and self.method == "learnability"
            and isinstance(theirs, dict)
            and "reward_noise" not in theirs
            and theirs.get("replay_prob") == _DEFAULT_REPLAY_PROB
        )

    def save(self, path: str | os.PathLike[str], extra: dict[str, Any] | None = None) -> None:
        """Write :meth:`state_dict` to ``path`` as ``.npz`` (arrays + JSON, never unpickled), atomically.

        :param extra: JSON-compatible values stored next to the state (a trainer's own bookkeeping), read
            back by :meth:`load_from`.
        """
        save_state(path, self.state_dict(), extra)

    def load_from(self, path: str | os.PathLike[str]) -> dict[str, Any] | None:
        """Restore the state written by :meth:`save`; returns the ``extra`` saved with it.

        :raises ValueError: naming ``path`` if the file is not a readable PromptCurriculum checkpoint (its
            ``extra`` included), or if its state is refused; either leaves the curriculum unchanged.
        """
        state, extra = load_state(path)
        try:
            self.load_state_dict(state)
        except ValueError as exc:
            raise ValueError(f"{os.fspath(path)}: {exc}") from exc
        return extra
