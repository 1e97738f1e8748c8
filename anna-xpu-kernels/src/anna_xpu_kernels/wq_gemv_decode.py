"""The decode kernel of the ``wq_linear`` ops for 1..8 rows: a split-K CUDA-core GEMV over a quantized weight
(:mod:`anna_core.weights.gpu_quant` layouts) that spends as few instructions per weight as it can, so that it
streams the weight bytes at the card's bandwidth instead of waiting on integer conversions.

Why. An int4 GEMV at batch 1 must consume about 26 weights per multiprocessor and clock to read 3 TB/s on an H100
(132 multiprocessors at ~1.75 GHz), with 128 lanes a clock: a few instructions per weight, loads and addresses
included. Converting each code with an integer-to-float conversion (a quarter-rate unit), dequantizing it with its
own multiply-add and multiplying it by the activation, with layout conversions of the weight tile between them, as
the tiled kernel (:mod:`anna_xpu_kernels.wq_gemv`) does, costs more: it measured 650-1000 GB/s (BENCHMARKS.md).

How:

* Codes are read as 8-code units (int4: an int32 word; int8 / FP8: an int64, the stored rows viewed as such,
  little-endian: code ``j`` of unit ``u`` is column ``8u + j``). A tile is ``[G, BLOCK_N, 16]`` units (``G =
  BLOCK_K / 128`` groups of 16 units, group first) and the activation tile ``[G, BLOCK_M, 128]``; with ``BLOCK_K
  >= 256 x warps`` each thread holds one unit column of all ``BLOCK_N`` rows and the 8 activations of that
  column, so the compiled kernel multiplies them where they are loaded (the codes' pointer is not specialized on
  alignment, which keeps one unit per thread: the activations' layout). Split in registers, the 8 activations
  ``x_j`` pair with the 8 codes.
* Each code becomes an exact float32 with one shift and one three-input logic instruction, no conversion
  (:func:`~anna_xpu_kernels.wq_codes._code_f`): int4 ``f = 1 + q / 16``, int8 ``f = 1 + (q + 128) / 256``, FP8 its value times ``2^-120``.
  On CUDA devices of compute capability 8.9 and later FP8 codes instead go through the hardware's conversion of
  two e4m3 codes to two float16 (:func:`_e4m3x4`, ``NATIVE_FP8``; ``ANNA_WQ_FP8_CVT=0`` turns it off): 4.2
  instructions a weight instead of 5.5 in the 16-row tile (sm_90), the served Qwen3.5-9B FP8 step 4.5% faster on
  an H100, the same outputs bit for bit there (16-bit activations). With ``ANNA_WQ_INT4_PAIRED=1`` int4 tiles of
  one or two rows of 16-bit activations take two codes per shift (:func:`_unit_sums`, :func:`_int4_pair`,
  ``PAIR_INT4``): about 4.5 instructions per weight instead of 4.7 in the 16-row tile and 96 registers a thread
  instead of 168, 7% faster in the GEMV microbenchmark, but the served 9B step measured 4% slower on an H100, so
  it is off by default.
* Per unit ``P = sum_j x_j f_j`` (a fused multiply-add per code) and ``X = sum_j x_j`` (once per program, shared by
  its rows) give the dequantized product with the scale and zero applied once per unit: int4 ``sum_j x_j (q_j s +
  z) = 16 s P + (z - 16 s) X`` (paired: ``s P + z X``, ``P`` the codes' own products); int8 ``sum_j x_j q_j =
  256 (P - 1.5 X)`` (times the row's scale at the end); FP8 ``P 2^120 s`` (as ``(P 2^60)(s 2^60)``: no overflow
  for any finite scale).
* Each program owns ``BLOCK_N`` weight rows and a ``1 / SPLIT_K`` share of K (whole ``BLOCK_K`` tiles), so narrow
  projections still start enough programs to keep every multiprocessor's loads in flight. With ``SPLIT_K > 1``
  each program stores its float32 partial sums in a workspace ``[SPLIT_K, M, N]`` and counts itself in on its row
  block's counter (acquire-release); the last to arrive adds the partials in split order (deterministic) and
  writes the output, as the dense GEMV does (:mod:`anna_xpu_kernels.gemv`).
* The first tile is loaded before the programmatic-dependent-launch wait, each next one before the current one is
  used (two tiles in flight per program).

Exactness: every code is decoded exactly (FP8 subnormals become float32 subnormals, which these kernels do not
flush); the int4 / int8 unit sums carry an offset (``X``; paired int4: ``16 sum_odd x' + 256 sum_even x'``, a few
bits of cancellation), so results differ from the reference's (dequantize, then multiply) by summation order and
those bits: within the tests' ``1e-5`` of the largest output (paired int4 with 16-bit rows: well within their
output's rounding, tested exact on integer data and to one unit in the last place on random fp16 data). The
decode fusions of the tiled kernel are kept: the norm prologues (:mod:`anna_xpu_kernels.gemv_prologue`, rows up
to :data:`anna_xpu_kernels.wq_gemv.NORM_PROLOGUE_MAX_K`), the gated epilogues (:mod:`anna_xpu_kernels.gemv_epilogue`,
merged gate/up rows interleaved per program) and an act-order weight's column order (``PERMUTED``: the activation tile gathered through ``perm``, as in
:mod:`anna_xpu_kernels.wq_gemv`).
"""

