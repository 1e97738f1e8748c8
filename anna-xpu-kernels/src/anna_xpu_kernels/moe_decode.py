"""The ``moe_experts`` op for a few tokens: one GEMV per (token, choice) pair, the sum over ``K`` fused.

At batch-1 decode the grouped GEMMs of :mod:`anna_xpu_kernels.moe` spend a launch on the alignment and
another on the sum over the ``K`` choices, and multiply 16-row tiles of which one row is real. With a
few tokens whose pairs mostly chose distinct experts there is nothing to group: every pair streams its
own expert's weights. Two launches, no alignment, nothing read on the host (graph-capturable), every
grid fixed by ``T``, ``K``, ``H`` and ``I``:

1. ``_decode_gate_up_kernel`` over ``(T * K, cdiv(I, BLOCK_N))``: a program loads its pair's expert id,
   streams that expert's ``BLOCK_N`` gate rows and ``BLOCK_N`` up rows along H in ``[BLOCK_N, BLOCK_K]``
   tiles (loads contiguous along H, so vectorised; ``DEPTH`` tiles, with x's, are loaded ahead of the
   ones in use: Triton does not pipeline loads that feed no ``tl.dot``), multiplies them elementwise by the token's row of x on the CUDA cores (float32, summed
   over H once after the loop) and writes ``act_mul(gate, up)`` to ``h`` ``[T * K, I]``, rounded as the
   grouped kernel rounds (the projection to x's dtype, the activation, the product).
2. ``_decode_down_kernel`` over ``(T * K, cdiv(H, BLOCK_N))``: a program streams its pair's ``BLOCK_N``
   rows of ``down[e]`` along I as the first launch streams H, and writes its term
   ``round(round(h[pair] @ down[e]^T) * weight)`` (rounded as the grouped down kernel rounds it) to a
   float32 workspace ``[T * K, H]``; then it counts itself in on its (token, column block)'s arrival
   counter (acquire-release, :mod:`anna_xpu_kernels.counters`), and the last of the token's ``K`` pairs
   to arrive adds the ``K`` terms in float32 in choice order and rounds once to ``out`` ``[T, H]``: the
   op's contract ("the ``K`` weighted terms added in float32 and rounded once"), deterministic, with
   one program per (pair, column block) so that even one token fills the GPU (a first version looped
   over the ``K`` experts in one program per column block: a K-th of the programs, and slower; the
   figures are in BENCHMARKS.md).

A pair re-reads its expert's weights even when another pair of the step chose the same expert, so
:func:`takes` sends a call here only with at most :data:`MAX_TOKENS` tokens whose pairs are expected to
be mostly distinct (random top-k routing): ``E (1 - (1 - K/E)^T) / (T K) >= MIN_DISTINCT_SHARE``
(35B-A3B: 1.0, 0.98, 0.95 at T = 1, 2, 4; Gemma 4 26B-A4B: 1.0, 0.97, 0.91). The tile sizes and warps
are autotuned per (T, N, K, dtypes) among :data:`GATE_UP_CONFIGS` / :data:`DOWN_CONFIGS` (tiles of the
dense GEMV's CUDA-core path, :func:`anna_xpu_kernels.gemv_tuning.tuning_space`, chosen for H100/H200);
one fixed configuration runs under the interpreter. With PDL every
program waits for the previous kernel first: the weights it streams depend on the router's ids.
"""

from __future__ import annotations

import attrs
import torch

from anna_xpu_kernels import pdl
from anna_xpu_kernels._triton import autotune, tl, triton
from anna_xpu_kernels.counters import CounterPool
from anna_xpu_kernels.gemv_prologue import act_mul
from anna_xpu_kernels.gemv_tuning import autotune_bench

MAX_TOKENS = 4
"""Most tokens :func:`takes` sends to this path."""

MIN_DISTINCT_SHARE = 0.9
"""Least expected share of distinct experts among the ``T * K`` pairs for :func:`takes`."""


def expected_distinct_share(num_tokens: int, top_k: int, num_experts: int) -> float:
    """Expected distinct experts over pairs, ``E (1 - (1 - K/E)^T) / (T K)``, for ``T`` tokens routed
    independently and uniformly to ``K`` distinct experts of ``E`` each (1.0 for one token)."""
    pairs = num_tokens * top_k
    if pairs <= 0:
        return 1.0
    hit = num_experts * (1.0 - (1.0 - min(top_k, num_experts) / num_experts) ** num_tokens)
    return min(1.0, hit / pairs)


