"""A tiny random model over four kinds of cache use, for engine tests (yours and Anna's).

:class:`CacheGroupsLM` has four token-mixing layers, each a residual block:

0. full attention, cache group 0 (``FullAttentionSpec``: 1 KV head of dim 8);
1. sliding-window attention, cache group 1 (``SlidingWindowSpec``: 2 KV heads of dim 4, window ``window``);
2. full attention that reads layer 0's K/V (KV sharing: listed in group 0's ``shared``, writes nothing);
3. a gated-DeltaNet-style recurrent layer, cache group 2 (``RecurrentStateSpec``): causal conv1d over
   q/k/v, then the gated delta rule, through the reference ops of the op table.

Positions enter through a fixed sinusoidal embedding added to the token embedding, so a block table that
maps a position to the wrong block changes the output. :meth:`CacheGroupsLM.reference_logits` computes
the same function over a whole sequence with no cache at all (dense masked attention, the recurrent rule
from a zero state): the engine's paged, chunked, batched and prefix-cached runs must match it.

Example::

    model = CacheGroupsLM(window=8)
    engine = LLMEngine(model, config=EngineConfig(block_size=4, num_blocks=64, ...))
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from anna_core.engine.forward_batch import ForwardBatch
from anna_core.kernels.ops import CORE_OPS
from anna_core.kernels.reference import conv1d, gated_delta_rule
from anna_core.kernels.registry import KernelRegistry, bind_ops
from anna_core.layers import padding
from anna_core.layers.attention import PagedAttention
from anna_core.model import (
    CacheSpec,
    FullAttentionSpec,
    ModelCaches,
    ModelCapabilities,
    RecurrentStateSpec,
    SlidingWindowSpec,
)

HIDDEN = 16
CONV_WIDTH = 4
H_K, H_V, D_K, D_V = 1, 2, 4, 4


def _sinusoid(positions: torch.Tensor, dim: int) -> torch.Tensor:
    """``[T, dim]`` fixed sinusoidal position features."""
    freq = torch.exp(-math.log(1000.0) * torch.arange(0, dim, 2, dtype=torch.float32) / dim)
    angle = positions.to(torch.float32)[:, None] * freq[None, :]
    return torch.cat([angle.sin(), angle.cos()], dim=-1)


class _Attention(nn.Module):
    def __init__(self, heads: int, kv_heads: int, head_dim: int, group: int, index: int, ops, window: int | None,
                 writes_kv: bool = True):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim, self.window = heads, kv_heads, head_dim, window
        self.q = nn.Linear(HIDDEN, heads * head_dim, bias=False)
        self.kv = nn.Linear(HIDDEN, 2 * kv_heads * head_dim, bias=False) if writes_kv else None
        self.o = nn.Linear(heads * head_dim, HIDDEN, bias=False)
        self.attn = PagedAttention(heads, kv_heads, head_dim, head_dim**-0.5, group, index, ops, window, writes_kv)

    def project(self, x: torch.Tensor):
        t = x.shape[0]
        q = self.q(x).view(t, self.heads, self.head_dim)  # [T, H, D]
        if self.kv is None:
            return q, None, None
        k, v = self.kv(x).view(t, 2, self.kv_heads, self.head_dim).unbind(1)  # [T, H_kv, D] each
        return q, k, v

    def forward(self, x: torch.Tensor, batch: ForwardBatch, caches: ModelCaches) -> torch.Tensor:
        q, k, v = self.project(x)
        return self.o(self.attn(q, k, v, batch, caches).reshape(x.shape[0], -1))

    def dense(self, x: torch.Tensor, kv: tuple[torch.Tensor, torch.Tensor] | None):
        """Whole-sequence attention without a cache; ``kv``: another layer's K/V (sharing)."""
        q, k, v = self.project(x)
        if kv is not None:
            k, v = kv
        t = x.shape[0]
        pos = torch.arange(t)
        mask = pos[None, :] <= pos[:, None]
        if self.window is not None:
            mask &= pos[None, :] > pos[:, None] - self.window
        rep = self.heads // k.shape[1]
        kk, vv = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        scores = torch.einsum("thd,shd->hts", q, kk) * self.head_dim**-0.5
        o = torch.einsum("hts,shd->thd", scores.masked_fill(~mask, float("-inf")).softmax(-1), vv)
        return self.o(o.reshape(t, -1)), (k, v)


