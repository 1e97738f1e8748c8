"""The small op next to a decode projection fused into the GEMV: one launch instead of two.

``add_rms_norm_linear`` (residual add + RMSNorm + input projection) and ``silu_mul_linear`` (SwiGLU
product + ``down_proj``) run the decode GEMV (:mod:`anna_xpu_kernels.gemv`) with a prologue
(:mod:`anna_xpu_kernels.gemv_prologue`) that computes each activation tile from the raw inputs;
``linear_silu_mul`` (merged gate/up projection + SwiGLU product) runs it with the ``SILU_MUL_OUT``
epilogue. All keep the roundings of the unfused references
(:mod:`anna_core.kernels.reference.fused_linear`). Split-K, the tensor-core path and autotuning (keyed
on the prologue and epilogue modes too) work as for the plain GEMV.

The epilogue does no extra memory work, unlike the prologues: the program that finishes a block of
columns computes the product on values it already holds. Timed alone (H200, cold L2, M = 1,
BENCHMARKS.md) the fused launch was within 1 µs of GEMV + ``silu_and_mul`` (0.2 µs faster at 0.8B,
0.4 / 1.1 µs slower at 2B / 9B); in the graph-replayed decode step, one launch fewer per layer
measured 674 -> 691 tok/s at 2B on one machine (a single A/B within the ±2% run-to-run spread).
``linear_silu_mul`` fuses wherever the GEMV takes the shapes, with or without programmatic dependent
launch.

Outside the GEMV's domain (more than 8 rows, a weight that is not a contiguous ``[N, K]`` of x's
dtype), beyond the widths where fusing measured faster (:data:`MAX_K`, :data:`SILU_MAX_K`) or when the
kernels launch with programmatic dependent launch (:func:`prologue_pays`) both run unfused: the Triton
``add_rms_norm`` / ``silu_and_mul`` kernel, then :func:`anna_xpu_kernels.gemv.linear` (``F.linear``
beyond 8 rows).
"""

from __future__ import annotations

import torch
from anna_core.kernels.checks import require
from anna_core.kernels.reference.fused_linear import (
    check_add_rms_norm_linear,
    check_linear_silu_mul,
    check_silu_mul_linear,
)

from anna_xpu_kernels import activations, gemv, norms, pdl
from anna_xpu_kernels._checks import as_rows, require_float, require_same_device
from anna_xpu_kernels.gemv_prologue import ADD_RMS_NORM, RMS_NORM, SILU_MUL

MAX_K = 1024
"""Longest row the norm prologue takes: every program re-reads its rows (``M * K`` values, from L2)
to get their mean square, a cost that grows with K. On an H200 (2026-11-30 microbenchmark, M=1,
BENCHMARKS.md) the fusion saved 0.1–0.5 us per projection at K=1024 and lost 1–5 us at K=2048 and
4096 (a separate add_rms_norm launch costs less than that re-reading)."""
SILU_MAX_K = 8192
"""Longest SwiGLU half the SiLU-mul prologue takes (same measurement: +0.3 us at K=3584, +0.5 us at
6144, -1.2 us at 12288)."""


def prologue_pays(x: torch.Tensor, k: int, max_k: int) -> bool:
    """Whether fusing a prologue of width ``k`` into the GEMV on x's device is expected to be faster:
    ``k <= max_k`` and the kernels launch without programmatic dependent launch (:mod:`anna_xpu_kernels.pdl`).

    With PDL the separate small kernel starts while the previous projection finishes and the GEMV after
    it prefetches its first weight tile meanwhile, whereas the fused prologue's row pass waits for the
    previous kernel in every program: on an H200 (2026-11-30, M=1, BENCHMARKS.md) the fused launches
    were 1.8 us slower per projection at 0.8B (K=1024) and within +-0.4 us at 2B and 9B.
    """
    return k <= max_k and not pdl.enabled(x)


