"""Skinny ``linear`` (decode GEMV) in Triton: ``y[M, N] = x[M, K] @ w[N, K]^T + b`` for ``M <= 16`` (fewer with
``ANNA_GEMV_MAX_ROWS``).

At decode a linear layer multiplies a few activation rows by a weight matrix read once: the time is
the weight's bytes over the memory bandwidth, and cuBLAS' GEMM tiles leave much of that bandwidth
unused at these shapes. Each program here owns ``BLOCK_N`` output columns for all ``M`` rows and
streams its ``[BLOCK_N, K]`` slice of the weight along K in ``[BLOCK_N, BLOCK_K]`` tiles (loads
contiguous along K, so vectorised), accumulating in float32 either

* on the CUDA cores (``USE_DOT=False``): a ``[BLOCK_M, BLOCK_N, BLOCK_K]`` product summed over K
  once after the loop (best for one or two rows), or
* on the tensor cores (``USE_DOT=True``): ``w_tile @ x_tile^T`` with the rows padded to 16
  (the arithmetic of eight rows would otherwise saturate the CUDA cores).

Split-K: with few output columns (``N = 1024`` at ``K = 3584``) there are too few programs to keep
every multiprocessor's loads in flight, so ``SPLIT_K`` programs share the K range of each column
block; each writes its float32 partial sums to a workspace ``[SPLIT_K, M, N]`` and counts itself in
with an acquire-release atomic on its column block's counter; the last of them to arrive adds all
partials up (with the bias) in split order, so results are deterministic and no second kernel is
launched (one launch fewer per split projection of a decode step). The launch allocates
nothing outside PyTorch's allocator (CUDA-graph capture safe); the counters are a per-device pool
(:class:`anna_xpu_kernels.counters.CounterPool`) that each launch leaves at zero.

The tile sizes, ``SPLIT_K``, ``USE_DOT`` and warps are autotuned per (row bucket ``BLOCK_M`` in
1, 2, 4, 8, 16; N; K; dtypes) among :func:`anna_xpu_kernels.gemv_tuning.tuning_space`.
Under Triton's interpreter one fixed configuration runs. More rows than
:func:`anna_xpu_kernels._env.gemv_max_rows` (16; ``ANNA_GEMV_MAX_ROWS`` sets 1 to 16: the tensor-core tiles pad
to 16 rows anyway, so 9-16 rows cost the same weight stream), empty shapes, or a weight that
is not a contiguous row-major ``[N, K]`` of x's dtype go to ``F.linear``.

A ``PROLOGUE`` constexpr (:mod:`anna_xpu_kernels.gemv_prologue`, keyed in the autotuner too) lets the
kernel compute its activation tiles from the raw inputs of the op before it (residual add + RMSNorm,
SiLU-mul): :mod:`anna_xpu_kernels.fused_linear` runs those ops and the projection as one launch.

An ``EPILOGUE`` constexpr (keyed too) applies the op after it: with ``SILU_MUL_OUT`` the weight is a
merged ``[gate; up]`` projection ``[2I, K]`` and the kernel writes ``silu(gate) * up`` ``[M, I]``
instead of both halves. Each program then owns ``BLOCK_N / 2`` output columns: its weight tile
interleaves gate row ``c`` and up row ``I + c`` for each of them (tile row ``2j`` / ``2j + 1``), so one
program holds both factors of its outputs and the product needs no second launch (nor a round trip of
the ``[M, 2I]`` projection through memory). The weight layout itself is unchanged (prefill's GEMM reads
the same matrix).

One activation row on CUDA (batch-1 decode, ``K <= 8192``) without a forced configuration goes to the
one-wave kernel instead (:mod:`anna_xpu_kernels.gemv_persistent`, same prologues and epilogues), which
measured faster in the decode step, and a longer row (up to 12,288, a weight of at most 32 Mi values, with the
plain or a gated-product prologue) to its long-row form (:mod:`anna_xpu_kernels.gemv_persistent_long`); ``ANNA_GEMV_PERSISTENT=0``
keeps both here. A shape listed in the
device's in-step tuning table (:func:`anna_xpu_kernels.gemv_tuning.tuned_config`) runs the listed
configuration instead of the autotuner's.
"""

