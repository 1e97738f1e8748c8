"""Entry module of anna-xpu-kernels: registers the Triton and fla kernel implementations.

Only lazy ``"module:attr"`` strings are handed over: registering imports neither torch, triton nor
fla. Every op implemented here has its contract (and torch reference) in anna-core
(:mod:`anna_core.kernels.ops`), the fused ones included: ``qk_norm_rope_cache`` (``qkv_norm_rope_cache`` with the value norm; with the attention, ``qk_norm_rope_cache_attention`` / ``qkv_norm_rope_cache_attention`` / ``q_norm_rope_attention``), ``fused_gdn_decode``
(the gated DeltaNet decode step) and ``fused_gdn_prefill`` (its prefill after the conv); ``moe_experts``
(a MoE block's routed experts) runs as grouped GEMMs without host syncs (:mod:`anna_xpu_kernels.moe`; a few
tokens as per-pair GEMVs, :mod:`anna_xpu_kernels.moe_decode`; with quantized experts, ``moe_experts_wq``,
:mod:`anna_xpu_kernels.moe_wq`), the LM head with a fused top-k ``lm_head_topk``
(:mod:`anna_xpu_kernels.lm_head_topk`), its
router ``moe_route`` as one launch (:mod:`anna_xpu_kernels.moe_route`), a Gumbel-max draw from top-k filtered
logits ``top_k_gumbel_sample`` (:mod:`anna_xpu_kernels.gumbel_sample`); a TurboQuant KV cache is written and
attended by :mod:`anna_xpu_kernels.turboquant_write` and :mod:`anna_xpu_kernels.turboquant`.
Priorities: 100 for Anna's own Triton kernels, 90 for fla-core; the torch references sit at 0, so they
serve whatever the probes (:mod:`anna_xpu_kernels.probes`) decline. Devices (``KernelSpec.devices``, what
``anna plugins`` lists): the Triton kernels run on CUDA and XPU, the fla ones on CUDA; the CPU joins the Triton
kernels' devices only in a process that asks for Triton's interpreter (``ANNA_TRITON_INTERPRET=1``, read when
the kernels are registered), as their probes accept it only then.
"""

from anna_core.hookspecs import hookimpl
from anna_core.kernels.registry import KernelSpec

from anna_xpu_kernels._env import (
    cpu_interpret_requested,
    enable_interpreter_if_requested,
    turboquant_decode_requested,
    turboquant_write_requested,
)

TRITON_PRIORITY = 100
FLA_PRIORITY = 90

