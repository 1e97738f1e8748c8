"""The paged attention with its query pre-processing fused in (:mod:`anna_xpu_kernels.paged_attention`'s kernel with
its ``Q_NORM_ROPE`` / ``KV_NEW`` paths; that module's docstring says how the kernel does it):

* ``q_norm_rope_attention``: a KV-shared layer (no K/V of its own), the query's norm and rotary applied on load;
* ``qkv_norm_rope_cache_attention`` (Gemma 4: with the weightless value norm) and ``qk_norm_rope_cache_attention``
  (Qwen3-TTS's talker and code predictor: without): a layer that writes its own K/V; at decode one kernel computes
  the new key and value in registers, attends with them and writes them; other batches run the pre-processing op's
  kernel, then :func:`~anna_xpu_kernels.paged_attention.paged_attention`.
"""

from __future__ import annotations

import torch
from anna_core.kernels.checks import require

from anna_xpu_kernels import qk_norm_rope
from anna_xpu_kernels._checks import require_same_device
from anna_xpu_kernels.paged_attention import MAX_HEAD_DIM, paged_attention, paged_attention_splits


def q_norm_rope_attention(q: torch.Tensor, weight: torch.Tensor, eps: float, zero_centered: bool,
                          positions: torch.Tensor, inv_freq: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                          cu_seqlens_q: torch.Tensor, seq_lens: torch.Tensor, block_tables: torch.Tensor, scale: float,
                          sliding_window: int | None) -> torch.Tensor:
    """``q_norm_rope`` done as the attention kernel loads its query tile (signature of the reference
    ``q_norm_rope_attention``): one launch (plus the split merge) for a KV-shared layer's queries and attention.

    Args:
        q: ``[T, H_q, D]`` raw queries (unit stride along D); weight: ``[D]`` the q norm's; eps, zero_centered:
            its; positions: ``[T]`` int64; inv_freq: ``[R/2]`` float32 (``0 < R <= D``); the rest as
            :func:`paged_attention`.

    Returns:
        ``[T, H_q, D]`` in q's dtype. Head dims above 512 or a cache dtype other than q's run the torch references.

    Raises:
        ValueError: inconsistent shapes, unsupported dtype, non-positive window.
    """
    op = "q_norm_rope_attention"
    require(q.dim() == 3, op, f"q must be [T, H, D], got {tuple(q.shape)}")
    total, _, dim = q.shape
    require(tuple(weight.shape) == (dim,), op, f"weight must be [{dim}]")
    require(inv_freq.dim() == 1 and 0 < 2 * inv_freq.shape[0] <= dim, op,
            f"inv_freq must be [rotary_dim/2 <= {dim // 2}]")
    require(positions.dim() == 1 and positions.shape[0] == total, op, f"positions must be [T={total}]")
    require(q.stride(2) == 1, op, "q needs unit stride along D")
    require_same_device(op, q=q, weight=weight, positions=positions, inv_freq=inv_freq)
    prologue = (weight, float(eps), bool(zero_centered), positions.contiguous(), inv_freq.to(torch.float32))
    return paged_attention_splits(q, k_cache, v_cache, cu_seqlens_q, seq_lens, block_tables, scale, sliding_window,
                                  num_splits=None, q_norm_rope=prologue)


def qk_norm_rope_cache_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_weight: torch.Tensor,
                                 k_weight: torch.Tensor, eps: float, zero_centered: bool, positions: torch.Tensor,
                                 inv_freq: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                                 slot_mapping: torch.Tensor, cu_seqlens_q: torch.Tensor, seq_lens: torch.Tensor,
                                 block_tables: torch.Tensor, scale: float, sliding_window: int | None) -> torch.Tensor:
    """An attention layer's q/k norms, rotary and cache write fused into its attention (signature of the reference
    ``qk_norm_rope_cache_attention``; no value norm: Qwen3-TTS's talker and code predictor). For a decode batch (one
    query per sequence) one launch plus the split merge, as :func:`qkv_norm_rope_cache_attention` without its value
    norm; other batches run :func:`anna_xpu_kernels.qk_norm_rope.qk_norm_rope_cache` then :func:`paged_attention`.
    Arguments, result and errors as :func:`qkv_norm_rope_cache_attention`'s.
    """
    return _own_kv_attention("qk_norm_rope_cache_attention", False, q, k, v, q_weight, k_weight, eps, zero_centered,
                             positions, inv_freq, k_cache, v_cache, slot_mapping, cu_seqlens_q, seq_lens, block_tables,
                             scale, sliding_window)