from __future__ import annotations

import functools

import attrs
import torch

from anna_xpu_kernels import pdl
from anna_xpu_kernels._env import wq_fp8_cvt_requested, wq_int4_paired_requested
from anna_xpu_kernels._triton import INTERPRETING, autotune, next_pow2, tl, triton
from anna_xpu_kernels.counters import CounterPool
from anna_xpu_kernels.gemv import Prologue
from anna_xpu_kernels.gemv_epilogue import NO_EPILOGUE, store_out
from anna_xpu_kernels.gemv_prologue import act_tile, row_block, row_rstd
from anna_xpu_kernels.gemv_tuning import autotune_bench
from anna_xpu_kernels.wq_codes import CODE_BITS, _code_f, _e4m3x4, _int4_pair
from anna_xpu_kernels.wq_columns import permuted_columns

MAX_ROWS = 8
"""Most rows this kernel takes (more: the tiled kernel's tensor-core path)."""

MAX_SPLIT_N = 32768
"""Split-K is only tuned for ``N`` up to this (the workspace is ``SPLIT_K * M * N`` float32: at most 8 MiB)."""

SPLITS = (1, 2, 4, 8)
"""The split-K factors of the tuning space."""

SCHEME_IDS = {"int4": 0, "int8": 1, "fp8": 2}
"""The kernel's ``SCHEME`` constexpr per scheme name."""

@attrs.frozen
class WqConfig:
    """One launch configuration: ``BLOCK_N`` weight rows per program, ``BLOCK_K`` columns per tile (a multiple
    of 128: whole int4 groups / FP8 blocks), ``SPLIT_K`` programs per row block, warps."""

    block_n: int
    block_k: int
    split_k: int = 1
    num_warps: int = 4

    def triton(self) -> triton.Config:
        return triton.Config({"BLOCK_N": self.block_n, "BLOCK_K": self.block_k, "SPLIT_K": self.split_k},
                             num_warps=self.num_warps)


ONE_ROW_TILES = ((8, 1024, 4), (16, 1024, 4), (32, 1024, 4), (16, 2048, 8))
"""``(BLOCK_N, BLOCK_K, warps)`` tried for one row (each with at most one split of :data:`SPLITS`, :func:`prune`).
``BLOCK_K`` is at least 256 per warp: a tile's ``BLOCK_K / 8`` units then cover every thread (one unit each, or
two), so the weight tile, the activation tile and the products share one layout (the compiled kernel converts no
weight tile). Few on purpose: each is a compilation at start-up, per row bucket and epilogue."""

ROWS_TILES = ((4, 1024, 4), (8, 1024, 4), (8, 2048, 8))
"""The tiles tried for 2..8 rows (fewer rows per program: the activations of every row are held per thread)."""

TILES = tuple(dict.fromkeys(ONE_ROW_TILES + ROWS_TILES))
"""Every tile of the tuning space."""

FIXED = WqConfig(block_n=8, block_k=256, split_k=1)
"""The configuration run under the interpreter (two int4 groups per tile; tests force others)."""

PAIRED_MAX_ROWS: tl.constexpr = tl.constexpr(2)
"""Most rows for which an int4 tile decodes two codes per shift (:func:`_unit_sums`)."""

TARGET_PROGRAMS = 1024
"""A split is tried only while the row blocks alone start fewer programs than this (about 8 per multiprocessor of
an H100 / H200); the smallest split that reaches it, and no split, are timed."""


