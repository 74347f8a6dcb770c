"""``plr-gym evaluate``: play a saved model on held-out levels; per-level returns and their summary.

:func:`evaluate_model` in steps: the model file and its run's ``config.json`` (the env and its options
default to the run's), the evaluation env, the model (checked against the env's observations), the
episodes (:func:`plr_gym.evaluation.evaluate_levels`), and the JSON and CSV results.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from plr_gym import training
from plr_gym.cli.common import (
    CLIError,
    _algorithm_class,
    _apply_torch_threads,
    _env_kwargs,
    _has_modules,
    env_family,
    fold_env_kwargs,
    import_gym_packages,
    make_level_venv,
    resolve_device,
)

__all__ = ["evaluate_model"]


def evaluate_model(args: argparse.Namespace) -> dict[str, Any]:
    """Run ``plr-gym evaluate``: returns ``{"levels", "returns", "summary"}`` and writes JSON/CSV."""
    from plr_gym.evaluation import summarize

    model_path = _model_path(args.model)
    config = _training_config(model_path)
    algo = args.algo or config.get("algo", "ppo")
    env_id, env_kwargs = _evaluation_env(args, config)
    algo_cls = _algorithm_class(algo)
    device = resolve_device(getattr(args, "device", "auto"))
    venv = make_level_venv(env_id, args.n_envs, args.seed, env_kwargs)
    try:
        model = _load_model(algo_cls, algo, model_path, device, venv, env_id)
        _apply_torch_threads(getattr(args, "torch_threads", None), venv.observation_space)
        returns = _play(args, model, venv)
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
    out, csv_out = _write_results(args.out, result, returns)
    print(
        f"{env_id}: {summary['n_levels']} levels, mean {summary['mean']:.3f} "
        f"[{summary['mean_ci'][0]:.3f}, {summary['mean_ci'][1]:.3f}], IQM {summary['iqm']:.3f} "
        f"[{summary['iqm_ci'][0]:.3f}, {summary['iqm_ci'][1]:.3f}] -> {out}, {csv_out}"
    )
    return result


def _model_path(model: str) -> Path:
    """The model file: ``model``, or ``model.zip`` in the run directory ``model``."""
    model_path = Path(model)
    if model_path.is_dir():
        model_path = model_path / "model.zip"
    if not model_path.is_file():
        raise CLIError(f"no model at {model} (expected a .zip written by plr-gym train or model.save)")
    return model_path


def _training_config(model_path: Path) -> dict[str, Any]:
    """The ``config.json`` next to the model (``{}`` if there is none)."""
    config_path = model_path.parent / "config.json"
    if not config_path.is_file():
        return {}
    try:
        config = json.loads(config_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CLIError(f"{config_path} is not valid JSON ({exc}); pass --env (and --algo) instead") from None
    if not isinstance(config, dict):
        raise CLIError(f"{config_path} does not hold a JSON object; pass --env (and --algo) instead")
    return config


def _evaluation_env(args: argparse.Namespace, config: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The env id and its ``gym.make`` keywords: ``--env`` or the run's; the same env as in training keeps
    the run's env options unless given (``args`` gets them)."""
    env_id = args.env or config.get("env_id")
    if env_id is None:
        raise CLIError("--env is required (no config.json next to the model)")
    if args.gym_packages is None and env_id == config.get("env_id"):
        args.gym_packages = config.get("gym_packages")  # the modules that registered the run's env
    import_gym_packages(args)
    family = env_family(env_id)
    if env_id == config.get("env_id"):  # same env as in training: same env options unless given
        if args.distribution_mode is None:
            args.distribution_mode = config.get("distribution_mode")
        if args.env_kwarg is None and args.env_kwargs is None:
            args.env_kwarg = config.get("env_kwarg")
    fold_env_kwargs(args)
    if args.distribution_mode is None:
        args.distribution_mode = "easy"
    return env_id, _env_kwargs(args, family)


def _load_model(algo_cls: Any, algo: str, model_path: Path, device: str, venv: Any, env_id: str) -> Any:
    """The saved model, refused unless it takes the env's observations."""
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
    return model


def _play(args: argparse.Namespace, model: Any, venv: Any) -> Any:
    """``--n-episodes`` episodes on each of ``--levels``: level -> returns."""
    from plr_gym.evaluation import evaluate_levels

    return evaluate_levels(
        model,
        venv,
        args.levels,
        n_episodes=args.n_episodes,
        deterministic=args.deterministic,
        progress=getattr(args, "progress", False) and _has_modules("tqdm"),
    )


def _write_results(out_arg: str, result: dict[str, Any], returns: Any) -> tuple[Path, Path]:
    """``--out`` (JSON) and the CSV next to it (level, episode, return)."""
    out = Path(out_arg)
    csv_out = out.with_suffix(".csv")
    try:
        training.write_json(out, result)
        rows = ([level, k, value] for level, values in returns.items() for k, value in enumerate(values))
        training.write_csv(csv_out, ["level", "episode", "return"], rows)
    except OSError as exc:
        raise CLIError(f"cannot write --out {out_arg}: {exc}") from None
    return out, csv_out
