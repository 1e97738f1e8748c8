"""The sample inputs of the element-wise activation ops (a strided gate among them)."""

from __future__ import annotations

from typing import Any

from anna_core.kernels.contracts import OpExample
from anna_core.kernels.examples.sample_gen import SampleGen, as_dtype


def silu_and_mul(device: Any, dtype: Any) -> list[OpExample]:
    r = SampleGen(8, device, as_dtype(dtype))
    return [OpExample((r.randn(3, 64),)), OpExample((r.randn(2, 2, 48),))]


def sigmoid_mul(device: Any, dtype: Any) -> list[OpExample]:
    r = SampleGen(9, device, as_dtype(dtype))
    wide = r.randn(4, 64)
    return [OpExample((r.randn(3, 32), r.randn(3, 32))), OpExample((r.randn(4, 32), wide[:, 32:]))]  # strided gate
