"""``ANNA_GEMV_MAX_ROWS``: how many activation rows the decode GEMV takes (16 by default, 1 to 16 set), and the
GEMV and its fused prologues / epilogues on 9-16 rows against the anna-core torch references, under the interpreter."""

import pytest
import torch
import torch.nn.functional as F
from anna_core.kernels.reference import fused_linear as ref
from anna_core.kernels.reference.linear import linear as ref_linear

from tests.xpu_kernels._interp import gemv_configs, require_triton_interpreter, tol

require_triton_interpreter()

from anna_xpu_kernels import _env, fused_linear, gemv

CONFIGS = [c for c in gemv_configs() if c[0] != "auto"] + [("auto", None)]
N, K = 37, 75  # neither a multiple of any tile: masked columns, a partial K tile, uneven splits


def _rows(m, k, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(m, k, generator=gen).to(dtype), (torch.randn(N, k, generator=gen) * k ** -0.5).to(dtype)


def _kernel_must_not_run(monkeypatch):
    monkeypatch.setattr(gemv, "launch", lambda *a, **k: pytest.fail("the GEMV kernel ran"))


def test_the_default_limit_is_sixteen_rows(monkeypatch, poison_outputs):
    monkeypatch.delenv(_env.GEMV_MAX_ROWS_ENV, raising=False)
    assert _env.gemv_max_rows() == 16
    x, w = _rows(17, K, torch.float32, seed=1)
    assert gemv.supports(x[:16], w) and gemv.supports(x[:9], w) and not gemv.supports(x, w)
    _kernel_must_not_run(monkeypatch)
    torch.testing.assert_close(gemv.linear(x, w, None), F.linear(x, w))


@pytest.mark.parametrize("value, rows", [("16", 16), ("12", 12), ("4", 4), (" 16 ", 16)])
def test_the_switch_sets_the_limit(monkeypatch, value, rows):
    monkeypatch.setenv(_env.GEMV_MAX_ROWS_ENV, value)
    assert _env.gemv_max_rows() == rows
    x, w = _rows(rows + 1, K, torch.float32, seed=2)
    assert gemv.supports(x[:rows], w) and not gemv.supports(x, w)


@pytest.mark.parametrize("value", ["0", "17", "32", "-1", "eight", "1.5"])
def test_a_limit_outside_one_to_sixteen_is_a_clear_error(monkeypatch, value):
    monkeypatch.setenv(_env.GEMV_MAX_ROWS_ENV, value)
    with pytest.raises(ValueError, match=r"ANNA_GEMV_MAX_ROWS must be an integer from 1 to 16"):
        _env.gemv_max_rows()


def test_the_kernel_refuses_rows_beyond_the_limit_naming_it(monkeypatch):
    monkeypatch.setenv(_env.GEMV_MAX_ROWS_ENV, "12")
    with pytest.raises(ValueError, match=r"linear: the GEMV kernel takes x \[M<=12, K\]"):
        gemv.gemv(torch.randn(13, 4), torch.randn(3, 4), None)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name, config", CONFIGS, ids=[c[0] for c in CONFIGS])
@pytest.mark.parametrize("m", [9, 16])
def test_gemv_on_nine_to_sixteen_rows_matches_reference(monkeypatch, poison_outputs, dtype, name, config, m):
    monkeypatch.setenv(_env.GEMV_MAX_ROWS_ENV, "16")
    x, w = _rows(m, K, dtype, seed=m)
    b = torch.randn(N).to(dtype)
    got = gemv.gemv(x, w, b, config)
    assert got.dtype == dtype and got.shape == (m, N)
    torch.testing.assert_close(got, ref_linear(x, w, b), **tol(dtype))


@pytest.mark.parametrize("name, config", [c for c in CONFIGS if c[0] != "cuda-cores"],
                         ids=[c[0] for c in CONFIGS if c[0] != "cuda-cores"])
def test_fused_prologues_and_epilogue_take_sixteen_rows(monkeypatch, poison_outputs, name, config):
    """The norm prologue (forced on: with programmatic dependent launch it fuses one row by default), the SiLU-mul
    prologue and the gate/up epilogue on 16 rows: one kernel launch each, the references' values."""
    monkeypatch.setenv(_env.GEMV_MAX_ROWS_ENV, "16")
    launches = []
    launch = gemv.launch

    def counting(*args, **kwargs):
        launches.append(1)
        return launch(*args, **kwargs)

    counting.counters = launch.counters  # (the launch reads its counter pool off the module's function)
    monkeypatch.setattr(gemv, "launch", counting)
    gen = torch.Generator().manual_seed(3)
    x, r = torch.randn(16, K, generator=gen), torch.randn(16, K, generator=gen) * 2
    nw, w = torch.randn(K, generator=gen) * 0.5, torch.randn(N, K, generator=gen) * K ** -0.5
    y, new_r = fused_linear.add_rms_norm_linear(x, r, nw, 1e-6, False, w, config=config, fuse=True)
    want_y, want_r = ref.add_rms_norm_linear(x, r, nw, 1e-6, False, w)
    torch.testing.assert_close(y, want_y, **tol(torch.float32))
    assert torch.equal(new_r, want_r)
    g = torch.randn(16, 2 * K, generator=gen)
    torch.testing.assert_close(fused_linear.act_mul_linear(g, w, config=config, fuse=True), ref.act_mul_linear(g, w),
                               **tol(torch.float32))
    gate_up = torch.randn(2 * N, K, generator=gen) * K ** -0.5
    torch.testing.assert_close(fused_linear.linear_act_mul(x, gate_up, config=config), ref.linear_act_mul(x, gate_up),
                               **tol(torch.float32))
    assert len(launches) == 3


@pytest.mark.parametrize("value, rows", [(None, 17), ("8", 9)], ids=["default-17-rows", "limit-8-9-rows"])
def test_rows_past_the_limit_run_unfused(monkeypatch, poison_outputs, value, rows):
    if value is None:
        monkeypatch.delenv(_env.GEMV_MAX_ROWS_ENV, raising=False)
    else:
        monkeypatch.setenv(_env.GEMV_MAX_ROWS_ENV, value)
    _kernel_must_not_run(monkeypatch)
    gen = torch.Generator().manual_seed(4)
    x, gate_up = torch.randn(rows, K, generator=gen), torch.randn(2 * N, K, generator=gen) * K ** -0.5
    torch.testing.assert_close(fused_linear.linear_act_mul(x, gate_up), ref.linear_act_mul(x, gate_up),
                               **tol(torch.float32))


@pytest.mark.parametrize("n", [16, 32])
def test_the_autotuner_keeps_a_tensor_core_tile_for_sixteen_rows_of_a_narrow_matrix(n):
    """Every tensor-core tile is wider than N <= 32, so pruning leaves nothing: above 8 rows the fallback is an
    unsplit tensor-core tile, not a CUDA-core one (whose [16, BLOCK_N, BLOCK_K] float32 product would spill);
    up to 8 rows the fallback is unchanged."""
    from anna_xpu_kernels.gemv_tuning import prune, tuning_space

    space = tuning_space()
    for block_m, use_dot in ((16, True), (8, False)):
        kept = prune(space, {"N": n, "K": 4096}, BLOCK_M=block_m)
        assert len(kept) == 1 and kept[0].kwargs["SPLIT_K"] == 1 and kept[0].kwargs["USE_DOT"] is use_dot
