"""The SwiGLU feed-forward block (Shazeer, "GLU Variants Improve Transformer", 2020)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class SwiGLUMLP(nn.Module):
    """``down_proj(silu(gate_proj(x)) * up_proj(x))``, no biases.

    Args:
        hidden: model width ``H``.
        intermediate: inner width ``I``.

    Parameters:
        gate_proj.weight, up_proj.weight: ``[I, H]``; down_proj.weight: ``[H, I]``.
    """

    def __init__(self, hidden: int, intermediate: int):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: ``[T, H]`` -> ``[T, H]``."""
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
