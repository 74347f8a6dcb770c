"""The five behaviours where the PLR paper's code (level-replay) differs from SB3, each against a hand
computation on tiny inputs (benchmarks/reference/reference_equivalence.py compares a whole update with
level-replay's own code, which is not part of this repository)."""

from __future__ import annotations

import hashlib
import inspect
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from gymnasium import spaces
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env

from plr_gym import LevelSampler
from plr_gym.policies import ImpalaCNN
from plr_gym.ppo import UPSTREAM_TRAIN_SHA256, LevelReplayPPO, clipped_max_value_loss, rollout_advantage_stats
from plr_gym.reference import REFERENCE_CHOICES, library_default_values, reference_values
from plr_gym.scoring import EpisodeScorer
from plr_gym.wrappers.time_limit import TimeLimitAsTerminal

# ------------------------------------------------------------------ partial episodes ("commit")


def test_commit_reports_running_chunks_after_the_rollouts_completed_episodes() -> None:
    """level-replay scores every completed episode of the rollout, then commits the running chunks: with
    alpha = 1 the chunk's score is the level's last word, even when another env completed an episode on
    the same level later in the rollout."""
    sampler = LevelSampler(levels=range(10), strategy="value_l1", alpha=1.0)
    scorer = EpisodeScorer(sampler, n_envs=2, strategy="value_l1", partial_episodes="commit")
    # env 0: one episode on level 5 that runs past the rollout's end: |A| = 1, 3, 2 and level-replay's
    # extra row |0 - V(s_T)| = 0.5, chunk score 6.5 / 4 = 1.625;
    # env 1: level 5 completes at step 1 (|A| = 4, 6: score 5.0), then level 7 runs on: (0.5 + 1) / 2 = 0.75.
    starts = np.array([[1, 1], [0, 0], [0, 1]], dtype=bool)
    levels = np.array([[5, 5], [5, 5], [5, 7]])
    adv = np.array([[1.0, 4.0], [-3.0, -6.0], [2.0, 0.5]])
    reported = scorer.process_rollout(
        levels=levels,
        episode_starts=starts,
        dones=np.array([False, False]),
        rewards=np.zeros((3, 2)),
        values=np.zeros((3, 2)),
        advantages=adv,
        last_values=np.array([0.5, -1.0]),
    )
    assert reported == [(5, 5.0), (5, 1.625), (7, 0.75)]
    assert sampler.scores[5] == 1.625  # the running chunk, committed last
    assert sampler.scores[7] == 0.75


def test_commit_adds_level_replays_extra_row_to_value_scores_of_running_chunks_only() -> None:
    """level-replay scores a running chunk from returns[start:] - value_preds[start:] of its T + 1 rows:
    value_l1 and gae get the extra pair (0, V(s_T)); a completed episode and other strategies do not."""
    arrays = dict(
        levels=np.array([[1], [1], [1]]),
        episode_starts=np.array([[1], [0], [0]], dtype=bool),
        dones=np.array([False]),
        rewards=np.array([[1.0], [0.0], [2.0]]),
        values=np.zeros((3, 1)),
        advantages=np.array([[1.0], [-3.0], [2.0]]),
        last_values=np.array([4.0]),
    )
    scores = {}
    for strategy in ("value_l1", "gae", "positive_value_loss"):
        scorer = EpisodeScorer(LevelSampler(levels=range(3), strategy=strategy, score_transform="rank"),
                               n_envs=1, strategy=strategy, partial_episodes="commit")  # fmt: skip
        scores[strategy] = scorer.process_rollout(**arrays)[0][1]
    assert scores["value_l1"] == (1 + 3 + 2 + 4) / 4
    assert scores["gae"] == (1 - 3 + 2 - 4) / 4
    assert scores["positive_value_loss"] == (1 + 0 + 2) / 3  # not a strategy of level-replay: no extra row


