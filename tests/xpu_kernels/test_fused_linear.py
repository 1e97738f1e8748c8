"""GEMV with a fused prologue (add+RMSNorm, SiLU-mul) or epilogue (SiLU-mul of gate/up) vs the anna-core torch
references, under the interpreter."""

import pytest
import torch
from anna_core.kernels.reference import fused_linear as ref

from tests.xpu_kernels._interp import gemv_configs, require_triton_interpreter, tol

require_triton_interpreter()

from anna_xpu_kernels import fused_linear, gemv
from anna_xpu_kernels.gemv import GemvConfig

DTYPES = [torch.float32, torch.bfloat16]
CONFIGS = [c for c in gemv_configs() if c[0] != "cuda-cores"]  # the GEMV's paths, split where it can split
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
def test_act_mul_linear_matches_reference(poison_outputs, dtype, name, config, m):
    gen = torch.Generator().manual_seed(m)
    x = torch.randn(m, 2 * K, generator=gen).to(dtype)
    w = (torch.randn(N, K, generator=gen) * K ** -0.5).to(dtype)
    before = (x.clone(), w.clone())
    y = fused_linear.act_mul_linear(x, w, config=config)
    assert y.dtype == dtype and y.shape == (m, N)
    torch.testing.assert_close(y, ref.act_mul_linear(x, w), **tol(dtype))
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
    torch.testing.assert_close(fused_linear.act_mul_linear(g, w, config=config), ref.act_mul_linear(g, w),
                               **tol(torch.float32))


def test_leading_dims_and_strided_rows(poison_outputs):
    x, r, nw, w = _norm_inputs(6, K, torch.float32, True, seed=12)
    y, new_r = fused_linear.add_rms_norm_linear(x.view(2, 3, K), r.view(2, 3, K), nw, 1e-6, False, w)
    want_y, want_r = ref.add_rms_norm_linear(x, r, nw, 1e-6, False, w)
    assert y.shape == (2, 3, N) and new_r.shape == (2, 3, K)
    torch.testing.assert_close(y.view(6, N), want_y, **tol(torch.float32))
    assert torch.equal(new_r.view(6, K), want_r)
    wide = torch.randn(3, 2 * K + 5)[:, : 2 * K]  # rows with a stride beyond 2K
    torch.testing.assert_close(fused_linear.act_mul_linear(wide, w), ref.act_mul_linear(wide, w),
                               **tol(torch.float32))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name, config", CONFIGS + [("narrowest split tile", GemvConfig(4, 16, 3, False, 2))],
                         ids=[c[0] for c in CONFIGS] + ["narrowest split tile"])
@pytest.mark.parametrize("m", [1, 3, 8])
def test_linear_act_mul_matches_reference(poison_outputs, dtype, name, config, m):
    """I = 37 (odd): the last program's outputs are partly masked, its gate/up rows clamped."""
    gen = torch.Generator().manual_seed(20 + m)
    x = torch.randn(m, K, generator=gen).to(dtype)
    w = (torch.randn(2 * N, K, generator=gen) * K ** -0.5).to(dtype)  # gate values ~N(0, 1): the curved part of SiLU
    before = (x.clone(), w.clone())
    y = fused_linear.linear_act_mul(x, w, config=config)
    assert y.dtype == dtype and y.shape == (m, N)
    torch.testing.assert_close(y, ref.linear_act_mul(x, w), **tol(dtype))
    assert torch.equal(x, before[0]) and torch.equal(w, before[1])


def test_linear_act_mul_pairs_each_gate_with_its_own_up_row(poison_outputs):
    """Gate row c alone is non-zero: only output c may be non-zero; then up row c alone: all zero."""
    x = torch.ones(1, K)
    w = torch.zeros(2 * N, K)
    w[5] = 0.1  # gate 5: silu(7.5)
    w[N + 5] = 0.02  # up 5: 1.5
    w[N + 6] = 0.02  # up 6 without its gate: silu(0) * 1.5 = 0
    y = fused_linear.linear_act_mul(x, w, config=GemvConfig(16, 16, 2, False, 4))
    want = torch.zeros(1, N)
    want[0, 5] = torch.nn.functional.silu(torch.tensor(7.5)) * 1.5
    torch.testing.assert_close(y, want, **tol(torch.float32))


