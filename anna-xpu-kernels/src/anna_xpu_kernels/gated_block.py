"""``post_norm_residual_gated_linear`` for one row in one launch: a sandwich-normed block's tail and the small gated
block that reads it (Gemma 4's per-layer-input gate and projection), where the unfused path runs two GEMVs.

Math (the op's contract, :mod:`anna_core.kernels.reference.fused_linear`), every step rounded to x's dtype where the
unfused ops round it: ``s = round(residual + round(x * rstd(x) * w))`` (then ``round(s * scale)`` with a layer
scale), the new residual ``[K]``; ``gate = round(gate_weight @ s)`` ``[P]``; ``a = round(round(act(gate)) * up)``
``[P]``; ``y = round(linear_weight @ a)`` ``[N]``.

Why. At batch-1 decode Gemma 4 E2B / E4B end every layer with two GEMVs of under 1.3 MB each (``[P, K]`` and
``[N, P]``, ``P = 256``): each is a launch whose few microseconds of latency dwarf its memory time. Here one launch
computes both.

Work split. The grid is ``(KB, NB)``: program ``(kb, nb)`` owns the ``BLOCK_G`` gate rows ``kb * BLOCK_G ...`` and
the ``BLOCK_N`` output rows ``nb * BLOCK_N ...``. Before the PDL wait it loads its first gate-weight tile and the post
norm's weight (weights: not written in the step). After the wait every program computes the whole row ``s``
(one pass for ``rstd(x)``; the row is a few KiB, from L2; program ``(0, 0)`` stores it as the new residual), then, in
steps of ``G_SUB`` gate rows (a ``[G_SUB, KP]`` weight tile each), its gate values, their gated products and the
products' share of its output rows (a ``[BLOCK_N, G_SUB]`` tile of ``linear_weight``), accumulated in float32 and
stored in a float32 workspace ``[KB, N]``. Each gate row is thus computed by the ``NB`` programs of its column (the
gate weight is read ``NB`` times, from L2 after the first). The programs of one output chunk then meet at an
acquire-release arrival counter (as the split-K GEMV's, :mod:`anna_xpu_kernels.counters`): the last of the ``KB`` to
arrive sums the ``KB`` partials of its rows (one ``[KB, BLOCK_N]`` load, a fixed reduction order: deterministic),
stores ``y``'s rows rounded, and zeroes the counter for the next launch (graph replays). No host sync.

The summation order of ``y`` differs from the GEMV's (partials over ``BLOCK_G`` inputs, then over the ``KB``
partials), so results agree with the unfused kernels to float32 rounding of the sum (then one rounding to x's
dtype), not bit for bit. Other shapes (more than one row, strided weights, ``K`` above :data:`MAX_K`) run the two
unfused kernels (:func:`anna_xpu_kernels.fused_linear.post_norm_residual_linear`, then
:func:`anna_xpu_kernels.fused_linear.gated_linear`). Opt-in until measured on a GPU (``ANNA_POST_NORM_GATED_LINEAR=1``:
the probe declines it otherwise).
"""

from __future__ import annotations

import torch
from anna_core.kernels.reference.fused_linear import check_post_norm_residual_gated_linear

from anna_xpu_kernels import fused_linear, pdl
from anna_xpu_kernels._checks import as_rows, require_float, require_same_device
from anna_xpu_kernels._triton import INTERPRETING, next_pow2, tl, triton
from anna_xpu_kernels.counters import CounterPool
from anna_xpu_kernels.gemv_prologue import act_mul, add_residual, normalize

MAX_K = 8192
"""Widest row taken (the whole row ``s`` is held in registers, ``KP = next_pow2(K)`` values)."""
TILE_VALUES = 8192
"""Gate-weight values per step of a program (``G_SUB * KP``)."""

_COUNTERS = CounterPool()
"""Arrival counters (one per output chunk), zero between launches."""


