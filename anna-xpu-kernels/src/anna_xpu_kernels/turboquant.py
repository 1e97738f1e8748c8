"""Attention over a TurboQuant KV cache in Triton (Zandieh et al., arXiv 2504.19874; the contract and the torch
reference: :mod:`anna_core.kernels.reference.turboquant`, the row layout: :mod:`anna_core.kv_quant.layout`).

The kernel attends in the rotated basis, so no key or value is ever rotated back: with ``y = Pi k / ||k||`` and its
reconstruction ``c[idx] + sqrt(pi/2) / D * gamma * S^T z``,

    ``q . k~ = ||k|| (q_r . c[idx] + sqrt(pi/2) / D * gamma * (S q_r) . z)``,  ``q_r = Pi q``,

and ``sum_j p_j v~_j = Pi^T sum_j p_j ||v_j|| c_v[idx_j]``. A call is three or four launches: the query projections
(``q_r``; QJL: ``S q_r``; :func:`anna_xpu_kernels.turboquant_basis.rotate_queries`), the attention kernel, and the split
merge with the output's rotation back and cast (:func:`~anna_xpu_kernels.turboquant_basis.merge_and_rotate_back`).
The kernel reads each key row's two norms, ``bits - 1`` code planes and sign plane and each value row's norm and
``bits`` planes (each plane once, as 32-bit words unpacked in registers: :mod:`anna_xpu_kernels.turboquant_codes`,
``spread`` over the threads or, with ``ANNA_TURBOQUANT_DECODE=words``, whole words per thread with the decoded
columns permuted within each word and the query and output columns permuted to match), looks the codes up in the
(tiny, cached) codebooks and runs the same online softmax as :mod:`anna_xpu_kernels.paged_attention`: GQA
packing (the query heads of one KV head are the rows of one tile), tiles numbered on the device
(:mod:`anna_xpu_kernels.attention_plan`; no host sync, so decode and prefill calls can be graph-captured),
flash-decoding splits. The values' norms scale the probabilities, not the centroids. Dots take bf16 operands on
tensor cores for a bf16 / fp16 query and float32 (``ieee``) ones for a float32 query, accumulating in float32
(:class:`~anna_xpu_kernels.turboquant_launch.TurboQuantTuning` overrides it and the launch settings, chosen by
:mod:`anna_xpu_kernels.turboquant_launch`). Head dims up to 512, padded to a power of two;
above 256 each key tile is decoded, dotted and accumulated in two column chunks of the head dim (``D_CHUNKS``), so
no full-width decoded tile is live at once (the one-chunk kernel spilled registers at 512). With a residual ring only
the key tiles from ``valid_len - R`` on (the sequence's real length: a padded prefill's padding rows are not its
newest positions) look the ring up (a second loop, of at most 16 keys per tile), so the rest carry none of its
registers.
"""

from __future__ import annotations

import math

import torch
from anna_core.kernels.checks import (
    check_turboquant_caches,
    check_turboquant_tables,
    keys_have_qjl,
    num_sequences,
    require,
    require_dims,
)

from anna_xpu_kernels._checks import require_float, require_same_device
from anna_xpu_kernels._env import turboquant_decode_requested
from anna_xpu_kernels._triton import INTERPRETING, next_pow2, tl, triton
from anna_xpu_kernels.attention_plan import plan_attention
from anna_xpu_kernels.paged_attention import LOG2E, WIDE_HEAD_DIM
from anna_xpu_kernels.turboquant_basis import merge_and_rotate_back, rotate_queries
from anna_xpu_kernels.turboquant_codes import (
    LOOKUPS,
    UNPACKS,
    centroids,
    codes_spread,
    codes_words,
    signs,
    word_order,
)
from anna_xpu_kernels.turboquant_launch import DOTS, TurboQuantTuning, launch_settings

MAX_HEAD_DIM = 512


@triton.jit
def _dot(a, b, DOT: tl.constexpr):
    """``a @ b`` float32: bf16 operands on tensor cores (``DOT`` 0), tf32 (1), float32 ``ieee`` (2), or the operands
    rounded to bf16 and multiplied in float32 (3: bf16 under the interpreter, whose bf16 ``tl.dot`` is wrong)."""
    if DOT == 0:
        return tl.dot(a.to(tl.bfloat16), b.to(tl.bfloat16))
    elif DOT == 3:
        return tl.dot(a.to(tl.bfloat16).to(tl.float32), b.to(tl.bfloat16).to(tl.float32), input_precision="ieee")
    elif DOT == 1:
        return tl.dot(a, b, input_precision="tf32")
    else:
        return tl.dot(a, b, input_precision="ieee")


