"""Tensor parallelism of the hybrid Qwen3.5 (gated DeltaNet + gated attention) on the CPU: 2 ranks over gloo give
the greedy tokens (and float32 logprobs within reduction-order tolerance) of one rank, batched and single, with
prefix caching (recurrent-state snapshots restored per rank). One worker spawn for the module."""

from __future__ import annotations

import pytest
import torch
from anna_core import LLM, SamplingParams
from anna_core.testing.tensor_parallel import assert_same_generation

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

OPTIONS = dict(device="cpu", dtype="fp32", num_blocks=64, enable_prefix_caching=True, snapshot_interval=16)
GREEDY = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True, logprobs=3)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """``(one rank, two ranks)`` LLMs over one tiny dense Qwen3.5 (one thread per rank)."""
    from anna_qwen35.tiny import build_tiny_checkpoint

    path = build_tiny_checkpoint(tmp_path_factory.mktemp("q35tp"), variant="dense")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    ref = LLM(path, **OPTIONS)
    tp = LLM(path, tensor_parallel_size=2, **OPTIONS)
    yield ref, tp
    tp.close()
    torch.set_num_threads(threads)


def test_each_rank_holds_half_the_heads(pair):
    ref, tp = pair
    assert tp.engine.stats()["tensor_parallel_size"] == 2
    full, half = ref.engine.cache_spec, tp.engine.cache_spec
    assert half.groups[0].num_kv_heads * 2 == full.groups[0].num_kv_heads
    assert half.recurrent.state_shape[0] * 2 == full.recurrent.state_shape[0]  # value heads of the DeltaNet state
    layer = tp.loaded.model.model.layers[0].linear_attn
    assert layer.out_proj.weight.shape[1] * 2 == ref.loaded.model.model.layers[0].linear_attn.out_proj.weight.shape[1]


def test_batched_greedy_equals_one_rank(pair):
    ref, tp = pair
    prompts = [list(range(3, 40)), [10, 11, 12], [7] * 20 + [9, 8]]
    tokens = assert_same_generation(ref, tp, prompts, GREEDY)
    assert len({tuple(t) for t in tokens}) == 3  # the prompts' continuations differ: a real comparison


def test_single_prompt_equals_one_rank(pair):
    ref, tp = pair
    assert_same_generation(ref, tp, [[5, 6, 7, 8, 9, 10]], GREEDY)


def test_prefix_cache_hits_on_every_rank(pair):
    ref, tp = pair
    prefix = list(range(50, 90))  # 40 tokens: snapshots at 16 and 32
    assert_same_generation(ref, tp, [prefix + [3, 4]], GREEDY)
    assert len(tp.engine.scheduler.snapshots) > 0
    assert_same_generation(ref, tp, [prefix + [5, 6, 7]], GREEDY)  # resumes from a restored snapshot
    assert tp.engine.stats()["prefix_cache_hit_rate"] > 0
