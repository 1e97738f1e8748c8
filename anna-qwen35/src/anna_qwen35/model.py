"""The Qwen3.5 text model (dense or mixture-of-experts): decoder layers over the Anna forward-batch contract.

Parameter names mirror the text-only checkpoint layout (``model.embed_tokens``,
``model.layers.{i}.linear_attn|self_attn|mlp|input_layernorm|post_attention_layernorm``,
``model.norm``, ``lm_head``) so the weight map is a prefix rewrite.
"""

from __future__ import annotations

from typing import Any

import attrs
import torch
from anna_core.distributed.layers import gather_vocab
from anna_core.distributed.state import SINGLE, ParallelState
from anna_core.engine.forward_batch import ForwardBatch
from anna_core.layers.media import splice_media
from anna_core.layers.mlp import SwiGLUMLP
from anna_core.layers.norm import RMSNorm
from anna_core.layers.rotary import RotaryEmbedding
from anna_core.layers.topk_head import head_topk
from anna_core.layers.wq_linear import WQLinear
from anna_core.model import (
    CacheSpec,
    FullAttentionSpec,
    ModelCaches,
    ModelCapabilities,
    RecurrentStateSpec,
)
from anna_core.multimodal import MediaItem
from torch import nn

from anna_qwen35.attention import GatedAttention
from anna_qwen35.config import FULL, Qwen35Config
from anna_qwen35.gated_deltanet import GatedDeltaNet
from anna_qwen35.moe import SparseMoeBlock
from anna_qwen35.vision import VisionConfig, VisionTower

FLOAT32_PARAMS = ("A_log", "dt_bias")
"""Parameter-name suffixes kept in float32 whatever the serving dtype (decay math)."""


class DecoderLayer(nn.Module):
    """Pre-norm residual block: token mixer (gated DeltaNet or gated attention), then SwiGLU MLP (or, in
    a MoE model, the :class:`~anna_qwen35.moe.SparseMoeBlock`, whose norm is not fused into its router).

    Residual-stream form: the layer receives the previous block's output ``h`` and the residual
    stream it has not yet been added to, and returns the same pair; each add is fused into the norm
    after it, and that norm into the mixer's input projection (``add_rms_norm_linear``) or, before
    the MLP, into the merged gate/up projection and its SwiGLU product
    (``add_rms_norm_linear_act_mul``); the last add goes into the model's final norm
    (``add_rms_norm``). The math is HF's ``h = h + mixer(norm(h)); h = h + mlp(norm(h))`` with the
    same roundings.
    """

    def __init__(self, cfg: Qwen35Config, layer_type: str, group: int, cache_index: int, rotary: RotaryEmbedding,
                 ops: Any, per_expert: bool = False, parallel: ParallelState = SINGLE):
        super().__init__()
        self.layer_type = layer_type
        if layer_type == FULL:
            self.self_attn = GatedAttention(cfg, group, cache_index, rotary, ops)
        else:
            self.linear_attn = GatedDeltaNet(cfg, group, cache_index, ops)
        if cfg.is_moe:
            self.mlp = SparseMoeBlock(cfg.hidden_size, cfg.num_experts, cfg.num_experts_per_tok,
                                      cfg.moe_intermediate_size, cfg.shared_expert_intermediate_size, ops,
                                      per_expert=per_expert, parallel=parallel)
        else:
            self.mlp = SwiGLUMLP(cfg.hidden_size, cfg.intermediate_size, ops)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, ops, zero_centered=True)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, ops, zero_centered=True)

    def merge_projections(self) -> None:
        """Merge the mixer's and the MLP's projections that read one input (idempotent; after loading)."""
        mixer = self.self_attn if self.layer_type == FULL else self.linear_attn
        mixer.merge_projections()
        if isinstance(self.mlp, SparseMoeBlock):
            self.mlp.merge_projections()
        else:
            self.mlp.merge_gate_up()

    def forward(self, h: torch.Tensor, residual: torch.Tensor | None, batch: ForwardBatch,
                caches: ModelCaches) -> tuple[torch.Tensor, torch.Tensor]:
        """h, residual: ``[T, hidden]`` (residual None in the first layer: the stream starts at h)
        -> ``(mlp output, residual stream before adding it)``, both ``[T, hidden]``."""
        mixer = self.self_attn if self.layer_type == FULL else self.linear_attn
        # each residual add runs fused into the norm after it (and that norm into the mixer's projection)
        h, residual = mixer(h, batch, caches, pre_norm=(self.input_layernorm, residual))
        return self.mlp(h, pre_norm=(self.post_attention_layernorm, residual))


