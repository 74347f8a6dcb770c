"""How an episode cut by a time limit ends: bootstrapped (SB3's default) or terminal (the PLR paper's code).

SB3 reads ``infos[i]["TimeLimit.truncated"]`` at an episode's end: when it is true, it adds
``gamma * V(final observation)`` to the last reward, so the value target of a time-limited episode
bootstraps as if the episode went on. The PLR paper's code (level-replay) ends the episode there: its
Procgen episodes end by time limit with ``done`` and nothing else (its rollout storage records
``bad_masks`` but never reads them), so the value target is cut to the rewards received.

:class:`TimeLimitAsTerminal` makes an SB3 ``VecEnv`` behave as level-replay: it removes
``"TimeLimit.truncated"`` from the infos and records the ending under ``"TimeLimit.terminal"`` instead.
Put it anywhere over the env that SB3 steps (over :class:`~plr_gym.PrioritizedLevelReplay`, which must
wrap the raw ``VecEnv``; :func:`plr_gym.training.build_run` does, with ``time_limit="terminal"``). The
level scores of :class:`~plr_gym.PLRCallback` follow the same ending: they are computed from the rollout
buffer's rewards and advantages, which SB3 bootstraps only where it reads ``"TimeLimit.truncated"``.

Example:
    >>> import gymnasium as gym
    >>> from stable_baselines3.common.env_util import make_vec_env
    >>> venv = TimeLimitAsTerminal(make_vec_env("CartPole-v1", n_envs=1, env_kwargs={"max_episode_steps": 3}))
    >>> _ = venv.reset()
    >>> for _ in range(3):
    ...     obs, rewards, dones, infos = venv.step([0])
    >>> bool(dones[0]), "TimeLimit.truncated" in infos[0], infos[0]["TimeLimit.terminal"]
    (True, False, True)
"""

from __future__ import annotations

from stable_baselines3.common.vec_env import VecEnv, VecEnvWrapper
from stable_baselines3.common.vec_env.base_vec_env import VecEnvObs, VecEnvStepReturn

from plr_gym.reference import TIME_LIMITS

__all__ = ["TIME_LIMITS", "TimeLimitAsTerminal"]


class TimeLimitAsTerminal(VecEnvWrapper):
    """Time-limit endings become terminal: ``infos[i]["TimeLimit.truncated"]`` is removed, and
    ``infos[i]["TimeLimit.terminal"] = True`` marks an episode that the time limit ended.

    Observations, rewards and ``dones`` are unchanged; only what SB3 (and the PLR scorer) reads as
    "truncated, bootstrap with V(final observation)" is taken away.

    :param venv: the SB3 ``VecEnv`` to wrap.
    """

    def __init__(self, venv: VecEnv) -> None:
        super().__init__(venv)

    def reset(self) -> VecEnvObs:
        return self.venv.reset()

    def step_wait(self) -> VecEnvStepReturn:
        obs, rewards, dones, infos = self.venv.step_wait()
        for info in infos:
            if info.pop("TimeLimit.truncated", False):
                info["TimeLimit.terminal"] = True
        return obs, rewards, dones, infos

    def __repr__(self) -> str:
        return f"TimeLimitAsTerminal({self.venv!r})"
