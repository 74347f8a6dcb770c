"""RunCheckpointCallback: when a training run saves a checkpoint of its run directory.

The run directory (:mod:`plr_gym.run`) knows what a checkpoint holds and how it is written; this callback
only decides when, from inside SB3's training loop, as SB3's ``CheckpointCallback`` sits above the
model's ``save``. The run directory never imports it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from stable_baselines3.common.callbacks import BaseCallback

from plr_gym.run import DEFAULT_SAVE_FREQ, Checkpoint, RunDirectory, RunDirectoryError, StopOnSignals

__all__ = ["RunCheckpointCallback"]


class RunCheckpointCallback(BaseCallback):
    """Save the SB3 model and the PLR state as one checkpoint of a run directory, at one step.

    The checkpoint is one generation of a :class:`~plr_gym.run.RunDirectory` (see there for its content).

    Saves (:meth:`RunDirectory.save <plr_gym.run.RunDirectory.save>`):

    - when training starts, unless the directory's current checkpoint is already at this step;
    - every ``save_freq`` environment steps, at the first rollout boundary after them (SB3's
      ``on_rollout_start``: the model has trained on every step it counts, the scorer has scored the
      last rollout);
    - with ``save_seconds``, also at the first rollout boundary once that much wall-clock time has passed
      since the last checkpoint (or since training started): on machines held for short slices, a run
      loses at most ``save_seconds`` plus one rollout;
    - at the current step when ``stop`` reports a signal, then stops training (``on_step`` returns
      ``False``);
    - when training ends, unless it just did.

    Put it after the callbacks whose state it saves (:class:`~plr_gym.PLRCallback`, the evaluation
    writing ``eval.csv``): at the end of training they run first.

    :param run: the run directory (its lock must be held).
    :param save_freq: environment steps between checkpoints.
    :param save_seconds: wall-clock seconds between checkpoints (``None``: steps only).
    :param plr_callback: the run's :class:`~plr_gym.PLRCallback` (level source + scorer), or ``None``.
    :param files: extra files of each checkpoint, ``{name: fn(path)}``.
    :param replay_buffer: also save an off-policy model's replay buffer.
    :param stop: a :class:`~plr_gym.run.StopOnSignals` whose request saves and stops.
    :param verbose: 1 prints one line per checkpoint.

    After training, :attr:`last` is the last checkpoint written (or found when training started).

    Example:
        >>> import tempfile
        >>> from minigrid.wrappers import FlatObsWrapper
        >>> from stable_baselines3 import PPO
        >>> from stable_baselines3.common.env_util import make_vec_env
        >>> from plr_gym import LevelWrapper, PLRCallback, PrioritizedLevelReplay, RunDirectory
        >>> venv = make_vec_env("MiniGrid-Empty-5x5-v0", n_envs=2,
        ...                     wrapper_class=lambda e: LevelWrapper(FlatObsWrapper(e)))
        >>> venv = PrioritizedLevelReplay(venv, levels=range(10), seed=0)
        >>> model = PPO("MlpPolicy", venv, n_steps=64, batch_size=64, n_epochs=1, seed=0)
        >>> plr = PLRCallback()
        >>> with RunDirectory(tempfile.mkdtemp()) as run:
        ...     saver = RunCheckpointCallback(run, save_freq=128, plr_callback=plr)
        ...     model = model.learn(256, callback=[plr, saver])
        ...     [p.name for p in run.checkpoints()], saver.last.timestep
        (['.plr-gen-00000002', '.plr-gen-00000003'], 256)
    """

    def __init__(
        self,
        run: RunDirectory,
        save_freq: int = DEFAULT_SAVE_FREQ,
        *,
        plr_callback: Any = None,
        files: Mapping[str, Callable[[Path], Any]] | None = None,
        replay_buffer: bool = False,
        stop: StopOnSignals | None = None,
        save_seconds: float | None = None,
        verbose: int = 0,
    ) -> None:
        super().__init__(verbose)
        if not isinstance(run, RunDirectory):
            raise TypeError(f"run must be a RunDirectory, got {type(run).__name__}")
        if isinstance(save_freq, bool) or not isinstance(save_freq, int) or save_freq < 1:
            raise ValueError(f"save_freq must be a positive int (environment steps), got {save_freq!r}")
        if save_seconds is not None and (
            isinstance(save_seconds, bool)
            or not isinstance(save_seconds, (int, float))
            or not math.isfinite(save_seconds)
            or save_seconds <= 0
        ):
            raise ValueError(f"save_seconds must be a finite number > 0 or None, got {save_seconds!r}")
        self.run = run
        self.save_freq = save_freq
        self.save_seconds = None if save_seconds is None else float(save_seconds)
        self.clock: Callable[[], float] = time.monotonic  # when the last checkpoint was written
        self._last_time = 0.0
        self.plr_callback = plr_callback
        self.files = dict(files or {})
        self.replay_buffer = bool(replay_buffer)
        self.stop = stop
        self.last: Checkpoint | None = None
        self._last_step = -1

    def save_now(self) -> Checkpoint:
        """Save a checkpoint at the model's current step.

        :raises plr_gym.run.RunDirectoryError: the save failed (disk full, file-size limit, ...); the
            previous checkpoint is kept, and the message names it.
        """
        try:
            self.last = self.run.save(
                self.model, plr_callback=self.plr_callback, files=self.files, replay_buffer=self.replay_buffer
            )
        except OSError as exc:
            kept = (
                f"the checkpoint at step {self._last_step} is kept" if self._last_step >= 0 else "none kept"
            )
            raise RunDirectoryError(
                f"cannot save a checkpoint at step {self.num_timesteps} in {self.run.path}: "
                f"{exc.strerror or exc}{f' ({exc.filename})' if exc.filename else ''}; {kept}"
            ) from exc
        self._last_step = self.last.timestep
        self._last_time = self.clock()
        if self.verbose:
            print(f"  checkpoint at step {self.last.timestep}: {self.last.path}", flush=True)
        return self.last

    def _on_training_start(self) -> None:
        current = self.run.current()
        self.last = current
        self._last_step = current.timestep if current is not None else -1
        self._last_time = self.clock()
        if self._last_step != self.num_timesteps:
            self.save_now()

    def _on_rollout_start(self) -> None:
        due_by_time = self.save_seconds is not None and self.clock() - self._last_time >= self.save_seconds
        if self.num_timesteps != self._last_step and (
            self.num_timesteps - self._last_step >= self.save_freq or due_by_time
        ):
            self.save_now()

    def _on_step(self) -> bool:
        if self.stop is not None and self.stop.requested:
            if self._last_step != self.num_timesteps:
                self.save_now()
            return False
        return True

    def _on_training_end(self) -> None:
        if self._last_step != self.num_timesteps:
            self.save_now()
