"""Attention pre-processing in one Triton launch: RMSNorm of each query and key head, partial rotary
embedding, and the write of the new keys and values into the paged cache.

Math, exactly the composition the unfused layer runs (each intermediate rounded to the activation
dtype where the unfused ops round it):

* ``x = rms_norm(x, w, eps, zero_centered)`` per head (Zhang & Sennrich, 2019), float32, rounded;
* rotary (Su et al., "RoFormer", 2021; NeoX ``rotate_half`` halves) on the first ``rotary_dim``
  dims with ``cos/sin(position * inv_freq)`` in float32, the remaining dims passed through; with
  multi-row positions (M-RoPE) each frequency ``f`` reads its position from row ``rope_axis[f]``;
* keys and values stored at ``slot_mapping`` in ``[num_blocks, block_size, H_kv, D]`` caches (as
  the ``reshape_and_cache`` op).

``qkv_norm_rope_cache`` (Gemma 4) also normalises each value head with a weightless RMSNorm (float32,
rounded once) before storing it; ``qk_norm_rope_cache`` stores the values as given.

Grid: one program per (token, head) over the ``H_q`` query heads followed by the ``H_kv`` key
heads; a key-head program also copies its value head into the cache. Each program reads its row
and the rotary partner of every element (``d +- rotary_dim / 2``) and writes the row once.
"""

from __future__ import annotations

import torch
from anna_core.kernels.reference.qk_norm_rope import qk_norm_rope_shapes

from anna_xpu_kernels import pdl
from anna_xpu_kernels._checks import require, require_float, require_same_device
from anna_xpu_kernels._triton import next_pow2, tl, triton


@triton.jit
def _norm_rope_row(src, w_ptr, pos_t_ptr, stride_pos_row, axis_ptr, inv_freq_ptr, head_dim, half, rotary_dim, eps,
                   ZERO_CENTERED: tl.constexpr, MROPE: tl.constexpr, OUT_TY: tl.constexpr, BLOCK_D: tl.constexpr):
    d = tl.arange(0, BLOCK_D)
    ok = d < head_dim
    partner = tl.where(d < half, d + half, tl.where(d < rotary_dim, d - half, d))
    x = tl.load(src + d, mask=ok, other=0.0).to(tl.float32)
    xp = tl.load(src + partner, mask=ok, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / head_dim + eps)
    w = tl.load(w_ptr + d, mask=ok, other=0.0).to(tl.float32)
    wp = tl.load(w_ptr + partner, mask=ok, other=0.0).to(tl.float32)
    if ZERO_CENTERED:
        w = w + 1.0
        wp = wp + 1.0
    xn = (x * rstd * w).to(OUT_TY).to(tl.float32)  # the normed head, rounded as the unfused op returns it
    xpn = (xp * rstd * wp).to(OUT_TY).to(tl.float32)
    f = tl.where(d < half, d, d - half)
    in_rot = d < rotary_dim
    if MROPE:  # each frequency's position from its row (t, h or w) of this token's column
        row = tl.load(axis_ptr + f, mask=ok & in_rot, other=0).to(tl.int64)
        pos = tl.load(pos_t_ptr + row * stride_pos_row, mask=ok & in_rot, other=0).to(tl.float32)
    else:
        pos = tl.load(pos_t_ptr).to(tl.float32)
    angle = pos * tl.load(inv_freq_ptr + f, mask=ok & in_rot, other=0.0)
    c = tl.cos(angle)
    s = tl.sin(angle)
    rot = tl.where(d < half, xn * c - xpn * s, xn * c + xpn * s)
    return tl.where(in_rot, rot, xn).to(OUT_TY), d, ok


