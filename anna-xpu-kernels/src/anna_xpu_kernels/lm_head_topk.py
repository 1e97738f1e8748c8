"""``lm_head_topk`` in Triton: the LM head's top ``k`` logits per row and the exact ``logsumexp``, in one of two
implementations, both ending in the Triton selection of :mod:`anna_xpu_kernels.topk_select` (no torch sort, softmax
or ``topk`` over the vocabulary, no host sync, graph-capture safe):

* ``one_pass`` (:func:`one_pass`): one kernel computes the logits tile by tile and writes per program only its top
  64 candidates and a partial ``(max, sum exp)`` (as many candidates as logits when a program covers 64 ids).
* ``gemv_select`` (:func:`gemv_select`): the full head's own GEMV (the registry's ``linear`` / ``wq_linear``
  kernels: :mod:`anna_xpu_kernels.gemv`, :mod:`anna_xpu_kernels.wq_gemv`) writes the ``[T, V]`` logits in hidden's
  dtype (what ``compute_logits`` rounds them to), then the selection reads them once (soft-cap applied there). It
  costs the full head's GEMV plus a read of the logits (0.5 MB a row at a 248k vocabulary in bfloat16): no slower
  than the full head + a sampler by construction.

Which one runs (:class:`ImplTuner`): ``ANNA_LM_HEAD_TOPK=one_pass|gemv_select`` forces one; otherwise (``auto``) on
CUDA both are timed once per (dtype, rows bucket, V, H, scheme, soft-cap) with a cold L2
(:func:`anna_xpu_kernels.gemv_tuning.cold_time_ms`, the GEMV autotuner's timer) at the first eager call -- the
decode graphs' warm-up, before capture -- and the faster is kept for the process; a call during capture with no
choice yet takes ``gemv_select``. Elsewhere (XPU, Triton's interpreter) ``auto`` is ``one_pass``.

The one-pass kernel. Each program owns ``SUB_TILES`` consecutive vocabulary tiles of ``BLOCK_N`` ids for a block
of rows. Per tile it computes the logits (the GEMV over ``K`` in tiles of ``BLOCK_K``, the next ``K`` tile loaded
before the current one is multiplied: a dense weight of hidden's dtype, or int4 / int8 / FP8 codes dequantized in
registers as :mod:`anna_xpu_kernels.wq_gemv` does), rounds them to hidden's dtype as ``compute_logits`` does
(bfloat16 by integer round-to-nearest-even, so the interpreter rounds as the GPU does), applies the soft-cap, folds
the tile into the row's running ``(max, sum exp)`` (the online log-sum-exp, Milakov & Gimelshein 2018) and into
the program's 64 best keys (:func:`anna_xpu_kernels.topk_select.keys`: logit bits high, ``-id`` low, so the lower
id wins ties; a tile wider than 64 is first cut to its top 64 by ``tl.topk``; a tile with a key above the set's
smallest is merged by one bitonic sort of both, a tile without costs one comparison). Up to 2 rows (dense) / 4
rows (quantized) per program multiply on the CUDA cores in float32; more rows run ``tl.dot`` on blocks of 16..64
rows (a quantized tile rounded to hidden's dtype first, as ``wq_gemv``'s tensor-core path). ``BLOCK_N`` (64,
128), ``BLOCK_K`` (64..512; quantized heads whole int4 groups / FP8 blocks of 128), ``SUB_TILES`` (1..4), warps
and stages are autotuned per (rows bucket, V, H, scheme, soft-cap) among :func:`tuning_space`, timed with a cold
L2 and kept on disk with the other kernels' choices (:func:`anna_xpu_kernels._triton.autotune`); the
interpreter runs :data:`FIXED`. Every program writes 64 keys: the candidates buffer is ``[T, 64 * programs]``
int64, at most ``8 * V`` bytes a row (``BLOCK_N * SUB_TILES >= 64``).
"""

from __future__ import annotations

from collections.abc import Callable

import attrs
import torch
from anna_core.kernels.reference.lm_head_topk import DENSE, check_lm_head_topk

from anna_xpu_kernels import gemv, gemv_tuning, topk_select, wq_gemv
from anna_xpu_kernels._checks import require_same_device
from anna_xpu_kernels._env import lm_head_topk_impl
from anna_xpu_kernels._triton import INTERPRETING, autotune, next_pow2, tl, triton
from anna_xpu_kernels.topk_select import TOPK, keys, softcap
from anna_xpu_kernels.wq_gemv import _dequant, _load_tile