def test_linear_act_mul_leading_dims_strided_rows_and_unfused_fallbacks(monkeypatch, poison_outputs):
    gen = torch.Generator().manual_seed(31)
    w = torch.randn(2 * N, K, generator=gen) * K ** -0.5
    x3 = torch.randn(2, 3, K, generator=gen)
    torch.testing.assert_close(fused_linear.linear_act_mul(x3, w), ref.linear_act_mul(x3, w), **tol(torch.float32))
    wide = torch.randn(3, K + 5, generator=gen)[:, :K]  # rows with a stride beyond K
    torch.testing.assert_close(fused_linear.linear_act_mul(wide, w), ref.linear_act_mul(wide, w),
                               **tol(torch.float32))
    monkeypatch.setattr(gemv, "launch", lambda *a, **k: pytest.fail("the fused GEMV ran"))
    x17 = torch.randn(17, K, generator=gen)  # more rows than the GEMV takes: GEMM + silu_and_mul kernel
    torch.testing.assert_close(fused_linear.linear_act_mul(x17, w), ref.linear_act_mul(x17, w), **tol(torch.float32))
    wt = w.t().contiguous().t()  # column-major weight: not the GEMV's layout
    torch.testing.assert_close(fused_linear.linear_act_mul(x17[:1], wt), ref.linear_act_mul(x17[:1], w),
                               **tol(torch.float32))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_more_than_sixteen_rows_or_a_strided_weight_run_unfused(monkeypatch, poison_outputs, dtype):
    monkeypatch.setattr(gemv, "launch", lambda *a, **k: pytest.fail("the fused GEMV ran"))
    x, r, nw, w = _norm_inputs(17, K, dtype, True, seed=13)
    y, new_r = fused_linear.add_rms_norm_linear(x, r, nw, 1e-6, True, w)
    want_y, want_r = ref.add_rms_norm_linear(x, r, nw, 1e-6, True, w)
    torch.testing.assert_close(y, want_y, **tol(dtype))
    _check_residual(new_r, want_r, dtype)
    y, new_r = fused_linear.add_rms_norm_linear(x, None, nw, 1e-6, False, w)
    torch.testing.assert_close(y, ref.add_rms_norm_linear(x, None, nw, 1e-6, False, w)[0], **tol(dtype))
    assert new_r is x
    g = torch.randn(17, 2 * K).to(dtype)
    torch.testing.assert_close(fused_linear.act_mul_linear(g, w), ref.act_mul_linear(g, w), **tol(dtype))
    wt = w.t().contiguous().t()  # [N, K] column-major: not the GEMV's layout
    torch.testing.assert_close(fused_linear.act_mul_linear(g[:2], wt), ref.act_mul_linear(g[:2], w), **tol(dtype))
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
    with pytest.raises(ValueError, match="act_mul_linear: x must be"):
        fused_linear.act_mul_linear(x, w)
    with pytest.raises(ValueError, match="act_mul_linear: x .* must share one dtype"):
        fused_linear.act_mul_linear(torch.randn(2, 16), w.bfloat16())
    with pytest.raises(ValueError, match=r"linear_act_mul: weight must be \[2I, K\]"):
        fused_linear.linear_act_mul(torch.randn(2, 8), torch.randn(7, 8))
    with pytest.raises(ValueError, match="linear_act_mul"):
        fused_linear.linear_act_mul(torch.randn(2, 8), torch.randn(6, 8).bfloat16())
    with pytest.raises(ValueError, match="linear_act_mul"):
        fused_linear.linear_act_mul(torch.randn(2, 9), torch.randn(6, 8))
    with pytest.raises(ValueError, match="linear_act_mul: the SwiGLU epilogue needs block_n >= 2"):
        fused_linear.linear_act_mul(torch.randn(2, 8), torch.randn(6, 8), config=GemvConfig(1, 16))
    assert fused_linear.linear_act_mul(torch.randn(2, 8), torch.randn(0, 8)).shape == (2, 0)  # I = 0
    assert fused_linear.linear_act_mul(torch.randn(0, 8), torch.randn(6, 8)).shape == (0, 3)  # no rows


