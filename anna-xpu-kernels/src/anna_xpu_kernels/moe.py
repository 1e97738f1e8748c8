"""The ``moe_experts`` op in Triton: grouped GEMMs over the pairs sorted by expert, graph-capturable.

A call with a few tokens whose pairs mostly chose distinct experts (batch-1 decode) runs the per-pair
GEMVs of :mod:`anna_xpu_kernels.moe_decode` instead (two launches, the sum over ``K`` fused; chosen by
:func:`anna_xpu_kernels.moe_decode.takes`); every other call the grouped GEMMs:

Four launches, none reading anything on the host and every shape fixed by ``T``, ``K``, ``E``, ``H``
and ``I`` (so a step using it captures as a CUDA graph):

1. :func:`anna_xpu_kernels.moe_align.align`: the ``P = T * K`` (token, choice) pairs grouped by
   expert in runs padded to the row tile ``BLOCK_M``, the expert of each ``BLOCK_M``-row block and
   the used length, on the device.
2. ``_moe_gate_up_kernel`` over the static grid ``(max_blocks, cdiv(I, BLOCK_N))``: a program takes
   one block (one expert) and ``BLOCK_N`` intermediate columns, gathers its pairs' token rows of x and
   multiplies them by the expert's gate rows and up rows (two accumulators, x read once), then
   writes ``act_and_mul`` of them to ``h[pair]`` ``[P, I]``, rounded as the reference rounds: the
   projection to x's dtype, the activation to x's dtype, the product to x's dtype. Programs of unused
   blocks (beyond the device-side length) return at once.
3. ``_moe_down_kernel`` over ``(max_blocks, cdiv(H, BLOCK_N))``: ``h[pair] @ down[e]^T`` rounded to
   x's dtype, times the pair's routing weight in float32, rounded, to ``out[pair]`` ``[P, H]``.
4. ``out.view(T, K, H).sum(1)`` (torch: float32 accumulation in a fixed order, one rounding).

Each program reads only its block's expert, so at batch-1 decode (``T = 1``: ``K`` blocks of one row)
the launch streams exactly the ``K`` chosen experts' weights, split over ``K * cdiv(I, BLOCK_N)``
(gate/up) and ``K * cdiv(H, BLOCK_N)`` (down) programs. Products run on the tensor cores
(``tl.dot``, float32 accumulation; float32 inputs with ``input_precision="ieee"``, and under the
interpreter, whose bfloat16 ``tl.dot`` is wrong, upcast). ``BLOCK_M`` is 16 for decode-sized batches,
up to 64 for prefill (:func:`anna_xpu_kernels.moe_align.block_m_for`); the column and reduction
tiles, warps and stages are autotuned per (``BLOCK_M``, ``H``, ``I``, dtypes) on a device (one fixed
configuration under the interpreter). The tuning spaces were chosen for H100/H200-class GPUs and not
yet measured there.

Intermediates: ``h`` ``[P, I]`` and ``out`` ``[P, H]`` in x's dtype, from PyTorch's allocator.
:func:`gate_up_act` and :func:`down_weighted` launch stages 2 and 3 alone (for timing each stage).
"""

from __future__ import annotations

import torch
from anna_core.kernels.checks import require
from anna_core.kernels.reference.moe import check_moe_experts

from anna_xpu_kernels import moe_decode, pdl
from anna_xpu_kernels._checks import require_float, require_same_device
from anna_xpu_kernels._triton import INTERPRETING, autotune, tl, triton
from anna_xpu_kernels.gemv_prologue import act_mul
from anna_xpu_kernels.gemv_tuning import autotune_bench
from anna_xpu_kernels.moe_align import Blocks, align, block_m_for

_OP = "moe_experts"
PATHS = ("auto", "decode", "grouped")
"""Values of :func:`moe_experts`' ``path``."""


def _config(block_n: int, block_k: int, warps: int, stages: int) -> triton.Config:
    return triton.Config({"BLOCK_N": block_n, "BLOCK_K": block_k}, num_warps=warps, num_stages=stages)


DECODE_CONFIGS = [_config(n, k, w, s) for n, k, w, s in (
    (16, 256, 4, 4), (32, 128, 4, 4), (32, 256, 4, 3), (64, 128, 4, 4), (64, 64, 4, 5), (128, 128, 4, 3))]
"""Tiles tried for ``BLOCK_M = 16`` (weight-bound: narrow column tiles, so many programs stream weights)."""
PREFILL_CONFIGS = [_config(n, k, w, s) for n, k, w, s in (
    (64, 64, 4, 4), (64, 128, 4, 3), (128, 64, 4, 3), (128, 64, 8, 4), (128, 128, 8, 3), (256, 64, 8, 3))]
