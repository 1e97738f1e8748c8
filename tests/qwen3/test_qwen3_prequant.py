"""Pre-quantized Qwen3 checkpoints (issue 29; the loading is anna-core's, shared with Qwen3.5): FP8 block scales
on every projection, q/k/v with biases (the biases stay dense and load onto the quantized layers), and GPTQ on
the projections whose input width fits int4 groups of 128. The oracle is the checkpoint with the dequantized
weights (:mod:`anna_core.testing.prequant_checkpoints`)."""

from __future__ import annotations

import pytest
import torch
from anna_core.kernels.registry import KernelRegistry
from anna_core.layers.wq_linear import WQLinear
from anna_core.model_dir import inspect_model_dir
from anna_core.testing.prequant_checkpoints import CASES, build_prequant
from anna_core.testing.runner import prefill_logits, simple_greedy
from anna_qwen35.qwen3.tiny import build_tiny_checkpoint

from tests.qwen3.conftest import rel_err

PROMPT = [5, 17, 99, 3, 250, 42, 7, 7, 130, 64, 11, 200]


def _load(path):
    from anna_qwen35.qwen3.loader import load

    return load(inspect_model_dir(path), device=torch.device("cpu"), dtype=torch.float32,
                kernels=KernelRegistry.from_plugins(), layout_cache=False)


@pytest.mark.parametrize("case", ["fp8", "gptq-v1-asym"])
def test_qwen3_prequantized_equals_dequantized_oracle(tmp_path, case):
    src = build_tiny_checkpoint(tmp_path / "src", attention_bias=True, seed=3)
    qc, build = CASES[case]
    quant_dir, dense_dir, prefixes = build_prequant(src, tmp_path, qc, **build)
    assert prefixes
    model, oracle = _load(quant_dir).model, _load(dense_dir).model
    o_proj = [m.self_attn.o_proj for m in model.model.layers]
    assert all(isinstance(m, WQLinear) and m.bias is not None for m in o_proj)  # quantized, with its dense bias
    assert rel_err(prefill_logits(model, PROMPT), prefill_logits(oracle, PROMPT)) < 1e-4
    assert simple_greedy(model, PROMPT, 12) == simple_greedy(oracle, PROMPT, 12)
