"""The sample inputs of the projection ops: dense and quantized weights at decode and prefill row counts, the
exactly computed LM heads of the top-k head, and the fused norms and gated products."""

from __future__ import annotations

from typing import Any

import torch

from anna_core.kernels.contracts import OpExample
from anna_core.kernels.examples.sample_gen import EPS, SampleGen, as_dtype


def linear(device: Any, dtype: Any) -> list[OpExample]:
    r = SampleGen(16, device, as_dtype(dtype))
    return [OpExample((r.randn(1, 64), r.randn(24, 64, scale=0.2), None)),
            OpExample((r.randn(3, 64), r.randn(40, 64, scale=0.2), r.randn(40))),
            OpExample((r.randn(12, 32), r.randn(16, 32, scale=0.2), None))]  # beyond a decode GEMV's rows


def int4_linear(device: Any, dtype: Any) -> list[OpExample]:
    """Codes packed in the CPU's int4 layout (``aten::_convert_weight_to_int4pack_for_cpu``): no examples on another
    device type, whose packed layout differs."""
    r = SampleGen(28, device, as_dtype(dtype))
    if r.device.type != "cpu":
        return []
    out = []
    for m, n, k, g in ((1, 16, 64, 32), (3, 32, 128, 64)):
        codes = torch.randint(0, 16, (n, k), generator=r.gen, dtype=torch.int32)
        packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes, 1)
        scale_zero = torch.stack([torch.rand(k // g, n, generator=r.gen) * 0.05,
                                  torch.randn(k // g, n, generator=r.gen) * 0.01], dim=-1).to(r.dtype)
        out.append(OpExample((r.randn(m, k), packed, scale_zero.contiguous(), g)))
    return out


def _wq(r: SampleGen, n: int, k: int, scheme: str) -> tuple:
    """A random ``[N, K]`` weight quantized with ``scheme`` (scales in the activation dtype for int4)."""
    from anna_core.weights.gpu_quant import quantize

    q = quantize(torch.randn(n, k, generator=r.gen) * 0.2, scheme, r.dtype)
    return tuple(t.to(r.device) if t is not None else None for t in (q.qweight, q.scale, q.zero)) + (scheme,)


def wq_linear(device: Any, dtype: Any) -> list[OpExample]:
    """Each scheme at one and three rows (a decode GEMV) and at 12 rows; a bias; FP8 with partial blocks; an int4
    weight with its columns stored in a permuted order (act-order GPTQ: int64 and int32 ``perm``)."""
    r = SampleGen(32, device, as_dtype(dtype))
    out = []
    for scheme in ("int4", "int8", "fp8"):
        out.append(OpExample((r.randn(1, 256), *_wq(r, 24, 256, scheme), None), shape={"scheme": scheme}))
        out.append(OpExample((r.randn(3, 128), *_wq(r, 40, 128, scheme), r.randn(40)), shape={"scheme": scheme}))
        out.append(OpExample((r.randn(12, 128), *_wq(r, 16, 128, scheme), None), shape={"scheme": scheme}))
    out.append(OpExample((r.randn(2, 160), *_wq(r, 136, 160, "fp8"), None), shape={"scheme": "fp8"}))
    out.append(OpExample((r.randn(2, 96), *_wq(r, 20, 96, "int8"), None), shape={"scheme": "int8"}))
    out.append(OpExample((r.randn(1, 256), *_wq(r, 24, 256, "int4"), None, r.perm(256)), shape={"scheme": "int4"}))
    out.append(OpExample((r.randn(12, 256), *_wq(r, 16, 256, "int4"), r.randn(16), r.perm(256, torch.int32)),
                         shape={"scheme": "int4"}))
    return out


def dyadic(r: SampleGen, *shape: int, scale: float, lo: int = -4, hi: int = 4) -> torch.Tensor:
    """Random integers in ``[lo, hi]`` times a power of two ``scale`` (float32, on the CPU): exact in every float
    dtype, and their sums of products exact in float32 in any order."""
    return torch.randint(lo, hi + 1, shape, generator=r.gen).float() * scale


def exact_head(r: SampleGen, n: int, k: int, scheme: str) -> tuple:
    """A ``[N, K]`` head whose logits every implementation computes exactly (dyadic codes, scales and zeros), so
    implementations agree on every rounding, tie and index: ``(weight, scale, zero, scheme)`` on the device."""
    from anna_core.weights.gpu_quant import FP8_BLOCK, INT4_GROUP

    def on(*tensors):
        return tuple(t.to(r.device) if t is not None else None for t in tensors)

    if scheme == "none":
        w = dyadic(r, n, k, scale=0.125)
        w[n - 3] = w[5]  # equal logits at ids 5 and n - 3
        return (*on(w.to(r.dtype), None, None), scheme)
    if scheme == "int4":
        q = torch.randint(0, 256, (n, k // 2), generator=r.gen).to(torch.uint8)
        groups = (n, k // INT4_GROUP)
        scale = torch.full(groups, 2.0**-4).to(r.dtype)
        return (*on(q, scale, torch.full(groups, -0.5).to(r.dtype)), scheme)
    if scheme == "int8":
        q = torch.randint(-127, 128, (n, k), generator=r.gen).to(torch.int8)
        return (*on(q, 2.0 ** -torch.randint(7, 9, (n,), generator=r.gen).float(), None), scheme)
    q = dyadic(r, n, k, scale=1.0, lo=-16, hi=16).to(torch.float8_e4m3fn)
    blocks = (-(-n // FP8_BLOCK), -(-k // FP8_BLOCK))
    return (*on(q, torch.full(blocks, 2.0**-6), None), scheme)


def lm_head_topk(device: Any, dtype: Any) -> list[OpExample]:
    """A dense head and each quantized layout at one and three rows; k of 1, 5 and 64; a soft-cap; a vocabulary
    that is no multiple of a kernel's tile. Exact arithmetic (dyadic values, :func:`exact_head`), so every
    implementation rounds the logits alike and the many equal logits (two equal weight rows; bfloat16 rounding)
    must come out the lower id first."""
    r = SampleGen(35, device, as_dtype(dtype))
    out = []
    dense = exact_head(r, 300, 128, "none")
    for rows, k, cap in ((1, 64, None), (3, 5, 10.0), (2, 1, None)):
        x = dyadic(r, rows, 128, scale=0.125).to(r.dtype).to(r.device)
        out.append(OpExample((x, *dense, k, cap), shape={"scheme": "none"}))
    for scheme in ("int4", "int8", "fp8"):
        head = exact_head(r, 200, 256, scheme)
        for rows, k, cap in ((1, 1, None), (3, 64, 10.0)):
            x = dyadic(r, rows, 256, scale=0.125).to(r.dtype).to(r.device)
            out.append(OpExample((x, *head, k, cap), shape={"scheme": scheme}))
    return out


def add_rms_norm_wq_linear(device: Any, dtype: Any) -> list[OpExample]:
    """Each scheme, with and without a residual, plain and with each gated product; int4 with a permuted column
    order (act-order GPTQ), with and without a residual."""
    r = SampleGen(33, device, as_dtype(dtype))
    out = []
    for scheme in ("int4", "int8", "fp8"):
        out.append(OpExample((r.randn(1, 128), r.randn(1, 128), r.randn(128), EPS, True, *_wq(r, 24, 128, scheme)),
                             shape={"scheme": scheme}))
        out.append(OpExample((r.randn(2, 256), None, r.randn(256), EPS, False, *_wq(r, 48, 256, scheme), "silu"),
                             shape={"scheme": scheme}))
        out.append(OpExample((r.randn(3, 128), r.randn(3, 128), r.randn(128), EPS, True, *_wq(r, 32, 128, scheme),
                              "gelu_tanh"), shape={"scheme": scheme}))
    # act-order int4: the input columns stored in a permuted order
    out.append(OpExample((r.randn(1, 256), r.randn(1, 256), r.randn(256), EPS, True, *_wq(r, 24, 256, "int4"), None,
                          r.perm(256, torch.int32)), shape={"scheme": "int4"}))
    out.append(OpExample((r.randn(2, 256), None, r.randn(256), EPS, False, *_wq(r, 48, 256, "int4"), "silu",
                          r.perm(256)), shape={"scheme": "int4"}))
    return out


def add_rms_norm_linear(device: Any, dtype: Any) -> list[OpExample]:
    r = SampleGen(17, device, as_dtype(dtype))
    return [OpExample((r.randn(2, 64), r.randn(2, 64), r.randn(64), EPS, False, r.randn(24, 64, scale=0.2))),
            OpExample((r.randn(3, 64), None, r.randn(64), EPS, True, r.randn(40, 64, scale=0.2)))]


def act_mul_linear(device: Any, dtype: Any) -> list[OpExample]:
    r = SampleGen(18, device, as_dtype(dtype))
    return [OpExample((r.randn(2, 64), r.randn(24, 32, scale=0.2), act)) for act in ("silu", "gelu_tanh")]


def gated_linear(device: Any, dtype: Any) -> list[OpExample]:
    r = SampleGen(19, device, as_dtype(dtype))
    up_wide = r.randn(3, 64)
    return [OpExample((r.randn(2, 32), r.randn(2, 32), r.randn(24, 32, scale=0.2), "silu")),
            OpExample((r.randn(3, 32), up_wide[:, 32:], r.randn(16, 32, scale=0.2), "gelu_tanh"))]


def linear_act_mul(device: Any, dtype: Any) -> list[OpExample]:
    r = SampleGen(20, device, as_dtype(dtype))
    return [OpExample((r.randn(2, 32), r.randn(48, 32, scale=0.2), act)) for act in ("silu", "gelu_tanh")]


def add_rms_norm_linear_act_mul(device: Any, dtype: Any) -> list[OpExample]:
    r = SampleGen(21, device, as_dtype(dtype))
    return [OpExample((r.randn(2, 32), r.randn(2, 32), r.randn(32), EPS, False, r.randn(48, 32, scale=0.2), "silu")),
            OpExample((r.randn(3, 32), None, r.randn(32), EPS, True, r.randn(32, 32, scale=0.2), "gelu_tanh"))]


def post_norm_residual_linear(device: Any, dtype: Any) -> list[OpExample]:
    r = SampleGen(31, device, as_dtype(dtype))
    x, res = r.randn(1, 32), r.randn(1, 32)
    return [OpExample((x, res, r.randn(32), EPS, False, None, r.randn(32), r.randn(24, 32, scale=0.2))),
            OpExample((x, res, r.randn(32), EPS, False, r.randn(1), None, r.randn(16, 32, scale=0.2))),
            OpExample((r.randn(3, 32), r.randn(3, 32), r.randn(32), EPS, True, r.randn(1), r.randn(32),
                       r.randn(48, 32, scale=0.2), "gelu_tanh"))]


def post_norm_residual_gated_linear(device: Any, dtype: Any) -> list[OpExample]:
    r = SampleGen(32, device, as_dtype(dtype))
    up_wide = r.randn(3, 48)  # a strided view, as Gemma 4 slices one layer's per-layer input
    return [OpExample((r.randn(1, 32), r.randn(1, 32), r.randn(32), EPS, False, None, r.randn(24, 32, scale=0.2),
                       r.randn(1, 24), r.randn(32, 24, scale=0.2), "gelu_tanh")),
            OpExample((r.randn(3, 32), r.randn(3, 32), r.randn(32), EPS, True, r.randn(1), r.randn(16, 32, scale=0.2),
                       up_wide[:, 16:32], r.randn(32, 16, scale=0.2), "silu"))]


def linear_soft_cap(device: Any, dtype: Any) -> list[OpExample]:
    r = SampleGen(34, device, as_dtype(dtype))
    return [OpExample((r.randn(1, 64), r.randn(40, 64), 3.0)),  # logits well past the cap: tanh saturates
            OpExample((r.randn(3, 32), r.randn(24, 32, scale=0.2), 30.0))]


def linear_soft_cap_argmax(device: Any, dtype: Any) -> list[OpExample]:
    """Rows whose largest logit stands well clear of the rest (a planted row of the weight along x), so that every
    implementation's rounding picks it, each planted twice (equal largest values: the first one counts)."""
    r = SampleGen(35, device, as_dtype(dtype))
    x, weight = r.randn(3, 32), r.randn(4100, 32, scale=0.05)
    # one in the masked last block, one at a block's start; each copied to a later column of another block
    for row, (col, copy) in enumerate(((7, 3000), (4000, 4099), (2048, 4097))):
        weight[col] = weight[copy] = x[row] * 0.5
    return [OpExample((x, weight, 30.0)), OpExample((x[:1], weight[:40], 30.0))]
