"""Scaled dot-product attention over a paged KV cache (Kwon et al., "Efficient Memory Management for
Large Language Model Serving with PagedAttention", 2023), in pure torch.

Sequence ``i`` has ``seq_lens[i]`` cached positions (its new tokens included); its position ``p``
lives in block ``block_tables[i, p // block_size]`` at offset ``p % block_size``. Query ``j`` of its
``q_len`` new tokens sits at position ``seq_lens[i] - q_len + j`` and attends to the keys at
positions ``p <= pos`` (and ``p > pos - sliding_window`` when a window is given), i.e. standard causal
softmax attention ``softmax(scale * q K^T) V`` (Vaswani et al., 2017) with grouped-query heads (query head
``h`` reads KV head ``h // (H_q // H_kv)``). Prefill and chunked prefill run one sequence at a time;
single-token decodes are batched together. Attention runs in float32 through
``torch.nn.functional.scaled_dot_product_attention`` (on CPU this is also faster than bf16); the
output is in q's dtype.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from anna_core.kernels.checks import check_paged_attention, require, require_dims, sequence_lengths


def reshape_and_cache(
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    """Write new keys/values into the paged cache.

    Args:
        k, v: ``[T, H_kv, D]`` (cast to the cache dtype).
        k_cache, v_cache: ``[num_blocks, block_size, H_kv, D]`` contiguous, written in place.
        slot_mapping: ``[T]`` int64, ``block * block_size + offset`` for each token.

    Raises:
        ValueError: shape mismatch or non-contiguous cache.
    """
    op = "reshape_and_cache"
    if not (k.dim() == 3 and k.shape == v.shape and k_cache.dim() == 4 and k_cache.shape == v_cache.shape
            and tuple(k_cache.shape[2:]) == tuple(k.shape[1:]) and slot_mapping.dim() == 1
            and slot_mapping.shape[0] == k.shape[0] and k_cache.is_contiguous() and v_cache.is_contiguous()):
        _check_reshape_and_cache(op, k, v, k_cache, v_cache, slot_mapping)  # raises, naming what is wrong
    flat_k = k_cache.view(-1, *k_cache.shape[2:])
    flat_v = v_cache.view(-1, *k_cache.shape[2:])
    flat_k.index_copy_(0, slot_mapping, k if k.dtype == k_cache.dtype else k.to(k_cache.dtype))
    flat_v.index_copy_(0, slot_mapping, v if v.dtype == v_cache.dtype else v.to(v_cache.dtype))


def _check_reshape_and_cache(op, k, v, k_cache, v_cache, slot_mapping) -> None:
    require_dims(op, k=(k, 3), v=(v, 3), k_cache=(k_cache, 4), v_cache=(v_cache, 4), slot_mapping=(slot_mapping, 1))
    require(k.shape == v.shape, op, f"k and v must match, got {tuple(k.shape)} and {tuple(v.shape)}")
    require(k_cache.shape == v_cache.shape, op, "k_cache and v_cache must have the same shape")
    require(tuple(k_cache.shape[2:]) == tuple(k.shape[1:]), op,
            f"cache head shape {tuple(k_cache.shape[2:])} differs from k's {tuple(k.shape[1:])}")
    require(slot_mapping.shape[0] == k.shape[0], op,
            f"slot_mapping has {slot_mapping.shape[0]} entries for {k.shape[0]} tokens")
    require(k_cache.is_contiguous() and v_cache.is_contiguous(), op, "caches must be contiguous")


def _gather(cache: torch.Tensor, blocks: torch.Tensor) -> torch.Tensor:
    """``cache[blocks]`` flattened over blocks: ``[..., n * block_size, H_kv, D]``, a float32 copy.

    ``index_select`` on the flattened ids, not advanced indexing: on the CPU ``cache[blocks]`` runs torch's
    parallel indexing kernel, whose thread hand-off dominates a gather of a few blocks (a few microseconds on
    one thread, milliseconds per call on two busy cores), while ``index_select`` is a plain copy."""
    picked = cache.index_select(0, blocks.reshape(-1)).to(torch.float32)
    return picked.reshape(*blocks.shape[:-1], -1, *cache.shape[2:])


def _sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, scale: float) -> torch.Tensor:
    """q ``[B, Lq, Hq, D]``, k/v ``[B, Lk, Hkv, D]``, mask ``[B, Lq, Lk]`` (True = attend) -> ``[B, Lq, Hq, D]``."""
    out = F.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
        attn_mask=None if mask is None else mask.unsqueeze(1),
        is_causal=mask is None, scale=scale, enable_gqa=q.shape[2] != k.shape[2],
    )
    return out.transpose(1, 2)


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
    """Causal attention of new queries over each sequence's cached context (module docstring has the rule).

    Args:
        q: ``[T, H_q, D]`` queries (rotary applied), ``H_q`` a multiple of ``H_kv``.
        k_cache, v_cache: ``[num_blocks, block_size, H_kv, D]``, already holding the new tokens' K/V.
        cu_seqlens_q: ``[B+1]`` int32 query row offsets.
        seq_lens: ``[B]`` int32 context lengths including the new tokens.
        block_tables: ``[B, max_blocks]`` int32 block ids (entries past a sequence's need are ignored).
        scale: softmax scale (usually ``D ** -0.5``).
        sliding_window: window length in positions (the query's own included), or None for full context.

    Returns:
        ``[T, H_q, D]`` in q's dtype.

    Raises:
        ValueError: inconsistent shapes, a sequence with more queries than context, a block table too
            short for its context, or a non-positive window.
    """
    op = "paged_attention"
    require_dims(op, q=(q, 3), k_cache=(k_cache, 4), v_cache=(v_cache, 4), seq_lens=(seq_lens, 1),
                 block_tables=(block_tables, 2))
    q_lens = sequence_lengths(op, cu_seqlens_q, q.shape[0])
    check_paged_attention(op, q, k_cache, v_cache, seq_lens, block_tables, sliding_window, len(q_lens))
    n_blocks, block_size = k_cache.shape[:2]
    ctx_lens = seq_lens.tolist()
    for i, (n_q, n_ctx) in enumerate(zip(q_lens, ctx_lens)):
        require(n_q <= n_ctx, op, f"sequence {i} has {n_q} queries but context length {n_ctx}")
        require(-(-n_ctx // block_size) <= block_tables.shape[1], op,
                f"sequence {i} needs {-(-n_ctx // block_size)} blocks, block_tables has {block_tables.shape[1]}")

    if len(q_lens) == 1 and q_lens[0] == 1 and sliding_window is None:
        return _decode_one(q, k_cache, v_cache, ctx_lens[0], block_tables[0], scale)
    out = torch.empty_like(q)
    starts = cu_seqlens_q.tolist()
    tables = block_tables.to(device=q.device, dtype=torch.long).clamp(0, n_blocks - 1)
    decodes = [i for i, n_q in enumerate(q_lens) if n_q == 1]
    if decodes:
        _decode_batch(q, k_cache, v_cache, out, decodes, starts, ctx_lens, tables, scale, sliding_window)
    for i, n_q in enumerate(q_lens):
        if n_q <= 1:
            continue
        n_ctx = ctx_lens[i]
        first_pos = n_ctx - n_q
        k_start = 0 if sliding_window is None else max(0, first_pos - sliding_window + 1)
        first_block = k_start // block_size
        blocks = tables[i, first_block:-(-n_ctx // block_size)]
        lo = first_block * block_size
        k = _gather(k_cache, blocks)[None, : n_ctx - lo]
        v = _gather(v_cache, blocks)[None, : n_ctx - lo]
        q_i = q[None, starts[i] : starts[i + 1]].to(torch.float32)
        mask = None
        if sliding_window is not None or n_q != n_ctx - lo:
            q_pos = torch.arange(first_pos, n_ctx, device=q.device)
            k_pos = torch.arange(lo, n_ctx, device=q.device)
            mask = _allowed(q_pos.unsqueeze(-1), k_pos, sliding_window)[None]
        out[starts[i] : starts[i + 1]] = _sdpa(q_i, k, v, mask, scale)[0].to(q.dtype)
    return out


def _allowed(q_pos: torch.Tensor, k_pos: torch.Tensor, sliding_window: int | None) -> torch.Tensor:
    """Boolean ``[..., Lq, Lk]``: key position ``<=`` query position and inside the window."""
    allowed = k_pos <= q_pos
    if sliding_window is not None:
        allowed = allowed & (k_pos > q_pos - sliding_window)
    return allowed


def _decode_one(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, n_ctx: int, table: torch.Tensor,
                scale: float) -> torch.Tensor:
    """The single-sequence decode step without a window (batch-1 generation): the one query sees every
    cached key, so no mask, padding or index bookkeeping is needed. q ``[1, H_q, D]`` -> ``[1, H_q, D]``.

    Two batched matrix products over the KV heads (each query head group of a KV head is one row block)
    and a softmax between them, all serial: a few small ops instead of
    ``scaled_dot_product_attention``'s parallel loop, whose thread hand-off costs more than this
    attention's work on a CPU (one query, a context of a few blocks)."""
    block_size, h_kv, d = k_cache.shape[1:]
    blocks = table[: -(-n_ctx // block_size)]
    blocks = blocks if blocks.dtype == torch.long else blocks.long()
    k = k_cache.index_select(0, blocks).view(-1, h_kv, d)[:n_ctx]  # [n_ctx, H_kv, D]
    v = v_cache.index_select(0, blocks).view(-1, h_kv, d)[:n_ctx]
    if k.dtype != torch.float32:
        k, v = k.float(), v.float()
    h_q = q.shape[1]
    q_g = q.reshape(h_kv, h_q // h_kv, d)  # [H_kv, G, D]: query head h reads KV head h // G
    q_g = (q_g if q_g.dtype == torch.float32 else q_g.float()) * scale
    probs = torch.softmax(torch.bmm(q_g, k.permute(1, 2, 0)), dim=-1)  # [H_kv, G, n_ctx]
    o = torch.bmm(probs, v.transpose(0, 1)).view(1, h_q, d)  # [H_kv, G, D] as [1, H_q, D]
    return o if o.dtype == q.dtype else o.to(q.dtype)


def _decode_batch(q, k_cache, v_cache, out, rows, starts, ctx_lens, tables, scale, sliding_window) -> None:
    """All single-query sequences ``rows`` at once, keys padded to the longest context and masked."""
    block_size = k_cache.shape[1]
    ctx = [ctx_lens[i] for i in rows]
    n_keys = max(ctx)
    idx = torch.tensor(rows, dtype=torch.long, device=q.device)
    blocks = tables[idx, : -(-n_keys // block_size)]
    ctx_t = torch.tensor(ctx, dtype=torch.long, device=q.device)
    # Rows past a sequence's own context are padding (other data, possibly never written): zero them so
    # that masked positions cannot inject NaN/inf through 0 * garbage.
    padding = (torch.arange(n_keys, device=q.device) >= ctx_t[:, None])[..., None, None]
    k = _gather(k_cache, blocks)[:, :n_keys].masked_fill_(padding, 0.0)
    v = _gather(v_cache, blocks)[:, :n_keys].masked_fill_(padding, 0.0)
    token_rows = torch.tensor([starts[i] for i in rows], dtype=torch.long, device=q.device)
    q_b = q.index_select(0, token_rows).to(torch.float32).unsqueeze(1)  # [Bd, 1, Hq, D]
    q_pos = (ctx_t - 1).view(-1, 1, 1)
    k_pos = torch.arange(n_keys, device=q.device)
    mask = _allowed(q_pos, k_pos, sliding_window)  # [Bd, 1, n_keys]
    o = _sdpa(q_b, k, v, mask, scale)[:, 0]
    out.index_copy_(0, token_rows, o.to(q.dtype))
