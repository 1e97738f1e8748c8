"""Qwen3.5's gated full-attention layer.

``q_proj`` yields, per head, the query (first ``D`` outputs) followed by its output gate (next
``D``); q and k get a zero-centred RMSNorm over the head dim; rotary covers the first
``partial_rotary_factor * D`` dims (NeoX halves, M-RoPE reducing to 1-D positions for text);
grouped-query attention over the paged cache; the output is multiplied by ``sigmoid(gate)``
before ``o_proj``.
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

from anna_qwen35.config import Qwen35Config
from anna_qwen35.gated_deltanet import merge_linears


class GatedAttention(nn.Module):
    """Parameters (checkpoint names under ``self_attn.``): ``q_proj`` ``[2*H*D, hidden]``,
    ``k_proj``/``v_proj`` ``[H_kv*D, hidden]``, ``o_proj`` ``[hidden, H*D]`` (biases when
    ``attention_bias``), ``q_norm``/``k_norm`` ``[D]``.
    """

    def __init__(self, cfg: Qwen35Config, kv_index: int, rotary: RotaryEmbedding, ops: Any):
        super().__init__()
        self.num_heads = cfg.num_attention_heads
        self.num_kv_heads = cfg.num_key_value_heads
        self.head_dim = D = cfg.head_dim
        hidden, bias = cfg.hidden_size, cfg.attention_bias
        self.q_proj = nn.Linear(hidden, self.num_heads * D * 2, bias=bias)
        self.k_proj = nn.Linear(hidden, self.num_kv_heads * D, bias=bias)
        self.v_proj = nn.Linear(hidden, self.num_kv_heads * D, bias=bias)
        self.o_proj = nn.Linear(self.num_heads * D, hidden, bias=bias)
        self.q_norm = RMSNorm(D, cfg.rms_norm_eps, ops, zero_centered=True)
        self.k_norm = RMSNorm(D, cfg.rms_norm_eps, ops, zero_centered=True)
        # Shared across layers; stored in a tuple so it is not registered as a submodule per layer.
        self._rotary = (rotary,)
        self.attn = PagedAttention(self.num_heads, self.num_kv_heads, D, D**-0.5, kv_index, ops)
        self.qkv_proj: nn.Linear | None = None

    def merge_projections(self) -> None:
        """Replace ``q_proj``, ``k_proj``, ``v_proj`` by one ``qkv_proj`` (same input, one GEMM).
        Call once, after the weights are loaded."""
        if self.qkv_proj is None:
            self.qkv_proj = merge_linears([self.q_proj, self.k_proj, self.v_proj])
            del self.q_proj, self.k_proj, self.v_proj

    def _project(self, x: torch.Tensor):
        if self.qkv_proj is None:
            return self.q_proj(x), self.k_proj(x), self.v_proj(x)
        q_size, kv_size = 2 * self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        return torch.split(self.qkv_proj(x), [q_size, kv_size, kv_size], dim=-1)

    def forward(self, x: torch.Tensor, batch: ForwardBatch, caches: ModelCaches) -> torch.Tensor:
        """x: ``[T, hidden]`` -> ``[T, hidden]``; writes this layer's K/V into the paged cache."""
        T, D = x.shape[0], self.head_dim
        q_gate, k, v = self._project(x)
        q_gate = q_gate.view(T, self.num_heads, 2 * D)
        q = self.q_norm(q_gate[..., :D])  # [T, H, D]
        gate = q_gate[..., D:]  # [T, H, D]
        k = self.k_norm(k.view(T, self.num_kv_heads, D))  # [T, H_kv, D]
        v = v.view(T, self.num_kv_heads, D)  # [T, H_kv, D]
        q, k = self._rotary[0](batch.positions, q, k)
        o = self.attn(q, k, v, batch, caches)  # [T, H, D]
        o = o * torch.sigmoid(gate)
        return self.o_proj(o.reshape(T, self.num_heads * D))