@triton.jit
def _rows_chunk(ptr, off, ok, d, head_dim, C: tl.constexpr, CHUNK_D: tl.constexpr):
    """Columns ``[C * CHUNK_D, (C + 1) * CHUNK_D)`` of the rows at element offsets ``off`` ``[N]`` (``[N, CHUNK_D]``
    as stored; rows not ``ok`` and columns past ``head_dim`` read 0)."""
    dc = C * CHUNK_D + d
    return tl.load(ptr + off[:, None] + dc[None, :], mask=ok[:, None] & (dc < head_dim)[None, :], other=0.0)


@triton.jit
def _key_chunk(qr, qs, kwords_ptr, kc_ptr, k_words, k_ok, C: tl.constexpr, KBITS: tl.constexpr, PLANE_W: tl.constexpr,
               CHUNK_W: tl.constexpr, UNIT: tl.constexpr, K_FIRST: tl.constexpr, Z_FIRST: tl.constexpr,
               QJL: tl.constexpr, DOT: tl.constexpr, LOOKUP: tl.constexpr, UNPACK: tl.constexpr,
               OPAQUE: tl.constexpr):
    """Column chunk ``C``'s share ``[M, N]`` float32 of ``q_r . c[idx]`` and (with ``QJL``; else a copy of the first)
    of ``(S q_r) . z`` for the key rows at word offsets ``k_words`` ``[N]``: only ``CHUNK_W`` words of each plane are
    decoded at a time, so the decoded tile is ``[N, CHUNK_D]``, not ``[N, BLOCK_D]``."""
    n_words = PLANE_W - C * CHUNK_W
    if UNPACK == 1:  # the lane lookup reads the code's bits only: no mask
        idx = codes_words(kwords_ptr, k_words, K_FIRST + C * CHUNK_W, n_words, k_ok, KBITS, PLANE_W, CHUNK_W, UNIT)
        idx = (idx if LOOKUP == 3 else idx & 0xF).to(tl.int32, bitcast=True)
    else:
        idx = codes_spread(kwords_ptr, k_words, K_FIRST + C * CHUNK_W, n_words, k_ok, KBITS, PLANE_W, CHUNK_W, UNIT)
    s = _dot(qr, tl.trans(centroids(kc_ptr, idx, 1 << KBITS, LOOKUP, DOT == 0, OPAQUE)), DOT)
    sz = s
    if QJL:
        if UNPACK == 1:
            bits = codes_words(kwords_ptr, k_words, Z_FIRST + C * CHUNK_W, n_words, k_ok, 1, PLANE_W, CHUNK_W, UNIT)
        else:
            bits = codes_spread(kwords_ptr, k_words, Z_FIRST + C * CHUNK_W, n_words, k_ok, 1, PLANE_W, CHUNK_W, UNIT)
        sz = _dot(qs, tl.trans(signs(bits, DOT == 0 and UNPACK == 1, OPAQUE)), DOT)
    return s, sz


@triton.jit
def _value_chunk(acc, alpha, pv, vwords_ptr, vc_ptr, v_words, k_ok, rv_ptr, r_off, in_ring, d, head_dim,
                 nv_ptr, n_off, from_new, pe, C: tl.constexpr, CHUNK_D: tl.constexpr, VBITS: tl.constexpr,
                 PLANE_W: tl.constexpr, CHUNK_W: tl.constexpr, UNIT: tl.constexpr, V_FIRST: tl.constexpr,
                 HAS_RING: tl.constexpr, PER_QUERY: tl.constexpr, DOT: tl.constexpr, LOOKUP: tl.constexpr,
                 UNPACK: tl.constexpr, OPAQUE: tl.constexpr):
    """The accumulator of column chunk ``C`` ``[M, CHUNK_D]`` float32 rescaled by ``alpha`` ``[M]`` plus
    ``pv @ c_v[idx]`` over the value rows at word offsets ``v_words`` (``pv``: the probabilities times the values'
    norms, ``[M, N]``); ring rows (``in_ring``) read from ``rv_ptr`` instead. ``PER_QUERY``: the exact rows
    (the ring's where ``in_ring``, the step's own at ``nv_ptr`` where ``from_new``) are added as ``pe @ rows``
    (``pe`` ``[M, N]``: the probabilities of the keys each query reads exactly; ``pv`` zero there) instead."""
    if UNPACK == 1:  # the lane lookup reads the code's bits only: no mask
        idx = codes_words(vwords_ptr, v_words, V_FIRST + C * CHUNK_W, PLANE_W - C * CHUNK_W, k_ok, VBITS, PLANE_W,
                          CHUNK_W, UNIT)
        idx = (idx if LOOKUP == 3 else idx & 0xF).to(tl.int32, bitcast=True)
    else:
        idx = codes_spread(vwords_ptr, v_words, V_FIRST + C * CHUNK_W, PLANE_W - C * CHUNK_W, k_ok, VBITS, PLANE_W,
                           CHUNK_W, UNIT)
    v_c = centroids(vc_ptr, idx, 1 << VBITS, LOOKUP, DOT == 0, OPAQUE)
    if PER_QUERY:
        exact = (_rows_chunk(rv_ptr, r_off, in_ring, d, head_dim, C, CHUNK_D).to(tl.float32)
                 + _rows_chunk(nv_ptr, n_off, from_new, d, head_dim, C, CHUNK_D).to(tl.float32)).to(v_c.dtype)
        return acc * alpha[:, None] + _dot(pv, v_c, DOT) + _dot(pe.to(pv.dtype), exact, DOT)
    if HAS_RING:
        ring = _rows_chunk(rv_ptr, r_off, in_ring, d, head_dim, C, CHUNK_D).to(v_c.dtype)
        v_c = tl.where(in_ring[:, None], ring, v_c)
    return acc * alpha[:, None] + _dot(pv, v_c, DOT)


