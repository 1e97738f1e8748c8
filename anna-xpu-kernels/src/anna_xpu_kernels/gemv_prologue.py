"""Prologues of the decode GEMV: the activation tile it multiplies, computed from the raw inputs.

:func:`anna_xpu_kernels.gemv._gemv_kernel` takes a ``PROLOGUE`` constexpr; instead of loading its
activation tile it may compute it here, so the small op before a projection runs inside the
projection's launch (:mod:`anna_xpu_kernels.fused_linear`). Each mode rounds every intermediate to
the activation dtype exactly where the unfused torch references round it
(:mod:`anna_core.kernels.reference.fused_linear`):

* ``PLAIN`` (0): the tile of ``x``.
* ``RMS_NORM`` (1): ``round(x * rstd * w)``, ``w = 1 + norm_weight`` if zero-centred, where
  ``rstd = 1 / sqrt(mean(x^2) + eps)`` over the whole row (:func:`row_rstd`, a pass over the row
  that every program makes: the row is a few KiB, read from L2 in one load of ``ROW_BLOCK`` columns
  per row where :func:`row_block` allows, so the pass costs one L2 round trip, not one per tile).
* ``ADD_RMS_NORM`` (2): as ``RMS_NORM`` on ``s = round(x + residual)``, recomputed per tile; the
  first program (pid ``(0, 0)``) also writes ``s`` (the new residual stream) during its row pass.
* ``SILU_MUL`` (3): ``round(round(silu(gate)) * up)`` with gate ``x[:, k]`` and up ``x[:, K + k]``.
* ``GELU_TANH_MUL`` (4): the same with ``gelu_tanh`` (:func:`gelu_tanh`) instead of SiLU (GeGLU).
* ``SILU_MUL_SPLIT`` (5) / ``GELU_TANH_MUL_SPLIT`` (6): as 3 / 4 with up read from its own tensor (the
  residual pointer and row stride carry it): ``round(round(act(gate)) * up)`` with gate ``x[:, k]`` and up
  ``up[:, k]`` (Gemma 4's per-layer-input gate times the per-layer embedding).
* ``POST_NORM_RESIDUAL`` (7): a sandwich-normed block's tail, as ``post_norm_residual`` rounds it:
  ``s = round(residual + round(x * rstd(x) * post_w))`` (then ``round(s * scale)`` with a layer scale),
  written as the new residual by the first program, and the tile ``round(s * rstd(s) * norm_weight)``.
  The one-wave kernel only (:mod:`anna_xpu_kernels.gemv_persistent`: it computes the row once per program).
* ``POST_RESIDUAL`` (8): as 7 without the next norm: the tile is ``s`` itself.

Inside the kernels the modes are compared as integer literals (Triton kernels cannot read
non-constexpr module globals).
"""

from __future__ import annotations

from anna_xpu_kernels._triton import tl, triton

PLAIN, RMS_NORM, ADD_RMS_NORM, SILU_MUL, GELU_TANH_MUL, SILU_MUL_SPLIT, GELU_TANH_MUL_SPLIT = 0, 1, 2, 3, 4, 5, 6
POST_NORM_RESIDUAL, POST_RESIDUAL = 7, 8
"""The ``PROLOGUE`` modes of the GEMV kernel."""

GATED_PROLOGUES = {"silu": SILU_MUL, "gelu_tanh": GELU_TANH_MUL}
"""The gated-product prologue of each activation of :data:`anna_core.kernels.checks.GATED_ACTIVATIONS`."""

GATED_SPLIT_PROLOGUES = {"silu": SILU_MUL_SPLIT, "gelu_tanh": GELU_TANH_MUL_SPLIT}
"""The same with gate and up in two tensors."""

ROW_VALUES = 4096
"""Most row values (rows x columns) the norm prologue's row pass loads at once per program."""


