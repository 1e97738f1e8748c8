"""Causal attention over the paged KV cache in Triton: decode, prefill and chunked prefill, GQA, splits.

Math: ``softmax(scale * q K^T) V`` (Vaswani et al., 2017) over each sequence's cached positions,
causal and optionally windowed, exactly the rule of the torch reference
(:func:`anna_core.kernels.reference.paged_attention.paged_attention`): query ``j`` of sequence ``i``
sits at position ``seq_lens[i] - q_len_i + j`` and sees keys at positions ``p <= pos`` (and
``p > pos - sliding_window``). Softmax is computed online (Milakov & Gimelshein 2018; Dao et al.,
"FlashAttention", 2022) in float32 with base-2 exponentials.

Layout of the work:

* A *tile* is up to ``BLOCK_Q`` consecutive queries of one sequence times the ``GROUP = H_q / H_kv``
  query heads sharing one KV head, packed as the ``BLOCK_M`` rows of one matrix (GQA packing): the
  KV blocks are read once per tile, not once per query head. Decode batches use ``BLOCK_Q = 1``.
* Tiles of all sequences are numbered on the device (``tile_first``: exclusive cumsum of
  ``ceil(q_len / BLOCK_Q)``; ``tile_seq``: the owning sequence of each tile); the grid size is a
  host-known upper bound, so there is no host synchronisation and the call can be graph-captured.
* Keys are gathered per position through the block table (any cache block size).
* When tiles x KV heads cannot fill the GPU (decode at small batch), each tile's visible key range
  is split on the device into ``num_splits`` equal partitions (flash-decoding; the partition follows
  the sequence's actual context, not the block-table width, so short contexts still use every
  split); partial ``(max, sum, acc)`` triples are merged by a second kernel, or, for a decode batch with the
  fused merge switched on (:func:`anna_xpu_kernels._env.attention_fused_merge_splits`), inside the attention
  launch by the last split of each sequence and KV head to arrive (an acquire-release arrival counter, as
  :mod:`anna_xpu_kernels.gdn_decode_fused` and the split-K GEMV use; no second launch). That program reads every
  split's ``(max, sum)`` at once, then adds the ``acc`` partials weighted by ``exp2(max_s - max)`` several splits
  per load (no running rescale; only the ``GROUP`` real rows, not the query tile's padding), so its serial tail is
  one pass over ``splits x GROUP x D`` float32 values from L2 by one multiprocessor; the fused mode therefore caps
  the split count (the merge's cost grows with it) and takes only launches whose visible keys (the window, or the
  block table's width) that cap splits into short runs (:func:`_fuses_merge`). The
  eighteenth session measured an earlier in-launch merge (a running rescale over 64 splits) at twice the merge
  kernel's time on an H100; this one is opt-in until measured.
* Nothing that changes with the prompt length, the context or the block-table width is a compile-
  time constant or an autotuning key: ``num_splits`` is a run-time argument (only "split or not"
  is a constexpr), so serving never re-compiles or re-tunes as requests vary. Decode batches
  (one query per sequence) skip the tile numbering entirely (``DECODE``: tile ``i`` is sequence ``i``).
* ``q_norm_rope_attention`` (a KV-shared layer, which writes no K/V): the kernel loads each raw query row with its
  rotary partner, RMS-normalises and rotates it in registers (``Q_NORM_ROPE``; the ``q_norm_rope`` op's math and
  roundings, positions read per token), so the layer's query pre-processing needs no launch of its own. Every split
  program of a tile redoes this for its ``BLOCK_M`` rows (a few KiB, from L2).
* ``qkv_norm_rope_cache_attention`` at decode (a Gemma 4 layer with its own K/V): the same, and each program also
  computes its KV head's new key (normalised, rotated) and value (normalised without weight; as is, without the
  value norm, for ``qk_norm_rope_cache_attention``: Qwen3-TTS's talker and code predictor) from the raw projection
  in registers and uses them in place of the cache row at position ``seq_len - 1`` (``KV_NEW``; that row is not
  written yet: no program waits for another), and split 0 stores them at ``slot_mapping``. So the layer's q/k/v
  pre-processing and cache write need no launch of their own.
* Head dims up to :data:`MAX_HEAD_DIM` (512: Gemma 4's global layers) are padded to a power of two
  (``BLOCK_D``) and held whole in registers: one ``q K^T`` dot over the full head dim per key tile and a
  ``[BLOCK_M, BLOCK_D]`` float32 accumulator. Above :data:`WIDE_HEAD_DIM` (256) the tiling narrows so it
  fits: prefill tiles hold 32 query rows instead of 64, key tiles at most 32 keys (``BLOCK_N * BLOCK_D
  <= 16K``), the autotuner also tries eight-warp and single-stage configs, and the split merge runs over
  256-wide head-dim chunks. These choices depend on the head dim alone; heads of 256 and below take
  exactly the tiling and configs they had. Larger heads, or a cache dtype other than q's, run the torch
  reference (which reads lengths on the host, so a graph capture of it fails).
"""

