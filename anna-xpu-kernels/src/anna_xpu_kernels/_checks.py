"""Argument checks of the Triton wrappers beyond :mod:`anna_core.kernels.checks` (dtype and device, no device
sync), and the row layout the kernels take."""

from __future__ import annotations

import math
from typing import Any

import torch
from anna_core.kernels.checks import require

FLOAT_DTYPES = ("float32", "float16", "bfloat16")
"""Activation dtypes the Triton kernels accept (as ``str(torch.dtype)`` without the ``torch.`` prefix)."""


def dtype_name(tensor: Any) -> str:
    """``"bfloat16"`` for a bfloat16 tensor, etc."""
    return str(tensor.dtype).replace("torch.", "")


def require_float(op: str, **tensors: Any) -> None:
    """Each named tensor must be float32, float16 or bfloat16."""
    for name, tensor in tensors.items():
        require(dtype_name(tensor) in FLOAT_DTYPES, op, f"{name} must be one of {FLOAT_DTYPES}, got {tensor.dtype}")


def require_same_device(op: str, **tensors: Any) -> None:
    """All named tensors (None skipped) must live on one device."""
    devices = {name: t.device for name, t in tensors.items() if t is not None}
    require(len(set(devices.values())) <= 1, op, f"tensors must share one device, got {devices}")


def as_rows(t: torch.Tensor) -> torch.Tensor:
    """``[..., D]`` -> ``[N, D]`` with unit stride along D (a view when possible, else a copy)."""
    t2 = t.reshape(math.prod(t.shape[:-1]), t.shape[-1])  # not -1: D may be 0
    return t2 if t2.stride(-1) == 1 else t2.contiguous()
