"""Estimates that keep up: prompt curricula against the oracle on three simulated GRPO learners.

``benchmarks/prompts/prompt_curriculum.py`` shows the mechanism on one learner; this one asks how much of the
possible gain a curriculum's *estimates* capture, on learners where estimates go stale in three ways
(issue 35, item 5). Simulated learners with known learning curves, not LLM experiments.

The learners. Prompt ``i`` (of ``N``, in ``K = 20`` topics ``c_i``) is solved with probability
``p_i = sigmoid(s + t_{c_i} + a_i − d_i)``: ``d_i`` its difficulty (a quarter easy, ``p ≈ 0.99``; four in ten
out of reach at the start, ``p < 0.01``; the rest in between, as in ``prompt_curriculum.py``), ``a_i`` what
was learned on it, ``t_c`` what was learned on its topic, ``s`` a skill shared by all. Each step answers
``B`` prompts ``G`` times; a group whose ``G`` outcomes are all equal has zero advantage and teaches
nothing; every group with mixed outcomes (an *informative* group) teaches:

- ``transfer`` (a): ``a_i += 0.15``, ``t_{c_i} += 0.008``, ``s += 0.0005`` per informative group: what is
  learned on a prompt carries to the prompts of its topic, so prompts measured at ``p = 0`` come within
  reach without being drawn;
- ``fast`` (b): ``a_i += 0.6``, ``t_{c_i} += 0.004``, ``s += 0.0005``: a trained prompt goes from
  ``p = 0.5`` to solved in two or three steps;
- ``adam`` (c): the ``transfer`` learner with each step's update normalised, as Adam's is: the step has
  the same length however many groups are informative (``m``); the gradients of different prompts being
  orthogonal, each informative group gets ``sqrt(8/m)`` of the ``transfer`` increments (8 ≈ uniform
  sampling's informative groups per step), so ``m`` groups teach ``sqrt(8m)`` groups' worth, not ``m``; a
  step with no informative group changes nothing.

Arms, on the same prompts and the same budget (``steps`` steps of ``B`` prompts):

- ``uniform``: shuffled epochs over the prompts (TRL's default order);
- ``oracle``: the library's rule with the true pass rates: draws ``∝ (1 − λ)·p(1 − p)/Σ p(1 − p) + λ/N``
  with ``λ = 0.1`` (the default ``uniform_mass`` when the study began; fixed since), with replacement, every
  prompt known from the start; ``oracle_u0``: the same with ``λ = 0`` (reported beside it from round 3);
- every other arm: :class:`plr_gym.prompts.PromptCurriculum` with the keyword arguments in ``ARMS``
  (``default``: none), fed every group with ``observe(..., groups=)``.

Metrics, per seed (the learner's prompts, outcomes and the curricula's seeds fixed by the seed):

- AUC: the mean accuracy over all prompts (mean true ``p``), averaged over the ``steps`` steps (the area
  under the accuracy curve per rollout, divided by the budget);
- the AUC gain of an arm: its AUC minus uniform's on the same seed; the *fraction of the oracle's gain*:
  mean gain of the arm / mean gain of the oracle over seeds, with a 95% percentile bootstrap CI (seeds
  resampled, the pairs kept);
- final accuracy (mean true ``p`` after the last step), and its paired difference to uniform with a 95% t
  interval over seeds.

Usage::

    python benchmarks/prompts/prompt_estimates.py [--quick] [--seeds 0 1 2] [--arms default oracle ...] \\
        [--learners transfer fast adam] [--out benchmarks/results/prompt_estimates.md]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))  # benchmarks/common: _provenance
from _provenance import cpu_model, git_commit, load_average
from plr_gym.prompts import PromptCurriculum

TOPICS = 20
#: learner name -> (own increment, topic increment, shared increment, normalised per step)
LEARNERS: dict[str, tuple[float, float, float, bool]] = {
    "transfer": (0.15, 0.008, 0.0005, False),
    "fast": (0.6, 0.004, 0.0005, False),
    "adam": (0.15, 0.008, 0.0005, True),
}
#: the informative groups per step that an ``adam`` step's increments are normalised to
ADAM_REFERENCE = 8.0
#: round 4 (issue 44, item 3): regime name -> (learner, prompts, prompts per step B, steps, flip probability
#: ε). A flipped reward is seen by the curriculum only (LLM judges, flaky verifiers): each observed outcome
#: is the true one XOR a Bernoulli(ε) flip from its own generator; the learner learns from the true
#: outcomes, so every arm's learner meets the same task. ``None`` sizes: the study's (2000 prompts, B = 32,
#: 500 steps; ``--quick``: 300, 32, 60). The learners' names are regimes too (no flips, the study's sizes).
REGIMES: dict[str, tuple[str, int | None, int | None, int | None, float]] = {
    "transfer": ("transfer", None, None, None, 0.0),
    "fast": ("fast", None, None, None, 0.0),
    "adam": ("adam", None, None, None, 0.0),
    "noise10": ("transfer", None, None, None, 0.10),
    "noise20": ("transfer", None, None, None, 0.20),
    "noise15": ("transfer", None, None, None, 0.15),  # round 4's held-out noise level
    "large20k": ("transfer", 20000, 64, 400, 0.0),  # 25,600 draws: 1.28 passes over the prompts
    "large50k": ("transfer", 50000, 64, 400, 0.0),  # round 4's held-out size: 0.51 passes
    "large20k_fast": ("fast", 20000, 64, 400, 0.0),
    "large20k_adam": ("adam", 20000, 64, 400, 0.0),
}
#: arm name -> PromptCurriculum keyword arguments (``uniform`` and ``oracle`` are not curricula)
#: the pre-registered arms of the study (docs/prompts.md, "Study: estimates that keep up"); ``prompt_labels``
#: given as a string is the learner's ``"topics"`` or ``"difficulty"`` kind (options, not default candidates).
#: Round 1's arms ran when estimates did not age by default; they pin that (``evidence_half_life=None``,
#: ``ageing="all"``), so they reproduce at later commits. ``default`` is the defaults of the commit that runs
#: (round 1: ``success_rate_alpha=0.5``, no ageing; round 2: ``success_rate_alpha=1``, no ageing; round 3:
#: round 2's outcome; since: round 3's outcome, ``u0_rp0.6``).
ARMS: dict[str, dict[str, Any] | None] = {
    "uniform": None,
    "oracle": None,
    "default": {},  # the library's defaults at the commit that runs
    "a1": {"success_rate_alpha": 1.0, "evidence_half_life": None},
    "a1_rp0.8": {"success_rate_alpha": 1.0, "replay_prob": 0.8, "evidence_half_life": None},
    "a1_rp0.8_u0.05": {
        "success_rate_alpha": 1.0,
        "replay_prob": 0.8,
        "uniform_mass": 0.05,
        "evidence_half_life": None,
    },
    "a1_rp0.8_u0.2": {
        "success_rate_alpha": 1.0,
        "replay_prob": 0.8,
        "uniform_mass": 0.2,
        "evidence_half_life": None,
    },
    "a1_rp0.8_h300": {
        "success_rate_alpha": 1.0,
        "replay_prob": 0.8,
        "evidence_half_life": 300.0,
        "ageing": "all",
    },
    "a1_rp0.8_h100_difficulty": {
        "success_rate_alpha": 1.0,
        "replay_prob": 0.8,
        "evidence_half_life": 100.0,
        "ageing": "all",
        "prompt_labels": "difficulty",
    },
    "a1_rp0.8_h100_topics": {
        "success_rate_alpha": 1.0,
        "replay_prob": 0.8,
        "evidence_half_life": 100.0,
        "ageing": "all",
        "prompt_labels": "topics",
    },
}
#: round 2 (plan amendment in docs/prompts.md): only prompts never or seldom solved age
ARMS.update(
    {
        "un50": {"evidence_half_life": 50.0, "ageing": "unsolved"},
        "un100": {"evidence_half_life": 100.0, "ageing": "unsolved"},
        "un50_rp0.8": {"evidence_half_life": 50.0, "ageing": "unsolved", "replay_prob": 0.8},
        "un100_rp0.8": {"evidence_half_life": 100.0, "ageing": "unsolved", "replay_prob": 0.8},
        "un50_difficulty": {"evidence_half_life": 50.0, "ageing": "unsolved", "prompt_labels": "difficulty"},
    }
)
ROUND2_ARMS = [
    "uniform",
    "oracle",
    "default",
    "un50",
    "un100",
    "un50_rp0.8",
    "un100_rp0.8",
    "un50_difficulty",
]
#: round 3 (plan amendment in docs/prompts.md): no uniform floor (ageing re-measures instead), fewer draws on
#: unseen prompts, shorter half-lives; ``oracle_u0`` (the oracle without its floor) is reported, not decided
#: on
ARMS.update(
    {
        "oracle_u0": None,
        "u0": {"uniform_mass": 0.0},
        "u0_rp0.6": {"uniform_mass": 0.0, "replay_prob": 0.6},
        "u0_rp0.7": {"uniform_mass": 0.0, "replay_prob": 0.7},
        "u0_rp0.6_h40": {"uniform_mass": 0.0, "replay_prob": 0.6, "evidence_half_life": 40.0},
        "u0_rp0.7_h40": {"uniform_mass": 0.0, "replay_prob": 0.7, "evidence_half_life": 40.0},
        "u0.02_rp0.7_h40": {"uniform_mass": 0.02, "replay_prob": 0.7, "evidence_half_life": 40.0},
    }
)
ROUND3_ARMS = [
    "uniform",
    "oracle",
    "oracle_u0",
    "default",
    "u0",
    "u0_rp0.6",
    "u0_rp0.7",
    "u0_rp0.6_h40",
    "u0_rp0.7_h40",
    "u0.02_rp0.7_h40",
]
#: round 4 (plan in docs/prompts.md, "Round 4 plan"): noisy rewards and large datasets. ``r3_default``
#: pins round 3's defaults (``default`` is ``replay_prob="auto"`` from round 4's plan commit on);
#: ``noise_known``: ``reward_noise`` = the regime's flip probability ε; ``noise_known1.5``: 1.5·ε
ROUND4_ARMS = ["uniform", "oracle", "default", "r3_default", "noise_known", "noise_known1.5"]
ROUND4_SEEDS = list(range(40, 50))
#: every arm but ``default`` pins the floor and the replay probability that were the defaults when it ran
#: (0.1 and 0.5 in rounds 1-3), so that its recorded results reproduce at later commits
for _kwargs in ARMS.values():
    if _kwargs:
        _kwargs.setdefault("uniform_mass", 0.1)
        _kwargs.setdefault("replay_prob", 0.5)
#: the study's seeds, fixed in the plan (exploration before it used seeds 100-102); round 2: 10-19;
#: round 3: 20-29 (its exploration used seeds 100-106)
STUDY_SEEDS = list(range(10))
ROUND2_SEEDS = list(range(10, 20))
ROUND3_SEEDS = list(range(20, 30))
#: the oracles' uniform floor ``λ``: ``oracle`` (the study's reference, fixed since round 1) and ``oracle_u0``
ORACLES: dict[str, float] = {"oracle": 0.1, "oracle_u0": 0.0, "oracle_pobs": 0.1}
ORACLE_UNIFORM_MASS = ORACLES["oracle"]
#: post-hoc diagnostics, not in the study: the oracle's rule over the *measured* prompts only, with the
#: curriculum's exploration of unseen prompts (``replay_prob``): what discovering the prompts costs
DIAGNOSTICS: dict[str, float] = {
    "oracle_measured": 0.5,
    "oracle_measured_rp0.8": 0.8,
    "oracle_measured_rp0.6": 0.6,  # round 4: with the replay probability of round 3's defaults
    "oracle_measured_rp0.9": 0.9,
    "oracle_measured_rp0.7": 0.7,
}
#: round 4, noise diagnostics: the oracle's rule (λ = 0.1) on a score from ONE fresh group of G noisy
#: outcomes of every prompt at every step, de-biased with ``reward_noise`` = factor × ε: what an estimator
#: that sees one group per prompt could reach if it re-measured every prompt at every step for free
GROUP_ORACLES: dict[str, float] = {"oracle_group": 1.0, "oracle_group1.5": 1.5}
ARMS.update({name: None for name in GROUP_ORACLES})
ARMS.update(
    {
        "r3_default": {"replay_prob": 0.6, "uniform_mass": 0.0},
        "noise_known": {"reward_noise": "regime", "uniform_mass": 0.0, "replay_prob": "auto"},
        "noise_known1.5": {"reward_noise": "regime*1.5", "uniform_mass": 0.0, "replay_prob": "auto"},
    }
)
ARMS["oracle_pobs"] = None  # round 4: the oracle's rule on the observed success rate (a diagnostic)


def difficulties(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Each prompt's difficulty, and its kind (0 easy, 1 out of reach, 2 in between: a difficulty label)."""
    kind = rng.choice(3, size=n, p=[0.25, 0.35, 0.40])
    easy = rng.normal(-5.0, 1.0, n)
    hard = rng.normal(7.0, 1.5, n)
    middle = rng.uniform(-2.5, 2.5, n)
    return np.where(kind == 0, easy, np.where(kind == 1, hard, middle)), kind


