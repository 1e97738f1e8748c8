"""Tensor parallelism of the hybrid Qwen3.5 (gated DeltaNet + gated attention) on the CPU: 2 ranks over gloo give
the greedy tokens (and float32 logprobs within reduction-order tolerance) of one rank, batched and single, with
prefix caching (recurrent-state snapshots restored per rank). One worker spawn for the module."""

from __future__ import annotations

import pytest
from anna_core.testing.tensor_parallel import TensorParallelSuite

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


class TestQwen35TensorParallel(TensorParallelSuite):
    """One tiny dense Qwen3.5."""

    batch_prompts = (list(range(3, 40)), [10, 11, 12], [7] * 20 + [9, 8])
    single_prompt = [5, 6, 7, 8, 9, 10]
    prefix = list(range(50, 90))  # 40 tokens: snapshots at 16 and 32
    prefix_tails = ([3, 4], [5, 6, 7])
    options = TensorParallelSuite.options | {"snapshot_interval": 16}

    def build_checkpoint(self, path):
        from anna_qwen35.tiny import build_tiny_checkpoint

        return build_tiny_checkpoint(path, variant="dense")

    def test_each_rank_holds_half_the_heads(self, tp_pair):
        ref, tp = tp_pair
        assert tp.engine.stats()["tensor_parallel_size"] == 2
        full, half = ref.engine.cache_spec, tp.engine.cache_spec
        assert half.groups[0].num_kv_heads * 2 == full.groups[0].num_kv_heads
        assert half.recurrent.state_shape[0] * 2 == full.recurrent.state_shape[0]  # value heads of the DeltaNet state
        layer = tp.loaded.model.model.layers[0].linear_attn
        assert layer.out_proj.weight.shape[1] * 2 == ref.loaded.model.model.layers[0].linear_attn.out_proj.weight.shape[1]
