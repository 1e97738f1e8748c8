"""Fixtures of the MoE tests; the tiny random Qwen3.5 MoE checkpoints come from the package (:mod:`anna_qwen35.tiny`,
the family's ``tiny_checkpoint`` builder) and are imported from here too."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from anna_qwen35.tiny import HIDDEN, MOE_INTERMEDIATE, ROUTER_SCALE, SHARED_INTERMEDIATE, build_tiny_qwen35_moe, restack

__all__ = ["HIDDEN", "MOE_INTERMEDIATE", "ROUTER_SCALE", "SHARED_INTERMEDIATE", "build_tiny_qwen35_moe", "restack"]


@pytest.fixture(scope="session")
def tiny_moe_factory(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    built: dict[tuple[tuple[str, Any], ...], Path] = {}

    def build(**kwargs: Any) -> Path:
        key = tuple(sorted(kwargs.items()))
        if key not in built:
            built[key] = build_tiny_qwen35_moe(tmp_path_factory.mktemp("tiny-qwen35-moe"), **kwargs)
        return built[key]

    return build


@pytest.fixture(scope="session")
def prompt() -> list[int]:
    gen = torch.Generator().manual_seed(4321)
    return torch.randint(3, 320, (40,), generator=gen).tolist()