class Learner:
    def __init__(self, name: str, n: int, rng: np.random.Generator) -> None:
        self.d, self.kind = difficulties(n, rng)
        self.topic = rng.integers(TOPICS, size=n)
        self.a = np.zeros(n)
        self.t = np.zeros(TOPICS)
        self.s = 0.0
        self.own, self.per_topic, self.shared, self.normalised = LEARNERS[name]

    def p(self) -> np.ndarray:
        return 1.0 / (1.0 + np.exp(-(self.s + self.t[self.topic] + self.a - self.d)))

    def generate(self, ids: np.ndarray, g: int, rng: np.random.Generator) -> np.ndarray:
        """Outcomes, shape (len(ids), g)."""
        return rng.random((ids.size, g)) < self.p()[ids][:, None]

    def learn(self, ids: np.ndarray) -> None:
        """One optimizer step on the informative groups ``ids`` (a prompt may appear twice)."""
        if ids.size == 0:
            return
        # Adam-like: the update divided by its norm; the gradients of different prompts are orthogonal,
        # so with m informative groups each one's share of a unit step is 1/sqrt(m)
        scale = np.sqrt(ADAM_REFERENCE / ids.size) if self.normalised else 1.0
        np.add.at(self.a, ids, self.own * scale)
        np.add.at(self.t, self.topic[ids], self.per_topic * scale)
        self.s += self.shared * scale * ids.size


