"""The fla prefill wrapper's host-side parts (chunk-index memo, argument checks before any launch, the
probe's check of fla's private API). fla's kernels need CUDA: the GPU microbenchmark checks their
numbers; here fla's modules are stand-ins."""

import sys
import types

import pytest
import torch

from tests.xpu_kernels._interp import require_triton_interpreter

require_triton_interpreter()

from anna_xpu_kernels import fla_prefill, probes


@pytest.fixture
def fake_index(monkeypatch):
    """``fla.ops.utils.index.prepare_chunk_indices`` recording the tensor it gets."""
    seen = []

    def prepare_chunk_indices(cu_seqlens, chunk_size, cu_seqlens_cpu=None):
        seen.append(cu_seqlens)
        assert cu_seqlens.dtype == torch.long and torch.equal(cu_seqlens_cpu, cu_seqlens.cpu())
        return torch.zeros(int(cu_seqlens[-1]) // chunk_size + 1, 2, dtype=torch.long)

    for name in ("fla", "fla.ops", "fla.ops.utils"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "fla.ops.utils.index",
                        types.SimpleNamespace(prepare_chunk_indices=prepare_chunk_indices))
    return seen


def test_chunk_indices_once_per_tensor_and_fla_gets_a_fresh_copy(fake_index):
    memo = fla_prefill._ChunkIndexMemo()
    cu = torch.tensor([0, 70, 130], dtype=torch.int64)
    first = memo.get(cu)
    assert memo.get(cu) is first and len(fake_index) == 1  # every layer of a pass: one conversion
    assert first.cu_seqlens is not cu  # fla caches by identity: never hand it the caller's tensor
    cu[2] = 200  # rewritten in place (outside inference mode: its version counter moves)
    second = memo.get(cu)
    assert len(fake_index) == 2 and second.cu_seqlens is not first.cu_seqlens
    assert second.cu_seqlens.tolist() == [0, 70, 200]
    third = memo.get(torch.tensor([0, 5], dtype=torch.int32))  # another tensor
    assert len(fake_index) == 3 and third.cu_seqlens.dtype == torch.long


def test_the_rounds_of_a_pass_share_one_conversion_per_tensor(fake_index):
    """A pass that takes state snapshots runs the rule in rounds, each with its own cu_seqlens, in every layer:
    each round's tensor is converted once for all layers; the oldest is dropped beyond the capacity."""
    memo = fla_prefill._ChunkIndexMemo(capacity=3)
    rounds = [torch.tensor([0, 8, 16 - r], dtype=torch.int32) for r in range(3)]
    with torch.inference_mode():
        rounds = [r.clone() for r in rounds]
    for _layer in range(4):
        got = [memo.get(r) for r in rounds]
    assert len(fake_index) == 3 and memo.num_conversions == 3
    assert [g.cu_seqlens.tolist() for g in got] == [[0, 8, 16], [0, 8, 15], [0, 8, 14]]
    memo.get(torch.tensor([0, 4, 9], dtype=torch.int32))  # a fourth tensor drops the oldest
    assert memo.get(rounds[2]) is got[2] and memo.num_conversions == 4
    memo.get(rounds[0])
    assert memo.num_conversions == 5


def _fused_args(t=4, states_shape=(3, 2, 8, 8), cu=(0, 4)):
    qkv = torch.randn(t, 2 * 1 * 8 + 2 * 8)
    ab = torch.randn(t, 4)
    return (qkv, ab[:, :2], ab[:, 2:], -torch.rand(2), torch.randn(2), torch.tensor(cu, dtype=torch.int32),
            torch.zeros(states_shape), torch.tensor([1]), 8 ** -0.5, 1, 8, 8)


def test_fused_prefill_checks_before_launching(monkeypatch):
    monkeypatch.setattr(fla_prefill, "gdn_prefill_prep", lambda *a: pytest.fail("launched before the checks"))
    with pytest.raises(ValueError, match="states must be float32"):
        fla_prefill.fused_prefill(*_fused_args(states_shape=(3, 2, 8, 4)))
    with pytest.raises(ValueError, match="4 tokens but cu_seqlens"):
        fla_prefill.fused_prefill(*_fused_args(cu=(0,)))
    args = list(_fused_args())
    args[7] = torch.tensor([1, 2])  # two slots for one sequence
    with pytest.raises(ValueError, match="slots"):
        fla_prefill.fused_prefill(*args)


def test_prefill_op_rejects_tokens_without_a_sequence():
    q = torch.randn(3, 1, 8)
    with pytest.raises(ValueError, match="3 tokens but cu_seqlens"):
        fla_prefill.gated_delta_rule_prefill(q, q, torch.randn(3, 2, 8), -torch.rand(3, 2), torch.rand(3, 2),
                                             torch.tensor([0], dtype=torch.int32), torch.zeros(2, 2, 8, 8),
                                             torch.zeros(0, dtype=torch.long), 1.0)


def _forward(q, k, v, g, beta, scale, initial_state, output_final_state, state_v_first=False, cu_seqlens=None,
             cp_context=None, chunk_indices=None, chunk_size=64):
    return None


def _forward_renamed(q, k, v, g, beta, scale, h0, output_final_state, cu_seqlens=None, chunk_indices=None,
                     chunk_size=64):
    return None


def _forward_no_indices(q, k, v, g, beta, scale, initial_state, output_final_state, cu_seqlens=None):
    return None


def test_fla_api_check_accepts_the_forward_anna_calls_and_nothing_else():
    index = types.SimpleNamespace(prepare_chunk_indices=lambda *a, **k: None)
    assert probes.fla_api_ok(types.SimpleNamespace(chunk_gated_delta_rule_fwd=_forward), index) is True
    assert probes.fla_api_ok(types.SimpleNamespace(chunk_gated_delta_rule_fwd=_forward_renamed), index) is False
    assert probes.fla_api_ok(types.SimpleNamespace(chunk_gated_delta_rule_fwd=_forward_no_indices), index) is False
    assert probes.fla_api_ok(types.SimpleNamespace(), index) is False
    assert probes.fla_api_ok(types.SimpleNamespace(chunk_gated_delta_rule_fwd=_forward), types.SimpleNamespace()) is False
