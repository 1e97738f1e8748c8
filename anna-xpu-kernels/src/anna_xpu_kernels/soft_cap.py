"""``linear_soft_cap``: an LM head with final-logit soft-capping (Gemma) as the decode GEMV plus one elementwise Triton
launch, where torch's ``.float()``, ``/ cap``, ``tanh`` and ``* cap`` are four launches over the ``[M, vocab]`` logits.

Math (the op's contract, :func:`anna_core.kernels.reference.linear.linear_soft_cap`): ``y = linear(x, weight)`` in
x's dtype (:func:`anna_xpu_kernels.gemv.linear`), then ``logits = tanh(float(y) / cap) * cap`` in float32, with
``tanh(u) = 1 - 2 / (exp(2u) + 1)`` (exact at the saturated ends; near zero within a few float32 ulps of ``cap``,
absolute: the logits' scale).
"""

from __future__ import annotations

import torch
from anna_core.kernels.reference.linear import check_linear_soft_cap

from anna_xpu_kernels import gemv, pdl
from anna_xpu_kernels._checks import require_float, require_same_device
from anna_xpu_kernels._triton import tl, triton

BLOCK = 2048
"""Logits per program."""


@triton.jit
def _soft_cap_kernel(y_ptr, out_ptr, n, cap, BLOCK: tl.constexpr, USE_PDL: tl.constexpr):
    pdl.enter(USE_PDL)
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < n
    u = tl.load(y_ptr + offs, mask=ok, other=0.0).to(tl.float32) / cap
    t = 1.0 - 2.0 / (tl.exp(2.0 * u) + 1.0)  # tanh(u); exp's overflow gives exactly 1
    tl.store(out_ptr + offs, t * cap, mask=ok)


def linear_soft_cap(x: torch.Tensor, weight: torch.Tensor, cap: float) -> torch.Tensor:
    """Signature of the reference ``linear_soft_cap``.

    Args:
        x: ``[M, K]`` (or ``[..., K]``) float32 / float16 / bfloat16; weight: ``[N, K]`` of x's dtype; cap: positive.

    Returns:
        ``[..., N]`` float32 soft-capped logits.

    Raises:
        ValueError: shapes or dtypes disagree, a cap that is not positive, unsupported dtype, or tensors on different
            devices.
    """
    op = "linear_soft_cap"
    check_linear_soft_cap(x, weight, cap)
    require_float(op, x=x)
    require_same_device(op, x=x, weight=weight)
    y = gemv.linear(x, weight, None).contiguous()
    out = torch.empty(y.shape, dtype=torch.float32, device=y.device)
    n = y.numel()
    if n:
        _soft_cap_kernel[(triton.cdiv(n, BLOCK),)](y, out, n, float(cap), BLOCK=BLOCK, num_warps=4,
                                                   **pdl.launch_options(y))
    return out