def test_registry_serves_the_fused_ops_from_triton_on_the_interpreter(monkeypatch, poison_outputs):
    from anna_core.kernels import KernelRegistry, bind_ops
    from anna_core.plugins import make_plugin_manager

    monkeypatch.setenv("ANNA_TRITON_INTERPRET", "1")
    registry = KernelRegistry.from_plugins(make_plugin_manager({"anna_core_reference", "anna_xpu_kernels"}))
    ops = bind_ops(registry, torch.device("cpu"), torch.float32)
    x, r, nw, w = _norm_inputs(1, K, torch.float32, True, seed=15)
    y, new_r = ops.add_rms_norm_linear(x, r, nw, 1e-6, True, w)
    g = torch.randn(1, 2 * K)
    y2 = ops.act_mul_linear(g, w)
    w2 = torch.randn(2 * N, K) * K ** -0.5
    y3 = ops.linear_act_mul(x, w2)
    assert registry.chosen() == {"add_rms_norm_linear": "triton", "act_mul_linear": "triton",
                                 "linear_act_mul": "triton"}
    torch.testing.assert_close(y3, ref.linear_act_mul(x, w2), **tol(torch.float32))
    want_y, want_r = ref.add_rms_norm_linear(x, r, nw, 1e-6, True, w)
    torch.testing.assert_close(y, want_y, **tol(torch.float32))
    assert torch.equal(new_r, want_r)
    torch.testing.assert_close(y2, ref.act_mul_linear(g, w), **tol(torch.float32))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name, config", CONFIGS, ids=[c[0] for c in CONFIGS])
@pytest.mark.parametrize("m", [1, 3, 8])
@pytest.mark.parametrize("residual", [False, True], ids=["no-residual", "residual"])
@pytest.mark.parametrize("zero_centered", [False, True], ids=["w", "1+w"])
def test_add_rms_norm_linear_act_mul_matches_reference(poison_outputs, dtype, name, config, m, residual,
                                                        zero_centered):
    """The norm prologue and the SwiGLU epilogue in one launch; I = 37 (odd). In bfloat16 the result
    passes through four roundings (norm, projection, SiLU, product), each toward zero under the
    interpreter and to nearest in torch: it is held to the unfused Triton launches (same roundings) at
    the bfloat16 tolerance and to the torch reference at twice it."""
    x, r, nw, _ = _norm_inputs(m, K, dtype, residual, seed=40 + m)
    w = (torch.randn(2 * N, K, generator=torch.Generator().manual_seed(m)) * K ** -0.5).to(dtype)
    before = [t.clone() for t in (x, r, nw, w) if t is not None]
    y, new_r = fused_linear.add_rms_norm_linear_act_mul(x, r, nw, 1e-6, zero_centered, w, config=config, fuse=True)
    want_y, want_r = ref.add_rms_norm_linear_act_mul(x, r, nw, 1e-6, zero_centered, w)
    assert y.dtype == new_r.dtype == dtype and y.shape == (m, N) and new_r.shape == (m, K)
    unfused_y, _ = fused_linear.add_rms_norm_linear_act_mul(x, r, nw, 1e-6, zero_centered, w, config=config,
                                                             fuse=False)
    torch.testing.assert_close(y, unfused_y, **tol(dtype))
    torch.testing.assert_close(y, want_y, **{name: 2 * v for name, v in tol(dtype).items()})
    if residual:
        _check_residual(new_r, want_r, dtype)
    else:
        assert new_r is x
    assert all(torch.equal(a, b) for a, b in zip([t for t in (x, r, nw, w) if t is not None], before))


