"""``per_layer_inputs`` in one Triton launch: Gemma 4's per-layer inputs of a step's tokens, where torch runs a
gather, four elementwise launches and a norm (six launches per step, at batch-1 decode each a few microseconds).

Math (the op's contract, :func:`anna_core.kernels.reference.norms.per_layer_inputs`): per token ``t`` and layer
``l``, over the ``P`` values of group ``l``: ``x = round(projected * projected_scale)``, ``n = round(x * rstd(x) *
w)`` (``w = 1 + weight`` zero-centred), ``e = round(table[ids[t]] * table_scale)``, ``y = round(round(n + e) *
out_scale)``; float32 math, each rounding to projected's dtype where torch rounds the expression.

Grid ``(T, L)``: one program per token and group (``P`` values: 256 at the released shapes). Programmatic dependent
launch: the norm's weight loads before the wait, everything else after it.
"""

from __future__ import annotations

import torch
from anna_core.kernels.reference.norms import check_per_layer_inputs

from anna_xpu_kernels import pdl
from anna_xpu_kernels._checks import require_float, require_same_device
from anna_xpu_kernels._triton import next_pow2, tl, triton


@triton.jit
def _per_layer_inputs_kernel(proj_ptr, ids_ptr, table_ptr, w_ptr, y_ptr, P, LP, stride_proj, stride_table,
                             table_scale, projected_scale, out_scale, eps,
                             ZERO_CENTERED: tl.constexpr, BLOCK_P: tl.constexpr, USE_PDL: tl.constexpr):
    pdl.launch_dependents(USE_PDL)
    t = tl.program_id(0)
    group = tl.program_id(1)
    p = tl.arange(0, BLOCK_P)
    ok = p < P
    w = tl.load(w_ptr + p, mask=ok, other=0.0, eviction_policy="evict_last").to(tl.float32)  # not written in the step
    if ZERO_CENTERED:
        w = w + 1.0
    pdl.wait(USE_PDL)
    dtype = y_ptr.dtype.element_ty
    col = group * P + p
    x = tl.load(proj_ptr + t.to(tl.int64) * stride_proj + col, mask=ok, other=0.0).to(tl.float32)
    x = (x * projected_scale).to(dtype).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / P + eps)
    n = (x * rstd * w).to(dtype).to(tl.float32)
    row = tl.load(ids_ptr + t).to(tl.int64)
    e = tl.load(table_ptr + row * stride_table + col, mask=ok, other=0.0).to(tl.float32)
    e = (e * table_scale).to(dtype).to(tl.float32)
    y = ((n + e).to(dtype).to(tl.float32) * out_scale).to(dtype)
    tl.store(y_ptr + t.to(tl.int64) * LP + col, y, mask=ok)


def per_layer_inputs(projected: torch.Tensor, ids: torch.Tensor, table: torch.Tensor, table_scale: float,
                     weight: torch.Tensor, eps: float, zero_centered: bool, projected_scale: float,
                     out_scale: float) -> torch.Tensor:
    """Signature of the reference ``per_layer_inputs``: one launch of ``T x L`` programs.

    Args:
        projected: ``[T, L*P]`` float32 / float16 / bfloat16 (unit stride along the last dim); ids: ``[T]`` integer
            token ids; table: ``[V, L*P]`` of projected's dtype (unit stride along the last dim); weight: ``[P]``;
            the scales: Python floats (taken as float32).

    Returns:
        ``[T, L, P]`` in projected's dtype.

    Raises:
        ValueError: shapes or dtypes disagree, unsupported dtype, or tensors on different devices.
    """
    op = "per_layer_inputs"
    check_per_layer_inputs(projected, ids, table, table_scale, weight, eps, zero_centered, projected_scale, out_scale)
    require_float(op, projected=projected)
    require_same_device(op, projected=projected, ids=ids, table=table, weight=weight)
    t, lp = projected.shape
    p = weight.shape[0]
    y = torch.empty((t, lp // p, p), dtype=projected.dtype, device=projected.device)
    if t == 0:
        return y
    if projected.stride(1) != 1:
        projected = projected.contiguous()
    if table.stride(1) != 1:
        table = table.contiguous()
    _per_layer_inputs_kernel[(t, lp // p)](
        projected, ids.to(torch.int64), table, weight.contiguous(), y, p, lp, projected.stride(0), table.stride(0),
        float(table_scale), float(projected_scale), float(out_scale), float(eps), ZERO_CENTERED=bool(zero_centered),
        BLOCK_P=next_pow2(p), num_warps=2 if p <= 512 else 4, **pdl.launch_options(projected))
    return y
