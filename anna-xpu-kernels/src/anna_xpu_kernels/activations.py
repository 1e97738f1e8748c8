"""Gated activations in Triton: the SwiGLU product and the attention output gate, one launch each.

Math, per element, as the torch references (:mod:`anna_core.kernels.reference.activations`) evaluate
the eager expressions ``F.silu(gate) * up`` and ``x * torch.sigmoid(gate)`` in the activation dtype:
the activation is computed in float32 and rounded to the activation dtype, then the product is taken
in float32 and rounded again (both roundings are no-ops in float32)::

    silu_and_mul:  y = round(round(g / (1 + exp(-g))) * u)     x = [gate | up] along the last dim
    sigmoid_mul:   y = round(x * round(1 / (1 + exp(-gate))))

Each program covers a ``BLOCK_M x BLOCK_N`` tile (at most 1024 values) of the output rows, so any
row length works; every input element is read once and every output element written once.
"""

from __future__ import annotations

import torch

from anna_xpu_kernels import pdl
from anna_xpu_kernels._checks import as_rows, require, require_float, require_same_device
from anna_xpu_kernels._triton import autotune, next_pow2, tl, triton

MAX_BLOCK_N = 1024
"""Most columns of one program's tile."""
_TILE = 1024
"""Most values of one program's tile (``BLOCK_M * BLOCK_N``)."""

_WARPS = [triton.Config({}, num_warps=w) for w in (1, 2, 4, 8)]


@autotune(_WARPS, fixed=triton.Config({}, num_warps=4), key=["BLOCK_M", "BLOCK_N"])
@triton.jit(do_not_specialize=['n_rows'])
def _silu_and_mul_kernel(
    x_ptr, y_ptr, n_rows, inter, stride_x, stride_y,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, USE_PDL: tl.constexpr,
):
    pdl.enter(USE_PDL)
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows < n_rows)[:, None] & (cols < inter)[None, :]
    rows64 = rows.to(tl.int64)[:, None]
    x_row = x_ptr + rows64 * stride_x + cols[None, :]
    g = tl.load(x_row, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(x_row + inter, mask=mask, other=0.0).to(tl.float32)
    act = (g / (1.0 + tl.exp(-g))).to(y_ptr.dtype.element_ty).to(tl.float32)
    tl.store(y_ptr + rows64 * stride_y + cols[None, :], (act * u).to(y_ptr.dtype.element_ty), mask=mask)


@autotune(_WARPS, fixed=triton.Config({}, num_warps=4), key=["BLOCK_M", "BLOCK_N"])
@triton.jit(do_not_specialize=['n_rows'])
def _sigmoid_mul_kernel(
    x_ptr, gate_ptr, y_ptr, n_rows, inner, dim, stride_xa, stride_xb, stride_ga, stride_gb,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, USE_PDL: tl.constexpr,
):
    pdl.enter(USE_PDL)
    # Row r of the [A * B, D] output is (a, b) = (r // inner, r % inner) of the [A, B, D] inputs.
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows < n_rows)[:, None] & (cols < dim)[None, :]
    rows64 = rows.to(tl.int64)
    a, b = rows64 // inner, rows64 % inner
    x = tl.load(x_ptr + (a * stride_xa + b * stride_xb)[:, None] + cols[None, :], mask=mask, other=0.0)
    g = tl.load(gate_ptr + (a * stride_ga + b * stride_gb)[:, None] + cols[None, :], mask=mask, other=0.0)
    sig = (1.0 / (1.0 + tl.exp(-g.to(tl.float32)))).to(y_ptr.dtype.element_ty).to(tl.float32)
    y = (x.to(tl.float32) * sig).to(y_ptr.dtype.element_ty)
    tl.store(y_ptr + rows64[:, None] * dim + cols[None, :], y, mask=mask)


def _tile(n_cols: int) -> tuple[int, int]:
    """``(BLOCK_M, BLOCK_N)`` for rows of ``n_cols`` values."""
    block_n = min(next_pow2(n_cols), MAX_BLOCK_N)
    return max(1, min(16, _TILE // block_n)), block_n


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """Fused ``silu(gate) * up`` (signature of :func:`anna_core.kernels.reference.activations.silu_and_mul`).

    Args:
        x: ``[..., 2I]`` float32 / float16 / bfloat16: gate values, then up values.

    Returns:
        ``[..., I]`` in x's dtype (a fresh tensor).

    Raises:
        ValueError: x has no dimension, an odd last dimension, or an unsupported dtype.
    """
    op = "silu_and_mul"
    require(x.dim() >= 1 and x.shape[-1] % 2 == 0, op,
            f"x must be [..., 2I] with an even last dim, got shape {tuple(x.shape)}")
    require_float(op, x=x)
    inter = x.shape[-1] // 2
    x2 = as_rows(x)
    y2 = torch.empty((x2.shape[0], inter), dtype=x.dtype, device=x.device)
    if x2.shape[0] and inter:
        block_m, block_n = _tile(inter)
        grid = (triton.cdiv(x2.shape[0], block_m), triton.cdiv(inter, block_n))
        _silu_and_mul_kernel[grid](x2, y2, x2.shape[0], inter, x2.stride(0), y2.stride(0),
                                   BLOCK_M=block_m, BLOCK_N=block_n, **pdl.launch_options(x2))
    return y2.view(*x.shape[:-1], inter)


def _as_3d(t: torch.Tensor) -> torch.Tensor:
    """``[..., B, D]`` -> ``[A, B, D]`` (a view when possible) with unit stride along D."""
    if t.dim() == 1:
        t = t.view(1, 1, -1)
    elif t.dim() == 2:
        t = t.unsqueeze(1)
    elif t.dim() > 3:
        t = t.reshape(-1, t.shape[-2], t.shape[-1])
    return t if t.stride(-1) == 1 else t.contiguous()


def sigmoid_mul(x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    """Fused ``x * sigmoid(gate)`` (signature of :func:`anna_core.kernels.reference.activations.sigmoid_mul`).

    Args:
        x: ``[..., D]`` float32 / float16 / bfloat16 (e.g. attention output ``[T, H, D]``).
        gate: x's shape and dtype; any strides (read in place when the last-dim stride is 1, as for
            Qwen3.5's ``q_gate[..., D:]``).

    Returns:
        ``[..., D]`` contiguous, in x's dtype (a fresh tensor).

    Raises:
        ValueError: gate's shape or dtype differs from x's, unsupported dtype, different devices.
    """
    op = "sigmoid_mul"
    require(gate.shape == x.shape, op, f"gate must match x's shape {tuple(x.shape)}, got {tuple(gate.shape)}")
    require(gate.dtype == x.dtype, op, f"gate must have x's dtype {x.dtype}, got {gate.dtype}")
    require(x.dim() >= 1, op, "x must have at least one dimension")
    require_float(op, x=x)
    require_same_device(op, x=x, gate=gate)
    x3, g3 = _as_3d(x), _as_3d(gate)
    outer, inner, dim = x3.shape
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    n_rows = outer * inner
    if n_rows and dim:
        block_m, block_n = _tile(dim)
        grid = (triton.cdiv(n_rows, block_m), triton.cdiv(dim, block_n))
        _sigmoid_mul_kernel[grid](x3, g3, y, n_rows, inner, dim, x3.stride(0), x3.stride(1), g3.stride(0),
                                  g3.stride(1), BLOCK_M=block_m, BLOCK_N=block_n, **pdl.launch_options(y))
    return y
