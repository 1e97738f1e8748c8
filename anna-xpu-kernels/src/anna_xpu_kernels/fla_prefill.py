"""Gated delta rule prefill through fla-core's chunked Triton kernel, states gathered from / scattered to slots.

fla-core (``fla.ops.gated_delta_rule.chunk_gated_delta_rule``, Yang et al., "Gated Delta Networks",
2024) computes the same chunk-parallel recurrence as the torch reference
(:func:`anna_core.kernels.reference.gated_delta_rule.gated_delta_rule_prefill`) over a packed
variable-length batch (``cu_seqlens``) with grouped value heads (key head ``h // (H_v // H_k)``
serves value head ``h``, as in Anna's contract). This wrapper gathers the initial states
``states[slots]``, asks fla for the final states and writes them back with ``index_copy_``.
fla's kernels run on CUDA only (not under Triton's CPU interpreter); the microbenchmark checks
them against the reference on the GPU.

Host cost: fla derives its chunk indices from ``cu_seqlens`` with a host copy and caches them by
the *identity* of the tensor it is given. Every layer of one forward pass receives the same
``cu_seqlens`` tensor, so :class:`_SeqlensMemo` hands fla the same int64 tensor (and its host
copy, ``cu_seqlens_cpu``) for all of them: one device-to-host copy per forward pass instead of
one per layer, and fla's index cache hits from the second layer on.
"""

from __future__ import annotations

import torch
from anna_core.kernels.checks import check_gated_delta_rule, check_slots, num_sequences, require_dims

from anna_xpu_kernels._checks import require_same_device


class _SeqlensMemo:
    """The int64 device copy and host copy of the last ``cu_seqlens`` tensor seen (by identity and
    in-place version, so a tensor rewritten in place is converted again)."""

    def __init__(self) -> None:
        self._key: tuple[torch.Tensor, int] | None = None
        self._value: tuple[torch.Tensor, torch.Tensor] | None = None

    def get(self, cu_seqlens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        version = -1 if cu_seqlens.is_inference() else cu_seqlens._version  # inference tensors keep no counter
        key = self._key
        if key is None or key[0] is not cu_seqlens or key[1] != version or self._value is None:
            long = cu_seqlens.to(torch.long)
            self._key, self._value = (cu_seqlens, version), (long, long.cpu())
        return self._value


_SEQLENS = _SeqlensMemo()


def gated_delta_rule_prefill(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    cu_seqlens: torch.Tensor,
    states: torch.Tensor,
    slots: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """Chunked gated delta rule over a varlen batch via fla (signature of the reference op).

    Args:
        q, k: ``[T, H_k, K]`` L2-normalised; v: ``[T, H_v, V]`` (same dtype as q, k);
            g: ``[T, H_v]`` float32 log decay; beta: ``[T, H_v]``.
        cu_seqlens: ``[B+1]`` row offsets on the device; every sequence must have at least one token.
        states: ``[S, H_v, K, V]`` float32 pool; ``states[slots[i]]`` is read as the initial state and
            overwritten with the final one.
        slots: ``[B]`` int64 distinct slot indices.
        scale: query scale.

    Returns:
        ``[T, H_v, V]`` in v's dtype.

    Raises:
        ValueError: inconsistent shapes or non-float32 states.
        ImportError: fla-core is not installed (the probe declines in that case).
    """
    op = "gated_delta_rule_prefill"
    require_dims(op, q=(q, 3), k=(k, 3), v=(v, 3), g=(g, 2), beta=(beta, 2))
    check_gated_delta_rule(op, q, k, v, g, beta, states)
    total = q.shape[0]
    batch = num_sequences(op, cu_seqlens)
    check_slots(op, slots, batch, states.shape[0], host_check=False)
    require_same_device(op, q=q, k=k, v=v, g=g, beta=beta, states=states, slots=slots, cu_seqlens=cu_seqlens)
    if total == 0 or batch == 0:
        return v.new_empty(v.shape)

    from fla.ops.gated_delta_rule import chunk_gated_delta_rule

    cu_long, cu_cpu = _SEQLENS.get(cu_seqlens)
    initial = states.index_select(0, slots)  # [B, H_v, K, V] float32
    o, final = chunk_gated_delta_rule(
        q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0), g.to(torch.float32).unsqueeze(0),
        beta.to(v.dtype).unsqueeze(0), scale=float(scale), initial_state=initial, output_final_state=True,
        cu_seqlens=cu_long, cu_seqlens_cpu=cu_cpu,
    )
    states.index_copy_(0, slots, final.to(torch.float32))
    return o[0].to(v.dtype)
