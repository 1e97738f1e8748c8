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


def _fused_argmax(x, weight, cap):
    return ref.linear_soft_cap_argmax(x, weight, cap) + 1000  # recognisable: past the vocabulary


@pytest.mark.parametrize("kernels,fused", [
    ({"linear": ref.linear, "linear_soft_cap_argmax": _fused_argmax}, True),
    ({"linear_soft_cap_argmax": _fused_argmax}, False),  # linear's kernel disabled: argmax of the unfused logits
    ({"linear": ref.linear, "linear_soft_cap": _fused}, False),  # no argmax kernel: argmax of the fused head's logits
])
def test_greedy_ids_fuse_the_argmax_only_where_both_kernels_serve(kernels, fused):
    """``gemma_greedy`` (``compute_greedy`` of a Gemma model, the captured greedy step's ids): the
    ``linear_soft_cap_argmax`` op where kernels serve it and ``linear``, else the argmax of ``gemma_logits``."""
    from anna_gemma4.common import gemma_greedy

    gen = torch.Generator().manual_seed(1)
    x, weight = torch.randn(3, 16, generator=gen), torch.randn(40, 16, generator=gen)
    ops = _Ops(kernels)
    got = gemma_greedy(ops, x, weight, 3.0)
    want = torch.argmax(torch.tanh(x @ weight.T / 3.0) * 3.0, dim=-1)
    assert got.dtype == torch.int64 and got.shape == (3,)
    assert torch.equal(got, want + 1000) if fused else torch.equal(got, want)
    assert ops.ran == ([] if fused or "linear_soft_cap" in kernels else ["linear"])


def test_greedy_ids_without_a_soft_cap_are_the_projections_argmax():
    from anna_gemma4.common import gemma_greedy

    x, weight = torch.ones(1, 4), torch.tensor([[1.0] * 4, [2.0] * 4, [2.0] * 4])
    ops = _Ops({"linear": ref.linear, "linear_soft_cap_argmax": _fused_argmax})
    assert gemma_greedy(ops, x, weight, None).tolist() == [1] and ops.ran == ["linear"]  # ties: the first
