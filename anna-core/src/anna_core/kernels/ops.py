"""The kernel ops of Anna and their one documented signature each.

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

Op names (keys of :data:`OPS`) and signatures:

``rms_norm(x, weight, eps, zero_centered) -> y``
    x: ``[..., D]``; weight: ``[D]``; computed in float32, returned in x's dtype.
    ``y = x / sqrt(mean(x^2) + eps) * (1 + weight if zero_centered else weight)``.

``gated_rms_norm(x, z, weight, eps) -> y``
    x, z: ``[..., D]``; weight: ``[D]``. ``y = rms_norm(x) * weight * silu(z)`` (float32 math; the
    gated DeltaNet output norm of Qwen3.5 / FLA ``FusedRMSNormGated``).

``add_rms_norm(x, residual, weight, eps, zero_centered) -> (y, new_residual)``
    x, residual: ``[T, D]``, one dtype (residual may be None: ``new_residual = x``); weight: ``[D]``.
    ``new_residual = x + residual`` rounded to x's dtype (as torch's ``x + residual``), then
    ``y = rms_norm(new_residual, weight, eps, zero_centered)``: the residual add of a pre-norm block
    fused into the next norm. Both outputs are fresh tensors; the inputs are not written.

``silu_and_mul(x) -> y``
    x: ``[..., 2I]`` (gate, then up: the merged gate/up projection); y: ``[..., I]`` =
    ``silu(gate) * up`` evaluated as torch does in x's dtype (SiLU in float32 rounded to x's dtype,
    then the product in float32 rounded again).

``sigmoid_mul(x, gate) -> y``
    x, gate: ``[..., D]``, one dtype (gate may be a strided view with unit stride along D);
    ``y = x * sigmoid(gate)`` evaluated as torch does in x's dtype (the attention output gate).

``causal_conv1d_prefill(x, weight, bias, cu_seqlens, conv_states, slots, activation) -> y``
    x: ``[T, C]``; weight: ``[C, W]`` (depthwise); bias: ``[C]`` or None;
    conv_states: ``[S, C, W-1]`` (the last ``W-1`` inputs of each sequence, oldest first);
    activation: ``"silu"`` or None. Each sequence starts from its slot's state (zeros if fresh)
    and writes back its last ``W-1`` inputs. y: ``[T, C]``.

``causal_conv1d_update(x, weight, bias, conv_states, slots, activation) -> y``
    One new token per sequence. x: ``[B, C]``; other arguments as above. y: ``[B, C]``.

``gated_delta_rule_prefill(q, k, v, g, beta, cu_seqlens, states, slots, scale) -> o``
    q, k: ``[T, H_k, K]`` (already L2-normalised); v: ``[T, H_v, V]``; ``H_v`` a multiple of
    ``H_k`` (key head ``h // (H_v // H_k)`` serves value head ``h``); g: ``[T, H_v]`` float32 log
    decay (``<= 0``); beta: ``[T, H_v]``; states: ``[S, H_v, K, V]`` float32; scale: float.
    Per head and token (Yang et al., "Gated Delta Networks", 2024; HF ``torch_chunk_gated_delta_rule``):
    ``S = exp(g_t) S;  S += k_t (beta_t (v_t - S^T k_t))^T;  o_t = S^T (scale q_t)``.
    Computed chunk-wise (64 tokens); returns o ``[T, H_v, V]`` in v's dtype; final state written
    to ``states[slots[i]]``.

``gated_delta_rule_decode(q, k, v, g, beta, states, slots, scale) -> o``
    One token per sequence: q, k ``[B, H_k, K]``, v ``[B, H_v, V]``, g, beta ``[B, H_v]``; same
    recurrence; o ``[B, H_v, V]``; states updated in place.

``reshape_and_cache(k, v, k_cache, v_cache, slot_mapping) -> None``
    k, v: ``[T, H_kv, D]`` written to the paged cache at ``slot_mapping`` (``[T]`` int64).

``paged_attention(q, k_cache, v_cache, cu_seqlens_q, seq_lens, block_tables, scale, sliding_window) -> o``
    q: ``[T, H_q, D]`` (rotary applied; ``H_q`` a multiple of ``H_kv``); seq_lens: ``[B]`` int32,
    each sequence's context length *including* its new tokens, whose K/V are already in the
    cache; block_tables: ``[B, max_blocks]`` int32. Query ``j`` of sequence ``i`` sits at position
    ``seq_lens[i] - q_len_i + j`` and attends causally to positions ``<=`` its own (and
    ``> pos - sliding_window`` when ``sliding_window`` is an int). Covers prefill, chunked
    prefill over a cached prefix, and decode. o: ``[T, H_q, D]``.

``linear(x, weight, bias) -> y``
    x: ``[M, K]`` (``[..., K]`` works too: leading dims are flattened and restored); weight:
    ``[N, K]`` as ``nn.Linear`` stores it, same dtype as x; bias: ``[N]`` or None.
    ``y = x @ weight^T + bias``, float32 accumulation; y: ``[M, N]`` in x's dtype. Decode calls it
    with a handful of rows (``M`` = batch size), where reading the weight is all the cost:
    implementations may specialise those skinny shapes (GEMV, split-K) and leave larger ``M`` to a GEMM.

``add_rms_norm_linear(x, residual, norm_weight, eps, zero_centered, weight) -> (y, new_residual)``
    x, residual: ``[M, K]``, one dtype (residual may be None: ``new_residual = x``); norm_weight:
    ``[K]``; weight: ``[N, K]`` of x's dtype, no bias. ``(h, new_residual) = add_rms_norm(x, residual,
    norm_weight, eps, zero_centered)`` then ``y = linear(h, weight, None)`` ``[M, N]``, every
    intermediate rounded to x's dtype as those ops round it: a pre-norm block's residual add and norm
    fused into its input projection (one launch at decode instead of two). Inputs are not written.

``silu_mul_linear(x, weight) -> y``
    x: ``[M, 2K]`` (gate, then up); weight: ``[N, K]`` of x's dtype, no bias.
    ``y = linear(silu_and_mul(x), weight, None)`` ``[M, N]``, the product rounded to x's dtype as
    ``silu_and_mul`` rounds it: the SwiGLU product fused into ``down_proj``.

``linear_silu_mul(x, weight) -> y``
    x: ``[M, K]``; weight: ``[2I, K]`` of x's dtype (gate rows, then up rows), no bias.
    ``y = silu_and_mul(linear(x, weight, None))`` ``[M, I]``, the projection rounded to x's dtype first:
    the SwiGLU product fused into the merged gate/up projection (no ``[M, 2I]`` intermediate).

``add_rms_norm_linear_silu_mul(x, residual, norm_weight, eps, zero_centered, weight) -> (y, new_residual)``
    Arguments as ``add_rms_norm_linear`` with weight ``[2I, K]`` (gate rows, then up rows).
    ``(h, new_residual) = add_rms_norm(x, residual, norm_weight, eps, zero_centered)`` then
    ``y = linear_silu_mul(h, weight)`` ``[M, I]``, rounded as those ops round: a pre-norm MLP's
    residual add, norm, gate/up projection and SwiGLU product (one launch at decode instead of two).
"""

