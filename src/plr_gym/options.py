"""Every option of ``plr-gym train``, ``compare`` and ``evaluate``, declared once, as data.

Each option is one :class:`Option`: its flag and ``dest`` (the ``config.json`` key), its type (a parser
below, such as :func:`parse_levels`), choices, help, argparse group, the value it takes when neither the
command line nor a preset sets it (:attr:`Option.library_default`), and the value each ``--preset`` recipe
gives it with the source of that value (:attr:`Option.presets`). From the tables
(:data:`TRAIN_OPTIONS`, :data:`COMPARE_OPTIONS`, :data:`EVALUATE_OPTIONS`) come:

- the argparse parsers (:func:`add_options`; ``compare`` shares ``train``'s options);
- ``config.json`` (the parsed options) and its ``recipe_sources`` (:func:`plr_gym.presets.resolve` fills
  the options a preset can set and says where each value came from);
- the recipes :data:`plr_gym.presets.RECIPES` and docs/paper.md's tables
  (:func:`plr_gym.presets.recipe_table`);
- the five options where the PLR paper's code differs from SB3, from
  :data:`plr_gym.reference.REFERENCE_CHOICES` (their one home: choices, defaults, level-replay's value).

A new option of ``plr-gym train`` is one more :class:`Option` in :data:`_SHARED` (plus the code that uses
it), as CleanRL's ``Args`` dataclass declares a script's options once and rl_zoo3 keeps a recipe as data.

Example:
    >>> option = next(o for o in TRAIN_OPTIONS if o.dest == "gamma")
    >>> option.name, option.library_default, option.presets["paper-procgen"].value
    ('--gamma', 0.99, 0.999)
    >>> parse_levels("10000:10004"), parse_levels("3,5,8")
    ([10000, 10001, 10002, 10003], [3, 5, 8])
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from plr_gym.hyperparameters import ALGORITHMS, ENCODERS, Hyperparameters
from plr_gym.level_envs import VEC_ENVS
from plr_gym.reference import LEVEL_REPLAY_COMMIT, REFERENCE_CHOICES, ReferenceChoice
from plr_gym.run import DEFAULT_KEEP, DEFAULT_SAVE_FREQ
from plr_gym.sampler import (
    PAPER_PRESETS,
    REPLAY_SCHEDULES,
    SCORE_TRANSFORMS,
    STALENESS_TRANSFORMS,
    STRATEGIES,
    sampler_defaults,
)
from plr_gym.torch_threads import max_torch_threads

__all__ = [
    "COMPARE_OPTIONS",
    "DEVICES",
    "EVALUATE_OPTIONS",
    "MAX_LEVELS",
    "MAX_SEED",
    "MAX_STEPS",
    "PRESETS",
    "SAMPLERS",
    "TRAIN_OPTIONS",
    "Option",
    "PresetValue",
    "add_options",
    "options_table",
    "parse_levels",
]

#: Level samplers of ``plr-gym train --sampler``.
SAMPLERS: tuple[str, ...] = ("plr", "uniform")
#: Devices of ``--device``.
DEVICES: tuple[str, ...] = ("auto", "cpu", "cuda")
#: The recipes of ``--preset``, in the order of :data:`plr_gym.presets.RECIPES`.
PRESETS: tuple[str, ...] = ("paper-procgen", "paper-minigrid")


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
    limit = max_torch_threads()
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


#: Smallest temperature: below it (a subnormal float) 1/temperature overflows to inf.
MIN_TEMPERATURE = 2.2250738585072014e-308


def _temperature(text: str) -> float:
    value = _positive_float(text)
    if value < MIN_TEMPERATURE:
        raise argparse.ArgumentTypeError(
            f"expected a number >= {MIN_TEMPERATURE:.4g} (1/temperature must be finite), got {text!r}"
        )
    return value


#: Largest ``--save-minutes`` (about 19 years): 60 x a larger value could overflow to inf seconds.
MAX_SAVE_MINUTES = 10_000_000


def _save_minutes(text: str) -> float:
    value = _finite_float(text)
    if not 0 < value <= MAX_SAVE_MINUTES:
        raise argparse.ArgumentTypeError(f"expected minutes in (0, {MAX_SAVE_MINUTES:,}], got {text!r}")
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
# the option record
# --------------------------------------------------------------------------------------------------
class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


#: An :class:`Option` field left out (argparse's own default applies).
UNSET: Any = _Unset()


@dataclass(frozen=True)
class PresetValue:
    """The value a ``--preset`` recipe gives an option.

    :param value: the value the recipe sets.
    :param paper: the value as the source states it, when it is stated differently (e.g. "64 x 256").
    :param source: where the value comes from (the paper, level-replay's file and lines, Cobbe et al. 2020).
    """

    value: Any
    paper: str
    source: str


@dataclass(frozen=True)
class Option:
    """One command-line option: everything the parser, ``config.json``, the presets and the docs need.

    :param dest: the parsed attribute and ``config.json`` key (``--n-envs`` -> ``"n_envs"``).
    :param help: the ``--help`` line; ``{default}`` is replaced by :attr:`library_default`.
    :param group: the argparse group's title (``None``: the command's own options).
    :param flag: the flag (default ``--`` and ``dest`` with dashes); a positional argument is its ``dest``.
    :param type: the parser of the value (``_positive_int``, :func:`parse_levels`, ...).
    :param choices: the accepted values.
    :param default: argparse's default (left out: argparse's own, e.g. ``False`` for ``store_true``).
    :param library_default: for an option a preset can set: its value when neither the command line nor
        the preset sets it (its argparse default is then ``None``, filled by
        :func:`plr_gym.presets.resolve`, which records where each value came from in ``recipe_sources``).
    :param presets: preset name -> :class:`PresetValue`, the value each recipe sets and its source.
    :param resumable: may differ when a run is resumed (``--resume``); every other option must match the
        run's ``config.json``.
    :param action, metavar, nargs, const: as ``argparse.ArgumentParser.add_argument``'s.
    """

    dest: str
    help: str
    group: str | None = None
    flag: str | None = None
    type: Callable[[str], Any] | None = None
    choices: Sequence[Any] | None = None
    default: Any = UNSET
    library_default: Any = UNSET
    presets: Mapping[str, PresetValue] = field(default_factory=dict)
    resumable: bool = False
    action: Any = None
    metavar: str | None = None
    nargs: Any = None
    const: Any = UNSET

    @property
    def name(self) -> str:
        """The flag, or a positional argument's name."""
        return self.flag or "--" + self.dest.replace("_", "-")

    @property
    def positional(self) -> bool:
        return not self.name.startswith("-")

    @property
    def resolved(self) -> bool:
        """Whether a preset can set it (:attr:`library_default` given)."""
        return self.library_default is not UNSET

    def add_to(self, parser: Any) -> None:
        """``parser.add_argument`` (``parser``: a parser or an argument group)."""
        kwargs: dict[str, Any] = {"help": self.help}
        if self.resolved:
            kwargs["help"] = self.help.replace("{default}", str(self.library_default))
            kwargs["default"] = None
        for key in ("type", "choices", "action", "metavar", "nargs"):
            if getattr(self, key) is not None:
                kwargs[key] = getattr(self, key)
        for key in ("default", "const"):
            if getattr(self, key) is not UNSET:
                kwargs[key] = getattr(self, key)
        if self.positional:
            parser.add_argument(self.dest, **kwargs)
        else:
            parser.add_argument(self.name, dest=self.dest, **kwargs)


