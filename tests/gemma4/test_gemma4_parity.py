"""HF parity of the native Gemma 4 text forward pass on tiny random checkpoints of each variant style
(E2B/E4B: per-layer embeddings, KV sharing, double-wide MLP; 26B-A4B: MoE block, K = V; 31B: dense,
K = V) in both layouts: fp32 prefill logits, 32 greedy tokens, chunked prefill, two sequences at once.
Prompts are several 16-token sliding windows long."""

from __future__ import annotations

import pytest
import torch
from anna_core.testing.oracle import hf_model, hf_reference_logits
from anna_core.testing.runner import prefill_logits, simple_greedy, simple_greedy_batch

from tests.gemma4.conftest import hf_greedy, load_anna, rel_err
from tests.gemma4.tiny import LAYOUTS, PLACEHOLDERS, VARIANTS, VOCAB, WINDOW

TOL = 1e-4
CASES = [(v, layout) for v in VARIANTS for layout in LAYOUTS]


@pytest.mark.parametrize("variant, layout", CASES)
def test_prefill_logits_match_hf(gemma4_factory, prompt, variant, layout):
    path = gemma4_factory(variant=variant, layout=layout)
    anna = load_anna(path)
    assert len(prompt) > 4 * WINDOW
    ref = hf_reference_logits(path, prompt)
    mine = prefill_logits(anna.model, prompt, block_size=8)
    assert mine.shape == ref.shape == (len(prompt), VOCAB)
    assert rel_err(mine, ref) <= TOL
    assert (mine.argmax(-1) == ref.argmax(-1)).all()
    assert ref.abs().max() < 30.0  # soft-capped


@pytest.mark.parametrize("variant, layout", CASES)
def test_greedy_32_tokens_match_hf_generate(gemma4_factory, prompt, variant, layout):
    path = gemma4_factory(variant=variant, layout=layout)
    anna = load_anna(path)
    ids = prompt[:40]  # the 32 new tokens run well past two windows
    expected = hf_greedy(path, ids, 32, hf_model(path))
    assert len(set(expected)) > 1  # not a degenerate repeat of one token
    assert simple_greedy(anna.model, ids, 32, block_size=8) == expected
    # chunked prefill (chunks cross the window and the blocks), blocks of 4 tokens
    assert simple_greedy(anna.model, ids, 32, block_size=4, chunk_size=11) == expected


@pytest.mark.parametrize("variant", VARIANTS)
def test_chunked_prefill_equals_one_pass(gemma4_factory, prompt, variant):
    anna = load_anna(gemma4_factory(variant=variant, layout="causal"))
    whole = prefill_logits(anna.model, prompt, block_size=8)
    for chunk in (1, 7, WINDOW, 33):
        assert rel_err(prefill_logits(anna.model, prompt, block_size=8, chunk_size=chunk), whole) <= TOL


@pytest.mark.parametrize("variant", VARIANTS)
def test_two_sequences_together_equal_each_alone(gemma4_factory, prompt, variant):
    anna = load_anna(gemma4_factory(variant=variant, layout="causal"))
    a, b = prompt[:50], prompt[55:60]
    together = simple_greedy_batch(anna.model, [a, b], 20, block_size=8, chunk_size=16)
    assert together == [simple_greedy(anna.model, a, 20, block_size=8), simple_greedy(anna.model, b, 20, block_size=8)]


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
