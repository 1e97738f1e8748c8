"""Plain RMSNorm (and zero-centred), SiLU-gated RMSNorm and the residual add fused into RMSNorm, in Triton.

Math (Zhang & Sennrich, "Root Mean Square Layer Normalization", 2019), per row of ``D`` values,
all in float32 and rounded once to x's dtype at the end, as in the torch reference
(:mod:`anna_core.kernels.reference.norms`)::

    rms_norm:        y = x * rsqrt(mean(x^2) + eps) * (1 + w if zero_centered else w)
    gated_rms_norm:  y = x * rsqrt(mean(x^2) + eps) * w * silu(z)
    add_rms_norm:    r = round(x + residual);  y = rms_norm(r)   (returns y and r)

The sandwich-norm tails and norm pairs (``post_norm_residual``, ``dual_post_norm_residual``,
``rms_norm_pair``, ``post_norm_residual_norm_pair``) live in :mod:`anna_xpu_kernels.post_norms` and are
re-exported here. Row tiles as :mod:`anna_xpu_kernels.norm_tiles`: each element of x (and z) is read once
and y written once.
"""

from __future__ import annotations

import torch

from anna_xpu_kernels import pdl
from anna_xpu_kernels._checks import as_rows, require, require_float, require_same_device
from anna_xpu_kernels._triton import autotune, tl, triton
from anna_xpu_kernels.norm_tiles import (
    MAX_DIM,
    NORM_WARPS,
    load_rows,
    norm_weight,
    normalize_rows,
    row_block,
    row_tile,
    store_rows,
)
from anna_xpu_kernels.post_norms import (
    dual_post_norm_residual,
    post_norm_residual,
    post_norm_residual_norm_pair,
    rms_norm_pair,
)

__all__ = [
    "MAX_DIM", "add_rms_norm", "dual_post_norm_residual", "gated_rms_norm", "post_norm_residual",
    "post_norm_residual_norm_pair", "rms_norm", "rms_norm_pair",
]


