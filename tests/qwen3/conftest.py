"""Shared helpers of the Qwen3 family tests."""

from __future__ import annotations

from pathlib import Path

import torch


def load_anna(path: Path, *, dtype: torch.dtype = torch.float32, load_format: str = "auto"):
    """Load ``path`` on the CPU through model-dir inspection and family selection from the installed plugins."""
    from anna_core.kernels.registry import KernelRegistry
    from anna_core.model_dir import inspect_model_dir, select_family
    from anna_core.plugins import make_plugin_manager, model_families
    from anna_core.registry import resolve

    pm = make_plugin_manager()
    source = inspect_model_dir(path)
    family = select_family(source, model_families(pm))
    return resolve(family.loader)(source, device=torch.device("cpu"), dtype=dtype, load_format=load_format,
                                  kernels=KernelRegistry.from_plugins(pm))


def rel_err(mine: torch.Tensor, ref: torch.Tensor) -> float:
    """``max|mine - ref| / max|ref|``."""
    return ((mine - ref).abs().max() / ref.abs().max()).item()
