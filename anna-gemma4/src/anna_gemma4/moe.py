"""Gemma 4's mixture-of-experts block (``enable_moe_block``), which runs beside the dense MLP.

Router: the residual stream's rows, RMS-normalised without weight, times a learned ``scale`` and
``hidden ** -0.5`` (computed with the experts' input norm of the same rows: ``rms_norm_pair``, or with
the attention's tail before it, ``post_norm_residual_norm_pair``), projected to one score per expert;
softmax (float32), the top ``k`` experts, their probabilities renormalised to sum to one, times each
chosen expert's ``per_expert_scale`` (the softmax onwards is anna-core's ``moe_route`` op).
Experts: GeGLU feed-forwards (``gelu_tanh(gate) * up``, then ``down``), stored as stacked 3-D tensors
(``gate_up_proj`` ``[E, 2I, hidden]``, ``down_proj`` ``[E, hidden, I]``); a token's output is the
weighted sum of its experts' outputs.

The experts run as anna-core's ``moe_experts`` op (``activation="gelu_tanh"``): its torch reference
(:mod:`anna_core.kernels.reference.moe`, the CPU path) groups the tokens by expert, runs each expert hit
as two GEMMs and reads the per-expert counts on the host, with transformers' rounding; accelerated
implementations (anna-xpu-kernels' grouped GEMMs) read nothing on the host, so steps using them capture
as graphs.
"""

from __future__ import annotations

from typing import Any

import torch
from anna_core.distributed.state import SINGLE, ParallelState
from anna_core.layers.moe import RoutedExpertsModule
from anna_core.layers.norm import RMSNorm
from torch import nn


class Gemma4Router(nn.Module):
    """Parameters: ``proj.weight`` ``[E, hidden]``, ``scale`` ``[hidden]``, ``per_expert_scale`` ``[E]``.

    Args:
        hidden: model width; num_experts: ``E``; top_k: experts per token ``K``; eps: the norm's epsilon;
        ops: the model's :class:`anna_core.kernels.OpTable` (the norm, and the routing as its ``moe_route`` op).
    """

    def __init__(self, hidden: int, num_experts: int, top_k: int, eps: float, ops: Any):
        super().__init__()
        self.top_k = top_k
        self.num_experts = num_experts
        self.ops = ops
        self.root_scale = hidden**-0.5
        self.norm = RMSNorm(hidden, eps, ops, scale=False)
        self.proj = nn.Linear(hidden, num_experts, bias=False)
        self.scale = nn.Parameter(torch.ones(hidden))
        self.per_expert_scale = nn.Parameter(torch.ones(num_experts))

    def inputs(self, h: torch.Tensor, expert_norm: RMSNorm) -> tuple[torch.Tensor, torch.Tensor]:
        """h: ``[T, hidden]``; expert_norm: the experts' input norm (``pre_feedforward_layernorm_2``, which reads
        the same rows) -> ``(expert_norm(h), router input)`` ``[T, hidden]`` each, one ``rms_norm_pair`` launch.
        The router input ``norm(h) * scale * hidden ** -0.5`` is rounded to h's dtype after the norm and after
        each product, as transformers rounds it.

        Raises:
            ValueError: expert_norm has no weight or another eps than the router's norm.
        """
        if expert_norm.weight is None or expert_norm.eps != self.norm.eps:
            raise ValueError("Gemma4Router: the experts' input norm needs a weight and the router norm's eps")
        return self.ops.rms_norm_pair(h, expert_norm.weight, expert_norm.eps, expert_norm.zero_centered, self.scale,
                                      self.root_scale)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x: ``[T, hidden]`` the router input (:meth:`inputs`' second result) -> (weights ``[T, K]`` float32,
        expert ids ``[T, K]`` int64): ``moe_route`` of the scores with ``per_expert_scale`` (softmax in float32,
        the top ``K`` renormalised, times each chosen expert's scale in float32: transformers'
        ``Gemma4TextRouter``)."""
        route = self.ops.get("moe_route", num_experts=self.num_experts)
        return route(self.proj(x), self.top_k, self.per_expert_scale, torch.float32)


class Gemma4Experts(RoutedExpertsModule):
    """Parameters: ``gate_up_proj`` ``[E, 2I, hidden]`` (gate rows, then up rows), ``down_proj``
    ``[E, hidden, I]``.

    Args:
        hidden: model width; num_experts: ``E``; intermediate: each expert's inner width ``I``;
        ops: the model's :class:`anna_core.kernels.OpTable` (the experts run as its ``moe_experts`` op).
        parallel: a tensor-parallel rank's state: ``intermediate`` is then its share and the output is all-reduced.
    """

    activation = "gelu_tanh"

    def __init__(self, hidden: int, num_experts: int, intermediate: int, ops: Any, top_k: int,
                 parallel: ParallelState = SINGLE):
        super().__init__(num_experts, top_k)
        self.ops = ops
        self.parallel = parallel
        self.gate_up_proj = nn.Parameter(torch.empty(num_experts, 2 * intermediate, hidden))
        self.down_proj = nn.Parameter(torch.empty(num_experts, hidden, intermediate))

    def forward(self, x: torch.Tensor, weights: torch.Tensor, experts: torch.Tensor) -> torch.Tensor:
        """x: ``[T, hidden]``; weights (float32), experts (int64): ``[T, K]`` from the router -> ``[T, hidden]``
        in x's dtype: ``moe_experts(x, gate_up_proj, down_proj, weights, experts, "gelu_tanh")`` (each
        expert's weighted output rounded to x's dtype; the reference accumulates them in expert order)."""
        out = self.ops.get("moe_experts")(x, self.gate_up_proj, self.down_proj, weights, experts, self.activation)
        return self.parallel.all_reduce(out)  # a tensor-parallel rank's units: the partial sums added
