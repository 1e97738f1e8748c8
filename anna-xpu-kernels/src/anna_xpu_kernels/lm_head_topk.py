"""``lm_head_topk`` in Triton: the LM head's top ``k`` logits per row without materialising the ``[T, V]`` logits.

Stage 1 (one launch): each program owns ``SUB_TILES`` consecutive vocabulary tiles of ``BLOCK_N`` ids for a block
of rows. Per tile it computes the logits (the GEMV over ``K`` in tiles of ``BLOCK_K``: a dense weight of hidden's
dtype, or int4 / int8 / FP8 codes dequantized in registers as :mod:`anna_xpu_kernels.wq_gemv` does), rounds them
to hidden's dtype as ``compute_logits`` does (bfloat16 by integer round-to-nearest-even, so the interpreter rounds
as the GPU does), applies the soft-cap ``cap * tanh(l / cap)``, folds the tile into the row's running ``(max,
sum exp)`` (the online log-sum-exp, Milakov & Gimelshein 2018) and into the program's 64 best candidates.
A candidate is one int64 key: the logit's float32 bits mapped to an order-preserving int32 in the high word, the
complement of its id in the low word, so a larger key is a larger logit and, among equal logits, the lower id
(``argmax``'s tie order); keys are unique, so every selection is exact and deterministic. A tile with a key above
the set's smallest is merged by one bitonic sort (``tl.sort``) of the set and the tile's 64 keys; a tile without
costs one comparison; the first tile's keys are the set.

Stage 2 (torch ops, no host sync): ``topk`` of every program's candidates per row (``P * TOPK`` int64 keys, ``P``
the number of programs: a few thousand for a 250k vocabulary) decoded back to float32 values and ids, and the
partial ``(max, sum exp)`` merged into the exact ``logsumexp``.

Rows: up to 2 rows (dense) / 4 rows (quantized) per program multiply on the CUDA cores in float32 (a ``[rows,
BLOCK_N, BLOCK_K]`` product per step: more would spill registers); more rows run
``tl.dot`` on blocks of 16..64 rows (a quantized tile rounded to hidden's dtype first, as ``wq_gemv``'s tensor-core
path). Tile sizes are fixed (no autotuning yet): ``BLOCK_N`` 64, ``BLOCK_K`` 128 (whole int4 groups / FP8
blocks), ``SUB_TILES`` so that about 256 programs cover the vocabulary (at most 16 tiles each).
"""

from __future__ import annotations

import torch
from anna_core.kernels.reference.lm_head_topk import DENSE, check_lm_head_topk

from anna_xpu_kernels._checks import require_same_device
from anna_xpu_kernels._triton import INTERPRETING, next_pow2, tl, triton
from anna_xpu_kernels.wq_gemv import _dequant, _load_tile

SCHEME_IDS = {"int4": 0, "int8": 1, "fp8": 2, DENSE: 3}
"""The kernel's ``SCHEME`` constexpr per scheme name (0..2 as :data:`anna_xpu_kernels.wq_gemv.SCHEME_IDS`)."""

BLOCK_N = 64
BLOCK_K = 128
MAX_SUB_TILES = 16
TARGET_PROGRAMS = 256
MAX_BLOCK_M = 64
CUDA_CORE_ROWS = {DENSE: 2, "int4": 4, "int8": 4, "fp8": 4}
"""Most rows per program multiplied on the CUDA cores, per scheme; more use ``tl.dot``."""

_ROUND = {torch.bfloat16: 1, torch.float16: 2, torch.float32: 0}


@triton.jit
def _round_logits(acc, ROUND: tl.constexpr):
    """float32 ``acc`` rounded to the hidden dtype and back: 1 bfloat16 (round to nearest even on the bits),
    2 float16, 0 none."""
    if ROUND == 1:
        b = acc.to(tl.int32, bitcast=True)
        b = (b + 0x7FFF + ((b >> 16) & 1)) & -65536
        acc = b.to(tl.float32, bitcast=True)
    elif ROUND == 2:
        acc = acc.to(tl.float16).to(tl.float32)
    return acc


@triton.jit
def _softcap(y, cap):
    """``cap * tanh(y / cap)`` with ``tanh(|u|) = (1 - e) / (1 + e)``, ``e = exp(-2|u|)`` (no overflow)."""
    u = y / cap
    e = tl.exp(-2.0 * tl.abs(u))
    t = (1.0 - e) / (1.0 + e)
    return cap * tl.where(u < 0, -t, t)


@triton.jit
def _keys(logits, cols):
    """Unique int64 keys ordered as (logit, -id): high word the order-preserving int32 of the float32 bits, low
    word ``2**32 - 1 - id``."""
    b = (logits + 0.0).to(tl.int32, bitcast=True)  # + 0.0: -0.0 becomes +0.0 (equal logits, equal keys' high word)
    ordered = b ^ ((b >> 31) & 0x7FFFFFFF)
    return ((ordered.to(tl.int64) + 1) << 32) - 1 - cols.to(tl.int64)[None, :]