def cache_spec(cfg: Qwen35Config) -> CacheSpec:
    """Qwen3.5's cache groups: one full-attention group (the gated-attention layers), then one recurrent
    group (the gated-DeltaNet layers); either is left out when the model has no such layer."""
    full = [i for i, t in enumerate(cfg.layer_types) if t == FULL]
    linear = [i for i, t in enumerate(cfg.layer_types) if t != FULL]
    groups = []
    if full:
        groups.append(FullAttentionSpec(layers=full, num_kv_heads=cfg.num_key_value_heads, head_dim=cfg.head_dim))
    if linear:
        groups.append(RecurrentStateSpec(
            layers=linear,
            conv_shape=(2 * cfg.linear_num_key_heads * cfg.linear_key_head_dim
                        + cfg.linear_num_value_heads * cfg.linear_value_head_dim, cfg.linear_conv_kernel_dim - 1),
            state_shape=(cfg.linear_num_value_heads, cfg.linear_key_head_dim, cfg.linear_value_head_dim)))
    return CacheSpec(groups)


class Qwen35TextModel(nn.Module):
    def __init__(self, cfg: Qwen35Config, spec: CacheSpec, ops: Any, per_expert: bool = False,
                 parallel: ParallelState = SINGLE):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        rotary = RotaryEmbedding(cfg.head_dim, cfg.rotary_dim, cfg.rope_parameters, ops)
        self.rotary = rotary
        layers = []
        for i, layer_type in enumerate(cfg.layer_types):
            group = spec.group_of(i)
            layers.append(DecoderLayer(cfg, layer_type, group, spec.groups[group].cache_index(i), rotary, ops,
                                       per_expert, parallel))
        self.layers = nn.ModuleList(layers)
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, ops, zero_centered=True)

    def forward(self, batch: ForwardBatch, caches: ModelCaches) -> torch.Tensor:
        h = splice_media(self.embed_tokens(batch.input_ids), batch)  # [T, hidden], image rows spliced in
        residual = None
        for layer in self.layers:
            h, residual = layer(h, residual, batch, caches)
        return self.norm.add_and_norm(h, residual)[0]  # the last residual add fused into the final norm


