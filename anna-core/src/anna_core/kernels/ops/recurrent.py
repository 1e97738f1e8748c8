"""The recurrent-layer ops of anna-core: the gated DeltaNet's causal conv1d and gated delta rule. Conventions:
:mod:`anna_core.kernels.ops`."""

from __future__ import annotations

from anna_core.kernels.contracts import OpContract
from anna_core.kernels.ops.declare import core_op

RECURRENT_OPS: tuple[OpContract, ...] = (
    core_op(
        "causal_conv1d_prefill", "conv1d",
        signature="causal_conv1d_prefill(x, weight, bias, cu_seqlens, conv_states, slots, activation) -> y",
        doc="""\
x: ``[T, C]``; weight: ``[C, W]`` (depthwise); bias: ``[C]`` or None;
conv_states: ``[S, C, W-1]`` (the last ``W-1`` inputs of each sequence, oldest first);
activation: ``"silu"`` or None. Each sequence starts from its slot's state (zeros if fresh)
and writes back its last ``W-1`` inputs. y: ``[T, C]``.
""",
    ),
    core_op(
        "causal_conv1d_update", "conv1d",
        signature="causal_conv1d_update(x, weight, bias, conv_states, slots, activation) -> y",
        doc="""\
One new token per sequence. x: ``[B, C]``; other arguments as above. y: ``[B, C]``.
""",
    ),
    core_op(
        "gated_delta_rule_prefill", "gated_delta_rule",
        signature="gated_delta_rule_prefill(q, k, v, g, beta, cu_seqlens, states, slots, scale) -> o",
        doc="""\
q, k: ``[T, H_k, K]`` (already L2-normalised); v: ``[T, H_v, V]``; ``H_v`` a multiple of
``H_k`` (key head ``h // (H_v // H_k)`` serves value head ``h``); g: ``[T, H_v]`` float32 log
decay (``<= 0``); beta: ``[T, H_v]``; states: ``[S, H_v, K, V]`` float32; scale: float.
Per head and token (Yang et al., "Gated Delta Networks", 2024; HF ``torch_chunk_gated_delta_rule``):
``S = exp(g_t) S;  S += k_t (beta_t (v_t - S^T k_t))^T;  o_t = S^T (scale q_t)``.
Computed chunk-wise (64 tokens); returns o ``[T, H_v, V]`` in v's dtype; final state written
to ``states[slots[i]]``.
""",
    ),
    core_op(
        "gated_delta_rule_decode", "gated_delta_rule",
        signature="gated_delta_rule_decode(q, k, v, g, beta, states, slots, scale) -> o",
        doc="""\
One token per sequence: q, k ``[B, H_k, K]``, v ``[B, H_v, V]``, g, beta ``[B, H_v]``; same
recurrence; o ``[B, H_v, V]``; states updated in place.
""",
    ),
)
"""``causal_conv1d_prefill``, ``causal_conv1d_update``, ``gated_delta_rule_prefill``, ``gated_delta_rule_decode``."""
