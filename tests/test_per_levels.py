"""Level-aware replay: per-transition levels in the PER buffer and the off-policy PLR callback."""

from __future__ import annotations

import pickle
from typing import Any, Callable

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from minigrid.wrappers import FlatObsWrapper
from stable_baselines3 import DQN, PPO
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.callbacks import BaseCallback, CallbackList
from stable_baselines3.common.env_util import make_vec_env

from plr_gym import LevelSampler, LevelWrapper, PrioritizedLevelReplay
from plr_gym.offpolicy import OFF_POLICY_STRATEGIES, OffPolicyPLRCallback
from plr_gym.replay import PERDQN, PERSAC, PrioritizedReplayBuffer

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def minigrid_venv(
    strategy: str = "one_step_td_error", n_envs: int = 2, seed: int = 0
) -> PrioritizedLevelReplay:
    venv = make_vec_env(
        "MiniGrid-Empty-5x5-v0",
        n_envs=n_envs,
        env_kwargs={"max_steps": 12},
        wrapper_class=lambda e: LevelWrapper(FlatObsWrapper(e)),
    )
    return PrioritizedLevelReplay(venv, levels=range(8), strategy=strategy, seed=seed)


def cartpole_venv(n_envs: int = 2, seed: int = 0) -> PrioritizedLevelReplay:
    venv = make_vec_env("CartPole-v1", n_envs=n_envs, wrapper_class=LevelWrapper)
    return PrioritizedLevelReplay(venv, levels=range(20), strategy="one_step_td_error", seed=seed)


def pendulum_venv(n_envs: int = 2, seed: int = 0) -> PrioritizedLevelReplay:
    venv = make_vec_env(
        "Pendulum-v1", n_envs=n_envs, env_kwargs={"max_episode_steps": 15}, wrapper_class=LevelWrapper
    )
    return PrioritizedLevelReplay(venv, levels=range(6), strategy="one_step_td_error", seed=seed)


class Recorder(BaseCallback):
    """Records every step independently of the replay buffer: s, a, r, s', terminated, done, level."""

    def __init__(self) -> None:
        super().__init__()
        self.steps: list[dict[str, Any]] = []

    def _on_step(self) -> bool:
        infos = self.locals["infos"]
        dones = np.asarray(self.locals["dones"], dtype=bool)
        new_obs = np.array(self.locals["new_obs"], copy=True)
        for i, done in enumerate(dones):
            if done:
                new_obs[i] = infos[i]["terminal_observation"]
        self.steps.append(
            {
                "obs": np.array(self.model._last_obs, copy=True),  # type: ignore[attr-defined]
                "actions": np.array(self.locals["buffer_actions"], copy=True),
                "rewards": np.array(self.locals["rewards"], dtype=np.float64),
                "next_obs": new_obs,
                "dones": dones,
                "terminated": dones & ~np.array([bool(info.get("TimeLimit.truncated")) for info in infos]),
                "levels": np.array([info["level"] for info in infos]),
                "row": int(self.model.replay_buffer.pos),  # type: ignore[attr-defined]
            }
        )
        return True

    def last_episode(self, env: int) -> list[dict[str, Any]]:
        """Steps (with per-env fields) of env's latest completed episode."""
        end = max(t for t, s in enumerate(self.steps) if s["dones"][env])
        start = end
        while start > 0 and not self.steps[start - 1]["dones"][env]:
            start -= 1
        return [{**s, "t": t} for t, s in enumerate(self.steps) if start <= t <= end]


def td_by_hand(model: BaseAlgorithm, step: dict[str, Any], env: int) -> float:
    """One transition's |TD error|, computed on its own (batch of one) with the current networks."""
    obs = th.as_tensor(step["obs"][env : env + 1], dtype=th.float32)
    next_obs = th.as_tensor(step["next_obs"][env : env + 1], dtype=th.float32)
    r, term, gamma = float(step["rewards"][env]), float(step["terminated"][env]), float(model.gamma)
    with th.no_grad():
        if isinstance(model, DQN):
            q = float(model.q_net(obs)[0, int(step["actions"][env].reshape(-1)[0])])
            target = r + gamma * (1 - term) * float(model.q_net_target(next_obs).max())
            return abs(target - q)
        assert isinstance(model, PERSAC)
        act = th.as_tensor(step["actions"][env : env + 1], dtype=th.float32)
        next_act = model.actor(next_obs, deterministic=True)
        next_q = min(float(q) for q in model.critic_target(next_obs, next_act))
        target = r + gamma * (1 - term) * next_q
        return float(np.mean([abs(float(q) - target) for q in model.critic(obs, act)]))


