"""``plr_gym.training``: the run set-up shared by ``plr-gym train``, the demo and the learning study."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("minigrid")

from gymnasium import spaces
from minigrid.wrappers import ImgObsWrapper
from stable_baselines3.common.monitor import Monitor

from plr_gym import LevelSampler, LevelWrapper, PLRCallback, PrioritizedLevelReplay, training
from plr_gym.evaluation import evaluate_levels
from plr_gym.training import Hyperparameters, SetupError, build_run

ENV = "MiniGrid-Empty-5x5-v0"
TINY = Hyperparameters(n_steps=32, batch_size=64, n_epochs=1)


def test_importing_the_module_needs_neither_torch_nor_stable_baselines3() -> None:
    path = Path(training.__file__)
    code = (
        "import importlib.util, sys\n"
        "sys.modules['torch'] = None; sys.modules['stable_baselines3'] = None\n"
        f"spec = importlib.util.spec_from_file_location('standalone_training', {str(path)!r})\n"
        "module = importlib.util.module_from_spec(spec)\n"
        "sys.modules['standalone_training'] = module\n"
        "spec.loader.exec_module(module)\n"
        "print(module.run_dir_name('plr', 2), module.Hyperparameters().for_algorithm('ppo')['n_steps'])\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["plr-seed2", "256"]


def test_env_family_from_the_id_and_a_hint_for_unknown_ids() -> None:
    assert training.env_family(ENV) == "minigrid"
    assert training.env_family("plr_gym/MiniGrid-DoorKeyGamut-v0") == "minigrid"
    assert training.env_family("plr_gym/procgen-bigfish-v0") == "procgen"
    assert training.env_family("CartPole-v1") == "other"
    with pytest.raises(SetupError, match="did you mean plr_gym/procgen-bigfish-v0"):
        training.env_family("plr_gym/procgen-bigfsh-v0")
    assert issubclass(SetupError, ValueError)


def test_make_level_venv_wraps_every_sub_env_in_level_wrapper_over_the_observation_wrapper() -> None:
    venv = training.make_level_venv(ENV, n_envs=2, seed=3, env_kwargs={"max_steps": 20})
    try:
        assert venv.num_envs == 2 and venv.observation_space.shape == (7, 7, 3)
        for env in venv.envs:
            assert isinstance(env, LevelWrapper)
            assert isinstance(env.env, ImgObsWrapper) and isinstance(env.env.env, Monitor)
            assert env.unwrapped.max_steps == 20
    finally:
        venv.close()
    full = training.make_level_venv(ENV, n_envs=1, seed=0, full_obs=True)
    assert full.observation_space.shape == (5, 5, 3)  # the whole 5x5 grid, not the 7x7 view
    full.close()
    other = training.make_level_venv("CartPole-v1", n_envs=1, seed=0)
    assert isinstance(other.envs[0], LevelWrapper) and isinstance(other.envs[0].env, Monitor)
    other.close()


def test_make_level_venv_rejects_bad_options_clearly() -> None:
    with pytest.raises(SetupError, match=r"cannot build MiniGrid-Empty-5x5-v0 with options \{'colour': 1\}"):
        training.make_level_venv(ENV, n_envs=1, seed=0, env_kwargs={"colour": 1})
    with pytest.raises(ValueError, match="full_obs=True is for MiniGrid envs only"):
        training.make_level_venv("CartPole-v1", n_envs=1, seed=0, full_obs=True)
    with pytest.raises(ValueError, match="family must be one of minigrid, procgen, other"):
        training.level_env_wrapper("atari")


def test_policy_for_frames_grids_and_vectors() -> None:
    frames = spaces.Box(0, 255, (64, 64, 3), np.uint8)
    assert training.policy_for(frames) == ("CnnPolicy", {})
    assert training.policy_for(frames, recurrent=True, cnn_features_dim=256) == (
        "CnnLstmPolicy",
        {"features_extractor_kwargs": {"features_dim": 256}},
    )
    grid = spaces.Box(0, 255, (7, 7, 3), np.uint8)
    assert training.policy_for(grid, cnn_features_dim=256) == ("MlpPolicy", {"normalize_images": False})
    vector = spaces.Box(-1.0, 1.0, (4,), np.float32)
    assert training.policy_for(vector, recurrent=True) == ("MlpLstmPolicy", {})


def test_algorithm_class_and_hyperparameters() -> None:
    assert training.algorithm_class("ppo").__name__ == "PPO"
    with pytest.raises(SetupError, match="unknown algorithm 'dqn'; choose from ppo, a2c, recurrentppo"):
        training.algorithm_class("dqn")
    # every field reaches PPO: as a keyword, Adam's epsilon through policy_kwargs, the update options
    # through LevelReplayPPO (build_run, when they differ from SB3's)
    assert set(Hyperparameters().for_algorithm("ppo")) == set(Hyperparameters().as_dict()) - {
        "optimizer_eps",
        "value_loss",
        "advantage_normalization",
    }
    with pytest.raises(ValueError, match="value_loss must be one of mse, clipped_max"):
        Hyperparameters(value_loss="l1")
    assert Hyperparameters(optimizer_eps=1e-7).policy_kwargs("ppo") == {"optimizer_kwargs": {"eps": 1e-7}}
    a2c = Hyperparameters(optimizer_eps=1e-7).for_algorithm("a2c")
    assert "batch_size" not in a2c and "clip_range" not in a2c and a2c["rms_prop_eps"] == 1e-7
    assert Hyperparameters().policy_kwargs("a2c") == {}
    with pytest.raises(ValueError, match="n_steps must be a positive int, got 0"):
        Hyperparameters(n_steps=0)
    with pytest.raises(ValueError, match=r"gamma must be in \[0, 1\], got 1.5"):
        Hyperparameters(gamma=1.5)
    with pytest.raises(ValueError, match="learning_rate must be a finite number > 0"):
        Hyperparameters(learning_rate=0.0)
    with pytest.raises(ValueError, match="vf_coef must be a finite number >= 0"):
        Hyperparameters(vf_coef=-1.0)
    with pytest.raises(ValueError, match="clip_range must be a finite number > 0"):
        Hyperparameters(clip_range=float("nan"))


def test_build_run_trains_on_the_sampler_levels_and_evaluates_on_a_separate_env(tmp_path: Path) -> None:
    sampler = LevelSampler(levels=range(5), seed=0)
    run = build_run(
        ENV, sampler, seed=0, env_seed=0, eval_seed=1, n_envs=2, eval_n_envs=3,
        env_kwargs={"max_steps": 20}, hyperparameters=TINY,
    )  # fmt: skip
    try:
        assert isinstance(run.venv, PrioritizedLevelReplay) and run.sampler is sampler
        assert not isinstance(run.eval_venv, PrioritizedLevelReplay) and run.eval_venv.num_envs == 3
        assert run.model.n_steps == 32 and run.model.batch_size == 64 and run.model.n_epochs == 1
        assert run.model.policy_kwargs == {"normalize_images": False, "optimizer_kwargs": {"eps": 1e-5}}
        run.model.learn(128, callback=PLRCallback())
        played = set(sampler.levels[sampler.seen].tolist())
        assert played and played <= set(range(5))
        returns = evaluate_levels(run.model, run.eval_venv, range(1000, 1004))
        run.model.save(tmp_path / "model.zip")
    finally:
        run.close()
    # the result files of a run: evaluation.json in its run directory, read back per level
    run_dir = tmp_path / training.run_dir_name("plr", 0)
    training.write_json(run_dir / training.EVALUATION_FILE, {"returns": training.returns_to_json(returns)})
    assert training.load_final_returns(run_dir) == returns
    assert training.load_final_returns(tmp_path / "no-such-run") is None
    # continue the saved model on a new training env
    resumed = build_run(
        ENV, LevelSampler(levels=range(5), seed=0), seed=0, env_seed=0, eval_seed=1, n_envs=2,
        env_kwargs={"max_steps": 20}, load_path=tmp_path / "model.zip",
    )  # fmt: skip
    assert resumed.model.num_timesteps == 128 and resumed.model.n_steps == 32
    resumed.close()


def test_build_run_is_reproducible_from_its_seed() -> None:
    def initial_weights(seed: int) -> list[np.ndarray]:
        run = build_run(
            ENV, LevelSampler(levels=range(5), seed=seed), seed=seed, env_seed=seed, eval_seed=seed + 1,
            n_envs=2, hyperparameters=TINY,
        )  # fmt: skip
        run.close()
        return [p.detach().numpy().copy() for p in run.model.policy.parameters()]

    a, b, c = initial_weights(0), initial_weights(0), initial_weights(1)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c))


def test_build_run_sets_one_torch_thread_for_an_mlp_unless_told_otherwise(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The fast path is the default (one thread for MiniGrid's MLP); an int or ``None`` (leave torch as it
    is) opts out; a bad value is refused before anything is built."""
    import torch

    before = torch.get_num_threads()

    def build(**kw: object) -> int:
        run = build_run(
            ENV, LevelSampler(levels=range(5), seed=0), seed=0, env_seed=0, eval_seed=1, n_envs=2,
            hyperparameters=TINY, **kw,  # type: ignore[arg-type]
        )  # fmt: skip
        run.close()
        return torch.get_num_threads()

    limit = training.max_torch_threads()
    try:
        torch.set_num_threads(limit)
        assert build() == 1  # "auto": an MLP gets one thread
        torch.set_num_threads(limit)
        assert build(torch_threads=None) == limit  # opt out: torch's setting stays
        assert build(torch_threads=limit) == limit
        built: list[str] = []
        monkeypatch.setattr(training, "make_level_venv", lambda *a, **k: built.append("venv"))
        for bad in (0, limit + 1, "1", 1.0, True):
            with pytest.raises(
                ValueError, match=rf"torch_threads must be 'auto', None .* int in 1\.\.{limit}"
            ):
                build_run(
                    ENV, LevelSampler(levels=range(5)), seed=0, env_seed=0, eval_seed=1, torch_threads=bad
                )
        assert built == [] and torch.get_num_threads() == limit  # refused before any env was built
    finally:
        torch.set_num_threads(before)