from __future__ import annotations

import torch
from anna_core.kernels.checks import check_paged_attention, num_sequences, require, require_dims

from anna_xpu_kernels import pdl
from anna_xpu_kernels._checks import require_float, require_same_device
from anna_xpu_kernels._env import attention_fused_merge_splits
from anna_xpu_kernels._triton import INTERPRETING, autotune, next_pow2, tl, triton
from anna_xpu_kernels.attention_plan import MAX_SPLITS, plan_attention
from anna_xpu_kernels.counters import CounterPool
from anna_xpu_kernels.qk_norm_rope import _norm_rope_row

MAX_HEAD_DIM = 512
"""Largest head dim handled (padded to a power of two in registers); larger heads fall back to the torch reference."""
WIDE_HEAD_DIM = 256
"""Padded head dims above this take the wide-head tiling (fewer query rows per prefill tile, narrower key
tiles, split-merge over head-dim chunks); at and below it the tiling is the one tuned for heads <= 256."""
LOG2E = 1.4426950408889634

_NARROW = ((16, 4, 2), (32, 4, 2), (32, 8, 2), (64, 4, 2), (64, 8, 2), (64, 8, 3), (128, 8, 2))
"""``(BLOCK_N, num_warps, num_stages)`` tried for padded head dims <= :data:`WIDE_HEAD_DIM`."""
_WIDE_ONLY = ((16, 8, 2), (16, 4, 1), (32, 4, 1), (32, 8, 1))
"""Extra configs tried only for wider heads: eight warps spread the ``[BLOCK_M, 512]`` float32
accumulator over more registers, one stage keeps two float32 key/value tiles in shared memory."""
_CONFIGS = [triton.Config({"BLOCK_N": bn}, num_warps=w, num_stages=s) for bn, w, s in _NARROW + _WIDE_ONLY]


def _prune(configs, named_args, **kwargs):
    """Keep key tiles of at most 16K elements (``BLOCK_N * BLOCK_D``); the :data:`_WIDE_ONLY` configs only
    for head dims above :data:`WIDE_HEAD_DIM` (so narrower heads tune over exactly :data:`_NARROW`)."""
    block_d = kwargs["BLOCK_D"]
    wide = block_d > WIDE_HEAD_DIM
    kept = [c for c in configs if c.kwargs["BLOCK_N"] * block_d <= 16384
            and (wide or (c.kwargs["BLOCK_N"], c.num_warps, c.num_stages) in _NARROW)]
    return kept or configs[:1]


