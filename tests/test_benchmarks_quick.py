"""``benchmarks/sampler/sampler_speed.py --quick`` runs and reports both samplers (no timing assertions)."""

from __future__ import annotations

import sys

from conftest import run_benchmark


def test_quick_benchmark_reports_both_samplers() -> None:
    out = run_quick("sampler/sampler_speed.py")
    for header in ("- command:", "- commit:", "- machine:", "- date:", "- load average at start:"):
        assert header in out, f"missing {header!r} in:\n{out}"
    rows = [line for line in out.splitlines() if line.startswith("| ")]
    for n in ("200", "10k"):
        for name in ("plr_gym LevelSampler", "Syllabus TaskSampler"):
            assert any(line.startswith(f"| {n} | {name} |") for line in rows), (
                f"no {name} row for N={n}:\n{out}"
            )
    assert "Speedup" in out


def run_quick(script: str, *extra: str) -> str:
    return run_benchmark(script, "--quick", *extra)


def test_overhead_quick_reports_every_variant() -> None:
    out = run_quick("learning/overhead.py")
    for label in ("| PPO |", "| PPO + PLR (value_l1) |", "| PPO + PLR (policy_entropy) |"):
        assert label in out, out


def test_procgen_switch_quick() -> None:
    out = run_quick("procgen/procgen_switch.py")
    rows = [line for line in out.splitlines() if line.startswith("| ")]
    assert rows and rows[0].startswith("| game | first visit | revisit (cached) |"), out
    assert any(line.startswith("| coinrun |") for line in rows), out


def test_per_speed_quick() -> None:
    out = run_quick("replay/per_speed.py")
    assert "plr_gym" in out, out


def test_replay_memory_quick() -> None:
    out = run_quick("replay/replay_memory.py")
    for header in ("- command:", "- commit:", "- machine:", "- date:", "- load average at start:"):
        assert header in out, out
    for label in ("| SB3 ReplayBuffer + VecFrameStack(4) |", "| plr_gym FrameStackReplayBuffer(n_stack=4) |"):
        assert sum(line.startswith(label) for line in out.splitlines()) == 2, out  # memory and sampling rows
    assert "| SharedReplayWriter (shared memory) |" in out and "| pipes + SB3 ReplayBuffer.add |" in out
    assert "frame-stack / SB3: RSS" in out


def test_procgen_throughput_quick() -> None:
    out = run_quick("procgen/procgen_throughput.py", "--diagnose")
    rows = [line for line in out.splitlines() if line.startswith("| ")]
    assert rows and rows[0].startswith("| N | route | steps/s | ratio to stock (wall) |"), out
    stock = "stock ProcgenGym3Env" if sys.version_info < (3, 13) else "stock procgen_gym.ProcgenVecEnv"
    for route in (
        stock,
        "batched + PLR (SB3)",
        "batched + PLR (Gymnasium)",
        "DummyVecEnv + PLR",
        "batched + PLR (SB3), set_state skipped (diagnostic)",
    ):
        assert any(line.startswith(f"| 16 | {route} |") for line in rows), out
    assert any(line.startswith("| batched (ProcgenVecEnv) |") for line in rows), out


def test_procgen_overhead_quick() -> None:
    out = run_quick("procgen/procgen_overhead.py")
    rows = [line for line in out.splitlines() if line.startswith("| ")]
    assert rows and rows[0].startswith("| route | µs per step | added to stock |"), out
    for route in ("stock (its Python face)", "batched + PLR (SB3)", "batched + PLR (Gymnasium)"):
        assert any(line.startswith(f"| {route} |") for line in rows), out


def test_prompt_curriculum_quick() -> None:
    out = run_quick("prompts/prompt_curriculum.py")
    for header in ("- command:", "- commit:", "- machine:", "- load average at start:"):
        assert header in out, out
    rows = {line.split("|")[1].strip(): line for line in out.splitlines() if line.startswith("| ")}
    assert {"uniform", "dapo", "learnability", "thompson"} <= set(rows), out
    assert "not LLM gains" in out


def test_prompt_estimates_quick() -> None:
    out = run_quick("prompts/prompt_estimates.py")
    for header in ("- command:", "- commit:", "- machine:", "- load average at start:"):
        assert header in out, out
    rows = [line.split("|") for line in out.splitlines() if line.startswith("| ") and "---" not in line]
    cells = {(r[1].strip(), r[2].strip()): r for r in rows if len(r) > 7}
    for learner in ("transfer", "fast", "adam"):
        assert {(learner, "uniform"), (learner, "oracle"), (learner, "default")} <= set(cells), out
        # the oracle is the yardstick: its fraction of its own gain is 1
        assert cells[(learner, "oracle")][5].strip().startswith("1.00"), out


def test_verl_dynamic_sampling_quick() -> None:
    out = run_quick("prompts/verl_dynamic_sampling.py")
    for header in ("- command:", "- commit:", "- machine:", "- load average at start:"):
        assert header in out, out
    rows = {line.split("|")[1].strip(): line for line in out.splitlines() if line.startswith("| ")}
    assert {"uniform", "dapo (verl 0.9)", "learnability", "learnability + dapo (verl 0.9)"} <= set(rows), out


def test_procgen_fork_comparison_quick(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The fork-vs-stock comparison's machinery: the stock build recorded twice compares equal everywhere
    (procgen-mirror's gym3 API: the Python 3.11 stack; the Makefile deselects it on 3.13)."""
    out = run_quick("reference/procgen_fork.py", "--out", str(tmp_path))
    rows = [line for line in out.splitlines() if line.startswith("| coinrun") or line.startswith("| maze")]
    assert len(rows) == 2, out
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[1:6] == ["3"] * 5, row  # 3 levels: same first frame, frames, rewards, episode ends
