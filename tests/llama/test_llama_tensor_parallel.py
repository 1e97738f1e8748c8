"""Tensor parallelism of the Llama family on the CPU: 2 ranks over gloo (q/k/v and gate/up by heads and units,
o_proj / down_proj row-parallel with their biases added once, vocabulary-parallel embedding and LM head) give the
greedy tokens and float32 logprobs of one rank, batched and single, with prefix caching. One worker spawn for the
module."""

from __future__ import annotations

import pytest
from anna_core.testing.tensor_parallel import TensorParallelSuite

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def _sharpen(path) -> None:
    """Scale the tiny checkpoint's matrices up (HF's 0.02 init gives nearly flat logits, one token forever), so the
    greedy continuations differ per prompt and a wrong shard shows."""
    from safetensors.torch import load_file, save_file

    file = path / "model.safetensors"
    tensors = {k: (v * 12 if v.dim() == 2 else v) for k, v in load_file(str(file)).items()}
    save_file(tensors, str(file), metadata={"format": "pt"})


class TestLlamaTensorParallel(TensorParallelSuite):
    batch_prompts = (list(range(3, 30)), [10, 11, 12], [8] * 9)
    single_prompt = [40, 41, 42, 43]
    prefix = list(range(100, 140))

    def build_checkpoint(self, path):
        from anna_llama.tiny import build_tiny_checkpoint

        path = build_tiny_checkpoint(path, attention_bias=True, seed=3)
        _sharpen(path)
        return path

    def test_shards(self, tp_pair):
        ref, tp = tp_pair
        attn, full = tp.loaded.model.model.layers[0].self_attn, ref.loaded.model.model.layers[0].self_attn
        assert attn.qkv_proj.weight.shape[0] * 2 == full.qkv_proj.weight.shape[0]
        assert attn.o_proj.weight.shape[1] * 2 == full.o_proj.weight.shape[1]
        assert tp.engine.cache_spec.groups[0].num_kv_heads == 1