def test_build_run_refuses_an_unknown_env_algorithm_or_sampler(monkeypatch: pytest.MonkeyPatch) -> None:
    from stable_baselines3.common.vec_env import DummyVecEnv

    sampler = LevelSampler(levels=range(5), seed=0)
    with pytest.raises(SetupError, match="unknown environment 'MiniGrid-NoSuchEnv-v0'"):
        build_run("MiniGrid-NoSuchEnv-v0", sampler, seed=0, env_seed=0, eval_seed=1)
    with pytest.raises(SetupError, match="unknown algorithm"):
        build_run(ENV, sampler, seed=0, env_seed=0, eval_seed=1, algo="sac")
    closed: list[int] = []
    close = DummyVecEnv.close
    monkeypatch.setattr(DummyVecEnv, "close", lambda self: closed.append(self.num_envs) or close(self))
    with pytest.raises(SetupError, match=r"sampler must be a plr_gym\.LevelSampler, got str"):
        build_run(ENV, "not a sampler", seed=0, env_seed=0, eval_seed=1, n_envs=3)
    assert closed == [3]  # the training env built before the refusal is closed


def test_write_json_is_atomic_and_round_trips(tmp_path: Path) -> None:
    path = training.write_json(tmp_path / "a" / "config.json", {"out": tmp_path, "n": 1}, default=str)
    assert path.read_text() == json.dumps({"out": str(tmp_path), "n": 1}, indent=2) + "\n"
    assert training.read_json(path) == {"out": str(tmp_path), "n": 1}
    compact = training.write_json(tmp_path / "seed0.json", {"curve": [1, 2]}, indent=None, newline=False)
    assert compact.read_bytes() == b'{"curve": [1, 2]}'
    with pytest.raises(TypeError):  # not JSON: the previous file stays, no temporary file is left
        training.write_json(compact, {"x": object()})
    assert compact.read_bytes() == b'{"curve": [1, 2]}'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "seed0.json"]


