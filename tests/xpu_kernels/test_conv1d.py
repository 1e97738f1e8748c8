"""Triton causal_conv1d_update / causal_conv1d_prefill vs the anna-core torch references (interpreter)."""

import pytest
import torch
from anna_core.kernels.reference import conv1d as ref

from tests.xpu_kernels._interp import require_triton_interpreter, tol

require_triton_interpreter()

from anna_xpu_kernels import conv1d

DTYPES = [torch.float32, torch.bfloat16]
CHANNELS = 40  # not a multiple of the interpreter's 32-channel tile
POOL = 6


def _params(dtype, width, bias, seed):
    gen = torch.Generator().manual_seed(seed)
    weight = torch.randn(CHANNELS, width, generator=gen)
    b = torch.randn(CHANNELS, generator=gen) if bias else None
    states = torch.randn(POOL, CHANNELS, width - 1, generator=gen).to(dtype)
    return gen, weight, b, states


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("width,bias,activation", [(4, True, "silu"), (4, False, None), (2, True, None), (1, False, "silu")])
def test_update_matches_reference(poison_outputs, dtype, width, bias, activation):
    gen, weight, b, states = _params(dtype, width, bias, seed=width)
    slots = torch.tensor([4, 1, 2])
    wide = torch.randn(3, 2 * CHANNELS, generator=gen).to(dtype)
    x = wide[:, CHANNELS:]  # strided rows, as a slice of a merged projection
    mine, theirs = states.clone(), states.clone()
    got = conv1d.causal_conv1d_update(x, weight, b, mine, slots, activation)
    want = ref.causal_conv1d_update(x, weight, b, theirs, slots, activation)
    torch.testing.assert_close(got, want, **tol(dtype))
    torch.testing.assert_close(mine, theirs, atol=0, rtol=0)  # the state only moves values, no arithmetic
    untouched = [s for s in range(POOL) if s not in slots.tolist()]
    assert torch.equal(mine[untouched], states[untouched])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("width,bias,activation", [(4, True, "silu"), (3, False, None), (1, True, None)])
def test_prefill_matches_reference(poison_outputs, dtype, width, bias, activation):
    gen, weight, b, states = _params(dtype, width, bias, seed=10 + width)
    lens = [11, 1, 2, 5]  # shorter than W-1 (keeps old state columns), a token tile boundary (8)
    cu = torch.tensor([0, 11, 12, 14, 19], dtype=torch.int32)
    slots = torch.tensor([5, 0, 3, 1])
    x = torch.randn(sum(lens), CHANNELS, generator=gen).to(dtype)
    mine, theirs = states.clone(), states.clone()
    got = conv1d.causal_conv1d_prefill(x, weight, b, cu, mine, slots, activation)
    want = ref.causal_conv1d_prefill(x, weight, b, cu, theirs, slots, activation)
    torch.testing.assert_close(got, want, **tol(dtype))
    torch.testing.assert_close(mine, theirs, atol=0, rtol=0)
    assert torch.equal(mine[[2, 4]], states[[2, 4]])  # slots not in the batch


def test_prefill_then_update_continues_the_sequence(poison_outputs):
    """Prefill of 6 tokens then one update equals prefill of all 7 tokens (state carried across calls)."""
    gen, weight, b, states = _params(torch.float32, 4, True, seed=3)
    x = torch.randn(7, CHANNELS, generator=gen)
    slots = torch.tensor([2])
    split = states.clone()
    conv1d.causal_conv1d_prefill(x[:6], weight, b, torch.tensor([0, 6], dtype=torch.int32), split, slots, "silu")
    last = conv1d.causal_conv1d_update(x[6:], weight, b, split, slots, "silu")
    whole_states = states.clone()
    whole = conv1d.causal_conv1d_prefill(x, weight, b, torch.tensor([0, 7], dtype=torch.int32), whole_states, slots,
                                         "silu")
    torch.testing.assert_close(last, whole[6:], **tol(torch.float32))
    torch.testing.assert_close(split, whole_states, **tol(torch.float32))


def test_conv_bad_arguments_are_clear_errors():
    weight = torch.randn(CHANNELS, 4)
    states = torch.zeros(POOL, CHANNELS, 3)
    with pytest.raises(ValueError, match="conv_states must be"):
        conv1d.causal_conv1d_update(torch.randn(2, CHANNELS), weight, None, states[:, :, :2], torch.tensor([0, 1]), None)
    with pytest.raises(ValueError, match="activation must be"):
        conv1d.causal_conv1d_update(torch.randn(2, CHANNELS), weight, None, states, torch.tensor([0, 1]), "relu")
    with pytest.raises(ValueError, match="slots must be"):
        conv1d.causal_conv1d_prefill(torch.randn(3, CHANNELS), weight, None, torch.tensor([0, 3], dtype=torch.int32),
                                     states, torch.tensor([0, 1]), None)