"""Tiles tried for ``BLOCK_M`` 32 and 64."""
FIXED = _config(32, 64, 4, 1)
"""The configuration run under the interpreter."""


def _prune(configs, named_args, **kwargs):
    """Of the given configurations, those of the launch's ``BLOCK_M`` kind (decode tiles for 16, prefill
    tiles above), without tiles much wider than the matrix."""
    other = {id(c) for c in (PREFILL_CONFIGS if kwargs["BLOCK_M"] <= 16 else DECODE_CONFIGS)}
    mine = [c for c in configs if id(c) not in other] or configs[:1]
    n, k = named_args["N"], named_args["K"]
    keep = [c for c in mine if c.kwargs["BLOCK_N"] <= max(32, triton.next_power_of_2(n))
            and c.kwargs["BLOCK_K"] <= max(32, triton.next_power_of_2(k))]
    return keep or mine[:1]


def _tuned(fn):
    return autotune(DECODE_CONFIGS + PREFILL_CONFIGS, fixed=FIXED, key=["BLOCK_M", "N", "K"],
                    prune_configs_by={"early_config_prune": _prune}, do_bench=autotune_bench)(
        triton.heuristics({"EVEN_K": lambda a: a["K"] % a["BLOCK_K"] == 0})(fn))


@triton.jit
def _block(sorted_ptr, block_expert_ptr, pid_m, pid_n, num_pairs, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
           BLOCK_K: tl.constexpr):
    """A used block's pairs (int64; the sentinel ``num_pairs`` in padding rows), which of them are real, its
    expert, the program's output columns and their mask, and the K offsets of one tile."""
    pairs = tl.load(sorted_ptr + pid_m * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    expert = tl.load(block_expert_ptr + pid_m).to(tl.int64)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    return pairs, pairs < num_pairs, expert, cols, cols < N, tl.arange(0, BLOCK_K)


@_tuned
@triton.jit(do_not_specialize=["num_pairs"])
def _moe_gate_up_kernel(x_ptr, gate_up_ptr, h_ptr, sorted_ptr, block_expert_ptr, num_padded_ptr,
                        num_pairs, top_k, N, K, stride_xm, stride_we, stride_wn, stride_hm,
                        GELU: tl.constexpr, UPCAST_DOT: tl.constexpr, EVEN_K: tl.constexpr, BLOCK_M: tl.constexpr,
                        BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, USE_PDL: tl.constexpr):
    # N = I (gated outputs), K = H; gate_up: [E, 2N, K] (gate rows, then up rows), unit stride along K
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    if USE_PDL:  # (no nested call otherwise: each costs the interpreter a few ms per program)
        pdl.enter(USE_PDL)
    if pid_m * BLOCK_M >= tl.load(num_padded_ptr):  # beyond the used blocks
        return
    pairs, valid, expert, cols, col_ok, ks = _block(sorted_ptr, block_expert_ptr, pid_m, pid_n, num_pairs, N,
                                                    BLOCK_M, BLOCK_N, BLOCK_K)
    tokens = pairs // top_k
    a_ptrs = x_ptr + tokens[:, None] * stride_xm + ks[None, :]
    g_ptrs = gate_up_ptr + expert * stride_we + cols.to(tl.int64)[None, :] * stride_wn + ks[:, None]  # [BLOCK_K, BLOCK_N]
    u_ptrs = g_ptrs + N * stride_wn
    acc_g = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc_u = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        if EVEN_K:
            a = tl.load(a_ptrs, mask=valid[:, None], other=0.0)
            g = tl.load(g_ptrs, mask=col_ok[None, :], other=0.0)
            u = tl.load(u_ptrs, mask=col_ok[None, :], other=0.0)
        else:
            k_ok = ks < K - k0
            a = tl.load(a_ptrs, mask=valid[:, None] & k_ok[None, :], other=0.0)
            g = tl.load(g_ptrs, mask=k_ok[:, None] & col_ok[None, :], other=0.0)
            u = tl.load(u_ptrs, mask=k_ok[:, None] & col_ok[None, :], other=0.0)
        if UPCAST_DOT:  # float32 inputs, or the interpreter (whose bfloat16 tl.dot is wrong): exact products
            a = a.to(tl.float32)
            acc_g = tl.dot(a, g.to(tl.float32), acc_g, input_precision="ieee")
            acc_u = tl.dot(a, u.to(tl.float32), acc_u, input_precision="ieee")
        else:
            acc_g = tl.dot(a, g, acc_g)
            acc_u = tl.dot(a, u, acc_u)
        a_ptrs += BLOCK_K
        g_ptrs += BLOCK_K
        u_ptrs += BLOCK_K
    gate = acc_g.to(h_ptr.dtype.element_ty)  # the projection's rounding
    up = acc_u.to(h_ptr.dtype.element_ty)
    h = act_mul(gate, up, h_ptr, GELU)
    tl.store(h_ptr + pairs[:, None] * stride_hm + cols[None, :], h, mask=valid[:, None] & col_ok[None, :])


@_tuned
@triton.jit(do_not_specialize=["num_pairs"])
def _moe_down_kernel(h_ptr, down_ptr, out_ptr, rw_ptr, sorted_ptr, block_expert_ptr, num_padded_ptr,
                     num_pairs, N, K, stride_hm, stride_we, stride_wn, stride_om,
                     UPCAST_DOT: tl.constexpr, EVEN_K: tl.constexpr, BLOCK_M: tl.constexpr,
                     BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, USE_PDL: tl.constexpr):
    # N = H, K = I; down: [E, N, K], unit stride along K; rw: [P] routing weights
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    if USE_PDL:  # (no nested call otherwise: each costs the interpreter a few ms per program)
        pdl.enter(USE_PDL)
    if pid_m * BLOCK_M >= tl.load(num_padded_ptr):  # beyond the used blocks
        return
    pairs, valid, expert, cols, col_ok, ks = _block(sorted_ptr, block_expert_ptr, pid_m, pid_n, num_pairs, N,
                                                    BLOCK_M, BLOCK_N, BLOCK_K)
    a_ptrs = h_ptr + pairs[:, None] * stride_hm + ks[None, :]
    w_ptrs = down_ptr + expert * stride_we + cols.to(tl.int64)[None, :] * stride_wn + ks[:, None]  # [BLOCK_K, BLOCK_N]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        if EVEN_K:
            a = tl.load(a_ptrs, mask=valid[:, None], other=0.0)
            w = tl.load(w_ptrs, mask=col_ok[None, :], other=0.0)
        else:
            k_ok = ks < K - k0
            a = tl.load(a_ptrs, mask=valid[:, None] & k_ok[None, :], other=0.0)
            w = tl.load(w_ptrs, mask=k_ok[:, None] & col_ok[None, :], other=0.0)
        if UPCAST_DOT:
            acc = tl.dot(a.to(tl.float32), w.to(tl.float32), acc, input_precision="ieee")
        else:
            acc = tl.dot(a, w, acc)
        a_ptrs += BLOCK_K
        w_ptrs += BLOCK_K
    rw = tl.load(rw_ptr + pairs, mask=valid, other=0.0).to(tl.float32)
    y = acc.to(out_ptr.dtype.element_ty).to(tl.float32) * rw[:, None]  # the projection's rounding, then the weight
    tl.store(out_ptr + pairs[:, None] * stride_om + cols[None, :], y.to(out_ptr.dtype.element_ty),
             mask=valid[:, None] & col_ok[None, :])


def _unit_last(t: torch.Tensor) -> torch.Tensor:
    return t if t.stride(-1) == 1 else t.contiguous()


def _common(x: torch.Tensor, blocks: Blocks) -> dict:
    return {"UPCAST_DOT": INTERPRETING or x.dtype == torch.float32, "BLOCK_M": blocks.block_m,
            **pdl.launch_options(x)}


def gate_up_act(x: torch.Tensor, gate_up: torch.Tensor, blocks: Blocks, activation: str) -> torch.Tensor:
    """Stage 2: ``h[pair] = act_and_mul(gate_up[e] @ x[token])`` for every pair of ``blocks``.

    Args:
        x: ``[T, H]`` unit stride along H; gate_up: ``[E, 2I, H]`` of x's dtype, unit stride along H;
        blocks: from :func:`~anna_xpu_kernels.moe_align.align`; activation: ``"silu"`` / ``"gelu_tanh"``.

    Returns:
        ``[T * K, I]`` in x's dtype, row ``t * K + k`` for token ``t``'s ``k``-th choice.
    """
    inter, hidden = gate_up.shape[1] // 2, gate_up.shape[2]
    h = torch.empty((blocks.num_pairs, inter), dtype=x.dtype, device=x.device)
    _moe_gate_up_kernel[lambda meta: (blocks.num_blocks, triton.cdiv(inter, meta["BLOCK_N"]))](
        x, gate_up, h, blocks.sorted_pairs, blocks.block_experts, blocks.num_padded, blocks.num_pairs, blocks.top_k,
        inter, hidden, x.stride(0), gate_up.stride(0), gate_up.stride(1), h.stride(0),
        GELU=activation == "gelu_tanh", **_common(x, blocks))
    return h


def down_weighted(h: torch.Tensor, down: torch.Tensor, flat_weights: torch.Tensor, blocks: Blocks) -> torch.Tensor:
    """Stage 3: ``out[pair] = round(round(down[e] @ h[pair]) * weight[pair])``.

    Args:
        h: ``[T * K, I]`` from :func:`gate_up_act`; down: ``[E, H, I]`` of h's dtype, unit stride along I;
        flat_weights: ``[T * K]`` contiguous routing weights (float32 or h's dtype); blocks: as for
            :func:`gate_up_act`.

    Returns:
        ``[T * K, H]`` in h's dtype.
    """
    hidden, inter = down.shape[1], down.shape[2]
    out = torch.empty((blocks.num_pairs, hidden), dtype=h.dtype, device=h.device)
    _moe_down_kernel[lambda meta: (blocks.num_blocks, triton.cdiv(hidden, meta["BLOCK_N"]))](
        h, down, out, flat_weights, blocks.sorted_pairs, blocks.block_experts, blocks.num_padded, blocks.num_pairs,
        hidden, inter, h.stride(0), down.stride(0), down.stride(1), out.stride(0), **_common(h, blocks))
    return out


def moe_experts(x: torch.Tensor, gate_up: torch.Tensor, down: torch.Tensor, weights: torch.Tensor,
                expert_ids: torch.Tensor, activation: str, path: str = "auto") -> torch.Tensor:
    """Routed experts (signature and rounding of :func:`anna_core.kernels.reference.moe.moe_experts`,
    except that the ``K`` weighted terms are added in float32 and rounded once).

    A few tokens whose pairs mostly chose distinct experts (:func:`anna_xpu_kernels.moe_decode.takes`) run
    the per-pair GEMVs of :mod:`anna_xpu_kernels.moe_decode` (two launches); others the grouped GEMMs.

    Args:
        x: ``[T, H]`` float32 / float16 / bfloat16 (any row stride; copied when the last stride is not 1).
        gate_up: ``[E, 2I, H]`` of x's dtype; down: ``[E, H, I]`` of x's dtype (unit stride along the last
            dim expected; otherwise a contiguous copy is made per call).
        weights: ``[T, K]`` float32 or x's dtype; expert_ids: ``[T, K]`` int32 / int64 in ``[0, E)``
            (not checked: no host sync; a pair with an id outside leaves its term undefined).
        activation: ``"silu"`` or ``"gelu_tanh"``.
        path: ``"auto"`` (the choice above), ``"decode"`` or ``"grouped"`` (forced: tests and benchmarks;
            not part of the op's signature).

    Returns:
        ``[T, H]`` in x's dtype (a fresh tensor).

    Raises:
        ValueError: bad shapes or dtypes (:func:`~anna_core.kernels.reference.moe.check_moe_experts`),
            an unsupported dtype, or tensors on different devices.
    """
    check_moe_experts(x, gate_up, down, weights, expert_ids, activation)
    require(path in PATHS, _OP, f"path must be one of {PATHS}, got {path!r}")
    require_float(_OP, x=x)
    require_same_device(_OP, x=x, gate_up=gate_up, down=down, weights=weights, expert_ids=expert_ids)
    t, hidden = x.shape
    top_k = expert_ids.shape[1]
    num_pairs = t * top_k
    if num_pairs == 0 or hidden == 0:
        return torch.zeros((t, hidden), dtype=x.dtype, device=x.device)
    require(num_pairs < 2**31, _OP, f"T*K={num_pairs} pairs exceed the kernels' int32 indices")
    x, gate_up, down = _unit_last(x), _unit_last(gate_up), _unit_last(down)
    if path == "decode" or (path == "auto" and moe_decode.takes(t, top_k, gate_up.shape[0])):
        return moe_decode.experts(x, gate_up, down, weights, expert_ids, activation)
    blocks = align(expert_ids, gate_up.shape[0], block_m_for(num_pairs, gate_up.shape[0]))
    h = gate_up_act(x, gate_up, blocks, activation)
    flat_weights = weights.reshape(-1)
    out = down_weighted(h, down, flat_weights if flat_weights.is_contiguous() else flat_weights.contiguous(), blocks)
    return out if top_k == 1 else out.view(t, top_k, hidden).sum(dim=1)
