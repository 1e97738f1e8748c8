"""The Llama forward pass (Touvron et al., "LLaMA", 2023), built from anna-core's layers.

Pre-norm decoder layers: ``h = x + attn(rms_norm(x))``, ``out = h + swiglu(rms_norm(h))``;
rotary positions on q/k (NeoX halves, the checkpoint's scaling); grouped-query attention over
anna-core's paged KV cache; a final RMSNorm and a tied or untied LM head. Parameter names follow
HF's ``LlamaForCausalLM`` so a safetensors checkpoint maps onto them one to one.
"""

from __future__ import annotations

from typing import Any

import torch
from anna_core.distributed.layers import gather_vocab
from anna_core.distributed.state import SINGLE, ParallelState
from anna_core.engine.forward_batch import ForwardBatch
from anna_core.kernels import OpTable
from anna_core.layers import PagedAttention, RMSNorm, RotaryEmbedding, SwiGLUMLP
from anna_core.layers.linear import merge_linears
from anna_core.layers.quant_linear import QuantizedEmbedding
from anna_core.model import CacheSpec, FullAttentionSpec, ModelCaches, ModelCapabilities
from torch import nn

from anna_llama.compiled_decode import CompiledDecode
from anna_llama.config import LlamaConfig


class LlamaAttention(nn.Module):
    """q/k/v projections, rotary, paged GQA attention, output projection.

    After :meth:`merge_projections` one ``qkv_proj`` (rows: q, then k, then v) replaces the three
    input projections, and q and k are rotated in one call.
    """

    def __init__(self, cfg: LlamaConfig, layer: int, ops: OpTable, rotary: RotaryEmbedding):
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        bias = cfg.attention_bias
        self.q_proj = nn.Linear(cfg.hidden_size, self.num_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(cfg.hidden_size, self.num_kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(cfg.hidden_size, self.num_kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, cfg.hidden_size, bias=bias)
        self.qkv_proj: nn.Linear | None = None
        self.rotary = rotary  # one instance shared by all layers (no parameters)
        # one full-attention cache group (group 0) holds every layer's K/V, layer i at index i
        self.attn = PagedAttention(self.num_heads, self.num_kv_heads, self.head_dim, self.head_dim**-0.5, 0, layer, ops)

    def merge_projections(self) -> None:
        """Replace ``q_proj``, ``k_proj``, ``v_proj`` by one ``qkv_proj`` (same input, one GEMM).
        Call once the weights are loaded; idempotent; the math is unchanged."""
        if self.qkv_proj is None:
            self.qkv_proj = merge_linears([self.q_proj, self.k_proj, self.v_proj])
            del self.q_proj, self.k_proj, self.v_proj

    def forward(self, x: torch.Tensor, batch: ForwardBatch, caches: ModelCaches,
                wide: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        """x: ``[T, hidden]`` -> ``[T, hidden]``; ``wide``: ``self.rotary.widen(self.rotary.cos_sin(batch.positions))``
        when the caller computed it once for all layers (None: computed here)."""
        t, h, h_kv = x.shape[0], self.num_heads, self.num_kv_heads
        if wide is None:
            wide = self.rotary.widen(self.rotary.cos_sin(batch.positions))
        if self.qkv_proj is None:
            q = self.rotary.rotate_wide(self.q_proj(x).view(t, h, self.head_dim), wide)  # q: [T, H, D]
            k = self.rotary.rotate_wide(self.k_proj(x).view(t, h_kv, self.head_dim), wide)  # k: [T, Hkv, D]
            v = self.v_proj(x).view(t, h_kv, self.head_dim)
        else:
            qkv = self.qkv_proj(x).view(t, h + 2 * h_kv, self.head_dim)  # [T, H + 2 Hkv, D]
            qk = self.rotary.rotate_wide(qkv[:, : h + h_kv], wide)  # q and k heads in one call
            q, k, v = qk[:, :h], qk[:, h:], qkv[:, h + h_kv :]
        o = self.attn(q, k, v, batch, caches)  # o: [T, H, D]
        return self.o_proj(o.reshape(t, h * self.head_dim))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, cfg: LlamaConfig, layer: int, ops: OpTable, rotary: RotaryEmbedding):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, ops)
        self.self_attn = LlamaAttention(cfg, layer, ops, rotary)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, ops)
        self.mlp = SwiGLUMLP(cfg.hidden_size, cfg.intermediate_size)

    def forward(self, x: torch.Tensor, batch: ForwardBatch, caches: ModelCaches,
                wide: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        """x: ``[T, hidden]`` -> ``[T, hidden]``; ``wide`` as in :meth:`LlamaAttention.forward`."""
        h = x + self.self_attn(self.input_layernorm(x), batch, caches, wide)
        return h + self.mlp(self.post_attention_layernorm(h))


class LlamaModel(nn.Module):
    def __init__(self, cfg: LlamaConfig, ops: OpTable):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.rotary = RotaryEmbedding(cfg.head_dim, cfg.head_dim, cfg.rope_parameters, ops)
        self.layers = nn.ModuleList(LlamaDecoderLayer(cfg, i, ops, self.rotary) for i in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, ops)


class LlamaForCausalLM(nn.Module):
    """Implements :class:`anna_core.model.CausalLM`.

    Args:
        cfg: hyper-parameters (a tensor-parallel rank's share of heads and units:
            :func:`anna_llama.tensor_parallel.local_config`).
        ops: kernel ops bound to the serving device and dtype.
        parallel: the rank's state; its logits are gathered over the vocabulary shards (the loader swaps in the
            parallel layers, :func:`anna_core.distributed.layers.parallelize`).

    Parameters (HF names): ``model.embed_tokens.weight`` ``[V, H]``, ``model.layers.{i}.*``,
    ``model.norm.weight`` and, when untied, ``lm_head.weight`` ``[V, H]``. After
    :meth:`merge_projections` (the loader calls it), ``self_attn.qkv_proj`` and ``mlp.gate_up_proj``
    replace the q/k/v and gate/up projections.
    """

    def __init__(self, cfg: LlamaConfig, ops: OpTable, parallel: ParallelState = SINGLE):
        super().__init__()
        self.config = cfg
        self.ops = ops
        self.parallel = parallel
        self.model = LlamaModel(cfg, ops)
        self.lm_head = None if cfg.tie_word_embeddings else nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.vocab_size = cfg.vocab_size  # token ids the model accepts (the engine validates against it)
        self.cache_spec = CacheSpec((FullAttentionSpec(layers=range(cfg.num_hidden_layers),
                                                       num_kv_heads=cfg.num_key_value_heads, head_dim=cfg.head_dim),))
        self.capabilities = ModelCapabilities(quantized_kv=True, compiled_decode=True)
        self.compiled_decode: CompiledDecode | None = None  # compile_decode's step (batch-1 decodes), or None

    def merge_projections(self) -> None:
        """Merge the projections that read the same input (attention ``q|k|v_proj``, MLP
        ``gate|up_proj``) into one matrix each. The loader calls it once the weights are in place;
        the math is unchanged."""
        for layer in self.model.layers:
            layer.self_attn.merge_projections()
            layer.mlp.merge_gate_up()

    def use_column_major_weights(self) -> None:
        """Store every projection matrix (and the LM head) transposed in memory, keeping its
        ``[out, in]`` shape: on the CPU a one-token matrix-vector product streams such a weight about
        twice as fast as a row-major one (decode is memory-bound), at a small cost for mid-size
        prompts. The values, shapes and parameter names are unchanged. Call after loading/merging."""
        with torch.no_grad():
            for module in self.modules():
                if isinstance(module, (nn.Linear, nn.Embedding)) and module.weight.is_contiguous():
                    module.weight = nn.Parameter(module.weight.t().contiguous().t(), requires_grad=False)

    def compile_decode(self, caches: ModelCaches, compile_fn: Any) -> bool:
        """Run one-sequence, one-token decode steps through one compiled function (:mod:`anna_llama.compiled_decode`;
        ``compile_fn`` e.g. ``torch.compile`` with inductor's options); compiled on the first such step. Returns
        False (and changes nothing) when the caches' attention group is quantized or the model is not float32."""
        try:
            self.compiled_decode = CompiledDecode(self, caches, compile_fn)
        except ValueError:
            return False
        return True

    def forward(self, batch: ForwardBatch, caches: ModelCaches) -> torch.Tensor:
        """Hidden states ``[T, hidden]`` (after the final norm) for every token of ``batch``."""
        step = self.compiled_decode
        if step is not None and step.fits(batch):
            hidden = step(batch)
            if hidden is not None:
                return hidden
        x = self.model.embed_tokens(batch.input_ids)  # x: [T, H]
        rotary = self.model.rotary
        wide = rotary.widen(rotary.cos_sin(batch.positions))  # once per pass, shared by every layer
        for layer in self.model.layers:
            x = layer(x, batch, caches, wide)
        return self.model.norm(x)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden ``[N, H]`` -> logits ``[N, V]`` float32 (on every rank of a tensor-parallel group)."""
        embed = self.model.embed_tokens
        if self.lm_head is not None:
            logits = self.lm_head(hidden).float()
        elif isinstance(embed, QuantizedEmbedding):  # a GGUF table kept quantized: its packed twin
            logits = embed.logits(hidden).float()
        else:
            logits = torch.nn.functional.linear(hidden, embed.weight).float()
        return gather_vocab(logits, self.vocab_size, self.parallel)
