"""TurboQuant KV caches in pure torch (Zandieh et al., "TurboQuant: Online Vector Quantization with
Near-optimal Distortion Rate", arXiv 2504.19874).

Writing a token's key ``k`` (one head, ``D`` dims; section 3.2, ``TurboQuant_prod``):
``n = ||k||``, ``y = Pi (k / n)`` (random rotation), ``idx_j = argmin_c |y_j - c|`` over the keys' Lloyd-Max
centroids (``bits - 1`` bits; section 3.1), residual ``r = y - c[idx]``, ``gamma = ||r||``, signs
``z = sign(S r)`` (QJL, Definition 1). Its reconstruction is
``k~ = n Pi^T (c[idx] + sqrt(pi/2) / D * gamma * S^T z)``, whose inner product with any query is unbiased
(Theorem 2). A value ``v`` (section 3.1, ``TurboQuant_mse``): ``n = ||v||``, ``idx = Q(Pi v / n)`` over the
values' centroids (``bits`` bits), ``v~ = n Pi^T c[idx]``; keys without the QJL stage (as many centroids as the
values) are quantized the same way. Row byte layout: :mod:`anna_core.kv_quant.layout`.

Attention (``paged_attention_turboquant``) is ``paged_attention`` over the reconstructed keys and values of
the blocks the batch reads: this reference reconstructs each sequence's blocks in float32 (a copy per sequence,
so a block shared through the prefix cache takes the ring rows of its own reader only), then runs the unquantized
reference on them. It makes no tensor whose shape depends on tensor values (a captured decode step holds it on the
CPU, :mod:`anna_core.testing.fake_graphs`).
"""

from __future__ import annotations

import math

import torch

from anna_core.kernels.checks import (
    check_turboquant_caches,
    check_turboquant_tables,
    check_turboquant_write,
    keys_have_qjl,
    require,
    require_dims,
    sequence_lengths,
)
from anna_core.kernels.reference.paged_attention import paged_attention


