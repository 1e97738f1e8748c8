"""The ``moe_experts_wq`` reference (quantized routed experts) against ``moe_experts`` on the dequantized weights,
its argument checks, and ``quantize_stacked``."""

import pytest
import torch
from anna_core.bench.roofline import weight_bytes
from anna_core.kernels.examples import moe_experts_wq as examples
from anna_core.kernels.reference.moe import moe_experts
from anna_core.kernels.reference.moe_wq import moe_experts_wq
from anna_core.layers.moe import RoutedExpertsModule
from anna_core.layers.wq_experts import WQExperts, quantize_experts
from anna_core.layers.wq_linear import weight_kinds
from anna_core.weights.gpu_quant import dequantize, quantize, quantize_stacked

SCHEMES = ("int4", "int8", "fp8")


def _dense(q, s, z, scheme, dtype):
    return torch.stack([dequantize(q[e], s[e], None if z is None else z[e], scheme, dtype) for e in range(q.shape[0])])


def _case(scheme, t=6, k=2, e=5, h=128, inter=128, seed=0):
    gen = torch.Generator().manual_seed(seed)
    gate_up = quantize_stacked(torch.randn(e, 2 * inter, h, generator=gen) * 0.1, scheme, torch.float32)
    down = quantize_stacked(torch.randn(e, h, inter, generator=gen) * 0.1, scheme, torch.float32)
    x = torch.randn(t, h, generator=gen)
    ids = torch.stack([torch.randperm(e, generator=gen)[:k] for _ in range(t)])
    weights = torch.softmax(torch.randn(t, k, generator=gen), -1)
    return x, gate_up, down, weights, ids


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("activation", ["silu", "gelu_tanh"])
def test_float32_equals_moe_experts_of_the_dequantized_weights(scheme, activation):
    x, gate_up, down, weights, ids = _case(scheme, k=3)
    got = moe_experts_wq(x, gate_up.qweight, gate_up.scale, gate_up.zero, down.qweight, down.scale, down.zero,
                         weights, ids, activation, scheme)
    want = moe_experts(x, _dense(gate_up.qweight, gate_up.scale, gate_up.zero, scheme, torch.float32),
                       _dense(down.qweight, down.scale, down.zero, scheme, torch.float32), weights, ids, activation)
    assert got.abs().max() > 0.05  # a real output, not zeros
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_bf16_within_rounding_of_the_float32_result(scheme):
    x, gate_up, down, weights, ids = _case(scheme, t=4, k=2, seed=1)
    args = (gate_up.qweight, gate_up.scale, gate_up.zero, down.qweight, down.scale, down.zero)
    want = moe_experts_wq(x, *args, weights, ids, "silu", scheme)
    got = moe_experts_wq(x.bfloat16(), *args, weights, ids, "silu", scheme)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), want, rtol=3e-2, atol=3e-2)


def test_quantization_error_is_small_against_dense_experts():
    """int8 experts vs the unquantized ones: the output moves by under 2% of its largest value (measured 1.1%)."""
    gen = torch.Generator().manual_seed(3)
    gate_up, down = torch.randn(4, 256, 128, generator=gen) * 0.1, torch.randn(4, 128, 128, generator=gen) * 0.1
    x, ids = torch.randn(3, 128, generator=gen), torch.tensor([[0, 1], [2, 3], [1, 3]])
    w = torch.full((3, 2), 0.5)
    qg, qd = quantize_stacked(gate_up, "int8", torch.float32), quantize_stacked(down, "int8", torch.float32)
    got = moe_experts_wq(x, qg.qweight, qg.scale, None, qd.qweight, qd.scale, None, w, ids, "silu", "int8")
    want = moe_experts(x, gate_up, down, w, ids, "silu")
    assert (got - want).abs().max() < 0.02 * want.abs().max()


def test_quantize_stacked_equals_quantize_per_expert():
    weight = torch.randn(3, 136, 256, generator=torch.Generator().manual_seed(4)).bfloat16()
    for scheme in SCHEMES:
        stacked = quantize_stacked(weight, scheme, torch.bfloat16)
        for e in range(3):
            one = quantize(weight[e], scheme, torch.bfloat16)
            assert torch.equal(stacked.qweight[e].view(torch.uint8), one.qweight.view(torch.uint8))
            assert torch.equal(stacked.scale[e], one.scale)
            assert (stacked.zero is None) == (one.zero is None)
            if one.zero is not None:
                assert torch.equal(stacked.zero[e], one.zero)
    with pytest.raises(ValueError, match="must be \\[E, N, K\\]"):
        quantize_stacked(weight[0], "int8")
    with pytest.raises(ValueError, match="multiple of 128"):
        quantize_stacked(weight[:, :, :100], "int4")


