"""Writing keys and values into a TurboQuant KV cache in one launch (``turboquant_cache_write``; Zandieh et al.,
arXiv 2504.19874; the contract and the torch reference: :mod:`anna_core.kernels.reference.turboquant`, the row
layout: :mod:`anna_core.kv_quant.layout`).

Each program takes 16 (token, KV head) rows of the keys or (a second program) of the values: the rows' norms
``n = ||x||``; the unit rows
rotated, ``y = (x / n) Pi^T``, one ``BLOCK_O``-column chunk at a time (a ``[16, D] x [D, BLOCK_O]`` dot), each
chunk's nearest centroids (ties to the lower one) packed straight into its bytes of every code plane; for keys with
the QJL stage, the residual ``r = y - c[idx]`` of each chunk is kept in a float32 scratch row and its squares
summed (``gamma = ||r||``), then, after a barrier within the program, ``S r`` in chunks gives the sign plane. The
norms are stored last. So the whole write is one launch where the torch-composed one took about fifteen (casts,
norms, divisions, three matmuls, three kernels); a decode step's few rows make few programs, each a chain of
``[16, D] x [D, D]`` products (two for keys with QJL, one for values), so its latency is that chain's.

The products are float32 to float32 rounding: ``ieee`` dots off CUDA (and under Triton's interpreter), ``tf32x3``
(three tensor-core products of the operands' tf32 halves) on CUDA. So the rows equal the reference's up to the
rounding of the norms and of ``y`` / ``S r`` in their last bits: a coordinate whose ``y`` lies within that rounding of
a decision boundary (or whose ``(S r)_j`` of zero) may take the other code (tests/xpu_kernels/test_turboquant_write.py
bounds it). No host sync (graph-capturable).
"""

from __future__ import annotations

import torch
from anna_core.kernels.checks import (
    check_turboquant_write,
    keys_have_qjl,
    require,
)

from anna_xpu_kernels._triton import INTERPRETING, next_pow2, tl, triton

BLOCK_R = 16
"""(token, head) rows per program (the dots' smallest M)."""
BLOCK_O, BLOCK_K, NUM_WARPS = 64, 64, 8
"""Output columns and reduction slice per dot, and warps: no register spills at a head dim of 512 (ptxas; 64 x 32
slices spilled 36 bytes with 8 warps, 64 x 64 with 4 warps 84; ``python -m anna_xpu_kernels.compile_check``'s
case)."""


@triton.jit
def _dot_tf32x3(a, b, acc, DOT: tl.constexpr):
    if DOT == 0:
        return tl.dot(a, b, acc, input_precision="tf32x3")
    else:
        return tl.dot(a, b, acc, input_precision="ieee")