SCHEME_IDS = {"int4": 0, "int8": 1, "fp8": 2, DENSE: 3}
"""The kernel's ``SCHEME`` constexpr per scheme name (0..2 as :data:`anna_xpu_kernels.wq_gemv.SCHEME_IDS`)."""

MAX_BLOCK_M = 64
CUDA_CORE_ROWS = {DENSE: 2, "int4": 4, "int8": 4, "fp8": 4}
"""Most rows per program multiplied on the CUDA cores, per scheme; more use ``tl.dot``."""

IMPLS = ("one_pass", "gemv_select")
"""The implementations of the op (module doc)."""

_ROUND = {torch.bfloat16: 1, torch.float16: 2, torch.float32: 0}


@attrs.frozen
class TopkHeadConfig:
    """One launch configuration of the one-pass kernel: vocabulary tile ``block_n`` (64 or more: every program
    keeps 64 candidates), ``K`` tile ``block_k``, tiles per program ``sub_tiles``, warps and stages."""

    block_n: int
    block_k: int
    sub_tiles: int = 1
    num_warps: int = 4
    num_stages: int = 2

    def triton(self) -> triton.Config:
        return triton.Config({"BLOCK_N": self.block_n, "BLOCK_K": self.block_k, "SUB_TILES": self.sub_tiles},
                             num_warps=self.num_warps, num_stages=self.num_stages)


CUDA_CORE_SPACE = (TopkHeadConfig(64, 128, 1, 4), TopkHeadConfig(64, 256, 1, 8), TopkHeadConfig(64, 512, 1, 8),
                   TopkHeadConfig(128, 256, 1, 8), TopkHeadConfig(64, 256, 2, 4), TopkHeadConfig(64, 256, 4, 8))
"""Candidates of the CUDA-core path (few rows): many short programs (one tile each) or a few tiles each, wide
``K`` tiles and 8 warps to keep more weight bytes in flight per multiprocessor."""

DOT_SPACE = (TopkHeadConfig(64, 128, 1, 4, 3), TopkHeadConfig(64, 256, 1, 8, 3), TopkHeadConfig(128, 128, 1, 8, 3),
             TopkHeadConfig(64, 64, 1, 4, 4), TopkHeadConfig(64, 128, 2, 4, 3))
"""Candidates of the tensor-core path (``tl.dot``, more rows): the loads feeding ``tl.dot`` pipelined over
3..4 stages. Both sets are kept small (5-6 compiles per shape key at setup; the choices are cached on disk)."""

FIXED = TopkHeadConfig(64, 128, 1, 4)
"""The configuration run under Triton's interpreter (tests force the others)."""


def tuning_space() -> list[triton.Config]:
    """Both paths' candidates (:func:`prune` keeps those of the launch's path)."""
    return [c.triton() for c in (*CUDA_CORE_SPACE, *DOT_SPACE)]


