"""A tiny Qwen3.5 MoE through Anna's engine: batched equals alone, prefix-cache hit equals miss."""

from __future__ import annotations

import pytest
import torch

from tests.qwen35.conftest import load_anna
from tests.qwen35.engine_checks import GREEDY, check_prefix_hit_gives_the_logits_of_a_miss, engine, run


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
    check_prefix_hit_gives_the_logits_of_a_miss(loaded, base[:100], base[:75] + base[90:110])  # snapshot at 64
