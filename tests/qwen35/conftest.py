"""Shared helpers of the Qwen3.5 family tests."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch


def load_anna(path: Path, *, dtype: torch.dtype = torch.float32, load_format: str = "auto", **options):
    """Load ``path`` with the Qwen3.5 family loader on the CPU (``options``: the loader's others, e.g.
    ``weight_quant`` / ``expert_quant``)."""
    from anna_core.kernels.registry import KernelRegistry
    from anna_core.model_dir import inspect_model_dir
    from anna_qwen35.loader import load

    return load(inspect_model_dir(path), device=torch.device("cpu"), dtype=dtype, load_format=load_format,
                kernels=KernelRegistry.from_plugins(), **options)


@pytest.fixture(scope="session")
def long_prompt() -> list[int]:
    """A 150-token prompt (more than two 64-token gated-delta chunks), fixed."""
    gen = torch.Generator().manual_seed(1234)
    return torch.randint(3, 320, (150,), generator=gen).tolist()


def rel_err(mine: torch.Tensor, ref: torch.Tensor) -> float:
    """``max|mine - ref| / max|ref|``."""
    return ((mine - ref).abs().max() / ref.abs().max()).item()
