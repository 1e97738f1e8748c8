"""HF parity of the native Gemma 4 text forward pass on tiny random checkpoints of each variant style
(E2B/E4B: per-layer embeddings, KV sharing, double-wide MLP; 26B-A4B: MoE block, K = V; 31B: dense,
K = V) in both layouts: fp32 prefill logits, 32 greedy tokens, chunked prefill, two sequences at once.
Prompts are several 16-token sliding windows long."""

from __future__ import annotations

import pytest
import torch
from anna_core.testing.oracle import hf_reference_logits
from anna_core.testing.runner import prefill_logits

from tests.gemma4.conftest import load_anna, rel_err
from tests.gemma4.parity_checks import (
    TOL,
    check_chunked_prefill_equals_one_pass,
    check_greedy_32_tokens_match_hf_generate,
    check_prefill_logits_match_hf,
    check_two_sequences_together_equal_each_alone,
)
from tests.gemma4.tiny import LAYOUTS, PLACEHOLDERS, VARIANTS, VOCAB, WINDOW

CASES = [(v, layout) for v in VARIANTS for layout in LAYOUTS]


@pytest.mark.parametrize("variant, layout", CASES)
def test_prefill_logits_match_hf(gemma4_factory, prompt, variant, layout):
    path = gemma4_factory(variant=variant, layout=layout)
    anna = load_anna(path)
    assert len(prompt) > 4 * WINDOW
    ref = check_prefill_logits_match_hf(path, anna, prompt, VOCAB)
    assert ref.abs().max() < 30.0  # soft-capped


@pytest.mark.parametrize("variant, layout", CASES)
def test_greedy_32_tokens_match_hf_generate(gemma4_factory, prompt, variant, layout):
    path = gemma4_factory(variant=variant, layout=layout)
    check_greedy_32_tokens_match_hf_generate(path, load_anna(path), prompt)


@pytest.mark.parametrize("variant", VARIANTS)
def test_chunked_prefill_equals_one_pass(gemma4_factory, prompt, variant):
    anna = load_anna(gemma4_factory(variant=variant, layout="causal"))
    check_chunked_prefill_equals_one_pass(anna, prompt, WINDOW)


@pytest.mark.parametrize("variant", VARIANTS)
def test_two_sequences_together_equal_each_alone(gemma4_factory, prompt, variant):
    anna = load_anna(gemma4_factory(variant=variant, layout="causal"))
    check_two_sequences_together_equal_each_alone(anna, prompt)


def test_media_placeholders_in_a_text_prompt_embed_as_padding_like_hf(gemma4_factory, prompt):
    path = gemma4_factory(variant="e2b", layout="conditional")
    anna = load_anna(path)
    ids = prompt[:30]
    ids[5], ids[12], ids[20] = PLACEHOLDERS["image_token_id"], PLACEHOLDERS["audio_token_id"], PLACEHOLDERS["video_token_id"]
    ref = hf_reference_logits(path, ids)
    assert rel_err(prefill_logits(anna.model, ids, block_size=8), ref) <= TOL
    padded = list(ids)
    padded[5] = padded[12] = padded[20] = 0  # the pad id: the same logits
    assert torch.equal(prefill_logits(anna.model, padded, block_size=8), prefill_logits(anna.model, ids, block_size=8))


def test_the_sliding_window_matters(gemma4_factory, prompt):
    """Tokens more than a window back reach a sliding layer only through the global layers: changing a
    far token changes the logits (so the global layers see it) and the parity above is not vacuous."""
    anna = load_anna(gemma4_factory(variant="dense", layout="causal"))
    base = prefill_logits(anna.model, prompt[:40], block_size=8)
    changed = list(prompt[:40])
    changed[0] = (changed[0] + 1) % 300 + 3
    assert (prefill_logits(anna.model, changed, block_size=8)[-1] - base[-1]).abs().max() > 1e-4
