"""The ``moe_route`` op in Triton: a MoE block's whole router after its gate projection in one launch.

It replaces the router's chain of small torch kernels (float32 softmax, ``topk``'s select and sort, the
renormalising sum and division, the per-expert scale gather, dtype copies: about 17 us per layer of a
Qwen3.5-35B-A3B decode step on an H200).

Grid: ``cdiv(T, BLOCK_T)`` programs, fixed by ``T`` (no host sync, so a step using it captures as a graph).
A program holds ``BLOCK_T`` token rows of the ``E`` logits in registers (``[BLOCK_T, BLOCK_E]``, ``E``
padded to a power of two, :data:`~anna_xpu_kernels.probes.MAX_ROUTE_EXPERTS` at most) and per row:

1. ``p = exp(x - max) / sum`` in float32 (the division rounded to nearest, as torch divides);
2. ``K`` rounds of argmax-and-mask: the largest remaining ``p``, the lowest index among equal maxima (the
   contract's tie rule), then that entry masked below every probability;
3. the ``K`` chosen divided by their sum, times ``expert_scale[id]`` in float32 when given, stored in
   ``weights_dtype``; the ids stored as int64.

Rows with a NaN probability (a NaN or +inf logit, or every logit -inf) get NaN weights and the ids
``0 .. K-1``. ``tl.exp`` may be a few float32 ulps off torch's ``exp`` (on NVIDIA it compiles to the
approximate base-2 exponential), so the ids can differ from the reference's only where two probabilities
are that close. Rows per program: one up to :data:`ONE_ROW_TOKENS` tokens (decode, small batches: most
programs, shortest latency), else up to 2048 values per program; warps scale with the tile (one warp
holds a row of up to 256 experts). These choices are not yet timed on a GPU
(``python -m anna_xpu_kernels.microbench --only moe`` times the op).

PDL: the kernel starts with :func:`anna_xpu_kernels.pdl.enter` (everything it reads comes from the
kernel before it, except the small ``expert_scale``, which it reads by the chosen ids).
"""

from __future__ import annotations

import torch
from anna_core.kernels.checks import require
from anna_core.kernels.reference.routing import check_moe_route

from anna_xpu_kernels import pdl
from anna_xpu_kernels._checks import as_rows, require_float, require_same_device
from anna_xpu_kernels._triton import next_pow2, tl, triton
from anna_xpu_kernels.probes import MAX_ROUTE_EXPERTS

_OP = "moe_route"
ONE_ROW_TOKENS = 128
"""Up to this many tokens every program takes one row."""
TILE_VALUES = 2048
"""Most ``BLOCK_T * BLOCK_E`` values of a program's tile when it takes several rows."""


@triton.jit(do_not_specialize=["num_rows"])
def _moe_route_kernel(logits_ptr, scale_ptr, weights_ptr, ids_ptr, num_rows, num_experts, stride_row,
                      TOP_K: tl.constexpr, HAS_SCALE: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_E: tl.constexpr,
                      BLOCK_K: tl.constexpr, USE_PDL: tl.constexpr):
    if USE_PDL:  # (no nested call otherwise: each costs the interpreter a few ms per program)
        pdl.enter(USE_PDL)
    rows = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    cols = tl.arange(0, BLOCK_E)
    row_ok = rows < num_rows
    col_ok = cols < num_experts
    x = tl.load(logits_ptr + rows.to(tl.int64)[:, None] * stride_row + cols[None, :],
                mask=row_ok[:, None] & col_ok[None, :], other=-float("inf")).to(tl.float32)  # [BLOCK_T, BLOCK_E]
    x = tl.where(row_ok[:, None], x, 0.0)  # rows beyond T: finite (no inf - inf), never stored
    e = tl.exp(x - tl.max(x, axis=1)[:, None])  # padding: exp(-inf) = 0
    total = tl.sum(e, axis=1)
    p = tl.math.div_rn(e, total[:, None])
    finite = total == total  # False where the row's probabilities are NaN
    # probabilities are >= 0: -1 marks padding (and NaN rows), -2 the experts already chosen
    key = tl.where(col_ok[None, :] & finite[:, None], p, -1.0)
    slots = tl.arange(0, BLOCK_K)
    top = tl.zeros((BLOCK_T, BLOCK_K), dtype=tl.float32)
    top_ids = tl.zeros((BLOCK_T, BLOCK_K), dtype=tl.int32)
    for k in range(TOP_K):
        best = tl.max(key, axis=1)
        pick = tl.min(tl.where(key == best[:, None], cols[None, :], BLOCK_E), axis=1)  # lowest index of the maxima
        key = tl.where(cols[None, :] == pick[:, None], -2.0, key)
        top = tl.where(slots[None, :] == k, best[:, None], top)
        top_ids = tl.where(slots[None, :] == k, pick[:, None], top_ids)
    slot_ok = slots < TOP_K
    w = tl.math.div_rn(top, tl.sum(top, axis=1)[:, None])  # unused slots hold 0
    if HAS_SCALE:
        w = w * tl.load(scale_ptr + top_ids, mask=slot_ok[None, :], other=0.0).to(tl.float32)
    w = tl.where(finite[:, None], w, float("nan"))
    out = rows.to(tl.int64)[:, None] * TOP_K + slots[None, :]
    out_ok = row_ok[:, None] & slot_ok[None, :]
    tl.store(weights_ptr + out, w.to(weights_ptr.dtype.element_ty), mask=out_ok)
    tl.store(ids_ptr + out, top_ids.to(tl.int64), mask=out_ok)


