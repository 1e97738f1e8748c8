"""GEMV with a fused prologue (add+RMSNorm, SiLU-mul) vs the anna-core torch references, under the interpreter."""

import pytest
import torch
from anna_core.kernels.reference import fused_linear as ref

from tests.xpu_kernels._interp import require_triton_interpreter, tol

require_triton_interpreter()

from anna_xpu_kernels import fused_linear, gemv
from anna_xpu_kernels.gemv import GemvConfig

DTYPES = [torch.float32, torch.bfloat16]
# (name, forced configuration): None = the autotuner's (fixed, when interpreting) choice
CONFIGS = [
    ("auto", None),
    ("cuda-cores split-K", GemvConfig(block_n=16, block_k=16, split_k=3, use_dot=False)),
    ("tensor-cores", GemvConfig(block_n=32, block_k=32, split_k=1, use_dot=True)),
    ("tensor-cores split-K", GemvConfig(block_n=16, block_k=16, split_k=2, use_dot=True)),
]
N, K = 37, 75  # neither a multiple of any tile: masked columns, a partial K tile, uneven splits


def _norm_inputs(m, k, dtype, residual, seed):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=gen).to(dtype)
    r = (torch.randn(m, k, generator=gen) * 2).to(dtype) if residual else None
    nw = (torch.randn(k, generator=gen) * 0.5).to(dtype)
    w = (torch.randn(N, k, generator=gen) * k ** -0.5).to(dtype)
    return x, r, nw, w


def _check_residual(got, want, dtype):
    if dtype == torch.float32:
        assert torch.equal(got, want)
    else:  # the interpreter rounds float32 -> bfloat16 toward zero, torch to nearest: one ulp at most
        torch.testing.assert_close(got, want, atol=0, rtol=2 ** -7)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name, config", CONFIGS, ids=[c[0] for c in CONFIGS])
@pytest.mark.parametrize("m", [1, 3, 8])
@pytest.mark.parametrize("residual", [False, True], ids=["no-residual", "residual"])
@pytest.mark.parametrize("zero_centered", [False, True], ids=["w", "1+w"])
def test_add_rms_norm_linear_matches_reference(poison_outputs, dtype, name, config, m, residual, zero_centered):
    x, r, nw, w = _norm_inputs(m, K, dtype, residual, seed=m)
    before = [t.clone() for t in (x, r, nw, w) if t is not None]
    y, new_r = fused_linear.add_rms_norm_linear(x, r, nw, 1e-6, zero_centered, w, config=config)
    want_y, want_r = ref.add_rms_norm_linear(x, r, nw, 1e-6, zero_centered, w)
    assert y.dtype == new_r.dtype == dtype and y.shape == (m, N) and new_r.shape == (m, K)
    torch.testing.assert_close(y, want_y, **tol(dtype))
    if residual:
        _check_residual(new_r, want_r, dtype)  # written in full by one program, though many ran
    else:
        assert new_r is x
    assert all(torch.equal(a, b) for a, b in zip([t for t in (x, r, nw, w) if t is not None], before))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name, config", CONFIGS, ids=[c[0] for c in CONFIGS])
@pytest.mark.parametrize("m", [1, 3, 8])
def test_silu_mul_linear_matches_reference(poison_outputs, dtype, name, config, m):
    gen = torch.Generator().manual_seed(m)
    x = torch.randn(m, 2 * K, generator=gen).to(dtype)
    w = (torch.randn(N, K, generator=gen) * K ** -0.5).to(dtype)
    before = (x.clone(), w.clone())
    y = fused_linear.silu_mul_linear(x, w, config=config)
    assert y.dtype == dtype and y.shape == (m, N)
    torch.testing.assert_close(y, ref.silu_mul_linear(x, w), **tol(dtype))
    assert torch.equal(x, before[0]) and torch.equal(w, before[1])


def test_split_k_over_whole_tiles_normalises_with_the_whole_row(poison_outputs):
    # K = 64, a multiple of BLOCK_K (the unmasked loop); 4 tiles over 3 splits: each split still needs
    # the mean square of the whole row
    x, r, nw, w = _norm_inputs(2, 64, torch.float32, True, seed=11)
    config = GemvConfig(block_n=16, block_k=16, split_k=3, use_dot=False)
    y, new_r = fused_linear.add_rms_norm_linear(x, r, nw, 1e-5, True, w, config=config)
    want_y, want_r = ref.add_rms_norm_linear(x, r, nw, 1e-5, True, w)
    torch.testing.assert_close(y, want_y, **tol(torch.float32))
    assert torch.equal(new_r, want_r)
    g = torch.randn(2, 128)
    torch.testing.assert_close(fused_linear.silu_mul_linear(g, w, config=config), ref.silu_mul_linear(g, w),
                               **tol(torch.float32))


