"""The Triton ``moe_experts_wq`` (quantized routed experts, ``anna_xpu_kernels.moe_wq``) against the torch reference
under Triton's interpreter: the per-pair GEMV path (in-register dequantization) at batch 1..8, top-k 2 and 8, odd
shapes (FP8 partial blocks), and the grouped path on a dense scratch (prefill).

Bounds: float32 (kernel and reference both dequantize and accumulate in float32; only the summation order differs)
1e-5 of the largest value. The grouped path rounds the dequantized weights to x's dtype first: exact in float32;
in bfloat16 within the bfloat16 tolerance of the dense kernels' tests.
"""

import pytest
import torch

from tests.xpu_kernels._interp import require_triton_interpreter

require_triton_interpreter()

from anna_core.kernels.reference.moe_wq import moe_experts_wq as reference  # noqa: E402
from anna_core.testing.host_reads import NoHostReads  # noqa: E402
from anna_core.weights.gpu_quant import quantize_stacked  # noqa: E402

from tests.xpu_kernels._wq_cases import rel  # noqa: E402

TOL = 1e-5


def _inputs(t, e, k, hidden, inter, scheme, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    gate_up = quantize_stacked(torch.randn(e, 2 * inter, hidden, generator=gen) * hidden**-0.5 * 2, scheme, dtype)
    down = quantize_stacked(torch.randn(e, hidden, inter, generator=gen) * inter**-0.5, scheme, dtype)
    x = torch.randn(t, hidden, generator=gen).to(dtype)
    probs, ids = torch.topk(torch.randn(t, e, generator=gen).softmax(-1), k)
    weights = probs / probs.sum(-1, keepdim=True)
    return (x, gate_up.qweight, gate_up.scale, gate_up.zero, down.qweight, down.scale, down.zero, weights, ids)


CASES = [  # T, E, K, H, I, scheme, activation
    (1, 8, 2, 128, 128, "int4", "silu"),
    (1, 16, 8, 256, 128, "int4", "gelu_tanh"),  # top-8, two groups along H
    (3, 16, 2, 128, 256, "int8", "silu"),
    (1, 8, 2, 40, 24, "int8", "gelu_tanh"),  # odd shapes: partial tiles everywhere
    (2, 16, 8, 136, 72, "fp8", "silu"),  # FP8 partial scale blocks along both dims
    (8, 64, 8, 128, 128, "int4", "silu"),  # batch 8 decode (64 pairs = E)
    (5, 64, 2, 96, 40, "fp8", "gelu_tanh"),
]


@pytest.mark.parametrize("t, e, k, hidden, inter, scheme, activation", CASES)
def test_decode_path_matches_the_reference(poison_outputs, t, e, k, hidden, inter, scheme, activation):
    from anna_xpu_kernels import moe_wq

    args = _inputs(t, e, k, hidden, inter, scheme, seed=t + e + k)
    got = moe_wq.moe_experts_wq(*args, activation, scheme, path="decode")
    want = reference(*args, activation, scheme)
    assert got.shape == (t, hidden) and got.dtype == torch.float32
    assert rel(got, want) <= TOL


@pytest.mark.parametrize("scheme", ["int4", "int8", "fp8"])
def test_grouped_path_matches_the_reference(scheme):
    """Prefill: 12 tokens at top-2 of 4 experts (T * K > E: the auto path's grouped GEMMs on a dense scratch)."""
    from anna_xpu_kernels import moe_wq

    inter = 128 if scheme == "int4" else 48
    args = _inputs(12, 4, 2, 128, inter, scheme, seed=3)
    want = reference(*args, "silu", scheme)
    assert rel(moe_wq.moe_experts_wq(*args, "silu", scheme), want) <= TOL


def test_bfloat16_decode_within_rounding():
    from anna_xpu_kernels import moe_wq

    args = _inputs(2, 8, 2, 128, 128, "int4", dtype=torch.bfloat16, seed=9)
    got = moe_wq.moe_experts_wq(*args, "silu", "int4")
    want = reference(*args, "silu", "int4")
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), want.float(), atol=5e-2 * want.float().abs().max().item(), rtol=2e-2)


def test_no_host_reads_and_dispatch_through_the_registry(monkeypatch):
    from anna_core.kernels import KernelRegistry, bind_ops

    monkeypatch.setenv("ANNA_TRITON_INTERPRET", "1")  # the probes accept the CPU
    args = _inputs(2, 8, 2, 128, 128, "int8", seed=4)
    ops = bind_ops(KernelRegistry.from_plugins(), torch.device("cpu"), torch.float32)
    op = ops.get("moe_experts_wq", scheme="int8")
    with torch.inference_mode(), NoHostReads():
        got = op(*args, "silu", "int8")
    assert op.__module__ == "anna_xpu_kernels.moe_wq"
    assert rel(got, reference(*args, "silu", "int8")) <= TOL


def test_qwen35_moe_with_int8_experts_through_the_triton_op(tmp_path, monkeypatch):
    """A tiny Qwen3.5 MoE loaded with ``expert_quant="int8"``: the Triton op (every other op on its reference)
    gives the logits of the all-reference model, prefill (grouped) and single-token steps (per-pair GEMVs)."""
    from anna_core.kernels.registry import KernelRegistry
    from anna_core.model_dir import inspect_model_dir
    from anna_core.testing.runner import prefill_logits
    from anna_qwen35.loader import load
    from anna_qwen35.tiny import build_tiny_qwen35_moe
    from anna_xpu_kernels.plugin import TRITON_KERNELS

    path = build_tiny_qwen35_moe(tmp_path / "qwen", num_experts=8, top_k=2)
    prompt = [5, 17, 33, 101, 7, 250, 3, 64, 90, 12]

    def model(triton: bool):
        if triton:
            monkeypatch.setenv("ANNA_TRITON_INTERPRET", "1")
        else:
            monkeypatch.delenv("ANNA_TRITON_INTERPRET", raising=False)
        registry = KernelRegistry.from_plugins(disabled=[f"{op}:triton" for op in TRITON_KERNELS
                                                         if op != "moe_experts_wq"])
        return load(inspect_model_dir(path), device=torch.device("cpu"), dtype=torch.float32, kernels=registry,
                    expert_quant="int8").model

    want = prefill_logits(model(False), prompt)
    fast = model(True)
    got, steps = prefill_logits(fast, prompt), prefill_logits(fast, prompt[:2], chunk_size=1)
    assert fast.ops.registry.chosen()["moe_experts_wq"] == "triton"
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(steps, want[:2], atol=1e-4, rtol=1e-4)
