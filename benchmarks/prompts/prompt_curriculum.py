"""Prompt curricula on a simulated GRPO learner: prompts solved per rollout budget.

This shows the *mechanism* behind learnability-based prompt selection, on a learner whose per-prompt learning
curves are known; it is not an LLM experiment. Real gains on language models are the papers' (arXiv
2502.12272, 2503.14476, 2507.04632), not ours.

The learner. Prompt ``i`` is solved with probability ``p_i = sigmoid(s + a_i − d_i)``: ``d_i`` its
difficulty (a quarter of the prompts easy, ``p ≈ 0.99``; a third out of reach, ``p < 0.01``; the rest in
between), ``a_i`` what was learned on it, ``s`` a skill shared by all prompts. Each generation batch
answers ``B`` prompts ``G`` times; as in GRPO, a group whose ``G`` outcomes are all equal has zero
advantage and teaches nothing, and every group with mixed outcomes teaches: ``a_i += eta`` and
``s += transfer`` (a little of what is learned on one prompt carries to all, so out-of-reach prompts come
within reach over training and a curriculum has to notice).

Arms (same budget of rollouts = completions generated):

- ``uniform``: TRL's default, shuffled epochs over the prompts;
- ``dapo``: DAPO's dynamic sampling (arXiv 2503.14476) over the uniform stream: groups with all-equal
  outcomes are dropped and more prompts are generated until the batch holds ``B`` informative groups (the
  dropped groups' rollouts count against the budget);
- ``learnability``: :class:`plr_gym.prompts.PromptCurriculum` with its defaults (draws ``∝ p(1 − p)``, a
  uniform floor of 0.1, half the draws on unseen prompts until all are seen);
- ``thompson``: ``PromptCurriculum(method="thompson")`` (MoPPS, arXiv 2507.04632);
- ``learnability+dapo``: DAPO's dynamic sampling with the curriculum choosing what is drawn (and refilled),
  observing every generated group, the dropped ones too.

Reported: prompts newly solved (``p ≥ 0.9``, over those not solved at the start) after a quarter, half and
all of the rollout budget; the share of rollouts in informative groups; optimizer steps taken (one per
batch of ``B`` groups) and the informative groups each step trains on; the rollouts and optimizer steps until
the mean accuracy over all prompts is ``TARGET_GAIN`` (0.05) above its start; over the last tenth of the
steps, the mean reward of each step's generated completions (what a trainer logs as its training reward)
beside the mean accuracy over all prompts (what a held-out evaluation measures). Mean ± standard deviation
over seeds.

Usage::

    python benchmarks/prompts/prompt_curriculum.py [--quick] [--seeds 5] \\
        [--out benchmarks/results/prompt_curriculum.md]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))  # benchmarks/common: _provenance
from _provenance import cpu_model, git_commit, load_average
from plr_gym.prompts import PromptCurriculum

ARMS = ("uniform", "dapo", "learnability", "thompson", "learnability+dapo")
SOLVED = 0.9
#: "to target": rollouts and optimizer steps until the mean accuracy over all prompts is this much above
#: its start
TARGET_GAIN = 0.05


def difficulties(n: int, rng: np.random.Generator) -> np.ndarray:
    kind = rng.choice(3, size=n, p=[0.25, 0.35, 0.40])
    easy = rng.normal(-5.0, 1.0, n)
    hard = rng.normal(7.0, 1.5, n)
    middle = rng.uniform(-2.5, 2.5, n)
    return np.where(kind == 0, easy, np.where(kind == 1, hard, middle))


class Learner:
    def __init__(self, n: int, eta: float, transfer: float, rng: np.random.Generator) -> None:
        self.d = difficulties(n, rng)
        self.a = np.zeros(n)
        self.s = 0.0
        self.eta, self.transfer = eta, transfer

    def p(self) -> np.ndarray:
        return 1.0 / (1.0 + np.exp(-(self.s + self.a - self.d)))

    def generate(self, ids: np.ndarray, g: int, rng: np.random.Generator) -> np.ndarray:
        """Outcomes, shape (len(ids), g)."""
        return rng.random((ids.size, g)) < self.p()[ids][:, None]

    def learn(self, ids: np.ndarray) -> None:
        """One optimizer step on the informative groups of ``ids`` (a prompt may appear twice)."""
        np.add.at(self.a, ids, self.eta)
        self.s += self.transfer * ids.size


class UniformStream:
    """Shuffled epochs over the prompts (TRL's RepeatSampler order)."""

    def __init__(self, n: int, rng: np.random.Generator) -> None:
        self.n, self.rng, self.buf = n, rng, np.empty(0, dtype=np.int64)

    def take(self, k: int) -> np.ndarray:
        while self.buf.size < k:
            self.buf = np.concatenate([self.buf, self.rng.permutation(self.n)])
        out, self.buf = self.buf[:k], self.buf[k:]
        return out


def run_arm(arm: str, *, n: int, g: int, b: int, budget: int, seed: int) -> dict[str, list[float]]:
    rng = np.random.default_rng([seed, 0])  # the learner's prompts: the same for every arm
    learner = Learner(n, eta=0.15, transfer=0.0005, rng=rng)
    solved0 = learner.p() >= SOLVED
    outcome_rng = np.random.default_rng([seed, 1])
    stream = UniformStream(n, np.random.default_rng([seed, 2]))
    cur = None
    if arm in ("learnability", "thompson", "learnability+dapo"):
        cur = PromptCurriculum(n, method=arm.split("+")[0], seed=seed)
    marks = [budget // 4, budget // 2, budget]
    solved_at: list[float] = []
    rollouts = informative = steps = 0
    target = float(learner.p().mean()) + TARGET_GAIN
    to_target = [float("nan"), float("nan")]  # rollouts, optimizer steps
    logged: list[
        tuple[float, float]
    ] = []  # per step: mean reward of its generated completions, true accuracy
    while len(solved_at) < len(marks):
        if arm in ("dapo", "learnability+dapo"):
            # over-sample, drop all-equal groups, refill: from the uniform stream or from the curriculum,
            # which observes every generated group (the dropped ones too)
            kept: list[np.ndarray] = []
            generated: list[np.ndarray] = []
            count = 0
            while count < b and rollouts < budget:
                ids = stream.take(b) if cur is None else cur.next_prompts(b)
                out = learner.generate(ids, g, outcome_rng)
                rollouts += ids.size * g
                if cur is not None:
                    cur.observe(np.repeat(ids, g), out.reshape(-1), groups=np.repeat(np.arange(ids.size), g))
                generated.append(out.reshape(-1))
                k = out.sum(axis=1)
                mixed = ids[(k > 0) & (k < g)][: b - count]
                kept.append(mixed)
                count += mixed.size
            train = np.concatenate(kept)
            reward = float(np.concatenate(generated).mean())
        else:
            ids = stream.take(b) if cur is None else cur.next_prompts(b)
            out = learner.generate(ids, g, outcome_rng)
            rollouts += ids.size * g
            if cur is not None:
                cur.observe(np.repeat(ids, g), out.reshape(-1), groups=np.repeat(np.arange(ids.size), g))
            k = out.sum(axis=1)
            train = ids[(k > 0) & (k < g)]
            reward = float(out.mean())
        logged.append((reward, float(learner.p().mean())))
        informative += train.size * g
        learner.learn(train)
        steps += 1
        if np.isnan(to_target[0]) and learner.p().mean() >= target:
            to_target = [float(rollouts), float(steps)]
        while len(solved_at) < len(marks) and rollouts >= marks[len(solved_at)]:
            solved_at.append(float(((learner.p() >= SOLVED) & ~solved0).sum()))
    return {
        "solved": solved_at,
        "informative": [informative / rollouts],
        "steps": [float(steps)],
        "unsolved_at_start": [float((~solved0).sum())],
        "to_target": to_target,
        # the last tenth of the steps: what a trainer logs as its reward, and the accuracy over all prompts
        "logged_reward": [float(np.mean([r for r, _ in logged[-max(1, len(logged) // 10) :]]))],
        "accuracy": [float(np.mean([a for _, a in logged[-max(1, len(logged) // 10) :]]))],
    }


def fmt(values: list[float], digits: int = 0) -> str:
    arr = np.asarray(values, dtype=float)
    if arr.size == 1:
        return f"{arr[0]:.{digits}f}"
    return f"{arr.mean():.{digits}f} ± {arr.std(ddof=1):.{digits}f}"


def fmt_reached(values: list[float]) -> str:
    """Mean ± sd over the seeds that reached the target, and how many did not."""
    reached = [v for v in values if not np.isnan(v)]
    if not reached:
        return "not reached"
    missed = len(values) - len(reached)
    return fmt(reached) + (f" ({missed} seeds not reached)" if missed else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small run (seconds), for the test suite")
    parser.add_argument("--seeds", type=int, default=None)
    parser.add_argument("--prompts", type=int, default=None)
    parser.add_argument("--out", type=Path, default=None, help="also write the report to this file")
    args = parser.parse_args(argv)
    n = args.prompts or (300 if args.quick else 2000)
    seeds = args.seeds or (2 if args.quick else 5)
    g, b = 8, 32
    budget = (60 if args.quick else 500) * b * g
    command = "python benchmarks/prompts/prompt_curriculum.py" + (" --quick" if args.quick else "")
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# Prompt curricula on a simulated GRPO learner",
        "",
        f"- command: `{command}`",
        f"- commit: {git_commit()}",
        f"- date: {now}",
        f"- machine: {cpu_model()}, {os.cpu_count()} logical cores, {platform.platform()}",
        f"- load average at start: {load_average()}",
        f"- setting: {n} prompts, G = {g} completions per prompt, B = {b} prompts per batch, budget "
        f"{budget} rollouts ({budget // (b * g)} batches of B·G), {seeds} seeds",
        "",
        "Simulated learner with known learning curves (see the script's docstring); the numbers show the "
        "mechanism, not LLM gains (those are the papers').",
        "",
        "| arm | newly solved @ 25% budget | @ 50% | @ 100% | informative rollouts | optimizer steps "
        f"| informative groups per step | rollouts to +{TARGET_GAIN} mean accuracy | optimizer steps to it "
        "| logged training reward (last 10% of steps) | accuracy over all prompts (same steps) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    t0 = time.perf_counter()
    unsolved: list[float] = []
    for arm in ARMS:
        res = [run_arm(arm, n=n, g=g, b=b, budget=budget, seed=s) for s in range(seeds)]
        solved = [[r["solved"][i] for r in res] for i in range(3)]
        unsolved = [r["unsolved_at_start"][0] for r in res]
        lines.append(
            f"| {arm} | {fmt(solved[0])} | {fmt(solved[1])} | {fmt(solved[2])} | "
            f"{fmt([r['informative'][0] * 100 for r in res])}% | {fmt([r['steps'][0] for r in res])} | "
            f"{fmt([r['informative'][0] * budget / g / r['steps'][0] for r in res], 1)} | "
            f"{fmt_reached([r['to_target'][0] for r in res])} | "
            f"{fmt_reached([r['to_target'][1] for r in res])} | "
            f"{fmt([r['logged_reward'][0] for r in res], 3)} | {fmt([r['accuracy'][0] for r in res], 3)} |"
        )
    lines += [
        "",
        f"Prompts not solved at the start: {fmt(unsolved)} (of {n}). "
        f"Run time {time.perf_counter() - t0:.1f} s.",
    ]
    report = "\n".join(lines) + "\n"
    print(report, end="")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
