"""Gemma 4's attention layer (sliding-window or global, own K/V or another layer's).

Per head: q gets an RMSNorm with weight, k too, v an RMSNorm without weight; rotary on q and k
(the layer kind's table: default RoPE on sliding layers, proportional RoPE on global ones); softmax
scale 1.0 (the norms fix the logit scale); grouped-query attention over the paged cache. With
``attention_k_eq_v`` a global layer has no ``v_proj``: V is the K projection before ``k_norm``. A
KV-shared layer has only ``q_proj`` / ``q_norm`` / ``o_proj`` and attends over its source layer's
cache (:class:`~anna_core.cache_spec.FullAttentionSpec` ``shared``), writing nothing.
"""

from __future__ import annotations

from typing import Any

import torch
from anna_core.engine.forward_batch import ForwardBatch
from anna_core.layers.attention import PagedAttention
from anna_core.layers.norm import RMSNorm
from anna_core.layers.rotary import RotaryEmbedding
from anna_core.model import ModelCaches
from torch import nn

from anna_gemma4.config import SLIDING, Gemma4Config, LayerSpec


class Gemma4Attention(nn.Module):
    """Parameters (checkpoint names under ``self_attn.``): ``q_proj`` ``[H*D, hidden]``, ``o_proj``
    ``[hidden, H*D]``, ``q_norm`` ``[D]``; unless KV-shared also ``k_proj`` ``[H_kv*D, hidden]``,
    ``k_norm`` ``[D]`` and, unless ``k_eq_v``, ``v_proj`` ``[H_kv*D, hidden]`` (biases with
    ``attention_bias``).

    Args:
        cfg: the model config; layer: this layer's :class:`LayerSpec`.
        group, kv_index: its cache group and the index of the K/V tensors it uses in it.
        rotary: the rotary table of its layer kind (shared by those layers).
        ops: the model's :class:`anna_core.kernels.OpTable`.
    """

    def __init__(self, cfg: Gemma4Config, layer: LayerSpec, group: int, kv_index: int, rotary: RotaryEmbedding,
                 ops: Any):
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = cfg.num_attention_heads, layer.num_kv_heads, layer.head_dim
        H, H_kv, D, hidden, bias = self.num_heads, self.num_kv_heads, self.head_dim, cfg.hidden_size, cfg.attention_bias
        self.shares_kv = layer.kv_owner is not None
        self.q_proj = nn.Linear(hidden, H * D, bias=bias)
        self.q_norm = RMSNorm(D, cfg.rms_norm_eps, ops)
        if not self.shares_kv:
            self.k_proj = nn.Linear(hidden, H_kv * D, bias=bias)
            self.v_proj = None if layer.k_eq_v else nn.Linear(hidden, H_kv * D, bias=bias)
            self.k_norm = RMSNorm(D, cfg.rms_norm_eps, ops)
            self.v_norm = RMSNorm(D, cfg.rms_norm_eps, ops, scale=False)
        self.o_proj = nn.Linear(H * D, hidden, bias=bias)
        self._rotary = (rotary,)  # shared by the layers of a kind: a tuple keeps it out of the submodules
        window = cfg.sliding_window if layer.kind == SLIDING else None
        self.attn = PagedAttention(H, H_kv, D, 1.0, group, kv_index, ops, sliding_window=window,
                                   writes_kv=not self.shares_kv)

    def forward(self, x: torch.Tensor, batch: ForwardBatch, caches: ModelCaches,
                cos_sin: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        """x: ``[T, hidden]`` (the block's normalised input) -> ``[T, hidden]``.

        ``cos_sin``: this layer kind's ``rotary.cos_sin(batch.positions)``, computed once per pass.
        Side effect (unless KV-shared): the layer's K/V are written into its cache group.
        """
        T, rotary = x.shape[0], self._rotary[0]
        q = self.q_norm(self.q_proj(x).view(T, self.num_heads, self.head_dim))  # [T, H, D]
        q = rotary.rotate(q, cos_sin)
        k = v = None
        if not self.shares_kv:
            k = self.k_proj(x).view(T, self.num_kv_heads, self.head_dim)  # [T, H_kv, D]
            v = k if self.v_proj is None else self.v_proj(x).view(T, self.num_kv_heads, self.head_dim)
            k = rotary.rotate(self.k_norm(k), cos_sin)
            v = self.v_norm(v)
        o = self.attn(q, k, v, batch, caches)  # [T, H, D]
        return self.o_proj(o.reshape(T, self.num_heads * self.head_dim))
