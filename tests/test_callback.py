"""PLRCallback against real SB3 rollouts on MiniGrid."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch as th
from minigrid.wrappers import FlatObsWrapper
from stable_baselines3 import A2C, DQN, PPO
from stable_baselines3.common.callbacks import BaseCallback, CallbackList
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import VecNormalize

from plr_gym import LevelSampler, LevelWrapper, PLRCallback, PrioritizedLevelReplay

ENV_ID = "MiniGrid-Empty-5x5-v0"


def level_env(env: Any) -> LevelWrapper:
    return LevelWrapper(FlatObsWrapper(env))


def make_venv(n_envs: int = 4, max_steps: int = 40, **sampler_kwargs: Any) -> PrioritizedLevelReplay:
    venv = make_vec_env(ENV_ID, n_envs=n_envs, wrapper_class=level_env, env_kwargs={"max_steps": max_steps})
    sampler_kwargs.setdefault("levels", range(20))
    sampler_kwargs.setdefault("seed", 0)
    return PrioritizedLevelReplay(venv, **sampler_kwargs)


class Recorder(BaseCallback):
    """Copies each rollout's buffer arrays and levels, independently of PLRCallback."""

    def __init__(self) -> None:
        super().__init__()
        self.rollouts: list[dict[str, Any]] = []
        self._levels: list[np.ndarray] = []

    def _on_rollout_start(self) -> None:
        self._levels = []

    def _on_step(self) -> bool:
        self._levels.append(np.array([info["level"] for info in self.locals["infos"]]))
        return True

    def _on_rollout_end(self) -> None:
        buf = self.model.rollout_buffer  # type: ignore[attr-defined]
        n_steps, n_envs = buf.episode_starts.shape
        obs = th.as_tensor(buf.observations.reshape(n_steps * n_envs, -1))
        with th.no_grad():
            dist = self.model.policy.get_distribution(obs)
            entropy = dist.entropy().numpy().reshape(n_steps, n_envs)
        self.rollouts.append(
            {
                "levels": np.stack(self._levels),
                "starts": buf.episode_starts.copy().astype(bool),
                "adv": buf.advantages.copy(),
                "dones": np.asarray(self.locals["dones"]).copy(),
                "entropy": entropy / np.log(self.model.action_space.n),  # type: ignore[attr-defined]
            }
        )


def expected_scores(rollouts: list[dict[str, Any]], per_step: str) -> dict[int, float]:
    """Score of each level's last completed episode, computed from the concatenated rollouts."""
    levels = np.concatenate([r["levels"] for r in rollouts])
    starts = np.concatenate([r["starts"] for r in rollouts])
    values = np.concatenate([r[per_step] for r in rollouts])
    if per_step == "adv":
        values = {"value_l1": np.abs(values), "positive_value_loss": np.maximum(values, 0)}.get(
            rollouts[0]["strategy"], values
        )
    total, n_envs = starts.shape
    out: dict[tuple[int, int], tuple[int, float]] = {}
    for e in range(n_envs):
        begins = np.flatnonzero(starts[:, e]).tolist()
        ends = [*begins[1:]]
        if rollouts[-1]["dones"][e]:
            ends.append(total)
        for b, end in zip(begins, ends):
            assert (levels[b:end, e] == levels[b, e]).all()
            out[(end, e)] = (int(levels[b, e]), float(values[b:end, e].mean()))
    scores: dict[int, float] = {}
    for key in sorted(out):  # completion order: by end step, then env
        level, score = out[key]
        scores[level] = score
    return scores