@triton.jit
def _store_chunk(acc, l_i, o_ptr, o_off, acc_ws_ptr, ws_row, row_ok, d, head_dim, C: tl.constexpr,
                 CHUNK_D: tl.constexpr, BLOCK_D: tl.constexpr, SPLIT: tl.constexpr):
    """Column chunk ``C`` of the tile's result: ``acc / l`` into ``o`` (rows at ``o_off``), or (``SPLIT``) the
    unnormalised ``acc`` into the split workspace's ``BLOCK_D``-wide rows ``ws_row``."""
    dc = C * CHUNK_D + d
    if not SPLIT:
        out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
        tl.store(o_ptr + o_off[:, None] + dc[None, :], out, mask=row_ok[:, None] & (dc < head_dim)[None, :])
    else:
        tl.store(acc_ws_ptr + ws_row[:, None] * BLOCK_D + dc[None, :], acc, mask=row_ok[:, None])


@triton.jit
def _attend_tile(m_i, l_i, acc0, acc1, qr0, qs0, qr1, qs1, start, hi, seq, h_kv, ring_lo, qpos, d, kwords_ptr, kf_ptr,
                 vwords_ptr, vf_ptr, kc_ptr, vc_ptr, tables_ptr, rk_ptr, rv_ptr, rpos_ptr, ring_slot, ring_len, head_dim,
                 block_size, qk_scale, qjl_coef, window, stride_kb, stride_kt, stride_kh, stride_vb, stride_vt,
                 stride_vh, stride_tb, stride_rs, stride_rr, stride_rh, nk_ptr, nv_ptr, new_base, cstart, stride_nt,
                 stride_nh, PER_QUERY: tl.constexpr, KBITS: tl.constexpr, VBITS: tl.constexpr,
                 UNIT: tl.constexpr, PLANE_W: tl.constexpr, CHUNK_W: tl.constexpr, CHUNK_D: tl.constexpr,
                 K_FIRST: tl.constexpr, Z_FIRST: tl.constexpr, V_FIRST: tl.constexpr, HAS_WINDOW: tl.constexpr,
                 HAS_RING: tl.constexpr, QJL: tl.constexpr, BLOCK_N: tl.constexpr, DOT: tl.constexpr,
                 LOOKUP: tl.constexpr, D_CHUNKS: tl.constexpr, UNPACK: tl.constexpr, OPAQUE: tl.constexpr):
    """One key tile ``[start, start + BLOCK_N)`` (keys below ``hi``) of the online softmax: scores from the
    quantized rows (with ``HAS_RING``: the ring's exact rows where it holds the position, one of the sequence's newest
    ``ring_lo .. ring_lo + ring_len - 1``), then the rescaled accumulators. Returns ``(m_i, l_i, acc0, acc1)`` (``acc1``: passed through with one chunk).

    ``PER_QUERY`` (with ``HAS_RING``; a multi-query step given the step's own rows): query ``qpos`` reads key
    ``kpos`` exactly iff ``qpos - ring_len < kpos``: positions from ``cstart`` on (the sequence's first new one) from
    ``nk_ptr`` / ``nv_ptr`` (row ``new_base + kpos``), earlier ones from the ring where it holds them."""
    kpos = start + tl.arange(0, BLOCK_N)
    k_ok = kpos < hi
    blk = tl.load(tables_ptr + seq * stride_tb + kpos // block_size, mask=k_ok, other=0).to(tl.int64)
    slot = kpos % block_size
    k_row = blk * stride_kb + slot * stride_kt + h_kv * stride_kh  # bytes (rows are 4-byte aligned)
    v_row = blk * stride_vb + slot * stride_vt + h_kv * stride_vh
    k_norm = tl.load(kf_ptr + k_row // 4, mask=k_ok, other=0.0)
    k_words = k_row // (UNIT // 8)
    s, sz = _key_chunk(qr0, qs0, kwords_ptr, kc_ptr, k_words, k_ok, 0, KBITS, PLANE_W, CHUNK_W, UNIT, K_FIRST,
                       Z_FIRST, QJL, DOT, LOOKUP, UNPACK, OPAQUE)
    if D_CHUNKS == 2:
        s1, sz1 = _key_chunk(qr1, qs1, kwords_ptr, kc_ptr, k_words, k_ok, 1, KBITS, PLANE_W, CHUNK_W, UNIT,
                             K_FIRST, Z_FIRST, QJL, DOT, LOOKUP, UNPACK, OPAQUE)
        s += s1
        sz += sz1
    if QJL:
        gamma = tl.load(kf_ptr + k_row // 4 + 1, mask=k_ok, other=0.0)
        s += (qjl_coef * gamma)[None, :] * sz
    s = s * (k_norm * qk_scale)[None, :]  # log2 units
    in_ring = kpos < 0  # no ring: nothing read from one
    r_off = k_row
    from_new = in_ring
    n_off = k_row
    use = in_ring[None, :]
    if PER_QUERY:  # each query's newest ring_len keys exactly: the step's own rows, else the ring's before the step
        ring_i = kpos % ring_len
        from_new = k_ok & (kpos >= cstart)
        old = k_ok & (kpos < cstart) & (kpos >= cstart - ring_len)
        in_ring = tl.load(rpos_ptr + ring_slot * ring_len + ring_i, mask=old, other=-1) == kpos
        r_off = ring_slot * stride_rs + ring_i * stride_rr + h_kv * stride_rh
        n_off = (new_base + kpos) * stride_nt + h_kv * stride_nh
        use = (in_ring | from_new)[None, :] & (kpos[None, :] > qpos[:, None] - ring_len)
        s_ring = _dot(qr0, tl.trans(_rows_chunk(rk_ptr, r_off, in_ring, d, head_dim, 0, CHUNK_D).to(tl.float32)
                                     + _rows_chunk(nk_ptr, n_off, from_new, d, head_dim, 0, CHUNK_D)
                                     .to(tl.float32)), DOT)
        if D_CHUNKS == 2:
            s_ring += _dot(qr1, tl.trans(_rows_chunk(rk_ptr, r_off, in_ring, d, head_dim, 1, CHUNK_D)
                                          .to(tl.float32)
                                          + _rows_chunk(nk_ptr, n_off, from_new, d, head_dim, 1, CHUNK_D)
                                          .to(tl.float32)), DOT)
        s = tl.where(use, s_ring * qk_scale, s)
    elif HAS_RING:  # the newest positions the sequence's ring holds: their exact (rotated) rows instead
        ring_i = kpos % ring_len
        newest = (kpos >= ring_lo) & (kpos < ring_lo + ring_len)
        in_ring = tl.load(rpos_ptr + ring_slot * ring_len + ring_i, mask=k_ok & newest, other=-1) == kpos
        r_off = ring_slot * stride_rs + ring_i * stride_rr + h_kv * stride_rh
        s_ring = _dot(qr0, tl.trans(_rows_chunk(rk_ptr, r_off, in_ring, d, head_dim, 0, CHUNK_D).to(tl.float32)),
                      DOT)
        if D_CHUNKS == 2:
            s_ring += _dot(qr1, tl.trans(_rows_chunk(rk_ptr, r_off, in_ring, d, head_dim, 1, CHUNK_D)
                                         .to(tl.float32)), DOT)
        s = tl.where(in_ring[None, :], s_ring * qk_scale, s)
    seen = k_ok[None, :] & (kpos[None, :] <= qpos[:, None])
    if HAS_WINDOW:
        seen = seen & (kpos[None, :] > qpos[:, None] - window)
    s = tl.where(seen, s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, axis=1))
    m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.exp2(m_i - m_ref)
    p = tl.exp2(s - m_ref[:, None])
    l_i = l_i * alpha + tl.sum(p, axis=1)
    # sum_j p_j ||v_j|| c[idx_j]: the norms scale the probabilities ([M, N]), not the centroids ([N, D])
    v_norm = tl.load(vf_ptr + v_row // 4, mask=k_ok, other=0.0)
    pe = p
    if PER_QUERY:
        pe = tl.where(use, p, 0.0)
        pv = tl.where(use, 0.0, p * v_norm[None, :])
    else:
        if HAS_RING:
            v_norm = tl.where(in_ring, 1.0, v_norm)
        pv = p * v_norm[None, :]
    v_words = v_row // (UNIT // 8)
    acc0 = _value_chunk(acc0, alpha, pv, vwords_ptr, vc_ptr, v_words, k_ok, rv_ptr, r_off, in_ring, d, head_dim,
                        nv_ptr, n_off, from_new, pe, 0, CHUNK_D, VBITS, PLANE_W, CHUNK_W, UNIT, V_FIRST, HAS_RING,
                        PER_QUERY, DOT, LOOKUP, UNPACK, OPAQUE)
    if D_CHUNKS == 2:
        acc1 = _value_chunk(acc1, alpha, pv, vwords_ptr, vc_ptr, v_words, k_ok, rv_ptr, r_off, in_ring, d,
                            head_dim, nv_ptr, n_off, from_new, pe, 1, CHUNK_D, VBITS, PLANE_W, CHUNK_W, UNIT, V_FIRST,
                            HAS_RING, PER_QUERY, DOT, LOOKUP, UNPACK, OPAQUE)
    m_i = m_new
    return m_i, l_i, acc0, acc1


@triton.jit(do_not_specialize=['batch', 'n_tokens', 'num_splits', 'window', 'stride_tb'])
def _tq_attention_kernel(
    qr_ptr, qs_ptr, kwords_ptr, kf_ptr, vwords_ptr, vf_ptr, kc_ptr, vc_ptr, cu_q_ptr, seq_lens_ptr, tables_ptr,
    tile_seq_ptr, tile_first_ptr, o_ptr, m_ws_ptr, l_ws_ptr, acc_ws_ptr, rk_ptr, rv_ptr, rpos_ptr, slots_ptr, valid_ptr,
    nk_ptr, nv_ptr,
    batch, n_tokens, head_dim, block_size, num_splits, qk_scale, qjl_coef, window, ring_len,
    stride_qt, stride_qh, stride_kb, stride_kt, stride_kh, stride_vb, stride_vt, stride_vh, stride_tb,
    stride_ot, stride_oh, stride_rs, stride_rr, stride_rh, stride_nt, stride_nh,
    GROUP: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr,
    KBITS: tl.constexpr, VBITS: tl.constexpr, UNIT: tl.constexpr, PLANE_W: tl.constexpr, BLOCK_W: tl.constexpr,
    K_FIRST: tl.constexpr, Z_FIRST: tl.constexpr, V_FIRST: tl.constexpr, HAS_WINDOW: tl.constexpr,
    SPLIT: tl.constexpr, DECODE: tl.constexpr, HAS_RING: tl.constexpr, QJL: tl.constexpr, BLOCK_N: tl.constexpr,
    DOT: tl.constexpr, LOOKUP: tl.constexpr, D_CHUNKS: tl.constexpr, RING_N: tl.constexpr, UNPACK: tl.constexpr = 0,
    OPAQUE: tl.constexpr = False, PER_QUERY: tl.constexpr = False,
):
    CHUNK_D: tl.constexpr = BLOCK_D // D_CHUNKS
    CHUNK_W: tl.constexpr = BLOCK_W // D_CHUNKS
    tile = tl.program_id(0)
    h_kv = tl.program_id(1)
    split = tl.program_id(2)
    if DECODE:  # one query per sequence: tile i is sequence i, query row i
        seq = tile
        q_start = tile
        q_len = 1
        q0 = 0
    else:
        seq_raw = tl.load(tile_seq_ptr + tile)
        live = seq_raw < batch
        seq = tl.minimum(seq_raw, batch - 1)
        q_start = tl.load(cu_q_ptr + seq)
        q_len = tl.where(live, tl.load(cu_q_ptr + seq + 1) - q_start, 0)
        q0 = (tile - tl.load(tile_first_ptr + seq)) * BLOCK_Q
    ctx = tl.load(seq_lens_ptr + seq)

    r = tl.arange(0, BLOCK_M)
    qi = q0 + r // GROUP
    row_ok = (r < BLOCK_Q * GROUP) & (qi < q_len)
    head = h_kv * GROUP + r % GROUP
    tok = (q_start + qi).to(tl.int64)
    qpos = ctx - q_len + qi
    d = tl.arange(0, CHUNK_D)
    if UNPACK == 1:  # the decoded tiles' column order (codes_words): no data moves, the query and output follow it
        d = word_order(d, UNIT)
    q_off = tok * stride_qt + head * stride_qh
    # Pi q and S Pi q in D_CHUNKS column chunks, zero past head_dim: the padded coordinates' codes (0) then add
    # nothing to the scores
    qr0 = _rows_chunk(qr_ptr, q_off, row_ok, d, head_dim, 0, CHUNK_D)
    qs0 = _rows_chunk(qs_ptr, q_off, row_ok, d, head_dim, 0, CHUNK_D)
    if DOT == 0:
        qr0 = qr0.to(tl.bfloat16)
        qs0 = qs0.to(tl.bfloat16)
    if D_CHUNKS == 2:
        qr1 = _rows_chunk(qr_ptr, q_off, row_ok, d, head_dim, 1, CHUNK_D)
        qs1 = _rows_chunk(qs_ptr, q_off, row_ok, d, head_dim, 1, CHUNK_D)
        if DOT == 0:
            qr1 = qr1.to(tl.bfloat16)
            qs1 = qs1.to(tl.bfloat16)

    hi = tl.where(q_len > 0, ctx - q_len + tl.minimum(q0 + BLOCK_Q, q_len), 0)
    lo = 0
    if HAS_WINDOW:
        lo = tl.maximum(ctx - q_len + q0 - window + 1, 0)
    if SPLIT:
        per_split = tl.cdiv(tl.cdiv(tl.maximum(hi - lo, 0), num_splits), BLOCK_N) * BLOCK_N
        lo = lo + split * per_split
        hi = tl.minimum(hi, lo + per_split)

    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_M,), tl.float32)
    acc0 = tl.zeros((BLOCK_M, CHUNK_D), tl.float32)
    if D_CHUNKS == 2:
        acc1 = tl.zeros((BLOCK_M, CHUNK_D), tl.float32)
    if D_CHUNKS == 1:
        acc1 = acc0  # unused
        qr1 = qr0
        qs1 = qs0
    ring_slot = 0
    ring_lo = 0
    mid = hi
    cstart = ctx - q_len  # the sequence's first new position
    new_base = q_start.to(tl.int64) - cstart  # its new rows: position p at row new_base + p
    if HAS_RING:  # the ring may hold the sequence's newest positions (of its real length): only those tiles look it up
        ring_slot = tl.load(slots_ptr + seq).to(tl.int64)
        ring_lo = tl.load(valid_ptr + seq) - ring_len
        if PER_QUERY:  # keys within ring_len of the tile's first query: the only ones any of its queries reads exactly
            ring_lo = cstart + q0 - ring_len + 1
        mid = tl.minimum(tl.maximum(ring_lo, lo), hi)
    for start in range(lo, mid, BLOCK_N):
        m_i, l_i, acc0, acc1 = _attend_tile(
            m_i, l_i, acc0, acc1, qr0, qs0, qr1, qs1, start, mid, seq, h_kv, ring_lo, qpos, d, kwords_ptr, kf_ptr,
            vwords_ptr, vf_ptr, kc_ptr, vc_ptr, tables_ptr, rk_ptr, rv_ptr, rpos_ptr, ring_slot, ring_len, head_dim,
            block_size, qk_scale, qjl_coef, window, stride_kb, stride_kt, stride_kh, stride_vb, stride_vt, stride_vh,
            stride_tb, stride_rs, stride_rr, stride_rh, nk_ptr, nv_ptr, new_base, cstart, stride_nt, stride_nh, False,
            KBITS, VBITS, UNIT, PLANE_W, CHUNK_W, CHUNK_D, K_FIRST,
            Z_FIRST, V_FIRST, HAS_WINDOW, False, QJL, BLOCK_N, DOT, LOOKUP, D_CHUNKS, UNPACK, OPAQUE)
    if HAS_RING:
        for start in range(mid, hi, RING_N):
            m_i, l_i, acc0, acc1 = _attend_tile(
                m_i, l_i, acc0, acc1, qr0, qs0, qr1, qs1, start, hi, seq, h_kv, ring_lo, qpos, d, kwords_ptr, kf_ptr,
                vwords_ptr, vf_ptr, kc_ptr, vc_ptr, tables_ptr, rk_ptr, rv_ptr, rpos_ptr, ring_slot, ring_len,
                head_dim, block_size, qk_scale, qjl_coef, window, stride_kb, stride_kt, stride_kh, stride_vb,
                stride_vt, stride_vh, stride_tb, stride_rs, stride_rr, stride_rh, nk_ptr, nv_ptr, new_base, cstart,
                stride_nt, stride_nh, PER_QUERY, KBITS, VBITS, UNIT, PLANE_W, CHUNK_W,
                CHUNK_D, K_FIRST, Z_FIRST, V_FIRST, HAS_WINDOW, True, QJL, RING_N, DOT, LOOKUP, D_CHUNKS, UNPACK,
                OPAQUE)

    o_off = tok * stride_ot + head * stride_oh
    n_heads = tl.num_programs(1) * GROUP
    ws_row = (split * n_tokens + tok) * n_heads + head
    if SPLIT:
        tl.store(m_ws_ptr + ws_row, m_i, mask=row_ok)
        tl.store(l_ws_ptr + ws_row, l_i, mask=row_ok)
    _store_chunk(acc0, l_i, o_ptr, o_off, acc_ws_ptr, ws_row, row_ok, d, head_dim, 0, CHUNK_D, BLOCK_D, SPLIT)
    if D_CHUNKS == 2:
        _store_chunk(acc1, l_i, o_ptr, o_off, acc_ws_ptr, ws_row, row_ok, d, head_dim, 1, CHUNK_D, BLOCK_D, SPLIT)


def paged_attention_turboquant(q, k_cache, v_cache, cu_seqlens_q, seq_lens, block_tables, scale, sliding_window,
                               rotation, qjl, key_centroids, value_centroids, residual_k=None, residual_v=None,
                               residual_pos=None, slots=None, valid_lens=None, new_k=None, new_v=None, *,
                               num_splits: int | None = None, tuning: TurboQuantTuning | None = None):
    """``paged_attention_turboquant`` (signature and rule of the reference) in the rotated basis (module docstring);
    a residual ring's rows are read as stored (already rotated).

    With ``new_k`` / ``new_v`` (the per-query window) a multi-query step reads them and the ring on its
    multi-query path (constexpr ``PER_QUERY``); a decode step (one query per sequence) reads the ring alone, as
    without them: the caller has written each sequence's first new position there (the contract allows either).

    Args:
        num_splits: key partitions per tile (None: chosen for the GPU, as ``paged_attention``'s).
        tuning: launch settings (None: :class:`TurboQuantTuning`'s defaults).

    Returns:
        ``[T, H_q, D]`` in q's dtype.

    Raises:
        ValueError: inconsistent shapes, tables or row widths (the reference's checks), a head dim above 512, a
            ``tuning.d_chunks`` that leaves chunks narrower than 16, a ``lane`` lookup off NVIDIA CUDA, an unknown
            ``ANNA_TURBOQUANT_DECODE`` (on CUDA).
    """
    op = "paged_attention_turboquant"
    tuning = tuning or TurboQuantTuning()
    require_dims(op, q=(q, 3), seq_lens=(seq_lens, 1), block_tables=(block_tables, 2))
    batch = num_sequences(op, cu_seqlens_q, "cu_seqlens_q")
    total, h_q, dim = q.shape
    kbits, vbits = check_turboquant_tables(op, dim, rotation, qjl, key_centroids, value_centroids)
    check_turboquant_caches(op, k_cache, v_cache, dim, kbits, vbits)
    require(dim <= MAX_HEAD_DIM, op, f"head dim {dim} above {MAX_HEAD_DIM}")
    require_float(op, q=q)
    require_same_device(op, q=q, k_cache=k_cache, v_cache=v_cache, seq_lens=seq_lens, block_tables=block_tables,
                        rotation=rotation)
    _, block_size, h_kv, _ = k_cache.shape
    require(h_q % h_kv == 0, op, f"H_q={h_q} must be a multiple of H_kv={h_kv}")
    require(sliding_window is None or sliding_window >= 1, op, f"sliding_window must be >= 1, got {sliding_window}")
    if total == 0 or batch == 0:
        return torch.empty_like(q)
    with_qjl = keys_have_qjl(kbits, vbits)
    q_r, q_s = rotate_queries(q, rotation, qjl, with_qjl)  # [T, H_q, D] float32 (q_s unused without QJL)
    o = torch.empty((total, h_q, dim), dtype=torch.float32, device=q.device)

    block_d = max(16, next_pow2(dim))
    # the tiles are float32 (twice paged_attention's bf16 bytes), so a head dim of 256 already takes the wide
    # settings: 64 rows x 256 float32 for q, its QJL projection and 32-key K / V tiles, pipelined, asked for 257 KiB
    # of shared memory on an H100 (228 KiB), and failed to launch at the Qwen3.5-9B shape (a 512-wide head: 16 rows)
    wide = block_d * 2 > WIDE_HEAD_DIM
    rows = 64 if not wide else 32 if block_d <= WIDE_HEAD_DIM else 16
    decode = total == batch
    on_cuda = q.device.type == "cuda" and torch.version.hip is None and not INTERPRETING  # inline PTX runs there
    launch = launch_settings(tuning, decode, block_d, sliding_window is not None,
                             turboquant_decode_requested() if on_cuda else "spread")
    lookup = launch.lookup
    if lookup == "lane" and not on_cuda:  # inline PTX: the interpreter takes the same values from a gather
        require(INTERPRETING, op, f"the lane lookup is inline PTX (NVIDIA CUDA only), got a {q.device.type} tensor")
        lookup = "gather"
    require(block_d // launch.d_chunks >= 16, op, f"d_chunks={launch.d_chunks} needs a padded head dim of at least "
            f"{16 * launch.d_chunks}, got {block_d}")
    plan = plan_attention(cu_seqlens_q, batch, total, h_q, h_kv, dim, block_tables.shape[1] * block_size, rows,
                          num_splits or launch.splits)
    splits = plan.splits
    m_ws, l_ws, acc_ws = plan.workspace(h_q, q.device) or (o, o, o)  # unused without splits
    ring = residual_pos is not None
    if ring:
        require(residual_k.shape == residual_v.shape and residual_k.dim() == 4 and residual_k.stride(3) == 1
                and residual_k.stride() == residual_v.stride() and tuple(residual_k.shape[2:]) == (h_kv, dim)
                and tuple(residual_pos.shape) == tuple(residual_k.shape[:2]) and residual_pos.is_contiguous()
                and slots is not None and slots.shape[0] == batch, op,
                "residual_k / residual_v [S, R, H_kv, D], residual_pos [S, R] and slots [B] must agree")
        require(valid_lens is None or (valid_lens.dim() == 1 and valid_lens.shape[0] == batch), op,
                f"valid_lens must be [B]={batch}")
        rk, rv, rpos, ring_slots = residual_k, residual_v, residual_pos, slots
        valid = seq_lens if valid_lens is None else valid_lens.to(torch.int32)
        ring_len, ring_strides = residual_pos.shape[1], residual_k.stride()[:3]
    else:
        rk = rv = rpos = ring_slots = valid = o  # unused
        ring_len, ring_strides = 1, (0, 0, 0)
    require((new_k is None) == (new_v is None), op, "new_k and new_v must be given together")
    require(new_k is None or ring, op, "new_k / new_v need a residual ring")
    require(new_k is None or (tuple(new_k.shape) == tuple(new_v.shape) == (total, h_kv, dim)
                              and new_k.stride() == new_v.stride() and new_k.stride(2) == 1), op,
            f"new_k and new_v must be [T, H_kv, D]={(total, h_kv, dim)} with the same strides")
    # a decode step reads the ring alone: the caller wrote each query's own position there first (the contract)
    per_query = new_k is not None and not decode
    nk, nv = (new_k, new_v) if per_query else (o, o)
    new_strides = nk.stride()[:2]
    dot = tuning.dot or ("ieee" if q.dtype == torch.float32 else "bf16")
    # code planes read as 32-bit words where a plane is whole words (head dims that are multiples of 32), else bytes
    unit = 32 if dim % 32 == 0 else 8
    unit_bytes = unit // 8
    plane = dim // 8  # bytes
    k_words, v_words = (k_cache.view(torch.int32), v_cache.view(torch.int32)) if unit == 32 else (k_cache, v_cache)
    k_first = 8 if with_qjl else 4  # bytes: the norms
    _tq_attention_kernel[(plan.n_tiles, h_kv, splits)](
        q_r, q_s, k_words, k_cache.view(torch.float32), v_words, v_cache.view(torch.float32), key_centroids,
        value_centroids, plan.cu, seq_lens, block_tables, plan.tile_seq, plan.tile_first, o, m_ws, l_ws, acc_ws,
        rk, rv, rpos, ring_slots, valid, nk, nv,
        batch, total, dim, block_size, splits, float(scale) * LOG2E, math.sqrt(math.pi / 2) / dim,
        int(sliding_window or 0), ring_len,
        q_r.stride(0), q_r.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2), block_tables.stride(0), o.stride(0), o.stride(1),
        *ring_strides, *new_strides,
        GROUP=plan.group, BLOCK_Q=plan.block_q, BLOCK_M=plan.block_m, BLOCK_D=block_d, KBITS=kbits, VBITS=vbits,
        UNIT=unit,
        PLANE_W=plane // unit_bytes, BLOCK_W=block_d // unit, K_FIRST=k_first // unit_bytes,
        Z_FIRST=(k_first + kbits * plane) // unit_bytes, V_FIRST=4 // unit_bytes,
        HAS_WINDOW=sliding_window is not None, SPLIT=splits > 1, DECODE=decode, HAS_RING=ring, QJL=with_qjl,
        BLOCK_N=launch.block_n, DOT=3 if INTERPRETING and dot == "bf16" else DOTS.index(dot),
        LOOKUP=LOOKUPS.index(lookup), D_CHUNKS=launch.d_chunks, RING_N=min(launch.block_n, 16),
        UNPACK=UNPACKS.index(launch.unpack), OPAQUE=launch.opaque and lookup == "lane", num_warps=launch.num_warps,
        num_stages=launch.num_stages, **({"maxnreg": launch.max_registers} if launch.max_registers else {}),
        PER_QUERY=per_query,
    )
    workspace = (m_ws, l_ws, acc_ws) if splits > 1 else None
    return merge_and_rotate_back(o, workspace, splits, rotation, q.dtype)