def add_options(parser: argparse.ArgumentParser, options: Iterable[Option]) -> None:
    """Add ``options`` to ``parser`` in their order, each group created where its first option comes."""
    groups: dict[str, Any] = {}
    for option in options:
        target: Any = parser
        if option.group is not None:
            if option.group not in groups:
                groups[option.group] = parser.add_argument_group(option.group)
            target = groups[option.group]
        option.add_to(target)


# --------------------------------------------------------------------------------------------------
# groups and the recipes' sources (presets.RECIPES is derived from the options' ``presets``)
# --------------------------------------------------------------------------------------------------
#: The argparse groups of ``plr-gym train`` (its --help sections), in their order.
_TRAINING = "training"
_REFERENCE_GROUP = "the PLR paper's code (level-replay) or the library's default (docs/paper.md)"
_LEVELS = "levels"
_SAMPLER = "level sampler (defaults: LevelSampler's)"
_OUTPUT = "output"
#: Where the recipes' values come from.
_PAPER = "Jiang et al. 2021, §5 and appendix"
_CODE_ARGS = "level-replay `arguments.py`"
_CODE_ENVS = "level-replay `envs.py` (`VecNormalize(ob=False, ret=True)`, Baselines' gamma 0.99)"
_CODE_TRAIN = "level-replay `train.py`"
_CODE_TEST = "level-replay `test.py` (`num_levels=0`: the full level distribution)"


