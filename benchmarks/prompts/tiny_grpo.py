"""A real model, end to end, on CPU: a tiny transformer learns additions by SFT, then GRPO in TRL with and
without a prompt curriculum (issue 35, item 6). Nothing is downloaded: tokenizer, model and data are built
here.

The task. A prompt is ``"a+b="`` with ``a`` and ``b`` of ``d`` digits each (``d = 1`` to ``8``: the
*difficulty*; ``d = 1`` includes 0); the answer is the decimal sum, then end-of-sequence. Characters are
tokens (:func:`build_tokenizer`: ``0``-``9``, ``+``, ``=``, and ``[PAD]``/``[BOS]``/``[EOS]``/``[UNK]``;
every prompt starts with ``[BOS]``).

The model (:func:`build_model`): a Llama (rotary positions) with ``MODEL`` sizes, about 0.2M parameters.

Pre-training (:func:`pretrain`): supervised, the loss on the answer and its end token only, on a
*difficulty ladder* (``SFT_MIX``: mostly 1-3 digits, a few 4- and 5-digit problems, none longer), so
that after it short additions are solved, some mid ones are in reach and long ones out of it. It is
deterministic (one torch thread, seed ``SFT_SEED``) and cheap; the checkpoint is written under
``runs/tiny_grpo/`` (ignored by git) and rebuilt when missing.

GRPO (:func:`run_arm`): TRL's ``GRPOTrainer`` from that checkpoint, on ``TRAIN_PER_LEVEL`` prompts of
each difficulty (68 of one digit; drawn per seed, disjoint from the held-out set), reward 1 for the exact
sum and 0 otherwise (:func:`exact_reward`). Arms (``ARMS``):

- ``uniform``: TRL's own ``GRPOTrainer`` (its shuffled-epoch sampler);
- ``dapo``: ``plr_gym.trl.CurriculumGRPOTrainer`` with draws that ignore the outcomes (``uniform_mass=1``,
  ``replay_prob=0``: a shuffled first epoch, then uniform draws) and ``filter_groups=True``: groups whose
  rewards are all equal are dropped from the loss (DAPO's filter, without its over-sampling);
- ``curriculum``: ``CurriculumGRPOTrainer`` with ``PromptCurriculum``'s options as written in ``ARMS``
  (the library's defaults at the commit of the plan, spelled out);
- ``curriculum_dapo``: ``curriculum`` with ``filter_groups=True``.

Round 4 (issue 44 item 4; ``--preset round4``: ``GRPO_ROUND4``, ``ROUND4_ARMS``, seeds 300-309; plan and
pilot in ``benchmarks/results/tiny_grpo_round4/``) adds two arms with the library's defaults as a user gets
them, whatever they are when it runs (``DEFAULTS`` spells out those of the round-4 plan and
:func:`check_defaults` refuses to run if they changed):

- ``defaults``: ``CurriculumGRPOTrainer`` with ``PromptCurriculum(len(dataset), seed=seed)``;
- ``defaults_dapo``: the same with ``filter_groups=True``.

Every arm generates the same number of completions per step (``B`` prompts × ``G``), so rollouts are
steps × ``B·G``. Every ``GRPO["eval_every"]`` steps (and at step 0) the policy answers the held-out set
(``EVAL_PER_LEVEL`` problems per difficulty, the same for every seed and arm) ``GRPO["eval_samples"]`` times
per problem at the training temperature (the pass rate GRPO optimises) and once greedily; accuracy per
difficulty is recorded against rollouts.

Usage::

    python benchmarks/prompts/tiny_grpo.py pretrain            # (re)build the checkpoint, print its accuracy
    python benchmarks/prompts/tiny_grpo.py run --out benchmarks/results/tiny_grpo/runs  # the study
    python benchmarks/prompts/tiny_grpo.py run --arms uniform curriculum --seeds 0 1 --steps 30 --out DIR
    python benchmarks/prompts/tiny_grpo.py run --preset round4 --out benchmarks/results/tiny_grpo_round4/runs
    python benchmarks/prompts/tiny_grpo.py report DIR [--out FILE.md] [--figure FILE.png]
    python benchmarks/prompts/tiny_grpo.py pilot DIR [DIR ...]  # one row per record: change from step 0
    python benchmarks/prompts/tiny_grpo.py --quick  # every piece once at tiny sizes (~40 s CPU)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))  # benchmarks/common: _provenance
from _provenance import cpu_model, git_commit, load_average

ROOT = Path(__file__).resolve().parents[2]
CHECKPOINT_DIR = ROOT / "runs" / "tiny_grpo"

LEVELS = tuple(range(1, 9))  # digits per operand
CHARS = "0123456789+="
SPECIALS = ("[PAD]", "[UNK]", "[BOS]", "[EOS]")
MAX_ANSWER = 10  # 9 digits of an 8-digit sum + [EOS]

MODEL = {
    "hidden_size": 64,
    "intermediate_size": 192,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "max_position_embeddings": 32,
}
SFT_SEED = 1234
SFT = {"steps": 1500, "batch": 128, "lr": 2e-3, "warmup": 100, "weight_decay": 0.01}
# share of each difficulty among the SFT problems (the ladder)
SFT_MIX = {1: 0.2, 2: 0.3, 3: 0.38, 4: 0.09, 5: 0.03}
EVAL_SEED = 99
EVAL_PER_LEVEL = 32
TRAIN_PER_LEVEL = 1000


# ---------------------------------------------------------------------------- data
def tokenizer_vocab() -> dict[str, int]:
    """The tokenizer's vocabulary: specials first (``[PAD]`` = 0), then the characters."""
    return {t: i for i, t in enumerate((*SPECIALS, *CHARS))}


