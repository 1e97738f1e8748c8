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
from anna_core.layers.linear import merge_linears
from anna_core.layers.norm import RMSNorm
from anna_core.layers.rotary import RotaryEmbedding
from anna_core.model import ModelCaches
from torch import nn

from anna_qwen35.config import Qwen35Config


class GatedAttention(nn.Module):
    """Parameters (checkpoint names under ``self_attn.``): ``q_proj`` ``[2*H*D, hidden]``,
    ``k_proj``/``v_proj`` ``[H_kv*D, hidden]``, ``o_proj`` ``[hidden, H*D]`` (biases when
    ``attention_bias``), ``q_norm``/``k_norm`` ``[D]``.
    """

    def __init__(self, cfg: Qwen35Config, group: int, kv_index: int, rotary: RotaryEmbedding, ops: Any):
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
        self.attn = PagedAttention(self.num_heads, self.num_kv_heads, D, D**-0.5, group, kv_index, ops)
        self.qkv_proj: nn.Linear | None = None
        self.ops = ops

    def merge_projections(self) -> None:
        """Replace ``q_proj``, ``k_proj``, ``v_proj`` by one ``qkv_proj`` (same input, one GEMM).
        Call once, after the weights are loaded."""
        if self.qkv_proj is None:
            self.qkv_proj = merge_linears([self.q_proj, self.k_proj, self.v_proj])
            del self.q_proj, self.k_proj, self.v_proj

    def _project(self, x: torch.Tensor, pre_norm=None):
        """x ``[T, hidden]`` -> (q+gate, k, v), new residual (None without ``pre_norm``; see :meth:`forward`)."""
        residual = None
        q_size, kv_size = 2 * self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        if pre_norm is not None:
            norm, residual = pre_norm
            if self.qkv_proj is not None:  # add + norm fused into the merged projection
                qkv, residual = norm.add_norm_linear(x, residual, self.qkv_proj)
                return torch.split(qkv, [q_size, kv_size, kv_size], dim=-1), residual
            x, residual = norm.add_and_norm(x, residual)
        if self.qkv_proj is None:
            return (self.q_proj(x), self.k_proj(x), self.v_proj(x)), residual
        return torch.split(self.qkv_proj(x), [q_size, kv_size, kv_size], dim=-1), residual

    def _fused_pre(self, batch: ForwardBatch):
        """The ``qk_norm_rope_cache`` op (q/k norms, rotary and the cache write as one op) chosen for this head dim
        and these positions (anna-xpu-kernels' Triton kernel where its probe accepts), with the positions and
        rope axis to hand it, or None: where only the op's torch reference would run it, or for q/k norm variants
        other than the zero-centred one; the separate ops then run, each chosen on its own.

        Positions: ``[T]``; M-RoPE ``[3, T]`` whose rows are equal (decode steps, text-only batches:
        ``ForwardBatch.uniform_positions``) as their first row; rows that differ (a prompt with media) as they are,
        with the rotary's per-frequency row (shape fact ``position_rows``)."""
        if not (self.q_norm.zero_centered and self.k_norm.zero_centered):
            return None
        positions = batch.positions
        if positions.dim() == 1 or batch.uniform_positions:
            op = self.ops.accelerated("qk_norm_rope_cache", head_dim=self.head_dim)
            return None if op is None else (op, positions if positions.dim() == 1 else positions[0], None)
        axis = self._rotary[0]._tables(positions.device)[1]
        if axis is None:  # multi-row positions without M-RoPE sections: the rotary layer raises the error
            return None
        op = self.ops.accelerated("qk_norm_rope_cache", head_dim=self.head_dim, position_rows=positions.shape[0])
        return None if op is None else (op, positions, axis)

    def forward(self, x: torch.Tensor, batch: ForwardBatch, caches: ModelCaches, pre_norm=None):
        """x: ``[T, hidden]`` -> ``[T, hidden]``; writes this layer's K/V into the paged cache.

        With ``pre_norm = (norm, residual)`` (the block's input RMSNorm and the residual stream, or
        None in the first block) x is the previous block's output: the layer runs on
        ``norm(x + residual)`` (add and norm fused into the q/k/v projection) and returns
        ``(output, x + residual)``.
        """
        (q_gate, k, v), residual = self._project(x, pre_norm)
        out = self._attend(q_gate, k, v, batch, caches)
        return out if pre_norm is None else (out, residual)

    def _attend(self, q_gate, k, v, batch: ForwardBatch, caches: ModelCaches) -> torch.Tensor:
        T, D = q_gate.shape[0], self.head_dim
        q_gate = q_gate.view(T, self.num_heads, 2 * D)
        gate = q_gate[..., D:]  # [T, H, D]
        fused = self._fused_pre(batch)
        if fused is not None:  # q/k norms, rotary and the cache write in one kernel
            op, positions, axis = fused
            attn = self.attn
            k_cache, v_cache = caches.attention(attn.group).layer(attn.kv_index)
            table = batch.tables[attn.group]
            q = op(q_gate[..., :D], k.view(T, self.num_kv_heads, D), v.view(T, self.num_kv_heads, D),
                   self.q_norm.weight, self.k_norm.weight, self.q_norm.eps, True, positions,
                   self._rotary[0]._tables(q_gate.device)[0], k_cache, v_cache, table.slot_mapping,
                   *(() if axis is None else (axis,)))
            o = self.ops.get("paged_attention", head_dim=D)(q, k_cache, v_cache, batch.cu_seqlens, batch.seq_lens,
                                                             table.block_tables, attn.scale, attn.sliding_window)
        else:
            q = self.q_norm(q_gate[..., :D])  # [T, H, D]
            k = self.k_norm(k.view(T, self.num_kv_heads, D))  # [T, H_kv, D]
            v = v.view(T, self.num_kv_heads, D)  # [T, H_kv, D]
            q, k = self._rotary[0](batch.positions, q, k)
            o = self.attn(q, k, v, batch, caches)  # [T, H, D]
        o = self.ops.sigmoid_mul(o, gate)  # o * sigmoid(gate), one launch
        return self.o_proj(o.reshape(T, self.num_heads * D))
