"""Small plain-PyTorch layers the Qwen3-TTS parts share (RMSNorm, layer scale, SwiGLU MLP).

They run outside Anna's kernel op table: the codec decoder and the code predictor are plain modules for now (the
talker, on the engine, uses ``anna_core.layers``). Math as the reference's ``Qwen3TTSRMSNorm`` /
``Qwen3TTSTokenizerV2DecoderRMSNorm``, ``...LayerScale`` and ``...Mlp`` (QwenLM/Qwen3-TTS).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``x / sqrt(mean(x^2) + eps) * weight`` over the last dim, in float32, returned in x's dtype."""
    xf = x.float()
    return (weight * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)).to(x.dtype)


def merge_weights(linears: list[nn.Linear]) -> torch.Tensor:
    """Concatenate the weights of bias-free ``linears`` (``[N_i, K]`` each) into one ``[sum N_i, K]`` tensor (for one
    fused matmul) and make each layer's weight a view of its rows: shared, not copied."""
    merged = torch.cat([lin.weight.detach() for lin in linears])
    start = 0
    for lin in linears:
        n = lin.weight.shape[0]
        lin.weight = nn.Parameter(merged[start:start + n], requires_grad=False)
        start += n
    return merged


class RMSNorm(nn.Module):
    """Parameters: weight ``[D]``."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, self.eps)


class LayerScale(nn.Module):
    """Parameters: scale ``[D]`` (per-channel factor on a residual branch)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale * x

    def residual(self, x: torch.Tensor, branch: torch.Tensor) -> torch.Tensor:
        """``x + scale * branch`` in one op (one pass over the activations instead of two)."""
        return torch.addcmul(x, self.scale, branch)


class SwiGLU(nn.Module):
    """``down(silu(gate(x)) * up(x))``; parameters gate_proj / up_proj ``[I, D]``, down_proj ``[D, I]``."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(dim, hidden, bias=False)
        self.up_proj = nn.Linear(dim, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
