"""The package's shape: a torch-free core, lazy public names, one registry of strategies, one protocol."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

import plr_gym
from plr_gym import LevelBuffer, LevelSampler
from plr_gym.scoring import DISCRETE_ONLY, OUTCOME_STRATEGIES, SCORE_FUNCTIONS, STRATEGY_SPECS, strategy_spec
from plr_gym.source import BufferLevelSource, LevelSource

CORE = (
    "plr_gym.sampler",
    "plr_gym.level_buffer",
    "plr_gym.scoring",
    "plr_gym.source",
    "plr_gym.vector",
    "plr_gym.prompts",
)


def _run(code: str) -> dict[str, object]:
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_the_core_imports_without_torch_or_sb3_in_under_a_second_of_cpu() -> None:
    out = _run(
        "import sys, time, json\n"
        "for heavy in ('torch', 'stable_baselines3', 'transformers', 'trl', 'jax', 'jaxlib'):\n"
        "    sys.modules[heavy] = None\n"
        "t = time.process_time()\n"
        f"import {', '.join(CORE)}\n"
        "cpu = time.process_time() - t\n"
        "from plr_gym import LevelSampler\n"
        "print(json.dumps({'cpu': cpu, 'mods': sorted(m for m in sys.modules if m.startswith('plr_gym'))}))"
    )
    assert float(out["cpu"]) < 1.0  # type: ignore[arg-type]
    loaded = set(out["mods"])  # type: ignore[call-overload]
    assert set(CORE) <= loaded
    sb3_side = {"plr_gym.callbacks", "plr_gym.wrappers.sb3", "plr_gym.offpolicy", "plr_gym.evaluation"}
    assert not loaded & sb3_side


def test_import_plr_gym_loads_no_torch_and_the_lazy_names_resolve() -> None:
    out = _run(
        "import sys, json\n"
        "import plr_gym\n"
        "before = 'torch' in sys.modules or 'stable_baselines3' in sys.modules\n"
        "from plr_gym import PLRCallback, PrioritizedLevelReplay, PERDQN\n"
        "print(json.dumps({'before': before, 'after': 'stable_baselines3' in sys.modules,\n"
        "                  'same': PLRCallback is plr_gym.callbacks.PLRCallback}))"
    )
    assert out == {"before": False, "after": True, "same": True}
    assert set(plr_gym.__all__) <= set(dir(plr_gym))
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        plr_gym.Nope  # noqa: B018


def test_strategy_tuples_derive_from_the_one_registry() -> None:
    from plr_gym.offpolicy import OFF_POLICY_STRATEGIES
    from plr_gym.sampler import STRATEGIES

    assert STRATEGIES == tuple(STRATEGY_SPECS)
    assert set(SCORE_FUNCTIONS) == {n for n, s in STRATEGY_SPECS.items() if s.uses_scores}
    assert DISCRETE_ONLY == {"least_confidence", "min_margin"} and OUTCOME_STRATEGIES == {"learnability"}
    assert OFF_POLICY_STRATEGIES == ("one_step_td_error", "random", "sequential")
    assert [n for n, s in STRATEGY_SPECS.items() if s.needs_policy] == [
        "policy_entropy",
        "least_confidence",
        "min_margin",
    ]
    # a user callable: scores, no policy, no outcome, fine for a LevelBuffer, not off-policy
    spec = strategy_spec(lambda ep: 0.0)
    assert (spec.uses_scores, spec.needs_policy, spec.outcome, spec.level_buffer, spec.off_policy) == (
        True,
        False,
        False,
        True,
        False,
    )
    with pytest.raises(ValueError, match="choose one of value_l1"):
        strategy_spec("value_l2")


def test_both_sources_satisfy_the_protocol() -> None:
    sampler = LevelSampler(range(5), seed=0)
    buffer = BufferLevelSource(LevelBuffer(capacity=3, seed=0), lambda rng: int(rng.integers(9)), n_envs=2)
    for source in (sampler, buffer):
        assert isinstance(source, LevelSource)
    assert sampler.level_dtype == np.int64 and buffer.level_dtype == np.dtype(object)
    assert (sampler.plans_rollouts, buffer.plans_rollouts) == (False, True)
    assert sampler.retained_levels() is None


def test_buffer_source_plans_a_rollout_and_hands_out_its_levels_until_the_next_one() -> None:
    source = BufferLevelSource(
        LevelBuffer(capacity=4, replay_prob=1.0, min_fill_ratio=0.5, seed=0),
        lambda rng: int(rng.integers(100, 200)),
        n_envs=2,
        seed=0,
    )
    first = source.next_levels(np.arange(2))  # no plan yet: one is opened
    assert source.rollout_mode == "new" and not source.begin_rollout()  # the open plan is kept
    assert source.next_levels(np.array([1, 0])) == first[::-1]
    source.update_batch(first, [1.0, 2.0])
    source.end_rollout()
    assert source.last_rollout_mode == "new" and source.next_levels(np.arange(2)) == first  # until begin
    assert source.begin_rollout() and source.rollout_mode == "replay"
    assert set(source.next_levels(np.arange(2))) <= set(first)
    stats = source.rollout_stats(full=True)
    assert stats["buffer_size"] == 2 and stats["levels_inserted"] == 2 and stats["score_max"] == 2.0
    assert sorted(source.retained_levels()) == sorted(first)


def test_a_source_planned_for_other_n_envs_is_refused() -> None:
    from minigrid.wrappers import FlatObsWrapper
    from stable_baselines3.common.vec_env import DummyVecEnv

    from plr_gym import LevelWrapper, PrioritizedLevelReplay
    from plr_gym.envs.maze import LayoutMazeEnv, random_maze_level

    source = BufferLevelSource(LevelBuffer(capacity=3), lambda rng: random_maze_level(rng, size=6), n_envs=2)
    venv = DummyVecEnv([lambda: LevelWrapper(FlatObsWrapper(LayoutMazeEnv(size=6)))] * 4)
    with pytest.raises(ValueError, match="n_envs=2, the vector env 4 envs"):
        PrioritizedLevelReplay(venv, sampler=source)
    venv.close()


def test_submodules_are_attributes_of_the_lazy_package() -> None:
    out = _run(
        "import json, plr_gym\n"
        "print(json.dumps([plr_gym.wrappers.LevelWrapper.__name__, plr_gym.callbacks.__name__,\n"
        "                  plr_gym.replay.PERDQN.__name__]))"
    )
    assert out == ["LevelWrapper", "plr_gym.callbacks", "PERDQN"]  # type: ignore[comparison-overlap]


def test_sb3_wrapper_scores_the_steps_it_played() -> None:
    """PLRCallback hands the rollout arrays to the wrapper, which adds the level of every step it played."""
    from minigrid.wrappers import FlatObsWrapper
    from stable_baselines3.common.env_util import make_vec_env

    from plr_gym import EpisodeScorer, LevelWrapper, PrioritizedLevelReplay

    venv = make_vec_env(
        "MiniGrid-Empty-5x5-v0",
        n_envs=2,
        wrapper_class=lambda e: LevelWrapper(FlatObsWrapper(e)),
        env_kwargs={"max_steps": 3},
    )
    venv = PrioritizedLevelReplay(venv, levels=range(6), seed=0)
    venv.reset()
    played, starts, dones = [], [np.ones(2, dtype=bool)], []
    for _ in range(7):
        _, _, done, infos = venv.step(np.zeros(2, dtype=np.int64))
        played.append([info["level"] for info in infos])
        starts.append(done.copy())
        dones.append(done)
    assert venv.sampler is not None
    scorer = EpisodeScorer(venv.sampler, n_envs=2, strategy="value_l1")
    arrays = {
        "episode_starts": np.array(starts[:7], dtype=np.float32),
        "dones": dones[-1],
        "rewards": np.zeros((7, 2)),
        "values": np.zeros((7, 2)),
        "advantages": np.tile(np.arange(1.0, 8.0)[:, None], (1, 2)),
    }
    with pytest.raises(ValueError, match="8 rows of rollout data but only 7 steps"):
        venv.score_rollout(scorer, **{**arrays, "episode_starts": np.ones((8, 2), dtype=np.float32)})
    reported = venv.score_rollout(scorer, **arrays)
    # max_steps=3: every env ends an episode at steps 3 and 6 (mean |A| = 2 and 5), on the levels it played
    expected = [(played[2][0], 2.0), (played[2][1], 2.0), (played[5][0], 5.0), (played[5][1], 5.0)]
    assert sorted(reported) == sorted(expected)
    assert venv.score_rollout(None) == [] and len(venv._level_log) == 0
    venv.close()
