"""The PLR paper's whole training recipe as ``plr-gym train --preset`` applies it: one home for its values.

A *recipe* (:data:`RECIPES`) is a list of :class:`Setting` s, each a ``plr-gym train`` option (its
argparse ``dest``), the value the paper uses, and where that value comes from (the paper, the reference
code ``facebookresearch/level-replay``, or Cobbe et al. 2020). The values are declared with the options
themselves (:data:`plr_gym.options.TRAIN_OPTIONS`: each option's ``presets``), so a new option that a
recipe sets is one entry there; this module gathers them. :func:`resolve` fills a parsed command
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

Importing this module imports neither torch nor Stable-Baselines3 (it imports the CLI's option table).

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

from plr_gym.options import PRESETS, TRAIN_OPTIONS
from plr_gym.sampler import sampler_defaults

__all__ = [
    "DEPRECATED_PRESETS",
    "RECIPES",
    "TEST_PROTOCOLS",
    "Setting",
    "library_defaults",
    "recipe_table",
    "resolve",
]


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


#: The recipes of ``plr-gym train --preset``: name -> settings, in the options' order. Each value and its
#: source is declared with its option (:data:`plr_gym.options.TRAIN_OPTIONS`, ``presets=``); the
#: sampler's side comes from :data:`plr_gym.sampler.PAPER_PRESETS` and level-replay's five behaviours from
#: :data:`plr_gym.reference.REFERENCE_CHOICES`.
RECIPES: dict[str, tuple[Setting, ...]] = {
    name: tuple(
        Setting(o.dest, o.presets[name].value, o.presets[name].paper, o.presets[name].source)
        for o in TRAIN_OPTIONS
        if name in o.presets
    )
    for name in PRESETS
}

#: LevelSampler options of ``plr-gym train`` that :func:`resolve` fills (defaults: ``sampler_defaults()``).
SAMPLER_OPTIONS: tuple[str, ...] = tuple(
    o.dest for o in TRAIN_OPTIONS if o.resolved and o.dest in sampler_defaults()
)

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
    :data:`plr_gym.reference.REFERENCE_CHOICES` (SB3's update and time limits, stitched episodes): each
    option's ``library_default`` in :data:`plr_gym.options.TRAIN_OPTIONS`, in the options' order.

    Example:
        >>> d = library_defaults()
        >>> d["gamma"], d["n_envs"], d["encoder"], d["normalize_reward"], d["batch_size"]
        (0.99, 8, 'auto', False, 256)
    """
    return {o.dest: o.library_default for o in TRAIN_OPTIONS if o.resolved}


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
    """The recipe as a Markdown table: option, value, the source's wording, source (in the options' order).

    Example:
        >>> print(recipe_table("paper-procgen").splitlines()[4])
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
