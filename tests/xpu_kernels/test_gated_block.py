"""``post_norm_residual_gated_linear`` in one Triton launch (Gemma 4's per-layer-input block after the MLP's tail)
against its torch reference and the two unfused kernels, under the interpreter."""

import pytest
import torch
from anna_core.kernels.reference import fused_linear as ref

from tests.xpu_kernels._interp import require_triton_interpreter, tol

require_triton_interpreter()

from anna_xpu_kernels import fused_linear as unfused  # noqa: E402
from anna_xpu_kernels import gated_block  # noqa: E402

from tests.xpu_kernels._launches import LaunchCounter  # noqa: E402


def _args(dtype, rows, k, p, n, *, scaled, zero_centered, seed, strided_up=True):
    gen = torch.Generator().manual_seed(seed)
    x, residual = (3 * torch.randn(2, rows, k, generator=gen)).to(dtype)
    weight = (1 + 0.3 * torch.randn(k, generator=gen)).to(dtype)
    scale = torch.tensor([0.7], dtype=dtype) if scaled else None
    gate_weight = (0.2 * torch.randn(p, k, generator=gen)).to(dtype)
    wide = torch.randn(rows, 3 * p, generator=gen).to(dtype)
    up = wide[:, p:2 * p] if strided_up else wide[:, :p].contiguous()  # one layer's slice of the per-layer inputs
    linear_weight = (0.2 * torch.randn(n, p, generator=gen)).to(dtype)
    return x, residual, weight, 1e-6, zero_centered, scale, gate_weight, up, linear_weight


def _kernels(counter) -> dict[str, int]:
    return {name: c for name, c in counter.launches.items() if name.startswith("triton:")}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("k,p,n,shape,scaled,zero_centered,activation", [
    (48, 24, 48, (4, 8, 16), False, False, "gelu_tanh"),  # 3 gate blocks x 3 output chunks, masked tails
    (96, 32, 80, None, True, True, "silu"),  # launch_shape's: one program
    (160, 40, 160, (2, 8, 32), True, False, "gelu_tanh"),  # 5 x 5 programs, a P that is no power of two
])
def test_one_row_in_one_launch_matches_the_reference(poison_outputs, dtype, k, p, n, shape, scaled, zero_centered,
                                                     activation):
    args = _args(dtype, 1, k, p, n, scaled=scaled, zero_centered=zero_centered, seed=k + p)
    want_y, want_r = ref.post_norm_residual_gated_linear(*args, activation)
    with LaunchCounter() as c:
        got_y, got_r = gated_block.post_norm_residual_gated_linear(*args, activation, shape=shape)
    assert _kernels(c) == {"triton:_gated_block_kernel": 1}
    assert got_y.shape == want_y.shape == (1, n) and got_r.shape == (1, k) and got_y.dtype == dtype
    # bf16: the interpreter rounds toward zero, torch to nearest, at each of the chain's four roundings (the tail,
    # the gate, the activation, the product), so against torch the bound is looser than against the unfused kernels
    t = tol(dtype) if dtype == torch.float32 else {"atol": 3e-2, "rtol": 3e-2}
    t_ref = t if dtype == torch.float32 else {"atol": 1e-1, "rtol": 5e-2}
    torch.testing.assert_close(got_r, want_r, **t)
    torch.testing.assert_close(got_y, want_y, **t_ref)
    assert not gated_block._COUNTERS.get(got_y.device, 1).any()  # every counter back at zero (graph replays)
    again, _ = gated_block.post_norm_residual_gated_linear(*args, activation, shape=shape)
    torch.testing.assert_close(again, got_y, rtol=0, atol=0)  # deterministic: the partials summed in one order
    # the two unfused kernels it replaces give the same block
    gate, r = unfused.post_norm_residual_linear(*args[:6], None, args[6])
    torch.testing.assert_close(r, got_r, rtol=0, atol=0)  # the same tail, rounded as the one-wave GEMV's prologue
    torch.testing.assert_close(unfused.gated_linear(gate, args[7], args[8], activation), got_y, **t)  # sum order only


def test_rows_beyond_one_run_the_unfused_kernels(poison_outputs):
    args = _args(torch.float32, 3, 64, 16, 64, scaled=True, zero_centered=False, seed=5)
    with LaunchCounter() as c:
        got_y, got_r = gated_block.post_norm_residual_gated_linear(*args, "gelu_tanh")
    assert "triton:_gated_block_kernel" not in _kernels(c) and sum(_kernels(c).values()) >= 2
    want_y, want_r = ref.post_norm_residual_gated_linear(*args, "gelu_tanh")
    torch.testing.assert_close(got_y, want_y, **tol(torch.float32))
    torch.testing.assert_close(got_r, want_r, **tol(torch.float32))


def test_bad_arguments_are_clear_errors():
    x, residual, weight, eps, zc, scale, gw, up, lw = _args(torch.float32, 1, 32, 16, 32, scaled=False,
                                                            zero_centered=False, seed=6)
    for impl in (gated_block.post_norm_residual_gated_linear, ref.post_norm_residual_gated_linear):
        with pytest.raises(ValueError, match="post_norm_residual_gated_linear: .*activation"):
            impl(x, residual, weight, eps, zc, scale, gw, up, lw, "relu")
        with pytest.raises(ValueError, match="post_norm_residual_gated_linear: .*gate and up"):
            impl(x, residual, weight, eps, zc, scale, gw, up[:, :8], lw[:, :8], "silu")
        with pytest.raises(ValueError, match="post_norm_residual_gated_linear: up must have x's rows"):
            impl(x, residual, weight, eps, zc, scale, gw, up.repeat(2, 1), lw, "silu")
        with pytest.raises(ValueError, match="post_norm_residual_gated_linear: .*x must be \\[M, K=16\\]"):
            impl(x, residual, weight, eps, zc, scale, gw[:, :16], up, lw, "silu")


def test_registered_opt_in(monkeypatch):
    from anna_core.kernels import KernelRegistry, ProbeRequest
    from anna_core.plugins import make_plugin_manager

    monkeypatch.setenv("ANNA_TRITON_INTERPRET", "1")
    request = ProbeRequest("cpu", "bfloat16")
    registry = KernelRegistry.from_plugins(make_plugin_manager({"anna_xpu_kernels"}))
    assert registry.get_accelerated("post_norm_residual_gated_linear", request) is None  # opt-in until measured
    monkeypatch.setenv("ANNA_POST_NORM_GATED_LINEAR", "0")
    registry = KernelRegistry.from_plugins(make_plugin_manager({"anna_xpu_kernels"}))
    assert registry.get_accelerated("post_norm_residual_gated_linear", request) is None
    monkeypatch.setenv("ANNA_POST_NORM_GATED_LINEAR", "1")
    registry = KernelRegistry.from_plugins(make_plugin_manager({"anna_xpu_kernels"}))
    assert (registry.get_accelerated("post_norm_residual_gated_linear", request)
            is gated_block.post_norm_residual_gated_linear)
