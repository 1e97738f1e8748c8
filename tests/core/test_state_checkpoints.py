"""In-pass recurrent-state checkpoints: the plan (build_checkpoints), the rule run in rounds and the conv
snapshots, checked against the torch reference ops on tiny float32 shapes (CPU)."""

import pytest
import torch
from anna_core.engine.checkpoint_plan import CheckpointTarget, SeqCheckpoints, build_checkpoints
from anna_core.kernels.reference.conv1d import causal_conv1d_prefill
from anna_core.kernels.reference.gated_delta_rule import gated_delta_rule_prefill
from anna_core.layers.state_checkpoints import (
    StateCheckpoints,
    run_in_rounds,
    save_conv_checkpoints,
)
from anna_core.model import ModelCapabilities

CPU = torch.device("cpu")
W1 = 3  # W - 1: a width-4 conv (Qwen3.5)
H_K, H_V, D_K, D_V = 2, 4, 4, 3
NUM_SLOTS, NUM_ENTRIES = 4, 8
SCALE = D_K**-0.5

# Two sequences in one pass: rows 0..19 (slot 3, checkpoints at offsets 8 and 16 -> store entries 5 and 2)
# and rows 20..31 (slot 1, a checkpoint at offset 8 -> entry 7).
TWO = [SeqCheckpoints(row=0, num_rows=20, slot=3, points=[(8, 5), (16, 2)]),
       SeqCheckpoints(row=20, num_rows=12, slot=1, points=[(8, 7)])]
TOTAL = 32


def plan(seqs, conv_store=(), recurrent_store=()):
    return build_checkpoints(seqs, W1, list(conv_store), list(recurrent_store), CPU)


def as_list(t):
    return None if t is None else t.tolist()


def test_plan_of_two_sequences_interleaves_their_segments_in_rounds():
    ckpt = plan(TWO)
    got = [(r.rows.tolist(), r.cu_seqlens.tolist(), r.slots.tolist(), as_list(r.save_slots), as_list(r.save_dst))
           for r in ckpt.rounds]
    assert got == [
        # round 0: both sequences' first segments; both end at a checkpoint
        ([*range(0, 8), *range(20, 28)], [0, 8, 16], [3, 1], [3, 1], [5, 7]),
        # round 1: seq 0's segment 8..16 (ends at its second checkpoint), seq 1's tail 28..32 (no checkpoint)
        ([*range(8, 16), *range(28, 32)], [0, 8, 12], [3, 1], [3], [2]),
        # round 2: seq 0's tail only
        ([*range(16, 20)], [0, 4], [3], None, None),
    ]
    assert all(r.rows.dtype == torch.int64 and r.slots.dtype == torch.int64 for r in ckpt.rounds)
    assert all(r.cu_seqlens.dtype == torch.int32 for r in ckpt.rounds)
    assert ckpt.conv_rows.tolist() == [[5, 6, 7], [13, 14, 15], [25, 26, 27]] and ckpt.conv_rows.dtype == torch.int64
    assert ckpt.conv_dst.tolist() == [5, 2, 7]
    # the rounds' rows partition the pass
    assert sorted(i for r in ckpt.rounds for i in r.rows.tolist()) == list(range(TOTAL))


def test_plan_of_one_sequence_uses_slices():
    ckpt = plan([SeqCheckpoints(row=0, num_rows=20, slot=2, points=[(8, 4), (16, 6)])])
    assert [r.rows for r in ckpt.rounds] == [slice(0, 8), slice(8, 16), slice(16, 20)]
    assert [r.cu_seqlens.tolist() for r in ckpt.rounds] == [[0, 8], [0, 8], [0, 4]]
    assert [r.slots.tolist() for r in ckpt.rounds] == [[2], [2], [2]]
    assert [as_list(r.save_slots) for r in ckpt.rounds] == [[2], [2], None]
    assert [as_list(r.save_dst) for r in ckpt.rounds] == [[4], [6], None]
    assert ckpt.conv_rows.tolist() == [[5, 6, 7], [13, 14, 15]] and ckpt.conv_dst.tolist() == [4, 6]


def test_plan_with_a_sequence_without_checkpoints_runs_it_in_the_first_round():
    ckpt = plan([SeqCheckpoints(row=0, num_rows=5, slot=0, points=[]),
                 SeqCheckpoints(row=5, num_rows=10, slot=2, points=[(4, 1)])])
    assert [(r.rows.tolist(), r.cu_seqlens.tolist(), r.slots.tolist(), as_list(r.save_dst)) for r in ckpt.rounds] == [
        ([*range(0, 5), *range(5, 9)], [0, 5, 9], [0, 2], [1]),
        ([*range(9, 15)], [0, 6], [2], None),
    ]
    assert ckpt.conv_rows.tolist() == [[6, 7, 8]] and ckpt.conv_dst.tolist() == [1]


