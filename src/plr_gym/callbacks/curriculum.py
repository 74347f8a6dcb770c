"""CurriculumLogCallback: what the curriculum does over training, per level (replay probability, visits,
scores), as snapshots and TensorBoard histograms."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
from stable_baselines3.common.callbacks import BaseCallback

from plr_gym.callbacks.plr import find_plr_wrapper
from plr_gym.checkpoint import load_npz

#: what a ``curriculum.npz`` holds (:func:`plr_gym.plotting.load_curriculum` reads the same)
_ARRAYS = ("timesteps", "levels", "weights", "visits", "scores")

__all__ = ["CurriculumLogCallback"]


class CurriculumLogCallback(BaseCallback):
    """Record what the curriculum does: each level's replay probability, visits and score over training.

    Every ``log_freq`` rollouts the callback stores a snapshot of the sampler (the replay distribution
    :meth:`~plr_gym.LevelSampler.sample_weights`, the number of episodes started on each level since the
    previous snapshot, and the level scores) and, when the model logs to TensorBoard, writes two per-level
    histograms whose x axis is the level id: ``curriculum/replay_probability`` (bucket heights sum to 1)
    and ``curriculum/visits`` (episodes started per level in the window). With more than ``max_bins``
    levels, neighbouring level ids share a bucket. :func:`plr_gym.plotting.plot_curriculum` draws the
    snapshots as a levels × training-time heatmap.

    Add it next to :class:`PLRCallback` (finite :class:`~plr_gym.LevelSampler` only, not buffer mode).
    Memory: three ``float32`` arrays of ``num_levels`` per snapshot.

    :param log_freq: take a snapshot every this many rollouts.
    :param save_path: ``.npz`` file the snapshots are written to at the end of training and by
        :meth:`save` (keys ``timesteps`` ``(R,)``, ``levels`` ``(N,)``, ``weights``, ``visits``, ``scores``
        ``(R, N)``); ``None``: kept in memory only (:attr:`history`).
    :param resume_from: an ``.npz`` written before: its snapshots are kept and new ones appended
        (``--resume`` of ``plr-gym train``).
    :param max_bins: at most this many buckets per TensorBoard histogram.
    :param verbose: verbosity level.

    Example:
        >>> from minigrid.wrappers import FlatObsWrapper
        >>> from stable_baselines3 import PPO
        >>> from stable_baselines3.common.env_util import make_vec_env
        >>> from plr_gym import CurriculumLogCallback, LevelWrapper, PLRCallback, PrioritizedLevelReplay
        >>> venv = make_vec_env("MiniGrid-Empty-5x5-v0", n_envs=2,
        ...                     wrapper_class=lambda e: LevelWrapper(FlatObsWrapper(e)))
        >>> venv = PrioritizedLevelReplay(venv, levels=range(10), seed=0)
        >>> model = PPO("MlpPolicy", venv, n_steps=64, batch_size=64, n_epochs=1, seed=0)
        >>> curriculum = CurriculumLogCallback()
        >>> model = model.learn(256, callback=[PLRCallback(), curriculum])
        >>> h = curriculum.history
        >>> h["timesteps"].tolist(), h["weights"].shape
        ([128, 256], (2, 10))
    """

    def __init__(
        self,
        log_freq: int = 1,
        save_path: str | os.PathLike[str] | None = None,
        resume_from: str | os.PathLike[str] | None = None,
        max_bins: int = 1000,
        verbose: int = 0,
    ) -> None:
        super().__init__(verbose)
        for name, value in (("log_freq", log_freq), ("max_bins", max_bins)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        self.log_freq = log_freq
        self.max_bins = max_bins
        self.save_path = None if save_path is None else Path(save_path)
        self.resume_from = None if resume_from is None else Path(resume_from)
        self.wrapper: Any = None
        self._order: np.ndarray[Any, Any] | None = None
        self._visits: np.ndarray[Any, Any] | None = None
        self._snapshots: list[tuple[int, Any, Any, Any]] = []
        self._previous: dict[str, np.ndarray[Any, Any]] | None = None
        self._rollouts = 0

    def _init_callback(self) -> None:
        self.wrapper = find_plr_wrapper(self.model.get_env())
        if self.wrapper.sampler is None:
            raise ValueError(
                "CurriculumLogCallback records a finite LevelSampler's levels; this env's level source is a "
                f"{type(self.wrapper.source).__name__} (e.g. Robust PLR/ACCEL, whose levels change during "
                "training): use PLRCallback's plr/* logs instead"
            )
        levels = self.wrapper.sampler.levels
        self._order = np.argsort(levels, kind="stable")
        self._visits = np.zeros(levels.size, dtype=np.float64)
        if self.resume_from is not None and self._previous is None:
            data = load_npz(self.resume_from, required=_ARRAYS)
            previous = {k: data[k] for k in _ARRAYS}
            if not np.array_equal(previous["levels"], levels):
                raise ValueError(f"{self.resume_from} records other levels than the sampler's")
            self._previous = previous

    def _positions(self, levels: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        assert self._order is not None
        ids = self.wrapper.sampler.levels
        return self._order[np.searchsorted(ids[self._order], levels)]

    def _on_training_start(self) -> None:
        assert self._visits is not None
        np.add.at(self._visits, self._positions(self.wrapper.current_levels), 1.0)

    def _on_step(self) -> bool:
        dones = self.locals.get("dones")
        if dones is not None and np.any(dones):
            assert self._visits is not None
            started = self.wrapper.current_levels[np.asarray(dones, dtype=bool)]
            np.add.at(self._visits, self._positions(started), 1.0)
        return True

    def _on_rollout_end(self) -> None:
        self._rollouts += 1
        if self._rollouts % self.log_freq:
            return
        assert self._visits is not None
        sampler = self.wrapper.sampler
        weights = sampler.sample_weights().astype(np.float32)
        visits = self._visits.astype(np.float32)
        self._visits[:] = 0.0
        self._snapshots.append(
            (int(self.num_timesteps), weights, visits, sampler.scores.astype(np.float32, copy=True))
        )
        writer = self._tensorboard_writer()
        if writer is not None:
            self._histogram(writer, "curriculum/replay_probability", weights)
            self._histogram(writer, "curriculum/visits", visits)

    def _on_training_end(self) -> None:
        if self.save_path is not None:
            self.save(self.save_path)

    # ------------------------------------------------------------------ output
    def _tensorboard_writer(self) -> Any:
        from stable_baselines3.common.logger import TensorBoardOutputFormat

        for fmt in self.logger.output_formats:
            if isinstance(fmt, TensorBoardOutputFormat):
                return fmt.writer
        return None

    def _histogram(self, writer: Any, tag: str, values: np.ndarray[Any, Any]) -> None:
        """A histogram whose buckets are level ids (sorted) and whose heights are ``values``."""
        assert self._order is not None
        ids = self.wrapper.sampler.levels[self._order].astype(np.float64)
        heights = values[self._order].astype(np.float64)
        chunks = np.array_split(np.arange(ids.size), min(self.max_bins, ids.size))
        limits = np.array([ids[c[-1]] + 0.5 for c in chunks])
        counts = np.array([heights[c].sum() for c in chunks])
        writer.add_histogram_raw(
            tag,
            min=float(ids[0]),
            max=float(ids[-1]),
            num=float(heights.sum()),
            sum=float((ids * heights).sum()),
            sum_squares=float((ids**2 * heights).sum()),
            bucket_limits=limits.tolist(),
            bucket_counts=counts.tolist(),
            global_step=int(self.num_timesteps),
        )

    @property
    def history(self) -> dict[str, np.ndarray[Any, Any]]:
        """The snapshots so far (with those of ``resume_from`` first): ``timesteps`` ``(R,)``, ``levels``
        ``(N,)`` and ``weights``, ``visits``, ``scores`` ``(R, N)`` (``float32``)."""
        levels = self.wrapper.sampler.levels if self.wrapper is not None else np.zeros(0, dtype=np.int64)
        n = levels.size
        out = {
            "timesteps": np.array([s[0] for s in self._snapshots], dtype=np.int64),
            "levels": np.asarray(levels, dtype=np.int64),
        }
        for k, name in enumerate(("weights", "visits", "scores"), start=1):
            rows = [s[k] for s in self._snapshots]
            out[name] = np.stack(rows) if rows else np.zeros((0, n), dtype=np.float32)
        if self._previous is not None:
            for name in ("timesteps", "weights", "visits", "scores"):
                out[name] = np.concatenate([self._previous[name].astype(out[name].dtype), out[name]])
        return out

    def save(self, path: str | os.PathLike[str] | None = None) -> Path:
        """Write :attr:`history` to ``path`` (default ``save_path``) as ``.npz``; returns the path."""
        target = Path(path) if path is not None else self.save_path
        if target is None:
            raise ValueError("CurriculumLogCallback.save needs a path (or save_path= at construction)")
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + ".tmp.npz")
        np.savez_compressed(tmp, **self.history)
        os.replace(tmp, target)
        return target
