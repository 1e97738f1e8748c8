"""The kernel ops of anna-core: one :class:`~anna_core.kernels.contracts.OpContract` each.

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
``q_norm_rope_attention``, ``qkv_norm_rope_cache_attention``, ``fused_gdn_decode``,
``fused_gdn_prefill``)
are compositions of the others; their references compose the unfused references, so a fused kernel is
checked against exactly the numerics of the unfused path.
"""

from __future__ import annotations

from anna_core.kernels.contracts import OpContract

_REFERENCE = "anna_core.kernels.reference"


def _ref(module: str, attr: str) -> str:
    return f"{_REFERENCE}.{module}:{attr}"


def _examples(op: str) -> str:
    return f"anna_core.kernels.examples:{op}"


CORE_OPS: tuple[OpContract, ...] = (
    OpContract(
        name="rms_norm",
        signature="rms_norm(x, weight, eps, zero_centered) -> y",
        doc="""\
x: ``[..., D]``; weight: ``[D]``; computed in float32, returned in x's dtype.
``y = x / sqrt(mean(x^2) + eps) * (1 + weight if zero_centered else weight)``.
""",
        reference=_ref("norms", "rms_norm"),
        examples=_examples("rms_norm"),
    ),
    OpContract(
        name="gated_rms_norm",
        signature="gated_rms_norm(x, z, weight, eps) -> y",
        doc="""\
x, z: ``[..., D]``; weight: ``[D]``. ``y = rms_norm(x) * weight * silu(z)`` (float32 math; the
gated DeltaNet output norm of Qwen3.5 / FLA ``FusedRMSNormGated``).
""",
        reference=_ref("norms", "gated_rms_norm"),
        examples=_examples("gated_rms_norm"),
    ),
    OpContract(
        name="add_rms_norm",
        signature="add_rms_norm(x, residual, weight, eps, zero_centered) -> (y, new_residual)",
        doc="""\
x, residual: ``[T, D]``, one dtype (residual may be None: ``new_residual = x``); weight: ``[D]``.
``new_residual = x + residual`` rounded to x's dtype (as torch's ``x + residual``), then
``y = rms_norm(new_residual, weight, eps, zero_centered)``: the residual add of a pre-norm block
fused into the next norm. Both outputs are fresh tensors; the inputs are not written.
""",
        reference=_ref("norms", "add_rms_norm"),
        examples=_examples("add_rms_norm"),
    ),
    OpContract(
        name="post_norm_residual",
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
        reference=_ref("norms", "post_norm_residual"),
        examples=_examples("post_norm_residual"),
    ),
    OpContract(
        name="dual_post_norm_residual",
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
        reference=_ref("norms", "dual_post_norm_residual"),
        examples=_examples("dual_post_norm_residual"),
    ),
    OpContract(
        name="rms_norm_pair",
        signature="rms_norm_pair(x, weight, eps, zero_centered, scale_weight, factor) -> (y, s)",
        doc="""\
Two norms of one read of x (Gemma 4's MoE layer: the experts' input norm and the router's input).
x: ``[..., D]``; weight, scale_weight: ``[D]`` (scale_weight of x's dtype, as the rounding below
assumes); factor: a Python float. ``y = rms_norm(x, weight, eps, zero_centered)``; ``s = rms_norm(x,
ones, eps, False) * scale_weight * factor`` with the norm and each product rounded to x's dtype (torch's
rounding of that expression: transformers' ``Gemma4TextRouter``), all math in float32. Both ``[...,
D]`` in x's dtype.
""",
        reference=_ref("norms", "rms_norm_pair"),
        examples=_examples("rms_norm_pair"),
    ),
    OpContract(
        name="post_norm_residual_norm_pair",
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
        reference=_ref("norms", "post_norm_residual_norm_pair"),
        examples=_examples("post_norm_residual_norm_pair"),
    ),
    OpContract(
        name="silu_and_mul",
        signature="silu_and_mul(x) -> y",
        doc="""\
x: ``[..., 2I]`` (gate, then up: the merged gate/up projection); y: ``[..., I]`` =
``silu(gate) * up`` evaluated as torch does in x's dtype (SiLU in float32 rounded to x's dtype,
then the product in float32 rounded again).
""",
        reference=_ref("activations", "silu_and_mul"),
        examples=_examples("silu_and_mul"),
    ),
    OpContract(
        name="sigmoid_mul",
        signature="sigmoid_mul(x, gate) -> y",
        doc="""\
x, gate: ``[..., D]``, one dtype (gate may be a strided view with unit stride along D);
``y = x * sigmoid(gate)`` evaluated as torch does in x's dtype (the attention output gate).
""",
        reference=_ref("activations", "sigmoid_mul"),
        examples=_examples("sigmoid_mul"),
    ),
    OpContract(
        name="causal_conv1d_prefill",
        signature="causal_conv1d_prefill(x, weight, bias, cu_seqlens, conv_states, slots, activation) -> y",
        doc="""\
x: ``[T, C]``; weight: ``[C, W]`` (depthwise); bias: ``[C]`` or None;
conv_states: ``[S, C, W-1]`` (the last ``W-1`` inputs of each sequence, oldest first);
activation: ``"silu"`` or None. Each sequence starts from its slot's state (zeros if fresh)
and writes back its last ``W-1`` inputs. y: ``[T, C]``.
""",
        reference=_ref("conv1d", "causal_conv1d_prefill"),
        examples=_examples("causal_conv1d_prefill"),
    ),
    OpContract(
        name="causal_conv1d_update",
        signature="causal_conv1d_update(x, weight, bias, conv_states, slots, activation) -> y",
        doc="""\
One new token per sequence. x: ``[B, C]``; other arguments as above. y: ``[B, C]``.
""",
        reference=_ref("conv1d", "causal_conv1d_update"),
        examples=_examples("causal_conv1d_update"),
    ),
    OpContract(
        name="gated_delta_rule_prefill",
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
        reference=_ref("gated_delta_rule", "gated_delta_rule_prefill"),
        examples=_examples("gated_delta_rule_prefill"),
    ),
    OpContract(
        name="gated_delta_rule_decode",
        signature="gated_delta_rule_decode(q, k, v, g, beta, states, slots, scale) -> o",
        doc="""\
One token per sequence: q, k ``[B, H_k, K]``, v ``[B, H_v, V]``, g, beta ``[B, H_v]``; same
recurrence; o ``[B, H_v, V]``; states updated in place.
""",
        reference=_ref("gated_delta_rule", "gated_delta_rule_decode"),
        examples=_examples("gated_delta_rule_decode"),
    ),
    OpContract(
        name="reshape_and_cache",
        signature="reshape_and_cache(k, v, k_cache, v_cache, slot_mapping) -> None",
        doc="""\
k, v: ``[T, H_kv, D]`` written to the paged cache at ``slot_mapping`` (``[T]`` int64).
""",
        reference=_ref("paged_attention", "reshape_and_cache"),
        examples=_examples("reshape_and_cache"),
    ),
    OpContract(
        name="paged_attention",
        signature="paged_attention(q, k_cache, v_cache, cu_seqlens_q, seq_lens, block_tables, scale, sliding_window) -> o",
        doc="""\
q: ``[T, H_q, D]`` (rotary applied; ``H_q`` a multiple of ``H_kv``); seq_lens: ``[B]`` int32,
each sequence's context length *including* its new tokens, whose K/V are already in the
cache; block_tables: ``[B, max_blocks]`` int32. Query ``j`` of sequence ``i`` sits at position
``seq_lens[i] - q_len_i + j`` and attends causally to positions ``<=`` its own (and
``> pos - sliding_window`` when ``sliding_window`` is an int). Covers prefill, chunked
prefill over a cached prefix, and decode. o: ``[T, H_q, D]``.
""",
        reference=_ref("paged_attention", "paged_attention"), shape_facts=("head_dim",),
        examples=_examples("paged_attention"),
    ),
    OpContract(
        name="turboquant_cache_write",
        signature=("turboquant_cache_write(k, v, k_cache, v_cache, slot_mapping, rotation, qjl, key_centroids, "
                   "value_centroids) -> None"),
        doc="""\
``reshape_and_cache`` into a TurboQuant cache (Zandieh et al., arXiv 2504.19874; rows as
:mod:`anna_core.kv_quant.layout`). k, v: ``[T, H_kv, D]`` (D a multiple of 8); k_cache / v_cache: uint8
``[num_blocks, block_size, H_kv, key_row_bytes / value_row_bytes]``; slot_mapping ``[T]`` int64; rotation
``Pi`` and qjl ``S``: float32 ``[D, D]``; key_centroids ``[2**(bits-1)]``, value_centroids ``[2**bits]``
float32 sorted (bits 2, 3 or 4). In float32: a key's row holds ``n = ||k||``, ``y = Pi k / n``, the index
of the nearest key centroid of each ``y_j``, ``gamma = ||r||`` of ``r = y - c[idx]`` and the signs
``S r >= 0`` (QJL, section 3.2); a value's row ``n = ||v||`` and the nearest value centroids of
``Pi v / n`` (section 3.1). Ties between two centroids go to the lower one. Up to float32 rounding: a norm may
differ in its last bit, a coordinate within rounding of a decision boundary may take the other code (the
conformance suite compares the rows as the values they decode to).
""",
        reference=_ref("turboquant", "turboquant_cache_write"),
        examples=_examples("turboquant_cache_write"),
        compare="anna_core.testing.conformance.turboquant:compare_written_caches",
    ),
    OpContract(
        name="paged_attention_turboquant",
        signature=("paged_attention_turboquant(q, k_cache, v_cache, cu_seqlens_q, seq_lens, block_tables, scale, "
                   "sliding_window, rotation, qjl, key_centroids, value_centroids, residual_k=None, residual_v=None, "
                   "residual_pos=None, slots=None) -> o"),
        doc="""\
``paged_attention`` over a TurboQuant cache (caches and tables as ``turboquant_cache_write``): every
key is reconstructed as ``k~ = n Pi^T (c[idx] + sqrt(pi/2) / D * gamma * S^T z)`` (``z = +-1`` the
stored signs; its inner product with q is unbiased, arXiv 2504.19874 Theorem 2) and every value as
``v~ = n Pi^T c[idx]``; the attention rule, arguments and result are ``paged_attention``'s. Float32
math; implementations may attend in the rotated basis (``q Pi^T`` against ``c[idx]``, ``q Pi^T S^T``
against ``z``, the output rotated back), equal up to float32 rounding (for a bfloat16 / float16 q, up to
bfloat16 rounding of the dots' operands, as ``paged_attention``'s tensor-core dots). With a residual ring
(:mod:`anna_core.kv_quant.residual`): residual_k / residual_v ``[S, R, H_kv, D]`` (rows rotated, ``Pi k``, in
the serving dtype), residual_pos ``[S, R]`` int32, slots ``[B]`` int64 (each sequence's ring): position
``p >= seq_lens[i] - R`` with ``residual_pos[slots[i], p % R] == p`` is read as ``Pi^T`` of its ring rows
instead of its quantized ones.
""",
        reference=_ref("turboquant", "paged_attention_turboquant"), shape_facts=("head_dim",),
        examples=_examples("paged_attention_turboquant"),
    ),
    OpContract(
        name="linear",
        signature="linear(x, weight, bias) -> y",
        doc="""\
x: ``[M, K]`` (``[..., K]`` works too: leading dims are flattened and restored); weight:
``[N, K]`` as ``nn.Linear`` stores it, same dtype as x; bias: ``[N]`` or None.
``y = x @ weight^T + bias``, float32 accumulation; y: ``[M, N]`` in x's dtype. Decode calls it
with a handful of rows (``M`` = batch size), where reading the weight is all the cost:
implementations may specialise those skinny shapes (GEMV, split-K) and leave larger ``M`` to a GEMM.
""",
        reference=_ref("linear", "linear"),
        examples=_examples("linear"),
    ),
    OpContract(
        name="int4_linear",
        signature="int4_linear(x, packed, scale_zero, group_size) -> y",
        doc="""\
A linear layer whose weight is kept packed (GGUF weights on the CPU: ``anna_core.layers.quant_linear``).
x: ``[M, K]``; packed: ``[N, K/2]`` uint8, 4-bit codes ``q`` in the device's torch int4 layout (CPU:
``aten::_convert_weight_to_int4pack_for_cpu``); scale_zero: ``[K/g, N, 2]`` of x's dtype; group_size:
``g`` in 32, 64, 128, 256. ``w[n, k] = (q[n, k] - 8) * scale_zero[k // g, n, 0] + scale_zero[k // g,
n, 1]``, ``y = x @ w^T`` ``[M, N]`` in x's dtype, float32 accumulation (exact to float32 rounding in
float32; on the CPU the bfloat16 path is the fast one).
""",
        reference=_ref("int4_linear", "int4_linear"),
        check=_ref("int4_linear", "check_int4_linear"),
        examples=_examples("int4_linear"),
    ),
    OpContract(
        name="wq_linear",
        signature="wq_linear(x, qweight, scale, zero, scheme, bias) -> y",
        doc="""\
A linear layer whose weight is quantized for accelerators (``--weight-quant int4|int8|fp8``; layouts in
``anna_core.weights.gpu_quant``). x: ``[M, K]`` (or ``[..., K]``) float; scheme ``"int4"``: qweight ``[N, K/2]``
uint8 (two codes in ``[0, 15]`` per byte, column ``2j`` in the low nibble), scale and zero ``[N, K/128]`` of one
float dtype, ``w[n, k] = q * scale[n, k // 128] + zero[n, k // 128]``; ``"int8"``: qweight ``[N, K]`` int8,
scale ``[N]`` float32, zero None, ``w = q * scale[n]``; ``"fp8"``: qweight ``[N, K]`` float8_e4m3fn, scale
``[ceil(N/128), ceil(K/128)]`` float32, zero None, ``w = q * scale[n // 128, k // 128]``. bias: ``[N]`` of x's
dtype or None. ``y = x @ w^T + bias`` ``[..., N]`` in x's dtype, float32 dequantization and accumulation, one
rounding (the reference: dequantize to float32, matmul in float32). Callers look it up with the shape fact
``scheme`` (a kernel may serve only some schemes).
""",
        reference=_ref("wq_linear", "wq_linear"),
        check=_ref("wq_linear", "check_wq_linear"),
        shape_facts=("scheme",),
        examples=_examples("wq_linear"),
    ),
    OpContract(
        name="lm_head_topk",
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
        reference=_ref("lm_head_topk", "lm_head_topk"),
        check=_ref("lm_head_topk", "check_lm_head_topk"),
        shape_facts=("scheme",),
        examples=_examples("lm_head_topk"),
    ),
    OpContract(
        name="add_rms_norm_wq_linear",
        signature=("add_rms_norm_wq_linear(x, residual, norm_weight, eps, zero_centered, qweight, scale, zero, scheme, "
                   "activation=None) -> (y, new_residual)"),
        doc="""\
``add_rms_norm_linear`` (activation None) or ``add_rms_norm_linear_act_mul`` (activation ``"silu"`` /
``"gelu_tanh"``, weight ``[2I, K]`` gate rows then up rows) with the weight quantized as ``wq_linear`` takes
it: ``(h, new_residual) = add_rms_norm(x, residual, norm_weight, eps, zero_centered)``, ``y = wq_linear(h,
qweight, scale, zero, scheme, None)`` ``[M, N]``, then ``act_and_mul(y, activation)`` ``[M, I]``, every
intermediate rounded to x's dtype as those ops round it (one launch at decode where a kernel fuses them).
x, residual: ``[M, K]``, one dtype (residual may be None); norm_weight: ``[K]``. Looked up with ``scheme``.
""",
        reference=_ref("wq_linear", "add_rms_norm_wq_linear"),
        check=_ref("wq_linear", "check_add_rms_norm_wq_linear"),
        shape_facts=("scheme",),
        examples=_examples("add_rms_norm_wq_linear"),
    ),
    OpContract(
        name="add_rms_norm_linear",
        signature="add_rms_norm_linear(x, residual, norm_weight, eps, zero_centered, weight) -> (y, new_residual)",
        doc="""\
x, residual: ``[M, K]``, one dtype (residual may be None: ``new_residual = x``); norm_weight:
``[K]``; weight: ``[N, K]`` of x's dtype, no bias. ``(h, new_residual) = add_rms_norm(x, residual,
norm_weight, eps, zero_centered)`` then ``y = linear(h, weight, None)`` ``[M, N]``, every
intermediate rounded to x's dtype as those ops round it: a pre-norm block's residual add and norm
fused into its input projection (one launch at decode instead of two). Inputs are not written.
""",
        reference=_ref("fused_linear", "add_rms_norm_linear"),
        examples=_examples("add_rms_norm_linear"),
    ),
    OpContract(
        name="act_mul_linear",
        signature='act_mul_linear(x, weight, activation="silu") -> y',
        doc="""\
x: ``[M, 2K]`` (gate, then up); weight: ``[N, K]`` of x's dtype, no bias; activation: one of
:data:`~anna_core.kernels.checks.GATED_ACTIVATIONS` (``"silu"``: SwiGLU, ``"gelu_tanh"``: GeGLU with
the tanh approximation, as Gemma). ``y = linear(act_and_mul(x, activation), weight, None)`` ``[M, N]``,
the product rounded to x's dtype as ``act_and_mul`` rounds it: the gated product fused into
``down_proj``.
""",
        reference=_ref("fused_linear", "act_mul_linear"),
        examples=_examples("act_mul_linear"),
    ),
    OpContract(
        name="gated_linear",
        signature='gated_linear(gate, up, weight, activation) -> y',
        doc="""\
gate, up: ``[M, K]`` one shape and dtype (up may be a strided view, unit stride along K); weight:
``[N, K]`` of their dtype, no bias; activation: ``"silu"`` or ``"gelu_tanh"``. ``y =
act_mul_linear(cat(gate, up), weight, activation)`` ``[M, N]``: the gated product of two tensors fused
into the projection after it (Gemma 4's per-layer-input block).
""",
        reference=_ref("fused_linear", "gated_linear"),
        check=_ref("fused_linear", "check_gated_linear"),
        examples=_examples("gated_linear"),
    ),
    OpContract(
        name="linear_act_mul",
        signature='linear_act_mul(x, weight, activation="silu") -> y',
        doc="""\
x: ``[M, K]``; weight: ``[2I, K]`` of x's dtype (gate rows, then up rows), no bias; activation:
``"silu"`` or ``"gelu_tanh"``. ``y = act_and_mul(linear(x, weight, None), activation)`` ``[M, I]``, the
projection rounded to x's dtype first: the gated product fused into the merged gate/up projection (no
``[M, 2I]`` intermediate).
""",
        reference=_ref("fused_linear", "linear_act_mul"),
        examples=_examples("linear_act_mul"),
    ),
    OpContract(
        name="add_rms_norm_linear_act_mul",
        signature=('add_rms_norm_linear_act_mul(x, residual, norm_weight, eps, zero_centered, weight, activation="silu") '
                   '-> (y, new_residual)'),
        doc="""\
Arguments as ``add_rms_norm_linear`` with weight ``[2I, K]`` (gate rows, then up rows), plus the
activation (``"silu"`` or ``"gelu_tanh"``). ``(h, new_residual) = add_rms_norm(x, residual,
norm_weight, eps, zero_centered)`` then ``y = linear_act_mul(h, weight, activation)`` ``[M, I]``,
rounded as those ops round: a pre-norm MLP's residual add, norm, gate/up projection and gated product
(one launch at decode instead of two).
""",
        reference=_ref("fused_linear", "add_rms_norm_linear_act_mul"),
        examples=_examples("add_rms_norm_linear_act_mul"),
    ),
    OpContract(
        name="post_norm_residual_linear",
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
        reference=_ref("fused_linear", "post_norm_residual_linear"),
        check=_ref("fused_linear", "check_post_norm_residual_linear"),
        examples=_examples("post_norm_residual_linear"),
    ),
    OpContract(
        name="moe_route",
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
        reference=_ref("routing", "moe_route"),
        check=_ref("routing", "check_moe_route"),
        shape_facts=("num_experts",),
        examples=_examples("moe_route"),
    ),
    OpContract(
        name="moe_experts",
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
        reference=_ref("moe", "moe_experts"),
        check=_ref("moe", "check_moe_experts"),
        examples=_examples("moe_experts"),
    ),
    OpContract(
        name="moe_experts_wq",
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
        reference=_ref("moe_wq", "moe_experts_wq"),
        check=_ref("moe_wq", "check_moe_experts_wq"),
        shape_facts=("scheme",),
        examples=_examples("moe_experts_wq"),
    ),
    OpContract(
        name="qk_norm_rope_cache",
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
        reference=_ref("qk_norm_rope", "qk_norm_rope_cache"),
        check=_ref("qk_norm_rope", "check_qk_norm_rope_cache"),
        shape_facts=("head_dim", "position_rows"),
        examples=_examples("qk_norm_rope_cache"),
    ),
    OpContract(
        name="qkv_norm_rope_cache",
        signature=("qkv_norm_rope_cache(q, k, v, q_weight, k_weight, eps, zero_centered, positions, inv_freq, k_cache, "
                   "v_cache, slot_mapping) -> q_out"),
        doc="""\
``qk_norm_rope_cache`` (its arguments but ``rope_axis``: 1-D positions; the same result) with the values
normalised per head first by an RMSNorm without weight and the same eps: ``v = rms_norm(v, ones, eps, False)`` (float32, rounded to v's
dtype) before it is written (Gemma 4's value norm; v may be a view of k's rows, ``attention_k_eq_v``).
One op, so an attention layer with q, k and v norms runs its pre-processing in one launch.
""",
        reference=_ref("qk_norm_rope", "qkv_norm_rope_cache"),
        check=_ref("qk_norm_rope", "check_qkv_norm_rope_cache"),
        shape_facts=("head_dim",),
        examples=_examples("qkv_norm_rope_cache"),
    ),
    OpContract(
        name="q_norm_rope",
        signature="q_norm_rope(q, weight, eps, zero_centered, positions, inv_freq) -> q_out",
        doc="""\
``qk_norm_rope_cache``'s query half alone, for a layer that writes no K/V (a KV-shared layer reading
another layer's cache): q ``[T, H, D]`` (unit stride along D); weight ``[D]``; positions ``[T]``
int64; inv_freq ``[R/2]`` float32. ``q_out = rope(rms_norm(q, weight, eps, zero_centered))`` ``[T, H,
D]`` contiguous in q's dtype, rounded as ``qk_norm_rope_cache`` rounds its queries.
""",
        reference=_ref("qk_norm_rope", "q_norm_rope"),
        shape_facts=("head_dim",),
        examples=_examples("q_norm_rope"),
    ),
    OpContract(
        name="q_norm_rope_attention",
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
        reference=_ref("qk_norm_rope", "q_norm_rope_attention"),
        shape_facts=("head_dim",),
        examples=_examples("q_norm_rope_attention"),
    ),
    OpContract(
        name="qkv_norm_rope_cache_attention",
        signature=("qkv_norm_rope_cache_attention(q, k, v, q_weight, k_weight, eps, zero_centered, positions, inv_freq, "
                   "k_cache, v_cache, slot_mapping, cu_seqlens_q, seq_lens, block_tables, scale, sliding_window) -> o"),
        doc="""\
``qkv_norm_rope_cache`` fused with the attention that reads its result (an attention layer with q, k and v
norms that writes its own K/V: Gemma 4): the first twelve arguments as ``qkv_norm_rope_cache``, the rest
as ``paged_attention``. ``o = paged_attention(qkv_norm_rope_cache(q, k, v, q_weight, k_weight, eps,
zero_centered, positions, inv_freq, k_cache, v_cache, slot_mapping), k_cache, v_cache, cu_seqlens_q,
seq_lens, block_tables, scale, sliding_window)`` ``[T, H_q, D]`` in q's dtype; the new keys and values are
written into the caches as that op writes them, rounded as it rounds them. Callers look it up with the shape
fact ``head_dim``.
""",
        reference=_ref("qk_norm_rope", "qkv_norm_rope_cache_attention"),
        shape_facts=("head_dim",),
        examples=_examples("qkv_norm_rope_cache_attention"),
    ),
    OpContract(
        name="fused_gdn_decode",
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
        reference=_ref("gdn_fused", "fused_gdn_decode"),
        check=_ref("gdn_fused", "check_fused_gdn_decode"),
        shape_facts=("head_k_dim", "head_v_dim"),
        examples=_examples("fused_gdn_decode"),
    ),
    OpContract(
        name="fused_gdn_prefill",
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
        reference=_ref("gdn_fused", "fused_gdn_prefill"),
        check=_ref("gdn_fused", "check_fused_gdn_prefill"),
        shape_facts=("head_k_dim", "head_v_dim"),
        examples=_examples("fused_gdn_prefill"),
    ),
)
"""Every op of anna-core, in documentation order."""

OPS: dict[str, OpContract] = {contract.name: contract for contract in CORE_OPS}
""":data:`CORE_OPS` by name."""
