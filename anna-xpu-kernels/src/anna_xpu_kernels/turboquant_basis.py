"""The changes of basis around :mod:`anna_xpu_kernels.turboquant`'s attention kernel, parallel over rows and columns.

TurboQuant attention runs in the rotated basis (Zandieh et al., arXiv 2504.19874; that module's docstring): the
kernel takes ``q_r = Pi q`` and ``q_s = S q_r`` and its result is rotated back, ``o = Pi^T o_r``. Here

* :func:`rotate_queries` computes ``q_r`` in one launch and, with QJL keys, ``q_s`` in a second one reading ``q_r``
  back (where torch took three: the cast to float32 and two matmuls);
* :func:`merge_and_rotate_back` merges the flash-decoding splits (as :mod:`anna_xpu_kernels.paged_attention`'s merge
  kernel), rotates the merged rows back and casts them to the serving dtype in one launch, where torch took three
  (the merge, the matmul and the cast).

Every launch has a 2-D grid: blocks of :data:`BLOCK_R` (token, head) rows by chunks of ``block_o`` output columns
(:func:`basis_launch`: narrower chunks for fewer rows, so a decode step's few rows still fill the GPU), each program
reading only its ``[D, block_o]`` slab of the ``[D, D]`` matrix. The merge is done per reduction slice inside the
product loop (each column chunk's program weights and sums its rows' split slices itself, so every chunk reads its
rows' whole split workspace), and no merged row is written and read back; its math is the paged-attention merge's:
max-shifted ``exp2`` weights, empty splits (and rows no split saw) 0. A step of that loop takes at most
:data:`MERGE_SPLITS` splits; more splits (64 at a batch-1 E4B global layer) take more steps, each step's weighted
partial sum multiplied by ``Pi`` on its own (the product is linear in the splits).

The matrix products are float32: exact (``ieee``) for a float32 query, tf32 tensor-core products for a bf16 /
float16 one (operands rounded to 10 mantissa bits, finer than the bf16 rounding of the attention kernel's own dot
operands; the op contract's bound; above :data:`MERGE_SPLITS` splits each step's partial sum is rounded so).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from anna_xpu_kernels._triton import INTERPRETING, next_pow2, tl, triton

BLOCK_R = 16
"""(token, head) rows per program (the dots' smallest M)."""
MERGE_SPLITS = 8
"""Splits merged per step of the product loop (more take more steps: a ``[64, 16, 16]`` tile of 64 splits spilled
registers)."""
TARGET_PROGRAMS = 128
"""Programs a launch aims for (about one wave of an H100 / H200's 132 multiprocessors): :func:`basis_launch` takes
the widest column chunk that still gives this many."""


@triton.jit
def _tq_query_kernel(x_ptr, m_ptr, out_ptr, n_rows, n_heads, head_dim, stride_xt, stride_xh, BLOCK_R: tl.constexpr,
                     BLOCK_O: tl.constexpr, BLOCK_K: tl.constexpr, DOT: tl.constexpr):
    """``out[rows, c] = x[rows] @ M[c, :]^T`` float32 for ``BLOCK_R`` (token, head) rows (program axis 0) and the
    ``BLOCK_O`` columns ``c`` of chunk ``program_id(1)``: ``x`` ``[T, H, D]`` at strides ``(stride_xt, stride_xh,
    1)``, ``M`` ``[D, D]`` row-major, ``out`` ``[T * H, D]`` contiguous; ``head_dim`` reduced ``BLOCK_K`` at a
    time."""
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    ok = rows < n_rows
    x_off = (rows // n_heads).to(tl.int64) * stride_xt + (rows % n_heads) * stride_xh
    o = tl.program_id(1) * BLOCK_O + tl.arange(0, BLOCK_O)
    o_ok = o < head_dim
    k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_R, BLOCK_O), tl.float32)
    for k0 in range(0, head_dim, BLOCK_K):
        kk = k0 + k
        k_ok = kk < head_dim
        x = tl.load(x_ptr + x_off[:, None] + kk[None, :], mask=ok[:, None] & k_ok[None, :], other=0.0).to(tl.float32)
        w = tl.load(m_ptr + o[None, :] * head_dim + kk[:, None], mask=k_ok[:, None] & o_ok[None, :], other=0.0)
        if DOT == 0:
            acc = tl.dot(x, w, acc, input_precision="tf32")
        else:
            acc = tl.dot(x, w, acc, input_precision="ieee")
    tl.store(out_ptr + rows.to(tl.int64)[:, None] * head_dim + o[None, :], acc, mask=ok[:, None] & o_ok[None, :])


