"""Gated delta rule prefill through fla-core's chunked Triton kernels, states gathered from / scattered to slots.

fla-core (Yang et al., "Gated Delta Networks", 2024) computes the same chunk-parallel recurrence as
the torch reference (:func:`anna_core.kernels.reference.gated_delta_rule.gated_delta_rule_prefill`)
over a packed variable-length batch (``cu_seqlens``) with grouped value heads (key head
``h // (H_v // H_k)`` serves value head ``h``, as in Anna's contract). This module gathers the initial
states ``states[slots]``, runs fla's forward pass and writes the final states back with ``index_copy_``.
fla's kernels run on CUDA only (not under Triton's CPU interpreter); the microbenchmark checks them
against the reference on the GPU.

Host cost (a long prefill is bound by the host's launch work as much as by the GPU): the op calls
fla's forward function ``chunk_gated_delta_rule_fwd`` directly, not the autograd-wrapped public
``chunk_gated_delta_rule``, which adds an ``autograd.Function``, its decorators (contiguity guard,
autocast, backend dispatch) and saved tensors for a backward pass inference never runs (about a
fifth of fla's host time per layer under cProfile). The inputs are made contiguous here instead (fla's
kernels index them as packed ``[1, T, H, D]``). Skipping the dispatch also means fla's alternative
backends (e.g. FlashQLA, when installed) are not consulted: fla's Triton kernels run. The kernel
wrappers inside that function have the same dispatch; the probe turns it off before fla is imported
(``FLA_DISABLE_BACKEND_DISPATCH=1`` unless already set). The probe
(:func:`anna_xpu_kernels.probes.fla_available`) also checks that the installed fla has this forward
function with the parameters used here. A batch of one sequence runs fla's dense form (no ``cu_seqlens``):
nothing is read on the host, so it can be captured in a graph. Otherwise fla's chunk indices come
from ``cu_seqlens`` through a host copy;
:class:`_ChunkIndexMemo` computes them once per distinct ``cu_seqlens`` tensor and keeps the most recent
ones, so every layer of one forward pass (they all receive the same tensor, or the same per-round tensors
of a pass that takes state snapshots, :mod:`anna_core.layers.state_checkpoints`) shares one
device-to-host copy per tensor.

:func:`fused_prefill` (the ``fused_gdn_prefill`` op, which Qwen3.5's gated DeltaNet layer calls) also
takes over the layer's preparation of those inputs: q / k L2
norms, v, the decay and the write strength come from the conv output in one launch
(:func:`anna_xpu_kernels.gdn_prefill_prep.gdn_prefill_prep`) instead of a dozen torch ops.
"""

from __future__ import annotations

import attrs
import torch
from anna_core.kernels.checks import (
    check_gated_delta_rule,
    check_recurrent_states,
    check_slots,
    num_sequences,
    require,
    require_dims,
)

from anna_xpu_kernels._checks import require_same_device
from anna_xpu_kernels.gdn_prefill_prep import gdn_prefill_prep

CHUNK = 64
"""fla's chunk length (tokens per chunk of the chunk-parallel form)."""


@attrs.frozen
class ChunkIndex:
    """What fla needs to walk a varlen batch: ``cu_seqlens`` as int64 on the device, and ``chunk_indices``
    ``[num_chunks, 2]`` int64 (sequence, chunk within it) from ``fla.ops.utils.index.prepare_chunk_indices``."""

    cu_seqlens: torch.Tensor
    chunk_indices: torch.Tensor


class _ChunkIndexMemo:
    """The :class:`ChunkIndex` of the ``capacity`` most recent ``cu_seqlens`` tensors seen, by identity (and
    by in-place version for tensors outside inference mode, which are converted again after an in-place
    rewrite; inference tensors keep no version: callers must not rewrite them in place, and the engine
    builds fresh ones per step). The memo holds its tensors, so an identity is never reused while listed.
    The int64 tensor handed to fla is always a fresh copy, because fla caches its own derived indices by
    the identity of the tensor it is given.

    Args:
        capacity: tensors remembered (a step's rounds each have one; the oldest is dropped first).
    """

    def __init__(self, capacity: int = 64) -> None:
        self.capacity = capacity
        self._entries: list[tuple[torch.Tensor, int, ChunkIndex]] = []  # oldest first
        self.num_conversions = 0

    def get(self, cu_seqlens: torch.Tensor) -> ChunkIndex:
        version = -1 if cu_seqlens.is_inference() else cu_seqlens._version  # inference tensors keep no counter
        for i, (tensor, ver, value) in enumerate(self._entries):
            if tensor is cu_seqlens:
                if ver == version:
                    return value
                del self._entries[i]
                break
        from fla.ops.utils.index import prepare_chunk_indices

        long = cu_seqlens.to(torch.long, copy=True)
        value = ChunkIndex(long, prepare_chunk_indices(long, CHUNK, cu_seqlens_cpu=long.cpu()))
        self.num_conversions += 1
        self._entries.append((cu_seqlens, version, value))
        del self._entries[:-self.capacity]
        return value


_CHUNK_INDEX = _ChunkIndexMemo()


def _batch(op: str, cu_seqlens: torch.Tensor, total: int) -> int:
    """``B`` from ``cu_seqlens`` ``[B+1]`` (shape only, no sync).

    Raises:
        ValueError: ``cu_seqlens`` is not 1-D, or has no sequence while there are ``total > 0`` tokens.
    """
    batch = num_sequences(op, cu_seqlens)
    require(batch > 0 or total == 0, op, f"{total} tokens but cu_seqlens {tuple(cu_seqlens.shape)} has no sequence")
    return batch


