"""The plugin seam: entry points load once, allow-list, kernel choice by priority + probe."""

import json
import subprocess
import sys

import pytest
from anna_core.errors import KernelNotFoundError
from anna_core.hookspecs import hookimpl
from anna_core.kernels import KernelRegistry, KernelSpec, ProbeRequest
from anna_core.kernels.ops import CORE_OPS
from anna_core.plugins import describe_plugins, make_plugin_manager, model_families


def test_builtin_reference_kernels_are_a_plugin():
    pm = make_plugin_manager(set())
    names = [p["name"] for p in describe_plugins(pm)]
    assert names == ["anna_core_reference"]
    [rec] = describe_plugins(pm)
    assert rec["distribution"] == "anna-core"
    assert rec["hooks"] == ["register_ops", "register_tasks"]
    reg = KernelRegistry.from_plugins(pm)
    fn = reg.get("rms_norm", ProbeRequest("cpu", "float32"))
    assert fn.__module__ == "anna_core.kernels.reference.norms"
    assert reg.chosen() == {"rms_norm": "reference"}


TOY_PLUGIN = """\
from anna_core.hookspecs import hookimpl
from anna_core.registry import ModelFamilySpec


@hookimpl
def register_model_families(register):
    register(ModelFamilySpec(name="toy", loader="toy_anna_plugin:load", model_types=("toy",)))
"""


@pytest.fixture
def toy_installed(tmp_path, monkeypatch):
    """A plugin distribution ``toy-anna-plugin`` (entry point ``toy_plugin``) installed in ``tmp_path``: on
    ``sys.path`` here, and the folder to put on a subprocess's ``PYTHONPATH``."""
    (tmp_path / "toy_anna_plugin.py").write_text(TOY_PLUGIN)
    info = tmp_path / "toy_anna_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-anna-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[anna]\ntoy_plugin = toy_anna_plugin\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_allow_list_env_restricts_plugins_but_keeps_reference_kernels(toy_installed):
    import os

    code = ("from anna_core.plugins import get_plugin_manager; "
            "print(sorted(n for n, _ in get_plugin_manager().list_name_plugin()))")
    path = os.pathsep.join([str(toy_installed), *filter(None, [os.environ.get("PYTHONPATH")])])
    env_out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                             env={"ANNA_LOAD_PLUGINS": "toy_plugin", "PATH": "", "PYTHONPATH": path})
    assert env_out.stdout.strip() == "['anna_core_reference', 'toy_plugin']"
    none = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env={"ANNA_LOAD_PLUGINS": "", "PATH": "", "PYTHONPATH": path})
    assert none.stdout.strip() == "['anna_core_reference']"  # every op keeps an implementation


def test_unknown_allow_list_name_warns(caplog, toy_installed):
    with caplog.at_level("WARNING", logger="anna.plugins"):
        pm = make_plugin_manager({"toy_plugin", "no_such_plugin"})
    assert "no_such_plugin" in caplog.text and "not installed" in caplog.text
    assert sorted(n for n, _ in pm.list_name_plugin()) == ["anna_core_reference", "toy_plugin"]
    assert describe_plugins(pm)[1]["distribution"] == "toy-anna-plugin"
    assert [f.name for f in model_families(pm)] == ["toy"]