@pytest.mark.parametrize("points, match", [
    ([(2, 0)], "conv inputs of an earlier"),  # offset < W - 1
    ([(16, 0), (8, 1)], "not ascending"),  # unsorted
    ([(8, 0), (8, 1)], "not ascending"),  # duplicate
    ([(0, 0)], "not ascending"),  # at the sequence's first row
    ([(20, 0)], "not ascending"),  # at its end (== num_rows): the step's end is captured after it
    ([(8, 0), (25, 1)], "not ascending"),  # past its end
    ([(-1, 0)], "not ascending"),
])
def test_plan_rejects_bad_offsets(points, match):
    with pytest.raises(ValueError, match=match):
        plan([SeqCheckpoints(row=0, num_rows=20, slot=0, points=points)])
    with pytest.raises(ValueError, match=match):  # also as the second sequence of a pass
        plan([SeqCheckpoints(row=0, num_rows=4, slot=1, points=[]),
              SeqCheckpoints(row=4, num_rows=20, slot=0, points=points)])


def test_offset_equal_to_the_conv_width_is_accepted():
    ckpt = plan([SeqCheckpoints(row=0, num_rows=6, slot=0, points=[(W1, 3)])])
    assert ckpt.conv_rows.tolist() == [[0, 1, 2]] and ckpt.conv_dst.tolist() == [3]


def test_checkpoint_target_conv_width_and_model_opt_in():
    target = CheckpointTarget([torch.zeros(NUM_ENTRIES + 1, 6, W1)], [torch.zeros(NUM_ENTRIES + 1, H_V, D_K, D_V)],
                              scratch=NUM_ENTRIES, interval=8)
    assert target.conv_width == W1

    assert ModelCapabilities(state_checkpoints=True).state_checkpoints and not ModelCapabilities().state_checkpoints


# -- the recurrent rule in rounds ---------------------------------------------------------------

def inputs(seed):
    gen = torch.Generator().manual_seed(seed)
    q = torch.nn.functional.normalize(torch.randn(TOTAL, H_K, D_K, generator=gen), dim=-1)
    k = torch.nn.functional.normalize(torch.randn(TOTAL, H_K, D_K, generator=gen), dim=-1)
    v = torch.randn(TOTAL, H_V, D_V, generator=gen)
    g = -torch.nn.functional.softplus(torch.randn(TOTAL, H_V, generator=gen)) * 0.5  # log decay <= 0
    beta = torch.sigmoid(torch.randn(TOTAL, H_V, generator=gen))
    return q, k, v, g, beta


def reference(x, rows, cu, states, slots):
    q, k, v, g, beta = x
    return gated_delta_rule_prefill(q[rows], k[rows], v[rows], g[rows], beta[rows],
                                    torch.tensor(cu, dtype=torch.int32), states, torch.tensor(slots), SCALE)


