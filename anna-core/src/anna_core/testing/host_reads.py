"""Catching reads of a tensor's value on the host (``.item()``, ``bool(tensor)``, ``torch.equal``), which a captured
device graph cannot contain and which stall an asynchronous step.

    with torch.inference_mode(), NoHostReads():
        step()                                   # AssertionError at the first host read

What a dispatch mode sees of them depends on the mode: under ``torch.inference_mode()`` (where Anna's runner
captures graphs) torch 2.13 dispatches ``.item()`` as ``aten.item`` and ``bool(tensor)`` as ``aten.is_nonzero``,
outside it both as ``aten._local_scalar_dense``; :data:`HOST_READS` holds them all. Ops whose output shape
depends on values (:data:`DATA_DEPENDENT_SHAPES`: ``nonzero``, boolean-mask indexing, ``masked_select``,
``unique``, ``repeat_interleave`` with tensor repeats and no ``output_size``) read the device on CUDA too and are caught as well.
``.tolist()`` reaches no dispatch mode and is not caught.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

HOST_READS = (torch.ops.aten._local_scalar_dense.default, torch.ops.aten.item.default,
              torch.ops.aten.is_nonzero.default, torch.ops.aten.equal.default)
"""The ATen ops through which a tensor's value reaches the host."""

DATA_DEPENDENT_SHAPES = (torch.ops.aten.nonzero.default, torch.ops.aten.masked_select.default,
                         torch.ops.aten._unique2.default, torch.ops.aten.unique_consecutive.default,
                         torch.ops.aten.unique_dim.default, torch.ops.aten.repeat_interleave.self_Tensor,
                         torch.ops.aten.repeat_interleave.Tensor)
"""ATen ops whose output shape depends on the input's values: on a GPU each waits for the device."""


def _waits_for_shape(func: Any, args: tuple, kwargs: dict) -> bool:
    """Whether ``func`` needs the device's values to size its output: :data:`DATA_DEPENDENT_SHAPES` (but not
    ``repeat_interleave`` given its ``output_size``) or boolean-mask indexing."""
    if func in (torch.ops.aten.repeat_interleave.self_Tensor, torch.ops.aten.repeat_interleave.Tensor):
        return kwargs.get("output_size") is None
    return func in DATA_DEPENDENT_SHAPES or _bool_mask_index(func, args)


def _bool_mask_index(func: Any, args: tuple) -> bool:
    """``x[mask]`` with a boolean mask (``aten.index.Tensor``): its output length is the mask's count."""
    return (func is torch.ops.aten.index.Tensor and len(args) > 1
            and any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in args[1]))


class NoHostReads(TorchDispatchMode):
    """A dispatch mode that raises ``AssertionError`` (naming the op) at any op of :data:`HOST_READS` or
    :data:`DATA_DEPENDENT_SHAPES`, and at boolean-mask indexing."""

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        if func in HOST_READS:
            raise AssertionError(f"host read of a tensor value ({func}: .item() / bool(tensor) / torch.equal)")
        if _waits_for_shape(func, args, kwargs or {}):
            raise AssertionError(f"an output shape that depends on tensor values ({func}): the host waits for it")
        return func(*args, **(kwargs or {}))


HOST_DATA = (torch.ops.aten.lift_fresh.default, torch.ops.aten.lift_fresh_copy.default)
"""The ATen ops through which a tensor is made from host (Python) data (``torch.tensor(...)``): on an accelerator,
a host-to-device copy from pageable memory, which waits for the device."""

_NO_KERNEL = {"view", "_unsafe_view", "reshape", "transpose", "t", "permute", "expand", "slice", "select",
              "unsqueeze", "squeeze", "as_strided", "alias", "detach", "detach_", "split", "split_with_sizes", "unbind",
              "chunk", "narrow", "view_as", "unflatten", "flatten", "_reshape_alias", "empty", "empty_like",
              "new_empty", "empty_strided", "new_empty_strided", "lift_fresh"}


class OpCounts(TorchDispatchMode):
    """A dispatch mode counting what a piece of eager code asks of the device: ``launches`` (ATen ops that run a
    kernel: views, reshapes and uninitialised allocations excluded, a proxy for device kernel launches) and
    ``syncs`` (host reads of :data:`HOST_READS` plus tensors made from host data, :data:`HOST_DATA`: the points
    where the host waits for the device); ``ops`` maps each counted op name to its count."""

    def __init__(self) -> None:
        super().__init__()
        self.launches = 0
        self.syncs = 0
        self.ops: dict[str, int] = {}

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        name = func.overloadpacket.__name__
        if func in HOST_READS or func in HOST_DATA:
            self.syncs += 1
            self.ops[name] = self.ops.get(name, 0) + 1
        elif name not in _NO_KERNEL:
            self.launches += 1
            self.ops[name] = self.ops.get(name, 0) + 1
        return func(*args, **(kwargs or {}))
