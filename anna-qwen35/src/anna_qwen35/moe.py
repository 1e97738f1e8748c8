"""Qwen3.5's mixture-of-experts block (``Qwen3_5MoeSparseMoeBlock`` in transformers).

Per token ``x`` (a row of the post-attention-normed stream, ``[H]``):

* router: ``logits = gate(x)`` ``[E]`` (in x's dtype), ``p = softmax(logits)`` in float32, the top
  ``K`` of ``p``, renormalised to sum to one, then cast to x's dtype (anna-core's ``moe_route`` op);
* routed experts: ``sum_k w_k * down_e(silu(gate_e(x)) * up_e(x))`` over the chosen experts ``e``;
* shared expert: ``sigmoid(shared_expert_gate(x)) * shared_expert(x)`` (a SwiGLU MLP), added.

Every layer of a Qwen3.5 MoE model is sparse (transformers has no dense-MLP layers in this family).

The routed experts are anna-core's ``moe_experts`` op (:mod:`anna_core.kernels.reference.moe`): its
torch reference groups the pairs by expert and reads the per-expert counts on the host (the CPU path,
transformers' loop and rounding); accelerated implementations (anna-xpu-kernels' grouped GEMMs) do not
sync, so decode and prefill steps of a MoE model can be captured as graphs. Every step is row-wise
(routing, experts, shared expert), so padding rows of a padded prefill change no other row.
"""

from __future__ import annotations

from typing import Any

import torch
from anna_core.distributed.state import SINGLE, ParallelState
from anna_core.errors import ModelLoadError
from anna_core.layers.mlp import SwiGLUMLP
from anna_core.layers.moe import RoutedExpertsModule
from anna_core.layers.wq_experts import stack_experts
from anna_core.layers.wq_linear import WQLinear
from torch import nn


