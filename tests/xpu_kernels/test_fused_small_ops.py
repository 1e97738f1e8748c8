"""Triton add_rms_norm / silu_and_mul / sigmoid_mul vs the anna-core torch references, under the interpreter."""

import pytest
import torch
from anna_core.kernels.reference import activations as ref_act
from anna_core.kernels.reference import norms as ref_norms

from tests.xpu_kernels._interp import require_triton_interpreter, tol

require_triton_interpreter()

from anna_xpu_kernels import activations, norms

DTYPES = [torch.float32, torch.bfloat16]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("zero_centered", [False, True])
@pytest.mark.parametrize("shape", [(1, 48), (37, 40)])  # D not a power of two; 37 rows: a partial row tile
def test_add_rms_norm_matches_reference(poison_outputs, dtype, zero_centered, shape):
    gen = torch.Generator().manual_seed(3)
    x = (torch.randn(shape, generator=gen) * 2).to(dtype)
    residual = (torch.randn(shape, generator=gen) * 3).to(dtype)
    weight = torch.randn(shape[-1], generator=gen) * 0.5
    x_before, r_before = x.clone(), residual.clone()
    y, new_residual = norms.add_rms_norm(x, residual, weight, 1e-6, zero_centered)
    want_y, want_r = ref_norms.add_rms_norm(x, residual, weight, 1e-6, zero_centered)
    assert y.dtype == new_residual.dtype == dtype and y.shape == new_residual.shape == x.shape
    torch.testing.assert_close(new_residual, want_r, **tol(dtype))
    torch.testing.assert_close(y, want_y, **tol(dtype))
    assert torch.equal(x, x_before) and torch.equal(residual, r_before)  # inputs are not written
    if dtype == torch.float32:  # the sum is exact to rounding in float32
        assert torch.equal(new_residual, x + residual)


def test_add_rms_norm_without_residual_is_rms_norm(poison_outputs):
    x, weight = torch.randn(5, 24), torch.randn(24)
    y, r = norms.add_rms_norm(x, None, weight, 1e-5, True)
    assert r is x
    torch.testing.assert_close(y, ref_norms.rms_norm(x, weight, 1e-5, True), **tol(torch.float32))


def test_add_rms_norm_bad_arguments_are_clear_errors():
    with pytest.raises(ValueError, match="add_rms_norm: residual must match"):
        norms.add_rms_norm(torch.randn(2, 8), torch.randn(3, 8), torch.randn(8), 1e-6, False)
    with pytest.raises(ValueError, match="add_rms_norm: residual must have x's dtype"):
        norms.add_rms_norm(torch.randn(2, 8), torch.randn(2, 8).bfloat16(), torch.randn(8), 1e-6, False)
    with pytest.raises(ValueError, match="add_rms_norm: weight must be"):
        norms.add_rms_norm(torch.randn(2, 8), torch.randn(2, 8), torch.randn(7), 1e-6, False)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("rows, inter", [(1, 40), (9, 1100)])  # 1100: two column tiles, the last partial
def test_silu_and_mul_matches_reference(poison_outputs, dtype, rows, inter):
    gen = torch.Generator().manual_seed(4)
    x = (torch.randn(rows, 2 * inter, generator=gen) * 4).to(dtype)
    got = activations.silu_and_mul(x)
    assert got.dtype == dtype and got.shape == (rows, inter)
    torch.testing.assert_close(got, ref_act.silu_and_mul(x), **tol(dtype))


def test_silu_and_mul_strided_rows_and_errors(poison_outputs):
    base = torch.randn(3, 5, 80)
    x = base[:, :, :64]  # [3, 5, 64]: rows with stride 80, two leading dims
    torch.testing.assert_close(activations.silu_and_mul(x), ref_act.silu_and_mul(x), **tol(torch.float32))
    with pytest.raises(ValueError, match="silu_and_mul: x must be \\[..., 2I\\]"):
        activations.silu_and_mul(torch.randn(2, 7))
    with pytest.raises(ValueError, match="silu_and_mul: x must be one of"):
        activations.silu_and_mul(torch.zeros(2, 8, dtype=torch.int32))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_sigmoid_mul_matches_reference_on_a_strided_gate(poison_outputs, dtype):
    gen = torch.Generator().manual_seed(5)
    T, H, D = 5, 3, 40
    q_gate = (torch.randn(T, H, 2 * D, generator=gen) * 3).to(dtype)
    gate = q_gate[..., D:]  # as in Qwen3.5 attention: strides (H * 2D, 2D, 1)
    x = torch.randn(T, H, D, generator=gen).to(dtype)
    got = activations.sigmoid_mul(x, gate)
    assert got.dtype == dtype and got.shape == x.shape
    torch.testing.assert_close(got, ref_act.sigmoid_mul(x, gate), **tol(dtype))


@pytest.mark.parametrize("shape", [(7, 1500), (2, 3, 4, 24), (33,)])  # column tiles; 4-D; 1-D
def test_sigmoid_mul_other_ranks(poison_outputs, shape):
    gen = torch.Generator().manual_seed(6)
    x, gate = torch.randn(shape, generator=gen), torch.randn(shape, generator=gen) * 4
    torch.testing.assert_close(activations.sigmoid_mul(x, gate), x * torch.sigmoid(gate), **tol(torch.float32))


def test_sigmoid_mul_bad_arguments_are_clear_errors():
    with pytest.raises(ValueError, match="sigmoid_mul: gate must match"):
        activations.sigmoid_mul(torch.randn(2, 8), torch.randn(2, 4))
    with pytest.raises(ValueError, match="sigmoid_mul: gate must have x's dtype"):
        activations.sigmoid_mul(torch.randn(2, 8), torch.randn(2, 8).bfloat16())
