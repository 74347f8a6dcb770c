"""Prioritized Level Replay for Stable-Baselines3 vectorized environments.

:class:`PrioritizedLevelReplay` is a :class:`~stable_baselines3.common.vec_env.VecEnvWrapper`: it draws
each sub-environment's levels from a :class:`~plr_gym.LevelSampler` and tells each sub-environment's
:class:`~plr_gym.wrappers.LevelWrapper` which level to play next. Only level ids cross process
boundaries; the sampler stays in the main process.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv, VecEnv, VecEnvWrapper
from stable_baselines3.common.vec_env.base_vec_env import VecEnvObs, VecEnvStepReturn

from plr_gym._levels import level_key
from plr_gym.level_buffer import LevelBuffer
from plr_gym.sampler import LevelSampler
from plr_gym.scoring import EpisodeScorer
from plr_gym.source import LevelSource, ScoreWatch, make_level_source
from plr_gym.wrappers._access import SourceAccess
from plr_gym.wrappers._draw import check_level_draw, level_provider
from plr_gym.wrappers.level import LevelWrapper

__all__ = ["PrioritizedLevelReplay"]

#: Steps whose levels are kept for score_rollout (a rollout may not be longer).
_MAX_LOGGED_STEPS = 1 << 16

# What a SubprocVecEnv pipe raises when the worker process on its other end has died.
_WORKER_DEATH = (EOFError, ConnectionError)


class PrioritizedLevelReplay(SourceAccess, VecEnvWrapper):
    """Play the levels a :class:`~plr_gym.LevelSampler` chooses, in a ``DummyVecEnv`` or ``SubprocVecEnv``.

    Each sub-environment must be wrapped in :class:`~plr_gym.wrappers.LevelWrapper`, e.g.
    ``make_vec_env(env_id, n_envs, wrapper_class=LevelWrapper)``. Every ``infos[i]["level"]`` is the level
    of the episode that step's transition belongs to: on the step that ends an episode, the finished
    episode's level (the first observation of the next episode, which SB3 returns in the same step, belongs
    to ``venv.reset_infos[i]["level"]``, also :attr:`current_levels` ``[i]`` after the step).

    **One-episode lag.** SB3 resets a finished sub-environment inside ``step_wait`` (in the worker process
    for ``SubprocVecEnv``), without passing a seed, so the level of an env's next episode has to be queued
    in its ``LevelWrapper`` *before* the step that ends the current episode. This wrapper draws it as soon
    as the current episode starts: the level of env ``i``'s next episode (:attr:`next_levels` ``[i]``) is
    chosen before the score of its current episode reaches the sampler. Exactly one level per env is queued
    ahead, so the lag is at most one episode per env. (:meth:`reset` draws ``2 * num_envs`` levels: the
    first episode's and the queued one of each env.) ``level_draw="episode_end"`` removes the lag: see below.

    **When levels are drawn** (``level_draw``). ``"episode_start"`` (default): as just described.
    ``"episode_end"``: env ``i``'s next level is drawn from the source as it is when its previous episode
    ends, as level-replay does (``level_replay/envs.py`` L151-155): the sub-env calls back into this wrapper
    at its autoreset (:attr:`~plr_gym.wrappers.LevelWrapper.level_provider`), in env index order, and starts
    the drawn level at once (no second reset; ``infos[i]["terminal_observation"]`` and ``infos[i]["level"]``
    stay the finished episode's). This needs the sub-envs in this process: a ``DummyVecEnv`` or plr_gym's
    batched ``ProcgenVecEnv``; a ``SubprocVecEnv`` is refused (it resets inside the worker process, so each
    ended episode would cost a round trip to the learner), and so is a level source that plans whole
    rollouts (``buffer=``).

    **Order of wrappers.** Wrap the raw ``DummyVecEnv``/``SubprocVecEnv`` (or any VecEnv that is not a
    ``VecEnvWrapper``); ``VecNormalize``, ``VecFrameStack``, ``VecMonitor``, ``VecTransposeImage``... go
    outside: ``VecNormalize(PrioritizedLevelReplay(venv, ...))``.

    **Seeds.** A sub-environment's reset seed is its level; ``seed()`` (called by ``PPO(..., seed=...)``) is
    forwarded but cannot change which levels are played, which is the sampler's ``seed``.

    **A forgotten callback.** Scores reach the sampler through :class:`~plr_gym.PLRCallback` (or
    ``OffPolicyPLRCallback``). Without it, sampling stays uniform forever; the first rollout of
    ``model.learn`` that ends with completed episodes and no score makes the wrapper warn once, at the
    user's ``model.learn`` line, with :class:`~plr_gym.source.NoScoresWarning` ("Did you add
    PLRCallback?"); stepped by hand, it warns after ``ScoreWatch.NO_SCORE_STEPS`` (6,144) steps.

    **Errors.** If a sub-environment raises (or a ``SubprocVecEnv`` worker dies), the exception reaches the
    caller and the sampler stays consistent (a level drawn for an episode that never ran is harmless);
    call :meth:`reset` (or :meth:`close`) before stepping again. :meth:`close` does not hang or leave
    worker processes behind after a worker died.

    :param venv: the vectorized environment; its sub-environments wrapped in ``LevelWrapper``.
    :param sampler: the level sampler (or any :class:`~plr_gym.source.LevelSource`). Alternatively pass
        :class:`~plr_gym.LevelSampler`'s keyword arguments (at least ``levels=``) and the wrapper builds its
        own; not both. The wrapper talks to it as :attr:`source`.
    :param sampler_kwargs: keyword arguments for :class:`~plr_gym.LevelSampler` when ``sampler`` is ``None``.
    :param buffer: a :class:`~plr_gym.LevelBuffer`: Robust PLR over an open-ended ``generator`` instead of a
        finite level set. At each rollout start (:meth:`begin_rollout`, called by
        :class:`~plr_gym.PLRCallback`) the wrapper replays buffer levels or tries new ones, one level per
        env for the whole rollout; :meth:`end_rollout` closes it. With ``buffer=`` only ``generator``,
        ``mutator``, ``n_mutations``, ``strategy`` (default ``"positive_value_loss"``) and ``seed`` apply.
    :param generator: buffer mode: ``generator(rng) -> level`` makes a new level (an int seed, or any
        value the env accepts as ``reset(options={"level": level})``).
    :param mutator: buffer mode, ACCEL: ``mutator(level, rng) -> level``; after a replay rollout, the next
        rollout evaluates one child of each replayed level (``n_mutations`` edits each) and offers it to
        the buffer.
    :param n_mutations: edits per ACCEL child.
    :param level_draw: ``"episode_start"`` (default) or ``"episode_end"``: when each env's next level is
        drawn (see above).

    Example:
        >>> import gymnasium as gym
        >>> import minigrid  # registers the MiniGrid envs
        >>> from minigrid.wrappers import ImgObsWrapper
        >>> from stable_baselines3.common.vec_env import DummyVecEnv
        >>> from plr_gym import LevelSampler
        >>> from plr_gym.wrappers import LevelWrapper
        >>> from plr_gym.wrappers.sb3 import PrioritizedLevelReplay
        >>> make = lambda: LevelWrapper(ImgObsWrapper(gym.make("MiniGrid-DoorKey-5x5-v0", max_steps=5)))
        >>> venv = PrioritizedLevelReplay(DummyVecEnv([make, make]), sampler=LevelSampler(range(10), seed=0))
        >>> obs = venv.reset()
        >>> playing = venv.current_levels
        >>> obs, rewards, dones, infos = venv.step(np.array([0, 0]))
        >>> [info["level"] for info in infos] == playing.tolist()
        True
        >>> venv.close()
    """

    def __init__(
        self,
        venv: VecEnv,
        sampler: LevelSampler | None = None,
        *,
        buffer: LevelBuffer | None = None,
        generator: Callable[[np.random.Generator], Any] | None = None,
        mutator: Callable[[Any, np.random.Generator], Any] | None = None,
        n_mutations: int = 1,
        level_draw: str = "episode_start",
        **sampler_kwargs: Any,
    ) -> None:
        owner = type(self).__name__
        if isinstance(venv, VecEnvWrapper):
            raise ValueError(
                f"{owner} must wrap the raw DummyVecEnv/SubprocVecEnv, got {type(venv).__name__} around "
                f"{type(venv.unwrapped).__name__}. Put VecNormalize, VecFrameStack, VecMonitor, "
                f"VecTransposeImage... outside: VecNormalize({owner}(venv, ...))"
            )
        if not isinstance(venv, VecEnv):
            raise TypeError(f"{owner} wraps a stable_baselines3 VecEnv, got {type(venv).__name__}")
        self.source: LevelSource = make_level_source(
            owner, venv.num_envs, sampler, sampler_kwargs, buffer, generator, mutator, n_mutations
        )
        self.level_draw = check_level_draw(owner, level_draw, self.source)
        if self.level_draw == "episode_end":
            _check_in_process(owner, venv)
        wrapped = venv.env_is_wrapped(LevelWrapper)
        if not all(wrapped):
            missing = [i for i, w in enumerate(wrapped) if not w]
            raise ValueError(
                f"{owner}: sub-environments {missing} are not wrapped in plr_gym.wrappers.LevelWrapper, "
                "so they cannot be told which level to play. Build the VecEnv with "
                "make_vec_env(env_id, n_envs, wrapper_class=LevelWrapper) (or wrapper_class=lambda env: "
                "LevelWrapper(YourWrapper(env))), "
                "or DummyVecEnv([lambda: LevelWrapper(gym.make(env_id)), ...])"
            )
        super().__init__(venv)
        n = self.num_envs
        dtype = self.source.level_dtype
        self._current: npt.NDArray[Any] = np.zeros(n, dtype=dtype)
        self._next: npt.NDArray[Any] = np.zeros(n, dtype=dtype)
        self._step_levels: npt.NDArray[Any] = np.zeros(n, dtype=dtype)
        self._user_options: list[dict[str, Any]] = [{} for _ in range(n)]
        # the level of every step since the last reset or score_rollout, for the scorer
        self._level_log: deque[npt.NDArray[Any]] = deque(maxlen=_MAX_LOGGED_STEPS)
        self._needs_reset = True  # before the first reset, and after anything raised mid-step
        self.steps_since_reset = 0
        self._score_watch = ScoreWatch(
            owner, "Did you add PLRCallback? model.learn(..., callback=PLRCallback())"
        )
        if self.level_draw == "episode_end":  # each sub-env asks for its next level when it autoresets
            for i in range(n):
                self.venv.env_method(
                    "set_level_provider", level_provider(self.source, i, self._next), indices=[i]
                )

    # ------------------------------------------------------------------ levels
    @property
    def current_levels(self) -> npt.NDArray[np.int64]:
        """Level each env is playing, i.e. of its latest observation; shape ``(num_envs,)``, a copy.

        Valid after :meth:`reset`.
        """
        return self._current.copy()

    @property
    def step_levels(self) -> npt.NDArray[np.int64]:
        """Level of each env's transition in the latest :meth:`step` (what ``infos[i]["level"]`` holds),
        shape ``(num_envs,)``; a read-only view (each step records its levels in a new array)."""
        view = self._step_levels.view()
        view.flags.writeable = False
        return view

    @property
    def next_levels(self) -> npt.NDArray[np.int64]:
        """Level queued for each env's next episode, shape ``(num_envs,)``, a copy (see the lag above).

        With ``level_draw="episode_end"`` nothing is queued: the level drawn last for each env (its current
        level once the episode it was drawn for has started)."""
        return self._next.copy()

    def _queue(self, indices: npt.NDArray[np.int64], levels: Sequence[Any] | npt.NDArray[Any]) -> None:
        """Queue ``levels[k]`` as the next level of env ``indices[k]`` (one ``env_method`` call per env)."""
        if isinstance(levels, np.ndarray):
            levels = levels.tolist()
        for i, level in zip(indices.tolist(), levels):
            self.venv.env_method("set_next_level", level, indices=[i])
            self._next[i] = level

    def _check_reset_levels(self, indices: npt.NDArray[np.int64]) -> None:
        """Check that the envs in ``indices`` report the level they were told to play."""
        reset_infos = self.venv.reset_infos
        current = self._current
        for i in indices.tolist():
            reported = reset_infos[i].get("level", current[i])
            if type(reported) is int and current.dtype.kind == "i" and reported == current[i]:
                continue  # the common case: int levels, equal (level_key would say the same)
            if level_key(reported) != level_key(current[i]):
                sharing = [j for j, info in enumerate(reset_infos) if info is reset_infos[i]]
                if len(sharing) > 1:
                    names = ", ".join(map(str, sharing[:-1])) + f" and {sharing[-1]}"
                    raise RuntimeError(
                        f"envs {names} share one info dict object, so each reports the level of the last "
                        f"env written to it (env {i}: {reported!r}, chosen {current[i]!r}): the VecEnv (or "
                        "the env) must return a new dict per env"
                    )
                raise RuntimeError(
                    f"env {i} started an episode on level {reported!r} but {type(self).__name__} chose level "
                    f"{self._current[i]!r}: something between the VecEnv and the LevelWrapper passes its "
                    "own seed or level to reset(); make LevelWrapper the outermost gymnasium wrapper"
                )

    # ------------------------------------------------------------------ VecEnv API
    def set_options(self, options: list[dict[str, Any]] | dict[str, Any] | None = None) -> None:
        """Options for the next :meth:`reset` (used once, as in SB3); the level is added by this wrapper.

        :param options: one dict for all envs, a list of one dict per env, or ``None``. Must not contain
            ``"level"``: the sampler chooses the levels.
        """
        n = self.num_envs
        if options is None:
            per_env: list[dict[str, Any]] = [{} for _ in range(n)]
        elif isinstance(options, dict):
            per_env = [dict(options) for _ in range(n)]
        else:
            per_env = [dict(o) for o in options]
            if len(per_env) != n:
                raise ValueError(
                    f"options must be a dict or a list of {n} dicts, got a list of {len(per_env)}"
                )
        if any("level" in o for o in per_env):
            raise ValueError("options must not contain 'level': the sampler chooses each env's level")
        self._user_options = per_env

    def reset(self) -> VecEnvObs:
        """Reset every env on a freshly sampled level and queue the level of its next episode.

        :return: the first observations, shape ``(num_envs, *obs_shape)``.
        """
        n = self.num_envs
        self._needs_reset = True
        everyone = np.arange(n)
        self.source.begin_rollout()  # a plan-making source plans one if none is open (else: a no-op)
        drawn = self.source.next_levels(everyone)
        first: list[Any] = drawn.tolist() if isinstance(drawn, np.ndarray) else list(drawn)
        queued = self.source.next_levels(everyone) if self.level_draw == "episode_start" else None
        self.venv.set_options([{**o, "level": lvl} for o, lvl in zip(self._user_options, first)])
        self._user_options = [{} for _ in range(n)]
        try:
            obs = self.venv.reset()
            for i, lvl in enumerate(first):
                self._current[i] = lvl
            self._check_reset_levels(np.arange(n))
            if queued is not None:
                self._queue(np.arange(n), queued)
            else:
                self._next[:] = self._current
        except _WORKER_DEATH as exc:
            raise _worker_died("reset") from exc
        except Exception as exc:
            explained = self.source.refused(exc, first)
            if explained is not None:
                raise explained from exc
            raise
        self.reset_infos = self.venv.reset_infos
        self._needs_reset = False
        self.steps_since_reset = 0
        self._level_log.clear()  # episodes before a reset never continue after it
        return obs

    def step_async(self, actions: npt.NDArray[Any]) -> None:
        if self._needs_reset:
            raise RuntimeError(
                f"{type(self).__name__}: call reset() before step() (first use, or a previous call raised)"
            )
        try:
            self.venv.step_async(actions)
        except _WORKER_DEATH as exc:
            self._needs_reset = True
            raise _worker_died("step") from exc

    def step_wait(self) -> VecEnvStepReturn:
        """Step every env; ``infos[i]["level"]`` is the level of env ``i``'s transition."""
        self._needs_reset = True
        try:
            obs, rewards, dones, infos = self.venv.step_wait()
            # a new array each step, shared by the log and step_levels (neither is ever written again)
            self._step_levels = self._current.copy()
            self._level_log.append(self._step_levels)
            self.steps_since_reset += 1
            done = np.asarray(dones).nonzero()[0]
            self._score_watch.step(done.size, self.source)
            if done.size:
                # Autoreset envs started the episode queued for them (episode_end: drawn for them at the
                # autoreset, into self._next); episode_start: queue the one after.
                self._current[done] = self._next[done]
                self._check_reset_levels(done)
                if self.level_draw == "episode_start":
                    self._queue(done, self.source.next_levels(done))
        except _WORKER_DEATH as exc:
            raise _worker_died("step") from exc
        self.reset_infos = self.venv.reset_infos
        self._needs_reset = False
        return obs, rewards, dones, infos

    def close(self) -> None:
        """Close the VecEnv; after a ``SubprocVecEnv`` worker died, shut the others down without hanging."""
        venv = self.venv
        if self._needs_reset and isinstance(venv, SubprocVecEnv) and not venv.closed:
            # SubprocVecEnv.close() would wait for step results that were already received or will never
            # come; tell every live worker to close and reap them instead.
            _shutdown_workers(venv)
            return
        venv.close()

    # ------------------------------------------------------------------ scoring
    def score_rollout(self, scorer: EpisodeScorer | None, **arrays: Any) -> list[tuple[Any, float]]:
        """Score the rollout just collected: ``scorer.process_rollout(levels=..., **arrays)`` with the level
        of each of the last ``n_steps`` steps as this wrapper played it (``n_steps`` = the rows of
        ``arrays["episode_starts"]``); the scorer reports the completed episodes to the level source.

        :class:`~plr_gym.PLRCallback` calls it at the end of every rollout with the rollout buffer's arrays
        (``None`` for a strategy that needs no scores: the steps are only forgotten).

        :return: the ``(level, score)`` pairs reported.
        :raises ValueError: if the arrays have more rows than steps were taken since the last reset or
            report (nothing is consumed then).
        """
        if scorer is None:
            self._level_log.clear()
            return []
        n_steps = int(np.shape(arrays["episode_starts"])[0])
        if n_steps > len(self._level_log):
            raise ValueError(
                f"score_rollout got {n_steps} rows of rollout data but only {len(self._level_log)} steps "
                "were taken since the last reset or report"
            )
        rows = list(self._level_log)[len(self._level_log) - n_steps :]
        reported = scorer.process_rollout(levels=np.stack(rows), **arrays)
        self._level_log.clear()  # only once the report was accepted
        return reported

    # ------------------------------------------------------------------ the level source
    # sampler, buffer, rollout_mode, last_rollout_mode: SourceAccess
    def begin_rollout(self) -> str:
        """Start a rollout of the level source; returns its :attr:`rollout_mode`.

        Buffer mode: decide what the next rollout plays (``"replay"``: levels drawn from the buffer,
        ``"new"``: levels from the generator, ``"mutate"``: ACCEL's mutated copies of the levels replayed in
        the previous rollout) and assign one level per env; every episode of an env during the rollout
        plays its assigned level. Call :meth:`reset` afterwards so the envs start on them
        (:class:`~plr_gym.PLRCallback` does both). With a :class:`~plr_gym.LevelSampler` levels are drawn
        per episode and the mode is ``"none"``.
        """
        self.source.begin_rollout()
        return self.source.rollout_mode

    def end_rollout(self) -> None:
        """Close the level source's rollout (buffer mode, ACCEL: mutate the levels it replayed)."""
        self.source.end_rollout()


def _check_in_process(owner: str, venv: VecEnv) -> None:
    """``level_draw="episode_end"`` needs sub-envs that can call the wrapper at their autoreset."""
    if isinstance(venv, DummyVecEnv) or getattr(venv, "level_providers_in_process", False):
        return
    why = (
        "its sub-envs reset inside their worker processes during step_wait, so drawing each level when the "
        "previous episode ends would need a round trip to the learner's process per ended episode"
        if isinstance(venv, SubprocVecEnv)
        else "it is neither a DummyVecEnv nor plr_gym's ProcgenVecEnv, whose sub-envs live in this process "
        "and can ask the wrapper for a level when they autoreset"
    )
    raise ValueError(
        f"{owner}: level_draw='episode_end' cannot be used with {type(venv).__name__}: {why}. Use a "
        "DummyVecEnv (or plr_gym.envs.ProcgenVecEnv for Procgen), or level_draw='episode_start'"
    )


def _worker_died(call: str) -> RuntimeError:
    return RuntimeError(
        f"a SubprocVecEnv worker process died during {call}() (its env raised; the worker printed the "
        "traceback above). The sampler is unaffected; close() this VecEnv and build a new one."
    )


def _shutdown_workers(venv: SubprocVecEnv, timeout: float = 10.0) -> None:
    """Close a ``SubprocVecEnv`` whose pipes are out of step: ask each worker to close, then reap it."""
    remotes: Sequence[Any] = venv.remotes
    for remote in remotes:
        try:
            remote.send(("close", None))
        except (OSError, ValueError):  # the worker is gone, or the pipe is already closed
            pass
    for process in venv.processes:
        process.join(timeout)
        if process.is_alive():
            process.terminate()
            process.join(timeout)
    for remote in remotes:
        remote.close()
    venv.closed = True