def test_write_csv_rows_as_sequences_or_mappings(tmp_path: Path) -> None:
    path = training.write_csv(
        tmp_path / "r.csv", ["level", "episode", "return"], [[3, 0, 0.5], {"level": 4, "return": 1.0}]
    )
    assert path.read_bytes() == b"level,episode,return\r\n3,0,0.5\r\n4,,1.0\r\n"
    with pytest.raises(ValueError, match=r"keys \['score'\] are not in header"):
        training.write_csv(tmp_path / "bad.csv", ["level"], [{"level": 1, "score": 2}])
    assert not (tmp_path / "bad.csv").exists()


def test_returns_json_round_trip() -> None:
    returns = {10_000: [0.5, 1.0], 10_001: [np.float64(0.25)]}
    record = training.returns_to_json(returns)
    assert record == {"10000": [0.5, 1.0], "10001": [0.25]}
    assert json.loads(json.dumps(record)) == record
    assert training.returns_from_json(record) == {10_000: [0.5, 1.0], 10_001: [0.25]}


def test_policy_for_the_impala_encoder() -> None:
    from plr_gym.policies import ImpalaCNN, ImpalaCnnPolicy

    frames = spaces.Box(0, 255, (64, 64, 3), np.uint8)
    assert training.policy_for(frames, encoder="impala") == (ImpalaCnnPolicy, {})
    name, kwargs = training.policy_for(frames, recurrent=True, encoder="impala")
    assert name == "CnnLstmPolicy" and kwargs == {"features_extractor_class": ImpalaCNN, "net_arch": []}
    with pytest.raises(ValueError, match="encoder='impala' needs uint8 frames"):
        training.policy_for(spaces.Box(0, 255, (7, 7, 3), np.uint8), encoder="impala")
    with pytest.raises(ValueError, match="encoder must be one of auto, nature, impala"):
        training.policy_for(frames, encoder="resnet")


