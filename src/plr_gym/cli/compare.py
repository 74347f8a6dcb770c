"""``plr-gym compare``: a table and a plot of run directories; ``--run`` trains a PLR and a uniform run
first (per seed of ``--seeds``; ``--jobs N``: up to N at once, one process each).
"""

from __future__ import annotations

import argparse
import io
import os
import signal
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from plr_gym import training
from plr_gym._eval_csv import TornRowWarning
from plr_gym.cli.common import CLIError, Interrupted, _has_modules, import_gym_packages
from plr_gym.cli.train import train
from plr_gym.options import SAMPLERS

__all__ = ["compare_command", "compare_runs"]


def compare_runs(run_dirs: Sequence[Path], out: Path) -> str:
    """Write ``comparison.md``, ``.csv`` and ``.png`` in ``out`` for ``run_dirs``; return the table."""
    from plr_gym.plotting import load_run, merge_seeds, plot_comparison, results_table

    loaded = [load_run(Path(d)) for d in run_dirs]
    groups: dict[str, list[Any]] = {}
    for run in loaded:
        groups.setdefault(run.label, []).append(run)
    runs = []
    for group in groups.values():
        seeds = [r.config.get("seed") for r in group]
        if len(group) > 1 and len(set(seeds)) == len(seeds):  # same configuration, several seeds
            runs.append(merge_seeds(group))
            continue
        for r in group:
            if len(group) > 1:
                r.label = f"{r.label} ({r.path.name})"
            runs.append(r)
    out.mkdir(parents=True, exist_ok=True)
    table, rows = results_table(runs)
    (out / "comparison.md").write_text(table + "\n")
    training.write_csv(out / "comparison.csv", list(rows[0]), rows)
    if _has_modules("matplotlib"):
        plot_comparison(runs, out / "comparison.png")
    else:
        print("note: comparison.png skipped: pip install matplotlib to get the plot", file=sys.stderr)
    return table


def _train_all(jobs: list[argparse.Namespace], n_jobs: int) -> list[Path]:
    """``train`` each of ``jobs`` (resolved namespaces of ``compare --run``) and return their directories:
    one after the other, or with ``n_jobs > 1`` up to that many at once, each in its own process
    (:func:`_train_job`), its output lines prefixed with its directory's name, without progress bars.

    In parallel, ``SIGINT`` (Ctrl-C), ``SIGTERM``, ``SIGHUP`` and ``SIGUSR1`` stop the runs under way as
    they stop ``plr-gym train`` (a checkpoint at the current step; the parent passes the signal on,
    ``SIGTERM`` for ``SIGINT``, which a terminal sends to every process anyway), start no other run, and
    raise :class:`Interrupted`. A run that fails stops the others the same way, and its error is raised.
    """
    if n_jobs <= 1 or len(jobs) <= 1:
        return [train(ns) for ns in jobs]
    import multiprocessing
    from multiprocessing.connection import wait

    from plr_gym.run import StopOnSignals

    ctx = multiprocessing.get_context("spawn")  # a fresh interpreter per run: no forked torch threads
    results: dict[int, Path] = {}
    running: dict[int, tuple[Any, Any]] = {}  # job index -> (process, the end its outcome arrives on)
    todo = list(range(len(jobs)))[::-1]
    failure: BaseException | None = None

    def stop_runs(signum: int) -> None:
        for proc, _ in running.values():
            if proc.is_alive():
                os.kill(proc.pid, signum)

    def pass_on() -> None:  # the first signal; a second Ctrl-C interrupts (the terminal sends it to the runs)
        stop_runs(signal.SIGTERM if stop.signal == signal.SIGINT else int(stop.signal or signal.SIGTERM))

    stop = StopOnSignals(on_request=pass_on)
    with stop.installed():
        while todo or running:
            while todo and not stop.requested and failure is None and len(running) < n_jobs:
                i = todo.pop()
                running[i] = _start_job(ctx, jobs[i])
                if stop.requested:  # a signal came while it started
                    stop_runs(signal.SIGTERM)
            if not running:
                break
            ended = set(wait([proc.sentinel for proc, _ in running.values()]))
            for i in [i for i, (proc, _) in running.items() if proc.sentinel in ended]:
                status, value = _job_outcome(*running.pop(i), jobs[i].out)
                if status == "ok":
                    results[i] = value
                elif failure is None and not stop.requested:
                    failure = value
                    stop_runs(signal.SIGTERM)  # the others save a checkpoint and stop
    if stop.requested:
        raise Interrupted(
            f"{stop.signal_name}: the runs under way saved a checkpoint at their current step and stopped; "
            f"{len(results)} of {len(jobs)} runs had finished",
            stop.exit_code,
        )
    if failure is not None:
        raise failure
    return [results[i] for i in range(len(jobs))]