def add_rms_norm_linear(x: torch.Tensor, residual: torch.Tensor | None, norm_weight: torch.Tensor, eps: float,
                        zero_centered: bool, weight: torch.Tensor, config: gemv.GemvConfig | None = None,
                        fuse: bool | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Residual add + RMSNorm + bias-free linear (signature of the reference ``add_rms_norm_linear``).

    Args:
        x: ``[M, K]`` (or ``[..., K]``) float32 / float16 / bfloat16; residual: x's shape and dtype, or
            None; norm_weight: ``[K]`` (any float dtype); eps: added to the mean square;
            zero_centered: scale by ``1 + norm_weight``; weight: ``[N, K]`` of x's dtype.
        config: run this GEMV configuration instead of the autotuned one (tests).
        fuse: None fuses where :func:`prologue_pays` (``MAX_K``); True wherever the GEMV takes the
            shapes (microbenchmarks); False never.

    Returns:
        ``(y, new_residual)``: ``y`` ``[..., N]`` and ``new_residual = round(x + residual)`` ``[..., K]``
        (``x`` itself when residual is None), both in x's dtype; the inputs are not written.

    Raises:
        ValueError: shapes or dtypes disagree, unsupported dtype, or tensors on different devices.
    """
    op = "add_rms_norm_linear"
    check_add_rms_norm_linear(x, residual, norm_weight, weight)
    require_float(op, x=x)
    require_same_device(op, x=x, residual=residual, norm_weight=norm_weight, weight=weight)
    k = weight.shape[1]
    if not (gemv.supports(x, weight) and (prologue_pays(x, k, MAX_K) if fuse is None else fuse)):
        h, new_residual = norms.add_rms_norm(x, residual, norm_weight, eps, zero_centered)
        return gemv.linear(h, weight, None), new_residual
    x2 = as_rows(x)
    if residual is None:
        prologue = gemv.Prologue(RMS_NORM, norm_weight=norm_weight.contiguous(), eps=eps, zero_centered=zero_centered)
        new_residual = x
    else:
        new2 = torch.empty(x2.shape, dtype=x.dtype, device=x.device)
        prologue = gemv.Prologue(ADD_RMS_NORM, as_rows(residual), norm_weight.contiguous(), new2, eps, zero_centered)
        new_residual = new2.view(x.shape)
    y = gemv.launch(x2, weight, None, config, prologue)
    return y.view(*x.shape[:-1], weight.shape[0]), new_residual


def silu_mul_linear(x: torch.Tensor, weight: torch.Tensor, config: gemv.GemvConfig | None = None,
                    fuse: bool | None = None) -> torch.Tensor:
    """SwiGLU product + bias-free linear (signature of the reference ``silu_mul_linear``).

    Args:
        x: ``[M, 2K]`` (or ``[..., 2K]``) float32 / float16 / bfloat16: gate values, then up values.
        weight: ``[N, K]`` of x's dtype.
        config: run this GEMV configuration instead of the autotuned one (tests).
        fuse: None fuses where :func:`prologue_pays` (``SILU_MAX_K``); True wherever the GEMV takes the
            shapes (microbenchmarks); False never.

    Returns:
        ``[..., N]`` in x's dtype: ``silu_and_mul(x) @ weight^T`` (the product rounded to x's dtype first).

    Raises:
        ValueError: shapes or dtypes disagree, unsupported dtype, or tensors on different devices.
    """
    op = "silu_mul_linear"
    check_silu_mul_linear(x, weight)
    require_float(op, x=x)
    require_same_device(op, x=x, weight=weight)
    k = weight.shape[1]
    if not (gemv.supports(x, weight) and (prologue_pays(x, k, SILU_MAX_K) if fuse is None else fuse)):
        return gemv.linear(activations.silu_and_mul(x), weight, None)
    y = gemv.launch(as_rows(x), weight, None, config, gemv.Prologue(SILU_MUL))
    return y.view(*x.shape[:-1], weight.shape[0])


def linear_silu_mul(x: torch.Tensor, weight: torch.Tensor, config: gemv.GemvConfig | None = None) -> torch.Tensor:
    """Merged gate/up projection + SwiGLU product (signature of the reference ``linear_silu_mul``).

    Args:
        x: ``[M, K]`` (or ``[..., K]``) float32 / float16 / bfloat16.
        weight: ``[2I, K]`` of x's dtype: gate rows, then up rows.
        config: run this GEMV configuration instead of the autotuned one (tests).

    Returns:
        ``[..., I]`` in x's dtype: ``silu_and_mul(x @ weight^T)``, the projection rounded to x's dtype
        first. One GEMV launch with the ``SILU_MUL_OUT`` epilogue for 1..8 rows; beyond the GEMV's
        domain, ``F.linear`` then the Triton ``silu_and_mul`` kernel.

    Raises:
        ValueError: shapes or dtypes disagree, unsupported dtype, tensors on different devices, or a
            forced ``config`` with ``block_n < 2``.
    """
    op = "linear_silu_mul"
    check_linear_silu_mul(x, weight)
    require_float(op, x=x)
    require_same_device(op, x=x, weight=weight)
    require(config is None or config.block_n >= 2, op,
            f"the SwiGLU epilogue needs block_n >= 2 (a gate and an up row), got {config}")
    if weight.shape[0] == 0 or x.numel() == 0:  # no output column, or no row
        return x.new_empty(*x.shape[:-1], weight.shape[0] // 2)
    if not gemv.supports(x, weight):
        return activations.silu_and_mul(gemv.linear(x, weight, None))
    y = gemv.launch(as_rows(x), weight, None, config, gemv.Prologue(), gemv.SILU_MUL_OUT)
    return y.view(*x.shape[:-1], weight.shape[0] // 2)