def test_commit_skips_a_running_chunk_whose_score_is_zero() -> None:
    """level-replay's after_update commits only non-zero partial scores."""
    sampler = LevelSampler(levels=range(4), strategy="value_l1")
    scorer = EpisodeScorer(sampler, n_envs=1, strategy="value_l1", partial_episodes="commit")
    arrays = dict(
        levels=np.array([[2], [2], [3]]),
        episode_starts=np.array([[1], [0], [1]], dtype=bool),
        dones=np.array([False]),
        rewards=np.zeros((3, 1)),
        values=np.zeros((3, 1)),
        advantages=np.array([[1.0], [-2.0], [0.0]]),
    )
    assert scorer.process_rollout(**arrays) == [(2, 1.5)]
    assert not sampler.seen[3]


# ------------------------------------------------------------------ the IMPALA residual skip


def _block(skip: str) -> Any:
    encoder = ImpalaCNN(
        spaces.Box(0, 255, (2, 8, 8), np.uint8), features_dim=4, channels=(2,), residual_skip=skip
    )
    return encoder.stacks[0].res0


@pytest.mark.parametrize("skip", ["identity", "relu"])
def test_residual_block_adds_its_input_or_relu_of_it(skip: str) -> None:
    block = _block(skip).double()
    x = torch.linspace(-2.0, 2.0, 2 * 3 * 3, dtype=torch.float64).reshape(1, 2, 3, 3)
    conv0, conv1 = block.conv0, block.conv1
    inner = conv1(torch.relu(conv0(torch.relu(x))))
    expected = (torch.relu(x) if skip == "relu" else x) + inner
    assert torch.equal(block(x), expected)
    with torch.no_grad():  # zero convolutions: the block is its skip alone
        for conv in (conv0, conv1):
            conv.weight.zero_()
            conv.bias.zero_()
    assert torch.equal(block(x), torch.relu(x) if skip == "relu" else x)


