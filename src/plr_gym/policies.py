"""Policies of the PLR paper for Stable-Baselines3: the IMPALA-CNN encoder (:class:`ImpalaCNN`).

The PLR paper (Jiang et al. 2021) trains PPO on Procgen with the residual encoder of IMPALA (Espeholt et
al. 2018) as Cobbe et al. (2020) use it: three stacks of 16, 32 and 32 channels, each a 3x3 convolution, a
3x3 max-pool with stride 2 (padding 1) and two residual blocks (ReLU, 3x3 conv, ReLU, 3x3 conv, plus the
skip), then ReLU, a fully connected layer of 256 units and ReLU. On Procgen's 64x64x3 frames it has
622,144 parameters (:func:`count_parameters`), as the reference code's ``ResNetBase`` (level-replay's
``level_replay/model.py``, without its value head).

- :class:`ImpalaCNN` is an SB3 ``BaseFeaturesExtractor``: ``policy_kwargs=dict(features_extractor_class=
  ImpalaCNN)``. SB3 scales ``uint8`` frames by 1/255 before it (``normalize_images=True``), as the
  reference code does.
- :class:`ImpalaCnnPolicy` is SB3's ``CnnPolicy`` with that encoder, the reference code's heads (one linear
  layer each for the action logits and the value, on the shared 256 features: ``net_arch=[]``) and its
  initialisation: SB3's orthogonal initialisation (gain 0.01 for the logits, 1 for the value, sqrt(2) for
  the encoder's fully connected layer) except the encoder's convolutions, which keep the reference code's
  Xavier-uniform weights and zero biases (SB3 would make them orthogonal with gain sqrt(2)).

This module imports torch; ``import plr_gym`` does not (``plr_gym.ImpalaCNN`` loads it on first use).

Example:
    >>> import numpy as np
    >>> from gymnasium import spaces
    >>> from plr_gym.policies import ImpalaCNN, count_parameters
    >>> encoder = ImpalaCNN(spaces.Box(0, 255, (3, 64, 64), np.uint8))
    >>> count_parameters(encoder), encoder.features_dim
    (622144, 256)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from gymnasium import spaces
from stable_baselines3.common.policies import ActorCriticCnnPolicy
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from torch import nn

from plr_gym.reference import RESIDUAL_SKIPS

__all__ = ["IMPALA_CHANNELS", "RESIDUAL_SKIPS", "ImpalaCNN", "ImpalaCnnPolicy", "count_parameters"]

#: Channels of the three stacks (Espeholt et al. 2018; Cobbe et al. 2020; level-replay's ``ResNetBase``).
IMPALA_CHANNELS: tuple[int, int, int] = (16, 32, 32)


def count_parameters(module: nn.Module) -> int:
    """Number of trainable parameters of ``module``."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad)


class _ResidualBlock(nn.Module):
    """ReLU, 3x3 conv, ReLU, 3x3 conv, plus the skip: ``x`` or ``ReLU(x)`` (channels and size unchanged)."""

    def __init__(self, channels: int, skip: str = "identity") -> None:
        super().__init__()
        self.conv0 = nn.Conv2d(channels, channels, kernel_size=3, padding=1)
        self.conv1 = nn.Conv2d(channels, channels, kernel_size=3, padding=1)
        self.skip = skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        activated = torch.relu(x)
        out = self.conv1(torch.relu(self.conv0(activated)))
        result: torch.Tensor = (activated if self.skip == "relu" else x) + out
        return result


class _ConvSequence(nn.Module):
    """One IMPALA stack: 3x3 conv, 3x3 max-pool with stride 2 (padding 1), two residual blocks."""

    def __init__(self, in_channels: int, out_channels: int, skip: str = "identity") -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1)
        self.pool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.res0 = _ResidualBlock(out_channels, skip)
        self.res1 = _ResidualBlock(out_channels, skip)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        result: torch.Tensor = self.res1(self.res0(self.pool(self.conv(x))))
        return result


