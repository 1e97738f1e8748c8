"""``linear_soft_cap``: an LM head with final-logit soft-capping (Gemma) as the decode GEMV plus one elementwise Triton
launch, where torch's ``.float()``, ``/ cap``, ``tanh`` and ``* cap`` are four launches over the ``[M, vocab]`` logits.

Math (the op's contract, :func:`anna_core.kernels.reference.linear.linear_soft_cap`): ``y = linear(x, weight)`` in
x's dtype (:func:`anna_xpu_kernels.gemv.linear`), then ``logits = tanh(float(y) / cap) * cap`` in float32, with
``tanh(u) = 1 - 2 / (exp(2u) + 1)`` (exact at the saturated ends; near zero within a few float32 ulps of ``cap``,
absolute: the logits' scale).

``linear_soft_cap_argmax`` (greedy sampling's ids, :func:`anna_core.kernels.reference.linear.linear_soft_cap_argmax`):
the same GEMV, then one launch that soft-caps each block of 2,048 logits and keeps its largest (the first among
equals) without writing the logits, and one launch that picks each row's first largest of its blocks' partials: the
float32 logits (1 MiB a row at a 262,144-token vocabulary) are never written, and torch's argmax over them (one
reduction launch, ~11 µs at batch 1 on an H200) is not run.
"""

from __future__ import annotations

import torch
from anna_core.kernels.reference.linear import check_linear_soft_cap, check_linear_soft_cap_argmax

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


@triton.jit
def _soft_cap_argmax_partials_kernel(y_ptr, max_ptr, idx_ptr, n, blocks, cap, BLOCK: tl.constexpr,
                                     USE_PDL: tl.constexpr):
    """Program (row, block): the soft cap of ``y[row, block * BLOCK:][:BLOCK]`` (as :func:`_soft_cap_kernel` computes
    it), its largest value and that value's first column into ``max[row, block]`` / ``idx[row, block]``."""
    pdl.enter(USE_PDL)
    row = tl.program_id(0).to(tl.int64)
    block = tl.program_id(1).to(tl.int64)
    offs = block * BLOCK + tl.arange(0, BLOCK)
    ok = offs < n
    u = tl.load(y_ptr + row * n + offs, mask=ok, other=0.0).to(tl.float32) / cap
    t = 1.0 - 2.0 / (tl.exp(2.0 * u) + 1.0)  # tanh(u), as _soft_cap_kernel
    capped = tl.where(ok, t * cap, float("-inf"))
    best, at = tl.max(capped, axis=0, return_indices=True, return_indices_tie_break_left=True)
    tl.store(max_ptr + row * blocks + block, best)
    tl.store(idx_ptr + row * blocks + block, block * BLOCK + at)


@triton.jit
def _argmax_of_blocks_kernel(max_ptr, idx_ptr, out_ptr, blocks, BLOCKS: tl.constexpr, USE_PDL: tl.constexpr):
    """Program row: ``out[row]`` = the column of the first block holding the row's largest partial (blocks are in
    column order, so this is the row's first largest column)."""
    pdl.enter(USE_PDL)
    row = tl.program_id(0).to(tl.int64)
    j = tl.arange(0, BLOCKS)
    best = tl.load(max_ptr + row * blocks + j, mask=j < blocks, other=float("-inf"))
    _, k = tl.max(best, axis=0, return_indices=True, return_indices_tie_break_left=True)
    tl.store(out_ptr + row, tl.load(idx_ptr + row * blocks + k))


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


def linear_soft_cap_argmax(x: torch.Tensor, weight: torch.Tensor, cap: float) -> torch.Tensor:
    """Signature of the reference ``linear_soft_cap_argmax``: the first largest column of each row of
    :func:`linear_soft_cap`'s logits, computed without writing them.

    Args:
        x: ``[M, K]`` (or ``[..., K]``) float32 / float16 / bfloat16; weight: ``[N, K]`` of x's dtype; cap: positive.

    Returns:
        ``[...]`` int64 column ids.

    Raises:
        ValueError: as :func:`linear_soft_cap` (``"linear_soft_cap_argmax: ..."``), or ``N`` of 0.
    """
    op = "linear_soft_cap_argmax"
    check_linear_soft_cap_argmax(x, weight, cap)
    require_float(op, x=x)
    require_same_device(op, x=x, weight=weight)
    y = gemv.linear(x, weight, None).contiguous()
    n = y.shape[-1]
    rows = y.numel() // n
    out = torch.empty(y.shape[:-1], dtype=torch.int64, device=y.device)
    if rows:
        blocks = triton.cdiv(n, BLOCK)
        best = torch.empty((rows, blocks), dtype=torch.float32, device=y.device)
        at = torch.empty((rows, blocks), dtype=torch.int64, device=y.device)
        launch = pdl.launch_options(y)
        _soft_cap_argmax_partials_kernel[(rows, blocks)](y, best, at, n, blocks, float(cap), BLOCK=BLOCK,
                                                         num_warps=4, **launch)
        _argmax_of_blocks_kernel[(rows,)](best, at, out, blocks, BLOCKS=triton.next_power_of_2(blocks), num_warps=4,
                                          **launch)
    return out