def takes(num_tokens: int, top_k: int, num_experts: int) -> bool:
    """Whether ``moe_experts`` runs this path: ``1 <= T <= MAX_TOKENS`` and the expected distinct
    share at least :data:`MIN_DISTINCT_SHARE` (the grouped GEMMs read a shared expert once)."""
    return (1 <= num_tokens <= MAX_TOKENS
            and expected_distinct_share(num_tokens, top_k, num_experts) >= MIN_DISTINCT_SHARE)


def _config(block_n: int, block_k: int, warps: int, depth: int) -> triton.Config:
    return triton.Config({"BLOCK_N": block_n, "BLOCK_K": block_k, "DEPTH": depth}, num_warps=warps, num_stages=1)


GATE_UP_CONFIGS = [_config(n, k, w, d) for n, k, w, d in (
    (4, 512, 2, 1), (8, 256, 2, 2), (8, 512, 4, 1), (8, 512, 4, 2), (16, 256, 4, 2), (16, 512, 4, 1),
    (32, 256, 8, 1), (4, 1024, 4, 1))]
"""Tiles tried for the gate/up GEMV: ``BLOCK_N`` gate rows and as many up rows per program, ``BLOCK_K``
columns per tile, ``DEPTH`` tiles loaded ahead of the one in use (1 or 2)."""
DOWN_CONFIGS = [_config(n, k, w, d) for n, k, w, d in (
    (4, 512, 2, 1), (8, 512, 4, 1), (8, 256, 2, 2), (16, 512, 4, 1), (16, 256, 4, 2), (16, 128, 2, 2),
    (32, 256, 8, 1), (32, 128, 4, 2), (32, 64, 4, 2), (64, 128, 8, 1))]
"""Tiles tried for the down GEMV (``BLOCK_N`` output columns of one pair per program, ``DEPTH`` 1 or 2).
The narrowest is :data:`MIN_DOWN_BLOCK_N` columns (the arrival counters are sized for it)."""
MIN_DOWN_BLOCK_N = 4
FIXED = _config(16, 32, 4, 2)
"""The configuration run under the interpreter (tests force the others through ``config``)."""


def _prune(configs, named_args, **kwargs):
    """Drop tiles much wider or deeper than the matrix."""
    n, k = named_args["N"], named_args["K"]
    keep = [c for c in configs if c.kwargs["BLOCK_N"] <= max(4, triton.next_power_of_2(n))
            and c.kwargs["BLOCK_K"] <= max(32, triton.next_power_of_2(k))]
    return keep or configs[:1]


_HEURISTICS = {"EVEN_K": lambda a: a["K"] % a["BLOCK_K"] == 0}


def _tuned(configs):
    def wrap(fn):
        return autotune(configs, fixed=FIXED, key=["num_tokens", "N", "K", "TOP_K"],
                        prune_configs_by={"early_config_prune": _prune}, do_bench=autotune_bench)(
            triton.heuristics(_HEURISTICS)(fn))
    return wrap


@triton.jit
def _tile(ptr, k0, ks, K, EVEN_K: tl.constexpr):
    """The ``[BLOCK_N, BLOCK_K]`` weight tile at column ``k0`` of the row pointers ``ptr`` (columns from
    ``K`` on read as 0)."""
    if EVEN_K:
        return tl.load(ptr + k0, eviction_policy="evict_first")
    else:
        return tl.load(ptr + k0, mask=((k0 + ks) < K)[None, :], other=0.0, eviction_policy="evict_first")


@triton.jit
def _vec(ptr, k0, ks, K, EVEN_K: tl.constexpr):
    """The ``[1, BLOCK_K]`` activation tile at column ``k0`` (columns from ``K`` on read as 0)."""
    if EVEN_K:
        v = tl.load(ptr + k0 + ks)
    else:
        v = tl.load(ptr + k0 + ks, mask=(k0 + ks) < K, other=0.0)
    return v[None, :]


