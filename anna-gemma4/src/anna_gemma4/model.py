"""The Gemma 4 text model over the Anna forward-batch contract.

Parameter names mirror the ``Gemma4ForCausalLM`` checkpoint layout (``model.embed_tokens``,
``model.embed_tokens_per_layer``, ``model.per_layer_model_projection``, ``model.per_layer_projection_norm``,
``model.layers.{i}.*``, ``model.norm``, ``lm_head``), so the weight map is a prefix rewrite.

Caches: the sliding-window layers form one :class:`~anna_core.cache_spec.SlidingWindowSpec` group and
the global layers one :class:`~anna_core.cache_spec.FullAttentionSpec` group (each of its own head dim
and KV heads); the KV-shared layers are ``shared`` readers of their source layer in its group.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from anna_core.distributed.state import SINGLE, ParallelState
from anna_core.engine.forward_batch import ForwardBatch
from anna_core.layers.norm import RMSNorm
from anna_core.layers.rotary import RotaryEmbedding
from anna_core.model import CacheSpec, ModelCaches, ModelCapabilities
from torch import nn

from anna_gemma4.common import GemmaCausalLM, RotaryTables, cache_spec, embedding_scale, next_norms, scaled_embedding
from anna_gemma4.config import FULL, LAYER_TYPES, SLIDING, Gemma4Config
from anna_gemma4.decoder import Gemma4DecoderLayer, PendingTail


class Gemma4TextModel(nn.Module):
    """Embeddings (scaled by ``sqrt(hidden)`` rounded to the weight dtype), per-layer embeddings, the
    decoder layers and the final norm."""

    def __init__(self, cfg: Gemma4Config, spec: CacheSpec, ops: Any, parallel: ParallelState = SINGLE):
        super().__init__()
        self.config = cfg
        self.ops = ops
        hidden, layers = cfg.hidden_size, cfg.num_hidden_layers
        self.embed_tokens = nn.Embedding(cfg.vocab_size, hidden)
        self.rotary = nn.ModuleDict({
            kind: RotaryEmbedding(cfg.layers[ids[0]].head_dim, cfg.layers[ids[0]].head_dim, cfg.rope[kind], ops)
            for kind in LAYER_TYPES if (ids := cfg.layers_of(kind))})
        self.layers = nn.ModuleList(
            Gemma4DecoderLayer(cfg, layer, spec.group_of(i), spec.groups[spec.group_of(i)].cache_index(i),
                               self.rotary[layer.kind], ops, parallel)
            for i, layer in enumerate(cfg.layers))
        self.norm = RMSNorm(hidden, cfg.rms_norm_eps, ops)
        self.per_layer = cfg.hidden_size_per_layer_input
        if self.per_layer:
            self.embed_tokens_per_layer = nn.Embedding(cfg.vocab_size_per_layer_input, layers * self.per_layer)
            self.per_layer_model_projection = nn.Linear(hidden, layers * self.per_layer, bias=False)
            self.per_layer_projection_norm = RMSNorm(self.per_layer, cfg.rms_norm_eps, ops)
        self._placeholders = (torch.tensor(cfg.placeholder_token_ids, dtype=torch.int64, device="cpu"),)
        self._on_device: dict[torch.device, torch.Tensor] = {}

    def _text_ids(self, ids: torch.Tensor) -> torch.Tensor:
        """``ids`` with media placeholders replaced by the pad id (transformers does so without media): one gather
        from a ``[vocab]`` int64 map (the identity but at the placeholders; built once per device, on the first,
        eager step), a single launch where ``isin`` and ``where`` took three."""
        if not self.config.placeholder_token_ids:
            return ids
        remap = self._on_device.get(ids.device)
        if remap is None:
            remap = torch.arange(self.config.vocab_size, dtype=torch.int64)
            placeholders = self._placeholders[0]  # (ids past the vocabulary, as a shrunk test config has, embed nothing)
            remap[placeholders[placeholders < self.config.vocab_size]] = self.config.pad_token_id
            remap = self._on_device[ids.device] = remap.to(ids.device)
        return torch.index_select(remap, 0, ids)

    def per_layer_inputs(self, ids: torch.Tensor, embeds: torch.Tensor) -> torch.Tensor:
        """Per-layer embeddings ``[T, L, P]``: ``(norm(projection(embeds) / sqrt(hidden)) + table[ids] *
        sqrt(P)) / sqrt(2)``, in the embeddings' dtype: after the projection one ``per_layer_inputs`` launch where a
        kernel serves that op, else the gather, the scales, the norm and the sum apart."""
        T, L, P = ids.shape[0], self.config.num_hidden_layers, self.per_layer
        fused = self.ops.accelerated("per_layer_inputs")
        if fused is not None:
            table, norm = self.embed_tokens_per_layer.weight, self.per_layer_projection_norm
            return fused(self.per_layer_model_projection(embeds), ids, table, embedding_scale(P**0.5, table.dtype),
                         norm.weight, norm.eps, norm.zero_centered, self.config.hidden_size**-0.5, 2.0**-0.5)
        table = scaled_embedding(self.embed_tokens_per_layer, ids, P**0.5).view(T, L, P)
        projected = self.per_layer_model_projection(embeds) * self.config.hidden_size**-0.5
        projected = self.per_layer_projection_norm(projected.view(T, L, P))
        return (projected + table) * 2.0**-0.5

    def forward(self, batch: ForwardBatch, caches: ModelCaches) -> torch.Tensor:
        ids = self._text_ids(batch.input_ids)
        h = scaled_embedding(self.embed_tokens, ids, self.config.hidden_size**0.5)  # [T, hidden]
        per_layer = self.per_layer_inputs(ids, h) if self.per_layer else None  # [T, L, P]
        tables = RotaryTables(self.rotary, batch.positions)  # computed only if a layer runs the unfused rotary
        carry = self.layers[0].input_layernorm(h)
        for i, (layer, next_norm) in enumerate(zip(self.layers, next_norms(self.layers, self.norm), strict=True)):
            h, carry = layer(h, carry, None if per_layer is None else per_layer[:, i], batch, caches,
                             tables.of(layer.kind), next_norm)
        return carry.apply(h, self.norm)[0] if isinstance(carry, PendingTail) else carry


class Gemma4ForCausalLM(GemmaCausalLM):
    """Implements :class:`anna_core.model.CausalLM` for the Gemma 4 text models (E2B / E4B with
    per-layer embeddings and KV sharing, 26B-A4B with the MoE block, 31B dense).

    Args:
        cfg: parsed config.
        ops: :class:`anna_core.kernels.OpTable` bound to the serving device and dtype.
        parallel: a tensor-parallel rank's state (``cfg`` is then its share: :mod:`anna_gemma4.tensor_parallel`).

    With tied embeddings there is no ``lm_head`` parameter; logits use ``embed_tokens.weight``. Logits
    are soft-capped (``cap * tanh(logits / cap)``, float32) when the config says so. Capabilities: padding
    rows of a padded prefill (``ForwardBatch.num_valid``) change no state (the model has attention caches
    only; their K/V go to the scratch block and every per-token step, MoE routing included, is row-wise),
    so the runner may capture its prefills (checked on the CPU; not yet on a GPU). The MoE block's experts
    run as the ``moe_experts`` op, whose accelerated implementations read nothing on the host, so steps
    of a model with it capture too; where only the op's torch reference runs (it reads the per-expert
    counts on the host) a capture fails and the runner, which catches failed captures, runs those steps
    eagerly.
    """

    capabilities = ModelCapabilities(padded_prefill=True, quantized_kv=True, topk_head=True, greedy_head=True)

    def __init__(self, cfg: Gemma4Config, ops: Any, parallel: ParallelState = SINGLE):
        super().__init__(cfg, ops, functools.partial(Gemma4TextModel, parallel=parallel), parallel)

    def hf_export(self) -> tuple[str, str, dict[str, Any], dict[str, torch.Tensor]]:
        """``("Gemma4ForCausalLM", "Gemma4TextConfig", config kwargs, state dict)``: transformers' text-only
        Gemma 4 over this model's tensors (views, no copies), for ``anna bench --compare-hf``
        (:func:`anna_core.bench.hf_compare.build_hf`).

        The config kwargs are the text part of the checkpoint's ``config.json``
        (:func:`~anna_gemma4.weights.hf_text_config`); the state dict is
        :func:`~anna_gemma4.weights.hf_state_dict` (merged gate/up projections split back). Every variant
        exports: per-layer embeddings and KV sharing (E2B / E4B: the KV-shared layers have no K/V tensors on
        either side), the double-wide MLP of the shared layers, the MoE router and experts (26B-A4B), K = V
        global layers without ``v_proj`` (26B-A4B, 31B). One difference stays: the conditional layout's media
        placeholder ids (image / video / audio tokens) embed as padding in Anna, as transformers' conditional
        model does without media, but as themselves in its text-only class, so logits differ from a prompt
        position holding one on (the bench's random prompts rarely do: 3 ids in 262144).

        Raises:
            ModelLoadError: the loader kept no ``config.json`` (:attr:`raw_config` is None), or the MoE
                experts are not in transformers' layout.
        """
        from anna_gemma4.weights import hf_state_dict, hf_text_config

        text = hf_text_config(self.raw_config, self.config.tie_word_embeddings)
        return "Gemma4ForCausalLM", "Gemma4TextConfig", text, hf_state_dict(self)


__all__ = ["FULL", "SLIDING", "Gemma4ForCausalLM", "Gemma4TextModel", "cache_spec"]
