"""Fused RMSNorm (plain and zero-centred) and SiLU-gated RMSNorm in Triton.

Math (Zhang & Sennrich, "Root Mean Square Layer Normalization", 2019), per row of ``D`` values,
all in float32 and rounded once to x's dtype at the end, as in the torch reference
(:mod:`anna_core.kernels.reference.norms`)::

    rms_norm:        y = x * rsqrt(mean(x^2) + eps) * (1 + w if zero_centered else w)
    gated_rms_norm:  y = x * rsqrt(mean(x^2) + eps) * w * silu(z)

One program normalises ``BLOCK_M`` rows held in registers (``BLOCK_M * BLOCK_D <= 4096`` values),
so each element of x (and z) is read once and y written once.
"""

from __future__ import annotations

import torch

from anna_xpu_kernels._checks import require, require_float, require_same_device
from anna_xpu_kernels._triton import autotune, next_pow2, tl, triton

MAX_DIM = 16384
"""Largest row length ``D`` handled in registers; longer rows fall back to the torch reference."""

_WARPS = [triton.Config({}, num_warps=w) for w in (1, 2, 4, 8, 16)]


@autotune(_WARPS, fixed=triton.Config({}, num_warps=4), key=["BLOCK_D", "BLOCK_M"])
@triton.jit
def _rms_norm_kernel(
    x_ptr, z_ptr, w_ptr, y_ptr,
    n_rows, dim, stride_x, stride_z, stride_y, eps,
    ZERO_CENTERED: tl.constexpr, GATED: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_D)
    col_ok = cols < dim
    mask = (rows < n_rows)[:, None] & col_ok[None, :]
    rows64 = rows.to(tl.int64)[:, None]
    x = tl.load(x_ptr + rows64 * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=1) / dim + eps)  # [BLOCK_M]
    w = tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
    if ZERO_CENTERED:
        w = w + 1.0
    y = x * rstd[:, None] * w[None, :]
    if GATED:
        z = tl.load(z_ptr + rows64 * stride_z + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        y = y * (z * tl.sigmoid(z))
    tl.store(y_ptr + rows64 * stride_y + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)


def _rows(x: torch.Tensor) -> torch.Tensor:
    """``[..., D]`` -> ``[N, D]`` with unit stride along D (a view when possible)."""
    x2 = x.reshape(-1, x.shape[-1])
    return x2 if x2.stride(-1) == 1 else x2.contiguous()


def _launch(op: str, x: torch.Tensor, z: torch.Tensor | None, weight: torch.Tensor, eps: float,
            zero_centered: bool) -> torch.Tensor:
    require(x.dim() >= 1, op, "x must have at least one dimension")
    dim = x.shape[-1]
    require(weight.dim() == 1 and weight.shape[0] == dim, op, f"weight must be [D={dim}], got {tuple(weight.shape)}")
    require_float(op, x=x)
    require_same_device(op, x=x, z=z, weight=weight)
    x2 = _rows(x)
    z2 = _rows(z) if z is not None else x2
    y2 = torch.empty(x2.shape, dtype=x.dtype, device=x.device)
    n_rows = x2.shape[0]
    if n_rows and dim:
        block_d = next_pow2(dim)
        block_m = max(1, min(16, 4096 // block_d))
        grid = (triton.cdiv(n_rows, block_m),)
        _rms_norm_kernel[grid](
            x2, z2, weight.contiguous(), y2, n_rows, dim, x2.stride(0), z2.stride(0), y2.stride(0), float(eps),
            ZERO_CENTERED=bool(zero_centered), GATED=z is not None, BLOCK_M=block_m, BLOCK_D=block_d,
        )
    return y2.view(x.shape)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, zero_centered: bool) -> torch.Tensor:
    """Fused RMSNorm (signature of :func:`anna_core.kernels.reference.norms.rms_norm`).

    Args:
        x: ``[..., D]`` float32 / float16 / bfloat16; weight: ``[D]`` (any float dtype).
        eps: added to the mean square; zero_centered: use ``1 + weight``.

    Returns:
        ``[..., D]`` in x's dtype (float32 math).

    Raises:
        ValueError: weight is not ``[D]``, unsupported dtype, or tensors on different devices.
    """
    if x.shape[-1:] and x.shape[-1] > MAX_DIM:
        from anna_core.kernels.reference.norms import rms_norm as reference

        return reference(x, weight, eps, zero_centered)
    return _launch("rms_norm", x, None, weight, eps, zero_centered)


def gated_rms_norm(x: torch.Tensor, z: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Fused ``rms_norm(x) * weight * silu(z)`` (signature of the reference ``gated_rms_norm``).

    Args:
        x, z: ``[..., D]`` (z is the gate, any float dtype); weight: ``[D]``; eps: added to the mean square.

    Returns:
        ``[..., D]`` in x's dtype (float32 math).

    Raises:
        ValueError: weight is not ``[D]``, z's shape differs from x's, unsupported dtype.
    """
    require(z.shape == x.shape, "gated_rms_norm", f"z must match x's shape {tuple(x.shape)}, got {tuple(z.shape)}")
    if x.shape[-1:] and x.shape[-1] > MAX_DIM:
        from anna_core.kernels.reference.norms import gated_rms_norm as reference

        return reference(x, z, weight, eps)
    return _launch("gated_rms_norm", x, z, weight, eps, False)


def _attach_fused_qk() -> None:
    """Expose :func:`anna_xpu_kernels.qk_norm_rope.qk_norm_rope_cache` as ``rms_norm.qk_norm_rope_cache``:
    attention layers that find it on the rms_norm op the registry chose may run their q/k norms,
    rotary and cache write as one launch; the torch reference has no such attribute."""
    from anna_xpu_kernels.qk_norm_rope import qk_norm_rope_cache

    rms_norm.qk_norm_rope_cache = qk_norm_rope_cache


_attach_fused_qk()
