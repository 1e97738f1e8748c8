"""The sandwich-norm tails and norm pairs in Triton: a block's post norm, its residual add and the next norms.

Math as the torch reference (:mod:`anna_core.kernels.reference.norms`), per row of ``D`` values in float32,
each intermediate rounded to x's dtype where torch rounds it::

    post_norm_residual: r = round(residual + round(rms_norm(x, w)));  r = round(r * scale);
                     y = rms_norm(r, next_w)   (a sandwich-normed block's tail and the next input norm)
    dual_post_norm_residual: post_norm_residual of round(round(rms_norm(x1, w1)) + round(rms_norm(x2, w2)))
                     (Gemma 4's MoE layer tail: the dense MLP's and the experts' outputs)
    rms_norm_pair:   y = rms_norm(x, w);  s = round(round(round(x * rstd) * scale_w) * factor)
                     (Gemma 4's experts' input norm and router input, one read of x)
    post_norm_residual_norm_pair: post_norm_residual (no scale), then rms_norm_pair of the new residual
                     (Gemma 4's MoE layer after attention: one reduction for its three norms)

Row tiles as :mod:`anna_xpu_kernels.norm_tiles`; plain and gated RMSNorm and the pre-norm residual add are in
:mod:`anna_xpu_kernels.norms`.
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


@triton.jit
def _post_weights(w_ptr, scale_ptr, nw_ptr, cols, col_ok, ZERO_CENTERED: tl.constexpr, HAS_SCALE: tl.constexpr,
                  HAS_NEXT: tl.constexpr):
    """The weights of :func:`_post_tail`: ``(w, scale, next_w)`` (scale 1.0 without ``HAS_SCALE``, next_w
    w without ``HAS_NEXT``)."""
    w = norm_weight(w_ptr, cols, col_ok, ZERO_CENTERED)
    scale = tl.load(scale_ptr, eviction_policy="evict_last").to(tl.float32) if HAS_SCALE else 1.0
    nw = norm_weight(nw_ptr, cols, col_ok, ZERO_CENTERED) if HAS_NEXT else w
    return w, scale, nw


@triton.jit
def _post_tail(x, r, w, scale, nw, y_ptr, s_ptr, rows64, cols, mask, dim, stride_y, stride_s, eps,
               HAS_SCALE: tl.constexpr, HAS_NEXT: tl.constexpr):
    """``post_norm_residual`` of the float32 tiles ``x`` (the block output) and ``r`` (the stream) with the
    loaded weights of :func:`_post_weights`: stores ``s = round(round(r + round(norm(x, w))) * scale)`` and,
    with ``HAS_NEXT``, ``y = norm(s, next_w)``."""
    ty = s_ptr.dtype.element_ty
    normed = normalize_rows(x, w, dim, eps).to(ty).to(tl.float32)
    s = (r + normed).to(ty)  # the residual stream, rounded as torch's residual + norm(x)
    if HAS_SCALE:
        s = (s.to(tl.float32) * scale).to(ty)
    store_rows(s_ptr, stride_s, rows64, cols, mask, s)
    if HAS_NEXT:
        y = normalize_rows(s.to(tl.float32), nw, dim, eps)
        store_rows(y_ptr, stride_y, rows64, cols, mask, y)


@autotune(NORM_WARPS, fixed=triton.Config({}, num_warps=4), key=["BLOCK_D", "BLOCK_M"])
@triton.jit(do_not_specialize=['n_rows'])
def _post_norm_residual_kernel(
    x_ptr, r_ptr, w_ptr, scale_ptr, nw_ptr, y_ptr, s_ptr,
    n_rows, dim, stride_x, stride_r, stride_y, stride_s, eps,
    ZERO_CENTERED: tl.constexpr, HAS_SCALE: tl.constexpr, HAS_NEXT: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_D: tl.constexpr, USE_PDL: tl.constexpr,
):
    pdl.launch_dependents(USE_PDL)
    rows64, cols, col_ok, mask = row_block(n_rows, dim, BLOCK_M, BLOCK_D)
    w, scale, nw = _post_weights(w_ptr, scale_ptr, nw_ptr, cols, col_ok, ZERO_CENTERED, HAS_SCALE, HAS_NEXT)
    pdl.wait(USE_PDL)
    x = load_rows(x_ptr, stride_x, rows64, cols, mask)
    r = load_rows(r_ptr, stride_r, rows64, cols, mask)
    _post_tail(x, r, w, scale, nw, y_ptr, s_ptr, rows64, cols, mask, dim, stride_y, stride_s, eps, HAS_SCALE, HAS_NEXT)


@autotune(NORM_WARPS, fixed=triton.Config({}, num_warps=4), key=["BLOCK_D", "BLOCK_M"])
@triton.jit(do_not_specialize=['n_rows'])
def _dual_post_norm_residual_kernel(
    x_ptr, x2_ptr, w1_ptr, w2_ptr, r_ptr, w_ptr, scale_ptr, nw_ptr, y_ptr, s_ptr,
    n_rows, dim, stride_x, stride_x2, stride_r, stride_y, stride_s, eps,
    ZERO_CENTERED: tl.constexpr, HAS_SCALE: tl.constexpr, HAS_NEXT: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_D: tl.constexpr, USE_PDL: tl.constexpr,
):
    pdl.launch_dependents(USE_PDL)
    rows64, cols, col_ok, mask = row_block(n_rows, dim, BLOCK_M, BLOCK_D)
    ty = s_ptr.dtype.element_ty
    w1 = norm_weight(w1_ptr, cols, col_ok, ZERO_CENTERED)
    w2 = norm_weight(w2_ptr, cols, col_ok, ZERO_CENTERED)
    w, scale, nw = _post_weights(w_ptr, scale_ptr, nw_ptr, cols, col_ok, ZERO_CENTERED, HAS_SCALE, HAS_NEXT)
    pdl.wait(USE_PDL)
    x1 = load_rows(x_ptr, stride_x, rows64, cols, mask)
    x2 = load_rows(x2_ptr, stride_x2, rows64, cols, mask)
    r = load_rows(r_ptr, stride_r, rows64, cols, mask)
    a = normalize_rows(x1, w1, dim, eps).to(ty).to(tl.float32)
    b = normalize_rows(x2, w2, dim, eps).to(ty).to(tl.float32)
    x = (a + b).to(ty).to(tl.float32)  # rounded as torch's norm_1(x1) + norm_2(x2)
    _post_tail(x, r, w, scale, nw, y_ptr, s_ptr, rows64, cols, mask, dim, stride_y, stride_s, eps, HAS_SCALE, HAS_NEXT)


@autotune(NORM_WARPS, fixed=triton.Config({}, num_warps=4), key=["BLOCK_D", "BLOCK_M"])
@triton.jit(do_not_specialize=['n_rows'])
def _rms_norm_pair_kernel(
    x_ptr, w_ptr, sw_ptr, y_ptr, s_ptr,
    n_rows, dim, stride_x, stride_y, stride_s, eps, factor,
    ZERO_CENTERED: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr, USE_PDL: tl.constexpr,
):
    pdl.launch_dependents(USE_PDL)
    rows64, cols, col_ok, mask = row_block(n_rows, dim, BLOCK_M, BLOCK_D)
    ty = s_ptr.dtype.element_ty
    w = norm_weight(w_ptr, cols, col_ok, ZERO_CENTERED)
    sw = tl.load(sw_ptr + cols, mask=col_ok, other=0.0, eviction_policy="evict_last").to(tl.float32)
    pdl.wait(USE_PDL)
    x = load_rows(x_ptr, stride_x, rows64, cols, mask)
    normed = x * tl.rsqrt(tl.sum(x * x, axis=1) / dim + eps)[:, None]
    tl.store(y_ptr + rows64 * stride_y + cols[None, :], (normed * w[None, :]).to(y_ptr.dtype.element_ty), mask=mask)
    s = (normed.to(ty).to(tl.float32) * sw[None, :]).to(ty).to(tl.float32)  # torch's norm(x) * scale_weight
    tl.store(s_ptr + rows64 * stride_s + cols[None, :], (s * factor).to(ty), mask=mask)


@autotune(NORM_WARPS, fixed=triton.Config({}, num_warps=4), key=["BLOCK_D", "BLOCK_M"])
@triton.jit(do_not_specialize=['n_rows'])
def _post_norm_residual_norm_pair_kernel(
    x_ptr, r_ptr, w_ptr, nw_ptr, pw_ptr, sw_ptr, y_ptr, y2_ptr, o_ptr, s_ptr,
    n_rows, dim, stride_x, stride_r, stride_y, stride_y2, stride_o, stride_s, eps, factor,
    ZERO_CENTERED: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr, USE_PDL: tl.constexpr,
):
    pdl.launch_dependents(USE_PDL)
    rows64, cols, col_ok, mask = row_block(n_rows, dim, BLOCK_M, BLOCK_D)
    ty = s_ptr.dtype.element_ty
    w = norm_weight(w_ptr, cols, col_ok, ZERO_CENTERED)
    nw = norm_weight(nw_ptr, cols, col_ok, ZERO_CENTERED)
    pw = norm_weight(pw_ptr, cols, col_ok, ZERO_CENTERED)
    sw = tl.load(sw_ptr + cols, mask=col_ok, other=0.0, eviction_policy="evict_last").to(tl.float32)
    pdl.wait(USE_PDL)
    x = load_rows(x_ptr, stride_x, rows64, cols, mask)
    r = load_rows(r_ptr, stride_r, rows64, cols, mask)
    normed = normalize_rows(x, w, dim, eps).to(ty).to(tl.float32)
    s = (r + normed).to(ty)  # the residual stream, rounded as torch's residual + norm(x)
    store_rows(s_ptr, stride_s, rows64, cols, mask, s)
    s = s.to(tl.float32)
    hat = s * tl.rsqrt(tl.sum(s * s, axis=1) / dim + eps)[:, None]  # one reduction serves the three norms
    tl.store(y_ptr + rows64 * stride_y + cols[None, :], (hat * nw[None, :]).to(y_ptr.dtype.element_ty), mask=mask)
    tl.store(y2_ptr + rows64 * stride_y2 + cols[None, :], (hat * pw[None, :]).to(y2_ptr.dtype.element_ty), mask=mask)
    o = (hat.to(ty).to(tl.float32) * sw[None, :]).to(ty).to(tl.float32)  # torch's norm(r) * scale_weight
    tl.store(o_ptr + rows64 * stride_o + cols[None, :], (o * factor).to(ty), mask=mask)


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
        block_m, block_d = row_tile(dim)
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
        block_m, block_d = row_tile(dim)
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
        block_m, block_d = row_tile(dim)
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
        block_m, block_d = row_tile(dim)
        _post_norm_residual_norm_pair_kernel[(triton.cdiv(n_rows, block_m),)](
            x2, r2, weight.contiguous(), next_weight.contiguous(), pair_weight.contiguous(), scale_weight.contiguous(),
            y, y2, o, s, n_rows, dim, x2.stride(0), r2.stride(0), y.stride(0), y2.stride(0), o.stride(0), s.stride(0),
            float(eps), float(factor), ZERO_CENTERED=bool(zero_centered), BLOCK_M=block_m, BLOCK_D=block_d,
            **pdl.launch_options(s),
        )
    return y.view(x.shape), y2.view(x.shape), o.view(x.shape), s.view(x.shape)
