"""A config-only tiny Qwen3.5 folder for ``--load-format dummy`` tests (no HF save, no tokenizer)."""

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
