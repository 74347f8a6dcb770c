"""``plr-gym train``: check the options, start or continue the run directory, train, evaluate.

:func:`train` is the command, in named steps: :func:`_check_train_args` (everything checked before the run
directory is touched; the options a preset can set are filled by :func:`resolve_train_args`), the run's
``config.json`` and :class:`~plr_gym.run.RunDirectory` (locked, resumed), the envs and model
(:func:`plr_gym.training.build_run`), the callbacks (PLR, held-out evaluation, curriculum, checkpoints),
``model.learn`` with signals saving a checkpoint, and the final evaluation (``evaluation.json``).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import errno
import sys
import threading
import time
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from plr_gym import training
from plr_gym.cli.common import (
    CLIError,
    Interrupted,
    _algorithm_class,
    _apply_torch_threads,
    _env_kwargs,
    _has_modules,
    check_own_env,
    env_family,
    fold_env_kwargs,
    import_gym_packages,
    resolve_device,
)
from plr_gym.options import MAX_LEVELS, TRAIN_OPTIONS, parse_levels
from plr_gym.run import DEFAULT_KEEP, DEFAULT_SAVE_FREQ
from plr_gym.scoring import OUTCOME_STRATEGIES
from plr_gym.training import SetupError

__all__ = ["RESUME_MAY_CHANGE", "RUN_FILES", "resolve_train_args", "sampler_kwargs", "train"]

#: What ``plr-gym train`` writes in its run directory (``--overwrite`` removes these, nothing else).
RUN_FILES: tuple[str, ...] = (
    "config.json",
    "model.zip",
    "eval.csv",
    "evaluation.json",
    "curriculum.npz",
    "curriculum.png",
    "plr",
    "tb",
)


def _level_difficulty(env_id: str, env_kwargs: dict[str, Any], levels: Sequence[int]) -> Any:
    """Per-level difficulty where the env defines one (the DoorKey gamut's grid size), else ``None``."""
    if env_id != "plr_gym/MiniGrid-DoorKeyGamut-v0":
        return None
    sizes = tuple(env_kwargs.get("sizes", (5, 6, 8)))
    return np.array([sizes[lvl % len(sizes)] for lvl in levels], dtype=np.float64)


def _make_progress_callback(total: int) -> Any:
    """A plain-text progress report every 10% (used when tqdm/rich are not installed)."""
    from stable_baselines3.common.callbacks import BaseCallback

    class PrintProgress(BaseCallback):
        def __init__(self) -> None:
            super().__init__(verbose=0)
            self.next_mark = 0.1
            self.start = time.perf_counter()

        def _on_step(self) -> bool:
            done = self.num_timesteps / max(total, 1)
            if done >= self.next_mark:
                rate = self.num_timesteps / max(time.perf_counter() - self.start, 1e-9)
                print(f"  {done:4.0%}  {self.num_timesteps}/{total} steps  {rate:.0f} steps/s", flush=True)
                while self.next_mark <= done:
                    self.next_mark += 0.1
            return True

    return PrintProgress()


def sampler_kwargs(args: argparse.Namespace, levels: Sequence[int]) -> dict[str, Any]:
    """Keyword arguments of :class:`~plr_gym.LevelSampler` for ``--sampler plr`` or ``uniform``.

    ``uniform`` keeps the scoring strategy (scores are recorded, never used): the ``constant`` transform,
    no staleness, ``min_seen_ratio=0`` and the proportionate schedule draw every training level with
    probability ``1/N`` at every draw. ``args`` is resolved (:func:`resolve_train_args`).
    """
    from plr_gym.reference import power_offset

    kwargs: dict[str, Any] = {
        "levels": list(levels),
        "strategy": args.strategy,
        "alpha": args.alpha,
        "seed": args.seed,
    }
    if args.sampler == "uniform":
        kwargs.update(
            score_transform="constant",
            staleness_coef=0.0,
            replay_schedule="proportionate",
            min_seen_ratio=0.0,
        )
    else:
        kwargs.update(
            score_transform=args.score_transform,
            temperature=args.temperature,
            staleness_coef=args.staleness_coef,
            staleness_transform=args.staleness_transform,
            staleness_temperature=args.staleness_temperature,
            replay_schedule=args.replay_schedule,
            replay_prob=args.replay_prob,
            min_seen_ratio=args.min_seen_ratio,
            eps=args.eps,
            uniform_mass=args.uniform_mass,
            temperature_end=args.temperature_end,
            unseen_rank=args.unseen_rank,
            power_offset=power_offset(args.power_offset, args.score_transform, args.staleness_coef),
        )
    if kwargs["strategy"] == "learnability":
        kwargs["success_rate_alpha"] = args.success_rate_alpha
    return kwargs


#: ``plr-gym train`` options that may differ when a run is resumed (the rest must match its config.json).
RESUME_MAY_CHANGE: frozenset[str] = frozenset(
    {o.dest for o in TRAIN_OPTIONS if o.resumable} | {"recipe_sources"}  # recipe_sources: written by train
)


def _same_envs_other_processes(run_dir: Any, args: argparse.Namespace) -> frozenset[str]:
    """``{"vec_env"}`` when the run and this command differ only by ``--subproc`` (the same envs, in one
    process or one each), which may change on resume; the batched Procgen env is another env."""
    try:
        previous = run_dir.read_config()
    except ValueError:  # begin() reports it
        return frozenset()
    simple = ("dummy", "subproc")
    same = previous is not None and previous.get("vec_env") in simple and args.vec_env in simple
    return frozenset({"vec_env"}) if same else frozenset()


def train(args: argparse.Namespace) -> Path:
    """Run ``plr-gym train`` with parsed arguments; returns the run directory.

    The run directory is a :class:`plr_gym.run.RunDirectory`: it is locked for the run, checkpointed
    every ``--save-freq`` steps and on SIGTERM, SIGINT, SIGHUP and SIGUSR1, and continued by
    ``--resume``.

    :raises Interrupted: a signal stopped training after saving a checkpoint at the current step (exit
        code 128 + the signal's number), or a second Ctrl-C stopped it at once (130).
    """
    from plr_gym.run import RunDirectory

    checked = _check_train_args(args)
    out = _run_path(args)
    config = _run_config(args, out, checked.eval_levels)
    run_dir = RunDirectory(
        out, keep=getattr(args, "keep_checkpoints", DEFAULT_KEEP), logs=("eval.csv",), event_logs=("tb",)
    )
    checkpoint = _begin(run_dir, args, out, config)
    try:
        finishing = False  # the run has its steps, but stopped before its final evaluation
        if checkpoint is not None and checkpoint.timestep >= args.timesteps:
            if not _needs_final_evaluation(out, checkpoint.timestep, args):
                return _already_done(out, checkpoint.timestep, args)
            finishing = True
        _train_and_finish(args, checked, run_dir, checkpoint, finishing, out)
    finally:
        run_dir.release()
    return out


def _run_config(args: argparse.Namespace, out: Path, eval_levels: list[int]) -> dict[str, Any]:
    """``config.json``: every parsed option (resolved), the run directory, the env's family, the held-out
    levels in short, and a preset's test protocol."""
    config = {k: v for k, v in vars(args).items() if k not in ("func", "command")}
    config.update(out=str(out), env_family=env_family(args.env_id))
    config["eval_levels"] = f"{eval_levels[0]}..{eval_levels[-1]} ({len(eval_levels)} levels)"
    if args.preset is not None:
        from plr_gym.presets import TEST_PROTOCOLS

        config["test_protocol"] = TEST_PROTOCOLS[args.preset]
    return config


def _begin(run_dir: Any, args: argparse.Namespace, out: Path, config: dict[str, Any]) -> Any:
    """Start the run in ``run_dir`` or continue it (``--resume``); the checkpoint to restore, or ``None``."""
    from plr_gym.run import RunDirectoryError, RunDirectoryWarning

    resume = getattr(args, "resume", None) is not None
    if resume:
        _check_options_added_since(out, args)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", RunDirectoryWarning)
            return run_dir.begin(
                config,
                resume=resume,
                overwrite=getattr(args, "overwrite", False),
                mutable=(RESUME_MAY_CHANGE | _same_envs_other_processes(run_dir, args)) if resume else (),
                run_files=RUN_FILES,
            )
    except RunDirectoryError as exc:
        raise CLIError(str(exc)) from None
    finally:  # a resume never passes over a generation, or starts again, without a line saying so
        for w in caught:
            if issubclass(w.category, RunDirectoryWarning):
                print(f"note: {w.message}", file=sys.stderr, flush=True)
            else:
                warnings.showwarning(w.message, w.category, w.filename, w.lineno)


def _train_and_finish(
    args: argparse.Namespace, checked: CheckedArgs, run_dir: Any, checkpoint: Any, finishing: bool, out: Path
) -> None:
    """Build the run, restore its checkpoint, train up to ``--timesteps``, then the final evaluation."""
    run = _build_training(args, checked.sampler, checked.env_kwargs, checked.device, out)
    try:
        resumed = checkpoint is not None and not finishing
        parts = _train_callbacks(args, run, out, checked.train_levels, checked.eval_levels, resumed=resumed)
        if checkpoint is not None:
            _restore(run_dir, run.model, parts, checkpoint, out, finishing)
        threads = _apply_torch_threads(args.torch_threads, run.venv.observation_space)
        if not args.quiet:
            _announce(args, checked, threads, out, checkpoint)
        start = time.perf_counter()
        _learn(args, run.model, run_dir, parts, out, resumed=checkpoint is not None)
    finally:
        run.close()
    try:
        _finish(
            args, out, parts, checked.train_levels, checked.eval_levels, checked.env_kwargs, run.model,
            time.perf_counter() - start,
        )  # fmt: skip
    except OSError as exc:
        if exc.errno not in _DISK_FULL:
            raise
        raise _disk_full(exc, out, int(run.model.num_timesteps), run_dir.current()) from None


def _restore(
    run_dir: Any, model: Any, parts: _Callbacks, checkpoint: Any, out: Path, finishing: bool
) -> None:
    """The checkpoint back into the new model and callbacks; the held-out evaluation continues where the
    uninterrupted run makes it (a finishing run evaluated at its last step already writes only
    ``evaluation.json``)."""
    from plr_gym.run import RunDirectoryError

    try:
        run_dir.restore(model, plr_callback=parts.plr, checkpoint=checkpoint)
        parts.curriculum.resume_from = checkpoint.file("curriculum.npz")
    except RunDirectoryError as exc:
        raise CLIError(str(exc)) from None
    logged = _logged_steps(out / "eval.csv")  # as of the checkpoint
    if finishing and checkpoint.timestep in logged:
        parts.eval.log_path = None  # evaluated at this step already: evaluation.json only
    elif logged:  # the next evaluation where the uninterrupted run makes it
        parts.eval.last_eval = max(logged)


def _announce(
    args: argparse.Namespace, checked: CheckedArgs, threads: int, out: Path, checkpoint: Any
) -> None:
    print(
        f"[{args.sampler}] {args.algo} on {args.env_id}: {len(checked.train_levels)} training levels, "
        f"{len(checked.eval_levels)} held-out, {args.timesteps} steps, {args.n_envs} envs, {checked.device} "
        f"({threads} torch thread{'s' if threads != 1 else ''}) -> {out}"
        + (f" (resumed at step {checkpoint.timestep})" if checkpoint is not None else ""),
        flush=True,
    )


def _check_options_added_since(out: Path, args: argparse.Namespace) -> None:
    """A run started before the options of :mod:`plr_gym.reference` existed trained with their defaults
    (its ``config.json`` lacks them): resuming it with another choice would change its training half-way,
    so it is refused, naming the options to give."""
    from plr_gym.reference import REFERENCE_CHOICES
    from plr_gym.run import CONFIG_FILE

    try:
        previous = training.read_json(out / CONFIG_FILE)
    except (OSError, ValueError):
        return  # RunDirectory.begin reports a missing or unreadable config.json
    if not isinstance(previous, dict):
        return
    changed = [c for c in REFERENCE_CHOICES if c.dest not in previous and getattr(args, c.dest) != c.default]
    if changed:
        raise CLIError(
            f"--resume {out}: the run was started before {', '.join(c.flag for c in changed)} existed, and "
            f"trained with the defaults; resume it with {' '.join(f'{c.flag} {c.default}' for c in changed)}"
        )


class CheckedArgs(NamedTuple):
    """What :func:`_check_train_args` gives ``train``: levels, sampler, the env's keywords, device."""

    train_levels: list[int]
    eval_levels: list[int]
    sampler: Any
    env_kwargs: dict[str, Any]
    device: str


def _check_train_args(args: argparse.Namespace) -> CheckedArgs:
    """Everything ``train`` checks before it touches the run directory."""
    from plr_gym.sampler import LevelSampler

    args.recipe_sources = resolve_train_args(args)  # recorded in config.json
    import_gym_packages(args)  # registers the user's env ids (--gym-packages)
    fold_env_kwargs(args)  # --env-kwargs joins --env-kwarg
    family = env_family(args.env_id)
    if args.vec_env == "batched" and family != "procgen":  # refused before the run directory is touched
        raise CLIError(
            f"--vec-env batched (which --preset paper-procgen sets) is for Procgen games only "
            f"(plr_gym/procgen-<game>-v0), got {args.env_id}"
        )
    if args.level_draw == "episode_end" and args.vec_env == "subproc":  # refused before the run directory
        raise CLIError(
            "--level-draw episode_end (which the paper presets set) draws each level when the previous "
            "episode ends, from inside the envs' step: the envs must run in this process, but --vec-env "
            "subproc runs them in worker processes (one round trip to the learner per ended episode). Use "
            "--vec-env dummy "
            "(or batched for Procgen), or --level-draw episode_start"
        )
    _algorithm_class(args.algo)  # refused before the run directory is touched
    if args.num_levels > MAX_LEVELS:
        raise CLIError(f"--num-levels {args.num_levels} exceeds the supported maximum {MAX_LEVELS}")
    if args.level_start + args.num_levels - 1 > 2**63 - 1:
        raise CLIError(
            f"--level-start {args.level_start} + --num-levels {args.num_levels}: level ids must fit in int64 "
            "(at most 2**63 - 1)"
        )
    train_levels = list(range(args.level_start, args.level_start + args.num_levels))
    eval_levels: list[int] = args.eval_levels
    overlap = sorted(set(train_levels) & set(eval_levels))
    if overlap:
        raise CLIError(
            f"--eval-levels must be held out, but {len(overlap)} of them are training levels "
            f"(e.g. {overlap[0]}); training levels are "
            f"{args.level_start}:{args.level_start + args.num_levels}"
        )
    if args.algo != "a2c" and args.batch_size < 2 and args.advantage_normalization != "none":
        raise CLIError(
            f"--batch-size must be at least 2, got {args.batch_size}: SB3's PPO refuses a minibatch of 1 "
            f"while it normalises advantages (--advantage-normalization {args.advantage_normalization}); "
            "give --advantage-normalization none for minibatches of 1"
        )
    if args.partial_episodes == "commit" and args.strategy in OUTCOME_STRATEGIES:
        raise CLIError(
            f"--partial-episodes commit (which the paper presets set) scores unfinished episodes, which have "
            f"no outcome for --strategy {args.strategy}: give --partial-episodes stitch"
        )
    if args.algo != "a2c" and args.batch_size > args.n_steps * args.n_envs:
        raise CLIError(
            f"--batch-size {args.batch_size} exceeds the rollout size --n-steps x --n-envs = "
            f"{args.n_steps * args.n_envs}"
        )
    try:
        sampler = LevelSampler(**sampler_kwargs(args, train_levels))
    except (ValueError, TypeError) as exc:
        raise CLIError(str(exc)) from None
    env_kwargs = _env_kwargs(args, family)
    if family == "other":  # an env of the user's own: what PLR needs of it, before the run directory
        check_own_env(args.env_id, env_kwargs, [*train_levels, *eval_levels], quiet=args.quiet)
    device = resolve_device(getattr(args, "device", "auto"))
    return CheckedArgs(train_levels, eval_levels, sampler, env_kwargs, device)


def _run_path(args: argparse.Namespace) -> Path:
    """The run directory: ``--resume DIR``, else ``--out`` (default ``runs/run``)."""
    resume = getattr(args, "resume", None)
    if resume:  # --resume DIR
        path = Path(resume)
        if args.out is not None and Path(args.out).resolve() != path.resolve():
            raise CLIError(
                f"--resume {path} continues the run in {path}: give no --out, or the same directory"
            )
        return path
    if args.out is not None and not args.out.strip():
        raise CLIError(f"--out must name a directory, got {args.out!r} (default: runs/run)")
    return Path(args.out or "runs/run")


def _needs_final_evaluation(out: Path, steps: int, args: argparse.Namespace) -> bool:
    """Whether a run whose checkpoint has ``--timesteps`` steps stopped before its final evaluation
    (killed, or stopped by a signal, between its last checkpoint and ``evaluation.json``): its last
    rollout ended at or past ``--timesteps``, and it has no ``evaluation.json`` of that step."""
    if steps >= args.timesteps + args.n_envs * args.n_steps:  # more than the last rollout's overshoot
        return False
    try:
        done = training.read_json(out / training.EVALUATION_FILE).get("timesteps")
    except (OSError, ValueError, AttributeError):
        return True
    return bool(done != steps)


def _logged_steps(log: Path) -> set[int]:
    """The steps of the rows of ``eval.csv`` (empty if there is none)."""
    from plr_gym._eval_csv import read_rows

    try:
        return {int(row["timesteps"]) for row in read_rows(log)}  # a torn last row dropped, with a warning
    except (OSError, KeyError, ValueError, TypeError):
        return set()


def _already_done(out: Path, steps: int, args: argparse.Namespace) -> Path:
    """``--resume`` of a run that already has ``--timesteps`` steps: finished (exit 0) or a mistake."""
    if not (out / training.EVALUATION_FILE).is_file():
        raise CLIError(
            f"--resume {out}: the run has {steps} steps already, --timesteps is {args.timesteps}; give a "
            "larger --timesteps (the total)"
        )
    if not args.quiet:
        print(f"{out}: the run is finished ({steps} steps, --timesteps {args.timesteps}); nothing to do")
    return out


def _build_training(
    args: argparse.Namespace, sampler: Any, env_kwargs: dict[str, Any], device: str, out: Path
) -> Any:
    """The envs and a new model (a resumed run's weights are restored into it)."""
    tensorboard_log = None
    if args.tensorboard:
        if _has_modules("tensorboard"):
            tensorboard_log = str(out / "tb")
        else:
            print("note: TensorBoard logs skipped (pip install tensorboard to get them)", file=sys.stderr)
    try:
        return training.build_run(
            args.env_id,
            sampler,
            algo=args.algo,
            n_envs=args.n_envs,
            seed=args.seed,
            env_seed=args.seed,
            eval_seed=args.seed + 1,
            env_kwargs=env_kwargs,
            subproc=args.vec_env == "subproc",
            batched=args.vec_env == "batched",
            hyperparameters=training.Hyperparameters(
                **{f.name: getattr(args, f.name) for f in dataclasses.fields(training.Hyperparameters)}
            ),
            device=device,
            tensorboard_log=tensorboard_log,
            encoder=args.encoder,
            normalize_reward=args.normalize_reward,
            normalize_reward_gamma=args.normalize_reward_gamma,
            time_limit=args.time_limit,
            residual_skip=args.residual_skip,
            level_draw=args.level_draw,
        )
    except SetupError as exc:
        raise CLIError(str(exc)) from None
    except MemoryError:
        raise CLIError(
            f"not enough memory for {args.n_envs} envs x {args.n_steps} steps per rollout; use smaller values"
        ) from None


@dataclass
class _Callbacks:
    """The callbacks of a ``plr-gym train`` run (the checkpoint callback is added by ``_learn``)."""

    plr: Any
    eval: Any
    curriculum: Any
    extra: list[Any]

    def all(self) -> list[Any]:
        return [self.plr, self.eval, self.curriculum, *self.extra]


def _train_callbacks(
    args: argparse.Namespace,
    run: Any,
    out: Path,
    train_levels: list[int],
    eval_levels: list[int],
    resumed: bool,
) -> _Callbacks:
    """PLR, held-out evaluation (``eval.csv``), curriculum record and progress report of a run."""
    from plr_gym.callbacks import CurriculumLogCallback, PLRCallback
    from plr_gym.evaluation import HeldOutEvalCallback

    n_train_eval = min(len(train_levels), len(eval_levels))
    eval_callback = HeldOutEvalCallback(
        run.eval_venv,
        eval_levels,
        eval_freq=args.eval_freq,
        n_episodes=args.eval_episodes,
        deterministic=args.eval_deterministic,
        train_levels=train_levels[:n_train_eval] if args.eval_train_levels else None,
        log_path=out / "eval.csv",
        eval_at_start=getattr(args, "eval_at_start", True) and not resumed,
        verbose=int(not args.quiet),
    )
    extra = []
    if args.progress and not args.quiet and not _has_modules("tqdm", "rich"):
        extra.append(_make_progress_callback(args.timesteps))
    return _Callbacks(
        PLRCallback(partial_episodes=args.partial_episodes), eval_callback, CurriculumLogCallback(), extra
    )


def _learn(
    args: argparse.Namespace, model: Any, run_dir: Any, parts: _Callbacks, out: Path, resumed: bool
) -> None:
    """``model.learn`` up to ``--timesteps`` in total, saving checkpoints in ``run_dir``; a signal saves
    and stops."""
    from plr_gym.callbacks import RunCheckpointCallback
    from plr_gym.run import RunDirectoryError, StopOnSignals

    stop = StopOnSignals(on_request=lambda: setattr(parts.eval, "eval_at_end", False))
    saver = RunCheckpointCallback(
        run_dir,
        getattr(args, "save_freq", DEFAULT_SAVE_FREQ),
        plr_callback=parts.plr,
        files={"curriculum.npz": parts.curriculum.save},
        stop=stop,
        save_seconds=None if getattr(args, "save_minutes", None) is None else 60.0 * args.save_minutes,
    )
    try:
        with stop.installed(), _writer_thread_errors_in_main():
            model.learn(
                max(args.timesteps - int(model.num_timesteps), 0),  # 0: a finished run's final evaluation
                callback=[*parts.all(), saver],  # the saver last: it saves what the others wrote
                progress_bar=args.progress and not args.quiet and _has_modules("tqdm", "rich"),
                tb_log_name=args.sampler,
                reset_num_timesteps=not resumed,  # a resumed run continues its TensorBoard run
            )
    except RunDirectoryError as exc:  # a checkpoint could not be written (disk full, ...)
        raise CLIError(str(exc)) from None
    except OSError as exc:
        if exc.errno not in _DISK_FULL:
            raise
        raise _disk_full(exc, out, model.num_timesteps, saver.last) from None
    except KeyboardInterrupt:
        last = saver.last.timestep if saver.last is not None else None
        where = f"continue from its checkpoint at step {last} with --resume {out}" if last is not None else ""
        raise Interrupted(
            f"interrupted at once at step {model.num_timesteps}" + (f": {where}" if where else ""), 130
        ) from None
    if stop.requested:
        raise Interrupted(
            f"{stop.signal_name}: stopped at step {model.num_timesteps} and saved a checkpoint there in "
            f"{out}; continue with the same command and --resume {out}",
            stop.exit_code,
        )


def _disk_full(exc: OSError, out: Path, step: int, last: Any) -> CLIError:
    """The one line for a write in the run directory that failed for want of space."""
    kept = f"the checkpoint at step {last.timestep} is kept" if last is not None else "no checkpoint kept"
    return CLIError(
        f"cannot write in {out} at step {step} (a log, TensorBoard's events, evaluation.json or an env's "
        f"file): {exc.strerror}{f' ({exc.filename})' if exc.filename else ''}; {kept}: free space and "
        f"continue with --resume {out}"
    )


#: ``errno`` of a write that failed for want of space: disk full, quota exceeded, file-size limit.
_DISK_FULL = frozenset(getattr(errno, name) for name in ("ENOSPC", "EDQUOT", "EFBIG") if hasattr(errno, name))


@contextlib.contextmanager
def _writer_thread_errors_in_main() -> Iterator[None]:
    """TensorBoard writes its event files in a thread; a write that fails there (disk full) is raised
    again by the next write in the main thread, where ``train`` reports it in one line. Meanwhile the
    thread's own traceback is not printed."""
    previous = threading.excepthook

    def hook(info: Any) -> None:
        exc = info.exc_value
        disk_full = isinstance(exc, OSError) and exc.errno in _DISK_FULL
        if not (type(info.thread).__name__ == "_AsyncWriterThread" and disk_full):
            previous(info)

    threading.excepthook = hook
    try:
        yield
    finally:
        threading.excepthook = previous


def _finish(
    args: argparse.Namespace,
    out: Path,
    parts: _Callbacks,
    train_levels: list[int],
    eval_levels: list[int],
    env_kwargs: dict[str, Any],
    model: Any,
    seconds: float,
) -> None:
    """The curriculum plot and ``evaluation.json`` (the final held-out evaluation) of a finished run."""
    from plr_gym.evaluation import summarize

    _plot_curriculum(out, parts.curriculum, _level_difficulty(args.env_id, env_kwargs, train_levels), args)
    returns = parts.eval.last_returns["test"]  # the evaluation at the end of training
    result = {
        "env_id": args.env_id,
        "levels": eval_levels,
        "returns": training.returns_to_json(returns),
        "summary": summarize(returns),
        "train_seconds": round(seconds, 1),
        "timesteps": int(model.num_timesteps),
    }
    training.write_json(out / training.EVALUATION_FILE, result)
    if not args.quiet:
        s = result["summary"]
        print(
            f"[{args.sampler}] held-out mean {s['mean']:.3f} [{s['mean_ci'][0]:.3f}, {s['mean_ci'][1]:.3f}], "
            f"IQM {s['iqm']:.3f} ({result['train_seconds']} s)",
            flush=True,
        )


def resolve_train_args(args: argparse.Namespace) -> dict[str, str]:
    """Fill the options of ``plr-gym train`` left unset from ``--preset``, else the library's defaults
    (:func:`plr_gym.presets.resolve`); parse ``--eval-levels``. Returns each option's source.

    :raises CLIError: contradicting options (``--batch-size`` with ``--n-minibatches``, ...).
    """
    from plr_gym.presets import resolve

    try:
        sources = resolve(args)
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    if isinstance(args.eval_levels, str):
        args.eval_levels = parse_levels(args.eval_levels)
    return sources


def _plot_curriculum(out: Path, curriculum: Any, difficulty: Any, args: argparse.Namespace) -> None:
    """``curriculum.png`` (needs matplotlib) from the curriculum's snapshots."""
    history = curriculum.history
    if history["timesteps"].size == 0:
        return
    if not _has_modules("matplotlib"):
        print("note: curriculum.png skipped: pip install matplotlib to get the plot", file=sys.stderr)
        return
    from plr_gym.plotting import plot_curriculum

    plot_curriculum(
        history,
        out / "curriculum.png",
        difficulty=difficulty,
        difficulty_label="grid size" if difficulty is not None else "difficulty",
        title=f"Curriculum of {args.sampler} on {args.env_id}",
    )
