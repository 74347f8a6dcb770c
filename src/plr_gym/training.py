"""Set-up of an SB3 training run with PLR, shared by ``plr-gym train``, the demo and the learning study.

One place for what every training script of plr_gym builds before ``model.learn`` and writes after it:

- the environments: :func:`env_family` and :func:`make_level_venv` (a VecEnv of
  :class:`~plr_gym.LevelWrapper` sub-envs; MiniGrid gets its image observation, optionally the fully
  observed grid);
- the model: :func:`policy_for` (a CNN for frames: SB3's NatureCNN or the paper's IMPALA-CNN; an MLP for
  MiniGrid's grid codes), :func:`algorithm_class` and :class:`Hyperparameters`;
- the whole run: :func:`build_run` gives a :class:`TrainingRun` (the training env wrapped in
  :class:`~plr_gym.PrioritizedLevelReplay`, optionally SB3's ``VecNormalize`` reward normalisation,
  a separate evaluation env, the model); :func:`save_reward_normalization` and
  :func:`load_reward_normalization` checkpoint the normalisation statistics without pickles;
- the result files: :func:`write_json` and :func:`write_csv` (atomic), :func:`returns_to_json` /
  :func:`returns_from_json` for per-level returns, :func:`run_dir_name` and :func:`load_final_returns`
  for the run directories of ``plr-gym compare --run``.

This module assembles the run (:func:`build_run`: env -> wrappers -> evaluation env -> model); the pieces
live in the modules along its seams, and every name is importable from here: :mod:`plr_gym.level_envs`
(env families and VecEnvs), :mod:`plr_gym.hyperparameters` (algorithms, policies, hyperparameters),
:mod:`plr_gym.torch_threads` (torch's CPU threads) and :mod:`plr_gym.result_files` (JSON/CSV files,
per-level returns, reward-normalisation statistics).

Importing this module imports neither torch nor Stable-Baselines3; the functions that need them import
them when called. Setup errors a user can fix (an unknown env id, env options the env does not take, a
sampler that does not fit the env) raise :class:`SetupError`, a ``ValueError``.

Example:
    >>> from plr_gym import LevelSampler, PLRCallback
    >>> from plr_gym.training import Hyperparameters, build_run
    >>> run = build_run("MiniGrid-Empty-5x5-v0", LevelSampler(levels=range(5), seed=0), n_envs=2,
    ...                 seed=0, env_seed=0, eval_seed=1, env_kwargs={"max_steps": 20},
    ...                 hyperparameters=Hyperparameters(n_steps=32, batch_size=64, n_epochs=1))
    >>> run.model = run.model.learn(64, callback=PLRCallback())  # PLRCallback scores the episodes
    >>> run.model.num_timesteps
    64
    >>> run.close()
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from plr_gym.hyperparameters import ALGORITHMS, ENCODERS, Hyperparameters, algorithm_class, policy_for
from plr_gym.level_envs import (
    ENV_FAMILIES,
    VEC_ENVS,
    SetupError,
    env_family,
    level_env_wrapper,
    make_level_venv,
    procgen_id_for,
    register_envs,
)
from plr_gym.result_files import (
    EVALUATION_FILE,
    REWARD_NORMALIZATION_FILE,
    load_final_returns,
    load_reward_normalization,
    read_json,
    returns_from_json,
    returns_to_json,
    run_dir_name,
    save_reward_normalization,
    write_csv,
    write_json,
)
from plr_gym.torch_threads import (
    _check_torch_threads,
    apply_torch_threads,
    default_torch_threads,
    max_torch_threads,
    set_torch_threads,
    torch_default_threads,
)

__all__ = [
    "ALGORITHMS",
    "ENCODERS",
    "ENV_FAMILIES",
    "EVALUATION_FILE",
    "REWARD_NORMALIZATION_FILE",
    "VEC_ENVS",
    "Hyperparameters",
    "SetupError",
    "TrainingRun",
    "algorithm_class",
    "apply_torch_threads",
    "build_run",
    "default_torch_threads",
    "env_family",
    "level_env_wrapper",
    "load_final_returns",
    "load_reward_normalization",
    "make_level_venv",
    "max_torch_threads",
    "policy_for",
    "procgen_id_for",
    "read_json",
    "register_envs",
    "returns_from_json",
    "returns_to_json",
    "run_dir_name",
    "save_reward_normalization",
    "set_torch_threads",
    "torch_default_threads",
    "write_csv",
    "write_json",
]


@dataclass
class TrainingRun:
    """What :func:`build_run` builds: train on :attr:`venv`, evaluate on :attr:`eval_venv`.

    :param venv: the training env the model steps: :class:`~plr_gym.PrioritizedLevelReplay` (its sampler
        is :attr:`sampler`), under ``VecMonitor`` for the batched Procgen env and under ``VecNormalize``
        with reward normalisation (:attr:`reward_normalization`).
    :param eval_venv: a separate VecEnv of ``LevelWrapper`` sub-envs for held-out evaluation
        (:func:`~plr_gym.evaluation.evaluate_levels`, :class:`~plr_gym.HeldOutEvalCallback`).
    :param model: the SB3 model, built on ``venv``.
    """

    venv: Any
    eval_venv: Any
    model: Any

    @property
    def sampler(self) -> Any:
        """The training env's level sampler."""
        return self.plr_venv.sampler

    @property
    def plr_venv(self) -> Any:
        """The :class:`~plr_gym.PrioritizedLevelReplay` wrapper inside :attr:`venv`."""
        from stable_baselines3.common.vec_env import VecEnvWrapper

        from plr_gym.wrappers.sb3 import PrioritizedLevelReplay

        current = self.venv
        while not isinstance(current, PrioritizedLevelReplay):
            if not isinstance(current, VecEnvWrapper):
                raise RuntimeError(f"no PrioritizedLevelReplay wrapper in {self.venv!r}")
            current = current.venv
        return current

    @property
    def reward_normalization(self) -> Any:
        """SB3's ``VecNormalize`` of the training env, or ``None`` without reward normalisation."""
        from stable_baselines3.common.vec_env import VecNormalize

        return self.venv if isinstance(self.venv, VecNormalize) else None

    def close(self) -> None:
        """Close both envs."""
        self.venv.close()
        self.eval_venv.close()


