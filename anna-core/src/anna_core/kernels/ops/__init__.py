"""The op table of anna-core: every core op's :class:`~anna_core.kernels.contracts.OpContract`, in documentation order.

The contracts are declared by family in this package's modules (``norms``, ``activations``, ``recurrent``,
``attention``, ``linear``, ``moe``, ``layer_fusions``, ``sampling``; :mod:`~anna_core.kernels.ops.declare` spells out
their lazy targets); this module assembles them.

The built-in plugin (:mod:`anna_core.builtin_plugin`) registers :data:`CORE_OPS` through the
``register_ops`` hook, exactly as a plugin registers ops of its own; each contract's torch reference
(:mod:`anna_core.kernels.reference`) becomes that op's ``"reference"`` implementation.

Conventions shared by every op:

* Tokens of a batch are flattened: ``T`` tokens from ``B`` sequences, sequence ``i`` owning rows
  ``cu_seqlens[i]:cu_seqlens[i+1]`` (``cu_seqlens``: ``[B+1]`` int32, on the device).
* Per-sequence state lives in preallocated pools addressed by *slot index*
  (``slots``: ``[B]`` int64); kernels read the state at ``pool[slots[i]]`` and overwrite it in place
  with the state after the sequence's last token. A fresh sequence's slot holds zeros
  (the slot pool zeroes a slot when it hands it out).
* Recurrent (gated delta rule) state is always float32; activations are the serving dtype.
* Paged KV cache: ``k_cache``/``v_cache``: ``[num_blocks, block_size, H_kv, D]``; sequence ``i``'s
  token at position ``p`` lives in block ``block_tables[i, p // block_size]`` at offset
  ``p % block_size``; ``slot_mapping[t] = block * block_size + offset`` for token ``t``.

A mixture-of-experts block runs two ops: ``moe_route`` (its router after the gate projection: softmax,
top-k, renormalised, an optional per-expert scale) and ``moe_experts`` (the routed experts it chose; ``moe_experts_wq`` with quantized experts).

The fused ops (``post_norm_residual``, ``dual_post_norm_residual``, ``rms_norm_pair``,
``post_norm_residual_norm_pair``, ``add_rms_norm_linear``, ``act_mul_linear``, ``gated_linear``,
``linear_act_mul``,
``add_rms_norm_linear_act_mul``, ``qk_norm_rope_cache``, ``qkv_norm_rope_cache``, ``q_norm_rope``,
``q_norm_rope_attention``, ``qk_norm_rope_cache_attention``, ``qkv_norm_rope_cache_attention``,
``fused_gdn_decode``,
``fused_gdn_prefill``)
are compositions of the others; their references compose the unfused references, so a fused kernel is
checked against exactly the numerics of the unfused path.
"""

from __future__ import annotations

from anna_core.kernels.contracts import OpContract
from anna_core.kernels.ops.activations import ACTIVATION_OPS
from anna_core.kernels.ops.attention import ATTENTION_OPS
from anna_core.kernels.ops.layer_fusions import LAYER_FUSION_OPS
from anna_core.kernels.ops.linear import LINEAR_OPS
from anna_core.kernels.ops.moe import MOE_OPS
from anna_core.kernels.ops.norms import NORM_OPS
from anna_core.kernels.ops.recurrent import RECURRENT_OPS
from anna_core.kernels.ops.sampling import SAMPLING_OPS

CORE_OPS: tuple[OpContract, ...] = (
    *NORM_OPS, *ACTIVATION_OPS, *RECURRENT_OPS, *ATTENTION_OPS, *LINEAR_OPS, *MOE_OPS, *LAYER_FUSION_OPS,
    *SAMPLING_OPS,
)
"""Every op of anna-core, in documentation order."""

OPS: dict[str, OpContract] = {contract.name: contract for contract in CORE_OPS}
""":data:`CORE_OPS` by name."""