def chunked_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
                    cu_seqlens: torch.Tensor, states: torch.Tensor, slots: torch.Tensor, scale: float) -> torch.Tensor:
    """fla's chunked forward pass on checked arguments (shapes as :func:`gated_delta_rule_prefill`'s, with
    ``beta`` already in v's dtype and ``g`` float32); ``states[slots]`` updated in place; returns o ``[T, H_v, V]``."""
    from fla.ops.gated_delta_rule.chunk import chunk_gated_delta_rule_fwd

    # one sequence holds every row: fla's dense form needs no chunk indices (no host copy; graph-capturable)
    index = _CHUNK_INDEX.get(cu_seqlens) if cu_seqlens.shape[0] > 2 else None
    initial = states.index_select(0, slots)  # [B, H_v, K, V] float32
    with torch.cuda.device(q.device):
        _, o, _, final, _, _ = chunk_gated_delta_rule_fwd(
            q.contiguous().unsqueeze(0), k.contiguous().unsqueeze(0), v.contiguous().unsqueeze(0),
            g.contiguous().unsqueeze(0), beta.contiguous().unsqueeze(0), float(scale), initial, True,
            cu_seqlens=None if index is None else index.cu_seqlens,
            chunk_indices=None if index is None else index.chunk_indices, chunk_size=CHUNK)
    states.index_copy_(0, slots, final.to(torch.float32))
    return o[0].to(v.dtype)


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
            g: ``[T, H_v]`` float32 log decay; beta: ``[T, H_v]`` (rounded to v's dtype for fla).
        cu_seqlens: ``[B+1]`` row offsets on the device; every sequence must have at least one token.
        states: ``[S, H_v, K, V]`` float32 pool; ``states[slots[i]]`` is read as the initial state and
            overwritten with the final one.
        slots: ``[B]`` int64 distinct slot indices.
        scale: query scale.

    Returns:
        ``[T, H_v, V]`` in v's dtype.

    Raises:
        ValueError: inconsistent shapes, non-float32 states, or tokens without a sequence in ``cu_seqlens``.
        ImportError: fla-core is not installed (the probe declines in that case).
    """
    op = "gated_delta_rule_prefill"
    require_dims(op, q=(q, 3), k=(k, 3), v=(v, 3), g=(g, 2), beta=(beta, 2))
    check_gated_delta_rule(op, q, k, v, g, beta, states)
    total = q.shape[0]
    batch = _batch(op, cu_seqlens, total)
    check_slots(op, slots, batch, states.shape[0], host_check=False)
    require_same_device(op, q=q, k=k, v=v, g=g, beta=beta, states=states, slots=slots, cu_seqlens=cu_seqlens)
    if total == 0:
        return v.new_empty(v.shape)
    return chunked_forward(q, k, v, g.to(torch.float32), beta.to(v.dtype), cu_seqlens, states, slots, scale)


def fused_prefill(qkv: torch.Tensor, a: torch.Tensor, b: torch.Tensor, neg_a: torch.Tensor, dt_bias: torch.Tensor,
                  cu_seqlens: torch.Tensor, states: torch.Tensor, slots: torch.Tensor, scale: float,
                  num_k_heads: int, head_k_dim: int, head_v_dim: int) -> torch.Tensor:
    """A gated DeltaNet layer's prefill after its conv1d: input preparation and the chunked rule (the
    ``fused_gdn_prefill`` op; contract and reference in :mod:`anna_core.kernels.reference.gdn_fused`).

    Equal to the layer's unfused path: ``q, k`` = L2-normalised q / k heads of ``qkv``, ``v`` its v
    heads, ``g = neg_a * softplus(a + dt_bias)``, ``beta = sigmoid(b)``, then
    :func:`gated_delta_rule_prefill` (fla rounds beta to the activation dtype either way).

    Args:
        qkv: ``[T, C]`` conv output, ``C = 2*H_k*K + H_v*V`` (q, k, v heads); a, b: ``[T, H_v]`` raw
            projections (strided column views are fine); neg_a: ``[H_v]`` float32 ``-exp(A_log)``;
            dt_bias: ``[H_v]``; cu_seqlens, states, slots, scale: as :func:`gated_delta_rule_prefill`;
            num_k_heads, head_k_dim, head_v_dim: ``H_k``, ``K``, ``V``.

    Returns:
        o ``[T, H_v, V]`` in qkv's dtype; ``states[slots]`` hold the final states.

    Raises:
        ValueError: inconsistent shapes, dtypes or devices (see
            :func:`~anna_xpu_kernels.gdn_prefill_prep.gdn_prefill_prep` and :func:`gated_delta_rule_prefill`),
            checked before anything is launched.
    """
    op = "fused_gdn_prefill"
    require_dims(op, qkv=(qkv, 2), a=(a, 2), states=(states, 4))
    check_recurrent_states(op, states, a.shape[-1], head_k_dim, head_v_dim)
    batch = _batch(op, cu_seqlens, qkv.shape[0])
    check_slots(op, slots, batch, states.shape[0], host_check=False)
    require_same_device(op, qkv=qkv, states=states, slots=slots, cu_seqlens=cu_seqlens)
    q, k, v, g, beta = gdn_prefill_prep(qkv, a, b, neg_a, dt_bias, num_k_heads, head_k_dim, head_v_dim)
    if q.shape[0] == 0:
        return v
    return chunked_forward(q, k, v, g, beta, cu_seqlens, states, slots, scale)