def build_tokenizer() -> Any:
    """A character-level ``PreTrainedTokenizerFast`` built from a ``tokenizers`` word-level model.

    Each character of ``CHARS`` is one token; encoding prepends ``[BOS]`` (a template post-processor);
    decoding concatenates the characters (no spaces) and drops specials when asked.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = tokenizer_vocab()
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.post_processor = processors.TemplateProcessing(
        single="[BOS] $A", special_tokens=[("[BOS]", vocab["[BOS]"])]
    )
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]", bos_token="[BOS]", eos_token="[EOS]"
    )


def sample_operand(rng: np.random.Generator, digits: int) -> int:
    """A uniform ``digits``-digit number (``digits == 1``: 0 to 9)."""
    low = 0 if digits == 1 else 10 ** (digits - 1)
    return int(rng.integers(low, 10**digits))


def problems(
    rng: np.random.Generator, digits: int, n: int, exclude: set[tuple[int, int]] = frozenset()
) -> list:
    """``n`` distinct pairs ``(a, b)`` of ``digits``-digit numbers, none in ``exclude``."""
    out: list[tuple[int, int]] = []
    seen = set(exclude)
    limit = 100 if digits == 1 else None
    if limit is not None and n > limit - len(exclude & {(a, b) for a in range(10) for b in range(10)}):
        raise ValueError(f"only 100 one-digit pairs exist; asked for {n} outside {len(exclude)} excluded")
    while len(out) < n:
        pair = (sample_operand(rng, digits), sample_operand(rng, digits))
        if pair not in seen:
            seen.add(pair)
            out.append(pair)
    return out


def prompt_of(a: int, b: int) -> str:
    return f"{a}+{b}="


def answer_of(prompt: str) -> str:
    """The exact answer to a prompt ``"a+b="``."""
    left, right = prompt.rstrip("=").split("+")
    return str(int(left) + int(right))


def exact_reward(prompt: str, completion: str) -> float:
    """1.0 if ``completion`` is exactly the sum's decimal digits (the end token stripped), else 0.0."""
    return 1.0 if completion == answer_of(prompt) else 0.0


def eval_set() -> dict[int, list[tuple[int, int]]]:
    """The held-out problems: ``EVAL_PER_LEVEL`` per difficulty, the same for every seed and arm."""
    rng = np.random.default_rng(EVAL_SEED)
    return {d: problems(rng, d, EVAL_PER_LEVEL) for d in LEVELS}


def train_set(seed: int, per_level: int = TRAIN_PER_LEVEL) -> list[tuple[int, tuple[int, int]]]:
    """The GRPO prompts of a seed: ``per_level`` per difficulty (one digit: at most the 68 of the 100 pairs
    that are not held out), disjoint from the held-out set."""
    held = eval_set()
    rng = np.random.default_rng([seed, 17])
    out = []
    for d in LEVELS:
        n = min(per_level, 100 - len(held[d])) if d == 1 else per_level
        out += [(d, pair) for pair in problems(rng, d, n, exclude=set(held[d]))]
    return out


# ---------------------------------------------------------------------------- model
def build_model(seed: int) -> Any:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    vocab = tokenizer_vocab()
    config = LlamaConfig(
        vocab_size=len(vocab),
        pad_token_id=vocab["[PAD]"],
        bos_token_id=vocab["[BOS]"],
        eos_token_id=vocab["[EOS]"],
        tie_word_embeddings=True,
        **MODEL,
    )
    torch.manual_seed(seed)
    return LlamaForCausalLM(config)


