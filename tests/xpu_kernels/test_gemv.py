"""Triton decode GEMV (``linear``) vs the anna-core torch reference, under the interpreter."""

import pytest
import torch
import torch.nn.functional as F
from anna_core.kernels.reference.linear import linear as ref_linear

from tests.xpu_kernels._interp import gemv_configs, require_triton_interpreter, run_microbench_smoke, tol

require_triton_interpreter()

from anna_xpu_kernels import gemv
from anna_xpu_kernels.gemv import GemvConfig

DTYPES = [torch.float32, torch.bfloat16]
CONFIGS = gemv_configs()


def _inputs(m, n, k, dtype, bias, seed):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=gen).to(dtype)
    w = (torch.randn(n, k, generator=gen) * k ** -0.5).to(dtype)
    b = torch.randn(n, generator=gen).to(dtype) if bias else None
    return x, w, b


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name, config", CONFIGS, ids=[c[0] for c in CONFIGS])
@pytest.mark.parametrize("m", [1, 3, 8])
@pytest.mark.parametrize("bias", [False, True], ids=["no-bias", "bias"])
def test_gemv_matches_reference(poison_outputs, dtype, name, config, m, bias):
    # N=37, K=75: neither a multiple of any tile (masked columns, a partial K tile, uneven splits)
    x, w, b = _inputs(m, 37, 75, dtype, bias, seed=m)
    got = gemv.gemv(x, w, b, config)
    assert got.dtype == dtype and got.shape == (m, 37)
    torch.testing.assert_close(got, ref_linear(x, w, b), **tol(dtype))


def test_split_k_covers_whole_k_tiles(poison_outputs):
    # K a multiple of BLOCK_K (the unmasked loop) with more splits than some need: 4 tiles over 3 splits
    x, w, b = _inputs(2, 40, 64, torch.float32, True, seed=5)
    got = gemv.gemv(x, w, b, GemvConfig(block_n=16, block_k=16, split_k=3, use_dot=False))
    torch.testing.assert_close(got, ref_linear(x, w, b), **tol(torch.float32))


@pytest.mark.parametrize("use_dot", [False, True])
def test_split_k_last_arriver_sums_in_split_order_and_resets_its_counters(poison_outputs, use_dot):
    # the last split program of each column block adds the float32 partials in split order: the result
    # is the same on every call (a graph replay), and the arrival counters are back at zero afterwards
    x, w, b = _inputs(3, 50, 96, torch.float32, True, seed=8)
    config = GemvConfig(block_n=16, block_k=16, split_k=4, use_dot=use_dot)
    first = gemv.gemv(x, w, b, config)
    partials = [x[:, k:k + 32].double() @ w[:, k:k + 32].double().T for k in range(0, 96, 32)]
    want = sum(p.float() for p in partials) + b  # 6 tiles in 4 splits: 2 + 2 + 2 + an empty split
    torch.testing.assert_close(first, want, atol=1e-5, rtol=1e-5)
    assert torch.equal(gemv.gemv(x, w, b, config), first)
    assert not gemv.launch.counters.get(x.device, 1).any()


@pytest.mark.parametrize("k", [16, 40, 64, 80, 96, 112])  # 1 to 7 K tiles of 16: fewer, as many and more than prefetched
@pytest.mark.parametrize("split", [1, 2])
@pytest.mark.parametrize("deep", [True, False], ids=["deep-prefetch", "first-tile"])
def test_prefetched_weight_tiles_add_up_to_the_reference(monkeypatch, poison_outputs, k, split, deep):
    # block 8 x 16 (256 B): deep prefetch loads 4 tiles before the PDL wait (the wait is a no-op here),
    # then accumulates them ahead of the loop; tiles past a program's range (or an empty split) add nothing
    monkeypatch.setenv("ANNA_GEMV_PREFETCH", "1" if deep else "0")
    assert gemv.prefetch_tiles(8, 16, False, deep) == (4 if deep else 1)
    x, w, b = _inputs(2, 20, k, torch.float32, True, seed=k)
    got = gemv.gemv(x, w, b, GemvConfig(block_n=8, block_k=16, split_k=split, use_dot=False))
    torch.testing.assert_close(got, ref_linear(x, w, b), **tol(torch.float32))


