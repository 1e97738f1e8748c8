"""Op tables for the Qwen3-TTS tests: one that offers ``qk_norm_rope_cache_attention`` as a device whose kernels serve
it does, on the CPU's references; one that passes every call through a hook (counting calls)."""

from __future__ import annotations

from collections.abc import Callable
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


class HookedOps:
    """An op table whose every op (``get``, ``accelerated``, attribute ops) runs as ``around(fn, *args, **kwargs)``,
    ``fn`` the op ``ops`` gives (so ``around`` may count the call, then return ``fn(*args, **kwargs)``)."""

    def __init__(self, ops: Any, around: Callable[..., Any]) -> None:
        self._ops, self._around = ops, around

    def get(self, op: str, **shape: Any) -> Any:
        return self._hooked(self._ops.get(op, **shape))

    def accelerated(self, op: str, **shape: Any) -> Any:
        fn = self._ops.accelerated(op, **shape)
        return None if fn is None else self._hooked(fn)

    def __getattr__(self, name: str) -> Any:
        return self._hooked(getattr(self._ops, name))

    def _hooked(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            return self._around(fn, *args, **kwargs)

        return call
