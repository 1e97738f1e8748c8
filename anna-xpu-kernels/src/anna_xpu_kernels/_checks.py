"""Argument checks of the Triton wrappers: cheap, host-side, shape-only (no device sync)."""

from __future__ import annotations

from typing import Any

FLOAT_DTYPES = ("float32", "float16", "bfloat16")
"""Activation dtypes the Triton kernels accept (as ``str(torch.dtype)`` without the ``torch.`` prefix)."""


def require(cond: bool, op: str, message: str) -> None:
    """Raise ``ValueError("<op>: <message>")`` unless ``cond`` holds (same style as the references)."""
    if not cond:
        raise ValueError(f"{op}: {message}")


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
