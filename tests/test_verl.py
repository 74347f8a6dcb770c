"""plr_gym.verl: the curriculum as verl's AbstractCurriculumSampler, against real verl (CPU).

Skipped where verl is not installed. It needs verl 0.5 to 0.7 (0.8 removed the interface), in its own
environment: pip install torch==2.13.0 "verl==0.7.1" "pyarrow>=17,<20" (verl 0.7.1 needs numpy < 2).
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip(
    "verl", reason='verl is not installed: pip install "verl==0.7.1" "pyarrow>=17,<20" (docs/prompts.md)'
)

import torch
from omegaconf import OmegaConf
from torchdata.stateful_dataloader import StatefulDataLoader
from verl import DataProto
from verl.experimental.dataset.sampler import AbstractCurriculumSampler
from verl.utils.dataset.rl_dataset import collate_fn

from plr_gym.verl import PromptCurriculumSampler

N, B, G = 60, 6, 8
P = np.repeat([0.0, 0.5, 1.0], N // 3)
ROWS = [{"input_ids": torch.tensor([i, i]), "index": i} for i in range(N)]


def data_config(**plr: object) -> object:
    return OmegaConf.create(
        {
            "train_batch_size": B,
            "seed": 0,
            "dataloader_num_workers": 0,
            "sampler": {
                "class_path": "pkg://plr_gym.verl",
                "class_name": "PromptCurriculumSampler",
                "plr": plr,
            },
        }
    )


def loader(sampler: PromptCurriculumSampler) -> StatefulDataLoader:
    # as verl's RayPPOTrainer builds it
    return StatefulDataLoader(
        ROWS, batch_size=B, sampler=sampler, num_workers=0, drop_last=True, collate_fn=collate_fn
    )


def rollout(batch_dict: dict, rng: np.random.Generator, plus_minus: bool = False) -> DataProto:
    """What verl's step does to the batch before update(): G completions per prompt, rewarded (0/1, or
    -1/+1 as verl's DAPO math reward)."""
    batch = DataProto.from_single_dict(batch_dict).repeat(repeat_times=G, interleave=True)
    ids = np.asarray(batch.non_tensor_batch["index"], dtype=np.int64)
    scores = torch.zeros(ids.size, 3)
    success = torch.as_tensor(rng.random(ids.size) < P[ids], dtype=torch.float32)
    scores[:, -1] = 2 * success - 1 if plus_minus else success
    batch.batch["token_level_scores"] = scores
    return batch


def test_verl_builds_the_sampler_from_its_config() -> None:
    from verl.trainer.main_ppo import create_rl_sampler

    sampler = create_rl_sampler(data_config(uniform_mass=0.2), ROWS)
    assert isinstance(sampler, PromptCurriculumSampler) and isinstance(sampler, AbstractCurriculumSampler)
    assert sampler.curriculum.uniform_mass == 0.2 and sampler.curriculum.seed == 0 and len(sampler) == N


def test_training_loop_concentrates_on_the_learnable_third() -> None:
    sampler = PromptCurriculumSampler(ROWS, data_config())
    rng = np.random.default_rng(0)
    drawn = []
    for _epoch in range(15):  # verl's fit(): for epoch ...: for batch_dict in train_dataloader
        for batch_dict in loader(sampler):
            drawn.append(np.asarray(batch_dict["index"], dtype=np.int64))
            sampler.update(rollout(batch_dict, rng))
    late = np.concatenate(drawn[50:])
    assert len(drawn) == 150 and ((late >= N // 3) & (late < 2 * N // 3)).mean() >= 0.6  # uniform: 1/3


def test_plus_minus_one_rewards_with_range_and_threshold_from_the_yaml_config() -> None:
    """verl's DAPO math reward is -1/+1; the range and the threshold come from the Hydra/YAML config."""
    from verl.trainer.main_ppo import create_rl_sampler

    sampler = create_rl_sampler(
        data_config(reward_range=OmegaConf.create([-1, 1]), success_threshold=0.0), ROWS
    )
    assert sampler.curriculum.reward_range == (-1.0, 1.0) and sampler.curriculum.success_threshold == 0.0
    rng = np.random.default_rng(0)
    drawn = []
    for _epoch in range(15):
        for batch_dict in loader(sampler):
            drawn.append(np.asarray(batch_dict["index"], dtype=np.int64))
            sampler.update(rollout(batch_dict, rng, plus_minus=True))
    cur = sampler.curriculum
    # the p = 0.5 third scores p(1 - p) on the range's unit scale, the others 0; successes are the +1s
    mid = cur.seen & (np.arange(N) >= N // 3) & (np.arange(N) < 2 * N // 3)
    p = cur.success_rate
    assert np.allclose(cur.scores[mid], p[mid] * (1 - p[mid]), atol=1e-12) and cur.scores[mid].mean() > 0.15
    assert (cur.scores[cur.seen & ~mid] == 0).all()
    late = np.concatenate(drawn[50:])
    assert ((late >= N // 3) & (late < 2 * N // 3)).mean() >= 0.6


def test_checkpoint_through_the_stateful_dataloader_resumes_the_same_draws() -> None:
    sampler = PromptCurriculumSampler(ROWS, data_config(method="thompson"))
    dl, rng = loader(sampler), np.random.default_rng(1)
    it = iter(dl)
    for _ in range(4):
        sampler.update(rollout(next(it), rng))
    saved = dl.state_dict()  # after update: nothing pending
    rng_state = rng.bit_generator.state
    expected = []
    for _ in range(10 - 4):  # to the end of the pass (10 batches)
        batch_dict = next(it)
        expected.append(np.asarray(batch_dict["index"]).tolist())
        sampler.update(rollout(batch_dict, rng))
    with pytest.raises(StopIteration):
        next(it)
    resumed = PromptCurriculumSampler(ROWS, data_config(method="thompson"))
    dl2 = loader(resumed)
    dl2.load_state_dict(saved)
    rng.bit_generator.state = rng_state
    got = []
    for batch_dict in dl2:  # the rest of the pass, then the pass ends as the original's did
        got.append(np.asarray(batch_dict["index"]).tolist())
        resumed.update(rollout(batch_dict, rng))
    assert got == expected
    assert repr(resumed.curriculum.state_dict()) == repr(sampler.curriculum.state_dict())


def test_bad_batches_are_refused_with_the_curriculum_unchanged() -> None:
    sampler = PromptCurriculumSampler(ROWS, data_config())
    it = iter(loader(sampler))
    batch_dict = next(it)
    batch = rollout(batch_dict, np.random.default_rng(0))
    before = repr(sampler.curriculum.state_dict())
    wrong = batch.select(deepcopy=True)
    wrong.non_tensor_batch["index"] = (np.asarray(wrong.non_tensor_batch["index"]) + 1) % N
    with pytest.raises(ValueError, match=r"extra_info\.index"):
        sampler.update(wrong)
    bad = rollout(batch_dict, np.random.default_rng(0))  # a separate copy of the same batch
    bad.batch["token_level_scores"][0, -1] = np.nan
    with pytest.raises(ValueError, match=r"rewards must be finite"):
        sampler.update(bad)
    assert repr(sampler.curriculum.state_dict()) == before
    sampler.update(batch)
    with pytest.raises(RuntimeError, match="never handed out"):
        sampler.update(batch)
    with pytest.raises(ValueError, match="train_batch_size"):
        PromptCurriculumSampler(ROWS, OmegaConf.create({"train_batch_size": 0}))
    with pytest.raises(TypeError, match=r"data\.sampler\.plr"):
        PromptCurriculumSampler(ROWS, data_config(nope=1))
