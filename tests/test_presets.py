"""``plr-gym train --preset``: the paper's whole recipe (plr_gym.presets), explicit flags winning, and a CPU
smoke run of ``--preset paper-procgen`` with the IMPALA policy and reward normalisation in use."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest

from plr_gym.cli import CLIError, build_parser, resolve_train_args
from plr_gym.presets import RECIPES, TEST_PROTOCOLS, library_defaults, recipe_table, resolve

#: The PLR paper's Procgen recipe (Jiang et al. 2021; level-replay's arguments.py and envs.py).
PAPER_PROCGEN = {
    "algo": "ppo",
    "timesteps": 25_000_000,
    "n_envs": 64,
    "n_steps": 256,
    "n_epochs": 3,
    "n_minibatches": 8,
    "learning_rate": 5e-4,
    "optimizer_eps": 1e-5,
    "gamma": 0.999,
    "gae_lambda": 0.95,
    "clip_range": 0.2,
    "ent_coef": 0.01,
    "vf_coef": 0.5,
    "max_grad_norm": 0.5,
    "normalize_reward": True,
    "normalize_reward_gamma": 0.99,
    "encoder": "impala",
    "vec_env": "batched",
    "distribution_mode": "easy",
    "num_levels": 200,
    "level_start": 0,
    "sampler": "plr",
    "strategy": "value_l1",
    "score_transform": "rank",
    "temperature": 0.1,
    "staleness_coef": 0.1,
    "uniform_mass": 0.0,
}


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["train", "plr_gym/procgen-bigfish-v0", *argv])


def test_paper_procgen_sets_the_whole_recipe() -> None:
    args = parse("--preset", "paper-procgen")
    sources = resolve_train_args(args)
    for key, value in PAPER_PROCGEN.items():
        assert getattr(args, key) == value, key
        assert sources[key] == "paper-procgen", key
    assert args.batch_size == 64 * 256 // 8 == 2048
    assert args.eval_levels == list(range(10_000, 11_000))  # 1,000 unseen levels
    assert args.eval_deterministic is False
    assert "uniform" in TEST_PROTOCOLS["paper-procgen"]


def test_explicit_flags_win_over_the_preset_even_when_equal_to_the_library_default() -> None:
    args = parse("--preset", "paper-procgen", "--gamma", "0.99", "--n-envs", "4", "--n-steps", "64")
    sources = resolve_train_args(args)
    assert (args.gamma, args.n_envs, args.n_steps) == (0.99, 4, 64)
    assert sources["gamma"] == sources["n_envs"] == "command line"
    assert args.batch_size == 4 * 64 // 8  # the preset's 8 minibatches of the smaller rollout
    assert args.n_epochs == 3 and sources["n_epochs"] == "paper-procgen"
    args = parse(
        "--preset", "paper-procgen", "--no-normalize-reward", "--encoder", "nature", "--sampler", "uniform"
    )
    resolve_train_args(args)
    assert (args.normalize_reward, args.encoder, args.sampler) == (False, "nature", "uniform")
    args = parse("--preset", "paper-procgen", "--batch-size", "512")
    sources = resolve_train_args(args)
    assert args.batch_size == 512 and args.n_minibatches is None
    assert sources["n_minibatches"] == "replaced by --batch-size"


def test_without_a_preset_the_library_defaults_apply() -> None:
    args = parse()
    sources = resolve_train_args(args)
    d = library_defaults()
    for key in ("gamma", "n_envs", "n_epochs", "batch_size", "encoder", "normalize_reward", "strategy"):
        assert getattr(args, key) == d[key] and sources[key] == "default"
    assert (args.gamma, args.n_epochs, args.encoder, args.normalize_reward) == (0.99, 4, "auto", False)
    assert args.eval_levels == list(range(10_000, 10_100))


def test_paper_minigrid_sets_what_the_paper_gives() -> None:
    args = build_parser().parse_args(["train", "MiniGrid-Empty-5x5-v0", "--preset", "paper-minigrid"])
    sources = resolve_train_args(args)
    assert (args.gamma, args.n_epochs, args.staleness_coef, args.normalize_reward) == (0.999, 3, 0.3, True)
    assert sources["n_envs"] == "default" and sources["encoder"] == "default"  # not set by the paper here


def test_contradictions_are_refused() -> None:
    with pytest.raises(CLIError, match="--batch-size or --n-minibatches, not both"):
        resolve_train_args(parse("--preset", "paper-procgen", "--batch-size", "64", "--n-minibatches", "4"))
    with pytest.raises(CLIError, match="does not divide the rollout"):
        resolve_train_args(parse("--n-envs", "3", "--n-steps", "5", "--n-minibatches", "4"))
    with pytest.raises(CLIError, match="--subproc contradicts --vec-env batched"):
        resolve_train_args(parse("--subproc", "--vec-env", "batched"))
    args = parse("--preset", "paper-procgen", "--subproc")  # --subproc is explicit: it wins over batched
    resolve_train_args(args)
    assert args.vec_env == "subproc"
    with pytest.raises(ValueError, match="preset must be one of paper-procgen, paper-minigrid"):
        resolve(argparse.Namespace(preset="paper"))


def test_the_recipe_table_documents_every_setting() -> None:
    table = recipe_table("paper-procgen")
    for setting in RECIPES["paper-procgen"]:
        assert f"`--{setting.dest.replace('_', '-')}`" in table
        assert setting.source
    docs = (Path(__file__).resolve().parents[1] / "docs" / "paper.md").read_text()
    for line in table.splitlines()[2:]:  # the page holds the generated table as it is
        assert line in docs, line


@pytest.mark.slow
def test_cpu_smoke_run_of_paper_procgen_uses_impala_and_reward_normalisation(tmp_path: Path) -> None:
    """One rollout of the preset on CPU; then --resume continues the normalisation statistics. (fruitbot:
    a random policy's episodes there last under 100 steps, so the held-out evaluations stay short.)"""
    from procgen_stock import require_backend

    require_backend()  # procgen-mirror or procgen-gym, whichever this stack has
    from plr_gym.cli import main
    from plr_gym.policies import ImpalaCNN, ImpalaCnnPolicy, count_parameters
    from plr_gym.ppo import LevelReplayPPO
    from plr_gym.reference import reference_values
    from plr_gym.run import VECNORMALIZE, RunDirectory

    out = tmp_path / "run"
    small = ["--n-envs", "4", "--n-steps", "64", "--eval-levels", "10000:10001", "--no-eval-train-levels"]
    small += [
        "--eval-freq",
        "100000",
        "--device",
        "cpu",
        "--torch-threads",
        "1",
        "--quiet",
        "--no-tensorboard",
    ]
    argv = ["train", "plr_gym/procgen-fruitbot-v0", "--preset", "paper-procgen", *small]
    assert main([*argv, "--timesteps", "256", "--out", str(out)]) == 0
    config = json.loads((out / "config.json").read_text())
    for key, value in PAPER_PROCGEN.items():
        if key not in ("timesteps", "n_envs", "n_steps"):
            assert config[key] == value, key
    assert config["batch_size"] == 32 and config["recipe_sources"]["gamma"] == "paper-procgen"
    assert config["test_protocol"] == TEST_PROTOCOLS["paper-procgen"]
    for dest, value in reference_values().items():  # level-replay's five behaviours, each with its source
        assert config[dest] == value and config["recipe_sources"][dest] == "paper-procgen", dest
    model = LevelReplayPPO.load(out / "model.zip", device="cpu")
    assert (model.value_loss, model.advantage_normalization) == ("clipped_max", "rollout")
    assert isinstance(model.policy, ImpalaCnnPolicy) and isinstance(
        model.policy.features_extractor, ImpalaCNN
    )
    assert model.policy.features_extractor.residual_skip == "relu"
    assert count_parameters(model.policy.features_extractor) == 622_144
    assert (model.gamma, model.n_epochs, model.batch_size, model.clip_range(1.0)) == (0.999, 3, 32, 0.2)
    assert (model.vf_coef, model.max_grad_norm) == (0.5, 0.5)
    # reward normalisation ran on every step: each step adds n_envs returns to the running statistics
    current = RunDirectory(out).current()
    assert current is not None and current.timestep == 256
    stats = np.load(current.file(VECNORMALIZE))
    assert float(stats["ret.count"]) == pytest.approx(1e-4 + 256)
    assert float(stats["ret.var"]) > 0
    # resuming continues them (not a fresh normaliser)
    assert main([*argv, "--timesteps", "512", "--resume", str(out)]) == 0
    current = RunDirectory(out).current()
    assert current is not None and current.timestep == 512
    stats = np.load(current.file(VECNORMALIZE))
    assert float(stats["ret.count"]) == pytest.approx(1e-4 + 512)


def test_paper_procgen_on_a_minigrid_env_says_why_it_cannot(tmp_path: Path) -> None:
    pytest.importorskip("minigrid")
    from plr_gym.cli import train

    args = build_parser().parse_args(
        ["train", "MiniGrid-Empty-5x5-v0", "--preset", "paper-procgen", "--out", str(tmp_path / "r")]
    )
    with pytest.raises(CLIError, match="which --preset paper-procgen sets"):
        train(args)
    assert not (tmp_path / "r").exists()  # refused before the run directory is touched


def test_the_sampler_side_is_the_samplers_paper_presets() -> None:
    from plr_gym.sampler import PAPER_PRESETS

    assert set(RECIPES) == set(PAPER_PRESETS)
    for name, settings in PAPER_PRESETS.items():
        recipe = {s.dest: s.value for s in RECIPES[name]}
        assert {k: recipe[k] for k in settings} == settings
