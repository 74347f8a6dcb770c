"""What every ``plr-gym`` command shares: its errors, the env and device it runs on, ``--env-kwarg`` (and
``--env-kwargs``), ``--gym-packages`` and the check of an env of one's own (:func:`check_own_env`).

:class:`CLIError` is bad input (``plr-gym: error: ...``, exit code 2); :class:`Interrupted` a run stopped
by a signal. The env and algorithm helpers are :mod:`plr_gym.training`'s with its ``SetupError`` as a
``CLIError``.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import sys
from typing import Any

from plr_gym import training
from plr_gym.options import DEVICES
from plr_gym.training import SetupError

__all__ = [
    "CLIError",
    "Interrupted",
    "check_own_env",
    "env_family",
    "fold_env_kwargs",
    "import_gym_packages",
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
    if the id is unknown (saying how to bring an env of one's own: ``--gym-packages``)."""
    try:
        return training.env_family(env_id)
    except SetupError as exc:
        hint = ""
        if str(exc).startswith("unknown environment"):
            hint = "; an env of your own: give the module that registers it, --gym-packages MODULE"
        raise CLIError(f"{exc}{hint}") from None


def import_gym_packages(args: argparse.Namespace) -> None:
    """``--gym-packages MODULE ...`` (rl_zoo3's convention): import each module, so that the env ids it
    registers with Gymnasium exist. The current directory is searched first, as ``python -m`` does.

    :raises CLIError: a module cannot be imported, or importing it raised.
    """
    modules = getattr(args, "gym_packages", None) or []
    if modules and "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise CLIError(
                f"--gym-packages {name}: cannot import it ({exc}); give a module importable from the current "
                "directory or PYTHONPATH (a file my_envs.py is --gym-packages my_envs)"
            ) from None
        except Exception as exc:  # the user's module failed at import
            raise CLIError(
                f"--gym-packages {name}: importing it raised {type(exc).__name__}: {exc}"
            ) from None


def fold_env_kwargs(args: argparse.Namespace) -> None:
    """``--env-kwargs KEY=VALUE|KEY:VALUE ...`` joins ``--env-kwarg`` (as ``KEY=VALUE``), so that both
    spellings give one ``env_kwarg`` list in ``config.json`` and one set of checks (:func:`_env_kwargs`).

    :raises CLIError: an item with neither ``=`` nor ``:``.
    """
    extra = getattr(args, "env_kwargs", None)
    if not extra:
        return
    items = []
    for item in extra:
        key, sep, value = item.partition("=")
        if not sep:
            key, sep, value = item.partition(":")  # rl_zoo3's KEY:VALUE
        if not sep or not key:
            raise CLIError(f"--env-kwargs must be KEY=VALUE (or KEY:VALUE), got {item!r}")
        items.append(f"{key}={value}")
    args.env_kwarg = [*(args.env_kwarg or []), *items]
    args.env_kwargs = None


#: Envs :func:`check_own_env` has checked in this process (env id, keywords as JSON).
_CHECKED: set[tuple[str, str]] = set()


def check_own_env(env_id: str, env_kwargs: dict[str, Any], levels: list[int], quiet: bool = False) -> None:
    """Run :func:`plr_gym.check_level_env` once per process on an env outside the built-in families, on
    the run's training and held-out level ids; its failures are a ``CLIError``, its notes go to stderr."""
    import gymnasium as gym

    from plr_gym.env_checker import LevelEnvError, check_level_env

    key = (env_id, json.dumps(env_kwargs, sort_keys=True, default=repr))
    if key in _CHECKED:
        return
    try:
        env: Any = gym.make(env_id, **env_kwargs)
    except Exception as exc:  # a keyword the env does not take, or the env's own error
        raise CLIError(f"cannot build {env_id} with options {env_kwargs}: {exc}") from None
    try:
        report = check_level_env(env, levels, warn=False)
    except LevelEnvError as exc:
        raise CLIError(
            f"plr-gym ran plr_gym.check_level_env on {env_id} before training, and it failed: {exc}"
        ) from None
    finally:
        env.close()
    _CHECKED.add(key)
    if not quiet:
        for note in report.notes:
            print(f"note: check_level_env({env_id}): {note}", file=sys.stderr)


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