@pytest.mark.parametrize("initial", ["zero", "restored"])
def test_rule_in_rounds_matches_one_pass_and_saves_each_prefix_state(initial):
    x = inputs(0)
    q, k, v, g, beta = x
    gen = torch.Generator().manual_seed(1)
    init = (torch.zeros(NUM_SLOTS, H_V, D_K, D_V) if initial == "zero"
            else torch.randn(NUM_SLOTS, H_V, D_K, D_V, generator=gen) * 0.3)  # e.g. restored snapshots
    states = init.clone()
    store = torch.full((NUM_ENTRIES, H_V, D_K, D_V), float("nan"))
    ckpt = plan(TWO, recurrent_store=[torch.zeros(1), store])  # layer 1 of two recurrent layers

    def rule(rows, cu_seqlens, slots):
        return gated_delta_rule_prefill(q[rows], k[rows], v[rows], g[rows], beta[rows], cu_seqlens, states, slots,
                                        SCALE)

    out = run_in_rounds(ckpt, 1, states, TOTAL, rule)

    whole_states = init.clone()
    whole = reference(x, slice(None), [0, 20, 32], whole_states, [3, 1])
    assert out.shape == (TOTAL, H_V, D_V) and out.dtype == torch.float32
    torch.testing.assert_close(out, whole, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(states, whole_states, atol=1e-5, rtol=1e-5)  # final slot states (and others untouched)
    torch.testing.assert_close(states[[0, 2]], init[[0, 2]], atol=0, rtol=0)

    # each written entry: the state after the sequence's first `offset` rows alone, from its initial state
    for entry, slot, rows in [(5, 3, slice(0, 8)), (2, 3, slice(0, 16)), (7, 1, slice(20, 28))]:
        pool = init.clone()
        reference(x, rows, [0, rows.stop - rows.start], pool, [slot])
        torch.testing.assert_close(store[entry], pool[slot], atol=1e-5, rtol=1e-5)
    untouched = [i for i in range(NUM_ENTRIES) if i not in (5, 2, 7)]
    assert torch.isnan(store[untouched]).all()


def test_rule_in_rounds_of_one_sequence_with_slices():
    x = inputs(2)
    q, k, v, g, beta = x
    states = torch.zeros(NUM_SLOTS, H_V, D_K, D_V)
    store = torch.full((NUM_ENTRIES, H_V, D_K, D_V), float("nan"))
    ckpt = plan([SeqCheckpoints(row=0, num_rows=TOTAL, slot=2, points=[(8, 0), (24, 6)])], recurrent_store=[store])
    seen = []

    def rule(rows, cu_seqlens, slots):
        seen.append(rows)
        return gated_delta_rule_prefill(q[rows], k[rows], v[rows], g[rows], beta[rows], cu_seqlens, states, slots,
                                        SCALE)

    out = run_in_rounds(ckpt, 0, states, TOTAL, rule)
    assert seen == [slice(0, 8), slice(8, 24), slice(24, 32)]
    whole_states = torch.zeros_like(states)
    torch.testing.assert_close(out, reference(x, slice(None), [0, TOTAL], whole_states, [2]), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(states, whole_states, atol=1e-5, rtol=1e-5)
    for entry, n in [(0, 8), (6, 24)]:
        pool = torch.zeros_like(states)
        reference(x, slice(0, n), [0, n], pool, [2])
        torch.testing.assert_close(store[entry], pool[2], atol=1e-5, rtol=1e-5)
    assert torch.isnan(store[[1, 2, 3, 4, 5, 7]]).all()


def test_run_in_rounds_without_a_round_raises():
    ckpt = StateCheckpoints(rounds=[], conv_rows=torch.zeros(0, W1, dtype=torch.int64),
                            conv_dst=torch.zeros(0, dtype=torch.int64), conv_store=[], recurrent_store=[])
    with pytest.raises(ValueError, match="without a round"):
        run_in_rounds(ckpt, 0, torch.zeros(1, 1, 1, 1), 0, lambda rows, cu, slots: torch.zeros(0))


# -- conv snapshots ----------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_conv_checkpoints_are_the_last_inputs_before_each_checkpoint(dtype):
    channels = 6
    x = torch.randn(TOTAL, channels, generator=torch.Generator().manual_seed(3))
    other = torch.full((NUM_ENTRIES, channels, W1), float("nan"), dtype=dtype)
    store = torch.full((NUM_ENTRIES, channels, W1), float("nan"), dtype=dtype)
    ckpt = plan(TWO, conv_store=[other, store])
    save_conv_checkpoints(ckpt, 1, x)
    for entry, end in [(5, 8), (2, 16), (7, 28)]:  # pass rows end - 3 .. end - 1, oldest first, as [C, W-1]
        expected = torch.stack([x[end - 3], x[end - 2], x[end - 1]], dim=1).to(dtype)
        assert store[entry].shape == (channels, W1)
        torch.testing.assert_close(store[entry], expected, atol=0, rtol=0)
    assert torch.isnan(store[[0, 1, 3, 4, 6]]).all() and torch.isnan(other).all()  # other entries / layers untouched


def test_conv_checkpoints_equal_the_conv_state_after_the_prefix():
    """What the reference conv leaves in a slot after a sequence's first ``offset`` inputs (zero state)."""
    channels = 5
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(TOTAL, channels, generator=gen)
    weight = torch.randn(channels, W1 + 1, generator=gen)
    store = torch.full((NUM_ENTRIES, channels, W1), float("nan"))
    save_conv_checkpoints(plan(TWO, conv_store=[store]), 0, x)
    for entry, rows in [(5, slice(0, 8)), (2, slice(0, 16)), (7, slice(20, 28))]:
        conv_states = torch.zeros(NUM_SLOTS, channels, W1)
        causal_conv1d_prefill(x[rows], weight, None, torch.tensor([0, rows.stop - rows.start], dtype=torch.int32),
                              conv_states, torch.tensor([1]), "silu")
        torch.testing.assert_close(store[entry], conv_states[1], atol=0, rtol=0)
