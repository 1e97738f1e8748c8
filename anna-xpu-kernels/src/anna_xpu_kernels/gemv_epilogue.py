"""Epilogues of the decode GEMVs (:mod:`anna_xpu_kernels.gemv`, :mod:`anna_xpu_kernels.gemv_persistent`): how a
program writes the float32 results it holds.

* ``NO_EPILOGUE`` (0): ``y`` in x's dtype.
* ``SILU_MUL_OUT`` (1): the weight is a merged ``[gate; up]`` projection ``[2I, K]`` whose rows the
  program interleaves (its tile row ``2j`` is gate row ``c_j``, row ``2j + 1`` up row ``I + c_j``); it
  writes ``silu(gate) * up`` ``[M, I]``, rounded as ``silu_and_mul(linear(x, w))``: ``y`` to x's dtype,
  SiLU to x's dtype, product to x's dtype.
* ``GELU_TANH_MUL_OUT`` (2): the same with torch's ``gelu(approximate="tanh")`` instead of SiLU (GeGLU).

Inside the kernels the modes are compared as integer literals (Triton kernels cannot read
non-constexpr module globals).
"""

from __future__ import annotations

from anna_xpu_kernels._triton import tl, triton
from anna_xpu_kernels.gemv_prologue import gated_act

NO_EPILOGUE, SILU_MUL_OUT, GELU_TANH_MUL_OUT = 0, 1, 2
"""The ``EPILOGUE`` modes of the GEMV kernels."""

GATED_EPILOGUES = {"silu": SILU_MUL_OUT, "gelu_tanh": GELU_TANH_MUL_OUT}
"""The gated-product epilogue of each activation of :data:`anna_core.kernels.checks.GATED_ACTIVATIONS`."""


@triton.jit
def store_out(y_ptr, out, rows, pid_n, M, N, stride_ym, EPILOGUE: tl.constexpr, BLOCK_N: tl.constexpr):
    """Write the program's float32 result ``out`` ``[R, BLOCK_N]`` (rows ``rows``) to ``y``: as is, or
    with ``SILU_MUL_OUT`` / ``GELU_TANH_MUL_OUT`` as ``BLOCK_N / 2`` gated products of its interleaved
    (gate, up) columns."""
    if EPILOGUE == 1 or EPILOGUE == 2:
        half = N // 2
        gate, up = tl.split(tl.reshape(out, (out.shape[0], BLOCK_N // 2, 2)))
        gate = gate.to(y_ptr.dtype.element_ty).to(tl.float32)  # the projection's rounding
        up = up.to(y_ptr.dtype.element_ty).to(tl.float32)
        act = gated_act(gate, EPILOGUE == 2).to(y_ptr.dtype.element_ty).to(tl.float32)
        cols = pid_n * (BLOCK_N // 2) + tl.arange(0, BLOCK_N // 2)
        mask = (rows < M)[:, None] & (cols < half)[None, :]
        tl.store(y_ptr + rows[:, None] * stride_ym + cols[None, :], (act * up).to(y_ptr.dtype.element_ty), mask=mask)
    else:
        cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        mask = (rows < M)[:, None] & (cols < N)[None, :]
        tl.store(y_ptr + rows[:, None] * stride_ym + cols[None, :], out.to(y_ptr.dtype.element_ty), mask=mask)
