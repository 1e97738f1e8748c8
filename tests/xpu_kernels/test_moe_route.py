"""Triton moe_route vs the anna-core torch reference, under the interpreter: the same experts exactly (logits
without near-ties), the weights to rounding, ties to the lower index, and clear errors."""

import itertools

import pytest
import torch
from anna_core.kernels.reference.routing import moe_route as reference

from tests.xpu_kernels._interp import require_triton_interpreter

require_triton_interpreter()

from anna_xpu_kernels import moe_route as kernel
from anna_xpu_kernels.probes import MAX_ROUTE_EXPERTS


def _logits(t, e, dtype, seed=0):
    """``[T, E]`` logits with distinct values in each row, at least 1/32 apart and exact in bfloat16 (each
    row a permutation of a grid in [-7, 7)): neighbouring probabilities differ by 3% or more."""
    gen = torch.Generator().manual_seed(seed)
    grid = (torch.arange(e) - e // 2) * max(1 / 32, 8 / e)
    shift = torch.randint(-3, 4, (t, 1), generator=gen).float()
    return (grid[torch.argsort(torch.rand(t, e, generator=gen), dim=-1)] + shift).to(dtype)


def _scale(e, dtype, seed=0):
    return (torch.rand(e, generator=torch.Generator().manual_seed(seed)) + 0.5).to(dtype)


def _tol(weights_dtype):
    # float32: exp and the K-term sum may differ from torch's by an ulp or two. bfloat16: the interpreter
    # rounds float32 -> bfloat16 toward zero, torch to nearest (tests/xpu_kernels/_interp.py): one ulp.
    if weights_dtype == torch.bfloat16:
        return {"atol": 1e-6, "rtol": 2**-7}
    return {"atol": 1e-7, "rtol": 2e-6}


def _cases():
    """Every (T, E, K) of T in 1, 3, 64, 300, E in 8, 16, 128, 256 and K in 1, 2, 4, 8, each with one of the
    eight (logits dtype, weights dtype, scale) combinations in turn (each combination covers every T and E)."""
    combos = list(itertools.product([torch.float32, torch.bfloat16], ["float32", "logits"], [False, True]))
    for i, (t, e, k) in enumerate(itertools.product([1, 3, 64, 300], [8, 16, 128, 256], [1, 2, 4, 8])):
        dtype, weights, scaled = combos[(i + i // 4) % len(combos)]
        yield pytest.param(t, e, k, dtype, weights, scaled, id=f"T{t}-E{e}-K{k}-{str(dtype)[6:]}-w_{weights}"
                           f"{'-scaled' if scaled else ''}")


@pytest.mark.parametrize("t, e, k, dtype, weights, scaled", list(_cases()))
def test_moe_route_matches_reference(poison_outputs, t, e, k, dtype, weights, scaled):
    logits = _logits(t, e, dtype, seed=t * 1000 + e + k)
    scale = _scale(e, dtype, seed=e) if scaled else None
    weights_dtype = torch.float32 if weights == "float32" else dtype
    got_w, got_ids = kernel.moe_route(logits, k, scale, weights_dtype)
    want_w, want_ids = reference(logits, k, scale, weights_dtype)
    assert got_w.dtype == weights_dtype and got_ids.dtype == torch.int64 and got_w.shape == got_ids.shape == (t, k)
    assert torch.equal(got_ids, want_ids)
    torch.testing.assert_close(got_w, want_w, **_tol(weights_dtype))


def test_float32_scale_with_bfloat16_logits_and_strided_rows(poison_outputs):
    """Gemma 4 in bfloat16 with a float32 per-expert scale; logits a column slice (row stride 160)."""
    wide = _logits(70, 160, torch.bfloat16, seed=5)
    logits = wide[:, 16:144]
    scale = _scale(128, torch.float32)
    got = kernel.moe_route(logits, 8, scale, torch.float32)
    want = reference(logits, 8, scale, torch.float32)
    assert torch.equal(got[1], want[1])
    torch.testing.assert_close(got[0], want[0], **_tol(torch.float32))


def test_float16_logits_and_random_values(poison_outputs):
    """Random float16 logits (ties rare but possible: both take the lower index); E not a power of two."""
    logits = torch.randn(33, 96, generator=torch.Generator().manual_seed(1)).to(torch.float16)
    got = kernel.moe_route(logits, 6, None, torch.float16)
    want = reference(logits, 6, None, torch.float16)
    assert torch.equal(got[1], want[1])
    torch.testing.assert_close(got[0], want[0], atol=1e-6, rtol=2**-10)


def test_ties_go_to_the_lower_expert_index(poison_outputs):
    logits = torch.tensor([[1.0, 2.0, 2.0, 2.0, 0.0, 2.0, 0.0, 0.0],
                           [3.0, 3.0, 1.0, 0.0, 5.0, 0.0, 0.0, 0.0],
                           [-torch.inf, 0.0, -torch.inf, -torch.inf, -torch.inf, -torch.inf, -torch.inf, -torch.inf],
                           [0.0] * 8])
    weights, ids = kernel.moe_route(logits, 3, None, torch.float32)
    assert ids.tolist() == [[1, 2, 3], [4, 0, 1], [1, 0, 2], [0, 1, 2]]
    assert torch.equal(ids, reference(logits, 3, None, torch.float32)[1])
    torch.testing.assert_close(weights, reference(logits, 3, None, torch.float32)[0], **_tol(torch.float32))


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # the interpreter's inf - inf
def test_empty_batch_and_non_finite_rows(poison_outputs):
    weights, ids = kernel.moe_route(torch.zeros(0, 16), 4, None, torch.float32)
    assert weights.shape == ids.shape == (0, 4)
    logits = torch.tensor([[torch.nan, 1.0, 2.0, 0.0], [torch.inf, 1.0, 2.0, 0.0], [-torch.inf] * 4,
                           [0.0, 1.0, 2.0, 3.0]])
    weights, ids = kernel.moe_route(logits, 2, torch.ones(4), torch.float32)
    assert weights[:3].isnan().all() and ids[:3].tolist() == [[0, 1]] * 3
    assert ids[3].tolist() == [3, 2] and not weights[3].isnan().any()


def test_the_widest_router_the_kernel_holds(poison_outputs):
    logits = torch.randn(2, MAX_ROUTE_EXPERTS, generator=torch.Generator().manual_seed(2))
    got = kernel.moe_route(logits, 8, None, torch.float32)
    want = reference(logits, 8, None, torch.float32)
    assert torch.equal(got[1], want[1])
    torch.testing.assert_close(got[0], want[0], **_tol(torch.float32))


@pytest.mark.parametrize("args, match", [
    ((torch.zeros(2, MAX_ROUTE_EXPERTS + 1), 2, None, torch.float32),
     f"E={MAX_ROUTE_EXPERTS + 1} experts exceed the Triton kernel's {MAX_ROUTE_EXPERTS}"),
    ((torch.zeros(2, 8), 9, None, torch.float32), r"top_k must be an int in \[1, E=8\], got 9"),
    ((torch.zeros(2, 8), 0, None, torch.float32), "top_k must be an int"),
    ((torch.zeros(2, 8, dtype=torch.float64), 2, None, torch.float32), "logits must be one of"),
    ((torch.zeros(2, 8), 2, torch.ones(8, dtype=torch.float64), torch.float32), "expert_scale must be one of"),
    ((torch.zeros(2, 8), 2, torch.ones(9), torch.float32), r"expert_scale must be a float \[E=8\]"),
    ((torch.zeros(2, 8, dtype=torch.bfloat16), 2, None, torch.float16), "weights_dtype must be"),
])
def test_bad_arguments_raise_value_errors(args, match):
    with pytest.raises(ValueError, match=f"moe_route: {match}"):
        kernel.moe_route(*args)


def test_rows_per_program():
    assert kernel.block_rows(1, 256) == kernel.block_rows(kernel.ONE_ROW_TOKENS, 1024) == 1
    assert kernel.block_rows(2048, 256) == 8 and kernel.block_rows(2048, 8) == 16 and kernel.block_rows(300, 1024) == 2