def test_leading_dims_and_strided_rows(poison_outputs):
    x, r, nw, w = _norm_inputs(6, K, torch.float32, True, seed=12)
    y, new_r = fused_linear.add_rms_norm_linear(x.view(2, 3, K), r.view(2, 3, K), nw, 1e-6, False, w)
    want_y, want_r = ref.add_rms_norm_linear(x, r, nw, 1e-6, False, w)
    assert y.shape == (2, 3, N) and new_r.shape == (2, 3, K)
    torch.testing.assert_close(y.view(6, N), want_y, **tol(torch.float32))
    assert torch.equal(new_r.view(6, K), want_r)
    wide = torch.randn(3, 2 * K + 5)[:, : 2 * K]  # rows with a stride beyond 2K
    torch.testing.assert_close(fused_linear.silu_mul_linear(wide, w), ref.silu_mul_linear(wide, w),
                               **tol(torch.float32))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_more_than_eight_rows_or_a_strided_weight_run_unfused(monkeypatch, poison_outputs, dtype):
    monkeypatch.setattr(gemv, "launch", lambda *a, **k: pytest.fail("the fused GEMV ran"))
    x, r, nw, w = _norm_inputs(9, K, dtype, True, seed=13)
    y, new_r = fused_linear.add_rms_norm_linear(x, r, nw, 1e-6, True, w)
    want_y, want_r = ref.add_rms_norm_linear(x, r, nw, 1e-6, True, w)
    torch.testing.assert_close(y, want_y, **tol(dtype))
    _check_residual(new_r, want_r, dtype)
    y, new_r = fused_linear.add_rms_norm_linear(x, None, nw, 1e-6, False, w)
    torch.testing.assert_close(y, ref.add_rms_norm_linear(x, None, nw, 1e-6, False, w)[0], **tol(dtype))
    assert new_r is x
    g = torch.randn(9, 2 * K).to(dtype)
    torch.testing.assert_close(fused_linear.silu_mul_linear(g, w), ref.silu_mul_linear(g, w), **tol(dtype))
    wt = w.t().contiguous().t()  # [N, K] column-major: not the GEMV's layout
    torch.testing.assert_close(fused_linear.silu_mul_linear(g[:2], wt), ref.silu_mul_linear(g[:2], w), **tol(dtype))
    y, _ = fused_linear.add_rms_norm_linear(x[:2], r[:2], nw, 1e-6, True, wt)
    torch.testing.assert_close(y, want_y[:2], **tol(dtype))


def test_bad_arguments_are_clear_errors():
    x, r, nw, w = _norm_inputs(2, 8, torch.float32, True, seed=14)
    with pytest.raises(ValueError, match="add_rms_norm_linear: norm_weight must be"):
        fused_linear.add_rms_norm_linear(x, r, nw[:4], 1e-6, False, w)
    with pytest.raises(ValueError, match="add_rms_norm_linear: residual must match"):
        fused_linear.add_rms_norm_linear(x, r[:1], nw, 1e-6, False, w)
    with pytest.raises(ValueError, match="add_rms_norm_linear: x must be"):
        fused_linear.add_rms_norm_linear(x, r, nw, 1e-6, False, w[:, :4])
    with pytest.raises(ValueError, match="silu_mul_linear: x must be"):
        fused_linear.silu_mul_linear(x, w)
    with pytest.raises(ValueError, match="silu_mul_linear: x .* must share one dtype"):
        fused_linear.silu_mul_linear(torch.randn(2, 16), w.bfloat16())


def test_registry_serves_the_fused_ops_from_triton_on_the_interpreter(monkeypatch, poison_outputs):
    from anna_core.kernels import KernelRegistry, bind_ops
    from anna_core.plugins import make_plugin_manager

    monkeypatch.setenv("ANNA_TRITON_INTERPRET", "1")
    registry = KernelRegistry.from_plugins(make_plugin_manager({"anna_core_reference", "anna_xpu_kernels"}))
    ops = bind_ops(registry, torch.device("cpu"), torch.float32)
    x, r, nw, w = _norm_inputs(1, K, torch.float32, True, seed=15)
    y, new_r = ops.add_rms_norm_linear(x, r, nw, 1e-6, True, w)
    g = torch.randn(1, 2 * K)
    y2 = ops.silu_mul_linear(g, w)
    assert registry.chosen() == {"add_rms_norm_linear": "triton", "silu_mul_linear": "triton"}
    want_y, want_r = ref.add_rms_norm_linear(x, r, nw, 1e-6, True, w)
    torch.testing.assert_close(y, want_y, **tol(torch.float32))
    assert torch.equal(new_r, want_r)
    torch.testing.assert_close(y2, ref.silu_mul_linear(g, w), **tol(torch.float32))
