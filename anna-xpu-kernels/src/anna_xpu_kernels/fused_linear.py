"""The small op next to a decode projection fused into the GEMV: one launch instead of two.

``add_rms_norm_linear`` (residual add + RMSNorm + input projection) and ``act_mul_linear`` (gated
product + ``down_proj``) run the decode GEMV (:mod:`anna_xpu_kernels.gemv`) with a prologue
(:mod:`anna_xpu_kernels.gemv_prologue`) that computes each activation tile from the raw inputs;
``linear_act_mul`` (merged gate/up projection + gated product) runs it with a gated epilogue, and
``add_rms_norm_linear_act_mul`` (the MLP's norm, gate/up projection and product) with both;
``post_norm_residual_linear`` (a sandwich-normed block's post norm, residual add, layer scale and next
norm, then the projection reading the result; Gemma) runs the one-wave GEMV's post-norm prologue. The
activation (``"silu"``: SwiGLU, ``"gelu_tanh"``: GeGLU) picks the prologue / epilogue mode, a
compile-time constant of the kernels (``SILU_MUL`` / ``GELU_TANH_MUL``, ``SILU_MUL_OUT`` /
``GELU_TANH_MUL_OUT``), so each activation compiles its own specialisation and SiLU's is unchanged.
All keep the roundings of the unfused references
(:mod:`anna_core.kernels.reference.fused_linear`). Split-K, the tensor-core path and autotuning (keyed
on the prologue and epilogue modes too) work as for the plain GEMV.

The epilogue does no extra memory work, unlike the prologues: the program that finishes a block of
columns computes the product on values it already holds. Timed alone the fused launch takes about
as long as GEMV + ``silu_and_mul``; its gain is the launch boundary it removes from the decode step
(BENCHMARKS.md, second and fourth sessions). ``linear_act_mul`` fuses wherever the GEMV takes the shapes, with or without programmatic dependent
launch.

The norm prologue fuses where :func:`norm_prologue_pays` (measured on an H200; with programmatic
dependent launch one row of at most 2048 values), the SiLU-mul prologue where :func:`prologue_pays`.
Outside the GEMV's domain (more rows than :func:`anna_xpu_kernels._env.gemv_max_rows`, 16 unless
``ANNA_GEMV_MAX_ROWS`` says fewer; a weight that is not a contiguous ``[N, K]`` of x's
dtype) or where fusing does not pay, the ops run unfused: the Triton ``add_rms_norm`` /
``silu_and_mul`` kernel (the torch ``act_and_mul`` reference for ``"gelu_tanh"``), then
:func:`anna_xpu_kernels.gemv.linear` (``F.linear`` beyond those rows) or :func:`linear_act_mul`.
"""

from __future__ import annotations

import math

import torch
from anna_core.kernels.checks import require
from anna_core.kernels.reference.activations import act_and_mul as reference_act_and_mul
from anna_core.kernels.reference.fused_linear import (
    check_act_mul_linear,
    check_add_rms_norm_linear,
    check_add_rms_norm_linear_act_mul,
    check_gated_linear,
    check_linear_act_mul,
    check_post_norm_residual_linear,
)

from anna_xpu_kernels import activations, gemv, gemv_persistent, norms, pdl, post_norms
from anna_xpu_kernels._checks import as_rows, require_float, require_same_device
from anna_xpu_kernels._env import gemv_persistent_requested, norm_prologue_requested, post_norm_prologue_requested
from anna_xpu_kernels.gemv_epilogue import GATED_EPILOGUES, NO_EPILOGUE
from anna_xpu_kernels.gemv_prologue import (
    ADD_RMS_NORM,
    GATED_PROLOGUES,
    GATED_SPLIT_PROLOGUES,
    POST_NORM_RESIDUAL,
    POST_RESIDUAL,
    RMS_NORM,
)

MAX_K = 1024
"""Longest row the norm prologue takes without programmatic dependent launch: every program re-reads
its rows (``M * K`` values, from L2) to get their mean square, which the H200 microbenchmark found to pay
at K = 1024 and to lose at K = 2048 and 4096 (BENCHMARKS.md, second session)."""
SILU_MAX_K = 8192
"""Longest SwiGLU half the SiLU-mul prologue takes (the same measurement: it paid up to K = 6144, not at
12288)."""


