"""The mixture-of-experts ops of anna-core: the router and the routed experts, dense and quantized. Conventions:
:mod:`anna_core.kernels.ops`."""

from __future__ import annotations

from anna_core.kernels.contracts import OpContract
from anna_core.kernels.ops.declare import core_op

MOE_OPS: tuple[OpContract, ...] = (
    core_op(
        "moe_route", "routing",
        signature="moe_route(logits, top_k, expert_scale, weights_dtype) -> (weights, expert_ids)",
        doc="""\
The router of a mixture-of-experts block after its gate projection. logits: ``[T, E]`` any float dtype;
top_k: ``K`` (an int, ``1 <= K <= E``); expert_scale: ``[E]`` any float dtype, or None; weights_dtype:
``torch.float32`` or logits' dtype. ``p = softmax(logits)`` over E in float32; the ``K`` largest of
``p`` in descending order, equal probabilities taken lower expert index first (at the ``K``-th place too);
``w = p_k / sum_k p_k`` in float32, times ``float32(expert_scale[e_k])`` when given, rounded to
weights_dtype. Returns weights ``[T, K]`` (weights_dtype) and expert_ids ``[T, K]`` int64 (distinct per
row, in ``[0, E)``). Rounding as transformers' routers: Qwen3.5 MoE (no scale, weights in logits'
dtype) and Gemma 4 (``per_expert_scale``, float32 weights). Rows with a NaN probability (a NaN or +inf
logit, or all logits -inf): NaN weights, ids unspecified in ``[0, E)``. Implementations must not
synchronise with the host nor shape anything by the values (graph capture); they may compute the
exponential to within a few float32 ulps, so their ids may differ from the reference's where two
probabilities are that close. Rows are independent (a padding row changes no other row). Callers look it
up with the shape fact ``num_experts`` (``E``).
""",
        checked=True,
        shape_facts=("num_experts",),
    ),
    core_op(
        "moe_experts", "moe",
        signature="moe_experts(x, gate_up, down, weights, expert_ids, activation) -> y",
        doc="""\
The routed experts of a mixture-of-experts block, after its router. x: ``[T, H]``; gate_up: ``[E, 2I,
H]`` of x's dtype (expert ``e``'s gate rows, then its up rows); down: ``[E, H, I]`` of x's dtype;
weights: ``[T, K]`` float32 or x's dtype; expert_ids: ``[T, K]`` int32 / int64 in ``[0, E)``;
activation: ``"silu"`` or ``"gelu_tanh"`` (:data:`~anna_core.kernels.checks.GATED_ACTIVATIONS`).
``y[t] = sum_k weights[t, k] * down[e] @ act_and_mul(gate_up[e] @ x[t], activation)`` with ``e =
expert_ids[t, k]``, y: ``[T, H]`` in x's dtype. Rounding as the eager torch loop (transformers'):
``gate_up[e] @ x[t]`` rounded to x's dtype, the activation and product as ``act_and_mul``, ``down[e] @
h`` rounded, the weighted term computed in float32 and rounded to x's dtype; the reference then adds
the ``K`` terms in ascending expert order in x's dtype (``index_add_``), implementations may add them
in any fixed order in float32 and round once (identical in float32 up to summation order). Only the
chosen experts' weights need be read. Implementations must not synchronise with the host nor shape
anything by the ids' values (so a step using the op is graph-capturable) and need not check the ids'
range; the torch reference reads the per-expert counts on the host (its CPU path) and raises
``ValueError`` for ids outside ``[0, E)``. Rows are independent: a row's result depends only on its
own x, weights and ids.
""",
        checked=True,
    ),
    core_op(
        "moe_experts_wq", "moe_wq",
        signature=("moe_experts_wq(x, gate_up_q, gate_up_scale, gate_up_zero, down_q, down_scale, down_zero, weights, "
                   "expert_ids, activation, scheme) -> y"),
        doc="""\
``moe_experts`` with the experts' weights quantized (``--expert-quant int4|int8|fp8``): each expert's
``gate_up [2I, H]`` and ``down [H, I]`` as ``wq_linear`` takes a weight (``qweight``, ``scale``, ``zero`` of
``scheme``, layouts in ``anna_core.weights.gpu_quant``), stacked with a leading ``E`` (int8 scale ``[E, N]``;
zero None unless int4). x, weights, expert_ids, activation: as ``moe_experts``. Each projection is a
``wq_linear`` (float32 dequantization and accumulation, rounded once to x's dtype); activation, weighting and
the sum over ``K`` as ``moe_experts`` (for float32 x: ``moe_experts`` of the dequantized weights); for many
tokens an implementation may round the dequantized weights to x's dtype first (grouped GEMMs on a dense
scratch: a relative ``2**-8`` per bfloat16 weight). Same rules
as ``moe_experts``: no host sync nor value-shaped work in implementations (graph-capturable), only the chosen
experts' codes read; the reference reads the counts on the host and raises ``ValueError`` for ids outside
``[0, E)``. Looked up with the shape fact ``scheme``.
""",
        checked=True,
        shape_facts=("scheme",),
    ),
)
"""``moe_route``, ``moe_experts``, ``moe_experts_wq``."""