def sft_batch(
    rng: np.random.Generator, tokenizer: Any, n: int, mix: dict[int, float]
) -> tuple[Any, Any, Any]:
    """``n`` SFT sequences ``[BOS] a+b= sum [EOS]``, right-padded: (input ids, attention mask, labels with
    -100 everywhere but the answer and its end token)."""
    import torch

    levels = np.array(list(mix), dtype=np.int64)
    weights = np.array(list(mix.values()), dtype=np.float64)
    ds = rng.choice(levels, size=n, p=weights / weights.sum())
    vocab = tokenizer_vocab()
    rows, labels = [], []
    for d in ds:
        a, b = sample_operand(rng, int(d)), sample_operand(rng, int(d))
        p_ids = [vocab["[BOS]"]] + [vocab[c] for c in prompt_of(a, b)]
        a_ids = [vocab[c] for c in str(a + b)] + [vocab["[EOS]"]]
        rows.append(p_ids + a_ids)
        labels.append([-100] * len(p_ids) + a_ids)
    width = max(len(r) for r in rows)
    ids = torch.full((n, width), vocab["[PAD]"], dtype=torch.long)
    lab = torch.full((n, width), -100, dtype=torch.long)
    mask = torch.zeros((n, width), dtype=torch.long)
    for i, (r, lb) in enumerate(zip(rows, labels)):
        ids[i, : len(r)] = torch.tensor(r)
        lab[i, : len(r)] = torch.tensor(lb)
        mask[i, : len(r)] = 1
    return ids, mask, lab


def pretrain(steps: int | None = None, log_every: int = 250, verbose: bool = True) -> Any:
    """The SFT model (deterministic: ``SFT_SEED``, one torch thread)."""
    import torch

    cfg = {**SFT, **({"steps": steps} if steps is not None else {})}
    tokenizer = build_tokenizer()
    model = build_model(SFT_SEED)
    rng = np.random.default_rng(SFT_SEED)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], weight_decay=cfg["weight_decay"])
    total = cfg["steps"]

    def lr_at(step: int) -> float:
        if step < cfg["warmup"]:
            return (step + 1) / cfg["warmup"]
        frac = (step - cfg["warmup"]) / max(1, total - cfg["warmup"])
        return 0.5 * (1 + np.cos(np.pi * frac))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    model.train()
    t0 = time.perf_counter()
    for step in range(total):
        ids, mask, lab = sft_batch(rng, tokenizer, cfg["batch"], SFT_MIX)
        loss = model(input_ids=ids, attention_mask=mask, labels=lab).loss
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if verbose and (step + 1) % log_every == 0:
            print(
                f"sft step {step + 1}/{total} loss {loss.item():.4f} ({time.perf_counter() - t0:.0f} s)",
                flush=True,
            )
    model.eval()
    return model


def weights_digest(model: Any) -> str:
    h = hashlib.sha256()
    for name, p in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(p.detach().cpu().numpy().tobytes())
    return h.hexdigest()[:16]


def load_or_pretrain(path: Path = CHECKPOINT_DIR / "sft") -> Any:
    from transformers import LlamaForCausalLM

    if (path / "config.json").is_file():
        return LlamaForCausalLM.from_pretrained(path)
    model = pretrain()
    model.save_pretrained(path)
    return model


# ---------------------------------------------------------------------------- evaluation
def held_out_accuracy(
    model: Any,
    tokenizer: Any,
    held: dict[int, list[tuple[int, int]]],
    samples: int = 0,
    temperature: float = 1.0,
    seed: int = 0,
) -> dict[int, float]:
    """Exact-answer accuracy per difficulty on ``held``: greedy (``samples=0``) or the mean over ``samples``
    completions per problem drawn at ``temperature`` (the pass rate GRPO optimises). Sampling uses its own
    seeded torch RNG and leaves the global one as it was."""
    import torch

    was_training = model.training
    model.eval()
    prompts = [prompt_of(a, b) for d in LEVELS for a, b in held[d]]
    n = len(held[LEVELS[0]])
    if any(len(held[d]) != n for d in LEVELS):
        raise ValueError("the held-out set must have as many problems per difficulty")
    reps = max(1, samples)
    enc = tokenizer(
        [p for p in prompts for _ in range(reps)], return_tensors="pt", padding=True, padding_side="left"
    )
    options: dict[str, Any] = {"do_sample": False}
    if samples:
        options = {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0}
    with torch.no_grad(), torch.random.fork_rng():
        torch.manual_seed(seed)
        out = model.generate(
            **enc,
            max_new_tokens=MAX_ANSWER,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
            **options,
        )
    texts = tokenizer.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
    correct = np.array([exact_reward(p, t) for p, t in zip((p for p in prompts for _ in range(reps)), texts)])
    if was_training:
        model.train()
    per = correct.reshape(len(LEVELS), n * reps)
    return {d: float(per[i].mean()) for i, d in enumerate(LEVELS)}