@pytest.mark.parametrize("strategy", ["value_l1", "positive_value_loss", "gae", "policy_entropy"])
def test_scores_equal_hand_computed_scores(strategy: str) -> None:
    venv = make_venv(strategy=strategy, score_transform="rank")
    model = PPO("MlpPolicy", venv, n_steps=32, batch_size=64, n_epochs=1, seed=0)
    rec = Recorder()
    model.learn(32 * 4 * 5, callback=CallbackList([PLRCallback(), rec]))
    for r in rec.rollouts:
        r["strategy"] = strategy
    spans = sum(
        int(not r["starts"][0].all()) for r in rec.rollouts[1:]
    )  # some episodes continue across rollouts
    assert spans > 0
    expected = expected_scores(rec.rollouts, "entropy" if strategy == "policy_entropy" else "adv")
    sampler = venv.sampler
    assert sampler.num_seen == len(expected) > 0
    for level, score in expected.items():
        i = int(np.flatnonzero(sampler.levels == level)[0])
        assert sampler.seen[i]
        assert sampler.scores[i] == pytest.approx(score, rel=1e-5, abs=1e-6), level
    unscored = set(range(20)) - set(expected)
    assert not sampler.seen[sorted(unscored)].any()


def test_works_with_a2c_and_vecnormalize_outside() -> None:
    venv = make_venv()
    outer = VecNormalize(venv)
    model = A2C("MlpPolicy", outer, n_steps=16, seed=0)
    model.learn(16 * 4 * 4, callback=PLRCallback())
    assert venv.sampler.num_seen > 0


def test_missing_wrapper_and_wrong_algorithm() -> None:
    plain = make_vec_env(ENV_ID, n_envs=2, wrapper_class=level_env)
    with pytest.raises(ValueError, match="PrioritizedLevelReplay"):
        PPO("MlpPolicy", plain, n_steps=16, batch_size=32).learn(32, callback=PLRCallback())
    with pytest.raises(TypeError, match="on-policy"):
        DQN("MlpPolicy", make_venv(n_envs=1), learning_starts=0).learn(10, callback=PLRCallback())


def test_logit_strategies_refuse_continuous_actions() -> None:
    import gymnasium as gym

    class LevelPendulum(gym.Wrapper):  # type: ignore[type-arg]
        pass

    venv = make_vec_env("Pendulum-v1", n_envs=2, wrapper_class=lambda e: LevelWrapper(LevelPendulum(e)))
    venv = PrioritizedLevelReplay(venv, levels=range(5), strategy="min_margin")
    with pytest.raises(ValueError, match="Discrete"):
        PPO("MlpPolicy", venv, n_steps=16, batch_size=32).learn(32, callback=PLRCallback())


def test_continuous_policy_entropy_and_td_error() -> None:
    for strategy in ("policy_entropy", "one_step_td_error", "max_mc"):
        venv = make_vec_env("Pendulum-v1", n_envs=2, wrapper_class=LevelWrapper)
        venv = PrioritizedLevelReplay(venv, levels=range(5), strategy=strategy, seed=0)
        PPO("MlpPolicy", venv, n_steps=256, batch_size=64, n_epochs=1, seed=0).learn(
            1024, callback=PLRCallback()
        )
        assert venv.sampler.num_seen > 0 and np.isfinite(venv.sampler.scores).all()


def test_recurrent_ppo_value_and_logit_strategies() -> None:
    from sb3_contrib import RecurrentPPO

    for strategy in ("value_l1", "min_margin"):  # min_margin: batched pass with the stored LSTM states
        venv = make_venv(strategy=strategy)
        RecurrentPPO(
            "MlpLstmPolicy", venv, n_steps=32, batch_size=64, n_epochs=1, seed=0,
            policy_kwargs={"lstm_hidden_size": 16, "net_arch": [16]},
        ).learn(32 * 4 * 2, callback=PLRCallback())  # fmt: skip
        seen = venv.sampler.seen
        assert seen.any() and np.isfinite(venv.sampler.scores[seen]).all()


