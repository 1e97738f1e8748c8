"""The one-wave decode GEMV for one row (every prologue and epilogue) vs the torch references, under
the interpreter, with grids small enough that each program strides over several row blocks."""

import pytest
import torch
from anna_core.kernels.reference import fused_linear as ref
from anna_core.kernels.reference.linear import linear as ref_linear

from tests.xpu_kernels._interp import require_triton_interpreter, tol

require_triton_interpreter()

from anna_xpu_kernels import fused_linear, gemv, gemv_persistent

DTYPES = [torch.float32, torch.bfloat16, torch.float16]


@pytest.fixture(params=[(2, 1), (4, 2), None], ids=["bn2-1prog", "bn4-2progs", "default"])
def grid(request, monkeypatch):
    """Force BLOCK_N and one or two programs per (single) multiprocessor: every program then loops."""
    if request.param is not None:
        bn, per_sm = request.param
        monkeypatch.setattr(gemv_persistent, "launch_shape", lambda k: (bn, 1, per_sm))
        monkeypatch.setattr(gemv_persistent, "multiprocessors", lambda t: 1)
    return request.param


def _rand(*shape, seed, scale=1.0, dtype=torch.float32):
    return (torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * scale).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("n, k", [(37, 75), (8, 1), (5, 130)])