def _start_job(ctx: Any, ns: argparse.Namespace) -> tuple[Any, Any]:
    """Start ``train(ns)`` in a new process (:func:`_train_job`): the process and the end its outcome
    arrives on."""
    ns.progress = False  # one progress bar per process would garble the terminal
    receive, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_train_job, args=(ns, send), name=f"plr-gym {ns.out}")
    proc.start()
    send.close()
    return proc, receive


def _job_outcome(proc: Any, receive: Any, out: str) -> tuple[str, Any]:
    """``("ok", run directory)`` or ``("error", exception)`` of an ended process of :func:`_start_job`."""
    proc.join()
    outcome: tuple[str, Any] | None
    try:
        outcome = receive.recv()
    except EOFError:  # the process died before it could send
        outcome = None
    except Exception as exc:  # an exception that does not unpickle
        outcome = ("error", RuntimeError(f"the run in {out} failed: {exc!r}"))
    receive.close()
    if outcome is None:
        return "error", RuntimeError(f"the run in {out} died (exit code {proc.exitcode})")
    return outcome


def _train_job(ns: argparse.Namespace, send: Any) -> None:
    """``train(ns)`` in a process of :func:`_train_all`; sends ``("ok", run directory)`` or ``("error",
    exception)`` on ``send``. Signals stop it as they stop ``plr-gym train``."""
    stdout = sys.stdout
    sys.stdout = _PrefixedLines(stdout, f"[{Path(ns.out).name}] ")
    outcome: tuple[str, Any]
    try:
        outcome = ("ok", train(ns))
    except BaseException as exc:  # Interrupted, CLIError, anything: the parent reports it
        outcome = ("error", exc)
    finally:
        sys.stdout.flush()
        sys.stdout = stdout
    try:
        send.send(outcome)
    except Exception:  # an exception that does not pickle
        send.send(("error", RuntimeError(repr(outcome[1]))))
    finally:
        send.close()


class _PrefixedLines(io.TextIOBase):
    """A text stream that writes to ``stream`` with ``prefix`` at the start of every line."""

    def __init__(self, stream: Any, prefix: str) -> None:
        self._stream, self._prefix, self._line_start = stream, prefix, True

    def write(self, text: str) -> int:
        parts = []
        for line in text.splitlines(keepends=True):
            parts.append(self._prefix + line if self._line_start else line)
            self._line_start = line.endswith(("\n", "\r"))
        self._stream.write("".join(parts))
        return len(text)

    def flush(self) -> None:
        self._stream.flush()


def compare_command(args: argparse.Namespace) -> list[Path]:
    """Run ``plr-gym compare`` with parsed arguments; returns the compared run directories."""
    out = Path(args.out)
    run_dirs = [Path(d) for d in args.run_dirs]
    if args.run:
        if run_dirs:
            raise CLIError("compare --run trains its own runs into OUT/plr and OUT/uniform: give no RUN_DIR")
        if args.env_id is None:
            raise CLIError("compare --run needs --env ENV_ID")
        import_gym_packages(args)  # fails fast; each run imports them again (its own process with --jobs)
        jobs = []
        seeds = args.seeds or [args.seed]
        for seed in seeds:
            for sampler in SAMPLERS:
                ns = argparse.Namespace(**vars(args))
                ns.sampler, ns.seed = sampler, seed
                ns.out = str(out / training.run_dir_name(sampler, None if args.seeds is None else seed))
                jobs.append(ns)
        run_dirs = _train_all(jobs, getattr(args, "jobs", 1))
    if len(run_dirs) < 1:
        raise CLIError("compare needs run directories (written by plr-gym train), or --run")
    for d in run_dirs:
        if not (d / "eval.csv").is_file() or not (d / "config.json").is_file():
            raise CLIError(
                f"{d} is not a plr-gym run directory, or not a finished one (no eval.csv or config.json); "
                "train one with plr-gym train"
            )
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", TornRowWarning)
            table = compare_runs(run_dirs, out)
    except (OSError, ValueError, KeyError) as exc:  # a malformed run directory, or an unusable --out
        raise CLIError(f"cannot compare {', '.join(map(str, run_dirs))} into {out}: {exc!r}") from None
    for w in caught:  # a torn last row of an eval.csv (an older plr-gym on a full disk): one line each
        if issubclass(w.category, TornRowWarning):
            print(f"note: {w.message}", file=sys.stderr, flush=True)
        else:
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    print(table)
    written = [out / name for name in ("comparison.md", "comparison.csv", "comparison.png")]
    print("\nwrote " + ", ".join(str(p) for p in written if p.exists()))
    return run_dirs
