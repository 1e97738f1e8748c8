"""Seeded sample tensors for the op examples: the same values on every call and every device.

Tensors are drawn on the CPU from one seeded generator per example function, then moved, so every device and
every implementation sees identical inputs.
"""

from __future__ import annotations

from typing import Any

import torch

EPS = 1e-6
"""The norms' epsilon in most examples."""


class SampleGen:
    """Seeded random tensors built on the CPU (the same values on every device), then moved."""

    def __init__(self, seed: int, device: Any, dtype: torch.dtype):
        self.gen = torch.Generator().manual_seed(seed)
        self.device = torch.device(device)
        self.dtype = dtype

    def randn(self, *shape: int, dtype: torch.dtype | None = None, scale: float = 1.0) -> torch.Tensor:
        x = torch.randn(*shape, generator=self.gen) * scale
        return x.to(dtype or self.dtype).to(self.device)

    def rand(self, *shape: int, dtype: torch.dtype | None = None) -> torch.Tensor:
        return torch.rand(*shape, generator=self.gen).to(dtype or self.dtype).to(self.device)

    def ints(self, values: list[int] | list[list[int]], dtype: torch.dtype = torch.int64) -> torch.Tensor:
        return torch.tensor(values, dtype=dtype, device=self.device)

    def perm(self, k: int, dtype: torch.dtype = torch.int64) -> torch.Tensor:
        """A random permutation of ``range(k)``."""
        return torch.randperm(k, generator=self.gen).to(dtype).to(self.device)

    def l2(self, *shape: int) -> torch.Tensor:
        x = torch.randn(*shape, generator=self.gen)
        return (x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + 1e-6)).to(self.dtype).to(self.device)

    def inv_freq(self, rotated: int, base: float = 10000.0) -> torch.Tensor:
        return (1.0 / base ** (torch.arange(0, rotated, 2, dtype=torch.float32) / rotated)).to(self.device)


def as_dtype(dtype: Any) -> torch.dtype:
    """``dtype`` as a ``torch.dtype`` (a ``torch.dtype`` or its name, ``"bfloat16"`` / ``"torch.bfloat16"``)."""
    return dtype if isinstance(dtype, torch.dtype) else getattr(torch, str(dtype).replace("torch.", ""))