def test_row_block_covers_the_row_in_one_load_up_to_the_budget():
    from anna_xpu_kernels.gemv_prologue import ROW_VALUES, row_block

    assert row_block(2048, 1, 512) == 2048 and row_block(4096, 1, 512) == 4096 == ROW_VALUES
    assert row_block(75, 1, 32) == 128  # the next power of two
    assert row_block(5120, 1, 512) == 4096 and row_block(2048, 16, 128) == 256  # looped passes
    assert row_block(100, 16, 512) == 512  # never below the K tile


@pytest.mark.parametrize("fn", ["add_rms_norm_linear", "add_rms_norm_linear_act_mul"])
def test_norm_prologue_over_a_row_wider_than_one_load(poison_outputs, fn):
    """8 rows of 600 values: the row pass takes two steps of 512 columns (the second partly masked)."""
    from anna_xpu_kernels.gemv_prologue import row_block

    k = 600
    assert row_block(k, 8, 32) == 512
    x, r, nw, _ = _norm_inputs(8, k, torch.float32, True, seed=50)
    w = torch.randn(2 * N, k, generator=torch.Generator().manual_seed(51)) * k ** -0.5
    got_y, got_r = getattr(fused_linear, fn)(x, r, nw, 1e-6, True, w, fuse=True)
    want_y, want_r = getattr(ref, fn)(x, r, nw, 1e-6, True, w)
    torch.testing.assert_close(got_y, want_y, **tol(torch.float32))
    assert torch.equal(got_r, want_r)


def test_add_rms_norm_linear_act_mul_unfused_paths(monkeypatch, poison_outputs):
    """Declined fusion (fuse=False), more than sixteen rows, and a forced tile too narrow for the epilogue."""
    x, r, nw, _ = _norm_inputs(17, K, torch.float32, True, seed=60)
    w = torch.randn(2 * N, K, generator=torch.Generator().manual_seed(61)) * K ** -0.5
    want_y, want_r = ref.add_rms_norm_linear_act_mul(x, r, nw, 1e-6, False, w)
    calls = []
    real_launch = gemv.launch

    def spy(*args, **kwargs):
        calls.append(args[4].mode)  # the prologue
        return real_launch(*args, **kwargs)

    spy.counters = real_launch.counters  # launch finds its counter pool through the module global
    monkeypatch.setattr(gemv, "launch", spy)
    y, new_r = fused_linear.add_rms_norm_linear_act_mul(x, r, nw, 1e-6, False, w)  # 17 rows: norm kernel + GEMM
    torch.testing.assert_close(y, want_y, **tol(torch.float32))
    assert torch.equal(new_r, want_r) and calls == []
    y, new_r = fused_linear.add_rms_norm_linear_act_mul(x[:2], r[:2], nw, 1e-6, False, w, fuse=False)
    torch.testing.assert_close(y, want_y[:2], **tol(torch.float32))
    assert torch.equal(new_r, want_r[:2]) and calls == [0]  # the plain GEMV with its epilogue, after the norm
    with pytest.raises(ValueError, match="block_n >= 2"):
        fused_linear.add_rms_norm_linear_act_mul(x[:1], r[:1], nw, 1e-6, False, w, config=GemvConfig(1, 16))
    with pytest.raises(ValueError, match="add_rms_norm_linear_act_mul: weight must be"):
        fused_linear.add_rms_norm_linear_act_mul(x[:1], r[:1], nw, 1e-6, False, w[:-1])


def test_an_empty_reduction_gives_zeros_like_the_reference(poison_outputs):
    """K = 0 (rows with no values): every product is an empty sum, so y is the op applied to zeros."""
    x, nw, w = torch.randn(2, 0), torch.randn(0), torch.randn(6, 0)
    torch.testing.assert_close(fused_linear.linear_act_mul(x, w), ref.linear_act_mul(x, w))
    assert torch.equal(fused_linear.linear_act_mul(x, w), torch.zeros(2, 3))
    for residual in (None, torch.randn(2, 0)):
        for fn in ("add_rms_norm_linear", "add_rms_norm_linear_act_mul"):
            got_y, got_r = getattr(fused_linear, fn)(x, residual, nw, 1e-6, True, w)
            want_y, want_r = getattr(ref, fn)(x, residual, nw, 1e-6, True, w)
            assert torch.equal(got_y, want_y) and got_r.shape == want_r.shape == (2, 0)


