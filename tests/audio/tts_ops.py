"""Op tables for the Qwen3-TTS tests: one that offers ``qk_norm_rope_cache_attention`` as a device whose kernels serve
it does, on the CPU's references."""

from __future__ import annotations

from typing import Any


class FusedAttentionOffered:
    """An op table that offers ``qk_norm_rope_cache_attention`` as accelerated (its reference: the composition of
    ``qk_norm_rope_cache`` and ``paged_attention``), as a device whose kernels serve it does; every other op as
    ``ops`` has it."""

    def __init__(self, ops: Any) -> None:
        self._ops = ops

    def accelerated(self, op: str, **shape: Any) -> Any:
        if op == "qk_norm_rope_cache_attention":
            return self._ops.get(op, **shape)
        return self._ops.accelerated(op, **shape)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ops, name)
