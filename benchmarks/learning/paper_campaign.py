"""Reproduce the PLR paper's Procgen result on one game: k seeds x {uniform, the paper's PLR, the library's
defaults}, as parallel ``plr-gym train --preset paper-procgen`` processes on one (GPU) machine.

One command starts (or continues) the campaign; re-running it resumes every unfinished run from its
checkpoint with the CLI's documented ``--resume`` and skips the finished ones, so it survives short
machine leases::

    python benchmarks/learning/paper_campaign.py --game bigfish --seeds 0 1 2 \\
        --methods uniform paper plr_defaults --out benchmarks/results/paper_campaign/bigfish

- ``--status``: one line per run (state, steps, steps/s, last held-out mean, live pid).
- ``--stop``: Ctrl-C (SIGINT) to every live run, which saves its model and sampler and exits; waits for them.
- ``--report``: ``results.md`` / ``results.json`` (final held-out mean per run, the paper's normalised
  test return = 100 x mean / uniform's mean over seeds, steps/s per run) and ``curves.csv`` / ``curves.png``
  (held-out normalised return over steps, mean over seeds per method). Written at the end of every launch too.
- ``--plan``: the exact device-tool calls (carry list, wheels, libGL from .debs, ``setsid nohup``, polling,
  stopping, copying results to ``$OUT``) for a session that has a GPU; ``--prepare`` downloads the wheels
  and .debs it carries into ``benchmarks/.gpu_payload/`` (git-ignored).
- ``--smoke``: tiny CPU overrides (1,024 steps, 4 envs x 64 steps, 2 held-out levels) to check the machinery.

Methods (every run gets ``--preset paper-procgen`` and ``--seed``; explicit flags win over the preset):
``uniform`` (``--sampler uniform``), ``paper`` (the preset's PLR: value_l1, rank, beta 0.1, rho 0.1) and
``plr_defaults`` (the library's ``LevelSampler`` defaults, passed explicitly). Any option this script does
not know is passed to every ``plr-gym train`` (e.g. ``--timesteps 5000000``).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks" / "common"))

from _provenance import cpu_model, git_commit  # noqa: E402

PRESET = "paper-procgen"
METHODS = ("uniform", "paper", "plr_defaults")
#: Tiny CPU overrides of ``--smoke``.
SMOKE_ARGS = [
    "--timesteps", "1024", "--n-envs", "4", "--n-steps", "64", "--eval-levels", "10000:10002",
    "--eval-freq", "512", "--no-eval-train-levels", "--device", "cpu", "--torch-threads", "1",
]  # fmt: skip
#: Every run saves a checkpoint at least this often (wall clock, at a rollout boundary): a machine held
#: for a slice of time loses at most this much plus one rollout of each run (``--save-minutes``).
SAVE_MINUTES = 10
#: The recipe's training speed on a CPU, measured (docs/paper.md, "Budget"): environment steps per CPU
#: second of one run (IMPALA-CNN PPO, 64 envs x 256 steps, one torch thread), all its processes counted.
CPU_STEPS_PER_CPU_SECOND: float | None = 37.0  # benchmarks/results/paper_recipe_cpu_rate.md (b27fcb9)
PIDS_FILE = "pids.json"
#: The launcher's own entry in ``pids.json`` (``--stop`` waits for it to write the report).
LAUNCHER = "launcher"
CAMPAIGN_FILE = "campaign.json"
#: What a GPU lease carries (``--prepare`` downloads it): cp312 wheels missing on the device image, and
#: the .debs of libGL and its dependencies, which Procgen's library loads.
#: (No numpy wheel: the image's numpy 2 ran Procgen in an earlier GPU round, and procgen-mirror's 48 MB
#: wheel plus numpy 1.26's 18 MB would not fit one call's 64 MiB.)
WHEELS = [
    "gymnasium==1.2.2", "stable-baselines3==2.7.0", "procgen-mirror==0.10.7", "gym3==0.3.3",
    "gym-notices==0.1.0", "farama-notifications==0.0.6", "cffi==2.1.1", "pycparser==3.12",
]  # fmt: skip
#: ``gym`` 0.26.2 has no wheel on PyPI: ``--prepare`` builds one (``pip wheel``).
SDIST_WHEELS = ["gym==0.26.2"]
DEBS = [
    "libgl1", "libglvnd0", "libglx0", "libx11-6", "libxcb1", "libxau6", "libxdmcp6",
    "libglib2.0-0", "libbsd0", "libmd0", "libpcre2-8-0",
]  # fmt: skip
PAYLOAD = "benchmarks/.gpu_payload"


# --------------------------------------------------------------------------------------------------
# runs
# --------------------------------------------------------------------------------------------------
def method_args(method: str) -> list[str]:
    """The ``plr-gym train`` flags of a method, on top of ``--preset paper-procgen``."""
    if method == "uniform":
        return ["--sampler", "uniform"]
    if method == "paper":
        return ["--sampler", "plr"]
    if method == "plr_defaults":
        from plr_gym.presets import SAMPLER_OPTIONS
        from plr_gym.sampler import sampler_defaults

        d = sampler_defaults()
        flags = ["--sampler", "plr"]
        for key in SAMPLER_OPTIONS:  # the options plr-gym train takes, at the library's defaults
            if d[key] is not None:  # temperature_end None: no annealing (the flag's default)
                flags += ["--" + key.replace("_", "-"), str(d[key])]
        return flags
    raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")


def run_dir(out: Path, method: str, seed: int) -> Path:
    return out / "runs" / f"{method}-seed{seed}"


def target_steps(extra: list[str]) -> int:
    """The ``--timesteps`` the runs train to (the last one given, else the preset's)."""
    from plr_gym.presets import RECIPES

    value = next(s.value for s in RECIPES[PRESET] if s.dest == "timesteps")
    for i, arg in enumerate(extra):
        if arg == "--timesteps" and i + 1 < len(extra):
            value = int(extra[i + 1])
        elif arg.startswith("--timesteps="):
            value = int(arg.split("=", 1)[1])
    return int(value)


#: Most bytes of run state one device call carries or brings back (the limits are 64 MiB each way).
BUNDLE_BYTES = 56 * 2**20


def bundle_groups(out: Path) -> list[list[Path]]:
    """The run directories in groups of at most :data:`BUNDLE_BYTES` (a run larger than that is alone),
    in name order: what one device call can carry or bring back."""
    groups: list[list[Path]] = [[]]
    size = 0
    for path in sorted(p for p in (out / "runs").glob("*-seed*") if p.is_dir()):
        n = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
        if groups[-1] and size + n > BUNDLE_BYTES:
            groups.append([])
            size = 0
        groups[-1].append(path)
        size += n
    return groups if groups[0] else []


def bundle(out: Path, index: int, dest: Path) -> int:
    """Write group ``index`` of :func:`bundle_groups` (run dirs and their logs) as ``dest/state-K.tgz.part-*``
    (15 MiB parts: the device tool brings back files of at most 16 MiB)."""
    groups = bundle_groups(out)
    if not 0 <= index < len(groups):
        print(f"no group {index}: {len(groups)} group(s) of runs in {out}", file=sys.stderr)
        return 2
    names = []
    for path in groups[index]:
        names.append(f"runs/{path.name}")
        if (out / "runs" / f"{path.name}.log").is_file():
            names.append(f"runs/{path.name}.log")
    tar = subprocess.Popen(["tar", "-C", str(out), "-czf", "-", *names], stdout=subprocess.PIPE)
    prefix = str(dest / f"state-{index}.tgz.part-")
    split = subprocess.run(["split", "-b", "15m", "-", prefix], stdin=tar.stdout)
    tar.wait()
    print(f"group {index} of {len(groups)}: {', '.join(p.name for p in groups[index])} -> {dest}")
    return tar.returncode or split.returncode


def unbundle(out: Path, parts: list[Path]) -> int:
    """Unpack ``state-K.tgz.part-*`` files (each group's parts in name order) into ``out``."""
    groups: dict[str, list[Path]] = {}
    for part in parts:
        groups.setdefault(part.name.split(".tgz.part-")[0], []).append(part)
    out.mkdir(parents=True, exist_ok=True)
    for name, files in sorted(groups.items()):
        data = b"".join(f.read_bytes() for f in sorted(files, key=lambda f: f.name))
        proc = subprocess.run(["tar", "-C", str(out), "-xzf", "-"], input=data)
        if proc.returncode:
            return proc.returncode
        print(f"{name}: {len(files)} part(s) unpacked into {out}")
    return 0


def run_state(path: Path, target: int) -> str:
    """``done`` (``evaluation.json`` at ``target`` steps or more), ``partial`` (a saved model to resume)
    or ``new``."""
    evaluation = path / "evaluation.json"
    if evaluation.is_file():
        with contextlib.suppress(ValueError, OSError):
            if int(json.loads(evaluation.read_text())["timesteps"]) >= target:
                return "done"
    if (path / "model.zip").is_file():
        return "partial"
    return "new"


def train_command(game: str, method: str, seed: int, path: Path, extra: list[str], resume: bool) -> list[str]:
    cmd = [sys.executable, "-m", "plr_gym.cli", "train", f"plr_gym/procgen-{game}-v0", "--preset", PRESET]
    cmd += ["--seed", str(seed), "--save-minutes", str(SAVE_MINUTES), *method_args(method), *extra]
    cmd += ["--no-progress"]
    return cmd + (["--resume", str(path)] if resume else ["--out", str(path)])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _read_pids(out: Path) -> dict[str, int]:
    path = out / PIDS_FILE
    if not path.is_file():
        return {}
    return {k: int(v) for k, v in json.loads(path.read_text()).items()}


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)


