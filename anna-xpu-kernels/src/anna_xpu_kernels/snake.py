"""SnakeBeta in Triton (``snake_beta``; contract and torch reference:
:func:`anna_core.kernels.reference.activations.snake_beta`): one launch reading x once and writing y once, in place
of the eager expression's seven (two exponentials, an addition, a product, a sine, a square and ``addcdiv``, each a
pass over x's size but the first three).

Math, per element, as the reference evaluates ``addcdiv(x, sin(x * exp(alpha))^2, exp(beta) + 1e-9)`` in x's dtype
(each op computed in float32 and rounded to x's dtype, ``addcdiv`` rounding once; the roundings are no-ops in
float32)::

    a = round(exp(alpha_c)), d = round(round(exp(beta_c)) + 1e-9)
    y = round(x + round(round(sin(round(x * a)))^2) / d)

A program covers ``BLOCK`` values of one ``(b, c)`` row of x ``[B, C, T]`` (unit stride along T, any other strides:
a causal convolution's sliced output is read in place).
"""

from __future__ import annotations

import torch
from anna_core.kernels.reference.activations import check_snake_beta

from anna_xpu_kernels._checks import require_float
from anna_xpu_kernels._triton import next_pow2, tl, triton

MAX_BLOCK = 1024
"""Most values of one program."""


@triton.jit(do_not_specialize=["n_rows"])
def _snake_beta_kernel(x_ptr, a_ptr, b_ptr, y_ptr, n_rows, C, T, stride_xb, stride_xc, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < T
    dt = y_ptr.dtype.element_ty
    c = row % C
    a = tl.exp(tl.load(a_ptr + c).to(tl.float32)).to(dt).to(tl.float32)
    d = (tl.exp(tl.load(b_ptr + c).to(tl.float32)).to(dt).to(tl.float32) + 1e-9).to(dt).to(tl.float32)
    src = x_ptr + (row // C).to(tl.int64) * stride_xb + c.to(tl.int64) * stride_xc
    x = tl.load(src + cols, mask=mask, other=0.0).to(tl.float32)
    s = tl.sin((x * a).to(dt).to(tl.float32)).to(dt).to(tl.float32)
    y = x + (s * s).to(dt).to(tl.float32) / d
    tl.store(y_ptr + row.to(tl.int64) * T + cols, y.to(dt), mask=mask)


def snake_beta(x: torch.Tensor, alpha: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    """``x + sin(x * exp(alpha))^2 / (exp(beta) + 1e-9)`` per channel (module docstring).

    Args:
        x: ``[B, C, T]`` float32 / float16 / bfloat16, unit stride along T.
        alpha, beta: ``[C]`` of x's dtype.

    Returns:
        ``[B, C, T]`` contiguous, in x's dtype (a fresh tensor).

    Raises:
        ValueError: see :func:`~anna_core.kernels.reference.activations.check_snake_beta`; an unsupported dtype.
    """
    check_snake_beta(x, alpha, beta)
    require_float("snake_beta", x=x)
    b, c, t = x.shape
    y = torch.empty((b, c, t), dtype=x.dtype, device=x.device)
    if b * c and t:
        block = min(MAX_BLOCK, next_pow2(t))
        _snake_beta_kernel[(b * c, triton.cdiv(t, block))](x, alpha.contiguous(), beta.contiguous(), y, b * c, c, t,
                                                            x.stride(0), x.stride(1), BLOCK=block,
                                                            num_warps=4 if block >= 512 else 1)
    return y