class Qwen35ForCausalLM(nn.Module):
    """Implements :class:`anna_core.model.CausalLM` for Qwen3.5, dense or MoE.

    Args:
        cfg: parsed config.
        ops: :class:`anna_core.kernels.OpTable` bound to the serving device and dtype.
        per_expert: MoE only: build the per-expert expert-weight layout (``mlp.experts.{e}.*``) that the
            checkpoint holds; :meth:`merge_projections` stacks it (see :class:`~anna_qwen35.moe.RoutedExperts`).
        parallel: a tensor-parallel rank's state (``cfg`` is then the rank's share,
            :func:`anna_qwen35.tensor_parallel.local_config`): its MoE blocks reduce their outputs and its logits are
            gathered over the vocabulary shards.

    With tied embeddings there is no ``lm_head`` parameter; logits use ``embed_tokens.weight``.
    Its capabilities: padding rows of a padded prefill (``ForwardBatch.num_valid``) change none of its
    state, so the runner may capture its prefills (:mod:`anna_core.engine.prefill_graphs`); its gated-DeltaNet layers
    take recurrent-state snapshots inside a prefill pass (``ForwardBatch.checkpoints``,
    :mod:`anna_core.layers.state_checkpoints`). A MoE model too: its MoE blocks are row-wise (router,
    ``moe_experts``, shared expert), so padding rows route to experts but write only their own rows, and
    the op's accelerated implementations read nothing on the host (its torch reference does, so a capture
    where only the reference runs fails and the runner runs that step eagerly).

    With a vision tower (``vision``: a ``Qwen3_5ForConditionalGeneration`` checkpoint with its image processor)
    it also takes images and videos: capabilities ``modalities=("image", "video")`` and ``position_rows=3``
    (interleaved M-RoPE ``[3, T]`` positions, :mod:`anna_qwen35.processor`), :meth:`encode` runs the tower
    (:class:`~anna_qwen35.vision.VisionTower`, parameters ``visual.*``) and the forward pass splices its rows in at
    the placeholders.
    """

    capabilities = ModelCapabilities(padded_prefill=True, state_checkpoints=True, quantized_kv=True, topk_head=True)

    def __init__(self, cfg: Qwen35Config, ops: Any, per_expert: bool = False, vision: VisionConfig | None = None,
                 parallel: ParallelState = SINGLE):
        super().__init__()
        self.config = cfg
        self.ops = ops
        self.parallel = parallel
        self.raw_config: dict[str, Any] | None = None  # the checkpoint's config.json, set by the loader (hf_export)
        self.cache_spec = cache_spec(cfg)
        self.model = Qwen35TextModel(cfg, self.cache_spec, ops, per_expert, parallel)
        self.lm_head = None if cfg.tie_word_embeddings else nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.hidden_size = cfg.hidden_size
        self.visual = None if vision is None else VisionTower(vision)
        if vision is not None:
            self.capabilities = ModelCapabilities(padded_prefill=True, state_checkpoints=True, modalities=("image", "video"),
                                                  position_rows=3, quantized_kv=True, topk_head=True)
        if parallel.is_parallel:  # a rank's head is a vocabulary shard: the full logits are gathered
            self.capabilities = attrs.evolve(self.capabilities, topk_head=False)

    @property
    def vocab_size(self) -> int:
        return self.config.vocab_size

    def hf_export(self, multimodal: bool = False) -> tuple[str, str, dict[str, Any], dict[str, torch.Tensor]]:
        """``(HF model class, HF config class, config kwargs, state dict)`` for the HF model over this model's
        tensors (views, no copies); see :func:`anna_qwen35.weights.hf_text_state_dict`.

        Text (``multimodal=False``): dense ``Qwen3_5ForCausalLM`` / ``Qwen3_5TextConfig``; MoE
        ``Qwen3_5MoeForCausalLM`` / ``Qwen3_5MoeTextConfig`` with the experts fused as transformers holds them.
        The config kwargs are the checkpoint's text config (its ``text_config`` in the vision-language layout).
        With ``multimodal=True``: the whole vision-language model, ``Qwen3_5ForConditionalGeneration`` /
        ``Qwen3_5Config`` (MoE: ``Qwen3_5MoeForConditionalGeneration`` / ``Qwen3_5MoeConfig``) over the checkpoint's
        whole config (:func:`anna_qwen35.weights.hf_vl_state_dict`).

        Raises:
            ModelLoadError: the raw ``config.json`` dict was not kept by the loader, a MoE model's experts are
                not fused, or ``multimodal`` for a model without a vision tower.
        """
        from anna_core.errors import ModelLoadError

        from anna_qwen35.weights import hf_text_state_dict, hf_vl_state_dict

        raw = self.raw_config
        if raw is None:
            raise ModelLoadError("hf_export needs the checkpoint's config.json (set by the loader as raw_config)")
        kind = "Qwen3_5Moe" if self.config.is_moe else "Qwen3_5"
        if multimodal:
            if self.visual is None or "vision_config" not in raw:
                raise ModelLoadError("hf_export(multimodal=True) needs a model with its vision tower")
            whole = {k: v for k, v in raw.items() if k not in ("model_type", "architectures", "transformers_version")}
            whole["tie_word_embeddings"] = self.config.tie_word_embeddings
            return f"{kind}ForConditionalGeneration", f"{kind}Config", whole, hf_vl_state_dict(self)
        text = dict(raw.get("text_config") or raw)
        text["tie_word_embeddings"] = self.config.tie_word_embeddings
        text.pop("model_type", None)
        return f"{kind}ForCausalLM", f"{kind}TextConfig", text, hf_text_state_dict(self)

    def merge_projections(self) -> None:
        """Merge the projections that read the same input (gated DeltaNet ``in_proj_qkv|z|b|a``,
        attention ``q|k|v_proj``, MLP ``gate|up_proj``; in a MoE model the shared expert's, and the
        per-expert weights stacked into ``[E, ...]`` tensors) into one matrix each. The loader calls it
        once the weights are in place; the math is unchanged."""
        for layer in self.model.layers:
            layer.merge_projections()

    def forward(self, batch: ForwardBatch, caches: ModelCaches) -> torch.Tensor:
        """Hidden states ``[T, hidden]`` (after the final norm) for every token of ``batch``."""
        return self.model(batch, caches)

    @torch.inference_mode()
    def encode(self, items: list[MediaItem]) -> list[torch.Tensor]:
        """The tower's output per medium (an image, or a video's frame group): ``[item.length, hidden]`` in the
        serving dtype, on the model's device.

        Each item's ``data`` is the processor's ``{"pixel_values": [N, C*tp*p*p], "grid_thw": (t, h, w)}``; images
        and video frame groups take the same path (a frame group is a ``(1, h, w)`` grid of two-frame patches). The
        tower runs where its parameters are (the CPU under ``--offload-vision``).

        Raises:
            ValueError: the model has no vision tower, or an item's pixels do not fit its grid.
        """
        if self.visual is None:
            raise ValueError("this Qwen3.5 model has no vision tower")
        device = self.model.embed_tokens.weight.device
        tower = self.visual.pos_embed.weight.device  # the CPU under --offload-vision
        return [self.visual(m.data["pixel_values"].to(tower), tuple(m.data["grid_thw"])).to(device) for m in items]

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden: ``[N, hidden]`` -> logits ``[N, vocab]`` float32 (on every rank of a tensor-parallel group)."""
        if isinstance(self.lm_head, WQLinear):  # a quantized head (the loader's lm_head_quant)
            return self.lm_head(hidden).float()
        weight = self.model.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        return gather_vocab(self.ops.linear(hidden, weight, None).float(), self.vocab_size, self.parallel)

    def compute_topk(self, hidden: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """hidden ``[N, hidden]`` -> the ``lm_head_topk`` op's ``(values [N, k] float32, indices [N, k] int64,
        logsumexp [N] float32)`` of :meth:`compute_logits`' logits (dense or quantized head; one rank only)."""
        head = self.lm_head if isinstance(self.lm_head, WQLinear) else (
            self.model.embed_tokens.weight if self.lm_head is None else self.lm_head.weight)
        return head_topk(self.ops, hidden, head, k)


def keep_float32(param_name: str) -> bool:
    """Whether ``param_name`` stays float32 in any serving dtype."""
    return param_name.endswith(FLOAT32_PARAMS)