def _device_name() -> str:
    try:
        proc = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        )
        if proc.returncode == 0 and proc.stdout.strip():
            return "GPU: " + proc.stdout.strip().replace("\n", ", ")
    except (OSError, subprocess.SubprocessError):
        pass
    return f"CPU only: {cpu_model()} ({os.cpu_count()} cores)"


def launch(args: argparse.Namespace, extra: list[str]) -> int:
    """Start every unfinished run in parallel, wait for them, then write the report. Returns 0 when all
    runs finished, 1 otherwise."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    target = target_steps(extra)
    live = {k: p for k, p in _read_pids(out).items() if _alive(p)}
    if live:
        print(f"runs still alive from an earlier launch: {live}; --stop them or wait", file=sys.stderr)
        return 2
    todo = []
    for method in args.methods:
        for seed in args.seeds:
            path = run_dir(out, method, seed)
            state = run_state(path, target)
            if state == "done":
                print(f"{path.name}: done")
                continue
            todo.append((method, seed, path, state))
    if not todo:
        write_report(out, args.game, target)
        return 0
    threads = args.env_threads or max(1, (os.cpu_count() or 1) // len(todo))
    common = [*extra, "--env-kwarg", f"num_threads={threads}"]
    procs: dict[str, subprocess.Popen[bytes]] = {}
    record = {
        "game": args.game,
        "target_timesteps": target,
        "parallel_runs": len(todo),
        "env_threads_per_run": threads,
        "device": _device_name(),
        "commit": git_commit(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "extra_args": extra,
        "commands": {},
    }
    for method, seed, path, state in todo:
        path.parent.mkdir(parents=True, exist_ok=True)
        resume = state == "partial"
        # a run killed before its first save has nothing to resume: start it again
        fresh = [] if resume or not path.exists() else ["--overwrite"]
        cmd = train_command(args.game, method, seed, path, [*common, *fresh], resume)
        with open(path.parent / f"{path.name}.log", "ab") as log:  # the child keeps its own descriptor
            log.write(f"\n$ {' '.join(cmd)}\n".encode())
            log.flush()
            procs[path.name] = subprocess.Popen(
                cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        record["commands"][path.name] = cmd
        print(f"{path.name}: {'resumed' if resume else 'started'} (pid {procs[path.name].pid})", flush=True)
    _write_json(out / PIDS_FILE, {**{k: p.pid for k, p in procs.items()}, LAUNCHER: os.getpid()})
    _write_json(out / CAMPAIGN_FILE, record)

    def forward(signum: int, frame: Any) -> None:  # stop the runs cleanly (they save), then return
        for p in procs.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGINT)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    codes = {}
    while len(codes) < len(procs):
        for name, p in procs.items():
            if name not in codes and p.poll() is not None:
                codes[name] = p.returncode
                print(f"{name}: exit code {p.returncode}", flush=True)
        time.sleep(args.poll)
    write_report(out, args.game, target)
    failed = {k: c for k, c in codes.items() if c != 0}
    if failed:
        print(f"not finished (see runs/<name>.log): {failed}", file=sys.stderr)
    return 1 if failed else 0


def stop(out: Path, grace: float) -> int:
    """SIGINT to every live run's process group; wait up to ``grace`` seconds for them to save and exit."""
    pids = {k: p for k, p in _read_pids(out).items() if _alive(p)}
    for name, pid in pids.items():
        if name == LAUNCHER:  # it waits for the runs, writes the report and exits
            continue
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGINT)
        print(f"{name}: SIGINT sent (pid {pid})", flush=True)
    deadline = time.monotonic() + grace
    while pids and time.monotonic() < deadline:
        pids = {k: p for k, p in pids.items() if _alive(p)}
        time.sleep(1)
    if pids:
        print(f"still running after {grace:.0f} s: {pids}", file=sys.stderr)
        return 1
    return 0


