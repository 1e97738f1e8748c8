"""Reference add_rms_norm_linear, act_mul_linear, linear_act_mul, add_rms_norm_linear_act_mul and
post_norm_residual_linear: bit-identical
to the unfused references they compose."""

import pytest
import torch
import torch.nn.functional as F
from anna_core.kernels import KernelRegistry, bind_ops
from anna_core.kernels.ops import CORE_OPS
from anna_core.kernels.reference import fused_linear as fl
from anna_core.kernels.reference.activations import silu_and_mul
from anna_core.kernels.reference.fused_linear import (
    act_mul_linear,
    add_rms_norm_linear,
    add_rms_norm_linear_act_mul,
    linear_act_mul,
)
from anna_core.kernels.reference.norms import add_rms_norm


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("zero_centered", [False, True])
def test_add_rms_norm_linear_is_the_unfused_path(dtype, zero_centered):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(3, 24, generator=gen).to(dtype)
    residual = (torch.randn(3, 24, generator=gen) * 4).to(dtype)
    nw, w = torch.randn(24, generator=gen).to(dtype), torch.randn(10, 24, generator=gen).to(dtype)
    before = [t.clone() for t in (x, residual, nw, w)]
    y, r = add_rms_norm_linear(x, residual, nw, 1e-6, zero_centered, w)
    h, want_r = add_rms_norm(x, residual, nw, 1e-6, zero_centered)
    assert torch.equal(r, x + residual) and torch.equal(r, want_r)
    assert y.dtype == dtype and torch.equal(y, h @ w.t())
    # the norm output is rounded to the activation dtype before the product
    hf = (r.float() * torch.rsqrt(r.float().pow(2).mean(-1, keepdim=True) + 1e-6)
          * ((1 + nw.float()) if zero_centered else nw.float()))
    torch.testing.assert_close(y.float(), hf.to(dtype).float() @ w.float().t(), atol=5e-2, rtol=2e-2)
    assert all(torch.equal(a, b) for a, b in zip((x, residual, nw, w), before))


def test_add_rms_norm_linear_without_residual_returns_x():
    x, nw, w = torch.randn(2, 8), torch.randn(8), torch.randn(5, 8)
    y, r = add_rms_norm_linear(x, None, nw, 1e-5, False, w)
    assert r is x
    torch.testing.assert_close(y, torch.nn.functional.rms_norm(x, (8,), nw, 1e-5) @ w.t())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_act_mul_linear_is_the_unfused_path(dtype):
    gen = torch.Generator().manual_seed(1)
    x, w = torch.randn(4, 32, generator=gen).to(dtype), torch.randn(6, 16, generator=gen).to(dtype)
    y = act_mul_linear(x, w)
    gate, up = x.chunk(2, dim=-1)
    assert torch.equal(silu_and_mul(x), torch.nn.functional.silu(gate) * up)
    assert y.dtype == dtype and y.shape == (4, 6) and torch.equal(y, silu_and_mul(x) @ w.t())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_linear_act_mul_is_the_unfused_path(dtype):
    gen = torch.Generator().manual_seed(2)
    x, w = torch.randn(3, 16, generator=gen).to(dtype), torch.randn(10, 16, generator=gen).to(dtype)
    y = linear_act_mul(x, w)
    gate, up = (x @ w.t()).chunk(2, dim=-1)  # gate rows first, then up rows
    assert y.dtype == dtype and y.shape == (3, 5) and torch.equal(y, torch.nn.functional.silu(gate) * up)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_add_rms_norm_linear_act_mul_is_the_unfused_path(dtype):
    gen = torch.Generator().manual_seed(3)
    x, r = torch.randn(3, 16, generator=gen).to(dtype), torch.randn(3, 16, generator=gen).to(dtype)
    nw, w = torch.randn(16, generator=gen).to(dtype), torch.randn(10, 16, generator=gen).to(dtype)
    y, new_r = add_rms_norm_linear_act_mul(x, r, nw, 1e-6, True, w)
    h, want_r = add_rms_norm(x, r, nw, 1e-6, True)
    assert torch.equal(new_r, want_r) and torch.equal(new_r, x + r)
    assert y.dtype == dtype and y.shape == (3, 5) and torch.equal(y, linear_act_mul(h, w))
    y0, r0 = add_rms_norm_linear_act_mul(x, None, nw, 1e-6, True, w)
    assert r0 is x and torch.equal(y0, linear_act_mul(add_rms_norm(x, None, nw, 1e-6, True)[0], w))


