"""Tensor parallelism of Gemma 4 on the CPU: the 26B-A4B shape (sliding and global layers with their own head dims
and KV heads, K = V global layers, the MoE block beside the MLP, soft-capped logits over a tied vocabulary) over 2
ranks (gloo) gives one rank's greedy tokens and float32 logprobs, batched and single, with prefix caching. One worker
spawn for the module."""

from __future__ import annotations

import pytest
import torch
from anna_core import LLM, SamplingParams
from anna_core.testing.tensor_parallel import assert_same_generation

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

OPTIONS = dict(device="cpu", dtype="fp32", num_blocks=64, enable_prefix_caching=True)
GREEDY = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True, logprobs=3)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    from anna_gemma4.tiny import build_tiny_gemma4

    # 2 KV heads in the global layers too (the tiny default has 1, which 2 ranks cannot split)
    path = build_tiny_gemma4(tmp_path_factory.mktemp("g4tp"), variant="moe", num_global_key_value_heads=2)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    ref = LLM(path, **OPTIONS)
    tp = LLM(path, tensor_parallel_size=2, **OPTIONS)
    yield ref, tp
    tp.close()
    torch.set_num_threads(threads)


def test_shards(pair):
    ref, tp = pair
    assert [g.num_kv_heads * 2 for g in tp.engine.cache_spec.groups] == [g.num_kv_heads
                                                                         for g in ref.engine.cache_spec.groups]
    layer = tp.loaded.model.model.layers[0]
    assert layer.experts.down_proj.shape[2] * 2 == ref.loaded.model.model.layers[0].experts.down_proj.shape[2]


def test_batched_and_single_greedy_equal_one_rank(pair):
    ref, tp = pair
    tokens = assert_same_generation(ref, tp, [list(range(3, 40)), [10, 11, 12], [8] * 9], GREEDY)
    assert len({tuple(t) for t in tokens}) == 3
    assert_same_generation(ref, tp, [[40, 41, 42, 43]], GREEDY)


def test_prefix_cache_equals_one_rank(pair):
    ref, tp = pair
    prefix = list(range(100, 140))  # past the 16-token sliding window
    assert_same_generation(ref, tp, [prefix + [3]], GREEDY)
    assert_same_generation(ref, tp, [prefix + [4, 5]], GREEDY)
    assert tp.engine.stats()["prefix_cache_hit_rate"] > 0