@triton.jit
def _tile_logits(x_ptr, w_ptr, s_ptr, z_ptr, m_rows, m_ok, cols, M, N, K, stride_xm, stride_wn, stride_sn,
                 stride_sg, SCHEME: tl.constexpr, USE_DOT: tl.constexpr, UPCAST_DOT: tl.constexpr,
                 DECODE_FP8: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """``[BLOCK_M, BLOCK_N]`` float32 products of the rows and the weight rows ``cols`` (clamped to ``N - 1``),
    accumulated in float32 (int8: the row scale applied to the sum)."""
    w_rows = tl.minimum(cols, N - 1).to(tl.int64)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + tl.arange(0, BLOCK_K)
        x = tl.load(x_ptr + m_rows.to(tl.int64)[:, None] * stride_xm + kk[None, :],
                    mask=m_ok[:, None] & (kk < K)[None, :], other=0.0)
        if SCHEME == 3:
            w = tl.load(w_ptr + w_rows[:, None] * stride_wn + kk[None, :], mask=(kk < K)[None, :], other=0.0,
                        eviction_policy="evict_first")
            if USE_DOT:
                if UPCAST_DOT:
                    acc = tl.dot(x.to(tl.float32), tl.trans(w.to(tl.float32)), acc, input_precision="ieee")
                else:
                    acc = tl.dot(x, tl.trans(w), acc)
            else:
                acc += tl.sum(x.to(tl.float32)[:, None, :] * w.to(tl.float32)[None, :, :], axis=2)
        else:
            codes, scale, zero = _load_tile(w_ptr, s_ptr, z_ptr, w_rows, k0, K, stride_wn, stride_sn, stride_sg,
                                            SCHEME, BLOCK_N, BLOCK_K)
            w_a, w_b = _dequant(codes, scale, zero, SCHEME, BLOCK_N, BLOCK_K, DECODE_FP8)
            if SCHEME == 0:  # the even and the odd columns pair with the low and the high codes
                x_a, x_b = tl.split(tl.reshape(x, (BLOCK_M, BLOCK_K // 2, 2)))
                acc = _mac(acc, w_a, x_a, USE_DOT, UPCAST_DOT)
                acc = _mac(acc, w_b, x_b, USE_DOT, UPCAST_DOT)
            else:
                acc = _mac(acc, w_a, x, USE_DOT, UPCAST_DOT)
    if SCHEME == 1:
        acc = acc * tl.load(s_ptr + w_rows).to(tl.float32)[None, :]
    return acc


@triton.jit
def _mac(acc, w, x, USE_DOT: tl.constexpr, UPCAST_DOT: tl.constexpr):
    """``acc [BLOCK_M, BLOCK_N]`` plus ``x [BLOCK_M, T]`` times the float32 weight tile ``w [BLOCK_N, T]``^T."""
    if USE_DOT:
        if UPCAST_DOT:
            acc = tl.dot(x.to(tl.float32), tl.trans(w), acc, input_precision="ieee")
        else:
            acc = tl.dot(x, tl.trans(w.to(x.dtype)), acc)
    else:
        acc += tl.sum(x.to(tl.float32)[:, None, :] * w[None, :, :], axis=2)
    return acc


@triton.jit
def _merge(best, keys, BLOCK_M: tl.constexpr, TOPK: tl.constexpr):
    """The ``TOPK`` largest of two ``[BLOCK_M, TOPK]`` key sets, in descending order: one bitonic sort of both."""
    both = tl.sort(tl.reshape(tl.join(best, keys), (BLOCK_M, 2 * TOPK)), dim=1, descending=True)
    top, _ = tl.split(tl.permute(tl.reshape(both, (BLOCK_M, 2, TOPK)), (0, 2, 1)))
    return top


@triton.jit
def _topk_head_kernel(
    x_ptr, w_ptr, s_ptr, z_ptr, keys_ptr, pmax_ptr, psum_ptr,
    M, N, K, stride_xm, stride_wn, stride_sn, stride_sg, stride_km, stride_pm, softcap,
    SCHEME: tl.constexpr, HAS_CAP: tl.constexpr, ROUND: tl.constexpr, USE_DOT: tl.constexpr,
    UPCAST_DOT: tl.constexpr, DECODE_FP8: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr, SUB_TILES: tl.constexpr, TOPK: tl.constexpr,
):
    pid = tl.program_id(0)
    m_rows = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    m_ok = m_rows < M
    slots = tl.arange(0, TOPK)
    lowest = tl.full((BLOCK_M, TOPK), -2147483648, tl.int64) << 32  # below every real key
    best = lowest
    run_max = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    run_sum = tl.zeros((BLOCK_M,), dtype=tl.float32)
    for s in range(SUB_TILES):
        cols = (pid * SUB_TILES + s) * BLOCK_N + tl.arange(0, BLOCK_N)
        ok = cols < N
        if (pid * SUB_TILES + s) * BLOCK_N < N:
            logits = _tile_logits(x_ptr, w_ptr, s_ptr, z_ptr, m_rows, m_ok, cols, M, N, K, stride_xm, stride_wn,
                                  stride_sn, stride_sg, SCHEME, USE_DOT, UPCAST_DOT, DECODE_FP8, BLOCK_M, BLOCK_N,
                                  BLOCK_K)
            logits = _round_logits(logits, ROUND)
            if HAS_CAP:
                logits = _softcap(logits, softcap)
            masked = tl.where(ok[None, :], logits, float("-inf"))
            new_max = tl.maximum(run_max, tl.max(masked, axis=1))  # finite: every visited tile has a valid id
            run_sum = run_sum * tl.exp(run_max - new_max) + tl.sum(tl.exp(masked - new_max[:, None]), axis=1)
            run_max = new_max
            keys = tl.where(ok[None, :], _keys(logits, cols), lowest)
            if s == 0:  # the first tile's keys are the set (64 of them; unsorted: stage 2 sorts)
                best = keys
            elif tl.max(tl.sum((keys > tl.min(best, axis=1)[:, None]).to(tl.int32), axis=1)) > 0:
                best = _merge(best, keys, BLOCK_M, TOPK)
    k_rows = m_rows.to(tl.int64)[:, None] * stride_km
    tl.store(keys_ptr + k_rows + (pid * TOPK + slots)[None, :], best, mask=m_ok[:, None])
    p_rows = m_rows.to(tl.int64) * stride_pm + pid
    tl.store(pmax_ptr + p_rows, run_max, mask=m_ok)
    tl.store(psum_ptr + p_rows, run_sum, mask=m_ok)


def decode_keys(keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The float32 logits and int64 ids of int64 candidate keys (inverse of the kernel's ``_keys``)."""
    ordered = keys >> 32
    ids = 0xFFFFFFFF - (keys & 0xFFFFFFFF)
    bits = ordered ^ ((ordered >> 31) & 0x7FFFFFFF)
    return bits.to(torch.int32).view(torch.float32), ids


def _sub_tiles(n: int) -> int:
    tiles = triton.cdiv(n, BLOCK_N)
    return max(1, min(MAX_SUB_TILES, tiles // TARGET_PROGRAMS))


def launch(hidden: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor | None, zero: torch.Tensor | None,
           scheme: str, k: int, softcap: float | None, vocab: int,
           sub_tiles: int | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Both stages on checked arguments (``sub_tiles``: tiles per program, default :func:`_sub_tiles`; tests
    force several)."""
    m, width = hidden.shape
    if hidden.stride(1) != 1:
        hidden = hidden.contiguous()
    if zero is not None and zero.stride() != scale.stride():  # the kernel indexes both with the scale's strides
        zero = torch.empty_strided(scale.shape, scale.stride(), dtype=zero.dtype, device=zero.device).copy_(zero)
    if scheme == "fp8":
        weight = weight.view(torch.uint8)
    sub = sub_tiles or _sub_tiles(vocab)
    programs = triton.cdiv(vocab, BLOCK_N * sub)
    topk = BLOCK_N  # every program keeps 64 candidates (k <= 64); stage 2 takes k
    dot = m > CUDA_CORE_ROWS[scheme]
    block_m = min(MAX_BLOCK_M, max(16, next_pow2(m))) if dot else next_pow2(m)
    keys = torch.empty((m, programs * topk), dtype=torch.int64, device=hidden.device)
    pmax = torch.empty((m, programs), dtype=torch.float32, device=hidden.device)
    psum = torch.empty_like(pmax)
    s = scale if scale is not None else hidden
    _topk_head_kernel[(programs, triton.cdiv(m, block_m))](
        hidden, weight, s, zero if zero is not None else s, keys, pmax, psum,
        m, vocab, width, hidden.stride(0), weight.stride(0), s.stride(0) if s.dim() == 2 else 1,
        s.stride(1) if s.dim() == 2 else 1, keys.stride(0), pmax.stride(0), float(softcap or 1.0),
        SCHEME=SCHEME_IDS[scheme], HAS_CAP=softcap is not None, ROUND=_ROUND[hidden.dtype], USE_DOT=dot,
        UPCAST_DOT=INTERPRETING or hidden.dtype == torch.float32, DECODE_FP8=INTERPRETING, BLOCK_M=block_m,
        BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, SUB_TILES=sub, TOPK=topk, num_warps=8 if dot or block_m > 1 else 4)
    top = keys.topk(k, dim=1).values  # unique keys: a deterministic order
    values, indices = decode_keys(top)
    peak = pmax.max(dim=1).values
    lse = peak + torch.log((psum * torch.exp(pmax - peak[:, None])).sum(dim=1))
    return values, indices, lse


def lm_head_topk(hidden: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor | None, zero: torch.Tensor | None,
                 scheme: str, k: int, softcap: float | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The ``lm_head_topk`` op (contract: :func:`anna_core.kernels.reference.lm_head_topk.lm_head_topk`).

    Raises:
        ValueError: see :func:`~anna_core.kernels.reference.lm_head_topk.check_lm_head_topk`, or tensors on
            different devices.
    """
    vocab = check_lm_head_topk(hidden, weight, scale, zero, scheme, k, softcap)
    require_same_device("lm_head_topk", hidden=hidden, weight=weight, scale=scale, zero=zero)
    return launch(hidden, weight, scale, zero, scheme, k, softcap, vocab)
