"""Tensor parallelism of a Qwen3.5 MoE on the CPU: every expert's and the shared expert's intermediate units split
over 2 ranks (gloo; the checkpoint's fused ``[E, 2I, H]`` expert layout read as slices, a tied vocabulary), one
all-reduce per MoE block; the greedy tokens and float32 logprobs match one rank's. One worker spawn for the
module."""

from __future__ import annotations

import pytest
import torch
from anna_core import LLM, SamplingParams
from anna_core.testing.tensor_parallel import assert_same_generation

from tests.qwen35_moe.conftest import MOE_INTERMEDIATE, build_tiny_qwen35_moe

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

OPTIONS = dict(device="cpu", dtype="fp32", num_blocks=64, enable_prefix_caching=True, snapshot_interval=16)
GREEDY = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True, logprobs=3)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    path = build_tiny_qwen35_moe(tmp_path_factory.mktemp("q35moetp"), fused=True, tie=True)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    ref = LLM(path, **OPTIONS)
    tp = LLM(path, tensor_parallel_size=2, **OPTIONS)
    yield ref, tp
    tp.close()
    torch.set_num_threads(threads)


def test_experts_split_by_intermediate_units(pair):
    _, tp = pair
    experts = tp.loaded.model.model.layers[0].mlp.experts
    assert experts.gate_up_proj.shape[1] == MOE_INTERMEDIATE  # gate and up halves: I/2 each
    assert experts.down_proj.shape[2] == MOE_INTERMEDIATE // 2


def test_batched_and_single_greedy_equal_one_rank(pair):
    ref, tp = pair
    tokens = assert_same_generation(ref, tp, [list(range(3, 30)), [10, 11, 12], [8] * 9], GREEDY)
    assert len({tuple(t) for t in tokens}) == 3
    assert_same_generation(ref, tp, [[40, 41, 42, 43]], GREEDY)


def test_prefix_cache_resume_equals_one_rank(pair):
    ref, tp = pair
    prefix = list(range(60, 100))
    assert_same_generation(ref, tp, [prefix + [3]], GREEDY)
    assert_same_generation(ref, tp, [prefix + [4, 5]], GREEDY)
    assert tp.engine.stats()["prefix_cache_hit_rate"] > 0
