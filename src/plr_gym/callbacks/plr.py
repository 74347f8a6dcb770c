"""PLRCallback: Prioritized Level Replay for Stable-Baselines3's on-policy algorithms.

Add ``callback=PLRCallback()`` to ``model.learn`` on an env wrapped in
:class:`plr_gym.PrioritizedLevelReplay`; every completed episode is scored from the rollout buffer and
reported to the wrapper's sampler, which then picks the levels of the next episodes.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm
from stable_baselines3.common.utils import obs_as_tensor
from stable_baselines3.common.vec_env import VecEnv, VecEnvWrapper

from plr_gym.checkpoint import checkpoint_files, write_checkpoint_dir
from plr_gym.scoring import PARTIAL_EPISODES, EpisodeScorer, episode_success

__all__ = ["PLRCallback", "find_plr_wrapper", "report_progress"]

_BATCH = 4096  # observations per forward pass when computing action distributions


def _check_total_timesteps(total_timesteps: Any) -> int | None:
    if total_timesteps is not None and (
        isinstance(total_timesteps, bool) or not isinstance(total_timesteps, int) or total_timesteps < 1
    ):
        raise ValueError(f"total_timesteps must be a positive int or None, got {total_timesteps!r}")
    return total_timesteps


def report_progress(source: Any, model: Any, total_timesteps: int | None) -> None:
    """Tell a level source the share of the training budget done (``set_progress``), for schedules such
    as ``LevelSampler(temperature_end=...)``.

    The budget is ``total_timesteps`` if given, else the one SB3 counts for the current ``learn()`` call
    (``num_timesteps`` at its start + its ``total_timesteps``).
    """
    total = total_timesteps if total_timesteps is not None else int(getattr(model, "_total_timesteps", 0))
    if total > 0:
        source.set_progress(min(1.0, model.num_timesteps / total))


def find_plr_wrapper(env: VecEnv | None) -> Any:
    """The :class:`~plr_gym.PrioritizedLevelReplay` in a chain of vec env wrappers, else ``ValueError``."""
    from plr_gym.wrappers.sb3 import PrioritizedLevelReplay

    chain = []
    current: Any = env
    while current is not None:
        chain.append(type(current).__name__)
        if isinstance(current, PrioritizedLevelReplay):
            return current
        current = current.venv if isinstance(current, VecEnvWrapper) else None
    raise ValueError(
        "Prioritized Level Replay needs the training env to contain plr_gym.PrioritizedLevelReplay, found "
        "the chain "
        f"{' -> '.join(chain) or 'None'}. Wrap the raw vec env first, then the normalising/stacking "
        "wrappers: VecNormalize(PrioritizedLevelReplay(make_vec_env(...), levels=...))."
    )


class PLRCallback(BaseCallback):
    """Scores every completed episode from the rollout buffer and reports it to the PLR sampler.

    At the end of each rollout (when SB3 has computed returns and advantages) the callback hands the
    rollout buffer's arrays to the wrapper's :meth:`~plr_gym.PrioritizedLevelReplay.score_rollout`, which
    adds the level of every step and runs an :class:`~plr_gym.scoring.EpisodeScorer` with the level
    source's ``strategy`` and the algorithm's ``gamma``. Works with PPO, A2C and sb3-contrib's
    RecurrentPPO and MaskablePPO.

    Strategies and action spaces: ``value_l1``, ``positive_value_loss``, ``gae``, ``max_mc``,
    ``one_step_td_error`` and callables work with every action space. ``policy_entropy`` uses the
    normalised entropy of the full distribution for ``Discrete`` actions and the distribution's entropy
    otherwise. ``least_confidence`` and ``min_margin`` need ``Discrete`` actions. The action distribution
    is computed once per rollout in batched no-grad passes, never per step.

    Logged under ``plr/`` (through the model's logger): ``replay_fraction`` (share of the episodes started
    during the rollout that replayed a seen level), ``num_seen``, ``score_mean``, ``score_max``,
    ``weight_entropy`` (entropy of the replay distribution, nats), ``episodes_scored`` and, for
    TensorBoard only, the histogram ``scores``.

    :param save_path: directory where the sampler (``plr_sampler.npz``) and the scorer's open episodes
        (``plr_scorer.npz``) are written every ``save_freq`` rollouts and at the end of training
        (safe npz + JSON). ``None`` disables saving.
    :param save_freq: save every this many rollouts (with ``save_path``).
    :param resume_from: a directory written by a previous run: the sampler and the scorer are restored
        from it when training starts.
    :param exploratory_grad_updates: buffer mode (Robust PLR / ACCEL) only. If False, rollouts on new or
        mutated levels are scored and inserted into the buffer but produce no gradient update: only replay
        rollouts train the agent, Robust PLR's condition for its robustness guarantee. Implemented by
        skipping ``model.train()`` after such rollouts (parameters and optimizer state stay untouched).
    :param stats_every: log ``weight_entropy`` and the score histogram every this many rollouts (they
        need the full replay distribution, ``O(N log N)`` for ``N`` levels). Default: every rollout up to
        100k levels, then every ``N // 100_000`` rollouts.
    :param success_fn: ``strategy="learnability"`` only: ``fn(info) -> bool``, the outcome of an episode
        from the ``info`` dict of its last step. Default: ``info["is_success"]``, else the raw return
        ``info["episode"]["r"] > 0`` written by SB3's ``Monitor`` (MiniGrid's success); see
        :func:`plr_gym.scoring.episode_success`.
    :param verbose: verbosity level.
    :param partial_episodes: how an episode still running at the end of a rollout is scored:
        ``"stitch"`` (default: once, over all its steps, when it completes) or ``"commit"`` (as
        level-replay: its chunk is scored at the rollout's end and the rest as a new episode), see
        :class:`~plr_gym.scoring.EpisodeScorer`.
    :param total_timesteps: the run's whole budget in env steps, which the level source's schedules follow
        (``LevelSampler(temperature_end=...)``: the callback calls ``set_progress(num_timesteps / budget)``
        every rollout). Default: the budget of the current ``learn()`` call as SB3 counts it; pass the
        run's budget when training in chunks (``learn(..., reset_num_timesteps=False)`` in a loop), whose
        calls each count only their own.

    **Buffer mode** (``PrioritizedLevelReplay(venv, buffer=LevelBuffer(...), generator=fn)``): at the
    start of every rollout the wrapper decides between replaying buffer levels and trying new ones (or,
    with a mutator, evaluating the mutated children of the last replayed levels) and assigns one level
    per env; the callback resets the envs onto them, so every episode of an env during the rollout plays
    its assigned level. At the end of the rollout each level's completed episodes are scored (mean over
    its episodes) and the buffer is updated (replay) or offered the level (new/mutated). Episodes still
    running when the rollout ends ("cliffhangers") are not scored, as in dcd; a new level with no
    completed episode is not inserted, and a replayed one keeps its previous score.

    Example:
        >>> import gymnasium as gym
        >>> from minigrid.wrappers import FlatObsWrapper
        >>> from stable_baselines3 import PPO
        >>> from stable_baselines3.common.env_util import make_vec_env
        >>> from plr_gym import LevelWrapper, PLRCallback, PrioritizedLevelReplay
        >>> venv = make_vec_env("MiniGrid-Empty-5x5-v0", n_envs=2,
        ...                     wrapper_class=lambda e: LevelWrapper(FlatObsWrapper(e)))
        >>> venv = PrioritizedLevelReplay(venv, levels=range(10), seed=0)
        >>> model = PPO("MlpPolicy", venv, n_steps=64, batch_size=64, n_epochs=1, seed=0)
        >>> model = model.learn(256, callback=PLRCallback())
        >>> venv.sampler.num_seen > 0
        True
    """

    def __init__(
        self,
        save_path: str | os.PathLike[str] | None = None,
        save_freq: int = 10,
        resume_from: str | os.PathLike[str] | None = None,
        exploratory_grad_updates: bool = True,
        stats_every: int | None = None,
        success_fn: Callable[[dict[str, Any]], Any] | None = None,
        verbose: int = 0,
        partial_episodes: str = "stitch",
        total_timesteps: int | None = None,
    ) -> None:
        super().__init__(verbose)
        self.total_timesteps = _check_total_timesteps(total_timesteps)
        if success_fn is not None and not callable(success_fn):
            raise TypeError(f"success_fn must be a callable fn(info) -> bool or None, got {success_fn!r}")
        self.success_fn = success_fn
        self._successes: np.ndarray[Any, Any] | None = None
        if partial_episodes not in PARTIAL_EPISODES:
            raise ValueError(
                f"partial_episodes={partial_episodes!r} is not supported; choose 'stitch' or 'commit'"
            )
        self.partial_episodes = partial_episodes
        if stats_every is not None and (
            isinstance(stats_every, bool) or not isinstance(stats_every, int) or stats_every < 1
        ):
            raise ValueError(f"stats_every must be a positive int or None, got {stats_every!r}")
        self.stats_every = stats_every
        self.exploratory_grad_updates = bool(exploratory_grad_updates)
        self._original_train: Any = None
        if isinstance(save_freq, bool) or not isinstance(save_freq, int) or save_freq < 1:
            raise ValueError(f"save_freq must be a positive int, got {save_freq!r}")
        self.save_path = None if save_path is None else Path(save_path)
        self.save_freq = save_freq
        self.resume_from = None if resume_from is None else Path(resume_from)
        self.wrapper: Any = None
        self.scorer: EpisodeScorer | None = None
        self._raw_rewards: np.ndarray[Any, Any] | None = None
        # what the rollout buffer's compute_returns_and_advantage received: (last_values, dones)
        self._bootstrap: tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]] | None = None
        self._step = 0
        self._rollouts = 0

    # ------------------------------------------------------------------ SB3 hooks
    def _init_callback(self) -> None:
        if not isinstance(self.model, OnPolicyAlgorithm):
            raise TypeError(
                f"PLRCallback works with on-policy algorithms (PPO, A2C, RecurrentPPO, MaskablePPO), got "
                f"{type(self.model).__name__}; for off-policy algorithms (DQN, SAC, TD3, PERDQN, ...) use "
                "plr_gym.OffPolicyPLRCallback"
            )
        self.wrapper = find_plr_wrapper(self.model.get_env())
        source = self.source
        info = source.strategy_info
        action_space = self.model.action_space
        if info.discrete_only and not isinstance(action_space, spaces.Discrete):
            raise ValueError(
                f"strategy {source.strategy!r} needs a Discrete action space, got {action_space}; use "
                "'policy_entropy', 'value_l1', 'positive_value_loss', 'gae', 'max_mc' or 'one_step_td_error'"
            )
        if not self.exploratory_grad_updates and not source.plans_rollouts:
            raise ValueError(
                "exploratory_grad_updates=False skips the gradient updates of rollouts that try new levels, "
                "which needs a level source that plans whole rollouts (Robust PLR: "
                "PrioritizedLevelReplay(venv, buffer=LevelBuffer(...), generator=...)); a LevelSampler mixes "
                "replayed and new levels within a rollout"
            )
        self.wrapper._score_watch.attached = True  # episodes will be scored: no "forgot PLRCallback?"
        n_envs = self.model.n_envs
        if info.uses_scores:
            self.scorer = EpisodeScorer(
                source,
                n_envs=n_envs,
                strategy=source.strategy,
                gamma=float(self.model.gamma),
                partial_episodes=self.partial_episodes,
            )
        n_steps = int(self.model.n_steps)
        if info.outcome:
            self._successes = np.full((n_steps, n_envs), np.nan)
        self._raw_rewards = np.zeros((n_steps, n_envs), dtype=np.float64)
        self._capture_bootstrap()
        if self.stats_every is None:  # about one O(N log N) statistics pass per 100k level-rollouts
            self.stats_every = max(1, source.num_levels // 100_000)
        if not self.exploratory_grad_updates:
            model = self.model
            self._original_train = model.train
            model.train = self._train_on_replay_only  # type: ignore[method-assign]
        if self.resume_from is not None:
            self.load(self.resume_from)
            if self.wrapper.steps_since_reset == 0:
                # learn() has just reset the envs on levels chosen by the source as it was before the
                # restore: start them again on levels chosen by the restored source
                source.discard_unplayed()
                self._restart_envs()

    def _restart_envs(self) -> None:
        """Reset every env on levels chosen now, and make the algorithm continue from their first
        observations (SB3 keeps the last observation of a rollout in ``_last_obs``)."""
        algo: Any = self.model
        algo._last_obs = algo.env.reset()
        algo._last_episode_starts = np.ones(algo.n_envs, dtype=bool)

    @property
    def source(self) -> Any:
        """The training env's level source (:class:`~plr_gym.source.LevelSource`)."""
        return self.wrapper.source

    def _capture_bootstrap(self) -> None:
        """Record the ``last_values``/``dones`` SB3 passes to ``compute_returns_and_advantage``.

        ``self.locals["values"]`` is not that value for algorithms that do not refresh ``locals`` before
        ``on_rollout_end`` (sb3-contrib's RecurrentPPO and MaskablePPO): there it is ``V(s_{T-1})``.
        """
        buffer: Any = self.model.rollout_buffer  # type: ignore[attr-defined]
        original = buffer.compute_returns_and_advantage
        callback = self

        def compute_returns_and_advantage(last_values: th.Tensor, dones: np.ndarray[Any, Any]) -> None:
            callback._bootstrap = (
                last_values.detach().cpu().numpy().astype(np.float64).reshape(-1),
                np.asarray(dones).copy(),
            )
            original(last_values=last_values, dones=dones)

        buffer.compute_returns_and_advantage = compute_returns_and_advantage
        self._patched_buffer = buffer

    def _on_rollout_start(self) -> None:
        self._bootstrap = None
        self._step = 0
        report_progress(self.source, self.model, self.total_timesteps)
        if self.source.begin_rollout():
            # the source assigned this rollout's levels (Robust PLR): start every env on them
            self._restart_envs()

    def _train_on_replay_only(self) -> None:
        if self.source.last_rollout_mode == "replay":
            self._original_train()
        else:
            self.logger.record("plr/skipped_update", 1)

    def _on_step(self) -> bool:
        assert self._raw_rewards is not None
        if self._step < self._raw_rewards.shape[0]:
            if self._successes is not None:
                row = self._successes[self._step]
                row[:] = np.nan
                for e in np.flatnonzero(self.locals["dones"]).tolist():
                    outcome = episode_success(self.locals["infos"][e], self.success_fn)
                    if outcome is not None:
                        row[e] = float(outcome)
            rewards = self.locals.get("rewards")
            # the env's reward, before SB3 folds gamma * V(terminal obs) into a truncated episode's last one
            self._raw_rewards[self._step] = 0.0 if rewards is None else np.asarray(rewards, dtype=np.float64)
        self._step += 1
        return True

    def _on_rollout_end(self) -> None:
        buffer = self.model.rollout_buffer  # type: ignore[attr-defined]
        if self._step != buffer.buffer_size or not buffer.full:
            raise RuntimeError(
                f"PLRCallback saw {self._step} steps but the rollout buffer holds {buffer.buffer_size}: was "
                "the callback skipped for some steps (by a parent callback that does not forward on_step)?"
            )
        reported: list[tuple[Any, float]] = []
        if self.scorer is None:
            self.wrapper.score_rollout(None)  # nothing to score: the wrapper forgets the steps' levels
        else:
            extra: dict[str, Any] = {}
            if self.scorer.needs_policy:
                extra = self._policy_outputs(buffer)
            if self._bootstrap is None:
                raise RuntimeError(
                    f"PLRCallback: {type(self.model).__name__} did not call "
                    "rollout_buffer.compute_returns_and_advantage(last_values=..., dones=...) before "
                    "on_rollout_end, so the bootstrap value V(s_T) of the rollout is unknown"
                )
            last_values, dones = self._bootstrap
            # the wrapper knows each step's level and hands the arrays to the scorer with them
            reported = self.wrapper.score_rollout(
                self.scorer,
                episode_starts=buffer.episode_starts,
                dones=dones,
                rewards=buffer.rewards,
                raw_rewards=self._raw_rewards,
                values=buffer.values,
                advantages=buffer.advantages,
                last_values=last_values,
                successes=self._successes,
                **extra,
            )
        self._rollouts += 1
        self.source.end_rollout()
        kept = self.source.retained_levels()
        if self.scorer is not None and kept is not None:  # forget best returns of levels the source forgot
            self.scorer.prune_max_returns(kept)
        self._log(len(reported))
        if self.save_path is not None and self._rollouts % self.save_freq == 0:
            self.save(self.save_path)

    def _on_training_end(self) -> None:
        patched = getattr(self, "_patched_buffer", None)
        if patched is not None and "compute_returns_and_advantage" in vars(patched):
            del patched.compute_returns_and_advantage  # back to the class's method
            self._patched_buffer = None
        if self._original_train is not None:
            on_policy: Any = self.model
            on_policy.train = self._original_train
            self._original_train = None
        if self.save_path is not None:
            self.save(self.save_path)

    # ------------------------------------------------------------------ action distributions
    def _policy_outputs(self, buffer: Any) -> dict[str, np.ndarray[Any, Any]]:
        """Normalised log-probabilities (Discrete) or entropies (other spaces) for every buffer step."""
        policy: Any = self.model.policy
        n_steps, n_envs = buffer.episode_starts.shape
        total = n_steps * n_envs
        obs = buffer.observations
        flat_obs: Any = (
            {k: v.reshape(total, *v.shape[2:]) for k, v in obs.items()}
            if isinstance(obs, dict)
            else obs.reshape(total, *obs.shape[2:])
        )
        discrete = isinstance(self.model.action_space, spaces.Discrete)
        recurrent = hasattr(buffer, "hidden_states_pi")
        masks = getattr(buffer, "action_masks", None)
        chunks = []
        with th.no_grad():
            for lo in range(0, total, _BATCH):
                hi = min(lo + _BATCH, total)
                part = (
                    {k: v[lo:hi] for k, v in flat_obs.items()}
                    if isinstance(flat_obs, dict)
                    else flat_obs[lo:hi]
                )
                obs_t = obs_as_tensor(part, self.model.device)
                if recurrent:
                    states = tuple(
                        th.as_tensor(
                            np.ascontiguousarray(
                                s.transpose(1, 0, 2, 3).reshape(s.shape[1], total, s.shape[3])[:, lo:hi]
                            ),
                            device=self.model.device,
                        )
                        for s in (buffer.hidden_states_pi, buffer.cell_states_pi)
                    )
                    starts = th.as_tensor(
                        buffer.episode_starts.reshape(total)[lo:hi], device=self.model.device
                    )
                    dist, _ = policy.get_distribution(obs_t, states, starts)
                elif masks is not None:
                    dist = policy.get_distribution(obs_t, action_masks=masks.reshape(total, -1)[lo:hi])
                else:
                    dist = policy.get_distribution(obs_t)
                if discrete:
                    chunks.append(th.log_softmax(dist.distribution.logits, dim=-1).cpu().numpy())
                else:
                    chunks.append(dist.entropy().cpu().numpy().reshape(hi - lo))
        out = np.concatenate(chunks)
        if discrete:
            return {"log_policy": out.reshape(n_steps, n_envs, -1)}
        return {"entropies": out.reshape(n_steps, n_envs)}

    # ------------------------------------------------------------------ logging
    def _log(self, n_scored: int) -> None:
        """Record the level source's ``plr/*`` statistics; the costly ones (the replay distribution's
        entropy, ``O(N log N)``, and the score histogram) every ``stats_every`` rollouts."""
        full = self._rollouts % (self.stats_every or 1) == 0 or self._rollouts == 1
        self.logger.record("plr/episodes_scored", n_scored)
        for key, value in self.source.rollout_stats(full).items():
            if isinstance(value, np.ndarray):  # a histogram, for TensorBoard only
                hidden = ("stdout", "log", "json", "csv")
                self.logger.record(f"plr/{key}", th.as_tensor(value), exclude=hidden)
            else:
                self.logger.record(f"plr/{key}", value)

    # ------------------------------------------------------------------ checkpoints
    def save(self, directory: str | os.PathLike[str]) -> None:
        """Write the sampler (or buffer and generator plan) and the scorer's open episodes to ``directory``.

        The files (npz + JSON, no pickle) form one checkpoint, written atomically
        (:func:`plr_gym.checkpoint.write_checkpoint_dir`): a save that fails or is killed leaves the
        previous checkpoint complete, and a reader never sees files of two different saves.
        """
        write_checkpoint_dir(directory, self.checkpoint_writers())

    def checkpoint_writers(self) -> dict[str, Callable[[Path], None]]:
        """``{file name: fn(path)}`` of this callback's checkpoint: the level source's files and, when
        episodes are scored, ``plr_scorer.npz`` (used by :meth:`save` and :class:`plr_gym.run.RunDirectory`).
        """
        if self.wrapper is None:
            raise RuntimeError("PLRCallback.save needs the training env: call it once training has started")
        writers: dict[str, Any] = {name: save for name, (save, _) in self.source.checkpoint_files().items()}
        if self.scorer is not None:
            writers["plr_scorer.npz"] = self.scorer.save
        return writers

    def load(self, directory: str | os.PathLike[str]) -> None:
        """Restore the level source and the scorer from ``directory`` (call once training has started, or
        pass ``resume_from=`` to the constructor).

        All or nothing: if any file is missing or refused (e.g. a checkpoint of a run with another
        ``n_envs``), the level source and the scorer are left exactly as they were.
        """
        if self.wrapper is None:
            raise RuntimeError("PLRCallback.load needs the training env: pass resume_from= instead")
        path = checkpoint_files(directory)
        targets: list[Any] = [
            (self.source, load, path / name) for name, (_, load) in self.source.checkpoint_files().items()
        ]
        if self.scorer is not None and (path / "plr_scorer.npz").exists():
            targets.append((self.scorer, self.scorer.load, path / "plr_scorer.npz"))
        for _, _, file in targets:
            if not file.exists():
                raise FileNotFoundError(
                    f"{file} is missing: {directory} is not a PLRCallback checkpoint of this setup"
                )
        saved = {id(obj): (obj, obj.state_dict()) for obj, _, _ in targets}
        try:
            for _, load, file in targets:
                load(file)
        except BaseException:
            for obj, state in saved.values():
                obj.load_state_dict(state)
            raise
