"""The few-token path of the Triton moe_experts op (per-pair GEMVs, the sum over K fused) vs the torch
reference and vs the grouped GEMMs, and when the op takes it (interpreter)."""

import pytest
import torch
from anna_core.kernels.reference.moe import moe_experts as reference
from anna_core.testing.host_reads import NoHostReads

from tests.xpu_kernels._interp import require_triton_interpreter, tol
from tests.xpu_kernels.test_moe import _inputs, _tol

require_triton_interpreter()

from anna_xpu_kernels import moe, moe_decode

CASES = [  # T, E, K, H, I, dtype, activation, ids dtype, weights dtype
    (1, 8, 2, 32, 80, torch.float32, "silu", torch.int64, torch.float32),  # I: a partial column tile
    (1, 256, 8, 64, 32, torch.bfloat16, "silu", torch.int64, torch.bfloat16),  # 35B-A3B's E and K
    (2, 16, 8, 48, 16, torch.bfloat16, "gelu_tanh", torch.int32, torch.float32),  # H, I: partial K tiles
    (2, 256, 2, 32, 48, torch.float32, "gelu_tanh", torch.int32, torch.float32),
    (4, 8, 2, 32, 32, torch.bfloat16, "gelu_tanh", torch.int64, torch.float32),  # experts shared across tokens
    (4, 16, 8, 32, 16, torch.float32, "silu", torch.int64, torch.float32),  # half the experts: many repeats
    (4, 256, 8, 32, 16, torch.float16, "silu", torch.int32, torch.float16),
]


@pytest.mark.parametrize("t, e, k, hidden, inter, dtype, activation, ids_dtype, weights_dtype", CASES)
def test_decode_path_matches_the_reference(poison_outputs, t, e, k, hidden, inter, dtype, activation, ids_dtype,
                                           weights_dtype):
    args = _inputs(t, e, k, hidden, inter, dtype, ids_dtype=ids_dtype, weights_dtype=weights_dtype, seed=t + e + k)
    got = moe.moe_experts(*args, activation, path="decode")
    want = reference(*args, activation)
    assert got.dtype == dtype and got.shape == (t, hidden)
    torch.testing.assert_close(got, want, **_tol(dtype, want))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_every_token_on_the_same_experts(poison_outputs, dtype):
    """Four tokens all on experts 3 and 6: each pair reads its expert again, the result is the same."""
    x, gate_up, down, weights, ids = _inputs(4, 8, 2, 32, 16, dtype, experts=[3, 6], seed=5)
    assert set(ids.unique().tolist()) == {3, 6}
    got = moe.moe_experts(x, gate_up, down, weights, ids, "silu", path="decode")
    want = reference(x, gate_up, down, weights, ids, "silu")
    torch.testing.assert_close(got, want, **_tol(dtype, want))


@pytest.mark.parametrize("dtype, activation", [(torch.float32, "gelu_tanh"), (torch.bfloat16, "silu")])
def test_decode_and_grouped_paths_agree(dtype, activation):
    """Both paths round each term the same way and add the K terms in float32: in float32 they agree to
    the summation order; in bfloat16 to an ulp of the output (the products' float32 sums differ in order)."""
    args = _inputs(2, 16, 4, 64, 48, dtype, seed=11)
    decode = moe.moe_experts(*args, activation, path="decode")
    grouped = moe.moe_experts(*args, activation, path="grouped")
    scale = grouped.abs().max().item()
    torch.testing.assert_close(decode, grouped, **(tol(dtype) if dtype == torch.float32
                                                   else {"atol": 2e-2 * scale, "rtol": 1e-2}))


def test_strided_routing_tensors_and_no_host_reads():
    """Routing tensors that are column slices (not contiguous) are flattened on the device, and nothing
    is read on the host."""
    x, gate_up, down, weights, ids = _inputs(2, 16, 4, 32, 16, torch.float32, seed=3)
    wide_w, wide_ids = (torch.stack([a, a], 2).reshape(a.shape[0], -1)[:, ::2] for a in (weights, ids))
    assert not wide_ids.is_contiguous() and torch.equal(wide_ids, ids)
    with torch.inference_mode(), NoHostReads():
        got = moe.moe_experts(x, gate_up, down, wide_w, wide_ids, "silu", path="decode")
    torch.testing.assert_close(got, reference(x, gate_up, down, weights, ids, "silu"), **tol(torch.float32))


