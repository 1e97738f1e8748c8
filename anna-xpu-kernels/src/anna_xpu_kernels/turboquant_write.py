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

A second launch, ``columns`` (``ANNA_TURBOQUANT_WRITE``, :func:`write_path`), shortens that chain for a decode
step's few rows: a program per 16 rows, ``BLOCK_O``-column chunk ``c`` and keys / values (a 9B step's 128 rows at a
head dim of 256: 64 programs instead of 16) computes its rows' norms, its chunk of ``y`` and the chunk's codes (whole
bytes of every plane); for QJL keys its residual chunk's share of the projection, ``r_c S[:, c]^T`` ``[16, D]``, and
``||r_c||^2`` go to a float32 workspace, and the last chunk of the row block to arrive (an acquire-release counter,
:class:`anna_xpu_kernels.counters.CounterPool`, left at zero) sums the shares in chunk order (deterministic) for the
sign plane and ``gamma``. Its longest chain is two ``D / 64`` dots and the sum, against the chain's two ``(D / 64)^2``.
Its products split ``S r``'s reduction by chunk, so its rows carry the same rounding exemptions.
"""

from __future__ import annotations

import torch
from anna_core.kernels.checks import (
    check_turboquant_write,
    keys_have_qjl,
    require,
)

from anna_xpu_kernels._env import turboquant_write_requested
from anna_xpu_kernels._triton import INTERPRETING, next_pow2, tl, triton
from anna_xpu_kernels.counters import CounterPool

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
def _row_norms(x_ptr, x_off, ok, head_dim, BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr):
    """``||x||`` ``[R]`` (float32) of the rows of ``x`` at element offsets ``x_off`` ``[R]``."""
    k = tl.arange(0, BLOCK_K)
    ss = tl.zeros((BLOCK_R,), tl.float32)
    for k0 in range(0, head_dim, BLOCK_K):
        x = tl.load(x_ptr + x_off[:, None] + (k0 + k)[None, :], mask=ok[:, None] & (k0 + k < head_dim)[None, :],
                    other=0.0).to(tl.float32)
        ss += tl.sum(x * x, axis=1)
    return tl.sqrt(ss)


@triton.jit
def _code_chunk(x_ptr, x_off, ok, n_div, rot_ptr, cent_ptr, rows_ptr, dst, first, o0, head_dim, BITS: tl.constexpr,
                PLANE: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_O: tl.constexpr, BLOCK_K: tl.constexpr,
                DOT: tl.constexpr):
    """Columns ``o0 .. o0 + BLOCK_O`` of the unit rows rotated, ``y = (x / n_div) Pi^T``: their nearest centroids
    (ties to the lower one, as ``torch.bucketize``) packed into their bytes of the ``BITS`` code planes from byte
    ``first``. Returns the residual ``y - c[idx]`` ``[R, BLOCK_O]`` float32 (zero beyond ``head_dim``)."""
    k = tl.arange(0, BLOCK_K)
    col = o0 + tl.arange(0, BLOCK_O)
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
    return tl.where(col_ok[None, :], y - tl.load(cent_ptr + idx), 0.0)


@triton.jit
def _encode(x_ptr, x_off, ok, rot_ptr, cent_ptr, rows_ptr, rows_f_ptr, dst, first, res_ptr, res_off, head_dim,
            BITS: tl.constexpr, RESIDUAL: tl.constexpr, PLANE: tl.constexpr, BLOCK_R: tl.constexpr,
            BLOCK_O: tl.constexpr, BLOCK_K: tl.constexpr, DOT: tl.constexpr):
    """Quantize the rows of ``x`` at element offsets ``x_off`` ``[R]``: store their norms (float32 at byte ``dst``)
    and ``BITS`` code planes from byte ``first``; with ``RESIDUAL`` also each row's residual ``y - c[idx]`` (float32,
    at ``res_off``). Returns the residuals' squared norms ``[R]`` (zeros without ``RESIDUAL``)."""
    o = tl.arange(0, BLOCK_O)
    n = _row_norms(x_ptr, x_off, ok, head_dim, BLOCK_R, BLOCK_K)
    n_div = tl.maximum(n, 1e-30)
    g2 = tl.zeros((BLOCK_R,), tl.float32)
    for o0 in range(0, head_dim, BLOCK_O):
        r = _code_chunk(x_ptr, x_off, ok, n_div, rot_ptr, cent_ptr, rows_ptr, dst, first, o0, head_dim, BITS, PLANE,
                        BLOCK_R, BLOCK_O, BLOCK_K, DOT)
        if RESIDUAL:
            col = o0 + o
            g2 += tl.sum(r * r, axis=1)
            tl.store(res_ptr + res_off[:, None] + col[None, :], r, mask=ok[:, None] & (col < head_dim)[None, :])
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


