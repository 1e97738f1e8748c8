"""The quantized-weight GEMV (``anna_xpu_kernels.wq_gemv``) against the float32 references, under Triton's
interpreter: rows past the norm prologue's width, the prefill fallback, outputs every program writes, and a tiny
Qwen3.5 quantized at load whose logits through the Triton ops equal those through the references.

Bounds: float32 (kernel and reference both dequantize and accumulate in float32; only the summation order
differs) 1e-5 of the largest value; measured up to 5e-7.
"""

import pytest
import torch

from tests.xpu_kernels._interp import require_triton_interpreter

require_triton_interpreter()

from anna_core.kernels.reference import wq_linear as ref  # noqa: E402

from tests.xpu_kernels._wq_cases import quantized_weight, rel  # noqa: E402

TOL = 1e-5


def _weight(n, k, scheme, seed=0):
    return (*quantized_weight(n, k, scheme, seed), scheme)


@pytest.mark.parametrize("scheme", ["int4", "int8", "fp8"])
def test_wide_rows_run_the_norm_apart_and_keep_the_gated_epilogue(scheme, poison_outputs):
    from anna_xpu_kernels import wq_gemv

    k = wq_gemv.NORM_PROLOGUE_MAX_K + 256  # 18 int4 groups: past the fused norm's width
    gen = torch.Generator().manual_seed(1)
    x, res, nw = torch.randn(1, k, generator=gen), torch.randn(1, k, generator=gen), torch.randn(k, generator=gen)
    w = _weight(40, k, scheme)
    got = wq_gemv.add_rms_norm_wq_linear(x, res, nw, 1e-6, True, *w, "silu")
    want = ref.add_rms_norm_wq_linear(x, res, nw, 1e-6, True, *w, "silu")
    assert got[0].shape == (1, 20) and rel(got[0], want[0]) <= TOL and torch.equal(got[1], want[1])


@pytest.mark.parametrize("rows", [5, 12, 70])  # CUDA cores, tensor cores, dequantize + F.linear
def test_rows_of_each_path(rows, poison_outputs):
    from anna_xpu_kernels import wq_gemv

    x = torch.randn(rows, 256, generator=torch.Generator().manual_seed(rows))
    bias = torch.randn(36)
    for scheme in ("int4", "int8", "fp8"):
        w = _weight(36, 256, scheme, seed=rows)
        got = wq_gemv.wq_linear(x, *w, bias)
        assert got.shape == (rows, 36) and rel(got, ref.wq_linear(x, *w, bias)) <= TOL, scheme


def test_tiny_qwen35_quantized_through_triton_equals_the_references(tmp_path, monkeypatch):
    from anna_core.loading import load_model
    from anna_core.testing.checkpoints import build_tiny_qwen35
    from anna_core.testing.runner import prefill_logits

    path = build_tiny_qwen35(tmp_path / "q", hidden_size=128, tie=False, num_layers=2)
    prompt = torch.randint(3, 300, (9,), generator=torch.Generator().manual_seed(3)).tolist()
    monkeypatch.delenv("ANNA_TRITON_INTERPRET", raising=False)
    want = prefill_logits(load_model(path, device="cpu", dtype="fp32", weight_quant="int4").model, prompt)
    monkeypatch.setenv("ANNA_TRITON_INTERPRET", "1")
    loaded = load_model(path, device="cpu", dtype="fp32", weight_quant="int4")
    got = prefill_logits(loaded.model, prompt[:1])  # one row: the decode GEMV
    assert rel(got, want[:1]) <= TOL
    got = prefill_logits(loaded.model, prompt)
    assert rel(got, want) <= TOL
    chosen = loaded.model.ops.registry.chosen()
    assert chosen["wq_linear"] == chosen["add_rms_norm_wq_linear"] == "triton"