def attach_capture(
    venv: PrioritizedLevelReplay, recorder: Recorder, model_ref: list[BaseAlgorithm], size: int
) -> list[tuple[int, float, float]]:
    """Wrap sampler.update_batch: at each call, recompute the last reported episode's score by hand."""
    checks: list[tuple[int, float, float]] = []
    original: Callable[..., None] = venv.sampler.update_batch

    def update_batch(levels: Any, scores: Any) -> None:
        levels, scores = np.asarray(levels), np.asarray(scores)
        last = recorder.steps[-1]
        # The most recently completed episode is the last one reported (completion order, then env order).
        env = int(np.flatnonzero(last["dones"])[-1]) if last["dones"].any() else None
        if env is None:  # it ended on an earlier step of this rollout: find the latest one
            t = max(t for t, s in enumerate(recorder.steps) if s["dones"].any())
            env = int(np.flatnonzero(recorder.steps[t]["dones"])[-1])
        episode = recorder.last_episode(env)
        assert int(episode[-1]["levels"][env]) == int(levels[-1])
        now = len(recorder.steps)
        kept = [s for s in episode if s["t"] >= now - size]  # steps not yet overwritten
        by_hand = float(np.mean([td_by_hand(model_ref[0], s, env) for s in kept]))
        checks.append((int(levels[-1]), float(scores[-1]), by_hand))
        original(levels, scores)

    venv.sampler.update_batch = update_batch  # type: ignore[method-assign]
    return checks


# ---------------------------------------------------------------------------------------- buffer levels


def test_buffer_stores_each_transitions_level_and_samples_expose_it() -> None:
    venv = minigrid_venv()
    recorder = Recorder()
    model = PERDQN("MlpPolicy", venv, learning_starts=40, buffer_size=400, batch_size=16, seed=0)
    model.learn(120, callback=recorder)  # 60 rows < 200 rows per env: nothing overwritten
    buffer = model.replay_buffer
    assert isinstance(buffer, PrioritizedReplayBuffer)
    assert buffer.levels.dtype == np.int64
    recorded = np.stack([s["levels"] for s in recorder.steps])
    rows = [s["row"] for s in recorder.steps]
    np.testing.assert_array_equal(buffer.levels[rows], recorded)
    assert len(np.unique(recorded)) > 2  # several episodes, several levels
    batch = buffer.sample(32)
    assert batch.levels is not None and batch.levels.dtype == np.int64
    np.testing.assert_array_equal(batch.levels, buffer.levels.reshape(-1)[batch.indices])
    venv.close()


def test_levels_default_to_minus_one_without_level_info() -> None:
    from gymnasium import spaces

    buffer = PrioritizedReplayBuffer(10, spaces.Box(-1, 1, (2,)), spaces.Discrete(2), device="cpu", n_envs=2)
    buffer.add(np.zeros((2, 2)), np.zeros((2, 2)), np.zeros(2), np.ones(2), np.zeros(2), [{"level": 7}, {}])
    np.testing.assert_array_equal(buffer.levels[0], [7, -1])
    batch = buffer.sample(4)
    np.testing.assert_array_equal(batch.levels, buffer.levels.reshape(-1)[batch.indices])
    buffer.reset()
    assert (buffer.levels == -1).all()


def test_save_load_and_pickle_keep_levels(tmp_path: Any) -> None:
    venv = minigrid_venv()
    model = PERDQN("MlpPolicy", venv, learning_starts=1000, buffer_size=200, seed=0)
    model.learn(60)
    buffer = model.replay_buffer
    assert isinstance(buffer, PrioritizedReplayBuffer)
    assert (buffer.levels[:30] >= 0).all()
    buffer.save(tmp_path / "buffer.npz")
    fresh = PrioritizedReplayBuffer(
        200, buffer.observation_space, buffer.action_space, device="cpu", n_envs=2, seed=0
    )
    fresh.load(tmp_path / "buffer.npz")
    np.testing.assert_array_equal(fresh.levels, buffer.levels)
    clone = pickle.loads(pickle.dumps(buffer))
    np.testing.assert_array_equal(clone.levels, buffer.levels)
    # A buffer pickled before levels existed loads with every level unknown.
    state = dict(buffer.__dict__)
    del state["levels"]
    old = PrioritizedReplayBuffer.__new__(PrioritizedReplayBuffer)
    old.__setstate__(state)
    assert old.levels.shape == buffer.levels.shape and (old.levels == -1).all()
    venv.close()


# ---------------------------------------------------------------------------------------- TD scoring


