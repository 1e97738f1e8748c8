"""The engine's batching, prefix cache (with recurrent-state snapshots) and prompt cache on a tiny
hybrid Qwen3.5: cached runs give the logits and tokens of uncached ones."""

from __future__ import annotations

import pytest
import torch
from anna_core import LLM, SamplingParams

from .conftest import load_anna
from .engine_checks import check_prefix_hit_gives_the_logits_of_a_miss, engine, run


@pytest.fixture(scope="module")
def loaded(anna_tiny_qwen35):
    return load_anna(anna_tiny_qwen35)


@pytest.fixture(scope="module")
def base():
    gen = torch.Generator().manual_seed(99)
    return torch.randint(3, 320, (300,), generator=gen).tolist()


def test_sixteen_mixed_requests_at_once_equal_each_alone(loaded, base):
    lengths = [1, 300, 7, 150, 33, 64, 255, 2, 97, 180, 16, 290, 48, 129, 5, 222]
    prompts = [base[:k] if i % 4 else [(t * 7 + i) % 320 + 3 for t in base[:k]] for i, k in enumerate(lengths)]
    eng = engine(loaded)
    outs = run(eng, prompts)
    assert sum(o.num_cached_tokens for o in outs) > 0  # later admissions resumed from snapshots
    alone_eng = engine(loaded, max_num_seqs=1, enable_prefix_caching=False, prompt_cache_size=0)
    for i, (p, out) in enumerate(zip(prompts, outs)):
        assert out.finish_reason == "length", out.error
        [alone] = run(alone_eng, [p], prefix=f"alone{i}-")
        assert out.token_ids == alone.token_ids, (len(p), out.num_cached_tokens)
    assert eng.kv.num_used_blocks == 0 and eng.kv.slots.num_used_slots == 0


def test_prefix_hit_gives_the_logits_of_a_miss(loaded, base):
    check_prefix_hit_gives_the_logits_of_a_miss(loaded, base[:100], base[:75] + base[200:230])  # snapshot at 64


def test_a_prompt_whose_later_block_repeats_an_earlier_one(loaded, base):
    block = base[:16]
    prompt = block * 3 + base[16:40] + block  # block 0 equals blocks 1, 2 and 4
    cached = engine(loaded, prompt_cache_size=0)
    run(cached, [block * 2 + [5] * 20], prefix="warm")  # caches blocks "block" and "block, block"
    [out] = run(cached, [prompt])
    assert out.num_cached_tokens == 32  # blocks 0-1 match; snapshot at 32; blocks 2 and 4 computed
    ref = engine(loaded, enable_prefix_caching=False, prompt_cache_size=0)
    [want] = run(ref, [prompt], prefix="ref")
    assert out.token_ids == want.token_ids
    for a, b in zip(cached.runner.sampler.rows["r0"], ref.runner.sampler.rows["ref0"]):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


def test_prompt_cache_repeats_the_exact_logits(loaded, base):
    eng = engine(loaded, enable_prefix_caching=False, prompt_cache_size=2)
    prompt = base[:45]
    [a] = run(eng, [prompt], prefix="a")
    [b] = run(eng, [prompt], prefix="b")
    assert b.num_cached_tokens == 45 and a.token_ids == b.token_ids
    rows_a, rows_b = eng.runner.sampler.rows["a0"], eng.runner.sampler.rows["b0"]
    assert torch.equal(rows_a[0], rows_b[0])
    for x, y in zip(rows_a[1:], rows_b[1:]):
        torch.testing.assert_close(x, y, atol=1e-5, rtol=0)


def test_preemption_with_a_tiny_cache_and_prefix_caching_keeps_outputs(loaded, base):
    prompts = [base[:k] for k in (90, 60, 120, 30)]
    ref = engine(loaded, enable_prefix_caching=False, prompt_cache_size=0)
    want = [o.token_ids for o in run(ref, prompts, prefix="ref")]
    tight = engine(loaded, num_blocks=12, block_size=16, max_prefill_tokens=64)
    outs = run(tight, prompts)
    assert tight.scheduler.num_preemptions > 0
    assert [o.token_ids for o in outs] == want
    assert tight.kv.num_used_blocks == 0 and tight.kv.slots.num_used_slots == 0


def test_seeded_sampling_gives_the_same_text_alone_and_in_a_batch_of_eight(loaded):
    texts = ["Hello, world!", "The quick brown fox", "Anna", "a b c d e f", "Once upon a time",
             "1 2 3", "Serving many clients", "zzz"]
    params = [SamplingParams(temperature=1.0, top_p=0.95, seed=1000 + i, max_tokens=10, ignore_eos=True)
              for i in range(len(texts))]
    batch = LLM.from_loaded(loaded, block_size=16, num_blocks=64, max_num_seqs=8).generate(texts, params)
    alone = LLM.from_loaded(loaded, block_size=16, num_blocks=64, max_num_seqs=1)
    for i in (0, 5):
        [single] = alone.generate(texts[i], params[i])
        assert single.text == batch[i].text and single.token_ids == batch[i].token_ids
    assert len({o.text for o in batch}) > 1
