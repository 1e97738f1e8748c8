"""The sample inputs of the mixture-of-experts ops: well-separated router logits, dense and quantized experts."""

from __future__ import annotations

from typing import Any

import torch

from anna_core.kernels.contracts import OpExample
from anna_core.kernels.examples.sample_gen import SampleGen, as_dtype


def moe_route(device: Any, dtype: Any) -> list[OpExample]:
    r = SampleGen(22, device, as_dtype(dtype))
    # well-separated logits: no two probabilities within a few ulps, so every implementation picks the same ids
    logits = (torch.randperm(8 * 5, generator=r.gen).reshape(5, 8).float() * 0.25).to(r.dtype).to(r.device)
    return [OpExample((logits, 2, None, r.dtype), shape={"num_experts": 8}),
            OpExample((logits, 3, r.rand(8) + 0.5, torch.float32), shape={"num_experts": 8})]


def moe_experts(device: Any, dtype: Any) -> list[OpExample]:
    r = SampleGen(23, device, as_dtype(dtype))
    e, h, i = 4, 32, 16
    gate_up, down = r.randn(e, 2 * i, h, scale=0.2), r.randn(e, h, i, scale=0.2)
    ids = r.ints([[0, 2], [3, 0], [1, 2], [2, 3], [0, 1]])
    weights = torch.softmax(torch.randn(5, 2, generator=r.gen), -1).to(r.device)
    one = r.ints([[3, 1]], torch.int32)
    return [OpExample((r.randn(5, h), gate_up, down, weights, ids, "silu")),
            OpExample((r.randn(1, h), gate_up, down, weights[:1].to(r.dtype), one, "gelu_tanh"))]


def _wq_stacked(r: SampleGen, e: int, n: int, k: int, scheme: str) -> tuple:
    """Random ``[E, N, K]`` weights quantized with ``scheme``: ``(qweight, scale, zero)`` stacked over ``E``."""
    from anna_core.weights.gpu_quant import quantize_stacked

    q = quantize_stacked(torch.randn(e, n, k, generator=r.gen) * 0.2, scheme, r.dtype)
    return tuple(t.to(r.device) if t is not None else None for t in (q.qweight, q.scale, q.zero))


def moe_experts_wq(device: Any, dtype: Any) -> list[OpExample]:
    """Each scheme: five tokens at top-2 of 4 experts and one token at top-3; int8 and fp8 at an intermediate
    width that is not a multiple of 128 (fp8: partial scale blocks; int4 needs multiples of 128)."""
    r = SampleGen(34, device, as_dtype(dtype))
    e, h = 4, 128
    out = []
    for scheme, inter in (("int4", 128), ("int8", 40), ("fp8", 72)):
        args = (*_wq_stacked(r, e, 2 * inter, h, scheme), *_wq_stacked(r, e, h, inter, scheme))
        weights = torch.softmax(torch.randn(5, 2, generator=r.gen), -1).to(r.device)
        ids = r.ints([[0, 2], [3, 0], [1, 2], [2, 3], [0, 1]])
        out.append(OpExample((r.randn(5, h), *args, weights, ids, "silu", scheme), shape={"scheme": scheme}))
        one = torch.softmax(torch.randn(1, 3, generator=r.gen), -1).to(r.dtype).to(r.device)
        out.append(OpExample((r.randn(1, h), *args, one, r.ints([[3, 1, 0]], torch.int32), "gelu_tanh", scheme),
                             shape={"scheme": scheme}))
    return out
