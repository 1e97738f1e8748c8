"""The projection ops of anna-core: dense and quantized linear layers, the top-k LM head, and the norms and
gated products fused into a projection. Conventions: :mod:`anna_core.kernels.ops`."""

from __future__ import annotations

from anna_core.kernels.contracts import OpContract
from anna_core.kernels.ops.declare import core_op

LINEAR_OPS: tuple[OpContract, ...] = (
    core_op(
        "linear", "linear",
        signature="linear(x, weight, bias) -> y",
        doc="""\
x: ``[M, K]`` (``[..., K]`` works too: leading dims are flattened and restored); weight:
``[N, K]`` as ``nn.Linear`` stores it, same dtype as x; bias: ``[N]`` or None.
``y = x @ weight^T + bias``, float32 accumulation; y: ``[M, N]`` in x's dtype. Decode calls it
with a handful of rows (``M`` = batch size), where reading the weight is all the cost:
implementations may specialise those skinny shapes (GEMV, split-K) and leave larger ``M`` to a GEMM.
""",
    ),
    core_op(
        "int4_linear", "int4_linear",
        signature="int4_linear(x, packed, scale_zero, group_size) -> y",
        doc="""\
A linear layer whose weight is kept packed (GGUF weights on the CPU: ``anna_core.layers.quant_linear``).
x: ``[M, K]``; packed: ``[N, K/2]`` uint8, 4-bit codes ``q`` in the device's torch int4 layout (CPU:
``aten::_convert_weight_to_int4pack_for_cpu``); scale_zero: ``[K/g, N, 2]`` of x's dtype; group_size:
``g`` in 32, 64, 128, 256. ``w[n, k] = (q[n, k] - 8) * scale_zero[k // g, n, 0] + scale_zero[k // g,
n, 1]``, ``y = x @ w^T`` ``[M, N]`` in x's dtype, float32 accumulation (exact to float32 rounding in
float32; on the CPU the bfloat16 path is the fast one).
""",
        checked=True,
    ),
    core_op(
        "wq_linear", "wq_linear",
        signature="wq_linear(x, qweight, scale, zero, scheme, bias, perm=None) -> y",
        doc="""\
A linear layer whose weight is quantized for accelerators (``--weight-quant int4|int8|fp8``; layouts in
``anna_core.weights.gpu_quant``). x: ``[M, K]`` (or ``[..., K]``) float; scheme ``"int4"``: qweight ``[N, K/2]``
uint8 (two codes in ``[0, 15]`` per byte, column ``2j`` in the low nibble), scale and zero ``[N, K/128]`` of one
float dtype, ``w[n, k] = q * scale[n, k // 128] + zero[n, k // 128]``; ``"int8"``: qweight ``[N, K]`` int8,
scale ``[N]`` float32, zero None, ``w = q * scale[n]``; ``"fp8"``: qweight ``[N, K]`` float8_e4m3fn, scale
``[ceil(N/128), ceil(K/128)]`` float32, zero None, ``w = q * scale[n // 128, k // 128]``. bias: ``[N]`` of x's
dtype or None. perm: None, or ``[K]`` int32 / int64, a permutation of ``range(K)``: the weight's input columns
are stored in that order (act-order GPTQ), so the product reads ``x[..., perm]`` (kernels gather the columns as
they load them; callers check it is a permutation where they make it). ``y = x[..., perm] @ w^T + bias``
``[..., N]`` in x's dtype, float32 dequantization and accumulation, one rounding (the reference: dequantize to
float32, matmul in float32). Callers look it up with the shape fact ``scheme`` (a kernel may serve only some
schemes).
""",
        checked=True,
        shape_facts=("scheme",),
    ),
    core_op(
        "lm_head_topk", "lm_head_topk",
        signature="lm_head_topk(hidden, weight, scale, zero, scheme, k, softcap) -> (values, indices, logsumexp)",
        doc="""\
The LM head's ``k`` largest logits per row, for a step whose every request needs at most the top ``k`` (greedy,
top-k sampling, top logprobs), without the caller keeping the ``[T, V]`` float32 logits. hidden: ``[T, H]`` float; weight: a
dense ``[V, H]`` of hidden's dtype with scheme ``"none"`` (scale, zero None), or the codes of scheme ``"int4"`` /
``"int8"`` / ``"fp8"`` with their scale and zero as ``wq_linear`` takes them; k: ``1 <= k <= min(64, V)``;
softcap: a positive float or None. The logits are those of ``compute_logits``: ``linear(hidden, weight)`` (or
``wq_linear``) rounded to hidden's dtype, then float32, then ``softcap * tanh(logits / softcap)`` when set.
Returns values ``[T, k]`` float32 in descending order (equal logits: the lower id first, as ``argmax``), indices
``[T, k]`` int64, logsumexp ``[T]`` float32 over the whole vocabulary. Implementations may round a quantized
weight to hidden's dtype for more than 4 rows (tensor cores; ``wq_linear``'s kernel does for more than 8), must not
synchronise with the host (graph-capturable); they either keep only per-tile candidates or write the logits in
hidden's dtype to a temporary (the full head's own GEMV) and select from them in one read. Looked up with the shape
fact ``scheme``.
""",
        checked=True,
        shape_facts=("scheme",),
    ),
    core_op(
        "add_rms_norm_wq_linear", "wq_linear",
        signature=("add_rms_norm_wq_linear(x, residual, norm_weight, eps, zero_centered, qweight, scale, zero, scheme, "
                   "activation=None, perm=None) -> (y, new_residual)"),
        doc="""\
``add_rms_norm_linear`` (activation None) or ``add_rms_norm_linear_act_mul`` (activation ``"silu"`` /
``"gelu_tanh"``, weight ``[2I, K]`` gate rows then up rows) with the weight quantized as ``wq_linear`` takes
it: ``(h, new_residual) = add_rms_norm(x, residual, norm_weight, eps, zero_centered)``, ``y = wq_linear(h,
qweight, scale, zero, scheme, None, perm)`` ``[M, N]``, then ``act_and_mul(y, activation)`` ``[M, I]``, every
intermediate rounded to x's dtype as those ops round it (one launch at decode where a kernel fuses them; with a
``perm`` the kernel's norm prologue reads ``x[perm]``, ``residual[perm]`` and ``norm_weight[perm]``, the norm's
statistic being over the whole row). x, residual: ``[M, K]``, one dtype (residual may be None); norm_weight:
``[K]``. Looked up with ``scheme``.
""",
        checked=True,
        shape_facts=("scheme",),
    ),
    core_op(
        "add_rms_norm_linear", "fused_linear",
        signature="add_rms_norm_linear(x, residual, norm_weight, eps, zero_centered, weight) -> (y, new_residual)",
        doc="""\
x, residual: ``[M, K]``, one dtype (residual may be None: ``new_residual = x``); norm_weight:
``[K]``; weight: ``[N, K]`` of x's dtype, no bias. ``(h, new_residual) = add_rms_norm(x, residual,
norm_weight, eps, zero_centered)`` then ``y = linear(h, weight, None)`` ``[M, N]``, every
intermediate rounded to x's dtype as those ops round it: a pre-norm block's residual add and norm
fused into its input projection (one launch at decode instead of two). Inputs are not written.
""",
    ),
    core_op(
        "act_mul_linear", "fused_linear",
        signature='act_mul_linear(x, weight, activation="silu") -> y',
        doc="""\
x: ``[M, 2K]`` (gate, then up); weight: ``[N, K]`` of x's dtype, no bias; activation: one of
:data:`~anna_core.kernels.checks.GATED_ACTIVATIONS` (``"silu"``: SwiGLU, ``"gelu_tanh"``: GeGLU with
the tanh approximation, as Gemma). ``y = linear(act_and_mul(x, activation), weight, None)`` ``[M, N]``,
the product rounded to x's dtype as ``act_and_mul`` rounds it: the gated product fused into
``down_proj``.
""",
    ),
    core_op(
        "gated_linear", "fused_linear",
        signature='gated_linear(gate, up, weight, activation) -> y',
        doc="""\
gate, up: ``[M, K]`` one shape and dtype (up may be a strided view, unit stride along K); weight:
``[N, K]`` of their dtype, no bias; activation: ``"silu"`` or ``"gelu_tanh"``. ``y =
act_mul_linear(cat(gate, up), weight, activation)`` ``[M, N]``: the gated product of two tensors fused
into the projection after it (Gemma 4's per-layer-input block).
""",
        checked=True,
    ),
    core_op(
        "linear_act_mul", "fused_linear",
        signature='linear_act_mul(x, weight, activation="silu") -> y',
        doc="""\
x: ``[M, K]``; weight: ``[2I, K]`` of x's dtype (gate rows, then up rows), no bias; activation:
``"silu"`` or ``"gelu_tanh"``. ``y = act_and_mul(linear(x, weight, None), activation)`` ``[M, I]``, the
projection rounded to x's dtype first: the gated product fused into the merged gate/up projection (no
``[M, 2I]`` intermediate).
""",
    ),
    core_op(
        "add_rms_norm_linear_act_mul", "fused_linear",
        signature='add_rms_norm_linear_act_mul(x, residual, norm_weight, eps, zero_centered, weight, activation="silu") '
                   '-> (y, new_residual)',
        doc="""\
Arguments as ``add_rms_norm_linear`` with weight ``[2I, K]`` (gate rows, then up rows), plus the
activation (``"silu"`` or ``"gelu_tanh"``). ``(h, new_residual) = add_rms_norm(x, residual,
norm_weight, eps, zero_centered)`` then ``y = linear_act_mul(h, weight, activation)`` ``[M, I]``,
rounded as those ops round: a pre-norm MLP's residual add, norm, gate/up projection and gated product
(one launch at decode instead of two).
""",
    ),
    core_op(
        "post_norm_residual_linear", "fused_linear",
        signature=("post_norm_residual_linear(x, residual, weight, eps, zero_centered, scale, next_weight, "
                   "linear_weight, activation=None) -> (y, new_residual)"),
        doc="""\
x, residual: ``[M, K]``, one dtype; weight: ``[K]`` the block's post norm; scale: ``[1]`` of x's dtype or
None; next_weight: ``[K]`` or None; linear_weight: ``[N, K]`` of x's dtype, no bias (``[2I, K]``, gate
rows then up rows, with an activation); activation: None, ``"silu"`` or ``"gelu_tanh"``. ``(h,
new_residual) = post_norm_residual(x, residual, weight, eps, zero_centered, scale, next_weight)`` (``h =
new_residual`` without next_weight), then ``y = linear(h, linear_weight, None)`` ``[M, N]`` (with an
activation ``linear_act_mul(h, linear_weight, activation)`` ``[M, I]``), rounded as those ops round: a
sandwich-normed block's tail fused into the projection that reads it (one launch at decode instead of two).
Inputs are not written.
""",
        checked=True,
    ),
    core_op(
        "linear_soft_cap", "linear",
        signature="linear_soft_cap(x, weight, cap) -> logits",
        doc="""\
x: ``[M, K]``; weight: ``[N, K]`` of x's dtype, no bias; cap: a positive Python float. ``logits = cap *
tanh(float(linear(x, weight, None)) / cap)`` ``[M, N]`` float32: the projection rounded to x's dtype, then the
soft cap in float32 (``x / cap``, tanh, ``* cap``), as Gemma's final-logit soft-capping computes it. One op, so an LM
head's soft cap needs no launches of its own.
""",
        checked=True,
    ),
    core_op(
        "linear_soft_cap_argmax", "linear",
        signature="linear_soft_cap_argmax(x, weight, cap) -> ids",
        doc="""\
x: ``[M, K]``; weight: ``[N, K]`` of x's dtype, no bias, ``N >= 1``; cap: a positive Python float. ``ids =
argmax(linear_soft_cap(x, weight, cap), -1)`` ``[M]`` int64, the first column among equal largest values (as
``torch.argmax``; a row whose logits hold a NaN may take any column on a kernel): greedy sampling's ids from a
soft-capped LM head, which a kernel computes without writing the ``[M, N]`` float32 logits.
""",
        checked=True,
    ),
    core_op(
        "post_norm_residual_gated_linear", "fused_linear",
        signature=("post_norm_residual_gated_linear(x, residual, weight, eps, zero_centered, scale, gate_weight, up, "
                   "linear_weight, activation) -> (y, new_residual)"),
        doc="""x, residual: ``[M, K]``, one dtype; weight: ``[K]`` the block's post norm; scale: ``[1]`` of x's dtype or None;
gate_weight: ``[P, K]``, up: ``[M, P]`` (unit stride along P, any row stride), linear_weight: ``[N, P]``, all of
x's dtype, no biases; activation: ``"silu"`` or ``"gelu_tanh"``. ``(y', new_residual) =
post_norm_residual_linear(x, residual, weight, eps, zero_centered, scale, None, gate_weight)``, then ``y =
gated_linear(y', up, linear_weight, activation)`` ``[M, N]``, rounded as those ops round: a sandwich-normed
block's tail and the small gated block after it (Gemma 4's per-layer-input gate and projection) as one op (one
launch at decode instead of two). Inputs are not written.
""",
        checked=True,
    ),
)
"""``linear``, ``int4_linear``, ``wq_linear``, ``lm_head_topk``, ``add_rms_norm_wq_linear``, ``add_rms_norm_linear``, ``act_mul_linear``, ``gated_linear``, ``linear_act_mul``, ``add_rms_norm_linear_act_mul``, ``post_norm_residual_linear``, ``linear_soft_cap``, ``linear_soft_cap_argmax``, ``post_norm_residual_gated_linear``."""
