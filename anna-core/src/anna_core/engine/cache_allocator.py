"""Allocate the model's cache tensors (:class:`~anna_core.model.ModelCaches`) group by group, and size them.

Each attention group gets its own block pool (its geometry differs from the others'); the recurrent
group gets ``num_slots`` state slots. Every pool has one extra entry, its *scratch* block or slot,
never handed out: padding rows of captured graphs write there, and block-table entries a sequence
does not hold point there.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import torch

from anna_core.cache_spec import CacheSpec, FullAttentionSpec, RecurrentStateSpec, SlidingWindowSpec
from anna_core.device import memory_stats
from anna_core.engine.offload import cap_headroom_bytes
from anna_core.errors import AnnaError
from anna_core.kv_quant.residual import ResidualRing, reset_slots
from anna_core.kv_quant.tables import TurboQuantTables
from anna_core.model import AttentionCache, ModelCaches, StateCache

log = logging.getLogger("anna.engine")

_GIB = 1 << 30
# CPU default: a quarter of free RAM, at most this much.
_CPU_DEFAULT_CAP = 4 * _GIB
# Accelerator default: this share of the free device memory left after loading the model.
_ACCEL_FRACTION = 0.85


def state_bytes(spec: CacheSpec, num_slots: int, dtype: torch.dtype) -> int:
    """Bytes of ``num_slots`` recurrent-state slots (conv state in ``dtype``, recurrent state float32)."""
    rec = spec.recurrent
    return 0 if rec is None else num_slots * rec.bytes_per_slot(dtype)


def residual_bytes(spec: CacheSpec, num_slots: int, dtype: torch.dtype) -> int:
    """Bytes of the attention groups' residual rings (:mod:`anna_core.kv_quant.residual`) over ``num_slots`` slots:
    part of the KV cache's budget."""
    return sum(spec.groups[g].residual_bytes_per_slot(dtype) for g in spec.attention_groups) * num_slots


def reset_residual(caches: ModelCaches, slots: torch.Tensor) -> None:
    """Mark the residual rings of ``slots`` ``[n]`` int64 empty in every attention group that has one."""
    for _, group in caches.attention_caches:
        if group.residual is not None:
            reset_slots(group.residual, slots)


