"""The ``moe_experts_wq`` op in Triton: routed experts with int4 / int8 / FP8 weights
(:mod:`anna_core.weights.gpu_quant` layouts stacked over the experts, ``--expert-quant``).

Few pairs (``T * K <= E``, a decode step): two launches per call, nothing read on the host (graph-capturable),
the grids fixed by ``T``, ``K``, ``H`` and ``I``, as :mod:`anna_xpu_kernels.moe_decode` runs dense experts:

1. ``_wq_gate_up_kernel`` over ``(T * K, cdiv(I, BLOCK_N))``: a program loads its pair's expert id and streams that
   expert's ``BLOCK_N`` gate rows and ``BLOCK_N`` up rows of codes along H in tiles of 128 columns (one int4
   group / one FP8 scale block per tile), dequantizes them in registers to float32 (int4: ``q * scale + zero``,
   the low nibble of each byte pairing with the even activation column and the high one with the odd column;
   FP8: ``q * scale``; int8: the codes, the row's scale applied once to its sum), multiplies by the token's row
   of x, and writes ``act_and_mul`` of the two projections (each rounded to x's dtype) to ``h [T * K, I]``.
2. ``_wq_down_kernel`` over ``(T * K, cdiv(H, BLOCK_N))``: likewise along I for ``down[e]``, writing the pair's
   term ``round(round(h @ w_down^T) * weight)`` in float32 to ``[T * K, H]``; the ``K`` terms of a token are then
   added in float32 in choice order (one ``sum`` launch) and rounded once, as the op's contract allows.

Each pair streams its expert's codes, so a few tokens read ``K`` experts' worth of int4 / int8 / FP8 bytes each
(a quarter / half of bf16's). More pairs (prefill): every expert of the layer is dequantized to x's dtype into a
scratch (in chunks of :data:`DEQUANT_CHUNK` experts, torch ops), and the dense grouped GEMMs of
:mod:`anna_xpu_kernels.moe` run on it. The trade-off: simple and graph-capturable (no host read of which experts
were chosen), at the cost of writing the layer's dense experts once per call (``E * 3 * I * H`` values: 35B-A3B,
1.6 GB per layer in bf16, a fraction of a millisecond per layer at HBM speed, a transient buffer of that size)
and of rounding the dequantized weights to x's dtype before the product (a relative ``2**-8`` per weight in
bf16); a grouped GEMM that dequantizes its tiles would avoid both.
"""

from __future__ import annotations

import torch
from anna_core.kernels.checks import require
from anna_core.kernels.reference.moe_wq import check_moe_experts_wq
from anna_core.weights.gpu_quant import FP8_BLOCK, dequantize

from anna_xpu_kernels import moe, pdl
from anna_xpu_kernels._checks import require_float, require_same_device
from anna_xpu_kernels._triton import INTERPRETING, autotune, tl, triton
from anna_xpu_kernels.gemv_prologue import act_mul
from anna_xpu_kernels.gemv_tuning import autotune_bench

_OP = "moe_experts_wq"
SCHEME_IDS = {"int4": 0, "int8": 1, "fp8": 2}
"""The kernels' ``SCHEME`` constexpr per scheme name."""
DEQUANT_CHUNK = 16
"""Experts dequantized per torch step on the prefill path (bounds its float32 temporaries)."""
PATHS = ("auto", "decode", "grouped")
"""Values of :func:`moe_experts_wq`'s ``path``."""

CONFIGS = [triton.Config({"BLOCK_N": n}, num_warps=w) for n, w in ((4, 2), (8, 4), (16, 4), (32, 8))]
FIXED = triton.Config({"BLOCK_N": 16}, num_warps=4)
"""The configuration run under the interpreter."""


def _tuned(fn):
    return autotune(CONFIGS, fixed=FIXED, key=["num_tokens", "N", "K", "TOP_K", "SCHEME"], do_bench=autotune_bench)(fn)


@triton.jit
def _e4m3(b, DECODE: tl.constexpr):
    """float32 values of float8_e4m3fn bytes ``b`` (uint8): the hardware conversion, or with ``DECODE`` (the
    interpreter has no FP8 type) the bits decoded, ``(-1)^s 2^(e-7) (1 + m/8)``, subnormals ``(-1)^s 2^-6 m/8``."""
    if DECODE:
        e = ((b >> 3) & 15).to(tl.float32)
        m = (b & 7).to(tl.float32)
        mag = tl.where(e > 0, (8.0 + m) * tl.exp2(e - 10.0), m * 0.001953125)
        return tl.where((b & 128) != 0, -mag, mag)
    else:
        return b.to(tl.float8e4nv, bitcast=True).to(tl.float32)