@pytest.mark.parametrize(
    ("algo", "make_env", "buffer_size", "steps"),
    [
        (PERDQN, minigrid_venv, 1000, 300),
        (DQN, cartpole_venv, 1000, 300),
        (PERDQN, cartpole_venv, 24, 300),  # 12 rows per env: long episodes are partly overwritten
        (PERSAC, pendulum_venv, 1000, 200),
    ],
)
def test_reported_score_equals_td_error_by_hand(
    algo: type[BaseAlgorithm], make_env: Callable[[], PrioritizedLevelReplay], buffer_size: int, steps: int
) -> None:
    venv = make_env()
    kwargs: dict[str, Any] = {"learning_starts": 40, "buffer_size": buffer_size, "batch_size": 16, "seed": 0}
    if algo is PERSAC:
        kwargs["train_freq"] = 3
    model = algo("MlpPolicy", venv, **kwargs)
    recorder, plr = Recorder(), OffPolicyPLRCallback()
    model_ref = [model]
    checks = attach_capture(venv, recorder, model_ref, buffer_size // 2)
    model.learn(steps, callback=CallbackList([recorder, plr]))
    assert len(checks) >= 3
    for level, score, by_hand in checks:
        assert score == pytest.approx(by_hand, rel=1e-4, abs=1e-6), level
    assert venv.sampler.num_seen > 0
    assert np.isfinite(venv.sampler.scores).all()
    if buffer_size < 100:
        assert plr.steps_overwritten > 0
    else:
        assert plr.steps_overwritten == 0
    venv.close()


def test_per_algorithms_train_and_feed_the_sampler() -> None:
    for algo, make_env in ((PERDQN, minigrid_venv), (PERSAC, pendulum_venv)):
        venv = make_env()
        model = algo("MlpPolicy", venv, learning_starts=50, buffer_size=500, batch_size=16, seed=1)
        model.learn(300, callback=OffPolicyPLRCallback())
        sampler = venv.sampler
        assert sampler.num_seen >= 3, algo
        assert (sampler.scores[sampler.seen] > 0).all()
        # The replay distribution now follows the scores.
        assert sampler.sample_weights().sum() == pytest.approx(1.0)
        venv.close()


def test_scoreless_strategies_need_no_scores() -> None:
    venv = minigrid_venv(strategy="random")
    model = PERDQN("MlpPolicy", venv, learning_starts=50, buffer_size=300, seed=0)
    callback = OffPolicyPLRCallback()
    model.learn(100, callback=callback)
    assert not callback.scoring and venv.sampler.num_seen == 0
    venv.close()


@pytest.mark.parametrize("strategy", ["value_l1", "gae", "policy_entropy", "max_mc"])
def test_refuses_strategies_other_than_td_error(strategy: str) -> None:
    venv = minigrid_venv(strategy=strategy)
    model = PERDQN("MlpPolicy", venv, learning_starts=50, buffer_size=300, seed=0)
    with pytest.raises(ValueError, match="one_step_td_error") as info:
        model.learn(10, callback=OffPolicyPLRCallback())
    assert strategy in str(info.value)
    assert all(name in str(info.value) for name in OFF_POLICY_STRATEGIES)
    venv.close()


def test_refuses_on_policy_algorithms_and_envs_without_plr() -> None:
    venv = minigrid_venv()
    with pytest.raises(TypeError, match="PLRCallback"):
        PPO("MlpPolicy", venv, n_steps=16, batch_size=16).learn(16, callback=OffPolicyPLRCallback())
    venv.close()
    plain = make_vec_env("CartPole-v1", n_envs=1)
    with pytest.raises(ValueError, match="PrioritizedLevelReplay"):
        DQN("MlpPolicy", plain, buffer_size=100).learn(10, callback=OffPolicyPLRCallback())
    plain.close()


def test_sampler_passed_directly_and_gym_env_level_ids() -> None:
    """Levels need not start at 0; the reported levels are the ones played."""
    sampler = LevelSampler(levels=[100, 200, 300], strategy="one_step_td_error", seed=0)
    venv = PrioritizedLevelReplay(
        make_vec_env(lambda: LevelWrapper(gym.make("CartPole-v1")), n_envs=2), sampler=sampler
    )
    model = PERDQN("MlpPolicy", venv, learning_starts=30, buffer_size=500, seed=0)
    model.learn(200, callback=OffPolicyPLRCallback())
    assert set(np.unique(model.replay_buffer.levels[model.replay_buffer.levels >= 0])) <= {100, 200, 300}
    assert sampler.num_seen == 3
    venv.close()


def test_td3_and_qrdqn_feed_the_sampler() -> None:
    from plr_gym.replay import PERQRDQN, PERTD3

    for algo, make_env in ((PERTD3, pendulum_venv), (PERQRDQN, cartpole_venv)):
        venv = make_env()
        model = algo("MlpPolicy", venv, learning_starts=40, buffer_size=400, batch_size=16, seed=0)
        model.learn(160, callback=OffPolicyPLRCallback())
        assert venv.sampler.num_seen >= 2, algo
        assert np.isfinite(venv.sampler.scores).all()
        venv.close()


def test_dict_buffer_levels() -> None:
    from gymnasium import spaces

    from plr_gym.replay import PrioritizedDictReplayBuffer

    space = spaces.Dict({"pos": spaces.Box(-1, 1, (2,)), "goal": spaces.Discrete(3)})
    buffer = PrioritizedDictReplayBuffer(20, space, spaces.Discrete(2), device="cpu", n_envs=2, seed=0)
    obs = {"pos": np.zeros((2, 2)), "goal": np.array([1, 2])}
    for t in range(5):
        buffer.add(obs, obs, np.zeros(2), np.ones(2), np.zeros(2), [{"level": t}, {"level": 10 + t}])
    batch = buffer.sample(8)
    assert batch.levels is not None
    np.testing.assert_array_equal(batch.levels, buffer.levels.reshape(-1)[batch.indices])
    np.testing.assert_array_equal(buffer.levels[:5, 1], 10 + np.arange(5))
