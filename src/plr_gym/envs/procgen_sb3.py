"""Batched Procgen with per-episode level choice as a Stable-Baselines3 ``VecEnv``: :class:`ProcgenVecEnv`.

The SB3 face of :mod:`plr_gym.envs.procgen_vector` (one Procgen C environment of ``N`` games, every
episode on the level it is told to play, exactly as ``LevelWrapper(ProcgenLevelEnv(...))`` plays it). Kept
in its own module so that Gymnasium users do not import Stable-Baselines3.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import numpy.typing as npt
from gymnasium import spaces
from stable_baselines3.common.vec_env import VecEnv
from stable_baselines3.common.vec_env.base_vec_env import VecEnvIndices, VecEnvObs, VecEnvStepReturn

from plr_gym.envs.procgen import _NUM_ACTIONS, _OBS_SHAPE, _check_level
from plr_gym.envs.procgen_vector import ProcgenBatch, check_actions
from plr_gym.wrappers.level import LevelWrapper

__all__ = ["ProcgenVecEnv"]


class ProcgenVecEnv(VecEnv):
    """``n_envs`` Procgen games in one Procgen C environment, each episode on a level you choose.

    A Stable-Baselines3 ``VecEnv`` in which sub-env ``i`` behaves exactly as
    ``DummyVecEnv([lambda: LevelWrapper(ProcgenLevelEnv(game, ...)), ...])``'s sub-env ``i`` (same
    observations, rewards, dones and infos, including ``infos[i]["terminal_observation"]``,
    ``infos[i]["TimeLimit.truncated"]``, ``infos[i]["level"]`` and ``infos[i]["level_complete"]``) but is
    stepped by Procgen's own batched C++ loop (see :mod:`plr_gym.envs.procgen_vector` and
    ``benchmarks/procgen_throughput.py``). ``env_is_wrapped(LevelWrapper)`` is ``True`` for every sub-env and
    ``env_method("set_next_level", level, indices=[i])``, ``set_attr("next_level", ...)``,
    ``set_options([{"level": ...}])`` and ``seed()`` act as on that ``LevelWrapper``, so
    :class:`plr_gym.PrioritizedLevelReplay` and :func:`plr_gym.evaluation.evaluate_levels` use it as they
    are. Put ``VecMonitor`` (episode statistics) outside: ``VecMonitor(PrioritizedLevelReplay(venv, ...))``.
    ``terminal_observation`` of an episode the game ended is read from the observations the previous step
    returned (see :class:`~plr_gym.envs.ProcgenVectorEnv`, "Final observations"): do not edit them in place.
    ``env_method("set_level_provider", function, indices=[i])`` sets ``LevelWrapper.level_provider``: the
    engine calls it for env ``i``'s next level when an episode of env ``i`` ends, inside the step, so
    ``PrioritizedLevelReplay(..., level_draw="episode_end")`` works on it
    (:attr:`level_providers_in_process`).

    :param game: one of :data:`~plr_gym.envs.GAMES`.
    :param n_envs: number of games stepped together.
    :param kwargs: as for :class:`~plr_gym.envs.procgen_vector.ProcgenVectorEnv` (``distribution_mode``,
        ``num_levels``, ``start_level``, ``level_cache_size``, ``num_threads``, Procgen options).

    Example:
        >>> import numpy as np
        >>> from plr_gym import PrioritizedLevelReplay
        >>> from plr_gym.envs.procgen_sb3 import ProcgenVecEnv
        >>> venv = PrioritizedLevelReplay(ProcgenVecEnv("bigfish", n_envs=4), levels=range(200), seed=0)
        >>> obs = venv.reset()
        >>> obs.shape
        (4, 64, 64, 3)
        >>> obs, rewards, dones, infos = venv.step(np.zeros(4, dtype=np.int64))
        >>> [info["level"] for info in infos] == venv.step_levels.tolist()
        True
        >>> venv.close()
    """

    #: The sub-envs' level providers run in this process (``level_draw="episode_end"`` is possible).
    level_providers_in_process = True

    def __init__(self, game: str, n_envs: int = 1, **kwargs: Any) -> None:
        self._batch = ProcgenBatch(game, n_envs, **kwargs)
        self.game = game
        super().__init__(
            self._batch.num_envs,
            spaces.Box(0, 255, _OBS_SHAPE, np.uint8),
            spaces.Discrete(_NUM_ACTIONS),
        )
        self._actions: npt.NDArray[np.int32] | None = None

    @property
    def max_episode_steps(self) -> int:
        """Procgen's time limit for this game, after which an episode is truncated."""
        return self._batch.max_episode_steps

    @property
    def levels(self) -> npt.NDArray[np.int64]:
        """Level of each env's current episode, shape ``(n_envs,)`` (a copy)."""
        return self._batch.current.copy()

    # ------------------------------------------------------------------ VecEnv API
    def reset(self) -> VecEnvObs:
        """Reset every env on its level: ``set_options`` ``"level"``, else the seed, else the queued level."""
        n = self.num_envs
        levels = []
        for i in range(n):
            options = self._options[i]
            unknown = set(options) - {"level"}
            if unknown:
                raise ValueError(
                    f"unknown reset options {sorted(map(str, unknown))}; only 'level' is understood"
                )
            option = _check_level(options["level"], "options['level']") if "level" in options else None
            seed = self._seeds[i]
            levels.append(self._batch.choose(i, None if seed is None else _check_level(seed, "seed"), option))
        if self._seeds[0] is not None:
            self._batch.rng = np.random.default_rng(self._seeds[0])
        obs = self._batch.reset(range(n), levels)
        self.reset_infos = [{"level": level} for level in levels]
        self._reset_seeds()
        self._reset_options()
        return obs

    def step_async(self, actions: npt.NDArray[Any]) -> None:
        self._actions = check_actions(actions, self.num_envs)

    def step_wait(self) -> VecEnvStepReturn:
        """Step every env; an ended env's next episode starts in the same step, as in ``DummyVecEnv``."""
        if self._actions is None:
            raise RuntimeError("step_wait() called without step_async()")
        actions, self._actions = self._actions, None
        obs, rewards, terminated, truncated, level_complete, step_levels, ended, final_obs = self._batch.step(
            actions
        )
        # one fresh dict per env, as SB3 wants (VecMonitor adds to them); level_complete can only be True
        # where an episode ended, so those are the only entries that read it
        infos: list[dict[str, Any]] = [
            {"level": level, "level_complete": False} for level in step_levels.tolist()
        ]
        if ended.size == 0:
            return obs, rewards, terminated, infos  # no episode ended: dones are all False, as `terminated`
        dones = terminated | truncated
        current = self._batch.current
        for k, i in enumerate(ended.tolist()):
            info = infos[i]
            info["level_complete"] = bool(level_complete[i])
            info["TimeLimit.truncated"] = bool(truncated[i] and not terminated[i])
            info["terminal_observation"] = final_obs[k]
            self.reset_infos[i] = {"level": int(current[i])}
        return obs, rewards, dones, infos

    def close(self) -> None:
        self._batch.close()

    def get_images(self) -> Sequence[npt.NDArray[Any] | None]:
        return list(self._batch.frames.copy())

    # ------------------------------------------------------------------ LevelWrapper contract
    def _indices(self, indices: VecEnvIndices) -> list[int]:
        return list(self._get_indices(indices))

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        """``level`` or ``next_level`` of the sub-envs ``indices`` (``render_mode``: ``None``)."""
        if attr_name == "render_mode":
            return [None for _ in self._indices(indices)]
        return [self._batch.get_level_attr(attr_name, i) for i in self._indices(indices)]

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        """``set_attr("next_level", level, indices)``: queue ``level`` for those envs' next reset."""
        if attr_name != "next_level":
            raise AttributeError(
                f"only 'next_level' can be set on the sub-envs of ProcgenVecEnv, got {attr_name!r}"
            )
        for i in self._indices(indices):
            self._batch.set_next_level(i, value)

    def env_method(
        self, method_name: str, *method_args: Any, indices: VecEnvIndices = None, **method_kwargs: Any
    ) -> list[Any]:
        """``env_method("set_next_level", level, indices=...)`` and ``env_method("set_level_provider",
        function, indices=...)``, the ``LevelWrapper`` methods."""
        if method_name not in ("set_next_level", "set_level_provider"):
            raise AttributeError(
                "ProcgenVecEnv sub-envs only offer the LevelWrapper methods 'set_next_level' and "
                f"'set_level_provider', got {method_name!r}"
            )
        (value,) = (*method_args, *method_kwargs.values())
        targets = self._indices(indices)
        for i in targets:
            if method_name == "set_next_level":
                self._batch.set_next_level(i, value)
            else:
                self._batch.set_level_provider(i, value)
        return [None] * len(targets)

    def env_is_wrapped(
        self, wrapper_class: type[gym.Wrapper[Any, Any, Any, Any]], indices: VecEnvIndices = None
    ) -> list[bool]:
        """``True`` for ``LevelWrapper`` (and its bases): every sub-env honours its level contract."""
        wrapped = issubclass(LevelWrapper, wrapper_class)
        return [wrapped for _ in self._indices(indices)]

    def get_state(self, index: int) -> bytes:
        """Procgen's serialized state of env ``index``'s game (what stock Procgen's ``get_state`` returns)."""
        return self._batch.get_state(index)

    def __repr__(self) -> str:
        return f"<ProcgenVecEnv {self.game} n_envs={self.num_envs}>"