def test_registering_plugins_does_not_import_torch():
    code = ("import sys; from anna_core.plugins import get_plugin_manager, model_families, kernel_specs, op_contracts, "
            "tasks; get_plugin_manager(); model_families(); kernel_specs(); op_contracts(); tasks(); "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


class _FastKernels:
    """A fake vendor plugin: a faster rms_norm that only accepts cuda/bfloat16."""

    @hookimpl
    def register_kernels(self, register):
        register(KernelSpec(op="rms_norm", name="fast", impl="builtins:max", priority=10,
                            probe="tests.core.test_plugins:_probe_cuda_bf16"))


def _probe_cuda_bf16(req: ProbeRequest) -> bool:
    return req.device_type == "cuda" and req.dtype == "bfloat16"


def test_kernel_choice_by_priority_and_probe_not_order():
    pm = make_plugin_manager(load_entry_points=False)
    pm.register(_FastKernels(), name="fast")  # registered before the reference
    from anna_core import builtin_plugin

    pm.register(builtin_plugin, name="ref")
    reg = KernelRegistry.from_plugins(pm)
    assert reg.get("rms_norm", ProbeRequest("cuda", "bfloat16")) is max
    assert reg.get("rms_norm", ProbeRequest("cpu", "bfloat16")).__name__ == "rms_norm"
    assert reg.get("rms_norm", ProbeRequest("cuda", "float32")).__name__ == "rms_norm"


def test_disabled_kernels_fall_back_to_the_next_choice():
    pm = make_plugin_manager(load_entry_points=False)
    pm.register(_FastKernels(), name="fast")
    from anna_core import builtin_plugin

    pm.register(builtin_plugin, name="ref")
    cuda = ProbeRequest("cuda", "bfloat16")
    for disabled in (["rms_norm:fast"], ["fast"]):
        reg = KernelRegistry.from_plugins(pm, disabled=disabled)
        assert reg.get("rms_norm", cuda).__name__ == "rms_norm"  # the reference, not max
    for bad in (["rms_norm:nope"], ["no_such_op:fast"], ["reference"], ["rms_norm:reference"], [":fast"],
                ["linear:fast"], ["rms_norm:"]):  # "fast" registers rms_norm only
        with pytest.raises(ValueError, match="cannot disable kernel"):
            KernelRegistry.from_plugins(pm, disabled=bad)
    with pytest.raises(ValueError, match="known ops"):
        KernelRegistry.from_plugins(pm, disabled=["bogus:fast"])


def test_unknown_op_lookup_is_a_clear_error():
    reg = KernelRegistry(CORE_OPS)
    with pytest.raises(KernelNotFoundError, match="no kernel op 'no_such_op' is registered"):
        reg.get("no_such_op", ProbeRequest("cpu", "float32"))
    with pytest.raises(AttributeError):
        _ = __import__("anna_core.kernels", fromlist=["bind_ops"]).bind_ops(reg, "cpu", "float32").no_such_op


def test_implementation_of_an_op_without_a_contract_is_rejected():
    with pytest.raises(ValueError, match="ops without a contract \\['no_such_op'\\]"):
        KernelRegistry(CORE_OPS, [KernelSpec(op="no_such_op", name="x", impl="builtins:max", priority=1)])
    with pytest.raises(ValueError, match="name is the contract's torch reference"):
        KernelRegistry(CORE_OPS, [KernelSpec(op="rms_norm", name="reference", impl="builtins:max", priority=1)])
    with pytest.raises(ValueError, match="two contracts"):
        KernelRegistry([*CORE_OPS, CORE_OPS[0]])


def test_describe_plugins_is_json():
    out = json.dumps(describe_plugins(make_plugin_manager()))
    assert "anna_core_reference" in out


def test_registry_refuses_duplicate_or_unrankable_implementations_and_bad_contracts():
    from anna_core.kernels.contracts import OpContract
    from anna_core.kernels.ops import CORE_OPS
    from anna_core.kernels.registry import KernelRegistry, KernelSpec

    twice = [KernelSpec(op="rms_norm", name="fast", impl="builtins:max", priority=5)] * 2
    with pytest.raises(ValueError, match="two kernel registrations named 'fast'"):
        KernelRegistry(CORE_OPS, twice)
    with pytest.raises(ValueError, match="priority -3"):
        KernelRegistry(CORE_OPS, [KernelSpec(op="rms_norm", name="slow", impl="builtins:max", priority=-3)])
    doc = "x: [N] float32 -> y: [N] float32."
    for kwargs, match in ((dict(name="get", signature="get(x) -> y"), "name must be"),
                          (dict(name="class", signature="class(x) -> y"), "name must be"),
                          (dict(name="op", signature="op(a, a) -> y"), "twice"),
                          (dict(name="op", signature="op(x) -> y", reference=":"), "reference"),
                          (dict(name="op", signature="op(x) -> y", shape_facts="width"), "shape_facts")):
        fields = {"doc": doc, "reference": "builtins:abs", **kwargs}
        with pytest.raises(ValueError, match=match):
            OpContract(**fields)


class _FamilyAndKernels:
    """A test plugin with a family, an op of its own and two implementations (one declaring its devices)."""

    @hookimpl
    def register_model_families(self, register):
        from anna_core.registry import ModelFamilySpec

        register(ModelFamilySpec(name="toy", loader="builtins:max", model_types=("toy",), architectures=("ToyLM",),
                                 gguf_architectures=("toy",)))

    @hookimpl
    def register_ops(self, register):
        from anna_core.kernels import OpContract

        register(OpContract(name="toy_op", signature="toy_op(x) -> y", doc="x: ``[N]`` float; ``y = x`` ``[N]``.",
                            reference="builtins:abs"))

    @hookimpl
    def register_kernels(self, register):
        register(KernelSpec(op="toy_op", name="gpu", impl="builtins:max", priority=20, devices=("cuda", "xpu")))
        register(KernelSpec(op="rms_norm", name="any", impl="builtins:max", priority=10,
                            probe="tests.core.test_plugins:_probe_cuda_bf16"))


def _toy_manager():
    from anna_core import builtin_plugin

    pm = make_plugin_manager(load_entry_points=False)
    pm.register(builtin_plugin, name="anna_core_reference")
    pm.register(_FamilyAndKernels(), name="toy")
    return pm


def test_describe_plugins_lists_each_plugins_families_ops_and_kernels_with_their_devices():
    by_name = {rec["name"]: rec for rec in describe_plugins(_toy_manager())}
    toy = by_name["toy"]
    assert toy["families"] == [{"name": "toy", "model_types": ["toy"], "architectures": ["ToyLM"],
                                "gguf_architectures": ["toy"], "tasks": ["generate"]}]
    assert toy["ops"] == ["toy_op"]
    assert toy["kernels"] == [  # by op, highest priority first; the op's reference listed by its plugin
        {"op": "rms_norm", "name": "any", "priority": 10, "devices": None},
        {"op": "toy_op", "name": "gpu", "priority": 20, "devices": ["cuda", "xpu"]},
        {"op": "toy_op", "name": "reference", "priority": 0, "devices": None},
    ]
    core = by_name["anna_core_reference"]
    assert core["families"] == [] and core["tasks"] == ["generate"]
    assert core["ops"] == sorted(c.name for c in CORE_OPS)
    assert {(k["name"], k["priority"], k["devices"]) for k in core["kernels"]} == {("reference", 0, None)}
    json.dumps(list(by_name.values()))


def test_declared_devices_bound_where_an_implementation_is_chosen():
    reg = KernelRegistry.from_plugins(_toy_manager())
    assert reg.get("toy_op", ProbeRequest("cuda", "float32")) is max  # no probe: any request on its devices
    assert reg.get("toy_op", ProbeRequest("cpu", "float32")) is abs  # not declared: the reference
    spec = KernelSpec(op="toy_op", name="gpu", impl="builtins:max", priority=20, devices=["cuda"])
    assert spec.devices == ("cuda",) and spec.serves("cuda") and not spec.serves("cpu")
    assert KernelSpec(op="toy_op", name="x", impl="builtins:max", priority=1).serves("anything")


def test_plugins_logger_at_debug_logs_hook_calls_and_kernel_choices(caplog):
    with caplog.at_level("DEBUG", logger="anna.plugins"):
        reg = KernelRegistry.from_plugins(_toy_manager())
        reg.get("toy_op", ProbeRequest("cpu", "float32"))
        reg.get("rms_norm", ProbeRequest("cuda", "bfloat16"))
        reg.get("rms_norm", ProbeRequest("cuda", "bfloat16"))  # cached: logged once
    messages = [r.getMessage() for r in caplog.records if r.name == "anna.plugins"]
    assert "hook register_ops called on toy, anna_core_reference" in messages  # in call order
    assert "hook register_kernels called on toy" in messages
    choices = [m for m in messages if m.startswith("kernel choice")]
    assert choices == [
        "kernel choice toy_op for cpu/float32 shape={}: reference (priority 0, builtins:abs); declined: gpu (devices "
        "cuda, xpu)",
        "kernel choice rms_norm for cuda/bfloat16 shape={}: any (priority 10, builtins:max); declined: none",
    ]