def test_reward_normalisation_is_baselines_vecnormalize_with_its_gamma(tmp_path: Path) -> None:
    """Rewards are divided by the running std of a discounted return (gamma 0.99, reset at episode ends)
    and clipped to [-10, 10]; the statistics round-trip through save/load, without pickles."""
    from stable_baselines3.common.running_mean_std import RunningMeanStd

    run = build_run(
        "CartPole-v1", LevelSampler(levels=range(5), seed=0), seed=0, env_seed=0, eval_seed=1, n_envs=2,
        hyperparameters=TINY, normalize_reward=True,
    )  # fmt: skip
    norm = run.reward_normalization
    assert norm is not None and norm.norm_reward and not norm.norm_obs and norm.gamma == 0.99
    assert run.sampler is run.plr_venv.sampler and run.eval_venv.num_envs == 2
    rms, ret = RunningMeanStd(shape=()), np.zeros(2)
    norm.reset()
    rng = np.random.default_rng(0)
    for _ in range(60):
        _, reward, done, _ = norm.step(rng.integers(0, 2, size=2))
        raw = norm.get_original_reward()
        ret = ret * 0.99 + raw
        rms.update(ret)
        assert np.allclose(reward, np.clip(raw / np.sqrt(rms.var + 1e-8), -10, 10))
        ret[done] = 0
    path = training.save_reward_normalization(norm, tmp_path / training.REWARD_NORMALIZATION_FILE)
    saved = (float(norm.ret_rms.var), float(norm.ret_rms.count), norm.returns.copy())
    norm.ret_rms = RunningMeanStd(shape=())
    norm.returns = np.zeros(2)
    training.load_reward_normalization(norm, path)
    assert (float(norm.ret_rms.var), float(norm.ret_rms.count)) == saved[:2]
    assert np.array_equal(norm.returns, saved[2])
    norm.gamma = 0.999  # another normaliser: refused, left as it was
    with pytest.raises(ValueError, match=r"saved with gamma=0\.99"):
        training.load_reward_normalization(norm, path)
    assert float(norm.ret_rms.count) == saved[1]
    with pytest.raises(TypeError, match="must be a VecNormalize"):
        training.save_reward_normalization(run.eval_venv, path)
    run.close()
