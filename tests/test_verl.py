"""plr_gym.verl against real verl on CPU: the dataset class (verl 0.7 and 0.9) and the sampler (verl <= 0.7).

Skipped where verl is not installed. CI runs it with verl 0.7.1 (Python 3.11, numpy 1.26: the .venv stack,
where the V1 tests skip) and with verl 0.9.1 and TransferQueue (Python 3.12, numpy 2: the .venv312 stack,
`make test-312`, pip install -e ".[verl-v1]"), where the sampler tests skip (verl 0.8 removed the interface).
"""

from __future__ import annotations

import importlib.util
import itertools
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip(
    "verl", reason='verl is not installed: pip install "verl==0.7.1" "pyarrow>=17,<20" (docs/prompts.md)'
)

import torch
from omegaconf import OmegaConf
from torchdata.stateful_dataloader import StatefulDataLoader
from verl import DataProto
from verl.utils.dataset.rl_dataset import collate_fn

from plr_gym.verl import HAS_CURRICULUM_SAMPLER, PromptCurriculumDataset, PromptCurriculumSampler

needs_sampler = pytest.mark.skipif(
    not HAS_CURRICULUM_SAMPLER,
    reason="verl >= 0.8 has no AbstractCurriculumSampler (the sampler's interface)",
)

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


@needs_sampler
def test_verl_builds_the_sampler_from_its_config() -> None:
    from verl.experimental.dataset.sampler import AbstractCurriculumSampler
    from verl.trainer.main_ppo import create_rl_sampler

    sampler = create_rl_sampler(data_config(uniform_mass=0.2), ROWS)
    assert isinstance(sampler, PromptCurriculumSampler) and isinstance(sampler, AbstractCurriculumSampler)
    assert sampler.curriculum.uniform_mass == 0.2 and sampler.curriculum.seed == 0 and len(sampler) == N


@needs_sampler
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