def act_and_mul(x: torch.Tensor, activation: str) -> torch.Tensor:
    """The unfused gated product: the Triton ``silu_and_mul`` kernel for ``"silu"``, the torch reference
    (:func:`anna_core.kernels.reference.activations.act_and_mul`) for ``"gelu_tanh"``."""
    if activation == "silu":
        return activations.silu_and_mul(x)
    return reference_act_and_mul(x, activation)


def prologue_pays(x: torch.Tensor, k: int, max_k: int) -> bool:
    """Whether fusing the SiLU-mul prologue of width ``k`` into the GEMV on x's device is expected to
    be faster: ``k <= max_k`` and the kernels launch without programmatic dependent launch
    (:mod:`anna_xpu_kernels.pdl`; with it the separate ``silu_and_mul`` starts while the projection
    before it finishes, and the GEMV after it prefetches its first weight tile meanwhile)."""
    return k <= max_k and not pdl.enabled(x)


NORM_FUSE_K = 2048
"""With programmatic dependent launch, the norm is fused for one row of at most this width: the widths
measured in the decode step (2B, K = 2048; 0.8B, K = 1024; M = 1)."""


def norm_prologue_pays(x: torch.Tensor, k: int) -> bool:
    """Whether to fuse the residual add + RMSNorm of rows of width ``k`` into the GEMV after it
    (``ANNA_GEMV_NORM_PROLOGUE`` overrides, :func:`anna_xpu_kernels._env.norm_prologue_requested`).

    With programmatic dependent launch: for one row (batch-1 decode) of at most :data:`NORM_FUSE_K`
    values. With the CUDA-core tiles the prologue's row pass is then one load
    (:func:`anna_xpu_kernels.gemv_prologue.row_block`; the tensor-core tiles pad to 16 rows and loop,
    and the autotuner times both), so it adds one L2 round trip after the wait and saves a launch. In
    graph-replayed decode steps on an H200 fusing the 2B shape's pre-projection norms measured within the
    run-to-run spread and the 0.8B shape's a little faster (BENCHMARKS.md, fifth session); wider rows (the
    9B width, K = 4096) and more rows were not measured in the step and stay unfused. Without PDL:
    ``k <= MAX_K`` at any row count the GEMV takes (since its default became 16 rows, 9-16 rows fuse there too:
    unmeasured, no such device was at hand).

    Those measurements ran the tiled GEMV. One row now takes the one-wave kernel
    (:mod:`anna_xpu_kernels.gemv_persistent`), which computes the normalised row once per program
    rather than once per tile, so the fusion costs it less; it is measured fused at the 2B and 0.8B
    widths (BENCHMARKS.md), and the 9B width is still left unfused, unmeasured.
    """
    forced = norm_prologue_requested()
    if forced is not None:
        return forced
    if not pdl.enabled(x):
        return k <= MAX_K
    return x.numel() == k and 0 < k <= NORM_FUSE_K


def _add_rms_norm_then(op: str, x: torch.Tensor, residual: torch.Tensor | None, norm_weight: torch.Tensor,
                       eps: float, zero_centered: bool, weight: torch.Tensor, config: gemv.GemvConfig | None,
                       fuse: bool | None, epilogue: int, unfused) -> tuple[torch.Tensor, torch.Tensor]:
    """The body of the norm-prologue ops once their shapes are checked: the GEMV with the norm prologue
    and ``epilogue`` where it takes the shapes and fusing pays (:func:`norm_prologue_pays`, or
    ``fuse``), else the Triton ``add_rms_norm`` then ``unfused(h)``. Returns ``(y, new_residual)``
    (``x`` itself without a residual)."""
    require_float(op, x=x)
    require_same_device(op, x=x, residual=residual, norm_weight=norm_weight, weight=weight)
    if not (gemv.supports(x, weight) and (norm_prologue_pays(x, weight.shape[1]) if fuse is None else fuse)):
        h, new_residual = norms.add_rms_norm(x, residual, norm_weight, eps, zero_centered)
        return unfused(h), new_residual
    x2 = as_rows(x)
    norm_weight = norm_weight.contiguous()
    if residual is None:
        prologue, new2 = gemv.Prologue(RMS_NORM, norm_weight=norm_weight, eps=eps, zero_centered=zero_centered), None
    else:
        new2 = torch.empty(x2.shape, dtype=x2.dtype, device=x2.device)
        prologue = gemv.Prologue(ADD_RMS_NORM, as_rows(residual), norm_weight, new2, eps, zero_centered)
    y = gemv.launch(x2, weight, None, config, prologue, epilogue)
    return y.view(*x.shape[:-1], y.shape[-1]), x if new2 is None else new2.view(x.shape)