@triton.jit
def _load_q_norm_rope(q_ptr, rows, row_ok, d, d_ok, qw_ptr, pos, inv_freq_ptr, head_dim, half, rotary_dim, eps,
                      ZERO_CENTERED: tl.constexpr):
    """The query tile ``[BLOCK_M, BLOCK_D]`` (row offsets ``rows``) RMS-normalised per row with ``qw`` and rotated at
    ``pos`` (``[BLOCK_M, 1]`` per row, or ``[1, 1]`` when every row is one token's: a decode tile, whose cos / sin are
    then one ``[1, BLOCK_D]`` row, fewer registers) with NeoX halves on the first ``rotary_dim`` dims, rounded to q's
    dtype where :mod:`anna_xpu_kernels.qk_norm_rope` rounds it: the ``q_norm_rope`` op on load."""
    partner = tl.where(d < half, d + half, tl.where(d < rotary_dim, d - half, d))
    m = row_ok[:, None] & d_ok[None, :]
    x = tl.load(q_ptr + rows[:, None] + d[None, :], mask=m, other=0.0)
    out_ty = x.dtype
    x = x.to(tl.float32)
    xp = tl.load(q_ptr + rows[:, None] + partner[None, :], mask=m, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=1) / head_dim + eps)
    w = tl.load(qw_ptr + d, mask=d_ok, other=0.0).to(tl.float32)
    wp = tl.load(qw_ptr + partner, mask=d_ok, other=0.0).to(tl.float32)
    if ZERO_CENTERED:
        w = w + 1.0
        wp = wp + 1.0
    xn = (x * rstd[:, None] * w[None, :]).to(out_ty).to(tl.float32)  # the normed head, rounded as the op returns it
    xpn = (xp * rstd[:, None] * wp[None, :]).to(out_ty).to(tl.float32)
    f = tl.where(d < half, d, d - half)
    in_rot = d < rotary_dim
    angle = pos * tl.load(inv_freq_ptr + f, mask=d_ok & in_rot, other=0.0)[None, :]
    c = tl.cos(angle)
    sn = tl.sin(angle)
    rot = tl.where((d < half)[None, :], xn * c - xpn * sn, xn * c + xpn * sn)
    return tl.where(in_rot[None, :], rot, xn).to(out_ty)


_COUNTERS = CounterPool()
"""Arrival counters of the fused split merge (one per sequence and KV head of a launch), zero between launches."""


@autotune(_CONFIGS, fixed=triton.Config({"BLOCK_N": 16}, num_warps=4),
          key=["BLOCK_M", "BLOCK_D", "GROUP", "SPLIT", "DECODE", "FUSED_MERGE"],
          prune_configs_by={"early_config_prune": _prune})