@needs_sampler
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
    # the p = 0.5 third's reward variance is p(1 - p) on the range's unit scale (variance / 2²), the others'
    # 0; successes are the +1s (the draws' scores age from these: evidence_half_life)
    mid = cur.seen & (np.arange(N) >= N // 3) & (np.arange(N) < 2 * N // 3)
    p = cur.success_rate
    unit = cur.reward_variance / 4.0
    assert np.allclose(unit[mid], p[mid] * (1 - p[mid]), atol=1e-12) and cur.scores[mid].mean() > 0.15
    assert (unit[cur.seen & ~mid] == 0).all()
    late = np.concatenate(drawn[50:])
    assert ((late >= N // 3) & (late < 2 * N // 3)).mean() >= 0.6


@needs_sampler
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


@needs_sampler
def test_bad_batches_are_refused_with_the_curriculum_unchanged() -> None:
    sampler = PromptCurriculumSampler(ROWS, data_config())
    it = iter(loader(sampler))
    batch_dict = next(it)
    batch = rollout(batch_dict, np.random.default_rng(0))
    before = repr(sampler.curriculum.state_dict())
    wrong = batch.select(deepcopy=True)
    wrong.non_tensor_batch["index"] = (np.asarray(wrong.non_tensor_batch["index"]) + 1) % N
    with pytest.raises(ValueError, match=r"not the rows the curriculum drew"):
        sampler.update(wrong)
    bad = rollout(batch_dict, np.random.default_rng(0))  # a separate copy of the same batch
    bad.batch["token_level_scores"][0, -1] = np.nan
    with pytest.raises(ValueError, match=r"rewards must be finite"):
        sampler.update(bad)
    assert repr(sampler.curriculum.state_dict()) == before
    sampler.update(batch)
    with pytest.raises(RuntimeError, match="never handed out"):
        sampler.update(batch)
    next(it)
    with pytest.raises(RuntimeError, match="before update\\(\\) of the previous one"):
        next(it)  # a trainer that fetches again without update (the DAPO recipe's)
    with pytest.raises(ValueError, match="train_batch_size"):
        PromptCurriculumSampler(ROWS, OmegaConf.create({"train_batch_size": 0}))
    with pytest.raises(TypeError, match=r"data\.sampler\.plr"):
        PromptCurriculumSampler(ROWS, data_config(nope=1))


@needs_sampler
def test_sampler_maps_labels_to_positions_and_refuses_duplicate_labels() -> None:
    """A filtered dataset (verl's filter_overlong_prompts): positions 0-4 carry the labels 0, 2, 4, 5, 6."""
    labels = [i for i in range(2 * N) if i % 4 in (0, 2) or i % 8 == 5][:N]
    rows = [{"input_ids": torch.tensor([lab, lab]), "index": lab} for lab in labels]
    sampler = PromptCurriculumSampler(rows, data_config())
    assert sampler.positions(labels).tolist() == list(range(N))
    rng = np.random.default_rng(0)
    for _epoch in range(3):
        for batch_dict in StatefulDataLoader(
            rows, batch_size=B, sampler=sampler, num_workers=0, drop_last=True, collate_fn=collate_fn
        ):
            batch = DataProto.from_single_dict(batch_dict).repeat(repeat_times=G, interleave=True)
            positions = sampler.positions(batch.non_tensor_batch["index"])
            scores = torch.zeros(positions.size, 2)
            scores[:, -1] = torch.as_tensor(rng.random(positions.size) < P[positions], dtype=torch.float32)
            batch.batch["token_level_scores"] = scores
            sampler.update(batch)
    cur = sampler.curriculum  # each row's outcomes landed on its position: p = 0 and p = 1 thirds exact
    assert (cur.success_rate[cur.seen & (P == 0)] == 0).all() and (
        cur.success_rate[cur.seen & (P == 1)] == 1
    ).all()
    twice = [
        {"input_ids": torch.tensor([0, 0]), "index": i % (N // 2)} for i in range(N)
    ]  # 2 files, each from 0
    with pytest.raises(ValueError, match=r"must be unique\. Use plr_gym\.verl\.PromptCurriculumDataset"):
        PromptCurriculumSampler(twice, data_config())


# ---------------------------------------------------------------------- the dataset class (verl 0.7 and 0.9)
WORDS = ["[PAD]", "[UNK]", "solve", "x"]


def _tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    out = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]")
    out.chat_template = "{% for m in messages %}{{ m['content'] }} {% endfor %}"
    return out


def _parquet(path: Path, labels: range) -> str:
    """Rows labelled ``extra_info.index = label``; label ``i``'s prompt has ``1 + i % 4`` words, so a
    ``max_prompt_length`` of 3 filters a quarter of them out (positions then differ from labels)."""
    import datasets

    rows = [
        {
            "data_source": "toy",
            "prompt": [{"role": "user", "content": " ".join(["solve"] + ["x"] * (i % 4))}],
            "reward_model": {"ground_truth": str(i)},
            "extra_info": {"index": i},
        }
        for i in labels
    ]
    datasets.Dataset.from_list(rows).to_parquet(str(path))
    return str(path)


def _verl_data_config(tmp_path: Path, train: list[str], **plr: object) -> object:
    return OmegaConf.create(
        {
            "train_files": train,
            "val_files": [_parquet(tmp_path / "val.parquet", range(8))],
            "prompt_key": "prompt",
            "max_prompt_length": 3,
            "filter_overlong_prompts": True,
            "filter_overlong_prompts_workers": 1,
            "truncation": "error",
            "train_batch_size": B,
            "dataloader_num_workers": 0,
            "shuffle": True,
            "seed": 0,
            "cache_dir": str(tmp_path / "cache"),
            "custom_cls": {"path": "pkg://plr_gym.verl", "name": "PromptCurriculumDataset"},
            "sampler": {"class_path": None, "class_name": None},  # verl 0.7 reads it: its RandomSampler
            "plr": plr,
        }
    )


def _create(config: object, files: object):
    """verl's own builders: create_rl_dataset (which reads data.custom_cls) and create_rl_sampler."""
    try:
        from verl.trainer.ppo.utils import create_rl_dataset, create_rl_sampler
    except ImportError:  # verl 0.7
        from verl.trainer.main_ppo import create_rl_dataset, create_rl_sampler
    dataset = create_rl_dataset(files, config, _tokenizer(), None)
    return dataset, create_rl_sampler(config, dataset)


_UID = itertools.count()


def _step(batch_dict: dict, rng: np.random.Generator, plus_minus: bool = True) -> DataProto:
    """verl's RayPPOTrainer step, as far as the dataset sees it: a uid per prompt row (GRPO's group), the
    batch keeps only the reward keys
    (its _get_gen_batch pops the rest), is repeated G times and rewarded; then on_batch_end(batch)."""
    batch = DataProto.from_single_dict(batch_dict)
    batch.non_tensor_batch["uid"] = np.array([f"u{next(_UID)}" for _ in range(len(batch))], dtype=object)
    keep = {"data_source", "reward_model", "extra_info", "uid"} & batch.non_tensor_batch.keys()
    batch.pop(batch_keys=[], non_tensor_batch_keys=list(set(batch.non_tensor_batch) - keep))
    batch = batch.repeat(repeat_times=G, interleave=True)
    labels = np.asarray([e["index"] for e in batch.non_tensor_batch["extra_info"]])  # the truth, by label
    p = np.array([0.0, 0.5, 1.0])[labels % 3]
    success = rng.random(labels.size) < p
    scores = torch.zeros(labels.size, 2)
    scores[:, -1] = torch.as_tensor(np.where(success, 1.0, -1.0 if plus_minus else 0.0), dtype=torch.float32)
    batch.batch["token_level_scores"] = scores
    return batch


def _loader(dataset, sampler) -> StatefulDataLoader:  # as verl's trainer builds it
    return StatefulDataLoader(
        dataset, batch_size=B, sampler=sampler, num_workers=0, drop_last=True, collate_fn=collate_fn
    )


def test_verl_calls_on_batch_end_on_its_training_dataset() -> None:
    """The hook the dataset relies on, in the installed verl's trainer source (not imported: it needs GPUs'
    packages): RayPPOTrainer.fit calls self.train_dataset.on_batch_end(batch=batch) after each step."""
    spec = importlib.util.find_spec("verl.trainer.ppo.ray_trainer")
    assert spec is not None and spec.origin is not None
    assert "self.train_dataset.on_batch_end(batch=batch)" in Path(spec.origin).read_text()


def test_dataset_on_a_filtered_set_draws_learns_and_resumes_by_position(tmp_path: Path) -> None:
    """A real verl dataset, filtered by filter_overlong_prompts (positions != extra_info.index), -1/+1
    rewards with reward_range from the YAML config: outcomes land on the right rows, draws concentrate on the
    p = 0.5 third, a StatefulDataLoader checkpoint resumes the same draws."""
    train = [_parquet(tmp_path / "train.parquet", range(4 * N // 3))]
    config = _verl_data_config(tmp_path, train, reward_range=OmegaConf.create([-1, 1]))
    dataset, sampler = _create(config, train)
    val, _ = _create(config, config.val_files)
    assert isinstance(dataset, PromptCurriculumDataset) and dataset.curriculum is not None
    assert val.curriculum is None and len(val) == 6  # validation: verl's plain dataset (8 rows, 2 too long)
    labels = np.asarray([e["index"] for e in dataset.dataframe["extra_info"]])
    assert len(dataset) == N and labels[:5].tolist() == [0, 1, 2, 4, 5]  # filtered: 3, 7, 11, ... are gone
    cur = dataset.curriculum
    assert cur.reward_range == (-1.0, 1.0) and cur.success_threshold == 0.0 and cur.seed == 0
    rng = np.random.default_rng(0)
    drawn = []
    dl = _loader(dataset, sampler)
    for _epoch in range(12):
        for batch_dict in dl:
            positions = [e["plr_prompt_id"] for e in batch_dict["extra_info"]]
            drawn.append(labels[positions])
            assert [e["index"] for e in batch_dict["extra_info"]] == labels[positions].tolist()
            dataset.on_batch_end(batch=_step(batch_dict, rng))
    p_true = np.array([0.0, 0.5, 1.0])[labels % 3]
    seen = cur.seen
    assert (cur.success_rate[seen & (p_true == 0)] == 0).all() and (
        cur.success_rate[seen & (p_true == 1)] == 1
    ).all()
    late = np.concatenate(drawn[40:])
    assert len(drawn) == 12 * (N // B) and (late % 3 == 1).mean() >= 0.6  # uniform: 1/3
    state = cur.state_dict()  # every group (one per uid, a prompt drawn twice is two) observed once
    assert state["num_groups"] == len(drawn) * B and state["num_completions"] == len(drawn) * B * G
    # resume: save the loader mid-pass, continue; a fresh dataset restored from the save draws the same
    it = iter(dl)
    for _ in range(3):
        dataset.on_batch_end(batch=_step(next(it), rng))
    saved, rng_state = dl.state_dict(), rng.bit_generator.state
    expected = []
    for batch_dict in it:
        expected.append([e["plr_prompt_id"] for e in batch_dict["extra_info"]])
        dataset.on_batch_end(batch=_step(batch_dict, rng))
    dataset2, sampler2 = _create(config, train)
    dl2 = _loader(dataset2, sampler2)
    dl2.load_state_dict(saved)
    rng.bit_generator.state = rng_state
    got = []
    for batch_dict in dl2:
        got.append([e["plr_prompt_id"] for e in batch_dict["extra_info"]])
        dataset2.on_batch_end(batch=_step(batch_dict, rng))
    assert got == expected and len(got) == N // B - 3
    assert repr(dataset2.curriculum.state_dict()) == repr(cur.state_dict())


def test_dataset_refuses_what_would_break_the_curriculum(tmp_path: Path) -> None:
    train = [_parquet(tmp_path / "train.parquet", range(4 * N // 3))]
    config = _verl_data_config(tmp_path, train)
    dataset, sampler = _create(config, train)
    it = iter(_loader(dataset, sampler))
    batch_dict = next(it)
    with pytest.raises(RuntimeError, match=r"does not call it, or the loader runs ahead"):
        next(it)  # a second batch before the first one's on_batch_end
    wrong = _step(batch_dict, np.random.default_rng(0))
    for e in wrong.non_tensor_batch["extra_info"]:
        e["plr_prompt_id"] = (e["plr_prompt_id"] + 1) % N
    before = repr(dataset.curriculum.state_dict())
    with pytest.raises(ValueError, match="not the ones the curriculum drew"):
        dataset.on_batch_end(batch=wrong)
    assert repr(dataset.curriculum.state_dict()) == before
    with pytest.raises(ValueError, match=r"dataloader_num_workers=8.*set data\.dataloader_num_workers=0"):
        _create(OmegaConf.merge(config, {"dataloader_num_workers": 8}), train)
    with pytest.raises(ValueError, match="point val_files at a copy"):
        _create(OmegaConf.merge(config, {"val_files": train}), train)
    with pytest.raises(TypeError, match=r"data\.plr: .*nope"):
        _create(OmegaConf.merge(config, {"plr": {"nope": 1}}), train)


# --------------------------------- the V1 path's bookkeeping, without verl's V1 trainer (runs on verl 0.7)
def _ledger_run(order_seed: int | None) -> tuple[object, list[list[int]]]:
    """Four generation batches through a _DrawLedger; groups recorded in a shuffled order (or draw order)."""
    from plr_gym.prompts import PromptCurriculum
    from plr_gym.verl import _DrawLedger

    ledger = _DrawLedger(PromptCurriculum(N, seed=3))
    rng, shuffle = np.random.default_rng(0), np.random.default_rng(order_seed)
    drawn = []
    for k in (B, 2, 3, B):
        ledger.draw(k)
        taken = [ledger.take() for _ in range(k)]
        drawn.append([pos for pos, _ in taken])
        rewards = {serial: (rng.random(G) < P[pos]).astype(float) for pos, serial in taken}
        order = list(range(k)) if order_seed is None else shuffle.permutation(k).tolist()
        for i in order:
            pos, serial = taken[i]
            ledger.record(serial, pos, rewards[serial])
    assert ledger.end_of_batch() == 0
    return ledger, drawn


def test_draw_ledger_observes_groups_in_draw_order_whatever_order_they_finish() -> None:
    """verl's replay buffer reports groups in the order they finish; the curriculum must not depend on it:
    it observes each batch's groups in draw order, at the next draw, as one observe call."""
    from plr_gym.prompts import PromptCurriculum

    a, drawn_a = _ledger_run(None)
    b, drawn_b = _ledger_run(1)
    assert drawn_a == drawn_b and repr(a.curriculum.state_dict()) == repr(b.curriculum.state_dict())
    plain, rng = PromptCurriculum(N, seed=3), np.random.default_rng(0)  # the same loop on the curriculum
    for batch in drawn_a:
        ids = plain.next_prompts(len(batch))
        assert ids.tolist() == batch
        out = np.concatenate([(rng.random(G) < P[i]).astype(float) for i in ids])
        plain.observe(np.repeat(ids, G), out, groups=np.repeat(np.arange(ids.size), G))
    assert repr(plain.state_dict()) == repr(a.curriculum.state_dict())
    assert a.curriculum.state_dict()["num_groups"] == sum(map(len, drawn_a))


def test_draw_ledger_refuses_unknown_or_repeated_groups_and_counts_lost_ones() -> None:
    from plr_gym.prompts import PromptCurriculum
    from plr_gym.verl import _DrawLedger

    ledger = _DrawLedger(PromptCurriculum(N, seed=0, reward_range=(0, 1)))
    ledger.draw(3)
    with pytest.raises(RuntimeError, match="wait for the loader"):
        ledger.draw(1)
    (p0, s0), (p1, s1) = ledger.take(), ledger.take()
    with pytest.raises(RuntimeError, match="never fetched"):
        ledger.end_of_batch()
    ledger.take()
    with pytest.raises(ValueError, match="no open draw"):
        ledger.record(s0, p0 + 1, [1.0])  # not the position handed out as s0
    with pytest.raises(ValueError, match="no completions"):
        ledger.record(s0, p0, [])
    ledger.record(s0, p0, [1.0, 0.0])
    with pytest.raises(ValueError, match="no open draw"):
        ledger.record(s0, p0, [1.0, 0.0])  # reported twice
    ledger.record(s1, p1, [2.0, 0.0])  # outside reward_range: refused when observed, at the next draw
    saved, before = ledger.state_dict(), repr(ledger.curriculum.state_dict())
    with pytest.raises(ValueError, match="reward_range"):
        ledger.end_of_batch()
    assert repr(ledger.curriculum.state_dict()) == before and len(ledger.outcomes) == 2
    ledger.outcomes[s1] = (p1, np.array([1.0, 0.0]))
    assert ledger.end_of_batch() == 1 and ledger.groups_without_outcome == 1  # the third never came back
    assert ledger.curriculum.state_dict()["num_groups"] == 2
    restored = _DrawLedger(PromptCurriculum(N, seed=0, reward_range=(0, 1)))
    restored.load_state_dict(saved)  # recorded outcomes kept, open draws dropped
    assert sorted(restored.outcomes) == [s0, s1] and not restored.outstanding and restored.next_serial == 3
    with pytest.raises(ValueError, match="malformed"):
        restored.load_state_dict({"next_serial": 0})


def test_dataset_tells_the_v1_trainer_from_its_config_and_refuses_it_unprepared(tmp_path: Path) -> None:
    """verl builds the dataset with the ``data`` node of its whole config: the dataset reads
    ``trainer.use_v1`` there and refuses, before training, a V1 trainer whose replay buffer would not
    report outcomes, or an async mode."""
    from plr_gym.verl import _v1_trainer

    train = [_parquet(tmp_path / "train.parquet", range(4 * N // 3))]
    data = _verl_data_config(tmp_path, train)
    legacy = OmegaConf.create({"data": data, "trainer": {"use_v1": False}})
    v1 = OmegaConf.create({"data": data, "trainer": {"use_v1": True, "v1": {"trainer_mode": "sync"}}})
    assert not _v1_trainer(data) and not _v1_trainer(legacy.data) and _v1_trainer(v1.data)
    with pytest.raises(ValueError, match=r"custom_sampler is not set: .*name=PromptCurriculumReplayBuffer"):
        _create(v1.data, train)
    async_mode = OmegaConf.merge(v1, {"trainer": {"v1": {"trainer_mode": "separate_async"}}})
    with pytest.raises(ValueError, match=r"trainer_mode='separate_async'.*'sync' mode only"):
        _create(async_mode.data, train)
    dataset, _ = _create(legacy.data, train)  # the legacy trainer: the on_batch_end path
    assert dataset.ledger is None and not dataset.v1


# --------------------------------------- verl 0.9's V1 trainer: PromptCurriculumReplayBuffer (0.9 only)
def _has_v1() -> bool:
    try:
        return (
            importlib.util.find_spec("verl.trainer.ppo.v1") is not None
            and importlib.util.find_spec("transfer_queue") is not None
        )
    except ImportError:  # verl 0.7: no verl.trainer.ppo.v1
        return False


needs_v1 = pytest.mark.skipif(
    not _has_v1(), reason="verl >= 0.9 with TransferQueue (the V1 trainer's store) is not installed"
)


@pytest.fixture(scope="module")
def transfer_queue():
    """A real TransferQueue (controller + one storage unit, Ray actors on this machine)."""
    import ray
    import transfer_queue as tq

    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    tq.init(OmegaConf.create({"backend": {"SimpleStorage": {"num_data_storage_units": 1}}}))
    yield tq
    tq.close()
    ray.shutdown()


def _v1_ppo_trainer(tmp_path: Path, train: str, *overrides: str):
    """verl's V1 PPOTrainerSync from verl's own ppo_trainer.yaml, with its data path built by its own
    _init_dataloader (data.custom_cls -> PromptCurriculumDataset) and its replay buffer from
    trainer.v1.sampler.custom_sampler; the model, the workers and the rollout servers are not built."""
    import verl
    from hydra import compose, initialize_config_dir
    from verl.trainer.ppo.v1 import PPOTrainerSync

    val = _parquet(tmp_path / "val.parquet", range(8))
    with initialize_config_dir(
        config_dir=str(Path(verl.__file__).parent / "trainer/config"), version_base=None
    ):
        config = compose(
            config_name="ppo_trainer",
            overrides=[
                f"data.train_files=['{train}']",
                f"data.val_files=['{val}']",
                "data.max_prompt_length=3",
                "data.filter_overlong_prompts=true",
                "data.filter_overlong_prompts_workers=1",
                "data.truncation=error",
                f"data.train_batch_size={B}",
                "data.dataloader_num_workers=0",
                "data.custom_cls.path=pkg://plr_gym.verl",
                "data.custom_cls.name=PromptCurriculumDataset",
                "trainer.v1.sampler.custom_sampler.path=pkg://plr_gym.verl",
                "trainer.v1.sampler.custom_sampler.name=PromptCurriculumReplayBuffer",
                f"actor_rollout_ref.rollout.n={G}",
                "algorithm.adv_estimator=grpo",
                "+data.plr.reward_range=[-1,1]",
                *overrides,
            ],
        )
    trainer = PPOTrainerSync(config)
    trainer.tokenizer, trainer.processor = _tokenizer(), None
    trainer._init_dataloader()
    return trainer


class _Rollouts:
    """What verl's AgentLoopManagerTQ/AgentLoopWorkerTQ do with a batch, without a model: G completions per
    prompt, each +1 with the prompt's pass rate (0, 1/2, 1 by label) and -1 otherwise, put into
    TransferQueue as the worker puts them (keys ``{uid}_{session}_0`` with ``rm_scores`` and the prompt's
    fields), then the prompt's status ``finished``. The outcomes of a row depend on its draw number only,
    so a resumed run generates what the original did. With ``finish_seed``, prompts finish later, a random
    part of those still running at each of the replay buffer's polls, in a random order (real rollouts
    overlap verl's polls: refills are dispatched while earlier groups run, and the batch fills with more in
    flight)."""

    def __init__(self, tq, finish_seed: int | None = None, scored: bool = True) -> None:
        self.tq, self.generated = tq, []  # generated: (position, label) per prompt, in dispatch order
        # scored=False: no rm_scores in TransferQueue (a colocated reward model writes them later, from
        # self.rewards: completion key -> reward)
        self.scored, self.rewards = scored, {}
        self.calls: list[tuple[int, list[list[float]]]] = []  # per dispatch: its step, each group's rewards
        self.running: list[tuple[str, list[str], list[dict], int]] = []
        self.finish_rng = None if finish_seed is None else np.random.default_rng(finish_seed)

    def generate_sequences(self, batch) -> None:
        uids = [str(u) for u in batch["uid"]]
        extras = [getattr(e, "data", e) for e in (batch["extra_info"][i] for i in range(len(uids)))]
        step, call = int(batch["global_steps"]), []
        for uid, extra in zip(uids, extras, strict=True):
            self.generated.append((extra["plr_prompt_id"], extra["index"]))
            rng = np.random.default_rng([7, extra["plr_draw"]])
            call.append([])
            keys, fields = [], []
            for session in range(G):
                success = rng.random() < [0.0, 0.5, 1.0][extra["index"] % 3]
                call[-1].append(1.0 if success else -1.0)
                keys.append(f"{uid}_{session}_0")
                reward = torch.tensor([0.0, 1.0 if success else -1.0])
                self.rewards[keys[-1]] = reward
                fields.append({"rm_scores": reward, "extra_info": extra, "uid": uid})
                if not self.scored:
                    del fields[-1]["rm_scores"]
            self.running.append((uid, keys, fields, step))
        self.calls.append((step, call))
        if self.finish_rng is None:
            self.finish(len(self.running))
        else:
            self.tq.kv_batch_put(keys=uids, partition_id="train", tags=[{"status": "running"}] * len(uids))

    def finish(self, k: int) -> None:
        """Put the completions of ``k`` running prompts (a random choice with ``finish_seed``)."""
        from verl.utils.tensordict_utils import list_of_dict_to_tensordict

        order = list(range(len(self.running)))
        if self.finish_rng is not None:
            order = self.finish_rng.permutation(len(self.running)).tolist()
        done = [self.running[i] for i in order[:k]]
        self.running = [self.running[i] for i in sorted(order[k:])]
        if not done:
            return
        self.tq.kv_batch_put(
            keys=[key for _, keys, _, _ in done for key in keys],
            partition_id="train",
            fields=list_of_dict_to_tensordict([x for _, _, fields, _ in done for x in fields]),
            tags=[{"status": "success", "global_steps": s} for _, keys, _, s in done for _ in keys],
        )
        uids = [uid for uid, _, _, _ in done]
        self.tq.kv_batch_put(keys=uids, partition_id="train", tags=[{"status": "finished"}] * len(uids))

    def poll(self, partition_id: str, last_debug_time: float) -> float:
        """The replay buffer's wait between polls (2 s in verl): here, some running prompts finish."""
        assert self.finish_rng is not None and self.running, "the buffer waits for nothing"
        self.finish(int(self.finish_rng.integers(1, len(self.running) + 1)))
        return last_debug_time


def _v1_steps(trainer, rollouts: _Rollouts, steps: range, tq) -> list[dict]:
    """verl's PPOTrainer.fit, as far as prompts and rewards go: prepare_step (the step's prompts to the
    rollout), replay_buffer.sample (with dynamic sampling's evictions and refills), then the step's data is
    cleared from TransferQueue. Returns each step's trained groups (labels, rewards) and metrics."""
    out = []
    for step in steps:
        trainer.global_steps = step
        trainer.prepare_step()
        batch, metrics = trainer.replay_buffer.sample(global_steps=step, partition_id="train", batch_size=B)
        data = tq.kv_batch_get(
            keys=batch.keys, partition_id="train", select_fields=["rm_scores", "extra_info"]
        )
        groups: dict[str, list[float]] = {}
        for key, reward in zip(batch.keys, data["rm_scores"], strict=True):
            groups.setdefault(key.split("_")[0], []).append(float(reward.sum()))
        out.append({"groups": list(groups.values()), "metrics": metrics})
        tq.kv_clear(keys=batch.keys, partition_id="train")
    return out


def _spy_draws(dataset) -> list[int]:
    drawn: list[int] = []
    next_prompts = dataset.curriculum.next_prompts

    def spy(k: int) -> np.ndarray:
        ids = next_prompts(k)
        drawn.extend(ids.tolist())
        return ids

    dataset.curriculum.next_prompts = spy
    return drawn


@needs_v1
@pytest.mark.parametrize(
    ("dynamic_sampling", "finish_seed"),
    [(False, None), (True, None), (True, 5)],
    ids=["plain", "filter_groups", "filter_groups-overlapping"],
)
def test_v1_trainer_draws_generates_observes_every_group_once_and_resumes(
    tmp_path: Path, transfer_queue, dynamic_sampling: bool, finish_seed: int | None
) -> None:
    """verl 0.9's default (V1, sync) trainer, its data path and replay buffer real, over a real
    TransferQueue: the prompts generated are the ones the curriculum drew (the refills of dynamic sampling
    too); every generated group, the dropped all-equal ones included, is observed once; draws concentrate
    on the learnable third; a checkpoint of the trainer's loader (verl's data.pt) resumes exactly."""
    from plr_gym.verl import PromptCurriculumReplayBuffer

    tq = transfer_queue
    train = _parquet(tmp_path / "train.parquet", range(4 * N // 3))
    extra = ["algorithm.filter_groups.enable=true", "algorithm.filter_groups.metric=reward"]
    trainer = _v1_ppo_trainer(tmp_path, train, *(extra if dynamic_sampling else []))
    dataset, buffer = trainer.train_dataset, trainer.replay_buffer
    assert isinstance(dataset, PromptCurriculumDataset) and dataset.v1 and len(dataset) == N
    assert isinstance(buffer, PromptCurriculumReplayBuffer)
    assert (buffer.filter_groups_metric == "reward") == dynamic_sampling
    assert trainer.config.data.gen_batch_size == (1 if dynamic_sampling else None)  # verl's own setting
    labels = np.asarray([e["index"] for e in dataset.dataframe["extra_info"]])
    drawn = _spy_draws(dataset)
    rollouts = _Rollouts(tq, finish_seed)
    trainer.agent_loop_manager = rollouts
    if finish_seed is not None:
        buffer._wait_for_next_poll = rollouts.poll
    steps = _v1_steps(trainer, rollouts, range(1, 26), tq)
    generated = [pos for pos, _ in rollouts.generated]
    assert generated == drawn and [lab for _, lab in rollouts.generated] == labels[drawn].tolist()
    cur = dataset.curriculum
    state = cur.state_dict()
    assert state["num_groups"] == len(generated) and state["num_completions"] == len(generated) * G
    assert dataset.ledger.groups_without_outcome == 0 and not dataset.ledger.outstanding
    p_true = np.array([0.0, 0.5, 1.0])[labels % 3]
    assert (cur.success_rate[cur.seen & (p_true == 0)] == 0).all()
    assert (cur.success_rate[cur.seen & (p_true == 1)] == 1).all()
    assert cur.seen[p_true != 0.5].any()  # measured although (with filter_groups) never trained on
    late = labels[np.asarray(drawn[len(drawn) // 2 :])]
    assert (late % 3 == 1).mean() >= 0.6  # uniform: 1/3
    trained = [g for s in steps for g in s["groups"]]
    assert all(len(g) == G for g in trained) and len(trained) == 25 * B
    if dynamic_sampling:  # verl dropped every all-equal group and refilled with the curriculum's draws
        assert all(min(g) < max(g) for g in trained) and len(generated) > 25 * B
        assert sum(s["metrics"].get("training/filter_groups/evicted_samples", 0) for s in steps) > 0
        if finish_seed is not None:  # groups still running when the batch filled: verl discarded them
            surplus = "training/filter_groups/discarded_surplus_samples"
            assert sum(s["metrics"].get(surplus, 0) for s in steps) > 0
        # the refill rule benchmarks/prompts/verl_dynamic_sampling.py models (every dispatch finished at the
        # next poll): B prompts, then 2 per dropped group (at most B at once), until B groups are kept
        for step in range(1, 26 if finish_seed is None else 1):
            calls = [c for s, c in rollouts.calls if s == step]
            kept, credit = 0, 0
            assert len(calls[0]) == B
            for i, call in enumerate(calls):
                mixed = sum(min(g) < max(g) for g in call)
                kept += mixed
                if i + 1 == len(calls):
                    assert kept >= B
                    break
                assert kept < B
                credit += 2 * (len(call) - mixed)
                assert len(calls[i + 1]) == min(credit, B)
                credit -= len(calls[i + 1])
    else:
        assert len(generated) == 25 * B
    assert steps[-1]["metrics"]["curriculum/seen_fraction"] == cur.stats()["seen_fraction"]
    # resume: verl saves train_dataloader.state_dict() (data.pt) after a step and loads it into a new trainer
    saved = trainer.train_dataloader.state_dict()
    finish_state = None if finish_seed is None else rollouts.finish_rng.bit_generator.state
    before = len(drawn)
    _v1_steps(trainer, rollouts, range(26, 31), tq)
    expected, expected_state = drawn[before:], repr(cur.state_dict())
    trainer2 = _v1_ppo_trainer(tmp_path, train, *(extra if dynamic_sampling else []))
    trainer2.train_dataloader.load_state_dict(saved)
    drawn2 = _spy_draws(trainer2.train_dataset)
    trainer2.agent_loop_manager = rollouts2 = _Rollouts(tq, finish_seed)
    if finish_seed is not None:  # the rollouts finish in the same order as after step 25 of the first run
        rollouts2.finish_rng.bit_generator.state = finish_state
        trainer2.replay_buffer._wait_for_next_poll = rollouts2.poll
    _v1_steps(trainer2, rollouts2, range(26, 31), tq)
    assert drawn2 == expected and repr(trainer2.train_dataset.curriculum.state_dict()) == expected_state


@needs_v1
def test_v1_trainer_without_the_replay_buffer_or_in_an_async_mode_is_refused(tmp_path: Path) -> None:
    train = _parquet(tmp_path / "train.parquet", range(4 * N // 3))
    with pytest.raises(
        ValueError, match=r"custom_sampler is not set: verl's V1 trainer reports outcomes only"
    ):
        _v1_ppo_trainer(
            tmp_path,
            train,
            "trainer.v1.sampler.custom_sampler.path=null",
            "trainer.v1.sampler.custom_sampler.name=null",
        )
    with pytest.raises(ValueError, match=r"trainer_mode='colocate_async'.*'sync' mode only"):
        _v1_ppo_trainer(tmp_path, train, "trainer.v1.trainer_mode=colocate_async")


# ------------------- verl 0.9's V1 trainer through its own fit(): parameter_sync_step, colocated reward model
def _v1_fit(trainer, rollouts: _Rollouts, tq, colocated: bool = False) -> list[dict]:
    """verl's own ``PPOTrainer.fit()`` (its step loop, ``step()`` with its ``parameter_sync_step`` samples,
    the reward model's place, the cleanup) with the model's parts stood in: the log-prob, advantage and
    update calls return the batch, the weight sync does nothing, and a colocated reward model (the
    trainer's ``_compute_reward_colocate``, patched by the test) writes the rollouts' rewards. Returns each
    step's trained groups (rewards) and logged metrics."""
    from types import SimpleNamespace

    def same(batch, *args, **kwargs):
        return batch

    for name in ("_balance_batch", "_compute_old_log_prob", "_compute_ref_log_prob", "_compute_values"):
        setattr(trainer, name, same)
    for name in ("_compute_advantage", "_update_critic", "_update_actor"):
        setattr(trainer, name, same)
    nothing = SimpleNamespace(update_weights=lambda step: None, sleep_replicas=lambda: None)
    trainer.checkpoint_manager = nothing  # the weight sync (on_step_end, on_sample_end)
    trainer.reward_loop_manager = SimpleNamespace(reward_loop_worker_handles=None if colocated else [None])
    records: list[dict] = []

    def compute_metrics(batch, metrics, timing_raw, global_steps, epoch) -> None:
        data = tq.kv_batch_get(keys=batch.keys, partition_id="train", select_fields=["rm_scores"])
        groups: dict[str, list[float]] = {}
        for key, reward in zip(batch.keys, data["rm_scores"], strict=True):
            groups.setdefault(key.split("_")[0], []).append(float(reward.sum()))
        records.append({"step": global_steps, "groups": list(groups.values()), "metrics": dict(metrics)})

    trainer._compute_metrics = compute_metrics
    trainer._init_dump_executor()  # as verl's _setup does
    trainer.global_steps = 0
    trainer.fit(rollouts)
    return records


_FIT = ("trainer.val_before_train=false", "trainer.test_freq=-1", "trainer.save_freq=-1")
_FIT += ("trainer.logger=[console]", "trainer.total_training_steps=25")
_COLOCATED_RM = ("reward.reward_model.enable=true", "reward.reward_model.enable_resource_pool=false")


@needs_v1
@pytest.mark.parametrize(
    ("sync_step", "colocated"),
    [(2, False), (1, True), (3, True)],
    ids=["parameter_sync_step=2", "colocated_reward_model", "colocated_reward_model-parameter_sync_step=3"],
)
def test_v1_fit_with_parameter_sync_step_and_a_colocated_reward_model(
    tmp_path: Path, transfer_queue, monkeypatch: pytest.MonkeyPatch, sync_step: int, colocated: bool
) -> None:
    """verl's own fit(): with trainer.v1.sync.parameter_sync_step=k each step's batch (one draw) is taken
    in k samples of B/k groups, each trained on; with a colocated reward model the rewards exist only
    once the trainer ran it after the sample, and the curriculum reads them then. Every drawn prompt is
    generated, every group observed once with its true rewards, draws concentrate on the learnable third."""
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    tq = transfer_queue
    rollouts = _Rollouts(tq, scored=not colocated)
    calls: list[int] = []

    def reward_model(self, batch, metrics=None):  # verl's writes rm_scores of batch.keys to TransferQueue
        from verl.utils.tensordict_utils import list_of_dict_to_tensordict

        calls.append(len(batch.keys))
        fields = list_of_dict_to_tensordict([{"rm_scores": rollouts.rewards[k]} for k in batch.keys])
        tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, fields=fields)
        return batch

    monkeypatch.setattr(PPOTrainer, "_compute_reward_colocate", reward_model)
    train = _parquet(tmp_path / "train.parquet", range(4 * N // 3))
    overrides = [*_FIT, f"+trainer.v1.sync.parameter_sync_step={sync_step}"]
    trainer = _v1_ppo_trainer(tmp_path, train, *overrides, *(_COLOCATED_RM if colocated else ()))
    assert trainer.parameter_sync_step == sync_step
    dataset = trainer.train_dataset
    labels = np.asarray([e["index"] for e in dataset.dataframe["extra_info"]])
    drawn = _spy_draws(dataset)
    records = _v1_fit(trainer, rollouts, tq, colocated=colocated)
    assert [r["step"] for r in records] == list(range(1, 26))
    assert len(calls) == (25 * sync_step if colocated else 0) and set(calls) <= {B // sync_step * G}
    generated = [pos for pos, _ in rollouts.generated]
    assert generated == drawn and len(generated) == 25 * B
    cur = dataset.curriculum
    state = cur.state_dict()
    assert state["num_groups"] == len(generated) and state["num_completions"] == len(generated) * G
    assert dataset.ledger.groups_without_outcome == 0 and not dataset.ledger.outstanding
    p_true = np.array([0.0, 0.5, 1.0])[labels % 3]
    assert (cur.success_rate[cur.seen & (p_true == 0)] == 0).all()
    assert (cur.success_rate[cur.seen & (p_true == 1)] == 1).all()
    assert all(len(r["groups"]) == B and all(len(g) == G for g in r["groups"]) for r in records)
    assert all("curriculum/seen_fraction" in r["metrics"] for r in records)
    late = labels[np.asarray(drawn[len(drawn) // 2 :])]
    assert (late % 3 == 1).mean() >= 0.6  # uniform: 1/3


@needs_v1
def test_v1_misconfigurations_are_refused_when_verl_builds_the_trainer(tmp_path: Path) -> None:
    """Refused in PPOTrainer.__init__ (where verl builds the replay buffer: before the dataset, the
    workers and the model), each naming the option and the fix."""
    train = _parquet(tmp_path / "train.parquet", range(4 * N // 3))
    cases = [
        (
            ("data.custom_cls.path=null", "data.custom_cls.name=null"),
            r"data\.custom_cls is not set: .*data\.custom_cls\.name=PromptCurriculumDataset",
        ),
        (
            ("data.custom_cls.path=pkg://verl.utils.dataset.rl_dataset", "data.custom_cls.name=RLHFDataset"),
            r"data\.custom_cls is pkg://verl\.utils\.dataset\.rl_dataset:RLHFDataset",
        ),
        (("+data.plr.reward_key=acc",), r"data\.plr\.reward_key='acc': .*drop data\.plr\.reward_key"),
        (
            (
                "+trainer.v1.sync.parameter_sync_step=2",
                "algorithm.filter_groups.enable=true",
                "algorithm.filter_groups.metric=reward",
            ),
            r"parameter_sync_step=2 with algorithm\.filter_groups: .*parameter_sync_step=1",
        ),
    ]
    for overrides, message in cases:
        with pytest.raises(ValueError, match=message) as refused:
            _v1_ppo_trainer(tmp_path, train, *overrides)
        # from PPOTrainerSync.__init__'s _build_replay_buffer: before _init_dataloader, workers and model
        names = [entry.name for entry in refused.traceback]
        assert "_build_replay_buffer" in names and "_init_dataloader" not in names
