"""Pieces the Gemma 3 and Gemma 4 text models share: the cache groups of sliding-window and global
layers, the scaled token embedding and the (optionally soft-capped) logits. Attention is shared in
:mod:`anna_gemma4.attention`."""

from __future__ import annotations

from typing import Any

import torch
from anna_core.model import CacheSpec, FullAttentionSpec, SlidingWindowSpec
from torch import nn

from anna_gemma4.config import LAYER_TYPES, SLIDING


def cache_spec(cfg: Any) -> CacheSpec:
    """The sliding-window group (if the model has sliding layers), then the full-attention group.

    Args:
        cfg: a config with ``layers`` (:class:`~anna_gemma4.config.LayerSpec` per layer), ``layers_of(kind)``
            and ``sliding_window`` (a Gemma 3 or Gemma 4 config). KV-shared layers (``kv_owner``) are
            ``shared`` readers of their source layer in its group.
    """
    groups = []
    for kind in LAYER_TYPES:
        ids = cfg.layers_of(kind)
        if not ids:
            continue
        geometry = dict(num_kv_heads=cfg.layers[ids[0]].num_kv_heads, head_dim=cfg.layers[ids[0]].head_dim,
                        layers=[i for i in ids if cfg.layers[i].kv_owner is None],
                        shared=[(i, cfg.layers[i].kv_owner) for i in ids if cfg.layers[i].kv_owner is not None])
        if kind == SLIDING:
            groups.append(SlidingWindowSpec(window=cfg.sliding_window, **geometry))
        else:
            groups.append(FullAttentionSpec(**geometry))
    return CacheSpec(groups)


def scaled_embedding(embedding: nn.Embedding, ids: torch.Tensor, scale: float) -> torch.Tensor:
    """``embedding(ids) * scale`` ``[T, D]`` with the scale rounded to the weights' dtype first, as
    transformers does (``sqrt(3072)`` becomes 55.5 in bfloat16); a Python number, not a host tensor, so a
    captured graph has nothing to copy from the host."""
    return embedding(ids) * float(torch.tensor(scale, dtype=embedding.weight.dtype))


def gemma_logits(ops: Any, hidden: torch.Tensor, weight: torch.Tensor, softcap: float | None) -> torch.Tensor:
    """hidden ``[N, hidden]`` @ weight ``[vocab, hidden]``.T -> logits ``[N, vocab]`` float32, soft-capped
    (``cap * tanh(logits / cap)``) when ``softcap`` is set."""
    logits = ops.linear(hidden, weight, None).float()
    if softcap is not None:
        logits = torch.tanh(logits / softcap) * softcap
    return logits
