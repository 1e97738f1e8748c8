"""Qwen3.5 text configuration, parsed from a checkpoint's ``config.json``.

Two layouts: ``Qwen3_5ForConditionalGeneration`` (``model_type`` ``qwen3_5``) nests the language
model under ``text_config``; ``Qwen3_5ForCausalLM`` / ``qwen3_5_text`` is flat. The mixture-of-experts
models (``qwen3_5_moe`` / ``Qwen3_5MoeForConditionalGeneration``, nested; ``qwen3_5_moe_text`` /
``Qwen3_5MoeForCausalLM``, flat) replace every layer's MLP by a routed-experts block plus a gated
shared expert. Field meanings follow transformers' ``Qwen3_5TextConfig`` / ``Qwen3_5MoeTextConfig``.

GGUF (``general.architecture`` ``qwen35`` / ``qwen35moe``, as llama.cpp's converter writes them):
:meth:`Qwen35Config.from_gguf` reads the ``<arch>.*`` keys (see :data:`GGUF_KEYS`); the file counts a
multi-token-prediction block (``nextn_predict_layers``) in ``block_count``, which the decoder stack does
not; the layer kinds come from ``attention.recurrent_layers`` (one flag per block) where the file has it,
else from ``full_attention_interval`` (default 4, llama.cpp's).
"""

from __future__ import annotations

from typing import Any

import attrs
from anna_core.errors import ModelLoadError, UnsupportedModelError
from anna_core.layers.rotary import rope_parameters_from_config

LINEAR = "linear_attention"
FULL = "full_attention"
MOE_TYPES = ("qwen3_5_moe", "qwen3_5_moe_text")
GGUF_ARCHITECTURES = ("qwen35", "qwen35moe")
GGUF_KEYS = {
    "hidden_size": "embedding_length", "num_attention_heads": "attention.head_count",
    "num_key_value_heads": "attention.head_count_kv", "head_dim": "attention.key_length",
    "rms_norm_eps": "attention.layer_norm_rms_epsilon", "max_position_embeddings": "context_length",
    "linear_conv_kernel_dim": "ssm.conv_kernel", "linear_key_head_dim": "ssm.state_size",
    "linear_num_key_heads": "ssm.group_count", "linear_num_value_heads": "ssm.time_step_rank",
    "rope_theta": "rope.freq_base", "rotary_dim": "rope.dimension_count",
    "mrope_section": "rope.dimension_sections", "intermediate_size": "feed_forward_length",
    "num_experts": "expert_count", "num_experts_per_tok": "expert_used_count",
    "moe_intermediate_size": "expert_feed_forward_length",
    "shared_expert_intermediate_size": "expert_shared_feed_forward_length",
}
"""Config field -> the ``<arch>.`` GGUF key it is read from (``linear_value_head_dim`` is ``ssm.inner_size``
divided by ``ssm.time_step_rank``; ``num_hidden_layers`` is ``block_count`` minus ``nextn_predict_layers``)."""


