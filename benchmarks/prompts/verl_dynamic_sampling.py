"""DAPO's dynamic sampling as verl 0.9's V1 trainer refills, with and without a prompt curriculum.

The learner, the prompts and the report are those of ``prompt_curriculum.py`` in this folder (its docstring
has the formulas): a simulated GRPO learner with known per-prompt learning curves, not an LLM. This script
changes only how dynamic sampling refills, to verl 0.9.1's sync ``ReplayBuffer`` (``algorithm.filter_groups``,
``trainer/ppo/v1/replay_buffer.py``): a step dispatches ``B`` prompts; each poll drops the finished groups
whose rewards are all equal (``k`` of them) and earns ``2k`` refill credits, dispatched as fresh prompts up to
``max_inflight_gen_batches · B`` in flight (1 · B, verl's default); once ``B`` groups are kept, it stops
dispatching, lets what is in flight finish and discards the surplus. Every dispatched group finishes before
the next poll here (verl polls every 2 s, and a real rollout takes longer: there more is in flight when
the batch fills, and more surplus is discarded). The rollouts of dropped and surplus groups count against
the budget.

Arms:

- ``uniform``: shuffled epochs, every group trained on (zero-advantage groups included);
- ``dapo (verl 0.9)``: the refill above over the uniform stream;
- ``learnability``: :class:`plr_gym.prompts.PromptCurriculum` with its defaults, no filter;
- ``learnability + dapo (verl 0.9)``: the refill above, the curriculum drawing the step's batch and every
  refill (``next_prompts`` of the refill's size) after observing every group generated so far, the dropped
  and surplus ones included: what ``plr_gym.verl.PromptCurriculumReplayBuffer`` does in verl.

Usage::

    python benchmarks/prompts/verl_dynamic_sampling.py [--quick] [--seeds 5] \\
        [--out benchmarks/results/verl_dynamic_sampling.md]
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
from prompt_curriculum import SOLVED, TARGET_GAIN, Learner, UniformStream, fmt, fmt_reached

ARMS = ("uniform", "dapo (verl 0.9)", "learnability", "learnability + dapo (verl 0.9)")


def verl_step(draw, learner: Learner, g: int, b: int, rng: np.random.Generator, max_inflight: int = 1):
    """One step of verl 0.9.1's sync ReplayBuffer.sample with filter_groups, every dispatch finishing before
    the next poll. ``draw(k)`` -> prompt ids (the curriculum observes what it generated inside ``draw``'s
    caller). Returns (ids of the trained groups, every generated (ids, outcomes) batch)."""
    generated = []
    kept: list[np.ndarray] = []
    n_kept, credit = 0, 0
    ids = draw(b)  # prepare_step: B prompts
    while True:
        out = learner.generate(ids, g, rng)
        generated.append((ids, out))
        k = out.sum(axis=1)
        mixed = (k > 0) & (k < g)
        kept.append(ids[mixed])
        n_kept += int(mixed.sum())
        if n_kept >= b:  # draining: nothing in flight here; select B, discard the surplus
            break
        credit += 2 * int((~mixed).sum())
        dispatch = min(credit, max_inflight * b)  # nothing is in flight at a poll here
        credit -= dispatch
        ids = draw(dispatch)
    return np.concatenate(kept)[:b], generated


def run_arm(arm: str, *, n: int, g: int, b: int, budget: int, seed: int) -> dict[str, list[float]]:
    rng = np.random.default_rng([seed, 0])  # the learner's prompts: the same for every arm (and script)
    learner = Learner(n, eta=0.15, transfer=0.0005, rng=rng)
    solved0 = learner.p() >= SOLVED
    outcome_rng = np.random.default_rng([seed, 1])
    stream = UniformStream(n, np.random.default_rng([seed, 2]))
    cur = PromptCurriculum(n, seed=seed) if arm.startswith("learnability") else None
    pending: list[tuple[np.ndarray, np.ndarray]] = []  # generated, not yet observed by the curriculum

    def draw(k: int) -> np.ndarray:
        if cur is None:
            return stream.take(k)
        for ids, out in pending:  # every group generated so far, in draw order, before the draw
            cur.observe(np.repeat(ids, g), out.reshape(-1), groups=np.repeat(np.arange(ids.size), g))
        pending.clear()
        return cur.next_prompts(k)

    marks = [budget // 4, budget // 2, budget]
    solved_at: list[float] = []
    rollouts = informative = steps = groups = 0
    target = float(learner.p().mean()) + TARGET_GAIN
    to_target = [float("nan"), float("nan")]
    while len(solved_at) < len(marks):
        if "dapo" in arm:
            train, generated = verl_step(draw, learner, g, b, outcome_rng)
        else:
            ids = draw(b)
            out = learner.generate(ids, g, outcome_rng)
            generated = [(ids, out)]
            k = out.sum(axis=1)
            train = ids[(k > 0) & (k < g)]
        pending.extend(generated)
        for ids, _ in generated:
            rollouts += ids.size * g
            groups += ids.size
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
        "groups_per_step": [groups / steps],
        "unsolved_at_start": [float((~solved0).sum())],
        "to_target": to_target,
        "final": [float(learner.p().mean())],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small run (seconds), for the test suite")
    parser.add_argument("--seeds", type=int, default=None)
    parser.add_argument("--out", type=Path, default=None, help="also write the report to this file")
    args = parser.parse_args(argv)
    n = 300 if args.quick else 2000
    seeds = args.seeds or (2 if args.quick else 5)
    g, b = 8, 32
    budget = (60 if args.quick else 500) * b * g
    command = "python benchmarks/prompts/verl_dynamic_sampling.py" + (" --quick" if args.quick else "")
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# Dynamic sampling as verl 0.9 refills, with and without a prompt curriculum (simulated learner)",
        "",
        f"- command: `{command}`",
        f"- commit: {git_commit()}",
        f"- date: {now}",
        f"- machine: {cpu_model()}, {os.cpu_count()} logical cores, {platform.platform()}",
        f"- load average at start: {load_average()}",
        f"- setting: {n} prompts, G = {g}, B = {b} prompts per optimizer step, budget {budget} rollouts, "
        f"{seeds} seeds (mean ± sd); the learner of benchmarks/prompts/prompt_curriculum.py",
        "",
        "| arm | newly solved @ 25% budget | @ 50% | @ 100% | informative rollouts | optimizer steps "
        f"| groups generated per step | rollouts to +{TARGET_GAIN} mean accuracy | optimizer steps to it "
        "| final accuracy over all prompts |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
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
            f"{fmt([r['groups_per_step'][0] for r in res], 1)} | "
            f"{fmt_reached([r['to_target'][0] for r in res])} | "
            f"{fmt_reached([r['to_target'][1] for r in res])} | {fmt([r['final'][0] for r in res], 3)} |"
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
