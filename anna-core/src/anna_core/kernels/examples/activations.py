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


def snake_beta(device: Any, dtype: Any) -> list[OpExample]:
    r = SampleGen(10, device, as_dtype(dtype))
    wide = r.randn(2, 6, 80, scale=3.0)  # a causal convolution's output before its slice: a strided view
    time_major = r.randn(2, 41, 7, scale=3.0).transpose(1, 2)  # [2, 7, 41], channels-last (the codec decoder's)
    return [OpExample((r.randn(2, 5, 37, scale=3.0), r.randn(5, scale=0.5), r.randn(5, scale=0.5))),
            OpExample((wide[:, :, 11:70], r.randn(6, scale=0.5), r.randn(6, scale=0.5))),
            OpExample((time_major, r.randn(7, scale=0.5), r.randn(7, scale=0.5))),
            OpExample((r.randn(1, 3, 1), r.randn(3, scale=0.5), r.randn(3, scale=0.5)))]