class ImpalaCNN(BaseFeaturesExtractor):
    """The IMPALA-CNN encoder of the PLR paper as an SB3 features extractor.

    Three stacks (:data:`IMPALA_CHANNELS` = 16, 32, 32 channels), each a 3x3 convolution (stride 1, padding
    1), a 3x3 max-pool with stride 2 and padding 1, and two residual blocks; then ReLU, flatten, a linear
    layer to ``features_dim`` units and ReLU. A 64x64 frame becomes 32 x 8 x 8 = 2048 values before the
    linear layer, and the encoder has 622,144 parameters.

    It expects channels-first images (SB3 transposes ``HxWxC`` frames with ``VecTransposeImage``) already
    scaled to [0, 1] (SB3 divides ``uint8`` images by 255 when ``normalize_images=True``, its default).

    :param observation_space: a 3-D ``Box`` ``(channels, height, width)``, both sides at least 1.
    :param features_dim: units of the last linear layer (the paper's 256).
    :param channels: channels of the stacks (the paper's ``(16, 32, 32)``); one stack per entry.
    :param residual_skip: what each residual block adds to its convolutions' output (:data:`RESIDUAL_SKIPS`):
        ``"identity"`` (default) its input ``x``, as Espeholt et al. (2018) define the block and Baselines'
        IMPALA CNN computes it; ``"relu"`` ``ReLU(x)``, as the PLR paper's code (level-replay's
        ``BasicBlock``, whose in-place ReLU overwrites the input it adds back) computes it. Same
        parameters either way; ``--preset paper-procgen`` uses ``"relu"``.
    :raises TypeError: ``observation_space`` is not a ``Box``.
    :raises ValueError: it is not 3-D, looks channels-last (SB3 did not transpose it), ``features_dim``
        or ``channels`` are not positive ints, or ``residual_skip`` is not one of :data:`RESIDUAL_SKIPS`.

    Example:
        >>> import numpy as np, torch
        >>> from gymnasium import spaces
        >>> encoder = ImpalaCNN(spaces.Box(0, 255, (3, 64, 64), np.uint8))
        >>> encoder(torch.zeros(5, 3, 64, 64)).shape
        torch.Size([5, 256])
        >>> ImpalaCNN(spaces.Box(0, 255, (3, 64, 64), np.uint8), residual_skip="relu").residual_skip
        'relu'
    """

    def __init__(
        self,
        observation_space: spaces.Box,
        features_dim: int = 256,
        channels: Sequence[int] = IMPALA_CHANNELS,
        residual_skip: str = "identity",
    ) -> None:
        if not isinstance(observation_space, spaces.Box):
            raise TypeError(
                f"observation_space must be a gymnasium Box, got {type(observation_space).__name__}"
            )
        shape = observation_space.shape
        if len(shape) != 3:
            raise ValueError(f"observation_space must be 3-D (channels, height, width), got shape {shape}")
        if shape[0] > shape[-1] and shape[-1] in (1, 3, 4):
            raise ValueError(
                f"observation_space {shape} looks channels-last; ImpalaCNN takes (channels, height, width) "
                "(SB3's VecTransposeImage transposes image observations for you)"
            )
        if isinstance(features_dim, bool) or not isinstance(features_dim, int) or features_dim < 1:
            raise ValueError(f"features_dim must be a positive int, got {features_dim!r}")
        chans = tuple(channels)
        if not chans or any(isinstance(c, bool) or not isinstance(c, int) or c < 1 for c in chans):
            raise ValueError(f"channels must be a non-empty sequence of positive ints, got {channels!r}")
        if not isinstance(residual_skip, str) or residual_skip not in RESIDUAL_SKIPS:
            raise ValueError(
                f"residual_skip must be one of {', '.join(RESIDUAL_SKIPS)}, got {residual_skip!r}"
            )
        super().__init__(observation_space, features_dim)
        self.residual_skip = residual_skip
        stacks = []
        in_channels = int(shape[0])
        for out_channels in chans:
            stacks.append(_ConvSequence(in_channels, out_channels, residual_skip))
            in_channels = out_channels
        self.stacks = nn.Sequential(*stacks)
        height, width = int(shape[1]), int(shape[2])
        for _ in chans:  # max-pool 3, stride 2, padding 1: ceil(n / 2)
            height, width = math.ceil(height / 2), math.ceil(width / 2)
        self.flat_dim = in_channels * height * width
        self.linear = nn.Linear(self.flat_dim, features_dim)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """The reference code's initialisation: Xavier-uniform convolutions with zero biases, and an
        orthogonal fully connected layer with ReLU's gain sqrt(2) and a zero bias."""
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.xavier_uniform_(module.weight)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
        nn.init.orthogonal_(self.linear.weight, gain=nn.init.calculate_gain("relu"))
        nn.init.zeros_(self.linear.bias)

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        x = self.stacks(observations)
        x = torch.relu(torch.flatten(x, start_dim=1))
        return torch.relu(self.linear(x))


class ImpalaCnnPolicy(ActorCriticCnnPolicy):
    """SB3's actor-critic ``CnnPolicy`` with the paper's encoder, heads and initialisation.

    Defaults: ``features_extractor_class=ImpalaCNN``, ``net_arch=[]`` (the logits and the value are one
    linear layer each on the shared 256 features, as in the reference code), and, after SB3's orthogonal
    initialisation, the encoder's own (:meth:`ImpalaCNN.reset_parameters`). Any ``CnnPolicy`` keyword can
    be passed (``policy_kwargs``); ``ortho_init=False`` keeps PyTorch's default initialisation everywhere.

    Example:
        >>> import numpy as np
        >>> from gymnasium import spaces
        >>> policy = ImpalaCnnPolicy(spaces.Box(0, 255, (3, 64, 64), np.uint8), spaces.Discrete(15),
        ...                          lr_schedule=lambda _: 5e-4)
        >>> count_parameters(policy.features_extractor), count_parameters(policy)
        (622144, 626256)
    """

    def __init__(
        self, observation_space: spaces.Space[Any], action_space: spaces.Space[Any], *args: Any, **kwargs: Any
    ) -> None:
        kwargs.setdefault("features_extractor_class", ImpalaCNN)
        kwargs.setdefault("net_arch", [])
        super().__init__(observation_space, action_space, *args, **kwargs)

    def _build(self, lr_schedule: Any) -> None:
        super()._build(lr_schedule)
        if self.ortho_init:
            for extractor in (
                self.features_extractor,
                self.pi_features_extractor,
                self.vf_features_extractor,
            ):
                if isinstance(extractor, ImpalaCNN):
                    extractor.reset_parameters()