# ---------------------------------------------------------------------------- GRPO
# The arms: None = TRL's own GRPOTrainer; a dict = CurriculumGRPOTrainer with PromptCurriculum(**dict).
# The curriculum's options are spelled out (the library's defaults at the plan's commit), so that a
# later change of the defaults does not change the arms.
CURRICULUM = {
    "method": "learnability",
    "uniform_mass": 0.1,
    "replay_prob": 0.5,
    "staleness_coef": 0.0,
    "success_rate_alpha": 1.0,
    "spread": "variance",
    "evidence_half_life": 50.0,
    "ageing": "unsolved",
    "filter_groups": False,
}
ARMS: dict[str, dict[str, Any] | None] = {
    "uniform": None,
    "dapo": {"uniform_mass": 1.0, "replay_prob": 0.0, "evidence_half_life": None, "filter_groups": True},
    "curriculum": CURRICULUM,
    "curriculum_dapo": {**CURRICULUM, "filter_groups": True},
}
MAIN_ARMS = (
    "uniform",
    "dapo",
    "curriculum",
)  # the plan's arms; curriculum_dapo runs after them if time allows

# Round 4 (issue 44 item 4): the library's defaults as a user gets them, ``PromptCurriculum(len(dataset),
# seed=seed)`` with nothing else passed. ``DEFAULTS`` spells out the constructor's defaults at the commit of
# the round-4 plan (``check_defaults`` asserts they still are); with this study's 7,068 prompts they resolve
# to ``uniform_mass=0`` (estimates age) and ``replay_prob=0.71`` (``"auto"``: from the dataset's size; the
# trainer and the budget do not change it), recorded per run as ``resolved``.
DEFAULTS: dict[str, Any] = {
    "method": "learnability",
    "uniform_mass": None,
    "replay_prob": "auto",
    "staleness_coef": 0.0,
    "success_rate_alpha": 1.0,
    "spread": "variance",
    "reward_range": None,
    "success_threshold": None,
    "success_fn": None,
    "filter_groups": False,
    "target": 0.5,
    "prior": (1.0, 1.0),
    "posterior_decay": 1.0,
    "estimate": "running",
    "evidence_half_life": 50.0,
    "prompt_labels": None,
    "ageing": "unsolved",
    "reward_noise": 0.0,
}
ARMS["defaults"] = {}  # PromptCurriculum(len(dataset), seed=seed): today's defaults, nothing passed
ARMS["defaults_dapo"] = {"filter_groups": True}  # the defaults with DAPO's filter
ROUND4_ARMS = ("uniform", "defaults", "dapo", "defaults_dapo")
ROUND4_ONLY = ("defaults", "defaults_dapo")


def check_defaults() -> None:
    """Raise if ``DEFAULTS`` is no longer ``PromptCurriculum``'s constructor defaults (then "defaults" in a
    round-4 record means ``DEFAULTS``, its ``curriculum_defaults`` field, not the library's new ones)."""
    import inspect

    from plr_gym.prompts import PromptCurriculum

    params = inspect.signature(PromptCurriculum.__init__).parameters
    current = {k: p.default for k, p in params.items() if p.default is not inspect.Parameter.empty}
    current.pop("seed")
    if current != DEFAULTS:
        raise AssertionError(f"PromptCurriculum's defaults changed: {current} != DEFAULTS {DEFAULTS}")


GRPO = {
    "steps": 150,
    "prompts_per_step": 8,  # B
    "num_generations": 8,  # G
    "learning_rate": 5e-5,
    "warmup_steps": 0,  # linear warm-up of the learning rate (0: TRL's default, a constant rate)
    "loss_type": "dapo",  # TRL 1.16's default, spelled out
    "scale_rewards": "group",  # TRL 1.16's default
    "beta": 0.0,  # TRL 1.16's default: no KL term, no reference model
    "eval_every": 30,
    "eval_samples": 8,
    "temperature": 1.0,
}


# Round 4's GRPO settings, chosen by its pilot (benchmarks/results/tiny_grpo_round4/pilot.md): 64 prompts ×
# 8 completions per step (512 rollouts), 50 steps (25,600 rollouts), learning rate 1e-4 constant; the rest
# as the first study (TRL 1.16's defaults spelled out).
GRPO_ROUND4 = {**GRPO, "steps": 50, "prompts_per_step": 64, "learning_rate": 1e-4, "eval_every": 25}
PRESETS: dict[str, tuple[dict[str, Any], tuple[str, ...], tuple[int, ...]]] = {
    "round1": (GRPO, MAIN_ARMS, tuple(range(10))),
    "round4": (GRPO_ROUND4, ROUND4_ARMS, tuple(range(300, 310))),
}


