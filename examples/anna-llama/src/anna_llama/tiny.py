"""Tiny random Llama checkpoints, saved with transformers' own classes: the family's ``tiny_checkpoint``
builder (``ModelFamilySpec.tiny_checkpoint``), and what anna-llama's tests compare with HF."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch


def build_tiny_llama(path: str | Path, *, vocab_size: int, tie: bool, rope_parameters: dict[str, Any] | None = None,
                     attention_bias: bool = False, seed: int = 0) -> Any:
    """Save a random HF ``LlamaForCausalLM`` (2 layers, GQA 4/2 heads, head dim 8) to ``path``; returns it."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-5,
        tie_word_embeddings=tie, attention_bias=attention_bias,
        rope_parameters=rope_parameters or {"rope_type": "default", "rope_theta": 10000.0},
        bos_token_id=1, eos_token_id=2, pad_token_id=0,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():  # HF zero-initialises biases and ones norms; randomise them to test the mapping
        for name, p in model.named_parameters():
            if name.endswith("bias") or "norm" in name:
                p.add_(torch.randn_like(p) * 0.1)
    model.save_pretrained(str(path))
    return model


def build_tiny_checkpoint(path: str | Path, *, tie: bool = False, attention_bias: bool = False,
                          rope_parameters: dict[str, Any] | None = None, tokenizer: bool = True,
                          seed: int = 0) -> Path:
    """A servable tiny Llama in ``path``: :func:`build_tiny_llama` over the tiny tokenizer's vocabulary (322 ids)
    and, with ``tokenizer``, that tokenizer (ChatML template, EOS ``<|im_end|>``, id 2). Returns ``Path(path)``."""
    from anna_core.testing.checkpoints import TINY_TOKENIZER_VOCAB, build_tiny_tokenizer

    build_tiny_llama(path, vocab_size=TINY_TOKENIZER_VOCAB + 2, tie=tie, rope_parameters=rope_parameters,
                     attention_bias=attention_bias, seed=seed)
    if tokenizer:
        build_tiny_tokenizer(path)
    return Path(path)
