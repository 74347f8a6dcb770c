"""plr_gym.trl: the prompt curriculum inside TRL's GRPOTrainer (CPU, nothing downloaded).

Skipped where TRL is not installed (``pip install "plr-gym[trl]"``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("trl", reason='TRL is not installed: pip install "plr-gym[trl]"')

from plr_gym.prompts import PromptCurriculum
from plr_gym.trl import CURRICULUM_FILE, CurriculumRepeatSampler

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
import trl_grpo_run  # noqa: E402

# What plr_gym.trl overrides or calls of TRL's (and transformers') private interface, with the parameters
# plr_gym relies on, in order: (class that must define it, method, parameter names after self). TRL < 1.17 is
# pinned because these are private; a TRL that changes one fails here, naming it.
TRL_PRIVATE_INTERFACE = [
    ("trl.GRPOTrainer", "_get_train_sampler", ["dataset"]),  # overridden: the curriculum's sampler
    # overridden: every completion's reward (after TRL gathers them), observed by the curriculum
    ("trl.GRPOTrainer", "_calculate_rewards", ["inputs", "prompts", "completions", "completion_ids_list"]),
    ("trl.GRPOTrainer", "_generate_and_score_completions", ["inputs"]),  # overridden: filter_groups' mask
    ("trl.GRPOTrainer", "_save_checkpoint", ["model", "trial"]),  # overridden: the curriculum file first
    # called by the get_train_dataloader override (the rows with their index)
    ("transformers.Trainer", "_get_dataloader", ["dataset", "description", "batch_size", "sampler_fn"]),
    ("transformers.Trainer", "_get_output_dir", ["trial"]),  # called: the checkpoint folder
]


@pytest.mark.parametrize(("owner", "method", "params"), TRL_PRIVATE_INTERFACE, ids=lambda v: str(v))
def test_each_private_trl_method_plr_gym_uses_exists_with_its_signature(
    owner: str, method: str, params: list[str]
) -> None:
    """The installed TRL's own source: each private method that plr_gym.trl overrides or calls is defined
    by the class it is expected on (GRPOTrainer's, not inherited from elsewhere) and takes the parameters
    plr_gym passes, by name and in order; the attributes plr_gym reads are set in GRPOTrainer's source."""
    import importlib
    import inspect

    from trl import GRPOTrainer

    module, name = owner.rsplit(".", 1)
    cls = getattr(importlib.import_module(module), name)
    version = importlib.import_module("trl").__version__
    assert method in vars(cls), f"{owner} no longer defines {method} (TRL {version})"
    signature = inspect.signature(vars(cls)[method])
    names = [p for p in signature.parameters if p != "self"]
    assert names[: len(params)] == params, f"{owner}.{method}{signature}"
    assert all(
        signature.parameters[p].default is not inspect.Parameter.empty for p in names[len(params) :]
    ), f"{owner}.{method}{signature}: a new required parameter"
    source = inspect.getsource(GRPOTrainer)
    for attribute in ("self._train_batch_size", "self.reward_weights", "self.reward_func_names"):
        assert attribute in source or attribute in inspect.getsource(cls), attribute
    for attribute in ("self.num_generations", "self.num_iterations", '"completion_mask"'):
        assert attribute in source, attribute


def test_sampler_keeps_trls_repeat_layout_and_draws_at_fixed_points() -> None:
    cur = PromptCurriculum(6, seed=0, reward_range=(0.0, 1.0))
    sampler = CurriculumRepeatSampler(list(range(6)), cur, mini_repeat_count=2, batch_size=3, repeat_count=2)
    assert len(sampler) == 2 * 3 * 2 * 2
    it = iter(sampler)
    first = [next(it) for _ in range(12)]
    assert cur.num_batches == 2  # lookahead 1: two batches drawn before any outcome
    drawn = sampler.pending
    block = np.repeat(drawn[0], 2).tolist()
    assert first == block + block  # each id G times in a row, the block repeated repeat_count times
    with pytest.raises(RuntimeError, match="not the ones the curriculum drew"):
        sampler.observed(np.repeat(drawn[0], 3), np.ones(9))
    with pytest.raises(ValueError, match="rewards must lie in"):
        sampler.observed(np.repeat(drawn[0], 2), np.full(6, 2.0))  # refused: nothing popped or drawn
    assert cur.num_batches == 2 and len(sampler.pending) == 2
    keep, ahead = sampler.observed(np.repeat(drawn[0], 2), np.tile([1.0, 0.0], 3))
    assert keep.all() and ahead == 1 and cur.num_batches == 3  # the next batch is drawn right away
    assert cur.success_rate[drawn[0]].tolist() == [0.5] * 3 or len(set(drawn[0].tolist())) < 3
    restored = CurriculumRepeatSampler(list(range(6)), cur, mini_repeat_count=2, batch_size=3)
    restored.replay_first([ids.tolist() for ids in sampler.pending])
    assert [int(i) for i in list(iter(restored))[:6]] == np.repeat(sampler.pending[0], 2).tolist()
    with pytest.raises(ValueError, match="num_prompts=6 but the dataset has 5 rows"):
        CurriculumRepeatSampler(list(range(5)), cur, mini_repeat_count=2, batch_size=3)
    with pytest.raises(ValueError, match="a pending batch must hold 3 prompt ids"):
        restored.replay_first([[0, 1]])


def test_sampler_judges_each_real_group_when_a_prompt_is_drawn_twice() -> None:
    """learnability draws with replacement, so a batch may hold a prompt twice: two GRPO groups (TRL groups
    blocks of num_generations); DAPO's filter judges each, not the pooled prompt."""
    cur = PromptCurriculum(3, seed=0, filter_groups=True, success_rate_alpha=0.5)
    sampler = CurriculumRepeatSampler([0, 1, 2], cur, mini_repeat_count=2, batch_size=3, lookahead=0)
    sampler.replay_first([[1, 0, 1]])  # as a resumed run hands out a batch drawn before
    per = np.asarray(list(iter(sampler))[:6])
    assert per.tolist() == [1, 1, 0, 0, 1, 1]
    keep, _ = sampler.observed(per, np.array([1.0, 1.0, 1.0, 0.0, 0.0, 1.0]))
    assert keep.tolist() == [False, False, True, True, True, True]  # prompt 1's first group is flat
    assert cur.state_dict()["num_groups"] == 3 and cur.success_rate[1] == 0.75


def test_in_process_run_logs_the_curriculum_filters_groups_and_checkpoints_it(tmp_path: Path) -> None:
    trainer = trl_grpo_run.build_trainer(str(tmp_path), max_steps=3, save_steps=3, filter_groups=True)
    assert trainer.args.ignore_data_skip  # skipping batches on resume would draw from the curriculum
    trainer.train()
    logged = [h for h in trainer.state.log_history if "loss" in h]
    assert len(logged) == 3
    for key in ("effective_prompts", "seen_fraction", "p_hist/p=0", "filtered_share", "draws_ahead"):
        assert all(f"curriculum/{key}" in h for h in logged), (key, logged[0])
    assert logged[-1]["curriculum/filtered_share"] > 0  # 8 of the 12 prompts always fail or always succeed
    assert os.path.isfile(tmp_path / "checkpoint-3" / CURRICULUM_FILE)
    saved = PromptCurriculum(trl_grpo_run.NUM_PROMPTS, seed=0, filter_groups=True)
    extra = saved.load_from(tmp_path / "checkpoint-3" / CURRICULUM_FILE)
    # the next batch (handed to the loader) and the one drawn after the last outcomes (lookahead 1)
    assert extra is not None and len(extra["pending"]) == 2
    assert repr(saved.state_dict()) == repr(trainer.curriculum.state_dict())
    (tmp_path / "bare").mkdir()
    with pytest.raises(FileNotFoundError, match="not written by a curriculum trainer"):
        trainer.load_curriculum(tmp_path / "bare")


@pytest.mark.parametrize(
    ("rewards", "options", "threshold"),
    [
        ("plus_minus", {"curriculum_reward_range": [-1.0, 1.0]}, 0.0),  # DAPO's -1/+1 math reward
        ("two", {}, 0.5),  # accuracy + partial-credit format, summed: 0.1 to 1.45, no option needed
        ("two", {"curriculum_reward_range": [0.0, 2.0], "curriculum_success_threshold": 1.0}, 1.0),
    ],
)
def test_any_reward_reaches_the_curriculum_as_grpo_sums_it(
    tmp_path: Path, rewards: str, options: dict, threshold: float
) -> None:
    """-1/+1 rewards, partial credit and several reward functions: every group is observed once, with the
    weighted sum TRL's advantages use, by a curriculum built from the config's options."""
    record: list = []
    trainer = trl_grpo_run.build_trainer(
        str(tmp_path), max_steps=3, save_steps=100, rewards=rewards, config_options=options, record=record
    )
    trainer.train()
    cur = trainer.curriculum
    assert cur.success_threshold == threshold and cur.seed == 0
    # the config's defaults are the library's (the study "Estimates that keep up"): no floor while
    # estimates age, 40% of the draws on unseen prompts
    assert (cur.uniform_mass, cur.replay_prob, cur.evidence_half_life) == (0.0, 0.6, 50.0)
    assert cur.reward_range == (
        None if "curriculum_reward_range" not in options else tuple(options["curriculum_reward_range"])
    )
    # replay what the reward functions returned into a fresh curriculum: the same state
    replay = PromptCurriculum(trl_grpo_run.NUM_PROMPTS, seed=0, **{k[11:]: v for k, v in options.items()})
    for ids, values in record:
        values = np.asarray(values, dtype=np.float32) * (2 if rewards == "plus_minus" else 1)
        values = values - 1 if rewards == "plus_minus" else values  # 2r - 1 in float32, as TRL holds it
        replay.observe(np.asarray(ids), values.astype(np.float64))
    assert len(record) == cur.num_batches - 2  # lookahead 1: two drawn first, then one per outcome
    assert cur.state_dict()["num_groups"] == replay.state_dict()["num_groups"] > 0
    np.testing.assert_allclose(cur.reward_variance, replay.reward_variance, rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(cur.success_rate, replay.success_rate)
    if rewards == "two":  # partial credit: every group has spread
        assert (cur.scores[cur.seen] > 0).all()


def test_a_config_with_curriculum_options_and_a_curriculum_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="curriculum_uniform_mass but a curriculum was passed"):
        trl_grpo_run.build_trainer(str(tmp_path), max_steps=1)  # warm: the plain path builds
        from plr_gym.trl import CurriculumGRPOConfig, CurriculumGRPOTrainer

        trainer = trl_grpo_run.build_trainer(str(tmp_path), max_steps=1)
        CurriculumGRPOTrainer(
            model=trainer.model,
            reward_funcs=trainer.reward_funcs,
            args=CurriculumGRPOConfig(
                output_dir=str(tmp_path), use_cpu=True, report_to="none", curriculum_uniform_mass=0.3
            ),
            train_dataset=trainer.train_dataset,
            processing_class=trainer.processing_class,
            curriculum=PromptCurriculum(trl_grpo_run.NUM_PROMPTS),
        )
    with pytest.raises(ValueError, match=r"curriculum_\* options: rewards|reward_range must be a pair"):
        trl_grpo_run.build_trainer(
            str(tmp_path), max_steps=1, config_options={"curriculum_reward_range": [1.0, 0.0]}
        )


def _launch(out: Path, steps: int, resume: Path | None = None) -> list[dict]:
    torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable)) or shutil.which("torchrun")
    assert torchrun, "torchrun (from torch) not found"
    cmd = [torchrun, "--nproc_per_node", "2", str(HERE / "trl_grpo_run.py"), str(out), str(steps)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    env["OMP_NUM_THREADS"] = "1"
    proc = subprocess.run(
        [*cmd, *([str(resume)] if resume else [])], env=env, capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, proc.stderr[-5000:]
    return [json.loads((out / f"record-rank{r}.json").read_text()) for r in (0, 1)]


@pytest.mark.slow
def test_two_process_grpo_run_concentrates_and_resumes_with_the_same_curriculum(tmp_path: Path) -> None:
    full = _launch(tmp_path / "full", 8)  # checkpoints at steps 4 and 8
    resumed = _launch(tmp_path / "resumed", 8, resume=tmp_path / "full" / "checkpoint-4")
    for rank_full, rank_resumed in zip(full, resumed):
        assert rank_full["global_step"] == rank_resumed["global_step"] == 8
        # the resumed run drew exactly the batches the uninterrupted one drew, from the same state
        for key in ("draws", "success_rate", "num_batches", "rng", "pending"):
            assert rank_full[key] == rank_resumed[key], key
    assert full[0] == {**full[1], "log_history": full[0]["log_history"]}  # both ranks keep one curriculum
    draws = np.array(full[0]["draws"])
    p = np.array(trl_grpo_run.P)
    assert draws.sum() == 4 * full[0]["num_batches"]
    assert draws[p == 0.5].sum() / draws.sum() >= 0.5  # uniform: 1/3


def test_config_sets_replay_prob_and_reward_noise_from_the_command_line_and_refuses_bad_values(
    tmp_path: Path,
) -> None:
    from trl import TrlParser

    from plr_gym.trl import CurriculumGRPOConfig

    base = ["--output_dir", str(tmp_path), "--use_cpu", "true", "--report_to", "none"]
    (cfg,) = TrlParser((CurriculumGRPOConfig,)).parse_args_and_config(
        [*base, "--curriculum_replay_prob", "0.9", "--curriculum_reward_noise", "0.15"]
    )
    assert cfg.curriculum_options()["replay_prob"] == 0.9
    assert cfg.curriculum_options()["reward_noise"] == 0.15
    (default,) = TrlParser((CurriculumGRPOConfig,)).parse_args_and_config(base)
    assert default.curriculum_options()["replay_prob"] == "auto"
    assert default.curriculum_options()["reward_noise"] == 0.0
    # the trainer builds its curriculum with them
    trainer = trl_grpo_run.build_trainer(
        str(tmp_path),
        max_steps=1,
        config_options={"curriculum_replay_prob": "0.9", "curriculum_reward_noise": 0.15},
    )
    assert trainer.curriculum.replay_prob == 0.9
    assert trainer.curriculum.reward_noise == 0.15
    for bad in ("often", True):
        with pytest.raises(ValueError, match='curriculum_replay_prob must be "auto" or a number'):
            CurriculumGRPOConfig(
                output_dir=str(tmp_path), use_cpu=True, report_to="none", curriculum_replay_prob=bad
            ).curriculum_options()
    with pytest.raises(ValueError, match=r"curriculum_\* options: .*replay_prob"):
        trl_grpo_run.build_trainer(str(tmp_path), max_steps=1, config_options={"curriculum_replay_prob": "2"})
    with pytest.raises(ValueError, match=r"curriculum_\* options: .*reward_noise"):
        trl_grpo_run.build_trainer(
            str(tmp_path), max_steps=1, config_options={"curriculum_reward_noise": 0.7}
        )
