"""Llama hyper-parameters, read from a ``config.json`` or from GGUF metadata."""

from __future__ import annotations

from typing import Any

import attrs
from anna_core.errors import ModelLoadError
from anna_core.layers.rotary import rope_parameters_from_config


@attrs.frozen
class LlamaConfig:
    """The fields of HF's ``LlamaConfig`` that the forward pass needs.

    Attributes:
        rope_parameters: HF-style dict (``rope_type``, ``rope_theta`` and scaling fields) handed to
            :class:`anna_core.layers.RotaryEmbedding`.
    """

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_parameters: dict[str, Any]
    max_position_embeddings: int
    tie_word_embeddings: bool
    attention_bias: bool = False
    mlp_bias: bool = False
    torch_dtype: str | None = None

    @classmethod
    def from_hf(cls, cfg: dict[str, Any]) -> LlamaConfig:
        """From a parsed ``config.json`` (transformers 4.x ``rope_scaling`` or 5.x ``rope_parameters``).

        Raises:
            ModelLoadError: a required field is missing, or ``mlp_bias`` is set (not supported).
        """
        try:
            heads = int(cfg["num_attention_heads"])
            rope = rope_parameters_from_config(cfg)
            out = cls(
                vocab_size=int(cfg["vocab_size"]),
                hidden_size=int(cfg["hidden_size"]),
                intermediate_size=int(cfg["intermediate_size"]),
                num_hidden_layers=int(cfg["num_hidden_layers"]),
                num_attention_heads=heads,
                num_key_value_heads=int(cfg.get("num_key_value_heads") or heads),
                head_dim=int(cfg.get("head_dim") or int(cfg["hidden_size"]) // heads),
                rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
                rope_parameters=rope,
                max_position_embeddings=int(cfg.get("max_position_embeddings", 2048)),
                tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
                attention_bias=bool(cfg.get("attention_bias", False)),
                mlp_bias=bool(cfg.get("mlp_bias", False)),
                torch_dtype=cfg.get("dtype") or cfg.get("torch_dtype"),
            )
        except KeyError as exc:
            raise ModelLoadError(f"config.json lacks the Llama field {exc.args[0]!r}") from exc
        if out.mlp_bias:
            raise ModelLoadError("Llama checkpoints with mlp_bias=true are not supported by anna-llama")
        return out

    @classmethod
    def from_gguf(cls, gguf: Any) -> LlamaConfig:
        """From the ``llama.*`` metadata of an :class:`anna_core.weights.gguf_reader.GGUFModelFile`.

        The head is tied when the file has no ``output.weight``. llama.cpp stores Llama-3.1
        frequency scaling as a ``rope_freqs.weight`` tensor, which is not supported yet.

        Raises:
            ModelLoadError: a required key is missing or the rope layout is unsupported.
        """
        heads = int(gguf.arch_get("attention.head_count"))
        hidden = int(gguf.arch_get("embedding_length"))
        head_dim = int(gguf.arch_get("attention.key_length", hidden // heads))
        rope_dim = int(gguf.arch_get("rope.dimension_count", head_dim))
        if rope_dim != head_dim:
            raise ModelLoadError(f"GGUF rope.dimension_count {rope_dim} != head dim {head_dim}: not a Llama layout")
        if "rope_freqs.weight" in gguf.tensors:
            raise ModelLoadError("GGUF files with a rope_freqs tensor (Llama 3.1 rope scaling) are not supported "
                                 "yet by anna-llama; use the safetensors checkpoint")
        rope: dict[str, Any] = {"rope_type": "default", "rope_theta": float(gguf.arch_get("rope.freq_base", 10000.0))}
        scaling = gguf.arch_get("rope.scaling.type", "none")
        if scaling == "linear":
            rope.update(rope_type="linear", factor=float(gguf.arch_get("rope.scaling.factor")))
        elif scaling not in ("none", None):
            raise ModelLoadError(f"GGUF rope scaling {scaling!r} is not supported by anna-llama")
        vocab = gguf.arch_get("vocab_size", None)
        if vocab is None:
            vocab = gguf.tensors["token_embd.weight"].shape[0]
        return cls(
            vocab_size=int(vocab),
            hidden_size=hidden,
            intermediate_size=int(gguf.arch_get("feed_forward_length")),
            num_hidden_layers=int(gguf.arch_get("block_count")),
            num_attention_heads=heads,
            num_key_value_heads=int(gguf.arch_get("attention.head_count_kv", heads)),
            head_dim=head_dim,
            rms_norm_eps=float(gguf.arch_get("attention.layer_norm_rms_epsilon", 1e-5)),
            rope_parameters=rope,
            max_position_embeddings=int(gguf.arch_get("context_length", 2048)),
            tie_word_embeddings="output.weight" not in gguf.tensors,
            attention_bias="blk.0.attn_q.bias" in gguf.tensors,
        )
