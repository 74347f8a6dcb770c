"""A tiny GRPO run with a prompt curriculum, launched by tests/test_trl.py under torchrun (CPU, gloo).

Nothing is downloaded: the model is a one-layer Llama built from a config, the tokenizer a word-level one
built with ``tokenizers``. The reward of a completion does not depend on the model: prompt ``i`` succeeds
with a known probability ``P[i]`` in {0, 0.5, 1}, by a draw seeded with (prompt, step, rank, position), so
an uninterrupted run and a resumed one see the same outcomes and the test checks the curriculum alone.

    torchrun --nproc_per_node 2 tests/trl_grpo_run.py OUT_DIR MAX_STEPS [RESUME_FROM]
"""

from __future__ import annotations

NUM_PROMPTS = 12
P = [0.0] * 4 + [0.5] * 4 + [1.0] * 4  # prompt i's success probability


def build_trainer(
    out_dir: str,
    max_steps: int,
    save_steps: int = 4,
    rewards: str = "binary",
    config_options: dict | None = None,
    record: list | None = None,
    **curriculum_kwargs: object,
):
    """The tiny GRPO trainer with a PromptCurriculum (seed 0) over NUM_PROMPTS prompts.

    ``rewards``: ``"binary"`` (0/1 with probability P), ``"plus_minus"`` (the same as -1/+1, DAPO's math
    reward) or ``"two"`` (the 0/1 reward plus a partial-credit "format" reward in [0.1, 0.45]: sums in
    [0.1, 1.45]). ``config_options``: build no curriculum, pass these ``curriculum_*`` options in a
    CurriculumGRPOConfig instead. ``record``: each reward call appends ``(prompt ids, rewards per function)``.
    """
    import os

    import numpy as np
    import torch
    from datasets import Dataset
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
    from trl import GRPOConfig

    from plr_gym.prompts import PromptCurriculum
    from plr_gym.trl import CurriculumGRPOConfig, CurriculumGRPOTrainer

    rank = int(os.environ.get("RANK", "0"))
    torch.manual_seed(0)

    words = ["[PAD]", "[UNK]", "[BOS]", "[EOS]", "solve", "a", "b", "c"] + [
        str(i) for i in range(NUM_PROMPTS)
    ]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]", bos_token="[BOS]", eos_token="[EOS]"
    )
    config = LlamaConfig(
        vocab_size=len(words),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=32,
        pad_token_id=0,
        bos_token_id=2,
        eos_token_id=3,
    )
    model = LlamaForCausalLM(config)
    dataset = Dataset.from_dict({"prompt": [f"solve {i}" for i in range(NUM_PROMPTS)]})

    def known_p_reward(prompts, completions, plr_prompt_id, trainer_state, **kwargs):
        out = []
        for j, pid in enumerate(plr_prompt_id):
            u = np.random.default_rng([pid, trainer_state.global_step, rank, j]).random()
            out.append(float(u < P[pid]))
        if record is not None:
            record.append((list(plr_prompt_id), out))
        return out

    def plus_minus_reward(prompts, completions, plr_prompt_id, trainer_state, **kwargs):
        return [2.0 * r - 1.0 for r in known_p_reward(prompts, completions, plr_prompt_id, trainer_state)]

    def format_reward(prompts, completions, plr_prompt_id, trainer_state, **kwargs):
        out = [
            0.1 + 0.35 * np.random.default_rng([pid, trainer_state.global_step, rank, j, 7]).random()
            for j, pid in enumerate(plr_prompt_id)
        ]
        if record is not None:
            record[-1] = (record[-1][0], [a + b for a, b in zip(record[-1][1], out)])
        return out

    reward_funcs = {
        "binary": [known_p_reward],
        "plus_minus": [plus_minus_reward],
        "two": [known_p_reward, format_reward],
    }[rewards]
    config_cls = GRPOConfig if config_options is None else CurriculumGRPOConfig
    args = config_cls(
        output_dir=out_dir,
        per_device_train_batch_size=8,
        num_generations=4,
        max_completion_length=3,
        max_steps=max_steps,
        save_steps=save_steps,
        logging_steps=1,
        learning_rate=1e-3,
        report_to="none",
        use_cpu=True,
        seed=0,
        disable_tqdm=True,
        save_only_model=False,
        **(config_options or {}),
    )
    return CurriculumGRPOTrainer(
        model=model,
        reward_funcs=reward_funcs,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        curriculum=None
        if config_options is not None
        else PromptCurriculum(NUM_PROMPTS, seed=0, **curriculum_kwargs),  # type: ignore[arg-type]
    )


def main() -> None:
    import json
    import os
    import sys

    out_dir, max_steps = sys.argv[1], int(sys.argv[2])
    resume = sys.argv[3] if len(sys.argv) > 3 else None
    rank = int(os.environ.get("RANK", "0"))
    trainer = build_trainer(out_dir, max_steps)
    trainer.train(resume_from_checkpoint=resume)
    cur = trainer.curriculum
    state = cur.state_dict()
    record = {
        "draws": cur.draws.tolist(),
        "success_rate": cur.success_rate.tolist(),
        "num_batches": cur.num_batches,
        "rng": repr(state["sampler"]["rng"]),
        "pending": [ids.tolist() for ids in trainer.curriculum_sampler.pending],
        "log_history": trainer.state.log_history,
        "global_step": trainer.state.global_step,
    }
    with open(os.path.join(out_dir, f"record-rank{rank}.json"), "w") as f:
        json.dump(record, f)


if __name__ == "__main__":
    main()