def default_kv_budget_bytes(device: torch.device) -> int:
    """KV memory when nothing is configured: 85% of free accelerator memory, or on CPU a quarter
    of free RAM capped at 4 GiB."""
    stats = memory_stats(device)
    free = stats.get("free_bytes")
    if device.type == "cpu":
        return min(_CPU_DEFAULT_CAP, free // 4) if free else _GIB
    if free is None:
        raise AnnaError(f"cannot query free memory on {device}; set kv_cache_memory_gib or num_blocks")
    return int(free * _ACCEL_FRACTION)




def device_bytes_in_use(device: torch.device, tensors_bytes: int) -> int:
    """Device bytes allocated now: torch's count where the device keeps one (CUDA, XPU), else
    ``tensors_bytes`` (what the caller counted: the model's tensors on the device)."""
    return memory_stats(device).get("allocated_bytes", tensors_bytes)


def capped_kv_budget_bytes(cap_bytes: int, in_use_bytes: int, other_bytes: int) -> int:
    """KV-cache bytes under a device memory cap: the cap less what is allocated (weights, expert cache and
    scratch), ``other_bytes`` (recurrent state slots, snapshots, prompt cache, reserve) and a headroom for
    activations (:func:`anna_core.engine.offload.cap_headroom_bytes`).

    Raises:
        AnnaError: nothing is left for the KV cache.
    """
    headroom = cap_headroom_bytes(cap_bytes)
    budget = cap_bytes - in_use_bytes - other_bytes - headroom
    if budget <= 0:
        raise AnnaError(f"max_device_memory_gib ({cap_bytes / _GIB:.2f} GiB) leaves no room for the KV cache: the "
                        f"loaded model uses {in_use_bytes / _GIB:.2f} GiB, state / snapshots {other_bytes / _GIB:.2f} "
                        f"GiB, activations {headroom / _GIB:.2f} GiB; raise the cap, lower --snapshot-memory-mib, or offload "
                        "experts (--offload-mode experts, fewer resident expert layers, fewer cached experts per layer)")
    return budget


def group_block_caps(spec: CacheSpec, block_size: int, max_len: int, max_num_seqs: int,
                     max_prefill_tokens: int) -> list[int]:
    """Per attention group (``spec.attention_groups`` order), the most blocks it can use: every one of
    ``max_num_seqs`` sequences at ``max_len`` tokens; a sliding-window group needs only its window per
    sequence plus the blocks of one step's prefill chunks."""
    caps = []
    for g in spec.attention_groups:
        group = spec.groups[g]
        cap = max_num_seqs * group.max_blocks_per_seq(max_len, block_size)
        if isinstance(group, SlidingWindowSpec):
            cap = min(max_num_seqs * -(-max_len // block_size), cap + -(-max_prefill_tokens // block_size))
        caps.append(cap)
    return caps


def plan_num_blocks(spec: CacheSpec, block_size: int, dtype: torch.dtype, budget_bytes: int,
                    caps: Sequence[int]) -> list[int]:
    """Blocks per attention group within ``budget_bytes``: the largest ``n`` such that every full-attention
    group holding ``min(n, cap)`` blocks and every sliding-window group ``min(n, cap)`` fits (a window group
    stops growing at its cap while the full groups grow on).

    Args:
        caps: per attention group, the most blocks it can use (:func:`group_block_caps`).

    Raises:
        AnnaError: not even one block per group fits.
    """
    groups = [spec.groups[g] for g in spec.attention_groups]
    per = [g.bytes_per_block(block_size, dtype) for g in groups]

    def cost(n: int) -> int:
        return sum(min(n, c) * b for c, b in zip(caps, per))

    if cost(1) > budget_bytes:
        raise AnnaError(f"KV cache budget of {budget_bytes} bytes holds no block of {cost(1)} bytes (all groups); "
                        "raise kv_cache_memory_gib")
    lo, hi = 1, max(caps)
    while lo < hi:  # the largest n with cost(n) <= budget
        mid = (lo + hi + 1) // 2
        if cost(mid) <= budget_bytes:
            lo = mid
        else:
            hi = mid - 1
    return [min(lo, c) for c in caps]


def zeroed_caches(spec: CacheSpec, *, num_blocks: int | Sequence[int], block_size: int, num_slots: int,
                  device: torch.device, dtype: torch.dtype) -> ModelCaches:
    """Zero-filled caches of exactly these sizes (no scratch entries).

    Args:
        num_blocks: blocks of every attention group, or one count per attention group.

    Returns:
        ``ModelCaches`` with, per attention group and owning layer, ``k``/``v``
        ``[num_blocks, block_size, H_kv, D]`` in the group's dtype (default ``dtype``), or for a quantized group
        ``uint8`` ``[num_blocks, block_size, H_kv, key / value row bytes]`` plus its
        :class:`~anna_core.kv_quant.tables.TurboQuantTables` (``AttentionCache.quant``) and, with a residual, its
        :class:`~anna_core.kv_quant.residual.ResidualRing` of ``num_slots`` slots; for the recurrent
        group, per layer ``conv`` ``[num_slots, C, W-1]`` in ``dtype`` and ``recurrent``
        ``[num_slots, H_v, K, V]`` float32.
    """
    counts = _per_group(spec, num_blocks)
    caches = ModelCaches(block_size=block_size, num_slots=num_slots)
    for i, group in enumerate(spec.groups):
        if isinstance(group, FullAttentionSpec) and group.quant is not None:
            rows = (counts[i], block_size, group.num_kv_heads)
            k_row, v_row = group.row_bytes(dtype)
            caches.groups.append(AttentionCache(
                k=[torch.zeros((*rows, k_row), dtype=torch.uint8, device=device) for _ in group.layers],
                v=[torch.zeros((*rows, v_row), dtype=torch.uint8, device=device) for _ in group.layers],
                quant=TurboQuantTables.build(group.quant, group.head_dim, device),
                residual=None if not group.quant.residual_len else ResidualRing.empty(
                    len(group.layers), num_slots, group.quant.residual_len, group.num_kv_heads, group.head_dim,
                    device, dtype, readers=[sum(o == layer for _, o in group.shared) for layer in group.layers])))
        elif isinstance(group, FullAttentionSpec):
            shape = (counts[i], block_size, group.num_kv_heads, group.head_dim)
            dt = group.dtype or dtype
            caches.groups.append(AttentionCache(
                k=[torch.zeros(shape, dtype=dt, device=device) for _ in group.layers],
                v=[torch.zeros(shape, dtype=dt, device=device) for _ in group.layers]))
        elif isinstance(group, RecurrentStateSpec):
            caches.groups.append(StateCache(
                conv=[torch.zeros((num_slots, *group.conv_shape), dtype=dtype, device=device) for _ in group.layers],
                recurrent=[torch.zeros((num_slots, *group.state_shape), dtype=torch.float32, device=device)
                           for _ in group.layers]))
        else:
            raise AnnaError(f"unknown cache group kind {type(group).__name__}")
    return caches


def _per_group(spec: CacheSpec, num_blocks: int | Sequence[int]) -> dict[int, int]:
    groups = spec.attention_groups
    counts = [int(num_blocks)] * len(groups) if isinstance(num_blocks, int) else [int(n) for n in num_blocks]
    if len(counts) != len(groups):
        raise AnnaError(f"{len(counts)} block counts for {len(groups)} attention groups")
    return dict(zip(groups, counts))


def allocate_caches(spec: CacheSpec, *, num_blocks: int | Sequence[int], block_size: int, num_slots: int,
                    device: torch.device, dtype: torch.dtype) -> ModelCaches:
    """Zero-filled cache tensors, plus one scratch block per attention group and one scratch slot.

    The scratch entries (index ``num_blocks`` / ``num_slots``, see :func:`scratch_block` and
    :func:`scratch_slot`) are never handed out by the block managers or the slot pool.

    Returns:
        :func:`zeroed_caches` with ``num_blocks + 1`` blocks per attention group and ``num_slots + 1`` slots.
    """
    counts = _per_group(spec, num_blocks)
    caches = zeroed_caches(spec, num_blocks=[counts[g] + 1 for g in spec.attention_groups], block_size=block_size,
                           num_slots=num_slots + 1, device=device, dtype=dtype)
    for g in spec.attention_groups:
        quant = spec.groups[g].quant
        log.info("cache group %d (%s%s): %d blocks of %d tokens (%.1f MiB)", g, spec.groups[g].kind,
                 "" if quant is None else f", TurboQuant {quant.bits}-bit", counts[g],
                 block_size, spec.groups[g].bytes_per_block(block_size, dtype) * counts[g] / 2**20)
    if spec.recurrent is not None:
        log.info("cache group %d (recurrent): %d state slots (%.1f MiB)", spec.state_group, num_slots + 1,
                 state_bytes(spec, num_slots + 1, dtype) / 2**20)
    return caches


def zero_slots(caches: ModelCaches, slots: torch.Tensor) -> None:
    """Zero the recurrent and conv state of ``slots`` (``[n]`` int64, on the caches' device)."""
    for group in caches.state_caches:
        for t in group.conv + group.recurrent:
            t.index_fill_(0, slots, 0)


def has_state(caches: ModelCaches) -> bool:
    """Whether the caches have a recurrent group (fresh slots must be zeroed)."""
    return bool(caches.state_caches)


def scratch_block(caches: ModelCaches, group: int) -> int:
    """Index of attention group ``group``'s block no sequence owns (its last one)."""
    return caches.attention(group).k[0].shape[0] - 1


def scratch_slot(caches: ModelCaches) -> int:
    """Index of the state slot no sequence owns: the last one (``ModelCaches.num_slots - 1``, also without a recurrent
    group: a model's own per-slot tables, e.g. the speech talker's, and a residual ring have that slot too, and the
    padding rows of a captured step write there, not into slot 0, a sequence's); 0 for caches of unknown slots."""
    if caches.num_slots:
        return caches.num_slots - 1
    states = caches.state_caches
    return states[0].conv[0].shape[0] - 1 if states else 0
