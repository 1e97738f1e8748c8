"""How big an engine's caches are: KV blocks per attention group, the context they hold, recurrent snapshots.

:func:`plan_cache_sizes` turns an :class:`~anna_core.engine.config.EngineConfig` and the device's memory into a
:class:`CacheSizes`: blocks per attention group (``num_blocks``, or the memory budget shared out by
:func:`~anna_core.engine.cache_allocator.plan_num_blocks`), the served context limit (the configured or
checkpoint limit, capped at what the full-attention groups' blocks hold) and the number of recurrent-state
snapshots prefix caching keeps. The tensors themselves are allocated by :mod:`anna_core.engine.cache_allocator`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import attrs
import torch

from anna_core.cache_spec import CacheSpec, SlidingWindowSpec
from anna_core.engine.cache_allocator import (
    capped_kv_budget_bytes,
    default_kv_budget_bytes,
    device_bytes_in_use,
    group_block_caps,
    plan_num_blocks,
    residual_bytes,
    state_bytes,
)
from anna_core.engine.config import EngineConfig
from anna_core.errors import AnnaError

MIB = 1 << 20

log = logging.getLogger("anna.engine")


@attrs.frozen
class CacheSizes:
    """An engine's cache sizes.

    Attributes:
        num_blocks: KV blocks per attention group (``spec.attention_groups`` order).
        max_model_len: the longest sequence served, in tokens.
        num_snapshots: recurrent-state snapshots of the prefix cache (0: none).
    """

    num_blocks: list[int]
    max_model_len: int
    num_snapshots: int


def plan_cache_sizes(spec: CacheSpec, config: EngineConfig, device: torch.device, dtype: torch.dtype, *,
                     model_max_len: int | None, model_device_bytes: Callable[[], int],
                     agree_num_blocks: Callable[[list[int]], list[int]]) -> CacheSizes:
    """The cache sizes of an engine over ``spec`` (the groups as allocated).

    Args:
        config: its settings (``max_prefill_tokens`` set).
        device / dtype: where the caches live and their dtype.
        model_max_len: the checkpoint's context limit (None: only the config / cache bound it).
        model_device_bytes: the model's bytes on ``device`` (asked only under ``max_device_memory_gib``).
        agree_num_blocks: makes the block counts valid on every mirror of the engine
            (:meth:`~anna_core.engine.step_broadcast.StepBroadcaster.agree_num_blocks`).

    Raises:
        AnnaError: the budget holds no block (see :func:`kv_blocks`), or a sliding-window group's blocks cannot
            hold one sequence's window.
    """
    bs = config.block_size
    want_len = min(x for x in (config.max_model_len, model_max_len, 1 << 20) if x is not None)
    recurrent = spec.recurrent is not None
    snapshot_bytes = state_bytes(spec, 1, dtype)
    snapshot_budget = int(config.snapshot_memory_mib * MIB) if recurrent and config.enable_prefix_caching else 0
    # a prompt-cache entry keeps its slot's residual rings too (an exact repeat computes nothing to fill them)
    prompt_budget = (snapshot_bytes + residual_bytes(spec, 1, dtype)) * config.prompt_cache_size
    num_blocks = kv_blocks(spec, config, device, dtype, want_len, snapshot_budget + prompt_budget, model_device_bytes)
    num_blocks = agree_num_blocks(num_blocks)  # block ids must be valid on every mirror
    full = [n for g, n in zip(spec.attention_groups, num_blocks) if not isinstance(spec.groups[g], SlidingWindowSpec)]
    max_model_len = min([want_len] + [n * bs for n in full])
    if max_model_len < want_len:
        log.warning("max_model_len capped at %d tokens: the KV cache holds %d blocks of %d",
                    max_model_len, min(full), bs)
    for g, n in zip(spec.attention_groups, num_blocks):
        need = spec.groups[g].max_blocks_per_seq(max_model_len, bs)
        if isinstance(spec.groups[g], SlidingWindowSpec) and n < need:
            raise AnnaError(f"cache group {g} (sliding window of {spec.groups[g].window} tokens) has {n} blocks of "
                            f"{bs} tokens; one sequence needs {need}: raise kv_cache_memory_gib or num_blocks")
    num_snapshots = 0
    if recurrent and config.enable_prefix_caching:
        useful = max_model_len * config.max_num_seqs // config.snapshot_interval  # more have no KV behind them
        if full:
            useful = min(full) * bs // config.snapshot_interval
        num_snapshots = (config.num_snapshots if config.num_snapshots is not None
                         else min(useful, snapshot_budget // max(snapshot_bytes, 1)))
        if num_snapshots == 0:
            log.warning("prefix caching is off: the snapshot budget holds no recurrent-state snapshot")
    return CacheSizes(num_blocks=num_blocks, max_model_len=max_model_len, num_snapshots=num_snapshots)


def kv_blocks(spec: CacheSpec, config: EngineConfig, device: torch.device, dtype: torch.dtype, want_len: int,
              other_bytes: int, model_device_bytes: Callable[[], int]) -> list[int]:
    """Blocks per attention group: ``num_blocks`` each, else the memory budget (explicit GiB, or free
    memory minus ``reserve_memory_mib`` and ``other_bytes``, the snapshot / prompt-cache budgets) shared out by
    :func:`~anna_core.engine.cache_allocator.plan_num_blocks`, each group at most what ``max_num_seqs``
    sequences of ``want_len`` tokens can use in it; ``max_device_memory_gib`` caps weights, expert cache, state and
    KV together.

    Raises:
        AnnaError: ``num_blocks`` do not fit under ``max_device_memory_gib``, the residual rings leave no room for
            blocks, or the budget holds no block.
    """
    capped = None
    ring = residual_bytes(spec, config.max_num_seqs + 1, dtype)  # the residual rings are KV memory too
    other_bytes += ring
    if config.max_device_memory_gib is not None:  # weights, expert cache, state, KV: all under the cap
        other = other_bytes + state_bytes(spec, config.max_num_seqs + 1, dtype) + int(config.reserve_memory_mib * MIB)
        in_use = device_bytes_in_use(device, model_device_bytes())
        capped = capped_kv_budget_bytes(int(config.max_device_memory_gib * (1 << 30)), in_use, other)
    if config.num_blocks is not None:
        need = sum(spec.groups[g].bytes_per_block(config.block_size, dtype) * (config.num_blocks + 1)
                   for g in spec.attention_groups)
        if capped is not None and need > capped:
            raise AnnaError(f"{config.num_blocks} KV blocks ({need / (1 << 30):.2f} GiB) do not fit under "
                            f"max_device_memory_gib {config.max_device_memory_gib} (room for {capped / (1 << 30):.2f} GiB)")
        return [config.num_blocks] * len(spec.attention_groups)
    if not spec.attention_groups:
        return []
    caps = group_block_caps(spec, config.block_size, want_len, config.max_num_seqs, config.max_prefill_tokens)
    if config.kv_cache_memory_gib is not None:
        budget = int(config.kv_cache_memory_gib * (1 << 30)) - ring
        if capped is not None:
            budget = min(budget, capped)
    else:
        # a cap bounds the server's memory; it does not make memory the device has not got free
        try:
            budget = default_kv_budget_bytes(device) - int(config.reserve_memory_mib * MIB) - other_bytes
        except AnnaError:  # the device reports no free memory: the cap is all there is to go by
            if capped is None:
                raise
            budget = capped
        if capped is not None:
            budget = min(budget, capped)
    if ring and budget < ring:  # the rings took most of it: say so rather than "no block fits"
        raise AnnaError(f"the residual rings of --kv-cache-residual-len ({ring / (1 << 20):.1f} MiB for "
                        f"{config.max_num_seqs} sequences) leave {max(budget, 0) / (1 << 20):.1f} MiB of the KV budget "
                        "for blocks: lower the residual or max_num_seqs, or raise kv_cache_memory_gib")
    return plan_num_blocks(spec, config.block_size, dtype, budget, caps)
