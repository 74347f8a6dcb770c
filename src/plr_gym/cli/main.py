"""The ``plr-gym`` parser and entry point: one sub-command per command module, its options from
:mod:`plr_gym.options`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from plr_gym.cli.common import CLIError, Interrupted
from plr_gym.cli.compare import compare_command
from plr_gym.cli.evaluate import evaluate_model
from plr_gym.cli.train import train
from plr_gym.options import COMPARE_OPTIONS, EVALUATE_OPTIONS, TRAIN_OPTIONS, Option, add_options

__all__ = ["COMMANDS", "Command", "build_parser", "main"]


class Command(NamedTuple):
    """A ``plr-gym`` sub-command: its name, one-line help, description, options and function."""

    name: str
    help: str
    description: str
    options: tuple[Option, ...]
    run: Callable[[argparse.Namespace], Any]


#: The sub-commands, in ``plr-gym --help``'s order.
COMMANDS: tuple[Command, ...] = (
    Command(
        "train",
        "train with PLR or uniform level sampling",
        "Train an on-policy agent on a fixed set of training levels with PLR (or uniform sampling), "
        "evaluating on held-out levels during training.",
        TRAIN_OPTIONS,
        train,
    ),
    Command(
        "evaluate",
        "evaluate a saved model on held-out levels",
        "Play each level and write per-level returns and the summary (mean, IQM, 95%% CIs). Security: an SB3 "
        "model .zip contains pickled Python objects and loading it runs code; only evaluate model files from "
        "a trusted source.",
        EVALUATE_OPTIONS,
        evaluate_model,
    ),
    Command(
        "compare",
        "compare runs: table and plot",
        "Compare run directories written by 'plr-gym train' (e.g. PLR and uniform): writes comparison.md, "
        "comparison.csv and comparison.png (held-out return over training, level-score distribution). With "
        "--run, trains a PLR and a uniform run first (all train options apply). Runs of the same "
        "configuration with different seeds are merged.",
        COMPARE_OPTIONS,
        compare_command,
    ),
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
    for command in COMMANDS:
        p = sub.add_parser(command.name, help=command.help, description=command.description)
        add_options(p, command.options)
        p.set_defaults(func=command.run)
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