def _both(value: Any, paper: str, source: str) -> dict[str, PresetValue]:
    """The same value in every recipe."""
    return {name: PresetValue(value, paper, source) for name in PRESETS}


def _procgen(value: Any, paper: str, source: str) -> dict[str, PresetValue]:
    return {"paper-procgen": PresetValue(value, paper, source)}


def _paper_sampler(
    key: str, paper: str | Callable[[Any], str], source: str = _PAPER
) -> dict[str, PresetValue]:
    """The value of :data:`plr_gym.sampler.PAPER_PRESETS` (the paper's sampler settings' one home)."""
    return {
        name: PresetValue(values[key], paper(values[key]) if callable(paper) else paper, source)
        for name, values in PAPER_PRESETS.items()
    }


def _reference(choice: ReferenceChoice) -> Option:
    """One of the five behaviours where level-replay differs from SB3 (:mod:`plr_gym.reference`): both
    choices, the library's default, and level-replay's in the recipes of ``choice.presets``."""
    source = f"level-replay {LEVEL_REPLAY_COMMIT} {choice.where}"
    return Option(
        choice.dest,
        f"default {choice.default}: {choice.default_does}; {choice.reference} (level-replay): "
        f"{choice.reference_does}",
        group=_REFERENCE_GROUP,
        choices=choice.choices,
        library_default=choice.default,
        presets={
            name: PresetValue(choice.reference, choice.reference_does, source) for name in choice.presets
        },
    )


# --------------------------------------------------------------------------------------------------
# the tables
# --------------------------------------------------------------------------------------------------
_HYPER = Hyperparameters()
_SAMPLER_DEFAULTS = sampler_defaults()
_TORCH_THREADS_HELP = (
    "torch CPU threads, 1..the machine's CPUs (default: 1 for an MLP policy, e.g. MiniGrid; torch's "
    "default, one per core, for a CNN, e.g. Procgen)"
)

