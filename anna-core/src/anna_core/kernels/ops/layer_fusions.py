"""The fused layer ops of anna-core: an attention layer's or a gated DeltaNet layer's pre-processing (and its
attention) as one op. Layers look them up with ``ops.accelerated(...)`` and compose the unfused ops where only
the reference would serve them. Conventions: :mod:`anna_core.kernels.ops`."""

from __future__ import annotations

from anna_core.kernels.contracts import OpContract
from anna_core.kernels.ops.declare import core_op

LAYER_FUSION_OPS: tuple[OpContract, ...] = (
    core_op(
        "qk_norm_rope_cache", "qk_norm_rope",
        signature=("qk_norm_rope_cache(q, k, v, q_weight, k_weight, eps, zero_centered, positions, inv_freq, k_cache, "
                   "v_cache, slot_mapping, rope_axis=None) -> q_out"),
        doc="""\
An attention layer's pre-processing as one op: q: ``[T, H_q, D]``; k, v: ``[T, H_kv, D]`` (unit
stride along D); q_weight, k_weight: ``[D]``; positions: ``[T]`` int64; inv_freq: ``[R/2]`` float32
rotary inverse frequencies (``R <= D`` rotated dims, even); caches and slot_mapping as
``reshape_and_cache``. ``q_out = rope(rms_norm(q, q_weight, eps, zero_centered))`` ``[T, H_q, D]``
(contiguous, q's dtype); ``k`` is normalised and rotated the same way and written with ``v`` into the
caches at ``slot_mapping``. Rotary: NeoX halves on the first ``R`` dims, ``cos/sin(position *
inv_freq)`` in float32, the remaining dims passed through; every intermediate rounded to q's dtype
where the unfused ``rms_norm`` / rotary / ``reshape_and_cache`` round it. Multi-row positions (M-RoPE,
Qwen-VL's temporal / height / width rows): positions ``[rows, T]`` int64 and rope_axis ``[R/2]`` int64, the
row whose position drives each frequency (``anna_core.layers.rotary.mrope_axis_of_frequency`` of the
config's ``mrope_section``, interleaved as Qwen3.5's); frequency ``f`` of token ``t`` then turns by
``positions[rope_axis[f], t] * inv_freq[f]``. Callers pass the shape fact ``position_rows`` (the rows)
when they hand multi-row positions, so an implementation that takes only ``[T]`` declines them.
""",
        checked=True,
        shape_facts=("head_dim", "position_rows"),
    ),
    core_op(
        "qkv_norm_rope_cache", "qk_norm_rope",
        signature=("qkv_norm_rope_cache(q, k, v, q_weight, k_weight, eps, zero_centered, positions, inv_freq, k_cache, "
                   "v_cache, slot_mapping) -> q_out"),
        doc="""\
``qk_norm_rope_cache`` (its arguments but ``rope_axis``: 1-D positions; the same result) with the values
normalised per head first by an RMSNorm without weight and the same eps: ``v = rms_norm(v, ones, eps, False)`` (float32, rounded to v's
dtype) before it is written (Gemma 4's value norm; v may be a view of k's rows, ``attention_k_eq_v``).
One op, so an attention layer with q, k and v norms runs its pre-processing in one launch.
""",
        checked=True,
        shape_facts=("head_dim",),
    ),
    core_op(
        "q_norm_rope", "qk_norm_rope",
        signature="q_norm_rope(q, weight, eps, zero_centered, positions, inv_freq) -> q_out",
        doc="""\
``qk_norm_rope_cache``'s query half alone, for a layer that writes no K/V (a KV-shared layer reading
another layer's cache): q ``[T, H, D]`` (unit stride along D); weight ``[D]``; positions ``[T]``
int64; inv_freq ``[R/2]`` float32. ``q_out = rope(rms_norm(q, weight, eps, zero_centered))`` ``[T, H,
D]`` contiguous in q's dtype, rounded as ``qk_norm_rope_cache`` rounds its queries.
""",
        shape_facts=("head_dim",),
    ),
    core_op(
        "q_norm_rope_attention", "qk_norm_rope",
        signature=("q_norm_rope_attention(q, weight, eps, zero_centered, positions, inv_freq, k_cache, v_cache, "
                   "cu_seqlens_q, seq_lens, block_tables, scale, sliding_window) -> o"),
        doc="""\
``q_norm_rope`` fused into the attention that reads its result, for a layer that writes no K/V (a KV-shared
layer): q ``[T, H_q, D]`` raw queries (unit stride along D); weight ``[D]``; positions ``[T]`` int64;
inv_freq ``[R/2]`` float32; the remaining arguments as ``paged_attention``. ``o = paged_attention(
q_norm_rope(q, weight, eps, zero_centered, positions, inv_freq), k_cache, v_cache, cu_seqlens_q, seq_lens,
block_tables, scale, sliding_window)`` ``[T, H_q, D]`` in q's dtype, the queries rounded as ``q_norm_rope``
rounds them. Callers look it up with the shape fact ``head_dim``.
""",
        shape_facts=("head_dim",),
    ),
    core_op(
        "qk_norm_rope_cache_attention", "qk_norm_rope",
        signature=("qk_norm_rope_cache_attention(q, k, v, q_weight, k_weight, eps, zero_centered, positions, inv_freq, "
                   "k_cache, v_cache, slot_mapping, cu_seqlens_q, seq_lens, block_tables, scale, sliding_window) -> o"),
        doc="""\
``qk_norm_rope_cache`` fused with the attention that reads its result (an attention layer with q and k
norms and no value norm that writes its own K/V: Qwen3-TTS's talker and code predictor): the first twelve arguments
as ``qk_norm_rope_cache`` (1-D positions, no ``rope_axis``), the rest as ``paged_attention``. ``o =
paged_attention(qk_norm_rope_cache(q, k, v, q_weight, k_weight, eps, zero_centered, positions, inv_freq,
k_cache, v_cache, slot_mapping), k_cache, v_cache, cu_seqlens_q, seq_lens, block_tables, scale,
sliding_window)`` ``[T, H_q, D]`` in q's dtype; the new keys and values are written into the caches as
that op writes them, rounded as it rounds them. Callers look it up with the shape fact ``head_dim``. The
precondition on ``slot_mapping`` of ``qkv_norm_rope_cache_attention`` holds.
""",
        shape_facts=("head_dim",),
    ),
    core_op(
        "qkv_norm_rope_cache_attention", "qk_norm_rope",
        signature=("qkv_norm_rope_cache_attention(q, k, v, q_weight, k_weight, eps, zero_centered, positions, inv_freq, "
                   "k_cache, v_cache, slot_mapping, cu_seqlens_q, seq_lens, block_tables, scale, sliding_window) -> o"),
        doc="""\
``qkv_norm_rope_cache`` fused with the attention that reads its result (an attention layer with q, k and v
norms that writes its own K/V: Gemma 4): the first twelve arguments as ``qkv_norm_rope_cache``, the rest
as ``paged_attention``. ``o = paged_attention(qkv_norm_rope_cache(q, k, v, q_weight, k_weight, eps,
zero_centered, positions, inv_freq, k_cache, v_cache, slot_mapping), k_cache, v_cache, cu_seqlens_q,
seq_lens, block_tables, scale, sliding_window)`` ``[T, H_q, D]`` in q's dtype; the new keys and values are
written into the caches as that op writes them, rounded as it rounds them. Callers look it up with the shape
fact ``head_dim``. Precondition (as the engine's tables hold): each token's ``slot_mapping`` entry is its
sequence's block-table slot of that token's cache position (a decode token's: ``seq_lens[i] - 1``), and a
valid slot (no negative padding slots): an implementation may use the new row from registers instead of
reading it back from the cache.
""",
        shape_facts=("head_dim",),
    ),
    core_op(
        "fused_gdn_decode", "gdn_fused",
        signature=("fused_gdn_decode(qkv, conv_weight, conv_states, z, a, b, neg_a, dt_bias, norm_weight, norm_eps, "
                   "states, slots, scale, num_k_heads) -> y"),
        doc="""\
One decode step of a gated DeltaNet layer from its input projection to its gated-norm output (the
``out_proj`` input). qkv: ``[B, C]`` projection before the conv (``C = 2*H_k*K + H_v*V``: q, k, v);
conv_weight: ``[C, W]`` (no bias); conv_states: ``[S, C, W-1]``; z: ``[B, H_v*V]``; a, b: ``[B, H_v]``
(rows may be strided, unit stride along the last dim); neg_a: ``[H_v]`` float32 ``-exp(A_log)``;
dt_bias: ``[H_v]``; norm_weight: ``[V]``; states: ``[S, H_v, K, V]`` float32; slots: ``[B]`` int64;
num_k_heads: ``H_k`` (divides ``H_v``; ``K``, ``V`` come from states). Equal to
``c = causal_conv1d_update(qkv, conv_weight, None, conv_states, slots, "silu")``; q, k = the
L2-normalised (``x * rsqrt(sum(x^2) + 1e-6)``, float32, rounded) q / k heads of ``c``, v its v heads;
``g = neg_a * softplus(a + dt_bias)``, ``beta = sigmoid(b)`` (float32); ``o = gated_delta_rule_decode(q,
k, v, g, beta, states, slots, scale)``; ``y = gated_rms_norm(o, z, norm_weight, norm_eps)`` ``[B,
H_v*V]`` in qkv's dtype. conv_states and states are updated in place at slots. Callers look it up with
the shape facts ``head_k_dim`` / ``head_v_dim`` (a kernel may fuse only some head sizes).
""",
        checked=True,
        shape_facts=("head_k_dim", "head_v_dim"),
    ),
    core_op(
        "fused_gdn_prefill", "gdn_fused",
        signature=("fused_gdn_prefill(qkv, a, b, neg_a, dt_bias, cu_seqlens, states, slots, scale, num_k_heads, "
                   "head_k_dim, head_v_dim) -> o"),
        doc="""\
A gated DeltaNet layer's prefill after its conv1d: qkv: ``[T, C]`` conv output (``C = 2*H_k*K +
H_v*V``); a, b: ``[T, H_v]`` raw projections (strided column views allowed); neg_a: ``[H_v]`` float32;
dt_bias: ``[H_v]``; cu_seqlens, states, slots, scale: as ``gated_delta_rule_prefill``; num_k_heads,
head_k_dim, head_v_dim: ``H_k``, ``K``, ``V``. Equal to q, k = the L2-normalised q / k heads of qkv, v
its v heads, ``g = neg_a * softplus(a + dt_bias)``, ``beta = sigmoid(b)``, then ``o =
gated_delta_rule_prefill(q, k, v, g, beta, cu_seqlens, states, slots, scale)`` ``[T, H_v, V]`` in
qkv's dtype; final states written to ``states[slots]``. Looked up with ``head_k_dim`` / ``head_v_dim``.
""",
        checked=True,
        shape_facts=("head_k_dim", "head_v_dim"),
    ),
)
"""``qk_norm_rope_cache``, ``qkv_norm_rope_cache``, ``q_norm_rope``, ``q_norm_rope_attention``,
``qk_norm_rope_cache_attention``, ``qkv_norm_rope_cache_attention``, ``fused_gdn_decode``, ``fused_gdn_prefill``."""
