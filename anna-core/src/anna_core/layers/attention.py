"""Multi-head attention over the paged KV cache (the attention step only, no projections)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from anna_core.engine.forward_batch import ForwardBatch
from anna_core.model import ModelCaches


class PagedAttention(nn.Module):
    """Writes a step's K/V into the paged cache, then attends causally over each sequence's context.

    Grouped-query attention (Ainslie et al., 2023): query head ``h`` reads KV head
    ``h // (num_heads // num_kv_heads)``. The math and cache layout are the ``reshape_and_cache``
    and ``paged_attention`` ops of :mod:`anna_core.kernels.ops`.

    Args:
        num_heads: query heads ``H_q``.
        num_kv_heads: key/value heads ``H_kv`` (divides ``H_q``).
        head_dim: ``D``.
        scale: softmax scale (usually ``D ** -0.5``).
        kv_index: index of this layer's cache in ``caches.kv``.
        ops: the model's :class:`anna_core.kernels.OpTable`.
        sliding_window: attend only to the last ``sliding_window`` positions (None: full context).

    Raises:
        ValueError: ``num_heads`` is not a multiple of ``num_kv_heads``.
    """

    def __init__(self, num_heads: int, num_kv_heads: int, head_dim: int, scale: float, kv_index: int, ops: Any,
                 sliding_window: int | None = None):
        super().__init__()
        if num_kv_heads <= 0 or num_heads % num_kv_heads:
            raise ValueError(f"num_heads ({num_heads}) must be a positive multiple of num_kv_heads ({num_kv_heads})")
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.scale = float(scale)
        self.kv_index = kv_index
        self.sliding_window = sliding_window
        self.ops = ops

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, batch: ForwardBatch,
                caches: ModelCaches) -> torch.Tensor:
        """q: ``[T, H_q, D]``; k, v: ``[T, H_kv, D]`` (rotary already applied) -> ``[T, H_q, D]``.

        Side effect: k, v are written to ``caches.kv[kv_index]`` at ``batch.slot_mapping``.
        """
        k_cache, v_cache = caches.kv[self.kv_index]
        self.ops.reshape_and_cache(k, v, k_cache, v_cache, batch.slot_mapping)
        attend = self.ops.get("paged_attention", head_dim=self.head_dim)
        return attend(q, k_cache, v_cache, batch.cu_seqlens, batch.seq_lens, batch.block_tables, self.scale,
                      self.sliding_window)

    def extra_repr(self) -> str:
        return (f"heads={self.num_heads}, kv_heads={self.num_kv_heads}, head_dim={self.head_dim}, "
                f"kv_index={self.kv_index}, sliding_window={self.sliding_window}")