def test_distinct_share_and_the_dispatch_predicate():
    share = moe_decode.expected_distinct_share
    assert share(1, 8, 256) == 1.0 and share(1, 8, 8) == 1.0  # one token's choices are distinct
    assert share(2, 8, 256) == pytest.approx(256 * (1 - (248 / 256) ** 2) / 16)
    assert share(4, 8, 256) == pytest.approx(0.9541, abs=1e-4)
    # 35B-A3B (E = 256, K = 8) and Gemma 4 26B-A4B (E = 128, K = 8): every T up to 4
    assert all(moe_decode.takes(t, 8, e) for t in (1, 2, 3, 4) for e in (128, 256))
    assert not moe_decode.takes(5, 8, 256)  # more tokens: the grouped GEMMs
    assert not moe_decode.takes(0, 8, 256)
    assert moe_decode.takes(1, 2, 8) and not moe_decode.takes(2, 2, 8)  # few experts: pairs share them
    assert not moe_decode.takes(4, 8, 16) and not moe_decode.takes(4, 2, 8)


def test_moe_experts_dispatches_on_the_predicate(monkeypatch):
    calls = []
    real = moe_decode.experts
    monkeypatch.setattr(moe_decode, "experts", lambda *a: calls.append(a[0].shape[0]) or real(*a))
    for t, e, k in ((1, 8, 2), (2, 256, 2), (4, 8, 2), (6, 256, 2)):
        args = _inputs(t, e, k, 32, 16, torch.float32, seed=t)
        got = moe.moe_experts(*args, "silu")
        torch.testing.assert_close(got, reference(*args, "silu"), **tol(torch.float32))
    assert calls == [1, 2]  # T = 4 on 8 experts shares them; T = 6 is beyond MAX_TOKENS
    with pytest.raises(ValueError, match="moe_experts: path must be one of"):
        moe.moe_experts(*args, "silu", path="gemv")


@pytest.mark.parametrize("up, down", [  # (BLOCK_N, BLOCK_K, DEPTH, warps) of each launch
    ((16, 32, 1, 4), (16, 16, 1, 4)),  # whole tiles along H (64) and I (48), one tile ahead
    ((8, 64, 2, 2), (32, 32, 2, 4)),  # two ahead; I: a partial tile, BLOCK_N wider than H's rest
    ((4, 128, 2, 4), (8, 64, 2, 2)),  # one tile longer than H and I: the loads ahead re-read it
])
def test_each_launch_configuration(poison_outputs, up, down):
    """Every depth of loads ahead, whole and partial tiles along the reduction, the down launch's
    column blocks partly past H (3 tokens of 4 choices; H = 64, I = 48)."""
    args = _inputs(3, 16, 4, 64, 48, torch.float32, seed=7)
    configs = tuple(moe_decode.DecodeConfig(*c) for c in (up, down))
    got = moe_decode.experts(*args, "gelu_tanh", configs=configs)
    torch.testing.assert_close(got, reference(*args, "gelu_tanh"), **tol(torch.float32))


@pytest.mark.parametrize("up, down", [((8, 64, 3, 2), (16, 16, 1, 4)), ((16, 32, 1, 4), (32, 32, 3, 4))])
def test_a_deeper_prefetch_than_a_kernel_rotates_is_refused(up, down):
    """Loads ahead beyond what a kernel rotates (2 tiles) would skip tiles: refused at compile."""
    args = _inputs(1, 16, 4, 64, 48, torch.float32, seed=3)
    configs = tuple(moe_decode.DecodeConfig(*c) for c in (up, down))
    with pytest.raises(Exception, match="rotates at most"):
        moe_decode.experts(*args, "silu", configs=configs)