def block_rows(num_rows: int, block_e: int) -> int:
    """Rows per program: 1 up to :data:`ONE_ROW_TOKENS` rows, else as many as fit :data:`TILE_VALUES`
    values (at least 1, at most 16)."""
    if num_rows <= ONE_ROW_TOKENS:
        return 1
    return max(1, min(16, TILE_VALUES // block_e))


def moe_route(logits: torch.Tensor, top_k: int, expert_scale: torch.Tensor | None,
              weights_dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-``K`` softmax routing in one launch (the contract of
    :func:`anna_core.kernels.reference.routing.moe_route`; ``exp`` to within a few float32 ulps).

    Args:
        logits: ``[T, E]`` float32 / float16 / bfloat16, ``E <=`` :data:`~anna_xpu_kernels.probes.MAX_ROUTE_EXPERTS`
            (any row stride; copied when the last stride is not 1).
        top_k: ``K`` in ``[1, E]``.
        expert_scale: ``[E]`` float32 / float16 / bfloat16 on logits' device, or None.
        weights_dtype: ``torch.float32`` or logits' dtype.

    Returns:
        ``(weights [T, K] weights_dtype, expert_ids [T, K] int64)``, fresh tensors.

    Raises:
        ValueError: bad shapes, dtypes or ``top_k`` (:func:`~anna_core.kernels.reference.routing.check_moe_route`),
            an unsupported dtype, tensors on different devices, or more than ``MAX_ROUTE_EXPERTS`` experts.
    """
    check_moe_route(logits, top_k, expert_scale, weights_dtype)
    require_float(_OP, logits=logits, **({} if expert_scale is None else {"expert_scale": expert_scale}))
    require_same_device(_OP, logits=logits, expert_scale=expert_scale)
    num_rows, num_experts = logits.shape
    require(num_experts <= MAX_ROUTE_EXPERTS, _OP,
            f"E={num_experts} experts exceed the Triton kernel's {MAX_ROUTE_EXPERTS} (a row is held in registers); "
            "the torch reference takes any E")
    weights = torch.empty((num_rows, top_k), dtype=weights_dtype, device=logits.device)
    expert_ids = torch.empty((num_rows, top_k), dtype=torch.int64, device=logits.device)
    if num_rows == 0:
        return weights, expert_ids
    rows = as_rows(logits)
    scale = None if expert_scale is None else expert_scale.contiguous()
    block_e = next_pow2(num_experts)
    block_t = block_rows(num_rows, block_e)
    _moe_route_kernel[(triton.cdiv(num_rows, block_t),)](
        rows, scale if scale is not None else rows, weights, expert_ids, num_rows, num_experts, rows.stride(0),
        TOP_K=top_k, HAS_SCALE=scale is not None, BLOCK_T=block_t, BLOCK_E=block_e, BLOCK_K=next_pow2(top_k),
        num_warps=max(1, min(8, block_t * block_e // 256)), **pdl.launch_options(rows))
    return weights, expert_ids