def build_run(
    env_id: str,
    sampler: Any,
    *,
    seed: int,
    env_seed: int | None,
    eval_seed: int | None,
    algo: str = "ppo",
    n_envs: int = 8,
    eval_n_envs: int | None = None,
    env_kwargs: Mapping[str, Any] | None = None,
    full_obs: bool = False,
    subproc: bool = False,
    batched: bool = False,
    hyperparameters: Hyperparameters | None = None,
    device: str = "cpu",
    tensorboard_log: str | None = None,
    cnn_features_dim: int | None = None,
    encoder: str = "auto",
    normalize_reward: bool = False,
    normalize_reward_gamma: float = 0.99,
    time_limit: str = "bootstrap",
    residual_skip: str = "identity",
    level_draw: str = "episode_start",
    load_path: str | os.PathLike[str] | None = None,
    torch_threads: int | str | None = "auto",
) -> TrainingRun:
    """Build the training env (with PLR), the evaluation env and the model of one run, in this order.

    :param env_id: Gymnasium id (see :func:`make_level_venv`).
    :param sampler: the level source of the training env (a :class:`~plr_gym.LevelSampler`, ...).
    :param seed: the model's seed.
    :param env_seed: the training VecEnv's seed (``None``: unseeded).
    :param eval_seed: the evaluation VecEnv's seed (``None``: unseeded).
    :param algo: one of :data:`ALGORITHMS`.
    :param n_envs: training sub-envs.
    :param eval_n_envs: evaluation sub-envs (default ``n_envs``).
    :param env_kwargs: keyword arguments of ``gym.make`` (both envs).
    :param full_obs: MiniGrid only: observe the whole grid.
    :param subproc: ``SubprocVecEnv`` for the training env (the evaluation env is always in-process).
    :param batched: Procgen only: both envs are :class:`~plr_gym.envs.procgen_sb3.ProcgenVecEnv` (the
        training one under ``VecMonitor``), see :func:`make_level_venv`.
    :param hyperparameters: default :class:`Hyperparameters()`.
    :param device: torch device of the model.
    :param tensorboard_log: TensorBoard directory (``None``: no TensorBoard).
    :param cnn_features_dim: CNN feature size for image observations (see :func:`policy_for`).
    :param encoder: image encoder, one of :data:`ENCODERS` (see :func:`policy_for`).
    :param normalize_reward: wrap the training env in SB3's ``VecNormalize(norm_obs=False,
        norm_reward=True, clip_reward=10, epsilon=1e-8)``, as the PLR paper's code does with OpenAI
        Baselines' ``VecNormalize(ob=False, ret=True)``: rewards are divided by the running standard
        deviation of a discounted return (reset at episode ends) and clipped to [-10, 10]. The evaluation
        env and the episode returns in ``infos`` stay raw.
    :param normalize_reward_gamma: discount of that running return (Baselines' default, 0.99, which the
        paper's code keeps even with PPO's gamma of 0.999).
    :param time_limit: how an episode cut by a time limit ends, one of
        :data:`plr_gym.reference.TIME_LIMITS`: ``"bootstrap"`` (SB3's: its last reward gets
        ``gamma * V(final observation)``) or ``"terminal"`` (the PLR paper's code: the return ends there;
        :class:`~plr_gym.wrappers.time_limit.TimeLimitAsTerminal` over the PLR wrapper; the level scores
        follow, as they are computed from the rollout buffer's rewards and advantages).
    :param residual_skip: the IMPALA-CNN's residual skip (``encoder="impala"``), see :func:`policy_for`.
    :param level_draw: when each env's next level is drawn, ``PrioritizedLevelReplay(level_draw=...)``:
        ``"episode_start"`` or ``"episode_end"`` (the PLR paper's code; not with ``subproc``).
    :param load_path: continue a saved model (``algo``'s ``load``) instead of building a new one; the
        hyperparameters are the saved model's (reward-normalisation statistics: see
        :func:`load_reward_normalization`).
    :param torch_threads: torch's CPU threads, set once the run is built (:func:`apply_torch_threads`):
        ``"auto"`` (default) one thread for an MLP policy (MiniGrid: several times less CPU for the same
        steps per second, docs/cli.md), torch's default for a CNN; an int sets that many; ``None``
        leaves torch's setting alone.
    :raises SetupError: an unknown env or algorithm, env options the env does not take, or a sampler that
        does not fit the env. The envs built so far are closed on any error.
    """
    algo_cls, update = _algorithm_for(algo, hyperparameters, torch_threads)
    _check_wrappers(normalize_reward_gamma, time_limit)
    hyper = Hyperparameters() if hyperparameters is None else hyperparameters
    # the training env, its wrappers, the evaluation env, the model; an error closes the envs built so far
    base = make_level_venv(
        env_id, n_envs, env_seed, env_kwargs, subproc=subproc, full_obs=full_obs, batched=batched
    )
    venv = _wrap_training_venv(
        base, sampler, batched, time_limit, normalize_reward, normalize_reward_gamma, level_draw
    )
    try:
        eval_venv = make_level_venv(
            env_id, eval_n_envs or n_envs, eval_seed, env_kwargs, full_obs=full_obs, batched=batched
        )
    except BaseException:
        venv.close()
        raise
    try:
        if load_path is not None:
            model = algo_cls.load(load_path, env=venv, device=device, tensorboard_log=tensorboard_log)
        else:
            policy = _policy(venv.observation_space, algo, hyper, cnn_features_dim, encoder, residual_skip)
            model = algo_cls(
                policy[0], venv, seed=seed, policy_kwargs=policy[1], tensorboard_log=tensorboard_log,
                verbose=0, device=device, **hyper.for_algorithm(algo), **update,
            )  # fmt: skip
        apply_torch_threads(torch_threads, policy_for(venv.observation_space)[0])
    except BaseException:
        venv.close()
        eval_venv.close()
        raise
    return TrainingRun(venv=venv, eval_venv=eval_venv, model=model)


