"""The 12 Hz codec encoder's convolutions: Mimi's causal SEANet stack (waveform -> 25 Hz features).

Math after transformers' Mimi (``models/mimi/modeling_mimi.py``: ``MimiConv1d``, ``MimiResnetBlock``,
``MimiEncoder``), which the reference tokenizer's encoder is (QwenLM/Qwen3-TTS ``Qwen3TTSTokenizerV2Encoder``); SEANet
after Tagliasacchi et al. 2020. A causal convolution with kernel ``k`` (dilation included), stride ``s`` pads
``k - s`` samples on the left and, on the right, what completes the last stride: an input of ``L`` samples gives
``ceil(L / s)`` outputs and output ``t`` reads inputs up to ``t * s + s - 1``. Module and parameter names follow the
checkpoint's ``encoder.encoder.layers.<i>...`` (ELUs hold list slots, as there). Tensors are ``[B, C, T]``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from anna_audio.qwen3_tts.codec_encoder_config import CodecEncoderConfig


class PaddedConv1d(nn.Module):
    """A causal, strided convolution padded as the module docstring says, with zeros (``constant``) or copies of
    the edge samples (``replicate``).

    Parameters:
        conv.weight ``[C_out, C_in, kernel]``; conv.bias ``[C_out]`` (when ``bias``).
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, *, stride: int = 1, dilation: int = 1,
                 bias: bool = True, pad_mode: str = "constant") -> None:
        super().__init__()
        self.conv = nn.Conv1d(in_channels, out_channels, kernel_size, stride, dilation=dilation, bias=bias)
        self.stride = stride
        self.left = (kernel_size - 1) * dilation + 1 - stride
        self.pad_mode = pad_mode

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: ``[B, C_in, L]`` -> ``[B, C_out, ceil(L / stride)]``."""
        length = x.shape[-1]
        right = math.ceil(length / self.stride) * self.stride - length
        return self.conv(F.pad(x, (self.left, right), mode=self.pad_mode))


class ResidualUnit(nn.Module):
    """``shortcut(x) + conv2(elu(conv1(elu(x))))``: a dilated ``kernel`` convolution into ``dim // compress``
    channels, then a 1x1 one back (``block.1``, ``block.3``; ``block.0`` and ``block.2`` are the ELUs)."""

    def __init__(self, config: CodecEncoderConfig, dim: int, dilation: int) -> None:
        super().__init__()
        hidden = dim // config.compress
        self.block = nn.ModuleList([
            nn.ELU(), PaddedConv1d(dim, hidden, config.residual_kernel_size, dilation=dilation, pad_mode=config.pad_mode),
            nn.ELU(), PaddedConv1d(hidden, dim, 1, pad_mode=config.pad_mode)])
        self.shortcut = PaddedConv1d(dim, dim, 1, pad_mode=config.pad_mode) if config.use_conv_shortcut else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = x
        for layer in self.block:
            out = layer(out)
        return (x if self.shortcut is None else self.shortcut(x)) + out


class ConvEncoder(nn.Module):
    """Waveform ``[B, 1, N]`` -> features ``[B, hidden_size, ceil(N / prod(ratios))]``.

    Layers: a ``kernel_size`` convolution to ``num_filters`` channels; per stride ``r`` of ``ratios``: residual
    units, an ELU and a ``2 r``-kernel convolution of stride ``r`` doubling the channels; an ELU and a
    ``last_kernel_size`` convolution to ``hidden_size``.
    """

    def __init__(self, config: CodecEncoderConfig) -> None:
        super().__init__()
        pad = config.pad_mode
        layers: list[nn.Module] = [PaddedConv1d(1, config.num_filters, config.kernel_size, pad_mode=pad)]
        channels = config.num_filters
        for ratio in config.ratios:
            for j in range(config.num_residual_layers):
                layers.append(ResidualUnit(config, channels, config.dilation_growth_rate ** j))
            layers += [nn.ELU(), PaddedConv1d(channels, 2 * channels, 2 * ratio, stride=ratio, pad_mode=pad)]
            channels *= 2
        layers += [nn.ELU(), PaddedConv1d(channels, config.hidden_size, config.last_kernel_size, pad_mode=pad)]
        self.layers = nn.ModuleList(layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x