_PKG = "anna_xpu_kernels"
TRITON_KERNELS = {
    # op: (implementation, probe)
    "rms_norm": ("norms:rms_norm", "probes:norm_probe"),
    "gated_rms_norm": ("norms:gated_rms_norm", "probes:norm_probe"),
    "add_rms_norm": ("norms:add_rms_norm", "probes:norm_probe"),
    "post_norm_residual": ("post_norms:post_norm_residual", "probes:norm_probe"),
    "dual_post_norm_residual": ("post_norms:dual_post_norm_residual", "probes:norm_probe"),
    "rms_norm_pair": ("post_norms:rms_norm_pair", "probes:norm_probe"),
    "post_norm_residual_norm_pair": ("post_norms:post_norm_residual_norm_pair", "probes:norm_probe"),
    "per_layer_inputs": ("per_layer_inputs:per_layer_inputs", "probes:norm_probe"),
    "silu_and_mul": ("activations:silu_and_mul", "probes:norm_probe"),
    "sigmoid_mul": ("activations:sigmoid_mul", "probes:norm_probe"),
    "snake_beta": ("snake:snake_beta", "probes:snake_beta_probe"),
    "causal_conv1d_update": ("conv1d:causal_conv1d_update", "probes:conv1d_probe"),
    "causal_conv1d_prefill": ("conv1d:causal_conv1d_prefill", "probes:conv1d_probe"),
    "gated_delta_rule_decode": ("gated_delta_rule:gated_delta_rule_decode", "probes:gated_delta_rule_decode_probe"),
    "paged_attention": ("paged_attention:paged_attention", "probes:paged_attention_probe"),
    "q_norm_rope_attention": ("paged_attention_fused:q_norm_rope_attention", "probes:q_norm_rope_attention_probe"),
    "qk_norm_rope_cache_attention": ("paged_attention_fused:qk_norm_rope_cache_attention",
                                     "probes:qk_norm_rope_attention_probe"),
    "qkv_norm_rope_cache_attention": ("paged_attention_fused:qkv_norm_rope_cache_attention",
                                      "probes:qkv_norm_rope_attention_probe"),
    "paged_attention_turboquant": ("turboquant:paged_attention_turboquant", "probes:paged_attention_probe"),
    "turboquant_cache_write": ("turboquant_write:turboquant_cache_write", "probes:turboquant_write_probe"),
    "linear": ("gemv:linear", "probes:linear_probe"),
    "linear_soft_cap": ("soft_cap:linear_soft_cap", "probes:linear_probe"),
    "linear_soft_cap_argmax": ("soft_cap:linear_soft_cap_argmax", "probes:linear_probe"),
    "add_rms_norm_linear": ("fused_linear:add_rms_norm_linear", "probes:linear_probe"),
    "act_mul_linear": ("fused_linear:act_mul_linear", "probes:linear_probe"),
    "linear_act_mul": ("fused_linear:linear_act_mul", "probes:linear_probe"),
    "gated_linear": ("fused_linear:gated_linear", "probes:linear_probe"),
    "add_rms_norm_linear_act_mul": ("fused_linear:add_rms_norm_linear_act_mul", "probes:linear_probe"),
    "post_norm_residual_linear": ("fused_linear:post_norm_residual_linear", "probes:linear_probe"),
    "post_norm_residual_gated_linear": ("gated_block:post_norm_residual_gated_linear", "probes:gated_block_probe"),
    "wq_linear": ("wq_gemv:wq_linear", "probes:wq_linear_probe"),
    "add_rms_norm_wq_linear": ("wq_gemv:add_rms_norm_wq_linear", "probes:wq_linear_probe"),
    "qk_norm_rope_cache": ("qk_norm_rope:qk_norm_rope_cache", "probes:qk_norm_rope_probe"),
    "qkv_norm_rope_cache": ("qk_norm_rope:qkv_norm_rope_cache", "probes:qkv_norm_rope_probe"),
    "q_norm_rope": ("qk_norm_rope:q_norm_rope", "probes:qk_norm_rope_probe"),
    "fused_gdn_decode": ("gdn_decode_fused:fused_gdn_decode", "probes:fused_gdn_decode_probe"),
    "moe_experts": ("moe:moe_experts", "probes:moe_experts_probe"),
    "moe_experts_wq": ("moe_wq:moe_experts_wq", "probes:wq_linear_probe"),  # same schemes and devices
    "lm_head_topk": ("lm_head_topk:lm_head_topk", "probes:lm_head_topk_probe"),
    "moe_route": ("moe_route:moe_route", "probes:moe_route_probe"),
    "top_k_gumbel_sample": ("gumbel_sample:top_k_gumbel_sample", "probes:sampling_probe"),
}
FLA_KERNELS = {
    "gated_delta_rule_prefill": ("fla_prefill:gated_delta_rule_prefill", "probes:fla_prefill_probe"),
    "fused_gdn_prefill": ("fla_prefill:fused_prefill", "probes:fla_prefill_probe"),
}


TRITON_DEVICES = ("cuda", "xpu")
FLA_DEVICES = ("cuda",)


@hookimpl
def register_kernels(register):
    """Register every kernel; a bad ``ANNA_TURBOQUANT_DECODE`` (read per call on CUDA only) or
    ``ANNA_TURBOQUANT_WRITE`` (read per call) fails here, at start-up on any device, with its ``ValueError``.
    ``ANNA_TRITON_INTERPRET=1`` sets Triton's own switch here already, before a model's modules import triton
    (through ``torch._dynamo``), which would fix the kernels to compiled mode."""
    turboquant_decode_requested()
    turboquant_write_requested()
    enable_interpreter_if_requested()
    triton_devices = (*TRITON_DEVICES, "cpu") if cpu_interpret_requested() else TRITON_DEVICES
    for op, (impl, probe) in TRITON_KERNELS.items():
        register(KernelSpec(op=op, name="triton", impl=f"{_PKG}.{impl}", priority=TRITON_PRIORITY,
                            probe=f"{_PKG}.{probe}", devices=triton_devices))
    for op, (impl, probe) in FLA_KERNELS.items():
        register(KernelSpec(op=op, name="fla", impl=f"{_PKG}.{impl}", priority=FLA_PRIORITY, probe=f"{_PKG}.{probe}",
                            devices=FLA_DEVICES))