@triton.jit
def _split_rows(s, rows, ok, n_rows, num_splits):
    """The workspace rows ``[S, R]`` of splits ``s`` and (token, head) rows ``rows``, and which exist."""
    return s[:, None] * n_rows + rows[None, :], (s < num_splits)[:, None] & ok[None, :]


@triton.jit
def _split_weights(m_ws_ptr, l_ws_ptr, ws, ws_ok, m_ref):
    """The splits' merge weights ``exp2(m - m_ref)`` ``[S, R]`` (0 for empty or absent splits) and their sums."""
    m = tl.load(m_ws_ptr + ws, mask=ws_ok, other=float("-inf"))
    return tl.exp2(m - m_ref[None, :]), tl.load(l_ws_ptr + ws, mask=ws_ok, other=0.0)


@triton.jit(do_not_specialize=['n_rows', 'num_splits'])
def _tq_output_kernel(m_ws_ptr, l_ws_ptr, acc_ws_ptr, o_ptr, rot_ptr, out_ptr, n_rows, n_heads, head_dim, num_splits,
                      stride_ot, stride_oh, SPLIT: tl.constexpr, WS_D: tl.constexpr, BLOCK_S: tl.constexpr,
                      MERGE_S: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_O: tl.constexpr, BLOCK_K: tl.constexpr,
                      DOT: tl.constexpr):
    """``BLOCK_R`` rows (program axis 0) by the ``BLOCK_O`` columns of chunk ``program_id(1)`` of the result, ``x @
    Pi[:, cols]`` cast to ``out``'s dtype, where ``x`` is the float32 rows ``o`` ``[rows, head_dim]`` or (``SPLIT``)
    the splits' ``(max, sum, acc)`` merged: ``x = sum_s w_s acc_s / sum_s w_s l_s`` with ``w_s = exp2(m_s - max_s
    m_s)`` (0 for an empty split), taken ``MERGE_S`` splits by ``BLOCK_K`` coordinates at a time (``BLOCK_S``: all
    splits, padded)."""
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    ok = rows < n_rows
    cols = tl.program_id(1) * BLOCK_O + tl.arange(0, BLOCK_O)
    cols_ok = cols < head_dim
    k = tl.arange(0, BLOCK_K)
    k_steps = tl.cdiv(head_dim, BLOCK_K)
    if SPLIT:
        ws, ws_ok = _split_rows(tl.arange(0, BLOCK_S), rows, ok, n_rows, num_splits)
        m_all = tl.max(tl.load(m_ws_ptr + ws, mask=ws_ok, other=float("-inf")), axis=0)
        m_ref = tl.where(m_all == float("-inf"), 0.0, m_all)  # [R]
        w, lsum = _split_weights(m_ws_ptr, l_ws_ptr, ws, ws_ok, m_ref)
        total = tl.sum(w * lsum, axis=0)
        total = tl.where(total > 0, total, 1.0)
        steps = tl.cdiv(num_splits, MERGE_S) * k_steps
        s = tl.arange(0, MERGE_S)
    else:
        o_off = rows.to(tl.int64) * head_dim
        steps = k_steps
    acc = tl.zeros((BLOCK_R, BLOCK_O), tl.float32)
    for i in range(0, steps):  # (split chunk, coordinate slice) pairs: x @ Pi is linear in the splits
        chunk = i // k_steps
        kk = (i - chunk * k_steps) * BLOCK_K + k
        k_ok = kk < head_dim
        if SPLIT:
            cws, cws_ok = _split_rows(chunk * MERGE_S + s, rows, ok, n_rows, num_splits)
            cw, _ = _split_weights(m_ws_ptr, l_ws_ptr, cws, cws_ok, m_ref)
            part = tl.load(acc_ws_ptr + cws.to(tl.int64)[:, :, None] * WS_D + kk[None, None, :],
                           mask=cws_ok[:, :, None] & k_ok[None, None, :], other=0.0)
            x = tl.sum(cw[:, :, None] * part, axis=0) / total[:, None]
        else:
            x = tl.load(o_ptr + o_off[:, None] + kk[None, :], mask=ok[:, None] & k_ok[None, :], other=0.0)
        p = tl.load(rot_ptr + kk[:, None] * head_dim + cols[None, :], mask=k_ok[:, None] & cols_ok[None, :],
                    other=0.0)
        if DOT == 0:
            acc = tl.dot(x, p, acc, input_precision="tf32")
        else:
            acc = tl.dot(x, p, acc, input_precision="ieee")
    out_off = (rows // n_heads).to(tl.int64) * stride_ot + (rows % n_heads) * stride_oh
    tl.store(out_ptr + out_off[:, None] + cols[None, :], acc.to(out_ptr.dtype.element_ty),
             mask=ok[:, None] & cols_ok[None, :])


class BasisLaunch(NamedTuple):
    """One launch's column chunk, reduction slice (both powers of two from 16) and warps."""

    block_o: int
    block_k: int
    num_warps: int


LAUNCHES = {64: BasisLaunch(64, 32, 8), 32: BasisLaunch(32, 64, 8), 16: BasisLaunch(16, 128, 8)}
"""The settings by column chunk width: no register spills at a head dim of 512 with 8 and 64 splits
(``python -m anna_xpu_kernels.compile_check --registers``' cases)."""


def basis_launch(rows: int, dim: int) -> BasisLaunch:
    """The settings of a launch over ``rows`` (token, head) rows of head dim ``dim``: the widest chunk of
    :data:`LAUNCHES` whose grid ``ceil(rows / 16) x ceil(dim / block_o)`` has at least :data:`TARGET_PROGRAMS`
    programs, else the narrowest (a decode step of one sequence: 16 columns); chunk and slice capped at ``dim``
    padded to a power of two (at least 16)."""
    padded = max(16, next_pow2(dim))
    row_blocks = triton.cdiv(max(rows, 1), BLOCK_R)
    width = next((w for w in sorted(LAUNCHES, reverse=True)
                  if row_blocks * triton.cdiv(dim, min(w, padded)) >= TARGET_PROGRAMS), min(LAUNCHES))
    launch = LAUNCHES[width]
    return BasisLaunch(min(launch.block_o, padded), min(launch.block_k, padded), launch.num_warps)


def merge_blocks(splits: int, launch: BasisLaunch) -> tuple[int, int, int]:
    """``(BLOCK_S, MERGE_S, BLOCK_K)`` of a merge of ``splits`` splits: all of them padded to a power of two, the
    splits taken per step (at most :data:`MERGE_SPLITS`) and the slice, ``launch``'s narrowed so that the ``[MERGE_S,
    16, BLOCK_K]`` tile holds at most 8K elements."""
    merge_s = min(next_pow2(splits), MERGE_SPLITS)
    return next_pow2(splits), merge_s, max(16, min(launch.block_k, 8192 // (merge_s * BLOCK_R)))


def _dot(dtype: torch.dtype) -> int:
    return 1 if dtype == torch.float32 or INTERPRETING else 0


def _check_launch(launch: BasisLaunch) -> None:
    for name in ("block_o", "block_k"):
        value = getattr(launch, name)
        if value < 16 or value & (value - 1):
            raise ValueError(f"{name} must be a power of two from 16, got {value}")


def rotate_queries(q: torch.Tensor, rotation: torch.Tensor, qjl: torch.Tensor, with_qjl: bool,
                   launch: BasisLaunch | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(q_r, q_s)``: ``q Pi^T`` and ``q_r S^T`` float32 ``[T, H, D]`` contiguous (``q_s`` is ``q_r`` without the
    QJL stage); one launch each.

    Args:
        q: ``[T, H, D]`` float (unit stride along D); rotation, qjl: float32 ``[D, D]`` contiguous.
        launch: the launches' settings (None: :func:`basis_launch`'s for ``T * H`` rows; for timing variations).

    Raises:
        ValueError: a ``launch`` whose chunk or slice is no power of two from 16.
    """
    total, heads, dim = q.shape
    if q.stride(2) != 1:
        q = q.contiguous()
    rows = total * heads
    launch = launch or basis_launch(rows, dim)
    _check_launch(launch)
    q_r = torch.empty((total, heads, dim), dtype=torch.float32, device=q.device)
    grid = (triton.cdiv(rows, BLOCK_R), triton.cdiv(dim, launch.block_o))
    settings = {"BLOCK_R": BLOCK_R, "BLOCK_O": launch.block_o, "BLOCK_K": launch.block_k, "DOT": _dot(q.dtype),
                "num_warps": launch.num_warps}
    _tq_query_kernel[grid](q, rotation.contiguous(), q_r, rows, heads, dim, q.stride(0), q.stride(1), **settings)
    if not with_qjl:
        return q_r, q_r
    q_s = torch.empty_like(q_r)
    _tq_query_kernel[grid](q_r, qjl.contiguous(), q_s, rows, heads, dim, q_r.stride(0), q_r.stride(1), **settings)
    return q_r, q_s


def merge_and_rotate_back(o: torch.Tensor, workspace: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None,
                          splits: int, rotation: torch.Tensor, dtype: torch.dtype,
                          launch: BasisLaunch | None = None) -> torch.Tensor:
    """``[T, H, D]`` in ``dtype``: the attention result rotated back, ``x @ Pi``, in one launch; ``x`` is ``o``
    (float32 ``[T, H, D]`` contiguous) or, with a split ``workspace`` ``(m, l, acc)`` (float32 ``[splits, T, H]``
    twice and ``[splits, T, H, >= D]``), the merged splits (``o`` is then not read).

    Args:
        launch: the settings (None: :func:`basis_launch`'s for ``T * H`` rows; for timing variations); its
            ``block_k`` is narrowed with several splits (:func:`merge_blocks`).

    Raises:
        ValueError: a ``launch`` whose chunk or slice is no power of two from 16.
    """
    total, heads, dim = o.shape
    rows = total * heads
    launch = launch or basis_launch(rows, dim)
    _check_launch(launch)
    out = torch.empty((total, heads, dim), dtype=dtype, device=o.device)
    m_ws, l_ws, acc_ws = workspace or (o, o, o)
    block_s, merge_s, block_k = merge_blocks(splits, launch) if workspace is not None else (1, 1, launch.block_k)
    _tq_output_kernel[(triton.cdiv(rows, BLOCK_R), triton.cdiv(dim, launch.block_o))](
        m_ws, l_ws, acc_ws, o, rotation.contiguous(), out, rows, heads, dim, splits, out.stride(0), out.stride(1),
        SPLIT=workspace is not None, WS_D=acc_ws.shape[-1], BLOCK_S=block_s, MERGE_S=merge_s,
        BLOCK_R=BLOCK_R, BLOCK_O=launch.block_o, BLOCK_K=block_k, DOT=_dot(dtype), num_warps=launch.num_warps)
    return out
