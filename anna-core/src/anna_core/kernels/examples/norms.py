"""The sample inputs of the normalisation ops: plain, gated and zero-centred norms, residual adds and post norms."""

from __future__ import annotations

from typing import Any

import torch

from anna_core.kernels.contracts import OpExample
from anna_core.kernels.examples.sample_gen import EPS, SampleGen, as_dtype


def rms_norm(device: Any, dtype: Any) -> list[OpExample]:
    r = SampleGen(1, device, as_dtype(dtype))
    return [OpExample((r.randn(3, 32), r.randn(32), EPS, zc)) for zc in (False, True)] + [
        OpExample((r.randn(2, 3, 48), r.randn(48), 1e-5, False))]


def gated_rms_norm(device: Any, dtype: Any) -> list[OpExample]:
    r = SampleGen(2, device, as_dtype(dtype))
    return [OpExample((r.randn(3, 2, 16), r.randn(3, 2, 16), r.randn(16), EPS)),
            OpExample((r.randn(5, 32), r.randn(5, 32), r.randn(32), 1e-5))]


def add_rms_norm(device: Any, dtype: Any) -> list[OpExample]:
    r = SampleGen(3, device, as_dtype(dtype))
    return [OpExample((r.randn(3, 32), r.randn(3, 32), r.randn(32), EPS, False)),
            OpExample((r.randn(4, 32), None, r.randn(32), EPS, True))]


def post_norm_residual(device: Any, dtype: Any) -> list[OpExample]:
    r = SampleGen(4, device, as_dtype(dtype))
    return [OpExample((r.randn(3, 32), r.randn(3, 32), r.randn(32), EPS, False, None, r.randn(32))),
            OpExample((r.randn(4, 32), r.randn(4, 32), r.randn(32), EPS, True, r.rand(1) + 0.5, None))]


def dual_post_norm_residual(device: Any, dtype: Any) -> list[OpExample]:
    r = SampleGen(5, device, as_dtype(dtype))
    return [OpExample((r.randn(3, 32), r.randn(32), r.randn(3, 32), r.randn(32), r.randn(3, 32), r.randn(32), EPS,
                       zc, r.rand(1) + 0.5 if zc else None, r.randn(32) if zc else None))
            for zc in (False, True)]


def rms_norm_pair(device: Any, dtype: Any) -> list[OpExample]:
    r = SampleGen(6, device, as_dtype(dtype))
    return [OpExample((r.randn(3, 32), r.randn(32), EPS, zc, r.randn(32), 32 ** -0.5))
            for zc in (False, True)]


def post_norm_residual_norm_pair(device: Any, dtype: Any) -> list[OpExample]:
    r = SampleGen(7, device, as_dtype(dtype))
    return [OpExample((r.randn(3, 32), r.randn(3, 32), r.randn(32), EPS, zc, r.randn(32), r.randn(32), r.randn(32),
                       32 ** -0.5)) for zc in (False, True)]


def per_layer_inputs(device: Any, dtype: Any) -> list[OpExample]:
    r = SampleGen(33, device, as_dtype(dtype))
    ids = torch.tensor([3, 0, 7], device=r.device)
    return [OpExample((r.randn(1, 4 * 16), ids[:1], r.randn(8, 4 * 16), 4.0, r.randn(16), EPS, False, 0.125,
                       2.0 ** -0.5)),
            OpExample((r.randn(3, 3 * 24), ids, r.randn(8, 3 * 24), 1.5, r.randn(24), EPS, True, 0.3, 0.7))]
