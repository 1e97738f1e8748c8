"""RMSNorm.add_and_norm and SwiGLUMLP's linear_act_mul path give the unfused layers' results."""

import pytest
import torch
from anna_core.kernels.registry import KernelRegistry, bind_ops
from anna_core.layers import RMSNorm, SwiGLUMLP


@pytest.fixture(scope="module")
def registry():
    return KernelRegistry.from_plugins()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_add_and_norm_is_the_add_then_the_norm(registry, dtype):
    ops = bind_ops(registry, "cpu", dtype)
    norm = RMSNorm(24, 1e-6, ops, zero_centered=True)
    norm.weight.data.normal_()
    x, residual = torch.randn(3, 24).to(dtype), torch.randn(3, 24).to(dtype)
    y, new_residual = norm.add_and_norm(x, residual)
    assert torch.equal(new_residual, x + residual) and torch.equal(y, norm(x + residual))
    y0, r0 = norm.add_and_norm(x, None)  # the first layer: the stream starts at x
    assert r0 is x and torch.equal(y0, norm(x))
    calls = []
    norm.register_forward_hook(lambda *_: calls.append(1))  # the profiler's hooks see the fused call
    norm.add_and_norm(x, residual)
    assert calls == [1]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_swiglu_with_ops_matches_the_eager_mlp(registry, dtype):
    torch.manual_seed(0)
    plain = SwiGLUMLP(16, 40).to(dtype)
    fused = SwiGLUMLP(16, 40, bind_ops(registry, "cpu", dtype)).to(dtype)
    fused.load_state_dict(plain.state_dict())
    x = torch.randn(5, 16).to(dtype)
    want = plain(x)
    assert torch.equal(fused(x), want)  # unmerged: eager ops either way
    plain.merge_gate_up()
    fused.merge_gate_up()
    merged = plain(x)  # one GEMM for gate and up: equal to the unmerged MLP up to summation order
    torch.testing.assert_close(merged, want)
    assert torch.equal(fused(x), merged)  # linear_act_mul rounds exactly as F.silu(gate) * up
    assert fused.ops.registry.chosen()["linear_act_mul"] == "reference"


def test_norm_into_gate_up_with_a_bias_runs_unfused(registry):
    """``RMSNorm.add_norm_linear_act_mul`` on a biased gate/up: the fused op takes no bias, so the add +
    norm, the projection and the SwiGLU product run one after another."""
    ops = bind_ops(registry, "cpu", torch.float32)
    norm = RMSNorm(8, 1e-6, ops, zero_centered=True)
    norm.weight.data.normal_()
    gate_up = torch.nn.Linear(8, 12)
    x, residual = torch.randn(3, 8), torch.randn(3, 8)
    y, new_residual = norm.add_norm_linear_act_mul(x, residual, gate_up)
    h, want_residual = norm.add_and_norm(x, residual)
    gate, up = gate_up(h).chunk(2, dim=-1)
    assert torch.equal(new_residual, want_residual)
    torch.testing.assert_close(y, torch.nn.functional.silu(gate) * up)
    gate_up.bias = None  # bias-free: the fused op, same result
    y2, _ = norm.add_norm_linear_act_mul(x, residual, gate_up)
    gate, up = gate_up(h).chunk(2, dim=-1)
    torch.testing.assert_close(y2, torch.nn.functional.silu(gate) * up)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("with_bias", [False, True], ids=["no-bias", "bias"])
def test_post_add_linear_is_the_post_add_then_the_projection(registry, dtype, with_bias):
    # the sandwich tail fused into the projection that reads it (Gemma): the same values as post_add, then linear
    torch.manual_seed(1)
    ops = bind_ops(registry, "cpu", dtype)
    post, nxt = RMSNorm(24, 1e-6, ops), RMSNorm(24, 1e-6, ops)
    post.weight.data.normal_()
    nxt.weight.data.normal_()
    proj = torch.nn.Linear(24, 10, bias=with_bias).to(dtype)
    x, residual, scale = torch.randn(3, 24).to(dtype), torch.randn(3, 24).to(dtype), torch.tensor([0.7]).to(dtype)
    y, r = post.post_add(x, residual, scale, nxt)
    got, got_r = post.post_add_linear(x, residual, scale, nxt, proj)
    assert torch.equal(got_r, r) and torch.equal(got, proj(y))
    _, r0 = post.post_add(x, residual)  # no next norm: the projection reads the new residual itself
    got0, got_r0 = post.post_add_linear(x, residual, None, None, proj)
    assert torch.equal(got_r0, r0) and torch.equal(got0, proj(r0))
    with pytest.raises(ValueError, match="eps and zero_centered"):
        post.post_add_linear(x, residual, None, RMSNorm(24, 1e-5, ops), proj)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_swiglu_post_norm_is_the_post_add_then_the_mlp(registry, dtype):
    torch.manual_seed(2)
    ops = bind_ops(registry, "cpu", dtype)
    mlp = SwiGLUMLP(16, 40, ops, activation="gelu_tanh").to(dtype)
    post, nxt = RMSNorm(16, 1e-6, ops), RMSNorm(16, 1e-6, ops)
    post.weight.data.normal_()
    nxt.weight.data.normal_()
    x, residual = torch.randn(4, 16).to(dtype), torch.randn(4, 16).to(dtype)
    y, r = post.post_add(x, residual, next_norm=nxt)
    want = mlp(y)
    for merged in (False, True):  # unmerged: post_add then the eager MLP; merged: the fused op
        if merged:
            mlp.merge_gate_up()
            want = mlp(y)
        got, got_r = mlp(x, post_norm=(post, residual, nxt))
        assert torch.equal(got_r, r)
        torch.testing.assert_close(got, want, atol=0, rtol=0)