def test_maskable_ppo_uses_masked_distribution() -> None:
    from sb3_contrib import MaskablePPO
    from sb3_contrib.common.wrappers import ActionMasker

    def masked(env: Any) -> LevelWrapper:  # only turn left/right and move forward
        return LevelWrapper(ActionMasker(FlatObsWrapper(env), lambda _: np.arange(7) < 3))

    for strategy in ("least_confidence", "policy_entropy"):
        base = make_vec_env(ENV_ID, n_envs=4, wrapper_class=masked, env_kwargs={"max_steps": 40})
        venv = PrioritizedLevelReplay(base, levels=range(20), strategy=strategy, seed=0)
        MaskablePPO("MlpPolicy", venv, n_steps=32, batch_size=64, n_epochs=1, seed=0).learn(
            32 * 4 * 2, callback=PLRCallback()
        )
        seen = venv.sampler.seen
        scores = venv.sampler.scores[seen]
        assert seen.any() and np.isfinite(scores).all()
        if strategy == "least_confidence":  # 3 allowed actions: 1 - max p <= 2/3
            assert (scores <= 2 / 3 + 1e-6).all()


def test_logging_keys(tmp_path: Path) -> None:
    from stable_baselines3.common.logger import configure

    venv = make_venv()
    model = PPO("MlpPolicy", venv, n_steps=32, batch_size=64, n_epochs=1, seed=0)
    model.set_logger(configure(str(tmp_path), ["csv"]))
    model.learn(32 * 4 * 4, callback=PLRCallback())
    header = (tmp_path / "progress.csv").read_text().splitlines()[0].split(",")
    for key in (
        "plr/replay_fraction",
        "plr/num_seen",
        "plr/score_mean",
        "plr/score_max",
        "plr/weight_entropy",
    ):
        assert key in header
    assert "plr/scores" not in header  # histogram: TensorBoard only


def test_resume_is_exact(tmp_path: Path) -> None:
    """Stopping after 3 rollouts and resuming from the checkpoint = one uninterrupted run."""

    def run(split: bool) -> LevelSampler:
        venv = make_venv(levels=range(12), alpha=1.0)
        model = PPO("MlpPolicy", venv, n_steps=32, batch_size=64, n_epochs=1, seed=3)
        if not split:
            model.learn(32 * 4 * 6, callback=PLRCallback())
            return venv.sampler
        model.learn(32 * 4 * 3, callback=PLRCallback(save_path=tmp_path, save_freq=1))
        # a fresh sampler and callback, restored from disk, continue the same model and env
        venv.sampler = LevelSampler(levels=range(12), seed=99, alpha=1.0)
        model.learn(32 * 4 * 3, callback=PLRCallback(resume_from=tmp_path), reset_num_timesteps=False)
        return venv.sampler

    a, b = run(False), run(True)
    np.testing.assert_array_equal(a.scores, b.scores)
    np.testing.assert_array_equal(a.staleness, b.staleness)
    assert a.sample(20).tolist() == b.sample(20).tolist()


def test_resume_in_a_new_learn_call_draws_from_the_restored_sampler(tmp_path: Path) -> None:
    """learn() resets the envs before callbacks start: resume_from must re-draw those levels."""
    venv = make_venv(levels=range(12))
    model = PPO("MlpPolicy", venv, n_steps=32, batch_size=64, n_epochs=1, seed=0)
    model.learn(32 * 4 * 3, callback=PLRCallback(save_path=tmp_path))
    expected_first = LevelSampler.load(tmp_path / "plr_sampler.npz").sample(2 * venv.num_envs)[
        : venv.num_envs
    ]

    class FirstLevels(BaseCallback):
        def _on_training_start(self) -> None:
            self.levels = venv.current_levels.tolist()

        def _on_step(self) -> bool:
            return True

    # a new run: fresh sampler, same env; learn() resets the envs (drawing from the fresh sampler)
    venv.sampler = LevelSampler(levels=range(12), seed=5)
    first = FirstLevels()
    model.learn(32 * 4, callback=CallbackList([PLRCallback(resume_from=tmp_path), first]))
    assert first.levels == expected_first.tolist()
