"""A frozen copy, for tools/gpu_experiments/tq_basis_micro.py's comparison, of anna_xpu_kernels.turboquant_basis
before its launches became parallel over columns (issue 30); not part of any package.

The changes of basis around :mod:`anna_xpu_kernels.turboquant`'s attention kernel, one launch each.

TurboQuant attention runs in the rotated basis (Zandieh et al., arXiv 2504.19874; that module's docstring): the
kernel takes ``q_r = Pi q`` and ``q_s = S q_r`` and its result is rotated back, ``o = Pi^T o_r``. Here

* :func:`rotate_queries` computes both query projections in one launch (rows in blocks of 16, the second
  projection reading the first back after a barrier within the program), where torch took three (the cast to float32
  and two matmuls);
* :func:`merge_and_rotate_back` merges the flash-decoding splits (as :mod:`anna_xpu_kernels.paged_attention`'s merge
  kernel), rotates the merged rows back and casts them to the serving dtype in one launch, where torch took three
  (the merge, the matmul and the cast).

The matrix products are float32: exact (``ieee``) for a float32 query, tf32 tensor-core products for a bf16 /
float16 one (operands rounded to 10 mantissa bits, finer than the bf16 rounding of the attention kernel's own dot
operands; the op contract's bound).
"""

from __future__ import annotations

import torch
from anna_xpu_kernels._triton import INTERPRETING, next_pow2, tl, triton

BLOCK_R = 16
"""(token, head) rows per program."""


@triton.jit
def _rows_times(x_ptr, x_off, ok, m_ptr, o0, head_dim, TRANSPOSED: tl.constexpr, BLOCK_O: tl.constexpr,
                BLOCK_K: tl.constexpr, DOT: tl.constexpr):
    """``x[rows] @ M[:, o0:o0 + BLOCK_O]`` float32 ``[R, BLOCK_O]`` (``TRANSPOSED``: ``x @ M^T``) for the rows of ``x``
    at element offsets ``x_off`` ``[R]`` (``head_dim`` wide) and ``M`` ``[D, D]`` row-major, ``head_dim`` at a time in
    ``BLOCK_K`` slices; rows not ``ok`` and columns past ``head_dim`` are 0."""
    o = o0 + tl.arange(0, BLOCK_O)
    k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((x_off.shape[0], BLOCK_O), tl.float32)
    for k0 in range(0, head_dim, BLOCK_K):
        kk = k0 + k
        x = tl.load(x_ptr + x_off[:, None] + kk[None, :], mask=ok[:, None] & (kk < head_dim)[None, :],
                    other=0.0).to(tl.float32)
        w_mask = (kk < head_dim)[:, None] & (o < head_dim)[None, :]
        if TRANSPOSED:
            w = tl.load(m_ptr + o[None, :] * head_dim + kk[:, None], mask=w_mask, other=0.0)
        else:
            w = tl.load(m_ptr + kk[:, None] * head_dim + o[None, :], mask=w_mask, other=0.0)
        if DOT == 0:
            acc = tl.dot(x, w, acc, input_precision="tf32")
        else:
            acc = tl.dot(x, w, acc, input_precision="ieee")
    return acc


