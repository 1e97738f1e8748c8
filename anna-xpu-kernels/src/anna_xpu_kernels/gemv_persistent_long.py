"""One-wave decode GEMV for rows longer than the one-load kernel takes: ``y[1, N] = x[1, K] @ w[N, K]^T + b``
for ``gemv_persistent.MAX_K < K <= MAX_K`` and weights of at most :data:`MAX_WEIGHT_ELEMENTS` values (the MLP
down projections of Gemma 4 E4B, K = 10,240, and of E2B's double-wide layers, K = 12,288).

Why. The one-load kernel (:mod:`anna_xpu_kernels.gemv_persistent`) holds a whole ``[BLOCK_N, KP]`` row
block in registers, ``KP`` the next power of two of K: past K = 8192 the padding wastes registers
(10,240 pads to 16,384) and spills. These rows went to the tiled GEMV, whose many short programs drain
the memory pipe at every kernel boundary of a PDL chain (the reason the one-wave kernel exists; its module
docstring says more). Here the same few long-lived programs stride over row blocks as there, but walk each
block along K in ``NK`` chunks of ``KC`` columns (a power of two dividing K where one does, else masked).
Past :data:`MAX_K` or :data:`MAX_WEIGHT_ELEMENTS` the tiled kernel measured as fast or faster and keeps
those launches.

Work split. The grid is ``G`` programs, chosen so that every program gets the same number of row blocks
(``G = ceil(n_blocks / ceil(n_blocks / G_max))``, ``G_max = SMs x programs per SM``): a program's work is
``blocks x NK`` tiles of ``[BLOCK_N, KC]``, numbered ``t``; tile ``t`` is chunk ``t % NK`` of the program's
block ``t // NK``. The first tile is loaded before the PDL wait; each later one is loaded before the current
one is reduced, so two tiles per program are in flight. A chunk's activations (``x``, or the elementwise
gated product of the ``SILU_MUL`` / ``GELU_TANH_MUL`` prologues, rounded as
:mod:`anna_xpu_kernels.gemv_prologue` rounds them) are read per tile (L1 / L2 hits after the first block).
The float32 sum of a block's chunks is stored, with the bias and any epilogue
(:mod:`anna_xpu_kernels.gemv_epilogue`), after its last chunk. The norm prologues need the whole row's
mean square first and are not taken (those launches keep the tiled kernel). Results agree with the other
GEMVs to float32 rounding of the sum (the summation order differs), not bit for bit.
"""

from __future__ import annotations

import torch

from anna_xpu_kernels import gemv_persistent, pdl
from anna_xpu_kernels._triton import INTERPRETING, tl, triton
from anna_xpu_kernels.gemv_epilogue import NO_EPILOGUE, store_out
from anna_xpu_kernels.gemv_persistent import _weight_rows
from anna_xpu_kernels.gemv_prologue import GELU_TANH_MUL, GELU_TANH_MUL_SPLIT, PLAIN, SILU_MUL, SILU_MUL_SPLIT, act_mul

MAX_K = 12288
"""Longest row taken; longer rows go to the tiled GEMV."""

MAX_WEIGHT_ELEMENTS = 32 << 20
"""Largest weight (``N * K`` values) taken; larger ones go to the tiled GEMV, whose many programs then fill
the GPU for long enough. In PDL chains on an H100 (eighteenth session, BENCHMARKS.md) this kernel beat the
tiled one at Gemma 4 E4B's 2560 x 10,240 (19.4 vs 20.8 us) and E2B's 1536 x 12,288 (13.8 vs 15.3 us), tied at
Qwen3.5-9B's 4096 x 12,288 (36.0 vs 36.1 us; in the 9B decode step 169.5 vs 170.9 tok/s) and lost at 27B's
5120 x 17,408 and 31B's 5376 x 21,504."""

PROLOGUES = frozenset({PLAIN, SILU_MUL, GELU_TANH_MUL, SILU_MUL_SPLIT, GELU_TANH_MUL_SPLIT})
"""The prologue modes taken: those computed element by element (the norm modes need the row's mean square)."""

BLOCK_N = 4
"""Weight rows per tile (4 measured faster than 2 at every width swept)."""


def chunk(k: int) -> int:
    """Columns per tile ``KC``: 4096 where it divides ``k``, else 2048 (the last chunk masked where that
    does not divide it either)."""
    return 4096 if k % 4096 == 0 else 2048


def launch_shape(k: int) -> tuple[int, int, int, int]:
    """``(BLOCK_N, KC, num_warps, programs per multiprocessor)`` for rows of ``k`` values."""
    return BLOCK_N, chunk(k), 4, 4


def grid_size(n_blocks: int, max_programs: int) -> int:
    """Programs for ``n_blocks`` row blocks: as many as give every program the same number of blocks,
    at most ``max_programs`` (at least 1)."""
    per_program = max(1, triton.cdiv(n_blocks, max(1, max_programs)))
    return max(1, triton.cdiv(n_blocks, per_program))