def test_the_examples_run_on_the_reference():
    cases = examples("cpu", torch.float32)
    assert {c.shape["scheme"] for c in cases} == set(SCHEMES)
    for case in cases:
        y = moe_experts_wq(*case.args)
        assert y.shape == case.args[0].shape and torch.isfinite(y).all() and y.abs().max() > 0


def test_bad_arguments_raise_clear_errors():
    x, gate_up, down, weights, ids = _case("int4", t=2)
    args = [x, gate_up.qweight, gate_up.scale, gate_up.zero, down.qweight, down.scale, down.zero, weights, ids,
            "silu", "int4"]

    def call(**changes):
        names = ["x", "gq", "gs", "gz", "dq", "ds", "dz", "w", "ids", "act", "scheme"]
        return moe_experts_wq(*[changes.get(n, a) for n, a in zip(names, args, strict=True)])

    with pytest.raises(ValueError, match="scheme must be one of"):
        call(scheme="int3")
    with pytest.raises(ValueError, match="stacked over the same"):
        call(gs=gate_up.scale[:3])
    with pytest.raises(ValueError, match="down must be"):
        call(dq=down.qweight[:, :64], ds=down.scale[:, :64], dz=down.zero[:, :64])
    with pytest.raises(ValueError, match="int4 scale and zero"):
        call(gz=None)
    with pytest.raises(ValueError, match=r"expert_ids must lie in \[0, E=5\)"):
        call(ids=ids + 5)
    with pytest.raises(ValueError, match="activation"):
        call(act="relu")
    with pytest.raises(ValueError, match="must be \\[T=2, K>=1\\]"):
        call(ids=ids[:1], w=weights[:1])


class _ToyExperts(RoutedExpertsModule):
    """A family's stacked experts, as :class:`RoutedExpertsModule` asks subclasses to hold them."""

    activation = "silu"

    def __init__(self, e, h, i, ops):
        super().__init__(e, 2)
        self.ops = ops
        gen = torch.Generator().manual_seed(7)
        self.gate_up_proj = torch.nn.Parameter(torch.randn(e, 2 * i, h, generator=gen) * 0.1, requires_grad=False)
        self.down_proj = torch.nn.Parameter(torch.randn(e, h, i, generator=gen) * 0.1, requires_grad=False)

    def forward(self, x, weights, experts):
        return self.ops.get("moe_experts")(x, self.gate_up_proj, self.down_proj, weights, experts, self.activation)


def _toy_model(h=128, i=128):
    from anna_core.kernels import KernelRegistry, bind_ops
    from anna_core.kernels.ops import CORE_OPS

    ops = bind_ops(KernelRegistry(CORE_OPS), torch.device("cpu"), torch.float32)
    return torch.nn.ModuleDict({"a": _ToyExperts(8, h, i, ops), "b": _ToyExperts(8, h, i, ops)})


def test_quantize_experts_swaps_modules_and_they_run_the_op():
    model = _toy_model()
    x, w, ids = torch.randn(3, 128), torch.full((3, 2), 0.5), torch.tensor([[0, 1], [2, 7], [7, 3]])
    dense = model["a"](x, w, ids)
    assert weight_kinds(model) == {"experts": "float32"}
    assert quantize_experts(model, "int8", model["a"].ops) == 2
    quantized = model["a"]
    assert isinstance(quantized, WQExperts) and quantized.scheme == "int8" and quantized.top_k == 2
    assert not list(quantized.parameters())  # the dense weights are gone
    got = quantized(x, w, ids)
    assert (got - dense).abs().max() < 0.02 * dense.abs().max()
    assert weight_kinds(model) == {"experts": "int8"}
    # the roofline counts the codes and scales of the K of E experts a batch-1 step reads
    packed = sum(b.numel() * b.element_size() for m in model.values() for b in m.buffers())
    assert weight_bytes(model, 1) == sum(int(sum(b.numel() * b.element_size() for b in m.buffers()) * 2 / 8)
                                         for m in model.values())
    assert packed < sum(e * 3 * 128 * 128 * 4 for e in (8, 8)) / 3  # int8 codes: a quarter of float32, plus scales


def test_int4_leaves_experts_it_cannot_take_dense_and_bad_schemes_raise():
    model = _toy_model(h=128, i=96)  # I = 96: the down projection's K is not a multiple of 128
    assert quantize_experts(model, "int4", model["a"].ops) == 0 and weight_kinds(model) == {"experts": "float32"}
    with pytest.raises(ValueError, match="scheme must be one of"):
        quantize_experts(model, "int2", model["a"].ops)
