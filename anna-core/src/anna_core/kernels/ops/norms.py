"""The normalisation ops of anna-core: RMSNorm and the residual adds and post norms fused with it. Conventions:
:mod:`anna_core.kernels.ops`."""

from __future__ import annotations

from anna_core.kernels.contracts import OpContract
from anna_core.kernels.ops.declare import core_op

NORM_OPS: tuple[OpContract, ...] = (
    core_op(
        "rms_norm", "norms",
        signature="rms_norm(x, weight, eps, zero_centered) -> y",
        doc="""\
x: ``[..., D]``; weight: ``[D]``; computed in float32, returned in x's dtype.
``y = x / sqrt(mean(x^2) + eps) * (1 + weight if zero_centered else weight)``.
""",
    ),
    core_op(
        "gated_rms_norm", "norms",
        signature="gated_rms_norm(x, z, weight, eps) -> y",
        doc="""\
x, z: ``[..., D]``; weight: ``[D]``. ``y = rms_norm(x) * weight * silu(z)`` (float32 math; the
gated DeltaNet output norm of Qwen3.5 / FLA ``FusedRMSNormGated``).
""",
    ),
    core_op(
        "add_rms_norm", "norms",
        signature="add_rms_norm(x, residual, weight, eps, zero_centered) -> (y, new_residual)",
        doc="""\
x, residual: ``[T, D]``, one dtype (residual may be None: ``new_residual = x``); weight: ``[D]``.
``new_residual = x + residual`` rounded to x's dtype (as torch's ``x + residual``), then
``y = rms_norm(new_residual, weight, eps, zero_centered)``: the residual add of a pre-norm block
fused into the next norm. Both outputs are fresh tensors; the inputs are not written.
""",
    ),
    core_op(
        "post_norm_residual", "norms",
        signature="post_norm_residual(x, residual, weight, eps, zero_centered, scale, next_weight) -> (y, new_residual)",
        doc="""\
The tail of a sandwich-normed block (Gemma 2/3/4: a norm on the block's output before the residual
add) fused with the next block's input norm. x, residual: ``[T, D]``, one dtype; weight,
next_weight: ``[D]`` (next_weight may be None); scale: ``[1]`` tensor of x's dtype or None (Gemma 4's
``layer_scalar``). ``new_residual = residual + rms_norm(x, weight, eps, zero_centered)``, then
``new_residual = new_residual * scale`` when scale is given, each step rounded to x's dtype as torch
rounds it; ``y = rms_norm(new_residual, next_weight, eps, zero_centered)``, or None without
next_weight. Fresh tensors; the inputs are not written.
""",
    ),
    core_op(
        "dual_post_norm_residual", "norms",
        signature=("dual_post_norm_residual(x1, weight_1, x2, weight_2, residual, weight, eps, zero_centered, scale, "
                   "next_weight) -> (y, new_residual)"),
        doc="""\
``post_norm_residual`` of the sum of two normalised block outputs (Gemma 4's MoE layer: the dense MLP's
and the experts' outputs, each with its own post norm). x1, x2, residual: ``[T, D]``, one dtype;
weight_1, weight_2, weight, next_weight: ``[D]`` (next_weight may be None); eps, zero_centered: every
norm's; scale: ``[1]`` of x1's dtype or None. ``x = rms_norm(x1, weight_1) + rms_norm(x2, weight_2)``
(each norm and the sum rounded to x1's dtype, as torch rounds them), then ``(y, new_residual) =
post_norm_residual(x, residual, weight, eps, zero_centered, scale, next_weight)``. Fresh tensors; the
inputs are not written.
""",
    ),
    core_op(
        "rms_norm_pair", "norms",
        signature="rms_norm_pair(x, weight, eps, zero_centered, scale_weight, factor) -> (y, s)",
        doc="""\
Two norms of one read of x (Gemma 4's MoE layer: the experts' input norm and the router's input).
x: ``[..., D]``; weight, scale_weight: ``[D]`` (scale_weight of x's dtype, as the rounding below
assumes); factor: a Python float. ``y = rms_norm(x, weight, eps, zero_centered)``; ``s = rms_norm(x,
ones, eps, False) * scale_weight * factor`` with the norm and each product rounded to x's dtype (torch's
rounding of that expression: transformers' ``Gemma4TextRouter``), all math in float32. Both ``[...,
D]`` in x's dtype.
""",
    ),
    core_op(
        "post_norm_residual_norm_pair", "norms",
        signature=("post_norm_residual_norm_pair(x, residual, weight, eps, zero_centered, next_weight, pair_weight, "
                   "scale_weight, factor) -> (y, y2, s, new_residual)"),
        doc="""\
``post_norm_residual`` (without scale) followed by ``rms_norm_pair`` of its new residual, from one read of
it (Gemma 4's MoE layer after its attention: the stream and the MLP's, the experts' and the router's
inputs). x, residual: ``[T, D]``, one dtype; weight, next_weight, pair_weight, scale_weight: ``[D]``
(scale_weight of x's dtype); factor: a Python float. ``(y, new_residual) = post_norm_residual(x,
residual, weight, eps, zero_centered, None, next_weight)``; ``(y2, s) = rms_norm_pair(new_residual,
pair_weight, eps, zero_centered, scale_weight, factor)``, rounded as those ops round. Fresh tensors.
""",
    ),
    core_op(
        "per_layer_inputs", "norms",
        signature=("per_layer_inputs(projected, ids, table, table_scale, weight, eps, zero_centered, projected_scale, "
                   "out_scale) -> y"),
        doc="""Gemma 4's per-layer inputs of a step's tokens from their embeddings' projection and the per-layer embedding table.
projected: ``[T, L*P]`` (the projection of the scaled embeddings); ids: ``[T]`` integer token ids; table:
``[V, L*P]`` of projected's dtype; weight: ``[P]`` the per-group norm's; table_scale, projected_scale, out_scale:
Python floats. ``y = (rms_norm((projected * projected_scale).view(T, L, P), weight, eps, zero_centered) +
(table[ids] * table_scale).view(T, L, P)) * out_scale`` ``[T, L, P]`` in projected's dtype, every product, the norm
and the sum rounded to it as torch rounds that expression (float32 math, each scale a float32). One op, so a step
gathers, scales, normalises and adds them in one launch.
""",
        checked=True,
    ),
)
"""``rms_norm``, ``gated_rms_norm``, ``add_rms_norm``, ``post_norm_residual``, ``dual_post_norm_residual``, ``rms_norm_pair``, ``post_norm_residual_norm_pair``, ``per_layer_inputs``."""
