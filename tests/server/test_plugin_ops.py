"""An op anna-core does not know, added by a plugin with its contract: chosen by probe, listed on
/healthz, taken out of the choice by --disable-kernel."""

from __future__ import annotations

import pytest
import torch
from anna_core.errors import AnnaError
from anna_core.hookspecs import hookimpl
from anna_core.kernels import KernelRegistry, KernelSpec, OpContract, ProbeRequest, bind_ops
from anna_core.kernels.checks import require
from anna_core.kernels.registry import chosen_kernels
from anna_core.plugins import make_plugin_manager
from anna_core.server.app import create_app
from litestar.testing import TestClient
from torch import nn

from tests.server.conftest import make_state

_HERE = "tests.server.test_plugin_ops"


def check_scaled_tanh(x: torch.Tensor, scale: float) -> None:
    require(x.dim() >= 1, "scaled_tanh", f"x must have at least one dim, got shape {tuple(x.shape)}")


def scaled_tanh_reference(x: torch.Tensor, scale: float) -> torch.Tensor:
    check_scaled_tanh(x, scale)
    return torch.tanh(x) * scale


def scaled_tanh_fast(x: torch.Tensor, scale: float) -> torch.Tensor:
    """The same values by another formula, so a test can tell which one ran only by the choice record."""
    check_scaled_tanh(x, scale)
    return (2 * torch.sigmoid(2 * x) - 1) * scale


def accepts_cpu_float32(request: ProbeRequest) -> bool:
    return request.device_type == "cpu" and request.dtype == "float32" and request.shape.get("width", 0) <= 64


class ScaledTanhPlugin:
    """A third-party plugin: an op contract of its own and a faster implementation of it."""

    @hookimpl
    def register_ops(self, register):
        register(OpContract(
            name="scaled_tanh",
            signature="scaled_tanh(x, scale) -> y",
            doc="x: ``[..., D]`` float; scale: float. ``y = tanh(x) * scale`` ``[..., D]`` in x's dtype.",
            reference=f"{_HERE}:scaled_tanh_reference",
            check=f"{_HERE}:check_scaled_tanh",
            shape_facts=("width",),
        ))

    @hookimpl
    def register_kernels(self, register):
        register(KernelSpec(op="scaled_tanh", name="fast", impl=f"{_HERE}:scaled_tanh_fast", priority=10,
                            probe=f"{_HERE}:accepts_cpu_float32"))


class TinyModel(nn.Module):
    def __init__(self, ops):
        super().__init__()
        self.ops = ops

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ops.get("scaled_tanh", width=x.shape[-1])(x, 3.0)


@pytest.fixture
def plugin_manager():
    from anna_core import builtin_plugin

    pm = make_plugin_manager(load_entry_points=False)
    pm.register(builtin_plugin, name="anna_core_reference")
    pm.register(ScaledTanhPlugin(), name="scaled_tanh_plugin")
    return pm


def _healthz_kernels(tiny_tokenizer, engine, model) -> dict[str, str]:
    state = make_state(tiny_tokenizer, engine)
    state.info["kernels"] = lambda: chosen_kernels(model)
    with TestClient(create_app(state)) as client:
        return client.get("/healthz").json()["kernels"]


def test_plugin_op_is_chosen_by_probe_and_listed_on_healthz(plugin_manager, tiny_tokenizer, engine):
    registry = KernelRegistry.from_plugins(plugin_manager)
    assert registry.implementations("scaled_tanh") == ["fast", "reference"]
    model = TinyModel(bind_ops(registry, "cpu", torch.float32))
    x = torch.linspace(-3, 3, 8)
    y = model(x)
    torch.testing.assert_close(y, torch.tanh(x) * 3.0)
    assert registry.get("scaled_tanh", ProbeRequest("cpu", "float32", {"width": 8})) is scaled_tanh_fast
    assert _healthz_kernels(tiny_tokenizer, engine, model) == {"scaled_tanh": "fast"}
    # the probe declines other dtypes and shapes: the contract's reference serves them
    assert registry.get("scaled_tanh", ProbeRequest("cpu", "bfloat16", {"width": 8})) is scaled_tanh_reference
    assert registry.get("scaled_tanh", ProbeRequest("cpu", "float32", {"width": 128})) is scaled_tanh_reference
    bf16 = TinyModel(bind_ops(KernelRegistry.from_plugins(plugin_manager), "cpu", torch.bfloat16))
    torch.testing.assert_close(bf16(x.bfloat16()), (torch.tanh(x) * 3.0).bfloat16())
    assert chosen_kernels(bf16) == {"scaled_tanh": "reference"}


@pytest.mark.parametrize("disabled", ["scaled_tanh:fast", "fast"])
def test_disable_kernel_takes_the_plugin_op_implementation_out(plugin_manager, tiny_tokenizer, engine, monkeypatch,
                                                                disabled):
    registry = KernelRegistry.from_plugins(plugin_manager, disabled=[disabled])
    assert registry.implementations("scaled_tanh") == ["reference"]
    model = TinyModel(bind_ops(registry, "cpu", torch.float32))
    torch.testing.assert_close(model(torch.ones(4)), torch.tanh(torch.ones(4)) * 3.0)
    assert _healthz_kernels(tiny_tokenizer, engine, model) == {"scaled_tanh": "reference"}
    # `anna serve --disable-kernel` validates its entries against the process's plugins
    import anna_core.plugins
    from anna_cli.serve import _check_disabled_kernels

    monkeypatch.setattr(anna_core.plugins, "get_plugin_manager", lambda: plugin_manager)
    _check_disabled_kernels((disabled,))
    with pytest.raises(AnnaError, match="no implementation 'nope' is registered for op 'scaled_tanh'"):
        _check_disabled_kernels(("scaled_tanh:nope",))
    with pytest.raises(AnnaError, match="the torch 'reference' always stays"):
        _check_disabled_kernels(("scaled_tanh:reference",))


def test_a_contract_must_document_its_op():
    with pytest.raises(ValueError, match="doc must document"):
        OpContract(name="scaled_tanh", signature="scaled_tanh(x, scale) -> y", doc=" ", reference=f"{_HERE}:x")
    with pytest.raises(ValueError, match="signature .* must look like 'scaled_tanh"):
        OpContract(name="scaled_tanh", signature="other(x) -> y", doc="x: [D]", reference=f"{_HERE}:x")
    with pytest.raises(ValueError, match="lazy 'package.module:attr'"):
        OpContract(name="scaled_tanh", signature="scaled_tanh(x) -> y", doc="x: [D]", reference="no_colon")
    contract = OpContract(name="scaled_tanh", signature="scaled_tanh(x, scale=1.0) -> y", doc="x: [D]",
                          reference=f"{_HERE}:scaled_tanh_reference")
    assert contract.parameters == ["x", "scale"]
