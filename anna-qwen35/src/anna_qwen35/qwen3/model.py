"""The Qwen3 dense text model (Qwen Team, "Qwen3 Technical Report", 2025), built from anna-core's layers.

Pre-norm decoder layers, ``h = x + attn(norm(x))``, ``out = h + swiglu(norm(h))``; the attention normalises q and
k per head (RMSNorm over the head dim, a plain weight ``w``, not ``1 + w``) before a 1-D rotary (NeoX halves over
the whole head), then grouped-query attention over anna-core's paged KV cache; a final RMSNorm and a tied or
untied LM head. Parameter names follow transformers' ``Qwen3ForCausalLM`` (``model.embed_tokens``,
``model.layers.{i}.self_attn|mlp|input_layernorm|post_attention_layernorm``, ``model.norm``, ``lm_head``).
"""

from __future__ import annotations

from typing import Any

import torch
from anna_core.engine.forward_batch import ForwardBatch
from anna_core.layers import PagedAttention, RMSNorm, RotaryEmbedding, SwiGLUMLP
from anna_core.layers.linear import merge_linears
from anna_core.model import CacheSpec, FullAttentionSpec, ModelCaches, ModelCapabilities
from torch import nn

from anna_qwen35.qwen3.config import Qwen3Config


class Qwen3Attention(nn.Module):
    """q/k/v projections, per-head q/k RMSNorms, rotary, paged GQA attention, output projection.

    Parameters (checkpoint names under ``self_attn.``): ``q_proj`` ``[H*D, hidden]``, ``k_proj`` / ``v_proj``
    ``[H_kv*D, hidden]``, ``o_proj`` ``[hidden, H*D]`` (biases with ``attention_bias``), ``q_norm`` /
    ``k_norm`` ``[D]``. After :meth:`merge_projections` one ``qkv_proj`` (rows q, k, v) replaces the first three.

    Args:
        cfg: hyper-parameters; layer: this layer's index (its K/V tensors in cache group 0).
        rotary: the rotary table shared by every layer.
        ops: the model's :class:`anna_core.kernels.OpTable`.
    """

    def __init__(self, cfg: Qwen3Config, layer: int, rotary: RotaryEmbedding, ops: Any):
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        H, H_kv, D, bias = self.num_heads, self.num_kv_heads, self.head_dim, cfg.attention_bias
        self.q_proj = nn.Linear(cfg.hidden_size, H * D, bias=bias)
        self.k_proj = nn.Linear(cfg.hidden_size, H_kv * D, bias=bias)
        self.v_proj = nn.Linear(cfg.hidden_size, H_kv * D, bias=bias)
        self.o_proj = nn.Linear(H * D, cfg.hidden_size, bias=bias)
        self.q_norm = RMSNorm(D, cfg.rms_norm_eps, ops)
        self.k_norm = RMSNorm(D, cfg.rms_norm_eps, ops)
        self.qkv_proj: nn.Linear | None = None
        self._rotary = (rotary,)  # shared by every layer: a tuple keeps it out of this layer's submodules
        self.attn = PagedAttention(H, H_kv, D, D**-0.5, 0, layer, ops)
        self.ops = ops

    def merge_projections(self) -> None:
        """Replace ``q_proj``, ``k_proj``, ``v_proj`` by one ``qkv_proj`` (same input, one GEMM). Call once the
        weights are loaded; idempotent; the math is unchanged."""
        if self.qkv_proj is None:
            self.qkv_proj = merge_linears([self.q_proj, self.k_proj, self.v_proj])
            del self.q_proj, self.k_proj, self.v_proj

    def _project(self, x: torch.Tensor, norm: RMSNorm,
                 residual: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(q [T, H, D], k [T, H_kv, D], v [T, H_kv, D], x + residual)`` of the normalised ``x + residual``
        (the add and the norm fused into the merged projection once merged)."""
        T, H, H_kv, D = x.shape[0], self.num_heads, self.num_kv_heads, self.head_dim
        if self.qkv_proj is None:
            y, residual = norm.add_and_norm(x, residual)
            q, k, v = self.q_proj(y), self.k_proj(y), self.v_proj(y)
        else:
            qkv, residual = norm.add_norm_linear(x, residual, self.qkv_proj)
            q, k, v = torch.split(qkv, [H * D, H_kv * D, H_kv * D], dim=-1)
        return q.view(T, H, D), k.view(T, H_kv, D), v.view(T, H_kv, D), residual

    def forward(self, x: torch.Tensor, norm: RMSNorm, residual: torch.Tensor | None, batch: ForwardBatch,
                caches: ModelCaches) -> tuple[torch.Tensor, torch.Tensor]:
        """Attention over ``norm(x + residual)``.

        Args:
            x: ``[T, hidden]`` the previous block's output; residual: ``[T, hidden]`` the stream it has not been
                added to yet (None in the first layer: the stream starts at x).
            norm: the block's input RMSNorm.

        Returns:
            ``(output [T, hidden], x + residual [T, hidden])``. Side effect: this layer's K/V are written into
            its cache group.
        """
        T, rotary = x.shape[0], self._rotary[0]
        q, k, v, residual = self._project(x, norm, residual)
        # q/k norms, rotary and the cache write in one kernel where one (not only the torch reference) serves it
        fused = None if self.attn.quantized(caches) else self.ops.accelerated("qk_norm_rope_cache", head_dim=self.head_dim)
        if fused is not None:
            k_cache, v_cache, slots = self.attn.kv_cache(batch, caches)
            q = fused(q, k, v, self.q_norm.weight, self.k_norm.weight, self.q_norm.eps, False, batch.positions,
                      rotary._tables(x.device)[0], k_cache, v_cache, slots)
            o = self.attn.attend(q, batch, caches)
        else:
            q, k = rotary(batch.positions, self.q_norm(q), self.k_norm(k))
            o = self.attn(q, k, v, batch, caches)  # o: [T, H, D]
        return self.o_proj(o.reshape(T, self.num_heads * self.head_dim)), residual


class Qwen3DecoderLayer(nn.Module):
    """Pre-norm residual block (attention, then SwiGLU MLP) in residual-stream form: it takes the previous
    block's output and the stream not yet added to it, and returns the same pair; each add runs fused into the
    norm after it (and that norm into the projection that reads it)."""

    def __init__(self, cfg: Qwen3Config, layer: int, rotary: RotaryEmbedding, ops: Any):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, ops)
        self.self_attn = Qwen3Attention(cfg, layer, rotary, ops)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, ops)
        self.mlp = SwiGLUMLP(cfg.hidden_size, cfg.intermediate_size, ops)

    def forward(self, h: torch.Tensor, residual: torch.Tensor | None, batch: ForwardBatch,
                caches: ModelCaches) -> tuple[torch.Tensor, torch.Tensor]:
        """h, residual: ``[T, hidden]`` (residual None in the first layer) -> ``(mlp output, residual stream
        before adding it)``, both ``[T, hidden]``."""
        h, residual = self.self_attn(h, self.input_layernorm, residual, batch, caches)
        return self.mlp(h, pre_norm=(self.post_attention_layernorm, residual))


class Qwen3Model(nn.Module):
    """The decoder stack: ``embed_tokens``, ``layers``, ``norm`` (one rotary table shared by the layers)."""

    def __init__(self, cfg: Qwen3Config, ops: Any):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.rotary = RotaryEmbedding(cfg.head_dim, cfg.head_dim, cfg.rope_parameters, ops)
        self.layers = nn.ModuleList(Qwen3DecoderLayer(cfg, i, self.rotary, ops) for i in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, ops)

    def forward(self, h: torch.Tensor, batch: ForwardBatch, caches: ModelCaches) -> torch.Tensor:
        """h: ``[T, hidden]`` input embeddings -> hidden states ``[T, hidden]`` after the final norm."""
        residual = None
        for layer in self.layers:
            h, residual = layer(h, residual, batch, caches)
        return self.norm.add_and_norm(h, residual)[0]  # the last residual add fused into the final norm


class Qwen3ForCausalLM(nn.Module):
    """Implements :class:`anna_core.model.CausalLM` for Qwen3.

    Args:
        cfg: hyper-parameters.
        ops: kernel ops bound to the serving device and dtype.

    One full-attention cache group (layer ``i`` at index ``i``). Capabilities: padded prefills (attention only:
    padding rows change no state, :mod:`anna_core.layers.padding`). With tied embeddings there is no ``lm_head``;
    logits use ``model.embed_tokens.weight``.
    """

    capabilities = ModelCapabilities(padded_prefill=True, quantized_kv=True)

    def __init__(self, cfg: Qwen3Config, ops: Any):
        super().__init__()
        self.config = cfg
        self.ops = ops
        self.model = Qwen3Model(cfg, ops)
        self.lm_head = None if cfg.tie_word_embeddings else nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.hidden_size = cfg.hidden_size
        self.raw_config: dict[str, Any] | None = None  # the checkpoint's config.json, set by the loader (hf_export)
        self.cache_spec = CacheSpec((FullAttentionSpec(layers=range(cfg.num_hidden_layers),
                                                       num_kv_heads=cfg.num_key_value_heads, head_dim=cfg.head_dim),))

    @property
    def vocab_size(self) -> int:
        return self.config.vocab_size

    def hf_export(self) -> tuple[str, str, dict[str, Any], dict[str, torch.Tensor]]:
        """``(HF model class, HF config class, config kwargs, state dict)``: transformers' ``Qwen3ForCausalLM`` /
        ``Qwen3Config`` over this model's tensors (views, no copies; :func:`anna_qwen35.qwen3.weights.hf_state_dict`),
        for ``anna bench --compare-hf``.

        Raises:
            ModelLoadError: the loader did not keep the checkpoint's ``config.json`` (``raw_config``).
        """
        from anna_qwen35.qwen3.weights import hf_state_dict

        if self.raw_config is None:
            from anna_core.errors import ModelLoadError

            raise ModelLoadError("hf_export needs the checkpoint's config.json (set by the loader as raw_config)")
        kwargs = {k: v for k, v in self.raw_config.items() if k not in ("model_type", "architectures")}
        kwargs["tie_word_embeddings"] = self.config.tie_word_embeddings
        return "Qwen3ForCausalLM", "Qwen3Config", kwargs, hf_state_dict(self)

    def merge_projections(self) -> None:
        """Merge attention ``q|k|v_proj`` and MLP ``gate|up_proj`` into one matrix each. The loader calls it once
        the weights are in place; the math is unchanged."""
        for layer in self.model.layers:
            layer.self_attn.merge_projections()
            layer.mlp.merge_gate_up()

    def forward(self, batch: ForwardBatch, caches: ModelCaches) -> torch.Tensor:
        """Hidden states ``[T, hidden]`` (after the final norm) for every token of ``batch``."""
        return self.model(self.model.embed_tokens(batch.input_ids), batch, caches)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden ``[N, hidden]`` -> logits ``[N, vocab]`` float32."""
        weight = self.model.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        return self.ops.linear(hidden, weight, None).float()