def add_rms_norm_linear(x: torch.Tensor, residual: torch.Tensor | None, norm_weight: torch.Tensor, eps: float,
                        zero_centered: bool, weight: torch.Tensor, config: gemv.GemvConfig | None = None,
                        fuse: bool | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Residual add + RMSNorm + bias-free linear (signature of the reference ``add_rms_norm_linear``).

    Args:
        x: ``[M, K]`` (or ``[..., K]``) float32 / float16 / bfloat16; residual: x's shape and dtype, or
            None; norm_weight: ``[K]`` (any float dtype); eps: added to the mean square;
            zero_centered: scale by ``1 + norm_weight``; weight: ``[N, K]`` of x's dtype.
        config: run this GEMV configuration instead of the autotuned one (tests).
        fuse: None fuses where :func:`norm_prologue_pays`; True wherever the GEMV takes the shapes
            (microbenchmarks); False never.

    Returns:
        ``(y, new_residual)``: ``y`` ``[..., N]`` and ``new_residual = round(x + residual)`` ``[..., K]``
        (``x`` itself when residual is None), both in x's dtype; the inputs are not written.

    Raises:
        ValueError: shapes or dtypes disagree, unsupported dtype, or tensors on different devices.
    """
    op = "add_rms_norm_linear"
    check_add_rms_norm_linear(x, residual, norm_weight, weight)
    return _add_rms_norm_then(op, x, residual, norm_weight, eps, zero_centered, weight, config, fuse,
                              gemv.NO_EPILOGUE, lambda h: gemv.linear(h, weight, None))


def act_mul_linear(x: torch.Tensor, weight: torch.Tensor, activation: str = "silu",
                   config: gemv.GemvConfig | None = None, fuse: bool | None = None) -> torch.Tensor:
    """Gated product + bias-free linear (signature of the reference ``act_mul_linear``).

    Args:
        x: ``[M, 2K]`` (or ``[..., 2K]``) float32 / float16 / bfloat16: gate values, then up values.
        weight: ``[N, K]`` of x's dtype.
        activation: ``"silu"`` (SwiGLU) or ``"gelu_tanh"`` (GeGLU), the prologue's constexpr mode.
        config: run this GEMV configuration instead of the autotuned one (tests).
        fuse: None fuses where :func:`prologue_pays` (``SILU_MAX_K``); True wherever the GEMV takes the
            shapes (microbenchmarks); False never.

    Returns:
        ``[..., N]`` in x's dtype: ``act_and_mul(x, activation) @ weight^T`` (the product rounded to x's
        dtype first).

    Raises:
        ValueError: shapes or dtypes disagree, unsupported dtype or activation, or tensors on different devices.
    """
    op = "act_mul_linear"
    check_act_mul_linear(x, weight, activation)
    require_float(op, x=x)
    require_same_device(op, x=x, weight=weight)
    k = weight.shape[1]
    if not (gemv.supports(x, weight) and (prologue_pays(x, k, SILU_MAX_K) if fuse is None else fuse)):
        return gemv.linear(act_and_mul(x, activation), weight, None)
    y = gemv.launch(as_rows(x), weight, None, config, gemv.Prologue(GATED_PROLOGUES[activation]))
    return y.view(*x.shape[:-1], weight.shape[0])


def gated_linear(gate: torch.Tensor, up: torch.Tensor, weight: torch.Tensor, activation: str,
                 config: gemv.GemvConfig | None = None) -> torch.Tensor:
    """Gated product of two tensors + bias-free linear (signature of the reference ``gated_linear``): the
    GEMV with the split gated prologue (up read through the residual pointer), one launch for 1..16 rows (fewer with
    ``ANNA_GEMV_MAX_ROWS``);
    beyond the GEMV's domain the product (torch ``act_and_mul`` of the two) then :func:`gemv.linear`. The
    alternative to fusing is two elementwise launches, so it fuses wherever the GEMV takes the shapes.

    Args:
        gate, up: ``[M, K]`` (or ``[..., K]``) of weight's dtype, unit stride along K (up may have any row
            stride); weight: ``[N, K]``; activation: ``"silu"`` or ``"gelu_tanh"``.
        config: run this GEMV configuration instead of the autotuned one (tests).

    Returns:
        ``[..., N]`` in gate's dtype.

    Raises:
        ValueError: shapes or dtypes disagree, unsupported dtype or activation, or tensors on different devices.
    """
    op = "gated_linear"
    check_gated_linear(gate, up, weight, activation)
    require_float(op, gate=gate)
    require_same_device(op, gate=gate, up=up, weight=weight)
    g2, u2 = as_rows(gate), as_rows(up)
    if not gemv.supports(g2, weight) or g2.stride(-1) != 1 or u2.stride(-1) != 1:
        return gemv.linear(act_and_mul(torch.cat([gate, up], dim=-1), activation), weight, None)
    y = gemv.launch(g2, weight, None, config, gemv.Prologue(GATED_SPLIT_PROLOGUES[activation], residual=u2))
    return y.view(*gate.shape[:-1], weight.shape[0])


def linear_act_mul(x: torch.Tensor, weight: torch.Tensor, activation: str = "silu",
                   config: gemv.GemvConfig | None = None) -> torch.Tensor:
    """Merged gate/up projection + gated product (signature of the reference ``linear_act_mul``).

    Args:
        x: ``[M, K]`` (or ``[..., K]``) float32 / float16 / bfloat16.
        weight: ``[2I, K]`` of x's dtype: gate rows, then up rows.
        activation: ``"silu"`` (SwiGLU) or ``"gelu_tanh"`` (GeGLU), the epilogue's constexpr mode.
        config: run this GEMV configuration instead of the autotuned one (tests).

    Returns:
        ``[..., I]`` in x's dtype: ``act_and_mul(x @ weight^T, activation)``, the projection rounded to
        x's dtype first. One GEMV launch with the gated epilogue for 1..16 rows (fewer with ``ANNA_GEMV_MAX_ROWS``); beyond
        the GEMV's
        domain, ``F.linear`` then :func:`act_and_mul`.

    Raises:
        ValueError: shapes or dtypes disagree, unsupported dtype or activation, tensors on different
            devices, or a forced ``config`` with ``block_n < 2``.
    """
    op = "linear_act_mul"
    check_linear_act_mul(x, weight, activation)
    require_float(op, x=x)
    require_same_device(op, x=x, weight=weight)
    require(config is None or config.block_n >= 2, op,
            f"the SwiGLU epilogue needs block_n >= 2 (a gate and an up row), got {config}")
    if weight.shape[0] == 0 or math.prod(x.shape[:-1]) == 0:  # no output column, or no row (K = 0 is a product)
        return x.new_empty(*x.shape[:-1], weight.shape[0] // 2)
    if not gemv.supports(x, weight):
        return act_and_mul(gemv.linear(x, weight, None), activation)
    y = gemv.launch(as_rows(x), weight, None, config, gemv.Prologue(), GATED_EPILOGUES[activation])
    return y.view(*x.shape[:-1], weight.shape[0] // 2)


def add_rms_norm_linear_act_mul(x: torch.Tensor, residual: torch.Tensor | None, norm_weight: torch.Tensor,
                                eps: float, zero_centered: bool, weight: torch.Tensor, activation: str = "silu",
                                config: gemv.GemvConfig | None = None,
                                fuse: bool | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Residual add + RMSNorm + merged gate/up projection + gated product (signature of the reference
    ``add_rms_norm_linear_act_mul``): the GEMV with the norm prologue and the activation's gated
    epilogue, one launch.

    Args:
        x: ``[M, K]`` (or ``[..., K]``) float32 / float16 / bfloat16; residual: x's shape and dtype, or
            None; norm_weight: ``[K]`` (any float dtype); eps: added to the mean square;
            zero_centered: scale by ``1 + norm_weight``; weight: ``[2I, K]`` of x's dtype.
        activation: ``"silu"`` (SwiGLU) or ``"gelu_tanh"`` (GeGLU).
        config: run this GEMV configuration instead of the autotuned one (tests).
        fuse: None fuses the norm where :func:`norm_prologue_pays`; True wherever the GEMV takes the
            shapes; False never (then ``add_rms_norm`` and :func:`linear_act_mul`, two launches).

    Returns:
        ``(y, new_residual)``: ``y`` ``[..., I]`` and ``new_residual = round(x + residual)`` ``[..., K]``
        (``x`` itself when residual is None), both in x's dtype; the inputs are not written.

    Raises:
        ValueError: shapes or dtypes disagree, unsupported dtype, tensors on different devices, or a
            forced ``config`` with ``block_n < 2``.
    """
    op = "add_rms_norm_linear_act_mul"
    check_add_rms_norm_linear_act_mul(x, residual, norm_weight, weight, activation)
    require(config is None or config.block_n >= 2, op,
            f"the SwiGLU epilogue needs block_n >= 2 (a gate and an up row), got {config}")
    return _add_rms_norm_then(op, x, residual, norm_weight, eps, zero_centered, weight, config, fuse,
                              GATED_EPILOGUES[activation], lambda h: linear_act_mul(h, weight, activation, config))


