"""What every ``plr-gym`` command shares: its errors, the env and device it runs on, and ``--env-kwarg``.

:class:`CLIError` is bad input (``plr-gym: error: ...``, exit code 2); :class:`Interrupted` a run stopped
by a signal. The env and algorithm helpers are :mod:`plr_gym.training`'s with its ``SetupError`` as a
``CLIError``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
from typing import Any

from plr_gym import training
from plr_gym.options import DEVICES
from plr_gym.training import SetupError

__all__ = [
    "CLIError",
    "Interrupted",
    "env_family",
    "make_level_venv",
    "resolve_device",
]


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


def _apply_torch_threads(requested: int | None, obs_space: Any) -> int:
    """Set torch's CPU threads: ``--torch-threads``, else :func:`plr_gym.training.default_torch_threads`
    of the run's policy (1 for an MLP, torch's default for a CNN); returns the count in use
    (:func:`plr_gym.training.apply_torch_threads`)."""
    policy, _ = training.policy_for(obs_space)
    return training.apply_torch_threads("auto" if requested is None else requested, policy)


_torch_default_threads = training.torch_default_threads


def _has_modules(*names: str) -> bool:
    return all(importlib.util.find_spec(n) is not None for n in names)


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