class _Recurrent(nn.Module):
    def __init__(self, group: int, index: int):
        super().__init__()
        self.group, self.index = group, index
        self.channels = 2 * H_K * D_K + H_V * D_V
        self.inp = nn.Linear(HIDDEN, self.channels + 2 * H_V, bias=False)
        self.conv_w = nn.Parameter(torch.randn(self.channels, CONV_WIDTH) * 0.5)
        self.o = nn.Linear(H_V * D_V, HIDDEN, bias=False)

    def _gates(self, x: torch.Tensor):
        qkv, a, b = torch.split(self.inp(x), [self.channels, H_V, H_V], dim=-1)
        g = -F.softplus(a) * 0.5  # [T, H_v] log decay <= 0
        return qkv, g, torch.sigmoid(b)

    def _heads(self, qkv: torch.Tensor):
        t = qkv.shape[0]
        q, k, v = torch.split(qkv, [H_K * D_K, H_K * D_K, H_V * D_V], dim=-1)
        return (F.normalize(q.view(t, H_K, D_K), dim=-1), F.normalize(k.view(t, H_K, D_K), dim=-1),
                v.view(t, H_V, D_V))

    def forward(self, x: torch.Tensor, batch: ForwardBatch, caches: ModelCaches) -> torch.Tensor:
        cache = caches.state(self.group)
        conv, states = cache.conv[self.index], cache.recurrent[self.index]
        qkv, g, beta = self._gates(x)
        if batch.num_valid is not None:  # a padded prefill: padding rows change no state (anna_core.layers.padding)
            g = padding.mask_rows(g, batch.num_valid, 0.0)
            beta = padding.mask_rows(beta, batch.num_valid, 0.0)
            raw = qkv
            qkv = conv1d.causal_conv1d_prefill(qkv, self.conv_w, None, batch.cu_seqlens, conv, batch.state_slots,
                                               "silu")
            padding.write_conv_state(conv, batch.state_slots, raw, batch.num_valid)
            q, k, v = self._heads(padding.mask_rows(qkv, batch.num_valid, 0.0))
            o = gated_delta_rule.gated_delta_rule_prefill(q, k, v, g, beta, batch.cu_seqlens, states,
                                                          batch.state_slots, D_K**-0.5)
            return self.o(o.reshape(x.shape[0], -1))
        if batch.is_decode:
            qkv = conv1d.causal_conv1d_update(qkv, self.conv_w, None, conv, batch.state_slots, "silu")
            q, k, v = self._heads(qkv)
            o = gated_delta_rule.gated_delta_rule_decode(q, k, v, g, beta, states, batch.state_slots, D_K**-0.5)
        else:
            qkv = conv1d.causal_conv1d_prefill(qkv, self.conv_w, None, batch.cu_seqlens, conv, batch.state_slots,
                                               "silu")
            q, k, v = self._heads(qkv)
            o = gated_delta_rule.gated_delta_rule_prefill(q, k, v, g, beta, batch.cu_seqlens, states,
                                                          batch.state_slots, D_K**-0.5)
        return self.o(o.reshape(x.shape[0], -1))

    def dense(self, x: torch.Tensor) -> torch.Tensor:
        t = x.shape[0]
        qkv, g, beta = self._gates(x)
        cu = torch.tensor([0, t], dtype=torch.int32)
        slots = torch.zeros(1, dtype=torch.int64)
        conv = torch.zeros(1, self.channels, CONV_WIDTH - 1)
        states = torch.zeros(1, H_V, D_K, D_V)
        qkv = conv1d.causal_conv1d_prefill(qkv, self.conv_w, None, cu, conv, slots, "silu")
        q, k, v = self._heads(qkv)
        o = gated_delta_rule.gated_delta_rule_prefill(q, k, v, g, beta, cu, states, slots, D_K**-0.5)
        return self.o(o.reshape(t, -1))


