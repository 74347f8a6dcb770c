"""The pieces the end-to-end study (``benchmarks/prompts/tiny_grpo.py``) rests on: the character tokenizer,
the exact reward, the data split and the metrics (seconds; nothing downloaded)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tokenizers", reason="needs tokenizers and transformers")
pytest.importorskip("transformers", reason="needs tokenizers and transformers")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "prompts"))
import tiny_grpo


def test_character_tokenizer_round_trips_and_prepends_bos() -> None:
    tok = tiny_grpo.build_tokenizer()
    vocab = tiny_grpo.tokenizer_vocab()
    text = "90817263+12345678="
    ids = tok(text)["input_ids"]
    assert ids == [vocab["[BOS]"]] + [vocab[c] for c in text]  # one token per character, [BOS] first
    assert tok.decode(ids, skip_special_tokens=True) == text
    answer = [vocab[c] for c in "103162941"] + [vocab["[EOS]"], vocab["[PAD]"]]
    assert tok.decode(answer, skip_special_tokens=True) == "103162941"  # no spaces, specials dropped
    assert tok.pad_token_id == 0 and tok.eos_token_id == vocab["[EOS]"]
    left = tok(["1+2=", "10+20="], padding=True, padding_side="left")["input_ids"]
    assert left[0][:2] == [0, 0] and len(left[0]) == len(left[1])


def test_reward_is_exact() -> None:
    r = tiny_grpo.exact_reward
    assert r("99999999+1=", "100000000") == 1.0
    assert r("0+0=", "0") == 1.0
    for wrong in ("10000000", "1000000000", "100000000 ", "0100000000", "", "100000000+"):
        assert r("99999999+1=", wrong) == 0.0, wrong
    rng = np.random.default_rng(0)
    for d in tiny_grpo.LEVELS:
        for a, b in tiny_grpo.problems(rng, d, 5):
            assert len(str(a)) == d and len(str(b)) == d
            assert r(tiny_grpo.prompt_of(a, b), str(a + b)) == 1.0
            assert r(tiny_grpo.prompt_of(a, b), str(a + b + 1)) == 0.0


def test_train_prompts_are_distinct_and_disjoint_from_the_held_out_set() -> None:
    held = tiny_grpo.eval_set()
    assert held == tiny_grpo.eval_set()  # the same for every seed and arm
    rows = tiny_grpo.train_set(3, per_level=50)
    assert rows == tiny_grpo.train_set(3, per_level=50) and rows != tiny_grpo.train_set(4, per_level=50)
    assert len(rows) == len(set(rows)) == 50 * len(tiny_grpo.LEVELS)
    for d in tiny_grpo.LEVELS:
        assert len(held[d]) == tiny_grpo.EVAL_PER_LEVEL
        assert not {pair for level, pair in rows if level == d} & set(held[d])
    full = tiny_grpo.train_set(0)  # the study's: one-digit prompts are the 68 pairs not held out
    per_level = np.bincount([d for d, _ in full], minlength=9)[1:]
    assert per_level.tolist() == [68] + [tiny_grpo.TRAIN_PER_LEVEL] * 7
    assert {pair for d, pair in full if d == 1} | set(held[1]) == {
        (a, b) for a in range(10) for b in range(10)
    }
    with pytest.raises(ValueError, match="only 100 one-digit pairs"):
        tiny_grpo.problems(rng=np.random.default_rng(0), digits=1, n=90, exclude={(1, 2)} | set(held[1]))


def test_auc_and_paired_bootstrap() -> None:
    def point(rollouts: int, acc: float) -> dict:
        return {"rollouts": rollouts, "accuracy": {str(d): acc for d in tiny_grpo.LEVELS}}

    curve = [point(0, 0.0), point(100, 1.0), point(300, 1.0)]
    assert tiny_grpo.auc(curve) == pytest.approx((50 + 200) / 300)
    assert tiny_grpo.mean_accuracy({"accuracy": {str(d): d / 8 for d in tiny_grpo.LEVELS}}) == pytest.approx(
        4.5 / 8
    )
    mean, lo, hi = tiny_grpo.paired_bootstrap(np.array([0.1, 0.2, 0.3, 0.4]))
    assert mean == pytest.approx(0.25) and 0.1 <= lo < mean < hi <= 0.4
    assert tiny_grpo.paired_bootstrap(np.full(5, 0.2))[1:] == pytest.approx((0.2, 0.2))


def test_round4_defaults_arm_is_todays_constructor_defaults() -> None:
    tiny_grpo.check_defaults()  # DEFAULTS spells out PromptCurriculum's defaults at this commit
    assert tiny_grpo.ARMS["defaults"] == {} and tiny_grpo.ARMS["defaults_dapo"] == {"filter_groups": True}
    # the first study's arms and settings mean what they meant
    assert tiny_grpo.ARMS["curriculum"] is tiny_grpo.CURRICULUM and tiny_grpo.CURRICULUM["replay_prob"] == 0.5
    assert tiny_grpo.PRESETS["round1"] == (tiny_grpo.GRPO, tiny_grpo.MAIN_ARMS, tuple(range(10)))
    assert tiny_grpo.GRPO["learning_rate"] == 5e-5 and tiny_grpo.GRPO["steps"] == 150
    _, arms, seeds = tiny_grpo.PRESETS["round4"]
    assert arms == ("uniform", "defaults", "dapo", "defaults_dapo") and not set(seeds) & set(range(10))
