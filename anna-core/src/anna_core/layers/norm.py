"""RMS normalisation over the last dimension, through the ``rms_norm`` kernel op."""

from __future__ import annotations

import torch
from torch import nn


class RMSNorm(nn.Module):
    """Root-mean-square norm (Zhang & Sennrich, 2019) with a learned per-channel scale.

    ``y = x / sqrt(mean(x^2) + eps) * w`` where ``w = 1 + weight`` when ``zero_centered``
    (Qwen3.5 / Gemma style: the stored weight is an offset from one) and ``w = weight`` otherwise.
    Math runs in float32 inside the op; the result has ``x``'s dtype.

    Args:
        dim: size ``D`` of the normalised (last) dimension.
        eps: added to the mean square.
        ops: the model's :class:`anna_core.kernels.OpTable`.
        zero_centered: store ``weight`` as an offset from one (initialised to zeros).

    Parameters:
        weight: ``[D]``.
    """

    def __init__(self, dim: int, eps: float, ops, zero_centered: bool = False):
        super().__init__()
        self.dim = dim
        self.eps = float(eps)
        self.zero_centered = zero_centered
        self.ops = ops
        self.weight = nn.Parameter(torch.zeros(dim) if zero_centered else torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: ``[..., D]`` -> ``[..., D]`` (same dtype)."""
        return self.ops.rms_norm(x, self.weight, self.eps, self.zero_centered)

    def extra_repr(self) -> str:
        return f"{self.dim}, eps={self.eps}, zero_centered={self.zero_centered}"
