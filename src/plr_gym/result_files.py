"""The files a training run writes besides its checkpoints: atomic JSON and CSV, per-level returns, the
reward-normalisation statistics (without pickles), and the run directories of ``plr-gym compare --run``.

:mod:`plr_gym.training` re-exports these. Importing this module imports neither torch nor
Stable-Baselines3.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "EVALUATION_FILE",
    "REWARD_NORMALIZATION_FILE",
    "load_final_returns",
    "load_reward_normalization",
    "read_json",
    "returns_from_json",
    "returns_to_json",
    "run_dir_name",
    "save_reward_normalization",
    "write_csv",
    "write_json",
]

#: A run directory's final held-out evaluation (written by ``plr-gym train``).
EVALUATION_FILE = "evaluation.json"
#: A run directory's reward-normalisation statistics (:func:`save_reward_normalization`).
REWARD_NORMALIZATION_FILE = "reward_normalization.npz"


def write_json(
    path: str | os.PathLike[str],
    data: Any,
    indent: int | None = 2,
    default: Callable[[Any], Any] | None = None,
    newline: bool = True,
) -> Path:
    """Write ``data`` as JSON at ``path``, atomically (a reader never sees a half-written file).

    :param path: the file; its directory is created if missing.
    :param data: anything ``json.dumps`` takes (with ``default`` for the rest, e.g. ``default=str``).
    :param indent: ``json.dumps``'s indent (``None``: one line).
    :param newline: end the file with a newline.
    :return: ``path``.

    Example:
        >>> import tempfile
        >>> path = write_json(Path(tempfile.mkdtemp()) / "run" / "result.json", {"steps": 64})
        >>> read_json(path)
        {'steps': 64}
    """
    from plr_gym.checkpoint import atomic_open

    target = Path(path)
    text = json.dumps(data, indent=indent, default=default) + ("\n" if newline else "")
    target.parent.mkdir(parents=True, exist_ok=True)
    with atomic_open(target) as f:
        f.write(text.encode())
    return target


def read_json(path: str | os.PathLike[str]) -> Any:
    """The JSON value in the file ``path``."""
    return json.loads(Path(path).read_text())


def write_csv(
    path: str | os.PathLike[str],
    header: Sequence[str],
    rows: Iterable[Sequence[Any] | Mapping[str, Any]],
) -> Path:
    """Write a CSV file (``header``, then ``rows``) at ``path``, atomically.

    :param header: the column names.
    :param rows: one sequence of values per row, or one mapping (column -> value; a missing column is
        written empty).
    :raises ValueError: a mapping row with a key that is not in ``header``.
    :return: ``path``.

    Example:
        >>> import tempfile
        >>> rows = [[3, 0.5], {"level": 4}]
        >>> path = write_csv(Path(tempfile.mkdtemp()) / "r.csv", ["level", "return"], rows)
        >>> path.read_text().splitlines()
        ['level,return', '3,0.5', '4,']
    """
    from plr_gym.checkpoint import atomic_open

    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(header)
    for row in rows:
        if isinstance(row, Mapping):
            extra = [key for key in row if key not in header]
            if extra:
                raise ValueError(f"rows: keys {extra} are not in header {list(header)}")
            writer.writerow([row.get(key, "") for key in header])
        else:
            writer.writerow(row)
    target = Path(path)
    with atomic_open(target) as f:
        f.write(buffer.getvalue().encode("utf-8"))
    return target


def save_reward_normalization(venv: Any, path: str | os.PathLike[str]) -> Path:
    """Save a ``VecNormalize``'s reward-normalisation state (running return statistics and each env's
    running return) to an ``.npz`` of plain arrays, atomically (no pickle, unlike ``VecNormalize.save``).

    :raises TypeError: ``venv`` is not a ``VecNormalize``.

    Example:
        >>> import tempfile
        >>> from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize
        >>> import gymnasium as gym
        >>> venv = VecNormalize(DummyVecEnv([lambda: gym.make("CartPole-v1")]), norm_obs=False)
        >>> path = save_reward_normalization(venv, Path(tempfile.mkdtemp()) / REWARD_NORMALIZATION_FILE)
        >>> load_reward_normalization(venv, path).ret_rms.count
        0.0001
    """
    from stable_baselines3.common.vec_env import VecNormalize

    from plr_gym.checkpoint import save_npz

    if not isinstance(venv, VecNormalize):
        raise TypeError(f"venv must be a VecNormalize, got {type(venv).__name__}")
    target = Path(path)
    save_npz(
        target,
        {
            "ret_mean": np.asarray(venv.ret_rms.mean, dtype=np.float64),
            "ret_var": np.asarray(venv.ret_rms.var, dtype=np.float64),
            "ret_count": np.asarray(venv.ret_rms.count, dtype=np.float64),
            "returns": np.asarray(venv.returns, dtype=np.float64),
            "gamma": np.asarray(venv.gamma, dtype=np.float64),
            "epsilon": np.asarray(venv.epsilon, dtype=np.float64),
            "clip_reward": np.asarray(venv.clip_reward, dtype=np.float64),
        },
    )
    return target


def load_reward_normalization(venv: Any, path: str | os.PathLike[str]) -> Any:
    """Restore what :func:`save_reward_normalization` saved into ``venv`` (a ``VecNormalize``); returns it.

    :raises TypeError: ``venv`` is not a ``VecNormalize``.
    :raises ValueError: the file is not such a save, or it was made with another ``gamma``, ``epsilon``,
        ``clip_reward`` or number of envs (``venv`` is left as it was).
    """
    from stable_baselines3.common.vec_env import VecNormalize

    from plr_gym.checkpoint import load_npz

    if not isinstance(venv, VecNormalize):
        raise TypeError(f"venv must be a VecNormalize, got {type(venv).__name__}")
    data = load_npz(path)
    keys = {"ret_mean", "ret_var", "ret_count", "returns", "gamma", "epsilon", "clip_reward"}
    if set(data) != keys:
        raise ValueError(f"{path} is not a reward-normalisation save (keys {sorted(data)})")
    for name in ("gamma", "epsilon", "clip_reward"):
        if float(data[name]) != float(getattr(venv, name)):
            raise ValueError(
                f"{path} was saved with {name}={float(data[name])}, this env has {getattr(venv, name)}"
            )
    if data["returns"].shape != (venv.num_envs,):
        raise ValueError(
            f"{path} holds {data['returns'].shape} running returns, this env has {venv.num_envs} envs"
        )
    stats = (float(data["ret_mean"]), float(data["ret_var"]), float(data["ret_count"]))
    if (
        not all(math.isfinite(x) for x in stats)
        or stats[1] < 0
        or stats[2] <= 0
        or not np.isfinite(data["returns"]).all()
    ):
        raise ValueError(f"{path} holds invalid statistics (mean, var, count) = {stats}")
    venv.ret_rms.mean = np.asarray(stats[0], dtype=np.float64)
    venv.ret_rms.var = np.asarray(stats[1], dtype=np.float64)
    venv.ret_rms.count = stats[2]
    venv.returns = data["returns"].copy()
    return venv


def returns_to_json(returns: Mapping[int, Sequence[float]]) -> dict[str, list[float]]:
    """Per-level returns as a JSON object: level ids become strings (JSON keys), returns floats.

    Example:
        >>> returns_to_json({10000: [0.5, 1.0]})
        {'10000': [0.5, 1.0]}
        >>> returns_from_json(returns_to_json({10000: [0.5, 1.0]}))
        {10000: [0.5, 1.0]}
    """
    return {str(level): [float(r) for r in values] for level, values in returns.items()}


def returns_from_json(record: Mapping[str, Sequence[float]]) -> dict[int, list[float]]:
    """The inverse of :func:`returns_to_json`: level id (int) -> list of returns."""
    return {int(level): [float(r) for r in values] for level, values in record.items()}


def run_dir_name(sampler: str, seed: int | None = None) -> str:
    """Name of a run directory of ``plr-gym compare --run``: ``"plr"``, or ``"plr-seed1"`` with a seed.

    Example:
        >>> run_dir_name("uniform"), run_dir_name("plr", 1)
        ('uniform', 'plr-seed1')
    """
    return sampler if seed is None else f"{sampler}-seed{seed}"


def load_final_returns(run_dir: str | os.PathLike[str]) -> dict[int, list[float]] | None:
    """Held-out returns of a run's final evaluation (``run_dir/evaluation.json``); ``None`` if absent."""
    path = Path(run_dir) / EVALUATION_FILE
    if not path.is_file():
        return None
    return returns_from_json(read_json(path)["returns"])
