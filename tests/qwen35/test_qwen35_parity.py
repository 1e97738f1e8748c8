"""HF parity of the native Qwen3.5 forward pass: prefill logits, chunked prefill, greedy decode."""

from __future__ import annotations

import pytest
from anna_core.testing.oracle import hf_greedy, hf_model, hf_reference_logits
from anna_core.testing.runner import prefill_logits, simple_greedy, simple_greedy_batch

from tests.qwen35.conftest import load_anna, rel_err

TOL = 1e-4

VARIANTS = {
    "text-tied": dict(layout="text", tie=True),
    "text-untied-mha-equal-linear-heads": dict(layout="text", tie=False, num_kv_heads=4,
                                               linear_num_key_heads=2, linear_num_value_heads=2),
    "vl-tied": dict(layout="vl", tie=True),
    "vl-untied-sharded-mtp": dict(layout="vl", tie=False, max_shard_size="100KB", mtp=True),
    "text-untied-mqa-mtp": dict(layout="text", tie=False, num_kv_heads=1, linear_num_value_heads=8, mtp=True,
                                layer_types=["linear_attention", "linear_attention", "linear_attention",
                                             "full_attention"]),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_prefill_logits_match_hf(anna_tiny_qwen35_factory, long_prompt, variant):
    path = anna_tiny_qwen35_factory(**VARIANTS[variant])
    anna = load_anna(path)
    ids = long_prompt[:100]
    ref = hf_reference_logits(path, ids)
    mine = prefill_logits(anna.model, ids)
    assert mine.shape == ref.shape == (100, 384)
    assert rel_err(mine, ref) <= TOL
    assert (mine.argmax(-1) == ref.argmax(-1)).all()


def test_chunked_prefill_matches_whole_prefill(anna_tiny_qwen35_factory, long_prompt):
    anna = load_anna(anna_tiny_qwen35_factory(layout="text", tie=True))
    whole = prefill_logits(anna.model, long_prompt)
    for chunk in (17, 64):
        assert rel_err(prefill_logits(anna.model, long_prompt, chunk_size=chunk), whole) <= TOL
    # one-token prefill chunks take the prefill kernels, not the decode ones
    assert rel_err(prefill_logits(anna.model, long_prompt[:20], chunk_size=1), whole[:20]) <= TOL


@pytest.mark.parametrize("variant", ["text-tied", "vl-untied-sharded-mtp"])
def test_greedy_32_tokens_match_hf_generate(anna_tiny_qwen35_factory, long_prompt, variant):
    path = anna_tiny_qwen35_factory(**VARIANTS[variant])
    anna, ref_model = load_anna(path), hf_model(path)
    prompt = long_prompt[:12]
    expected = hf_greedy(path, prompt, 32, ref_model)
    assert simple_greedy(anna.model, prompt, 32) == expected
    # chunked prefill through the paged cache and recurrent state, then decode
    assert simple_greedy(anna.model, prompt, 32, chunk_size=5, block_size=4) == expected


def test_decode_after_prompt_longer_than_a_chunk_matches_hf(anna_tiny_qwen35_factory, long_prompt):
    path = anna_tiny_qwen35_factory(layout="text", tie=True)
    anna = load_anna(path)
    prompt = long_prompt[:97]  # > 64 (one gated-delta chunk), not a multiple of it
    expected = hf_greedy(path, prompt, 32)
    assert simple_greedy(anna.model, prompt, 32) == expected


def test_two_sequences_decoded_together_match_each_alone(anna_tiny_qwen35_factory, long_prompt):
    anna = load_anna(anna_tiny_qwen35_factory(layout="text", tie=True))
    a, b = long_prompt[:70], long_prompt[80:85]
    together = simple_greedy_batch(anna.model, [a, b], 16, chunk_size=32)
    assert together == [simple_greedy(anna.model, a, 16), simple_greedy(anna.model, b, 16)]