def qkv_norm_rope_cache_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_weight: torch.Tensor,
                                  k_weight: torch.Tensor, eps: float, zero_centered: bool, positions: torch.Tensor,
                                  inv_freq: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                                  slot_mapping: torch.Tensor, cu_seqlens_q: torch.Tensor, seq_lens: torch.Tensor,
                                  block_tables: torch.Tensor, scale: float, sliding_window: int | None) -> torch.Tensor:
    """Gemma 4's attention pre-processing fused into its attention (signature of the reference
    ``qkv_norm_rope_cache_attention``). For a decode batch (one query per sequence) one launch plus the split merge:
    each program normalises and rotates its query rows as it loads them, computes its KV head's new key (normalised,
    rotated) and value (normalised, no weight) in registers and uses them for position ``seq_len - 1``, whose cache
    row split 0 writes (``slot_mapping``); other batches run :func:`anna_xpu_kernels.qk_norm_rope.qkv_norm_rope_cache`
    then :func:`paged_attention`.

    Args:
        q: ``[T, H_q, D]``; k, v: ``[T, H_kv, D]`` (unit stride along D; v may be k's rows); q_weight, k_weight:
            ``[D]``; eps, zero_centered: the norms'; positions: ``[T]`` int64 (the rotary positions);
            inv_freq: ``[R/2]`` float32; k_cache, v_cache, slot_mapping as ``qk_norm_rope_cache``; the rest as
            :func:`paged_attention`.

    Returns:
        ``[T, H_q, D]`` in q's dtype; the new keys and values are written into the caches.

    Raises:
        ValueError: inconsistent shapes, unsupported dtype, non-positive window.
    """
    return _own_kv_attention("qkv_norm_rope_cache_attention", True, q, k, v, q_weight, k_weight, eps, zero_centered,
                             positions, inv_freq, k_cache, v_cache, slot_mapping, cu_seqlens_q, seq_lens, block_tables,
                             scale, sliding_window)


def _own_kv_attention(op: str, v_norm: bool, q, k, v, q_weight, k_weight, eps, zero_centered, positions, inv_freq,
                      k_cache, v_cache, slot_mapping, cu_seqlens_q, seq_lens, block_tables, scale,
                      sliding_window) -> torch.Tensor:
    """The attention of a layer that writes its own K/V, its pre-processing fused in (``v_norm``: with the weightless
    value norm, ``qkv_norm_rope_cache_attention``; without, ``qk_norm_rope_cache_attention``): one kernel for a
    decode batch the kernel takes, else the pre-processing op's kernel then :func:`paged_attention`."""
    require(q.dim() == 3 and k.dim() == 3 and k.shape == v.shape, op,
            f"q must be [T, H_q, D] and k, v one [T, H_kv, D] shape, got {tuple(q.shape)}, {tuple(k.shape)}, "
            f"{tuple(v.shape)}")
    total, _, dim = q.shape
    batch = cu_seqlens_q.shape[0] - 1
    fusable = (total == batch and dim <= MAX_HEAD_DIM and k_cache.dtype == q.dtype and v_cache.dtype == q.dtype
               and k.shape[0] == total and k.shape[2] == dim and tuple(k_cache.shape[2:]) == tuple(k.shape[1:])
               and k.stride(2) == 1 and v.stride(2) == 1 and tuple(q_weight.shape) == (dim,)
               and tuple(k_weight.shape) == (dim,) and tuple(slot_mapping.shape) == (total,))
    if not fusable:  # prefill chunks (several queries per sequence) and shapes the kernel does not take
        pre = qk_norm_rope.qkv_norm_rope_cache if v_norm else qk_norm_rope.qk_norm_rope_cache
        q = pre(q, k, v, q_weight, k_weight, eps, zero_centered, positions, inv_freq, k_cache, v_cache, slot_mapping)
        return paged_attention(q, k_cache, v_cache, cu_seqlens_q, seq_lens, block_tables, scale, sliding_window)
    require(inv_freq.dim() == 1 and 0 < 2 * inv_freq.shape[0] <= dim, op,
            f"inv_freq must be [rotary_dim/2 <= {dim // 2}]")
    require(positions.dim() == 1 and positions.shape[0] == total, op, f"positions must be [T={total}]")
    require_same_device(op, q=q, k=k, v=v, q_weight=q_weight, k_weight=k_weight, positions=positions,
                        inv_freq=inv_freq, slot_mapping=slot_mapping)
    prologue = (q_weight, float(eps), bool(zero_centered), positions.contiguous(), inv_freq.to(torch.float32))
    return paged_attention_splits(q, k_cache, v_cache, cu_seqlens_q, seq_lens, block_tables, scale, sliding_window,
                                  num_splits=None, q_norm_rope=prologue, kv_new=(k, v, k_weight, slot_mapping, v_norm),
                                  op_name=op)
