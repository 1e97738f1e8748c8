"""Counting the device kernels an op launches, on the CPU (Triton's interpreter): every Triton launch, and every
aten op that would run a kernel on a GPU (allocations, views and metadata excluded), outside the Triton launches."""

from __future__ import annotations

import collections

from torch.utils._python_dispatch import TorchDispatchMode

NOT_KERNELS = {"empty", "empty_strided", "empty_like", "view", "_unsafe_view", "t", "transpose", "permute", "expand",
               "as_strided", "alias", "detach", "unsqueeze", "squeeze", "slice", "select", "reshape", "lift_fresh",
               "_to_copy_meta", "view_as_real", "resolve_conj", "resolve_neg", "_reshape_alias"}
"""aten ops that launch nothing on a GPU (``contiguous`` of a contiguous tensor dispatches nothing at all)."""


class LaunchCounter(TorchDispatchMode):
    """``with LaunchCounter() as c: op(...)``; then ``c.launches`` maps ``"triton:<kernel>"`` / ``"aten:<op>"`` to
    counts and ``c.total`` sums them."""

    def __init__(self) -> None:
        super().__init__()
        self.launches: collections.Counter[str] = collections.Counter()
        self._inside_triton = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if not self._inside_triton and name not in NOT_KERNELS:
            self.launches[f"aten:{name}"] += 1
        return func(*args, **(kwargs or {}))

    def __enter__(self):
        from triton.runtime.interpreter import InterpretedFunction

        counter, real_run = self, InterpretedFunction.run

        def run(fn, *args, **kwargs):
            counter.launches[f"triton:{fn.fn.__name__}"] += 1
            counter._inside_triton += 1
            try:
                return real_run(fn, *args, **kwargs)
            finally:
                counter._inside_triton -= 1

        self._restore = (InterpretedFunction, real_run)
        InterpretedFunction.run = run
        return super().__enter__()

    def __exit__(self, *exc):
        cls, real_run = self._restore
        cls.run = real_run
        return super().__exit__(*exc)

    @property
    def total(self) -> int:
        return sum(self.launches.values())