# One option per entry, in --help's order (which is config.json's); a long table, as a table is.
_SHARED: tuple[Option, ...] = (
    Option(
        "preset",
        "the PLR paper's whole recipe (PPO settings, encoder, reward normalisation, env, levels, budget, "
        "sampler, test levels: see docs/paper.md); every option given on the command line wins",
        choices=sorted(PRESETS),
        default=None,
    ),
    # training
    Option(
        "algo", "algorithm (default: {default})", _TRAINING, choices=ALGORITHMS, library_default="ppo",
        presets=_both("ppo", "PPO", _PAPER),
    ),
    Option(
        "timesteps", "environment steps (default {default})", _TRAINING, type=_step_count,
        library_default=100_000, presets=_procgen(25_000_000, "25M steps", _PAPER), resumable=True
    ),
    Option(
        "n_envs", "parallel environments (default {default})", _TRAINING, type=_positive_int,
        library_default=8, presets=_procgen(64, "64 parallel envs", _CODE_ARGS + " `--num_processes`"),
    ),
    Option("seed", "seed of model, envs and sampler (default 0)", _TRAINING, type=_seed, default=0),
    Option(
        "n_steps", "rollout length per env (default {default})", _TRAINING, type=_positive_int,
        library_default=_HYPER.n_steps,
        presets=_both(256, "rollout length 256", _CODE_ARGS + " `--num_steps`"),
    ),
    Option(
        "batch_size", "PPO minibatch size (default {default})", _TRAINING, type=_positive_int,
        library_default=_HYPER.batch_size,
    ),
    Option(
        "n_minibatches",
        "PPO minibatches per epoch: --batch-size = n-envs x n-steps / this (instead of --batch-size)",
        _TRAINING, type=_positive_int, library_default=None,
        presets=_both(8, "8 minibatches per epoch", _CODE_ARGS + " `--num_mini_batch`"),
    ),
    Option(
        "n_epochs", "PPO epochs per rollout (default {default})", _TRAINING, type=_positive_int,
        library_default=_HYPER.n_epochs, presets=_both(3, "3 PPO epochs", _CODE_ARGS + " `--ppo_epoch`"),
    ),
    Option(
        "learning_rate", "default {default}", _TRAINING, type=_positive_float,
        library_default=_HYPER.learning_rate, presets=_both(5e-4, "Adam, lr 5e-4", _CODE_ARGS + " `--lr`"),
    ),
    Option(
        "ent_coef", "entropy bonus (default {default})", _TRAINING, type=_finite_float,
        library_default=_HYPER.ent_coef,
        presets=_both(0.01, "entropy coefficient 0.01", _CODE_ARGS + " `--entropy_coef`"),
    ),
    Option(
        "gamma", "discount (default {default})", _TRAINING, type=_unit_float, library_default=_HYPER.gamma,
        presets=_both(0.999, "discount 0.999", _CODE_ARGS + " `--gamma`"),
    ),
    Option(
        "gae_lambda", "GAE lambda (default {default})", _TRAINING, type=_unit_float,
        library_default=_HYPER.gae_lambda,
        presets=_both(0.95, "GAE lambda 0.95", _CODE_ARGS + " `--gae_lambda`"),
    ),
    Option(
        "clip_range", "PPO clipping (default {default})", _TRAINING, type=_positive_float,
        library_default=_HYPER.clip_range, presets=_both(0.2, "clip 0.2", _CODE_ARGS + " `--clip_param`"),
    ),
    Option(
        "vf_coef", "value-loss coefficient (default {default})", _TRAINING, type=_nonneg_float,
        library_default=_HYPER.vf_coef,
        presets=_both(0.5, "value loss coefficient 0.5", _CODE_ARGS + " `--value_loss_coef`"),
    ),
    Option(
        "max_grad_norm", "gradient clipping (default {default})", _TRAINING, type=_positive_float,
        library_default=_HYPER.max_grad_norm,
        presets=_both(0.5, "max gradient norm 0.5", _CODE_ARGS + " `--max_grad_norm`"),
    ),
    Option(
        "optimizer_eps", "Adam's epsilon (A2C: RMSprop's) (default {default})", _TRAINING,
        type=_positive_float, library_default=_HYPER.optimizer_eps,
        presets=_both(1e-5, "Adam epsilon 1e-5", _CODE_ARGS + " `--eps`"),
    ),
    Option(
        "normalize_reward",
        "divide rewards by the running std of a discounted return, clip to [-10, 10] (SB3's "
        "VecNormalize(norm_obs=False), as the paper's code; default off)",
        _TRAINING, action=argparse.BooleanOptionalAction, library_default=False,
        presets=_both(True, "reward normalisation", _CODE_ENVS),
    ),
    Option(
        "normalize_reward_gamma", "discount of that running return (default {default})", _TRAINING,
        type=_unit_float, library_default=0.99,
        presets=_both(0.99, "return discount of the normaliser 0.99", _CODE_ENVS),
    ),
    Option(
        "encoder",
        "image encoder: auto/nature (SB3's NatureCNN) or impala (the paper's IMPALA-CNN) (default auto)",
        _TRAINING, choices=ENCODERS, library_default="auto",
        presets=_procgen(
            "impala", "IMPALA-CNN (ResNet, 16-32-32), 256 units", _PAPER + "; Cobbe et al. 2020"
        ),
    ),
    Option(
        "vec_env",
        "dummy (one process), subproc (one per env) or batched (Procgen: one ProcgenVecEnv); default dummy",
        _TRAINING, choices=VEC_ENVS, library_default="dummy",
        presets=_procgen("batched", "one batched `ProcgenEnv(num_envs=64)`", "level-replay `envs.py`"),
    ),
    Option(
        "subproc", "SubprocVecEnv instead of DummyVecEnv (--vec-env subproc)", _TRAINING, action="store_true",
        resumable=True,
    ),
    Option(
        "device", "torch device (default auto: cuda if available)", _TRAINING, choices=DEVICES,
        default="auto", resumable=True,
    ),
    Option(
        "torch_threads", _TORCH_THREADS_HELP, _TRAINING, type=_torch_threads, default=None, resumable=True
    ),
    Option(
        "distribution_mode", "Procgen distribution mode (default easy; Procgen only)", _TRAINING,
        library_default="easy", presets=_procgen("easy", "easy mode", _PAPER),
    ),
    Option(
        "env_kwarg",
        "extra gym.make keyword (a JSON value, or a bare word as a string); a keyword the env id fixes, "
        "e.g. size for MiniGrid-Empty-5x5-v0, is refused",
        _TRAINING, action="append", metavar="KEY=VALUE",
    ),
    Option(
        "env_kwargs",
        "several gym.make keywords at once (rl_zoo3's --env-kwargs): KEY=VALUE or KEY:VALUE, each as "
        "--env-kwarg (config.json records them under env_kwarg)",
        _TRAINING, nargs="+", action="extend", metavar="KEY=VALUE",
    ),
    Option(
        "gym_packages",
        "modules to import first (rl_zoo3's convention): those that register your own env ids with "
        "Gymnasium, from the current directory or PYTHONPATH (docs/own_env.md)",
        _TRAINING, nargs="+", action="extend", metavar="MODULE",
    ),
    # the five behaviours of the paper's code (their one home: plr_gym.reference.REFERENCE_CHOICES)
    *(_reference(choice) for choice in REFERENCE_CHOICES),
    # levels
    Option(
        "num_levels", "training levels (default {default})", _LEVELS, type=_positive_int, library_default=100,
        presets=_procgen(200, "200 training levels", _PAPER + "; " + _CODE_ARGS + " `--num_train_seeds`"),
    ),
    Option(
        "level_start", "first training level (default {default})", _LEVELS, type=_nonneg_int,
        library_default=0, presets=_procgen(0, "training levels 0..199", _CODE_TRAIN),
    ),
    Option(
        "eval_levels", "held-out levels, START:STOP or a,b,c (default {default})", _LEVELS, type=parse_levels,
        library_default="10000:10100",
        presets=_procgen("10000:11000", "1,000 test episodes on unseen levels", _CODE_TEST),
    ),
    Option(
        "eval_freq", "evaluate every N steps (default {default})", _LEVELS, type=_step_count,
        library_default=10_000,
        presets=_procgen(
            1_000_000,
            "10 test episodes after every update, 1,000 at the end",
            _CODE_TRAIN + "; here: all 1,000 levels every 1M steps",
        ),
    ),
    Option(
        "eval_episodes", "episodes per level (default {default})", _LEVELS, type=_positive_int,
        library_default=1, presets=_procgen(1, "one episode per test level", _CODE_TEST),
    ),
    Option(
        "eval_deterministic", "greedy actions at evaluation (default: actions sampled from the policy)",
        _LEVELS, action=argparse.BooleanOptionalAction, library_default=False,
        presets=_procgen(False, "actions sampled from the policy", _CODE_TEST),
    ),
    Option(
        "eval_train_levels", "skip evaluating on (as many) training levels too", _LEVELS,
        flag="--no-eval-train-levels", action="store_false",
    ),
    Option(
        "eval_at_start",
        "skip the evaluation at step 0: evaluate every --eval-freq steps and at the end only",
        _LEVELS, flag="--no-eval-at-start", action="store_false",
    ),
    # level sampler
    Option(
        "sampler", "plr or uniform (default plr)", _SAMPLER, choices=SAMPLERS, library_default="plr",
        presets=_both("plr", "PLR", _PAPER),
    ),
    Option(
        "strategy", "scoring (default {default})", _SAMPLER, choices=STRATEGIES,
        library_default=_SAMPLER_DEFAULTS["strategy"],
        presets=_paper_sampler("strategy", "L1 value loss: mean absolute GAE of the episode"),
    ),
    Option(
        "score_transform", "h (default {default})", _SAMPLER, choices=SCORE_TRANSFORMS,
        library_default=_SAMPLER_DEFAULTS["score_transform"],
        presets=_paper_sampler("score_transform", "rank prioritisation"),
    ),
    Option(
        "temperature", "beta (default {default})", _SAMPLER, type=_temperature,
        library_default=_SAMPLER_DEFAULTS["temperature"],
        presets=_paper_sampler("temperature", lambda value: f"beta = {value}"),
    ),
    Option(
        "staleness_coef", "rho (default {default})", _SAMPLER, type=_unit_float,
        library_default=_SAMPLER_DEFAULTS["staleness_coef"],
        presets=_paper_sampler("staleness_coef", lambda value: f"rho = {value}"),
    ),
    Option(
        "staleness_transform", "default {default}", _SAMPLER, choices=STALENESS_TRANSFORMS,
        library_default=_SAMPLER_DEFAULTS["staleness_transform"],
        presets=_both("power", "staleness P_C", _PAPER),
    ),
    Option(
        "staleness_temperature", "default {default}", _SAMPLER, type=_temperature,
        library_default=_SAMPLER_DEFAULTS["staleness_temperature"],
        presets=_both(1.0, "staleness temperature 1", _CODE_ARGS + " `--staleness_temperature`"),
    ),
    Option(
        "replay_schedule", "default {default}", _SAMPLER, choices=REPLAY_SCHEDULES,
        library_default=_SAMPLER_DEFAULTS["replay_schedule"],
        presets=_both("proportionate", "replay prob. = seen / all levels", _PAPER),
    ),
    Option(
        "replay_prob", "fixed schedule's P(replay) (default {default})", _SAMPLER, type=_unit_float,
        library_default=_SAMPLER_DEFAULTS["replay_prob"],
    ),
    Option(
        "min_seen_ratio", "fraction seen before replay (default {default})", _SAMPLER, type=_unit_float,
        library_default=_SAMPLER_DEFAULTS["min_seen_ratio"],
        presets=_both(1.0, "replay once every level was seen", _CODE_ARGS + " `--level_replay_rho`"),
    ),
    Option(
        "alpha", "EWA step of level scores (default {default})", _SAMPLER, type=_unit_float,
        library_default=_SAMPLER_DEFAULTS["alpha"],
        presets=_both(1.0, "score EWA step 1 (latest score)", _CODE_ARGS + " `--level_replay_alpha`"),
    ),
    Option(
        "eps", "eps_greedy exploration mass (default {default})", _SAMPLER, type=_unit_float,
        library_default=_SAMPLER_DEFAULTS["eps"],
    ),
    Option(
        "temperature_end",
        "anneal the temperature linearly to this value over training (default: no annealing)",
        _SAMPLER, type=_temperature, library_default=_SAMPLER_DEFAULTS["temperature_end"],
    ),
    Option(
        "uniform_mass", "share of replay draws uniform over the levels (default {default})", _SAMPLER,
        type=_unit_float, library_default=_SAMPLER_DEFAULTS["uniform_mass"],
        presets=_paper_sampler("uniform_mass", "no uniform mixing"),
    ),
    Option(
        "success_rate_alpha", "learnability: step size of each level's success rate (default %(default)s)",
        _SAMPLER, type=_open_unit_float, default=_SAMPLER_DEFAULTS["success_rate_alpha"],
    ),
    # output
    Option(
        "tensorboard", "no TensorBoard logs", _OUTPUT, flag="--no-tensorboard", action="store_false",
        resumable=True,
    ),
    Option(
        "progress", "no progress bar", _OUTPUT, flag="--no-progress", action="store_false", resumable=True
    ),
    Option("quiet", "print nothing but errors", _OUTPUT, action="store_true", resumable=True),
    Option(
        "overwrite", "replace the run in a non-empty --out (default: refuse)", _OUTPUT, action="store_true",
        resumable=True,
    ),
    Option(
        "save_freq",
        "save a checkpoint every STEPS env steps, at the next rollout boundary (default %(default)s); "
        "SIGTERM, SIGINT, SIGHUP and SIGUSR1 save at the current step",
        _OUTPUT, type=_step_count, default=DEFAULT_SAVE_FREQ, metavar="STEPS", resumable=True
    ),
    Option(
        "save_minutes",
        "also save a checkpoint at the first rollout boundary after M minutes of wall clock since the last "
        "one (runs in short slices of machine time: at most M minutes plus a rollout are lost)",
        _OUTPUT, type=_save_minutes, default=None, metavar="M", resumable=True
    ),
    Option(
        "keep_checkpoints", "keep the last K checkpoints (default %(default)s)", _OUTPUT, type=_positive_int,
        default=DEFAULT_KEEP, metavar="K", resumable=True
    ),
)  # fmt: skip