def test_fused_linear_errors_name_the_op():
    x, nw, w = torch.randn(2, 8), torch.randn(8), torch.randn(5, 8)
    with pytest.raises(ValueError, match="add_rms_norm_linear: norm_weight must be"):
        add_rms_norm_linear(x, None, torch.randn(4), 1e-6, False, w)
    with pytest.raises(ValueError, match="add_rms_norm_linear: residual must have x's dtype"):
        add_rms_norm_linear(x, x.bfloat16(), nw, 1e-6, False, w)
    with pytest.raises(ValueError, match="add_rms_norm_linear: x must be"):
        add_rms_norm_linear(torch.randn(2, 6), None, nw, 1e-6, False, w)
    with pytest.raises(ValueError, match="act_mul_linear: x must be"):
        act_mul_linear(torch.randn(2, 8), w)
    with pytest.raises(ValueError, match="act_mul_linear: weight must be"):
        act_mul_linear(torch.randn(2, 16), torch.randn(8))
    with pytest.raises(ValueError, match="linear_act_mul: weight must be"):
        linear_act_mul(torch.randn(2, 8), w)
    with pytest.raises(ValueError, match="add_rms_norm_linear_act_mul: weight must be"):
        add_rms_norm_linear_act_mul(x, None, nw, 1e-6, False, w)
    with pytest.raises(ValueError, match="add_rms_norm_linear_act_mul: norm_weight must be"):
        add_rms_norm_linear_act_mul(x, None, torch.randn(4), 1e-6, False, torch.randn(6, 8))


def test_fused_ops_bind_through_the_registry():
    registry = KernelRegistry(CORE_OPS)
    ops = bind_ops(registry, torch.device("cpu"), torch.float32)
    x, w = torch.randn(1, 16), torch.randn(3, 8)
    assert torch.equal(ops.act_mul_linear(x, w), act_mul_linear(x, w))
    assert registry.chosen() == {"act_mul_linear": "reference"}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_gelu_tanh_ops_are_torch_gelu_tanh_products(dtype):
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(3, 8, generator=gen).to(dtype)
    w = torch.randn(10, 8, generator=gen).to(dtype)
    gate, up = F.linear(x, w).chunk(2, dim=-1)
    want = F.gelu(gate, approximate="tanh") * up
    assert torch.equal(linear_act_mul(x, w, "gelu_tanh"), want)
    g = torch.randn(3, 16, generator=gen).to(dtype)
    wd = torch.randn(5, 8, generator=gen).to(dtype)
    gg, gu = g.chunk(2, dim=-1)
    assert torch.equal(act_mul_linear(g, wd, "gelu_tanh"), F.linear(F.gelu(gg, approximate="tanh") * gu, wd))
    nw = torch.randn(8, generator=gen).to(dtype)
    y, r = add_rms_norm_linear_act_mul(x, x, nw, 1e-6, True, w, "gelu_tanh")
    h, r2 = add_rms_norm(x, x, nw, 1e-6, True)
    assert torch.equal(r, r2) and torch.equal(y, linear_act_mul(h, w, "gelu_tanh"))
    with pytest.raises(ValueError, match="activation must be one of"):
        linear_act_mul(x, w, "gelu")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("activation", [None, "silu", "gelu_tanh"])
def test_post_norm_residual_linear_is_the_unfused_path(dtype, activation):
    from anna_core.kernels.reference.norms import post_norm_residual

    g = torch.Generator().manual_seed(5)
    x, r = torch.randn(3, 16, generator=g).to(dtype), torch.randn(3, 16, generator=g).to(dtype)
    w, nw, scale = torch.randn(16, generator=g), torch.randn(16, generator=g), torch.tensor([1.5]).to(dtype)
    lw = torch.randn(12, 16, generator=g).to(dtype)
    for s, n in ((scale, nw), (None, None)):
        y, new_r = fl.post_norm_residual_linear(x, r, w, 1e-6, False, s, n, lw, activation)
        h, want_r = post_norm_residual(x, r, w, 1e-6, False, s, n)
        h = want_r if h is None else h
        want = fl.linear(h, lw, None) if activation is None else fl.linear_act_mul(h, lw, activation)
        assert torch.equal(new_r, want_r) and torch.equal(y, want)


def test_post_norm_residual_linear_errors_name_the_op():
    x, r, w, lw = torch.randn(2, 8), torch.randn(2, 8), torch.randn(8), torch.randn(6, 8)
    with pytest.raises(ValueError, match="post_norm_residual_linear: next_weight"):
        fl.post_norm_residual_linear(x, r, w, 1e-6, False, None, torch.randn(7), lw)
    with pytest.raises(ValueError, match="post_norm_residual_linear: residual"):
        fl.post_norm_residual_linear(x, r[:1], w, 1e-6, False, None, None, lw)
    with pytest.raises(ValueError, match="post_norm_residual_linear: scale"):
        fl.post_norm_residual_linear(x, r, w, 1e-6, False, torch.ones(2), None, lw)
    with pytest.raises(ValueError, match="post_norm_residual_linear: linear_weight"):
        fl.post_norm_residual_linear(x, r, w, 1e-6, False, None, None, torch.randn(5, 8), "silu")