@pytest.mark.parametrize("bias", [False, True], ids=["no-bias", "bias"])
def test_plain_rows_match_the_reference(poison_outputs, grid, dtype, n, k, bias):
    x, w = _rand(1, k, seed=1, dtype=dtype), _rand(n, k, seed=2, scale=k ** -0.5, dtype=dtype)
    b = _rand(n, seed=3, dtype=dtype) if bias else None
    got = gemv.linear(x, w, b)
    torch.testing.assert_close(got, ref_linear(x, w, b), **tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("residual", [False, True], ids=["no-residual", "residual"])
@pytest.mark.parametrize("zero_centered", [False, True], ids=["w", "1+w"])
def test_norm_prologue_and_swiglu_epilogue(poison_outputs, grid, dtype, residual, zero_centered):
    k, i = 75, 19
    x, nw = _rand(1, k, seed=4, dtype=dtype), _rand(k, seed=5, scale=0.5, dtype=dtype)
    r = _rand(1, k, seed=6, scale=2, dtype=dtype) if residual else None
    w = _rand(2 * i, k, seed=7, scale=k ** -0.5, dtype=dtype)
    y, new_r = fused_linear.add_rms_norm_linear(x, r, nw, 1e-6, zero_centered, w, fuse=True)
    want_y, want_r = ref.add_rms_norm_linear(x, r, nw, 1e-6, zero_centered, w)
    torch.testing.assert_close(y, want_y, **tol(dtype))
    if residual:
        torch.testing.assert_close(new_r, want_r, atol=0, rtol=2 ** -7)  # one program writes it
    y, _ = fused_linear.add_rms_norm_linear_act_mul(x, r, nw, 1e-6, zero_centered, w, fuse=True)
    want_y, _ = ref.add_rms_norm_linear_act_mul(x, r, nw, 1e-6, zero_centered, w)
    torch.testing.assert_close(y, want_y, **{name: 2 * v for name, v in tol(dtype).items()})


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_silu_mul_prologue_and_epilogue_alone(poison_outputs, grid, dtype):
    k, i = 40, 13  # an odd number of SwiGLU outputs: the last block holds one pair
    g = _rand(1, 2 * k, seed=8, dtype=dtype)
    w = _rand(2 * i, k, seed=9, scale=k ** -0.5, dtype=dtype)
    torch.testing.assert_close(fused_linear.act_mul_linear(g, w, fuse=True), ref.act_mul_linear(g, w), **tol(dtype))
    x = _rand(1, k, seed=10, dtype=dtype)
    torch.testing.assert_close(fused_linear.linear_act_mul(x, w), ref.linear_act_mul(x, w),
                               **{name: 2 * v for name, v in tol(dtype).items()})


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_bias_with_the_swiglu_epilogue(poison_outputs, grid, dtype):
    # the bias belongs to the merged [gate; up] rows: each program adds gate row c's and up row I + c's
    k, i = 33, 9
    x, w = _rand(1, k, seed=13, dtype=dtype), _rand(2 * i, k, seed=14, scale=k ** -0.5, dtype=dtype)
    b = _rand(2 * i, seed=15, dtype=dtype)
    got = gemv.launch(x, w, b, None, gemv.Prologue(), gemv.SILU_MUL_OUT)
    y = ref_linear(x, w, b)
    want = (torch.nn.functional.silu(y[:, :i].float()).to(dtype).float() * y[:, i:].float()).to(dtype)
    torch.testing.assert_close(got, want, **{name: 2 * v for name, v in tol(dtype).items()})


def test_tiled_kernel_still_serves_one_row_when_switched_off(monkeypatch, poison_outputs):
    # ANNA_GEMV_PERSISTENT=0: one row goes through the tiled kernel's autotuned (fixed, interpreted) path
    monkeypatch.setenv("ANNA_GEMV_PERSISTENT", "0")
    monkeypatch.setattr(gemv_persistent, "launch", lambda *a, **kw: pytest.fail("one-wave kernel used"))
    k, n = 75, 37
    x, nw, r = _rand(1, k, seed=16), _rand(k, seed=17), _rand(1, k, seed=18)
    w = _rand(2 * n, k, seed=19, scale=k ** -0.5)
    torch.testing.assert_close(gemv.linear(x, w, None), ref_linear(x, w, None), **tol(torch.float32))
    y, _ = fused_linear.add_rms_norm_linear_act_mul(x, r, nw, 1e-6, False, w, fuse=True)
    want, _ = ref.add_rms_norm_linear_act_mul(x, r, nw, 1e-6, False, w)
    torch.testing.assert_close(y, want, **tol(torch.float32))


def test_dispatch_one_row_only_widths_it_takes_and_the_switch(monkeypatch, poison_outputs):
    calls = []
    real = gemv_persistent.launch
    monkeypatch.setattr(gemv_persistent, "launch", lambda *a, **kw: calls.append(a[1].shape) or real(*a, **kw))
    w = _rand(6, 64, seed=11)
    for m in (1, 2):
        gemv.linear(_rand(m, 64, seed=12), w, None)
    assert calls == [(6, 64)]  # two rows: the tiled kernel
    one, two = torch.zeros(1, 8), torch.zeros(2, 8)
    assert gemv_persistent.takes(one, gemv_persistent.MAX_K) and not gemv_persistent.takes(one, gemv_persistent.MAX_K + 1)
    assert not gemv_persistent.takes(two, 8) and not gemv_persistent.takes(one, 0)
    monkeypatch.setenv("ANNA_GEMV_PERSISTENT", "0")
    gemv.linear(_rand(1, 64, seed=12), w, None)
    assert len(calls) == 1
    monkeypatch.delenv("ANNA_GEMV_PERSISTENT")
    gemv.gemv(_rand(1, 64, seed=12), w, None, gemv.GemvConfig(block_n=4, block_k=16))  # a forced config: tiled
    assert len(calls) == 1


def test_launch_shape_keeps_thirty_two_values_per_thread_up_to_4096():
    assert gemv_persistent.launch_shape(1024) == (4, 4, 8)
    assert gemv_persistent.launch_shape(2048) == (2, 4, 8)
    assert gemv_persistent.launch_shape(75) == (32, 4, 8)
    assert gemv_persistent.launch_shape(4096) == (2, 8, 4)
    assert gemv_persistent.launch_shape(6144) == (2, 4, 2)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("has_scale", [False, True], ids=["no-scale", "scale"])
@pytest.mark.parametrize("has_next", [False, True], ids=["no-next-norm", "next-norm"])
@pytest.mark.parametrize("activation", [None, "gelu_tanh"])
def test_post_norm_residual_prologue(monkeypatch, poison_outputs, grid, dtype, has_scale, has_next, activation):
    # a sandwich-normed block's tail (post norm, residual add, layer scale, next norm) inside the projection
    k, n = 75, 26
    x, r = _rand(1, k, seed=20, scale=3, dtype=dtype), _rand(1, k, seed=21, dtype=dtype)
    w, nw = _rand(k, seed=22, scale=0.5, dtype=dtype), _rand(k, seed=23, scale=0.5, dtype=dtype) if has_next else None
    s = _rand(1, seed=24, dtype=dtype) if has_scale else None
    lw = _rand(n, k, seed=25, scale=k ** -0.5, dtype=dtype)
    calls = []
    real = gemv_persistent.launch
    monkeypatch.setattr(gemv_persistent, "launch", lambda *a, **kw: calls.append(a[3].mode) or real(*a, **kw))
    y, new_r = fused_linear.post_norm_residual_linear(x, r, w, 1e-6, False, s, nw, lw, activation)
    want_y, want_r = ref.post_norm_residual_linear(x, r, w, 1e-6, False, s, nw, lw, activation)
    assert calls == [7 if has_next else 8]  # one launch, the post-norm prologue
    # (two roundings, each toward zero under the interpreter for bfloat16: the dtype's tolerance)
    torch.testing.assert_close(new_r, want_r, **tol(dtype))
    torch.testing.assert_close(y, want_y, **{name: 2 * v for name, v in tol(dtype).items()})


def test_post_norm_residual_linear_unfused_beyond_one_row(poison_outputs):
    # two rows: post_norm_residual then the projection (the tiled GEMV has no post-norm prologue)
    k, n = 40, 12
    x, r, w, nw = _rand(2, k, seed=26), _rand(2, k, seed=27), _rand(k, seed=28), _rand(k, seed=29)
    lw = _rand(2 * n, k, seed=30, scale=k ** -0.5)
    y, new_r = fused_linear.post_norm_residual_linear(x, r, w, 1e-6, True, None, nw, lw, "silu")
    want_y, want_r = ref.post_norm_residual_linear(x, r, w, 1e-6, True, None, nw, lw, "silu")
    torch.testing.assert_close(new_r, want_r, **tol(torch.float32))
    torch.testing.assert_close(y, want_y, **tol(torch.float32))