def run(
    learner_name: str, arm: str, *, n: int, g: int, b: int, steps: int, seed: int, noise: float = 0.0
) -> dict[str, float]:
    learner = Learner(learner_name, n, np.random.default_rng([seed, 0]))  # the same prompts for every arm
    outcome_rng = np.random.default_rng([seed, 1])
    arm_rng = np.random.default_rng([seed, 2])
    flip_rng = np.random.default_rng([seed, 3])  # the flips of observed rewards (round 4), its own stream
    kwargs = ARMS.get(arm)
    seen = np.zeros(n, dtype=bool)
    if kwargs is not None and isinstance(kwargs.get("prompt_labels"), str):
        # labels a dataset could carry: the prompts' topics, or their difficulty kind (easy/hard/between)
        kwargs = {**kwargs, "prompt_labels": {"topics": learner.topic, "difficulty": learner.kind}[
            kwargs["prompt_labels"]]}  # fmt: skip
    if kwargs is not None and str(kwargs.get("reward_noise", "")).startswith("regime"):
        # round 4: the regime's flip probability ε ("regime"), or a multiple of it ("regime*1.5")
        factor = float(str(kwargs["reward_noise"]).partition("*")[2] or 1.0)
        kwargs = {**kwargs, "reward_noise": min(factor * noise, 0.45)}
    cur = None if kwargs is None else PromptCurriculum(n, seed=seed, **kwargs)
    buf = np.empty(0, dtype=np.int64)
    acc = np.empty(steps)
    labels = np.repeat(np.arange(b), g)
    for step in range(steps):
        if cur is not None:
            ids = cur.next_prompts(b)
        elif arm == "uniform":
            while buf.size < b:
                buf = np.concatenate([buf, arm_rng.permutation(n)])
            ids, buf = buf[:b], buf[b:]
        elif arm in DIAGNOSTICS:  # the oracle's weights over the measured prompts; unseen ones explored
            p = learner.p()
            v = np.where(seen, p * (1.0 - p), 0.0)
            w = (1.0 - ORACLE_UNIFORM_MASS) * v / max(v.sum(), 1e-300) + ORACLE_UNIFORM_MASS * seen / max(
                seen.sum(), 1
            )
            unseen = np.flatnonzero(~seen)
            replay = arm_rng.random(b) < (DIAGNOSTICS[arm] if unseen.size else 1.0)
            if not seen.any():
                replay[:] = False
            k = min(int((~replay).sum()), unseen.size)
            ids = np.concatenate(
                [
                    arm_rng.choice(n, size=b - k, p=w / w.sum()) if b - k else np.empty(0, dtype=np.int64),
                    arm_rng.choice(unseen, size=k, replace=False),
                ]
            ).astype(np.int64)
            seen[ids] = True
        elif arm in GROUP_ORACLES:  # round 4: every prompt's score from one fresh noisy group, each step
            p_obs = noise + (1.0 - 2.0 * noise) * learner.p()
            share = arm_rng.binomial(g, p_obs) / g
            c = GROUP_ORACLES[arm] * noise
            v = np.maximum(share * (1.0 - share) - c * (1.0 - c), 0.0)
            w = (1.0 - ORACLE_UNIFORM_MASS) * v / max(v.sum(), 1e-300) + ORACLE_UNIFORM_MASS / n
            ids = arm_rng.choice(n, size=b, p=w / w.sum())
        else:  # an oracle
            p = learner.p()
            if arm == "oracle_pobs":  # round 4: the observed success rate ε + (1 − 2ε)p, ε unknown
                p = noise + (1.0 - 2.0 * noise) * p
            v = p * (1.0 - p)
            lam = ORACLES[arm]
            w = (1.0 - lam) * v / v.sum() + lam / n
            ids = arm_rng.choice(n, size=b, p=w / w.sum())
        out = learner.generate(ids, g, outcome_rng)
        if cur is not None:
            seen_out = out ^ (flip_rng.random(out.shape) < noise) if noise > 0 else out
            cur.observe(np.repeat(ids, g), seen_out.reshape(-1), groups=labels)
        k = out.sum(axis=1)
        learner.learn(ids[(k > 0) & (k < g)])
        acc[step] = learner.p().mean()
    return {"auc": float(acc.mean()), "final": float(acc[-1])}


