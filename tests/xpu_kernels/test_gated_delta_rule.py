"""Triton gated_delta_rule_decode vs the anna-core torch reference (interpreter); fla's prefill registration."""

import pytest
import torch
import torch.nn.functional as F
from anna_core.kernels.reference import gated_delta_rule as ref

from tests.xpu_kernels._interp import require_triton_interpreter, tol

require_triton_interpreter()

from anna_xpu_kernels import gated_delta_rule

POOL = 5


def _inputs(dtype, batch, h_k, h_v, d_k, d_v, seed):
    gen = torch.Generator().manual_seed(seed)
    # q and k as strided views of one merged projection, like the model's qkv split.
    qk = torch.randn(batch, 2, h_k, d_k, generator=gen)
    qk = F.normalize(qk, dim=-1).to(dtype)
    q, k = qk[:, 0], qk[:, 1]
    v = torch.randn(batch, h_v, d_v, generator=gen).to(dtype)
    g = -torch.rand(batch, h_v, generator=gen) * 2  # float32 log decay <= 0
    beta = torch.rand(batch, h_v, generator=gen).to(dtype)
    states = torch.randn(POOL, h_v, d_k, d_v, generator=gen) * 0.5
    return q, k, v, g, beta, states


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("h_k,h_v,d_k,d_v", [(2, 4, 16, 40), (1, 1, 24, 16)])
def test_decode_matches_reference(poison_outputs, dtype, h_k, h_v, d_k, d_v):
    q, k, v, g, beta, states = _inputs(dtype, 3, h_k, h_v, d_k, d_v, seed=d_k + d_v)
    slots = torch.tensor([3, 0, 4])
    mine, theirs = states.clone(), states.clone()
    got = gated_delta_rule.gated_delta_rule_decode(q, k, v, g, beta, mine, slots, d_k ** -0.5)
    want = ref.gated_delta_rule_decode(q, k, v, g, beta, theirs, slots, d_k ** -0.5)
    assert got.dtype == dtype and got.shape == (3, h_v, d_v)
    torch.testing.assert_close(got, want, **tol(dtype))
    torch.testing.assert_close(mine, theirs, **tol(torch.float32))  # the state is float32 in both
    assert torch.equal(mine[[1, 2]], states[[1, 2]])  # slots not in the batch


def test_decode_steps_follow_the_recurrence(poison_outputs):
    """Three steps in place equal the reference's three steps (the state really carries over)."""
    mine = theirs = None
    for step in range(3):
        q, k, v, g, beta, states = _inputs(torch.float32, 2, 2, 4, 16, 16, seed=100 + step)
        if mine is None:
            mine, theirs = states.clone(), states.clone()
        slots = torch.tensor([1, 3])
        got = gated_delta_rule.gated_delta_rule_decode(q, k, v, g, beta, mine, slots, 0.25)
        want = ref.gated_delta_rule_decode(q, k, v, g, beta, theirs, slots, 0.25)
        torch.testing.assert_close(got, want, **tol(torch.float32))
    torch.testing.assert_close(mine, theirs, **tol(torch.float32))


def test_decode_bad_arguments_are_clear_errors():
    q, k, v, g, beta, states = _inputs(torch.float32, 2, 2, 4, 16, 16, seed=0)
    with pytest.raises(ValueError, match="states must be float32"):
        gated_delta_rule.gated_delta_rule_decode(q, k, v, g, beta, states.double(), torch.tensor([0, 1]), 1.0)
    with pytest.raises(ValueError, match="multiple of H_k"):
        gated_delta_rule.gated_delta_rule_decode(q, k, v[:, :3], g[:, :3], beta[:, :3], states[:, :3],
                                                 torch.tensor([0, 1]), 1.0)
