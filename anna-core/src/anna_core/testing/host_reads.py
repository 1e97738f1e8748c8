"""Catching reads of a tensor's value on the host (``.item()``, ``bool(tensor)``, ``torch.equal``), which a captured
device graph cannot contain and which stall an asynchronous step.

    with torch.inference_mode(), NoHostReads():
        step()                                   # AssertionError at the first host read

What a dispatch mode sees of them depends on the mode: under ``torch.inference_mode()`` (where Anna's runner
captures graphs) torch 2.13 dispatches ``.item()`` as ``aten.item`` and ``bool(tensor)`` as ``aten.is_nonzero``,
outside it both as ``aten._local_scalar_dense``; :data:`HOST_READS` holds them all. ``.tolist()`` reaches no
dispatch mode and is not caught.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

HOST_READS = (torch.ops.aten._local_scalar_dense.default, torch.ops.aten.item.default,
              torch.ops.aten.is_nonzero.default, torch.ops.aten.equal.default)
"""The ATen ops through which a tensor's value reaches the host."""


class NoHostReads(TorchDispatchMode):
    """A dispatch mode that raises ``AssertionError`` (naming the op) at any op of :data:`HOST_READS`."""

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        if func in HOST_READS:
            raise AssertionError(f"host read of a tensor value ({func}: .item() / bool(tensor) / torch.equal)")
        return func(*args, **(kwargs or {}))
