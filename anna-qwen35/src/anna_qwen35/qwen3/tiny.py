"""Tiny random Qwen3 checkpoints, saved with transformers' own ``Qwen3ForCausalLM``: the family's
``tiny_checkpoint`` builder (``ModelFamilySpec.tiny_checkpoint``) and what the family's tests compare with HF."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch


def build_tiny_checkpoint(path: str | Path, *, tie: bool = False, attention_bias: bool = False,
                          num_kv_heads: int = 2, rope_parameters: dict[str, Any] | None = None,
                          tokenizer: bool = True, seed: int = 0) -> Path:
    """Save a tiny random HF ``Qwen3ForCausalLM`` to ``path`` (2 layers, hidden 64, 4 query heads of dim 32 —
    not ``hidden / heads``, as in the released models — and ``num_kv_heads`` KV heads).

    Args:
        tie: tie the LM head to the embeddings.
        attention_bias: q/k/v/o projection biases.
        num_kv_heads: KV heads (divides 4).
        rope_parameters: HF rope dict (default: ``rope_theta`` 1e6, as the released models).
        tokenizer: also write the tiny tokenizer of :mod:`anna_core.testing` (ChatML with ``<think>``, 322 ids,
            EOS ``<|im_end|>`` id 2) and ``generation_config.json``; the vocabulary is 322 ids either way.
        seed: weights seed; norms and biases are moved off their initial values too.

    Returns:
        ``Path(path)``.
    """
    from anna_core.testing.checkpoints import TINY_TOKENIZER_VOCAB, build_tiny_tokenizer
    from transformers import Qwen3Config, Qwen3ForCausalLM

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    cfg = Qwen3Config(
        vocab_size=TINY_TOKENIZER_VOCAB + 2, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=num_kv_heads, head_dim=32, max_position_embeddings=512,
        rms_norm_eps=1e-6, tie_word_embeddings=tie, attention_bias=attention_bias,
        rope_parameters=rope_parameters or {"rope_type": "default", "rope_theta": 1000000.0},
        bos_token_id=0, eos_token_id=2, pad_token_id=0, initializer_range=0.1,
    )
    cfg.architectures = ["Qwen3ForCausalLM"]
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(cfg).eval()
    with torch.no_grad():  # HF starts norms at one and biases at zero: randomise them to test the mapping
        gen = torch.Generator().manual_seed(seed + 1)
        for param in model.parameters():
            if param.dim() == 1:
                param.add_(torch.randn(param.shape, generator=gen) * 0.2)
    model.save_pretrained(str(path))
    if tokenizer:
        build_tiny_tokenizer(path)
        (path / "generation_config.json").write_text(json.dumps(
            {"bos_token_id": 0, "eos_token_id": [2, 0], "pad_token_id": 0}, indent=2))
    return path
