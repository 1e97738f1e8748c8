"""Device handling in one place: no other module branches on the device type.

Wraps cpu / cuda / xpu: choosing the device, synchronizing, memory statistics.
"""

from __future__ import annotations

import torch

from anna_core.errors import AnnaError

_DTYPES = {
    "bf16": torch.bfloat16, "bfloat16": torch.bfloat16,
    "fp16": torch.float16, "float16": torch.float16, "half": torch.float16,
    "fp32": torch.float32, "float32": torch.float32, "float": torch.float32,
}


def resolve_device(name: str = "auto") -> torch.device:
    """``"auto"`` picks cuda, then xpu, then cpu.

    Raises:
        AnnaError: the named device is not available.
    """
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if hasattr(torch, "xpu") and torch.xpu.is_available():
            return torch.device("xpu")
        return torch.device("cpu")
    dev = torch.device(name)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise AnnaError("--device cuda requested but no CUDA device is available")
    if dev.type == "xpu" and not (hasattr(torch, "xpu") and torch.xpu.is_available()):
        raise AnnaError("--device xpu requested but no Intel XPU is available")
    if dev.type not in ("cpu", "cuda", "xpu"):
        raise AnnaError(f"unsupported device {name!r}; use auto, cpu, cuda or xpu")
    return dev


def resolve_dtype(name: str | torch.dtype, device: torch.device, checkpoint_dtype: str | None = None) -> torch.dtype:
    """``"auto"``: the checkpoint's dtype on accelerators (bf16 if unknown), float32 on CPU.

    Raises:
        AnnaError: unknown dtype name.
    """
    if isinstance(name, torch.dtype):
        return name
    if name == "auto":
        if device.type == "cpu":
            return torch.float32
        return _DTYPES.get(str(checkpoint_dtype), torch.bfloat16)
    if name not in _DTYPES:
        raise AnnaError(f"unknown dtype {name!r}; use auto, bf16, fp16 or fp32")
    return _DTYPES[name]


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "xpu":
        torch.xpu.synchronize(device)


def memory_stats(device: torch.device) -> dict[str, int]:
    """``{"allocated_bytes", "reserved_bytes", "total_bytes", "free_bytes"}`` where known."""
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        return {"allocated_bytes": torch.cuda.memory_allocated(device),
                "reserved_bytes": torch.cuda.memory_reserved(device),
                "free_bytes": free, "total_bytes": total}
    if device.type == "xpu":
        return {"allocated_bytes": torch.xpu.memory_allocated(device),
                "reserved_bytes": torch.xpu.memory_reserved(device)}
    try:
        import os

        pages = os.sysconf("SC_PHYS_PAGES")
        avail = os.sysconf("SC_AVPHYS_PAGES")
        size = os.sysconf("SC_PAGE_SIZE")
        return {"total_bytes": pages * size, "free_bytes": avail * size}
    except (ValueError, OSError, AttributeError):
        return {}
