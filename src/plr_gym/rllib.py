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
  :class:`PLRGeneralAdvantageEstimation`, which runs RLlib's GAE unchanged and then turns each episode
  chunk the learner holds into a partial aggregate of its score (:mod:`plr_gym.episode_parts`), from the
  values and advantages that GAE just computed, and sends the batch's parts to the source in one call.
  The advantages are GAE's raw advantages (``value_targets − values``), taken *before* RLlib standardises
  them over the batch: PLR's ``value_l1`` is ``mean_t |A_t|`` of the raw GAE advantage, and standardised
  advantages would change scale from one batch to the next. RLlib cuts a long episode into chunks (at
  ``rollout_fragment_length``) and, with ``num_learners > 1``, deals each learner its share of a batch's
  chunks (cutting chunks too); each chunk's GAE bootstraps at its cut, as SB3's rollout ends do. The
  source's actor joins the parts of one episode by episode id, wherever and whenever they were scored,
  and scores the episode once, when its last part arrives (exactly once across actor restarts); an
  episode whose parts stop arriving is given up after the actor's ``part_timeout`` (counted in
  ``plr/chunks_unscored``).
- **Outcome strategies** (``learnability``) need no learner: :class:`PLREnv` reports each finished
  episode's outcome (``info["is_success"]``, else return ``> 0``) from the env runner.
- **Metrics.** Each update logs ``plr/episodes_scored``, ``plr/chunks_unscored`` (summed over the
  learners), ``plr/batch_score_mean``, ``plr/batch_score_max`` and (from the first learner) the source's
  :meth:`~plr_gym.source.LevelSource.rollout_stats` (``plr/replay_fraction``, ``plr/num_seen``,
  ``plr/score_mean``, ``plr/score_max``) through the learner's metrics logger: they appear in
  ``result["learners"]["__all_modules__"]``; :func:`plr_metrics` collects them.

