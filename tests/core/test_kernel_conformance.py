"""The kernel conformance suite (anna_core.testing.conformance.KernelConformance): a correct test plugin passes
it as pytest collects it, and it fails on a wrong result, a missing in-place write, an implementation that
raises on an example its probe accepts, and an op without sample inputs."""

import pytest
import torch
from anna_core.hookspecs import hookimpl
from anna_core.kernels import KernelSpec, OpContract
from anna_core.kernels.reference import conv1d, norms
from anna_core.testing.conformance import KernelConformance

_HERE = "tests.core.test_kernel_conformance"


def wrong_rms_norm(x, weight, eps, zero_centered):
    return norms.rms_norm(x, weight, eps, False)  # ignores zero_centered: wrong for half the examples


def stateless_conv1d_update(x, weight, bias, conv_states, slots, activation):
    return conv1d.causal_conv1d_update(x, weight, bias, conv_states.clone(), slots, activation)  # never writes back


def raising_silu_and_mul(x):
    raise RuntimeError("kernel launch failed")


def cpu_only(request):
    return request.device_type == "cpu"


def declines_everything(request):
    return False


class GoodKernels:
    """Implementations equal to the references (registered under their own names)."""

    @hookimpl
    def register_kernels(self, register):
        register(KernelSpec(op="rms_norm", name="copy", impl="anna_core.kernels.reference.norms:rms_norm", priority=5,
                            probe=f"{_HERE}:cpu_only"))
        register(KernelSpec(op="causal_conv1d_update", name="copy",
                            impl="anna_core.kernels.reference.conv1d:causal_conv1d_update", priority=5))
        register(KernelSpec(op="silu_and_mul", name="never", impl=f"{_HERE}:raising_silu_and_mul", priority=5,
                            probe=f"{_HERE}:declines_everything"))


class BrokenKernels:
    @hookimpl
    def register_kernels(self, register):
        register(KernelSpec(op="rms_norm", name="wrong", impl=f"{_HERE}:wrong_rms_norm", priority=5))
        register(KernelSpec(op="causal_conv1d_update", name="stateless", impl=f"{_HERE}:stateless_conv1d_update",
                            priority=5))
        register(KernelSpec(op="silu_and_mul", name="raising", impl=f"{_HERE}:raising_silu_and_mul", priority=5))


class NoExamples:
    @hookimpl
    def register_ops(self, register):
        register(OpContract(name="conformance_scaled_tanh", signature="conformance_scaled_tanh(x, scale) -> y",
                            doc="x: ``[..., D]`` float; scale: float. ``y = tanh(x) * scale`` in x's dtype.",
                            reference=f"{_HERE}:scaled_tanh"))

    @hookimpl
    def register_kernels(self, register):
        register(KernelSpec(op="conformance_scaled_tanh", name="fast", impl=f"{_HERE}:scaled_tanh", priority=5))


def scaled_tanh(x, scale):
    return torch.tanh(x) * scale


def fast_scaled_tanh(x, scale):
    return (torch.tanh(x.float()) * scale).to(x.dtype)


def scaled_tanh_examples(device, dtype):
    from anna_core.kernels import OpExample

    gen = torch.Generator().manual_seed(0)
    return [OpExample((torch.randn(3, 8, generator=gen).to(device, dtype), s), shape={"width": 8}) for s in (1.0, 3.0)]


def width_at_most_8(request):
    return request.shape.get("width", 0) <= 8


class OwnOp:
    """A plugin defining an op (with sample inputs) and implementing it: the suite checks it the same way."""

    @hookimpl
    def register_ops(self, register):
        register(OpContract(name="conformance_scaled_tanh_ok", signature="conformance_scaled_tanh_ok(x, scale) -> y",
                            doc="x: ``[..., D]`` float; scale: float. ``y = tanh(x) * scale`` in x's dtype.",
                            reference=f"{_HERE}:scaled_tanh", shape_facts=("width",),
                            examples=f"{_HERE}:scaled_tanh_examples"))

    @hookimpl
    def register_kernels(self, register):
        register(KernelSpec(op="conformance_scaled_tanh_ok", name="fast", impl=f"{_HERE}:fast_scaled_tanh",
                            priority=5, probe=f"{_HERE}:width_at_most_8", devices=("cpu",)))


class TestGoodKernelsConformance(KernelConformance):
    """Runs as any plugin's suite would: the two real implementations pass, the declining one is skipped."""

    plugin = GoodKernels()


class TestOwnOpConformance(KernelConformance):
    """A plugin's own op, with its own examples and shape facts."""

    plugin = OwnOp()


def _suite(plugin):
    return type("Suite", (KernelConformance,), {"plugin": plugin})()


@pytest.mark.parametrize("op,message", [
    ("rms_norm", "rms_norm:wrong cpu/float32 example 1 (shape facts {}): result: relative error"),
    ("causal_conv1d_update", "causal_conv1d_update:stateless cpu/float32 example 0 (shape facts {}): conv_states after the call"),
    ("silu_and_mul", "raised RuntimeError: kernel launch failed"),
])
def test_the_suite_fails_on_a_broken_implementation(op, message):
    suite = _suite(BrokenKernels())
    contracts, specs = suite.plugin_kernels()
    [spec] = [s for s in specs if s.op == op]
    with pytest.raises(AssertionError) as failed:
        suite.check_implementation(spec, contracts[op], "float32")
    assert message in str(failed.value)


def test_only_the_plugins_own_implementations_are_checked():
    _, specs = _suite(BrokenKernels()).plugin_kernels()
    assert sorted((s.op, s.name) for s in specs) == [("causal_conv1d_update", "stateless"), ("rms_norm", "wrong"),
                                                      ("silu_and_mul", "raising")]


def test_an_op_without_examples_fails_the_suite():
    suite = _suite(NoExamples())
    with pytest.raises(AssertionError, match=r"ops without sample inputs .*\['conformance_scaled_tanh'\]"):
        suite.test_registers_checkable_implementations()


def test_an_unknown_plugin_name_is_an_error():
    with pytest.raises(LookupError, match="no installed anna plugin is named 'no_such_plugin'"):
        _suite("no_such_plugin").plugin_kernels()
