"""Test engines over a loaded tiny Qwen3.5 (dense or MoE) whose sampler keeps every logits row, and the prefix-cache
check that ``tests/qwen35/test_qwen35_prefix_cache.py`` and ``tests/qwen35_moe/test_qwen35_moe_engine.py`` both
make."""

from __future__ import annotations

import torch
from anna_core import SamplingParams
from anna_core.engine.config import EngineConfig
from anna_core.engine.llm_engine import LLMEngine
from anna_core.testing.engine_run import LogitsRecorder, run_to_completion

N = 4
GREEDY = SamplingParams(temperature=0.0, max_tokens=N, ignore_eos=True)


def engine(loaded, **cfg):
    cfg = {"block_size": 16, "num_blocks": 160, "max_num_seqs": 16, "max_prefill_tokens": 256,
           "snapshot_interval": 32, **cfg}
    eng = LLMEngine.from_loaded(loaded, EngineConfig(**cfg))
    eng.runner.sampler = LogitsRecorder(eng.runner.sampler)
    return eng


def run(eng, prompts, params=GREEDY, prefix="r"):
    return run_to_completion(eng, prompts, params, prefix=prefix)


def check_prefix_hit_gives_the_logits_of_a_miss(loaded, first: list[int], second: list[int]) -> None:
    """``second`` shares its first 75 tokens with ``first``: after ``first``, it resumes from the snapshot at 64 and
    gives the tokens and logits (within 1e-5) of an engine without caches."""
    ref = engine(loaded, enable_prefix_caching=False, prompt_cache_size=0)
    cached = engine(loaded, prompt_cache_size=0)
    run(cached, [first], GREEDY, prefix="warm")
    [hit] = run(cached, [second], GREEDY, prefix="hit")
    [miss] = run(ref, [second], GREEDY, prefix="miss")
    assert hit.num_cached_tokens == 64 and miss.num_cached_tokens == 0
    assert hit.token_ids == miss.token_ids
    hit_rows, miss_rows = cached.runner.sampler.rows["hit0"], ref.runner.sampler.rows["miss0"]
    assert len(hit_rows) == len(miss_rows) == N
    for a, b in zip(hit_rows, miss_rows):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
