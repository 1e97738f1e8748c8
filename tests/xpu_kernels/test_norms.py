"""Triton rms_norm / gated_rms_norm vs the anna-core torch references, under the interpreter."""

import pytest
import torch
from anna_core.kernels.reference import norms as ref

from tests.xpu_kernels._interp import require_triton_interpreter, tol

require_triton_interpreter()

from anna_xpu_kernels import norms

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("zero_centered", [False, True])
@pytest.mark.parametrize("shape", [(3, 5, 48), (2, 100)])  # 48: D not a power of two; 100 rows: several row tiles
def test_rms_norm_matches_reference(poison_outputs, dtype, zero_centered, shape):
    gen = torch.Generator().manual_seed(1)
    x = (torch.randn(shape, generator=gen) * 3).to(dtype)
    weight = torch.randn(shape[-1], generator=gen) * 0.5
    got = norms.rms_norm(x, weight, 1e-6, zero_centered)
    want = ref.rms_norm(x, weight, 1e-6, zero_centered)
    assert got.dtype == dtype and got.shape == x.shape
    torch.testing.assert_close(got, want, **tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_gated_rms_norm_matches_reference(poison_outputs, dtype):
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(4, 3, 40, generator=gen).to(dtype)
    z = (torch.randn(4, 3, 40, generator=gen) * 2).to(dtype)
    weight = torch.rand(40, generator=gen) + 0.5
    got = norms.gated_rms_norm(x, z, weight, 1e-5)
    torch.testing.assert_close(got, ref.gated_rms_norm(x, z, weight, 1e-5), **tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_gated_rms_norm_reads_a_column_slice_gate_in_place(monkeypatch, poison_outputs, dtype):
    """Qwen3.5's z: a column slice of the merged projection viewed as [T, H, D]; its rows cannot be
    flattened without a copy, so the kernel walks (token, head) strides instead."""
    gen = torch.Generator().manual_seed(4)
    merged = (torch.randn(5, 3 * 40 + 17, generator=gen) * 2).to(dtype)
    z = merged[:, 9:9 + 3 * 40].reshape(5, 3, 40)  # a view: strides (137, 40, 1)
    assert z.data_ptr() == merged[:, 9:].data_ptr() and not z.is_contiguous()
    x = torch.randn(5, 3, 40, generator=gen).to(dtype)
    weight = torch.rand(40, generator=gen) + 0.5
    monkeypatch.setattr(norms, "as_rows", _no_copy(norms.as_rows))
    got = norms.gated_rms_norm(x, z, weight, 1e-5)
    torch.testing.assert_close(got, ref.gated_rms_norm(x, z, weight, 1e-5), **tol(dtype))


def _no_copy(as_rows):
    def checked(t):
        out = as_rows(t)
        assert out.data_ptr() == t.data_ptr(), "copied"
        return out
    return checked


def test_rms_norm_strided_rows(poison_outputs):
    base = torch.randn(6, 64)
    x = base[:, :32]  # rows with stride 64
    weight = torch.randn(32)
    torch.testing.assert_close(norms.rms_norm(x, weight, 1e-6, False), ref.rms_norm(x, weight, 1e-6, False),
                               **tol(torch.float32))


def test_norm_bad_weight_is_a_clear_error():
    with pytest.raises(ValueError, match="rms_norm: weight must be"):
        norms.rms_norm(torch.randn(2, 8), torch.randn(7), 1e-6, False)
    with pytest.raises(ValueError, match="gated_rms_norm: z must match"):
        norms.gated_rms_norm(torch.randn(2, 8), torch.randn(2, 4), torch.randn(8), 1e-6)
