"""Reference add_rms_norm, silu_and_mul and sigmoid_mul against plain torch formulas."""

import pytest
import torch
from anna_core.kernels.reference.activations import sigmoid_mul, silu_and_mul
from anna_core.kernels.reference.norms import add_rms_norm, rms_norm


def _rms(x, w, eps):
    x = x.double()
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w.double()


@pytest.mark.parametrize("zero_centered", [False, True])
def test_add_rms_norm_is_the_sum_then_the_norm(zero_centered):
    gen = torch.Generator().manual_seed(0)
    x, residual = torch.randn(4, 24, generator=gen), torch.randn(4, 24, generator=gen) * 3
    w = torch.randn(24, generator=gen)
    x_before, r_before = x.clone(), residual.clone()
    y, r = add_rms_norm(x, residual, w, 1e-6, zero_centered)
    assert torch.equal(r, x + residual)
    torch.testing.assert_close(y.double(), _rms(x + residual, (1 + w) if zero_centered else w, 1e-6),
                               atol=1e-5, rtol=1e-5)
    assert torch.equal(x, x_before) and torch.equal(residual, r_before)


def test_add_rms_norm_bfloat16_normalises_the_rounded_sum():
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(3, 32, generator=gen).bfloat16()
    residual = (torch.randn(3, 32, generator=gen) * 100).bfloat16()
    w = torch.randn(32, generator=gen)
    y, r = add_rms_norm(x, residual, w, 1e-6, True)
    assert r.dtype == y.dtype == torch.bfloat16 and torch.equal(r, x + residual)
    # the norm sees the bfloat16 sum (float32 math inside, one rounding at the end)
    assert torch.equal(y, rms_norm(x + residual, w, 1e-6, True))
    torch.testing.assert_close(y.double(), _rms(r, 1 + w, 1e-6), atol=1e-2, rtol=2**-7)


def test_add_rms_norm_without_residual_and_errors():
    x, w = torch.randn(2, 8), torch.randn(8)
    y, r = add_rms_norm(x, None, w, 1e-6, False)
    assert r is x
    torch.testing.assert_close(y.double(), _rms(x, w, 1e-6), atol=1e-6, rtol=1e-5)
    with pytest.raises(ValueError, match="add_rms_norm: residual must match"):
        add_rms_norm(x, torch.randn(3, 8), w, 1e-6, False)
    with pytest.raises(ValueError, match="add_rms_norm: residual must have x's dtype"):
        add_rms_norm(x, x.bfloat16(), w, 1e-6, False)
    with pytest.raises(ValueError, match="add_rms_norm: weight must be"):
        add_rms_norm(x, x, torch.randn(7), 1e-6, False)


def test_silu_and_mul_is_silu_of_the_first_half_times_the_second():
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(5, 2, 2 * 12, generator=gen, dtype=torch.float64) * 4
    gate, up = x[..., :12], x[..., 12:]
    y = silu_and_mul(x)
    assert y.shape == (5, 2, 12)
    torch.testing.assert_close(y, gate / (1 + torch.exp(-gate)) * up, atol=1e-12, rtol=1e-12)
    xb = x.bfloat16()  # in bfloat16: silu rounded, then the product rounded, as eager torch (and HF) do
    silu_b = (xb[..., :12].float() / (1 + torch.exp(-xb[..., :12].float()))).bfloat16()
    assert torch.equal(silu_and_mul(xb), (silu_b.float() * xb[..., 12:].float()).bfloat16())
    with pytest.raises(ValueError, match="silu_and_mul: x must be"):
        silu_and_mul(torch.randn(3, 5))


def test_sigmoid_mul_is_x_times_the_logistic_of_the_gate():
    gen = torch.Generator().manual_seed(3)
    q_gate = torch.randn(4, 3, 16, generator=gen, dtype=torch.float64) * 4
    x, gate = torch.randn(4, 3, 8, generator=gen, dtype=torch.float64), q_gate[..., 8:]
    torch.testing.assert_close(sigmoid_mul(x, gate), x / (1 + torch.exp(-gate)), atol=1e-12, rtol=1e-12)
    xb, gb = x.bfloat16(), gate.bfloat16()
    sig_b = (1 / (1 + torch.exp(-gb.float()))).bfloat16()
    assert torch.equal(sigmoid_mul(xb, gb), (xb.float() * sig_b.float()).bfloat16())
    with pytest.raises(ValueError, match="sigmoid_mul: gate must match"):
        sigmoid_mul(x, q_gate)
    with pytest.raises(ValueError, match="sigmoid_mul: gate must have x's dtype"):
        sigmoid_mul(x, gate.float())