@triton.jit
def _gate_up_tiles(g_ptr, u_ptr, x_row, i, last, ks, K, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr):
    """Tile ``min(i, last)`` of the gate rows, the up rows and the row of x."""
    k0 = tl.minimum(i, last) * BLOCK_K
    return _tile(g_ptr, k0, ks, K, EVEN_K), _tile(u_ptr, k0, ks, K, EVEN_K), _vec(x_row, k0, ks, K, EVEN_K)


@_tuned(GATE_UP_CONFIGS)
@triton.jit(do_not_specialize=["num_tokens"])
def _decode_gate_up_kernel(x_ptr, gate_up_ptr, h_ptr, ids_ptr, num_tokens, N, K, stride_xm, stride_we, stride_wn, stride_hm,
                           TOP_K: tl.constexpr, GELU: tl.constexpr, EVEN_K: tl.constexpr, BLOCK_N: tl.constexpr,
                           BLOCK_K: tl.constexpr, DEPTH: tl.constexpr, USE_PDL: tl.constexpr):
    # N = I (gated outputs), K = H; gate_up: [E, 2N, K] (gate rows, then up rows), unit stride along K;
    # ids: [T * TOP_K] contiguous; h: [T * TOP_K, N]; num_tokens = T (only a key of the autotuner)
    tl.static_assert(DEPTH <= 2, "the gate/up decode kernel rotates at most 2 tiles loaded ahead")
    pair = tl.program_id(0)
    pid_n = tl.program_id(1)
    if USE_PDL:  # (no nested call otherwise: each costs the interpreter a few ms per program)
        pdl.enter(USE_PDL)
    expert = tl.load(ids_ptr + pair).to(tl.int64)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rows = tl.minimum(cols, N - 1).to(tl.int64)  # clamped: unmasked weight loads, masked store
    ks = tl.arange(0, BLOCK_K)
    g_ptr = gate_up_ptr + expert * stride_we + rows[:, None] * stride_wn + ks[None, :]  # [BLOCK_N, BLOCK_K]
    u_ptr = g_ptr + N * stride_wn
    x_row = x_ptr + (pair // TOP_K).to(tl.int64) * stride_xm
    last = tl.cdiv(K, BLOCK_K) - 1  # the last tile (loads past it re-read it: cached, unused)
    acc_g = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
    acc_u = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
    g, u, xv = _gate_up_tiles(g_ptr, u_ptr, x_row, 0, last, ks, K, BLOCK_K, EVEN_K)
    if DEPTH >= 2:
        g1, u1, x1 = _gate_up_tiles(g_ptr, u_ptr, x_row, 1, last, ks, K, BLOCK_K, EVEN_K)
    for i in range(0, last + 1):  # the next DEPTH tiles are loaded before the current ones are used
        g_next, u_next, x_next = _gate_up_tiles(g_ptr, u_ptr, x_row, i + DEPTH, last, ks, K, BLOCK_K, EVEN_K)
        xf = xv.to(tl.float32)
        acc_g += g.to(tl.float32) * xf
        acc_u += u.to(tl.float32) * xf
        if DEPTH >= 2:
            g, u, xv = g1, u1, x1
            g1, u1, x1 = g_next, u_next, x_next
        else:
            g, u, xv = g_next, u_next, x_next
    gate = tl.sum(acc_g, axis=1).to(h_ptr.dtype.element_ty)  # the projection's rounding
    up = tl.sum(acc_u, axis=1).to(h_ptr.dtype.element_ty)
    h = act_mul(gate, up, h_ptr, GELU)
    tl.store(h_ptr + pair.to(tl.int64) * stride_hm + cols, h, mask=cols < N)


@_tuned(DOWN_CONFIGS)
@triton.jit(do_not_specialize=["num_tokens"])
def _decode_down_kernel(h_ptr, down_ptr, out_ptr, part_ptr, count_ptr, rw_ptr, ids_ptr, num_tokens, N, K, stride_hm,
                        stride_we, stride_wn, stride_om, TOP_K: tl.constexpr, EVEN_K: tl.constexpr,
                        BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, DEPTH: tl.constexpr, USE_PDL: tl.constexpr):
    # N = H, K = I; down: [E, N, K], unit stride along K; h: [T * TOP_K, K]; rw, ids: [T * TOP_K] contiguous;
    # part: [T * TOP_K, N] float32 (each pair's weighted term); count: [T * cdiv(N, BLOCK_N)] int32, zero on
    # entry and left at zero; num_tokens = T (only a key of the autotuner)
    tl.static_assert(DEPTH <= 2, "the down decode kernel rotates at most 2 tiles loaded ahead")
    pair = tl.program_id(0)
    pid_n = tl.program_id(1)
    if USE_PDL:
        pdl.enter(USE_PDL)
    expert = tl.load(ids_ptr + pair).to(tl.int64)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rows = tl.minimum(cols, N - 1).to(tl.int64)  # clamped: unmasked weight loads, masked stores
    ks = tl.arange(0, BLOCK_K)
    w_ptr = down_ptr + expert * stride_we + rows[:, None] * stride_wn + ks[None, :]  # [BLOCK_N, BLOCK_K]
    h_row = h_ptr + pair.to(tl.int64) * stride_hm
    last = tl.cdiv(K, BLOCK_K) - 1  # the last tile (loads past it re-read it: cached, unused)
    acc = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
    w = _tile(w_ptr, 0, ks, K, EVEN_K)
    hv = _vec(h_row, 0, ks, K, EVEN_K)
    if DEPTH >= 2:
        k1 = tl.minimum(1, last) * BLOCK_K
        w1 = _tile(w_ptr, k1, ks, K, EVEN_K)
        h1 = _vec(h_row, k1, ks, K, EVEN_K)
    for i in range(0, last + 1):  # the next DEPTH tiles are loaded before the current ones are used
        k_next = tl.minimum(i + DEPTH, last) * BLOCK_K
        w_next = _tile(w_ptr, k_next, ks, K, EVEN_K)
        h_next = _vec(h_row, k_next, ks, K, EVEN_K)
        acc += w.to(tl.float32) * hv.to(tl.float32)
        if DEPTH >= 2:
            w, hv = w1, h1
            w1, h1 = w_next, h_next
        else:
            w, hv = w_next, h_next
    # the pair's term, rounded as the grouped down kernel rounds it: the projection, then the weighting
    rw = tl.load(rw_ptr + pair).to(tl.float32)
    term = (tl.sum(acc, axis=1).to(out_ptr.dtype.element_ty).to(tl.float32) * rw).to(out_ptr.dtype.element_ty)
    token = pair // TOP_K
    parts = part_ptr + (token * TOP_K).to(tl.int64) * N + cols  # the token's first pair's columns
    tl.store(parts + (pair % TOP_K) * N, term.to(tl.float32), mask=cols < N)
    tl.debug_barrier()  # every thread's term is stored before this program counts itself in
    counter = count_ptr + token * tl.num_programs(1) + pid_n
    arrived = tl.atomic_add(counter, 1, sem="acq_rel", scope="gpu")
    if arrived == TOP_K - 1:  # the token's last pair for these columns: every term is visible
        total = tl.load(parts, mask=cols < N, other=0.0, cache_modifier=".cg")
        for k in tl.static_range(1, TOP_K):  # choice order: deterministic sums
            total += tl.load(parts + k * N, mask=cols < N, other=0.0, cache_modifier=".cg")
        tl.store(out_ptr + token.to(tl.int64) * stride_om + cols, total.to(out_ptr.dtype.element_ty), mask=cols < N)
        tl.store(counter, 0)  # zero for the next launch (graph replays)


@attrs.frozen
class DecodeConfig:
    """One launch configuration of either kernel (what the autotuner chooses among)."""

    block_n: int
    block_k: int
    depth: int = 1
    num_warps: int = 4

    def launch(self) -> dict:
        return {"BLOCK_N": self.block_n, "BLOCK_K": self.block_k, "DEPTH": self.depth, "num_warps": self.num_warps,
                "num_stages": 1}


def _launch(kernel, grid, config: DecodeConfig | None, *args, **kwargs) -> None:
    """``kernel`` autotuned, or (``config``) the given configuration: the autotuner's inner function (the
    ``EVEN_K`` heuristic still applies)."""
    if config is None:
        kernel[lambda meta: grid(meta["BLOCK_N"])](*args, **kwargs)
    else:
        kernel.fn[(grid(config.block_n))](*args, **kwargs, **config.launch())


def gate_up_act(x: torch.Tensor, gate_up: torch.Tensor, flat_ids: torch.Tensor, top_k: int,
                activation: str, config: DecodeConfig | None = None) -> torch.Tensor:
    """Launch 1: ``h[pair] = act_and_mul(gate_up[ids[pair]] @ x[pair // K])`` for every pair.

    Args:
        x: ``[T, H]`` unit stride along H; gate_up: ``[E, 2I, H]`` of x's dtype, unit stride along H;
        flat_ids: ``[T * K]`` contiguous int32 / int64 expert ids (pair ``t * K + k``); top_k: ``K``;
        activation: ``"silu"`` / ``"gelu_tanh"``; config: run this configuration instead of the autotuned one.

    Returns:
        ``[T * K, I]`` in x's dtype.
    """
    inter, hidden = gate_up.shape[1] // 2, gate_up.shape[2]
    pairs = flat_ids.numel()
    h = torch.empty((pairs, inter), dtype=x.dtype, device=x.device)
    _launch(_decode_gate_up_kernel, lambda block_n: (pairs, triton.cdiv(inter, block_n)), config,
            x, gate_up, h, flat_ids, pairs // top_k, inter, hidden, x.stride(0), gate_up.stride(0), gate_up.stride(1), h.stride(0),
            TOP_K=top_k, GELU=activation == "gelu_tanh", **pdl.launch_options(x))
    return h


def down_sum(h: torch.Tensor, down: torch.Tensor, flat_weights: torch.Tensor, flat_ids: torch.Tensor,
             top_k: int, config: DecodeConfig | None = None) -> torch.Tensor:
    """Launch 2: ``out[t] = round(sum_k round(round(down[e_tk] @ h[t K + k]) * weight_tk))`` (float32 sum).

    Args:
        h: ``[T * K, I]`` from :func:`gate_up_act`; down: ``[E, H, I]`` of h's dtype, unit stride along I;
        flat_weights: ``[T * K]`` contiguous routing weights (float32 or h's dtype); flat_ids: as for
            :func:`gate_up_act`; top_k: ``K``; config: as for :func:`gate_up_act`.

    Returns:
        ``[T, H]`` in h's dtype.
    """
    hidden, inter = down.shape[1], down.shape[2]
    pairs = flat_ids.numel()
    tokens = pairs // top_k
    out = torch.empty((tokens, hidden), dtype=h.dtype, device=h.device)
    parts = torch.empty((pairs, hidden), dtype=torch.float32, device=h.device)
    # one arrival counter per (token, column block); the narrowest block is MIN_DOWN_BLOCK_N columns
    counters = down_sum.counters.get(h.device, tokens * triton.cdiv(hidden, MIN_DOWN_BLOCK_N))
    _launch(_decode_down_kernel, lambda block_n: (pairs, triton.cdiv(hidden, block_n)), config,
            h, down, out, parts, counters, flat_weights, flat_ids, tokens, hidden, inter, h.stride(0), down.stride(0),
            down.stride(1), out.stride(0), TOP_K=top_k, **pdl.launch_options(h))
    return out


down_sum.counters = CounterPool(min_words=MAX_TOKENS * 1024)


def experts(x: torch.Tensor, gate_up: torch.Tensor, down: torch.Tensor, weights: torch.Tensor,
            expert_ids: torch.Tensor, activation: str,
            configs: tuple[DecodeConfig, DecodeConfig] | None = None) -> torch.Tensor:
    """The two launches on checked arguments (:func:`anna_xpu_kernels.moe.moe_experts` checks them):
    ``x`` ``[T >= 1, H >= 1]``, ``gate_up`` / ``down`` with unit stride along their last dims; ``configs``:
    the (gate/up, down) configurations to run instead of the autotuned ones.

    Returns:
        ``[T, H]`` in x's dtype, whatever :func:`takes` says (tests and benchmarks force this path).
    """
    top_k = expert_ids.shape[1]
    flat_ids = expert_ids.reshape(-1).contiguous()
    up_config, down_config = configs if configs is not None else (None, None)
    h = gate_up_act(x, gate_up, flat_ids, top_k, activation, up_config)
    return down_sum(h, down, weights.reshape(-1).contiguous(), flat_ids, top_k, down_config)