@triton.jit
def _qk_norm_rope_cache_kernel(
    q_ptr, k_ptr, v_ptr, qw_ptr, kw_ptr, pos_ptr, axis_ptr, inv_freq_ptr, slot_ptr, qo_ptr, k_cache_ptr, v_cache_ptr,
    h_q, h_kv, head_dim, half, rotary_dim, eps,
    stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh, stride_ot, stride_oh, stride_slot,
    stride_pos_row,
    ZERO_CENTERED: tl.constexpr, MROPE: tl.constexpr, V_NORM: tl.constexpr, BLOCK_D: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    pdl.enter(USE_PDL)
    t = tl.program_id(0).to(tl.int64)
    j = tl.program_id(1)
    if j < h_q:
        y, d, ok = _norm_rope_row(q_ptr + t * stride_qt + j * stride_qh, qw_ptr, pos_ptr + t, stride_pos_row, axis_ptr,
                                  inv_freq_ptr, head_dim, half, rotary_dim, eps, ZERO_CENTERED, MROPE,
                                  qo_ptr.dtype.element_ty, BLOCK_D)
        tl.store(qo_ptr + t * stride_ot + j * stride_oh + d, y, mask=ok)
    else:
        h = j - h_q
        y, d, ok = _norm_rope_row(k_ptr + t * stride_kt + h * stride_kh, kw_ptr, pos_ptr + t, stride_pos_row, axis_ptr,
                                  inv_freq_ptr, head_dim, half, rotary_dim, eps, ZERO_CENTERED, MROPE,
                                  k_cache_ptr.dtype.element_ty, BLOCK_D)
        slot = tl.load(slot_ptr + t * stride_slot).to(tl.int64)
        dst = (slot * h_kv + h) * head_dim + d
        tl.store(k_cache_ptr + dst, y, mask=ok)
        v = tl.load(v_ptr + t * stride_vt + h * stride_vh + d, mask=ok, other=0.0)
        if V_NORM:  # the weightless value norm, float32, rounded once as the unfused rms_norm rounds it
            vf = v.to(tl.float32)
            v = vf * tl.rsqrt(tl.sum(vf * vf, axis=0) / head_dim + eps)
        tl.store(v_cache_ptr + dst, v.to(v_cache_ptr.dtype.element_ty), mask=ok)


@triton.jit
def _q_norm_rope_kernel(
    q_ptr, qw_ptr, pos_ptr, inv_freq_ptr, qo_ptr, head_dim, half, rotary_dim, eps,
    stride_qt, stride_qh, stride_ot, stride_oh,
    ZERO_CENTERED: tl.constexpr, BLOCK_D: tl.constexpr, USE_PDL: tl.constexpr,
):
    pdl.enter(USE_PDL)
    t = tl.program_id(0).to(tl.int64)
    j = tl.program_id(1)
    y, d, ok = _norm_rope_row(q_ptr + t * stride_qt + j * stride_qh, qw_ptr, pos_ptr + t, 0, pos_ptr, inv_freq_ptr,
                              head_dim, half, rotary_dim, eps, ZERO_CENTERED, False, qo_ptr.dtype.element_ty, BLOCK_D)
    tl.store(qo_ptr + t * stride_ot + j * stride_oh + d, y, mask=ok)


def qk_norm_rope_cache(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    q_weight: torch.Tensor,
    k_weight: torch.Tensor,
    eps: float,
    zero_centered: bool,
    positions: torch.Tensor,
    inv_freq: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    rope_axis: torch.Tensor | None = None,
) -> torch.Tensor:
    """Normalise and rotate q and k per head, store k and v into the paged cache; returns the new q.

    Args:
        q: ``[T, H_q, D]``; k, v: ``[T, H_kv, D]`` (any strides with unit stride along D).
        q_weight, k_weight: ``[D]`` RMSNorm weights; eps; zero_centered: weights stored as offsets from 1.
        positions: ``[T]`` int64 token positions, or ``[rows, T]`` (M-RoPE) with ``rope_axis``; inv_freq:
            ``[rotary_dim / 2]`` float32 inverse frequencies (``rotary_dim <= D``, even).
        k_cache, v_cache: ``[num_blocks, block_size, H_kv, D]`` contiguous caches in q's dtype, written
            at ``slot_mapping`` (``[T]`` int64, ``block * block_size + offset``; trusted, no host sync).
        rope_axis: ``[rotary_dim / 2]`` integer, the positions' row driving each frequency (values in
            ``[0, rows)``, trusted); only with ``[rows, T]`` positions.

    Returns:
        ``[T, H_q, D]`` contiguous, q's dtype: the normalised, rotated queries.

    Raises:
        ValueError: inconsistent shapes, a non-contiguous cache, unsupported dtype.
    """
    return _launch("qk_norm_rope_cache", q, k, v, q_weight, k_weight, eps, zero_centered, positions, inv_freq,
                   k_cache, v_cache, slot_mapping, rope_axis, v_norm=False)


def qkv_norm_rope_cache(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    q_weight: torch.Tensor,
    k_weight: torch.Tensor,
    eps: float,
    zero_centered: bool,
    positions: torch.Tensor,
    inv_freq: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> torch.Tensor:
    """:func:`qk_norm_rope_cache` (1-D positions) with each value head normalised by an RMSNorm without weight (eps
    ``eps``, float32, rounded once) before it is stored: Gemma 4's q/k/v pre-processing in one launch (the
    ``qkv_norm_rope_cache`` op). Arguments, result and errors as :func:`qk_norm_rope_cache`; v may be a view of k's
    rows (``attention_k_eq_v``)."""
    return _launch("qkv_norm_rope_cache", q, k, v, q_weight, k_weight, eps, zero_centered, positions, inv_freq,
                   k_cache, v_cache, slot_mapping, None, v_norm=True)


def _launch(op: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor,
            eps: float, zero_centered: bool, positions: torch.Tensor, inv_freq: torch.Tensor, k_cache: torch.Tensor,
            v_cache: torch.Tensor, slot_mapping: torch.Tensor, rope_axis: torch.Tensor | None, *,
            v_norm: bool) -> torch.Tensor:
    """Check the arguments of ``op`` (see :func:`qk_norm_rope_cache`) and launch the kernel (``v_norm``: normalise
    the value heads before storing them)."""
    qk_norm_rope_shapes(op, q, k, v, q_weight, k_weight, positions, inv_freq, k_cache, v_cache, slot_mapping,
                        rope_axis)
    total, h_q, dim = q.shape
    h_kv = k.shape[1]
    rotary_dim = 2 * inv_freq.shape[0]
    require(k_cache.is_contiguous() and v_cache.is_contiguous(), op, "caches must be contiguous")
    if rope_axis is not None:
        require_same_device(op, q=q, rope_axis=rope_axis)
    require(positions.stride(-1) == 1, op, "positions must be contiguous along T")
    for name, t in (("q", q), ("k", k), ("v", v)):
        require(t.stride(2) == 1, op, f"{name} needs unit stride along D")
    require_float(op, q=q)
    require_same_device(op, q=q, k=k, v=v, k_cache=k_cache, positions=positions, inv_freq=inv_freq,
                        slot_mapping=slot_mapping)
    out = torch.empty((total, h_q, dim), dtype=q.dtype, device=q.device)
    if total == 0:
        return out
    mrope = rope_axis is not None
    _qk_norm_rope_cache_kernel[(total, h_q + h_kv)](
        q, k, v, q_weight, k_weight, positions, rope_axis if mrope else positions, inv_freq.to(torch.float32),
        slot_mapping, out, k_cache, v_cache,
        h_q, h_kv, dim, rotary_dim // 2, rotary_dim, float(eps),
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1), out.stride(0), out.stride(1),
        slot_mapping.stride(0), positions.stride(0) if mrope else 0,
        ZERO_CENTERED=bool(zero_centered), MROPE=mrope, V_NORM=v_norm, BLOCK_D=max(16, next_pow2(dim)),
        num_warps=4 if dim <= 256 else 8,
        **pdl.launch_options(out),
    )
    return out


def q_norm_rope(q: torch.Tensor, weight: torch.Tensor, eps: float, zero_centered: bool, positions: torch.Tensor,
                inv_freq: torch.Tensor) -> torch.Tensor:
    """Normalise and rotate q per head (the query path of :func:`qk_norm_rope_cache`, for layers that write
    no K/V): one program per (token, head).

    Args:
        q: ``[T, H, D]`` (unit stride along D); weight: ``[D]``; eps; zero_centered: weights stored as
            offsets from 1; positions: ``[T]`` int64; inv_freq: ``[rotary_dim / 2]`` float32.

    Returns:
        ``[T, H, D]`` contiguous, q's dtype.

    Raises:
        ValueError: inconsistent shapes, unsupported dtype, tensors on different devices.
    """
    op = "q_norm_rope"
    require(q.dim() == 3, op, f"q must be [T, H, D], got {tuple(q.shape)}")
    total, heads, dim = q.shape
    rotary_dim = 2 * inv_freq.shape[0]
    require(inv_freq.dim() == 1 and 0 < rotary_dim <= dim, op, f"inv_freq must be [rotary_dim/2 <= {dim // 2}]")
    require(tuple(weight.shape) == (dim,), op, f"weight must be [{dim}]")
    require(positions.dim() == 1 and positions.shape[0] == total and positions.stride(0) == 1, op,
            f"positions must be a contiguous [T={total}]")
    require(q.stride(2) == 1, op, "q needs unit stride along D")
    require_float(op, q=q)
    require_same_device(op, q=q, weight=weight, positions=positions, inv_freq=inv_freq)
    out = torch.empty((total, heads, dim), dtype=q.dtype, device=q.device)
    if total == 0 or heads == 0:
        return out
    _q_norm_rope_kernel[(total, heads)](
        q, weight, positions, inv_freq.to(torch.float32), out, dim, rotary_dim // 2, rotary_dim, float(eps),
        q.stride(0), q.stride(1), out.stride(0), out.stride(1),
        ZERO_CENTERED=bool(zero_centered), BLOCK_D=max(16, next_pow2(dim)), num_warps=4 if dim <= 256 else 8,
        **pdl.launch_options(out),
    )
    return out