@triton.jit
def _tq_query_kernel(q_ptr, rot_ptr, qjl_ptr, qr_ptr, qs_ptr, n_rows, n_heads, head_dim, stride_qt, stride_qh,
                     QJL: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_O: tl.constexpr, BLOCK_K: tl.constexpr,
                     DOT: tl.constexpr):
    """``q_r = q Pi^T`` and (``QJL``) ``q_s = q_r S^T`` of ``BLOCK_R`` (token, head) rows, float32, contiguous."""
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    ok = rows < n_rows
    q_off = (rows // n_heads).to(tl.int64) * stride_qt + (rows % n_heads) * stride_qh
    out_off = rows.to(tl.int64) * head_dim
    o = tl.arange(0, BLOCK_O)
    for o0 in range(0, head_dim, BLOCK_O):
        acc = _rows_times(q_ptr, q_off, ok, rot_ptr, o0, head_dim, True, BLOCK_O, BLOCK_K, DOT)
        tl.store(qr_ptr + out_off[:, None] + (o0 + o)[None, :], acc, mask=ok[:, None] & (o0 + o < head_dim)[None, :])
    if QJL:
        tl.debug_barrier()  # this program's q_r rows are written before it reads them back
        for o0 in range(0, head_dim, BLOCK_O):
            acc = _rows_times(qr_ptr, out_off, ok, qjl_ptr, o0, head_dim, True, BLOCK_O, BLOCK_K, DOT)
            tl.store(qs_ptr + out_off[:, None] + (o0 + o)[None, :], acc,
                     mask=ok[:, None] & (o0 + o < head_dim)[None, :])


@triton.jit(do_not_specialize=['n_rows', 'num_splits'])
def _tq_output_kernel(m_ws_ptr, l_ws_ptr, acc_ws_ptr, o_ptr, rot_ptr, out_ptr, n_rows, n_heads, head_dim, num_splits,
                      stride_ot, stride_oh, SPLIT: tl.constexpr, WS_D: tl.constexpr, BLOCK_S: tl.constexpr,
                      BLOCK_R: tl.constexpr, BLOCK_O: tl.constexpr, BLOCK_K: tl.constexpr, DOT: tl.constexpr):
    """``BLOCK_R`` rows of the result: (``SPLIT``) the splits' ``(max, sum, acc)`` merged into the float32 rows ``o``
    (``[rows, head_dim]``), then ``o @ Pi`` cast to ``out``'s dtype."""
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    ok = rows < n_rows
    o_off = rows.to(tl.int64) * head_dim
    if SPLIT:
        s = tl.arange(0, BLOCK_S)
        ws = s[:, None] * n_rows + rows[None, :]  # [S, R]
        ws_ok = (s < num_splits)[:, None] & ok[None, :]
        m = tl.load(m_ws_ptr + ws, mask=ws_ok, other=float("-inf"))
        lsum = tl.load(l_ws_ptr + ws, mask=ws_ok, other=0.0)
        m_all = tl.max(m, axis=0)
        m_ref = tl.where(m_all == float("-inf"), 0.0, m_all)
        w = tl.exp2(m - m_ref[None, :])  # 0 for empty splits
        total = tl.sum(w * lsum, axis=0)
        total = tl.where(total > 0, total, 1.0)
        k = tl.arange(0, BLOCK_K)
        for k0 in range(0, head_dim, BLOCK_K):
            kk = k0 + k
            acc = tl.load(acc_ws_ptr + ws[:, :, None].to(tl.int64) * WS_D + kk[None, None, :],
                          mask=ws_ok[:, :, None] & (kk < head_dim)[None, None, :], other=0.0)
            merged = tl.sum(w[:, :, None] * acc, axis=0) / total[:, None]
            tl.store(o_ptr + o_off[:, None] + kk[None, :], merged, mask=ok[:, None] & (kk < head_dim)[None, :])
        tl.debug_barrier()  # this program's merged rows are written before it reads them back
    out_off = (rows // n_heads).to(tl.int64) * stride_ot + (rows % n_heads) * stride_oh
    o = tl.arange(0, BLOCK_O)
    for o0 in range(0, head_dim, BLOCK_O):
        acc = _rows_times(o_ptr, o_off, ok, rot_ptr, o0, head_dim, False, BLOCK_O, BLOCK_K, DOT)
        tl.store(out_ptr + out_off[:, None] + (o0 + o)[None, :], acc.to(out_ptr.dtype.element_ty),
                 mask=ok[:, None] & (o0 + o < head_dim)[None, :])


def _dot(dtype: torch.dtype) -> int:
    return 1 if dtype == torch.float32 or INTERPRETING else 0


def _block(head_dim: int, most: int) -> int:
    return min(most, max(16, next_pow2(head_dim)))


BLOCK_O, BLOCK_K, NUM_WARPS = 64, 32, 8
"""Output columns and reduction slice per dot, and warps: no register spills at a head dim of 512 with 8 splits
(``python -m anna_xpu_kernels.compile_check``'s cases; 64-wide slices with 4 warps spilled)."""


def rotate_queries(q: torch.Tensor, rotation: torch.Tensor, qjl: torch.Tensor,
                   with_qjl: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """``(q_r, q_s)``: ``q Pi^T`` and ``q_r S^T`` float32 ``[T, H, D]`` contiguous (``q_s`` is ``q_r`` without the
    QJL stage), one launch.

    Args:
        q: ``[T, H, D]`` float (unit stride along D); rotation, qjl: float32 ``[D, D]`` contiguous.
    """
    total, heads, dim = q.shape
    if q.stride(2) != 1:
        q = q.contiguous()
    rotation, qjl = rotation.contiguous(), qjl.contiguous()
    q_r = torch.empty((total, heads, dim), dtype=torch.float32, device=q.device)
    q_s = torch.empty_like(q_r) if with_qjl else q_r
    rows = total * heads
    _tq_query_kernel[(triton.cdiv(rows, BLOCK_R),)](
        q, rotation, qjl, q_r, q_s, rows, heads, dim, q.stride(0), q.stride(1), QJL=with_qjl, BLOCK_R=BLOCK_R,
        BLOCK_O=_block(dim, BLOCK_O), BLOCK_K=_block(dim, BLOCK_K), DOT=_dot(q.dtype), num_warps=NUM_WARPS)
    return q_r, q_s


def merge_and_rotate_back(o: torch.Tensor, workspace: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None,
                          splits: int, rotation: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``[T, H, D]`` in ``dtype``: the attention result ``o`` (float32 ``[T, H, D]`` contiguous; with a split
    ``workspace`` ``(m, l, acc)`` its rows are first overwritten by the merged splits) rotated back, ``o @ Pi``; one
    launch."""
    total, heads, dim = o.shape
    out = torch.empty((total, heads, dim), dtype=dtype, device=o.device)
    rows = total * heads
    m_ws, l_ws, acc_ws = workspace or (o, o, o)
    block_s = next_pow2(splits)
    block_k = max(16, min(_block(dim, BLOCK_K), 8192 // (block_s * BLOCK_R)))  # the [S, R, K] merge tile
    _tq_output_kernel[(triton.cdiv(rows, BLOCK_R),)](
        m_ws, l_ws, acc_ws, o, rotation.contiguous(), out, rows, heads, dim, splits, out.stride(0), out.stride(1),
        SPLIT=workspace is not None, WS_D=acc_ws.shape[-1], BLOCK_S=block_s, BLOCK_R=BLOCK_R,
        BLOCK_O=_block(dim, BLOCK_O), BLOCK_K=block_k, DOT=_dot(dtype), num_warps=NUM_WARPS)
    return out