#: ``plr-gym train``: the env, the options it shares with ``compare``, the run directory.
TRAIN_OPTIONS: tuple[Option, ...] = (
    Option(
        "env_id",
        "Gymnasium id: MiniGrid-*, plr_gym/procgen-<game>-v0, yours (--gym-packages)",
        flag="env_id",
    ),
    *_SHARED,
    Option("out", "run directory (default runs/run)", default=None, resumable=True),
    Option(
        "resume",
        "continue the run in DIR (or in --out) from its checkpoint up to --timesteps in total; repeat the "
        "run's command. A directory without a checkpoint starts at step 0, so the same command can start a "
        "run and continue it after preemption",
        metavar="DIR", nargs="?", const="", default=None, resumable=True
    ),
)  # fmt: skip

#: ``plr-gym compare``: run directories, or ``--run`` with every option of ``train`` (env as ``--env``).
COMPARE_OPTIONS: tuple[Option, ...] = (
    Option("run_dirs", "run directories", flag="run_dirs", nargs="*"),
    Option("run", "train --sampler plr and uniform into OUT/plr, OUT/uniform", action="store_true"),
    Option("out", "output directory (default runs/compare)", default="runs/compare"),
    Option(
        "seeds", "with --run: train each sampler once per seed (OUT/plr-seedN, ...); results are merged",
        type=_nonneg_int, nargs="+", default=None,
    ),
    Option(
        "jobs", "with --run: train this many runs at once, one process each (default 1: one after the other)",
        type=_positive_int, default=1,
    ),
    Option("env_id", "Gymnasium id (with --run)", flag="--env", default=None),
    *_SHARED,
)  # fmt: skip