from __future__ import annotations

import attrs
import torch
import torch.nn.functional as F

from anna_xpu_kernels import gemv_persistent, gemv_persistent_long, gemv_tuning, pdl
from anna_xpu_kernels._checks import as_rows, require, require_float, require_same_device
from anna_xpu_kernels._env import GEMV_ROW_LIMIT, gemv_max_rows, gemv_persistent_requested, gemv_prefetch_requested
from anna_xpu_kernels._triton import INTERPRETING, autotune, next_pow2, tl, triton
from anna_xpu_kernels.counters import CounterPool
from anna_xpu_kernels.gemv_epilogue import NO_EPILOGUE, SILU_MUL_OUT, store_out  # noqa: F401 -- SILU_MUL_OUT re-exported
from anna_xpu_kernels.gemv_prologue import PLAIN, act_tile, row_block, row_rstd
from anna_xpu_kernels.gemv_tuning import FIXED, MAX_SPLIT_N, GemvConfig, autotune_bench, prune, tuning_space

MAX_ROWS = GEMV_ROW_LIMIT
"""Largest ``M`` the GEMV kernel can run (its tensor-core tiles hold 16 rows); how many it takes is
:func:`anna_xpu_kernels._env.gemv_max_rows` (16 unless ``ANNA_GEMV_MAX_ROWS`` says fewer); more rows go to
``F.linear`` (a GEMM)."""

PREFETCH_BYTES = 16384
"""Weight bytes (at 16 bits per value; float32 weights load twice as many) a CUDA-core program loads
before it waits for the previous kernel: whole ``[BLOCK_N, BLOCK_K]`` tiles, at least one and at most
:data:`MAX_PREFETCH_TILES`. With programmatic dependent launch those loads are in flight while the
previous kernel drains. Measured neutral in the 2B step (BENCHMARKS.md, sixth session)."""

MAX_PREFETCH_TILES = 4


