"""anna-xpu-kernels' plugin: lazy registration, priorities, probes (CPU interpreter opt-in, XPU, fla)."""

import json
import os
import subprocess
import sys

import pytest
import torch
from anna_core.kernels import KernelRegistry, ProbeRequest, bind_ops
from anna_core.kernels.ops import OPS
from anna_core.plugins import kernel_specs, make_plugin_manager

from tests.xpu_kernels._interp import require_triton_interpreter

require_triton_interpreter()

from anna_xpu_kernels import plugin, probes


def _registry():
    return KernelRegistry.from_plugins(make_plugin_manager({"anna_core_reference", "anna_xpu_kernels"}))


def test_registers_every_triton_op_and_fla_prefill_with_priorities_and_probes():
    # the torch references are always registered too (priority 0, no probe); look at this plugin's own
    specs = [s for s in kernel_specs(make_plugin_manager({"anna_xpu_kernels"})) if s.name != "reference"]
    by_op = {(s.op, s.name): s for s in specs}
    triton_ops = {"rms_norm", "gated_rms_norm", "add_rms_norm", "silu_and_mul", "sigmoid_mul",
                  "causal_conv1d_update", "causal_conv1d_prefill", "gated_delta_rule_decode", "paged_attention",
                  "linear", "add_rms_norm_linear", "act_mul_linear", "linear_act_mul", "add_rms_norm_linear_act_mul",
                  "qk_norm_rope_cache", "qkv_norm_rope_cache", "fused_gdn_decode", "post_norm_residual", "q_norm_rope",
                  "q_norm_rope_attention", "qk_norm_rope_cache_attention", "qkv_norm_rope_cache_attention",
                  "gated_linear", "dual_post_norm_residual",
                  "rms_norm_pair", "post_norm_residual_norm_pair", "post_norm_residual_linear",
                  "moe_experts", "moe_route", "paged_attention_turboquant", "turboquant_cache_write",
                  "wq_linear", "add_rms_norm_wq_linear", "moe_experts_wq", "lm_head_topk",
                  "post_norm_residual_gated_linear", "per_layer_inputs", "linear_soft_cap",
                  "linear_soft_cap_argmax", "top_k_gumbel_sample", "snake_beta"}
    assert {op for op, name in by_op if name == "triton"} == triton_ops
    assert {op for op, name in by_op if name == "fla"} == {"gated_delta_rule_prefill", "fused_gdn_prefill"}
    for spec in specs:
        assert spec.op in OPS and spec.probe is not None
        assert spec.priority == (plugin.TRITON_PRIORITY if spec.name == "triton" else plugin.FLA_PRIORITY)