# --------------------------------------------------------------------------------------------------
# status and report
# --------------------------------------------------------------------------------------------------
def read_curve(path: Path) -> list[dict[str, float]]:
    """``eval.csv``'s held-out rows: timesteps, mean, wall_time."""
    csv_path = path / "eval.csv"
    if not csv_path.is_file():
        return []
    with open(csv_path, newline="") as f:
        return [
            {"timesteps": float(r["timesteps"]), "mean": float(r["mean"]), "wall_time": float(r["wall_time"])}
            for r in csv.DictReader(f)
            if r.get("split") == "test"
        ]


def steps_per_second(curve: list[dict[str, float]]) -> float | None:
    """Steps per wall-clock second between evaluations, evaluation time included, summed over the
    processes that trained the run (``wall_time`` restarts at 0 when a run is resumed)."""
    steps = seconds = 0.0
    for prev, cur in zip(curve, curve[1:]):
        if cur["wall_time"] >= prev["wall_time"] and cur["timesteps"] > prev["timesteps"]:
            steps += cur["timesteps"] - prev["timesteps"]
            seconds += cur["wall_time"] - prev["wall_time"]
    return steps / seconds if seconds > 0 else None


def collect(out: Path, target: int) -> list[dict[str, Any]]:
    pids = _read_pids(out)
    rows = []
    for path in sorted((out / "runs").glob("*-seed*")):
        if not path.is_dir():
            continue
        method, _, seed = path.name.rpartition("-seed")
        curve = read_curve(path)
        final = None
        evaluation = path / "evaluation.json"
        if evaluation.is_file():
            final = json.loads(evaluation.read_text())
        pid = pids.get(path.name)
        rows.append(
            {
                "run": path.name,
                "method": method,
                "seed": int(seed),
                "state": run_state(path, target),
                "timesteps": int(curve[-1]["timesteps"]) if curve else 0,
                "steps_per_s": steps_per_second(curve),
                "last_mean": curve[-1]["mean"] if curve else None,
                "final_mean": None if final is None else float(final["summary"]["mean"]),
                "final_timesteps": None if final is None else int(final["timesteps"]),
                "alive": pid is not None and _alive(pid),
                "curve": curve,
            }
        )
    return rows


