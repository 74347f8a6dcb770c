"""The replay package by job: the numpy-only core (priorities, sum tree, sequences) without PyTorch or SB3,
the SB3 buffers as thin adapters of it, and the package's public names."""

from __future__ import annotations

import pickle
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gymnasium import spaces

import plr_gym
import plr_gym.replay
from plr_gym.replay import PrioritizedReplayBuffer, ReplayPriorities
from plr_gym.replay.buffers import _CORE_SETTINGS
from plr_gym.replay.sequences import RewardRebalancedEnds, sequence_slots

SRC = Path(plr_gym.__file__).resolve().parent.parent

pytestmark = pytest.mark.filterwarnings("ignore:.*without update_priorities.*:UserWarning")


def test_core_imports_and_samples_with_torch_and_sb3_blocked() -> None:
    # plr_gym/__init__.py imports the SB3 front ends, so it is stood in for by an empty package: what is
    # checked is that plr_gym.replay (which imports its names lazily), the core modules and everything
    # they import need neither PyTorch nor SB3.
    code = textwrap.dedent(
        f"""
        import sys, types
        sys.modules["torch"] = None
        sys.modules["stable_baselines3"] = None
        package = types.ModuleType("plr_gym")
        package.__path__ = [{str(SRC / "plr_gym")!r}]
        sys.modules["plr_gym"] = package
        import numpy as np
        import plr_gym.replay
        from plr_gym.replay.priorities import ReplayPriorities
        from plr_gym.replay.sequences import RewardRebalancedEnds, sequence_slots
        from plr_gym.replay.sum_tree import SumTree

        prio = ReplayPriorities(8, n_envs=2, prioritization="rank", recent_data_ratio=0.25,
                                recent_data_steps=2, seed=0)
        for row in range(5):
            prio.add(row)
        prio.update(np.arange(10), np.linspace(0.1, 3.0, 10), rows=5)
        indices, weights = prio.sample(8, rows=5, pos=5)
        assert indices.shape == (8,) and 0 < weights.max() <= 1.0
        slots, mask = sequence_slots(indices, 3, n_rows=8, n_envs=2, pos=5, full=False, dones=None)
        assert slots.shape == mask.shape == (8, 3)
        ends = RewardRebalancedEnds(16)
        ends.build(np.r_[np.ones(3), np.zeros(13)], stored=10)
        assert set(ends.draw(6, 1.0, np.random.default_rng(0)).tolist()) <= {{0, 1, 2}}
        assert SumTree(4).total == 0.0
        assert plr_gym.replay.ReplayPriorities is ReplayPriorities  # lazy names of the core resolve
        try:
            plr_gym.replay.PrioritizedReplayBuffer  # needs SB3: refused with the import error
        except ImportError:
            pass
        else:
            raise AssertionError("PrioritizedReplayBuffer imported without SB3")
        heavy = [m for m in ("torch", "stable_baselines3") if sys.modules.get(m) is not None]
        assert not heavy, heavy
        print("core ok")
        """
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "core ok" in result.stdout


def _buffer(**kwargs: Any) -> PrioritizedReplayBuffer:
    return PrioritizedReplayBuffer(
        8, spaces.Box(-1, 1, (2,)), spaces.Discrete(2), device="cpu", n_envs=2, seed=3, **kwargs
    )


def _add(buffer: PrioritizedReplayBuffer, t: int) -> None:
    obs = np.full((2, 2), t, dtype=np.float32)
    buffer.add(obs, obs + 1, np.zeros((2, 1)), np.array([t % 3, 0.0]), np.zeros(2), [{}, {}])


@pytest.mark.parametrize("prioritization", ["proportional", "rank"])
def test_buffer_draws_exactly_what_its_core_draws(prioritization: str) -> None:
    """The buffer adds nothing to the choice of slots: the core alone, given the same rows, priorities
    and seed, draws the same indices with the same weights."""
    kwargs = {"prioritization": prioritization, "recent_data_ratio": 0.25, "recent_data_steps": 2}
    buffer = _buffer(**kwargs)
    core = ReplayPriorities(4, n_envs=2, seed=3, **kwargs)
    rng = np.random.default_rng(0)
    for t in range(6):  # wraps: 4 rows per env
        _add(buffer, t)
        core.add(t % 4)
        batch = buffer.sample(4)
        indices, weights = core.sample(4, rows=min(t + 1, 4), pos=(t + 1) % 4)
        np.testing.assert_array_equal(batch.indices, indices)
        np.testing.assert_allclose(batch.weights.numpy().ravel(), weights.astype(np.float32))
        new = rng.exponential(size=4)
        buffer.update_priorities(batch.indices, new)
        core.update(indices, new, rows=min(t + 1, 4))
    np.testing.assert_array_equal(buffer.priorities.ravel(), core.raw)
    assert buffer.replay_priorities.config() == core.config()


def test_buffer_pickled_before_the_core_existed_still_loads() -> None:
    """A pickle whose state holds the priority fields on the buffer itself (the former layout) is
    rebuilt into a core and samples as the original does."""
    buffer = _buffer(prioritization="rank")
    for t in range(5):
        _add(buffer, t)
    buffer.update_priorities(np.arange(8), np.linspace(0.0, 2.0, 8))
    twin = pickle.loads(pickle.dumps(buffer))
    state = dict(pickle.loads(pickle.dumps(buffer)).__dict__)
    core = state.pop("replay_priorities")
    state.pop("_reward_ends")
    state.update({name: getattr(core, name) for name in _CORE_SETTINGS})
    state.update(
        _beta=core.beta,
        _rng=core.rng,
        _tree=core.tree,
        _priorities=core.raw,
        _max_priority=core.max_priority,
        _rank_snapshot=core.rank_snapshot,
        _samples_since_refresh=core.samples_since_refresh,
        _size_at_refresh=core.size_at_refresh,
        _samples_since_update=core.samples_since_update,
        _reward_trees=None,
    )
    old = PrioritizedReplayBuffer.__new__(PrioritizedReplayBuffer)
    old.__setstate__(state)
    assert old.prioritization == "rank" and old.max_priority == twin.max_priority
    np.testing.assert_array_equal(old.priorities, twin.priorities)
    for _ in range(3):
        np.testing.assert_array_equal(old.sample(6).indices, twin.sample(6).indices)
    assert old.sample_reward_sequences(4, 2).indices.shape == (4,)


def test_sequence_slots_backward_stops_at_the_previous_episode() -> None:
    dones = np.zeros(6)
    dones[1] = 1.0  # one env; the episode before row 2 ends at row 1
    slots, mask = sequence_slots(
        np.array([3]), 4, n_rows=6, n_envs=1, pos=5, full=False, dones=dones, anchor_at_end=True
    )
    assert slots.tolist() == [[2, 2, 2, 3]] and mask.tolist() == [[0.0, 0.0, 1.0, 1.0]]


def test_reward_rebalanced_ends_follow_new_rows() -> None:
    ends = RewardRebalancedEnds(4)
    ends.build(np.zeros(4), stored=2)
    ends.add(np.array([2]), np.array([5.0]))
    assert ends.draw(8, 1.0, np.random.default_rng(0)).tolist() == [2] * 8
    assert set(ends.draw(8, 0.0, np.random.default_rng(0)).tolist()) == {0, 1}


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"n_rows": 0}, "n_rows"),
        ({"n_envs": 1.5}, "n_envs"),
        ({"alpha": float("nan")}, "alpha"),
        ({"eps": -1.0}, "eps"),
        ({"rank_refresh_interval": 0}, "rank_refresh_interval"),
        ({"seed": -1}, "seed"),
    ],
)
def test_core_refuses_bad_arguments_by_name(kwargs: dict[str, Any], match: str) -> None:
    args: dict[str, Any] = {"n_rows": 4, **kwargs}
    with pytest.raises(ValueError, match=match):
        ReplayPriorities(**args)


def test_core_refuses_a_bad_state_and_keeps_its_own() -> None:
    core = ReplayPriorities(2, seed=0)
    core.add(0)
    state = dict(core.state_arrays())
    state["priorities"] = np.array([np.nan, 0.0])
    with pytest.raises(ValueError, match="finite"):
        core.checked_state(state, rows=1)
    assert core.raw.tolist() == [1.0, 0.0]


def test_replay_package_does_not_reexport_plr_callbacks() -> None:
    assert "OffPolicyPLRCallback" not in plr_gym.replay.__all__
    with pytest.raises(AttributeError, match="import it from plr_gym"):
        plr_gym.replay.OffPolicyPLRCallback  # noqa: B018
    from plr_gym import OffPolicyPLRCallback
    from plr_gym.offpolicy import OffPolicyPLRCallback as same

    assert OffPolicyPLRCallback is same
    for name in plr_gym.replay.__all__:  # every public name still resolves
        assert getattr(plr_gym.replay, name) is not None
