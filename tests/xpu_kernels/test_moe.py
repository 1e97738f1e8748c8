"""Triton moe_experts (alignment + grouped GEMMs) vs the anna-core torch reference, under the interpreter
(the few-token path: test_moe_decode.py)."""

import pytest
import torch
from anna_core.kernels.reference.moe import moe_experts as reference
from anna_core.testing.host_reads import NoHostReads

from tests.xpu_kernels._interp import require_triton_interpreter, tol

require_triton_interpreter()

from anna_xpu_kernels import moe, moe_align


def _inputs(t, e, k, hidden, inter, dtype, *, ids_dtype=torch.int64, weights_dtype=torch.float32, seed=0,
            experts=None):
    """x, gate_up, down, routing weights and top-k ids (over ``experts`` only, when given)."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(t, hidden, generator=gen).to(dtype)
    gate_up = (torch.randn(e, 2 * inter, hidden, generator=gen) * hidden**-0.5 * 2).to(dtype)
    down = (torch.randn(e, hidden, inter, generator=gen) * inter**-0.5).to(dtype)
    logits = torch.randn(t, e, generator=gen)
    if experts is not None:
        logits[:, [i for i in range(e) if i not in experts]] = -torch.inf
    probs, ids = torch.topk(logits.softmax(-1), k)
    weights = (probs / probs.sum(-1, keepdim=True)).to(weights_dtype)
    return x, gate_up, down, weights, ids.to(ids_dtype)


def _tol(dtype, want):
    # bfloat16: besides the interpreter's round-toward-zero (tests/xpu_kernels/_interp.py), every one of the
    # op's six roundings truncates, and the down projection sums I such errors: a few bfloat16 ulps of the
    # output's scale
    if dtype == torch.bfloat16:
        return {"atol": 5e-2 * want.abs().max().item(), "rtol": 2e-2}
    return tol(dtype)


CASES = [  # T, E, K, H, I, dtype, activation, ids dtype, weights dtype
    (1, 8, 2, 32, 80, torch.float32, "silu", torch.int64, torch.float32),  # batch-1 decode; I: partial tiles
    (1, 16, 4, 48, 32, torch.bfloat16, "gelu_tanh", torch.int32, torch.bfloat16),
    (3, 16, 4, 64, 64, torch.float32, "gelu_tanh", torch.int32, torch.float32),  # some experts unused
    (3, 8, 2, 48, 16, torch.bfloat16, "silu", torch.int64, torch.bfloat16),
    (40, 16, 4, 64, 48, torch.float32, "silu", torch.int64, torch.float32),  # I not a power of two
    (40, 8, 2, 80, 32, torch.bfloat16, "gelu_tanh", torch.int32, torch.float32),  # H: a partial K tile
    (40, 12, 1, 32, 16, torch.float16, "silu", torch.int64, torch.float16),  # K = 1: no sum
    (50, 4, 4, 32, 16, torch.float32, "gelu_tanh", torch.int64, torch.float32),  # 50 pairs per expert: BLOCK_M 64
]


@pytest.mark.parametrize("t, e, k, hidden, inter, dtype, activation, ids_dtype, weights_dtype", CASES)
def test_moe_experts_matches_reference(poison_outputs, t, e, k, hidden, inter, dtype, activation, ids_dtype,
                                       weights_dtype):
    args = _inputs(t, e, k, hidden, inter, dtype, ids_dtype=ids_dtype, weights_dtype=weights_dtype, seed=t + e)
    got = moe.moe_experts(*args, activation, path="grouped")  # (the T = 1 cases would run the decode path)
    want = reference(*args, activation)
    assert got.dtype == dtype and got.shape == (t, hidden)
    torch.testing.assert_close(got, want, **_tol(dtype, want))


@pytest.mark.parametrize("k, experts", [(1, [3]), (2, [3, 6])])
def test_every_pair_on_the_same_experts(poison_outputs, k, experts):
    """40 tokens on one expert (three row blocks of 16, the last partial) or all on the same two."""
    x, gate_up, down, weights, ids = _inputs(40, 8, k, 32, 16, torch.float32, experts=experts)
    assert set(ids.unique().tolist()) == set(experts)
    got = moe.moe_experts(x, gate_up, down, weights, ids, "silu")
    torch.testing.assert_close(got, reference(x, gate_up, down, weights, ids, "silu"), **tol(torch.float32))


def test_alignment_groups_the_pairs_by_expert_in_padded_runs():
    ids = torch.tensor([[5, 1], [1, 0], [5, 1], [7, 5]], dtype=torch.int32)  # 8 pairs; experts 2, 3, 4, 6 unused
    block_m = 4
    blocks = moe_align.align(ids, 8, block_m)
    sorted_pairs, block_experts = blocks.sorted_pairs, blocks.block_experts
    assert blocks.num_blocks == moe_align.max_blocks(8, 8, block_m) == 8
    assert sorted_pairs.shape == (8 * block_m,) and (blocks.num_pairs, blocks.top_k) == (8, 2)
    used = blocks.num_padded.item() // block_m
    assert used == 4  # experts 0, 1, 5, 7: one block each
    runs = {block_experts[b].item(): sorted_pairs[b * block_m:(b + 1) * block_m].tolist() for b in range(used)}
    assert block_experts[:used].tolist() == [0, 1, 5, 7] and (block_experts[used:] == -1).all()
    flat = ids.reshape(-1).tolist()
    for expert, run in runs.items():  # each run: the expert's pairs (any order), then the sentinel 8
        pairs = [j for j, i in enumerate(flat) if i == expert]
        assert sorted(run[:len(pairs)]) == pairs and run[len(pairs):] == [8] * (block_m - len(pairs))
    assert (sorted_pairs[used * block_m:] == 8).all()


@pytest.mark.parametrize("pairs, experts, block_m", [(8, 256, 16), (256, 256, 16), (16384, 256, 64), (5, 3, 16)])
def test_max_blocks_bounds_the_worst_case(pairs, experts, block_m):
    bound = moe_align.max_blocks(pairs, experts, block_m)
    hit = min(pairs, experts)  # worst case: as many experts as possible, one pair more than a whole block each
    counts = [pairs // hit + (i < pairs % hit) for i in range(hit)]
    assert sum(-(-c // block_m) for c in counts) <= bound <= pairs


def test_block_m_grows_with_the_pairs_per_expert():
    assert moe_align.block_m_for(8, 256) == moe_align.block_m_for(256, 256) == 16  # decode
    assert moe_align.block_m_for(16384, 256) == 64  # a 2048-token prefill with K = 8
    assert moe_align.block_m_for(40 * 8, 8) == 32 and moe_align.block_m_for(50 * 8, 8) == 64


def test_no_host_reads_and_no_empty_rows():
    """No ``.item()`` / ``bool(tensor)`` (what the graph tests' fake capture catches; ``.tolist()`` it cannot
    see); and no rows at all."""
    args = _inputs(3, 8, 2, 32, 16, torch.float32)
    with torch.inference_mode(), NoHostReads():
        got = moe.moe_experts(*args, "silu")
    torch.testing.assert_close(got, reference(*args, "silu"), **tol(torch.float32))
    empty = moe.moe_experts(args[0][:0], args[1], args[2], args[3][:0], args[4][:0], "silu")
    assert empty.shape == (0, 32)


def test_bad_arguments_are_clear_errors():
    x, gate_up, down, weights, ids = _inputs(2, 4, 2, 32, 16, torch.float32)
    with pytest.raises(ValueError, match="moe_experts: activation must be one of"):
        moe.moe_experts(x, gate_up, down, weights, ids, "relu")
    with pytest.raises(ValueError, match="moe_experts: down must be"):
        moe.moe_experts(x, gate_up, down[:, :, :8], weights, ids, "silu")
    with pytest.raises(ValueError, match="moe_experts: expert_ids must be int32 or int64"):
        moe.moe_experts(x, gate_up, down, weights, ids.float(), "silu")
    with pytest.raises(ValueError, match="moe_experts: weights must be float32 or x's dtype"):
        moe.moe_experts(x, gate_up, down, weights.double(), ids, "silu")
    with pytest.raises(ValueError, match="moe_experts: x must be one of"):
        moe.moe_experts(x.double(), gate_up.double(), down.double(), weights, ids, "silu")