def row_block(k: int, rows: int, block_k: int) -> int:
    """Columns per step of the row pass over ``rows`` rows of width ``k``: the whole row in one step
    while ``rows * next_pow2(k) <= ROW_VALUES`` (one row of up to 4096 values, e.g. M = 1 at the 9B
    width), else ``ROW_VALUES / rows`` (at least ``block_k``)."""
    whole = 1 << max(0, (k - 1).bit_length())
    return max(block_k, min(whole, ROW_VALUES // rows))


@triton.jit
def add_residual(a, r, x_ptr):
    """``round(a + r)`` in x's dtype (the new residual stream of ``ADD_RMS_NORM``)."""
    return (a.to(tl.float32) + r.to(tl.float32)).to(x_ptr.dtype.element_ty)


@triton.jit
def normalize(a, rstd, w, x_ptr, ZERO_CENTERED: tl.constexpr):
    """``round(a * rstd * w)`` in x's dtype, ``w = 1 + w`` if zero-centred (float32 math)."""
    w = w.to(tl.float32)
    if ZERO_CENTERED:
        w = w + 1.0
    return (a.to(tl.float32) * rstd * w).to(x_ptr.dtype.element_ty)


@triton.jit
def gelu_tanh(g):
    """torch's ``gelu(g, approximate="tanh")`` of float32 ``g``: ``0.5 g (1 + tanh(u))`` with ``u =
    sqrt(2/pi) (g + 0.044715 g^3)``, computed as ``g * sigmoid(2u)`` (the same function)."""
    return g / (1.0 + tl.exp(-1.5957691216057308 * (g + 0.044715 * g * g * g)))


@triton.jit
def gated_act(g, GELU: tl.constexpr):
    """``silu(g)`` (``GELU`` false) or ``gelu_tanh(g)`` of float32 ``g``."""
    if GELU:
        return gelu_tanh(g)
    else:
        return g / (1.0 + tl.exp(-g))


@triton.jit
def act_mul(gate, up, x_ptr, GELU: tl.constexpr):
    """``round(round(act(gate)) * up)`` in x's dtype (the gated product as ``act_and_mul`` rounds it;
    ``act``: SiLU, or the tanh GELU with ``GELU``)."""
    act = gated_act(gate.to(tl.float32), GELU).to(x_ptr.dtype.element_ty).to(tl.float32)
    return (act * up.to(tl.float32)).to(x_ptr.dtype.element_ty)


@triton.jit
def row_rstd(x_ptr, r_ptr, s_ptr, rows, M, K, stride_xm, stride_rm, stride_sm, eps, write,
             PROLOGUE: tl.constexpr, ROWS: tl.constexpr, BLOCK_K: tl.constexpr):
    """``[ROWS]`` float32 ``1 / sqrt(mean(s^2) + eps)`` of the rows ``rows`` (``s = x``, or
    ``round(x + residual)`` with ``ADD_RMS_NORM``, also stored to ``s_ptr`` where ``write``), read in
    steps of ``BLOCK_K`` columns (:func:`row_block`: one step for a whole row)."""
    ks = tl.arange(0, BLOCK_K)
    row_ok = (rows < M)[:, None]
    acc = tl.zeros((ROWS, BLOCK_K), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = (k0 + ks)[None, :]
        mask = row_ok & (kk < K)
        s = tl.load(x_ptr + rows[:, None] * stride_xm + kk, mask=mask, other=0.0)
        if PROLOGUE == 2:
            r = tl.load(r_ptr + rows[:, None] * stride_rm + kk, mask=mask, other=0.0)
            s = add_residual(s, r, x_ptr)
            tl.store(s_ptr + rows[:, None] * stride_sm + kk, s, mask=mask & write)
        s = s.to(tl.float32)
        acc += s * s
    return tl.rsqrt(tl.sum(acc, axis=1) / K + eps)


@triton.jit
def act_tile(x_ptr, r_ptr, nw_ptr, rows, kk, mask, rstd, K, stride_xm, stride_rm,
             PROLOGUE: tl.constexpr, ZERO_CENTERED: tl.constexpr):
    """The activation tile at row indices ``rows`` and column indices ``kk`` (broadcastable to the
    tile's shape; ``rstd`` broadcast like ``rows``), in x's dtype, zero where ``mask`` is false."""
    a = tl.load(x_ptr + rows * stride_xm + kk, mask=mask, other=0.0)
    if PROLOGUE == 3 or PROLOGUE == 4:
        a = act_mul(a, tl.load(x_ptr + rows * stride_xm + K + kk, mask=mask, other=0.0), x_ptr, PROLOGUE == 4)
    if PROLOGUE == 5 or PROLOGUE == 6:
        a = act_mul(a, tl.load(r_ptr + rows * stride_rm + kk, mask=mask, other=0.0), x_ptr, PROLOGUE == 6)
    if PROLOGUE == 1 or PROLOGUE == 2:
        if PROLOGUE == 2:
            a = add_residual(a, tl.load(r_ptr + rows * stride_rm + kk, mask=mask, other=0.0), x_ptr)
        a = normalize(a, rstd, tl.load(nw_ptr + kk, mask=kk < K, other=0.0), x_ptr, ZERO_CENTERED)
    return a