OPS: dict[str, str] = {
    "rms_norm": "anna_core.kernels.reference.norms:rms_norm",
    "gated_rms_norm": "anna_core.kernels.reference.norms:gated_rms_norm",
    "add_rms_norm": "anna_core.kernels.reference.norms:add_rms_norm",
    "silu_and_mul": "anna_core.kernels.reference.activations:silu_and_mul",
    "sigmoid_mul": "anna_core.kernels.reference.activations:sigmoid_mul",
    "causal_conv1d_prefill": "anna_core.kernels.reference.conv1d:causal_conv1d_prefill",
    "causal_conv1d_update": "anna_core.kernels.reference.conv1d:causal_conv1d_update",
    "gated_delta_rule_prefill": "anna_core.kernels.reference.gated_delta_rule:gated_delta_rule_prefill",
    "gated_delta_rule_decode": "anna_core.kernels.reference.gated_delta_rule:gated_delta_rule_decode",
    "reshape_and_cache": "anna_core.kernels.reference.paged_attention:reshape_and_cache",
    "paged_attention": "anna_core.kernels.reference.paged_attention:paged_attention",
    "linear": "anna_core.kernels.reference.linear:linear",
    "add_rms_norm_linear": "anna_core.kernels.reference.fused_linear:add_rms_norm_linear",
    "silu_mul_linear": "anna_core.kernels.reference.fused_linear:silu_mul_linear",
    "linear_silu_mul": "anna_core.kernels.reference.fused_linear:linear_silu_mul",
    "add_rms_norm_linear_silu_mul": "anna_core.kernels.reference.fused_linear:add_rms_norm_linear_silu_mul",
}
"""Op name -> its torch reference implementation (registered at priority 0 by the built-in plugin)."""
