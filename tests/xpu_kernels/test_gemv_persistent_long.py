"""The long-row one-wave decode GEMV (rows past the one-load kernel's MAX_K) vs the torch references, under the
interpreter: the widths are scaled down (the one-load kernel's MAX_K patched to 64, chunks of 32 columns) so
that every program walks several chunks of several row blocks, with a masked last chunk where K is not a
multiple of the chunk."""

import pytest
import torch
from anna_core.kernels.reference import fused_linear as ref
from anna_core.kernels.reference.linear import linear as ref_linear

from tests.xpu_kernels._interp import require_triton_interpreter, tol

require_triton_interpreter()

from anna_xpu_kernels import fused_linear, gemv, gemv_persistent, gemv_persistent_long
from anna_xpu_kernels.gemv_epilogue import GELU_TANH_MUL_OUT

DTYPES = [torch.float32, torch.bfloat16]


@pytest.fixture(params=[1, 2], ids=["1prog-per-sm", "2progs-per-sm"])
def long_rows(request, monkeypatch):
    """Rows over 64 values take the long-row kernel, in chunks of 32, on 2 multiprocessors; records the
    launches."""
    monkeypatch.setattr(gemv_persistent, "MAX_K", 64)
    monkeypatch.setattr(gemv_persistent_long, "launch_shape", lambda k: (2, 32, 1, request.param))
    monkeypatch.setattr(gemv_persistent, "multiprocessors", lambda t: 2)
    calls = []
    real = gemv_persistent_long.launch
    monkeypatch.setattr(gemv_persistent_long, "launch",
                        lambda *a, **kw: calls.append(tuple(a[1].shape)) or real(*a, **kw))
    return calls


def _rand(*shape, seed, scale=1.0, dtype=torch.float32):
    return (torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * scale).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("n, k", [(37, 100), (8, 128), (3, 65)])
@pytest.mark.parametrize("bias", [False, True], ids=["no-bias", "bias"])
def test_plain_rows_match_the_reference(poison_outputs, long_rows, dtype, n, k, bias):
    x, w = _rand(1, k, seed=1, dtype=dtype), _rand(n, k, seed=2, scale=k ** -0.5, dtype=dtype)
    b = _rand(n, seed=3, dtype=dtype) if bias else None
    got = gemv.linear(x, w, b)
    torch.testing.assert_close(got, ref_linear(x, w, b), **tol(dtype))
    assert long_rows == [(n, k)]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("activation", ["silu", "gelu_tanh"])
def test_gated_prologues(poison_outputs, long_rows, dtype, activation):
    k, n = 100, 21
    g = _rand(1, 2 * k, seed=4, dtype=dtype)
    w = _rand(n, k, seed=5, scale=k ** -0.5, dtype=dtype)
    torch.testing.assert_close(fused_linear.act_mul_linear(g, w, activation, fuse=True),
                               ref.act_mul_linear(g, w, activation), **tol(dtype))
    gate, up = _rand(1, k, seed=6, dtype=dtype), _rand(1, k, seed=7, dtype=dtype)
    torch.testing.assert_close(fused_linear.gated_linear(gate, up, w, activation),
                               ref.gated_linear(gate, up, w, activation), **tol(dtype))
    assert long_rows == [(n, k), (n, k)]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_gated_epilogue_with_bias(poison_outputs, long_rows, dtype):
    # the merged [gate; up] rows interleaved per block; an odd number of outputs leaves a half-empty last block
    k, i = 96, 9
    x, w = _rand(1, k, seed=8, dtype=dtype), _rand(2 * i, k, seed=9, scale=k ** -0.5, dtype=dtype)
    b = _rand(2 * i, seed=10, dtype=dtype)
    got = gemv.launch(x, w, b, None, gemv.Prologue(), GELU_TANH_MUL_OUT)
    y = ref_linear(x, w, b)
    gelu = torch.nn.functional.gelu(y[:, :i].float(), approximate="tanh").to(dtype).float()
    want = (gelu * y[:, i:].float()).to(dtype)
    torch.testing.assert_close(got, want, **{name: 2 * v for name, v in tol(dtype).items()})
    assert long_rows == [(2 * i, k)]


def test_norm_prologues_and_several_rows_keep_the_tiled_kernel(poison_outputs, long_rows):
    k = 100
    x, nw, r = _rand(1, k, seed=11), _rand(k, seed=12), _rand(1, k, seed=13)
    w = _rand(6, k, seed=14, scale=k ** -0.5)
    y, _ = fused_linear.add_rms_norm_linear(x, r, nw, 1e-6, False, w, fuse=True)
    want, _ = ref.add_rms_norm_linear(x, r, nw, 1e-6, False, w)
    torch.testing.assert_close(y, want, **tol(torch.float32))
    torch.testing.assert_close(gemv.linear(_rand(2, k, seed=15), w, None), ref_linear(_rand(2, k, seed=15), w, None),
                               **tol(torch.float32))
    assert long_rows == []


def test_takes_and_grid_size():
    one, two = torch.zeros(1, 8), torch.zeros(2, 8)
    wide = gemv_persistent.MAX_K + 1
    take = gemv_persistent_long.takes
    assert take(one, 2560, wide, 0) and not take(one, 2560, gemv_persistent.MAX_K, 0)
    assert not take(one, 8, gemv_persistent_long.MAX_K + 1, 0)
    assert not take(two, 8, wide, 0) and not take(one, 8, wide, 2)
    # E4B's and E2B's down projections, not Qwen3.5-9B's (4096 x 12288: the tiled kernel tied there)
    assert take(one, 2560, 10240, 0) and take(one, 1536, 12288, 0) and not take(one, 4096, 12288, 0)
    assert gemv_persistent_long.launch_shape(10240) == (4, 2048, 4, 4)
    assert gemv_persistent_long.chunk(10240) == 2048 and gemv_persistent_long.chunk(12288) == 4096
    # every program gets the same number of row blocks: 1280 blocks over at most 528 programs -> 427 of 3 each
    assert gemv_persistent_long.grid_size(1280, 528) == 427
    assert gemv_persistent_long.grid_size(5, 528) == 5 and gemv_persistent_long.grid_size(7, 0) == 1