def route(logits: torch.Tensor, top_k: int, ops: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Qwen3.5's top-k softmax routing: the ``moe_route`` op of ``ops`` without an expert scale.

    Args:
        logits: router logits ``[T, E]`` (any float dtype).
        top_k: experts per token ``K``.
        ops: the model's :class:`anna_core.kernels.OpTable`.

    Returns:
        ``(weights [T, K] in logits' dtype, experts [T, K] int64)``: the chosen experts (in descending
        probability, equal ones lower index first) and their float32 softmax probabilities renormalised
        over the ``K`` chosen ones (transformers' ``Qwen3_5MoeTopKRouter``).
    """
    return ops.get("moe_route", num_experts=logits.shape[-1])(logits, top_k, None, logits.dtype)


class _ExpertWeights(nn.Module):
    """One expert of the per-expert checkpoint layout, only until :meth:`RoutedExperts.fuse`."""

    def __init__(self, hidden: int, intermediate: int):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)


class RoutedExperts(RoutedExpertsModule):
    """``E`` SiLU-gated expert MLPs, stacked; runs them through the ``moe_experts`` op.

    Args:
        hidden: model width ``H``; num_experts: ``E``; intermediate: each expert's inner width ``I``.
        ops: the model's :class:`anna_core.kernels.OpTable`.
        per_expert: build the per-expert checkpoint layout (parameters ``{e}.gate_proj.weight`` /
            ``{e}.up_proj.weight`` ``[I, H]``, ``{e}.down_proj.weight`` ``[H, I]``, what transformers'
            ``save_pretrained`` writes) to be loaded, then :meth:`fuse`\\ d; otherwise the fused layout
            directly.

    Parameters (fused layout, as transformers holds them in memory):
        gate_up_proj: ``[E, 2I, H]`` (gate rows, then up rows); down_proj: ``[E, H, I]``.
    """

    activation = "silu"

    def __init__(self, hidden: int, num_experts: int, intermediate: int, ops: Any, *, top_k: int,
                 per_expert: bool = False):
        super().__init__(num_experts, top_k)
        self.hidden = hidden
        self.intermediate = intermediate
        self.ops = ops
        self.per_expert = per_expert
        if per_expert:
            for e in range(num_experts):
                self.add_module(str(e), _ExpertWeights(hidden, intermediate))
            self.gate_up_proj = None
            self.down_proj = None
        else:
            self.gate_up_proj = nn.Parameter(torch.empty(num_experts, 2 * intermediate, hidden))
            self.down_proj = nn.Parameter(torch.empty(num_experts, hidden, intermediate))

    def fuse(self) -> None:
        """Stack the per-expert weights into ``gate_up_proj`` / ``down_proj`` and drop them. Idempotent.

        Raises:
            ModelLoadError: an expert's weights differ in dtype or device from the others'.
        """
        if not self.per_expert:
            return
        experts = [getattr(self, str(e)) for e in range(self.num_experts)]
        tensors = [w for ex in experts for w in (ex.gate_proj.weight, ex.up_proj.weight, ex.down_proj.weight)]
        if len({(t.dtype, t.device) for t in tensors}) != 1:
            raise ModelLoadError("the per-expert weights of a MoE layer differ in dtype or device")
        gate_up = torch.stack([torch.cat([ex.gate_proj.weight, ex.up_proj.weight]) for ex in experts]).detach()
        down = torch.stack([ex.down_proj.weight for ex in experts]).detach()
        for e in range(self.num_experts):
            delattr(self, str(e))
        self.gate_up_proj = nn.Parameter(gate_up, requires_grad=False)
        self.down_proj = nn.Parameter(down, requires_grad=False)
        self.per_expert = False

    def forward(self, x: torch.Tensor, weights: torch.Tensor, experts: torch.Tensor) -> torch.Tensor:
        """x: ``[T, H]``; weights ``[T, K]`` (x's dtype), experts ``[T, K]`` int64 from :func:`route`
        -> ``[T, H]`` in x's dtype: each token's weighted sum of its experts' outputs (``moe_experts``).

        Raises:
            RuntimeError: called before :meth:`fuse` on the per-expert layout.
        """
        if self.per_expert:
            raise RuntimeError("RoutedExperts.fuse() must run after the per-expert weights are loaded")
        return self.ops.get("moe_experts")(x, self.gate_up_proj, self.down_proj, weights, experts, self.activation)


class SparseMoeBlock(nn.Module):
    """The MoE feed-forward block of a Qwen3.5 MoE layer; drop-in for :class:`SwiGLUMLP` in a layer.

    Args:
        hidden: ``H``; num_experts: ``E``; top_k: ``K``; intermediate: routed experts' inner width;
        shared_intermediate: the shared expert's inner width; ops: the model's op table.
        per_expert: see :class:`RoutedExperts`.
        parallel: a tensor-parallel rank's state: the experts' and shared expert's widths are then this rank's
            share, and the block all-reduces its summed output once (:mod:`anna_qwen35.tensor_parallel`).

    Parameters (checkpoint names under ``model.layers.{i}.mlp.``):
        gate.weight ``[E, H]`` (router); experts.* (:class:`RoutedExperts`);
        shared_expert.{gate,up,down}_proj.weight (:class:`SwiGLUMLP`); shared_expert_gate.weight ``[1, H]``.
    """

    def __init__(self, hidden: int, num_experts: int, top_k: int, intermediate: int, shared_intermediate: int,
                 ops: Any, *, per_expert: bool = False, parallel: ParallelState = SINGLE):
        super().__init__()
        self.parallel = parallel
        self.top_k = top_k
        self.ops = ops
        self.gate = nn.Linear(hidden, num_experts, bias=False)
        self.experts = RoutedExperts(hidden, num_experts, intermediate, ops, top_k=top_k, per_expert=per_expert)
        self.shared_expert = SwiGLUMLP(hidden, shared_intermediate, ops)
        self.shared_expert_gate = nn.Linear(hidden, 1, bias=False)

    def merge_projections(self) -> None:
        """Fuse per-expert weights and merge the shared expert's gate/up projections (after loading); experts
        already stacked quantized (:func:`stack_prequantized_experts`) stay as they are."""
        if isinstance(self.experts, RoutedExperts):
            self.experts.fuse()
        self.shared_expert.merge_gate_up()

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x: ``[T, H]`` -> ``(weights [T, K], experts [T, K])`` (see :func:`route`)."""
        return route(self.gate(x), self.top_k, self.ops)

    def forward(self, x: torch.Tensor, pre_norm: tuple[Any, torch.Tensor | None] | None = None):
        """x: ``[T, H]`` -> ``[T, H]``; with ``pre_norm = (norm, residual)`` as :meth:`SwiGLUMLP.forward`:
        ``x`` is the previous block's output, the block computes ``moe(norm(x + residual))`` and returns
        ``(output, x + residual)``."""
        if pre_norm is not None:
            norm, residual = pre_norm
            y, new_residual = norm.add_and_norm(x, residual)
            return self(y), new_residual
        weights, experts = self.route(x)
        routed = self.experts(x, weights, experts)
        shared = torch.sigmoid(self.shared_expert_gate(x)) * self.shared_expert(x)
        return self.parallel.all_reduce(routed + shared)


def stack_prequantized_experts(root: nn.Module, ops: Any, *, offloaded: bool = False) -> int:
    """Stack the per-expert projections a pre-quantized checkpoint loaded as
    :class:`~anna_core.layers.wq_linear.WQLinear` (``{e}.gate_proj`` / ``up_proj`` / ``down_proj`` of every
    :class:`RoutedExperts` under ``root``) into :class:`~anna_core.layers.wq_experts.WQExperts` (the
    ``--expert-quant int4`` layout, ``moe_experts_wq``) without dequantizing; returns how many layers.

    Raises:
        ModelLoadError: a layer whose experts are quantized only in part, with expert offload (``offloaded``: the
            host copies are dense), or see :func:`~anna_core.layers.wq_experts.stack_experts` (fp8 or act-order
            experts).
    """
    changed = 0
    for name, module in list(root.named_modules()):
        if not isinstance(module, RoutedExperts) or not module.per_expert:
            continue
        experts = [getattr(module, str(e)) for e in range(module.num_experts)]
        parts = {p: [getattr(ex, p) for ex in experts] for p in ("gate_proj", "up_proj", "down_proj")}
        quantized = [isinstance(m, WQLinear) for ms in parts.values() for m in ms]
        if not any(quantized):
            continue
        if not all(quantized):
            raise ModelLoadError(f"{name}: {sum(quantized)} of the {len(quantized)} expert projections are "
                                 "pre-quantized; a layer's experts must all be, or none")
        if offloaded:
            raise ModelLoadError("expert offload of pre-quantized MoE experts is not supported: use --offload-mode none")
        kind = parts["gate_proj"][0].kind
        stacked = stack_experts(name, *([m.weight_q for m in parts[p]] for p in ("gate_proj", "up_proj", "down_proj")),
                                module.activation, ops, module.top_k, kind)
        parent_name, _, attr = name.rpartition(".")
        setattr(root.get_submodule(parent_name) if parent_name else root, attr, stacked)
        changed += 1
    return changed
