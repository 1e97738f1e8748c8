"""Shared pieces of the quantized-weight kernel tests (``wq_gemv``, its split-K decode kernel, the MoE and act-order
variants) under Triton's interpreter."""

from __future__ import annotations

import torch


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    """The largest difference of ``a`` from ``b`` relative to ``b``'s largest magnitude (both taken in float32)."""
    return ((a.float() - b.float()).abs().max() / b.float().abs().max()).item()


def quantized_weight(n: int, k: int, scheme: str, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(qweight, scale, zero)`` of a seeded random ``[n, k]`` weight (standard normal x 0.1) quantized to ``scheme``
    (``anna_core.weights.gpu_quant.quantize``, float32 scales)."""
    from anna_core.weights.gpu_quant import quantize

    w = torch.randn(n, k, generator=torch.Generator().manual_seed(seed)) * 0.1
    q = quantize(w, scheme, torch.float32)
    return q.qweight, q.scale, q.zero