def run_arm(
    arm: str,
    seed: int,
    grpo: dict[str, Any] | None = None,
    sft_path: Path | None = None,
    per_level: int = TRAIN_PER_LEVEL,
    work_dir: Path | None = None,
) -> dict[str, Any]:
    """One GRPO run from the SFT checkpoint; returns its record (eval curve, per-step draws and rewards)."""
    import tempfile

    import torch
    from datasets import Dataset
    from transformers import LlamaForCausalLM, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from plr_gym.prompts import PromptCurriculum
    from plr_gym.trl import CurriculumGRPOTrainer

    if arm not in ARMS:
        raise ValueError(f"arm={arm!r} is not one of {', '.join(ARMS)}")
    cfg = {**GRPO, **(grpo or {})}
    B, G = cfg["prompts_per_step"], cfg["num_generations"]
    tokenizer = build_tokenizer()
    sft_path = sft_path or CHECKPOINT_DIR / "sft"
    model = LlamaForCausalLM.from_pretrained(sft_path)
    rows = train_set(seed, per_level)
    dataset = Dataset.from_dict(
        {"prompt": [prompt_of(a, b) for _, (a, b) in rows], "level": [d for d, _ in rows]}
    )
    held = eval_set()
    steps_log: list[dict[str, Any]] = []

    def accuracy(prompts: list[str], completions: list[str], level: list[int], **kwargs: Any) -> list[float]:
        rewards = [exact_reward(p, c) for p, c in zip(prompts, completions)]
        r = np.asarray(rewards).reshape(-1, G)
        lv = np.asarray(level).reshape(-1, G)[:, 0]
        steps_log.append(
            {
                "levels": lv.tolist(),
                "group_mean": r.mean(axis=1).round(4).tolist(),
            }
        )
        return rewards

    curve: list[dict[str, Any]] = []

    class Evaluate(TrainerCallback):  # type: ignore[misc]
        def _eval(self, step: int) -> None:
            t0 = time.perf_counter()
            sampled = held_out_accuracy(
                trainer.model, tokenizer, held, cfg["eval_samples"], cfg["temperature"], seed=step
            )
            greedy = held_out_accuracy(trainer.model, tokenizer, held)
            curve.append(
                {
                    "step": step,
                    "rollouts": step * B * G,
                    "accuracy": {str(d): a for d, a in sampled.items()},
                    "greedy": {str(d): a for d, a in greedy.items()},
                    "seconds": round(time.perf_counter() - t0, 3),
                }
            )

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self._eval(0)

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if state.global_step % cfg["eval_every"] == 0 or state.global_step == cfg["steps"]:
                self._eval(state.global_step)

    with tempfile.TemporaryDirectory(dir=work_dir) as out_dir:
        args = GRPOConfig(
            output_dir=out_dir,
            per_device_train_batch_size=B * G,
            num_generations=G,
            max_completion_length=MAX_ANSWER,
            max_steps=cfg["steps"],
            learning_rate=cfg["learning_rate"],
            lr_scheduler_type="constant_with_warmup" if cfg.get("warmup_steps", 0) else "constant",
            warmup_steps=cfg.get("warmup_steps", 0),
            temperature=cfg["temperature"],
            beta=cfg["beta"],
            loss_type=cfg["loss_type"],
            scale_rewards=cfg["scale_rewards"],
            logging_steps=cfg["eval_every"],
            save_strategy="no",
            report_to="none",
            use_cpu=True,
            seed=seed,
            data_seed=seed,
            disable_tqdm=True,
        )
        common = {
            "model": model,
            "reward_funcs": [accuracy],
            "args": args,
            "train_dataset": dataset,
            "processing_class": tokenizer,
            "callbacks": [Evaluate()],
        }
        options = ARMS[arm]
        resolved = None
        if options is None:
            trainer = GRPOTrainer(**common)
        else:
            curriculum = PromptCurriculum(len(dataset), seed=seed, **options)
            resolved = {"uniform_mass": curriculum.uniform_mass, "replay_prob": curriculum.replay_prob}
            trainer = CurriculumGRPOTrainer(**common, curriculum=curriculum)
        torch.manual_seed(seed)
        t0 = time.perf_counter()
        cpu0 = time.process_time()
        trainer.train()
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    return {
        "arm": arm,
        "seed": seed,
        "options": options,
        **({"curriculum_defaults": DEFAULTS, "resolved": resolved} if arm in ROUND4_ONLY else {}),
        "grpo": cfg,
        "train_per_level": per_level,
        "curve": curve,
        "steps": steps_log,
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 1),
    }


# ---------------------------------------------------------------------------- report
def mean_accuracy(point: dict[str, Any], levels: tuple[int, ...] = LEVELS, key: str = "accuracy") -> float:
    """The held-out accuracy of one eval point (``key``: ``"accuracy"``, sampled, or ``"greedy"``), averaged
    over ``levels`` (each difficulty weighs the same)."""
    return float(np.mean([point[key][str(d)] for d in levels]))


REACH = (3, 4, 5)  # in reach after SFT (sampled accuracy 0.93 / 0.42 / 0.01); 1-2 solved, 6-8 out of reach


def auc(curve: list[dict[str, Any]], levels: tuple[int, ...] = LEVELS) -> float:
    """Area under accuracy against rollouts (trapezoids) over the rollouts: the mean accuracy of the run."""
    x = np.array([p["rollouts"] for p in curve], dtype=float)
    y = np.array([mean_accuracy(p, levels) for p in curve])
    return float(np.sum((x[1:] - x[:-1]) * (y[1:] + y[:-1]) / 2) / (x[-1] - x[0]))


