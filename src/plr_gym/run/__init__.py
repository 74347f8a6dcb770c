"""A training run's directory: one object for its lock, checkpoints, logs and resume.

:class:`RunDirectory` owns the layout of a run directory, as rl_zoo3's ``ExperimentManager`` owns its log
folder. ``plr-gym train`` only parses arguments and hands them to it; a library user drives the same
object from their own script:

- **one trainer per directory**: :meth:`RunDirectory.acquire` takes an exclusive ``flock`` on the run
  directory itself (deleting a file in it never frees the lock) and records its pid in ``.plr-lock``. A
  second trainer gets :class:`RunLockedError` naming that pid. The kernel drops the lock when its
  holder dies, even by ``SIGKILL``, so a stale lock is never in the way and never has to be guessed at.
- **one consistent checkpoint**: :meth:`RunDirectory.save` writes the model (its weights and optimizer
  state, ``parameters.pt``, and SB3's ``model.zip``), the level source and the scorer's open episodes
  (``plr/``), the RNG states (numpy, torch, Python's ``random``), VecNormalize statistics where the
  env has them, the run's logs as of this step (``logs/eval.csv``), extra files of the caller and, opt
  in, the replay buffer, all into a new generation ``.plr-gen-<N>``. The generation's manifest
  ``checkpoint.json`` (its timestep, and every file with its size and SHA-256) is written last, then one
  atomic switch of ``.plr-current`` makes the generation current. ``checkpoint.json``, ``model.zip``
  and ``plr`` at the top of the directory are links through ``.plr-current``: they change together, at
  that one instant. The new generation and the ``keep - 1`` newest older ones that verify are kept (a torn
  or corrupt generation never takes a good one's place).
- **resume reads the manifest only**: :meth:`RunDirectory.restore` checks every file against the
  manifest (size and hash) and every part against the live objects before changing anything, loads the
  weights with ``torch.load(weights_only=True)`` into a model built from the run's configuration (no
  unpickling), and cuts the logs (``eval.csv``, TensorBoard's event files) back to the checkpoint's
  step. Without ``.plr-current`` (a copy that skipped links) it resumes the newest generation that
  verifies; it never removes one.
- **when to save**: :class:`~plr_gym.RunCheckpointCallback` (:mod:`plr_gym.callbacks`, above this
  package: the run directory never imports it) saves every ``save_freq`` steps (at the first rollout
  boundary after them, when the model has trained on every step it counts), at the end of training,
  and at the current step when :class:`StopOnSignals` reports ``SIGTERM``, ``SIGINT`` or ``SIGUSR1``
  (SLURM's ``--signal``).

Example:
    >>> import tempfile
    >>> from stable_baselines3 import PPO
    >>> from stable_baselines3.common.env_util import make_vec_env
    >>> from minigrid.wrappers import FlatObsWrapper
    >>> from plr_gym import LevelWrapper, PLRCallback, PrioritizedLevelReplay, RunCheckpointCallback
    >>> from plr_gym.run import RunDirectory
    >>> def build():
    ...     venv = make_vec_env("MiniGrid-Empty-5x5-v0", n_envs=2, seed=0,
    ...                         wrapper_class=lambda e: LevelWrapper(FlatObsWrapper(e)))
    ...     venv = PrioritizedLevelReplay(venv, levels=range(10), seed=0)
    ...     return PPO("MlpPolicy", venv, n_steps=64, batch_size=64, n_epochs=1, seed=0), PLRCallback()
    >>> path = tempfile.mkdtemp()
    >>> with RunDirectory(path) as run:
    ...     model, plr = build()
    ...     saver = RunCheckpointCallback(run, save_freq=128, plr_callback=plr)
    ...     model = model.learn(256, callback=[plr, saver])
    >>> RunDirectory(path).current().timestep
    256
    >>> with RunDirectory(path) as run:           # later, in a new process: the same two objects,
    ...     model, plr = build()                  # then one call restores both
    ...     run.restore(model, plr_callback=plr).timestep
    ...     saver = RunCheckpointCallback(run, save_freq=128, plr_callback=plr)
    ...     model = model.learn(128, callback=[plr, saver], reset_num_timesteps=False)
    256
    >>> RunDirectory(path).current().timestep
    384
"""

from __future__ import annotations

from plr_gym.run.directory import RunDirectory
from plr_gym.run.layout import (
    CONFIG_FILE,
    DEFAULT_KEEP,
    DEFAULT_SAVE_FREQ,
    FORMAT,
    LOCK_FILE,
    MANIFEST,
    Checkpoint,
    RunDirectoryError,
    RunLockedError,
)

# the names of a checkpoint's files, importable from here as before the split (``X as X``: re-exported)
from plr_gym.run.layout import LOGS_DIR as LOGS_DIR
from plr_gym.run.layout import MODEL_ZIP as MODEL_ZIP
from plr_gym.run.layout import PARAMETERS as PARAMETERS
from plr_gym.run.layout import PLR_DIR as PLR_DIR
from plr_gym.run.layout import REPLAY_BUFFER as REPLAY_BUFFER
from plr_gym.run.layout import RNG as RNG
from plr_gym.run.layout import STATE as STATE
from plr_gym.run.layout import VECNORMALIZE as VECNORMALIZE
from plr_gym.run.logs import cut_event_logs
from plr_gym.run.manifest import RunDirectoryWarning, UnreadableCheckpointError
from plr_gym.run.signals import StopOnSignals

__all__ = [
    "CONFIG_FILE",
    "DEFAULT_KEEP",
    "DEFAULT_SAVE_FREQ",
    "FORMAT",
    "LOCK_FILE",
    "MANIFEST",
    "Checkpoint",
    "RunDirectory",
    "RunDirectoryError",
    "RunDirectoryWarning",
    "RunLockedError",
    "StopOnSignals",
    "UnreadableCheckpointError",
    "cut_event_logs",
]
