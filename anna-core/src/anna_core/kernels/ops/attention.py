"""The paged KV-cache ops of anna-core: cache writes and paged attention, plain and TurboQuant-quantized.
Conventions: :mod:`anna_core.kernels.ops`."""

from __future__ import annotations

from anna_core.kernels.contracts import OpContract
from anna_core.kernels.ops.declare import core_op

ATTENTION_OPS: tuple[OpContract, ...] = (
    core_op(
        "reshape_and_cache", "paged_attention",
        signature="reshape_and_cache(k, v, k_cache, v_cache, slot_mapping) -> None",
        doc="""\
k, v: ``[T, H_kv, D]`` written to the paged cache at ``slot_mapping`` (``[T]`` int64).
""",
    ),
    core_op(
        "paged_attention", "paged_attention",
        signature="paged_attention(q, k_cache, v_cache, cu_seqlens_q, seq_lens, block_tables, scale, sliding_window) -> o",
        doc="""\
q: ``[T, H_q, D]`` (rotary applied; ``H_q`` a multiple of ``H_kv``); seq_lens: ``[B]`` int32,
each sequence's context length *including* its new tokens, whose K/V are already in the
cache; block_tables: ``[B, max_blocks]`` int32. Query ``j`` of sequence ``i`` sits at position
``seq_lens[i] - q_len_i + j`` and attends causally to positions ``<=`` its own (and
``> pos - sliding_window`` when ``sliding_window`` is an int). Covers prefill, chunked
prefill over a cached prefix, and decode. o: ``[T, H_q, D]``.
""",
        shape_facts=("head_dim",),
    ),
    core_op(
        "turboquant_cache_write", "turboquant",
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
        compare="anna_core.testing.conformance.turboquant:compare_written_caches",
    ),
    core_op(
        "paged_attention_turboquant", "turboquant",
        signature="paged_attention_turboquant(q, k_cache, v_cache, cu_seqlens_q, seq_lens, block_tables, scale, "
                   "sliding_window, rotation, qjl, key_centroids, value_centroids, residual_k=None, residual_v=None, "
                   "residual_pos=None, slots=None, valid_lens=None, new_k=None, new_v=None) -> o",
        doc="""\
``paged_attention`` over a TurboQuant cache (caches and tables as ``turboquant_cache_write``): every
key is reconstructed as ``k~ = n Pi^T (c[idx] + sqrt(pi/2) / D * gamma * S^T z)`` (``z = +-1`` the
stored signs; its inner product with q is unbiased, arXiv 2504.19874 Theorem 2) and every value as
``v~ = n Pi^T c[idx]``; the attention rule, arguments and result are ``paged_attention``'s. Float32
math; implementations may attend in the rotated basis (``q Pi^T`` against ``c[idx]``, ``q Pi^T S^T``
against ``z``, the output rotated back), equal up to float32 rounding (for a bfloat16 / float16 q, up to
bfloat16 rounding of the dots' operands, as ``paged_attention``'s tensor-core dots). With a residual ring
(:mod:`anna_core.kv_quant.residual`): residual_k / residual_v ``[S, R, H_kv, D]`` (rows rotated, ``Pi k``, in
the serving dtype), residual_pos ``[S, R]`` int32, slots ``[B]`` int64 (each sequence's ring), valid_lens
``[B]`` int32 or None (each sequence's real context length: ``seq_lens`` less a padded prefill's padding rows;
None: ``seq_lens``): position ``valid_lens[i] - R <= p < valid_lens[i]`` with ``residual_pos[slots[i], p % R] ==
p`` is read as ``Pi^T`` of its ring rows instead of its quantized ones. With new_k / new_v ``[T, H_kv, D]`` too
(the step's own K/V as the ring stores them: ``Pi k`` in the ring's dtype): a per-query window, so a prompt's
output does not depend on how its prefill is chunked. Query at position ``q`` reads key ``p`` exactly iff
``q - R < p <= q``: from new_k / new_v (row ``cu_seqlens_q[i] + p - s``) when ``p >= s = seq_lens[i] - q_len``,
else from the ring where ``residual_pos[slots[i], p % R] == p`` (the caller passes the ring before the step's
rows evicted anything); every other key from its quantized row; valid_lens unused. Where the ring already holds a
position ``p >= s`` its rows are new_k / new_v's (the caller writes each sequence's first new position before the
attention, so a decode step's window is all in the ring): an implementation may read it from either.
""",
        shape_facts=("head_dim",),
    ),
)
"""``reshape_and_cache``, ``paged_attention``, ``turboquant_cache_write``, ``paged_attention_turboquant``."""