def pack_planes(idx: torch.Tensor, bits: int) -> torch.Tensor:
    """Centroid indices ``[N, D]`` (integers below ``2 ** bits``) -> bit planes ``[N, bits * D // 8]`` uint8:
    plane ``p`` (bytes ``p * D/8 ..``) holds bit ``p`` of every index, coordinate ``j`` at bit ``j % 8`` of byte
    ``j // 8``."""
    n, d = idx.shape
    shifts = torch.arange(8, device=idx.device)  # made on the device: a graph capture may hold this call
    planes = [(((idx >> p) & 1).view(n, d // 8, 8) << shifts).sum(-1) for p in range(bits)]
    return torch.cat(planes, dim=1).to(torch.uint8)


def unpack_planes(planes: torch.Tensor, bits: int, head_dim: int) -> torch.Tensor:
    """Inverse of :func:`pack_planes`: ``[N, bits * D // 8]`` uint8 -> ``[N, D]`` int64."""
    n = planes.shape[0]
    b = planes.to(torch.int64).view(n, bits, head_dim // 8, 1)
    bit = (b >> torch.arange(8, device=planes.device)) & 1  # [N, bits, D/8, 8]
    weights = (1 << torch.arange(bits, device=planes.device)).view(1, bits, 1, 1)
    return (bit * weights).sum(1).view(n, head_dim)


def _norms_bytes(values: torch.Tensor) -> torch.Tensor:
    """``[N, k]`` float32 -> ``[N, 4k]`` uint8 (their bytes)."""
    return values.to(torch.float32).contiguous().view(torch.uint8)


def _nearest(y: torch.Tensor, centroids: torch.Tensor) -> torch.Tensor:
    """Index of the nearest of the sorted ``centroids`` for every entry of ``y`` (ties to the lower one)."""
    return torch.bucketize(y, (centroids[1:] + centroids[:-1]) / 2)


def _unit_rotated(x: torch.Tensor, rotation: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(norms [N], Pi (x / ||x||) [N, D])`` in float32 (a zero row stays zero)."""
    x = x.to(torch.float32)
    n = torch.linalg.vector_norm(x, dim=-1)
    return n, (x / n.clamp_min(1e-30)[:, None]) @ rotation.T


def quantize_keys(k: torch.Tensor, rotation: torch.Tensor, qjl: torch.Tensor, centroids: torch.Tensor,
                  row_bytes: int) -> torch.Tensor:
    """Key rows ``[N, D]`` -> quantized rows ``[N, row_bytes]`` uint8 (module docstring)."""
    bits = centroids.numel().bit_length() - 1
    n, y = _unit_rotated(k, rotation)
    idx = _nearest(y, centroids)
    r = y - centroids[idx]
    signs = (r @ qjl.T >= 0).to(torch.int64)
    body = torch.cat([_norms_bytes(torch.stack([n, torch.linalg.vector_norm(r, dim=-1)], 1)),
                      pack_planes(idx, bits), pack_planes(signs, 1)], dim=1)
    return torch.nn.functional.pad(body, (0, row_bytes - body.shape[1]))


def quantize_values(v: torch.Tensor, rotation: torch.Tensor, centroids: torch.Tensor, row_bytes: int) -> torch.Tensor:
    """Value rows ``[N, D]`` -> quantized rows ``[N, row_bytes]`` uint8 (module docstring)."""
    bits = centroids.numel().bit_length() - 1
    n, y = _unit_rotated(v, rotation)
    body = torch.cat([_norms_bytes(n[:, None]), pack_planes(_nearest(y, centroids), bits)], dim=1)
    return torch.nn.functional.pad(body, (0, row_bytes - body.shape[1]))


def dequantize_keys(rows: torch.Tensor, rotation: torch.Tensor, qjl: torch.Tensor,
                    centroids: torch.Tensor) -> torch.Tensor:
    """Quantized key rows ``[N, row_bytes]`` uint8 -> reconstructed keys ``[N, D]`` float32."""
    d = rotation.shape[0]
    bits = centroids.numel().bit_length() - 1
    norms = rows[:, :8].contiguous().view(torch.float32)  # [N, 2]: ||k||, gamma
    idx = unpack_planes(rows[:, 8:8 + bits * d // 8], bits, d)
    z = unpack_planes(rows[:, 8 + bits * d // 8:8 + (bits + 1) * d // 8], 1, d).to(torch.float32) * 2 - 1
    y = centroids[idx] + (math.sqrt(math.pi / 2) / d) * norms[:, 1:2] * (z @ qjl)
    return norms[:, 0:1] * (y @ rotation)


def dequantize_values(rows: torch.Tensor, rotation: torch.Tensor, centroids: torch.Tensor) -> torch.Tensor:
    """Quantized value rows ``[N, row_bytes]`` uint8 -> reconstructed values ``[N, D]`` float32."""
    d = rotation.shape[0]
    bits = centroids.numel().bit_length() - 1
    norm = rows[:, :4].contiguous().view(torch.float32)  # [N, 1]
    idx = unpack_planes(rows[:, 4:4 + bits * d // 8], bits, d)
    return norm * (centroids[idx] @ rotation)


def turboquant_cache_write(
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    rotation: torch.Tensor,
    qjl: torch.Tensor,
    key_centroids: torch.Tensor,
    value_centroids: torch.Tensor,
) -> None:
    """Quantize new keys/values and write them into the quantized paged cache (``reshape_and_cache``'s role).

    Args:
        k, v: ``[T, H_kv, D]`` in the serving dtype (quantized in float32).
        k_cache, v_cache: uint8 ``[num_blocks, block_size, H_kv, key_row_bytes / value_row_bytes]``, written in
            place at ``slot_mapping``.
        slot_mapping: ``[T]`` int64, ``block * block_size + offset``.
        rotation, qjl: float32 ``[D, D]`` (:class:`anna_core.kv_quant.tables.TurboQuantTables`).
        key_centroids, value_centroids: float32 ``[2 ** (bits - 1)]`` and ``[2 ** bits]``, sorted.

    Raises:
        ValueError: shapes, dtypes or row widths that disagree with the tables.
    """
    op = "turboquant_cache_write"
    t, h, d, kbits, vbits = check_turboquant_write(op, k, v, k_cache, v_cache, slot_mapping, rotation, qjl,
                                                   key_centroids, value_centroids)
    if keys_have_qjl(kbits, vbits):
        kq = quantize_keys(k.reshape(t * h, d), rotation, qjl, key_centroids, k_cache.shape[3]).view(t, h, -1)
    else:  # keys quantized as values (TurboQuant_mse at the full bits)
        kq = quantize_values(k.reshape(t * h, d), rotation, key_centroids, k_cache.shape[3]).view(t, h, -1)
    vq = quantize_values(v.reshape(t * h, d), rotation, value_centroids, v_cache.shape[3]).view(t, h, -1)
    k_cache.view(-1, h, k_cache.shape[3]).index_copy_(0, slot_mapping, kq)
    v_cache.view(-1, h, v_cache.shape[3]).index_copy_(0, slot_mapping, vq)


def paged_attention_turboquant(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    seq_lens: torch.Tensor,
    block_tables: torch.Tensor,
    scale: float,
    sliding_window: int | None,
    rotation: torch.Tensor,
    qjl: torch.Tensor,
    key_centroids: torch.Tensor,
    value_centroids: torch.Tensor,
    residual_k: torch.Tensor | None = None,
    residual_v: torch.Tensor | None = None,
    residual_pos: torch.Tensor | None = None,
    slots: torch.Tensor | None = None,
    valid_lens: torch.Tensor | None = None,
    new_k: torch.Tensor | None = None,
    new_v: torch.Tensor | None = None,
) -> torch.Tensor:
    """``paged_attention`` over a TurboQuant cache: the reconstructed keys and values of every block a
    sequence reads (module docstring), the attention rule unchanged.

    Args:
        q, cu_seqlens_q, seq_lens, block_tables, scale, sliding_window: as ``paged_attention``.
        k_cache, v_cache, rotation, qjl, key_centroids, value_centroids: as ``turboquant_cache_write``.
        residual_k, residual_v, residual_pos, slots: the residual ring (:mod:`anna_core.kv_quant.residual`) and each
            sequence's slot in it, or None: positions it holds among a sequence's newest ``R`` are read from it.
        valid_lens: ``[B]`` int32, each sequence's real context length (``seq_lens`` less the padding rows of a
            padded prefill, :mod:`anna_core.layers.padding`): its newest ``R`` are positions
            ``valid_lens[i] - R .. valid_lens[i] - 1``. None: ``seq_lens`` (no padding).
        new_k, new_v: ``[T, H_kv, D]`` the step's own keys / values as the ring stores them (rotated, its dtype,
            :func:`anna_core.kv_quant.residual.rotated_rows`), with a ring only: a per-query window. Query at
            position ``q`` reads key ``p`` exactly iff ``q - R < p <= q``: from these rows when ``p`` is one of
            the step's (``p >= seq_lens[i] - q_len``), else from the ring where it holds ``p`` (the ring as it
            stood before the step evicted anything); every other key from its quantized row. ``valid_lens`` is
            then unused (a real query's window ends at itself, before any padding row).

    Returns:
        ``[T, H_q, D]`` in q's dtype.

    Raises:
        ValueError: as ``paged_attention``, or tables / caches that disagree.
    """
    op = "paged_attention_turboquant"
    require_dims(op, q=(q, 3), seq_lens=(seq_lens, 1), block_tables=(block_tables, 2))
    d = q.shape[2]
    kbits, vbits = check_turboquant_tables(op, d, rotation, qjl, key_centroids, value_centroids)
    check_turboquant_caches(op, k_cache, v_cache, d, kbits, vbits)
    q_lens = sequence_lengths(op, cu_seqlens_q, q.shape[0])
    require(seq_lens.shape[0] == len(q_lens) and block_tables.shape[0] == len(q_lens), op,
            f"seq_lens and block_tables must have {len(q_lens)} rows")
    require(valid_lens is None or (valid_lens.dim() == 1 and valid_lens.shape[0] == len(q_lens)), op,
            f"valid_lens must be [B]={len(q_lens)}")
    require((new_k is None) == (new_v is None), op, "new_k and new_v must be given together")
    require(new_k is None or residual_pos is not None, op, "new_k / new_v need a residual ring")
    require(new_k is None or (tuple(new_k.shape) == tuple(new_v.shape) == (q.shape[0], k_cache.shape[2], d)), op,
            f"new_k and new_v must be [T, H_kv, D]={(q.shape[0], k_cache.shape[2], d)}")
    n_blocks, block_size, h_kv = k_cache.shape[:3]
    width = block_tables.shape[1]
    lens = seq_lens.to(device=q.device, dtype=torch.long)
    need = torch.clamp((lens + block_size - 1) // block_size, max=width)  # [B] blocks each sequence reads
    first = torch.cumsum(need, 0) - need  # [B] its first block in the reconstructed rows
    # every sequence gets its own copies of the blocks it reads (a block shared through the prefix cache is
    # reconstructed once per reader), so one sequence's ring rows overlay its copy only; then one spare block
    tables = block_tables.to(device=q.device, dtype=torch.long).clamp(0, n_blocks - 1)
    picked = torch.cat([tables[i, :n] for i, n in enumerate(need.tolist())] + [tables.new_zeros(1)])
    spare = picked.numel() - 1
    compact = (first[:, None] + torch.arange(width, device=q.device)).clamp(max=spare)  # [B, W]
    rows_k = k_cache.index_select(0, picked).view(-1, k_cache.shape[3])
    rows_v = v_cache.index_select(0, picked).view(-1, v_cache.shape[3])
    shape = (picked.numel(), block_size, h_kv, d)
    if keys_have_qjl(kbits, vbits):
        k = dequantize_keys(rows_k, rotation, qjl, key_centroids).view(shape)
    else:
        k = dequantize_values(rows_k, rotation, key_centroids).view(shape)
    v = dequantize_values(rows_v, rotation, value_centroids).view(shape)
    if new_k is not None:
        return _attend_window(q, k, v, first, q_lens, lens, scale, sliding_window, rotation, residual_k,
                              residual_v, residual_pos, slots, new_k, new_v)
    if residual_pos is not None:
        valid = lens if valid_lens is None else valid_lens.to(device=q.device, dtype=torch.long)
        _overlay_residual(k, v, first, valid, spare, rotation, residual_k, residual_v, residual_pos, slots)
    return paged_attention(q, k, v, cu_seqlens_q, seq_lens, compact.to(torch.int32), scale, sliding_window)


def _overlay_residual(k: torch.Tensor, v: torch.Tensor, first: torch.Tensor, valid_lens: torch.Tensor, spare: int,
                      rotation: torch.Tensor, residual_k: torch.Tensor, residual_v: torch.Tensor,
                      residual_pos: torch.Tensor, slots: torch.Tensor) -> None:
    """Overwrite the reconstructed rows ``k`` / ``v`` ``[U, block_size, H_kv, D]`` (sequence ``i``'s blocks from
    ``first[i]`` on, block ``spare`` read by none) with the ring's rows of the positions it holds among each
    sequence's newest ``R`` (``valid_lens[i] - R .. valid_lens[i] - 1``, int64 ``[B]``); ring entries it does not
    hold are written to block ``spare``. Shapes fixed by
    the batch, no host read (a captured step may hold this call)."""
    r = residual_pos.shape[1]
    block_size, h_kv, d = k.shape[1:]
    slot = slots.to(torch.long)
    pos = residual_pos.index_select(0, slot).to(torch.long)  # [B, R]
    n = valid_lens[:, None]
    held = (pos >= 0) & (pos >= n - r) & (pos < n)
    row = torch.where(held, first[:, None] * block_size + pos.clamp(min=0), spare * block_size)  # [B, R]
    for out, ring in ((k, residual_k), (v, residual_v)):
        rows = ring.index_select(0, slot).to(torch.float32) @ rotation  # [B, R, H_kv, D], back from the rotated basis
        out.view(-1, h_kv, d).index_copy_(0, row.view(-1), rows.view(-1, h_kv, d))


def _attend_window(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, first: torch.Tensor, q_lens: list[int],
                   lens: torch.Tensor, scale: float, sliding_window: int | None, rotation: torch.Tensor,
                   residual_k: torch.Tensor, residual_v: torch.Tensor, residual_pos: torch.Tensor,
                   slots: torch.Tensor, new_k: torch.Tensor, new_v: torch.Tensor) -> torch.Tensor:
    """Attention with a per-query exact window (``new_k`` of :func:`paged_attention_turboquant`): sequence ``i``'s
    reconstructed rows are ``k`` / ``v`` ``[U, block_size, H_kv, D]`` float32 from block ``first[i]`` on. One
    sequence at a time, float32, ``softmax(scale * s) V`` where a key's score and value come from its exact row
    inside the query's window and from its quantized row outside. Returns ``[T, H_q, D]`` in q's dtype. No
    ``.item()`` nor value-dependent shapes (a captured padded prefill holds it on the CPU); the host reads
    ``tolist()`` of the lengths, as :func:`paged_attention_turboquant` does."""
    r = residual_pos.shape[1]
    h_kv, d = k.shape[2:]
    group = q.shape[1] // h_kv
    flat_k, flat_v = k.view(-1, h_kv, d), v.view(-1, h_kv, d)
    block_size = k.shape[1]
    out = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    firsts, ring_slots = first.tolist(), slots.tolist()
    b = 0
    for i, (n, q_len) in enumerate(zip(lens.tolist(), q_lens)):
        a, b = b, b + q_len
        start = n - q_len  # the sequence's first new position
        base = firsts[i] * block_size
        kq, vq = flat_k[base:base + n], flat_v[base:base + n]  # [n, H_kv, D] quantized
        ke, ve = torch.zeros_like(kq), torch.zeros_like(vq)
        pos = residual_pos[ring_slots[i]].to(torch.long)  # [R]
        held = (pos >= 0) & (pos < start) & (pos >= start - r)
        at = torch.where(held, pos, n)  # entries not held go to a dropped extra row
        for dst, ring in ((ke, residual_k), (ve, residual_v)):
            rows = ring[ring_slots[i]].to(torch.float32) @ rotation  # [R, H_kv, D], back from the rotated basis
            padded = torch.cat([dst, dst.new_zeros(1, h_kv, d)])
            padded.index_copy_(0, at, rows)
            dst.copy_(padded[:n])
        exact = torch.zeros(n + 1, dtype=torch.bool, device=q.device).index_fill_(0, at, True)[:n]
        ke[start:] = new_k[a:b].to(torch.float32) @ rotation
        ve[start:] = new_v[a:b].to(torch.float32) @ rotation
        exact[start:] = True
        qpos = torch.arange(start, n, device=q.device)[:, None]  # [Lq, 1]
        kpos = torch.arange(n, device=q.device)[None, :]  # [1, n]
        seen = kpos <= qpos
        if sliding_window is not None:
            seen = seen & (kpos > qpos - sliding_window)
        use = exact[None, :] & (kpos > qpos - r)  # [Lq, n] exact rows inside each query's window
        qi = q[a:b].to(torch.float32).view(b - a, h_kv, group, d)
        s_q = torch.einsum("qhgd,khd->hgqk", qi, kq)
        s_e = torch.einsum("qhgd,khd->hgqk", qi, ke)
        s = torch.where(use, s_e, s_q) * scale
        p = torch.softmax(s.masked_fill(~seen, float("-inf")), dim=-1)
        o = (torch.einsum("hgqk,khd->qhgd", p * use, ve) + torch.einsum("hgqk,khd->qhgd", p * ~use, vq))
        out[a:b] = o.reshape(b - a, h_kv * group, d)
    return out.to(q.dtype)