# build_run's steps, in its order: the algorithm, the checks of the wrappers' options, the wrappers over the
# training env (PLR, then VecMonitor for the batched env, time limits, reward normalisation), the policy
def _algorithm_for(
    algo: str, hyperparameters: Hyperparameters | None, torch_threads: int | str | None
) -> tuple[Any, dict[str, str]]:
    """The model's class and the PPO update options that differ from SB3's: ``algo``'s class, or
    :class:`~plr_gym.ppo.LevelReplayPPO` when any does (PPO only); ``torch_threads`` is checked here, before
    any env is built."""
    algo_cls = algorithm_class(algo)
    _check_torch_threads(torch_threads)
    hyper = Hyperparameters() if hyperparameters is None else hyperparameters
    update = hyper.level_replay_update()
    if update and algo != "ppo":
        raise SetupError(
            f"{', '.join(f'{k}={v!r}' for k, v in update.items())}: PPO's update options (algo='ppo'), "
            f"got algo={algo!r}"
        )
    if update:
        from plr_gym.ppo import LevelReplayPPO

        algo_cls = LevelReplayPPO
    return algo_cls, update


def _check_wrappers(normalize_reward_gamma: float, time_limit: str) -> None:
    """The options of the training env's wrappers, checked before any env is built."""
    from plr_gym.reference import TIME_LIMITS

    if not (isinstance(normalize_reward_gamma, (int, float)) and 0.0 <= normalize_reward_gamma <= 1.0):
        raise SetupError(f"normalize_reward_gamma must be in [0, 1], got {normalize_reward_gamma!r}")
    if time_limit not in TIME_LIMITS:
        raise SetupError(f"time_limit must be one of {', '.join(TIME_LIMITS)}, got {time_limit!r}")


