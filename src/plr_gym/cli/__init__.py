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

The package, by command: :mod:`plr_gym.options` (every option, declared once, and the parsers of
their values), :mod:`plr_gym.cli.train`, :mod:`plr_gym.cli.evaluate`, :mod:`plr_gym.cli.compare`,
:mod:`plr_gym.cli.common` (errors, env and device) and :mod:`plr_gym.cli.main` (the parser, built from the
options, and :func:`main`). Every name is importable from ``plr_gym.cli``.

Example:
    >>> from plr_gym.cli import parse_levels
    >>> parse_levels("10000:10004")
    [10000, 10001, 10002, 10003]
    >>> parse_levels("3,5,8")
    [3, 5, 8]
"""

from __future__ import annotations

from plr_gym.cli.common import (
    CLIError,
    Interrupted,
    _algorithm_class,
    _apply_torch_threads,
    _env_kwargs,
    _has_modules,
    _torch_default_threads,
    env_family,
    make_level_venv,
    resolve_device,
)
from plr_gym.cli.compare import _train_all, compare_command, compare_runs
from plr_gym.cli.evaluate import evaluate_model
from plr_gym.cli.main import build_parser, main
from plr_gym.cli.train import (
    RESUME_MAY_CHANGE,
    RUN_FILES,
    _build_training,
    _check_train_args,
    _train_callbacks,
    resolve_train_args,
    sampler_kwargs,
    train,
)
from plr_gym.options import DEVICES, MAX_LEVELS, MAX_SEED, MAX_STEPS, SAMPLERS, parse_levels
from plr_gym.training import ALGORITHMS

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
# also importable from here, as from the single module before: the names tests and benchmarks use
_REEXPORTED = (
    _algorithm_class, _apply_torch_threads, _env_kwargs, _has_modules, _torch_default_threads, env_family,
    make_level_venv, _train_all, compare_command, MAX_LEVELS, MAX_SEED, MAX_STEPS, RESUME_MAY_CHANGE,
    RUN_FILES, _build_training, _check_train_args, _train_callbacks, resolve_train_args, sampler_kwargs,
)  # fmt: skip