def t_interval(x: np.ndarray) -> tuple[float, float, float]:
    """Mean and 95% t interval (two-sided) of the paired differences ``x``."""
    from math import sqrt

    # two-sided 97.5% quantiles of Student's t for 1..30 degrees of freedom (then the normal's)
    t975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
            2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
            2.052, 2.048, 2.045, 2.042]  # fmt: skip
    m = float(x.mean())
    if x.size < 2:
        return m, float("nan"), float("nan")
    q = t975[x.size - 2] if x.size - 1 <= len(t975) else 1.96
    half = q * float(x.std(ddof=1)) / sqrt(x.size)
    return m, m - half, m + half


def fraction_ci(gain: np.ndarray, oracle: np.ndarray, rng: np.random.Generator) -> tuple[float, float, float]:
    """Mean gain / mean oracle gain, and its 95% percentile bootstrap interval over seeds (pairs kept)."""
    point = float(gain.mean() / oracle.mean())
    if gain.size < 2:
        return point, float("nan"), float("nan")
    idx = rng.integers(gain.size, size=(4000, gain.size))
    boot = gain[idx].mean(axis=1) / oracle[idx].mean(axis=1)
    return point, float(np.quantile(boot, 0.025)), float(np.quantile(boot, 0.975))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small run (seconds), for the test suite")
    parser.add_argument("--seeds", type=int, nargs="+", default=None)
    parser.add_argument("--arms", nargs="+", default=None, choices=sorted(ARMS) + sorted(DIAGNOSTICS))
    parser.add_argument(
        "--learners",
        nargs="+",
        default=None,
        choices=sorted(REGIMES),
        help="learners, or round 4's regimes (noisy rewards, large datasets): REGIMES",
    )
    parser.add_argument(
        "--extra",
        nargs="+",
        default=[],
        metavar="NAME=JSON",
        help="more arms for exploration: a name and PromptCurriculum keyword arguments as JSON",
    )
    parser.add_argument("--out", type=Path, default=None, help="also write the report to this file")
    parser.add_argument("--json", type=Path, default=None, help="also write every run's numbers here")
    args = parser.parse_args(argv)
    for item in args.extra:
        name, _, text = item.partition("=")
        ARMS[name] = json.loads(text)
    n, steps = (300, 60) if args.quick else (2000, 500)
    g, b = 8, 32
    seeds = args.seeds or ([0, 1] if args.quick else STUDY_SEEDS)
    later = set(ROUND2_ARMS + ROUND3_ARMS + ROUND4_ARMS) - {"uniform", "oracle", "default"}
    later |= set(GROUP_ORACLES) | {"oracle_pobs"}
    round1 = [a for a in ARMS if a not in later]
    arms = list(args.arms or (["uniform", "oracle", "default"] if args.quick else round1))
    arms += [item.partition("=")[0] for item in args.extra]
    for must in ("uniform", "oracle"):
        if must not in arms:
            arms.insert(0, must)
    learners = args.learners or list(LEARNERS)
    argv_text = " ".join(sys.argv[1:] if argv is None else argv)
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# Estimates that keep up: prompt curricula against the oracle",
        "",
        f"- command: `python benchmarks/prompts/prompt_estimates.py {argv_text}`".replace(" `", " `", 1),
        f"- commit: {git_commit()}",
        f"- date: {now}",
        f"- machine: {cpu_model()}, {os.cpu_count()} logical cores, {platform.platform()}",
        f"- load average at start: {load_average()}",
        f"- setting: {n} prompts in {TOPICS} topics, G = {g}, B = {b}, {steps} steps; seeds {seeds}",
        *[
            f"- regime {r}: learner {REGIMES[r][0]}, {REGIMES[r][1] or n} prompts, B = {REGIMES[r][2] or b}, "
            f"{REGIMES[r][3] or steps} steps, {REGIMES[r][4]:.0%} of observed rewards flipped"
            for r in learners
            if r not in LEARNERS
        ],
        "",
        "AUC = mean accuracy over all prompts, averaged over the steps. Gain = AUC − uniform's AUC on "
        "the same seed. Fraction = mean gain / the oracle's mean gain [95% bootstrap CI over seeds]. "
        "Δ final = final accuracy − uniform's, paired by seed [95% t CI].",
        "",
        "| learner | arm | AUC | AUC gain | fraction of the oracle's gain | final accuracy "
        "| Δ final vs uniform |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    t0 = time.perf_counter()
    records: list[dict[str, Any]] = []
    boot_rng = np.random.default_rng(12345)
    for name in learners:
        kind, n_r, b_r, steps_r, noise = REGIMES[name]
        size = {"n": n_r or n, "b": b_r or b, "steps": steps_r or steps, "g": g, "noise": noise}
        if args.quick:
            size.update(n=min(size["n"], 3000), steps=min(size["steps"], 60))
        res = {arm: [run(kind, arm, seed=s, **size) for s in seeds] for arm in arms}
        base_auc = np.array([r["auc"] for r in res["uniform"]])
        base_fin = np.array([r["final"] for r in res["uniform"]])
        oracle_gain = np.array([r["auc"] for r in res["oracle"]]) - base_auc
        for arm in arms:
            auc = np.array([r["auc"] for r in res[arm]])
            fin = np.array([r["final"] for r in res[arm]])
            gain = auc - base_auc
            frac = fraction_ci(gain, oracle_gain, boot_rng)
            dfin = t_interval(fin - base_fin)
            records.append(
                {
                    "learner": name,
                    "arm": arm,
                    "seeds": seeds,
                    "auc": auc.tolist(),
                    "final": fin.tolist(),
                    "fraction": frac,
                    "delta_final": dfin,
                }
            )
            same = arm == "uniform"
            lines.append(
                f"| {name} | {arm} | {auc.mean():.4f} | {'—' if same else f'{gain.mean():+.4f}'} | "
                f"{'—' if same else f'{frac[0]:.2f} [{frac[1]:.2f}, {frac[2]:.2f}]'} | {fin.mean():.4f} | "
                f"{'—' if same else f'{dfin[0]:+.4f} [{dfin[1]:+.4f}, {dfin[2]:+.4f}]'} |"
            )
    if "default" in arms:
        lines += [
            "",
            "Paired AUC difference to `default` (the incumbent), mean [95% t CI over seeds]:",
            "",
            "| arm | " + " | ".join(learners) + " |",
            "| --- | " + " | ".join("---" for _ in learners) + " |",
        ]
        by = {(r["learner"], r["arm"]): np.array(r["auc"]) for r in records}
        for arm in arms:
            if arm in ("uniform", "default"):
                continue
            cells = [t_interval(by[(name, arm)] - by[(name, "default")]) for name in learners]
            lines.append(
                f"| {arm} | " + " | ".join(f"{m:+.4f} [{lo:+.4f}, {hi:+.4f}]" for m, lo, hi in cells) + " |"
            )
    if "oracle_u0" in arms:
        lines += [
            "",
            "Secondary (round 3): fraction of `oracle_u0`'s gain (the oracle without a floor) "
            "[95% bootstrap CI over seeds]:",
            "",
            "| arm | " + " | ".join(learners) + " |",
            "| --- | " + " | ".join("---" for _ in learners) + " |",
        ]
        by = {(r["learner"], r["arm"]): np.array(r["auc"]) for r in records}
        for arm in arms:
            if arm in ("uniform", "oracle_u0"):
                continue
            cells = [
                fraction_ci(
                    by[(name, arm)] - by[(name, "uniform")],
                    by[(name, "oracle_u0")] - by[(name, "uniform")],
                    boot_rng,
                )
                for name in learners
            ]
            lines.append(
                f"| {arm} | " + " | ".join(f"{m:.2f} [{lo:.2f}, {hi:.2f}]" for m, lo, hi in cells) + " |"
            )
    lines += ["", f"Run time {time.perf_counter() - t0:.1f} s."]
    report = "\n".join(lines) + "\n"
    print(report, end="")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(report)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(records, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
