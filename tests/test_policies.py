"""plr_gym.policies: the IMPALA-CNN encoder of the PLR paper (shape, parameter count, initialisation, PPO)."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("stable_baselines3")

from gymnasium import spaces  # noqa: E402
from stable_baselines3 import PPO  # noqa: E402
from stable_baselines3.common.vec_env import DummyVecEnv  # noqa: E402

from plr_gym.policies import IMPALA_CHANNELS, ImpalaCNN, ImpalaCnnPolicy, count_parameters  # noqa: E402

FRAMES = spaces.Box(0, 255, (3, 64, 64), np.uint8)


def conv_params(c_in: int, c_out: int) -> int:
    return c_in * c_out * 9 + c_out


def expected_parameters(channels: tuple[int, ...], in_channels: int, side: int, features: int) -> int:
    """The encoder's parameters from its definition: per stack one conv and four in the residual blocks."""
    total, c_in = 0, in_channels
    for c in channels:
        total += conv_params(c_in, c) + 4 * conv_params(c, c)
        c_in = c
        side = math.ceil(side / 2)
    return total + (c_in * side * side) * features + features


def test_the_papers_parameter_count_on_64x64x3() -> None:
    encoder = ImpalaCNN(FRAMES)
    assert count_parameters(encoder) == 622_144 == expected_parameters(IMPALA_CHANNELS, 3, 64, 256)
    assert IMPALA_CHANNELS == (16, 32, 32)
    assert encoder.flat_dim == 32 * 8 * 8 and encoder.linear.in_features == 2048
    # other sizes and widths follow the same formula
    small = ImpalaCNN(spaces.Box(0, 255, (4, 32, 32), np.uint8), features_dim=64, channels=(8, 16))
    assert count_parameters(small) == expected_parameters((8, 16), 4, 32, 64)


def test_layers_are_the_papers() -> None:
    encoder = ImpalaCNN(FRAMES)
    assert len(encoder.stacks) == 3
    for stack, c in zip(encoder.stacks, IMPALA_CHANNELS):
        assert (
            stack.conv.out_channels == c and stack.conv.kernel_size == (3, 3) and stack.conv.padding == (1, 1)
        )
        pool = stack.pool
        assert (pool.kernel_size, pool.stride, pool.padding) == (3, 2, 1)
        for block in (stack.res0, stack.res1):
            for conv in (block.conv0, block.conv1):
                assert (conv.in_channels, conv.out_channels, conv.kernel_size) == (c, c, (3, 3))


def test_forward_shapes_relu_output_and_residual_skip() -> None:
    encoder = ImpalaCNN(FRAMES)
    x = torch.rand(5, 3, 64, 64)
    out = encoder(x)
    assert out.shape == (5, 256) and (out >= 0).all()
    # stack 1 halves the side: 64 -> 32, stack 2 -> 16, stack 3 -> 8
    h = x
    for stack, side in zip(encoder.stacks, (32, 16, 8)):
        h = stack(h)
        assert h.shape[-2:] == (side, side)
    # a residual block whose second conv outputs zero is the identity (the skip adds the input back)
    block = encoder.stacks[0].res0
    with torch.no_grad():
        block.conv1.weight.zero_()
        block.conv1.bias.zero_()
    y = torch.randn(2, 16, 32, 32)
    assert torch.equal(block(y), y)


def test_initialisation_is_the_reference_codes() -> None:
    torch.manual_seed(0)
    encoder = ImpalaCNN(FRAMES)
    for module in encoder.modules():
        if isinstance(module, torch.nn.Conv2d):
            fan_in = module.in_channels * 9
            fan_out = module.out_channels * 9
            bound = math.sqrt(6.0 / (fan_in + fan_out))  # Xavier-uniform
            assert module.weight.abs().max() <= bound and (module.bias == 0).all()
    w = encoder.linear.weight  # orthogonal rows with ReLU's gain sqrt(2)
    assert torch.allclose(w @ w.T, 2.0 * torch.eye(256), atol=1e-4)
    assert (encoder.linear.bias == 0).all()


def test_bad_observation_spaces_are_refused() -> None:
    with pytest.raises(ValueError, match="channels-last"):
        ImpalaCNN(spaces.Box(0, 255, (64, 64, 3), np.uint8))
    with pytest.raises(ValueError, match="3-D"):
        ImpalaCNN(spaces.Box(0, 255, (64, 64), np.uint8))
    with pytest.raises(TypeError, match="gymnasium Box"):
        ImpalaCNN(spaces.Discrete(3))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="features_dim must be a positive int"):
        ImpalaCNN(FRAMES, features_dim=0)
    with pytest.raises(ValueError, match="channels must be a non-empty sequence"):
        ImpalaCNN(FRAMES, channels=())


class Frames(gym.Env[np.ndarray, int]):
    """64x64x3 uint8 frames; reward 1 for action 0."""

    observation_space = spaces.Box(0, 255, (64, 64, 3), np.uint8)
    action_space = spaces.Discrete(4)

    def __init__(self) -> None:
        self.t = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.t = 0
        return self.np_random.integers(0, 256, (64, 64, 3), dtype=np.uint8), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.t += 1
        obs = self.np_random.integers(0, 256, (64, 64, 3), dtype=np.uint8)
        return obs, float(action == 0), False, self.t >= 8, {}


def test_policy_heads_init_and_a_ppo_update() -> None:
    venv = DummyVecEnv([Frames, Frames])
    model = PPO(ImpalaCnnPolicy, venv, n_steps=16, batch_size=16, n_epochs=2, seed=0, device="cpu")
    policy = model.policy
    assert isinstance(policy.features_extractor, ImpalaCNN)
    assert count_parameters(policy.features_extractor) == 622_144
    # net_arch=[]: one linear layer each for the logits and the value, on the 256 features
    assert policy.action_net.in_features == 256 and policy.value_net.in_features == 256
    assert count_parameters(policy) == 622_144 + (256 * 4 + 4) + (256 + 1)
    # SB3's orthogonal init for the heads (logits gain 0.01), the reference code's Xavier for the convs
    assert float(torch.linalg.matrix_norm(policy.action_net.weight.detach(), ord=2)) == pytest.approx(
        0.01, rel=1e-3
    )
    first_conv = policy.features_extractor.stacks[0].conv
    assert first_conv.weight.abs().max() <= math.sqrt(6.0 / (27 + 144)) and (first_conv.bias == 0).all()
    assert policy.optimizer.defaults["eps"] == 1e-5
    # the encoder sees frames scaled to [0, 1] (SB3's normalize_images)
    seen: list[float] = []
    policy.features_extractor.register_forward_hook(lambda m, inp, out: seen.append(float(inp[0].max())))
    before = [p.detach().clone() for p in policy.features_extractor.parameters()]
    model.learn(32)
    assert seen and max(seen) <= 1.0 and max(seen) > 0.9
    after = list(policy.features_extractor.parameters())
    assert all(not torch.equal(b, a) for b, a in zip(before, after))  # every encoder tensor was updated
    venv.close()
