"""Shared fixtures of the Gemma 3 family tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.gemma3.tiny import build_tiny_gemma3


def load_anna(path: Path, *, dtype: torch.dtype = torch.float32, load_format: str = "auto"):
    """Load ``path`` (a folder or a GGUF) with the Gemma 3 family loader on the CPU."""
    from anna_core.kernels.registry import KernelRegistry
    from anna_core.model_dir import inspect_model_dir
    from anna_gemma4.gemma3.loader import load

    return load(inspect_model_dir(path), device=torch.device("cpu"), dtype=dtype, load_format=load_format,
                kernels=KernelRegistry.from_plugins())


@pytest.fixture(scope="session")
def gemma3_factory(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """``build(**kwargs) -> Path``: :func:`build_tiny_gemma3` once per distinct ``kwargs``."""
    built: dict[tuple, Path] = {}

    def build(**kwargs: Any) -> Path:
        key = tuple(sorted((k, repr(v)) for k, v in kwargs.items()))
        if key not in built:
            built[key] = build_tiny_gemma3(tmp_path_factory.mktemp("tiny-gemma3"), **kwargs)
        return built[key]

    return build


@pytest.fixture(scope="session")
def prompt() -> list[int]:
    """A fixed 70-token prompt (more than four 16-token sliding windows), ids in ``3..319``."""
    gen = torch.Generator().manual_seed(4321)
    return torch.randint(3, 320, (70,), generator=gen).tolist()
