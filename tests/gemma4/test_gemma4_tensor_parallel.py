"""Tensor parallelism of Gemma 4 on the CPU: the 26B-A4B shape (sliding and global layers with their own head dims
and KV heads, K = V global layers, the MoE block beside the MLP, soft-capped logits over a tied vocabulary) over 2
ranks (gloo) gives one rank's greedy tokens and float32 logprobs, batched and single, with prefix caching. One worker
spawn for the module."""

from __future__ import annotations

import pytest
from anna_core.testing.tensor_parallel import TensorParallelSuite

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


class TestGemma4TensorParallel(TensorParallelSuite):
    batch_prompts = (list(range(3, 40)), [10, 11, 12], [8] * 9)
    single_prompt = [40, 41, 42, 43]
    prefix = list(range(100, 140))  # past the 16-token sliding window

    def build_checkpoint(self, path):
        from anna_gemma4.tiny import build_tiny_gemma4

        # 2 KV heads in the global layers too (the tiny default has 1, which 2 ranks cannot split)
        return build_tiny_gemma4(path, variant="moe", num_global_key_value_heads=2)

    def test_shards(self, tp_pair):
        ref, tp = tp_pair
        assert [g.num_kv_heads * 2 for g in tp.engine.cache_spec.groups] == [g.num_kv_heads
                                                                             for g in ref.engine.cache_spec.groups]
        # a rank's LM head is a vocabulary shard: neither top-k candidates nor greedy ids come from it alone
        assert ref.loaded.model.capabilities.greedy_head and ref.loaded.model.capabilities.topk_head
        assert not tp.loaded.model.capabilities.greedy_head and not tp.loaded.model.capabilities.topk_head
        layer = tp.loaded.model.model.layers[0]
        assert layer.experts.down_proj.shape[2] * 2 == ref.loaded.model.model.layers[0].experts.down_proj.shape[2]
