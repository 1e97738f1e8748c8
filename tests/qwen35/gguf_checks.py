"""The checks of a tiny Qwen3.5 GGUF against transformers loading the same file that the dense and the MoE GGUF
tests (``tests/qwen35/test_qwen35_gguf.py``, ``tests/qwen35_moe/test_qwen35_moe_gguf.py``) both make: ``hf`` the file
through ``tiny_gguf.hf_from_gguf``, ``anna`` its model loaded by Anna."""

from __future__ import annotations

from typing import Any

from anna_core.testing.oracle import hf_greedy, hf_reference_logits
from anna_core.testing.runner import prefill_logits, simple_greedy

from tests.qwen35.conftest import rel_err

TOL = 1e-4


def check_logits_match_hf_loading_the_same_gguf(hf: Any, anna: Any, prompt: list[int]) -> None:
    """The prefill logits of ``prompt`` at once (``[len(prompt), 384]``) and of its first 12 tokens one at a time
    (decode-sized steps) equal HF's within :data:`TOL` and pick the same tokens."""
    ref = hf_reference_logits(None, prompt, model=hf)
    mine = prefill_logits(anna, prompt)
    assert mine.shape == ref.shape == (len(prompt), 384)
    assert rel_err(mine, ref) <= TOL
    assert (mine.argmax(-1) == ref.argmax(-1)).all()
    assert rel_err(prefill_logits(anna, prompt[:12], chunk_size=1), ref[:12]) <= TOL


def check_greedy_32_tokens_match_hf_loading_the_same_gguf(hf: Any, anna: Any, prompt: list[int]) -> None:
    """32 greedy tokens after the first 10 of ``prompt`` equal HF ``generate``'s (and are not one repeated few)."""
    expected = hf_greedy(None, prompt[:10], 32, model=hf)
    assert len(set(expected)) > 3  # not a degenerate repetition
    assert simple_greedy(anna, prompt[:10], 32) == expected
