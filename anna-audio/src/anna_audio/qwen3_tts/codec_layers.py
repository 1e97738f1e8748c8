"""Causal convolution layers of the 12 Hz codec's decoder, each able to continue from a
:class:`~anna_audio.qwen3_tts.stream_state.ChunkContext`.

Math after the reference decoder (QwenLM/Qwen3-TTS ``qwen_tts/core/tokenizer_12hz/modeling_qwen3_tts_tokenizer_v2.py``:
``Qwen3TTSTokenizerV2CausalConvNet``, ``...CausalTransConvNet``, ``...ConvNeXtBlock``, ``SnakeBeta``,
``...DecoderDecoderResidualUnit``, ``...DecoderDecoderBlock``). Every layer is causal: output sample ``t`` reads
inputs up to ``t`` only, so a chunk that starts from the state the previous chunk left equals the same span of a
whole decode. Module and parameter names follow the checkpoint's (``conv.weight``, ``block.1.conv.weight``, ...).
All tensors are ``[B, C, T]`` (batch, channels, samples).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from anna_audio.qwen3_tts.stream_state import ChunkContext, ContextLayer


class CausalConv1d(ContextLayer):
    """Stride-1 convolution padded on the left by ``(kernel - 1) * dilation`` samples (zeros at the start of a
    stream, the previous chunk's last input samples after it).

    Parameters:
        conv.weight: ``[C_out, C_in / groups, kernel]``; conv.bias: ``[C_out]``.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, dilation: int = 1,
                 groups: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv1d(in_channels, out_channels, kernel_size, dilation=dilation, groups=groups)
        self.context = (kernel_size - 1) * dilation

    @property
    def context_shape(self) -> tuple[int, ...] | None:
        """``(C_in, context)``: the last input samples (None for a pointwise convolution)."""
        return (self.conv.in_channels, self.context) if self.context else None

    def forward(self, x: torch.Tensor, state: ChunkContext | None = None) -> torch.Tensor:
        """x: ``[B, C_in, T]`` -> ``[B, C_out, T]``."""
        if self.context == 0:
            return self.conv(x)
        past = state.get(self) if state is not None else x.new_zeros(x.shape[0], x.shape[1], self.context)
        padded = torch.cat((past, x), dim=-1)
        if state is not None:
            state.put(self, padded[..., padded.shape[-1] - self.context:])
        return self.conv(padded)


class CausalTransposedConv1d(ContextLayer):
    """Transposed convolution (kernel ``k``, stride ``s``) keeping ``s`` outputs per input sample: the reference
    trims the last ``k - s`` samples of the whole output, so output ``n`` sums inputs ``m`` with
    ``m * s <= n < m * s + k``. A chunk therefore needs the ``ceil((k - s) / s)`` input samples before it, which
    the state carries (zeros at the start).

    Parameters:
        conv.weight: ``[C_in, C_out, k]``; conv.bias: ``[C_out]``.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int) -> None:
        super().__init__()
        if kernel_size < stride:
            raise ValueError(f"kernel {kernel_size} shorter than stride {stride}")
        self.conv = nn.ConvTranspose1d(in_channels, out_channels, kernel_size, stride=stride)
        self.stride = stride
        self.context = math.ceil((kernel_size - stride) / stride)

    @property
    def context_shape(self) -> tuple[int, ...] | None:
        """``(C_in, context)``: the last input frames (None when the kernel equals the stride)."""
        return (self.conv.in_channels, self.context) if self.context else None

    def forward(self, x: torch.Tensor, state: ChunkContext | None = None) -> torch.Tensor:
        """x: ``[B, C_in, T]`` -> ``[B, C_out, T * stride]``."""
        steps = x.shape[-1]
        if self.context:
            past = state.get(self) if state is not None else x.new_zeros(x.shape[0], x.shape[1], self.context)
            x = torch.cat((past, x), dim=-1)
            if state is not None:
                state.put(self, x[..., x.shape[-1] - self.context:])
        y = self.conv(x)
        start = self.context * self.stride
        return y[..., start:start + steps * self.stride]


class SnakeBeta(nn.Module):
    """``x + sin(x * e^alpha)^2 / (e^beta + 1e-9)`` per channel (Snake with a separate magnitude; Ziyin et al.
    2020, as the reference's ``SnakeBeta``).

    Args:
        channels: C.
        snake: an accelerated ``snake_beta`` op (``(x, alpha, beta) -> y``, the op registry's kernel; one launch),
            or None: the torch expression (the op's reference, seven launches).

    Parameters:
        alpha, beta: ``[C]`` log-scale frequency and magnitude.
    """

    def __init__(self, channels: int, snake: Callable[..., torch.Tensor] | None = None) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.zeros(channels))
        self.beta = nn.Parameter(torch.zeros(channels))
        self.snake = snake

    def forward(self, x: torch.Tensor, state: ChunkContext | None = None) -> torch.Tensor:
        """x: ``[B, C, T]`` -> ``[B, C, T]`` (the add and the division in one op)."""
        if self.snake is not None:
            return self.snake(x, self.alpha, self.beta)
        alpha = torch.exp(self.alpha)[None, :, None]
        beta = torch.exp(self.beta)[None, :, None]
        return torch.addcdiv(x, torch.sin(x * alpha).pow(2), beta + 1e-9)


class ConvNeXtBlock(nn.Module):
    """Causal depthwise conv (kernel 7) -> LayerNorm -> Linear 4x -> GELU -> Linear -> per-channel ``gamma``,
    added to the input.

    Parameters:
        dwconv.conv.weight ``[C, 1, 7]``, dwconv.conv.bias; norm.weight / norm.bias ``[C]``; pwconv1 ``[4C, C]``;
        pwconv2 ``[C, 4C]``; gamma ``[C]``.
    """

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dwconv = CausalConv1d(dim, dim, 7, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor, state: ChunkContext | None = None) -> torch.Tensor:
        h = self.dwconv(x, state).transpose(1, 2)  # [B, T, C]
        h = self.pwconv2(F.gelu(self.pwconv1(self.norm(h))))
        return torch.addcmul(x, self.gamma[:, None], h.transpose(1, 2))  # x + gamma * h in one op


class ResidualUnit(nn.Module):
    """``x + conv2(snake(conv1(snake(x))))`` with a dilated kernel-7 ``conv1`` and a pointwise ``conv2``."""

    def __init__(self, dim: int, dilation: int, snake: Callable[..., torch.Tensor] | None = None) -> None:
        super().__init__()
        self.act1 = SnakeBeta(dim, snake)
        self.conv1 = CausalConv1d(dim, dim, 7, dilation=dilation)
        self.act2 = SnakeBeta(dim, snake)
        self.conv2 = CausalConv1d(dim, dim, 1)

    def forward(self, x: torch.Tensor, state: ChunkContext | None = None) -> torch.Tensor:
        h = self.conv1(self.act1(x), state)
        return x + self.conv2(self.act2(h), state)


class UpsampleBlock(nn.Module):
    """SnakeBeta, a transposed convolution (kernel ``2 r``, stride ``r``) halving the channels, then residual units
    of dilation 1, 3 and 9 (the checkpoint's ``decoder.decoder.<i>.block.<0..4>``)."""

    def __init__(self, in_dim: int, out_dim: int, rate: int, snake: Callable[..., torch.Tensor] | None = None) -> None:
        super().__init__()
        self.block = nn.ModuleList([SnakeBeta(in_dim, snake), CausalTransposedConv1d(in_dim, out_dim, 2 * rate, rate),
                                    *(ResidualUnit(out_dim, d, snake) for d in (1, 3, 9))])

    def forward(self, x: torch.Tensor, state: ChunkContext | None = None) -> torch.Tensor:
        for layer in self.block:
            x = layer(x, state)
        return x
