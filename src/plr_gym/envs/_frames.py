"""The observation space of plr_gym's Procgen envs: a ``Box`` of RGB frames that explains itself when
a wrapper expects MiniGrid's ``Dict`` observation.

MiniGrid's wrappers (``ImgObsWrapper``, ``RGBImgObsWrapper``, ``FlatObsWrapper``...) read
``env.observation_space.spaces["image"]`` or ``env.observation_space["image"]``. On a Procgen env,
a plain ``Box``, they failed with ``AttributeError: 'Box' object has no attribute 'spaces'``; this space
answers both with an error that says what is wrong and what to write instead.

Example:
    >>> import numpy as np
    >>> space = FrameSpace(0, 255, (64, 64, 3), np.uint8, env_id="plr_gym/procgen-coinrun-v0")
    >>> space.spaces
    Traceback (most recent call last):
    ...
    AttributeError: plr_gym/procgen-coinrun-v0 observes 64x64x3 RGB frames (a Box), not MiniGrid's Dict ...
    >>> space == FrameSpace(0, 255, (64, 64, 3), np.uint8)
    True
"""

from __future__ import annotations

from typing import Any

from gymnasium import spaces

__all__ = ["FrameSpace", "make_procgen_level_env"]


class FrameSpace(spaces.Box):
    """A ``Box`` of frames (equal to the plain ``Box`` it copies) whose ``spaces`` attribute and
    ``["image"]`` item raise an explanation instead of Python's bare ``AttributeError``/``TypeError``.

    :param env_id: the env's Gymnasium id, for the message.
    """

    def __init__(self, *args: Any, env_id: str = "plr_gym/procgen-<game>-v0", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.env_id = env_id

    def _explain(self) -> str:
        shape = "x".join(str(n) for n in self.shape)
        return (
            f"{self.env_id} observes {shape} RGB frames (a Box), not MiniGrid's Dict with an 'image' key: "
            "MiniGrid's observation wrappers (ImgObsWrapper, FlatObsWrapper, ...) do not apply to Procgen. "
            f"Wrap Procgen envs in LevelWrapper alone, e.g. make_vec_env({self.env_id!r}, n_envs=8, "
            "wrapper_class=LevelWrapper), and train a CnnPolicy"
        )

    def __getattr__(self, name: str) -> Any:  # only for attributes that do not exist
        if name == "spaces":
            raise AttributeError(self._explain())
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __getitem__(self, key: Any) -> Any:
        raise TypeError(self._explain())


def make_procgen_level_env(**kwargs: Any) -> Any:
    """Entry point of ``plr_gym/procgen-<game>-v0``: a :class:`~plr_gym.envs.ProcgenLevelEnv` whose
    observation space is a :class:`FrameSpace`."""
    from plr_gym.envs.procgen import ProcgenLevelEnv

    env = ProcgenLevelEnv(**kwargs)
    box = env.observation_space
    assert isinstance(box, spaces.Box)
    env.observation_space = FrameSpace(
        box.low, box.high, box.shape, box.dtype, env_id=f"plr_gym/procgen-{env.game}-v0"
    )
    return env