class CacheGroupsLM(nn.Module):
    """A :class:`~anna_core.model.CausalLM` whose caches are one full-attention group (layers 0 and 2,
    layer 2 reading layer 0's K/V), one sliding-window group of another head_dim (layer 1) and one
    recurrent group (layer 3); float32 on the CPU, random weights from ``seed``.

    Args:
        window: the sliding window of layer 1 (tokens, the query's own included).
        vocab_size: token ids.
        seed: weight seed.
    """

    def __init__(self, window: int = 8, vocab_size: int = 64, seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        ops = bind_ops(KernelRegistry(CORE_OPS), "cpu", torch.float32)  # the torch references
        self.vocab_size = vocab_size
        self.window = window
        self.cache_spec = CacheSpec((
            FullAttentionSpec(layers=[0], num_kv_heads=1, head_dim=8, shared={2: 0}),
            SlidingWindowSpec(layers=[1], num_kv_heads=2, head_dim=4, window=window),
            RecurrentStateSpec(layers=[3], conv_shape=(2 * H_K * D_K + H_V * D_V, CONV_WIDTH - 1),
                               state_shape=(H_V, D_K, D_V)),
        ))
        self.capabilities = ModelCapabilities()
        self.embed = nn.Embedding(vocab_size, HIDDEN)
        self.full = _Attention(2, 1, 8, 0, self.cache_spec.groups[0].cache_index(0), ops, None)
        self.sliding = _Attention(2, 2, 4, 1, 0, ops, window)
        self.shared = _Attention(2, 1, 8, 0, self.cache_spec.groups[0].cache_index(2), ops, None, writes_kv=False)
        self.recurrent = _Recurrent(2, 0)
        with torch.no_grad():
            for p in self.parameters():
                p.mul_(1.5)

    def _norm(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)

    def forward(self, batch: ForwardBatch, caches: ModelCaches) -> torch.Tensor:
        """Hidden states ``[T, 16]`` for every token of ``batch``."""
        h = self.embed_inputs(batch)
        h = h + self.full(self._norm(h), batch, caches)
        h = h + self.sliding(self._norm(h), batch, caches)
        h = h + self.shared(self._norm(h), batch, caches)
        h = h + self.recurrent(self._norm(h), batch, caches)
        return self._norm(h)

    def embed_inputs(self, batch: ForwardBatch) -> torch.Tensor:
        """``[T, 16]`` the first residual stream: token embeddings plus position features."""
        return self.embed(batch.input_ids) + _sinusoid(batch.positions, HIDDEN)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """``[N, 16]`` -> ``[N, vocab]`` float32."""
        return 4.0 * hidden @ self.embed.weight.t()

    @torch.inference_mode()
    def reference_logits(self, token_ids: list[int]) -> torch.Tensor:
        """``[T, vocab]`` float32 logits of one whole sequence, computed without any cache."""
        ids = torch.tensor(token_ids, dtype=torch.int64)
        return self.dense_logits(self.embed(ids) + _sinusoid(torch.arange(len(token_ids)), HIDDEN))

    def dense_logits(self, h: torch.Tensor) -> torch.Tensor:
        """``[T, vocab]`` logits of one whole sequence from its first residual stream ``h`` ``[T, 16]``."""
        out, kv0 = self.full.dense(self._norm(h), None)
        h = h + out
        h = h + self.sliding.dense(self._norm(h), None)[0]
        h = h + self.shared.dense(self._norm(h), kv0)[0]
        h = h + self.recurrent.dense(self._norm(h))
        return self.compute_logits(self._norm(h))

    def reference_greedy(self, prompt: list[int], n: int) -> list[int]:
        """``n`` greedy tokens after ``prompt`` from :meth:`reference_logits`."""
        tokens = list(prompt)
        for _ in range(n):
            tokens.append(int(self.reference_logits(tokens)[-1].argmax()))
        return tokens[len(prompt):]
