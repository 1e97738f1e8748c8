"""The sample inputs of the gated DeltaNet's causal conv1d and gated delta rule: ragged batches over chunk
boundaries, fresh and non-zero states."""

from __future__ import annotations

from typing import Any

import torch

from anna_core.kernels.contracts import OpExample
from anna_core.kernels.examples.sample_gen import SampleGen, as_dtype


def _gdr_inputs(r: SampleGen, rows: int, h_k: int, h_v: int, d_k: int, d_v: int) -> tuple[torch.Tensor, ...]:
    q, k = r.l2(rows, h_k, d_k), r.l2(rows, h_k, d_k)
    v = r.randn(rows, h_v, d_v)
    g = -torch.rand(rows, h_v, generator=r.gen).mul(0.5).to(r.device)  # float32 log decay <= 0
    beta = r.rand(rows, h_v)
    return q, k, v, g, beta


def causal_conv1d_prefill(device: Any, dtype: Any) -> list[OpExample]:
    r = SampleGen(10, device, as_dtype(dtype))
    lens = [5, 2, 7]  # a sequence shorter than the kernel's W-1 = 3 inputs of state
    cu = r.ints([0, 5, 7, 14], torch.int32)
    states = r.randn(5, 24, 3)
    states[3].zero_()  # a fresh slot
    return [OpExample((r.randn(sum(lens), 24), r.randn(24, 4), r.randn(24), cu, states, r.ints([3, 0, 4]), "silu")),
            OpExample((r.randn(4, 16), r.randn(16, 4), None, r.ints([0, 4], torch.int32), r.randn(2, 16, 3),
                       r.ints([1]), None))]


def causal_conv1d_update(device: Any, dtype: Any) -> list[OpExample]:
    r = SampleGen(11, device, as_dtype(dtype))
    return [OpExample((r.randn(3, 24), r.randn(24, 4), r.randn(24), r.randn(5, 24, 3), r.ints([4, 0, 2]), "silu")),
            OpExample((r.randn(2, 16), r.randn(16, 4), None, r.randn(3, 16, 3), r.ints([1, 2]), None))]


def gated_delta_rule_prefill(device: Any, dtype: Any) -> list[OpExample]:
    r = SampleGen(12, device, as_dtype(dtype))
    lens = [70, 5]  # one sequence over a 64-token chunk boundary
    q, k, v, g, beta = _gdr_inputs(r, sum(lens), 1, 2, 16, 16)
    states = r.randn(3, 2, 16, 16, dtype=torch.float32, scale=0.1)
    states[2].zero_()
    cu = r.ints([0, 70, 75], torch.int32)
    return [OpExample((q, k, v, g, beta, cu, states, r.ints([2, 0]), 16 ** -0.5))]


def gated_delta_rule_decode(device: Any, dtype: Any) -> list[OpExample]:
    r = SampleGen(13, device, as_dtype(dtype))
    q, k, v, g, beta = _gdr_inputs(r, 3, 1, 2, 16, 32)
    states = r.randn(4, 2, 16, 32, dtype=torch.float32, scale=0.1)
    return [OpExample((q, k, v, g, beta, states, r.ints([3, 0, 1]), 16 ** -0.5))]