def status(out: Path, extra: list[str]) -> None:
    target = target_steps(extra)
    print("| run | state | steps | of | steps/s | last held-out mean | running |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in collect(out, target):
        sps = "—" if r["steps_per_s"] is None else f"{r['steps_per_s']:.0f}"
        last = "—" if r["last_mean"] is None else f"{r['last_mean']:.2f}"
        print(f"| {r['run']} | {r['state']} | {r['timesteps']} | {target} | {sps} | {last} | {r['alive']} |")


def _mean_se(values: list[float]) -> tuple[float, float]:
    n = len(values)
    mean = sum(values) / n
    se = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1) / n) if n > 1 else float("nan")
    return mean, se


def write_report(out: Path, game: str, target: int) -> dict[str, Any]:
    """``results.json``, ``results.md``, ``curves.csv`` and (with matplotlib) ``curves.png`` in ``out``."""
    rows = collect(out, target)
    finals = {r["run"]: r["final_mean"] for r in rows if r["state"] == "done"}
    uniform = [r["final_mean"] for r in rows if r["method"] == "uniform" and r["run"] in finals]
    base = sum(uniform) / len(uniform) if uniform else None
    usable = base is not None and base != 0
    methods: dict[str, Any] = {}
    for method in sorted({r["method"] for r in rows}):
        done = [r for r in rows if r["method"] == method and r["run"] in finals]
        raw = [float(r["final_mean"]) for r in done]
        entry: dict[str, Any] = {"seeds": [r["seed"] for r in done], "final_mean": raw}
        if raw:
            entry["mean"], entry["se"] = _mean_se(raw)
            if usable:
                norm = [100 * v / base for v in raw]  # type: ignore[operator]
                entry["normalised"] = norm
                entry["normalised_mean"], entry["normalised_se"] = _mean_se(norm)
        methods[method] = entry
    campaign = json.loads((out / CAMPAIGN_FILE).read_text()) if (out / CAMPAIGN_FILE).is_file() else {}
    result = {
        "game": game,
        "target_timesteps": target,
        "uniform_mean": base,
        "methods": methods,
        "runs": [{k: v for k, v in r.items() if k != "curve"} for r in rows],
        "campaign": campaign,
    }
    _write_json(out / "results.json", result)
    with open(out / "curves.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["method", "seed", "timesteps", "heldout_mean", "normalised"])
        for r in rows:
            for point in r["curve"]:
                norm = 100 * point["mean"] / base if usable else ""  # type: ignore[operator]
                w.writerow([r["method"], r["seed"], int(point["timesteps"]), point["mean"], norm])
    lines = [
        f"# Paper campaign: {game}",
        "",
        f"- target: {target} steps per run, `--preset {PRESET}`",
        f"- device: {campaign.get('device', 'unknown')}",
        f"- runs in parallel: {campaign.get('parallel_runs', '?')}",
        f"- commit: {campaign.get('commit', '?')}; extra args: `{' '.join(campaign.get('extra_args', []))}`",
        f"- uniform's mean held-out return (the normaliser): {'—' if base is None else f'{base:.3f}'}",
        "",
        "| method | seeds done | held-out mean ± s.e. | normalised test return ± s.e. |",
        "| --- | --- | --- | --- |",
    ]

    def show(e: dict[str, Any], key: str, digits: int) -> str:
        if key not in e:
            return "—"
        se = e[key.replace("mean", "se")]
        return f"{e[key]:.{digits}f}" + ("" if math.isnan(se) else f" ± {se:.{digits}f}")

    for method, e in methods.items():
        mean, norm = show(e, "mean", 3), show(e, "normalised_mean", 1)
        lines.append(f"| {method} | {len(e['seeds'])} | {mean} | {norm} |")
    lines += [
        "",
        "| run | state | steps | steps/s (incl. evaluation) | final held-out mean |",
        "| --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        sps = "—" if r["steps_per_s"] is None else f"{r['steps_per_s']:.0f}"
        fin = "—" if r["final_mean"] is None else f"{r['final_mean']:.3f}"
        lines.append(f"| {r['run']} | {r['state']} | {r['timesteps']} | {sps} | {fin} |")
    (out / "results.md").write_text("\n".join(lines) + "\n")
    _plot(out, rows, base if usable else None, game)
    return result


def _plot(out: Path, rows: list[dict[str, Any]], base: float | None, game: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for method in sorted({r["method"] for r in rows}):
        by_step: dict[float, list[float]] = {}
        for r in rows:
            if r["method"] == method:
                for p in r["curve"]:
                    value = 100 * p["mean"] / base if base else p["mean"]
                    by_step.setdefault(p["timesteps"], []).append(value)
        steps = sorted(by_step)
        if steps:
            ax.plot(steps, [sum(by_step[s]) / len(by_step[s]) for s in steps], marker="o", ms=3, label=method)
    ax.set_xlabel("environment steps")
    ax.set_ylabel("held-out return, % of uniform's final mean" if base else "held-out mean return")
    ax.set_title(f"Procgen {game}, --preset {PRESET} (mean over seeds)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "curves.png", dpi=120)
    plt.close(fig)


# --------------------------------------------------------------------------------------------------
# GPU lease routine
# --------------------------------------------------------------------------------------------------
def prepare() -> int:
    """Download the wheels and .debs a GPU lease carries into ``benchmarks/.gpu_payload`` (git-ignored)."""
    payload = ROOT / PAYLOAD
    (payload / "whl").mkdir(parents=True, exist_ok=True)
    (payload / "deb").mkdir(parents=True, exist_ok=True)
    pip = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
        "--python-version", "3.12", "--implementation", "cp",
        "--platform", "manylinux_2_28_x86_64", "--platform", "manylinux_2_17_x86_64",
        "--platform", "manylinux2014_x86_64", "--platform", "manylinux1_x86_64", "--platform", "any",
        "-d", str(payload / "whl"), *WHEELS,
    ]  # fmt: skip
    code = subprocess.run(pip).returncode
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(payload / "whl"), *SDIST_WHEELS]
    code |= subprocess.run(build).returncode
    apt = ["apt-get", "-oAPT::Architecture=amd64", "download", *DEBS]
    code |= subprocess.run(apt, cwd=payload / "deb").returncode
    total = sum(f.stat().st_size for f in payload.rglob("*") if f.is_file())
    print(f"{payload}: {total / 2**20:.1f} MiB (a device call carries at most 64 MiB, tree included)")
    return code


def budget(args: argparse.Namespace, extra: list[str]) -> list[str]:
    """What the campaign costs: runs, steps, and GPU-hours at a measured rate.

    The rate is ``--steps-per-second`` (one run's steps per second while all of them run side by side on
    one GPU), else the median rate of the campaign's runs so far (from their ``eval.csv``: run one slice,
    then ask again); without either the GPU figure is not known and only the CPU figure is given.
    """
    runs = len(args.seeds) * len(args.methods)
    target = target_steps(extra)
    total = runs * target
    lines = [
        f"# budget: {runs} runs ({len(args.methods)} methods x {len(args.seeds)} seeds) x {target:,} steps "
        f"= {total:,} environment steps, all runs side by side on one GPU, a checkpoint every "
        f"{SAVE_MINUTES} min"
    ]
    rate, source = args.steps_per_second, "--steps-per-second"
    if rate is not None and not (math.isfinite(rate) and rate > 0):
        raise SystemExit(f"--steps-per-second must be a number > 0, got {rate}")
    if rate is None:
        measured = [r["steps_per_s"] for r in collect(Path(args.out), target) if r["steps_per_s"]]
        if measured:
            rate, source = sorted(measured)[len(measured) // 2], f"median of {len(measured)} runs so far"
    if rate is not None:
        hours = target / rate / 3600
        slices = math.ceil(hours * 60 / SAVE_MINUTES)
        lines.append(
            f"# at {rate:,.0f} steps/s per run ({source}): {hours:,.1f} GPU-hours "
            f"(= {slices:,} slices of {SAVE_MINUTES} min; each run resumes from its last checkpoint)"
        )
    else:
        lines.append(
            "# GPU rate not measured yet: run one slice (the campaign command below, ~10 min), then --plan "
            "again, or give --steps-per-second"
        )
    if CPU_STEPS_PER_CPU_SECOND is not None:
        cpu_hours = total / CPU_STEPS_PER_CPU_SECOND / 3600
        lines.append(
            f"# on a CPU, for comparison: {CPU_STEPS_PER_CPU_SECOND:,.0f} steps per CPU-second per run "
            f"(measured, docs/paper.md): {cpu_hours:,.0f} CPU-hours"
        )
    return lines


def plan(args: argparse.Namespace, extra: list[str]) -> str:
    """The budget (:func:`budget`), then the calls of one slice of a held GPU machine, as text (each call
    must follow the last within the machine's 30 s warm time, and a slice ends after 30 minutes held)."""
    out = args.out
    more = f" {' '.join(extra)}" if extra else ""
    campaign = (
        f"python3 benchmarks/learning/paper_campaign.py --game {args.game} "
        f"--seeds {' '.join(map(str, args.seeds))} "
        f"--methods {' '.join(args.methods)} --out {out}{more}"
    )
    env = (
        "export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1 "
        "LD_LIBRARY_PATH=/tmp/gl/usr/lib/x86_64-linux-gnu:/tmp/gl/lib/x86_64-linux-gnu:$LD_LIBRARY_PATH; "
    )
    install = (
        "python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade "
        "--target /tmp/site "
        f"{PAYLOAD}/whl/*.whl || exit; mkdir -p /tmp/gl && "
        f"for f in {PAYLOAD}/deb/*.deb; do dpkg -x $f /tmp/gl; done; "
    )
    check = (
        "python3 -c 'import numpy, torch, plr_gym; from plr_gym.envs.procgen_sb3 import ProcgenVecEnv; "
        'v = ProcgenVecEnv("bigfish", n_envs=2); v.reset(); print("procgen ok", numpy.__version__, '
        "torch.cuda.get_device_name())'"
    )
    status = f"python3 benchmarks/learning/paper_campaign.py --status --out {out}{more}"
    return "\n".join(
        [
            *budget(args, extra),
            f"# Here, once per checkout: wheels (cp312) and libGL .debs -> {PAYLOAD}/ (git-ignored), ~55 MiB",
            "python benchmarks/learning/paper_campaign.py --prepare",
            "# Here, to continue a campaign brought back earlier: unpack its parts",
            f"python benchmarks/learning/paper_campaign.py --unbundle <files_at>/state-*.tgz.part-* "
            f"--out {out}",
            "# Then, back to back (the machine goes back 30 s after a call; 30 min held at most):",
            f'# call 1: run(carry=["{PAYLOAD}"], timeout_s=300)',
            env + install + check,
            "# call 2 (only when resuming): carry the runs, one call per group of 56 MiB (--bundle-groups)",
            f'#   run(carry=["{out}/runs"], timeout_s=60), command: ls {out}/runs',
            "# call 3: launch in its own session, so it outlives the call, then watch 9 minutes:",
            f"{env}setsid nohup {campaign} > /tmp/campaign.log 2>&1 < /dev/null & sleep 540; {status}; "
            "tail -3 /tmp/campaign.log; nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv",
            "# call 4: watch 9 more minutes",
            f"{env}sleep 540; {status}",
            "# call 5 (before ~27 min held): every run saves and stops; report; bring back results + group 0",
            f"{env}sleep 120; python3 benchmarks/learning/paper_campaign.py --stop --grace 120 --out {out}; "
            f"python3 benchmarks/learning/paper_campaign.py --report --game {args.game} --out {out}{more}; "
            f"cp {out}/results.md {out}/results.json {out}/curves.csv {out}/curves.png $OUT/; "
            f"python3 benchmarks/learning/paper_campaign.py --bundle 0 --bundle-to $OUT --out {out}",
            "# call 6, 7, ...: the other groups (--bundle 1, 2, ...), while the machine is still held;",
            "# then give_back. Fit the sleeps to status's budget_left_s (30 min of device time a session).",
            f"python3 benchmarks/learning/paper_campaign.py --bundle 1 --bundle-to $OUT --out {out}",
            "# Here: copy results.* and curves.* from files_at into the campaign folder, commit them,",
            "# and keep the state parts (--unbundle) for the next lease. Limits: a call carries and brings",
            "# back at most 64 MiB; an IMPALA run's state (model.zip with Adam ~7.5 MB, curriculum.npz",
            "# growing to a few MB over 25M steps, TensorBoard) is 8-16 MB, so one call moves 3-7 runs.",
        ]
    )


# --------------------------------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    p.add_argument("--game", default="bigfish", help="Procgen game (default bigfish)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="seeds (default 0 1 2)")
    p.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS), help="default: all three")
    p.add_argument(
        "--out", default=None, help="campaign folder (default benchmarks/results/paper_campaign/GAME)"
    )
    p.add_argument(
        "--env-threads", type=int, default=None, help="Procgen threads per run (default: cores/runs)"
    )
    p.add_argument(
        "--steps-per-second",
        type=float,
        default=None,
        help="--plan: one run's measured GPU rate, for the GPU-hours (default: the runs' own, once measured)",
    )
    p.add_argument("--poll", type=float, default=5.0, help="seconds between checks of the runs (default 5)")
    p.add_argument("--grace", type=float, default=120.0, help="--stop: seconds to wait (default 120)")
    p.add_argument("--smoke", action="store_true", help="tiny CPU overrides: " + " ".join(SMOKE_ARGS))
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--status", action="store_true", help="print the runs' progress")
    mode.add_argument("--stop", action="store_true", help="stop the live runs (they save) and wait")
    mode.add_argument("--report", action="store_true", help="write results.md/json and curves.csv/png")
    mode.add_argument("--plan", action="store_true", help="print the device-tool calls of one GPU lease")
    mode.add_argument("--prepare", action="store_true", help="download the wheels and .debs a lease carries")
    mode.add_argument("--bundle", type=int, metavar="K", help="pack group K of the runs into --bundle-to")
    mode.add_argument("--bundle-groups", action="store_true", help="list the groups of runs --bundle packs")
    mode.add_argument("--unbundle", nargs="+", metavar="PART", help="unpack state-K.tgz.part-* into --out")
    p.add_argument("--bundle-to", default=".", help="--bundle: folder of the parts (default .)")
    args, extra = p.parse_known_args(argv)
    if args.smoke:
        extra = [*SMOKE_ARGS, *extra]
    args.out = args.out or f"benchmarks/results/paper_campaign/{args.game}"
    out = Path(args.out)
    if args.plan:
        print(plan(args, extra))
        return 0
    if args.prepare:
        return prepare()
    if args.status:
        status(out, extra)
        return 0
    if args.stop:
        return stop(out, args.grace)
    if args.bundle is not None:
        return bundle(out, args.bundle, Path(args.bundle_to))
    if args.bundle_groups:
        for k, group in enumerate(bundle_groups(out)):
            print(f"group {k}: {' '.join(str(p) for p in group)}")
        return 0
    if args.unbundle:
        return unbundle(out, [Path(p) for p in args.unbundle])
    if args.report:
        result = write_report(out, args.game, target_steps(extra))
        print((out / "results.md").read_text())
        return 0 if result["runs"] else 1
    return launch(args, extra)


if __name__ == "__main__":
    sys.exit(main())