def paired_bootstrap(diff: np.ndarray, resamples: int = 4000, seed: int = 0) -> tuple[float, float, float]:
    """Mean of the per-seed paired differences and its 95% percentile bootstrap CI (seeds resampled)."""
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, diff.size, size=(resamples, diff.size))
    means = diff[idx].mean(axis=1)
    return float(diff.mean()), float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))


def load_records(folder: Path) -> dict[str, dict[int, dict[str, Any]]]:
    out: dict[str, dict[int, dict[str, Any]]] = {}
    for path in sorted(Path(folder).glob("*.json")):
        rec = json.loads(path.read_text())
        out.setdefault(rec["arm"], {})[rec["seed"]] = rec
    return out


COMPARISONS = (
    ("curriculum", "uniform"),
    ("dapo", "uniform"),
    ("curriculum_dapo", "uniform"),
    ("curriculum", "dapo"),
    ("curriculum_dapo", "curriculum"),
)


ROUND4_COMPARISONS = (
    ("defaults", "uniform"),
    ("dapo", "uniform"),
    ("defaults_dapo", "uniform"),
    ("defaults_dapo", "dapo"),
    ("defaults", "dapo"),
    ("defaults_dapo", "defaults"),
)


def _ci(values: tuple[float, float, float], digits: int = 3) -> str:
    m, lo, hi = values
    return f"{m:+.{digits}f} [{lo:+.{digits}f}, {hi:+.{digits}f}]"


def report(
    records: dict[str, dict[int, dict[str, Any]]], comparisons: tuple[tuple[str, str], ...] | None = None
) -> str:
    """Markdown tables: per arm, final accuracy and AUC (mean ± sd over seeds), the change from step 0
    (sampled and greedy), final accuracy per difficulty, the share of informative groups and of draws per
    difficulty; paired differences with 95% bootstrap CIs over the seeds every compared arm has
    (``comparisons``: by default round 4's when its arms are there, else the first study's)."""
    if comparisons is None:
        comparisons = ROUND4_COMPARISONS if any(a in records for a in ROUND4_ONLY) else COMPARISONS
    arms = [a for a in ARMS if a in records]
    lines = [
        "| arm | seeds | final accuracy | change from step 0 | greedy: final | greedy: change | AUC | "
        + " | ".join(f"final d={d}" for d in LEVELS)
        + " | informative groups | draws d=1-2 / 3-5 / 6-8 | training reward (last 30 steps) |",
        "| --- | --- | --- | --- | --- | --- | --- | "
        + " | ".join("---" for _ in LEVELS)
        + " | --- | --- | --- |",
    ]
    for arm in arms:
        recs = [records[arm][s] for s in sorted(records[arm])]
        fin = np.array([mean_accuracy(r["curve"][-1]) for r in recs])
        start = np.array([mean_accuracy(r["curve"][0]) for r in recs])
        g_fin = np.array([mean_accuracy(r["curve"][-1], key="greedy") for r in recs])
        g_start = np.array([mean_accuracy(r["curve"][0], key="greedy") for r in recs])
        au = np.array([auc(r["curve"]) for r in recs])
        per = [np.mean([r["curve"][-1]["accuracy"][str(d)] for r in recs]) for d in LEVELS]
        means = np.concatenate([np.asarray(st["group_mean"]) for r in recs for st in r["steps"]])
        informative = float(np.mean((means > 0) & (means < 1)))
        lv = np.concatenate([np.asarray(st["levels"]) for r in recs for st in r["steps"]])
        draws = [np.mean((lv >= lo) & (lv <= hi)) for lo, hi in ((1, 2), (3, 5), (6, 8))]
        late = np.mean([np.mean(st["group_mean"]) for r in recs for st in r["steps"][-30:]])
        lines.append(
            f"| {arm} | {len(recs)} | {fin.mean():.3f} ± {fin.std(ddof=1) if len(recs) > 1 else 0:.3f} | "
            f"{_ci(paired_bootstrap(fin - start))} | {g_fin.mean():.3f} | "
            f"{_ci(paired_bootstrap(g_fin - g_start))} | "
            f"{au.mean():.3f} ± {au.std(ddof=1) if len(recs) > 1 else 0:.3f} | "
            + " | ".join(f"{x:.2f}" for x in per)
            + f" | {informative:.2f} | "
            + " / ".join(f"{x:.2f}" for x in draws)
            + f" | {late:.3f} |"
        )
    lines += [
        "",
        "Paired differences (95% percentile bootstrap CI over seeds, 4000 resamples):",
        "",
        "| comparison | seeds | Δ final accuracy | Δ AUC | Δ final, d=3-5 | Δ AUC, d=3-5 | Δ final, greedy |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    per_level = [
        "",
        "Paired differences per difficulty (final sampled accuracy; 95% bootstrap CI over seeds):",
        "",
        "| comparison | " + " | ".join(f"Δ d={d}" for d in REACH) + " |",
        "| --- | " + " | ".join("---" for _ in REACH) + " |",
    ]
    for a, b in comparisons:
        if a not in records or b not in records:
            continue
        seeds = sorted(set(records[a]) & set(records[b]))
        if len(seeds) < 2:
            continue
        per_level.append(
            f"| {a} − {b} | "
            + " | ".join(
                _ci(
                    paired_bootstrap(
                        np.array(
                            [
                                records[a][s]["curve"][-1]["accuracy"][str(d)]
                                - records[b][s]["curve"][-1]["accuracy"][str(d)]
                                for s in seeds
                            ]
                        )
                    )
                )
                for d in REACH
            )
            + " |"
        )
        d_fin = np.array(
            [
                mean_accuracy(records[a][s]["curve"][-1]) - mean_accuracy(records[b][s]["curve"][-1])
                for s in seeds
            ]
        )
        d_auc = np.array([auc(records[a][s]["curve"]) - auc(records[b][s]["curve"]) for s in seeds])
        d_mid = np.array(
            [
                mean_accuracy(records[a][s]["curve"][-1], REACH)
                - mean_accuracy(records[b][s]["curve"][-1], REACH)
                for s in seeds
            ]
        )
        d_mid_auc = np.array(
            [auc(records[a][s]["curve"], REACH) - auc(records[b][s]["curve"], REACH) for s in seeds]
        )
        d_greedy = np.array(
            [
                mean_accuracy(records[a][s]["curve"][-1], key="greedy")
                - mean_accuracy(records[b][s]["curve"][-1], key="greedy")
                for s in seeds
            ]
        )
        lines.append(
            f"| {a} − {b} | {len(seeds)} | "
            + " | ".join(_ci(paired_bootstrap(x)) for x in (d_fin, d_auc, d_mid, d_mid_auc, d_greedy))
            + " |"
        )
    if len(per_level) > 5:
        lines += per_level
    return "\n".join(lines) + "\n"


