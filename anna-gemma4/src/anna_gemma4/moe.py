"""Gemma 4's mixture-of-experts block (``enable_moe_block``), which runs beside the dense MLP.

Router: the residual stream's rows, RMS-normalised without weight, times a learned ``scale`` and
``hidden ** -0.5``, projected to one score per expert; softmax (float32), the top ``k`` experts,
their probabilities renormalised to sum to one, times each chosen expert's ``per_expert_scale``.
Experts: GeGLU feed-forwards (``gelu_tanh(gate) * up``, then ``down``), stored as stacked 3-D tensors
(``gate_up_proj`` ``[E, 2I, hidden]``, ``down_proj`` ``[E, hidden, I]``); a token's output is the
weighted sum of its experts' outputs.

A plain torch implementation: tokens are grouped by expert and each expert hit runs as two GEMMs
(one host read of the per-expert counts per layer, so a step using it cannot be captured as a graph
yet; grouped-expert kernels are a later addition).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from anna_core.layers.norm import RMSNorm
from torch import nn


class Gemma4Router(nn.Module):
    """Parameters: ``proj.weight`` ``[E, hidden]``, ``scale`` ``[hidden]``, ``per_expert_scale`` ``[E]``.

    Args:
        hidden: model width; num_experts: ``E``; top_k: experts per token ``K``; eps: the norm's epsilon.
    """

    def __init__(self, hidden: int, num_experts: int, top_k: int, eps: float, ops: Any):
        super().__init__()
        self.top_k = top_k
        self.root_scale = hidden**-0.5
        self.norm = RMSNorm(hidden, eps, ops, scale=False)
        self.proj = nn.Linear(hidden, num_experts, bias=False)
        self.scale = nn.Parameter(torch.ones(hidden))
        self.per_expert_scale = nn.Parameter(torch.ones(num_experts))

    def forward(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """h: ``[T, hidden]`` -> (weights ``[T, K]`` float32, expert ids ``[T, K]`` int64)."""
        x = self.norm(h) * self.scale * self.root_scale
        probs = F.softmax(self.proj(x), dim=-1, dtype=torch.float32)  # [T, E]
        weights, experts = torch.topk(probs, self.top_k, dim=-1)
        weights = weights / weights.sum(dim=-1, keepdim=True)
        return weights * self.per_expert_scale[experts], experts


class Gemma4Experts(nn.Module):
    """Parameters: ``gate_up_proj`` ``[E, 2I, hidden]`` (gate rows, then up rows), ``down_proj``
    ``[E, hidden, I]``."""

    def __init__(self, hidden: int, num_experts: int, intermediate: int):
        super().__init__()
        self.num_experts = num_experts
        self.gate_up_proj = nn.Parameter(torch.empty(num_experts, 2 * intermediate, hidden))
        self.down_proj = nn.Parameter(torch.empty(num_experts, hidden, intermediate))

    def forward(self, x: torch.Tensor, weights: torch.Tensor, experts: torch.Tensor) -> torch.Tensor:
        """x: ``[T, hidden]``; weights, experts: ``[T, K]`` from the router -> ``[T, hidden]`` in x's dtype.

        Each expert's weighted output is rounded to x's dtype and accumulated in expert order.
        """
        k = experts.shape[1]
        flat = experts.reshape(-1)  # [T*K]: entry j is token j // K
        order = torch.argsort(flat, stable=True)
        counts = torch.bincount(flat, minlength=self.num_experts).tolist()  # one host read per layer
        flat_weights = weights.reshape(-1)
        out = torch.zeros_like(x)
        start = 0
        for e, n in enumerate(counts):
            if n == 0:
                continue
            picks = order[start:start + n]
            start += n
            tokens = picks // k
            gate, up = F.linear(x[tokens], self.gate_up_proj[e]).chunk(2, dim=-1)  # [n, I] each
            y = F.linear(F.gelu(gate, approximate="tanh") * up, self.down_proj[e])  # [n, hidden]
            out.index_add_(0, tokens, (y * flat_weights[picks, None]).to(out.dtype))
        return out