def launch_shape(k: int, p: int, n: int) -> tuple[int, int, int]:
    """``(G_SUB, BLOCK_G, BLOCK_N)`` for rows of ``k`` values, ``p`` gate rows and ``n`` outputs: gate steps of
    ``TILE_VALUES / KP`` rows, 16 gate rows per program (at most ``p`` rounded up to a power of two) and output
    chunks of 512 rows (at most ``n``'s power of two) — E2B (1536 / 256 / 1536): a ``16 x 3`` grid; E4B (2560): ``16 x
    5``. Not yet tuned on a GPU."""
    kp = next_pow2(k)
    g_sub = max(1, min(TILE_VALUES // kp, next_pow2(p)))
    block_g = max(g_sub, min(16, next_pow2(p)))
    return g_sub, block_g, min(512, next_pow2(n))


def takes(rows: torch.Tensor, gate_weight: torch.Tensor, up: torch.Tensor, linear_weight: torch.Tensor) -> bool:
    """Whether the one-launch kernel takes these (checked) arguments: one row of at most :data:`MAX_K` values on a
    CUDA device (or under the interpreter), contiguous weights, up with unit stride."""
    return (rows.shape[0] == 1 and rows.shape[1] <= MAX_K and (INTERPRETING or rows.device.type == "cuda")
            and gate_weight.is_contiguous() and linear_weight.is_contiguous() and up.stride(-1) == 1)


@triton.jit
def _gated_block_kernel(
    x_ptr, r_ptr, pw_ptr, scale_ptr, s_ptr, wg_ptr, up_ptr, wp_ptr, part_ptr, count_ptr, y_ptr,
    K, P, N, eps,
    HAS_SCALE: tl.constexpr, ZERO_CENTERED: tl.constexpr, GELU: tl.constexpr, KP: tl.constexpr,
    G_SUB: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_N: tl.constexpr, KB_P: tl.constexpr, USE_PDL: tl.constexpr,
):
    pdl.launch_dependents(USE_PDL)
    kb = tl.program_id(0)
    nb = tl.program_id(1)
    n_kb = tl.num_programs(0)
    kk = tl.arange(0, KP)
    k_ok = kk < K
    gs = tl.arange(0, G_SUB)
    g = kb * BLOCK_G + gs
    # weights are not written in the step: the post norm's and the first gate tile load before the PDL wait
    w_first = tl.load(wg_ptr + g[:, None].to(tl.int64) * K + kk[None, :], mask=(g < P)[:, None] & k_ok[None, :],
                      other=0.0, eviction_policy="evict_first")
    pw = tl.load(pw_ptr + kk, mask=k_ok, other=0.0, eviction_policy="evict_last")
    scale = 1.0
    if HAS_SCALE:
        scale = tl.load(scale_ptr, eviction_policy="evict_last").to(tl.float32)
    pdl.wait(USE_PDL)
    # the block's tail: s = round(residual + round(x * rstd(x) * w)) (* scale), as post_norm_residual rounds it
    a = tl.load(x_ptr + kk, mask=k_ok, other=0.0)
    af = a.to(tl.float32)
    s = add_residual(normalize(a, tl.rsqrt(tl.sum(af * af, axis=0) / K + eps), pw, x_ptr, ZERO_CENTERED),
                     tl.load(r_ptr + kk, mask=k_ok, other=0.0), x_ptr)
    if HAS_SCALE:
        s = (s.to(tl.float32) * scale).to(x_ptr.dtype.element_ty)
    tl.store(s_ptr + kk, s, mask=k_ok & (kb == 0) & (nb == 0))
    sf = s.to(tl.float32)

    n = nb * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = n < N
    part = tl.zeros((BLOCK_N,), tl.float32)
    for g0 in tl.static_range(0, BLOCK_G, G_SUB):
        g = kb * BLOCK_G + g0 + gs
        g_ok = g < P
        if g0 == 0:
            w = w_first
        else:
            w = tl.load(wg_ptr + g[:, None].to(tl.int64) * K + kk[None, :], mask=g_ok[:, None] & k_ok[None, :],
                        other=0.0, eviction_policy="evict_first")
        gate = tl.sum(w.to(tl.float32) * sf[None, :], axis=1).to(x_ptr.dtype.element_ty)  # the gate projection's rows
        act = act_mul(gate, tl.load(up_ptr + g, mask=g_ok, other=0.0), x_ptr, GELU).to(tl.float32)  # 0 past P
        wp = tl.load(wp_ptr + n[:, None].to(tl.int64) * P + g[None, :], mask=n_ok[:, None] & g_ok[None, :], other=0.0)
        part += tl.sum(wp.to(tl.float32) * act[None, :], axis=1)
    tl.store(part_ptr + kb * N + n, part, mask=n_ok)
    tl.debug_barrier()  # every thread's partials are stored before this program counts itself in
    counter = count_ptr + nb
    arrived = tl.atomic_add(counter, 1, sem="acq_rel", scope="gpu")
    if arrived == n_kb - 1:  # the last of this output chunk's programs: every partial is visible
        kbs = tl.arange(0, KB_P)
        parts = tl.load(part_ptr + kbs[:, None] * N + n[None, :], mask=(kbs < n_kb)[:, None] & n_ok[None, :],
                        other=0.0, cache_modifier=".cg")
        tl.store(y_ptr + n, tl.sum(parts, axis=0).to(y_ptr.dtype.element_ty), mask=n_ok)
        tl.store(counter, 0)  # zero for the next launch (graph replays)


def post_norm_residual_gated_linear(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float,
                                    zero_centered: bool, scale: torch.Tensor | None, gate_weight: torch.Tensor,
                                    up: torch.Tensor, linear_weight: torch.Tensor, activation: str,
                                    shape: tuple[int, int, int] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Signature of the reference ``post_norm_residual_gated_linear``: one launch for one row (see the module doc),
    else the two unfused kernels.

    Args:
        x, residual: ``[..., K]`` float32 / float16 / bfloat16, one dtype; weight: ``[K]``; eps, zero_centered: the
            post norm's; scale: one element of x's dtype, or None; gate_weight: ``[P, K]``; up: ``[..., P]`` (unit
            stride along P); linear_weight: ``[N, P]``; all of x's dtype. activation: ``"silu"`` or ``"gelu_tanh"``.
        shape: ``(G_SUB, BLOCK_G, BLOCK_N)`` instead of :func:`launch_shape`'s (tests).

    Returns:
        ``(y [..., N], new_residual [..., K])`` in x's dtype.

    Raises:
        ValueError: shapes or dtypes disagree, unsupported dtype or activation, or tensors on different devices.
    """
    op = "post_norm_residual_gated_linear"
    check_post_norm_residual_gated_linear(x, residual, weight, eps, zero_centered, scale, gate_weight, up,
                                          linear_weight, activation)
    require_float(op, x=x)
    require_same_device(op, x=x, residual=residual, weight=weight, scale=scale, gate_weight=gate_weight, up=up,
                        linear_weight=linear_weight)
    rows = as_rows(x)
    if not takes(rows, gate_weight, up, linear_weight):
        gate, new_residual = fused_linear.post_norm_residual_linear(x, residual, weight, eps, zero_centered, scale,
                                                                    None, gate_weight)
        return fused_linear.gated_linear(gate, up, linear_weight, activation), new_residual
    (_, k), (p, n) = rows.shape, (gate_weight.shape[0], linear_weight.shape[0])
    g_sub, block_g, block_n = shape or launch_shape(k, p, n)
    kb, nb = triton.cdiv(p, block_g), triton.cdiv(n, block_n)
    new_residual = torch.empty_like(rows)
    y = torch.empty((1, n), dtype=x.dtype, device=x.device)
    parts = torch.empty((kb, n), dtype=torch.float32, device=x.device)
    counters = _COUNTERS.get(x.device, nb)
    _gated_block_kernel[(kb, nb)](
        rows.contiguous(), as_rows(residual).contiguous(), weight.contiguous(), scale if scale is not None else y,
        new_residual, gate_weight, as_rows(up), linear_weight, parts, counters, y, k, p, n, float(eps),
        HAS_SCALE=scale is not None, ZERO_CENTERED=bool(zero_centered), GELU=activation == "gelu_tanh",
        KP=next_pow2(k), G_SUB=g_sub, BLOCK_G=block_g, BLOCK_N=block_n, KB_P=next_pow2(kb), num_warps=4,
        **pdl.launch_options(x))
    return y.view(*x.shape[:-1], n), new_residual.view(x.shape)
