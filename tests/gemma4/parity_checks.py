"""The HF parity checks of a Gemma family's text forward pass that ``tests/gemma4/test_gemma4_parity.py`` and
``tests/gemma3/test_gemma3_parity.py`` both make on a tiny checkpoint (``path``, loaded by Anna as ``anna``): fp32
prefill logits, 32 greedy tokens, chunked prefill, two sequences at once."""

from __future__ import annotations

from pathlib import Path

import torch
from anna_core.testing.oracle import hf_model, hf_reference_logits
from anna_core.testing.runner import prefill_logits, simple_greedy, simple_greedy_batch

from tests.gemma4.conftest import hf_greedy, rel_err

TOL = 1e-4


def check_prefill_logits_match_hf(path: Path, anna, prompt: list[int], vocab: int) -> torch.Tensor:
    """Anna's prefill logits of ``prompt`` (blocks of 8) equal HF's within :data:`TOL` and pick the same tokens;
    HF's logits ``[len(prompt), vocab]``."""
    ref = hf_reference_logits(path, prompt)
    mine = prefill_logits(anna.model, prompt, block_size=8)
    assert mine.shape == ref.shape == (len(prompt), vocab)
    assert rel_err(mine, ref) <= TOL
    assert (mine.argmax(-1) == ref.argmax(-1)).all()
    return ref


def check_greedy_32_tokens_match_hf_generate(path: Path, anna, prompt: list[int]) -> None:
    ids = prompt[:40]  # the 32 new tokens run well past two windows
    expected = hf_greedy(path, ids, 32, hf_model(path))
    assert len(set(expected)) > 1  # not a degenerate repeat of one token
    assert simple_greedy(anna.model, ids, 32, block_size=8) == expected
    # chunked prefill (chunks cross the window and the blocks), blocks of 4 tokens
    assert simple_greedy(anna.model, ids, 32, block_size=4, chunk_size=11) == expected


def check_chunked_prefill_equals_one_pass(anna, prompt: list[int], window: int) -> None:
    whole = prefill_logits(anna.model, prompt, block_size=8)
    for chunk in (1, 7, window, 33):
        assert rel_err(prefill_logits(anna.model, prompt, block_size=8, chunk_size=chunk), whole) <= TOL


def check_two_sequences_together_equal_each_alone(anna, prompt: list[int]) -> None:
    a, b = prompt[:50], prompt[55:60]
    together = simple_greedy_batch(anna.model, [a, b], 20, block_size=8, chunk_size=16)
    assert together == [simple_greedy(anna.model, a, 20, block_size=8), simple_greedy(anna.model, b, 20, block_size=8)]
