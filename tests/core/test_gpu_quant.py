"""The accelerator weight layouts (:mod:`anna_core.weights.gpu_quant`): round-to-nearest quantization errors at
their stated bounds, exact packing, and the ``wq_linear`` references against a float64 product."""

from __future__ import annotations

import pytest
import torch
from anna_core.kernels.reference.wq_linear import add_rms_norm_wq_linear, wq_linear
from anna_core.weights.gpu_quant import INT4_GROUP, dequantize, quantize, quantized_bytes


def _w(n=48, k=384, seed=0):
    return torch.randn(n, k, generator=torch.Generator().manual_seed(seed)) * 0.05


def test_int4_error_is_at_most_half_a_step_plus_the_zero_rounding():
    w = _w()
    q = quantize(w, "int4", torch.bfloat16)
    assert q.qweight.shape == (48, 192) and q.qweight.dtype == torch.uint8
    assert q.scale.shape == q.zero.shape == (48, 3) and q.scale.dtype == torch.bfloat16
    err = (dequantize(q.qweight, q.scale, q.zero, "int4") - w).abs().view(48, 3, INT4_GROUP).amax(-1)
    # codes chosen against the stored (rounded) scale and zero: half a step, plus the clamp at code 15 where the
    # rounded scale shrank the range (at most 15 * 2**-9 relative of a step)
    assert (err <= q.scale.float() * (0.5 + 15 * 2**-8)).all()
    # packing: column 2j in the low nibble
    codes = torch.round((w[:, :2] - q.zero[:, :1].float()) / q.scale[:, :1].float()).clamp(0, 15)
    assert torch.equal((q.qweight[:, 0] & 15).float(), codes[:, 0]) and torch.equal((q.qweight[:, 0] >> 4).float(),
                                                                                       codes[:, 1])


def test_int8_error_is_at_most_half_a_step():
    w = _w()
    q = quantize(w, "int8")
    assert q.qweight.dtype == torch.int8 and q.scale.shape == (48,) and q.zero is None
    err = (dequantize(q.qweight, q.scale, None, "int8") - w).abs()
    assert (err <= q.scale[:, None] * 0.5 + 1e-9).all()


def test_fp8_error_is_within_e4m3_rounding_per_128_block():
    w = _w(200, 300)  # partial blocks in both directions
    q = quantize(w, "fp8")
    assert q.qweight.dtype == torch.float8_e4m3fn and q.scale.shape == (2, 3)
    back = dequantize(q.qweight, q.scale, None, "fp8")
    s = q.scale.repeat_interleave(128, 0)[:200].repeat_interleave(128, 1)[:, :300]
    # relative 2**-4 (3 mantissa bits, half an ulp) above the normal range, 2**-10 * scale (half the subnormal step)
    assert ((back - w).abs() <= torch.maximum(w.abs() * 2**-4, s * 2**-10) + 1e-12).all()


def test_quantized_bytes():
    assert quantized_bytes(4096, 4096, "int4") == 4096 * 2048 + 2 * 4096 * 32 * 2
    assert quantized_bytes(4096, 4096, "int8") == 4096 * 4096 + 4 * 4096
    assert quantized_bytes(4096, 4096, "fp8") == 4096 * 4096 + 4 * 32 * 32
    assert quantize(_w(), "int4").nbytes == quantized_bytes(48, 384, "int4")


def test_int4_refuses_rows_not_in_whole_groups():
    with pytest.raises(ValueError, match="multiple of 128"):
        quantize(_w(8, 96), "int4")


@pytest.mark.parametrize("scheme", ["int4", "int8", "fp8"])
def test_references_equal_the_float64_product_of_the_dequantized_weight(scheme):
    w = _w(64, 256)
    q = quantize(w, scheme, torch.float32)
    x = torch.randn(3, 256, generator=torch.Generator().manual_seed(1))
    dense = dequantize(q.qweight, q.scale, q.zero, scheme).double()
    bias = torch.randn(64)
    y = wq_linear(x, q.qweight, q.scale, q.zero, scheme, bias)
    expected = x.double() @ dense.T + bias.double()
    assert (y.double() - expected).abs().max() <= 1e-5 * expected.abs().max()
    # the fused norm + gated product: the unfused composition
    res = torch.randn(3, 256)
    nw = torch.randn(256) * 0.1
    y2, r2 = add_rms_norm_wq_linear(x, res, nw, 1e-6, True, q.qweight, q.scale, q.zero, scheme, "silu")
    h = (x + res) * torch.rsqrt((x + res).pow(2).mean(-1, keepdim=True) + 1e-6) * (1 + nw)
    g, u = (h.double() @ dense.T).float().chunk(2, dim=-1)
    assert torch.equal(r2, x + res)
    assert (y2 - torch.nn.functional.silu(g) * u).abs().max() <= 1e-5 * y2.abs().max()
