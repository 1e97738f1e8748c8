"""The kernel ops a model calls through its registry, outermost only (an op a fused op's reference calls inside it is
not counted), for the Gemma 4 fusion tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class KernelOpCalls:
    """Wraps ``registry.get`` (a model's ``ops.registry``; with ``accelerate`` its ``get_accelerated`` too, so every
    fused op counts as accelerated, its reference serving it, as a GPU's kernels would be chosen, but the ops in
    ``declined``, which keep the registry's own answer, as where no kernel serves them): every op it hands out calls
    ``on_op(name)`` when called outside any other op. ``depth``: how many op calls are running now (0 outside them)."""

    def __init__(self, registry: Any, on_op: Callable[[str], None], *, accelerate: bool = False,
                 declined: frozenset[str] = frozenset()) -> None:
        self.depth = 0
        real_get, real_accelerated = registry.get, registry.get_accelerated

        def get(op, request):
            fn = real_get(op, request)

            def counted(*args, **kwargs):
                if self.depth == 0:
                    on_op(op)
                self.depth += 1
                try:
                    return fn(*args, **kwargs)
                finally:
                    self.depth -= 1

            return counted

        def get_accelerated(op, request):
            return real_accelerated(op, request) if op in declined else get(op, request)

        registry.get = get
        if accelerate:
            registry.get_accelerated = get_accelerated
