"""``wq_linear`` and ``add_rms_norm_wq_linear`` in Triton: linear layers whose weight is quantized
(:mod:`anna_core.weights.gpu_quant`: int4 groups of 128, int8 per channel, FP8 e4m3 with 128x128 block scales).

Decode, 1..8 rows whose codes read as 8-code units (int4; int8 / FP8 with K a multiple of 8): the split-K kernel
of :mod:`anna_xpu_kernels.wq_gemv_decode`. The other decode shapes (``M <= 64`` rows) run this module's kernel: one
launch that streams the quantized weight once and dequantizes it in registers.
Each program owns ``BLOCK_N`` output columns for all rows and walks K in tiles of ``BLOCK_K`` values (a
multiple of 128: whole int4 groups / FP8 blocks), the first tile loaded before the programmatic-dependent-launch
wait and each next one before the current one is used: it loads the codes (int4: ``BLOCK_K / 2`` bytes per row,
two codes each; int8 / FP8: ``BLOCK_K`` bytes), the tile's scales (and int4 zeros), dequantizes to float32
(``q * scale + zero``; int8's per-channel scale is applied once to the row's sum) and multiplies by the
activation tile, on the CUDA cores for up to 8 rows (a ``[BLOCK_M, BLOCK_N, tile]`` float32 product summed
after the loop) or on the tensor cores for 9..64 rows (the dequantized tile rounded to x's dtype, rows padded
to 16). An int4 tile's two codes per byte pair with the even and the odd activation columns (the activation
tile is loaded contiguously and split in registers), so no unpacked weight tile is ever interleaved. The decode
fusions of the dense GEMV (:mod:`anna_xpu_kernels.gemv`) are kept: the ``ADD_RMS_NORM`` / ``RMS_NORM`` prologues
(:mod:`anna_xpu_kernels.gemv_prologue`: residual add and RMSNorm computed per activation tile, the first program
writing the new residual; rows up to :data:`NORM_PROLOGUE_MAX_K`) and the gated epilogues
(:mod:`anna_xpu_kernels.gemv_epilogue`: a merged gate/up weight's rows interleaved per program, ``act(gate) * up``
written directly). Tile width, ``BLOCK_N`` and warps are autotuned per (rows bucket, N, K, scheme, modes), timed
with a cold L2 (weights from memory, as in a decode step). This kernel has no split-K (the decode kernel has).

Act-order weights (a ``perm``: the input columns stored in a permuted order, :mod:`anna_core.kernels.reference.
wq_linear`): both kernels read the activation tile's stored column ``k`` from x's column ``perm[k]`` (and, with
a norm prologue, the residual's and the norm weight's), ``PERMUTED`` being a constexpr; the norm's ``1/rms`` is
over the whole row in x's own order (a sum does not depend on the order), so the prologue stays fused and no
gather runs before the GEMV. ``perm`` is read per tile (``BLOCK_K`` int32 or int64 indices from L2, the same for
every program).

Prefill (``M > 64``): the weight is dequantized to x's dtype with torch ops (:func:`anna_core.weights.gpu_quant.
dequantize`) and multiplied by ``F.linear`` (cuBLAS), a temporary dense copy per call; the prologue and
epilogue run as their Triton ops around it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from anna_core.kernels.reference.wq_linear import check_add_rms_norm_wq_linear, check_wq_linear
from anna_core.weights.gpu_quant import dequantize

from anna_xpu_kernels import norms, pdl, wq_gemv_decode
from anna_xpu_kernels._checks import as_rows, require_same_device
from anna_xpu_kernels._triton import INTERPRETING, autotune, next_pow2, tl, triton
from anna_xpu_kernels.gemv import Prologue
from anna_xpu_kernels.gemv_epilogue import GATED_EPILOGUES, NO_EPILOGUE, store_out
from anna_xpu_kernels.gemv_prologue import ADD_RMS_NORM, RMS_NORM, act_tile, row_block, row_rstd
from anna_xpu_kernels.gemv_tuning import autotune_bench
from anna_xpu_kernels.wq_columns import permuted_columns

MAX_ROWS = 64
"""Most rows the kernel takes; more go to dequantize + ``F.linear``."""

CUDA_CORE_ROWS = 8
"""Up to this many rows accumulate on the CUDA cores; more on the tensor cores."""

NORM_PROLOGUE_MAX_K = 2048
"""Longest row the norm prologue is fused for: every program recomputes its rows' mean square (a pass over the
row from L2), which the dense GEMV's measurements found to stop paying past 2048 values (see
:mod:`anna_xpu_kernels.fused_linear`); wider rows (Qwen3.5-9B's 4096) run the Triton ``add_rms_norm`` first."""

SCHEME_IDS = {"int4": 0, "int8": 1, "fp8": 2}
"""The kernel's ``SCHEME`` constexpr per scheme name."""


def _configs() -> list:
    """CUDA-core tiles (few columns, long K tiles: each program streams a few rows) and tensor-core tiles."""
    cuda_cores = [triton.Config({"BLOCK_N": bn, "BLOCK_K": bk}, num_warps=4)
                  for bn in (4, 8, 16) for bk in (256, 512, 1024)]
    tensor_cores = [triton.Config({"BLOCK_N": bn, "BLOCK_K": bk}, num_warps=w)
                    for bn in (32, 64) for bk in (128, 256) for w in (4, 8)]
    return cuda_cores + tensor_cores


FIXED = triton.Config({"BLOCK_N": 16, "BLOCK_K": 256}, num_warps=4)
"""The configuration run under the interpreter (two int4 groups per tile; tests cover K of one tile and more)."""


def prune(configs, named_args, **kwargs):
    """Keep configurations that can win: tiles no wider than K's power of two, tensor-core tiles of at least 16
    columns, at most 64 float32 accumulator values per thread on the CUDA cores."""
    k, n, block_m, dot = named_args["K"], named_args["N"], kwargs["BLOCK_M"], kwargs["USE_DOT"]
    kept = []
    for c in configs:
        bn, bk, w = c.kwargs["BLOCK_N"], c.kwargs["BLOCK_K"], c.num_warps
        tile = bk // 2 if kwargs["SCHEME"] == 0 else bk
        if bk > max(128, next_pow2(k)) or bn > max(16, next_pow2(n)):
            continue
        if dot != (bn >= 32):  # each path its own tiles
            continue
        if not dot and block_m * bn * tile > 64 * 32 * w:
            continue
        kept.append(c)
    return kept or [FIXED]


@triton.jit
def _e4m3(b, DECODE: tl.constexpr):
    """float32 values of float8_e4m3fn bytes ``b`` (uint8): the hardware conversion, or with ``DECODE`` (Triton's
    interpreter, which has no FP8 type) the bits decoded: ``(-1)^s 2^(e-7) (1 + m/8)``, subnormals ``(-1)^s
    2^-6 m/8`` (NaN codes never occur: quantization clamps to +-448)."""
    if DECODE:
        e = ((b >> 3) & 15).to(tl.float32)
        m = (b & 7).to(tl.float32)
        mag = tl.where(e > 0, (8.0 + m) * tl.exp2(e - 10.0), m * 0.001953125)
        return tl.where((b & 128) != 0, -mag, mag)
    else:
        return b.to(tl.float8e4nv, bitcast=True).to(tl.float32)


@triton.jit
def _load_tile(q_ptr, s_ptr, z_ptr, w_rows, k0, K, stride_qn, stride_sn, stride_sg,
               SCHEME: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """The raw tile at column ``k0`` (nothing loaded past K): ``(codes, scale, zero)`` with codes ``[BLOCK_N,
    BLOCK_K/2]`` uint8 (int4) or ``[BLOCK_N, BLOCK_K]`` (int8 / FP8 bytes), scale and zero ``[BLOCK_N, BLOCK_K/128]``
    float32 (zeros where the scheme has none: int8's scale is applied to the row's sum)."""
    GROUPS: tl.constexpr = BLOCK_K // 128
    g = tl.arange(0, GROUPS)
    if SCHEME == 0:
        c = tl.arange(0, BLOCK_K // 2)
        codes = tl.load(q_ptr + w_rows[:, None] * stride_qn + (k0 // 2 + c)[None, :], mask=((k0 + 2 * c) < K)[None, :],
                        other=0, eviction_policy="evict_first")
        g_ok = ((k0 // 128 + g) < (K // 128))[None, :]
        s_off = w_rows[:, None] * stride_sn + (k0 // 128 + g)[None, :] * stride_sg
        scale = tl.load(s_ptr + s_off, mask=g_ok, other=0.0).to(tl.float32)
        zero = tl.load(z_ptr + s_off, mask=g_ok, other=0.0).to(tl.float32)
    else:
        c = tl.arange(0, BLOCK_K)
        codes = tl.load(q_ptr + w_rows[:, None] * stride_qn + (k0 + c)[None, :], mask=((k0 + c) < K)[None, :],
                        other=0, eviction_policy="evict_first")
        zero = tl.zeros((BLOCK_N, GROUPS), dtype=tl.float32)
        if SCHEME == 2:
            g_ok = ((k0 // 128 + g) < tl.cdiv(K, 128))[None, :]
            scale = tl.load(s_ptr + (w_rows // 128)[:, None] * stride_sn + (k0 // 128 + g)[None, :] * stride_sg, mask=g_ok,
                            other=0.0)
        else:
            scale = zero
    return codes, scale, zero


@triton.jit
def _dequant(codes, scale, zero, SCHEME: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
             DECODE_FP8: tl.constexpr):
    """The float32 weight tile(s) of :func:`_load_tile`'s raw tile: int4 ``(w_even, w_odd)`` ``[BLOCK_N, BLOCK_K/2]``
    (columns ``k0 + 2c`` and ``k0 + 2c + 1``); int8 / FP8 ``(w, w)`` ``[BLOCK_N, BLOCK_K]`` (int8 unscaled)."""
    GROUPS: tl.constexpr = BLOCK_K // 128
    if SCHEME == 0:
        s = scale[:, :, None]
        z = zero[:, :, None]
        lo = tl.reshape((codes & 15).to(tl.float32), (BLOCK_N, GROUPS, 64))
        hi = tl.reshape((codes >> 4).to(tl.float32), (BLOCK_N, GROUPS, 64))
        return (tl.reshape(lo * s + z, (BLOCK_N, BLOCK_K // 2)), tl.reshape(hi * s + z, (BLOCK_N, BLOCK_K // 2)))
    elif SCHEME == 2:
        q = tl.reshape(_e4m3(codes, DECODE_FP8), (BLOCK_N, GROUPS, 128)) * scale[:, :, None]
        q = tl.reshape(q, (BLOCK_N, BLOCK_K))
        return q, q
    else:
        q = codes.to(tl.float32)
        return q, q


@triton.jit
def _x_tile(x_ptr, r_ptr, nw_ptr, perm_ptr, m_rows, k0, M, K, rstd, stride_xm, stride_rm,
            PROLOGUE: tl.constexpr, ZERO_CENTERED: tl.constexpr, PERMUTED: tl.constexpr, BLOCK_K: tl.constexpr):
    """The activation columns ``k0 .. k0 + BLOCK_K`` of every row (in the weight's stored order: x's columns
    ``perm[k]`` with ``PERMUTED``), computed by the prologue: ``[BLOCK_M, BLOCK_K]`` in x's dtype (zero past K and
    M), loaded contiguously unless permuted."""
    kk = k0 + tl.arange(0, BLOCK_K)
    ok = (m_rows < M)[:, None] & (kk < K)[None, :]
    cols = permuted_columns(perm_ptr, kk, K, PERMUTED)
    return act_tile(x_ptr, r_ptr, nw_ptr, m_rows[:, None], cols[None, :], ok, rstd[:, None], K, stride_xm, stride_rm,
                    PROLOGUE, ZERO_CENTERED)


@triton.jit
def _mac(acc, w, x, x_ptr, USE_DOT: tl.constexpr, UPCAST_DOT: tl.constexpr):
    """``acc`` plus the product of the float32 weight tile ``w`` ``[BLOCK_N, T]`` and the activation tile ``x``
    ``[BLOCK_M, T]`` (x's dtype)."""
    if USE_DOT:  # acc: y^T [BLOCK_N, BLOCK_M]
        if UPCAST_DOT:
            acc = tl.dot(w, tl.trans(x.to(tl.float32)), acc, input_precision="ieee")
        else:
            acc = tl.dot(w.to(x_ptr.dtype.element_ty), tl.trans(x), acc)
    else:  # acc: [BLOCK_M, BLOCK_N, T]
        acc += x.to(tl.float32)[:, None, :] * w[None, :, :]
    return acc


@autotune(_configs(), fixed=FIXED, key=["BLOCK_M", "N", "K", "SCHEME", "PROLOGUE", "EPILOGUE", "PERMUTED"],
          prune_configs_by={"early_config_prune": prune}, do_bench=autotune_bench)  # timed with a cold L2
@triton.heuristics({"ROW_BLOCK": lambda a: row_block(a["K"], a["BLOCK_M"], 128) if a["PROLOGUE"] in (1, 2) else 1})
@triton.jit
def _wq_gemv_kernel(
    x_ptr, q_ptr, s_ptr, z_ptr, bias_ptr, y_ptr, r_ptr, nw_ptr, nr_ptr, perm_ptr,
    M, N, K, stride_xm, stride_qn, stride_sn, stride_sg, stride_ym, stride_rm, stride_nrm, eps,
    SCHEME: tl.constexpr, HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr, USE_DOT: tl.constexpr,
    UPCAST_DOT: tl.constexpr, PROLOGUE: tl.constexpr, ZERO_CENTERED: tl.constexpr, EPILOGUE: tl.constexpr,
    PERMUTED: tl.constexpr, USE_PDL: tl.constexpr, DECODE_FP8: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr, ROW_BLOCK: tl.constexpr,
):
    pdl.launch_dependents(USE_PDL)
    pid = tl.program_id(0)
    if EPILOGUE == 1 or EPILOGUE == 2:  # tile row 2j: gate row c_j, 2j + 1: up row I + c_j
        half = N // 2
        out_cols = pid * (BLOCK_N // 2) + tl.arange(0, BLOCK_N) // 2
        w_rows = (tl.minimum(out_cols, half - 1) + (tl.arange(0, BLOCK_N) % 2) * half).to(tl.int64)
    else:
        w_rows = tl.minimum(pid * BLOCK_N + tl.arange(0, BLOCK_N), N - 1).to(tl.int64)
    # the first tile before waiting for the previous kernel (weights are never written in a step): with
    # programmatic dependent launch it streams in while that kernel drains
    codes, scale, zero = _load_tile(q_ptr, s_ptr, z_ptr, w_rows, 0, K, stride_qn, stride_sn, stride_sg, SCHEME, BLOCK_N,
                                    BLOCK_K)
    pdl.wait(USE_PDL)
    m_rows = tl.arange(0, BLOCK_M)
    if PROLOGUE == 1 or PROLOGUE == 2:  # the norm's 1/rms over the whole row; program 0 writes the new residual
        rstd = row_rstd(x_ptr, r_ptr, nr_ptr, m_rows, M, K, stride_xm, stride_rm, stride_nrm, eps, pid == 0,
                        PROLOGUE, BLOCK_M, ROW_BLOCK)
    else:
        rstd = tl.zeros((BLOCK_M,), dtype=tl.float32)
    if USE_DOT:
        acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    elif SCHEME == 0:
        acc = tl.zeros((BLOCK_M, BLOCK_N, BLOCK_K // 2), dtype=tl.float32)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N, BLOCK_K), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        # the next tile is loaded before this one is used (two tiles in flight per program)
        nxt_codes, nxt_scale, nxt_zero = _load_tile(q_ptr, s_ptr, z_ptr, w_rows, k0 + BLOCK_K, K, stride_qn, stride_sn, stride_sg,
                                                    SCHEME, BLOCK_N, BLOCK_K)
        w_a, w_b = _dequant(codes, scale, zero, SCHEME, BLOCK_N, BLOCK_K, DECODE_FP8)
        x = _x_tile(x_ptr, r_ptr, nw_ptr, perm_ptr, m_rows, k0, M, K, rstd, stride_xm, stride_rm, PROLOGUE,
                    ZERO_CENTERED, PERMUTED, BLOCK_K)
        if SCHEME == 0:  # the even and the odd columns pair with the low and the high codes
            x_even, x_odd = tl.split(tl.reshape(x, (BLOCK_M, BLOCK_K // 2, 2)))
            acc = _mac(acc, w_a, x_even, x_ptr, USE_DOT, UPCAST_DOT)
            acc = _mac(acc, w_b, x_odd, x_ptr, USE_DOT, UPCAST_DOT)
        else:
            acc = _mac(acc, w_a, x, x_ptr, USE_DOT, UPCAST_DOT)
        codes, scale, zero = nxt_codes, nxt_scale, nxt_zero
    if USE_DOT:
        out = tl.trans(acc)  # [BLOCK_M, BLOCK_N]
    else:
        out = tl.sum(acc, axis=2)
    if SCHEME == 1:  # int8: the row's scale once
        out = out * tl.load(s_ptr + w_rows).to(tl.float32)[None, :]
    if HAS_BIAS:
        out += tl.load(bias_ptr + w_rows).to(tl.float32)[None, :]
    store_out(y_ptr, out, m_rows, pid, M, N, stride_ym, EPILOGUE, BLOCK_N)


def _launch(x: torch.Tensor, qweight: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor | None, scheme: str,
            bias: torch.Tensor | None, n: int, k: int, prologue: Prologue, epilogue: int,
            perm: torch.Tensor | None = None) -> torch.Tensor:
    """Run a kernel on checked arguments: x ``[M <= 64, K]`` with unit stride along K, ``perm`` ``[K]`` (contiguous)
    or None; returns ``[M, N]`` (``[M, N/2]`` with a gated epilogue) in x's dtype. Up to 8 rows run the split-K
    decode kernel (:mod:`anna_xpu_kernels.wq_gemv_decode`) where it takes the weight, the rest this module's
    kernel."""
    if zero is not None and zero.stride() != scale.stride():  # the kernels index both with the scale's strides
        zero = torch.empty_strided(scale.shape, scale.stride(), dtype=zero.dtype, device=zero.device).copy_(zero)
    if perm is not None:
        perm = perm.contiguous()
    if wq_gemv_decode.takes(x, qweight, scheme):
        return wq_gemv_decode.launch(x, qweight, scale, zero, scheme, bias, n, k, prologue, epilogue, perm=perm)
    m = x.shape[0]
    y = torch.empty((m, n // 2 if epilogue != NO_EPILOGUE else n), dtype=x.dtype, device=x.device)
    r, nw, nr = prologue.tensors_or(x)
    dot = m > CUDA_CORE_ROWS
    block_m = max(16, next_pow2(m)) if dot else next_pow2(m)

    def grid(meta):
        return (triton.cdiv(n, meta["BLOCK_N"]),)

    if scheme == "fp8":  # its bytes (the kernel converts them)
        qweight = qweight.view(torch.uint8)
    _wq_gemv_kernel[grid](
        x, qweight, scale, zero if zero is not None else scale, bias if bias is not None else y, y, r, nw, nr,
        perm if perm is not None else x, m, n, k, x.stride(0), qweight.stride(0), scale.stride(0) if scale.dim() == 2 else 1,
        scale.stride(1) if scale.dim() == 2 else 1, y.stride(0),
        r.stride(0), nr.stride(0), float(prologue.eps),
        SCHEME=SCHEME_IDS[scheme], HAS_BIAS=bias is not None, BLOCK_M=block_m, USE_DOT=dot,
        UPCAST_DOT=INTERPRETING or x.dtype == torch.float32, PROLOGUE=prologue.mode,
        ZERO_CENTERED=bool(prologue.zero_centered), EPILOGUE=epilogue, PERMUTED=perm is not None,
        DECODE_FP8=INTERPRETING, **pdl.launch_options(x))
    return y


def _takes(x: torch.Tensor, qweight: torch.Tensor) -> bool:
    return 1 <= x.shape[0] <= MAX_ROWS and qweight.is_contiguous()


def wq_linear(x: torch.Tensor, qweight: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor | None, scheme: str,
              bias: torch.Tensor | None, perm: torch.Tensor | None = None) -> torch.Tensor:
    """The ``wq_linear`` op (contract: :func:`anna_core.kernels.reference.wq_linear.wq_linear`): the Triton GEMV
    for 1..64 rows (a ``perm`` read inside it), dequantize + ``F.linear`` beyond (``x[..., perm]`` gathered first).

    Raises:
        ValueError: shapes or dtypes disagree, or tensors on different devices.
    """
    check_wq_linear(x, qweight, scale, zero, scheme, bias, perm)
    require_same_device("wq_linear", x=x, qweight=qweight, scale=scale, zero=zero, bias=bias)
    n, k = (qweight.shape[0], 2 * qweight.shape[1]) if scheme == "int4" else tuple(qweight.shape)
    rows = as_rows(x)
    if not _takes(rows, qweight):
        return F.linear(x if perm is None else x.index_select(-1, perm), dequantize(qweight, scale, zero, scheme,
                                                                                       x.dtype), bias)
    return _launch(rows, qweight, scale, zero, scheme, bias, n, k, Prologue(), NO_EPILOGUE,
                   perm).view(*x.shape[:-1], n)


def add_rms_norm_wq_linear(x: torch.Tensor, residual: torch.Tensor | None, norm_weight: torch.Tensor, eps: float,
                           zero_centered: bool, qweight: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor | None,
                           scheme: str, activation: str | None = None,
                           perm: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``add_rms_norm_wq_linear`` op: one launch (norm prologue, gated epilogue; a ``perm`` read inside it) for
    1..64 rows; beyond, the Triton ``add_rms_norm``, then dequantize + ``F.linear`` (``perm``: the normalised
    columns gathered first) and the gated product.

    Raises:
        ValueError: see :func:`anna_core.kernels.reference.wq_linear.check_add_rms_norm_wq_linear`.
    """
    check_add_rms_norm_wq_linear(x, residual, norm_weight, eps, zero_centered, qweight, scale, zero, scheme, activation,
                                 perm)
    require_same_device("add_rms_norm_wq_linear", x=x, residual=residual, qweight=qweight, scale=scale)
    n, k = (qweight.shape[0], 2 * qweight.shape[1]) if scheme == "int4" else tuple(qweight.shape)
    rows = as_rows(x)
    if not _takes(rows, qweight):
        from anna_xpu_kernels.fused_linear import act_and_mul

        h, new_residual = norms.add_rms_norm(x, residual, norm_weight, eps, zero_centered)
        y = F.linear(h if perm is None else h.index_select(-1, perm), dequantize(qweight, scale, zero, scheme, x.dtype))
        return (y if activation is None else act_and_mul(y, activation)), new_residual
    if k > NORM_PROLOGUE_MAX_K:  # the norm as its own launch, then the GEMV (the gated epilogue stays fused)
        h, new_residual = norms.add_rms_norm(x, residual, norm_weight, eps, zero_centered)
        y = _launch(as_rows(h), qweight, scale, zero, scheme, None, n, k, Prologue(),
                    NO_EPILOGUE if activation is None else GATED_EPILOGUES[activation], perm)
        return y.view(*x.shape[:-1], y.shape[-1]), new_residual
    res = as_rows(residual) if residual is not None else None
    new_residual = torch.empty_like(rows) if res is not None else None
    prologue = Prologue(ADD_RMS_NORM if res is not None else RMS_NORM, res, norm_weight, new_residual, float(eps),
                        zero_centered)
    epilogue = NO_EPILOGUE if activation is None else GATED_EPILOGUES[activation]
    y = _launch(rows, qweight, scale, zero, scheme, None, n, k, prologue, epilogue, perm)
    out_n = n if activation is None else n // 2
    return y.view(*x.shape[:-1], out_n), (new_residual.view(x.shape) if res is not None else x)
