"""Prioritized Level Replay in RLlib (new API stack): PPO whose env runners play levels from a shared source.

Install with ``pip install "plr-gym[rllib]"``. This module imports Ray and RLlib; nothing else in plr_gym
imports it, so the core stays Ray-free.

How the pieces fit (one shared level source, many processes):

- **Env side.** :class:`PLRRLlibEnv` is the ``config.env`` of the algorithm: in every env runner its
  :class:`PLREnvCreator` (carried in ``env_config``) builds each sub-env with your ``make_env(env_config)``
  and wraps it in :class:`PLREnv`, which draws the level of
  every episode from the shared source (``source.next_levels([k])``, ``k`` its index in its env runner)
  and plays it through
  :class:`~plr_gym.wrappers.LevelWrapper` (an ``int`` level is the reset seed). ``info["level"]`` (and
  ``info["plr_env"]``, the env's global index) is set on every reset and step, so each episode carries its
  level into the learner.
- **Learner side.** :class:`PLRPPOTorchLearner` replaces RLlib's GAE learner connector with
  :class:`PLRGeneralAdvantageEstimation`, which runs RLlib's GAE unchanged and then scores every completed
  episode from the values and advantages that GAE just computed, and reports ``(level, score)`` pairs to
  the source in one ``update_batch`` call per training batch. The advantages are GAE's raw advantages
  (``value_targets − values``), taken *before* RLlib standardises them over the batch: PLR's ``value_l1``
  is ``mean_t |A_t|`` of the raw GAE advantage, and standardised advantages would change scale from one
  batch to the next. An episode longer than one sample (RLlib cuts it into chunks at
  ``rollout_fragment_length``) is *stitched*: the chunks of one episode id are concatenated step by step
  (each chunk's GAE bootstraps at the cut, as SB3's rollout ends do) and the episode is scored once, when
  its last chunk arrives; a chunk whose episode start was never seen, or an open episode not continued in
  the next :attr:`PLRGeneralAdvantageEstimation.max_open_updates` batches, is dropped unscored (counted in
  ``plr/chunks_unscored``).
- **Outcome strategies** (``learnability``) need no learner: :class:`PLREnv` reports each finished
  episode's outcome (``info["is_success"]``, else return ``> 0``) from the env runner.
- **Metrics.** Each update logs ``plr/episodes_scored``, ``plr/chunks_unscored``, ``plr/batch_score_mean``,
  ``plr/batch_score_max``
  and the source's :meth:`~plr_gym.source.LevelSource.rollout_stats` (``plr/replay_fraction``,
  ``plr/num_seen``, ``plr/score_mean``, ``plr/score_max``) through the learner's metrics logger: they
  appear in ``result["learners"]["__all_modules__"]``; :func:`plr_metrics` collects them.

The source must be reachable from every process: a :class:`plr_gym.distributed.RemoteLevelSource` (a client
of a level source hosted in a Ray actor) in a real run. Supported: single-agent PPO with the torch
framework, strategies that score from values, advantages, rewards or outcomes (not the policy-based ones),
a source that draws a level per episode (a :class:`~plr_gym.LevelSampler`; rollout-planning sources such as
Robust PLR's buffer are not supported), and one learner (``num_learners`` 0 or 1: with several learners an
episode's chunks may reach different learners and its continuation is then dropped).

Example (see ``examples/rllib_minigrid.py`` and docs/rllib.md for a full run)::

    import ray
    from ray.rllib.algorithms.ppo import PPOConfig
    from plr_gym import LevelSampler
    from plr_gym.distributed import RemoteLevelSource, host_level_source
    from plr_gym.rllib import add_plr, plr_metrics

    ray.init()
    source = RemoteLevelSource(host_level_source(LevelSampler(range(200), strategy="value_l1")))
    config = add_plr(PPOConfig().env_runners(num_env_runners=2), source, make_env=my_make_env)
    algo = config.build_algo()
    print(plr_metrics(algo.train()))
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Callable, Mapping
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np
import numpy.typing as npt
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
from ray.rllib.algorithms.ppo.torch.ppo_torch_learner import PPOTorchLearner
from ray.rllib.connectors.connector_v2 import ConnectorV2
from ray.rllib.connectors.learner import GeneralAdvantageEstimation
from ray.rllib.core import ALL_MODULES, DEFAULT_MODULE_ID
from ray.rllib.env.env_context import EnvContext
from ray.rllib.evaluation.postprocessing import Postprocessing
from ray.rllib.utils.numpy import convert_to_numpy
from ray.rllib.utils.postprocessing.zero_padding import unpad_data_if_necessary

from plr_gym._levels import level_key
from plr_gym.scoring import EpisodeData, Strategy, episode_success, strategy_spec
from plr_gym.wrappers.level import LevelWrapper

__all__ = [
    "PLREnv",
    "PLREnvCreator",
    "PLRGeneralAdvantageEstimation",
    "PLRPPOTorchLearner",
    "PLRRLlibEnv",
    "add_plr",
    "plr_metrics",
    "plr_ppo_config",
    "plr_source",
]

#: ``config.learner_config_dict`` key holding the level source for the learner.
SOURCE_KEY = "plr_source"
#: ``shared_data`` key under which the episode marks travel from the front of the pipeline to GAE.
_MARKS_KEY = "plr_episode_marks"


def _check_source(source: Any, owner: str) -> Strategy:
    for name in ("next_levels", "update_batch", "rollout_stats", "begin_rollout", "end_rollout"):
        if not callable(getattr(source, name, None)):
            raise TypeError(
                f"{owner}: source must be a plr_gym level source (e.g. a "
                "plr_gym.distributed.RemoteLevelSource); "
                f"{type(source).__name__} has no {name}()"
            )
    if getattr(source, "plans_rollouts", False):
        raise ValueError(
            f"{owner}: source plans whole rollouts (Robust PLR / ACCEL buffer); the RLlib integration draws "
            "a level per episode: use a LevelSampler (hosted with plr_gym.distributed.host_level_source)"
        )
    info = strategy_spec(getattr(source, "strategy", "value_l1"))
    if info.needs_policy:
        raise ValueError(
            f"{owner}: strategy {info.name!r} needs the policy's action distribution, which the RLlib "
            "integration does not collect; use value_l1, positive_value_loss, gae, max_mc, "
            "one_step_td_error, learnability, random or sequential"
        )
    return info


# ------------------------------------------------------------------------------------------------ env side
class PLREnv(gym.Wrapper[Any, Any, Any, Any]):
    """One sub-env of an env runner: every reset plays the level the shared ``source`` hands out next.

    The env is wrapped in a :class:`~plr_gym.wrappers.LevelWrapper` (unless it is one already), so an
    ``int`` level is the reset seed and any other level goes to ``reset(options={"level": ...})``. A seed
    passed to :meth:`reset` (RLlib seeds the first reset) is ignored: the level decides. ``info["level"]``
    and ``info["plr_env"]`` (``env_index``) are set on every reset and step.

    With an outcome strategy (``learnability``) the wrapper also reports each finished episode's outcome
    to the source: ``info["is_success"]`` at the last step if present, else whether the episode's return
    is positive (MiniGrid's notion of success).

    :param env: the env; its ``reset(seed=level)`` must select the level.
    :param source: the level source (a :class:`plr_gym.distributed.RemoteLevelSource` when the env runs in
        another process than the source).
    :param env_index: the env's index, reported in ``info["plr_env"]`` (unique across env runners).
    :param source_index: the env's index in its ``source.next_levels`` calls (default ``env_index``). In an
        RLlib run it is the sub-env's index within its env runner: each runner has its own source client,
        and a :class:`~plr_gym.distributed.RemoteLevelSource` sizes its prefetch queue by the indices it
        serves.

    Example:
        >>> import gymnasium as gym, minigrid
        >>> from plr_gym import LevelSampler
        >>> source = LevelSampler(range(10), strategy="value_l1", seed=0)
        >>> env = PLREnv(gym.make("MiniGrid-DoorKey-5x5-v0"), source, env_index=0)
        >>> obs, info = env.reset(seed=123)      # the seed is ignored: the source picks the level
        >>> info["level"] in range(10), info["plr_env"]
        (True, 0)
    """

    def __init__(
        self, env: gym.Env[Any, Any], source: Any, env_index: int = 0, source_index: int | None = None
    ) -> None:
        if source_index is None:
            source_index = env_index
        for name, value in (("env_index", env_index), ("source_index", source_index)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
                raise ValueError(f"PLREnv: {name} must be an int >= 0, got {value!r}")
        info = _check_source(source, "PLREnv")
        if not _has_level_wrapper(env):
            env = LevelWrapper(env)
        super().__init__(env)
        self.source = source
        self.env_index = int(env_index)
        self.source_index = int(source_index)
        self._envs = np.array([self.source_index], dtype=np.int64)
        self._outcome = info.outcome
        self._level: Any = None
        self._return = 0.0

    @property
    def level(self) -> Any:
        """The level of the current episode."""
        return self._level

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Reset on the next level of the source (``seed`` is ignored; ``options`` are passed through)."""
        level = self.source.next_levels(self._envs)[0]
        if isinstance(level, np.integer):
            level = int(level)
        obs, info = self.env.reset(options={**(options or {}), "level": level})
        self._level, self._return = level, 0.0
        info["plr_env"] = self.env_index
        return obs, info

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        """Step the env; an outcome strategy reports the outcome of an episode that ends here."""
        obs, reward, terminated, truncated, info = self.env.step(action)
        info["plr_env"] = self.env_index
        if self._outcome:
            self._return += float(reward)
            if terminated or truncated:
                success = episode_success(info)
                if success is None:
                    success = self._return > 0.0
                self.source.update_batch([self._level], [1.0 if success else 0.0])
        return obs, reward, terminated, truncated, info


def _has_level_wrapper(env: Any) -> bool:
    while isinstance(env, gym.Wrapper):
        if isinstance(env, LevelWrapper):
            return True
        env = env.env
    return isinstance(env, LevelWrapper)


class PLREnvCreator:
    """The ``config.env`` of a PLR run: builds each sub-env with ``make_env`` and wraps it in :class:`PLREnv`.

    RLlib calls it once per sub-env with an ``EnvContext`` (the env config plus ``worker_index``). Sub-env
    ``k`` of env runner ``w`` gets ``env_index = w * num_envs_per_env_runner + k`` (in ``info["plr_env"]``)
    and draws its levels as env ``k`` of its runner's source client (``k`` counts the creations in the
    runner's process, so it relies on RLlib's default synchronous vectorisation; with
    ``gym_env_vectorize_mode="ASYNC"`` indices repeat, which only matters for sources that care about env
    indices). The creator is pickled into every env runner, with the source client.

    :param make_env: ``make_env(env_config) -> gym.Env`` (or a registered Gymnasium id); ``env_config`` is
        RLlib's ``EnvContext`` (``worker_index``, ``vector_index`` = ``k``) without the creator's key.
    :param source: the level source.
    :param num_envs_per_env_runner: sub-envs per env runner.
    """

    def __init__(
        self,
        make_env: Callable[[Mapping[str, Any]], gym.Env[Any, Any]] | str,
        source: Any,
        num_envs_per_env_runner: int = 1,
    ) -> None:
        if not (callable(make_env) or isinstance(make_env, str)):
            raise TypeError(
                f"PLREnvCreator: make_env must be a callable make_env(env_config) -> gym.Env or a Gymnasium "
                f"id, got {type(make_env).__name__}"
            )
        if isinstance(num_envs_per_env_runner, bool) or not isinstance(num_envs_per_env_runner, int):
            raise TypeError(
                f"PLREnvCreator: num_envs_per_env_runner must be an int, got {num_envs_per_env_runner!r}"
            )
        if num_envs_per_env_runner < 1:
            raise ValueError(
                f"PLREnvCreator: num_envs_per_env_runner must be >= 1, got {num_envs_per_env_runner}"
            )
        if isinstance(make_env, str):
            from plr_gym.training import procgen_id_for

            ours = procgen_id_for(make_env)
            if ours is not None and ours != make_env:
                raise ValueError(
                    f"PLREnvCreator: {make_env!r} is not plr_gym's Procgen env: use {ours!r}, whose "
                    "reset(seed=s) plays level s"
                )
        _check_source(source, "PLREnvCreator")
        self.make_env = make_env
        self.source = source
        self.num_envs_per_env_runner = num_envs_per_env_runner
        self._created = itertools.count()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_created")
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._created = itertools.count()

    def make(self, env_config: Mapping[str, Any]) -> tuple[gym.Env[Any, Any], int, int]:
        """The unwrapped env made from ``env_config`` (minus RLlib's and PLR's own keys), its index across
        env runners and its index within its runner."""
        worker = int(getattr(env_config, "worker_index", 0) or 0)
        local = next(self._created) % self.num_envs_per_env_runner
        config: Any = {k: v for k, v in dict(env_config).items() if k not in ("num_envs", CREATOR_KEY)}
        if isinstance(env_config, EnvContext):
            config = env_config.copy_with_overrides(env_config=config, vector_index=local)
        if isinstance(self.make_env, str):
            env = gym.make(self.make_env, **config)
        else:
            env = self.make_env(config)
        return env, worker * self.num_envs_per_env_runner + local, local

    def __call__(self, env_config: Mapping[str, Any]) -> PLREnv:
        """A :class:`PLREnv` over ``make_env(env_config)``."""
        env, index, local = self.make(env_config)
        return PLREnv(env, self.source, env_index=index, source_index=local)


#: ``env_config`` key holding the :class:`PLREnvCreator` of a run (set by :func:`add_plr`).
CREATOR_KEY = "plr_env_creator"


class PLRRLlibEnv(PLREnv):
    """The env class :func:`add_plr` gives RLlib (``config.env``): built from the env config, whose
    ``"plr_env_creator"`` entry (a :class:`PLREnvCreator`) makes the wrapped env; the other entries are
    passed to ``make_env``.

    :param env_config: RLlib's ``EnvContext`` (the run's ``env_config`` plus ``worker_index``).
    """

    def __init__(self, env_config: Mapping[str, Any]) -> None:
        creator = env_config.get(CREATOR_KEY) if isinstance(env_config, Mapping) else None
        if not isinstance(creator, PLREnvCreator):
            raise ValueError(f"PLRRLlibEnv: env_config needs {CREATOR_KEY!r}: a PLREnvCreator (use add_plr)")
        env, index, local = creator.make(env_config)
        super().__init__(env, creator.source, env_index=index, source_index=local)


# -------------------------------------------------------------------------------------------- learner side
class _EpisodeMarks(ConnectorV2):
    """First piece of the learner pipeline: records what RLlib's later pieces overwrite in the episodes
    (the id, whether the chunk ends its episode) plus each chunk's level, rewards and start."""

    def __call__(
        self,
        *,
        rl_module: Any,
        batch: dict[str, Any],
        episodes: list[Any],
        shared_data: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> Any:
        marks = []
        for episode in self.single_agent_episode_iterator(episodes, agents_that_stepped_only=False):
            info = episode.get_infos(-1)
            marks.append(
                {
                    "id": episode.id_,
                    "t_started": int(episode.t_started),
                    "len": len(episode),
                    "terminated": bool(episode.is_terminated),
                    "done": bool(episode.is_done),
                    "level": info.get("level") if isinstance(info, dict) else None,
                    "env": info.get("plr_env") if isinstance(info, dict) else None,
                    "rewards": np.asarray(episode.get_rewards(), dtype=np.float64),
                }
            )
        if shared_data is not None:
            shared_data[_MARKS_KEY] = marks
        return batch


class _ValueCapture:
    """Stands in for the RLModule given to RLlib's GAE and keeps the value predictions GAE computes."""

    def __init__(self, module: Any) -> None:
        self._module = module
        self.values: dict[str, Any] = {}

    def foreach_module(self, func: Any, *args: Any, **kwargs: Any) -> Any:
        out = self._module.foreach_module(func, *args, **kwargs)
        if isinstance(out, dict):
            self.values = out
        return out

    def __getitem__(self, key: Any) -> Any:
        return self._module[key]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._module, name)


class PLRGeneralAdvantageEstimation(GeneralAdvantageEstimation):
    """RLlib's GAE connector, then one PLR score per completed episode, reported to the level source.

    It runs :class:`ray.rllib.connectors.learner.GeneralAdvantageEstimation` unchanged (the train batch is
    exactly RLlib's), keeps the value predictions GAE computed and forms each step's raw GAE advantage
    ``value_target − value`` (before RLlib's standardisation). Per episode chunk it keeps the real steps
    (not the bootstrap step RLlib appends), stitches chunks of one episode and scores each completed
    episode once with the strategy's function from :mod:`plr_gym.scoring` (``EpisodeData`` with rewards,
    values, raw advantages, the bootstrap values GAE used, ``gamma`` and, for ``max_mc``, the level's best
    return). All scores of a batch go to ``source.update_batch`` in one call.

    :attr:`last_scored` holds the ``(level, score, episode_id)`` triples of the last batch and
    :attr:`last_advantages` the raw advantages per chunk (the learner's episode order), for inspection.

    :param gamma: GAE's discount.
    :param lambda_: GAE's lambda.
    :param source: the level source.
    :param strategy: the scoring strategy (name or callable); ``None``: the source's.
    :param max_open_updates: batches an unfinished episode may wait for its continuation.
    """

    def __init__(
        self,
        input_observation_space: Any = None,
        input_action_space: Any = None,
        *,
        gamma: float,
        lambda_: float,
        source: Any,
        strategy: Any = None,
        max_open_updates: int = 2,
    ) -> None:
        super().__init__(  # type: ignore[no-untyped-call]
            input_observation_space, input_action_space, gamma=gamma, lambda_=lambda_
        )
        info = _check_source(source, "PLRGeneralAdvantageEstimation")
        self.source = source
        self.strategy_info: Strategy = info if strategy is None else strategy_spec(strategy)
        self.max_open_updates = int(max_open_updates)
        self._open: dict[Any, dict[str, Any]] = {}
        self._best: dict[Any, float] = {}
        self._updates = 0
        self._warned = False
        self.last_scored: list[tuple[Any, float, Any]] = []
        self.last_advantages: list[npt.NDArray[np.float64]] = []
        self.last_unscored = 0  # episode chunks of the last batch given up unscored (see _score)
        self.chunks_unscored = 0  # ... in all batches

    def __call__(
        self,
        *,
        rl_module: Any,
        episodes: list[Any],
        batch: dict[str, Any],
        shared_data: dict[str, Any] | None = None,
        metrics: Any = None,
        **kwargs: Any,
    ) -> Any:
        capture = _ValueCapture(rl_module)
        batch = super().__call__(
            rl_module=capture,  # type: ignore[arg-type]
            episodes=episodes,
            batch=batch,
            shared_data=shared_data,
            metrics=metrics,
            **kwargs,
        )
        marks = (shared_data or {}).pop(_MARKS_KEY, None)
        if marks is None or self.strategy_info.outcome or not self.strategy_info.uses_scores:
            self._log(metrics, [])
            return batch
        if list(batch) != [DEFAULT_MODULE_ID]:
            raise ValueError(
                "PLR scoring in RLlib supports single-agent PPO (one module with a value function), got "
                f"modules {list(batch)}"
            )
        if capture.values.get(DEFAULT_MODULE_ID) is None:
            raise RuntimeError(
                "PLR scoring: RLlib's GAE piece computed no values through rl_module.foreach_module; "
                "plr_gym.rllib is written against ray[rllib]==2.60.0"
            )
        lens = [m["len"] + 1 for m in marks]  # RLlib appended one bootstrap step to each chunk
        values = unpad_data_if_necessary(
            lens, np.asarray(convert_to_numpy(capture.values[DEFAULT_MODULE_ID]))
        )
        targets = unpad_data_if_necessary(
            lens, np.asarray(convert_to_numpy(batch[DEFAULT_MODULE_ID][Postprocessing.VALUE_TARGETS]))
        )
        values = np.asarray(values, dtype=np.float64).reshape(-1)
        advantages = np.asarray(targets, dtype=np.float64).reshape(-1) - values
        if values.shape[0] != sum(lens):
            raise RuntimeError(
                f"PLR scoring: {values.shape[0]} value rows for episode chunks of {sum(lens)} steps"
            )
        levels, scores = self._score(marks, values, advantages)
        if levels:
            self.source.update_batch(levels, scores)
        self._log(metrics, scores)
        return batch

    def _score(
        self,
        marks: list[dict[str, Any]],
        values: npt.NDArray[np.float64],
        advantages: npt.NDArray[np.float64],
    ) -> tuple[list[Any], list[float]]:
        self._updates += 1
        self.last_scored, self.last_advantages = [], []
        unscored = 0
        levels: list[Any] = []
        scores: list[float] = []
        offset = 0
        for mark in marks:
            n = mark["len"]
            chunk_values = values[offset : offset + n]
            next_values = values[offset + 1 : offset + n + 1].copy()
            if mark["terminated"]:
                next_values[-1] = 0.0
            chunk_adv = advantages[offset : offset + n]
            offset += n + 1
            self.last_advantages.append(chunk_adv)
            key = mark["id"]
            record = self._open.pop(key, None)
            if mark["t_started"] == 0:
                record = {"level": mark["level"], "parts": []}
            elif record is None:
                unscored += 1  # its start was never seen (another learner's, or before this one was built)
                continue
            record["parts"].append((mark["rewards"], chunk_values, next_values, chunk_adv))
            record["seen"] = self._updates
            if not mark["done"]:
                self._open[key] = record
                continue
            if record["level"] is None:
                unscored += len(record["parts"])
                continue
            rewards, vals, nexts, adv = (np.concatenate(p) for p in zip(*record["parts"]))
            level = record["level"]
            max_return = None
            if self.strategy_info.name == "max_mc":
                lk = level_key(level)
                max_return = max(self._best.get(lk, -math.inf), float(rewards.sum()))
                self._best[lk] = max_return
            ep = EpisodeData(
                rewards=rewards,
                values=vals,
                advantages=adv,
                next_values=nexts,
                next_value=float(nexts[-1]),
                gamma=float(self.gamma),
                max_return=max_return,
            )
            score = float(self.strategy_info.score_fn(ep))  # type: ignore[misc]
            levels.append(level)
            scores.append(score)
            self.last_scored.append((level, score, key))
        stale = [k for k, r in self._open.items() if self._updates - r["seen"] > self.max_open_updates]
        for k in stale:
            unscored += len(self._open.pop(k)["parts"])
        self.last_unscored = unscored
        self.chunks_unscored += unscored
        return levels, scores

    def _log(self, metrics: Any, scores: list[float]) -> None:
        if metrics is None:
            return
        values: dict[str, float] = {}
        if self.strategy_info.uses_scores and not self.strategy_info.outcome:  # else: no learner scores
            values["plr/episodes_scored"] = float(len(scores))
            values["plr/chunks_unscored"] = float(self.last_unscored)
        if scores:
            values["plr/batch_score_mean"] = float(np.mean(scores))
            values["plr/batch_score_max"] = float(np.max(scores))
        try:  # close this batch's "rollout" at the source: replay fraction per training batch
            self.source.end_rollout()
            stats = self.source.rollout_stats(full=False)
            self.source.begin_rollout()
        except Exception as exc:  # metrics must never fail a training step
            if not self._warned:
                self._warned = True
                warnings.warn(f"PLR metrics: the level source's rollout_stats failed: {exc!r}", stacklevel=2)
            stats = {}
        for k, v in stats.items():
            if np.isscalar(v):
                values[f"plr/{k}"] = float(v)  # type: ignore[arg-type]
        for k, v in values.items():
            metrics.log_value((ALL_MODULES, k), v, window=1)


class PLRPPOTorchLearner(PPOTorchLearner):
    """PPO's torch learner whose learner pipeline scores levels (set by :func:`add_plr`).

    After PPO's own ``build`` it puts an episode-marking piece at the front of the learner connector
    pipeline (before RLlib's ``AddOneTsToEpisodesAndTruncate`` changes ids and ``truncated`` flags) and
    replaces RLlib's GAE piece with :class:`PLRGeneralAdvantageEstimation`. It reads the source and the
    strategy from ``config.learner_config_dict``.
    """

    def build(self) -> None:
        super().build()
        settings = self.config.learner_config_dict
        if SOURCE_KEY not in settings:
            raise ValueError(
                "PLRPPOTorchLearner: config.learner_config_dict has no 'plr_source'; use add_plr()"
            )
        pipeline = self._learner_connector
        if pipeline is None:
            raise ValueError("PLRPPOTorchLearner: the learner has no learner connector pipeline to score in")
        names = [type(c).__name__ for c in pipeline.connectors]
        if "GeneralAdvantageEstimation" not in names:
            raise ValueError(
                "PLRPPOTorchLearner: the learner pipeline has no GeneralAdvantageEstimation piece "
                "(add_default_connectors_to_learner_pipeline must stay True)"
            )
        scorer = PLRGeneralAdvantageEstimation(
            gamma=self.config.gamma,
            lambda_=self.config.lambda_,  # type: ignore[attr-defined]
            source=settings[SOURCE_KEY],
        )
        pipeline.insert_after("GeneralAdvantageEstimation", scorer)
        pipeline.remove("GeneralAdvantageEstimation")
        pipeline.prepend(_EpisodeMarks())

    @property
    def plr_scorer(self) -> PLRGeneralAdvantageEstimation:
        """The scoring piece of this learner's pipeline."""
        for piece in getattr(self._learner_connector, "connectors", []):
            if isinstance(piece, PLRGeneralAdvantageEstimation):
                return piece
        raise LookupError("no PLRGeneralAdvantageEstimation in the learner pipeline")


# ------------------------------------------------------------------------------------------------ config
def add_plr(
    config: AlgorithmConfig,
    source: Any,
    make_env: Callable[[Mapping[str, Any]], gym.Env[Any, Any]] | str | None = None,
    *,
    learner_class: type | None = None,
) -> AlgorithmConfig:
    """Turn a PPO config into a PLR run over ``source`` (returns ``config``, changed in place).

    Sets ``config.env`` to :class:`PLRRLlibEnv` with a :class:`PLREnvCreator` (``make_env``, or the
    config's Gymnasium id if ``make_env`` is ``None``) in ``env_config``, the learner class to
    :class:`PLRPPOTorchLearner`, puts the source into ``config.learner_config_dict`` and calls
    ``source.begin_rollout()`` (the first training batch's replay fraction counts from here). Call it after
    ``env_runners(num_envs_per_env_runner=...)``. The scoring strategy is the source's ``strategy``.

    :param config: a ``PPOConfig`` on the new API stack (torch, single-agent).
    :param source: the level source shared by env runners and learner, e.g.
        ``plr_gym.distributed.RemoteLevelSource(host_level_source(LevelSampler(...)))``.
    :param make_env: ``make_env(env_config) -> gym.Env`` whose ``reset(seed=level)`` plays ``level``, or a
        Gymnasium id; ``None``: the id already set with ``config.environment(env=...)``.
    :param learner_class: a subclass of :class:`PLRPPOTorchLearner` (default: that class).

    Example (a local sampler shows the wiring; a real run shares a
    :class:`~plr_gym.distributed.RemoteLevelSource` between the processes):
        >>> from ray.rllib.algorithms.ppo import PPOConfig
        >>> from plr_gym import LevelSampler
        >>> config = add_plr(PPOConfig(), LevelSampler(range(10), strategy="value_l1"), "CartPole-v1")
        >>> config.env.__name__, config.learner_class.__name__, plr_source(config).num_levels
        ('PLRRLlibEnv', 'PLRPPOTorchLearner', 10)
    """
    from ray.rllib.algorithms.ppo import PPOConfig

    if not isinstance(config, PPOConfig):
        raise TypeError(f"add_plr: config must be a PPOConfig, got {type(config).__name__}")
    if not config.enable_rl_module_and_learner or not config.enable_env_runner_and_connector_v2:
        raise ValueError("add_plr: config must use RLlib's new API stack (api_stack(...) with both enabled)")
    if config.framework_str != "torch":
        raise ValueError(f"add_plr: config must use framework='torch', got {config.framework_str!r}")
    if config.is_multi_agent:
        raise ValueError("add_plr: config must be single-agent (multi_agent() is not supported)")
    if learner_class is None:
        learner_class = PLRPPOTorchLearner
    elif not (isinstance(learner_class, type) and issubclass(learner_class, PLRPPOTorchLearner)):
        raise TypeError("add_plr: learner_class must be a subclass of PLRPPOTorchLearner")
    _check_source(source, "add_plr")
    if int(config.num_learners or 0) > 1:
        warnings.warn(
            f"add_plr: num_learners={config.num_learners}: RLlib hands each learner its share of a "
            "batch's episode chunks, so the chunks of an episode longer than one sample may reach "
            "different learners; those episodes are not scored (counted per batch in the metric "
            "plr/chunks_unscored). One learner scores every episode.",
            UserWarning,
            stacklevel=2,
        )
    if make_env is None:
        if not isinstance(config.env, str):
            raise ValueError(
                "add_plr: pass make_env=fn(env_config) -> gym.Env, or set a Gymnasium id with "
                "config.environment(env='...') first"
            )
        make_env = config.env
    source.begin_rollout()  # the first training batch's replay fraction counts from here
    creator = PLREnvCreator(make_env, source, int(config.num_envs_per_env_runner))
    config.environment(env=PLRRLlibEnv, env_config={**(config.env_config or {}), CREATOR_KEY: creator})
    config.learners(
        learner_class=learner_class,
        learner_config_dict={**config.learner_config_dict, SOURCE_KEY: source},
    )
    return config


def plr_ppo_config(
    make_env: Callable[[Mapping[str, Any]], gym.Env[Any, Any]] | str,
    *,
    source: Any = None,
    num_env_runners: int = 2,
    num_envs_per_env_runner: int = 1,
    prefetch: int = 2,
    **sampler_kwargs: Any,
) -> AlgorithmConfig:
    """A PPO config with PLR: a :class:`~plr_gym.LevelSampler` hosted in a Ray actor, ``num_env_runners``
    env runners drawing from it (:func:`add_plr`). Call after ``ray.init()`` (or
    ``ray.init(address=...)`` on a cluster); the source is ``plr_source(config)``.

    :param make_env: ``make_env(env_config) -> gym.Env`` whose ``reset(seed=level)`` plays ``level``, or a
        Gymnasium id.
    :param source: a level source to use instead of hosting a new sampler (then no ``sampler_kwargs``).
    :param num_env_runners: remote env runners (``0``: sample in the driver).
    :param num_envs_per_env_runner: sub-envs per env runner.
    :param prefetch: levels each env runner keeps ready per env
        (:class:`~plr_gym.distributed.RemoteLevelSource`).
    :param sampler_kwargs: :class:`~plr_gym.LevelSampler` arguments, at least ``levels=``.

    Example:
        >>> import ray
        >>> _ = ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
        >>> config = plr_ppo_config("CartPole-v1", levels=range(50), strategy="value_l1", seed=0)
        >>> plr_source(config).num_levels, config.num_env_runners
        (50, 2)
        >>> ray.shutdown()
    """
    from ray.rllib.algorithms.ppo import PPOConfig

    if source is None:
        from plr_gym.distributed import RemoteLevelSource, host_level_source
        from plr_gym.source import make_level_source

        sampler = make_level_source("plr_ppo_config", 1, None, sampler_kwargs, None, None, None, 1)
        source = RemoteLevelSource(host_level_source(sampler), prefetch=prefetch)
    elif sampler_kwargs:
        raise ValueError(
            f"plr_ppo_config: pass either source= or LevelSampler arguments (got source= and "
            f"{', '.join(sorted(sampler_kwargs))}=)"
        )
    config = PPOConfig().env_runners(  # type: ignore[no-untyped-call]
        num_env_runners=num_env_runners, num_envs_per_env_runner=num_envs_per_env_runner
    )
    return add_plr(config, source, make_env)


def plr_source(config: AlgorithmConfig) -> Any:
    """The level source :func:`add_plr` put into ``config``."""
    try:
        return config.learner_config_dict[SOURCE_KEY]
    except KeyError:
        raise ValueError(
            "plr_source: this config has no level source; call add_plr(config, source) first"
        ) from None


def plr_metrics(result: Mapping[str, Any]) -> dict[str, float]:
    """The ``plr/*`` metrics of one ``algo.train()`` result (logged by the learner), as a flat dict.

    >>> plr_metrics({"learners": {"__all_modules__": {"plr/num_seen": 3.0, "num_env_steps": 7}}})
    {'plr/num_seen': 3.0}
    """
    learners = result.get("learners", {})
    stats = learners.get(ALL_MODULES, {}) if isinstance(learners, Mapping) else {}
    return {k: float(v) for k, v in stats.items() if isinstance(k, str) and k.startswith("plr/")}
