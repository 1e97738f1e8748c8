"""Quantizing a dense weight at load (``--weight-quant int4`` / ``int8`` for a safetensors checkpoint).

Both produce :class:`~anna_core.weights.gguf_blocks.AffineBlocks`, so they run through the same packed
kernel as GGUF weights (:class:`~anna_core.layers.quant_linear.QuantizedLinear`):

* ``int4``: groups of 128 along a row, asymmetric: ``a = (max - min) / 15``, ``b = min``, ``q =
  round((w - b) / a)`` in ``[0, 15]``; error at most ``a / 2`` per value.
* ``int8``: one scale per row (per output channel), symmetric: ``a = max|w| / 127``, ``q = round(w / a)``
  in ``[-127, 127]`` stored plus 128; error at most ``a / 2``. The per-row scale is repeated per group of
  32 (the kernel's smallest group), which changes nothing.
"""

from __future__ import annotations

import torch

from anna_core.weights.gguf_blocks import AffineBlocks

INT4_GROUP = 128


def quantize_int4(weight: torch.Tensor, group: int = INT4_GROUP) -> AffineBlocks:
    """``weight`` ``[N, K]`` (``K`` a multiple of ``group``) as asymmetric 4-bit codes per ``group`` columns.

    Raises:
        ValueError: ``K`` is not a multiple of ``group``.
    """
    n, k = weight.shape
    if k % group:
        raise ValueError(f"int4 quantization needs rows of a multiple of {group} values, got {k}")
    w = weight.detach().float().reshape(n, k // group, group)
    lo, hi = w.amin(dim=-1), w.amax(dim=-1)
    a = ((hi - lo) / 15).clamp_min(torch.finfo(torch.float32).tiny)
    q = torch.round((w - lo[..., None]) / a[..., None]).clamp_(0, 15).to(torch.uint8)
    return AffineBlocks(q.reshape(n, k), a, lo, group, 4, "int4")


def quantize_int8(weight: torch.Tensor) -> AffineBlocks:
    """``weight`` ``[N, K]`` (``K`` a multiple of 32) as symmetric 8-bit codes with one scale per row.

    Raises:
        ValueError: ``K`` is not a multiple of 32.
    """
    n, k = weight.shape
    if k % 32:
        raise ValueError(f"int8 quantization needs rows of a multiple of 32 values, got {k}")
    w = weight.detach().float()
    a = (w.abs().amax(dim=1) / 127).clamp_min(torch.finfo(torch.float32).tiny)  # [N]
    q = (torch.round(w / a[:, None]).clamp_(-127, 127) + 128).to(torch.uint8)
    a = a[:, None].expand(n, k // 32).contiguous()
    return AffineBlocks(q, a, -128 * a, 32, 8, "int8")


def quantize_dense(weight: torch.Tensor, mode: str) -> AffineBlocks:
    """:func:`quantize_int4` or :func:`quantize_int8` by ``mode`` (``"int4"`` / ``"int8"``).

    Raises:
        ValueError: another mode, or a row length the mode cannot group.
    """
    if mode == "int4":
        return quantize_int4(weight)
    if mode == "int8":
        return quantize_int8(weight)
    raise ValueError(f"unknown dense quantization {mode!r}; use int4 or int8")
