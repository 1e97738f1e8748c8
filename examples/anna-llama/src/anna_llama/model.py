"""The Llama forward pass (Touvron et al., "LLaMA", 2023), built from anna-core's layers.

Pre-norm decoder layers: ``h = x + attn(rms_norm(x))``, ``out = h + swiglu(rms_norm(h))``;
rotary positions on q/k (NeoX halves, the checkpoint's scaling); grouped-query attention over
anna-core's paged KV cache; a final RMSNorm and a tied or untied LM head. Parameter names follow
HF's ``LlamaForCausalLM`` so a safetensors checkpoint maps onto them one to one.
"""

from __future__ import annotations

import torch
from anna_core.engine.forward_batch import ForwardBatch
from anna_core.kernels import OpTable
from anna_core.layers import PagedAttention, RMSNorm, RotaryEmbedding, SwiGLUMLP
from anna_core.model import AttentionCacheSpec, CacheSpec, ModelCaches
from torch import nn

from anna_llama.config import LlamaConfig


class LlamaAttention(nn.Module):
    """q/k/v projections, rotary, paged GQA attention, output projection."""

    def __init__(self, cfg: LlamaConfig, layer: int, ops: OpTable):
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        bias = cfg.attention_bias
        self.q_proj = nn.Linear(cfg.hidden_size, self.num_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(cfg.hidden_size, self.num_kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(cfg.hidden_size, self.num_kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, cfg.hidden_size, bias=bias)
        self.rotary = RotaryEmbedding(self.head_dim, self.head_dim, cfg.rope_parameters, ops)
        self.attn = PagedAttention(self.num_heads, self.num_kv_heads, self.head_dim, self.head_dim**-0.5, layer, ops)

    def forward(self, x: torch.Tensor, batch: ForwardBatch, caches: ModelCaches) -> torch.Tensor:
        """x: ``[T, hidden]`` -> ``[T, hidden]``."""
        t = x.shape[0]
        q = self.q_proj(x).view(t, self.num_heads, self.head_dim)  # q: [T, H, D]
        k = self.k_proj(x).view(t, self.num_kv_heads, self.head_dim)  # k: [T, Hkv, D]
        v = self.v_proj(x).view(t, self.num_kv_heads, self.head_dim)
        q, k = self.rotary(batch.positions, q, k)
        o = self.attn(q, k, v, batch, caches)  # o: [T, H, D]
        return self.o_proj(o.reshape(t, self.num_heads * self.head_dim))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, cfg: LlamaConfig, layer: int, ops: OpTable):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, ops)
        self.self_attn = LlamaAttention(cfg, layer, ops)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, ops)
        self.mlp = SwiGLUMLP(cfg.hidden_size, cfg.intermediate_size)

    def forward(self, x: torch.Tensor, batch: ForwardBatch, caches: ModelCaches) -> torch.Tensor:
        """x: ``[T, hidden]`` -> ``[T, hidden]``."""
        h = x + self.self_attn(self.input_layernorm(x), batch, caches)
        return h + self.mlp(self.post_attention_layernorm(h))


class LlamaModel(nn.Module):
    def __init__(self, cfg: LlamaConfig, ops: OpTable):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(LlamaDecoderLayer(cfg, i, ops) for i in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, ops)


class LlamaForCausalLM(nn.Module):
    """Implements :class:`anna_core.model.CausalLM`.

    Args:
        cfg: hyper-parameters.
        ops: kernel ops bound to the serving device and dtype.

    Parameters (HF names): ``model.embed_tokens.weight`` ``[V, H]``, ``model.layers.{i}.*``,
    ``model.norm.weight`` and, when untied, ``lm_head.weight`` ``[V, H]``.
    """

    def __init__(self, cfg: LlamaConfig, ops: OpTable):
        super().__init__()
        self.config = cfg
        self.model = LlamaModel(cfg, ops)
        self.lm_head = None if cfg.tie_word_embeddings else nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.vocab_size = cfg.vocab_size  # token ids the model accepts (the engine validates against it)
        self.cache_spec = CacheSpec(
            attention=AttentionCacheSpec(cfg.num_hidden_layers, cfg.num_key_value_heads, cfg.head_dim)
        )

    def forward(self, batch: ForwardBatch, caches: ModelCaches) -> torch.Tensor:
        """Hidden states ``[T, hidden]`` (after the final norm) for every token of ``batch``."""
        x = self.model.embed_tokens(batch.input_ids)  # x: [T, H]
        for layer in self.model.layers:
            x = layer(x, batch, caches)
        return self.model.norm(x)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden ``[N, H]`` -> logits ``[N, V]`` float32."""
        weight = self.model.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        return torch.nn.functional.linear(hidden, weight).float()
