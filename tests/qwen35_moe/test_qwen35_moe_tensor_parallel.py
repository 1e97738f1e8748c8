"""Tensor parallelism of a Qwen3.5 MoE on the CPU: every expert's and the shared expert's intermediate units split
over 2 ranks (gloo; the checkpoint's fused ``[E, 2I, H]`` expert layout read as slices, a tied vocabulary), one
all-reduce per MoE block; the greedy tokens and float32 logprobs match one rank's. One worker spawn for the
module."""

from __future__ import annotations

import pytest
from anna_core.testing.tensor_parallel import TensorParallelSuite

from tests.qwen35_moe.conftest import MOE_INTERMEDIATE, build_tiny_qwen35_moe

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


class TestQwen35MoeTensorParallel(TensorParallelSuite):
    batch_prompts = (list(range(3, 30)), [10, 11, 12], [8] * 9)
    single_prompt = [40, 41, 42, 43]
    prefix = list(range(60, 100))
    options = TensorParallelSuite.options | {"snapshot_interval": 16}

    def build_checkpoint(self, path):
        return build_tiny_qwen35_moe(path, fused=True, tie=True)

    def test_experts_split_by_intermediate_units(self, tp_pair):
        _, tp = tp_pair
        experts = tp.loaded.model.model.layers[0].mlp.experts
        assert experts.gate_up_proj.shape[1] == MOE_INTERMEDIATE  # gate and up halves: I/2 each
        assert experts.down_proj.shape[2] == MOE_INTERMEDIATE // 2
