"""When the ``PrioritizedLevelReplay`` wrappers draw each env's next level: ``level_draw``.

- ``"episode_start"`` (the default): env ``i``'s next level is drawn when its current episode *starts* and
  queued in the sub-env (``set_next_level``), because SB3 and Gymnasium's ``SAME_STEP`` vector envs reset a
  finished sub-env inside the step, without asking anyone. The draw sees the source as it was up to one
  episode earlier (with rollouts shorter than episodes: several updates earlier).
- ``"episode_end"``: env ``i``'s next level is drawn from the source as it is when its previous episode
  *ends* (after the step that ends it, before the next episode's first observation is returned), as
  level-replay does (``level_replay/envs.py`` L151-155, ``VecPyTorchProcgen.step_wait``: for each done env,
  ``seed = level_sampler.sample(); venv.seed(seed, e)``). The wrapper hands each sub-env a *level provider*,
  a function the sub-env calls when it autoresets (``LevelWrapper.level_provider``; the batched Procgen envs
  call it from their engine's step), so the ended env starts its next level at once, with no second reset,
  in env index order as level-replay's loop. This needs the sub-envs in the learner's process: SB3's
  ``DummyVecEnv`` and plr_gym's ``ProcgenVecEnv``, Gymnasium's ``SyncVectorEnv`` and ``ProcgenVectorEnv``
  (Gymnasium's ``NEXT_STEP`` mode draws at the end step and queues the level for the reset step instead,
  which works with ``AsyncVectorEnv`` too).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from plr_gym.reference import LEVEL_DRAWS

if TYPE_CHECKING:
    from plr_gym.source import LevelSource


def check_level_draw(owner: str, level_draw: object, source: LevelSource) -> str:
    """``level_draw`` checked against :data:`LEVEL_DRAWS` and against what the source can do."""
    if not isinstance(level_draw, str) or level_draw not in LEVEL_DRAWS:
        raise ValueError(f"{owner}: level_draw must be one of {', '.join(LEVEL_DRAWS)}, got {level_draw!r}")
    if level_draw == "episode_end" and source.plans_rollouts:
        raise ValueError(
            f"{owner}: level_draw='episode_end' draws each episode's level when the previous one ends, but "
            f"the level source ({type(source).__name__}) plans one level per env for a whole rollout (Robust "
            "PLR / ACCEL): there is nothing to draw at an episode's end. Use level_draw='episode_start'"
        )
    return level_draw


def level_provider(source: LevelSource, env: int, drawn: Any) -> Callable[[], Any]:
    """The function env ``env``'s sub-env calls at its autoreset: one level from ``source``, recorded in
    ``drawn[env]`` (the wrapper's record of what each env was given)."""
    index = np.array([env], dtype=np.int64)

    def provide() -> Any:
        levels = source.next_levels(index)
        level = levels[0].item() if isinstance(levels, np.ndarray) else levels[0]
        drawn[env] = level
        return level

    provide.__qualname__ = f"level_provider(env={env})"
    return provide