def prefetch_tiles(block_n: int, block_k: int, use_dot: bool, deep: bool) -> int:
    """Weight tiles a program loads before its PDL wait: one on the tensor-core path (Triton pipelines
    its loads itself) or without ``deep`` (``ANNA_GEMV_PREFETCH=0``), else as many as fit in
    :data:`PREFETCH_BYTES`, between 1 and :data:`MAX_PREFETCH_TILES`."""
    if use_dot or not deep:
        return 1
    return max(1, min(MAX_PREFETCH_TILES, PREFETCH_BYTES // (2 * block_n * block_k)))


@attrs.frozen
class Prologue:
    """What the kernel computes its activation tile from (:mod:`anna_xpu_kernels.gemv_prologue`):
    ``mode`` and, for the norm modes, the residual ``[M, K]`` (or None), the norm weight ``[K]``, eps,
    zero-centring and the new-residual output ``[M, K]`` (written with ``ADD_RMS_NORM`` and the post-norm
    modes); for ``POST_NORM_RESIDUAL`` / ``POST_RESIDUAL`` also the post norm's weight ``[K]`` and the layer
    scale ``[1]`` (or None). The post-norm modes run in the one-wave kernel only."""

    mode: int = PLAIN
    residual: torch.Tensor | None = None
    norm_weight: torch.Tensor | None = None
    new_residual: torch.Tensor | None = None
    eps: float = 0.0
    zero_centered: bool = False
    post_weight: torch.Tensor | None = None
    scale: torch.Tensor | None = None

    def tensors_or(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(residual, norm_weight, new_residual)`` for a kernel launch, ``x`` standing in (a dummy
        pointer) for each one the mode does not use."""
        return tuple(t if t is not None else x for t in (self.residual, self.norm_weight, self.new_residual))


@triton.jit
def _accumulate(acc, w, x_ptr, r_ptr, nw_ptr, rows, k0, ks, k_end, M, K, rstd, stride_xm, stride_rm,
                PROLOGUE: tl.constexpr, ZERO_CENTERED: tl.constexpr, USE_DOT: tl.constexpr,
                UPCAST_DOT: tl.constexpr, MASK_K: tl.constexpr):
    """Add one K tile to the accumulator: ``w`` is the ``[BLOCK_N, BLOCK_K]`` weight tile at ``k0``,
    the activation tile comes from the prologue (``MASK_K``: columns past ``k_end`` are masked)."""
    if USE_DOT:  # acc is y^T [BLOCK_N, 16]; the activation tile is x^T [BLOCK_K, 16]
        x_ok = (rows < M)[None, :]
        if MASK_K:
            x_ok = x_ok & ((k0 + ks) < k_end)[:, None]
        xt = act_tile(x_ptr, r_ptr, nw_ptr, rows[None, :], (k0 + ks)[:, None], x_ok, rstd[None, :], K,
                      stride_xm, stride_rm, PROLOGUE, ZERO_CENTERED)
        if UPCAST_DOT:  # float32 weights, or the interpreter (whose bfloat16 tl.dot is wrong): exact products
            acc = tl.dot(w.to(tl.float32), xt.to(tl.float32), acc, input_precision="ieee")
        else:
            acc = tl.dot(w, xt, acc)
    else:  # acc is [BLOCK_M, BLOCK_N, BLOCK_K], summed over K after the loop
        x_ok = (rows < M)[:, None]
        if MASK_K:
            x_ok = x_ok & ((k0 + ks) < k_end)[None, :]
        x = act_tile(x_ptr, r_ptr, nw_ptr, rows[:, None], (k0 + ks)[None, :], x_ok, rstd[:, None], K,
                     stride_xm, stride_rm, PROLOGUE, ZERO_CENTERED)
        acc += x.to(tl.float32)[:, None, :] * w.to(tl.float32)[None, :, :]
    return acc


@triton.jit
def _load_w(w_tile, k0, k_end, ks, EVEN_K: tl.constexpr):
    """The ``[BLOCK_N, BLOCK_K]`` weight tile at column ``k0`` (columns from ``k_end`` on read as 0)."""
    if EVEN_K:  # whole tiles: one predicate for the tile (past the range: nothing loaded), vector loads
        return tl.load(w_tile + k0, mask=k0 < k_end, other=0.0, eviction_policy="evict_first")
    else:
        return tl.load(w_tile + k0, mask=((k0 + ks) < k_end)[None, :], other=0.0, eviction_policy="evict_first")


@autotune(tuning_space(), fixed=FIXED.triton(), key=["BLOCK_M", "N", "K", "PROLOGUE", "EPILOGUE"], prune_configs_by={
    "early_config_prune": prune}, do_bench=autotune_bench)
@triton.heuristics({"EVEN_K": lambda a: a["K"] % a["BLOCK_K"] == 0,
                    # the norm prologues' row step (a constant otherwise: no extra specialisation per K)
                    "ROW_BLOCK": lambda a: (row_block(a["K"], 16 if a["USE_DOT"] else a["BLOCK_M"], a["BLOCK_K"])
                                            if a["PROLOGUE"] in (1, 2) else 1),
                    "PREFETCH": lambda a: prefetch_tiles(a["BLOCK_N"], a["BLOCK_K"], a["USE_DOT"],
                                                         a["DEEP_PREFETCH"])})
@triton.jit
def _gemv_kernel(
    x_ptr, weight_ptr, bias_ptr, y_ptr, ws_ptr, count_ptr, r_ptr, nw_ptr, s_ptr,
    M, N, K, stride_xm, stride_wn, stride_ym, stride_rm, stride_sm, eps,
    HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr, UPCAST_DOT: tl.constexpr,
    PROLOGUE: tl.constexpr, ZERO_CENTERED: tl.constexpr, EPILOGUE: tl.constexpr, USE_PDL: tl.constexpr,
    DEEP_PREFETCH: tl.constexpr,
    BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT_K: tl.constexpr, USE_DOT: tl.constexpr,
    EVEN_K: tl.constexpr, ROW_BLOCK: tl.constexpr, PREFETCH: tl.constexpr,
):
    # r_ptr, nw_ptr, s_ptr, stride_rm, stride_sm, eps, ZERO_CENTERED: inputs and output of the
    # prologue (anna_xpu_kernels.gemv_prologue), unused with PROLOGUE == 0 (PLAIN).
    pdl.launch_dependents(USE_PDL)
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)  # this program's columns of the split-K workspace
    if EPILOGUE == 1 or EPILOGUE == 2:  # tile row 2j: gate row c_j, tile row 2j + 1: up row I + c_j (c_j this program's j-th output)
        half = N // 2
        out_cols = pid_n * (BLOCK_N // 2) + tl.arange(0, BLOCK_N) // 2
        col_ok = out_cols < half
        w_rows = (tl.minimum(out_cols, half - 1) + (tl.arange(0, BLOCK_N) % 2) * half).to(tl.int64)
    else:
        col_ok = cols < N
        w_rows = tl.minimum(cols, N - 1).to(tl.int64)  # clamped: unmasked weight loads, masked store
    # This program's K range: whole BLOCK_K tiles, split as evenly as tiles allow (the last split's
    # range may be empty).
    tiles_per_split = tl.cdiv(tl.cdiv(K, BLOCK_K), SPLIT_K)
    k_begin = pid_k * tiles_per_split * BLOCK_K
    k_end = tl.minimum(k_begin + tiles_per_split * BLOCK_K, K)
    ks = tl.arange(0, BLOCK_K)
    w_tile = weight_ptr + w_rows[:, None] * stride_wn + ks[None, :]  # [BLOCK_N, BLOCK_K]
    # The first PREFETCH weight tiles are loaded before waiting for the previous kernel (with PDL they
    # stream in while that kernel finishes), then accumulated ahead of the loop over the others; tiles
    # past this program's K range load nothing (masked) and add nothing.
    w_first = _load_w(w_tile, k_begin, k_end, ks, EVEN_K)
    if PREFETCH >= 2:
        w_p1 = _load_w(w_tile, k_begin + BLOCK_K, k_end, ks, EVEN_K)
    if PREFETCH >= 3:
        w_p2 = _load_w(w_tile, k_begin + 2 * BLOCK_K, k_end, ks, EVEN_K)
    if PREFETCH >= 4:
        w_p3 = _load_w(w_tile, k_begin + 3 * BLOCK_K, k_end, ks, EVEN_K)
    pdl.wait(USE_PDL)
    # rows of the activation tile: padded to 16 for the tensor cores, BLOCK_M on the CUDA cores
    rows = tl.arange(0, 16) if USE_DOT else tl.arange(0, BLOCK_M)
    if PROLOGUE == 1 or PROLOGUE == 2:  # the norm's 1/rms needs the whole row, whatever this program's K range
        first = (pid_n == 0) & (pid_k == 0)
        rstd = row_rstd(x_ptr, r_ptr, s_ptr, rows, M, K, stride_xm, stride_rm, stride_sm, eps, first,
                        PROLOGUE, 16 if USE_DOT else BLOCK_M, ROW_BLOCK)
    else:
        rstd = tl.zeros((16 if USE_DOT else BLOCK_M,), dtype=tl.float32)
    if USE_DOT:  # Triton pipelines the loads that feed tl.dot (num_stages) by itself
        acc = tl.zeros((BLOCK_N, 16), dtype=tl.float32)
        acc = _accumulate(acc, w_first, x_ptr, r_ptr, nw_ptr, rows, k_begin, ks, k_end, M, K, rstd, stride_xm,
                          stride_rm, PROLOGUE, ZERO_CENTERED, USE_DOT, UPCAST_DOT, True)
        for k0 in range(k_begin + BLOCK_K, k_end, BLOCK_K):
            if EVEN_K:
                w = tl.load(w_tile + k0, eviction_policy="evict_first")
            else:
                w = tl.load(w_tile + k0, mask=((k0 + ks) < k_end)[None, :], other=0.0, eviction_policy="evict_first")
            acc = _accumulate(acc, w, x_ptr, r_ptr, nw_ptr, rows, k0, ks, k_end, M, K, rstd, stride_xm, stride_rm,
                              PROLOGUE, ZERO_CENTERED, USE_DOT, UPCAST_DOT, not EVEN_K)
    else:  # it does not pipeline these: load the next weight tile before using the current one
        acc = tl.zeros((BLOCK_M, BLOCK_N, BLOCK_K), dtype=tl.float32)
        w = w_first  # then the prefetched tiles but the last (accumulated as they are), the last one in w
        if PREFETCH >= 2:
            acc = _accumulate(acc, w, x_ptr, r_ptr, nw_ptr, rows, k_begin, ks, k_end, M, K, rstd, stride_xm,
                              stride_rm, PROLOGUE, ZERO_CENTERED, USE_DOT, UPCAST_DOT, True)
            w = w_p1
        if PREFETCH >= 3:
            acc = _accumulate(acc, w, x_ptr, r_ptr, nw_ptr, rows, k_begin + BLOCK_K, ks, k_end, M, K, rstd,
                              stride_xm, stride_rm, PROLOGUE, ZERO_CENTERED, USE_DOT, UPCAST_DOT, True)
            w = w_p2
        if PREFETCH >= 4:
            acc = _accumulate(acc, w, x_ptr, r_ptr, nw_ptr, rows, k_begin + 2 * BLOCK_K, ks, k_end, M, K, rstd,
                              stride_xm, stride_rm, PROLOGUE, ZERO_CENTERED, USE_DOT, UPCAST_DOT, True)
            w = w_p3
        for k0 in range(k_begin + PREFETCH * BLOCK_K, k_end, BLOCK_K):
            if EVEN_K:
                w_next = tl.load(w_tile + k0, eviction_policy="evict_first")
            else:
                w_next = tl.load(w_tile + k0, mask=((k0 + ks) < k_end)[None, :], other=0.0,
                                 eviction_policy="evict_first")
            acc = _accumulate(acc, w, x_ptr, r_ptr, nw_ptr, rows, k0 - BLOCK_K, ks, k_end, M, K, rstd, stride_xm,
                              stride_rm, PROLOGUE, ZERO_CENTERED, USE_DOT, UPCAST_DOT, not EVEN_K)
            w = w_next
        # the last tile (the last prefetched one when the loop did not run: possibly past the range, masked)
        k_last = tl.maximum(k_begin + (PREFETCH - 1) * BLOCK_K, k_begin + ((k_end - k_begin - 1) // BLOCK_K) * BLOCK_K)
        acc = _accumulate(acc, w, x_ptr, r_ptr, nw_ptr, rows, k_last, ks, k_end, M, K, rstd, stride_xm,
                          stride_rm, PROLOGUE, ZERO_CENTERED, USE_DOT, UPCAST_DOT, True)
    if USE_DOT:
        out = tl.trans(acc)  # [16, BLOCK_N]
    else:
        out = tl.sum(acc, axis=2)  # [BLOCK_M, BLOCK_N]
    mask = (rows < M)[:, None] & col_ok[None, :]
    if SPLIT_K == 1:
        if HAS_BIAS:
            out += tl.load(bias_ptr + w_rows, mask=col_ok, other=0.0).to(tl.float32)[None, :]
        store_out(y_ptr, out, rows, pid_n, M, N, stride_ym, EPILOGUE, BLOCK_N)
    else:
        ws = ws_ptr + rows[:, None] * N + cols[None, :]  # split s's partials at ws + s * M * N
        tl.store(ws + pid_k * M * N, out, mask=mask)
        tl.debug_barrier()  # every thread's partial sums are stored before this program counts itself in
        arrived = tl.atomic_add(count_ptr + pid_n, 1, sem="acq_rel", scope="gpu")
        if arrived == SPLIT_K - 1:  # the last split of this column block: every partial is visible
            total = tl.load(ws, mask=mask, other=0.0, cache_modifier=".cg")
            for s in tl.static_range(1, SPLIT_K):  # split order: deterministic sums
                total += tl.load(ws + s * M * N, mask=mask, other=0.0, cache_modifier=".cg")
            if HAS_BIAS:
                total += tl.load(bias_ptr + w_rows, mask=col_ok, other=0.0).to(tl.float32)[None, :]
            store_out(y_ptr, total, rows, pid_n, M, N, stride_ym, EPILOGUE, BLOCK_N)
            tl.store(count_ptr + pid_n, 0)  # zero for the next launch (graph replays)


def supports(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether the GEMV kernel takes ``x`` ``[M, K]`` and ``weight``: ``1 <= M <=`` :func:`gemv_max_rows` (16 unless
    ``ANNA_GEMV_MAX_ROWS`` sets 1 to 16), ``N, K >= 1``, weight a contiguous row-major ``[N, K]`` of x's dtype
    (float32 / float16 / bfloat16)."""
    m = x.numel() // x.shape[-1] if x.dim() and x.shape[-1] else 0
    return (1 <= m <= gemv_max_rows() and weight.dim() == 2 and weight.shape[0] >= 1 and weight.is_contiguous()
            and weight.dtype == x.dtype and x.dtype in (torch.float32, torch.float16, torch.bfloat16))


_MOST_SPLITS = max(c.kwargs["SPLIT_K"] for c in tuning_space())


def _max_split(n: int) -> int:
    """Rows of the split-K workspace an autotuned launch may need for ``n`` output columns."""
    return 1 if INTERPRETING or n > MAX_SPLIT_N else _MOST_SPLITS


def gemv(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
         config: GemvConfig | None = None) -> torch.Tensor:
    """The GEMV kernel on ``x`` ``[M, K]`` (``1 <= M <=`` :func:`gemv_max_rows`), ``weight`` ``[N, K]``, ``bias``
    ``[N]`` or None.

    Args:
        config: run this configuration instead of the autotuned one (tests force split-K on and
            off, and each accumulation path, with it).

    Returns:
        ``[M, N]`` in x's dtype.

    Raises:
        ValueError: :func:`supports` does not hold, or the tensors are on different devices.
    """
    require(x.dim() == 2 and supports(x, weight), "linear",
            f"the GEMV kernel takes x [M<={gemv_max_rows()}, K] and a contiguous weight [N, K] of x's dtype, got "
            f"x {tuple(x.shape)} {x.dtype}, weight {tuple(weight.shape)} {weight.dtype}")
    require_same_device("linear", x=x, weight=weight, bias=bias)
    if x.stride(-1) != 1:
        x = x.contiguous()
    return launch(x, weight, bias, config, Prologue())


def launch(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, config: GemvConfig | None,
           prologue: Prologue, epilogue: int = NO_EPILOGUE) -> torch.Tensor:
    """Run the kernel on checked arguments: ``x`` ``[M, K]`` (``[M, 2K]`` with
    ``SILU_MUL`` / ``GELU_TANH_MUL``) with unit stride along K, ``weight`` contiguous ``[N, K]`` (N even
    with a gated epilogue); returns ``y`` ``[M, N]`` (``[M, N / 2]`` with ``SILU_MUL_OUT`` /
    ``GELU_TANH_MUL_OUT``).

    One row without a forced ``config`` runs the one-wave kernel (:mod:`anna_xpu_kernels.gemv_persistent`)
    where it takes the width, or its long-row form (:mod:`anna_xpu_kernels.gemv_persistent_long`: wider rows,
    elementwise prologues, no configuration listed for the shape in the device's tuning table), unless
    ``ANNA_GEMV_PERSISTENT=0``."""
    m = x.shape[0]
    n, k = weight.shape
    if config is None and gemv_persistent_requested():
        if gemv_persistent.takes(x, k):
            return gemv_persistent.launch(x, weight, bias, prologue, epilogue)
        if gemv_persistent_long.takes(x, n, k, prologue.mode) and gemv_tuning.tuned_config(
                x, 1, n, k, prologue.mode, epilogue) is None:
            return gemv_persistent_long.launch(x, weight, bias, prologue, epilogue)
    y = torch.empty((m, n // 2 if epilogue != NO_EPILOGUE else n), dtype=x.dtype, device=x.device)
    has_bias = bias is not None
    b = bias.contiguous() if has_bias else y  # dummy pointer when there is no bias
    p = prologue
    r, nw, s = p.tensors_or(x)
    if config is None:  # a configuration measured in the whole decode step for this device, if listed
        config = gemv_tuning.tuned_config(x, next_pow2(m), n, k, p.mode, epilogue)
    splits = config.split_k if config is not None else _max_split(n)  # the workspace's, at most
    ws = torch.empty((splits, m, n), dtype=torch.float32, device=x.device) if splits > 1 else y
    # one arrival counter per column block of a split launch (the narrowest split tile is 4 columns);
    # a launch that cannot split (wide N, e.g. the LM head) uses none
    blocks = triton.cdiv(n, config.block_n if config is not None else 4) if splits > 1 else 0
    counters = launch.counters.get(x.device, blocks)
    args = (x, weight, b, y, ws, counters, r, nw, s, m, n, k, x.stride(0), weight.stride(0), y.stride(0), r.stride(0),
            s.stride(0), float(p.eps))
    common = {"HAS_BIAS": has_bias, "BLOCK_M": next_pow2(m), "UPCAST_DOT": INTERPRETING or x.dtype == torch.float32,
              "PROLOGUE": p.mode, "ZERO_CENTERED": bool(p.zero_centered), "EPILOGUE": epilogue,
              "DEEP_PREFETCH": gemv_prefetch_requested(), **pdl.launch_options(x)}
    if config is not None:
        grid = (triton.cdiv(n, config.block_n), config.split_k)
        _gemv_kernel.fn[grid](*args, **common, BLOCK_N=config.block_n, BLOCK_K=config.block_k, SPLIT_K=config.split_k,
                              USE_DOT=config.use_dot, num_warps=config.num_warps, num_stages=config.num_stages)
    else:

        def grid(meta):
            return (triton.cdiv(n, meta["BLOCK_N"]), meta["SPLIT_K"])

        _gemv_kernel[grid](*args, **common)
    return y


launch.counters = CounterPool(min_words=triton.cdiv(MAX_SPLIT_N, 4))


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``x @ weight^T + bias`` (signature of :func:`anna_core.kernels.reference.linear.linear`).

    Args:
        x: ``[M, K]`` or ``[..., K]``, float32 / float16 / bfloat16; weight: ``[N, K]`` of x's dtype;
            bias: ``[N]`` or None.

    Returns:
        ``[..., N]`` in x's dtype: the Triton GEMV when there are 1 to :func:`gemv_max_rows` rows (16 unless
        ``ANNA_GEMV_MAX_ROWS`` says fewer) and the weight is a contiguous row-major matrix, else ``F.linear``.

    Raises:
        ValueError: shapes or dtypes disagree, or tensors on different devices.
    """
    from anna_core.kernels.reference.linear import check_linear

    check_linear("linear", x, weight, bias)
    require_float("linear", x=x)
    if not supports(x, weight):
        return F.linear(x, weight, bias)
    require_same_device("linear", x=x, weight=weight, bias=bias)
    y = launch(as_rows(x), weight, bias, None, Prologue())
    return y.view(*x.shape[:-1], weight.shape[0])
