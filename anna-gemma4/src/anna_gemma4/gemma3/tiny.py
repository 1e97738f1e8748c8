"""Tiny random Gemma 3 checkpoints, saved with transformers' own classes (``save_pretrained``): the
causal LM (``Gemma3ForCausalLM``, as the 270M / 1B) and the conditional-generation layout
(``Gemma3ForConditionalGeneration`` with a tiny SigLIP tower, as the 4B-27B, whose vision weights Anna
must skip). Sliding window 16 tokens, so test prompts of a few dozen tokens cross it; the global layers'
RoPE is linearly scaled (as in the 4B-27B) and ``query_pre_attn_scalar`` differs from the head dim (as
in the 27B), so a wrong scale or RoPE base shows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

WINDOW = 16
VOCAB = 384
LAYOUTS = ("causal", "conditional")
IMAGE_TOKEN = 350


def text_config(**overrides: Any) -> dict[str, Any]:
    """``Gemma3TextConfig`` keyword arguments of the tiny model (7 layers: two globals, at 2 and 5)."""
    base = dict(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=7, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, query_pre_attn_scalar=24, sliding_window=WINDOW, rms_norm_eps=1e-6,
        layer_types=["sliding_attention", "sliding_attention", "full_attention"] * 2 + ["sliding_attention"],
        max_position_embeddings=4096, initializer_range=0.08, pad_token_id=0, eos_token_id=1, bos_token_id=2,
        rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
                         "full_attention": {"rope_type": "linear", "factor": 4.0, "rope_theta": 1_000_000.0}},
    )
    base.update(overrides)
    return base


def _randomise(model: torch.nn.Module, seed: int) -> None:
    """Move the norm weights off their init value (zeros: ``1 + w`` = 1), so a plain-``w`` norm would fail."""
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for _name, param in model.named_parameters():
            if param.dim() == 1:
                param.add_(torch.randn(param.shape, generator=gen) * 0.3)


def build_tiny_gemma3(path: str | Path, *, layout: str = "causal", tie: bool = True, tokenizer: bool = True,
                      seed: int = 0, **overrides: Any) -> Path:
    """Save a tiny random Gemma 3 checkpoint.

    Args:
        path: output folder (created).
        layout: ``"causal"`` or ``"conditional"``.
        tie: tie the LM head to the embeddings.
        tokenizer: also write the tiny BPE tokenizer of :mod:`anna_core.testing` (ids < 322).
        seed: weights seed.
        overrides: further ``Gemma3TextConfig`` fields.
    """
    from anna_core.testing.oracle import hide_fla

    hide_fla()
    from transformers import Gemma3Config, Gemma3ForCausalLM, Gemma3ForConditionalGeneration, Gemma3TextConfig

    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    text = text_config(tie_word_embeddings=tie, **overrides)
    if layout == "causal":
        config = Gemma3TextConfig(**text)
        config.architectures = ["Gemma3ForCausalLM"]
        cls = Gemma3ForCausalLM
    else:
        vision = dict(model_type="siglip_vision_model", hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                      num_attention_heads=2, image_size=16, patch_size=4)
        config = Gemma3Config(text_config=text, vision_config=vision, mm_tokens_per_image=4,
                              image_token_index=IMAGE_TOKEN, boi_token_index=351, eoi_token_index=352,
                              tie_word_embeddings=tie)
        config.architectures = ["Gemma3ForConditionalGeneration"]
        cls = Gemma3ForConditionalGeneration
    torch.manual_seed(seed)
    model = cls(config).eval()
    _randomise(model, seed)
    model.save_pretrained(str(path))
    if tokenizer:
        from anna_core.testing.checkpoints import build_tiny_tokenizer

        build_tiny_tokenizer(path)
        (path / "generation_config.json").write_text(json.dumps({"eos_token_id": [1], "pad_token_id": 0}))
    return path