def pilot_table(folders: list[Path]) -> str:
    """One row per record of each folder (a pilot setting): its GRPO settings and the change of held-out
    accuracy from step 0 at every evaluation (sampled; greedy and d=3/4/5 at the end), with its CPU time."""
    lines = [
        "| setting | arm | seed | lr | warm-up | KL β | B×G | steps | step 0 | "
        "change at each eval (sampled) | final greedy change | final change d=3 / 4 / 5 | CPU s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for folder in folders:
        for arm, by_seed in load_records(folder).items():
            for seed, r in sorted(by_seed.items()):
                c, g = r["curve"], r["grpo"]
                start = mean_accuracy(c[0])
                changes = ", ".join(f"{p['step']}: {mean_accuracy(p) - start:+.3f}" for p in c[1:])
                greedy = mean_accuracy(c[-1], key="greedy") - mean_accuracy(c[0], key="greedy")
                per = " / ".join(
                    f"{c[-1]['accuracy'][str(d)] - c[0]['accuracy'][str(d)]:+.2f}" for d in REACH
                )
                lines.append(
                    f"| {Path(folder).name} | {arm} | {seed} | {g['learning_rate']:g} | "
                    f"{g.get('warmup_steps', 0)} | {g['beta']:g} | "
                    f"{g['prompts_per_step']}×{g['num_generations']} | {g['steps']} | {start:.3f} | "
                    f"{changes} | {greedy:+.3f} | {per} | {r['cpu_s']} |"
                )
    return "\n".join(lines) + "\n"


def figure(records: dict[str, dict[int, dict[str, Any]]], path: Path) -> None:
    """Held-out accuracy against rollouts, mean over seeds with a 95% bootstrap band, per arm: all
    difficulties (left) and the in-reach ones, 3-5 (right)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    rng = np.random.default_rng(0)
    for arm in (a for a in ARMS if a in records):
        recs = [records[arm][s] for s in sorted(records[arm])]
        x = np.array([p["rollouts"] for p in recs[0]["curve"]])
        for ax, levels in zip(axes, (LEVELS, REACH)):
            y = np.array([[mean_accuracy(p, levels) for p in r["curve"]] for r in recs])
            boot = y[rng.integers(0, len(recs), size=(2000, len(recs)))].mean(axis=1)
            (line,) = ax.plot(x, y.mean(axis=0), marker="o", ms=3, label=f"{arm} ({len(recs)} seeds)")
            lo, hi = np.quantile(boot, [0.025, 0.975], axis=0)
            ax.fill_between(x, lo, hi, color=line.get_color(), alpha=0.15)
    for ax, title in zip(axes, ("all difficulties (1-8 digits)", "in reach (3-5 digits)")):
        ax.set_xlabel("rollouts (completions generated)")
        ax.set_ylabel("held-out accuracy (sampled, T=1)")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def quick() -> None:
    """Every piece once at tiny sizes (a 30-step SFT in a temporary folder, 2 GRPO steps per arm on 8
    prompts per difficulty, the report): a check that the study runs, not a result."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        model = pretrain(30, verbose=False)
        model.save_pretrained(Path(tmp) / "sft")
        records: dict[str, dict[int, dict[str, Any]]] = {}
        grpo = {"steps": 2, "eval_every": 1, "eval_samples": 1}
        for arm in ARMS:
            for seed in (0, 1):
                rec = run_arm(arm, seed, grpo, sft_path=Path(tmp) / "sft", per_level=8, work_dir=Path(tmp))
                records.setdefault(arm, {})[seed] = rec
    print(report(records))


def main(argv: list[str] | None = None) -> None:
    import torch

    torch.set_num_threads(1)
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="seconds: a 30-step SFT, 2 GRPO steps of every arm, the report"
    )
    sub = parser.add_subparsers(dest="command")
    p_pre = sub.add_parser("pretrain", help="(re)build the SFT checkpoint and print its held-out accuracy")
    p_pre.add_argument("--steps", type=int, default=None, help="SFT steps (default SFT['steps']; then saved)")
    p_run = sub.add_parser("run", help="GRPO runs, one record (JSON) per arm and seed")
    p_run.add_argument(
        "--preset",
        choices=list(PRESETS),
        default="round1",
        help="GRPO settings, arms and seeds: round1 (the first study: GRPO, MAIN_ARMS, seeds 0-9) or round4 "
        "(GRPO_ROUND4, ROUND4_ARMS, seeds 300-309); the options below override its values",
    )
    p_run.add_argument("--arms", nargs="+", default=None, choices=list(ARMS))
    p_run.add_argument("--seeds", nargs="+", type=int, default=None)
    p_run.add_argument(
        "--out", type=Path, required=True, help="folder of the records (existing ones are kept)"
    )
    for key, value in GRPO.items():
        p_run.add_argument(f"--{key.replace('_', '-')}", type=type(value), default=None)
    p_pil = sub.add_parser("pilot", help="one row per record of each folder: the change from step 0")
    p_pil.add_argument("folders", nargs="+", type=Path)
    p_pil.add_argument("--out", type=Path, default=None)
    p_rep = sub.add_parser("report", help="the tables of a folder of records")
    p_rep.add_argument("folder", type=Path)
    p_rep.add_argument("--out", type=Path, default=None)
    p_rep.add_argument("--figure", type=Path, default=None, help="a PNG of accuracy against rollouts")
    args = parser.parse_args(argv)
    if args.quick:
        quick()
    elif args.command is None:
        parser.error("a command (pretrain, run, report) or --quick is required")
    elif args.command == "pretrain":
        t0 = time.perf_counter()
        model = pretrain(args.steps)
        print(f"pretrain {time.perf_counter() - t0:.0f} s, digest {weights_digest(model)}")
        if args.steps is None:
            model.save_pretrained(CHECKPOINT_DIR / "sft")
        held, tok = eval_set(), build_tokenizer()
        print("greedy", held_out_accuracy(model, tok, held))
        print("sampled", held_out_accuracy(model, tok, held, GRPO["eval_samples"], GRPO["temperature"]))
    elif args.command == "run":
        model = load_or_pretrain()
        digest = weights_digest(model)
        args.out.mkdir(parents=True, exist_ok=True)
        base, default_arms, default_seeds = PRESETS[args.preset]
        grpo = {k: base[k] if getattr(args, k) is None else getattr(args, k) for k in GRPO}
        args.arms = args.arms or list(default_arms)
        args.seeds = args.seeds if args.seeds is not None else list(default_seeds)
        if any(arm in ROUND4_ONLY for arm in args.arms):
            check_defaults()
        commit = git_commit()  # read once: records committed during the study do not change it
        for seed in args.seeds:  # seeds outer: every finished seed has all its arms
            for arm in args.arms:
                path = args.out / f"{arm}-seed{seed}.json"
                if path.exists():
                    continue
                rec = run_arm(arm, seed, grpo)
                rec.update(sft_digest=digest, commit=commit, cpu=cpu_model(), load_at_end=load_average())
                tmp = path.with_suffix(".tmp")
                tmp.write_text(json.dumps(rec))
                os.replace(tmp, path)
                final = mean_accuracy(rec["curve"][-1])
                print(
                    f"{arm} seed {seed}: final {final:.3f} auc {auc(rec['curve']):.3f} "
                    f"({rec['wall_s']} s wall, {rec['cpu_s']} s cpu)",
                    flush=True,
                )
    elif args.command == "pilot":
        text = pilot_table(args.folders)
        print(text)
        if args.out is not None:
            args.out.write_text(text)
    else:
        text = report(load_records(args.folder))
        print(text)
        if args.out is not None:
            args.out.write_text(text)
        if args.figure is not None:
            figure(load_records(args.folder), args.figure)


if __name__ == "__main__":
    main()