@triton.jit
def _mac(acc, q_ptr, s_ptr, z_ptr, rows, x_row, k0, K, stride_qn, stride_sn,
         SCHEME: tl.constexpr, DECODE_FP8: tl.constexpr, BLOCK_N: tl.constexpr):
    """``acc [BLOCK_N, 128]`` plus the dequantized tile at column ``k0`` of the rows ``rows`` times the activation
    row ``x_row`` (float32; int8 unscaled). ``q_ptr`` / ``s_ptr`` / ``z_ptr``: the expert's codes, scales, zeros."""
    if SCHEME == 0:  # int4: K is a multiple of 128, one group per tile
        c = tl.arange(0, 64)
        codes = tl.load(q_ptr + rows[:, None] * stride_qn + (k0 // 2 + c)[None, :], eviction_policy="evict_first")
        scale = tl.load(s_ptr + rows * stride_sn + k0 // 128).to(tl.float32)[:, None]
        zero = tl.load(z_ptr + rows * stride_sn + k0 // 128).to(tl.float32)[:, None]
        x_even = tl.load(x_row + k0 + 2 * c).to(tl.float32)[None, :]
        x_odd = tl.load(x_row + k0 + 2 * c + 1).to(tl.float32)[None, :]
        w_even = (codes & 15).to(tl.float32) * scale + zero
        w_odd = (codes >> 4).to(tl.float32) * scale + zero
        acc += tl.join(w_even * x_even, w_odd * x_odd).reshape(BLOCK_N, 128)
    else:
        c = tl.arange(0, 128)
        ok = (k0 + c) < K
        codes = tl.load(q_ptr + rows[:, None] * stride_qn + (k0 + c)[None, :], mask=ok[None, :], other=0,
                        eviction_policy="evict_first")
        xv = tl.load(x_row + k0 + c, mask=ok, other=0.0).to(tl.float32)[None, :]
        if SCHEME == 2:
            scale = tl.load(s_ptr + (rows // 128) * stride_sn + k0 // 128)[:, None]
            acc += _e4m3(codes, DECODE_FP8) * scale * xv
        else:
            acc += codes.to(tl.float32) * xv
    return acc


@triton.jit
def _row_sum(acc, s_ptr, rows, SCHEME: tl.constexpr):
    """The rows' float32 products: ``acc`` summed over its columns, times int8's per-row scale."""
    total = tl.sum(acc, axis=1)
    if SCHEME == 1:
        total = total * tl.load(s_ptr + rows)
    return total


@_tuned
@triton.jit(do_not_specialize=["num_tokens"])
def _wq_gate_up_kernel(x_ptr, q_ptr, s_ptr, z_ptr, h_ptr, ids_ptr, num_tokens, N, K, stride_xm, stride_qe, stride_qn,
                       stride_se, stride_sn, stride_hm, TOP_K: tl.constexpr, GELU: tl.constexpr,
                       SCHEME: tl.constexpr, DECODE_FP8: tl.constexpr, BLOCK_N: tl.constexpr, USE_PDL: tl.constexpr):
    # N = I, K = H; codes [E, 2N, K or K/2] (gate rows, then up rows); scale / zero [E, 2N, K/128] (int4),
    # [E, 2N] (int8), [E, cdiv(2N, 128), cdiv(K, 128)] (fp8); ids [T * TOP_K]; h [T * TOP_K, N]
    pair = tl.program_id(0)
    pid_n = tl.program_id(1)
    if USE_PDL:
        pdl.enter(USE_PDL)
    expert = tl.load(ids_ptr + pair).to(tl.int64)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rows = tl.minimum(cols, N - 1).to(tl.int64)  # clamped: unmasked weight loads, masked store
    q_e = q_ptr + expert * stride_qe
    s_e = s_ptr + expert * stride_se
    z_e = z_ptr + expert * stride_se
    x_row = x_ptr + (pair // TOP_K).to(tl.int64) * stride_xm
    acc_g = tl.zeros((BLOCK_N, 128), dtype=tl.float32)
    acc_u = tl.zeros((BLOCK_N, 128), dtype=tl.float32)
    for k0 in range(0, K, 128):
        acc_g = _mac(acc_g, q_e, s_e, z_e, rows, x_row, k0, K, stride_qn, stride_sn, SCHEME, DECODE_FP8, BLOCK_N)
        acc_u = _mac(acc_u, q_e, s_e, z_e, rows + N, x_row, k0, K, stride_qn, stride_sn, SCHEME, DECODE_FP8, BLOCK_N)
    gate = _row_sum(acc_g, s_e, rows, SCHEME).to(h_ptr.dtype.element_ty)  # each projection's rounding
    up = _row_sum(acc_u, s_e, rows + N, SCHEME).to(h_ptr.dtype.element_ty)
    tl.store(h_ptr + pair.to(tl.int64) * stride_hm + cols, act_mul(gate, up, h_ptr, GELU), mask=cols < N)


@_tuned
@triton.jit(do_not_specialize=["num_tokens"])
def _wq_down_kernel(h_ptr, q_ptr, s_ptr, z_ptr, part_ptr, rw_ptr, ids_ptr, num_tokens, N, K, stride_hm, stride_qe,
                    stride_qn, stride_se, stride_sn, TOP_K: tl.constexpr, SCHEME: tl.constexpr,
                    DECODE_FP8: tl.constexpr, BLOCK_N: tl.constexpr, USE_PDL: tl.constexpr):
    # N = H, K = I; codes [E, N, K or K/2]; h [T * TOP_K, K]; rw, ids [T * TOP_K]; part [T * TOP_K, N] float32
    pair = tl.program_id(0)
    pid_n = tl.program_id(1)
    if USE_PDL:
        pdl.enter(USE_PDL)
    expert = tl.load(ids_ptr + pair).to(tl.int64)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rows = tl.minimum(cols, N - 1).to(tl.int64)
    s_e = s_ptr + expert * stride_se
    h_row = h_ptr + pair.to(tl.int64) * stride_hm
    acc = tl.zeros((BLOCK_N, 128), dtype=tl.float32)
    for k0 in range(0, K, 128):
        acc = _mac(acc, q_ptr + expert * stride_qe, s_e, z_ptr + expert * stride_se, rows, h_row, k0, K, stride_qn,
                   stride_sn, SCHEME, DECODE_FP8, BLOCK_N)
    y = _row_sum(acc, s_e, rows, SCHEME).to(h_ptr.dtype.element_ty).to(tl.float32)  # the projection's rounding
    term = (y * tl.load(rw_ptr + pair).to(tl.float32)).to(h_ptr.dtype.element_ty)  # the weighting's
    tl.store(part_ptr + pair.to(tl.int64) * N + cols, term.to(tl.float32), mask=cols < N)


def _weight_args(q: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor | None) -> tuple:
    """``(q, scale, zero, stride_qe, stride_qn, stride_se, stride_sn)`` of a stacked weight (FP8 codes as their
    bytes, decoded in the kernel; zero: scale when None, never read)."""
    stride_sn = scale.stride(1) if scale.dim() == 3 else 1
    if q.dtype == torch.float8_e4m3fn:
        q = q.view(torch.uint8)
    return q, scale, scale if zero is None else zero, q.stride(0), q.stride(1), scale.stride(0), stride_sn


def decode(x: torch.Tensor, gate_up: tuple, down: tuple, weights: torch.Tensor, expert_ids: torch.Tensor,
           activation: str, scheme: str) -> torch.Tensor:
    """The per-pair GEMV launches on checked, contiguous arguments; gate_up / down: ``(q, scale, zero)`` stacked.

    Returns:
        ``[T, H]`` in x's dtype.
    """
    t, hidden = x.shape
    top_k = expert_ids.shape[1]
    pairs = t * top_k
    inter = gate_up[0].shape[1] // 2
    flat_ids = expert_ids.reshape(-1).contiguous()
    fixed = {"SCHEME": SCHEME_IDS[scheme], "DECODE_FP8": INTERPRETING, **pdl.launch_options(x)}
    h = torch.empty((pairs, inter), dtype=x.dtype, device=x.device)
    q, s, z, sqe, sqn, sse, ssn = _weight_args(*gate_up)
    _wq_gate_up_kernel[lambda meta: (pairs, triton.cdiv(inter, meta["BLOCK_N"]))](
        x, q, s, z, h, flat_ids, t, inter, hidden, x.stride(0), sqe, sqn, sse, ssn, h.stride(0), TOP_K=top_k,
        GELU=activation == "gelu_tanh", **fixed)
    parts = torch.empty((pairs, hidden), dtype=torch.float32, device=x.device)
    q, s, z, sqe, sqn, sse, ssn = _weight_args(*down)
    _wq_down_kernel[lambda meta: (pairs, triton.cdiv(hidden, meta["BLOCK_N"]))](
        h, q, s, z, parts, weights.reshape(-1).contiguous(), flat_ids, t, hidden, inter, h.stride(0), sqe, sqn, sse,
        ssn, TOP_K=top_k, **fixed)
    return parts.view(t, top_k, hidden).sum(dim=1).to(x.dtype)  # choice order, float32, one rounding


def dequantize_stacked(q: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor | None, scheme: str,
                       dtype: torch.dtype) -> torch.Tensor:
    """The dense ``[E, N, K]`` weights of a stacked quantized weight, in ``dtype`` (float32 dequantization, then
    one rounding), :data:`DEQUANT_CHUNK` experts per step (their rows taken as one matrix; FP8 with ``N`` not a
    multiple of 128, whose scale blocks straddle experts, one expert per step)."""
    num_experts, n = q.shape[0], q.shape[1]
    k = 2 * q.shape[2] if scheme == "int4" else q.shape[2]
    out = torch.empty((num_experts, n, k), dtype=dtype, device=q.device)
    chunk = 1 if scheme == "fp8" and n % FP8_BLOCK else DEQUANT_CHUNK
    for e in range(0, num_experts, chunk):
        part = slice(e, min(e + chunk, num_experts))
        rows = [None if t is None else t[part].flatten(0, 1) for t in (q, scale, zero)]  # [chunk * N, ...]
        out[part] = dequantize(*rows, scheme, dtype).view(-1, n, k)
    return out


def moe_experts_wq(x: torch.Tensor, gate_up_q: torch.Tensor, gate_up_scale: torch.Tensor,
                   gate_up_zero: torch.Tensor | None, down_q: torch.Tensor, down_scale: torch.Tensor,
                   down_zero: torch.Tensor | None, weights: torch.Tensor, expert_ids: torch.Tensor, activation: str,
                   scheme: str, path: str = "auto") -> torch.Tensor:
    """Quantized routed experts (signature and rounding of :func:`anna_core.kernels.reference.moe_wq.moe_experts_wq`,
    except that the ``K`` weighted terms are added in float32 and rounded once, and the ``grouped`` path rounds
    the dequantized weights to x's dtype: module docstring).

    Args:
        x: ``[T, H]`` float32 / float16 / bfloat16.
        gate_up_q, gate_up_scale, gate_up_zero, down_q, down_scale, down_zero: the stacked quantized experts.
        weights, expert_ids, activation, scheme: as the reference (ids not checked: no host sync).
        path: ``"auto"`` (per-pair GEMVs when ``T * K <= E``, else the grouped GEMMs on a dense scratch),
            ``"decode"`` or ``"grouped"`` (forced: tests and benchmarks; not part of the op's signature).

    Returns:
        ``[T, H]`` in x's dtype.

    Raises:
        ValueError: bad shapes or dtypes (:func:`~anna_core.kernels.reference.moe_wq.check_moe_experts_wq`),
            an unknown path, or tensors on different devices.
    """
    check_moe_experts_wq(x, gate_up_q, gate_up_scale, gate_up_zero, down_q, down_scale, down_zero, weights,
                         expert_ids, activation, scheme)
    require(path in PATHS, _OP, f"path must be one of {PATHS}, got {path!r}")
    require_float(_OP, x=x)
    require_same_device(_OP, x=x, gate_up_q=gate_up_q, down_q=down_q, weights=weights, expert_ids=expert_ids)
    t, hidden = x.shape
    top_k = expert_ids.shape[1]
    num_experts = gate_up_q.shape[0]
    if t == 0:
        return torch.zeros((t, hidden), dtype=x.dtype, device=x.device)
    gate_up = tuple(None if a is None else a.contiguous() for a in (gate_up_q, gate_up_scale, gate_up_zero))
    down = tuple(None if a is None else a.contiguous() for a in (down_q, down_scale, down_zero))
    if path == "decode" or (path == "auto" and t * top_k <= num_experts):
        return decode(x.contiguous(), gate_up, down, weights, expert_ids, activation, scheme)
    dense_gate_up = dequantize_stacked(*gate_up, scheme, x.dtype)
    dense_down = dequantize_stacked(*down, scheme, x.dtype)
    return moe.moe_experts(x, dense_gate_up, dense_down, weights, expert_ids, activation, path="grouped")