def post_norm_residual_linear(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float,
                              zero_centered: bool, scale: torch.Tensor | None, next_weight: torch.Tensor | None,
                              linear_weight: torch.Tensor,
                              activation: str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """A sandwich-normed block's tail fused into the projection that reads it (signature of the reference
    ``post_norm_residual_linear``): for one row on the one-wave GEMV's widths, one launch whose prologue
    computes the post norm, the residual add, the layer scale and the next norm
    (:data:`~anna_xpu_kernels.gemv_prologue.POST_NORM_RESIDUAL`), the first program writing the new residual;
    elsewhere (or with ``ANNA_GEMV_POST_NORM_PROLOGUE=0``) ``post_norm_residual`` then the projection (two launches).

    Args:
        x, residual: ``[..., K]`` float32 / float16 / bfloat16, one dtype; weight, next_weight (or None): ``[K]``;
            eps, zero_centered: both norms'; scale: one element of x's dtype, or None; linear_weight: ``[N, K]``
            of x's dtype (``[2I, K]`` with an activation); activation: None, ``"silu"`` or ``"gelu_tanh"``.

    Returns:
        ``(y, new_residual)``: ``y`` ``[..., N]`` (``[..., I]``) and the new residual ``[..., K]``, x's dtype.

    Raises:
        ValueError: shapes or dtypes disagree, unsupported dtype, or tensors on different devices.
    """
    op = "post_norm_residual_linear"
    check_post_norm_residual_linear(x, residual, weight, eps, zero_centered, scale, next_weight, linear_weight,
                                    activation)
    require_float(op, x=x)
    require_same_device(op, x=x, residual=residual, weight=weight, scale=scale, next_weight=next_weight,
                        linear_weight=linear_weight)
    k = x.shape[-1]
    rows = as_rows(x)
    one_wave = (rows.shape[0] == 1 and gemv.supports(rows, linear_weight) and gemv_persistent.takes(rows, k)
                and gemv_persistent_requested() and post_norm_prologue_requested() and weight.dtype == x.dtype
                and (next_weight is None or next_weight.dtype == x.dtype))
    if not one_wave:
        h, new_residual = post_norms.post_norm_residual(x, residual, weight, eps, zero_centered, scale, next_weight)
        h = new_residual if h is None else h
        y = gemv.linear(h, linear_weight, None) if activation is None else linear_act_mul(h, linear_weight, activation)
        return y, new_residual
    new_residual = torch.empty_like(rows)
    mode = POST_NORM_RESIDUAL if next_weight is not None else POST_RESIDUAL
    prologue = gemv.Prologue(mode, as_rows(residual).contiguous(), next_weight, new_residual, eps, zero_centered,
                             weight.contiguous(), scale)
    epilogue = GATED_EPILOGUES[activation] if activation is not None else NO_EPILOGUE
    y = gemv_persistent.launch(rows.contiguous(), linear_weight, None, prologue, epilogue)
    return y.view(*x.shape[:-1], y.shape[-1]), new_residual.view(x.shape)
