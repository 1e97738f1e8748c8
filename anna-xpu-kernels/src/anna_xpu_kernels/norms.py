"""Fused RMSNorm (plain and zero-centred) and SiLU-gated RMSNorm in Triton.

Math (Zhang & Sennrich, "Root Mean Square Layer Normalization", 2019), per row of ``D`` values,
all in float32 and rounded once to x's dtype at the end, as in the torch reference
(:mod:`anna_core.kernels.reference.norms`)::

    rms_norm:        y = x * rsqrt(mean(x^2) + eps) * (1 + w if zero_centered else w)
    gated_rms_norm:  y = x * rsqrt(mean(x^2) + eps) * w * silu(z)
    add_rms_norm:    r = round(x + residual);  y = rms_norm(r)   (returns y and r)
    post_norm_residual: r = round(residual + round(rms_norm(x, w)));  r = round(r * scale);
                     y = rms_norm(r, next_w)   (a sandwich-normed block's tail and the next input norm)
    dual_post_norm_residual: post_norm_residual of round(round(rms_norm(x1, w1)) + round(rms_norm(x2, w2)))
                     (Gemma 4's MoE layer tail: the dense MLP's and the experts' outputs)
    rms_norm_pair:   y = rms_norm(x, w);  s = round(round(round(x * rstd) * scale_w) * factor)
                     (Gemma 4's experts' input norm and router input, one read of x)
    post_norm_residual_norm_pair: post_norm_residual (no scale), then rms_norm_pair of the new residual
                     (Gemma 4's MoE layer after attention: one reduction for its three norms)

One program normalises ``BLOCK_M`` rows held in registers (``BLOCK_M * BLOCK_D <= 4096`` values),
so each element of x (and z) is read once and y written once.
"""

from __future__ import annotations

import torch

from anna_xpu_kernels import pdl
from anna_xpu_kernels._checks import as_rows, require, require_float, require_same_device
from anna_xpu_kernels._triton import autotune, next_pow2, tl, triton

MAX_DIM = 16384
"""Largest row length ``D`` handled in registers; longer rows fall back to the torch reference."""

_WARPS = [triton.Config({}, num_warps=w) for w in (1, 2, 4, 8, 16)]


@triton.jit
def _row_block(n_rows, dim, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr):
    """This program's ``BLOCK_M`` rows: int64 row indices ``[BLOCK_M, 1]``, columns ``[BLOCK_D]``, the
    column mask and the ``[BLOCK_M, BLOCK_D]`` tile mask."""
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_D)
    col_ok = cols < dim
    return rows.to(tl.int64)[:, None], cols, col_ok, (rows < n_rows)[:, None] & col_ok[None, :]


@triton.jit
def _weight(w_ptr, cols, col_ok, ZERO_CENTERED: tl.constexpr):
    """A norm's float32 weight ``[BLOCK_D]`` (``1 + weight`` if zero-centred). The kernels load their weights
    before :func:`anna_xpu_kernels.pdl.wait` (weights are not written during the forward pass), so no weight
    load sits between a reduction and the next in the chain after the previous kernel ends. Weights load
    with ``evict_last`` (kept in L1/L2 for the next step; and the one load kind allowed before the wait:
    :func:`anna_xpu_kernels.compile_check.check_pdl_order`)."""
    w = tl.load(w_ptr + cols, mask=col_ok, other=0.0, eviction_policy="evict_last").to(tl.float32)
    if ZERO_CENTERED:
        w = w + 1.0
    return w


@triton.jit
def _normalize(x, w, dim, eps):
    """float32 ``x * rstd * w`` of the ``[BLOCK_M, BLOCK_D]`` tile ``x`` and the loaded weight ``w`` ``[BLOCK_D]``."""
    rstd = tl.rsqrt(tl.sum(x * x, axis=1) / dim + eps)  # [BLOCK_M]
    return x * rstd[:, None] * w[None, :]


