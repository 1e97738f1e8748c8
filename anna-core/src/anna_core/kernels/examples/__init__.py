"""Sample inputs of anna-core's ops: what the kernel conformance suite runs every implementation on.

Each op contract names one of these functions as its ``examples`` (``OpContract.examples``):
``examples(device, dtype) -> list[OpExample]``, a few small, seeded cases (the same tensors on every
call) covering the op's paths: ragged batches, ``None`` optionals, strided views, each activation,
fresh and non-zero states. Activations are in ``dtype``; what the contract fixes (float32 recurrent
state and log decays, int32 / int64 indices) keeps its own dtype. Shapes stay tiny, so interpreted or
reference runs take milliseconds.

One module per op family (``norms``, ``activations``, ``recurrent``, ``attention``, ``linear``, ``moe``,
``layer_fusions``, ``sampling``; seeded tensors from :mod:`~anna_core.kernels.examples.sample_gen`); every example function
is importable from here, where the contracts name them (``anna_core.kernels.examples:<op>``).
"""

from __future__ import annotations

from anna_core.kernels.examples.activations import (
    sigmoid_mul,
    silu_and_mul,
    snake_beta,
)
from anna_core.kernels.examples.attention import (
    paged_attention,
    paged_attention_turboquant,
    reshape_and_cache,
    turboquant_cache_write,
)
from anna_core.kernels.examples.layer_fusions import (
    fused_gdn_decode,
    fused_gdn_prefill,
    q_norm_rope,
    q_norm_rope_attention,
    qk_norm_rope_cache,
    qk_norm_rope_cache_attention,
    qkv_norm_rope_cache,
    qkv_norm_rope_cache_attention,
)
from anna_core.kernels.examples.linear import (
    act_mul_linear,
    add_rms_norm_linear,
    add_rms_norm_linear_act_mul,
    add_rms_norm_wq_linear,
    gated_linear,
    int4_linear,
    linear,
    linear_act_mul,
    linear_soft_cap,
    linear_soft_cap_argmax,
    lm_head_topk,
    post_norm_residual_gated_linear,
    post_norm_residual_linear,
    wq_linear,
)
from anna_core.kernels.examples.moe import (
    moe_experts,
    moe_experts_wq,
    moe_route,
)
from anna_core.kernels.examples.norms import (
    add_rms_norm,
    dual_post_norm_residual,
    gated_rms_norm,
    per_layer_inputs,
    post_norm_residual,
    post_norm_residual_norm_pair,
    rms_norm,
    rms_norm_pair,
)
from anna_core.kernels.examples.recurrent import (
    causal_conv1d_prefill,
    causal_conv1d_update,
    gated_delta_rule_decode,
    gated_delta_rule_prefill,
)
from anna_core.kernels.examples.sample_gen import EPS
from anna_core.kernels.examples.sampling import top_k_gumbel_sample

__all__ = [
    "EPS",
    "act_mul_linear",
    "add_rms_norm",
    "add_rms_norm_linear",
    "add_rms_norm_linear_act_mul",
    "add_rms_norm_wq_linear",
    "causal_conv1d_prefill",
    "causal_conv1d_update",
    "dual_post_norm_residual",
    "fused_gdn_decode",
    "fused_gdn_prefill",
    "gated_delta_rule_decode",
    "gated_delta_rule_prefill",
    "gated_linear",
    "gated_rms_norm",
    "int4_linear",
    "linear",
    "linear_act_mul",
    "linear_soft_cap",
    "linear_soft_cap_argmax",
    "lm_head_topk",
    "moe_experts",
    "moe_experts_wq",
    "moe_route",
    "paged_attention",
    "paged_attention_turboquant",
    "per_layer_inputs",
    "post_norm_residual",
    "post_norm_residual_gated_linear",
    "post_norm_residual_linear",
    "post_norm_residual_norm_pair",
    "q_norm_rope",
    "q_norm_rope_attention",
    "qk_norm_rope_cache",
    "qk_norm_rope_cache_attention",
    "qkv_norm_rope_cache",
    "qkv_norm_rope_cache_attention",
    "reshape_and_cache",
    "rms_norm",
    "rms_norm_pair",
    "sigmoid_mul",
    "silu_and_mul",
    "snake_beta",
    "top_k_gumbel_sample",
    "turboquant_cache_write",
    "wq_linear",
]
