"""SnakeBeta in Triton (``snake_beta``; contract and torch reference:
:func:`anna_core.kernels.reference.activations.snake_beta`): one launch reading x once and writing y once, in place
of the eager expression's seven (two exponentials, an addition, a product, a sine, a square and ``addcdiv``, each a
pass over x's size but the first three).

Math, per element, as the reference evaluates ``addcdiv(x, sin(x * exp(alpha))^2, exp(beta) + 1e-9)`` in x's dtype
(each op computed in float32 and rounded to x's dtype, ``addcdiv`` rounding once; the roundings are no-ops in
float32)::

    a = round(exp(alpha_c)), d = round(round(exp(beta_c)) + 1e-9)
    y = round(x + round(round(sin(round(x * a)))^2) / d)

A program covers ``BLOCK`` consecutive values of x's memory, x ``[B, C, T]`` dense in either layout the codec
decoder holds (``[B, C, T]``-contiguous, or time-major: channels-last, strides ``(T * C, 1, C)``); the output has
x's layout. Any other layout is first copied contiguous.
"""

from __future__ import annotations

import torch
from anna_core.kernels.reference.activations import check_snake_beta

from anna_xpu_kernels._checks import require_float
from anna_xpu_kernels._triton import next_pow2, tl, triton

MAX_BLOCK = 1024
"""Most values of one program."""


@triton.jit(do_not_specialize=["n", "T"])
def _snake_beta_kernel(x_ptr, a_ptr, b_ptr, y_ptr, n, C, T, TIME_MAJOR: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    dt = y_ptr.dtype.element_ty
    if TIME_MAJOR:  # memory [B, T, C]
        c = (offs % C).to(tl.int32)
    else:  # memory [B, C, T]
        c = ((offs // T) % C).to(tl.int32)
    a = tl.exp(tl.load(a_ptr + c, mask=mask, other=0.0).to(tl.float32)).to(dt).to(tl.float32)
    d = (tl.exp(tl.load(b_ptr + c, mask=mask, other=0.0).to(tl.float32)).to(dt).to(tl.float32) + 1e-9)
    d = d.to(dt).to(tl.float32)
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    s = tl.sin((x * a).to(dt).to(tl.float32)).to(dt).to(tl.float32)
    y = x + (s * s).to(dt).to(tl.float32) / d
    tl.store(y_ptr + offs, y.to(dt), mask=mask)


def snake_beta(x: torch.Tensor, alpha: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    """``x + sin(x * exp(alpha))^2 / (exp(beta) + 1e-9)`` per channel (module docstring).

    Args:
        x: ``[B, C, T]`` float32 / float16 / bfloat16, any layout (contiguous and time-major are read in place).
        alpha, beta: ``[C]`` of x's dtype.

    Returns:
        ``[B, C, T]`` in x's dtype (a fresh tensor, time-major when x is, else contiguous).

    Raises:
        ValueError: see :func:`~anna_core.kernels.reference.activations.check_snake_beta`; an unsupported dtype.
    """
    check_snake_beta(x, alpha, beta)
    require_float("snake_beta", x=x)
    _, c, t = x.shape
    time_major = c > 1 and t > 1 and x.transpose(1, 2).is_contiguous()
    if not time_major:
        x = x.contiguous()
    y = torch.empty_like(x)  # x's (dense) layout
    n = x.numel()
    if n:
        block = min(MAX_BLOCK, next_pow2(n))
        _snake_beta_kernel[(triton.cdiv(n, block),)](x, alpha.contiguous(), beta.contiguous(), y, n, c, t,
                                                     TIME_MAJOR=time_major, BLOCK=block,
                                                     num_warps=4 if block >= 512 else 1)
    return y