@autotune(_WARPS, fixed=triton.Config({}, num_warps=4), key=["BLOCK_D", "BLOCK_M"])
@triton.jit(do_not_specialize=['n_rows'])
def _rms_norm_kernel(
    x_ptr, z_ptr, w_ptr, y_ptr,
    n_rows, dim, stride_x, stride_z, z_heads, stride_zh, stride_y, eps,
    ZERO_CENTERED: tl.constexpr, GATED: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    pdl.launch_dependents(USE_PDL)
    rows64, cols, col_ok, mask = _row_block(n_rows, dim, BLOCK_M, BLOCK_D)
    w = _weight(w_ptr, cols, col_ok, ZERO_CENTERED)
    pdl.wait(USE_PDL)
    x = tl.load(x_ptr + rows64 * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    y = _normalize(x, w, dim, eps)
    if GATED:  # gate row r sits at (r // z_heads) * stride_z + (r % z_heads) * stride_zh
        z_row = (rows64 // z_heads) * stride_z + (rows64 % z_heads) * stride_zh
        z = tl.load(z_ptr + z_row + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        y = y * (z * tl.sigmoid(z))
    tl.store(y_ptr + rows64 * stride_y + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)


@autotune(_WARPS, fixed=triton.Config({}, num_warps=4), key=["BLOCK_D", "BLOCK_M"])
@triton.jit(do_not_specialize=['n_rows'])
def _add_rms_norm_kernel(
    x_ptr, r_ptr, w_ptr, y_ptr, s_ptr,
    n_rows, dim, stride_x, stride_r, stride_y, stride_s, eps,
    ZERO_CENTERED: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr, USE_PDL: tl.constexpr,
):
    pdl.launch_dependents(USE_PDL)
    rows64, cols, col_ok, mask = _row_block(n_rows, dim, BLOCK_M, BLOCK_D)
    w = _weight(w_ptr, cols, col_ok, ZERO_CENTERED)
    pdl.wait(USE_PDL)
    x = tl.load(x_ptr + rows64 * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    r = tl.load(r_ptr + rows64 * stride_r + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    s = (x + r).to(s_ptr.dtype.element_ty)  # the residual stream, rounded as torch's x + residual
    tl.store(s_ptr + rows64 * stride_s + cols[None, :], s, mask=mask)
    s = s.to(tl.float32)
    y = _normalize(s, w, dim, eps)
    tl.store(y_ptr + rows64 * stride_y + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _post_weights(w_ptr, scale_ptr, nw_ptr, cols, col_ok, ZERO_CENTERED: tl.constexpr, HAS_SCALE: tl.constexpr,
                  HAS_NEXT: tl.constexpr):
    """The weights of :func:`_post_tail`: ``(w, scale, next_w)`` (scale 1.0 without ``HAS_SCALE``, next_w
    w without ``HAS_NEXT``)."""
    w = _weight(w_ptr, cols, col_ok, ZERO_CENTERED)
    scale = tl.load(scale_ptr, eviction_policy="evict_last").to(tl.float32) if HAS_SCALE else 1.0
    nw = _weight(nw_ptr, cols, col_ok, ZERO_CENTERED) if HAS_NEXT else w
    return w, scale, nw


@triton.jit
def _post_tail(x, r, w, scale, nw, y_ptr, s_ptr, rows64, cols, mask, dim, stride_y, stride_s, eps,
               HAS_SCALE: tl.constexpr, HAS_NEXT: tl.constexpr):
    """``post_norm_residual`` of the float32 tiles ``x`` (the block output) and ``r`` (the stream) with the
    loaded weights of :func:`_post_weights`: stores ``s = round(round(r + round(norm(x, w))) * scale)`` and,
    with ``HAS_NEXT``, ``y = norm(s, next_w)``."""
    ty = s_ptr.dtype.element_ty
    normed = _normalize(x, w, dim, eps).to(ty).to(tl.float32)
    s = (r + normed).to(ty)  # the residual stream, rounded as torch's residual + norm(x)
    if HAS_SCALE:
        s = (s.to(tl.float32) * scale).to(ty)
    tl.store(s_ptr + rows64 * stride_s + cols[None, :], s, mask=mask)
    if HAS_NEXT:
        y = _normalize(s.to(tl.float32), nw, dim, eps)
        tl.store(y_ptr + rows64 * stride_y + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)


@autotune(_WARPS, fixed=triton.Config({}, num_warps=4), key=["BLOCK_D", "BLOCK_M"])
@triton.jit(do_not_specialize=['n_rows'])
def _post_norm_residual_kernel(
    x_ptr, r_ptr, w_ptr, scale_ptr, nw_ptr, y_ptr, s_ptr,
    n_rows, dim, stride_x, stride_r, stride_y, stride_s, eps,
    ZERO_CENTERED: tl.constexpr, HAS_SCALE: tl.constexpr, HAS_NEXT: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_D: tl.constexpr, USE_PDL: tl.constexpr,
):
    pdl.launch_dependents(USE_PDL)
    rows64, cols, col_ok, mask = _row_block(n_rows, dim, BLOCK_M, BLOCK_D)
    w, scale, nw = _post_weights(w_ptr, scale_ptr, nw_ptr, cols, col_ok, ZERO_CENTERED, HAS_SCALE, HAS_NEXT)
    pdl.wait(USE_PDL)
    x = tl.load(x_ptr + rows64 * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    r = tl.load(r_ptr + rows64 * stride_r + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    _post_tail(x, r, w, scale, nw, y_ptr, s_ptr, rows64, cols, mask, dim, stride_y, stride_s, eps, HAS_SCALE, HAS_NEXT)


@autotune(_WARPS, fixed=triton.Config({}, num_warps=4), key=["BLOCK_D", "BLOCK_M"])
@triton.jit(do_not_specialize=['n_rows'])
def _dual_post_norm_residual_kernel(
    x_ptr, x2_ptr, w1_ptr, w2_ptr, r_ptr, w_ptr, scale_ptr, nw_ptr, y_ptr, s_ptr,
    n_rows, dim, stride_x, stride_x2, stride_r, stride_y, stride_s, eps,
    ZERO_CENTERED: tl.constexpr, HAS_SCALE: tl.constexpr, HAS_NEXT: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_D: tl.constexpr, USE_PDL: tl.constexpr,
):
    pdl.launch_dependents(USE_PDL)
    rows64, cols, col_ok, mask = _row_block(n_rows, dim, BLOCK_M, BLOCK_D)
    ty = s_ptr.dtype.element_ty
    w1 = _weight(w1_ptr, cols, col_ok, ZERO_CENTERED)
    w2 = _weight(w2_ptr, cols, col_ok, ZERO_CENTERED)
    w, scale, nw = _post_weights(w_ptr, scale_ptr, nw_ptr, cols, col_ok, ZERO_CENTERED, HAS_SCALE, HAS_NEXT)
    pdl.wait(USE_PDL)
    x1 = tl.load(x_ptr + rows64 * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(x2_ptr + rows64 * stride_x2 + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    r = tl.load(r_ptr + rows64 * stride_r + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    a = _normalize(x1, w1, dim, eps).to(ty).to(tl.float32)
    b = _normalize(x2, w2, dim, eps).to(ty).to(tl.float32)
    x = (a + b).to(ty).to(tl.float32)  # rounded as torch's norm_1(x1) + norm_2(x2)
    _post_tail(x, r, w, scale, nw, y_ptr, s_ptr, rows64, cols, mask, dim, stride_y, stride_s, eps, HAS_SCALE, HAS_NEXT)


@autotune(_WARPS, fixed=triton.Config({}, num_warps=4), key=["BLOCK_D", "BLOCK_M"])
@triton.jit(do_not_specialize=['n_rows'])
def _rms_norm_pair_kernel(
    x_ptr, w_ptr, sw_ptr, y_ptr, s_ptr,
    n_rows, dim, stride_x, stride_y, stride_s, eps, factor,
    ZERO_CENTERED: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr, USE_PDL: tl.constexpr,
):
    pdl.launch_dependents(USE_PDL)
    rows64, cols, col_ok, mask = _row_block(n_rows, dim, BLOCK_M, BLOCK_D)
    ty = s_ptr.dtype.element_ty
    w = _weight(w_ptr, cols, col_ok, ZERO_CENTERED)
    sw = tl.load(sw_ptr + cols, mask=col_ok, other=0.0, eviction_policy="evict_last").to(tl.float32)
    pdl.wait(USE_PDL)
    x = tl.load(x_ptr + rows64 * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    normed = x * tl.rsqrt(tl.sum(x * x, axis=1) / dim + eps)[:, None]
    tl.store(y_ptr + rows64 * stride_y + cols[None, :], (normed * w[None, :]).to(y_ptr.dtype.element_ty), mask=mask)
    s = (normed.to(ty).to(tl.float32) * sw[None, :]).to(ty).to(tl.float32)  # torch's norm(x) * scale_weight
    tl.store(s_ptr + rows64 * stride_s + cols[None, :], (s * factor).to(ty), mask=mask)


@autotune(_WARPS, fixed=triton.Config({}, num_warps=4), key=["BLOCK_D", "BLOCK_M"])
@triton.jit(do_not_specialize=['n_rows'])
def _post_norm_residual_norm_pair_kernel(
    x_ptr, r_ptr, w_ptr, nw_ptr, pw_ptr, sw_ptr, y_ptr, y2_ptr, o_ptr, s_ptr,
    n_rows, dim, stride_x, stride_r, stride_y, stride_y2, stride_o, stride_s, eps, factor,
    ZERO_CENTERED: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr, USE_PDL: tl.constexpr,
):
    pdl.launch_dependents(USE_PDL)
    rows64, cols, col_ok, mask = _row_block(n_rows, dim, BLOCK_M, BLOCK_D)
    ty = s_ptr.dtype.element_ty
    w = _weight(w_ptr, cols, col_ok, ZERO_CENTERED)
    nw = _weight(nw_ptr, cols, col_ok, ZERO_CENTERED)
    pw = _weight(pw_ptr, cols, col_ok, ZERO_CENTERED)
    sw = tl.load(sw_ptr + cols, mask=col_ok, other=0.0, eviction_policy="evict_last").to(tl.float32)
    pdl.wait(USE_PDL)
    x = tl.load(x_ptr + rows64 * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    r = tl.load(r_ptr + rows64 * stride_r + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    normed = _normalize(x, w, dim, eps).to(ty).to(tl.float32)
    s = (r + normed).to(ty)  # the residual stream, rounded as torch's residual + norm(x)
    tl.store(s_ptr + rows64 * stride_s + cols[None, :], s, mask=mask)
    s = s.to(tl.float32)
    hat = s * tl.rsqrt(tl.sum(s * s, axis=1) / dim + eps)[:, None]  # one reduction serves the three norms
    tl.store(y_ptr + rows64 * stride_y + cols[None, :], (hat * nw[None, :]).to(y_ptr.dtype.element_ty), mask=mask)
    tl.store(y2_ptr + rows64 * stride_y2 + cols[None, :], (hat * pw[None, :]).to(y2_ptr.dtype.element_ty), mask=mask)
    o = (hat.to(ty).to(tl.float32) * sw[None, :]).to(ty).to(tl.float32)  # torch's norm(r) * scale_weight
    tl.store(o_ptr + rows64 * stride_o + cols[None, :], (o * factor).to(ty), mask=mask)


def _row_tile(dim: int) -> tuple[int, int]:
    """``(BLOCK_M, BLOCK_D)``: whole rows of ``dim`` values, ``BLOCK_M * BLOCK_D <= 4096``."""
    block_d = next_pow2(dim)
    return max(1, min(16, 4096 // block_d)), block_d


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
        block_d = next_pow2(dim)
        block_m = max(1, min(16, 4096 // block_d))
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
        block_m, block_d = _row_tile(dim)
        _add_rms_norm_kernel[(triton.cdiv(n_rows, block_m),)](
            x2, r2, weight.contiguous(), y2, s2, n_rows, dim, x2.stride(0), r2.stride(0), y2.stride(0),
            s2.stride(0), float(eps), ZERO_CENTERED=bool(zero_centered), BLOCK_M=block_m, BLOCK_D=block_d,
            **pdl.launch_options(y2),
        )
    return y2.view(x.shape), s2.view(x.shape)



def post_norm_residual(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float,
                       zero_centered: bool, scale: torch.Tensor | None,
                       next_weight: torch.Tensor | None) -> tuple[torch.Tensor | None, torch.Tensor]:
    """A sandwich-normed block's tail in one launch (signature of the reference ``post_norm_residual``):
    ``r = residual + rms_norm(x, weight)``, ``r = r * scale`` (if given), ``y = rms_norm(r, next_weight)``
    (if given).

    Args:
        x, residual: ``[..., D]`` float32 / float16 / bfloat16, one dtype; weight, next_weight: ``[D]``
            (next_weight may be None); eps, zero_centered: both norms'; scale: one-element tensor or None.

    Returns:
        ``(y, r)`` in x's dtype (``y`` None without next_weight); fresh tensors.

    Raises:
        ValueError: a weight is not ``[D]``, residual's shape or dtype differs from x's, scale is not one
            element of x's dtype, unsupported dtype, or tensors on different devices.
    """
    op = "post_norm_residual"
    require(x.dim() >= 1, op, "x must have at least one dimension")
    require(residual.shape == x.shape and residual.dtype == x.dtype, op,
            f"residual must match x's shape {tuple(x.shape)} and dtype {x.dtype}")
    dim = x.shape[-1]
    require(weight is not None, op, "weight is required")
    for name, w in (("weight", weight), ("next_weight", next_weight)):
        require(w is None or (w.dim() == 1 and w.shape[0] == dim), op, f"{name} must be [D={dim}]")
    require(scale is None or (scale.numel() == 1 and scale.dtype == x.dtype), op,
            f"scale must hold one element of x's dtype {x.dtype}")
    if dim > MAX_DIM:
        from anna_core.kernels.reference.norms import post_norm_residual as reference

        return reference(x, residual, weight, eps, zero_centered, scale, next_weight)
    require_float(op, x=x)
    require_same_device(op, x=x, residual=residual, weight=weight, scale=scale, next_weight=next_weight)
    x2, r2 = as_rows(x), as_rows(residual)
    s2 = torch.empty(x2.shape, dtype=x.dtype, device=x.device)
    y2 = torch.empty(x2.shape, dtype=x.dtype, device=x.device) if next_weight is not None else s2
    n_rows = x2.shape[0]
    if n_rows and dim:
        block_m, block_d = _row_tile(dim)
        w = weight.contiguous()
        _post_norm_residual_kernel[(triton.cdiv(n_rows, block_m),)](
            x2, r2, w, w if scale is None else scale, w if next_weight is None else next_weight.contiguous(), y2, s2,
            n_rows, dim, x2.stride(0), r2.stride(0), y2.stride(0), s2.stride(0), float(eps),
            ZERO_CENTERED=bool(zero_centered), HAS_SCALE=scale is not None, HAS_NEXT=next_weight is not None,
            BLOCK_M=block_m, BLOCK_D=block_d, **pdl.launch_options(s2),
        )
    return (y2.view(x.shape) if next_weight is not None else None), s2.view(x.shape)


def dual_post_norm_residual(x1: torch.Tensor, weight_1: torch.Tensor, x2: torch.Tensor, weight_2: torch.Tensor,
                            residual: torch.Tensor, weight: torch.Tensor, eps: float, zero_centered: bool,
                            scale: torch.Tensor | None,
                            next_weight: torch.Tensor | None) -> tuple[torch.Tensor | None, torch.Tensor]:
    """Gemma 4's MoE layer tail in one launch (signature of the reference ``dual_post_norm_residual``):
    ``x = rms_norm(x1, weight_1) + rms_norm(x2, weight_2)``, then :func:`post_norm_residual` of x.

    Args:
        x1, x2, residual: ``[..., D]`` float32 / float16 / bfloat16, one dtype; weight_1, weight_2, weight,
            next_weight: ``[D]`` (next_weight may be None); eps, zero_centered: every norm's; scale: a
            one-element tensor of x1's dtype, or None.

    Returns:
        ``(y, r)`` in x1's dtype (``y`` None without next_weight); fresh tensors.

    Raises:
        ValueError: a weight is not ``[D]``, x2's or residual's shape or dtype differs from x1's, scale is
            not one element of x1's dtype, unsupported dtype, or tensors on different devices.
    """
    op = "dual_post_norm_residual"
    require(x1.dim() >= 1, op, "x1 must have at least one dimension")
    for name, t in (("x2", x2), ("residual", residual)):
        require(t.shape == x1.shape and t.dtype == x1.dtype, op,
                f"{name} must match x1's shape {tuple(x1.shape)} and dtype {x1.dtype}")
    dim = x1.shape[-1]
    for name, w in (("weight_1", weight_1), ("weight_2", weight_2), ("weight", weight), ("next_weight", next_weight)):
        require((w is None and name == "next_weight") or (w is not None and w.dim() == 1 and w.shape[0] == dim), op,
                f"{name} must be [D={dim}]")
    require(scale is None or (scale.numel() == 1 and scale.dtype == x1.dtype), op,
            f"scale must hold one element of x1's dtype {x1.dtype}")
    if dim > MAX_DIM:
        from anna_core.kernels.reference.norms import dual_post_norm_residual as reference

        return reference(x1, weight_1, x2, weight_2, residual, weight, eps, zero_centered, scale, next_weight)
    require_float(op, x1=x1)
    require_same_device(op, x1=x1, x2=x2, residual=residual, weight_1=weight_1, weight_2=weight_2, weight=weight,
                        scale=scale, next_weight=next_weight)
    a2, b2, r2 = as_rows(x1), as_rows(x2), as_rows(residual)
    s2 = torch.empty(a2.shape, dtype=x1.dtype, device=x1.device)
    y2 = torch.empty(a2.shape, dtype=x1.dtype, device=x1.device) if next_weight is not None else s2
    n_rows = a2.shape[0]
    if n_rows and dim:
        block_m, block_d = _row_tile(dim)
        w = weight.contiguous()
        _dual_post_norm_residual_kernel[(triton.cdiv(n_rows, block_m),)](
            a2, b2, weight_1.contiguous(), weight_2.contiguous(), r2, w, w if scale is None else scale,
            w if next_weight is None else next_weight.contiguous(), y2, s2,
            n_rows, dim, a2.stride(0), b2.stride(0), r2.stride(0), y2.stride(0), s2.stride(0), float(eps),
            ZERO_CENTERED=bool(zero_centered), HAS_SCALE=scale is not None, HAS_NEXT=next_weight is not None,
            BLOCK_M=block_m, BLOCK_D=block_d, **pdl.launch_options(s2),
        )
    return (y2.view(x1.shape) if next_weight is not None else None), s2.view(x1.shape)


def rms_norm_pair(x: torch.Tensor, weight: torch.Tensor, eps: float, zero_centered: bool,
                  scale_weight: torch.Tensor, factor: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Two norms of one read of x in one launch (signature of the reference ``rms_norm_pair``):
    ``y = rms_norm(x, weight)`` and ``s = round(round(round(norm(x)) * scale_weight) * factor)``.

    Args:
        x: ``[..., D]`` float32 / float16 / bfloat16; weight, scale_weight: ``[D]``; eps: both norms';
            zero_centered: y's weight; factor: a Python float.

    Returns:
        ``(y, s)`` in x's dtype; fresh tensors.

    Raises:
        ValueError: a weight is not ``[D]``, unsupported dtype, or tensors on different devices.
    """
    op = "rms_norm_pair"
    require(x.dim() >= 1, op, "x must have at least one dimension")
    dim = x.shape[-1]
    for name, w in (("weight", weight), ("scale_weight", scale_weight)):
        require(w.dim() == 1 and w.shape[0] == dim, op, f"{name} must be [D={dim}], got {tuple(w.shape)}")
    if dim > MAX_DIM:
        from anna_core.kernels.reference.norms import rms_norm_pair as reference

        return reference(x, weight, eps, zero_centered, scale_weight, factor)
    require_float(op, x=x)
    require_same_device(op, x=x, weight=weight, scale_weight=scale_weight)
    x2 = as_rows(x)
    y2 = torch.empty(x2.shape, dtype=x.dtype, device=x.device)
    s2 = torch.empty(x2.shape, dtype=x.dtype, device=x.device)
    n_rows = x2.shape[0]
    if n_rows and dim:
        block_m, block_d = _row_tile(dim)
        _rms_norm_pair_kernel[(triton.cdiv(n_rows, block_m),)](
            x2, weight.contiguous(), scale_weight.contiguous(), y2, s2, n_rows, dim, x2.stride(0), y2.stride(0),
            s2.stride(0), float(eps), float(factor), ZERO_CENTERED=bool(zero_centered), BLOCK_M=block_m,
            BLOCK_D=block_d, **pdl.launch_options(y2),
        )
    return y2.view(x.shape), s2.view(x.shape)


def post_norm_residual_norm_pair(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float,
                                 zero_centered: bool, next_weight: torch.Tensor, pair_weight: torch.Tensor,
                                 scale_weight: torch.Tensor,
                                 factor: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`post_norm_residual` (no scale) and :func:`rms_norm_pair` of its new residual in one launch
    (signature of the reference ``post_norm_residual_norm_pair``): one reduction of the new residual serves
    ``next_weight``'s, ``pair_weight``'s and the scaled weightless norm.

    Args:
        x, residual: ``[..., D]`` float32 / float16 / bfloat16, one dtype; weight, next_weight, pair_weight,
            scale_weight: ``[D]``; eps, zero_centered: every norm's; factor: a Python float.

    Returns:
        ``(y, y2, s, r)`` in x's dtype; fresh tensors.

    Raises:
        ValueError: a weight is not ``[D]``, residual's shape or dtype differs from x's, unsupported dtype,
            or tensors on different devices.
    """
    op = "post_norm_residual_norm_pair"
    require(x.dim() >= 1, op, "x must have at least one dimension")
    require(residual.shape == x.shape and residual.dtype == x.dtype, op,
            f"residual must match x's shape {tuple(x.shape)} and dtype {x.dtype}")
    dim = x.shape[-1]
    weights = {"weight": weight, "next_weight": next_weight, "pair_weight": pair_weight, "scale_weight": scale_weight}
    for name, w in weights.items():
        require(w is not None and w.dim() == 1 and w.shape[0] == dim, op, f"{name} must be [D={dim}]")
    if dim > MAX_DIM:
        from anna_core.kernels.reference.norms import post_norm_residual_norm_pair as reference

        return reference(x, residual, weight, eps, zero_centered, next_weight, pair_weight, scale_weight, factor)
    require_float(op, x=x)
    require_same_device(op, x=x, residual=residual, **weights)
    x2, r2 = as_rows(x), as_rows(residual)
    y, y2, o, s = (torch.empty(x2.shape, dtype=x.dtype, device=x.device) for _ in range(4))
    n_rows = x2.shape[0]
    if n_rows and dim:
        block_m, block_d = _row_tile(dim)
        _post_norm_residual_norm_pair_kernel[(triton.cdiv(n_rows, block_m),)](
            x2, r2, weight.contiguous(), next_weight.contiguous(), pair_weight.contiguous(), scale_weight.contiguous(),
            y, y2, o, s, n_rows, dim, x2.stride(0), r2.stride(0), y.stride(0), y2.stride(0), o.stride(0), s.stride(0),
            float(eps), float(factor), ZERO_CENTERED=bool(zero_centered), BLOCK_M=block_m, BLOCK_D=block_d,
            **pdl.launch_options(s),
        )
    return y.view(x.shape), y2.view(x.shape), o.view(x.shape), s.view(x.shape)
