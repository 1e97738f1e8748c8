"""Routed experts whose weights are quantized for accelerators (``--expert-quant int4|int8|fp8``), through the
``moe_experts_wq`` op (:mod:`anna_core.kernels.reference.moe_wq`; Triton kernels in anna-xpu-kernels).

:func:`quantize_experts` swaps a model's :class:`~anna_core.layers.moe.RoutedExpertsModule` s (a family's
stacked ``gate_up_proj [E, 2I, H]`` / ``down_proj [E, H, I]``) for :class:`WQExperts` after its weights are
loaded and fused, one MoE layer at a time and, within a layer, one expert at a time
(:func:`~anna_core.weights.gpu_quant.quantize_stacked`).
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from torch import nn

from anna_core.engine.offload import OffloadConfig
from anna_core.errors import ModelLoadError
from anna_core.layers.moe import RoutedExpertsModule
from anna_core.weights.gpu_quant import (
    QuantizedWeight,
    check_scheme,
    quantizable,
    quantize_stacked,
    quantized_bytes,
)

log = logging.getLogger("anna.weights")

EXPERT_QUANT_MODES = ("none", "int4", "int8", "fp8")
"""``--expert-quant``: ``none`` keeps the routed experts in the serving dtype; a scheme of
:mod:`anna_core.weights.gpu_quant` quantizes them at load."""


class WQExperts(RoutedExpertsModule):
    """``E`` gated expert MLPs with quantized weights, run as ``moe_experts_wq``; takes the place of a family's
    :class:`~anna_core.layers.moe.RoutedExpertsModule` (same ``forward(x, weights, experts)``).

    Args:
        gate_up: the stacked quantized ``[E, 2I, H]`` merged gate/up projections (gate rows first);
        down: the stacked quantized ``[E, H, I]`` down projections (:func:`~anna_core.weights.gpu_quant.quantize_stacked`,
            one scheme).
        activation: the experts' gated activation (``"silu"`` / ``"gelu_tanh"``).
        ops: the model's :class:`~anna_core.kernels.OpTable`.
        top_k: ``K``, the choices per token.
        kind: what the experts run in, for ``/healthz``: the scheme (quantized at load) by default, the
            pre-quantized format's name otherwise (``"int4-gptq"``, ``"int4-awq"``; :func:`stack_experts`).

    Buffers (not in ``state_dict``): ``gate_up_q``, ``gate_up_scale``, ``gate_up_zero`` (int4 only), ``down_q``,
    ``down_scale``, ``down_zero`` (int4 only).

    Raises:
        ValueError: the two weights differ in scheme or expert count.
    """

    def __init__(self, gate_up: QuantizedWeight, down: QuantizedWeight, activation: str, ops: Any, top_k: int,
                 kind: str | None = None):
        if gate_up.scheme != down.scheme or gate_up.qweight.shape[0] != down.qweight.shape[0]:
            raise ValueError(f"WQExperts: gate_up ({gate_up.scheme}, E={gate_up.qweight.shape[0]}) and down "
                             f"({down.scheme}, E={down.qweight.shape[0]}) must share a scheme and expert count")
        super().__init__(gate_up.qweight.shape[0], top_k)
        self.scheme = gate_up.scheme
        self._kind = kind or gate_up.scheme
        self.activation = activation
        self.ops = ops
        for name, weight in (("gate_up", gate_up), ("down", down)):
            self.register_buffer(f"{name}_q", weight.qweight, persistent=False)
            self.register_buffer(f"{name}_scale", weight.scale, persistent=False)
            self.register_buffer(f"{name}_zero", weight.zero, persistent=False)

    @property
    def kind(self) -> str:
        """What the experts run in, for ``/healthz`` (:func:`~anna_core.layers.wq_linear.weight_kinds`)."""
        return self._kind

    def forward(self, x: torch.Tensor, weights: torch.Tensor, experts: torch.Tensor) -> torch.Tensor:
        """x: ``[T, H]``; weights ``[T, K]`` (float32 or x's dtype), experts ``[T, K]`` int64 -> ``[T, H]`` in x's
        dtype: ``moe_experts_wq`` of the quantized experts."""
        return self.ops.get("moe_experts_wq", scheme=self.scheme)(
            x, self.gate_up_q, self.gate_up_scale, self.gate_up_zero, self.down_q, self.down_scale, self.down_zero,
            weights, experts, self.activation, self.scheme)

    def extra_repr(self) -> str:
        return f"num_experts={self.num_experts}, top_k={self.top_k}, scheme={self.scheme}, activation={self.activation}"


def stack_experts(name: str, gate: list[QuantizedWeight], up: list[QuantizedWeight], down: list[QuantizedWeight],
                  activation: str, ops: Any, top_k: int, kind: str) -> WQExperts:
    """The routed experts of a pre-quantized checkpoint (one int4 ``gate_proj`` / ``up_proj`` ``[I, H]`` and
    ``down_proj`` ``[H, I]`` per expert, repacked by :mod:`anna_core.weights.prequant`) stacked into the
    ``--expert-quant int4`` layout without dequantizing: ``gate_up [E, 2I, H]`` (each expert's gate rows, then
    its up rows) and ``down [E, H, I]``, each tensor of :class:`~anna_core.weights.gpu_quant.QuantizedWeight`
    gaining a leading ``E`` (int4's scales and zeros are per row, so the rows concatenate exactly).

    Args:
        name: the experts module's name (errors name it).
        gate, up, down: the ``E`` experts' weights, expert order.
        activation, ops, top_k, kind: see :class:`WQExperts`.

    Raises:
        ModelLoadError: no experts, differing counts, a scheme other than int4 (the fp8 scale blocks span 128 rows
            across the gate / up seam), act-order experts (a column order per expert, which ``moe_experts_wq``
            does not take), or shapes / scale dtypes that differ between experts.
    """
    count = len(gate)
    if not count or len(up) != count or len(down) != count:
        raise ModelLoadError(f"{name}: pre-quantized experts: {len(gate)} gate, {len(up)} up, {len(down)} down "
                             "projections (one each per expert)")
    parts = gate + up + down
    if any(w.scheme != "int4" for w in parts):
        schemes = sorted({w.scheme for w in parts})
        raise ModelLoadError(f"{name}: pre-quantized MoE routed experts in {'/'.join(schemes)} are not supported "
                             "(int4 GPTQ / AWQ experts are)")
    if any(w.perm is not None for w in parts):
        raise ModelLoadError(f"{name}: act-order (desc_act) MoE routed experts are not supported: each expert has "
                             "its own input column order, which the stacked expert kernels do not take")
    for group, label in ((gate, "gate_proj"), (up, "up_proj"), (down, "down_proj")):
        if len({(w.shape, w.scale.dtype) for w in group}) != 1:
            raise ModelLoadError(f"{name}: the experts' {label} differ in shape or scale dtype")
    if gate[0].shape != up[0].shape or down[0].shape != gate[0].shape[::-1]:
        raise ModelLoadError(f"{name}: expert shapes gate {list(gate[0].shape)}, up {list(up[0].shape)}, down "
                             f"{list(down[0].shape)} do not form a gated MLP")

    def stack(attr: str, halves: tuple[list[QuantizedWeight], ...]) -> torch.Tensor:
        """``[E, rows, ...]``: per expert, its halves' ``attr`` tensors concatenated along the rows."""
        return torch.stack([torch.cat([getattr(w, attr) for w in expert]) for expert in zip(*halves, strict=True)])

    fields = ("qweight", "scale", "zero")
    gate_up = QuantizedWeight(*(stack(f, (gate, up)) for f in fields), "int4")
    return WQExperts(gate_up, QuantizedWeight(*(stack(f, (down,)) for f in fields), "int4"), activation, ops, top_k,
                     kind)


def quantize_experts(root: nn.Module, scheme: str, ops: Any) -> int:
    """Replace every :class:`~anna_core.layers.moe.RoutedExpertsModule` under ``root`` that holds its stacked
    dense weights (``gate_up_proj [E, 2I, H]``, ``down_proj [E, H, I]``, on their device) by a :class:`WQExperts`
    of ``scheme`` (scales in the weights' dtype for int4) running through ``ops`` (the model's op table); returns
    how many. Each layer's dense weights are
    freed before the next is quantized (peak: the dense model plus one expert's float32 copy and one layer's
    codes). Experts whose shapes the scheme cannot take (int4: ``H`` or ``I`` not a multiple of 128, e.g. Gemma 4
    26B-A4B's ``I = 704``) stay dense, with a warning. ``root`` itself may be such a module (nothing to replace it in: it is left as is).

    Raises:
        ValueError: an unknown scheme.
    """
    check_scheme(scheme, "quantize_experts")
    changed = 0
    for parent_name, parent in list(root.named_modules()):
        for name, child in list(parent.named_children()):
            if not isinstance(child, RoutedExpertsModule) or isinstance(child, WQExperts):
                continue
            qualified = f"{parent_name}.{name}" if parent_name else name
            gate_up, down = child.gate_up_proj, child.down_proj
            if not (quantizable(tuple(gate_up.shape[1:]), scheme) and quantizable(tuple(down.shape[1:]), scheme)):
                log.warning("--expert-quant: %s stays dense: %s cannot take its shapes %s / %s (int4 needs H and I "
                            "multiples of 128; int8 / fp8 take any)", qualified, scheme, tuple(gate_up.shape),
                            tuple(down.shape))
                continue
            with torch.no_grad():
                q_gate_up = quantize_stacked(gate_up, scheme, gate_up.dtype)
                q_down = quantize_stacked(down, scheme, down.dtype)
            setattr(parent, name, WQExperts(q_gate_up, q_down, child.activation, ops, child.top_k))
            changed += 1
    return changed


def expert_scheme(expert_quant: str, *, is_moe: bool, offloaded: bool, device: torch.device) -> str | None:
    """The scheme a loader quantizes a model's routed experts with (None: they stay dense), for ``--expert-quant``.

    Raises:
        ModelLoadError: an unknown mode; a scheme for a model without routed experts, with expert offload (the
            offloaded host copies are dense), or fp8 on a device without FP8 units
            (:attr:`anna_core.device.Accelerator.fp8_units`).
    """
    from anna_core.device import accelerator

    if expert_quant not in EXPERT_QUANT_MODES:
        raise ModelLoadError(f"unknown --expert-quant {expert_quant!r}; use one of {', '.join(EXPERT_QUANT_MODES)}")
    if expert_quant == "none":
        return None
    if not is_moe:
        raise ModelLoadError(f"--expert-quant {expert_quant}: this model has no routed experts (a dense model); "
                             "--weight-quant quantizes its projections")
    if offloaded:
        raise ModelLoadError(f"--expert-quant {expert_quant} with expert offload is not supported (the offloaded "
                             "experts stay dense); use --offload-mode none")
    if expert_quant == "fp8" and not accelerator(torch.device(device)).fp8_units:
        raise ModelLoadError(f"--expert-quant fp8 needs a device with FP8 units (CUDA compute capability 8.9 or "
                             f"newer); {torch.device(device)} has none: use int8 or int4")
    return expert_quant


def plans_offload(offload: OffloadConfig | None, expert_quant: str) -> bool:
    """Whether a loader plans expert offload: not without an offload setting, and not for ``offload.mode == "auto"``
    with quantized experts (``auto`` weighs dense experts, and offloaded experts stay dense; ``--expert-quant``
    is how such a model is meant to fit). ``"experts"`` with quantized experts is planned, then refused by
    :func:`expert_scheme`."""
    if offload is None:
        return False
    if offload.mode == "auto" and expert_quant != "none":
        log.info("--expert-quant %s: --offload-mode auto keeps every expert on the device", expert_quant)
        return False
    return True


def quantized_experts_bytes(root: nn.Module, scheme: str) -> tuple[int, int]:
    """``(dense, quantized)``: the bytes of every :class:`~anna_core.layers.moe.RoutedExpertsModule`'s weights under
    ``root`` as they are (meta tensors count too: a loader weighs the model before loading it) and quantized with
    ``scheme`` (:func:`~anna_core.weights.gpu_quant.quantized_bytes` per ``[N, K]`` matrix; a stacked ``[E, N, K]``
    weight is ``E`` of them).

    Raises:
        ValueError: an unknown scheme.
    """
    check_scheme(scheme, "quantized_experts_bytes")
    dense = quantized = 0
    for module in root.modules():
        if not isinstance(module, RoutedExpertsModule) or isinstance(module, WQExperts):
            continue
        for p in module.parameters():
            n, k = p.shape[-2:]
            dense += p.numel() * p.element_size()
            quantized += p.numel() // (n * k) * quantized_bytes(n, k, scheme, p.dtype)
    return dense, quantized