def tuning_space() -> list[triton.Config]:
    """Every tile of :data:`TILES` with every split of :data:`SPLITS` (:func:`prune` keeps a shape's few)."""
    return [WqConfig(bn, bk, s, w).triton() for bn, bk, w in TILES for s in SPLITS]


def prune(configs, named_args, **kwargs):
    """Keep configurations that can win for the shape: the tiles of its row count (:data:`ONE_ROW_TILES`,
    :data:`ROWS_TILES`) no wider than K's power of two (at least one whole tile per split), at most 64 float32
    accumulators per thread, and per tile no split or the smallest split that starts :data:`TARGET_PROGRAMS`
    programs (rows up to :data:`MAX_SPLIT_N`).

    In the compiled sm_90 code (``ptxas``, no spills) one int4 weight of one 16-bit row costs about 7
    instructions in an 8-row tile of 4 warps, 4.5 in a 16-row tile and 4.3 in a 32-row tile (the per-row
    activation and scale work is shared by more rows); the autotuner measures which reads the weight fastest."""
    k, n, block_m = named_args["K"], named_args["N"], kwargs["BLOCK_M"]
    kept = []
    for c in configs:
        bn, bk, s, w = c.kwargs["BLOCK_N"], c.kwargs["BLOCK_K"], c.kwargs["SPLIT_K"], c.num_warps
        if (bn, bk, w) not in (ONE_ROW_TILES if block_m == 1 else ROWS_TILES):
            continue
        if bk > max(256, next_pow2(k)) or bn > max(4, next_pow2(n)):
            continue
        if block_m * bn * max(1, bk // (256 * w)) > 64:  # float32 accumulators per thread (32 rows: 255 registers)
            continue
        if s > 1:
            blocks = triton.cdiv(n, bn)
            wanted = next_pow2(triton.cdiv(TARGET_PROGRAMS, blocks))
            if n > MAX_SPLIT_N or blocks >= TARGET_PROGRAMS or s != min(wanted, max(SPLITS)) or triton.cdiv(k, bk) < s:
                continue
        kept.append(c)
    return kept or [FIXED.triton()]


@triton.jit
def _halves(t):
    """``t[..., 2i]`` and ``t[..., 2i + 1]`` of ``t`` ``[A, B, C, 2D]`` as two ``[A, B, C, D]`` tensors."""
    return tl.split(tl.reshape(t, (t.shape[0], t.shape[1], t.shape[2], t.shape[3] // 2, 2)))


@triton.jit
def _mac(x_j, f_j):
    """``x_j[g, m, u] * f_j[g, n, u]`` as ``[G, M, N, U]``: ``x_j`` ``[G, M, U, 1]``, ``f_j`` ``[G, N, U]``."""
    return f_j[:, None, :, :] * tl.reshape(x_j, (x_j.shape[0], x_j.shape[1], 1, x_j.shape[2]))


@triton.jit
def _unit_sums(units, x, code_mask, one_bits, SCHEME: tl.constexpr, PAIRED: tl.constexpr,
               NATIVE_FP8: tl.constexpr):
    """``(P, X)``, float32, for the 8-code units ``[G, N, 16]`` (int4: int32 words; int8 / FP8: int64, codes 0..3
    in the low half) and the activations ``x`` ``[G, M, 16, 8]``: ``X[g, m, u] = sum_j x[g, m, u, j]``
    ``[G, M, 1, 16]``, and ``P`` ``[G, M, N, 16]``:

    * ``P[g, m, n, u] = sum_j x[g, m, u, j] f_j(units[g, n, u])`` (:func:`_code_f`, one shift and one logic
      instruction per code; int4: ``f = 1 + q / 16``);
    * FP8 with ``NATIVE_FP8``: ``P = sum_j x_j w_j`` (the codes' own values, :func:`_e4m3x4`: half an instruction
      to convert a code to float16 and one to float32, in place of two shifts and a logic instruction);
    * int4 with ``PAIRED`` (``ANNA_WQ_INT4_PAIRED=1``, 1 or 2 rows, :data:`PAIRED_MAX_ROWS`): ``P = sum_j x_j q_j``
      (the codes' own values): one shift moves two codes to bits 15..22 of a word (:func:`_int4_pair`: ``f = 1 + q / 16`` for the odd code,
      ``16 + q / 16`` for the even one), so a unit costs 4 shifts and 8 logic instructions (shared by the
      activation rows) and 8 fused multiply-adds per activation row. With ``x' = 16 x`` the products sum to
      ``sum_j x_j q_j + sum_odd x'_j + 16 sum_even x'_j``: the chain starts at minus that offset (computed once
      per activation row and unit, shared by the weight rows). The even codes' offset is 256 times their
      activation against a product of at most 15 times it, so the cancellation costs about 4 bits of the float32
      sum (a review measured errors 1-10 times the unpaired sums', at most 4e-6 of the largest output with
      outlier activations): far below a 16-bit output's rounding (a half ulp is 2e-3 / 2.4e-4 of it in bf16 /
      fp16), but float32 activations measured errors up to 1.1e-5 of the largest output, so only 16-bit
      activations pair (``PAIRED`` is false for float32 rows). The offset also scales the activations by up to
      about 1024 (16 unpaired): activations beyond about 1e34 overflow float32 here (not in the unpaired sums).
      (With more rows the scaled activations and offsets of every row cost more than the shifts saved: compiled
      for sm_90, 4 rows broke even and 8 rows took 9% more instructions.)"""
    e, o = _halves(x)  # j = 4a + 2b + c: the halves split c, then b, then a
    e0, e1 = _halves(e)
    o0, o1 = _halves(o)
    x0, x4 = _halves(e0)  # [G, M, 16, 1]
    x2, x6 = _halves(e1)
    x1, x5 = _halves(o0)
    x3, x7 = _halves(o1)
    if SCHEME == 2 and NATIVE_FP8:
        a0, a1, a2, a3 = _e4m3x4(units.to(tl.int32))  # codes 0..3 (little-endian)
        p = _mac(x0, a0)
        p += _mac(x1, a1)
        p += _mac(x2, a2)
        p += _mac(x3, a3)
        b0, b1, b2, b3 = _e4m3x4((units >> 32).to(tl.int32))  # codes 4..7
        p += _mac(x4, b0)
        p += _mac(x5, b1)
        p += _mac(x6, b2)
        p += _mac(x7, b3)
        xs = ((x0 + x1) + (x2 + x3)) + ((x4 + x5) + (x6 + x7))
    elif SCHEME == 0 and PAIRED:
        xs = ((x0 + x1) + (x2 + x3)) + ((x4 + x5) + (x6 + x7))  # first: 96 registers in the 16-row tile, not 123
        y0, y1, y2, y3 = x0 * 16.0, x1 * 16.0, x2 * 16.0, x3 * 16.0
        y4, y5, y6, y7 = x4 * 16.0, x5 * 16.0, x6 * 16.0, x7 * 16.0
        start = -(((y1 + y3) + (y5 + y7)) + 16.0 * ((y0 + y2) + (y4 + y6)))  # minus the offset
        f1, f0 = _int4_pair(units << 15, code_mask, one_bits)  # bits 0..7 -> 15..22: codes 1 (high), 0 (low)
        p = tl.reshape(start, (start.shape[0], start.shape[1], 1, start.shape[2])) + _mac(y1, f1)
        p += _mac(y0, f0)
        f3, f2 = _int4_pair(units << 7, code_mask, one_bits)  # bits 8..15
        p += _mac(y3, f3)
        p += _mac(y2, f2)
        f5, f4 = _int4_pair(units >> 1, code_mask, one_bits)  # bits 16..23 (arithmetic shifts: copies masked off)
        p += _mac(y5, f5)
        p += _mac(y4, f4)
        f7, f6 = _int4_pair(units >> 9, code_mask, one_bits)  # bits 24..31
        p += _mac(y7, f7)
        p += _mac(y6, f6)
    else:
        if SCHEME == 0:
            lo = units
            hi = units
            HI: tl.constexpr = 4
        else:
            lo = units.to(tl.int32)  # codes 0..3 (little-endian)
            hi = (units >> 32).to(tl.int32)  # codes 4..7
            HI: tl.constexpr = 0
        p = _mac(x0, _code_f(lo, 0, SCHEME, code_mask, one_bits))
        p += _mac(x1, _code_f(lo, 1, SCHEME, code_mask, one_bits))
        p += _mac(x2, _code_f(lo, 2, SCHEME, code_mask, one_bits))
        p += _mac(x3, _code_f(lo, 3, SCHEME, code_mask, one_bits))
        p += _mac(x4, _code_f(hi, HI, SCHEME, code_mask, one_bits))
        p += _mac(x5, _code_f(hi, HI + 1, SCHEME, code_mask, one_bits))
        p += _mac(x6, _code_f(hi, HI + 2, SCHEME, code_mask, one_bits))
        p += _mac(x7, _code_f(hi, HI + 3, SCHEME, code_mask, one_bits))
        xs = ((x0 + x1) + (x2 + x3)) + ((x4 + x5) + (x6 + x7))  # last, as before the pairing (fewer registers)
    return p, tl.reshape(xs, (xs.shape[0], xs.shape[1], 1, xs.shape[2]))


@triton.jit
def _load_tile(q_ptr, s_ptr, z_ptr, w_rows, s_rows, s_ok, k0, k_end, stride_qn, stride_sn, stride_sg,
               SCHEME: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr,
               ONE_BLOCK: tl.constexpr):
    """The raw tile at column ``k0`` (nothing loaded at or past ``k_end``): ``(units, scale, zero)`` for the tile's
    ``G = BLOCK_K / 128`` groups, group first: the 8-code units ``[G, BLOCK_N, 16]`` (int4: int32; int8 / FP8:
    int64), scale and zero ``[G, BLOCK_N]`` float32 (int4: both; FP8: the blocks' scales; int8: unused zeros).
    ``EVEN_K``: the range holds whole tiles (one mask for the whole tile). The int4 scales are read at rows
    ``s_rows`` where ``s_ok`` (the rows themselves, unclamped, so that group-major scales load as vectors).
    ``ONE_BLOCK``: the tile's rows are consecutive and ``BLOCK_N`` divides 128, so one FP8 scale block row holds
    them all (one scale load per group)."""
    GROUPS: tl.constexpr = BLOCK_K // 128
    g = tl.arange(0, GROUPS)
    u = tl.arange(0, 16)
    cols = (k0 // 8 + 16 * g)[:, None, None] + u[None, None, :]  # [G, 1, 16] unit columns
    if EVEN_K:
        ok = k0 < k_end  # the range's tiles are whole
    else:
        ok = (8 * cols) < k_end
    units = tl.load(q_ptr + w_rows[None, :, None] * stride_qn + cols, mask=ok, other=0, eviction_policy="evict_first")
    g_ok = ((k0 // 128 + g) < tl.cdiv(k_end, 128))[:, None] & (k0 < k_end)
    if SCHEME == 0:
        s_off = s_rows[None, :] * stride_sn + (k0 // 128 + g)[:, None] * stride_sg
        ok = g_ok & s_ok[None, :]
        scale = tl.load(s_ptr + s_off, mask=ok, other=0.0, eviction_policy="evict_first").to(tl.float32)
        zero = tl.load(z_ptr + s_off, mask=ok, other=0.0, eviction_policy="evict_first").to(tl.float32)
    elif SCHEME == 2 and ONE_BLOCK:  # the tile's rows lie in one 128-row block: one scale per group
        tl.static_assert(128 % BLOCK_N == 0)
        blk = tl.min(w_rows, axis=0) // 128
        s_g = tl.load(s_ptr + blk * stride_sn + (k0 // 128 + g) * stride_sg, mask=((k0 // 128 + g) < tl.cdiv(k_end, 128)) & (k0 < k_end), other=0.0,
                      eviction_policy="evict_last")  # a block's scale is read by the programs of its 128 rows
        scale = tl.broadcast_to(s_g[:, None], (GROUPS, BLOCK_N))
        zero = scale
    elif SCHEME == 2:
        scale = tl.load(s_ptr + (w_rows // 128)[None, :] * stride_sn + (k0 // 128 + g)[:, None] * stride_sg,
                        mask=g_ok, other=0.0, eviction_policy="evict_last")
        zero = scale
    else:
        scale = tl.zeros((GROUPS, BLOCK_N), dtype=tl.float32)
        zero = scale
    return units, scale, zero


@triton.jit
def _tile_sum(acc, units, scale, zero, x, code_mask, one_bits, SCHEME: tl.constexpr, ACT_BITS: tl.constexpr,
              NATIVE_FP8: tl.constexpr, PAIR_INT4: tl.constexpr):
    """``acc`` ``[G, BLOCK_M, BLOCK_N, 16]`` plus one tile's products (module docstring) of :func:`_load_tile`'s
    raw tile and the float32 activation tile ``x`` ``[G, BLOCK_M, 128]`` (values of ``ACT_BITS``-bit
    activations: with ``PAIR_INT4``, int4 tiles of 16-bit activations and at most :data:`PAIRED_MAX_ROWS` rows decode
    two codes per shift, :func:`_unit_sums`; FP8 tiles with ``NATIVE_FP8`` convert their codes in hardware)."""
    PAIRED: tl.constexpr = PAIR_INT4 and x.shape[1] <= PAIRED_MAX_ROWS and ACT_BITS == 16
    p, xs = _unit_sums(units, tl.reshape(x, (x.shape[0], x.shape[1], 16, 8)), code_mask, one_bits, SCHEME, PAIRED,
                       NATIVE_FP8)
    if SCHEME == 0 and PAIRED:  # s P + z X (P: the codes' own products)
        acc += p * scale[:, None, :, None] + xs * zero[:, None, :, None]
    elif SCHEME == 0:  # 16 s P + (z - 16 s) X
        s16 = scale * 16.0
        acc += p * s16[:, None, :, None] + xs * (zero - s16)[:, None, :, None]
    elif SCHEME == 1:  # (P - 1.5 X): the codes' sum / 256
        acc += p - 1.5 * xs
    elif NATIVE_FP8:  # s P (P: the codes' own products)
        acc += p * scale[:, None, :, None]
    else:  # P is the sum times 2^-120: scaled back in two steps of 2^60 (no overflow for any finite scale)
        acc += (p * 1.152921504606846976e18) * (scale * 1.152921504606846976e18)[:, None, :, None]
    return acc


@autotune(tuning_space(), fixed=FIXED.triton(), key=["BLOCK_M", "N", "K", "SCHEME", "PROLOGUE", "EPILOGUE",
                                                     "PERMUTED", "NATIVE_FP8", "PAIR_INT4"],
          prune_configs_by={"early_config_prune": prune}, do_bench=autotune_bench)  # timed with a cold L2
@triton.heuristics({"EVEN_K": lambda a: a["K"] % a["BLOCK_K"] == 0})
@triton.jit(do_not_specialize=["code_mask", "one_bits"], do_not_specialize_on_alignment=["q_ptr"])  # one 8-code word per thread: the activations' layout
def _wq_decode_kernel(
    x_ptr, q_ptr, s_ptr, z_ptr, bias_ptr, y_ptr, ws_ptr, count_ptr, r_ptr, nw_ptr, nr_ptr, perm_ptr,
    M, N, K, stride_xm, stride_qn, stride_sn, stride_sg, stride_ym, stride_rm, stride_nrm, eps, code_mask, one_bits,
    SCHEME: tl.constexpr, HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr, PROLOGUE: tl.constexpr,
    ZERO_CENTERED: tl.constexpr, EPILOGUE: tl.constexpr, PERMUTED: tl.constexpr, USE_PDL: tl.constexpr,
    ROW_BLOCK: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT_K: tl.constexpr,
    EVEN_K: tl.constexpr, NATIVE_FP8: tl.constexpr, PAIR_INT4: tl.constexpr,
):
    pdl.launch_dependents(USE_PDL)
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)  # this program's columns of the split-K workspace
    if EPILOGUE == 1 or EPILOGUE == 2:  # tile row 2j: gate row c_j, 2j + 1: up row I + c_j
        half = N // 2
        out_cols = pid_n * (BLOCK_N // 2) + tl.arange(0, BLOCK_N) // 2
        col_ok = out_cols < half
        w_rows = (tl.minimum(out_cols, half - 1) + (tl.arange(0, BLOCK_N) % 2) * half).to(tl.int64)
        s_rows = w_rows
    else:
        col_ok = cols < N
        w_rows = tl.minimum(cols, N - 1).to(tl.int64)  # clamped: unmasked rows, masked store
        s_rows = cols
    tiles_per_split = tl.cdiv(tl.cdiv(K, BLOCK_K), SPLIT_K)
    k_begin = pid_k * tiles_per_split * BLOCK_K
    k_end = tl.minimum(k_begin + tiles_per_split * BLOCK_K, K)
    # the first tile before waiting for the previous kernel (weights are never written in a step)
    codes, scale, zero = _load_tile(q_ptr, s_ptr, z_ptr, w_rows, s_rows, col_ok, k_begin, k_end, stride_qn, stride_sn,
                                    stride_sg, SCHEME, BLOCK_N, BLOCK_K, EVEN_K, EPILOGUE == 0)
    pdl.wait(USE_PDL)
    m_rows = tl.arange(0, BLOCK_M)
    if PROLOGUE == 1 or PROLOGUE == 2:  # the norm's 1/rms over the whole row; program (0, 0) writes the residual
        rstd = row_rstd(x_ptr, r_ptr, nr_ptr, m_rows, M, K, stride_xm, stride_rm, stride_nrm, eps,
                        (pid_n == 0) & (pid_k == 0), PROLOGUE, BLOCK_M, ROW_BLOCK)
    else:
        rstd = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_K // 128, BLOCK_M, BLOCK_N, 16), dtype=tl.float32)
    ACT_BITS: tl.constexpr = x_ptr.dtype.element_ty.primitive_bitwidth
    kk = (128 * tl.arange(0, BLOCK_K // 128))[:, None, None] + tl.arange(0, 128)[None, None, :]  # [G, 1, 128]
    for k0 in range(k_begin, k_end, BLOCK_K):
        nxt_codes, nxt_scale, nxt_zero = _load_tile(q_ptr, s_ptr, z_ptr, w_rows, s_rows, col_ok, k0 + BLOCK_K, k_end,
                                                    stride_qn, stride_sn, stride_sg, SCHEME, BLOCK_N, BLOCK_K, EVEN_K,
                                                    EPILOGUE == 0)
        ok = (m_rows < M)[None, :, None] & ((k0 + kk) < K)
        x_cols = permuted_columns(perm_ptr, k0 + kk, K, PERMUTED)  # x's columns of the stored columns k0 + kk
        x = act_tile(x_ptr, r_ptr, nw_ptr, m_rows[None, :, None], x_cols, ok, rstd[None, :, None], K, stride_xm,
                     stride_rm, PROLOGUE, ZERO_CENTERED).to(tl.float32)  # [G, BLOCK_M, 128]
        acc = _tile_sum(acc, codes, scale, zero, x, code_mask, one_bits, SCHEME, ACT_BITS, NATIVE_FP8, PAIR_INT4)
        codes, scale, zero = nxt_codes, nxt_scale, nxt_zero
    out = tl.sum(tl.sum(acc, axis=3), axis=0)  # [BLOCK_M, BLOCK_N]
    if SCHEME == 1:  # int8: 256 x the row's scale
        out = out * (256.0 * tl.load(s_ptr + w_rows))[None, :]
    if SPLIT_K == 1:
        if HAS_BIAS:
            out += tl.load(bias_ptr + w_rows).to(tl.float32)[None, :]
        store_out(y_ptr, out, m_rows, pid_n, M, N, stride_ym, EPILOGUE, BLOCK_N)
    else:
        mask = (m_rows < M)[:, None] & col_ok[None, :]
        ws = ws_ptr + m_rows[:, None] * N + cols[None, :]  # split s's partials at ws + s * M * N
        tl.store(ws + pid_k * M * N, out, mask=mask)
        tl.debug_barrier()  # every thread's partial sums are stored before this program counts itself in
        arrived = tl.atomic_add(count_ptr + pid_n, 1, sem="acq_rel", scope="gpu")
        if arrived == SPLIT_K - 1:  # the last split of this row block: every partial is visible
            total = tl.load(ws, mask=mask, other=0.0, cache_modifier=".cg")
            for s in tl.static_range(1, SPLIT_K):  # split order: deterministic sums
                total += tl.load(ws + s * M * N, mask=mask, other=0.0, cache_modifier=".cg")
            if HAS_BIAS:
                total += tl.load(bias_ptr + w_rows).to(tl.float32)[None, :]
            store_out(y_ptr, total, m_rows, pid_n, M, N, stride_ym, EPILOGUE, BLOCK_N)
            tl.store(count_ptr + pid_n, 0)  # zero for the next launch (graph replays)


def takes(rows: torch.Tensor, qweight: torch.Tensor, scheme: str) -> bool:
    """Whether this kernel takes ``rows`` ``[M, K]`` of a ``[N, K]`` weight: ``1 <= M <=`` :data:`MAX_ROWS`, and the
    codes' rows viewable as 8-code units (int4 always, K being a multiple of 128; int8 / FP8 when K is a multiple
    of 8), the codes 8-byte aligned."""
    if not 1 <= rows.shape[0] <= MAX_ROWS or not qweight.is_contiguous() or qweight.data_ptr() % 8:
        return False
    return scheme == "int4" or qweight.shape[1] % 8 == 0


@functools.cache
def _has_fp8_cvt(device_index: int) -> bool:
    """An NVIDIA GPU of compute capability 8.9+ (``cvt.rn.f16x2.e4m3x2``; ROCm builds also report ``cuda`` devices,
    without PTX)."""
    return torch.version.hip is None and torch.cuda.get_device_capability(device_index) >= (8, 9)


def native_fp8(device: torch.device) -> bool:
    """Whether FP8 codes on ``device`` convert in hardware (:func:`_e4m3x4`): not turned off (``ANNA_WQ_FP8_CVT=0``,
    :func:`anna_xpu_kernels._env.wq_fp8_cvt_requested`), compiled rather than interpreted, on an NVIDIA device of
    compute capability 8.9 or more (the conversion's PTX needs sm_89; an XPU or a ROCm device runs the shift-and-mask
    decode of :func:`_code_f`). Each decode gives every code's exact value; with 16-bit activations the outputs were
    equal bit for bit at the Qwen3.5-9B shapes on an H100 (``tools/gpu_experiments/wq_fp8_cvt_check.py``), while with
    float32 activations the bit decode's ``2^-120`` scaling can make tiny products subnormal (a few low bits of
    difference)."""
    if not wq_fp8_cvt_requested() or INTERPRETING or device.type != "cuda":
        return False
    return _has_fp8_cvt(device.index if device.index is not None else torch.cuda.current_device())


def _max_split(n: int) -> int:
    return 1 if INTERPRETING or n > MAX_SPLIT_N else max(SPLITS)


def launch(x: torch.Tensor, qweight: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor | None, scheme: str,
           bias: torch.Tensor | None, n: int, k: int, prologue: Prologue, epilogue: int,
           config: WqConfig | None = None, perm: torch.Tensor | None = None) -> torch.Tensor:
    """Run the kernel on checked arguments (:func:`takes` holds): x ``[M, K]`` with unit stride along K; returns
    ``[M, N]`` (``[M, N/2]`` with a gated epilogue) in x's dtype.

    Args:
        config: run this configuration instead of the autotuned one (tests force split-K on and off with it).
        perm: None, or the weight's stored column order ``[K]`` int32 / int64, contiguous (the contract:
            :func:`anna_core.kernels.reference.wq_linear.wq_linear`).
    """
    m = x.shape[0]
    y = torch.empty((m, n // 2 if epilogue != NO_EPILOGUE else n), dtype=x.dtype, device=x.device)
    r, nw, nr = prologue.tensors_or(x)
    block_m = next_pow2(m)
    # 8-code units, little-endian: code j of unit u is column 8u + j
    codes = qweight.view(torch.int32 if scheme == "int4" else torch.int64)
    splits = config.split_k if config is not None else _max_split(n)
    ws = torch.empty((splits, m, n), dtype=torch.float32, device=x.device) if splits > 1 else y
    narrowest = config.block_n if config is not None else min(t[0] for t in TILES)  # one counter per row block
    counters = launch.counters.get(x.device, triton.cdiv(n, narrowest) if splits > 1 else 0)
    args = (x, codes, scale, zero if zero is not None else scale, bias if bias is not None else y, y, ws, counters,
            r, nw, nr, perm if perm is not None else x, m, n, k, x.stride(0), codes.stride(0), scale.stride(0) if scale.dim() == 2 else 1,
            scale.stride(1) if scale.dim() == 2 else 1, y.stride(0),
            r.stride(0), nr.stride(0), float(prologue.eps), *CODE_BITS[scheme])
    common = dict(SCHEME=SCHEME_IDS[scheme], HAS_BIAS=bias is not None, BLOCK_M=block_m, PROLOGUE=prologue.mode,
                  ZERO_CENTERED=bool(prologue.zero_centered), EPILOGUE=epilogue, PERMUTED=perm is not None,
                  ROW_BLOCK=row_block(k, block_m, 128) if prologue.mode in (1, 2) else 1,
                  NATIVE_FP8=scheme == "fp8" and native_fp8(x.device),
                  PAIR_INT4=scheme == "int4" and wq_int4_paired_requested(), **pdl.launch_options(x))
    if config is not None:
        grid = (triton.cdiv(n, config.block_n), config.split_k)
        _wq_decode_kernel.fn[grid](*args, **common, BLOCK_N=config.block_n, BLOCK_K=config.block_k,
                                   SPLIT_K=config.split_k, num_warps=config.num_warps)
    else:
        def grid(meta):
            return (triton.cdiv(n, meta["BLOCK_N"]), meta["SPLIT_K"])

        _wq_decode_kernel[grid](*args, **common)
    return y


launch.counters = CounterPool(min_words=triton.cdiv(MAX_SPLIT_N, 2))