The source must be reachable from every process: a :class:`plr_gym.distributed.RemoteLevelSource` (a client
of a level source hosted in a Ray actor) in a real run. Supported: single-agent PPO with the torch
framework, strategies that score from values, advantages, rewards or outcomes (not the policy-based ones),
a source that draws a level per episode (a :class:`~plr_gym.LevelSampler`; rollout-planning sources such as
Robust PLR's buffer are not supported), and any number of learners (``num_learners``).

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

from plr_gym.episode_parts import EpisodeJoiner, EpisodePart, make_part
from plr_gym.scoring import EpisodeData, Strategy, episode_success, strategy_spec
from plr_gym.source import next_rollout
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

    def close(self) -> None:
        """Close the env; a source client that buffers scores (outcome strategies report from here) sends
        them first, without waiting (:meth:`plr_gym.distributed.RemoteLevelSource.push`)."""
        push = getattr(self.source, "push", None)
        if self._outcome and callable(push):
            push()
        super().close()  # type: ignore[no-untyped-call]

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
    """RLlib's GAE connector, then PLR scores of the episodes this learner holds, sent to the level source.

    It runs :class:`ray.rllib.connectors.learner.GeneralAdvantageEstimation` unchanged (the train batch is
    exactly RLlib's), keeps the value predictions GAE computed and forms each step's raw GAE advantage
    ``value_target − value`` (before RLlib's standardisation). Each episode chunk (its real steps, not the
    bootstrap step RLlib appends) becomes one :class:`~plr_gym.episode_parts.EpisodePart`: the episode's
    id, the chunk's step range, its level and the strategy's partial aggregate of its steps (the sum of the
    per-step terms for ``value_l1``, ``positive_value_loss``, ``gae`` and ``one_step_td_error``; the sums of
    values and rewards for ``max_mc``; the steps themselves for a callable). The parts of a batch go to the
    source in one call; an :class:`~plr_gym.episode_parts.EpisodeJoiner` joins the parts of each episode
    by id, wherever they were scored (the chunks of one episode reach different learners, and batches), and
    scores the episode once when its last part arrives: in the level source's actor with several learners
    (a :class:`~plr_gym.distributed.RemoteLevelSource`), in this piece with one learner, which holds every
    part (then the source gets one score per episode, as from any front end).

    :attr:`last_scored` holds the ``(level, score, episode_id)`` of the episodes whose last part this
    learner sent in the last batch and :attr:`last_advantages` the raw advantages per chunk (the learner's
    episode order), for inspection.

    :param gamma: GAE's discount.
    :param lambda_: GAE's lambda.
    :param source: the level source.
    :param strategy: the scoring strategy (name or callable); ``None``: the source's.
    :param part_timeout: when the parts are joined here, seconds an unfinished episode waits for its next
        part (the actor of a :class:`~plr_gym.distributed.RemoteLevelSource` has its own:
        ``host_level_source(part_timeout=...)``). These are wall-clock seconds, which run on while
        training is paused: a pause longer than this (a debugger, a long evaluation, a paused Tune trial,
        a slow restore of the learners) gives up every episode that was live in the env runners and had a
        chunk scored before it (counted in ``plr/chunks_unscored``). Set it above your longest pause.
    :param join_here: join the parts in this piece and send the source one score per episode, also for a
        :class:`~plr_gym.distributed.RemoteLevelSource` (right when this is the only learner: it then holds
        every part, and the actor gets one score per episode instead of one part per chunk); always so
        for a local source.
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
        part_timeout: float = 600.0,
        join_here: bool = False,
    ) -> None:
        super().__init__(  # type: ignore[no-untyped-call]
            input_observation_space, input_action_space, gamma=gamma, lambda_=lambda_
        )
        info = _check_source(source, "PLRGeneralAdvantageEstimation")
        self.source = source
        self.strategy_info: Strategy = info if strategy is None else strategy_spec(strategy)
        shared = callable(getattr(source, "update_parts", None)) and not join_here
        self.joiner: EpisodeJoiner | None = None  # joins the parts here (a local source, or one learner)
        if not shared and self.strategy_info.uses_scores and not self.strategy_info.outcome:
            self.joiner = EpisodeJoiner(self.strategy_info, part_timeout)
        self._warned = False
        self.last_scored: list[tuple[Any, float, Any]] = []
        self.last_advantages: list[npt.NDArray[np.float64]] = []
        self.last_unscored = 0  # episode chunks of the last batch given up unscored
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
            self._log(metrics, [], scoring=False)
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
        scored = self._score(marks, values, advantages)
        self._log(metrics, [score for _, score, _ in scored])
        return batch

    def _parts(
        self,
        marks: list[dict[str, Any]],
        values: npt.NDArray[np.float64],
        advantages: npt.NDArray[np.float64],
    ) -> tuple[list[EpisodePart], int]:
        """One part per episode chunk (chunks without a level are counted, not sent)."""
        self.last_advantages = []
        parts: list[EpisodePart] = []
        unscored = 0
        offset = 0
        for mark in marks:
            n = mark["len"]
            if n == 0:  # nothing but the bootstrap step
                offset += 1
                continue
            chunk_values = values[offset : offset + n]
            next_values = values[offset + 1 : offset + n + 1].copy()
            if mark["terminated"]:
                next_values[-1] = 0.0
            chunk_adv = advantages[offset : offset + n]
            offset += n + 1
            self.last_advantages.append(chunk_adv)
            if mark["level"] is None:
                unscored += 1  # no info["level"]: not a PLREnv episode
                continue
            data = EpisodeData(
                rewards=mark["rewards"],
                values=chunk_values,
                advantages=chunk_adv,
                next_values=next_values,
                next_value=float(next_values[-1]),
                gamma=float(self.gamma),
            )
            level = mark["level"]
            parts.append(
                make_part(self.strategy_info, mark["id"], mark["t_started"], level, mark["done"], data)
            )
        return parts, unscored

    def _score(
        self,
        marks: list[dict[str, Any]],
        values: npt.NDArray[np.float64],
        advantages: npt.NDArray[np.float64],
    ) -> list[tuple[Any, float, Any]]:
        """Send the batch's parts; the ``(level, score, episode id)`` of the episodes they completed."""
        parts, unscored = self._parts(marks, values, advantages)
        if self.joiner is None:  # the actor joins them (exactly once, across restarts): several learners
            try:
                self.source.update_parts(parts)
                scored, expired = self.source.take_joined()
            finally:  # every learner's parts of this batch are in: the first learner's stats see them
                _sync_learners()  # (also when this learner's send failed: the others must not wait for it)
        else:
            result = self.joiner.add(parts)
            if result.refused:
                raise result.refused[0][1]
            if result.levels:
                self.source.update_batch(result.levels, result.scores)
            scored = list(zip(result.levels, result.scores, result.episodes))
            expired = result.unscored
        self.last_scored = [(level, float(score), episode) for level, score, episode in scored]
        self.last_unscored = unscored + int(expired)
        self.chunks_unscored += self.last_unscored
        return self.last_scored

    def _log(self, metrics: Any, scores: list[float], scoring: bool = True) -> None:
        """Log this learner's counts (summed over learners) and, on the first learner only, the source's
        statistics (one rollout window per training batch for the whole learner group)."""
        if metrics is None:
            return
        if scoring:  # counts: RLlib sums them over the learners of a batch
            metrics.log_value((ALL_MODULES, "plr/episodes_scored"), float(len(scores)), reduce="sum")
            metrics.log_value((ALL_MODULES, "plr/chunks_unscored"), float(self.last_unscored), reduce="sum")
        if scores:
            metrics.log_value((ALL_MODULES, "plr/batch_score_mean"), float(np.mean(scores)), window=1)
            metrics.log_value((ALL_MODULES, "plr/batch_score_max"), float(np.max(scores)), reduce="max")
        if _learner_rank() != 0:
            return
        try:  # close this batch's "rollout" at the source (after every learner's scores: _score syncs)
            stats = next_rollout(self.source, full=False)  # one round trip for a RemoteLevelSource
        except Exception as exc:  # metrics must never fail a training step
            if not self._warned:
                self._warned = True
                warnings.warn(f"PLR metrics: the level source's rollout_stats failed: {exc!r}", stacklevel=2)
            stats = {}
        for k, v in stats.items():
            if np.isscalar(v):
                metrics.log_value((ALL_MODULES, f"plr/{k}"), float(v), window=1)  # type: ignore[arg-type]


def _learner_rank() -> int:
    """This learner's rank in RLlib's data-parallel learner group (0 without one)."""
    import torch.distributed as dist

    return int(dist.get_rank()) if dist.is_available() and dist.is_initialized() else 0


def _sync_learners() -> None:
    """Wait until every learner of RLlib's data-parallel group got here (no-op with one learner).

    :raises RuntimeError: naming the likely cause, a learner that died, when the barrier fails (torch's
        gloo error says only that a connection closed or timed out).
    """
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        try:
            dist.barrier()
        except RuntimeError as exc:  # gloo: "Connection closed by peer", "Timed out waiting ...", ...
            rank, size = dist.get_rank(), dist.get_world_size()
            raise RuntimeError(
                f"PLR scoring: learner {rank} of {size} could not meet the other learners after sending its "
                "episode parts to the level source: another learner of this run has most likely died (its "
                "process ended, was killed or lost its connection; see its log and `ray list actors "
                "--detail`). RLlib's learner group cannot continue without it: restart the run from its "
                f"last checkpoint. The barrier's error: {type(exc).__name__}: {exc}"
            ) from exc


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
            join_here=int(self.config.num_learners or 0) <= 1,  # one learner holds every part
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
    learner_class = _checked_ppo_config(config, learner_class)
    info = _check_source(source, "add_plr")
    _check_learners_share(config, source, info)
    make_env = _env_maker(config, make_env)
    source.begin_rollout()  # the first training batch's replay fraction counts from here
    creator = PLREnvCreator(make_env, source, int(config.num_envs_per_env_runner))
    config.environment(env=PLRRLlibEnv, env_config={**(config.env_config or {}), CREATOR_KEY: creator})
    config.learners(
        learner_class=learner_class,
        learner_config_dict={**config.learner_config_dict, SOURCE_KEY: source},
    )
    return config


def _checked_ppo_config(config: AlgorithmConfig, learner_class: type | None) -> type:
    """:func:`add_plr`'s checks of ``config`` (PPO, new API stack, torch, single-agent) and the learner
    class to use (``learner_class``, checked, or :class:`PLRPPOTorchLearner`)."""
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
        return PLRPPOTorchLearner
    if not (isinstance(learner_class, type) and issubclass(learner_class, PLRPPOTorchLearner)):
        raise TypeError("add_plr: learner_class must be a subclass of PLRPPOTorchLearner")
    return learner_class


def _check_learners_share(config: AlgorithmConfig, source: Any, info: Strategy) -> None:
    """Several learners scoring from values join each episode's parts in the source: it must take parts."""
    learner_scored = info.uses_scores and not info.outcome
    if (
        int(config.num_learners or 0) > 1
        and learner_scored
        and not callable(getattr(source, "update_parts", None))
    ):
        raise ValueError(
            f"add_plr: num_learners={config.num_learners} needs a source shared by the learners, which join "
            "the parts of each episode in it: a plr_gym.distributed.RemoteLevelSource, got "
            f"{type(source).__name__} (each learner would score into its own copy)"
        )


def _env_maker(
    config: AlgorithmConfig, make_env: Callable[[Mapping[str, Any]], gym.Env[Any, Any]] | str | None
) -> Callable[[Mapping[str, Any]], gym.Env[Any, Any]] | str:
    """``make_env``, or the Gymnasium id already set with ``config.environment(env=...)``."""
    if make_env is not None:
        return make_env
    if not isinstance(config.env, str):
        raise ValueError(
            "add_plr: pass make_env=fn(env_config) -> gym.Env, or set a Gymnasium id with "
            "config.environment(env='...') first"
        )
    return config.env


def plr_ppo_config(
    make_env: Callable[[Mapping[str, Any]], gym.Env[Any, Any]] | str,
    *,
    source: Any = None,
    num_env_runners: int = 2,
    num_envs_per_env_runner: int = 1,
    prefetch: int = 2,
    prefetch_seconds: float = 20.0,
    min_refill: int = 128,
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
    :param prefetch: levels each env runner keeps ready per env, at least
        (:class:`~plr_gym.distributed.RemoteLevelSource`).
    :param prefetch_seconds: each env runner also keeps ready the levels its envs take in this many seconds
        (measured), so that it calls the source's actor about once every ``7/8 × prefetch_seconds`` s
        whatever its reset rate; a level is drawn up to about this long before it is played
        (:class:`~plr_gym.distributed.RemoteLevelSource`; ``0``: ``prefetch`` per env only).
    :param min_refill: each refill brings at least this many levels, for env runners that reset too rarely
        to take that many in ``prefetch_seconds`` (their levels then wait longer, at most
        ``3 × prefetch_seconds``; :class:`~plr_gym.distributed.RemoteLevelSource`).
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
        source = _hosted_sampler(sampler_kwargs, prefetch, prefetch_seconds, min_refill)
    elif sampler_kwargs:
        raise ValueError(
            f"plr_ppo_config: pass either source= or LevelSampler arguments (got source= and "
            f"{', '.join(sorted(sampler_kwargs))}=)"
        )
    config = PPOConfig().env_runners(  # type: ignore[no-untyped-call]
        num_env_runners=num_env_runners, num_envs_per_env_runner=num_envs_per_env_runner
    )
    return add_plr(config, source, make_env)


def _hosted_sampler(
    sampler_kwargs: dict[str, Any], prefetch: int, prefetch_seconds: float, min_refill: int
) -> Any:
    """A :class:`~plr_gym.LevelSampler` of ``sampler_kwargs`` hosted in a Ray actor, and a client of it."""
    from plr_gym.distributed import RemoteLevelSource, host_level_source
    from plr_gym.source import make_level_source

    sampler = make_level_source("plr_ppo_config", 1, None, sampler_kwargs, None, None, None, 1)
    return RemoteLevelSource(
        host_level_source(sampler),
        prefetch=prefetch,
        prefetch_seconds=prefetch_seconds,
        min_refill=min_refill,
    )


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
