"""``nn.Linear`` whose product runs through the ``linear`` kernel op (GEMV kernels for decode)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

log = logging.getLogger("anna.layers")


class Linear(nn.Linear):
    """``y = x @ weight^T + bias`` through ``ops.linear`` when given an op table, ``F.linear`` otherwise.

    Same parameters, names and state dict as ``nn.Linear`` (``weight`` ``[N, K]``, ``bias`` ``[N]``
    or absent), so checkpoints load unchanged. The op table is a plain attribute, never a submodule
    or buffer: it stays out of ``state_dict`` and ``parameters()``.

    Args:
        in_features: ``K``; out_features: ``N``; bias: whether to hold a ``bias``.
        ops: the model's :class:`anna_core.kernels.OpTable`, or None for plain ``F.linear``.
        device, dtype: as for ``nn.Linear``.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, ops: Any = None,
                 device: Any = None, dtype: torch.dtype | None = None):
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        self.ops = ops
        self._bound: tuple[Any, Callable[..., torch.Tensor]] | None = None

    def _op(self) -> Callable[..., torch.Tensor]:
        """The ``linear`` implementation chosen for ``self.ops``, resolved once per op table."""
        bound = self._bound
        if bound is None or bound[0] is not self.ops:
            bound = self._bound = (self.ops, self.ops.linear)
        return bound[1]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: ``[..., K]`` -> ``[..., N]`` in x's dtype."""
        if self.ops is None:
            return F.linear(x, self.weight, self.bias)
        return self._op()(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, ops={'none' if self.ops is None else 'kernel'}"


def merge_linears(linears: list[nn.Linear]) -> nn.Linear:
    """One ``nn.Linear`` whose output is the concatenation of ``linears``' outputs (same input), so
    projections that read the same activations run as one GEMM / GEMV.

    The merged weight (and bias, when all have one) is a new tensor on the parts' device and dtype.
    Quantized parts (:class:`~anna_core.layers.quant_linear.QuantizedLinear`, not yet packed) merge into
    one quantized layer; so do accelerator-quantized parts (:class:`~anna_core.layers.wq_linear.WQLinear`) of one
    layout (:meth:`~anna_core.layers.wq_linear.WQLinear.merged`); a mix of quantized and dense parts, or WQLinear
    parts that cannot share a layout (e.g. act-order parts with different column orders), merges dense (the
    quantized ones dequantized, with a warning giving the parts and the memory it costs).
    """
    from anna_core.layers.quant_linear import QuantizedLinear
    from anna_core.layers.wq_linear import WQLinear

    if all(isinstance(m, QuantizedLinear) for m in linears):
        return QuantizedLinear.merged(linears)
    if all(isinstance(m, WQLinear) for m in linears):
        merged = WQLinear.merged(linears)
        if merged is not None:
            return merged
        dtype = getattr(torch, linears[0].ops.dtype)  # the serving dtype the op table is bound to
        dense_bytes = sum(m.in_features * m.out_features for m in linears) * dtype.itemsize
        quantized_bytes = sum(b.numel() * b.element_size() for m in linears for b in m.buffers())
        log.warning("merging %d quantized projections of different layouts (%s): dequantized to %s, %.2f MiB "
                    "instead of %.2f MiB", len(linears), ", ".join(
                        f"[{m.out_features}, {m.in_features}] {m.kind}{' act-order' if m.perm is not None else ''}"
                        for m in linears), dtype, dense_bytes / 2**20, quantized_bytes / 2**20)
        return merge_linears([m.dense(dtype) for m in linears])
    dense = [m for m in linears if not isinstance(m, (QuantizedLinear, WQLinear))]
    linears = [m.dense(dense[0].weight.dtype) if isinstance(m, (QuantizedLinear, WQLinear)) else m for m in linears]
    first = linears[0].weight
    has_bias = all(m.bias is not None for m in linears)
    with torch.device("meta"):
        merged = nn.Linear(first.shape[1], sum(m.weight.shape[0] for m in linears), bias=has_bias)
    merged.weight = nn.Parameter(torch.cat([m.weight.detach() for m in linears]), requires_grad=False)
    if has_bias:
        merged.bias = nn.Parameter(torch.cat([m.bias.detach() for m in linears]), requires_grad=False)
    return merged


def merge_linear_runs(linears: list[nn.Linear]) -> list[tuple[nn.Linear, int]]:
    """Merge consecutive ``linears`` (same input) in runs that keep every quantized part quantized, where
    :func:`merge_linears` of them all would dequantize some: ``[(layer, parts it covers)]`` in order, the layers'
    outputs concatenated being the parts' outputs.

    A run grows greedily while its parts are all accelerator-quantized and can share one quantized weight
    (:meth:`~anna_core.layers.wq_linear.WQLinear.mergeable`), all GGUF-quantized
    (:class:`~anna_core.layers.quant_linear.QuantizedLinear`), or all dense; a run of one part is that part itself.
    Each run is one launch instead of one for all: callers use it where memory matters more (pre-quantized parts of
    different layouts: dense ``in_proj_b`` beside quantized ``in_proj_qkv``, FP8 parts whose rows end inside a
    128-row scale block, act-order parts of different column orders).
    """
    from anna_core.layers.quant_linear import QuantizedLinear
    from anna_core.layers.wq_linear import WQLinear

    def kind(m: nn.Linear) -> str:
        return "wq" if isinstance(m, WQLinear) else "gguf" if isinstance(m, QuantizedLinear) else "dense"

    runs: list[list[nn.Linear]] = []
    for m in linears:
        if runs and kind(runs[-1][0]) == kind(m) and (kind(m) != "wq" or WQLinear.mergeable([*runs[-1], m])):
            runs[-1].append(m)
        else:
            runs.append([m])
    return [(run[0] if len(run) == 1 else merge_linears(run), len(run)) for run in runs]


def linear_from(module: nn.Linear, ops: Any) -> Linear:
    """A :class:`Linear` holding ``module``'s own ``weight`` and ``bias`` Parameter objects (no copy).

    Weights tied elsewhere (an LM head sharing the embedding) stay tied. Hooks registered on
    ``module`` are not carried over. The result is in ``module``'s train/eval mode.

    Raises:
        TypeError: ``module`` is not an ``nn.Linear``.
    """
    if not isinstance(module, nn.Linear):
        raise TypeError(f"expected an nn.Linear, got {type(module).__name__}")
    with torch.device("meta"):  # no allocation: the real Parameters are assigned below
        new = Linear(module.in_features, module.out_features, bias=module.bias is not None, ops=ops)
    new.weight = module.weight
    if module.bias is not None:
        new.bias = module.bias
    new.train(module.training)
    return new


def use_linear_op(root: nn.Module, ops: Any) -> int:
    """Route every linear layer under ``root`` through ``ops.linear``; returns how many changed.

    Plain ``nn.Linear`` children are replaced by :func:`linear_from` (sharing their Parameters);
    existing :class:`Linear` layers get ``ops`` set. Call it after loading and merging weights.
    ``root`` itself is not replaced (wrap it with :func:`linear_from` if it is a linear layer).
    """
    changed = 0
    for parent in list(root.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, Linear):
                child.ops = ops
                changed += 1
            elif type(child) is nn.Linear:
                setattr(parent, name, linear_from(child, ops))
                changed += 1
    return changed