#: ``plr-gym evaluate``.
EVALUATE_OPTIONS: tuple[Option, ...] = (
    Option(
        "model",
        "model .zip, or a run directory containing model.zip. A model file is code: loading it unpickles "
        "Python objects, so only evaluate models from a trusted source",
        flag="model",
    ),
    Option("env", "Gymnasium id (default: from the run's config.json)", default=None),
    Option("algo", "default: from config.json, else ppo", choices=ALGORITHMS, default=None),
    Option("levels", "START:STOP or a,b,c", type=parse_levels, default="10000:10100"),
    Option("n_episodes", "episodes per level (default 1)", type=_positive_int, default=1),
    Option("n_envs", "parallel environments (default 8)", type=_positive_int, default=8),
    Option("seed", "seed (default 0)", type=_seed, default=0),
    Option("deterministic", "greedy actions (default: sampled from the policy)", action="store_true"),
    Option("device", "torch device (default auto)", choices=DEVICES, default="auto"),
    Option("torch_threads", _TORCH_THREADS_HELP, type=_torch_threads, default=None),
    Option("progress", "no progress bar", flag="--no-progress", action="store_false"),
    Option("distribution_mode", "Procgen distribution mode (default: the run's, else easy)", default=None),
    Option("env_kwarg", "extra gym.make keyword (default: the run's)", action="append", metavar="KEY=VALUE"),
    Option(
        "env_kwargs", "several gym.make keywords at once: KEY=VALUE or KEY:VALUE (default: the run's)",
        nargs="+", action="extend", metavar="KEY=VALUE",
    ),
    Option(
        "gym_packages", "modules that register your own env ids, imported first (default: the run's)",
        nargs="+", action="extend", metavar="MODULE",
    ),
    Option("out", "JSON output; the CSV goes next to it", default="evaluation.json"),
)  # fmt: skip