@triton.jit
def _tq_write_columns_kernel(k_ptr, v_ptr, kc_ptr, kcf_ptr, vc_ptr, vcf_ptr, slot_ptr, rot_ptr, qjl_ptr, kcent_ptr,
                             vcent_ptr, ws_ptr, g2_ptr, count_ptr, n_rows, n_heads, head_dim, stride_kt, stride_kh,
                             stride_vt, stride_vh, stride_ks, stride_kh_c, stride_vs, stride_vh_c,
                             KBITS: tl.constexpr, VBITS: tl.constexpr, QJL: tl.constexpr, PLANE: tl.constexpr,
                             BLOCK_R: tl.constexpr, BLOCK_O: tl.constexpr, BLOCK_K: tl.constexpr, DOT: tl.constexpr):
    """Program ``(row block, column chunk c, keys 0 / values 1)``: its rows' norms (stored by chunk 0), the codes
    of its ``BLOCK_O`` columns; with QJL, the keys' partial projections ``r_c S[:, c]^T`` ``[R, D]`` and
    ``||r_c||^2`` to the workspace, then the last chunk of the row block to arrive sums them in chunk order for
    the sign plane and ``gamma``."""
    pid_r = tl.program_id(0)
    c = tl.program_id(1)
    chunks = tl.num_programs(1)
    rows = pid_r * BLOCK_R + tl.arange(0, BLOCK_R)
    ok = rows < n_rows
    tok = (rows // n_heads).to(tl.int64)
    head = rows % n_heads
    slot = tl.load(slot_ptr + tok, mask=ok, other=0).to(tl.int64)
    o0 = c * BLOCK_O
    if tl.program_id(2) == 1:  # values
        x_off = tok * stride_vt + head * stride_vh
        v_dst = slot * stride_vs + head * stride_vh_c  # bytes
        n = _row_norms(v_ptr, x_off, ok, head_dim, BLOCK_R, BLOCK_K)
        _code_chunk(v_ptr, x_off, ok, tl.maximum(n, 1e-30), rot_ptr, vcent_ptr, vc_ptr, v_dst, 4, o0, head_dim,
                    VBITS, PLANE, BLOCK_R, BLOCK_O, BLOCK_K, DOT)
        tl.store(vcf_ptr + v_dst // 4, n, mask=ok & (c == 0))
    else:
        norms = 2 if QJL else 1
        x_off = tok * stride_kt + head * stride_kh
        k_dst = slot * stride_ks + head * stride_kh_c
        n = _row_norms(k_ptr, x_off, ok, head_dim, BLOCK_R, BLOCK_K)
        r = _code_chunk(k_ptr, x_off, ok, tl.maximum(n, 1e-30), rot_ptr, kcent_ptr, kc_ptr, k_dst, 4 * norms, o0,
                        head_dim, KBITS, PLANE, BLOCK_R, BLOCK_O, BLOCK_K, DOT)
        tl.store(kcf_ptr + k_dst // 4, n, mask=ok & (c == 0))
        if QJL:
            o = tl.arange(0, BLOCK_O)
            kk = o0 + o  # this chunk's residual coordinates: the product's reduction slice
            row_off = rows.to(tl.int64) * head_dim
            chunk_stride = tl.cast(n_rows, tl.int64) * head_dim  # partials of chunk c at ws[c, rows, :]
            for p0 in range(0, head_dim, BLOCK_O):
                col = p0 + o
                s = tl.load(qjl_ptr + col[None, :] * head_dim + kk[:, None],  # S^T [k, o] = S[o, k]
                            mask=(kk < head_dim)[:, None] & (col < head_dim)[None, :], other=0.0)
                part = _dot_tf32x3(r, s, tl.zeros((BLOCK_R, BLOCK_O), tl.float32), DOT)
                tl.store(ws_ptr + c * chunk_stride + row_off[:, None] + col[None, :], part,
                         mask=ok[:, None] & (col < head_dim)[None, :])
            tl.store(g2_ptr + c * n_rows + rows, tl.sum(r * r, axis=1), mask=ok)
            tl.debug_barrier()  # every thread's partials are stored before this program counts itself in
            arrived = tl.atomic_add(count_ptr + pid_r, 1, sem="acq_rel", scope="gpu")
            if arrived == chunks - 1:  # the last chunk of this row block: every partial is visible
                for p0 in range(0, head_dim, BLOCK_O):
                    col = p0 + o
                    at = row_off[:, None] + col[None, :]  # chunk 0's
                    mask = ok[:, None] & (col < head_dim)[None, :]
                    proj = tl.load(ws_ptr + at, mask=mask, other=0.0, cache_modifier=".cg")
                    for c2 in range(1, chunks):  # chunk order: deterministic sums
                        proj += tl.load(ws_ptr + at + c2 * chunk_stride, mask=mask, other=0.0,
                                        cache_modifier=".cg")
                    _pack_store((proj >= 0).to(tl.int32), kc_ptr, k_dst, ok, 4 * norms + KBITS * PLANE, p0, PLANE, 1,
                                BLOCK_R, BLOCK_O)
                g2 = tl.load(g2_ptr + rows, mask=ok, other=0.0, cache_modifier=".cg")
                for c2 in range(1, chunks):
                    g2 += tl.load(g2_ptr + c2 * n_rows + rows, mask=ok, other=0.0, cache_modifier=".cg")
                tl.store(kcf_ptr + k_dst // 4 + 1, tl.sqrt(g2), mask=ok)
                tl.store(count_ptr + pid_r, 0)  # zero for the next launch (graph replays)


WRITE_PATHS = ("chain", "columns")
"""The launches of the write: ``chain`` (:func:`_tq_write_kernel`, one program per 16 rows and keys / values) and
``columns`` (:func:`_tq_write_columns_kernel`, one per 16 rows, column chunk and keys / values)."""
COLUMNS_MAX_ROWS = 0
"""``auto`` (``ANNA_TURBOQUANT_WRITE`` unset) takes ``columns`` for at most this many (token, KV head) rows: 0 (never)
until a GPU measures it against ``chain`` (``tools/gpu_experiments/tq_decode_micro.py``)."""
COLUMNS_BLOCK_O, COLUMNS_NUM_WARPS = 64, 8
"""``columns``' chunk width (a multiple of 8: a chunk owns whole bytes of every plane) and warps: 230 registers,
no spills at head dims 256 and 512 (ptxas, sm_90; 4 warps took 255)."""


def write_path(requested: str, rows: int) -> str:
    """The launch (one of :data:`WRITE_PATHS`) of a write of ``rows`` (token, KV head) rows for an
    ``ANNA_TURBOQUANT_WRITE`` value (:func:`anna_xpu_kernels._env.turboquant_write_requested`): ``chain`` or
    ``columns`` as asked, ``auto`` ``columns`` up to :data:`COLUMNS_MAX_ROWS` rows, else ``chain``."""
    if requested in WRITE_PATHS:
        return requested
    return "columns" if rows <= COLUMNS_MAX_ROWS else "chain"


def turboquant_cache_write(k, v, k_cache, v_cache, slot_mapping, rotation, qjl, key_centroids, value_centroids):
    """``turboquant_cache_write`` (the reference's signature and rows, up to float32 rounding: module docstring) in
    one launch, the one :func:`write_path` picks for ``ANNA_TURBOQUANT_WRITE``.

    Raises:
        ValueError: the reference's checks, or a bad ``ANNA_TURBOQUANT_WRITE``.
    """
    path = write_path(turboquant_write_requested(), k.shape[0] * k.shape[1] if k.dim() == 3 else 0)
    write_with(path, k, v, k_cache, v_cache, slot_mapping, rotation, qjl, key_centroids, value_centroids)


def write_with(path, k, v, k_cache, v_cache, slot_mapping, rotation, qjl, key_centroids, value_centroids, *,
               block_o=None, num_warps=None):
    """``turboquant_cache_write`` through the launch ``path`` (:data:`WRITE_PATHS`); ``columns`` with chunks of
    ``block_o`` columns (a power of two from 16; default :data:`COLUMNS_BLOCK_O`) and ``num_warps`` warps (default
    :data:`COLUMNS_NUM_WARPS`; for timing variations).

    Raises:
        ValueError: the reference's checks, or another path.
    """
    op = "turboquant_cache_write"
    require(path in WRITE_PATHS, op, f"write path must be one of {WRITE_PATHS}, got {path!r}")
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
    dot = 0 if k.device.type == "cuda" and not INTERPRETING else 1
    common = (k, v, k_cache, k_cache.view(torch.float32), v_cache, v_cache.view(torch.float32),
              slot_mapping.contiguous(), rotation.contiguous(), qjl.contiguous(), key_centroids, value_centroids)
    strides = (rows, h, d, k.stride(0), k.stride(1), v.stride(0), v.stride(1), k_cache.stride(1), k_cache.stride(2),
               v_cache.stride(1), v_cache.stride(2))
    block_k = min(BLOCK_K, max(16, next_pow2(d)))
    row_blocks = triton.cdiv(rows, BLOCK_R)
    if path == "chain":
        res = torch.empty((rows, d) if with_qjl else (1,), dtype=torch.float32, device=k.device)
        block_o = min(BLOCK_O, max(16, next_pow2(d)))
        _tq_write_kernel[(row_blocks, 2)](
            *common, res, *strides, KBITS=kbits, VBITS=vbits, QJL=with_qjl, PLANE=d // 8, BLOCK_R=BLOCK_R,
            BLOCK_O=block_o, BLOCK_K=block_k, DOT=dot, num_warps=NUM_WARPS)
        return
    block_o = min(block_o or COLUMNS_BLOCK_O, max(16, next_pow2(d)))
    require(block_o >= 16 and block_o & (block_o - 1) == 0, op,
            f"block_o must be a power of two from 16, got {block_o}")
    chunks = triton.cdiv(d, block_o)
    ws = torch.empty((chunks, rows, d) if with_qjl else (1,), dtype=torch.float32, device=k.device)
    g2 = torch.empty((chunks, rows) if with_qjl else (1,), dtype=torch.float32, device=k.device)
    counters = write_with.counters.get(k.device, row_blocks if with_qjl else 1)
    _tq_write_columns_kernel[(row_blocks, chunks, 2)](
        *common, ws, g2, counters, *strides, KBITS=kbits, VBITS=vbits, QJL=with_qjl, PLANE=d // 8, BLOCK_R=BLOCK_R,
        BLOCK_O=block_o, BLOCK_K=block_k, DOT=dot, num_warps=num_warps or COLUMNS_NUM_WARPS)


write_with.counters = CounterPool()