def prune(configs, named_args, **kwargs):
    """Keep the launch path's candidates (``USE_DOT``) that fit the shape: ``K`` tiles of whole 128-value groups
    for a quantized head and no wider than ``K``'s power of two, vocabulary tiles no wider than ``V``'s."""
    n, k, dot, scheme = named_args["N"], named_args["K"], kwargs["USE_DOT"], kwargs["SCHEME"]
    space = DOT_SPACE if dot else CUDA_CORE_SPACE
    kept = []
    for c in configs:
        bn, bk = c.kwargs["BLOCK_N"], c.kwargs["BLOCK_K"]
        if TopkHeadConfig(bn, bk, c.kwargs["SUB_TILES"], c.num_warps, c.num_stages) not in space:
            continue
        if (scheme != 3 and bk % 128) or bk > max(128, next_pow2(k)):
            continue
        if bn > max(64, next_pow2(n)):
            continue
        kept.append(c)
    return kept or [FIXED.triton()]


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
def _load_w(w_ptr, s_ptr, z_ptr, w_rows, k0, K, stride_wn, stride_sn, stride_sg, SCHEME: tl.constexpr,
            BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """The weight tile at column ``k0`` (nothing loaded past ``K``): ``(w, w, w)`` for a dense weight, else
    :func:`anna_xpu_kernels.wq_gemv._load_tile`'s ``(codes, scale, zero)``."""
    if SCHEME == 3:
        kk = k0 + tl.arange(0, BLOCK_K)
        w = tl.load(w_ptr + w_rows[:, None] * stride_wn + kk[None, :], mask=(kk < K)[None, :], other=0.0,
                    eviction_policy="evict_first")
        return w, w, w
    else:
        return _load_tile(w_ptr, s_ptr, z_ptr, w_rows, k0, K, stride_wn, stride_sn, stride_sg, SCHEME, BLOCK_N,
                          BLOCK_K)


@triton.jit
def _tile_logits(x_ptr, w_ptr, s_ptr, z_ptr, m_rows, m_ok, cols, M, N, K, stride_xm, stride_wn, stride_sn,
                 stride_sg, SCHEME: tl.constexpr, USE_DOT: tl.constexpr, UPCAST_DOT: tl.constexpr,
                 DECODE_FP8: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """``[BLOCK_M, BLOCK_N]`` float32 products of the rows and the weight rows ``cols`` (clamped to ``N - 1``),
    accumulated in float32 (int8: the row scale applied to the sum); each next ``K`` tile of the weight is loaded
    before the current one is multiplied."""
    w_rows = tl.minimum(cols, N - 1).to(tl.int64)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    w, scale, zero = _load_w(w_ptr, s_ptr, z_ptr, w_rows, 0, K, stride_wn, stride_sn, stride_sg, SCHEME, BLOCK_N,
                             BLOCK_K)
    for k0 in range(0, K, BLOCK_K):
        w_next, scale_next, zero_next = _load_w(w_ptr, s_ptr, z_ptr, w_rows, k0 + BLOCK_K, K, stride_wn, stride_sn,
                                                stride_sg, SCHEME, BLOCK_N, BLOCK_K)
        kk = k0 + tl.arange(0, BLOCK_K)
        x = tl.load(x_ptr + m_rows.to(tl.int64)[:, None] * stride_xm + kk[None, :],
                    mask=m_ok[:, None] & (kk < K)[None, :], other=0.0)
        if SCHEME == 3:
            if USE_DOT:
                if UPCAST_DOT:
                    acc = tl.dot(x.to(tl.float32), tl.trans(w.to(tl.float32)), acc, input_precision="ieee")
                else:
                    acc = tl.dot(x, tl.trans(w), acc)
            else:
                acc += tl.sum(x.to(tl.float32)[:, None, :] * w.to(tl.float32)[None, :, :], axis=2)
        else:
            w_a, w_b = _dequant(w, scale, zero, SCHEME, BLOCK_N, BLOCK_K, DECODE_FP8)
            if SCHEME == 0:  # the even and the odd columns pair with the low and the high codes
                x_a, x_b = tl.split(tl.reshape(x, (BLOCK_M, BLOCK_K // 2, 2)))
                acc = _mac(acc, w_a, x_a, USE_DOT, UPCAST_DOT)
                acc = _mac(acc, w_b, x_b, USE_DOT, UPCAST_DOT)
            else:
                acc = _mac(acc, w_a, x, USE_DOT, UPCAST_DOT)
        w, scale, zero = w_next, scale_next, zero_next
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
def _merge(best, cand, BLOCK_M: tl.constexpr, TOPK: tl.constexpr):
    """The ``TOPK`` largest of two ``[BLOCK_M, TOPK]`` key sets, in descending order: one bitonic sort of both."""
    both = tl.sort(tl.reshape(tl.join(best, cand), (BLOCK_M, 2 * TOPK)), dim=1, descending=True)
    top, _ = tl.split(tl.permute(tl.reshape(both, (BLOCK_M, 2, TOPK)), (0, 2, 1)))
    return top


@autotune(tuning_space(), fixed=FIXED.triton(), key=["BLOCK_M", "N", "K", "SCHEME", "HAS_CAP"],
          prune_configs_by={"early_config_prune": prune}, do_bench=gemv_tuning.autotune_bench)
@triton.jit
def _topk_head_kernel(
    x_ptr, w_ptr, s_ptr, z_ptr, keys_ptr, pmax_ptr, psum_ptr,
    M, N, K, stride_xm, stride_wn, stride_sn, stride_sg, stride_km, stride_pm, cap,
    SCHEME: tl.constexpr, HAS_CAP: tl.constexpr, ROUND: tl.constexpr, USE_DOT: tl.constexpr,
    UPCAST_DOT: tl.constexpr, DECODE_FP8: tl.constexpr, BLOCK_M: tl.constexpr, TOPK: tl.constexpr,
    BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SUB_TILES: tl.constexpr,
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
                logits = softcap(logits, cap)
            masked = tl.where(ok[None, :], logits, float("-inf"))
            new_max = tl.maximum(run_max, tl.max(masked, axis=1))  # finite: every visited tile has a valid id
            run_sum = run_sum * tl.exp(run_max - new_max) + tl.sum(tl.exp(masked - new_max[:, None]), axis=1)
            run_max = new_max
            tile_keys = tl.where(ok[None, :], keys(logits, cols[None, :]), tl.full((BLOCK_M, BLOCK_N), -2147483648,
                                                                                    tl.int64) << 32)
            if BLOCK_N > TOPK:
                tile_keys = tl.topk(tile_keys, TOPK)
            if s == 0:  # the first tile's keys are the set (64 of them; unsorted: the selection sorts)
                best = tile_keys
            elif tl.max(tl.sum((tile_keys > tl.min(best, axis=1)[:, None]).to(tl.int32), axis=1)) > 0:
                best = _merge(best, tile_keys, BLOCK_M, TOPK)
    k_rows = m_rows.to(tl.int64)[:, None] * stride_km
    tl.store(keys_ptr + k_rows + (pid * TOPK + slots)[None, :], best, mask=m_ok[:, None])
    p_rows = m_rows.to(tl.int64) * stride_pm + pid
    tl.store(pmax_ptr + p_rows, run_max, mask=m_ok)
    tl.store(psum_ptr + p_rows, run_sum, mask=m_ok)


def decode_keys(keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The float32 logits and int64 ids of int64 candidate keys (inverse of :func:`~anna_xpu_kernels.topk_select.
    keys`; for tests and debugging)."""
    ordered = keys >> 32
    ids = 0xFFFFFFFF - (keys & 0xFFFFFFFF)
    bits = ordered ^ ((ordered >> 31) & 0x7FFFFFFF)
    return bits.to(torch.int32).view(torch.float32), ids


def one_pass(hidden: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor | None, zero: torch.Tensor | None,
             scheme: str, k: int, softcap: float | None, vocab: int,
             config: TopkHeadConfig | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The one-pass kernel, then :func:`anna_xpu_kernels.topk_select.select`, on checked arguments (``config``:
    run this configuration instead of the autotuned one; tests force each)."""
    m, width = hidden.shape
    if hidden.stride(1) != 1:
        hidden = hidden.contiguous()
    if zero is not None and zero.stride() != scale.stride():  # the kernel indexes both with the scale's strides
        zero = torch.empty_strided(scale.shape, scale.stride(), dtype=zero.dtype, device=zero.device).copy_(zero)
    if scheme == "fp8":
        weight = weight.view(torch.uint8)
    dot = m > CUDA_CORE_ROWS[scheme]
    block_m = min(MAX_BLOCK_M, max(16, next_pow2(m))) if dot else next_pow2(m)
    most = triton.cdiv(vocab, TOPK)  # programs of the narrowest span (BLOCK_N * SUB_TILES = 64)
    cand = torch.empty((m, most * TOPK), dtype=torch.int64, device=hidden.device)
    pmax = torch.empty((m, most), dtype=torch.float32, device=hidden.device)
    psum = torch.empty_like(pmax)
    s = scale if scale is not None else hidden
    args = (hidden, weight, s, zero if zero is not None else s, cand, pmax, psum, m, vocab, width, hidden.stride(0),
            weight.stride(0), s.stride(0) if s.dim() == 2 else 1, s.stride(1) if s.dim() == 2 else 1, cand.stride(0),
            pmax.stride(0), float(softcap or 1.0))
    meta = {"SCHEME": SCHEME_IDS[scheme], "HAS_CAP": softcap is not None, "ROUND": _ROUND[hidden.dtype],
            "USE_DOT": dot, "UPCAST_DOT": INTERPRETING or hidden.dtype == torch.float32, "DECODE_FP8": INTERPRETING,
            "BLOCK_M": block_m, "TOPK": TOPK}
    if config is not None:
        span = config.block_n * config.sub_tiles
        _topk_head_kernel.fn[(triton.cdiv(vocab, span), triton.cdiv(m, block_m))](
            *args, **meta, BLOCK_N=config.block_n, BLOCK_K=config.block_k, SUB_TILES=config.sub_tiles,
            num_warps=config.num_warps, num_stages=config.num_stages)
    else:

        def grid(c):
            return (triton.cdiv(vocab, c["BLOCK_N"] * c["SUB_TILES"]), triton.cdiv(m, block_m))

        _topk_head_kernel[grid](*args, **meta)
        chosen = _topk_head_kernel.best_config.kwargs  # the autotuner's choice for this launch's key
        span = chosen["BLOCK_N"] * chosen["SUB_TILES"]
    programs = triton.cdiv(vocab, span)
    return topk_select.select(cand[:, :programs * TOPK], pmax[:, :programs], psum[:, :programs], k)


def gemv_select(hidden: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor | None, zero: torch.Tensor | None,
                scheme: str, k: int, softcap: float | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The full head's GEMV (:func:`anna_xpu_kernels.gemv.linear` / :func:`anna_xpu_kernels.wq_gemv.wq_linear`:
    ``[T, V]`` logits in hidden's dtype), then :func:`anna_xpu_kernels.topk_select.topk_of_logits` (soft-cap,
    top ``k``, ``logsumexp``), on checked arguments."""
    if scheme == DENSE:
        logits = gemv.linear(hidden, weight, None)
    else:
        logits = wq_gemv.wq_linear(hidden, weight, scale, zero, scheme, None)
    return topk_select.topk_of_logits(logits, k, softcap)


@attrs.define
class ImplTuner:
    """Which implementation (:data:`IMPLS`) runs per shape key: the ``ANNA_LM_HEAD_TOPK`` knob when set, else on
    CUDA the faster of both as ``timer`` measures them once per key (not while a CUDA graph is being captured:
    then ``gemv_select`` until an eager call has timed them), else ``one_pass``.

    ``timer(fn) -> ms`` defaults to :func:`anna_xpu_kernels.gemv_tuning.cold_time_ms`; ``capturing() -> bool`` to
    ``torch.cuda.is_current_stream_capturing``; ``choices`` maps keys to the measured choice.
    """

    timer: Callable[[Callable[[], object]], float] = gemv_tuning.cold_time_ms
    capturing: Callable[[], bool] = torch.cuda.is_current_stream_capturing
    choices: dict[tuple, str] = attrs.field(factory=dict)

    def choose(self, key: tuple, on_cuda: bool, runners: dict[str, Callable[[], object]]) -> str:
        """The implementation for ``key`` (``on_cuda``: a compiled launch on a CUDA device; ``runners``: each
        implementation's call on the current arguments)."""
        forced = lm_head_topk_impl()
        if forced != "auto":
            return forced
        if not on_cuda:
            return "one_pass"
        if key not in self.choices:
            if self.capturing():
                return "gemv_select"
            times = {name: self.timer(runners[name]) for name in IMPLS}
            self.choices[key] = min(IMPLS, key=times.__getitem__)
        return self.choices[key]


def lm_head_topk(hidden: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor | None, zero: torch.Tensor | None,
                 scheme: str, k: int, softcap: float | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The ``lm_head_topk`` op (contract: :func:`anna_core.kernels.reference.lm_head_topk.lm_head_topk`): the
    implementation :attr:`lm_head_topk.tuner <ImplTuner>` chooses for the shape.

    Raises:
        ValueError: see :func:`~anna_core.kernels.reference.lm_head_topk.check_lm_head_topk`, or tensors on
            different devices.
    """
    vocab = check_lm_head_topk(hidden, weight, scale, zero, scheme, k, softcap)
    require_same_device("lm_head_topk", hidden=hidden, weight=weight, scale=scale, zero=zero)
    runners = {"one_pass": lambda: one_pass(hidden, weight, scale, zero, scheme, k, softcap, vocab),
               "gemv_select": lambda: gemv_select(hidden, weight, scale, zero, scheme, k, softcap)}
    key = (hidden.device, hidden.dtype, next_pow2(hidden.shape[0]), vocab, hidden.shape[1], scheme, softcap is None)
    on_cuda = hidden.device.type == "cuda" and not INTERPRETING
    return runners[lm_head_topk.tuner.choose(key, on_cuda, runners)]()


lm_head_topk.tuner = ImplTuner()
