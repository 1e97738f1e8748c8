"""Tiny random Gemma 4 checkpoints, saved with transformers' own classes, in the shapes of the released
variants (much smaller): ``e2b`` (per-layer embeddings, KV sharing, double-wide MLP on the shared
layers), ``moe`` (26B-A4B: the MoE block beside the MLP, K = V on global layers), ``dense`` (31B: K = V
on global layers). Sliding window 16 tokens, so test prompts of a few dozen tokens cross it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

WINDOW = 16
VOCAB = 384
LAYOUTS = ("causal", "conditional")
VARIANTS = ("e2b", "moe", "dense")
PLACEHOLDERS = {"image_token_id": 350, "video_token_id": 351, "audio_token_id": 352}
"""Media placeholder ids of the conditional layout, inside the tiny vocabulary."""


def text_config(variant: str, **overrides: Any) -> dict[str, Any]:
    """``Gemma4TextConfig`` keyword arguments of a tiny ``variant``."""
    base = dict(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=6, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, global_head_dim=32, sliding_window=WINDOW, rms_norm_eps=1e-6,
        layer_types=["sliding_attention", "sliding_attention", "full_attention"] * 2,
        max_position_embeddings=4096, final_logit_softcapping=30.0, initializer_range=0.08,
        hidden_size_per_layer_input=0, pad_token_id=0, eos_token_id=1, bos_token_id=2,
        rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
                         "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                            "rope_theta": 1_000_000.0}},
    )
    if variant == "e2b":
        base.update(hidden_size_per_layer_input=8, vocab_size_per_layer_input=VOCAB, num_kv_shared_layers=2,
                    use_double_wide_mlp=True, num_key_value_heads=1)
    elif variant == "moe":
        base.update(attention_k_eq_v=True, num_global_key_value_heads=1, enable_moe_block=True, num_experts=4,
                    top_k_experts=2, moe_intermediate_size=32, intermediate_size=48,
                    use_bidirectional_attention="vision")  # as released: bidirectional over images only
    elif variant == "dense":
        base.update(attention_k_eq_v=True, num_global_key_value_heads=1, use_bidirectional_attention="vision")
    else:
        raise ValueError(f"unknown variant {variant!r}; use one of {VARIANTS}")
    base.update(overrides)
    return base


def _randomise(model: torch.nn.Module, seed: int) -> None:
    """Move the vectors (norm weights, layer scalars, router scales) off their init values, and scale the
    router projections up so that the top-k experts are well separated (no near-ties between HF and Anna)."""
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.dim() == 1:
                param.add_(torch.randn(param.shape, generator=gen) * 0.2)
            if name.endswith("router.proj.weight"):
                param.mul_(25.0)


def build_tiny_gemma4(path: str | Path, *, variant: str = "e2b", layout: str = "causal", tie: bool = True,
                      tokenizer: bool = True, markup: bool = False, seed: int = 0, **overrides: Any) -> Path:
    """Save a tiny random Gemma 4 checkpoint with ``save_pretrained`` (the 5.24 ``per_layer_config`` form).

    Args:
        path: output folder (created).
        variant: ``"e2b"``, ``"moe"`` or ``"dense"`` (see the module docstring).
        layout: ``"causal"`` (``Gemma4ForCausalLM``) or ``"conditional"`` (``Gemma4ForConditionalGeneration``
            with tiny vision and audio towers, whose weights Anna must skip).
        tie: tie the LM head to the embeddings.
        tokenizer: also write the tiny BPE tokenizer of :mod:`anna_core.testing` (ids < 322).
        markup: give that tokenizer Gemma 4's chat-format tags as single tokens of the released tokenizer's kinds
            (:func:`add_markup`: ids 322 to 333), so the family's output parsers find ``<|channel>`` by its id.
        seed: weights seed.
        overrides: further ``Gemma4TextConfig`` fields.
    """
    from anna_core.testing.oracle import hide_fla

    hide_fla()
    from transformers import Gemma4Config, Gemma4ForCausalLM, Gemma4ForConditionalGeneration, Gemma4TextConfig

    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    text = text_config(variant, tie_word_embeddings=tie, **overrides)
    if layout == "causal":
        config = Gemma4TextConfig(**text)
        config.architectures = ["Gemma4ForCausalLM"]
        cls = Gemma4ForCausalLM
    else:
        vision = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                      num_key_value_heads=2, head_dim=8, patch_size=4, position_embedding_size=64)
        audio = dict(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, subsampling_conv_channels=[8, 4],
                     output_proj_dims=16, conv_kernel_size=3)
        config = Gemma4Config(text_config=text, vision_config=vision, audio_config=audio, tie_word_embeddings=tie,
                              boi_token_id=353, eoi_token_id=354, boa_token_id=355, eoa_token_index=356,
                              **PLACEHOLDERS)
        config.architectures = ["Gemma4ForConditionalGeneration"]
        cls = Gemma4ForConditionalGeneration
    torch.manual_seed(seed)
    model = cls(config).eval()
    _randomise(model, seed)
    model.save_pretrained(str(path))
    if tokenizer:
        from anna_core.testing.checkpoints import build_tiny_tokenizer

        hf = build_tiny_tokenizer(path)
        if markup:
            add_markup(hf)
            hf.save_pretrained(str(path))
        (path / "generation_config.json").write_text(json.dumps({"eos_token_id": [2], "pad_token_id": 0}))
    return path


def add_markup(hf: Any) -> None:
    """Add Gemma 4's chat-format tags to the transformers tokenizer ``hf``, each one token, as the released
    tokenizer has them: the tags the output parsers read (:data:`~anna_gemma4.tokenizer.PARSER_MARKUP`) as
    ordinary tokens, the ones only the chat template writes (:data:`~anna_gemma4.tokenizer.CONTROL_MARKUP`) as
    special tokens (:func:`~anna_gemma4.tokenizer.check_markup` accepts the result)."""
    from tokenizers import AddedToken

    from anna_gemma4.tokenizer import CONTROL_MARKUP, PARSER_MARKUP

    hf.add_tokens(list(PARSER_MARKUP))
    hf.add_tokens([AddedToken(tag, special=True, normalized=False) for tag in CONTROL_MARKUP], special_tokens=True)