@autotune(NORM_WARPS, fixed=triton.Config({}, num_warps=4), key=["BLOCK_D", "BLOCK_M"])
@triton.jit(do_not_specialize=['n_rows'])
def _rms_norm_kernel(
    x_ptr, z_ptr, w_ptr, y_ptr,
    n_rows, dim, stride_x, stride_z, z_heads, stride_zh, stride_y, eps,
    ZERO_CENTERED: tl.constexpr, GATED: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    pdl.launch_dependents(USE_PDL)
    rows64, cols, col_ok, mask = row_block(n_rows, dim, BLOCK_M, BLOCK_D)
    w = norm_weight(w_ptr, cols, col_ok, ZERO_CENTERED)
    pdl.wait(USE_PDL)
    x = load_rows(x_ptr, stride_x, rows64, cols, mask)
    y = normalize_rows(x, w, dim, eps)
    if GATED:  # gate row r sits at (r // z_heads) * stride_z + (r % z_heads) * stride_zh
        z_row = (rows64 // z_heads) * stride_z + (rows64 % z_heads) * stride_zh
        z = tl.load(z_ptr + z_row + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        y = y * (z * tl.sigmoid(z))
    store_rows(y_ptr, stride_y, rows64, cols, mask, y)


@autotune(NORM_WARPS, fixed=triton.Config({}, num_warps=4), key=["BLOCK_D", "BLOCK_M"])
@triton.jit(do_not_specialize=['n_rows'])
def _add_rms_norm_kernel(
    x_ptr, r_ptr, w_ptr, y_ptr, s_ptr,
    n_rows, dim, stride_x, stride_r, stride_y, stride_s, eps,
    ZERO_CENTERED: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr, USE_PDL: tl.constexpr,
):
    pdl.launch_dependents(USE_PDL)
    rows64, cols, col_ok, mask = row_block(n_rows, dim, BLOCK_M, BLOCK_D)
    w = norm_weight(w_ptr, cols, col_ok, ZERO_CENTERED)
    pdl.wait(USE_PDL)
    x = load_rows(x_ptr, stride_x, rows64, cols, mask)
    r = load_rows(r_ptr, stride_r, rows64, cols, mask)
    s = (x + r).to(s_ptr.dtype.element_ty)  # the residual stream, rounded as torch's x + residual
    store_rows(s_ptr, stride_s, rows64, cols, mask, s)
    s = s.to(tl.float32)
    y = normalize_rows(s, w, dim, eps)
    store_rows(y_ptr, stride_y, rows64, cols, mask, y)


def _gate_rows(z: torch.Tensor) -> tuple[torch.Tensor, int, int, int]:
    """The gate as ``(tensor, heads, outer stride, head stride)``: row ``r`` of the flattened ``[N, D]``
    gate sits at ``(r // heads) * outer + (r % heads) * head``. A ``[T, H, D]`` view with unit stride
    along D (Qwen3.5's ``z``: a column slice of the merged projection, whose rows cannot be flattened
    without a copy) is read in place; anything else goes through :func:`as_rows` (``heads = 1``)."""
    if z.dim() == 3 and z.stride(-1) == 1 and z.shape[1] > 0:
        return z, z.shape[1], z.stride(0), z.stride(1)
    z2 = as_rows(z)
    return z2, 1, z2.stride(0), 0


def _launch(op: str, x: torch.Tensor, z: torch.Tensor | None, weight: torch.Tensor, eps: float,
            zero_centered: bool) -> torch.Tensor:
    require(x.dim() >= 1, op, "x must have at least one dimension")
    dim = x.shape[-1]
    require(weight.dim() == 1 and weight.shape[0] == dim, op, f"weight must be [D={dim}], got {tuple(weight.shape)}")
    require_float(op, x=x)
    require_same_device(op, x=x, z=z, weight=weight)
    x2 = as_rows(x)
    z2, z_heads, stride_z, stride_zh = _gate_rows(z) if z is not None else (x2, 1, x2.stride(0), 0)
    y2 = torch.empty(x2.shape, dtype=x.dtype, device=x.device)
    n_rows = x2.shape[0]
    if n_rows and dim:
        block_m, block_d = row_tile(dim)
        grid = (triton.cdiv(n_rows, block_m),)
        _rms_norm_kernel[grid](
            x2, z2, weight.contiguous(), y2, n_rows, dim, x2.stride(0), stride_z, z_heads, stride_zh, y2.stride(0),
            float(eps),
            ZERO_CENTERED=bool(zero_centered), GATED=z is not None, BLOCK_M=block_m, BLOCK_D=block_d,
            **pdl.launch_options(y2),
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


def add_rms_norm(x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor, eps: float,
                 zero_centered: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Residual add fused into RMSNorm (signature of the reference ``add_rms_norm``), one launch.

    Args:
        x, residual: ``[..., D]`` float32 / float16 / bfloat16, one dtype; residual may be None
            (then this is :func:`rms_norm` and the residual returned is ``x``).
        weight: ``[D]``; eps: added to the mean square; zero_centered: use ``1 + weight``.

    Returns:
        ``(y, r)``: ``r = x + residual`` rounded to x's dtype, ``y = rms_norm(r)``; fresh tensors, the
        inputs are not written (so a captured graph and the reference agree on what a step changes).

    Raises:
        ValueError: weight is not ``[D]``, residual's shape or dtype differs from x's, unsupported
            dtype, or tensors on different devices.
    """
    op = "add_rms_norm"
    if residual is None:
        return rms_norm(x, weight, eps, zero_centered), x
    require(x.dim() >= 1, op, "x must have at least one dimension")
    require(residual.shape == x.shape, op, f"residual must match x's shape {tuple(x.shape)}, got {tuple(residual.shape)}")
    require(residual.dtype == x.dtype, op, f"residual must have x's dtype {x.dtype}, got {residual.dtype}")
    dim = x.shape[-1]
    require(weight.dim() == 1 and weight.shape[0] == dim, op, f"weight must be [D={dim}], got {tuple(weight.shape)}")
    if dim > MAX_DIM:
        from anna_core.kernels.reference.norms import add_rms_norm as reference

        return reference(x, residual, weight, eps, zero_centered)
    require_float(op, x=x)
    require_same_device(op, x=x, residual=residual, weight=weight)
    x2, r2 = as_rows(x), as_rows(residual)
    y2 = torch.empty(x2.shape, dtype=x.dtype, device=x.device)
    s2 = torch.empty(x2.shape, dtype=x.dtype, device=x.device)
    n_rows = x2.shape[0]
    if n_rows and dim:
        block_m, block_d = row_tile(dim)
        _add_rms_norm_kernel[(triton.cdiv(n_rows, block_m),)](
            x2, r2, weight.contiguous(), y2, s2, n_rows, dim, x2.stride(0), r2.stride(0), y2.stride(0),
            s2.stride(0), float(eps), ZERO_CENTERED=bool(zero_centered), BLOCK_M=block_m, BLOCK_D=block_d,
            **pdl.launch_options(y2),
        )
    return y2.view(x.shape), s2.view(x.shape)
