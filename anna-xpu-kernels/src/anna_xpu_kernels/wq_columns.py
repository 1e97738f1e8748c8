"""The activation columns a quantized GEMV's weight tile pairs with, for weights whose input columns are stored in
a permuted order (act-order GPTQ: ``perm`` ``[K]``, the contract in :mod:`anna_core.kernels.reference.wq_linear`):
stored column ``k`` multiplies x's column ``perm[k]``. Shared by :mod:`anna_xpu_kernels.wq_gemv` and
:mod:`anna_xpu_kernels.wq_gemv_decode`, whose prologues (:func:`anna_xpu_kernels.gemv_prologue.act_tile`) then
load x, the residual and the norm weight at those columns.
"""

from __future__ import annotations

from anna_xpu_kernels._triton import tl, triton


@triton.jit
def permuted_columns(perm_ptr, kk, K, PERMUTED: tl.constexpr):
    """x's columns for the stored weight columns ``kk`` (any shape): ``perm[kk]`` as int32 (0 where ``kk >= K``,
    which the callers mask) with ``PERMUTED``, else ``kk`` itself."""
    if PERMUTED:
        return tl.load(perm_ptr + kk, mask=kk < K, other=0).to(tl.int32)
    else:
        return kk