def test_relu_skip_equals_an_in_place_relu_on_the_blocks_input() -> None:
    """The semantics of level-replay's block: ReLU(inplace=True) on the input, which it then adds back."""
    block = _block("relu").double()
    x = torch.randn(3, 2, 5, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    kept = x.clone()
    out = torch.relu_(kept)  # the tensor kept for the skip is overwritten
    out = block.conv1(torch.relu(block.conv0(out)))
    torch.testing.assert_close(block(x), out + kept, rtol=0, atol=1e-12)
    assert not torch.equal(_block("identity").double()(x), block(x))


def test_residual_skip_is_checked_and_keeps_the_parameter_count() -> None:
    space = spaces.Box(0, 255, (3, 64, 64), np.uint8)
    counts = {
        s: sum(p.numel() for p in ImpalaCNN(space, residual_skip=s).parameters())
        for s in ("identity", "relu")
    }
    assert counts == {"identity": 622_144, "relu": 622_144}
    with pytest.raises(ValueError, match="residual_skip must be one of identity, relu"):
        ImpalaCNN(space, residual_skip="gelu")


# ------------------------------------------------------------------ time limits


@pytest.mark.parametrize("time_limit", ["bootstrap", "terminal"])
def test_time_limited_episode_bootstraps_or_ends(time_limit: str) -> None:
    """CartPole cut at 3 steps: SB3 adds gamma * V(final obs) to the last reward, unless the ending is
    terminal; the GAE then follows by hand."""
    venv = make_vec_env("CartPole-v1", n_envs=1, seed=0, env_kwargs={"max_episode_steps": 3})
    if time_limit == "terminal":
        venv = TimeLimitAsTerminal(venv)
    # learning rate 0: the update leaves the value function as it was when the rollout was collected
    model = PPO(
        "MlpPolicy",
        venv,
        n_steps=3,
        batch_size=3,
        n_epochs=1,
        gamma=0.9,
        gae_lambda=0.8,
        seed=0,
        learning_rate=0.0,
    )
    final: dict[str, Any] = {}
    original = venv.step_wait

    def step_wait() -> Any:
        out = original()
        if out[2][0]:
            final["obs"] = out[3][0]["terminal_observation"]
            final["info"] = dict(out[3][0])
        return out

    venv.step_wait = step_wait  # type: ignore[method-assign]
    model.learn(3)
    buffer = model.rollout_buffer
    rewards = buffer.rewards[:, 0].astype(
        np.float64
    )  # the buffer after the update: flattened order is (env, step)
    values = buffer.values[:, 0].astype(np.float64)
    with torch.no_grad():
        v_final = float(model.policy.predict_values(torch.as_tensor(final["obs"][None]))[0, 0])
    assert final["info"].get("TimeLimit.truncated", False) is (time_limit == "bootstrap")
    assert final["info"].get("TimeLimit.terminal", False) is (time_limit == "terminal")
    env_rewards = np.ones(3)
    if time_limit == "bootstrap":
        env_rewards[-1] += 0.9 * v_final
    np.testing.assert_allclose(rewards, env_rewards, rtol=1e-6)
    # GAE by hand: the episode ends at step 2 (dones=True), so nothing flows in from outside
    deltas = env_rewards - values + 0.9 * np.append(values[1:], 0.0)
    adv = np.zeros(3)
    running = 0.0
    for t in (2, 1, 0):
        running = deltas[t] + 0.9 * 0.8 * running
        adv[t] = running
    np.testing.assert_allclose(buffer.advantages[:, 0], adv, rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------ value loss and advantages


def test_clipped_max_value_loss_takes_each_branch_of_the_max() -> None:
    values = torch.tensor([1.5, 0.5, 0.1], dtype=torch.float64)
    old = torch.tensor([1.0, 1.0, 0.0], dtype=torch.float64)
    returns = torch.tensor([2.0, 0.0, 1.0], dtype=torch.float64)
    # element 0: V moved +0.5, clipped to 1.2: (1.2 - 2)^2 = 0.64 > (1.5 - 2)^2 = 0.25 -> clipped branch
    # element 1: V moved -0.5, clipped to 0.8: (0.8 - 0)^2 = 0.64 > 0.25 -> clipped branch
    # element 2: V moved +0.1 (inside the clip): both (0.1 - 1)^2 = 0.81
    expected = 0.5 * (0.64 + 0.64 + 0.81) / 3
    assert float(clipped_max_value_loss(values, old, returns, 0.2)) == pytest.approx(expected, rel=1e-12)
    # the unclipped branch wins when clipping brings V closer to R
    v, o, r = (torch.tensor([x], dtype=torch.float64) for x in (0.0, 1.0, 0.5))
    # V_clip = 0.8: (0.8 - 0.5)^2 = 0.09 < (0 - 0.5)^2 = 0.25
    assert float(clipped_max_value_loss(v, o, r, 0.2)) == pytest.approx(0.5 * 0.25, rel=1e-12)


def test_rollout_advantage_stats_are_the_whole_rollouts_unbiased_ones() -> None:
    adv = np.array([[1.0, 2.0], [3.0, 6.0]])
    mean, std = rollout_advantage_stats(adv)
    assert mean == 3.0
    assert std == pytest.approx(np.sqrt(((adv - 3.0) ** 2).sum() / 3), rel=1e-15)


def _cartpole_model(cls: Any, steps: int = 0, **kwargs: Any) -> Any:
    """A seeded model, trained for ``steps`` at once (torch's global RNG, which SB3 seeds when it builds a
    model, draws the actions: build and train one model before the next)."""
    venv = make_vec_env("CartPole-v1", n_envs=2, seed=3)
    model = cls("MlpPolicy", venv, n_steps=32, batch_size=16, n_epochs=2, seed=3, **kwargs)
    return model.learn(steps) if steps else model


def _parameters(model: Any) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.policy.parameters()]


def test_levelreplayppo_defaults_train_exactly_as_sb3_ppo() -> None:
    ours = _cartpole_model(LevelReplayPPO, 128)
    sb3 = _cartpole_model(PPO, 128)
    for a, b in zip(_parameters(ours), _parameters(sb3)):
        assert torch.equal(a, b)


class _PreNormalizedPPO(PPO):
    """SB3's PPO without its normalisation, fed advantages normalised over the whole rollout beforehand."""

    def train(self) -> None:
        adv = self.rollout_buffer.advantages
        self.rollout_buffer.advantages = ((adv - adv.mean()) / (adv.std(ddof=1) + 1e-5)).astype(np.float32)
        super().train()


def test_rollout_normalisation_equals_normalising_the_whole_rollout_before_the_update() -> None:
    ours = _cartpole_model(LevelReplayPPO, 64, advantage_normalization="rollout")
    pre = _cartpole_model(_PreNormalizedPPO, 64, normalize_advantage=False)
    minibatch = _cartpole_model(PPO, 64)
    for a, b in zip(_parameters(ours), _parameters(pre)):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    assert any(not torch.allclose(a, b, atol=1e-5) for a, b in zip(_parameters(ours), _parameters(minibatch)))


def test_clipped_max_is_the_loss_levelreplayppo_minimises(monkeypatch: pytest.MonkeyPatch) -> None:
    import plr_gym.ppo as ppo_module

    calls: list[tuple[torch.Tensor, torch.Tensor, float]] = []
    real = ppo_module.clipped_max_value_loss

    def spy(values: torch.Tensor, old: torch.Tensor, returns: torch.Tensor, clip: float) -> torch.Tensor:
        calls.append((old.detach().clone(), returns.detach().clone(), clip))
        return real(values, old, returns, clip)

    monkeypatch.setattr(ppo_module, "clipped_max_value_loss", spy)
    _cartpole_model(LevelReplayPPO, 64, value_loss="clipped_max", clip_range=0.3)
    assert len(calls) == 2 * (64 // 16)  # one rollout of 2 x 32 steps: 2 epochs of 4 minibatches
    assert {clip for *_, clip in calls} == {0.3}  # PPO's clip range clips the value, as level-replay
    with pytest.raises(ValueError, match="value_loss must be one of mse, clipped_max"):
        _cartpole_model(LevelReplayPPO, value_loss="huber")
    with pytest.raises(ValueError, match="normalize_advantage=False contradicts"):
        _cartpole_model(LevelReplayPPO, normalize_advantage=False, advantage_normalization="rollout")


def test_levelreplayppo_train_is_a_copy_of_the_checked_upstream_train() -> None:
    digest = hashlib.sha256(inspect.getsource(PPO.train).encode()).hexdigest()
    assert digest == UPSTREAM_TRAIN_SHA256["stable_baselines3.PPO"], (
        "SB3's PPO.train() changed: port the change into plr_gym.ppo.LevelReplayPPO.train() and update "
        "UPSTREAM_TRAIN_SHA256 and SUPPORTED_SB3"
    )


def test_saved_levelreplayppo_loads_with_its_choices(tmp_path: Path) -> None:
    model = _cartpole_model(LevelReplayPPO, value_loss="clipped_max", advantage_normalization="rollout")
    model.save(tmp_path / "m.zip")
    loaded = LevelReplayPPO.load(tmp_path / "m.zip")
    assert (loaded.value_loss, loaded.advantage_normalization) == ("clipped_max", "rollout")


# ------------------------------------------------------------------ the registry, the presets, the CLI


def test_registry_names_both_sides_of_each_choice() -> None:
    assert [c.dest for c in REFERENCE_CHOICES] == [
        "partial_episodes",
        "residual_skip",
        "time_limit",
        "value_loss",
        "advantage_normalization",
        "level_draw",
        "unseen_rank",
        "power_offset",
    ]
    for c in REFERENCE_CHOICES:
        assert c.default in c.choices and c.reference in c.choices and c.default != c.reference
        assert "level_replay/" in c.where or "train.py" in c.where
    assert library_default_values() == {
        "partial_episodes": "stitch",
        "residual_skip": "identity",
        "time_limit": "bootstrap",
        "value_loss": "mse",
        "advantage_normalization": "minibatch",
        "level_draw": "episode_start",
        "unseen_rank": "seen",
        "power_offset": "none",
    }


def test_presets_select_level_replays_choices_and_the_cli_overrides_each() -> None:
    import argparse

    from plr_gym.cli import build_parser
    from plr_gym.presets import resolve

    parser = build_parser()
    args = parser.parse_args(["train", "plr_gym/procgen-bigfish-v0", "--preset", "paper-procgen"])
    sources = resolve(args)
    for dest, value in reference_values().items():
        assert getattr(args, dest) == value and sources[dest] == "paper-procgen"
    args = parser.parse_args(
        ["train", "MiniGrid-Empty-5x5-v0", "--preset", "paper-minigrid", "--time-limit", "bootstrap"]
    )
    sources = resolve(args)
    assert args.time_limit == "bootstrap" and sources["time_limit"] == "command line"
    assert args.value_loss == "clipped_max" and args.residual_skip == "identity"
    assert sources["residual_skip"] == "default"
    plain = resolve(argparse.Namespace(preset=None), only=list(reference_values()))
    assert set(plain.values()) == {"default"}


def test_resume_of_a_run_from_before_the_choices_needs_their_defaults(tmp_path: Path, capsys: Any) -> None:
    from conftest import run_cli

    base = ["train", "MiniGrid-Empty-5x5-v0", "--timesteps", "64", "--n-envs", "2", "--n-steps", "32",
            "--batch-size", "64", "--num-levels", "4", "--eval-levels", "100:102", "--eval-freq", "64",
            "--no-tensorboard", "--no-progress", "--quiet", "--out", str(tmp_path / "run")]  # fmt: skip
    code, _, err = run_cli(base, capsys)
    assert code == 0, err
    config_path = tmp_path / "run" / "config.json"
    config = json.loads(config_path.read_text())
    assert {k: config[k] for k in library_default_values()} == library_default_values()
    for dest in library_default_values():  # as written before the options existed
        del config[dest]
    config_path.write_text(json.dumps(config))
    resume = [*base[:-2], "--timesteps", "128", "--resume", str(tmp_path / "run")]
    code, _, err = run_cli([*resume, "--value-loss", "clipped_max"], capsys)
    assert code == 2
    assert "started before --value-loss existed" in err and "--value-loss mse" in err
    code, _, err = run_cli(resume, capsys)
    assert code == 0, err


def test_commit_with_an_outcome_strategy_is_refused_before_the_run_directory(
    tmp_path: Path, capsys: Any
) -> None:
    from conftest import run_cli

    out = tmp_path / "run"
    code, _, err = run_cli(
        ["train", "MiniGrid-Empty-5x5-v0", "--preset", "paper-minigrid", "--strategy", "learnability",
         "--out", str(out), "--quiet"],
        capsys,
    )  # fmt: skip
    assert code == 2 and "--partial-episodes commit" in err and "--partial-episodes stitch" in err
    assert not out.exists()


def test_minibatches_of_one_need_no_advantage_normalisation() -> None:
    from plr_gym.cli import CLIError, _check_train_args, build_parser

    def check(*extra: str) -> None:
        args = build_parser().parse_args(["train", "MiniGrid-Empty-5x5-v0", "--batch-size", "1", *extra])
        _check_train_args(args)

    for mode in ("minibatch", "rollout"):
        with pytest.raises(CLIError, match=f"--advantage-normalization {mode}"):
            check("--advantage-normalization", mode)
    check("--advantage-normalization", "none")  # accepted: SB3 and LevelReplayPPO take minibatches of 1


def test_the_harness_maps_every_policy_parameter_to_one_of_level_replays() -> None:
    """benchmarks/reference/reference_equivalence.py loads plr_gym's initial weights into level-replay's
    Policy by name; every parameter of ImpalaCnnPolicy needs exactly one counterpart (level-replay is not
    here)."""
    import importlib.util

    from plr_gym.policies import ImpalaCnnPolicy

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "reference" / "reference_equivalence.py"
    spec = importlib.util.spec_from_file_location("reference_equivalence", path)
    assert spec is not None and spec.loader is not None
    harness = importlib.util.module_from_spec(spec)
    sys.modules["reference_equivalence"] = harness  # its dataclasses look their module up
    spec.loader.exec_module(harness)
    policy = ImpalaCnnPolicy(
        spaces.Box(0, 255, (3, 64, 64), np.uint8), spaces.Discrete(15), lr_schedule=lambda _: 5e-4
    )
    names = [harness.reference_name(n) for n, _ in policy.named_parameters()]
    assert (
        len(names) == len(set(names)) == 36
    )  # 15 convolutions, fc, critic and the logits' layer: weight + bias
    assert "base.layer2.3.conv1.weight" in names and "dist.linear.bias" in names and "base.fc.weight" in names


class _Recorder:
    """Stands in for ``torch`` in plr_gym.ppo: records the first argument of every ``th.min`` (the
    surrogate ``advantages * ratio``, ratio 1 with a zero learning rate), delegates everything else."""

    def __init__(self) -> None:
        self.seen: list[torch.Tensor] = []

    def min(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        self.seen.append(a.detach().clone())
        return torch.min(a, b)

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)


@pytest.mark.parametrize(
    ("mode", "eps", "scale", "batch"), [("rollout", 1e-5, 1e-4, 16), ("minibatch", 1e-8, 1e-7, 64)]
)
def test_each_normalisations_epsilon_is_pinned(
    monkeypatch: pytest.MonkeyPatch, mode: str, eps: float, scale: float, batch: int
) -> None:
    """The advantages PPO's surrogate sees are (A - mean) / (std + eps) with level-replay's 1e-5 (rollout:
    the whole rollout's mean and std, ddof 1, whatever the minibatch) or SB3's 1e-8 (per minibatch; here one
    minibatch of the whole rollout): advantages with a standard deviation of about 10 * eps make a change
    of eps (e.g. 1e-5 -> 1e-8) move them by ~10%, far outside the tolerance."""
    import plr_gym.ppo as ppo_module

    rng = np.random.default_rng(0)
    known = (scale * rng.standard_normal((32, 2))).astype(np.float32)

    class Known(LevelReplayPPO):
        def train(self) -> None:
            self.rollout_buffer.advantages = known.copy()
            super().train()

    recorder = _Recorder()
    monkeypatch.setattr(ppo_module, "th", recorder)
    venv = make_vec_env("CartPole-v1", n_envs=2, seed=3)
    Known("MlpPolicy", venv, n_steps=32, batch_size=batch, n_epochs=2, seed=3, learning_rate=0.0,
          advantage_normalization=mode).learn(64)  # fmt: skip
    assert len(recorder.seen) == 2 * (64 // batch)
    flat = known.astype(np.float64).ravel()
    seen = torch.cat(recorder.seen).double().numpy()[:64]  # the first epoch: every step once
    expected = (flat - flat.mean()) / (flat.std(ddof=1) + eps)
    np.testing.assert_allclose(np.sort(seen), np.sort(expected), rtol=1e-5, atol=0)
    for other in (1e-5, 1e-8, 1e-6, 1e-7, 0.0):
        if other != eps:  # another epsilon moves them by far more than the tolerance
            wrong = (flat - flat.mean()) / (flat.std(ddof=1) + other)
            assert np.max(np.abs(np.sort(wrong) - np.sort(seen))) > 1e-3 * np.max(np.abs(expected))


# ------------------------------------------------------------------ the sampler's two reference behaviours


def _reference_rank_weights(scores: np.ndarray, seen: np.ndarray, temperature: float) -> np.ndarray:
    """level-replay's ``sample_weights`` for ``rank`` without staleness (level_sampler.py L262-299), with
    ties broken as ours (none in these tests)."""
    all_scores = np.where(seen, scores, 0.0)
    order = np.argsort(-all_scores, kind="stable")
    ranks = np.empty(scores.size)
    ranks[order] = np.arange(1, scores.size + 1)
    w = ranks ** (-1.0 / temperature) * seen
    return w / w.sum()


def test_unseen_rank_zero_ranks_negative_scores_below_the_unseen_levels() -> None:
    scores = np.array([-1.0, 0.5, -0.2, 0.0, 0.0, 0.3])
    seen = np.array([True, True, True, False, False, True])
    for mode, expected in (
        ("zero", _reference_rank_weights(scores, seen, 0.5)),
        ("seen", None),
    ):
        sampler = LevelSampler(range(6), strategy="gae", temperature=0.5, staleness_coef=0.0,
                               uniform_mass=0.0, min_seen_ratio=0.0, unseen_rank=mode, seed=0)  # fmt: skip
        for level in np.flatnonzero(seen).tolist():
            sampler.update(level, float(scores[level]))
        weights = sampler.sample_weights()
        if expected is None:  # ranks 4, 1, 3, -, -, 2 among the seen levels
            ranks = np.array([4.0, 1.0, 3.0, np.inf, np.inf, 2.0])
            expected = ranks**-2.0 / (ranks**-2.0).sum()
        np.testing.assert_allclose(weights, expected, rtol=1e-15, atol=0)
        # the draws follow the weights (replay draws only: every 2nd is a replay with 4 of 6 seen)
        counts = np.zeros(6)
        for _ in range(6000):
            counts[sampler._sample_score_index()] += 1
        np.testing.assert_allclose(counts / 6000, expected, atol=0.02)
    # ranks 6 and 5 (the unseen levels at 0 take ranks 3 and 4): 1/36 and 1/25 against 1/16 and 1/9 of "seen"
    reference = _reference_rank_weights(scores, seen, 0.5)
    np.testing.assert_allclose(
        reference[[0, 2]] * (1 + 1 / 4 + 1 / 25 + 1 / 36), [1 / 36, 1 / 25], rtol=1e-12
    )


def test_unseen_rank_zero_changes_nothing_without_negative_scores_or_unseen_levels() -> None:
    for scores, seen in (
        (np.array([0.1, 0.5, 0.2, 0.0]), np.array([True, True, True, False])),
        (np.array([-1.0, 0.5, -0.2, 0.3]), np.array([True, True, True, True])),
    ):
        weights = []
        for mode in ("seen", "zero"):
            sampler = LevelSampler(range(4), strategy="gae", staleness_coef=0.1, unseen_rank=mode,
                                   min_seen_ratio=0.0, seed=0)  # fmt: skip
            for level in np.flatnonzero(seen).tolist():
                sampler.update(level, float(scores[level]))
            weights.append(sampler.sample_weights())
        np.testing.assert_array_equal(weights[0], weights[1])


def test_power_offset_is_level_replays_1e_3_without_staleness() -> None:
    from plr_gym.reference import REFERENCE_POWER_OFFSET, power_offset

    assert REFERENCE_POWER_OFFSET == 1e-3
    assert power_offset("without_staleness", "power", 0.0) == 1e-3
    assert power_offset("without_staleness", "power", 0.1) == 0.0  # level-replay: eps = 0 with staleness
    assert power_offset("without_staleness", "rank", 0.0) == 0.0
    assert power_offset("none", "power", 0.0) == 0.0
    scores = np.array([0.0, 0.5, 0.25, 2.0])
    for offset in (0.0, 1e-3):
        sampler = LevelSampler(range(4), score_transform="power", temperature=0.5, staleness_coef=0.0,
                               uniform_mass=0.0, power_offset=offset, seed=0)  # fmt: skip
        for level, score in enumerate(scores.tolist()):
            sampler.update(level, score)
        w = (scores + offset) ** 2.0
        np.testing.assert_allclose(sampler.sample_weights(), w / w.sum(), rtol=1e-14, atol=0)
        counts = np.bincount([sampler.sample() for _ in range(4000)], minlength=4) / 4000
        np.testing.assert_allclose(counts, w / w.sum(), atol=0.03)
    with pytest.raises(ValueError, match=r"power_offset=0\.001 applies to score_transform='power' only"):
        LevelSampler(range(4), power_offset=1e-3)
    with pytest.raises(ValueError, match="power_offset must be a finite number >= 0"):
        LevelSampler(range(4), score_transform="power", power_offset=-1.0)
    with pytest.raises(ValueError, match="unseen_rank='all' is not supported; choose one of seen, zero"):
        LevelSampler(range(4), unseen_rank="all")


def test_the_sampler_options_round_trip_and_old_states_load(tmp_path: Path) -> None:
    sampler = LevelSampler(range(4), strategy="gae", unseen_rank="zero", seed=0)
    sampler.update(1, -0.5)
    sampler.save(tmp_path / "s.npz")
    assert LevelSampler.load(tmp_path / "s.npz").unseen_rank == "zero"
    state = LevelSampler(range(4), seed=0).state_dict()
    for key in ("unseen_rank", "power_offset"):  # written before the options existed
        del state["config"][key]
    LevelSampler(range(4), seed=0).load_state_dict(state)
    with pytest.raises(ValueError, match="unseen_rank: state has 'seen', sampler has 'zero'"):
        LevelSampler(range(4), seed=0, unseen_rank="zero").load_state_dict(state)
