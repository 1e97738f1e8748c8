"""The row tiles every Triton norm kernel shares: whole rows in registers, weights loaded before the PDL wait.

One program normalises ``BLOCK_M`` rows held in registers (``BLOCK_M * BLOCK_D <= 4096`` values), so each
element of its inputs is read once and each output written once; rows longer than :data:`MAX_DIM` are left to
the torch reference. Used by :mod:`anna_xpu_kernels.norms` (plain and gated RMSNorm, the residual add) and
:mod:`anna_xpu_kernels.post_norms` (the sandwich-norm tails and norm pairs).
"""

from __future__ import annotations

from anna_xpu_kernels._triton import next_pow2, tl, triton

MAX_DIM = 16384
"""Largest row length ``D`` handled in registers; longer rows fall back to the torch reference."""

NORM_WARPS = [triton.Config({}, num_warps=w) for w in (1, 2, 4, 8, 16)]


@triton.jit
def row_block(n_rows, dim, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr):
    """This program's ``BLOCK_M`` rows: int64 row indices ``[BLOCK_M, 1]``, columns ``[BLOCK_D]``, the
    column mask and the ``[BLOCK_M, BLOCK_D]`` tile mask."""
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_D)
    col_ok = cols < dim
    return rows.to(tl.int64)[:, None], cols, col_ok, (rows < n_rows)[:, None] & col_ok[None, :]


@triton.jit
def norm_weight(w_ptr, cols, col_ok, ZERO_CENTERED: tl.constexpr):
    """A norm's float32 weight ``[BLOCK_D]`` (``1 + weight`` if zero-centred). The kernels load their weights
    before :func:`anna_xpu_kernels.pdl.wait` (weights are not written during the forward pass), so no weight
    load sits between a reduction and the next in the chain after the previous kernel ends. Weights load
    with ``evict_last`` (kept in L1/L2 for the next step; and the one load kind allowed before the wait:
    :func:`anna_xpu_kernels.compile_check.check_pdl_order`)."""
    w = tl.load(w_ptr + cols, mask=col_ok, other=0.0, eviction_policy="evict_last").to(tl.float32)
    if ZERO_CENTERED:
        w = w + 1.0
    return w


@triton.jit
def normalize_rows(x, w, dim, eps):
    """float32 ``x * rstd * w`` of the ``[BLOCK_M, BLOCK_D]`` tile ``x`` and the loaded weight ``w`` ``[BLOCK_D]``."""
    rstd = tl.rsqrt(tl.sum(x * x, axis=1) / dim + eps)  # [BLOCK_M]
    return x * rstd[:, None] * w[None, :]


@triton.jit
def load_rows(ptr, stride, rows64, cols, mask):
    """The float32 ``[BLOCK_M, BLOCK_D]`` tile of a row-major ``[N, D]`` tensor (row stride ``stride``) at the
    rows and columns of :func:`row_block` (zeros outside ``mask``)."""
    return tl.load(ptr + rows64 * stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)


@triton.jit
def store_rows(ptr, stride, rows64, cols, mask, value):
    """Store the tile ``value`` (any dtype) rounded to ``ptr``'s dtype at the rows of :func:`row_block`."""
    tl.store(ptr + rows64 * stride + cols[None, :], value.to(ptr.dtype.element_ty), mask=mask)


def row_tile(dim: int) -> tuple[int, int]:
    """``(BLOCK_M, BLOCK_D)``: whole rows of ``dim`` values, ``BLOCK_M * BLOCK_D <= 4096``."""
    block_d = next_pow2(dim)
    return max(1, min(16, 4096 // block_d)), block_d