@triton.jit
def _pack_store(bits, rows_ptr, dst, ok, first, o0, PLANE: tl.constexpr, BITS: tl.constexpr, BLOCK_R: tl.constexpr,
                BLOCK_O: tl.constexpr):
    """Store bit ``p`` of ``bits`` ``[R, BLOCK_O]`` (columns ``o0 ..``) into plane ``p`` of the rows at byte offsets
    ``dst`` from byte ``first``: coordinate ``j`` at bit ``j % 8`` of the plane's byte ``j // 8``."""
    t = tl.arange(0, 8)
    j = o0 // 8 + tl.arange(0, BLOCK_O // 8)
    b3 = tl.reshape(bits, (BLOCK_R, BLOCK_O // 8, 8))
    for p in tl.static_range(BITS):
        byte = tl.sum(((b3 >> p) & 1) << t[None, None, :], axis=2)
        tl.store(rows_ptr + dst[:, None] + first + p * PLANE + j[None, :], byte.to(tl.uint8),
                 mask=ok[:, None] & (j < PLANE)[None, :])


@triton.jit
def _encode(x_ptr, x_off, ok, rot_ptr, cent_ptr, rows_ptr, rows_f_ptr, dst, first, res_ptr, res_off, head_dim,
            BITS: tl.constexpr, RESIDUAL: tl.constexpr, PLANE: tl.constexpr, BLOCK_R: tl.constexpr,
            BLOCK_O: tl.constexpr, BLOCK_K: tl.constexpr, DOT: tl.constexpr):
    """Quantize the rows of ``x`` at element offsets ``x_off`` ``[R]``: store their norms (float32 at byte ``dst``)
    and ``BITS`` code planes from byte ``first``; with ``RESIDUAL`` also each row's residual ``y - c[idx]`` (float32,
    at ``res_off``). Returns the residuals' squared norms ``[R]`` (zeros without ``RESIDUAL``)."""
    k = tl.arange(0, BLOCK_K)
    o = tl.arange(0, BLOCK_O)
    ss = tl.zeros((BLOCK_R,), tl.float32)
    for k0 in range(0, head_dim, BLOCK_K):
        x = tl.load(x_ptr + x_off[:, None] + (k0 + k)[None, :], mask=ok[:, None] & (k0 + k < head_dim)[None, :],
                    other=0.0).to(tl.float32)
        ss += tl.sum(x * x, axis=1)
    n = tl.sqrt(ss)
    n_div = tl.maximum(n, 1e-30)
    g2 = tl.zeros((BLOCK_R,), tl.float32)
    for o0 in range(0, head_dim, BLOCK_O):
        col = o0 + o
        col_ok = col < head_dim
        y = tl.zeros((BLOCK_R, BLOCK_O), tl.float32)
        for k0 in range(0, head_dim, BLOCK_K):
            kk = k0 + k
            u = tl.load(x_ptr + x_off[:, None] + kk[None, :], mask=ok[:, None] & (kk < head_dim)[None, :],
                        other=0.0).to(tl.float32) / n_div[:, None]
            w = tl.load(rot_ptr + col[None, :] * head_dim + kk[:, None],  # Pi^T [k, o] = Pi[o, k]
                        mask=(kk < head_dim)[:, None] & col_ok[None, :], other=0.0)
            y = _dot_tf32x3(u, w, y, DOT)
        idx = tl.zeros((BLOCK_R, BLOCK_O), tl.int32)
        for level in tl.static_range(1, 1 << BITS):  # ties go to the lower centroid (torch.bucketize, right=False)
            bound = (tl.load(cent_ptr + level - 1) + tl.load(cent_ptr + level)) / 2
            idx += (y > bound).to(tl.int32)
        _pack_store(idx, rows_ptr, dst, ok, first, o0, PLANE, BITS, BLOCK_R, BLOCK_O)
        if RESIDUAL:
            r = tl.where(col_ok[None, :], y - tl.load(cent_ptr + idx), 0.0)
            g2 += tl.sum(r * r, axis=1)
            tl.store(res_ptr + res_off[:, None] + col[None, :], r, mask=ok[:, None] & col_ok[None, :])
    tl.store(rows_f_ptr + dst // 4, n, mask=ok)
    return g2


@triton.jit
def _tq_write_kernel(k_ptr, v_ptr, kc_ptr, kcf_ptr, vc_ptr, vcf_ptr, slot_ptr, rot_ptr, qjl_ptr, kcent_ptr, vcent_ptr,
                     res_ptr, n_rows, n_heads, head_dim, stride_kt, stride_kh, stride_vt, stride_vh, stride_ks,
                     stride_kh_c, stride_vs, stride_vh_c, KBITS: tl.constexpr, VBITS: tl.constexpr,
                     QJL: tl.constexpr, PLANE: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_O: tl.constexpr,
                     BLOCK_K: tl.constexpr, DOT: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    ok = rows < n_rows
    tok = (rows // n_heads).to(tl.int64)
    head = rows % n_heads
    slot = tl.load(slot_ptr + tok, mask=ok, other=0).to(tl.int64)
    k_dst = slot * stride_ks + head * stride_kh_c  # bytes
    v_dst = slot * stride_vs + head * stride_vh_c
    res_off = rows.to(tl.int64) * head_dim
    norms = 2 if QJL else 1
    if tl.program_id(1) == 1:  # the values: their rows on a program of their own
        _encode(v_ptr, tok * stride_vt + head * stride_vh, ok, rot_ptr, vcent_ptr, vc_ptr, vcf_ptr, v_dst, 4, res_ptr,
                res_off, head_dim, VBITS, False, PLANE, BLOCK_R, BLOCK_O, BLOCK_K, DOT)
    else:
        g2 = _encode(k_ptr, tok * stride_kt + head * stride_kh, ok, rot_ptr, kcent_ptr, kc_ptr, kcf_ptr, k_dst,
                     4 * norms, res_ptr, res_off, head_dim, KBITS, QJL, PLANE, BLOCK_R, BLOCK_O, BLOCK_K, DOT)
        if QJL:
            tl.debug_barrier()  # this program's residual rows are written before it reads them back
            k = tl.arange(0, BLOCK_K)
            o = tl.arange(0, BLOCK_O)
            for o0 in range(0, head_dim, BLOCK_O):
                col = o0 + o
                proj = tl.zeros((BLOCK_R, BLOCK_O), tl.float32)
                for k0 in range(0, head_dim, BLOCK_K):
                    kk = k0 + k
                    r = tl.load(res_ptr + res_off[:, None] + kk[None, :],
                                mask=ok[:, None] & (kk < head_dim)[None, :], other=0.0)
                    s = tl.load(qjl_ptr + col[None, :] * head_dim + kk[:, None],  # S^T [k, o] = S[o, k]
                                mask=(kk < head_dim)[:, None] & (col < head_dim)[None, :], other=0.0)
                    proj = _dot_tf32x3(r, s, proj, DOT)
                _pack_store((proj >= 0).to(tl.int32), kc_ptr, k_dst, ok, 4 * norms + KBITS * PLANE, o0, PLANE, 1,
                            BLOCK_R, BLOCK_O)
            tl.store(kcf_ptr + k_dst // 4 + 1, tl.sqrt(g2), mask=ok)


def turboquant_cache_write(k, v, k_cache, v_cache, slot_mapping, rotation, qjl, key_centroids, value_centroids):
    """``turboquant_cache_write`` (the reference's signature and rows, up to float32 rounding: module docstring) in
    one launch.

    Raises:
        ValueError: the reference's checks.
    """
    op = "turboquant_cache_write"
    t, h, d, kbits, vbits = check_turboquant_write(op, k, v, k_cache, v_cache, slot_mapping, rotation, qjl,
                                                   key_centroids, value_centroids)
    require(k_cache.stride(1) % 4 == 0 and k_cache.stride(2) % 4 == 0 and v_cache.stride(1) % 4 == 0
            and v_cache.stride(2) % 4 == 0, op, "cache rows must be 4-byte aligned")
    if t == 0:
        return
    if k.stride(2) != 1:
        k = k.contiguous()
    if v.stride(2) != 1:
        v = v.contiguous()
    rows = t * h
    with_qjl = keys_have_qjl(kbits, vbits)
    res = torch.empty((rows, d) if with_qjl else (1,), dtype=torch.float32, device=k.device)
    block_o, block_k = (min(most, max(16, next_pow2(d))) for most in (BLOCK_O, BLOCK_K))
    dot = 0 if k.device.type == "cuda" and not INTERPRETING else 1
    _tq_write_kernel[(triton.cdiv(rows, BLOCK_R), 2)](
        k, v, k_cache, k_cache.view(torch.float32), v_cache, v_cache.view(torch.float32), slot_mapping.contiguous(),
        rotation.contiguous(), qjl.contiguous(), key_centroids, value_centroids, res, rows, h, d,
        k.stride(0), k.stride(1), v.stride(0), v.stride(1), k_cache.stride(1), k_cache.stride(2), v_cache.stride(1),
        v_cache.stride(2), KBITS=kbits, VBITS=vbits, QJL=with_qjl, PLANE=d // 8, BLOCK_R=BLOCK_R, BLOCK_O=block_o,
        BLOCK_K=block_k, DOT=dot, num_warps=NUM_WARPS)