def _wrap_training_venv(
    base: Any,
    sampler: Any,
    batched: bool,
    time_limit: str,
    normalize_reward: bool,
    gamma: float,
    level_draw: str = "episode_start",
) -> Any:
    """``base`` under :class:`~plr_gym.PrioritizedLevelReplay` (with ``level_draw``), then (batched
    Procgen) ``VecMonitor``, then (``time_limit="terminal"``)
    :class:`~plr_gym.wrappers.time_limit.TimeLimitAsTerminal`, then (reward normalisation)
    ``VecNormalize``; ``base`` is closed if the sampler does not fit it."""
    from stable_baselines3.common.vec_env import VecMonitor, VecNormalize

    from plr_gym.wrappers.sb3 import PrioritizedLevelReplay

    try:
        venv: Any = PrioritizedLevelReplay(base, sampler=sampler, level_draw=level_draw)
    except (ValueError, TypeError) as exc:
        base.close()
        raise SetupError(str(exc)) from None
    if batched:
        venv = VecMonitor(venv)
    if time_limit == "terminal":  # SB3 reads the infos of the outermost VecEnv
        from plr_gym.wrappers.time_limit import TimeLimitAsTerminal

        venv = TimeLimitAsTerminal(venv)
    if normalize_reward:
        venv = VecNormalize(
            venv, norm_obs=False, norm_reward=True, clip_reward=10.0, gamma=gamma, epsilon=1e-8
        )
    return venv


def _policy(
    obs_space: Any,
    algo: str,
    hyper: Hyperparameters,
    cnn_features_dim: int | None,
    encoder: str,
    residual_skip: str,
) -> tuple[Any, dict[str, Any]]:
    """The policy and its ``policy_kwargs`` (:func:`policy_for`, with the optimizer's from ``hyper``)."""
    try:
        policy, policy_kwargs = policy_for(
            obs_space,
            recurrent=algo == "recurrentppo",
            cnn_features_dim=cnn_features_dim,
            encoder=encoder,
            residual_skip=residual_skip,
        )
    except ValueError as exc:
        raise SetupError(str(exc)) from None
    return policy, {**hyper.policy_kwargs(algo), **policy_kwargs}
