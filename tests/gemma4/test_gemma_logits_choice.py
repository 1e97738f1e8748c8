"""Which path ``gemma_logits`` (the Gemma 3 / 4 LM head with final-logit soft-capping) takes: the fused
``linear_soft_cap`` op only where kernels serve both it and ``linear`` (its kernel runs the GEMV itself), so
``--disable-kernel linear:triton`` keeps the head off the Triton GEMV as before the fused op existed."""

import pytest
import torch
from anna_core.kernels.reference import linear as ref
from anna_gemma4.common import gemma_logits


class _Ops:
    """An op table whose ``accelerated`` answers from ``kernels`` (op name -> callable) and whose ``linear`` is the
    torch reference; records which ops ran."""

    def __init__(self, kernels):
        self.kernels, self.ran = kernels, []

    def accelerated(self, op, **shape):
        return self.kernels.get(op)

    def linear(self, x, weight, bias):
        self.ran.append("linear")
        return ref.linear(x, weight, bias)


def _fused(x, weight, cap):
    return ref.linear_soft_cap(x, weight, cap) + 100.0  # recognisable: no real logit lies beyond the cap


@pytest.mark.parametrize("kernels,fused", [
    ({"linear": ref.linear, "linear_soft_cap": _fused}, True),
    ({"linear_soft_cap": _fused}, False),  # linear's kernel disabled: the unfused path
    ({"linear": ref.linear}, False),
    ({}, False),
])
def test_fused_head_only_where_both_kernels_serve(kernels, fused):
    gen = torch.Generator().manual_seed(0)
    x, weight = torch.randn(2, 16, generator=gen), torch.randn(40, 16, generator=gen)
    ops = _Ops(kernels)
    got = gemma_logits(ops, x, weight, 3.0)
    want = torch.tanh(x @ weight.T / 3.0) * 3.0
    if fused:
        assert ops.ran == [] and torch.allclose(got, want + 100.0, atol=1e-5)
    else:
        assert ops.ran == ["linear"] and torch.allclose(got, want, atol=1e-5)


def test_no_soft_cap_is_the_projection():
    x, weight = torch.ones(1, 4), torch.ones(3, 4)
    ops = _Ops({"linear": ref.linear, "linear_soft_cap": _fused})
    assert torch.equal(gemma_logits(ops, x, weight, None), torch.full((1, 3), 4.0)) and ops.ran == ["linear"]
