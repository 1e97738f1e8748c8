"""Programmatic dependent launch: when it is on, and the contract its kernels' PTX must keep."""

import pytest
import torch

from tests.xpu_kernels._interp import require_triton_interpreter

require_triton_interpreter()

from anna_xpu_kernels import _env, pdl
from anna_xpu_kernels.compile_check import check_pdl_order


def test_off_on_cpu_and_under_the_interpreter():
    t = torch.zeros(1)
    assert not pdl.enabled(t)
    assert pdl.launch_options(t) == {"USE_PDL": False, "launch_pdl": False}


@pytest.mark.parametrize(("value", "wanted"), [(None, True), ("1", True), ("", True), ("0", False),
                                               ("off", False), ("False", False), ("no", False)])
def test_env_switch(monkeypatch, value, wanted):
    if value is None:
        monkeypatch.delenv(_env.PDL_ENV, raising=False)
    else:
        monkeypatch.setenv(_env.PDL_ENV, value)
    assert _env.pdl_requested() is wanted


def test_pdl_order_check():
    ok = ("ld.global.v4.b32 {%r1, %r2, %r3, %r4}, [%rd1];\n griddepcontrol.launch_dependents;\n"
          " griddepcontrol.wait;\n st.global.b16 [%rd2], %rs1;\n atom.global.add.u32 %r5, [%rd3], 1;")
    check_pdl_order(ok, r"ld\.global\.v4")  # declared loads (weights) may come before the wait, writes after it
    with pytest.raises(RuntimeError, match="before griddepcontrol.wait"):
        check_pdl_order("griddepcontrol.launch_dependents;\n st.global.b32 [%rd2], %r1;\n griddepcontrol.wait;")
    with pytest.raises(RuntimeError, match="before griddepcontrol.wait"):
        check_pdl_order("griddepcontrol.launch_dependents;\n red.global.add.f32 [%rd2], %f1;\n griddepcontrol.wait;")
    with pytest.raises(RuntimeError, match="lacks"):
        check_pdl_order("st.global.b32 [%rd2], %r1;")
    # loads before the wait: only those the kernel declares (its weights / own state)
    with pytest.raises(RuntimeError, match="read its predecessor's output early"):
        check_pdl_order(ok)
    weights = r"ld\.global\.L1::evict_first"
    early_activation = ("ld.global.L1::evict_first.L2::cache_hint.v4.b32 {%r1, %r2, %r3, %r4}, [%rd1];\n"
                        " ld.global.b16 %rs1, [%rd4];\n griddepcontrol.launch_dependents;\n griddepcontrol.wait;")
    with pytest.raises(RuntimeError, match=r"ld\.global\.b16"):
        check_pdl_order(early_activation, weights)
    check_pdl_order(early_activation.replace(" ld.global.b16 %rs1, [%rd4];\n", ""), weights)


def test_silu_prologue_is_fused_only_without_pdl(monkeypatch):
    from anna_xpu_kernels import fused_linear

    x = torch.zeros(1, 8)
    assert fused_linear.prologue_pays(x, 1024, fused_linear.SILU_MAX_K)
    assert not fused_linear.prologue_pays(x, 16384, fused_linear.SILU_MAX_K)
    monkeypatch.setattr(pdl, "enabled", lambda t: True)
    assert not fused_linear.prologue_pays(x, 128, fused_linear.SILU_MAX_K)


def test_norm_prologue_is_fused_where_its_row_pass_is_one_load(monkeypatch):
    from anna_xpu_kernels import _env, fused_linear

    monkeypatch.delenv(_env.NORM_PROLOGUE_ENV, raising=False)
    pays = fused_linear.norm_prologue_pays
    assert pays(torch.zeros(1, 1024), 1024) and not pays(torch.zeros(1, 2048), 2048)  # without PDL: K <= MAX_K
    monkeypatch.setattr(pdl, "enabled", lambda t: True)
    assert pays(torch.zeros(1, 2048), 2048) and pays(torch.zeros(1, 1000), 1000)  # M = 1: rows up to 2048
    assert not pays(torch.zeros(1, 4096), 4096)  # the 9B width: not measured
    assert not pays(torch.zeros(2, 1024), 1024) and not pays(torch.zeros(3, 512), 512)  # M > 1: not measured
    assert not pays(torch.zeros(0, 1024), 1024)
    monkeypatch.setenv(_env.NORM_PROLOGUE_ENV, "0")
    assert not pays(torch.zeros(1, 2048), 2048)
    monkeypatch.setenv(_env.NORM_PROLOGUE_ENV, "1")
    assert pays(torch.zeros(8, 8192), 8192)


def test_capability_probe_needs_nvidia_sm90(monkeypatch):
    pdl._capable.cache_clear()
    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index: {0: (9, 0), 1: (8, 0)}[index])
    assert pdl._capable(0) and not pdl._capable(1)
    pdl._capable.cache_clear()
    monkeypatch.setattr(torch.version, "hip", "6.4")  # ROCm reports "cuda" devices too, without griddepcontrol
    assert not pdl._capable(0)
    pdl._capable.cache_clear()