@attrs.frozen
class Qwen35Config:
    """The language-model hyper-parameters Anna needs.

    Attributes:
        layout: ``"vl"`` (weights under ``model.language_model.``) or ``"text"`` (under ``model.``).
        layer_types: per layer, ``"linear_attention"`` (gated DeltaNet) or ``"full_attention"``.
        rope_parameters: HF rope dict (``rope_type``, ``rope_theta``, ``mrope_section``, ...).
        partial_rotary_factor: fraction of each attention head's dims that are rotated.
        eos_token_id: ids from the config (may be empty).
        num_experts: routed experts per MoE layer ``E`` (0: the dense model; then the MoE fields are 0).
        num_experts_per_tok: experts chosen per token ``K``.
        moe_intermediate_size: each routed expert's inner width.
        shared_expert_intermediate_size: the shared expert's inner width.
        intermediate_size: the dense MLP's inner width (0 in a MoE model: transformers' MoE text model
            has no dense MLP; every layer is sparse).
    """

    layout: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    max_position_embeddings: int
    tie_word_embeddings: bool
    layer_types: tuple[str, ...]
    linear_conv_kernel_dim: int
    linear_key_head_dim: int
    linear_value_head_dim: int
    linear_num_key_heads: int
    linear_num_value_heads: int
    rope_parameters: dict[str, Any]
    partial_rotary_factor: float
    attention_bias: bool = False
    eos_token_id: tuple[int, ...] = ()
    dtype: str | None = None
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    shared_expert_intermediate_size: int = 0

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def rotary_dim(self) -> int:
        return int(self.head_dim * self.partial_rotary_factor)

    @property
    def num_full_layers(self) -> int:
        return sum(t == FULL for t in self.layer_types)

    @property
    def num_linear_layers(self) -> int:
        return sum(t == LINEAR for t in self.layer_types)

    @classmethod
    def from_hf(cls, config: dict[str, Any]) -> Qwen35Config:
        """Parse a ``config.json`` dict.

        Raises:
            UnsupportedModelError: a MoE option transformers' ``Qwen3_5Moe`` models do not implement
                (``mlp_only_layers``, ``decoder_sparse_step`` other than 1, ``norm_topk_prob=false``).
            ModelLoadError: missing or inconsistent fields.
        """
        nested = isinstance(config.get("text_config"), dict)
        text = config["text_config"] if nested else config
        model_type = text.get("model_type") or config.get("model_type")
        moe = config.get("model_type") in MOE_TYPES or model_type in MOE_TYPES
        if not moe and "num_experts" in text:
            raise ModelLoadError(
                f"config.json has num_experts but model_type {config.get('model_type')!r} is a dense Qwen3.5 "
                f"type; the mixture-of-experts types are {list(MOE_TYPES)}"
            )
        if moe:
            _check_moe_options(text)
        try:
            return _parse(text, config, nested, moe)
        except KeyError as exc:
            raise ModelLoadError(f"config.json lacks the Qwen3.5 field {exc.args[0]!r}") from exc
        except (TypeError, ValueError) as exc:
            raise ModelLoadError(f"config.json has an invalid Qwen3.5 field: {exc}") from exc

    @classmethod
    def from_gguf(cls, gguf: Any, vocab_size: int, tied: bool) -> Qwen35Config:
        """Parse a GGUF's ``qwen35.*`` / ``qwen35moe.*`` metadata (``layout`` ``"gguf"``).

        Args:
            gguf: an :class:`anna_core.weights.gguf_reader.GGUFModelFile`.
            vocab_size: rows of ``token_embd.weight``; tied: the file has no ``output.weight``.

        Raises:
            UnsupportedModelError: RoPE scaling or a MoE gating function other than softmax.
            ModelLoadError: another architecture, missing or inconsistent metadata.
        """
        if gguf.architecture not in GGUF_ARCHITECTURES:
            raise ModelLoadError(f"GGUF architecture {gguf.architecture!r} is not Qwen3.5 {list(GGUF_ARCHITECTURES)}")
        try:
            return _from_gguf(gguf, int(vocab_size), tied)
        except (TypeError, ValueError, ZeroDivisionError) as exc:
            raise ModelLoadError(f"the GGUF has invalid Qwen3.5 metadata: {exc}") from exc


def _check_moe_options(text: dict[str, Any]) -> None:
    """Refuse MoE options with no meaning in transformers' ``Qwen3_5Moe`` (there, every layer is sparse
    and the top-k probabilities are always renormalised); released configs carry ``mlp_only_layers: []``."""
    if text.get("mlp_only_layers"):
        raise UnsupportedModelError(
            f"mlp_only_layers {text['mlp_only_layers']} (dense MLP layers in a Qwen3.5 MoE model) is not supported: "
            "transformers' Qwen3_5Moe makes every layer sparse"
        )
    if int(text.get("decoder_sparse_step", 1)) != 1:
        raise UnsupportedModelError(
            f"decoder_sparse_step {text['decoder_sparse_step']} is not supported: transformers' Qwen3_5Moe makes "
            "every layer sparse"
        )
    if text.get("norm_topk_prob", True) is False:
        raise UnsupportedModelError(
            "norm_topk_prob=false is not supported: transformers' Qwen3_5Moe always renormalises the top-k "
            "router probabilities"
        )


