"""Per-episode cost of ``plr_gym.LevelSampler`` next to Syllabus's PLR ``TaskSampler``, in one process.

What is timed is the steady state of a training run: every level has been seen (all levels are first
filled with random scores), so each ``sample()`` replays a seen level, and each finished episode
reports one score. Three things are timed per sampler and number of levels ``N``:

- ``sample``: one replay draw;
- ``update``: one score for a random level;
- ``sample+update``: one draw followed by a score for the drawn level (one episode's sampler cost).

Each cell is timed as ``repeats`` runs of ``k`` consecutive calls (``k`` chosen so one run lasts about
``--target-time`` seconds, at least 1); the table shows the median and the best per-call time over the
runs, and how many runs x calls were used. Memory is the change in resident set size (RSS) while
constructing and filling each sampler: the peak (Linux ``VmHWM`` after resetting it) and what is still
held afterwards.

Both samplers use the same PLR settings: strategy ``value_l1``, ``rank`` score transform,
temperature 0.1, staleness coefficient 0.1, ``power`` staleness transform with temperature 1,
proportionate replay schedule, replay only once every level is seen (``min_seen_ratio`` / ``rho`` = 1).

Syllabus specifics (``syllabus-rl`` 0.7, ``syllabus.curricula.plr.task_sampler.TaskSampler``):

- ``replay_prob=1.0`` is required: its ``proportionate`` schedule replays with probability
  ``min(proportion_seen, replay_prob)``; with the default ``replay_prob=0.5`` half of the draws after
  every task is seen go to a Robust-PLR evaluator loop that raises ``AttributeError`` without one.
- Filling: the vectorised equivalent of ``update_task_score`` on every task (``task_scores[:] = scores``
  and ``unseen_task_weights[:] = 0``); the script checks at N = 200 that it leaves the same state as
  calling ``update_task_score`` task by task.
- One update is ``update_task_score(0, task, score, score, 1, running_mean=True)``, the cheapest call
  that stores exactly ``score`` (its rollout-based updates cost more).
- Importing it runs ``np.seterr(all="raise")`` for the whole process and creates a shared-memory
  segment it never frees; the script restores numpy's error state and frees the segment.

Usage::

    python benchmarks/sampler/sampler_speed.py                 # N = 200, 10k, 100k, 1M (a couple of minutes)
    python benchmarks/sampler/sampler_speed.py --quick         # N = 200, 10k, few repeats (seconds)
    python benchmarks/sampler/sampler_speed.py --sizes 1k,50k  # chosen sizes
    python benchmarks/sampler/sampler_speed.py --no-syllabus   # plr_gym only
"""

from __future__ import annotations

import argparse
import datetime
import gc
import importlib.metadata
import os
import platform
import shlex
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))  # benchmarks/common: _provenance
from _provenance import cpu_model, git_commit, load_average

ROOT = Path(__file__).resolve().parents[2]
# Benchmark the library in this checkout, whatever else is installed.
sys.path.insert(0, str(ROOT / "src"))

from plr_gym import LevelSampler  # noqa: E402

FULL_SIZES = (200, 10_000, 100_000, 1_000_000)
QUICK_SIZES = (200, 10_000)
OURS = "plr_gym LevelSampler"
THEIRS = "Syllabus TaskSampler"

# The paper's Procgen setting, spelled for each library.
OUR_KWARGS: dict[str, Any] = dict(
    strategy="value_l1",
    score_transform="rank",
    temperature=0.1,
    staleness_coef=0.1,
    uniform_mass=0.0,  # the paper's mixture, which Syllabus implements
    staleness_transform="power",
    staleness_temperature=1.0,
    replay_schedule="proportionate",
    min_seen_ratio=1.0,
    alpha=1.0,
)
SYLLABUS_KWARGS: dict[str, Any] = dict(
    num_actors=1,
    strategy="value_l1",
    score_transform="rank",
    temperature=0.1,
    staleness_coef=0.1,
    staleness_transform="power",
    staleness_temperature=1.0,
    replay_schedule="proportionate",
    rho=1.0,
    replay_prob=1.0,  # see the module docstring
    alpha=1.0,
)

# Targets of the project (µs per sample+update, median) and the minimum speedup over Syllabus.
TARGET_US = {100_000: 50.0, 1_000_000: 100.0}
TARGET_SPEEDUP = 100.0
SPEEDUP_SIZES = (100_000, 1_000_000)


