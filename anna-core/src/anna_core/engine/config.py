"""Engine settings: batch limits, KV block size and how much memory the caches may take."""

from __future__ import annotations

import attrs

from anna_core.errors import AnnaError


def _positive(instance: object, attribute: attrs.Attribute, value: int | None) -> None:
    if value is not None and value < 1:
        raise AnnaError(f"{attribute.name} must be at least 1, got {value}")


@attrs.define
class EngineConfig:
    """How the engine batches requests and sizes its caches.

    Attributes:
        max_num_seqs: sequences per step (running requests at once); also the number of
            recurrent-state slots.
        max_num_batched_tokens: tokens computed per step, all sequences together (prefill chunks
            plus one per decode).
        prefill_chunk_size: prompt tokens of one request per step (``None``: bounded only by
            ``max_num_batched_tokens``).
        block_size: tokens per paged KV block.
        num_blocks: KV blocks to allocate; overrides the memory budget when set.
        kv_cache_memory_gib: memory (GiB) for the KV blocks when ``num_blocks`` is unset;
            ``None`` picks a default from the device (see
            :func:`anna_core.engine.cache_allocator.default_kv_budget_bytes`).
        max_model_len: the longest sequence (prompt + output) served; ``None`` uses the
            checkpoint's limit. Always capped by what the KV cache can hold.

    Raises:
        AnnaError: a limit is not positive.
    """

    max_num_seqs: int = attrs.field(default=64, validator=_positive)
    max_num_batched_tokens: int = attrs.field(default=2048, validator=_positive)
    prefill_chunk_size: int | None = attrs.field(default=None, validator=_positive)
    block_size: int = attrs.field(default=16, validator=_positive)
    num_blocks: int | None = attrs.field(default=None, validator=_positive)
    kv_cache_memory_gib: float | None = None
    max_model_len: int | None = attrs.field(default=None, validator=_positive)

    def __attrs_post_init__(self) -> None:
        if self.kv_cache_memory_gib is not None and self.kv_cache_memory_gib <= 0:
            raise AnnaError(f"kv_cache_memory_gib must be positive, got {self.kv_cache_memory_gib}")
