"""Allocate the model's cache tensors (:class:`~anna_core.model.ModelCaches`) from its CacheSpec."""

from __future__ import annotations

import logging

import torch

from anna_core.device import memory_stats
from anna_core.errors import AnnaError
from anna_core.model import CacheSpec, ModelCaches

log = logging.getLogger("anna.engine")

_GIB = 1 << 30
# CPU default: a quarter of free RAM, at most this much.
_CPU_DEFAULT_CAP = 4 * _GIB
# Accelerator default: this share of the free device memory left after loading the model.
_ACCEL_FRACTION = 0.85


def bytes_per_block(spec: CacheSpec, block_size: int, dtype: torch.dtype) -> int:
    """Bytes of one KV block over all attention layers (K and V); 0 without attention layers."""
    att = spec.attention
    if att is None:
        return 0
    elem = torch.empty((), dtype=dtype).element_size()
    return 2 * att.num_layers * block_size * att.num_kv_heads * att.head_dim * elem


def state_bytes(spec: CacheSpec, num_slots: int, dtype: torch.dtype) -> int:
    """Bytes of the recurrent-state pools (conv state in ``dtype``, recurrent state float32)."""
    rec = spec.recurrent
    if rec is None:
        return 0
    elem = torch.empty((), dtype=dtype).element_size()
    c, w = rec.conv_shape
    h, k, v = rec.state_shape
    return rec.num_layers * num_slots * (c * w * elem + h * k * v * 4)


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


def num_blocks_for_budget(spec: CacheSpec, block_size: int, dtype: torch.dtype, budget_bytes: int) -> int:
    """Blocks that fit in ``budget_bytes``.

    Raises:
        AnnaError: not even one block fits.
    """
    per_block = bytes_per_block(spec, block_size, dtype)
    n = budget_bytes // per_block
    if n < 1:
        raise AnnaError(f"KV cache budget of {budget_bytes} bytes holds no block of {per_block} bytes; "
                        "raise kv_cache_memory_gib")
    return int(n)


def zeroed_caches(spec: CacheSpec, *, num_blocks: int, block_size: int, num_slots: int,
                  device: torch.device, dtype: torch.dtype) -> ModelCaches:
    """Zero-filled caches of exactly these sizes (no scratch entries).

    Returns:
        ``ModelCaches`` with, per attention layer, ``k``/``v`` ``[num_blocks, block_size, H_kv, D]`` in
        ``dtype``; per recurrent layer ``conv_states`` ``[num_slots, C, W-1]`` in ``dtype`` and
        ``recurrent_states`` ``[num_slots, H_v, K, V]`` float32.
    """
    caches = ModelCaches(block_size=block_size)
    if spec.attention is not None:
        att = spec.attention
        shape = (num_blocks, block_size, att.num_kv_heads, att.head_dim)
        caches.kv = [(torch.zeros(shape, dtype=dtype, device=device), torch.zeros(shape, dtype=dtype, device=device))
                     for _ in range(att.num_layers)]
    if spec.recurrent is not None:
        rec = spec.recurrent
        caches.conv_states = [torch.zeros((num_slots, *rec.conv_shape), dtype=dtype, device=device)
                              for _ in range(rec.num_layers)]
        caches.recurrent_states = [torch.zeros((num_slots, *rec.state_shape), dtype=torch.float32, device=device)
                                   for _ in range(rec.num_layers)]
    return caches


def allocate_caches(spec: CacheSpec, *, num_blocks: int, block_size: int, num_slots: int,
                    device: torch.device, dtype: torch.dtype) -> ModelCaches:
    """Zero-filled cache tensors, plus one scratch block and one scratch slot.

    The scratch entries (index ``num_blocks`` / ``num_slots``, see :func:`scratch_block` and
    :func:`scratch_slot`) are never handed out by the block manager or the slot pool; the padding
    rows of a captured decode graph write their K/V and state there.

    Returns:
        :func:`zeroed_caches` with ``num_blocks + 1`` KV blocks and ``num_slots + 1`` state slots.
    """
    num_slots += 1
    caches = zeroed_caches(spec, num_blocks=num_blocks + 1, block_size=block_size, num_slots=num_slots,
                           device=device, dtype=dtype)
    log.info("caches: %d KV blocks of %d tokens (%.1f MiB), %d state slots (%.1f MiB)",
             num_blocks if spec.attention else 0, block_size,
             bytes_per_block(spec, block_size, dtype) * num_blocks / 2**20,
             num_slots, state_bytes(spec, num_slots, dtype) / 2**20)
    return caches


def zero_slots(caches: ModelCaches, slots: torch.Tensor) -> None:
    """Zero the recurrent and conv state of ``slots`` (``[n]`` int64, on the caches' device)."""
    for conv in caches.conv_states:
        conv.index_fill_(0, slots, 0)
    for state in caches.recurrent_states:
        state.index_fill_(0, slots, 0)


def scratch_block(caches: ModelCaches) -> int:
    """Index of the KV block no sequence owns (the last one; 0 without attention layers)."""
    return caches.kv[0][0].shape[0] - 1 if caches.kv else 0


def scratch_slot(caches: ModelCaches) -> int:
    """Index of the state slot no sequence owns (the last one; 0 without recurrent layers)."""
    return caches.conv_states[0].shape[0] - 1 if caches.conv_states else 0
