"""HF parity of the Gemma 3 text forward pass on tiny random checkpoints in both layouts (the causal LM
and the conditional-generation checkpoints' language model): fp32 prefill logits, 32 greedy tokens,
chunked prefill, two sequences at once. Prompts are several 16-token sliding windows long."""

from __future__ import annotations

import pytest
import torch
from anna_core.testing.oracle import hf_reference_logits
from anna_core.testing.runner import prefill_logits

from tests.gemma3.conftest import load_anna
from tests.gemma3.tiny import IMAGE_TOKEN, LAYOUTS, VOCAB, WINDOW
from tests.gemma4.conftest import rel_err
from tests.gemma4.parity_checks import (
    TOL,
    check_chunked_prefill_equals_one_pass,
    check_greedy_32_tokens_match_hf_generate,
    check_prefill_logits_match_hf,
    check_two_sequences_together_equal_each_alone,
)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_prefill_logits_match_hf(gemma3_factory, prompt, layout):
    path = gemma3_factory(layout=layout)
    anna = load_anna(path)
    assert anna.family == "gemma3" and anna.model.config.layout == layout
    assert len(prompt) > 4 * WINDOW
    check_prefill_logits_match_hf(path, anna, prompt, VOCAB)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_greedy_32_tokens_match_hf_generate(gemma3_factory, prompt, layout):
    path = gemma3_factory(layout=layout)
    check_greedy_32_tokens_match_hf_generate(path, load_anna(path), prompt)


def test_untied_head_and_softcapping_match_hf(gemma3_factory, prompt):
    path = gemma3_factory(tie=False, final_logit_softcapping=5.0, seed=3)
    anna = load_anna(path)
    assert anna.model.lm_head is not None
    ref = hf_reference_logits(path, prompt)
    mine = prefill_logits(anna.model, prompt, block_size=8)
    assert rel_err(mine, ref) <= TOL and ref.abs().max() < 5.0


def test_image_token_in_a_text_prompt_matches_hf(gemma3_factory, prompt):
    """Without pixels transformers embeds an in-vocabulary image token as itself; so does Anna."""
    path = gemma3_factory(layout="conditional")
    ids = list(prompt[:30])
    ids[7] = IMAGE_TOKEN
    ref = hf_reference_logits(path, ids)
    assert rel_err(prefill_logits(load_anna(path).model, ids, block_size=8), ref) <= TOL


def test_chunked_prefill_equals_one_pass(gemma3_factory, prompt):
    anna = load_anna(gemma3_factory(layout="causal"))
    check_chunked_prefill_equals_one_pass(anna, prompt, WINDOW)


def test_two_sequences_together_equal_each_alone(gemma3_factory, prompt):
    anna = load_anna(gemma3_factory(layout="causal"))
    check_two_sequences_together_equal_each_alone(anna, prompt)


def test_the_sliding_window_and_local_rope_base_matter(gemma3_factory, prompt):
    """A far token reaches the last position only through the global layers (so they see it), and the
    sliding layers' own RoPE base matters: with the global base everywhere the logits move."""
    path = gemma3_factory(layout="causal")
    anna = load_anna(path)
    base = prefill_logits(anna.model, prompt[:40], block_size=8)
    changed = list(prompt[:40])
    changed[0] = (changed[0] + 1) % 300 + 3
    assert (prefill_logits(anna.model, changed, block_size=8)[-1] - base[-1]).abs().max() > 1e-4
    other = load_anna(gemma3_factory(layout="causal", rope_parameters={
        "sliding_attention": {"rope_type": "default", "rope_theta": 1_000_000.0},
        "full_attention": {"rope_type": "linear", "factor": 4.0, "rope_theta": 1_000_000.0}}))
    assert rel_err(prefill_logits(other.model, prompt[:40], block_size=8), base) > 1e-3
    assert torch.isfinite(base).all()


def test_the_family_offers_a_tiny_checkpoint(tiny_checkpoint, anna_plugin_manager):
    """``tiny_checkpoint("gemma3", ...)`` (the family's declared builder) writes a folder the family loads, with
    its tokenizer, whose logits are HF's."""
    from anna_core.testing.tiny import load_against_hf

    loaded, error = load_against_hf(tiny_checkpoint("gemma3", tie=False, seed=2), pm=anna_plugin_manager, block_size=8)
    assert loaded.family == "gemma3" and loaded.tokenizer is not None
    assert error <= TOL
