"""A tiny Qwen3.5 MoE through Anna's engine: batched equals alone, prefix-cache hit equals miss."""

from __future__ import annotations

import pytest
import torch
from anna_core import SamplingParams

from tests.qwen35.conftest import load_anna
from tests.qwen35.test_qwen35_prefix_cache import engine, run

N = 4
GREEDY = SamplingParams(temperature=0.0, max_tokens=N, ignore_eos=True)


@pytest.fixture(scope="module")
def loaded(tiny_moe_factory):
    return load_anna(tiny_moe_factory(num_experts=16, top_k=4))


@pytest.fixture(scope="module")
def base():
    gen = torch.Generator().manual_seed(7)
    return torch.randint(3, 320, (120,), generator=gen).tolist()


def test_batched_requests_equal_each_alone(loaded, base):
    lengths = [1, 120, 7, 60, 33, 2, 97, 16]
    prompts = [base[:k] if i % 2 else [(t * 5 + i) % 317 + 3 for t in base[:k]] for i, k in enumerate(lengths)]
    outs = run(engine(loaded), prompts, GREEDY)
    alone_eng = engine(loaded, max_num_seqs=1, enable_prefix_caching=False, prompt_cache_size=0)
    for i, (p, out) in enumerate(zip(prompts, outs)):
        assert out.finish_reason == "length", out.error
        [alone] = run(alone_eng, [p], GREEDY, prefix=f"alone{i}-")
        assert out.token_ids == alone.token_ids, len(p)
    assert len({tuple(o.token_ids) for o in outs}) > 2


def test_prefix_hit_gives_the_logits_of_a_miss(loaded, base):
    ref = engine(loaded, enable_prefix_caching=False, prompt_cache_size=0)
    cached = engine(loaded, prompt_cache_size=0)
    first, second = base[:100], base[:75] + base[90:110]  # share 75 tokens: snapshot at 64
    run(cached, [first], GREEDY, prefix="warm")
    [hit] = run(cached, [second], GREEDY, prefix="hit")
    [miss] = run(ref, [second], GREEDY, prefix="miss")
    assert hit.num_cached_tokens == 64 and miss.num_cached_tokens == 0
    assert hit.token_ids == miss.token_ids
    hit_rows, miss_rows = cached.runner.sampler.rows["hit0"], ref.runner.sampler.rows["miss0"]
    assert len(hit_rows) == len(miss_rows) == N
    for a, b in zip(hit_rows, miss_rows):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
