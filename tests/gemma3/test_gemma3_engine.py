"""Gemma 3 through Anna's engine: the family is chosen from config.json, greedy tokens match HF, and
batching, prefix-cache hits and chunked prefill change no token and no logit (the test engines of
``tests/gemma4/test_gemma4_engine.py``)."""

from __future__ import annotations

import pytest
from anna_core import LLM, SamplingParams
from anna_core.cache_spec import FullAttentionSpec, SlidingWindowSpec
from anna_core.testing.oracle import hf_model

from tests.gemma3.conftest import load_anna
from tests.gemma3.tiny import WINDOW
from tests.gemma4.conftest import hf_greedy
from tests.gemma4.test_gemma4_engine import BLOCK, assert_same_rows, engine, run


@pytest.fixture(scope="module")
def loaded(gemma3_factory):
    return load_anna(gemma3_factory(layout="conditional"))


@pytest.fixture(scope="module")
def base():
    import torch

    return torch.randint(3, 320, (120,), generator=torch.Generator().manual_seed(11)).tolist()


def test_llm_picks_the_family_from_config_and_matches_hf(gemma3_factory, base, tmp_path):
    path = gemma3_factory(layout="causal")
    hidden = tmp_path / "gemma-4-e2b"  # the folder name says nothing true: config.json decides
    hidden.symlink_to(path, target_is_directory=True)
    llm = LLM(hidden, device="cpu", dtype="fp32", block_size=BLOCK, num_blocks=64, max_num_seqs=4)
    assert llm.loaded.family == "gemma3"
    prompts = [base[:45], base[50:53]]
    outs = llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True))
    hf = hf_model(path)
    assert [o.token_ids for o in outs] == [hf_greedy(path, p, 12, hf) for p in prompts]


def test_cache_groups(loaded):
    sliding, full = loaded.model.cache_spec.groups
    assert isinstance(sliding, SlidingWindowSpec) and isinstance(full, FullAttentionSpec)
    assert sliding.window == WINDOW and sliding.layers == (0, 1, 3, 4, 6) and full.layers == (2, 5)
    assert (sliding.head_dim, sliding.num_kv_heads) == (full.head_dim, full.num_kv_heads) == (16, 2)


def test_batched_requests_equal_each_alone(loaded, base):
    lengths = [1, 70, 9, 33, 16, 48]
    prompts = [base[:k] if i % 2 else [(t * 5 + i) % 317 + 3 for t in base[:k]] for i, k in enumerate(lengths)]
    eng = engine(loaded, enable_prefix_caching=False)
    outs = run(eng, prompts)
    alone = engine(loaded, max_num_seqs=1, enable_prefix_caching=False, prompt_cache_size=0)
    for i, (p, out) in enumerate(zip(prompts, outs)):
        assert out.finish_reason == "length", out.error
        [single] = run(alone, [p], prefix=f"alone{i}-")
        assert out.token_ids == single.token_ids, len(p)
        assert_same_rows(eng.runner.sampler.rows[f"r{i}"], alone.runner.sampler.rows[f"alone{i}-0"], atol=1e-4)
    assert eng.kv.num_used_blocks == 0


def test_prefix_hit_gives_the_logits_of_a_miss(loaded, base):
    ref = engine(loaded, enable_prefix_caching=False, prompt_cache_size=0)
    cached = engine(loaded, prompt_cache_size=0)
    first, second = base[:80], base[:60] + base[90:110]  # share 60 tokens: 7 blocks of 8, past 3 windows
    run(cached, [first], prefix="warm")
    [hit] = run(cached, [second], prefix="hit")
    [miss] = run(ref, [second], prefix="miss")
    assert hit.num_cached_tokens == 56 and miss.num_cached_tokens == 0
    assert hit.token_ids == miss.token_ids
    assert_same_rows(cached.runner.sampler.rows["hit0"], ref.runner.sampler.rows["miss0"])


def test_chunked_prefill_equals_one_pass(loaded, base):
    prompt = base[:110]
    whole = engine(loaded, enable_prefix_caching=False, prompt_cache_size=0)
    chunked = engine(loaded, enable_prefix_caching=False, prompt_cache_size=0, max_prefill_tokens=16,
                     prefill_chunk_size=13)
    [a] = run(whole, [prompt], prefix="whole")
    [b] = run(chunked, [prompt], prefix="chunked")
    assert a.token_ids == b.token_ids
    assert_same_rows(whole.runner.sampler.rows["whole0"], chunked.runner.sampler.rows["chunked0"], atol=1e-4)