# --------------------------------------------------------------------------------------------------
# documentation
# --------------------------------------------------------------------------------------------------
def options_table(options: Iterable[Option] = TRAIN_OPTIONS) -> str:
    """The options as a Markdown table (docs/cli.md's): option, default, each preset's value, help.

    Example:
        >>> print(options_table().splitlines()[2])
        | `env_id` | | | | Gymnasium id: MiniGrid-*, plr_gym/procgen-&lt;game>-v0, yours (--gym-packages) |
    """
    rows = [
        _row(["option", "default", *(f"`--preset {name}`" for name in PRESETS), "what it does"]),
        _row(["---"] * (len(PRESETS) + 3)),
    ]
    for o in options:
        default = o.library_default if o.resolved else o.default
        shown = "" if default is UNSET or default is None else _cell(default)
        values = [_cell(o.presets[name].value) if name in o.presets else "" for name in PRESETS]
        text = o.help.replace("{default}", shown).replace("%(default)s", shown)
        rows.append(_row([f"`{o.name}`", shown, *values, _cell(text)]))
    return "\n".join(rows)


def _row(cells: Sequence[str]) -> str:
    return "|" + "|".join(f" {cell} " if cell else " " for cell in cells) + "|"


def _cell(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value).replace("|", "\\|").replace("<", "&lt;")
