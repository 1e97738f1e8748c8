"""The Gemma 3 text model (``Gemma3ForCausalLM``, and the language model of ``Gemma3ForConditionalGeneration``),
as transformers 5.24's ``modeling_gemma3.py`` computes it.

Per decoder layer (every RMSNorm multiplies by ``1 + w``, math in float32)::

    h = h + post_attention_layernorm(attn(input_layernorm(h)))
    h = h + post_feedforward_layernorm(down(gelu_tanh(gate(x)) * up(x)))   with x = pre_feedforward_layernorm(h)

Attention: per-head ``q_norm`` / ``k_norm`` (``1 + w``) before RoPE, no v norm, softmax scale
``query_pre_attn_scalar ** -0.5``; sliding layers see the last ``sliding_window`` positions and use
their own RoPE table (base ``rope_local_base_freq``, 1e4), global layers the whole context (base
``rope_theta``, 1e6, possibly linearly scaled). Embeddings are scaled by ``sqrt(hidden)`` rounded to the
weight dtype; the final norm, then a tied or untied LM head, logits soft-capped only if configured.

Parameter names are HF's ``Gemma3ForCausalLM`` ones (``model.embed_tokens``, ``model.layers.{i}.*``,
``model.norm``, ``lm_head``). Caches: a sliding-window group and a full-attention group of one geometry.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from anna_core.engine.forward_batch import ForwardBatch
from anna_core.layers.mlp import SwiGLUMLP
from anna_core.layers.norm import RMSNorm
from anna_core.layers.rotary import RotaryEmbedding
from anna_core.model import CacheSpec, ModelCaches, ModelCapabilities
from torch import nn

from anna_gemma4.attention import GemmaAttention
from anna_gemma4.common import GemmaCausalLM, RotaryTables, next_norms, scaled_embedding
from anna_gemma4.config import LAYER_TYPES, SLIDING, LayerSpec
from anna_gemma4.gemma3.config import Gemma3Config


class Gemma3DecoderLayer(nn.Module):
    """Parameters (checkpoint names under ``model.layers.{i}.``): ``self_attn.q_proj|k_proj|v_proj|o_proj``,
    ``self_attn.q_norm|k_norm`` ``[D]``, ``mlp.gate_proj|up_proj`` ``[I, hidden]``, ``mlp.down_proj``
    ``[hidden, I]``, ``input_layernorm``, ``post_attention_layernorm``, ``pre_feedforward_layernorm``,
    ``post_feedforward_layernorm`` ``[hidden]`` (all norms stored as ``w - 1``)."""

    def __init__(self, cfg: Gemma3Config, layer: LayerSpec, group: int, kv_index: int, rotary: RotaryEmbedding,
                 ops: Any):
        super().__init__()
        hidden, eps = cfg.hidden_size, cfg.rms_norm_eps
        self.kind = layer.kind
        self.self_attn = GemmaAttention(
            hidden=hidden, num_heads=cfg.num_attention_heads, layer=layer, eps=eps, bias=cfg.attention_bias,
            window=cfg.sliding_window if layer.kind == SLIDING else None, scale=cfg.query_pre_attn_scalar**-0.5,
            zero_centered=True, v_norm=False, group=group, kv_index=kv_index, rotary=rotary, ops=ops)
        self.mlp = SwiGLUMLP(hidden, layer.intermediate_size, ops, activation="gelu_tanh")
        self.input_layernorm = RMSNorm(hidden, eps, ops, zero_centered=True)
        self.post_attention_layernorm = RMSNorm(hidden, eps, ops, zero_centered=True)
        self.pre_feedforward_layernorm = RMSNorm(hidden, eps, ops, zero_centered=True)
        self.post_feedforward_layernorm = RMSNorm(hidden, eps, ops, zero_centered=True)

    def forward(self, h: torch.Tensor, y: torch.Tensor, batch: ForwardBatch, caches: ModelCaches,
                cos_sin: Callable[[], tuple[torch.Tensor, torch.Tensor]],
                next_norm: RMSNorm) -> tuple[torch.Tensor, torch.Tensor]:
        """h: ``[T, hidden]`` the residual stream; y: ``input_layernorm(h)`` (from the layer before); cos_sin:
        gives the rotary table of this layer's kind (:meth:`~anna_gemma4.common.RotaryTables.of`); next_norm: the norm of this layer's output (the next layer's
        input norm, or the final norm) -> ``(h', next_norm(h'))``. Each residual add runs fused with the norms
        around it (``post_norm_residual``)."""
        a = self.self_attn(y, batch, caches, cos_sin)
        y, h = self.post_attention_layernorm.post_add(a, h, next_norm=self.pre_feedforward_layernorm)
        y, h = self.post_feedforward_layernorm.post_add(self.mlp(y), h, next_norm=next_norm)
        return h, y

    def merge_projections(self) -> None:
        """Merge the attention's q/k/v and the MLP's gate/up projections (one GEMM each); the math is unchanged."""
        self.self_attn.merge_projections()
        self.mlp.merge_gate_up()


class Gemma3TextModel(nn.Module):
    """Scaled embeddings, the decoder layers (one RoPE table per layer kind) and the final norm."""

    def __init__(self, cfg: Gemma3Config, spec: CacheSpec, ops: Any):
        super().__init__()
        self.config = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.rotary = nn.ModuleDict({kind: RotaryEmbedding(cfg.head_dim, cfg.head_dim, cfg.rope[kind], ops)
                                     for kind in LAYER_TYPES if cfg.layers_of(kind)})
        self.layers = nn.ModuleList(
            Gemma3DecoderLayer(cfg, layer, spec.group_of(i), spec.groups[spec.group_of(i)].cache_index(i),
                               self.rotary[layer.kind], ops)
            for i, layer in enumerate(cfg.layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, ops, zero_centered=True)

    def forward(self, batch: ForwardBatch, caches: ModelCaches) -> torch.Tensor:
        """Hidden states ``[T, hidden]`` after the final norm."""
        h = scaled_embedding(self.embed_tokens, batch.input_ids, self.config.hidden_size**0.5)  # [T, hidden]
        tables = RotaryTables(self.rotary, batch.positions)  # computed only if a layer runs the unfused rotary
        y = self.layers[0].input_layernorm(h)
        for layer, next_norm in zip(self.layers, next_norms(self.layers, self.norm), strict=True):
            h, y = layer(h, y, batch, caches, tables.of(layer.kind), next_norm)
        return y


class Gemma3ForCausalLM(GemmaCausalLM):
    """Implements :class:`anna_core.model.CausalLM` for the Gemma 3 text models (270M, 1B, and the language
    model of 4B / 12B / 27B).

    Args:
        cfg: parsed config.
        ops: :class:`anna_core.kernels.OpTable` bound to the serving device and dtype.

    With tied embeddings there is no ``lm_head`` parameter; logits use ``embed_tokens.weight``.
    Capabilities: padding rows of a padded prefill change no state (attention caches only, every
    per-token step row-wise), so the runner may capture its prefills.
    """

    capabilities = ModelCapabilities(padded_prefill=True, quantized_kv=True, topk_head=True)

    def __init__(self, cfg: Gemma3Config, ops: Any):
        super().__init__(cfg, ops, Gemma3TextModel)

    def hf_export(self) -> tuple[str, str, dict[str, Any], dict[str, torch.Tensor]]:
        """``("Gemma3ForCausalLM", "Gemma3TextConfig", config kwargs, state dict)``: transformers' text-only
        Gemma 3 over this model's tensors (views, no copies), for ``anna bench --compare-hf``
        (:func:`anna_core.bench.hf_compare.build_hf`).

        The config kwargs are the text part of the checkpoint's ``config.json``
        (:func:`~anna_gemma4.weights.hf_text_config`; transformers fills the fields the released
        conditional configs leave out with the defaults Anna parses them with) or, for a GGUF source
        (no ``config.json``), :func:`hf_text_config_of` the parsed metadata. The state dict is
        :func:`~anna_gemma4.weights.hf_state_dict` (merged gate/up projections split back; GGUF norms
        are stored as transformers' ``w``, the file's ``1 + w`` having been undone at load).
        """
        from anna_gemma4.weights import hf_state_dict, hf_text_config

        tie = self.config.tie_word_embeddings
        text = hf_text_config_of(self.config) if self.raw_config is None else hf_text_config(self.raw_config, tie)
        return "Gemma3ForCausalLM", "Gemma3TextConfig", text, hf_state_dict(self)


def hf_text_config_of(cfg: Gemma3Config) -> dict[str, Any]:
    """``Gemma3TextConfig`` kwargs that describe ``cfg`` (for a source without ``config.json``: GGUF).

    ``query_pre_attn_scalar`` is passed as an int when it is one (the field's type in transformers).
    """
    scalar = cfg.query_pre_attn_scalar
    return dict(
        vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size, intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_hidden_layers, num_attention_heads=cfg.num_attention_heads,
        num_key_value_heads=cfg.num_key_value_heads, head_dim=cfg.head_dim, rms_norm_eps=cfg.rms_norm_eps,
        sliding_window=cfg.sliding_window, max_position_embeddings=cfg.max_position_embeddings,
        tie_word_embeddings=cfg.tie_word_embeddings, layer_types=[layer.kind for layer in cfg.layers],
        rope_parameters={kind: dict(params) for kind, params in cfg.rope.items()},
        query_pre_attn_scalar=int(scalar) if float(scalar).is_integer() else scalar,
        final_logit_softcapping=cfg.final_logit_softcapping, attention_bias=cfg.attention_bias,
        pad_token_id=cfg.pad_token_id, eos_token_id=list(cfg.eos_token_id) or None,
        hidden_activation="gelu_pytorch_tanh")


__all__ = ["Gemma3DecoderLayer", "Gemma3ForCausalLM", "Gemma3TextModel", "hf_text_config_of"]