GELU_CONFIGS = [("auto", None), ("tensor-cores split-K", GemvConfig(block_n=16, block_k=16, split_k=2, use_dot=True))]


def _gelu_mul(h):
    gate, up = h.chunk(2, dim=-1)
    return torch.nn.functional.gelu(gate, approximate="tanh") * up


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name, config", GELU_CONFIGS, ids=[c[0] for c in GELU_CONFIGS])
@pytest.mark.parametrize("m", [1, 3, 9])  # one row: the one-wave kernel under the interpreter; nine: unfused
def test_gelu_tanh_gated_ops_match_torch_gelu_tanh(poison_outputs, dtype, name, config, m):
    """GeGLU (Gemma's MLP): the GELU-tanh prologue and epilogue modes against torch's
    ``gelu(approximate="tanh")`` and against the op references."""
    gen = torch.Generator().manual_seed(40 + m)
    x = torch.randn(m, K, generator=gen).to(dtype)
    w_up = (torch.randn(2 * 20, K, generator=gen) * K ** -0.5).to(dtype)
    h = torch.nn.functional.linear(x, w_up)
    want = _gelu_mul(h)
    y = fused_linear.linear_act_mul(x, w_up, "gelu_tanh", config=config)
    assert y.shape == (m, 20) and y.dtype == dtype
    torch.testing.assert_close(y, want, **tol(dtype))
    torch.testing.assert_close(y, ref.linear_act_mul(x, w_up, "gelu_tanh"), **tol(dtype))
    assert not torch.allclose(y.float(), ref.linear_act_mul(x, w_up, "silu").float(), atol=1e-2)  # not SiLU

    g = torch.randn(m, 2 * K, generator=gen).to(dtype)
    w_down = (torch.randn(N, K, generator=gen) * K ** -0.5).to(dtype)
    y2 = fused_linear.act_mul_linear(g, w_down, "gelu_tanh", config=config, fuse=True)
    torch.testing.assert_close(y2, torch.nn.functional.linear(_gelu_mul(g), w_down), **tol(dtype))
    torch.testing.assert_close(y2, ref.act_mul_linear(g, w_down, "gelu_tanh"), **tol(dtype))

    r = torch.randn(m, K, generator=gen).to(dtype)
    nw = (torch.randn(K, generator=gen) * 0.5).to(dtype)
    y3, new_r = fused_linear.add_rms_norm_linear_act_mul(x, r, nw, 1e-6, True, w_up, "gelu_tanh", config=config,
                                                         fuse=True)
    want3, want_r = ref.add_rms_norm_linear_act_mul(x, r, nw, 1e-6, True, w_up, "gelu_tanh")
    # bfloat16: the sum, the norm, the projection and the product each rounded toward zero here, to nearest in
    # torch; on these inputs SiLU's epilogue differs from its reference by as much (up to 4 ulps at |y| ~ 2)
    torch.testing.assert_close(y3, want3, **(tol(dtype) if dtype == torch.float32 else {"atol": 7e-2, "rtol": 4e-2}))
    _check_residual(new_r, want_r, dtype)


def test_unknown_activation_is_a_clear_error():
    x, w = torch.randn(2, 8), torch.randn(6, 8)
    for call in (lambda: fused_linear.linear_act_mul(x, w, "relu"),
                 lambda: fused_linear.act_mul_linear(torch.randn(2, 16), w, "relu"),
                 lambda: fused_linear.add_rms_norm_linear_act_mul(x, None, torch.ones(8), 1e-6, False, w, "gelu")):
        with pytest.raises(ValueError, match="activation must be one of"):
            call()