def takes(x: torch.Tensor, n: int, k: int, prologue_mode: int) -> bool:
    """Whether this kernel takes the activation rows ``x`` ``[m, k]`` times a weight of ``n`` rows with that
    prologue: one row, ``gemv_persistent.MAX_K < k <= MAX_K``, ``n * k <= MAX_WEIGHT_ELEMENTS``, an elementwise
    prologue (:data:`PROLOGUES`), on a CUDA device or under the interpreter."""
    return (x.shape[0] == 1 and gemv_persistent.MAX_K < k <= MAX_K and n * k <= MAX_WEIGHT_ELEMENTS
            and prologue_mode in PROLOGUES and (INTERPRETING or x.device.type == "cuda"))


@triton.jit
def _activation_chunk(x_ptr, r_ptr, kk, k_ok, K, PROLOGUE: tl.constexpr):
    """The ``[KC]`` float32 activations at columns ``kk`` (values of x's dtype)."""
    a = tl.load(x_ptr + kk, mask=k_ok, other=0.0)
    if PROLOGUE == 3 or PROLOGUE == 4:
        a = act_mul(a, tl.load(x_ptr + K + kk, mask=k_ok, other=0.0), x_ptr, PROLOGUE == 4)
    if PROLOGUE == 5 or PROLOGUE == 6:
        a = act_mul(a, tl.load(r_ptr + kk, mask=k_ok, other=0.0), x_ptr, PROLOGUE == 6)
    return a.to(tl.float32)


@triton.jit
def _long_gemv_kernel(
    x_ptr, weight_ptr, bias_ptr, y_ptr, r_ptr, N, K, stride_wn, n_blocks,
    HAS_BIAS: tl.constexpr, PROLOGUE: tl.constexpr, EPILOGUE: tl.constexpr, USE_PDL: tl.constexpr,
    BLOCK_N: tl.constexpr, KC: tl.constexpr, NK: tl.constexpr,
):
    # r_ptr: the up tensor of the *_SPLIT prologues (unused otherwise)
    pdl.launch_dependents(USE_PDL)
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    j = tl.arange(0, BLOCK_N)
    kc = tl.arange(0, KC)
    n_tiles = tl.cdiv(n_blocks - pid, programs) * NK  # the grid is at most n_blocks programs
    rows = _weight_rows(pid, j, N, BLOCK_N, EPILOGUE)
    w_cur = tl.load(weight_ptr + rows[:, None] * stride_wn + kc[None, :], mask=(kc < K)[None, :], other=0.0,
                    eviction_policy="evict_first")  # tile 0: chunk 0 of block pid
    pdl.wait(USE_PDL)
    one = tl.arange(0, 1)
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for t in range(0, n_tiles):
        nt = t + 1
        n_kk = (nt % NK) * KC + kc
        n_rows = _weight_rows(pid + (nt // NK) * programs, j, N, BLOCK_N, EPILOGUE)
        w_next = tl.load(weight_ptr + n_rows[:, None] * stride_wn + n_kk[None, :],
                         mask=(n_kk < K)[None, :] & (nt < n_tiles), other=0.0, eviction_policy="evict_first")
        kk = (t % NK) * KC + kc
        x = _activation_chunk(x_ptr, r_ptr, kk, kk < K, K, PROLOGUE)
        acc += tl.sum(w_cur.to(tl.float32) * x[None, :], axis=1)  # [BLOCK_N]
        if t % NK == NK - 1:
            block = pid + (t // NK) * programs
            out = acc
            if HAS_BIAS:
                out += tl.load(bias_ptr + _weight_rows(block, j, N, BLOCK_N, EPILOGUE)).to(tl.float32)
            store_out(y_ptr, out[None, :], one, block, 1, N, 0, EPILOGUE, BLOCK_N)
            acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
        w_cur = w_next


def launch(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, prologue, epilogue: int) -> torch.Tensor:
    """Run the kernel on checked arguments (as :func:`anna_xpu_kernels.gemv.launch`, :func:`takes` true);
    ``prologue`` is a :class:`anna_xpu_kernels.gemv.Prologue` of an elementwise mode.

    Returns:
        ``y`` ``[1, N]`` (``[1, N / 2]`` with a gated epilogue) in x's dtype.
    """
    n, k = weight.shape
    block_n, kc, warps, per_sm = launch_shape(k)
    out_n = n // 2 if epilogue != NO_EPILOGUE else n
    y = torch.empty((1, out_n), dtype=x.dtype, device=x.device)
    n_blocks = triton.cdiv(out_n, block_n // 2) if epilogue != NO_EPILOGUE else triton.cdiv(n, block_n)
    grid = (grid_size(n_blocks, gemv_persistent.multiprocessors(x) * per_sm),)
    r = prologue.residual if prologue.residual is not None else x
    b = bias.contiguous() if bias is not None else y
    _long_gemv_kernel[grid](
        x, weight, b, y, r, n, k, weight.stride(0), n_blocks,
        HAS_BIAS=bias is not None, PROLOGUE=prologue.mode, EPILOGUE=epilogue, BLOCK_N=block_n, KC=kc,
        NK=triton.cdiv(k, kc), num_warps=warps, **pdl.launch_options(x))
    return y