def test_registration_imports_neither_torch_nor_triton_nor_fla():
    code = ("import sys, json; from anna_core.plugins import make_plugin_manager, kernel_specs; "
            "specs = [s for s in kernel_specs(make_plugin_manager({'anna_xpu_kernels'})) if s.name != 'reference']; "
            "print(json.dumps([len(specs), [m for m in ('torch', 'triton', 'fla') if m in sys.modules]]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == [43, []]


def test_cpu_is_declined_unless_the_interpreter_is_requested(monkeypatch):
    monkeypatch.delenv("ANNA_TRITON_INTERPRET", raising=False)
    reg = _registry()
    assert reg.get("rms_norm", ProbeRequest("cpu", "float32")).__module__ == "anna_core.kernels.reference.norms"
    assert reg.chosen() == {"rms_norm": "reference"}


def test_interpreter_override_selects_triton_on_cpu_and_it_runs(monkeypatch, poison_outputs):
    monkeypatch.setenv("ANNA_TRITON_INTERPRET", "1")
    ops = bind_ops(_registry(), torch.device("cpu"), torch.float32)
    x, w = torch.randn(3, 16), torch.randn(16)
    y = ops.rms_norm(x, w, 1e-6, True)
    assert ops.registry.chosen() == {"rms_norm": "triton"}
    from anna_core.kernels.reference.norms import rms_norm

    torch.testing.assert_close(y, rms_norm(x, w, 1e-6, True))
    assert ops.get("paged_attention", head_dim=128).__module__ == "anna_xpu_kernels.paged_attention"
    assert ops.get("paged_attention", head_dim=512).__module__ == "anna_xpu_kernels.paged_attention"  # Gemma 4 globals
    # Declined shapes / dtypes / ops fall back to the reference at priority 0.
    assert ops.get("paged_attention", head_dim=1024).__module__ == "anna_core.kernels.reference.paged_attention"
    assert ops.get("gated_delta_rule_prefill").__module__ == "anna_core.kernels.reference.gated_delta_rule"
    widest = probes.MAX_ROUTE_EXPERTS  # wider routers keep the reference
    assert ops.get("moe_route", num_experts=widest).__module__ == "anna_xpu_kernels.moe_route"
    assert ops.get("moe_route", num_experts=widest + 1).__module__ == "anna_core.kernels.reference.routing"
    assert ops.registry.get("rms_norm", ProbeRequest("cpu", "float64")).__module__.startswith("anna_core")


@pytest.mark.parametrize("device_type", ["cuda", "xpu", "mps", "meta"])
def test_unavailable_devices_are_declined_cleanly(device_type):
    if device_type == "cuda" and torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    if device_type == "xpu" and hasattr(torch, "xpu") and torch.xpu.is_available():
        pytest.skip("an Intel XPU is present")
    req = ProbeRequest(device_type, "bfloat16", {"head_dim": 128})
    for probe in (probes.norm_probe, probes.conv1d_probe, probes.gated_delta_rule_decode_probe,
                  probes.paged_attention_probe, probes.fla_prefill_probe, probes.fused_gdn_decode_probe,
                  probes.qk_norm_rope_probe, probes.moe_experts_probe, probes.moe_route_probe,
                  probes.turboquant_write_probe):
        assert probe(req) is False


def test_xpu_needs_the_intel_triton_backend(monkeypatch):
    """With an Intel GPU visible but no Intel backend in triton, the XPU probe still declines."""
    monkeypatch.setattr(probes, "_torch_device_available", lambda device_type: True)
    monkeypatch.setattr(probes, "_triton_backends", lambda: frozenset({"nvidia", "amd"}))
    assert probes.triton_device_available("xpu") is False
    assert probes.triton_device_available("cuda") is True
    monkeypatch.setattr(probes, "_triton_backends", lambda: frozenset({"intel"}))
    assert probes.paged_attention_probe(ProbeRequest("xpu", "bfloat16", {"head_dim": 256})) is True
    assert probes.paged_attention_probe(ProbeRequest("xpu", "bfloat16", {"head_dim": 512})) is True
    assert probes.paged_attention_probe(ProbeRequest("xpu", "bfloat16", {"head_dim": 513})) is False


def test_fla_probe_needs_cuda_half_precision_and_fla(monkeypatch):
    monkeypatch.setattr(probes, "_torch_device_available", lambda device_type: True)
    monkeypatch.setattr(probes, "_triton_backends", lambda: frozenset({"nvidia"}))
    monkeypatch.setattr(probes, "fla_available", lambda: True)
    assert probes.fla_prefill_probe(ProbeRequest("cuda", "bfloat16")) is True
    assert probes.fla_prefill_probe(ProbeRequest("cuda", "float32")) is False
    assert probes.fla_prefill_probe(ProbeRequest("xpu", "bfloat16")) is False
    monkeypatch.setenv("ANNA_TRITON_INTERPRET", "1")
    assert probes.fla_prefill_probe(ProbeRequest("cpu", "bfloat16")) is False  # fla never runs interpreted
    monkeypatch.setattr(probes, "fla_available", lambda: False)
    assert probes.fla_prefill_probe(ProbeRequest("cuda", "bfloat16")) is False


@pytest.mark.parametrize("preset", [None, "0"])
def test_fla_probe_turns_fla_backend_dispatch_off_unless_the_user_chose(monkeypatch, preset):
    # fla reads the switch when first imported: the probe (the first to import it) sets it beforehand
    import os

    switch = probes.FLA_DISPATCH_SWITCH
    monkeypatch.setenv(switch, "placeholder")  # recorded, so the variable is restored after the test
    if preset is None:
        monkeypatch.delenv(switch)
    else:
        monkeypatch.setenv(switch, preset)
    monkeypatch.delitem(sys.modules, "fla", raising=False)
    seen_at_import = []

    def failing_import(name):
        seen_at_import.append(os.environ.get(switch))
        raise ImportError(name)

    monkeypatch.setattr(probes, "importlib", type("FakeImportlib", (), {"import_module": staticmethod(failing_import)}))
    probes.fla_available.cache_clear()
    try:
        assert probes.fla_available() is False  # the import failed: declined, not raised
        assert seen_at_import == [preset or "1"]  # set before fla's import, which reads it
        assert os.environ[switch] == (preset or "1")
    finally:
        probes.fla_available.cache_clear()


def test_fla_probe_warns_when_fla_came_first(monkeypatch, caplog):
    import types

    monkeypatch.delenv(probes.FLA_DISPATCH_SWITCH, raising=False)
    monkeypatch.setitem(sys.modules, "fla", types.ModuleType("fla"))
    monkeypatch.setattr(probes, "importlib", type("FakeImportlib", (), {
        "import_module": staticmethod(lambda name: (_ for _ in ()).throw(ImportError(name)))}))
    probes.fla_available.cache_clear()
    try:
        with caplog.at_level("WARNING", logger="anna.kernels"):
            assert probes.fla_available() is False
        assert "backend dispatch stays on" in caplog.text
        assert probes.FLA_DISPATCH_SWITCH not in __import__("os").environ
    finally:
        probes.fla_available.cache_clear()


def test_devices_are_declared_cuda_and_xpu_and_the_cpu_only_under_the_interpreter(monkeypatch):
    monkeypatch.delenv("ANNA_TRITON_INTERPRET", raising=False)
    specs = [s for s in kernel_specs(make_plugin_manager({"anna_xpu_kernels"})) if s.name != "reference"]
    assert {s.devices for s in specs if s.name == "triton"} == {("cuda", "xpu")}
    assert {s.devices for s in specs if s.name == "fla"} == {("cuda",)}
    monkeypatch.setenv("ANNA_TRITON_INTERPRET", "1")
    specs = [s for s in kernel_specs(make_plugin_manager({"anna_xpu_kernels"})) if s.name != "reference"]
    assert {s.devices for s in specs if s.name == "triton"} == {("cuda", "xpu", "cpu")}
    assert {s.devices for s in specs if s.name == "fla"} == {("cuda",)}


@pytest.mark.parametrize(("env", "typo", "valid", "op"), [
    ("ANNA_TURBOQUANT_DECODE", "wrods", "words", "paged_attention_turboquant"),
    ("ANNA_TURBOQUANT_WRITE", "column", "columns", "turboquant_cache_write"),
])
def test_a_bad_turboquant_switch_fails_at_registration_on_any_device(monkeypatch, env, typo, valid, op):
    # read per call (the decode's on CUDA only); a typo must not wait for a CUDA step nor pass silently elsewhere
    monkeypatch.setenv(env, typo)
    with pytest.raises(ValueError, match=f"{env} must be one of"):
        kernel_specs(make_plugin_manager({"anna_xpu_kernels"}))
    monkeypatch.setenv(env, valid)
    assert any(s.op == op for s in kernel_specs(make_plugin_manager({"anna_xpu_kernels"})))


_INTERPRET_ALONE = """
import torch
from anna_core.kernels import KernelRegistry, bind_ops
from anna_core.plugins import make_plugin_manager
registry = KernelRegistry.from_plugins(make_plugin_manager({"anna_core_reference", "anna_xpu_kernels"}))
import torch._dynamo  # imports triton, as a family's model modules do, before any kernel module
ops = bind_ops(registry, "cpu", torch.float32)
x, w = torch.randn(3, 64), torch.rand(64)
got = ops.rms_norm(x, w, 1e-6, False)
want = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
print(ops.accelerated("rms_norm") is not None, float((got - want).abs().max()))
"""


def test_anna_triton_interpret_alone_runs_the_kernels_under_the_interpreter():
    # ANNA_TRITON_INTERPRET=1 without Triton's own TRITON_INTERPRET: the plugin sets it when registering, before a
    # model's import of torch._dynamo brings triton in (then compiled mode would stick and every kernel call fail)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["ANNA_TRITON_INTERPRET"] = "1"
    out = subprocess.run([sys.executable, "-c", _INTERPRET_ALONE], check=False, capture_output=True, text=True,
                         env=env, timeout=240)
    assert out.returncode == 0, out.stderr[-2000:]
    accelerated, err = out.stdout.split()
    assert accelerated == "True" and float(err) <= 1e-5