# --------------------------------------------------------------------------------------------------
# environment
# --------------------------------------------------------------------------------------------------


def version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _status_kib() -> dict[str, int]:
    out: dict[str, int] = {}
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    key, value = line.split(":", 1)
                    out[key] = int(value.split()[0])
    except OSError:
        pass
    return out


def _trim_heap() -> None:
    """Give freed heap memory back to the OS (glibc), so RSS deltas are not hidden by reused memory."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _reset_peak_rss() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current RSS (Linux >= 4.0)
        return True
    except OSError:
        return False


# --------------------------------------------------------------------------------------------------
# Syllabus, isolated
# --------------------------------------------------------------------------------------------------
@dataclass
class SyllabusImport:
    cls: Any
    seconds: float
    warnings: list[str] = field(default_factory=list)
    seterr_changed: dict[str, str] = field(default_factory=dict)
    shm_freed: bool = False


def import_syllabus() -> SyllabusImport:
    """Import ``TaskSampler``, then undo its process-wide side effects. Raises ImportError on failure."""
    saved = np.geterr()
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            from syllabus.curricula.plr.task_sampler import TaskSampler
        except Exception as exc:  # torch missing, incompatible numpy, ...
            raise ImportError(f"{type(exc).__name__}: {exc}") from exc
        finally:
            after = np.geterr()
            np.seterr(**saved)  # task_sampler.py runs np.seterr(all="raise") at import
    seconds = time.perf_counter() - t0
    changed = {k: after[k] for k in saved if after[k] != saved[k]}
    shm_freed = False
    try:  # core/evaluator.py creates a ShareableList at import and never frees it
        from syllabus.core.evaluator import GymnasiumEvaluationWrapper

        shm = GymnasiumEvaluationWrapper.env_count.shm
        shm.close()
        shm.unlink()
        shm_freed = True
    except Exception:
        pass
    msgs = [f"{w.category.__name__}: {w.message}" for w in caught]
    return SyllabusImport(TaskSampler, seconds, msgs, changed, shm_freed)


# --------------------------------------------------------------------------------------------------
# samplers under test
# --------------------------------------------------------------------------------------------------
class Bench:
    """A sampler filled with scores, with tight timing loops (no adapter call inside the loops)."""

    name = ""

    def samples(self, k: int) -> float:
        raise NotImplementedError

    def updates(self, levels: list[int], scores: list[float]) -> float:
        raise NotImplementedError

    def cycles(self, scores: list[float]) -> float:
        raise NotImplementedError

    def check_replay_only(self) -> None:
        pass


class OursBench(Bench):
    name = OURS

    def __init__(self, n: int, scores: np.ndarray, seed: int) -> None:
        self.s = LevelSampler(levels=range(n), seed=seed, **OUR_KWARGS)
        self.s.update_batch(np.arange(n), scores)

    def samples(self, k: int) -> float:
        sample = self.s.sample
        t0 = time.perf_counter()
        for _ in range(k):
            sample()
        return time.perf_counter() - t0

    def updates(self, levels: list[int], scores: list[float]) -> float:
        update = self.s.update
        t0 = time.perf_counter()
        for level, score in zip(levels, scores):
            update(level, score)
        return time.perf_counter() - t0

    def cycles(self, scores: list[float]) -> float:
        sample, update = self.s.sample, self.s.update
        t0 = time.perf_counter()
        for score in scores:
            update(sample(), score)
        return time.perf_counter() - t0

    def check_replay_only(self) -> None:
        if self.s.num_explore_samples:
            raise AssertionError(
                f"{OURS} explored {self.s.num_explore_samples} times after every level was seen"
            )


class SyllabusBench(Bench):
    name = THEIRS

    def __init__(self, cls: Any, n: int, scores: np.ndarray) -> None:
        self.ts = cls(list(range(n)), 256, **SYLLABUS_KWARGS)
        fill_syllabus(self.ts, scores)

    def samples(self, k: int) -> float:
        sample = self.ts.sample
        t0 = time.perf_counter()
        for _ in range(k):
            sample()
        return time.perf_counter() - t0

    def updates(self, levels: list[int], scores: list[float]) -> float:
        update = self.ts.update_task_score
        t0 = time.perf_counter()
        for level, score in zip(levels, scores):
            update(0, level, score, score, 1, running_mean=True)
        return time.perf_counter() - t0

    def cycles(self, scores: list[float]) -> float:
        sample, update = self.ts.sample, self.ts.update_task_score
        t0 = time.perf_counter()
        for score in scores:
            update(0, sample(), score, score, 1, running_mean=True)
        return time.perf_counter() - t0


def fill_syllabus(ts: Any, scores: np.ndarray) -> None:
    """What ``update_task_score(0, i, s_i, s_i, 1, running_mean=True)`` on every task leaves, vectorised."""
    ts.task_scores[:] = scores
    ts.unseen_task_weights[:] = 0.0


def check_syllabus_fill(cls: Any) -> None:
    """The vectorised fill leaves the state the per-task API leaves (N = 200)."""
    scores = np.random.default_rng(7).random(200)
    by_api = cls(list(range(200)), 256, **SYLLABUS_KWARGS)
    for i, s in enumerate(scores.tolist()):
        by_api.update_task_score(0, i, s, s, 1, running_mean=True)
    fast = cls(list(range(200)), 256, **SYLLABUS_KWARGS)
    fill_syllabus(fast, scores)
    for attr in (
        "task_scores",
        "unseen_task_weights",
        "partial_task_scores",
        "partial_task_max_scores",
        "partial_task_steps",
        "task_staleness",
    ):
        a, b = getattr(by_api, attr), getattr(fast, attr)
        if a.dtype != b.dtype or not np.array_equal(a, b):
            raise AssertionError(f"vectorised Syllabus fill differs from update_task_score in {attr}")
    if by_api.running_sample_count != fast.running_sample_count:
        raise AssertionError(
            "vectorised Syllabus fill differs from update_task_score in running_sample_count"
        )


def check_same_distribution(cls: Any) -> float:
    """Max |P_ours − P_Syllabus| over 200 freshly filled levels (same settings must give the same P)."""
    scores = np.random.default_rng(11).random(200)
    ours = LevelSampler(levels=range(200), seed=0, **OUR_KWARGS)
    ours.update_batch(np.arange(200), scores)
    ts = cls(list(range(200)), 256, **SYLLABUS_KWARGS)
    fill_syllabus(ts, scores)
    diff = float(np.max(np.abs(ours.sample_weights() - ts.sample_weights())))
    if diff > 1e-6:
        raise AssertionError(f"replay distributions differ by {diff:.3g}: the settings do not match")
    return diff


# --------------------------------------------------------------------------------------------------
# measuring
# --------------------------------------------------------------------------------------------------
@dataclass
class Cell:
    median_us: float
    best_us: float
    repeats: int
    calls: int

    @property
    def text(self) -> str:
        return f"{fmt_us(self.median_us)} / {fmt_us(self.best_us)}"

    @property
    def shape(self) -> str:
        return f"{self.repeats}x{self.calls}"


@dataclass
class Row:
    n: int
    name: str
    build_s: float
    peak_mib: float | None
    held_mib: float | None
    sample: Cell
    update: Cell
    cycle: Cell


def fmt_us(us: float) -> str:
    if us >= 1000:
        return f"{us:,.0f}"
    if us >= 10:
        return f"{us:.1f}"
    return f"{us:.2f}"


def fmt_n(n: int) -> str:
    for div, suffix in ((1_000_000, "M"), (1_000, "k")):
        if n >= div and n % div == 0:
            return f"{n // div}{suffix}"
    return str(n)


def parse_size(text: str) -> int:
    t = text.strip().lower().replace("_", "")
    mult = 1
    if t.endswith("k"):
        mult, t = 1_000, t[:-1]
    elif t.endswith("m"):
        mult, t = 1_000_000, t[:-1]
    value = float(t) * mult
    if value < 1 or value != int(value):
        raise argparse.ArgumentTypeError(f"bad size {text!r}")
    return int(value)


def timed(run: Callable[[int], float], target: float, repeats: int) -> Cell:
    """Median and best per-call time of ``repeats`` runs of ``k`` calls, ``k`` sized to last ~``target`` s."""
    k = 1
    while True:  # calibrate (also warms up)
        elapsed = run(k)
        if elapsed >= target / 4 or k >= 1 << 20:
            break
        k *= 8 if elapsed < target / 100 else 2
    k = max(1, round(k * target / max(elapsed, 1e-9)))
    per_call = []
    gc.collect()
    for _ in range(repeats):
        gc.disable()
        try:
            per_call.append(run(k) / k)
        finally:
            gc.enable()
    return Cell(float(np.median(per_call)) * 1e6, min(per_call) * 1e6, repeats, k)


def measure(name: str, build: Callable[[], Bench], n: int, target: float, repeats: int, seed: int) -> Row:
    gc.collect()
    _trim_heap()
    rss0 = _status_kib().get("VmRSS")
    peak_ok = _reset_peak_rss()
    t0 = time.perf_counter()
    bench = build()
    build_s = time.perf_counter() - t0
    status = _status_kib()
    peak = (status["VmHWM"] - rss0) / 1024 if peak_ok and rss0 is not None and "VmHWM" in status else None
    held = (status["VmRSS"] - rss0) / 1024 if rss0 is not None and "VmRSS" in status else None

    rng = np.random.default_rng(seed)

    def run_updates(k: int) -> float:
        return bench.updates(rng.integers(n, size=k).tolist(), rng.random(k).tolist())

    def run_cycles(k: int) -> float:
        return bench.cycles(rng.random(k).tolist())

    # warm up into the steady state (staleness spread out), ~target/2 seconds
    t_end = time.perf_counter() + target / 2
    while time.perf_counter() < t_end:
        run_cycles(8)
    sample = timed(bench.samples, target, repeats)
    update = timed(run_updates, target, repeats)
    cycle = timed(run_cycles, target, repeats)
    bench.check_replay_only()
    return Row(n, name, build_s, peak, held, sample, update, cycle)


# --------------------------------------------------------------------------------------------------
# report
# --------------------------------------------------------------------------------------------------
def table(rows: Sequence[Row]) -> list[str]:
    def mib(x: float | None) -> str:
        return "n/a" if x is None else f"{x:,.2f}"

    out = [
        "| N | sampler | sample µs | update µs | sample+update µs | runs x calls (s / u / s+u) "
        "| build+fill s | RSS peak Δ MiB | RSS held Δ MiB |",
        "| ---: | --- | ---: | ---: | ---: | --- | ---: | ---: | ---: |",
    ]
    for r in rows:
        shapes = f"{r.sample.shape} / {r.update.shape} / {r.cycle.shape}"
        out.append(
            f"| {fmt_n(r.n)} | {r.name} | {r.sample.text} | {r.update.text} | {r.cycle.text} | {shapes} "
            f"| {r.build_s:.2f} | {mib(r.peak_mib)} | {mib(r.held_mib)} |"
        )
    return out


def speedups(rows: Sequence[Row]) -> dict[int, tuple[float, float, float]]:
    by = {(r.n, r.name): r for r in rows}
    out = {}
    for n in sorted({r.n for r in rows}):
        if (n, OURS) in by and (n, THEIRS) in by:
            a, b = by[(n, OURS)], by[(n, THEIRS)]
            out[n] = (
                b.sample.median_us / a.sample.median_us,
                b.update.median_us / a.update.median_us,
                b.cycle.median_us / a.cycle.median_us,
            )
    return out


def speedup_table(sp: dict[int, tuple[float, float, float]]) -> list[str]:
    out = [
        "| N | sample | update | sample+update |",
        "| ---: | ---: | ---: | ---: |",
    ]
    for n, (s, u, c) in sp.items():
        out.append(f"| {fmt_n(n)} | {s:,.0f}x | {u:.2f}x | {c:,.0f}x |")
    return out


def targets(rows: Sequence[Row], sp: dict[int, tuple[float, float, float]]) -> list[str]:
    ours = {r.n: r for r in rows if r.name == OURS}
    out = []
    for n, limit in TARGET_US.items():
        if n in ours:
            got = ours[n].cycle.median_us
            verdict = "MET" if got <= limit else "MISSED"
            out.append(
                f"- {OURS} sample+update at N = {fmt_n(n)}: {fmt_us(got)} µs "
                f"(target ≤ {limit:g} µs): {verdict}"
            )
        else:
            out.append(f"- {OURS} sample+update at N = {fmt_n(n)} (target ≤ {limit:g} µs): not measured")
    for n in SPEEDUP_SIZES:
        if n in sp:
            got = sp[n][2]
            verdict = "MET" if got >= TARGET_SPEEDUP else "MISSED"
            out.append(
                f"- speedup over {THEIRS} (sample+update) at N = {fmt_n(n)}: {got:,.0f}x "
                f"(target ≥ {TARGET_SPEEDUP:g}x): {verdict}"
            )
        else:
            out.append(
                f"- speedup over {THEIRS} at N = {fmt_n(n)} (target ≥ {TARGET_SPEEDUP:g}x): not measured"
            )
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="N = 200 and 10k only, few repeats (seconds)")
    parser.add_argument(
        "--sizes",
        type=lambda s: [parse_size(x) for x in s.split(",") if x.strip()],
        help="comma-separated numbers of levels, e.g. 200,10k,100k,1M",
    )
    parser.add_argument("--repeats", type=int, help="timed runs per cell (default 7, 3 with --quick)")
    parser.add_argument(
        "--target-time", type=float, help="seconds per timed run (default 0.2, 0.01 with --quick)"
    )
    parser.add_argument("--no-syllabus", action="store_true", help="benchmark plr_gym only")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    sizes = args.sizes or (QUICK_SIZES if args.quick else FULL_SIZES)
    repeats = args.repeats or (3 if args.quick else 7)
    target = args.target_time or (0.01 if args.quick else 0.2)

    syl: SyllabusImport | None = None
    if not args.no_syllabus:
        try:
            syl = import_syllabus()
        except ImportError as exc:
            print(
                f"error: cannot import Syllabus (syllabus-rl) for the side-by-side benchmark: {exc}\n"
                "Install the benchmark peers (pip install -e '.[bench]', or `make bench`), "
                "or pass --no-syllabus to benchmark plr_gym only.",
                file=sys.stderr,
            )
            return 2

    command = shlex.join([sys.executable, *(sys.argv if argv is None else [sys.argv[0], *argv])])
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else "n/a"
    lines = [
        "# LevelSampler vs Syllabus: per-episode sampler cost",
        "",
        f"- command: `{command}`",
        f"- commit: {git_commit()}",
        f"- date: {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- machine: {cpu_model()}, {os.cpu_count()} logical cores ({affinity} usable), {platform.system()} "
        f"{platform.release()}",
        f"- python {platform.python_version()}, numpy {np.__version__}, "
        f"plr-gym {version('plr-gym')}, syllabus-rl "
        f"{version('syllabus-rl') if syl else '(not run: --no-syllabus)'}",
        f"- load average at start: {load_average()}",
    ]
    if syl is not None:
        changed = ", ".join(f"{k}={v}" for k, v in syl.seterr_changed.items()) or "nothing"
        caught = ": " + "; ".join(syl.warnings) if syl.warnings else ""
        lines.append(
            f"- Syllabus import: {syl.seconds:.1f} s; it set numpy error state ({changed}), restored; "
            f"{len(syl.warnings)} warning(s) on import{caught}; "
            f"leaked shared-memory segment {'freed' if syl.shm_freed else 'not found'}"
        )
    print("\n".join(lines), flush=True)
    # Keep the objects of the imports (torch's are many) out of every later collection: gc.collect()
    # would otherwise take ~0.1 s each.
    gc.collect()
    gc.freeze()

    if syl is not None:
        check_syllabus_fill(syl.cls)
        diff = check_same_distribution(syl.cls)
        print(
            f"- checks: vectorised Syllabus fill == per-task update_task_score; replay distributions at "
            f"N = 200 agree (max |ΔP| = {diff:.1e})",
            flush=True,
        )

    rows: list[Row] = []
    for n in sizes:
        scores = np.random.default_rng(args.seed + n).random(n)
        print(f"  ... N = {fmt_n(n)}: {OURS}", file=sys.stderr, flush=True)
        rows.append(
            measure(OURS, lambda: OursBench(n, scores, args.seed), n, target, repeats, args.seed)  # noqa: B023
        )
        if syl is not None:
            print(f"  ... N = {fmt_n(n)}: {THEIRS}", file=sys.stderr, flush=True)
            np.random.seed(args.seed)  # noqa: NPY002 - Syllabus draws from numpy's global RNG
            cls = syl.cls
            rows.append(measure(THEIRS, lambda: SyllabusBench(cls, n, scores), n, target, repeats, args.seed))  # noqa: B023

    sp = speedups(rows)
    out = [
        "",
        "Per-call times: median / best over the timed runs, in µs. A run is k consecutive calls; "
        "'runs x calls' lists them for sample / update / sample+update. Every sample is a replay draw.",
        "",
        *table(rows),
    ]
    if sp:
        out += ["", f"Speedup ({THEIRS} median ÷ {OURS} median):", "", *speedup_table(sp)]
    out += ["", "Targets:", *targets(rows, sp), "", f"- load average at end: {load_average()}"]
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
