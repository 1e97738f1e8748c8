"""Config-only tiny Qwen3.5 and Gemma 4 folders for ``--load-format dummy`` tests (no HF save, no tokenizer)."""

from __future__ import annotations

import json
from pathlib import Path

TINY_QWEN35 = {
    "architectures": ["Qwen3_5ForCausalLM"], "model_type": "qwen3_5_text", "vocab_size": 256, "hidden_size": 64,
    "intermediate_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
    "head_dim": 32, "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 16,
    "linear_value_head_dim": 16, "linear_conv_kernel_dim": 4,
    "layer_types": ["linear_attention", "full_attention", "linear_attention", "full_attention"],
    "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "tie_word_embeddings": True, "eos_token_id": 1,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25,
                        "mrope_section": [2, 1, 1], "mrope_interleaved": True},
}


def write_tiny_qwen35_config(folder: Path) -> Path:
    """Write ``config.json`` of a 4-layer, 64-wide Qwen3.5 into ``folder``; returns ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(TINY_QWEN35))
    return folder


def write_tiny_qwen35_moe_config(folder: Path) -> Path:
    """Write ``config.json`` of :data:`TINY_QWEN35` made a mixture of experts (8 experts, top 2, a shared
    expert: ``Qwen3_5MoeForCausalLM``) into ``folder``; returns ``folder``."""
    config = {k: v for k, v in TINY_QWEN35.items() if k != "intermediate_size"}
    config.update(architectures=["Qwen3_5MoeForCausalLM"], model_type="qwen3_5_moe_text", num_experts=8,
                  num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=48)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def write_tiny_gemma4_config(folder: Path, variant: str, *, conditional: bool = False) -> Path:
    """Write ``config.json`` of a tiny Gemma 4 ``variant`` (``e2b``, ``moe``, ``dense``: the text config of
    :func:`tests.gemma4.tiny.text_config`) into ``folder``, flat (``Gemma4ForCausalLM``) or, with
    ``conditional``, nested under ``text_config`` as the released checkpoints are; returns ``folder``."""
    from tests.gemma4.tiny import text_config

    text = text_config(variant, tie_word_embeddings=True)
    if conditional:
        config = {"architectures": ["Gemma4ForConditionalGeneration"], "model_type": "gemma4",
                  "text_config": {"model_type": "gemma4_text", **text}, "tie_word_embeddings": True,
                  "eos_token_id": [1, 106]}
    else:
        config = {"architectures": ["Gemma4ForCausalLM"], "model_type": "gemma4_text", **text}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    return folder
