"""``plr-gym``: train, evaluate and compare PLR and uniform level sampling from the command line.

Commands (each has ``--help``):

- ``plr-gym train ENV_ID --sampler plr|uniform --out DIR``: trains PPO, A2C or RecurrentPPO on a fixed set
  of training levels with :class:`~plr_gym.PrioritizedLevelReplay` + :class:`~plr_gym.PLRCallback`,
  evaluates on held-out levels every ``--eval-freq`` steps with :class:`~plr_gym.HeldOutEvalCallback`
  (``DIR/eval.csv`` and ``eval/heldout_*`` in TensorBoard) and at the end (``DIR/evaluation.json``),
  records the curriculum with :class:`~plr_gym.CurriculumLogCallback` (``DIR/curriculum.npz``, the plot
  ``DIR/curriculum.png`` and per-level histograms in TensorBoard), and saves ``DIR/model.zip``,
  ``DIR/plr/plr_sampler.npz``, ``DIR/config.json`` and (with TensorBoard installed) ``DIR/tb/``.
  A non-empty ``DIR`` is refused unless ``--overwrite``; Ctrl-C saves the model and the sampler (exit
  code 130) and ``--resume DIR`` continues a run up to ``--timesteps`` in total.
- ``plr-gym evaluate MODEL --env ENV_ID --levels 10000:10100``: per-level returns and summary (mean, IQM,
  bootstrap CIs) as JSON and CSV.
- ``plr-gym compare RUN_DIR RUN_DIR ... --out DIR``: a table (``comparison.md``, ``comparison.csv``) and a
  plot (``comparison.png``) of held-out return over training and of the level-score distribution;
  ``--run`` trains a PLR and a uniform run first (per seed of ``--seeds``; ``--jobs N``: up to N at once,
  one process each).

``--sampler uniform`` is the baseline: levels are drawn uniformly from the training set, and episodes are
still scored with ``--strategy`` (so its level scores can be compared with PLR's); it does not influence
sampling. Bad input exits with code 2 and a message.

Evaluation samples actions from the policy (as in the PLR paper) unless ``--eval-deterministic`` (train)
or ``--deterministic`` (evaluate) asks for greedy actions: see
:data:`plr_gym.evaluation.DEFAULT_DETERMINISTIC`. ``--device auto`` (the default) trains on CUDA when
torch sees a GPU.

Example:
    >>> from plr_gym.cli import parse_levels
    >>> parse_levels("10000:10004")
    [10000, 10001, 10002, 10003]
    >>> parse_levels("3,5,8")
    [3, 5, 8]
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import dataclasses
import errno
import importlib.util
import io
import json
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from plr_gym import training
from plr_gym.run import DEFAULT_KEEP, DEFAULT_SAVE_FREQ
from plr_gym.scoring import OUTCOME_STRATEGIES
from plr_gym.training import ALGORITHMS, ENCODERS, VEC_ENVS, SetupError

__all__ = [
    "ALGORITHMS",
    "DEVICES",
    "SAMPLERS",
    "CLIError",
    "Interrupted",
    "build_parser",
    "compare_runs",
    "evaluate_model",
    "main",
    "parse_levels",
    "resolve_device",
    "train",
]

#: Level samplers of ``plr-gym train --sampler``.
SAMPLERS: tuple[str, ...] = ("plr", "uniform")
#: Devices of ``--device``.
DEVICES: tuple[str, ...] = ("auto", "cpu", "cuda")
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


class CLIError(Exception):
    """Bad input on the command line: reported as ``plr-gym: error: ...`` with exit code 2."""


class Interrupted(Exception):
    """Training stopped by a signal (after saving a checkpoint at the current step) or by Ctrl-C twice.

    :param message: what happened and how to continue.
    :param exit_code: the command's exit code (128 + the signal's number: 130 for SIGINT, 143 for SIGTERM).
    """

    def __init__(self, message: str, exit_code: int = 130) -> None:
        super().__init__(message)
        self.exit_code = exit_code

    def __reduce__(self) -> tuple[Any, tuple[str, int]]:  # keeps the exit code across processes (--jobs)
        return type(self), (str(self), self.exit_code)


# --------------------------------------------------------------------------------------------------
# argument types
# --------------------------------------------------------------------------------------------------
def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _torch_threads(text: str) -> int:
    limit = training.max_torch_threads()
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= limit:
        raise argparse.ArgumentTypeError(
            f"expected an integer in 1..{limit} (this machine's CPUs), got {text!r}"
        )
    return value


def _nonneg_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return value


#: Largest step count of ``--timesteps``, ``--eval-freq`` and ``--save-freq`` (SB3 counts steps in int64).
MAX_STEPS = 2**62
#: Largest ``--seed``: numpy's and SB3's seeding take 32-bit seeds, and the evaluation env gets seed + 1.
MAX_SEED = 2**32 - 2


def _step_count(text: str) -> int:
    value = _positive_int(text)
    if value > MAX_STEPS:
        raise argparse.ArgumentTypeError(f"expected at most 2**62 = {MAX_STEPS} steps, got {text!r}")
    return value


def _seed(text: str) -> int:
    value = _nonneg_int(text)
    if value > MAX_SEED:
        raise argparse.ArgumentTypeError(f"expected a seed in [0, 2**32 - 2], got {text!r}")
    return value


def _finite_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def _positive_float(text: str) -> float:
    value = _finite_float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}")
    return value


def _nonneg_float(text: str) -> float:
    value = _finite_float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return value


def _unit_float(text: str) -> float:
    value = _finite_float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text!r}")
    return value


def _open_unit_float(text: str) -> float:
    value = _finite_float(text)
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {text!r}")
    return value


#: Most levels a command-line level range may hold (larger ranges would exhaust memory).
MAX_LEVELS = 10_000_000


def parse_levels(spec: str) -> list[int]:
    """Level ids from ``"START:STOP"`` (``range(START, STOP)``) or a comma-separated list ``"3,5,8"``.

    :raises argparse.ArgumentTypeError: on anything else, an empty range or repeated levels.
    """
    text = spec.strip()
    try:
        if ":" in text:
            lo, hi = (int(part) for part in text.split(":"))
            if hi - lo > MAX_LEVELS:
                raise argparse.ArgumentTypeError(
                    f"{spec!r} holds {hi - lo} levels; at most {MAX_LEVELS} are supported"
                )
            levels = list(range(lo, hi))
        else:
            levels = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"levels must be START:STOP (e.g. 10000:10100) or a comma-separated list of ints, got {spec!r}"
        ) from None
    if not levels:
        raise argparse.ArgumentTypeError(f"no levels in {spec!r}")
    if min(levels) < 0 or max(levels) > 2**63 - 1:
        raise argparse.ArgumentTypeError(f"levels must be in [0, 2**63 - 1] (int64 level ids), got {spec!r}")
    if len(set(levels)) != len(levels):
        raise argparse.ArgumentTypeError(f"levels must be distinct, got {spec!r}")
    return levels


# --------------------------------------------------------------------------------------------------
# environments
# --------------------------------------------------------------------------------------------------
def env_family(env_id: str) -> str:
    """``"minigrid"``, ``"procgen"`` or ``"other"`` (:func:`plr_gym.training.env_family`); ``CLIError``
    if the id is unknown."""
    try:
        return training.env_family(env_id)
    except SetupError as exc:
        raise CLIError(str(exc)) from None


def make_level_venv(
    env_id: str, n_envs: int, seed: int, env_kwargs: dict[str, Any] | None = None, subproc: bool = False
) -> Any:
    """:func:`plr_gym.training.make_level_venv`, with setup errors as ``CLIError``."""
    try:
        return training.make_level_venv(env_id, n_envs, seed, env_kwargs, subproc=subproc)
    except SetupError as exc:
        raise CLIError(str(exc)) from None


def _algorithm_class(algo: str) -> Any:
    try:
        return training.algorithm_class(algo)
    except SetupError as exc:
        raise CLIError(str(exc)) from None


# --------------------------------------------------------------------------------------------------
# evaluation during training
# --------------------------------------------------------------------------------------------------
def resolve_device(name: str) -> str:
    """``--device``: ``"cpu"``, or ``"cuda"`` when asked for (or ``auto``) and torch sees a GPU.

    :raises CLIError: ``cuda`` without a CUDA GPU, or an unknown name.
    """
    if name not in DEVICES:
        raise CLIError(f"--device must be one of {', '.join(DEVICES)}, got {name!r}")
    if name == "cpu":
        return "cpu"
    import torch

    available = torch.cuda.is_available()
    if name == "cuda" and not available:
        raise CLIError(
            "--device cuda: torch sees no CUDA GPU here (torch.cuda.is_available() is False; torch "
            f"{torch.__version__}, built for CUDA {torch.version.cuda or 'none'}); use --device cpu or auto"
        )
    return "cuda" if available else "cpu"


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


def _apply_torch_threads(requested: int | None, obs_space: Any) -> int:
    """Set torch's CPU threads: ``--torch-threads``, else :func:`plr_gym.training.default_torch_threads`
    of the run's policy (1 for an MLP, torch's default for a CNN); returns the count in use
    (:func:`plr_gym.training.apply_torch_threads`)."""
    policy, _ = training.policy_for(obs_space)
    return training.apply_torch_threads("auto" if requested is None else requested, policy)


_torch_default_threads = training.torch_default_threads


def _has_modules(*names: str) -> bool:
    return all(importlib.util.find_spec(n) is not None for n in names)


# --------------------------------------------------------------------------------------------------
# train
# --------------------------------------------------------------------------------------------------
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


def _env_kwargs(args: argparse.Namespace, family: str) -> dict[str, Any]:
    """``gym.make`` keywords from ``--env-kwarg KEY=VALUE`` (and Procgen's ``--distribution-mode``).

    VALUE is JSON (``100``, ``[5, 6]``, ``true``, ``"text"``); a bare word (``hard``) is taken as a string.
    Refused with a ``CLIError`` naming the option: no ``=``, a key that is not a keyword name, a key given
    twice, a value that starts like a number, list, object or quoted string but is not valid JSON
    (``2O``, ``[5,``), and a keyword the env id itself fixes with another value (``size=3`` for
    ``MiniGrid-Empty-5x5-v0``, registered with ``size=5``: the id would no longer name the env trained).
    """
    kwargs: dict[str, Any] = {}
    if family == "procgen":
        kwargs["distribution_mode"] = args.distribution_mode
    env_id = getattr(args, "env_id", None) or getattr(args, "env", None)
    fixed = _registered_kwargs(env_id) if isinstance(env_id, str) else {}
    given: set[str] = set()
    for item in args.env_kwarg or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CLIError(f"--env-kwarg must be KEY=VALUE, got {item!r}")
        if not key.isidentifier():
            raise CLIError(f"--env-kwarg: {key!r} is not a keyword name (KEY=VALUE, e.g. max_steps=100)")
        if key in given:
            raise CLIError(f"--env-kwarg {key} is given twice")
        given.add(key)
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError:
            if not value or value[0] in '+-.0123456789[{"' or value != value.strip():
                raise CLIError(
                    f"--env-kwarg {item}: the value is not valid JSON (a number, [a, list], true/false, "
                    '"a string"); a bare word is taken as a string'
                ) from None
            parsed = value
        if key in fixed and _json_value(parsed) != _json_value(fixed[key]):
            raise CLIError(
                f"--env-kwarg {item}: {env_id} fixes {key}={fixed[key]!r} (the id names it); use the id of "
                f"the {key} you want, or an env that takes {key}"
            )
        kwargs[key] = parsed
    return kwargs


def _registered_kwargs(env_id: str) -> dict[str, Any]:
    """The keywords Gymnasium's registration of ``env_id`` fixes (``{}`` if it is not registered)."""
    import gymnasium as gym

    try:
        return dict(gym.spec(env_id).kwargs)
    except Exception:  # an unknown id is reported where the env is built
        return {}


def _json_value(value: Any) -> Any:
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError):
        return repr(value)


#: ``plr-gym train`` options that may differ when a run is resumed (the rest must match its config.json).
RESUME_MAY_CHANGE: frozenset[str] = frozenset(
    {"timesteps", "out", "resume", "overwrite", "device", "torch_threads", "progress", "quiet", "subproc",
     "tensorboard", "save_freq", "save_minutes", "keep_checkpoints", "recipe_sources"}
)  # fmt: skip


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
    every ``--save-freq`` steps and on SIGTERM, SIGINT and SIGUSR1, and continued by ``--resume``.

    :raises Interrupted: a signal stopped training after saving a checkpoint at the current step (exit
        code 128 + the signal's number), or a second Ctrl-C stopped it at once (130).
    """
    from plr_gym.run import RunDirectory, RunDirectoryError

    train_levels, eval_levels, sampler, env_kwargs, device = _check_train_args(args)
    out = _run_path(args)
    config = {k: v for k, v in vars(args).items() if k not in ("func", "command")}
    config.update(out=str(out), env_family=env_family(args.env_id))
    config["eval_levels"] = f"{eval_levels[0]}..{eval_levels[-1]} ({len(eval_levels)} levels)"
    if args.preset is not None:
        from plr_gym.presets import TEST_PROTOCOLS

        config["test_protocol"] = TEST_PROTOCOLS[args.preset]
    run_dir = RunDirectory(
        out, keep=getattr(args, "keep_checkpoints", DEFAULT_KEEP), logs=("eval.csv",), event_logs=("tb",)
    )
    resume = getattr(args, "resume", None) is not None
    if resume:
        _check_options_added_since(out, args)
    try:
        checkpoint = run_dir.begin(
            config,
            resume=resume,
            overwrite=getattr(args, "overwrite", False),
            mutable=(RESUME_MAY_CHANGE | _same_envs_other_processes(run_dir, args)) if resume else (),
            run_files=RUN_FILES,
        )
    except RunDirectoryError as exc:
        raise CLIError(str(exc)) from None
    try:
        finishing = False  # the run has its steps, but stopped before its final evaluation
        if checkpoint is not None and checkpoint.timestep >= args.timesteps:
            if not _needs_final_evaluation(out, checkpoint.timestep, args):
                return _already_done(out, checkpoint.timestep, args)
            finishing = True
        run = _build_training(args, sampler, env_kwargs, device, out)
        try:
            parts = _train_callbacks(
                args, run, out, train_levels, eval_levels, resumed=checkpoint is not None and not finishing
            )
            if checkpoint is not None:
                try:
                    run_dir.restore(run.model, plr_callback=parts.plr, checkpoint=checkpoint)
                    parts.curriculum.resume_from = checkpoint.file("curriculum.npz")
                except RunDirectoryError as exc:
                    raise CLIError(str(exc)) from None
                logged = _logged_steps(out / "eval.csv")  # as of the checkpoint
                if finishing and checkpoint.timestep in logged:
                    parts.eval.log_path = None  # evaluated at this step already: evaluation.json only
                elif logged:  # the next evaluation where the uninterrupted run makes it
                    parts.eval.last_eval = max(logged)
            threads = _apply_torch_threads(args.torch_threads, run.venv.observation_space)
            if not args.quiet:
                print(
                    f"[{args.sampler}] {args.algo} on {args.env_id}: {len(train_levels)} training levels, "
                    f"{len(eval_levels)} held-out, {args.timesteps} steps, {args.n_envs} envs, {device} "
                    f"({threads} torch thread{'s' if threads != 1 else ''}) -> {out}"
                    + (f" (resumed at step {checkpoint.timestep})" if checkpoint is not None else ""),
                    flush=True,
                )
            start = time.perf_counter()
            _learn(args, run.model, run_dir, parts, out, resumed=checkpoint is not None)
        finally:
            run.close()
        try:
            _finish(
                args,
                out,
                parts,
                train_levels,
                eval_levels,
                env_kwargs,
                run.model,
                time.perf_counter() - start,
            )
        except OSError as exc:
            if exc.errno not in _DISK_FULL:
                raise
            raise _disk_full(exc, out, int(run.model.num_timesteps), run_dir.current()) from None
    finally:
        run_dir.release()
    return out


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


def _check_train_args(args: argparse.Namespace) -> tuple[list[int], list[int], Any, dict[str, Any], str]:
    """Everything ``train`` checks before it touches the run directory."""
    from plr_gym.sampler import LevelSampler

    args.recipe_sources = resolve_train_args(args)  # recorded in config.json
    family = env_family(args.env_id)
    if args.vec_env == "batched" and family != "procgen":  # refused before the run directory is touched
        raise CLIError(
            f"--vec-env batched (which --preset paper-procgen sets) is for Procgen games only "
            f"(plr_gym/procgen-<game>-v0), got {args.env_id}"
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
    device = resolve_device(getattr(args, "device", "auto"))
    return train_levels, eval_levels, sampler, env_kwargs, device


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
    try:
        with log.open(newline="") as f:
            return {int(row["timesteps"]) for row in csv.DictReader(f)}
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
    from plr_gym.run import RunDirectoryError, StopOnSignals

    stop = StopOnSignals(on_request=lambda: setattr(parts.eval, "eval_at_end", False))
    saver = run_dir.callback(
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


# --------------------------------------------------------------------------------------------------
# evaluate
# --------------------------------------------------------------------------------------------------
def evaluate_model(args: argparse.Namespace) -> dict[str, Any]:
    """Run ``plr-gym evaluate``: returns ``{"levels", "returns", "summary"}`` and writes JSON/CSV."""
    from plr_gym.evaluation import evaluate_levels, summarize

    model_path = Path(args.model)
    if model_path.is_dir():
        model_path = model_path / "model.zip"
    if not model_path.is_file():
        raise CLIError(f"no model at {args.model} (expected a .zip written by plr-gym train or model.save)")
    config_path = model_path.parent / "config.json"
    config: dict[str, Any] = {}
    if config_path.is_file():
        try:
            config = json.loads(config_path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise CLIError(
                f"{config_path} is not valid JSON ({exc}); pass --env (and --algo) instead"
            ) from None
        if not isinstance(config, dict):
            raise CLIError(f"{config_path} does not hold a JSON object; pass --env (and --algo) instead")
    algo = args.algo or config.get("algo", "ppo")
    env_id = args.env or config.get("env_id")
    if env_id is None:
        raise CLIError("--env is required (no config.json next to the model)")
    family = env_family(env_id)
    if env_id == config.get("env_id"):  # same env as in training: same env options unless given
        if args.distribution_mode is None:
            args.distribution_mode = config.get("distribution_mode")
        if args.env_kwarg is None:
            args.env_kwarg = config.get("env_kwarg")
    if args.distribution_mode is None:
        args.distribution_mode = "easy"
    env_kwargs = _env_kwargs(args, family)
    algo_cls = _algorithm_class(algo)
    device = resolve_device(getattr(args, "device", "auto"))
    venv = make_level_venv(env_id, args.n_envs, args.seed, env_kwargs)
    try:
        try:
            model = algo_cls.load(model_path, device=device)
        except Exception as exc:  # a zip of another algorithm or a corrupt file
            raise CLIError(f"cannot load {model_path} as {algo}: {exc}") from None
        shape = venv.observation_space.shape
        channels_first = (shape[-1], *shape[:-1]) if shape else shape  # SB3's VecTransposeImage
        if model.observation_space.shape not in (shape, channels_first):
            raise CLIError(
                f"the model expects observations of shape {model.observation_space.shape} but {env_id} gives "
                f"{venv.observation_space.shape}"
            )
        _apply_torch_threads(getattr(args, "torch_threads", None), venv.observation_space)
        returns = evaluate_levels(
            model,
            venv,
            args.levels,
            n_episodes=args.n_episodes,
            deterministic=args.deterministic,
            progress=getattr(args, "progress", False) and _has_modules("tqdm"),
        )
    finally:
        venv.close()
    summary = summarize(returns)
    result = {
        "model": str(model_path),
        "env_id": env_id,
        "levels": list(args.levels),
        "returns": training.returns_to_json(returns),
        "summary": summary,
    }
    out = Path(args.out)
    csv_out = out.with_suffix(".csv")
    try:
        training.write_json(out, result)
        rows = ([level, k, value] for level, values in returns.items() for k, value in enumerate(values))
        training.write_csv(csv_out, ["level", "episode", "return"], rows)
    except OSError as exc:
        raise CLIError(f"cannot write --out {args.out}: {exc}") from None
    print(
        f"{env_id}: {summary['n_levels']} levels, mean {summary['mean']:.3f} "
        f"[{summary['mean_ci'][0]:.3f}, {summary['mean_ci'][1]:.3f}], IQM {summary['iqm']:.3f} "
        f"[{summary['iqm_ci'][0]:.3f}, {summary['iqm_ci'][1]:.3f}] -> {out}, {csv_out}"
    )
    return result


# --------------------------------------------------------------------------------------------------
# compare
# --------------------------------------------------------------------------------------------------
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

    In parallel, ``SIGINT`` (Ctrl-C), ``SIGTERM`` and ``SIGUSR1`` stop the runs under way as they stop
    ``plr-gym train`` (a checkpoint at the current step; the parent passes the signal on, ``SIGTERM`` for
    ``SIGINT``, which a terminal sends to every process anyway), start no other run, and raise
    :class:`Interrupted`. A run that fails stops the others the same way, and its error is raised.
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
                jobs[i].progress = False  # one progress bar per process would garble the terminal
                receive, send = ctx.Pipe(duplex=False)
                proc = ctx.Process(target=_train_job, args=(jobs[i], send), name=f"plr-gym {jobs[i].out}")
                proc.start()
                send.close()
                running[i] = (proc, receive)
                if stop.requested:  # a signal came while it started
                    stop_runs(signal.SIGTERM)
            if not running:
                break
            ended = set(wait([proc.sentinel for proc, _ in running.values()]))
            for i in [i for i, (proc, _) in running.items() if proc.sentinel in ended]:
                proc, receive = running.pop(i)
                proc.join()
                try:
                    outcome = receive.recv()
                except EOFError:  # the process died before it could send
                    outcome = None
                except Exception as exc:  # an exception that does not unpickle
                    outcome = ("error", RuntimeError(f"the run in {jobs[i].out} failed: {exc!r}"))
                receive.close()
                if outcome is not None and outcome[0] == "ok":
                    results[i] = outcome[1]
                    continue
                if outcome is None:
                    outcome = (
                        "error",
                        RuntimeError(f"the run in {jobs[i].out} died (exit code {proc.exitcode})"),
                    )
                if failure is None and not stop.requested:
                    failure = outcome[1]
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
        table = compare_runs(run_dirs, out)
    except (OSError, ValueError, KeyError) as exc:  # a malformed run directory, or an unusable --out
        raise CLIError(f"cannot compare {', '.join(map(str, run_dirs))} into {out}: {exc!r}") from None
    print(table)
    written = [out / name for name in ("comparison.md", "comparison.csv", "comparison.png")]
    print("\nwrote " + ", ".join(str(p) for p in written if p.exists()))
    return run_dirs


# --------------------------------------------------------------------------------------------------
# parser
# --------------------------------------------------------------------------------------------------
def add_train_arguments(parser: argparse.ArgumentParser, env_positional: bool = True) -> None:
    """The options of ``plr-gym train`` (shared with ``compare --run`` and the demo).

    The options a ``--preset`` recipe can set default to ``None`` here; :func:`plr_gym.presets.resolve`
    (called by :func:`train`) fills them from the command line, else the preset, else the library's
    defaults (:func:`plr_gym.presets.library_defaults`, shown in ``--help``).
    """
    from plr_gym.presets import RECIPES, library_defaults
    from plr_gym.sampler import (
        REPLAY_SCHEDULES,
        SCORE_TRANSFORMS,
        STALENESS_TRANSFORMS,
        STRATEGIES,
        sampler_defaults,
    )

    d = library_defaults()

    if env_positional:
        parser.add_argument("env_id", help="Gymnasium id: MiniGrid-* or plr_gym/procgen-<game>-v0")
    else:
        parser.add_argument("--env", dest="env_id", default=None, help="Gymnasium id (with --run)")
    parser.add_argument(
        "--preset",
        choices=sorted(RECIPES),
        default=None,
        help="the PLR paper's whole recipe (PPO settings, encoder, reward normalisation, env, levels, "
        "budget, sampler, test levels: see docs/paper.md); every option given on the command line wins",
    )
    g = parser.add_argument_group("training")
    g.add_argument("--algo", choices=ALGORITHMS, default=None, help=f"algorithm (default: {d['algo']})")
    g.add_argument(
        "--timesteps", type=_step_count, default=None, help=f"environment steps (default {d['timesteps']})"
    )
    g.add_argument(
        "--n-envs", type=_positive_int, default=None, help=f"parallel environments (default {d['n_envs']})"
    )
    g.add_argument("--seed", type=_seed, default=0, help="seed of model, envs and sampler (default 0)")
    g.add_argument(
        "--n-steps", type=_positive_int, default=None, help=f"rollout length per env (default {d['n_steps']})"
    )
    g.add_argument(
        "--batch-size",
        type=_positive_int,
        default=None,
        help=f"PPO minibatch size (default {d['batch_size']})",
    )
    g.add_argument(
        "--n-minibatches",
        type=_positive_int,
        default=None,
        help="PPO minibatches per epoch: --batch-size = n-envs x n-steps / this (instead of --batch-size)",
    )
    g.add_argument(
        "--n-epochs",
        type=_positive_int,
        default=None,
        help=f"PPO epochs per rollout (default {d['n_epochs']})",
    )
    g.add_argument(
        "--learning-rate", type=_positive_float, default=None, help=f"default {d['learning_rate']}"
    )
    g.add_argument(
        "--ent-coef", type=_finite_float, default=None, help=f"entropy bonus (default {d['ent_coef']})"
    )
    g.add_argument("--gamma", type=_unit_float, default=None, help=f"discount (default {d['gamma']})")
    g.add_argument(
        "--gae-lambda", type=_unit_float, default=None, help=f"GAE lambda (default {d['gae_lambda']})"
    )
    g.add_argument(
        "--clip-range", type=_positive_float, default=None, help=f"PPO clipping (default {d['clip_range']})"
    )
    g.add_argument(
        "--vf-coef", type=_nonneg_float, default=None, help=f"value-loss coefficient (default {d['vf_coef']})"
    )
    g.add_argument(
        "--max-grad-norm",
        type=_positive_float,
        default=None,
        help=f"gradient clipping (default {d['max_grad_norm']})",
    )
    g.add_argument(
        "--optimizer-eps",
        type=_positive_float,
        default=None,
        help=f"Adam's epsilon (A2C: RMSprop's) (default {d['optimizer_eps']})",
    )
    g.add_argument(
        "--normalize-reward",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="divide rewards by the running std of a discounted return, clip to [-10, 10] (SB3's "
        "VecNormalize(norm_obs=False), as the paper's code; default off)",
    )
    g.add_argument(
        "--normalize-reward-gamma",
        type=_unit_float,
        default=None,
        help=f"discount of that running return (default {d['normalize_reward_gamma']})",
    )
    g.add_argument(
        "--encoder",
        choices=ENCODERS,
        default=None,
        help="image encoder: auto/nature (SB3's NatureCNN) or impala (the paper's IMPALA-CNN) (default auto)",
    )
    g.add_argument(
        "--vec-env",
        choices=VEC_ENVS,
        default=None,
        help="dummy (one process), subproc (one per env) or batched (Procgen: one ProcgenVecEnv); "
        "default dummy",
    )
    g.add_argument(
        "--subproc", action="store_true", help="SubprocVecEnv instead of DummyVecEnv (--vec-env subproc)"
    )
    g.add_argument(
        "--device", choices=DEVICES, default="auto", help="torch device (default auto: cuda if available)"
    )
    _add_torch_threads_argument(g)
    g.add_argument(
        "--distribution-mode", default=None, help="Procgen distribution mode (default easy; Procgen only)"
    )
    g.add_argument(
        "--env-kwarg",
        action="append",
        metavar="KEY=VALUE",
        help="extra gym.make keyword (a JSON value, or a bare word as a string); a keyword the env id "
        "fixes, e.g. size for MiniGrid-Empty-5x5-v0, is refused",
    )
    _add_reference_arguments(parser)
    lv = parser.add_argument_group("levels")
    lv.add_argument(
        "--num-levels", type=_positive_int, default=None, help=f"training levels (default {d['num_levels']})"
    )
    lv.add_argument(
        "--level-start",
        type=_nonneg_int,
        default=None,
        help=f"first training level (default {d['level_start']})",
    )
    lv.add_argument(
        "--eval-levels",
        type=parse_levels,
        default=None,
        help=f"held-out levels, START:STOP or a,b,c (default {d['eval_levels']})",
    )
    lv.add_argument(
        "--eval-freq",
        type=_step_count,
        default=None,
        help=f"evaluate every N steps (default {d['eval_freq']})",
    )
    lv.add_argument(
        "--eval-episodes",
        type=_positive_int,
        default=None,
        help=f"episodes per level (default {d['eval_episodes']})",
    )
    lv.add_argument(
        "--eval-deterministic",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="greedy actions at evaluation (default: actions sampled from the policy)",
    )
    lv.add_argument(
        "--no-eval-train-levels",
        dest="eval_train_levels",
        action="store_false",
        help="skip evaluating on (as many) training levels too",
    )
    lv.add_argument(
        "--no-eval-at-start",
        dest="eval_at_start",
        action="store_false",
        help="skip the evaluation at step 0: evaluate every --eval-freq steps and at the end only",
    )
    s = parser.add_argument_group("level sampler (defaults: LevelSampler's)")
    s.add_argument("--sampler", choices=SAMPLERS, default=None, help="plr or uniform (default plr)")
    s.add_argument("--strategy", choices=STRATEGIES, default=None, help=f"scoring (default {d['strategy']})")
    s.add_argument(
        "--score-transform",
        choices=SCORE_TRANSFORMS,
        default=None,
        help=f"h (default {d['score_transform']})",
    )
    s.add_argument(
        "--temperature", type=_positive_float, default=None, help=f"beta (default {d['temperature']})"
    )
    s.add_argument(
        "--staleness-coef", type=_unit_float, default=None, help=f"rho (default {d['staleness_coef']})"
    )
    s.add_argument(
        "--staleness-transform",
        choices=STALENESS_TRANSFORMS,
        default=None,
        help=f"default {d['staleness_transform']}",
    )
    s.add_argument(
        "--staleness-temperature",
        type=_positive_float,
        default=None,
        help=f"default {d['staleness_temperature']}",
    )
    s.add_argument(
        "--replay-schedule", choices=REPLAY_SCHEDULES, default=None, help=f"default {d['replay_schedule']}"
    )
    s.add_argument(
        "--replay-prob",
        type=_unit_float,
        default=None,
        help=f"fixed schedule's P(replay) (default {d['replay_prob']})",
    )
    s.add_argument(
        "--min-seen-ratio",
        type=_unit_float,
        default=None,
        help=f"fraction seen before replay (default {d['min_seen_ratio']})",
    )
    s.add_argument(
        "--alpha", type=_unit_float, default=None, help=f"EWA step of level scores (default {d['alpha']})"
    )
    s.add_argument(
        "--eps", type=_unit_float, default=None, help=f"eps_greedy exploration mass (default {d['eps']})"
    )
    s.add_argument(
        "--temperature-end",
        type=_positive_float,
        default=None,
        help="anneal the temperature linearly to this value over training (default: no annealing)",
    )
    s.add_argument(
        "--uniform-mass",
        type=_unit_float,
        default=None,
        help=f"share of replay draws uniform over the levels (default {d['uniform_mass']})",
    )
    s.add_argument(
        "--success-rate-alpha",
        type=_open_unit_float,
        default=sampler_defaults()["success_rate_alpha"],
        help="learnability: step size of each level's success rate (default %(default)s)",
    )
    o = parser.add_argument_group("output")
    o.add_argument("--no-tensorboard", dest="tensorboard", action="store_false", help="no TensorBoard logs")
    o.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    o.add_argument("--quiet", action="store_true", help="print nothing but errors")
    o.add_argument(
        "--overwrite", action="store_true", help="replace the run in a non-empty --out (default: refuse)"
    )
    o.add_argument(
        "--save-freq",
        type=_step_count,
        default=DEFAULT_SAVE_FREQ,
        metavar="STEPS",
        help="save a checkpoint every STEPS env steps, at the next rollout boundary (default %(default)s); "
        "SIGTERM, SIGINT and SIGUSR1 save at the current step",
    )
    o.add_argument(
        "--save-minutes",
        type=_positive_float,
        default=None,
        metavar="M",
        help="also save a checkpoint at the first rollout boundary after M minutes of wall clock since the "
        "last one (runs in short slices of machine time: at most M minutes plus a rollout are lost)",
    )
    o.add_argument(
        "--keep-checkpoints",
        type=_positive_int,
        default=DEFAULT_KEEP,
        metavar="K",
        help="keep the last K checkpoints (default %(default)s)",
    )


def _add_reference_arguments(parser: argparse.ArgumentParser) -> None:
    """The five behaviours where the PLR paper's code differs from SB3 (:mod:`plr_gym.reference`), each
    with both choices; ``--preset paper-procgen`` selects the paper's code's."""
    from plr_gym.reference import REFERENCE_CHOICES

    group = parser.add_argument_group(
        "the PLR paper's code (level-replay) or the library's default (docs/paper.md)"
    )
    for choice in REFERENCE_CHOICES:
        group.add_argument(
            choice.flag,
            choices=choice.choices,
            default=None,
            help=f"default {choice.default}: {choice.default_does}; "
            f"{choice.reference} (level-replay): {choice.reference_does}",
        )


def _add_torch_threads_argument(group: Any) -> None:
    group.add_argument(
        "--torch-threads",
        type=_torch_threads,
        default=None,
        help="torch CPU threads, 1..the machine's CPUs (default: 1 for an MLP policy, e.g. MiniGrid; "
        "torch's default, one per core, for a CNN, e.g. Procgen)",
    )


def build_parser() -> argparse.ArgumentParser:
    """The ``plr-gym`` argument parser."""
    from plr_gym import __version__

    parser = argparse.ArgumentParser(
        prog="plr-gym",
        description="Prioritized Level Replay for Gymnasium and Stable-Baselines3: train, evaluate, compare.",
    )
    parser.add_argument("--version", action="version", version=f"plr-gym {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser(
        "train",
        help="train with PLR or uniform level sampling",
        description="Train an on-policy agent on a fixed set of training levels with PLR (or uniform "
        "sampling), evaluating on held-out levels during training.",
    )
    add_train_arguments(p)
    p.add_argument("--out", default=None, help="run directory (default runs/run)")
    p.add_argument(
        "--resume",
        metavar="DIR",
        nargs="?",
        const="",
        default=None,
        help="continue the run in DIR (or in --out) from its checkpoint up to --timesteps in total; repeat "
        "the run's command. A directory without a checkpoint starts at step 0, so the same command can "
        "start a run and continue it after preemption",
    )
    p.set_defaults(func=lambda a: train(a))

    p = sub.add_parser(
        "evaluate",
        help="evaluate a saved model on held-out levels",
        description="Play each level and write per-level returns and the summary (mean, IQM, 95%% CIs). "
        "Security: an SB3 model .zip contains pickled Python objects and loading it runs code; only "
        "evaluate model files from a trusted source.",
    )
    p.add_argument(
        "model",
        help="model .zip, or a run directory containing model.zip. A model file is code: loading it "
        "unpickles Python objects, so only evaluate models from a trusted source",
    )
    p.add_argument("--env", default=None, help="Gymnasium id (default: from the run's config.json)")
    p.add_argument("--algo", choices=ALGORITHMS, default=None, help="default: from config.json, else ppo")
    p.add_argument("--levels", type=parse_levels, default="10000:10100", help="START:STOP or a,b,c")
    p.add_argument("--n-episodes", type=_positive_int, default=1, help="episodes per level (default 1)")
    p.add_argument("--n-envs", type=_positive_int, default=8, help="parallel environments (default 8)")
    p.add_argument("--seed", type=_seed, default=0, help="seed (default 0)")
    p.add_argument(
        "--deterministic", action="store_true", help="greedy actions (default: sampled from the policy)"
    )
    p.add_argument("--device", choices=DEVICES, default="auto", help="torch device (default auto)")
    _add_torch_threads_argument(p)
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    p.add_argument(
        "--distribution-mode", default=None, help="Procgen distribution mode (default: the run's, else easy)"
    )
    p.add_argument(
        "--env-kwarg",
        action="append",
        metavar="KEY=VALUE",
        help="extra gym.make keyword (default: the run's)",
    )
    p.add_argument("--out", default="evaluation.json", help="JSON output; the CSV goes next to it")
    p.set_defaults(func=lambda a: evaluate_model(a))

    p = sub.add_parser(
        "compare",
        help="compare runs: table and plot",
        description="Compare run directories written by 'plr-gym train' (e.g. PLR and uniform): writes "
        "comparison.md, comparison.csv and comparison.png (held-out return over training, level-score "
        "distribution). With --run, trains a PLR and a uniform run first (all train options apply). Runs "
        "of the same configuration with different seeds are merged.",
    )
    p.add_argument("run_dirs", nargs="*", help="run directories")
    p.add_argument(
        "--run", action="store_true", help="train --sampler plr and uniform into OUT/plr, OUT/uniform"
    )
    p.add_argument("--out", default="runs/compare", help="output directory (default runs/compare)")
    p.add_argument(
        "--seeds",
        type=_nonneg_int,
        nargs="+",
        default=None,
        help="with --run: train each sampler once per seed (OUT/plr-seedN, ...); results are merged",
    )
    p.add_argument(
        "--jobs",
        type=_positive_int,
        default=1,
        help="with --run: train this many runs at once, one process each (default 1: one after the other)",
    )
    add_train_arguments(p, env_positional=False)
    p.set_defaults(func=compare_command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``plr-gym`` and ``python -m plr_gym.cli``; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        args.func(args)
    except CLIError as exc:
        parser.exit(2, f"plr-gym: error: {exc}\n")
    except Interrupted as exc:
        print(f"plr-gym: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
