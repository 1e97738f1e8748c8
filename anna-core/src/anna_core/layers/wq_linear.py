"""Linear layers whose weight is quantized for accelerators (``--weight-quant int4|int8|fp8``), through the
``wq_linear`` / ``add_rms_norm_wq_linear`` ops (:mod:`anna_core.kernels.reference.wq_linear`; Triton GEMVs in
anna-xpu-kernels).

:func:`quantize_linears` swaps a model's dense projections for :class:`WQLinear` after its weights are loaded
and merged; the norm before a projection stays fused into it (:meth:`WQLinear.add_norm`, which
:class:`~anna_core.layers.norm.RMSNorm` calls for a :class:`WQLinear`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from anna_core.layers.moe import RoutedExpertsModule
from anna_core.layers.wq_experts import WQExperts
from anna_core.weights.gpu_quant import FP8_BLOCK, QuantizedWeight, dequantize, quantizable, quantize

log = logging.getLogger("anna.weights")


class WQLinear(nn.Module):
    """``y = x @ w^T + bias`` with ``w`` quantized (:mod:`anna_core.weights.gpu_quant`), through ``ops.wq_linear``.

    Args:
        weight: the quantized ``[N, K]`` weight.
        bias: ``[N]`` in the serving dtype, or None.
        ops: the model's :class:`~anna_core.kernels.OpTable`.
        kind: what the layer runs in, for ``/healthz`` (:func:`weight_kinds`): the scheme (quantized at load) by
            default, the pre-quantized format's name otherwise (``"int4-gptq"``, ``"int4-awq"``, ``"fp8-block"``).

    Buffers (not in ``state_dict``): ``qweight``, ``scale``, ``zero`` (int4 only) as the scheme lays them out, and
    ``perm`` (``[K]`` int64, or None): an act-order GPTQ weight's stored column order
    (:attr:`~anna_core.weights.gpu_quant.QuantizedWeight.perm`), with ``perm_index`` its int32 copy that the ops
    take: the kernels read ``x[..., perm]`` as they load their activation tiles (the norm prologue stays fused, no
    gather launch); the torch references gather first.
    """

    def __init__(self, weight: QuantizedWeight, bias: torch.Tensor | None, ops: Any, kind: str | None = None):
        super().__init__()
        self.out_features, self.in_features = weight.shape
        self.scheme = weight.scheme
        self.kind = kind or weight.scheme
        self.register_buffer("qweight", weight.qweight, persistent=False)
        self.register_buffer("scale", weight.scale, persistent=False)
        self.register_buffer("zero", weight.zero, persistent=False)
        self.register_buffer("perm", weight.perm, persistent=False)
        self.register_buffer("perm_index", None if weight.perm is None else weight.perm.to(torch.int32),
                             persistent=False)
        self.bias = None if bias is None else nn.Parameter(bias.detach(), requires_grad=False)
        self.ops = ops
        self._bound: tuple[Any, Callable[..., Any], Callable[..., Any]] | None = None

    @classmethod
    def from_linear(cls, linear: nn.Linear, scheme: str, ops: Any) -> WQLinear:
        """``linear`` (an ``nn.Linear`` with its weight loaded) quantized with ``scheme``; scales in its dtype.

        Raises:
            ValueError: see :func:`~anna_core.weights.gpu_quant.quantize`.
        """
        weight = quantize(linear.weight, scheme, linear.weight.dtype)
        return cls(weight, linear.bias, ops)

    @property
    def weight_q(self) -> QuantizedWeight:
        """The layer's quantized weight."""
        return QuantizedWeight(self.qweight, self.scale, self.zero, self.scheme, self.perm)

    def dense(self, dtype: torch.dtype) -> nn.Linear:
        """An ``nn.Linear`` holding the dequantized weight in ``dtype`` (and this layer's bias)."""
        with torch.device("meta"):
            layer = nn.Linear(self.in_features, self.out_features, bias=self.bias is not None)
        stored = dequantize(self.qweight, self.scale, self.zero, self.scheme, dtype)  # columns in perm's order
        if self.perm is not None:
            dense = torch.empty_like(stored)
            dense[:, self.perm] = stored
            stored = dense
        layer.weight = nn.Parameter(stored, requires_grad=False)
        layer.bias = self.bias
        return layer

    @staticmethod
    def mergeable(parts: list[WQLinear]) -> bool:
        """Whether ``parts`` (same input) can share one quantized weight (:meth:`merged`): one scheme, kind, scale
        dtype and input width, biases on all parts or none, fp8 parts whose rows end on a 128-row scale block (all
        but the last), and one column order (``perm``: act-order parts quantized with one Hessian, as GPTQ writes
        q/k/v and gate/up, share it; per-part orders do not merge)."""
        first = parts[0]
        if any(p.scheme != first.scheme or p.kind != first.kind or p.in_features != first.in_features
               or p.scale.dtype != first.scale.dtype for p in parts):
            return False
        if len({p.bias is None for p in parts}) > 1:
            return False
        if first.scheme == "fp8" and any(p.out_features % FP8_BLOCK for p in parts[:-1]):
            return False
        return not any((p.perm is None) != (first.perm is None)
                       or (p.perm is not None and not torch.equal(p.perm, first.perm)) for p in parts[1:])

    @classmethod
    def merged(cls, parts: list[WQLinear]) -> WQLinear | None:
        """One layer whose output is the concatenation of ``parts``' outputs (same input), or None when they
        cannot share one quantized weight (:meth:`mergeable`)."""
        if not cls.mergeable(parts):
            return None
        first = parts[0]
        zero = None if first.zero is None else torch.cat([p.zero for p in parts])
        weight = QuantizedWeight(torch.cat([p.qweight for p in parts]), torch.cat([p.scale for p in parts]), zero,
                                 first.scheme, first.perm)
        bias = None if first.bias is None else torch.cat([p.bias.detach() for p in parts])
        return cls(weight, bias, first.ops, first.kind)

    def permute_outputs(self, rows: torch.Tensor) -> None:
        """Reorder the layer's output features in place: output ``i`` becomes the old output ``rows[i]`` (``rows``
        ``[N]`` int64, a permutation). Free for int4 and int8 (their scales are per row).

        Raises:
            ValueError: an fp8 layer (its scales cover 128-row blocks), or ``rows`` not ``[N]``.
        """
        if self.scheme == "fp8":
            raise ValueError("permute_outputs: fp8 scales cover 128-row blocks; its rows cannot be reordered")
        if tuple(rows.shape) != (self.out_features,):
            raise ValueError(f"permute_outputs: rows must be [N={self.out_features}], got {tuple(rows.shape)}")
        rows = rows.to(self.qweight.device)
        self.qweight, self.scale = self.qweight[rows], self.scale[rows]
        if self.zero is not None:
            self.zero = self.zero[rows]
        if self.bias is not None:
            self.bias = nn.Parameter(self.bias.detach()[rows], requires_grad=False)

    def take_input_perm(self) -> torch.Tensor | None:
        """Remove and return the layer's input column order (None if it has none): from now on the caller feeds
        it ``x[..., perm]`` itself, e.g. by an earlier layer's :meth:`permute_outputs` (the gather folded away)."""
        perm, self.perm, self.perm_index = self.perm, None, None
        return perm

    def _ops(self) -> tuple[Callable[..., Any], Callable[..., Any]]:
        bound = self._bound
        if bound is None or bound[0] is not self.ops:
            bound = self._bound = (self.ops, self.ops.get("wq_linear", scheme=self.scheme),
                                   self.ops.get("add_rms_norm_wq_linear", scheme=self.scheme))
        return bound[1], bound[2]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: ``[..., K]`` -> ``[..., N]`` in x's dtype (an act-order layer reads ``x[..., perm]`` inside the op)."""
        if self.perm_index is None:  # the pre-act-order call: kernels written to the older contract keep working
            return self._ops()[0](x, self.qweight, self.scale, self.zero, self.scheme, self.bias)
        return self._ops()[0](x, self.qweight, self.scale, self.zero, self.scheme, self.bias, self.perm_index)

    def add_norm(self, x: torch.Tensor, residual: torch.Tensor | None, norm_weight: torch.Tensor, eps: float,
                 zero_centered: bool, activation: str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(act(self(rms_norm(x + residual))), x + residual)`` as one ``add_rms_norm_wq_linear`` op (a layer
        without bias; see the op's contract). x, residual: ``[T, K]``; returns ``([T, N] or [T, N/2], [T, K])``.
        An act-order layer passes its column order to the op, whose kernel reads the normalised row's columns in
        that order inside its norm prologue (one launch at decode, as without act-order).

        Raises:
            ValueError: the layer has a bias (the caller runs the norm, then the layer).
        """
        if self.bias is not None:
            raise ValueError("add_norm: a WQLinear with a bias does not fuse the norm")
        args = (x, residual, norm_weight, eps, zero_centered, self.qweight, self.scale, self.zero, self.scheme,
                activation)
        if self.perm_index is None:  # as forward: no perm argument for a layer without act-order
            return self._ops()[1](*args)
        return self._ops()[1](*args, self.perm_index)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, kind={self.kind}, "
                f"bias={self.bias is not None}" + (", act_order=True" if self.perm is not None else ""))


def quantize_linears(root: nn.Module, scheme: str, ops: Any, skip: Callable[[str], bool] = lambda name: False) -> int:
    """Replace every dense linear layer under ``root`` (``nn.Linear`` and its subclasses, e.g.
    :class:`~anna_core.layers.linear.Linear`) by a :class:`WQLinear` of ``scheme``; returns how many.

    Each layer is quantized on its device and its dense weight freed before the next (peak memory: the
    dense model plus one layer). A layer whose shape the scheme cannot take (int4: ``K`` not a multiple of
    128) stays dense, with a log line. ``skip(name)`` (the qualified module name) keeps a layer dense.
    """
    changed = 0
    for parent_name, parent in list(root.named_modules()):
        for name, child in list(parent.named_children()):
            qualified = f"{parent_name}.{name}" if parent_name else name
            if not isinstance(child, nn.Linear) or skip(qualified):
                continue
            if not quantizable(tuple(child.weight.shape), scheme):
                log.info("%s stays dense: %s cannot take its shape %s", qualified, scheme, tuple(child.weight.shape))
                continue
            setattr(parent, name, WQLinear.from_linear(child, scheme, ops))
            changed += 1
    return changed


def weight_kinds(model: Any) -> dict[str, str]:
    """What each kind of layer runs in, for ``/healthz``: ``{"linear": ..., "lm_head": ...}`` (and ``"vision"``
    for a model with a vision tower), each value a :class:`WQLinear`'s kind (``"int4"``, ``"int4-gptq"``,
    ``"fp8-block"``, ...) or a dense layer's dtype (``"bfloat16"``), several joined by ``"+"`` in sorted order
    (``"bfloat16+int4-gptq"``: some projections stayed dense). ``linear`` covers every linear layer but the LM head
    and the vision tower's; a tied LM head is the embedding's dtype. A MoE model adds ``"experts"``: its routed
    experts' scheme (``--expert-quant``, :class:`~anna_core.layers.wq_experts.WQExperts`) or dtype (offloaded
    experts are not counted). A task's model that is not an ``nn.Module`` has none: ``{}``."""
    if not isinstance(model, nn.Module):
        return {}
    found: dict[str, set[str]] = {}
    embedding: str | None = None
    for name, module in model.named_modules():
        if isinstance(module, WQExperts):
            found.setdefault("experts", set()).add(module.kind)
            continue
        if isinstance(module, RoutedExpertsModule):  # dense stacked experts (offloaded ones hold no parameters)
            dense = list(module.parameters(recurse=False))
            if dense:
                found.setdefault("experts", set()).add(str(dense[0].dtype).replace("torch.", ""))
            continue
        if isinstance(module, WQLinear):
            kind = module.kind
        elif isinstance(module, nn.Linear):
            kind = str(module.weight.dtype).replace("torch.", "")
        else:
            if isinstance(module, nn.Embedding) and name.split(".")[-1] == "embed_tokens":
                embedding = str(module.weight.dtype).replace("torch.", "")
            continue
        leaf = name.split(".")[-1]
        group = "lm_head" if leaf == "lm_head" else "vision" if name.startswith(("visual.", "model.visual.")) else "linear"
        found.setdefault(group, set()).add(kind)
    if "lm_head" not in found and embedding is not None:  # a tied head reads the embedding
        found["lm_head"] = {embedding}
    return {group: "+".join(sorted(kinds)) for group, kinds in sorted(found.items())}


def dequantize_linears(root: nn.Module, dtype: torch.dtype) -> int:
    """Replace every :class:`WQLinear` under ``root`` by an ``nn.Linear`` of its dequantized weight in ``dtype``
    (``--weight-quant none`` of a pre-quantized checkpoint); returns how many."""
    changed = 0
    for _, parent in list(root.named_modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, WQLinear):
                setattr(parent, name, child.dense(dtype))
                changed += 1
    return changed