def _parse(text: dict[str, Any], top: dict[str, Any], nested: bool, moe: bool) -> Qwen35Config:
    num_layers = int(text["num_hidden_layers"])
    layer_types = text.get("layer_types")
    if layer_types is None:
        interval = int(text.get("full_attention_interval", 4))
        layer_types = [FULL if (i + 1) % interval == 0 else LINEAR for i in range(num_layers)]
    layer_types = tuple(layer_types)
    if len(layer_types) != num_layers or set(layer_types) - {LINEAR, FULL}:
        raise ModelLoadError(
            f"layer_types must list {num_layers} entries of {LINEAR!r}/{FULL!r}; got {list(layer_types)}"
        )
    if text.get("hidden_act", "silu") != "silu":
        raise ModelLoadError(f"hidden_act {text.get('hidden_act')!r} is not supported (Qwen3.5 uses 'silu')")
    if text.get("attn_output_gate", True) is False:
        raise ModelLoadError("attn_output_gate=false is not a Qwen3.5 layout; the gated attention is required")
    if not moe and text.get("mlp_only_layers"):
        raise ModelLoadError("mlp_only_layers is a mixture-of-experts option and is not supported")
    rope = rope_parameters_from_config(text)
    partial = float(rope.get("partial_rotary_factor", text.get("partial_rotary_factor", 0.25)))
    hidden = int(text["hidden_size"])
    heads = int(text["num_attention_heads"])
    head_dim = int(text.get("head_dim") or hidden // heads)
    # HF ties by the outer config for the VL class and by the text config for the text-only class.
    tie_source = top if nested else text
    tie = bool(tie_source.get("tie_word_embeddings", text.get("tie_word_embeddings", False)))
    eos = text.get("eos_token_id", top.get("eos_token_id"))
    eos_ids = tuple(int(e) for e in ([] if eos is None else eos if isinstance(eos, list) else [eos]))
    experts = {}
    if moe:
        experts = dict(num_experts=int(text["num_experts"]), num_experts_per_tok=int(text["num_experts_per_tok"]),
                       moe_intermediate_size=int(text["moe_intermediate_size"]),
                       shared_expert_intermediate_size=int(text["shared_expert_intermediate_size"]))
    cfg = Qwen35Config(
        layout="vl" if nested else "text",
        vocab_size=int(text["vocab_size"]),
        hidden_size=hidden,
        intermediate_size=0 if moe else int(text["intermediate_size"]),
        num_hidden_layers=num_layers,
        num_attention_heads=heads,
        num_key_value_heads=int(text.get("num_key_value_heads", heads)),
        head_dim=head_dim,
        rms_norm_eps=float(text.get("rms_norm_eps", 1e-6)),
        max_position_embeddings=int(text.get("max_position_embeddings", 32768)),
        tie_word_embeddings=tie,
        layer_types=layer_types,
        linear_conv_kernel_dim=int(text.get("linear_conv_kernel_dim", 4)),
        linear_key_head_dim=int(text.get("linear_key_head_dim", 128)),
        linear_value_head_dim=int(text.get("linear_value_head_dim", 128)),
        linear_num_key_heads=int(text.get("linear_num_key_heads", 16)),
        linear_num_value_heads=int(text.get("linear_num_value_heads", 32)),
        rope_parameters=rope,
        partial_rotary_factor=partial,
        attention_bias=bool(text.get("attention_bias", False)),
        eos_token_id=eos_ids,
        dtype=text.get("dtype") or text.get("torch_dtype") or top.get("dtype") or top.get("torch_dtype"),
        **experts,
    )
    _validate(cfg)
    return cfg


def _uniform(value: Any, key: str) -> int:
    """A per-layer GGUF value (llama.cpp allows an array) that must be one number for Qwen3.5."""
    if isinstance(value, list | tuple):
        values = {int(v) for v in value if int(v)}  # hybrid files may list 0 for the recurrent layers
        if len(values) != 1:
            raise ModelLoadError(f"GGUF {key} varies per layer ({list(value)}); Qwen3.5 has one value")
        return values.pop()
    return int(value)


def _gguf_layer_types(gguf: Any, num_layers: int, blocks: int) -> tuple[str, ...]:
    recurrent = gguf.arch_get("attention.recurrent_layers", None)
    if recurrent is not None:
        if len(recurrent) not in (num_layers, blocks):
            raise ModelLoadError(f"GGUF attention.recurrent_layers lists {len(recurrent)} blocks, not {blocks}")
        return tuple(LINEAR if bool(r) else FULL for r in recurrent[:num_layers])
    interval = int(gguf.arch_get("full_attention_interval", 4))
    if interval < 1:
        raise ModelLoadError(f"GGUF full_attention_interval must be positive, got {interval}")
    return tuple(FULL if (i + 1) % interval == 0 else LINEAR for i in range(num_layers))


def _from_gguf(gguf: Any, vocab_size: int, tied: bool) -> Qwen35Config:
    def key(field: str, default: Any = ...):
        return gguf.arch_get(GGUF_KEYS[field]) if default is ... else gguf.arch_get(GGUF_KEYS[field], default)

    moe = gguf.architecture == "qwen35moe"
    blocks = int(gguf.arch_get("block_count"))
    num_layers = blocks - int(gguf.arch_get("nextn_predict_layers", 0))
    if num_layers < 1:
        raise ModelLoadError(f"GGUF block_count {blocks} leaves no decoder layer besides the MTP block")
    heads = int(key("num_attention_heads"))
    head_dim = int(key("head_dim"))
    value_len = int(gguf.arch_get("attention.value_length", head_dim))
    if value_len != head_dim:
        raise ModelLoadError(f"GGUF attention.key_length {head_dim} != value_length {value_len}")
    scaling = gguf.arch_get("rope.scaling.type", None)
    if scaling not in (None, "none"):
        raise UnsupportedModelError(f"GGUF rope.scaling.type {scaling!r} is not supported for Qwen3.5")
    rope: dict[str, Any] = {"rope_type": "default", "rope_theta": float(key("rope_theta"))}
    # [t, h, w, extra] rotary sections, zero-padded to four; only text positions are served (all axes equal)
    sections = [int(s) for s in key("mrope_section", [])][:3]
    if any(sections):
        rope.update(mrope_section=sections, mrope_interleaved=True)
    rotary_dim = int(key("rotary_dim"))
    rope["partial_rotary_factor"] = rotary_dim / head_dim
    value_heads = int(key("linear_num_value_heads"))
    inner = int(gguf.arch_get("ssm.inner_size"))
    if value_heads < 1 or inner % value_heads:
        raise ModelLoadError(f"GGUF ssm.inner_size {inner} is not a multiple of ssm.time_step_rank {value_heads}")
    experts = {}
    if moe:
        gating = gguf.arch_get("expert_gating_func", None)
        if gating is not None and int(gating) != 1:  # llama.cpp's LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX
            raise UnsupportedModelError(f"GGUF expert_gating_func {gating} is not Qwen3.5's softmax routing")
        experts = dict(num_experts=int(key("num_experts")), num_experts_per_tok=int(key("num_experts_per_tok")),
                       moe_intermediate_size=_uniform(key("moe_intermediate_size"), GGUF_KEYS["moe_intermediate_size"]),
                       shared_expert_intermediate_size=int(key("shared_expert_intermediate_size")))
    eos = gguf.get("tokenizer.ggml.eos_token_id", None)
    cfg = Qwen35Config(
        layout="gguf",
        vocab_size=vocab_size,
        hidden_size=int(key("hidden_size")),
        intermediate_size=0 if moe else int(key("intermediate_size")),
        num_hidden_layers=num_layers,
        num_attention_heads=heads,
        num_key_value_heads=_uniform(key("num_key_value_heads", heads), GGUF_KEYS["num_key_value_heads"]),
        head_dim=head_dim,
        rms_norm_eps=float(key("rms_norm_eps")),
        max_position_embeddings=int(key("max_position_embeddings", 32768)),
        tie_word_embeddings=tied,
        layer_types=_gguf_layer_types(gguf, num_layers, blocks),
        linear_conv_kernel_dim=int(key("linear_conv_kernel_dim")),
        linear_key_head_dim=int(key("linear_key_head_dim")),
        linear_value_head_dim=inner // value_heads,
        linear_num_key_heads=int(key("linear_num_key_heads")),
        linear_num_value_heads=value_heads,
        rope_parameters=rope,
        partial_rotary_factor=rope["partial_rotary_factor"],
        eos_token_id=() if eos is None else (int(eos),),
        **experts,
    )
    _validate(cfg)
    return cfg


def _validate(cfg: Qwen35Config) -> None:
    if cfg.num_attention_heads % cfg.num_key_value_heads:
        raise ModelLoadError(
            f"num_attention_heads {cfg.num_attention_heads} is not a multiple of num_key_value_heads "
            f"{cfg.num_key_value_heads}"
        )
    if cfg.linear_num_value_heads % cfg.linear_num_key_heads:
        raise ModelLoadError(
            f"linear_num_value_heads {cfg.linear_num_value_heads} is not a multiple of linear_num_key_heads "
            f"{cfg.linear_num_key_heads}"
        )
    if cfg.is_moe and not 0 < cfg.num_experts_per_tok <= cfg.num_experts:
        raise ModelLoadError(
            f"num_experts_per_tok {cfg.num_experts_per_tok} must be in 1..num_experts ({cfg.num_experts})"
        )
    if cfg.is_moe and (cfg.moe_intermediate_size <= 0 or cfg.shared_expert_intermediate_size <= 0):
        raise ModelLoadError(
            f"moe_intermediate_size {cfg.moe_intermediate_size} and shared_expert_intermediate_size "
            f"{cfg.shared_expert_intermediate_size} must be positive"
        )
    if cfg.rotary_dim % 2 or cfg.rotary_dim <= 0:
        raise ModelLoadError(
            f"partial_rotary_factor {cfg.partial_rotary_factor} x head_dim {cfg.head_dim} gives an invalid "
            f"rotary dimension {cfg.rotary_dim}"
        )