@triton.jit(do_not_specialize=['batch', 'n_tokens', 'num_splits', 'window', 'stride_tb'])
def _paged_attention_kernel(
    q_ptr, k_cache_ptr, v_cache_ptr, cu_q_ptr, seq_lens_ptr, tables_ptr, tile_seq_ptr, tile_first_ptr,
    o_ptr, m_ws_ptr, l_ws_ptr, acc_ws_ptr, count_ptr, qw_ptr, pos_ptr, inv_freq_ptr, k_ptr, v_ptr, kw_ptr, slot_ptr,
    batch, n_tokens, head_dim, block_size, num_splits, qk_scale, window, half, rotary_dim, eps,
    stride_qt, stride_qh, stride_cb, stride_ct, stride_ch, stride_tb, stride_ot, stride_oh,
    stride_kt, stride_kh, stride_vt, stride_vh,
    GROUP: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr,
    HAS_WINDOW: tl.constexpr, SPLIT: tl.constexpr, DECODE: tl.constexpr, UPCAST_DOT: tl.constexpr,
    Q_NORM_ROPE: tl.constexpr, ZERO_CENTERED: tl.constexpr, KV_NEW: tl.constexpr, V_NORM: tl.constexpr,
    FUSED_MERGE: tl.constexpr, MERGE_S: tl.constexpr, MERGE_M: tl.constexpr, MERGE_U: tl.constexpr,
    USE_PDL: tl.constexpr, BLOCK_N: tl.constexpr,
):
    pdl.enter(USE_PDL)
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
        live = seq_raw < batch  # tiles past the last sequence's are idle (the grid is an upper bound)
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
    qpos = ctx - q_len + qi  # absolute position of each row's query
    d = tl.arange(0, BLOCK_D)
    d_ok = d < head_dim
    if Q_NORM_ROPE:  # the q_norm_rope op on load (a KV-shared layer's queries): q_norm_rope_attention
        if DECODE:  # one token per tile: one rotary row
            pos = tl.load(pos_ptr + seq).to(tl.float32) + tl.zeros((1, 1), tl.float32)
        else:
            pos = tl.load(pos_ptr + tok, mask=row_ok, other=0).to(tl.float32)[:, None]
        q = _load_q_norm_rope(q_ptr, tok * stride_qt + head * stride_qh, row_ok, d, d_ok, qw_ptr, pos, inv_freq_ptr,
                              head_dim, half, rotary_dim, eps, ZERO_CENTERED)
    else:
        q = tl.load(q_ptr + tok[:, None] * stride_qt + head[:, None] * stride_qh + d[None, :],
                    mask=row_ok[:, None] & d_ok[None, :], other=0.0)
    if UPCAST_DOT:
        q = q.to(tl.float32)
    if KV_NEW:  # decode: this sequence's new key (normed, rotated) and value (normed with V_NORM) of this KV head,
        # taken from registers at position ctx - 1 (its cache row is not written yet) and stored by split 0
        new_pos = ctx - 1  # the cache position of the sequence's new token
        k_row, _, _ = _norm_rope_row(k_ptr + seq * stride_kt + h_kv * stride_kh, kw_ptr, pos_ptr + seq, 0, pos_ptr,
                                     inv_freq_ptr, head_dim, half, rotary_dim, eps, ZERO_CENTERED, False,
                                     k_cache_ptr.dtype.element_ty, BLOCK_D)
        v_row = tl.load(v_ptr + seq * stride_vt + h_kv * stride_vh + d, mask=d_ok, other=0.0)
        if V_NORM:  # the weightless value norm, float32, rounded once
            vf = v_row.to(tl.float32)
            v_row = vf * tl.rsqrt(tl.sum(vf * vf, axis=0) / head_dim + eps)
        v_row = v_row.to(v_cache_ptr.dtype.element_ty)
        if split == 0:
            slot = tl.load(slot_ptr + seq).to(tl.int64)
            dst = (slot // block_size) * stride_cb + (slot % block_size) * stride_ct + h_kv * stride_ch + d
            tl.store(k_cache_ptr + dst, k_row, mask=d_ok)
            tl.store(v_cache_ptr + dst, v_row, mask=d_ok)

    # Keys this tile can see, intersected with this split's partition.
    hi = tl.where(q_len > 0, ctx - q_len + tl.minimum(q0 + BLOCK_Q, q_len), 0)
    lo = 0
    if HAS_WINDOW:
        lo = tl.maximum(ctx - q_len + q0 - window + 1, 0)
    if SPLIT:  # this split's share of the visible keys [lo, hi), in whole key tiles
        per_split = tl.cdiv(tl.cdiv(tl.maximum(hi - lo, 0), num_splits), BLOCK_N) * BLOCK_N
        lo = lo + split * per_split
        hi = tl.minimum(hi, lo + per_split)

    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_D), tl.float32)
    head_off = h_kv * stride_ch
    for start in range(lo, hi, BLOCK_N):
        kpos = start + tl.arange(0, BLOCK_N)
        k_ok = kpos < hi
        blk = tl.load(tables_ptr + seq * stride_tb + kpos // block_size, mask=k_ok, other=0).to(tl.int64)
        kv_off = blk * stride_cb + (kpos % block_size) * stride_ct + head_off
        kv_mask = k_ok[:, None] & d_ok[None, :]
        k = tl.load(k_cache_ptr + kv_off[:, None] + d[None, :], mask=kv_mask, other=0.0)
        v = tl.load(v_cache_ptr + kv_off[:, None] + d[None, :], mask=kv_mask, other=0.0)
        if KV_NEW:
            is_new = (kpos == new_pos)[:, None]
            k = tl.where(is_new, k_row[None, :], k)
            v = tl.where(is_new, v_row[None, :], v)
        if UPCAST_DOT:  # float32 serving, or the interpreter (whose bfloat16 tl.dot is wrong): exact fp32 products
            s = tl.dot(q, tl.trans(k.to(tl.float32)), input_precision="ieee")
        else:
            s = tl.dot(q, tl.trans(k))
        s = s * qk_scale  # [BLOCK_M, BLOCK_N], log2 units
        seen = k_ok[None, :] & (kpos[None, :] <= qpos[:, None])
        if HAS_WINDOW:
            seen = seen & (kpos[None, :] > qpos[:, None] - window)
        s = tl.where(seen, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)  # rows that saw nothing yet stay at zero
        alpha = tl.exp2(m_i - m_ref)
        p = tl.exp2(s - m_ref[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        p = p.to(v.dtype)  # probabilities rounded to the cache dtype for the P @ V product, as on tensor cores
        if UPCAST_DOT:
            pv = tl.dot(p.to(tl.float32), v.to(tl.float32), input_precision="ieee")
        else:
            pv = tl.dot(p, v)
        acc = acc * alpha[:, None] + pv
        m_i = m_new

    if not SPLIT:
        out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
        tl.store(o_ptr + tok[:, None] * stride_ot + head[:, None] * stride_oh + d[None, :],
                 out.to(o_ptr.dtype.element_ty), mask=row_ok[:, None] & d_ok[None, :])
    else:
        n_heads = tl.num_programs(1) * GROUP
        ws_row = (split * n_tokens + tok) * n_heads + head  # [BLOCK_M] rows of the [splits, T, H_q] workspace
        tl.store(m_ws_ptr + ws_row, m_i, mask=row_ok)
        tl.store(l_ws_ptr + ws_row, l_i, mask=row_ok)
        tl.store(acc_ws_ptr + ws_row[:, None] * BLOCK_D + d[None, :], acc, mask=row_ok[:, None])
        if FUSED_MERGE:  # (decode only) the last split of this sequence and KV head to arrive merges every split's
            tl.debug_barrier()  # every thread's partials are stored before this program counts itself in
            counter = count_ptr + tile * tl.num_programs(1) + h_kv
            arrived = tl.atomic_add(counter, 1, sem="acq_rel", scope="gpu")
            if arrived == num_splits - 1:  # by the release / acquire pairing every other split's stores are visible
                _merge_split_rows(m_ws_ptr, l_ws_ptr, acc_ws_ptr, o_ptr, tile.to(tl.int64), h_kv * GROUP, n_heads,
                                  n_tokens * n_heads, num_splits, d, d_ok, stride_ot, stride_oh, GROUP, MERGE_M,
                                  BLOCK_D, MERGE_S, MERGE_U)
                tl.store(counter, 0)  # zero for the next launch (graph replays)


@triton.jit
def _merge_split_rows(m_ws_ptr, l_ws_ptr, acc_ws_ptr, o_ptr, tok, head0, n_heads, n_rows, num_splits, d, d_ok,
                      stride_ot, stride_oh, GROUP: tl.constexpr, MERGE_M: tl.constexpr, BLOCK_D: tl.constexpr,
                      MERGE_S: tl.constexpr, MERGE_U: tl.constexpr):
    """Merge the ``num_splits`` (``<= MERGE_S``) partial ``(max, sum, acc)`` triples of one decode token's ``GROUP``
    query heads ``head0 ...`` (workspace rows ``tok * n_heads + head + split * n_rows``; ``MERGE_M``: ``GROUP`` padded
    to a power of two, so the tile holds no query-tile padding) and store its normalised output rows: the merge
    kernel's math (``o = sum_s exp2(m_s - M) acc_s / sum_s exp2(m_s - M) l_s``, ``M = max_s m_s``). Every split's
    ``(max, sum)`` is read in one load, then the ``acc`` partials ``MERGE_U`` splits per load (one
    ``[MERGE_U, MERGE_M, BLOCK_D]`` tile: the loads of a step are in flight together, no running rescale). Loads
    bypass L1 (``.cg``): the other programs' stores are visible in L2."""
    r = tl.arange(0, MERGE_M)
    r_ok = r < GROUP
    head = head0 + r
    ws_row = tok * n_heads + head  # [MERGE_M] rows of split 0
    s = tl.arange(0, MERGE_S)
    s_rows = s[:, None] * n_rows + ws_row[None, :]  # [MERGE_S, MERGE_M]
    s_ok = (s < num_splits)[:, None] & r_ok[None, :]
    m_s = tl.load(m_ws_ptr + s_rows, mask=s_ok, other=float("-inf"), cache_modifier=".cg")
    l_s = tl.load(l_ws_ptr + s_rows, mask=s_ok, other=0.0, cache_modifier=".cg")
    m_all = tl.max(m_s, axis=0)
    m_ref = tl.where(m_all == float("-inf"), 0.0, m_all)  # rows that saw no key stay at zero
    total = tl.sum(tl.exp2(m_s - m_ref[None, :]) * l_s, axis=0)  # [MERGE_M]
    acc = tl.zeros((MERGE_M, BLOCK_D), tl.float32)
    u = tl.arange(0, MERGE_U)
    for s0 in range(0, num_splits, MERGE_U):
        rows = (s0 + u)[:, None] * n_rows + ws_row[None, :]  # [MERGE_U, MERGE_M]
        ok = (s0 + u < num_splits)[:, None] & r_ok[None, :]
        m_u = tl.load(m_ws_ptr + rows, mask=ok, other=float("-inf"), cache_modifier=".cg")
        acc_u = tl.load(acc_ws_ptr + rows[:, :, None] * BLOCK_D + d[None, None, :], mask=ok[:, :, None], other=0.0,
                        cache_modifier=".cg")
        acc += tl.sum(tl.exp2(m_u - m_ref[None, :])[:, :, None] * acc_u, axis=0)  # 0 for empty or absent splits
    out = acc / tl.where(total > 0, total, 1.0)[:, None]
    tl.store(o_ptr + tok * stride_ot + head[:, None] * stride_oh + d[None, :], out.to(o_ptr.dtype.element_ty),
             mask=r_ok[:, None] & d_ok[None, :])


@triton.jit(do_not_specialize=['n_rows', 'num_splits'])
def _merge_splits_kernel(
    m_ws_ptr, l_ws_ptr, acc_ws_ptr, o_ptr, n_rows, n_heads, head_dim, num_splits, stride_ot, stride_oh,
    BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr, WS_D: tl.constexpr, USE_PDL: tl.constexpr,
):
    pdl.enter(USE_PDL)
    row = tl.program_id(0).to(tl.int64)  # token * n_heads + head
    s = tl.arange(0, BLOCK_S)
    d = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)  # this program's chunk of the WS_D-wide rows
    s_ok = s < num_splits
    ws = s * n_rows + row
    m = tl.load(m_ws_ptr + ws, mask=s_ok, other=float("-inf"))
    lsum = tl.load(l_ws_ptr + ws, mask=s_ok, other=0.0)
    acc = tl.load(acc_ws_ptr + ws[:, None] * WS_D + d[None, :], mask=s_ok[:, None], other=0.0)
    m_all = tl.max(m, axis=0)
    m_ref = tl.where(m_all == float("-inf"), 0.0, m_all)
    w = tl.exp2(m - m_ref)  # 0 for empty splits
    total = tl.sum(w * lsum, axis=0)
    out = tl.sum(w[:, None] * acc, axis=0) / tl.where(total > 0, total, 1.0)
    tok = row // n_heads
    head = row % n_heads
    tl.store(o_ptr + tok * stride_ot + head * stride_oh + d, out.to(o_ptr.dtype.element_ty), mask=d < head_dim)


FUSED_MERGE_KEYS_PER_SPLIT = 64
"""The fused merge takes a launch only where its split cap leaves at most this many visible keys per split (the
window, or the block table's width): beyond it, fewer splits would lengthen each program's key loop by more than
the merge launch it saves (a rule by shape, not yet tuned on a GPU)."""


def _fuses_merge(cap: int, decode: bool, table_keys: int, window: int | None) -> bool:
    """Whether a launch merges its splits inside (``cap`` > 0 the fused merge's split cap): decode batches only, and
    at most :data:`FUSED_MERGE_KEYS_PER_SPLIT` visible keys per split — e.g. with a cap of 16, Gemma 4's sliding
    layers (a 512-key window) fuse and its global layers over a 2k+ table do not (a cap of 64 fuses those too)."""
    visible = table_keys if window is None else min(window, table_keys)
    return cap > 0 and decode and triton.cdiv(visible, cap) <= FUSED_MERGE_KEYS_PER_SPLIT


MERGE_TILE_VALUES = 8192
"""Partial-output values one step of the fused merge loads (``MERGE_U x MERGE_M x BLOCK_D``: 64 float32 registers
per thread at four warps)."""


def _merge_unroll(merge_m: int, block_d: int) -> int:
    """Splits per load of the fused merge: as many as :data:`MERGE_TILE_VALUES` allow (a power of two, 1 to 8) — e.g.
    4 at E2B's sliding layers (8 query heads of 256), 2 at its global ones (512)."""
    return max(1, min(8, MERGE_TILE_VALUES // (merge_m * block_d)))


def _reference(*args):
    from anna_core.kernels.reference.paged_attention import paged_attention as reference

    return reference(*args)


def paged_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    seq_lens: torch.Tensor,
    block_tables: torch.Tensor,
    scale: float,
    sliding_window: int | None,
) -> torch.Tensor:
    """Paged causal attention (signature of the reference ``paged_attention``), decode and prefill.

    Args:
        q: ``[T, H_q, D]`` (rotary applied; rows may be strided), ``H_q`` a multiple of ``H_kv``.
        k_cache, v_cache: ``[num_blocks, block_size, H_kv, D]`` in q's dtype, holding the new tokens' K/V.
        cu_seqlens_q: ``[B+1]`` query row offsets; seq_lens: ``[B]`` context lengths (new tokens
            included); block_tables: ``[B, max_blocks]`` int32. Values are trusted (no host sync):
            every sequence needs ``1 <= q_len <= seq_len <= max_blocks * block_size``.
        scale: softmax scale; sliding_window: window length (the query's own position included) or None.

    Returns:
        ``[T, H_q, D]`` in q's dtype. Head dims above 512 or a cache dtype different from q's run
        the torch reference.

    Raises:
        ValueError: inconsistent shapes, unsupported dtype, non-positive window.
    """
    return paged_attention_splits(q, k_cache, v_cache, cu_seqlens_q, seq_lens, block_tables, scale,
                                  sliding_window, num_splits=None)


def paged_attention_splits(q, k_cache, v_cache, cu_seqlens_q, seq_lens, block_tables, scale, sliding_window,
                           *, num_splits: int | None, q_norm_rope: tuple | None = None,
                           kv_new: tuple | None = None, fused_merge: int | None = None,
                           op_name: str | None = None) -> torch.Tensor:
    """:func:`paged_attention` with the number of key partitions forced (``None``: chosen for the GPU); with
    ``q_norm_rope = (weight, eps, zero_centered, positions, inv_freq)`` the queries are raw and normalised and
    rotated on load (:func:`anna_xpu_kernels.paged_attention_fused.q_norm_rope_attention`); with it and ``kv_new = (k, v, k_weight, slot_mapping, v_norm)``
    (decode batches only) the new keys and values too, written by the kernel
    (:func:`anna_xpu_kernels.paged_attention_fused.qkv_norm_rope_cache_attention`).

    ``fused_merge``: for a decode batch, merge the split partials inside the attention launch (no merge kernel) —
    0: never (the merge kernel), ``n >= 1``: yes, with at most ``n`` splits where the split count is chosen for the
    GPU (``num_splits=None``; a forced count is kept), where that leaves at most :data:`FUSED_MERGE_KEYS_PER_SPLIT`
    visible keys per split (:func:`_fuses_merge`); None: :func:`~anna_xpu_kernels._env.attention_fused_merge_splits`
    (``ANNA_ATTENTION_FUSED_MERGE``, off by default). ``op_name``: the op its errors name (default: the one the
    arguments make)."""
    op = op_name or ("paged_attention" if q_norm_rope is None else "q_norm_rope_attention")
    require_dims(op, q=(q, 3), k_cache=(k_cache, 4), v_cache=(v_cache, 4), seq_lens=(seq_lens, 1),
                 block_tables=(block_tables, 2))
    batch = num_sequences(op, cu_seqlens_q, "cu_seqlens_q")
    check_paged_attention(op, q, k_cache, v_cache, seq_lens, block_tables, sliding_window, batch)
    _, block_size, h_kv, dim = k_cache.shape
    total, h_q, _ = q.shape
    require_float(op, q=q)
    require_same_device(op, q=q, k_cache=k_cache, v_cache=v_cache, cu_seqlens_q=cu_seqlens_q, seq_lens=seq_lens,
                        block_tables=block_tables)
    require(kv_new is None or (q_norm_rope is not None and q.shape[0] == batch), op,
            "new keys and values are fused for decode batches with the query prologue only")
    if dim > MAX_HEAD_DIM or k_cache.dtype != q.dtype or v_cache.dtype != q.dtype:
        require(kv_new is None, op, "new keys and values need the Triton kernel's head dims and cache dtype")
        if q_norm_rope is not None:
            from anna_core.kernels.reference.qk_norm_rope import q_norm_rope as reference_q_norm_rope

            weight, eps, zero_centered, positions, inv_freq = q_norm_rope
            q = reference_q_norm_rope(q, weight, eps, zero_centered, positions, inv_freq)
        return _reference(q, k_cache, v_cache, cu_seqlens_q, seq_lens, block_tables, scale, sliding_window)
    require(k_cache.stride(3) == 1 and v_cache.stride(3) == 1 and k_cache.stride() == v_cache.stride(), op,
            "k_cache and v_cache must share strides with unit stride along D")
    out = torch.empty((total, h_q, dim), dtype=q.dtype, device=q.device)
    if total == 0 or batch == 0:
        return out
    if q.stride(2) != 1:
        q = q.contiguous()
    if q_norm_rope is None:
        qw = pos = inv_freq = out  # unused
        eps, zero_centered, rotary_dim = 0.0, False, 0
    else:
        qw, eps, zero_centered, pos, inv_freq = q_norm_rope
        rotary_dim = 2 * inv_freq.shape[0]
    if kv_new is None:
        k_new = v_new = kw = slots = out  # unused
        v_norm = False
    else:
        k_new, v_new, kw, slots, v_norm = kv_new

    # Query rows per prefill tile: 64, or 32 for wide heads (a [BLOCK_M, BLOCK_D] float32 accumulator
    # and the q tile stay in registers). Depends on the head dim only, never on the batch's lengths.
    rows = 64 if next_pow2(dim) <= WIDE_HEAD_DIM else 32
    merge_cap = attention_fused_merge_splits() if fused_merge is None else min(max(int(fused_merge), 0), MAX_SPLITS)
    merge_cap = merge_cap if _fuses_merge(merge_cap, total == batch, block_tables.shape[1] * block_size,
                                          sliding_window) else 0
    plan = plan_attention(cu_seqlens_q, batch, total, h_q, h_kv, dim, block_tables.shape[1] * block_size, rows,
                          num_splits, split_cap=merge_cap or None)
    group, block_d, splits = plan.group, plan.block_d, plan.splits
    m_ws, l_ws, acc_ws = plan.workspace(h_q, q.device) or (out, out, out)  # unused without splits
    fused = merge_cap > 0 and splits > 1
    counters = _COUNTERS.get(q.device, plan.n_tiles * h_kv) if fused else out  # (unused without the fused merge)

    upcast = INTERPRETING or q.dtype == torch.float32
    _paged_attention_kernel[(plan.n_tiles, h_kv, splits)](
        q, k_cache, v_cache, plan.cu, seq_lens, block_tables, plan.tile_seq, plan.tile_first,
        out, m_ws, l_ws, acc_ws, counters, qw, pos, inv_freq, k_new, v_new, kw, slots,
        batch, total, dim, block_size, splits, float(scale) * LOG2E,
        int(sliding_window or 0), rotary_dim // 2, rotary_dim, eps,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), block_tables.stride(0),
        out.stride(0), out.stride(1), k_new.stride(0), k_new.stride(1), v_new.stride(0), v_new.stride(1),
        GROUP=group, BLOCK_Q=plan.block_q, BLOCK_M=plan.block_m, BLOCK_D=block_d,
        HAS_WINDOW=sliding_window is not None, SPLIT=splits > 1, DECODE=plan.decode, UPCAST_DOT=upcast,
        Q_NORM_ROPE=q_norm_rope is not None, ZERO_CENTERED=zero_centered, KV_NEW=kv_new is not None,
        V_NORM=bool(v_norm), FUSED_MERGE=fused, MERGE_S=MAX_SPLITS, MERGE_M=next_pow2(group),
        MERGE_U=_merge_unroll(next_pow2(group), block_d), **pdl.launch_options(out),
    )
    if splits > 1 and not fused:
        merge_d = min(block_d, WIDE_HEAD_DIM)  # wide heads merge in head-dim chunks (registers)
        _merge_splits_kernel[(total * h_q, block_d // merge_d)](
            m_ws, l_ws, acc_ws, out, total * h_q, h_q, dim, splits, out.stride(0), out.stride(1),
            BLOCK_S=next_pow2(splits), BLOCK_D=merge_d, WS_D=block_d, num_warps=4 if INTERPRETING else 8,
            **pdl.launch_options(out),
        )
    return out
