"""A pre-quantized FP8 checkpoint on a device without FP8 units (issue 29): refused at load, naming the device and
the ``--weight-quant none`` fallback, before any tensor is read; the CPU (reference ops) and FP8-capable CUDA
devices (compute capability 8.9+) serve it. The device capability is faked on the CPU."""

from __future__ import annotations

import pytest
import torch
from anna_core.errors import ModelLoadError
from anna_core.weights.prequant import PrequantConfig
from anna_core.weights.prequant_loader import check_prequant_device, load_checkpoint
from torch import nn

FP8 = PrequantConfig(method="fp8", layout="fp8", group_size=128)
GPTQ = PrequantConfig(method="gptq", layout="gptq", zero_offset=1)


@pytest.fixture
def capability(monkeypatch):
    def fake(cap):
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: cap)
    return fake


@pytest.mark.parametrize("cap", [(8, 0), (8, 6), (7, 5)])
def test_fp8_checkpoint_on_cuda_without_fp8_units_is_refused(capability, cap):
    capability(cap)
    with pytest.raises(ModelLoadError, match=r"FP8 \(fp8, 128x128 block scales\) and cuda:0 has no FP8 units .*"
                                             r"--weight-quant none"):
        check_prequant_device(FP8, "auto", torch.device("cuda:0"))


def test_refused_before_the_checkpoint_is_read(capability, tmp_path):
    capability((8, 0))
    with pytest.raises(ModelLoadError, match="has no FP8 units"):  # tmp_path holds no checkpoint: not read
        load_checkpoint(nn.Module(), tmp_path, lambda name: name, FP8, None, device=torch.device("cuda"),
                        dtype=torch.bfloat16)


def test_xpu_has_no_fp8_path():
    with pytest.raises(ModelLoadError, match="xpu has no FP8 units"):
        check_prequant_device(FP8, "auto", torch.device("xpu"))


@pytest.mark.parametrize(("prequant", "weight_quant", "device", "cap"), [
    (FP8, "auto", "cuda", (8, 9)),   # Ada
    (FP8, "auto", "cuda", (9, 0)),   # Hopper
    (FP8, "none", "cuda", (8, 0)),   # dequantized once at load: any device
    (FP8, "auto", "cpu", (8, 0)),    # the reference ops
    (GPTQ, "auto", "cuda", (7, 5)),  # int4 needs no FP8 units
    (None, "auto", "cuda", (7, 5)),
])
def test_served_where_the_device_can(capability, prequant, weight_quant, device, cap):
    capability(cap)
    check_prequant_device(prequant, weight_quant, torch.device(device))
