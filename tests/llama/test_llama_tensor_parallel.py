"""Tensor parallelism of the Llama family on the CPU: 2 ranks over gloo (q/k/v and gate/up by heads and units,
o_proj / down_proj row-parallel with their biases added once, vocabulary-parallel embedding and LM head) give the
greedy tokens and float32 logprobs of one rank, batched and single, with prefix caching. One worker spawn for the
module."""

from __future__ import annotations

import pytest
import torch
from anna_core import LLM, SamplingParams
from anna_core.testing.tensor_parallel import assert_same_generation

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

OPTIONS = dict(device="cpu", dtype="fp32", num_blocks=64, enable_prefix_caching=True)
GREEDY = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True, logprobs=3)


def _sharpen(path) -> None:
    """Scale the tiny checkpoint's matrices up (HF's 0.02 init gives nearly flat logits, one token forever), so the
    greedy continuations differ per prompt and a wrong shard shows."""
    from safetensors.torch import load_file, save_file

    file = path / "model.safetensors"
    tensors = {k: (v * 12 if v.dim() == 2 else v) for k, v in load_file(str(file)).items()}
    save_file(tensors, str(file), metadata={"format": "pt"})


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    from anna_llama.tiny import build_tiny_checkpoint

    path = build_tiny_checkpoint(tmp_path_factory.mktemp("llamatp"), attention_bias=True, seed=3)
    _sharpen(path)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    ref = LLM(path, **OPTIONS)
    tp = LLM(path, tensor_parallel_size=2, **OPTIONS)
    yield ref, tp
    tp.close()
    torch.set_num_threads(threads)


def test_shards(pair):
    ref, tp = pair
    attn, full = tp.loaded.model.model.layers[0].self_attn, ref.loaded.model.model.layers[0].self_attn
    assert attn.qkv_proj.weight.shape[0] * 2 == full.qkv_proj.weight.shape[0]
    assert attn.o_proj.weight.shape[1] * 2 == full.o_proj.weight.shape[1]
    assert tp.engine.cache_spec.groups[0].num_kv_heads == 1


def test_batched_and_single_greedy_equal_one_rank(pair):
    ref, tp = pair
    tokens = assert_same_generation(ref, tp, [list(range(3, 30)), [10, 11, 12], [8] * 9], GREEDY)
    assert len({tuple(t) for t in tokens}) == 3
    assert_same_generation(ref, tp, [[40, 41, 42, 43]], GREEDY)


def test_prefix_cache_equals_one_rank(pair):
    ref, tp = pair
    prefix = list(range(100, 140))
    assert_same_generation(ref, tp, [prefix + [3]], GREEDY)
    assert_same_generation(ref, tp, [prefix + [4, 5]], GREEDY)
    assert tp.engine.stats()["prefix_cache_hit_rate"] > 0