def test_prefetch_tiles_fit_the_prefetch_budget():
    assert gemv.prefetch_tiles(4, 512, False, True) == 4  # 4 KiB tiles
    assert gemv.prefetch_tiles(8, 512, False, True) == 2
    assert gemv.prefetch_tiles(16, 512, False, True) == 1  # 16 KiB: one tile, never none
    assert gemv.prefetch_tiles(64, 1024, False, True) == 1
    assert gemv.prefetch_tiles(4, 512, True, True) == 1  # tensor cores: Triton pipelines the loads
    assert gemv.prefetch_tiles(4, 512, False, False) == 1


def test_linear_op_keeps_leading_dims(poison_outputs):
    x, w, b = _inputs(6, 24, 40, torch.float32, True, seed=6)
    got = gemv.linear(x.view(2, 3, 40), w, b)
    assert got.shape == (2, 3, 24)
    torch.testing.assert_close(got, ref_linear(x, w, b).view(2, 3, 24), **tol(torch.float32))


def test_linear_falls_back_to_torch_beyond_sixteen_rows_and_for_strided_weights(monkeypatch, poison_outputs):
    calls = []
    monkeypatch.setattr(gemv, "gemv", lambda *a, **k: calls.append(a) or pytest.fail("GEMV kernel ran"))
    x, w, b = _inputs(17, 20, 30, torch.bfloat16, True, seed=7)
    torch.testing.assert_close(gemv.linear(x, w, b), F.linear(x, w, b))  # M = 17 > 16
    x4 = x[:4]
    wt = torch.randn(30, 20).to(torch.bfloat16).t()  # [20, 30] column-major
    torch.testing.assert_close(gemv.linear(x4, wt, b), F.linear(x4, wt, b))
    assert not calls


def test_linear_bad_arguments_are_clear_errors():
    with pytest.raises(ValueError, match="linear: x must be"):
        gemv.linear(torch.randn(2, 5), torch.randn(3, 4), None)
    with pytest.raises(ValueError, match="must share one dtype"):
        gemv.linear(torch.randn(2, 4), torch.randn(3, 4).to(torch.bfloat16), None)
    with pytest.raises(ValueError, match="linear: the GEMV kernel takes"):
        gemv.gemv(torch.randn(17, 4), torch.randn(3, 4), None)


def test_microbench_linear_smoke_on_cpu():
    out = run_microbench_smoke("--only", "linear", "--dtype", "float32", "--linear-rows", "1,9")
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [line.split() for line in out.stdout.splitlines() if line.startswith("smoke ") and " M=" not in line]
    assert len(rows) == 8 and {r[6] for r in rows} == {"cuBLAS", "triton"}
    assert all(float(r[-1]) < 1e-4 for r in rows), rows  # float32: agrees with the fp32 product to rounding
    assert "smoke M=1:" in out.stdout and "smoke M=9:" in out.stdout
    # the prologue and epilogue fusions against their two unfused launches, at one row
    fused = [r for r in (line.split() for line in out.stdout.splitlines()) if r[:2] == ["fused", "smoke"]]
    assert [r[2] for r in fused] == ["add_rms_norm+a", "silu_mul+b", "silu_mul_out+c", "add_rms_norm_silu_out+d"]
    assert all(r[6] == "1" for r in fused)
    assert all(float(r[-1]) < 1e-4 for r in fused), fused
    assert "smoke fused M=1 add_rms_norm_silu_out:" in out.stdout


def test_counter_pool_keeps_replaced_buffers_alive():
    import gc
    import weakref

    from anna_xpu_kernels.counters import CounterPool

    pool = CounterPool(min_words=8)
    first = pool.get(torch.device("cpu"), 4)
    assert first.numel() == 8 and not first.any()
    assert pool.get(torch.device("cpu"), 8) is first  # big enough: the same buffer
    ref = weakref.ref(first)
    grown = pool.get(torch.device("cpu"), 20)
    assert grown.numel() >= 20 and not grown.any() and grown is not first
    del first
    gc.collect()
    assert ref() is not None  # a captured graph may still point at it


def test_unsplittable_launch_takes_no_counters(monkeypatch, poison_outputs):
    # the LM head (N above the split limit) must not grow the counter pool
    asked = []
    real_get = gemv.launch.counters.get
    monkeypatch.setattr(gemv.launch.counters, "get", lambda device, words: asked.append(words) or real_get(device, words))
    x, w, b = _inputs(1, 24, 40, torch.float32, False, seed=9)
    gemv.gemv(x, w, b, GemvConfig(block_n=16, block_k=16, split_k=1, use_dot=False))
    gemv.gemv(x, w, b, GemvConfig(block_n=8, block_k=16, split_k=2, use_dot=False))
    assert asked == [0, 3]
