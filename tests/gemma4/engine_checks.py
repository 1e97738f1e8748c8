"""The checks of a Gemma family through Anna's engine that ``tests/gemma4/test_gemma4_engine.py`` and
``tests/gemma3/test_gemma3_engine.py`` both make, over a loaded tiny checkpoint: test engines whose sampler keeps
every logits row, and the family picked from config.json, batching, prefix-cache hits and chunked prefill changing no
token and no logit."""

from __future__ import annotations

from pathlib import Path

import torch
from anna_core import LLM, SamplingParams
from anna_core.engine.config import EngineConfig
from anna_core.engine.llm_engine import LLMEngine
from anna_core.testing.engine_run import LogitsRecorder, run_to_completion
from anna_core.testing.oracle import hf_model

from tests.gemma4.conftest import hf_greedy

N = 6
GREEDY = SamplingParams(temperature=0.0, max_tokens=N, ignore_eos=True)
BLOCK = 8


def engine(loaded, **cfg):
    cfg = {"block_size": BLOCK, "num_blocks": 96, "max_num_seqs": 8, "max_prefill_tokens": 128, **cfg}
    eng = LLMEngine.from_loaded(loaded, EngineConfig(**cfg))
    eng.runner.sampler = LogitsRecorder(eng.runner.sampler)
    return eng


def run(eng, prompts, params=GREEDY, prefix="r", **kw):
    return run_to_completion(eng, prompts, params, prefix=prefix, **kw)


def assert_same_rows(a_rows, b_rows, atol=1e-5):
    assert len(a_rows) == len(b_rows) == N
    for a, b in zip(a_rows, b_rows):
        torch.testing.assert_close(a, b, atol=atol, rtol=0)


def check_llm_picks_the_family_from_config_and_matches_hf(path: Path, family: str, misleading_name: str,
                                                          base: list[int], tmp_path: Path) -> None:
    """``LLM`` over ``path`` behind a folder called ``misleading_name`` loads ``family`` and gives HF's greedy
    tokens."""
    hidden = tmp_path / misleading_name  # the folder name says nothing true: config.json decides
    hidden.symlink_to(path, target_is_directory=True)
    llm = LLM(hidden, device="cpu", dtype="fp32", block_size=BLOCK, num_blocks=64, max_num_seqs=4)
    assert llm.loaded.family == family
    prompts = [base[:45], base[50:53]]
    outs = llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True))
    hf = hf_model(path)
    assert [o.token_ids for o in outs] == [hf_greedy(path, p, 12, hf) for p in prompts]


def check_batched_requests_equal_each_alone(loaded, base: list[int]) -> None:
    lengths = [1, 70, 9, 33, 16, 48]
    prompts = [base[:k] if i % 2 else [(t * 5 + i) % 317 + 3 for t in base[:k]] for i, k in enumerate(lengths)]
    eng = engine(loaded, enable_prefix_caching=False)
    outs = run(eng, prompts)
    alone = engine(loaded, max_num_seqs=1, enable_prefix_caching=False, prompt_cache_size=0)
    for i, (p, out) in enumerate(zip(prompts, outs)):
        assert out.finish_reason == "length", out.error
        [single] = run(alone, [p], prefix=f"alone{i}-")
        assert out.token_ids == single.token_ids, len(p)
        # GEMMs over more rows round differently in fp32: logits agree to ~1e-5 of their range (<= 30)
        assert_same_rows(eng.runner.sampler.rows[f"r{i}"], alone.runner.sampler.rows[f"alone{i}-0"], atol=1e-4)
    assert eng.kv.num_used_blocks == 0


def check_prefix_hit_gives_the_logits_of_a_miss(loaded, base: list[int]) -> None:
    ref = engine(loaded, enable_prefix_caching=False, prompt_cache_size=0)
    cached = engine(loaded, prompt_cache_size=0)
    first, second = base[:80], base[:60] + base[90:110]  # share 60 tokens: 7 blocks of 8, past 3 windows
    run(cached, [first], prefix="warm")
    [hit] = run(cached, [second], prefix="hit")
    [miss] = run(ref, [second], prefix="miss")
    assert hit.num_cached_tokens == 56 and miss.num_cached_tokens == 0
    assert hit.token_ids == miss.token_ids
    assert_same_rows(cached.runner.sampler.rows["hit0"], ref.runner.sampler.rows["miss0"])


def check_chunked_prefill_equals_one_pass(loaded, base: list[int]) -> None:
    prompt = base[:110]
    whole = engine(loaded, enable_prefix_caching=False, prompt_cache_size=0)
    chunked = engine(loaded, enable_prefix_caching=False, prompt_cache_size=0, max_prefill_tokens=16,
                     prefill_chunk_size=13)
    [a] = run(whole, [prompt], prefix="whole")
    [b] = run(chunked, [prompt], prefix="chunked")
    assert a.token_ids == b.token_ids
    assert_same_rows(whole.runner.sampler.rows["whole0"], chunked.runner.sampler.rows["chunked0"], atol=1e-4)
