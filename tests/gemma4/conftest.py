"""Shared fixtures of the Gemma 4 family tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.gemma4.tiny import build_tiny_gemma4


def load_anna(path: Path, *, dtype: torch.dtype = torch.float32, load_format: str = "auto", **options):
    """Load ``path`` with the Gemma 4 family loader on the CPU (``options``: the loader's others, e.g.
    ``weight_quant`` / ``expert_quant``)."""
    from anna_core.kernels.registry import KernelRegistry
    from anna_core.model_dir import inspect_model_dir
    from anna_gemma4.loader import load

    return load(inspect_model_dir(path), device=torch.device("cpu"), dtype=dtype, load_format=load_format,
                kernels=KernelRegistry.from_plugins(), **options)


@pytest.fixture(scope="session")
def gemma4_factory(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """``build(**kwargs) -> Path``: :func:`build_tiny_gemma4` once per distinct ``kwargs``."""
    built: dict[tuple, Path] = {}

    def build(**kwargs: Any) -> Path:
        key = tuple(sorted((k, repr(v)) for k, v in kwargs.items()))
        if key not in built:
            built[key] = build_tiny_gemma4(tmp_path_factory.mktemp("tiny-gemma4"), **kwargs)
        return built[key]

    return build


@pytest.fixture(scope="session")
def prompt() -> list[int]:
    """A fixed 70-token prompt (more than four 16-token sliding windows), ids in ``3..319``."""
    gen = torch.Generator().manual_seed(1234)
    return torch.randint(3, 320, (70,), generator=gen).tolist()


def rel_err(mine: torch.Tensor, ref: torch.Tensor) -> float:
    """``max|mine - ref| / max|ref|``."""
    return ((mine - ref).abs().max() / ref.abs().max()).item()


def hf_greedy(path: Path, ids: list[int], n: int, model=None) -> list[int]:
    """``n`` greedy tokens from HF ``generate`` with no end-of-sequence token at all (the tiny checkpoints'
    configs name one, which ``generate`` would otherwise stop at)."""
    from anna_core.testing.oracle import hf_greedy as greedy
    from anna_core.testing.oracle import hf_model

    model = model if model is not None else hf_model(path)
    model.generation_config.eos_token_id = None
    return greedy(path, ids, n, model)
