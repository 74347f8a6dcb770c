"""The PLR paper's whole training recipe as ``plr-gym train --preset`` applies it: one home for its values.

A *recipe* (:data:`RECIPES`) is a list of :class:`Setting` s, each a ``plr-gym train`` option (its
argparse ``dest``), the value the paper uses, and where that value comes from (the paper, the reference
code ``facebookresearch/level-replay``, or Cobbe et al. 2020). :func:`resolve` fills a parsed command
line: an option given on the command line keeps its value, else the recipe's, else the library's default
(:func:`library_defaults`); it returns where each value came from, which ``config.json`` records.

``paper-procgen`` is the paper's Procgen setting in full: PPO with 64 envs x 256 steps, 3 epochs of 8
minibatches, learning rate 5e-4, gamma 0.999, GAE lambda 0.95, clip 0.2, entropy 0.01, value coefficient
0.5, gradient norm 0.5, Adam epsilon 1e-5, reward normalisation as the reference code does it, the
IMPALA-CNN encoder (:class:`plr_gym.policies.ImpalaCnnPolicy`), the batched Procgen env in easy mode, 200
training levels, 25M steps, PLR with ``value_l1``, rank, beta = 0.1, rho = 0.1, and the test protocol
(1,000 unseen levels; returns normalised by uniform's mean per game, computed by
``benchmarks/paper_campaign.py``). ``paper-minigrid`` sets what the paper's MiniGrid runs share with it:
the reference code's PPO settings and reward normalisation, and PLR with rho = 0.3. The documentation's
"Reproducing the paper" page has the table with sources (:func:`recipe_table` writes it).

Importing this module imports neither torch nor Stable-Baselines3.

Example:
    >>> import argparse
    >>> from plr_gym.presets import RECIPES, resolve
    >>> args = argparse.Namespace(preset="paper-procgen", gamma=None, n_envs=4, n_steps=None)
    >>> sources = resolve(args, only=("gamma", "n_envs", "n_steps"))
    >>> args.gamma, args.n_envs, args.n_steps, sources["n_envs"], sources["gamma"]
    (0.999, 4, 256, 'command line', 'paper-procgen')
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from plr_gym.reference import LEVEL_REPLAY_COMMIT, REFERENCE_CHOICES, library_default_values
from plr_gym.sampler import PAPER_PRESETS

__all__ = [
    "DEPRECATED_PRESETS",
    "RECIPES",
    "TEST_PROTOCOLS",
    "Setting",
    "library_defaults",
    "recipe_table",
    "resolve",
]

_PAPER = "Jiang et al. 2021, §5 and appendix"
_CODE_ARGS = "level-replay `arguments.py`"
_CODE_ENVS = "level-replay `envs.py` (`VecNormalize(ob=False, ret=True)`, Baselines' gamma 0.99)"
_CODE_TRAIN = "level-replay `train.py`"
_CODE_TEST = "level-replay `test.py` (`num_levels=0`: the full level distribution)"


@dataclass(frozen=True)
class Setting:
    """One value of a recipe.

    :param dest: the ``plr-gym train`` option's ``dest`` (``--n-envs`` -> ``"n_envs"``); the key in
        ``config.json``.
    :param value: the value the recipe sets.
    :param paper: the value as the source states it, when it is stated differently (e.g. "64 x 256").
    :param source: where the value comes from.
    """

    dest: str
    value: Any
    paper: str
    source: str


_PPO_COMMON: tuple[Setting, ...] = (
    Setting("algo", "ppo", "PPO", _PAPER),
    Setting("n_steps", 256, "rollout length 256", _CODE_ARGS + " `--num_steps`"),
    Setting("n_epochs", 3, "3 PPO epochs", _CODE_ARGS + " `--ppo_epoch`"),
    Setting("n_minibatches", 8, "8 minibatches per epoch", _CODE_ARGS + " `--num_mini_batch`"),
    Setting("learning_rate", 5e-4, "Adam, lr 5e-4", _CODE_ARGS + " `--lr`"),
    Setting("optimizer_eps", 1e-5, "Adam epsilon 1e-5", _CODE_ARGS + " `--eps`"),
    Setting("gamma", 0.999, "discount 0.999", _CODE_ARGS + " `--gamma`"),
    Setting("gae_lambda", 0.95, "GAE lambda 0.95", _CODE_ARGS + " `--gae_lambda`"),
    Setting("clip_range", 0.2, "clip 0.2", _CODE_ARGS + " `--clip_param`"),
    Setting("ent_coef", 0.01, "entropy coefficient 0.01", _CODE_ARGS + " `--entropy_coef`"),
    Setting("vf_coef", 0.5, "value loss coefficient 0.5", _CODE_ARGS + " `--value_loss_coef`"),
    Setting("max_grad_norm", 0.5, "max gradient norm 0.5", _CODE_ARGS + " `--max_grad_norm`"),
    Setting("normalize_reward", True, "reward normalisation", _CODE_ENVS),
    Setting("normalize_reward_gamma", 0.99, "return discount of the normaliser 0.99", _CODE_ENVS),
)

#: The sampler's side of the recipes comes from the one home of the paper's sampler settings.
_SAMPLER = PAPER_PRESETS["paper-procgen"]
_PLR_COMMON: tuple[Setting, ...] = (
    Setting("sampler", "plr", "PLR", _PAPER),
    Setting("strategy", _SAMPLER["strategy"], "L1 value loss: mean absolute GAE of the episode", _PAPER),
    Setting("score_transform", _SAMPLER["score_transform"], "rank prioritisation", _PAPER),
    Setting("temperature", _SAMPLER["temperature"], "beta = 0.1", _PAPER),
    Setting("staleness_transform", "power", "staleness P_C", _PAPER),
    Setting(
        "staleness_temperature", 1.0, "staleness temperature 1", _CODE_ARGS + " `--staleness_temperature`"
    ),
    Setting("replay_schedule", "proportionate", "replay prob. = seen / all levels", _PAPER),
    Setting("min_seen_ratio", 1.0, "replay once every level was seen", _CODE_ARGS + " `--level_replay_rho`"),
    Setting("alpha", 1.0, "score EWA step 1 (latest score)", _CODE_ARGS + " `--level_replay_alpha`"),
    Setting("uniform_mass", _SAMPLER["uniform_mass"], "no uniform mixing", _PAPER),
)

#: level-replay's behaviour for each of :data:`plr_gym.reference.REFERENCE_CHOICES` (the update, the
#: encoder's skip, time limits, partial episodes): where the paper's code and SB3 differ, the recipes train
#: as the paper's code does.
_REFERENCE: dict[str, Setting] = {
    c.dest: Setting(c.dest, c.reference, c.reference_does, f"level-replay {LEVEL_REPLAY_COMMIT} {c.where}")
    for c in REFERENCE_CHOICES
}
_UPDATE = (_REFERENCE["time_limit"], _REFERENCE["value_loss"], _REFERENCE["advantage_normalization"])
#: How the sampler draws and weighs levels: when each level is drawn (at the previous episode's end) and the
#: two transforms' details (the latter change nothing under the recipes' rank transform over scores >= 0 with
#: replay after every level was seen; they keep ``--strategy gae`` or ``--score-transform power`` with the
#: preset as level-replay).
_DRAWS = (_REFERENCE["level_draw"], _REFERENCE["unseen_rank"], _REFERENCE["power_offset"])

#: LevelSampler options of ``plr-gym train`` that :func:`resolve` fills (defaults: ``sampler_defaults()``).
SAMPLER_OPTIONS = (
    "strategy",
    "score_transform",
    "temperature",
    "staleness_coef",
    "staleness_transform",
    "staleness_temperature",
    "replay_schedule",
    "replay_prob",
    "min_seen_ratio",
    "alpha",
    "eps",
    "uniform_mass",
    "temperature_end",
)

#: The recipes of ``plr-gym train --preset``: name -> settings, in table order.
RECIPES: dict[str, tuple[Setting, ...]] = {
    "paper-procgen": (
        Setting("timesteps", 25_000_000, "25M steps", _PAPER),
        Setting("n_envs", 64, "64 parallel envs", _CODE_ARGS + " `--num_processes`"),
        *_PPO_COMMON,
        *_UPDATE,
        Setting(
            "encoder", "impala", "IMPALA-CNN (ResNet, 16-32-32), 256 units", _PAPER + "; Cobbe et al. 2020"
        ),
        _REFERENCE["residual_skip"],
        Setting("vec_env", "batched", "one batched `ProcgenEnv(num_envs=64)`", "level-replay `envs.py`"),
        Setting("distribution_mode", "easy", "easy mode", _PAPER),
        Setting(
            "num_levels", 200, "200 training levels", _PAPER + "; " + _CODE_ARGS + " `--num_train_seeds`"
        ),
        Setting("level_start", 0, "training levels 0..199", _CODE_TRAIN),
        Setting("eval_levels", "10000:11000", "1,000 test episodes on unseen levels", _CODE_TEST),
        Setting(
            "eval_freq",
            1_000_000,
            "10 test episodes after every update, 1,000 at the end",
            _CODE_TRAIN + "; here: all 1,000 levels every 1M steps",
        ),
        Setting("eval_episodes", 1, "one episode per test level", _CODE_TEST),
        Setting("eval_deterministic", False, "actions sampled from the policy", _CODE_TEST),
        *_PLR_COMMON,
        _REFERENCE["partial_episodes"],
        *_DRAWS,
        Setting("staleness_coef", PAPER_PRESETS["paper-procgen"]["staleness_coef"], "rho = 0.1", _PAPER),
    ),
    "paper-minigrid": (
        *_PPO_COMMON,
        *_UPDATE,
        *_PLR_COMMON,
        _REFERENCE["partial_episodes"],
        *_DRAWS,
        Setting("staleness_coef", PAPER_PRESETS["paper-minigrid"]["staleness_coef"], "rho = 0.3", _PAPER),
    ),
}

#: How each recipe's held-out returns are reported (recorded in ``config.json`` as ``test_protocol``).
TEST_PROTOCOLS: dict[str, str] = {
    "paper-procgen": (
        "mean return over unseen levels of the full distribution (levels 10000..10999: Procgen seeds its "
        "level generator with the level id, so any ids outside the 200 training levels are independent "
        "draws), actions sampled from the policy; the paper's normalised test return is this mean divided by "
        "the mean of uniform sampling's runs on the same game (x100), by benchmarks/paper_campaign.py"
    ),
    "paper-minigrid": "mean return over the --eval-levels held-out levels, actions sampled from the policy",
}

#: Preset names that were renamed: old -> new (none so far; ``--preset`` names keep working).
DEPRECATED_PRESETS: dict[str, str] = {}


def library_defaults() -> dict[str, Any]:
    """The value of every option a recipe can set when neither the command line nor a preset sets it:
    :class:`~plr_gym.training.Hyperparameters`' fields, :func:`~plr_gym.sampler.sampler_defaults`, and
    ``plr-gym train``'s own (100,000 steps, 8 envs, 100 training levels, NatureCNN, no reward
    normalisation, one process for all envs), and the library's side of each
    :data:`plr_gym.reference.REFERENCE_CHOICES` (SB3's update and time limits, stitched episodes).

    Example:
        >>> d = library_defaults()
        >>> d["gamma"], d["n_envs"], d["encoder"], d["normalize_reward"], d["batch_size"]
        (0.99, 8, 'auto', False, 256)
    """
    from dataclasses import asdict

    from plr_gym.sampler import sampler_defaults
    from plr_gym.training import Hyperparameters

    defaults: dict[str, Any] = {
        "algo": "ppo",
        "timesteps": 100_000,
        "n_envs": 8,
        **asdict(Hyperparameters()),
        "n_minibatches": None,
        "normalize_reward": False,
        "normalize_reward_gamma": 0.99,
        "encoder": "auto",
        "vec_env": "dummy",
        "distribution_mode": "easy",
        "num_levels": 100,
        "level_start": 0,
        "eval_levels": "10000:10100",
        "eval_freq": 10_000,
        "eval_episodes": 1,
        "eval_deterministic": False,
        "sampler": "plr",
        **library_default_values(),  # partial episodes, time limits, the IMPALA skip, PPO's update
    }
    sampler = sampler_defaults()
    for key in SAMPLER_OPTIONS:
        defaults[key] = sampler[key]
    return defaults


def _recipe(preset: str | None) -> dict[str, Any]:
    if preset is None:
        return {}
    name = DEPRECATED_PRESETS.get(preset, preset)
    if name not in RECIPES:
        raise ValueError(f"preset must be one of {', '.join(RECIPES)}, got {preset!r}")
    return {s.dest: s.value for s in RECIPES[name]}


def resolve(args: argparse.Namespace, only: Iterable[str] | None = None) -> dict[str, str]:
    """Fill the options of ``args`` left unset (``None``) from its preset, else the library's defaults.

    An option given on the command line (not ``None``) always wins over the preset. Then
    ``batch_size`` follows ``n_minibatches`` (``n_envs * n_steps / n_minibatches``) unless given, and
    ``vec_env`` is ``subproc`` when ``--subproc`` was given.

    :param args: parsed ``plr-gym train`` arguments; ``args.preset`` names a recipe or is ``None``.
    :param only: resolve only these options (default: every option of :func:`library_defaults`).
    :return: option -> ``"command line"``, the preset's name, or ``"default"``.
    :raises ValueError: an unknown preset, ``--batch-size`` with ``--n-minibatches``, a rollout that
        ``n_minibatches`` does not divide, or ``--subproc`` with another ``--vec-env``.
    """
    preset = getattr(args, "preset", None)
    recipe = _recipe(preset)
    defaults = library_defaults()
    names = list(defaults) if only is None else list(only)
    sources: dict[str, str] = {}
    explicit_batch = getattr(args, "batch_size", None) is not None
    for name in names:
        if getattr(args, name, None) is not None:
            sources[name] = "command line"
        elif name in recipe:
            setattr(args, name, recipe[name])
            sources[name] = str(preset)
        else:
            setattr(args, name, defaults[name])
            sources[name] = "default"
    if only is None:
        _resolve_derived(args, explicit_batch, sources)
    return sources


def _resolve_derived(args: argparse.Namespace, explicit_batch: bool, sources: dict[str, str]) -> None:
    """``batch_size`` from ``n_minibatches``, ``vec_env`` from ``--subproc``."""
    if args.n_minibatches is not None:
        if explicit_batch and sources["n_minibatches"] == "command line":
            raise ValueError("give --batch-size or --n-minibatches, not both")
        rollout = args.n_envs * args.n_steps
        if not explicit_batch:
            if rollout % args.n_minibatches:
                raise ValueError(
                    f"--n-minibatches {args.n_minibatches} does not divide the rollout "
                    f"--n-envs x --n-steps = {rollout}"
                )
            args.batch_size = rollout // args.n_minibatches
            sources["batch_size"] = f"n_envs x n_steps / n_minibatches ({sources['n_minibatches']})"
        else:  # an explicit --batch-size wins over the preset's minibatch count
            args.n_minibatches = None
            sources["n_minibatches"] = "replaced by --batch-size"
    if getattr(args, "subproc", False):
        if sources.get("vec_env") == "command line" and args.vec_env != "subproc":
            raise ValueError(f"--subproc contradicts --vec-env {args.vec_env}")
        args.vec_env = "subproc"
        sources["vec_env"] = "command line (--subproc)"


def recipe_table(preset: str) -> str:
    """The recipe as a Markdown table: option, value, the source's wording, source.

    Example:
        >>> print(recipe_table("paper-procgen").splitlines()[3])
        | `--timesteps` | 25000000 | 25M steps | Jiang et al. 2021, §5 and appendix |
    """
    settings = RECIPES[DEPRECATED_PRESETS.get(preset, preset)]
    rows = ["| option | value | as the source states it | source |", "| --- | --- | --- | --- |"]
    rows.append(f"| `--preset` | {preset} | | |")
    for s in settings:
        flag = "--" + s.dest.replace("_", "-")
        rows.append(f"| `{flag}` | {_show(s.value)} | {s.paper} | {s.source} |")
    return "\n".join(rows)


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)
