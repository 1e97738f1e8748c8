"""The torch references of ``per_layer_inputs`` and ``post_norm_residual_gated_linear`` (Gemma 4's per-layer inputs and
per-layer-input block as single ops) equal the unfused expressions they replace, bit for bit, and refuse bad shapes."""

import pytest
import torch
from anna_core.kernels.reference import fused_linear, norms


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_per_layer_inputs_is_the_unfused_expression(dtype):
    gen = torch.Generator().manual_seed(0)
    projected = (4 * torch.randn(2, 3 * 16, generator=gen)).to(dtype)
    table = torch.randn(7, 3 * 16, generator=gen).to(dtype)
    weight = (1 + 0.2 * torch.randn(16, generator=gen)).to(dtype)
    ids = torch.tensor([6, 1])
    got = norms.per_layer_inputs(projected, ids, table, 4.0, weight, 1e-6, False, 0.05, 2 ** -0.5)
    rows = torch.nn.functional.embedding(ids, table) * 4.0
    normed = norms.rms_norm((projected * 0.05).view(2, 3, 16), weight, 1e-6, False)
    assert torch.equal(got, (normed + rows.view(2, 3, 16)) * 2 ** -0.5)
    with pytest.raises(ValueError, match="per_layer_inputs: projected must be"):
        norms.per_layer_inputs(projected[:, :40], ids, table[:, :40], 4.0, weight, 1e-6, False, 0.05, 1.0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_post_norm_residual_gated_linear_is_the_unfused_pair(dtype):
    gen = torch.Generator().manual_seed(1)
    x, residual = (3 * torch.randn(2, 1, 32, generator=gen)).to(dtype)
    weight = (1 + 0.2 * torch.randn(32, generator=gen)).to(dtype)
    gate_weight = (0.2 * torch.randn(8, 32, generator=gen)).to(dtype)
    up = torch.randn(1, 8, generator=gen).to(dtype)
    linear_weight = (0.2 * torch.randn(32, 8, generator=gen)).to(dtype)
    y, r = fused_linear.post_norm_residual_gated_linear(x, residual, weight, 1e-6, False, None, gate_weight, up,
                                                        linear_weight, "gelu_tanh")
    gate, r2 = fused_linear.post_norm_residual_linear(x, residual, weight, 1e-6, False, None, None, gate_weight)
    assert torch.equal(r, r2) and torch.equal(y, fused_linear.gated_linear(gate, up, linear_weight, "gelu_tanh"))
    with pytest.raises(ValueError, match="post_norm_residual_gated_linear: up must have x's rows"):
        fused_linear.post_norm_residual_gated_linear(x, residual, weight, 1e-6, False, None, gate_weight,
                                                     up.repeat(2, 1), linear_weight, "gelu_tanh")
