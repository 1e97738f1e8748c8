"""The gated feed-forward block: SwiGLU, or GeGLU with the tanh GELU (Shazeer, "GLU Variants Improve
Transformer", 2020)."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from anna_core.kernels.checks import check_gated_activation
from anna_core.layers.wq_linear import WQLinear


class SwiGLUMLP(nn.Module):
    """``down_proj(act(gate_proj(x)) * up_proj(x))``, no biases; ``act`` is SiLU (SwiGLU, the default)
    or the tanh-approximated GELU (``activation="gelu_tanh"``: GeGLU, as Gemma).

    Args:
        hidden: model width ``H``.
        intermediate: inner width ``I``.
        ops: the model's :class:`anna_core.kernels.OpTable`, or None. With it, the merged path runs
            the gate/up projection and ``act(gate) * up`` as the one ``linear_act_mul`` op (same
            rounding as the eager torch expressions; one GEMV launch at decode on GPUs), and with a
            ``pre_norm`` the norm too (``add_rms_norm_linear_act_mul``); without it (or before
            :meth:`merge_gate_up`) eager torch ops compute it.
        activation: ``"silu"`` or ``"gelu_tanh"`` (:data:`anna_core.kernels.checks.GATED_ACTIVATIONS`).

    Parameters:
        gate_proj.weight, up_proj.weight: ``[I, H]``; down_proj.weight: ``[H, I]``. After
        :meth:`merge_gate_up`: ``gate_up_proj.weight`` ``[2I, H]`` (gate rows, then up rows) replaces
        the first two.

    Raises:
        ValueError: an unknown activation.
    """

    def __init__(self, hidden: int, intermediate: int, ops=None, activation: str = "silu"):
        super().__init__()
        check_gated_activation("SwiGLUMLP", activation)
        self.activation = activation
        self.ops = ops
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)
        self.intermediate = intermediate
        self.gate_up_proj: nn.Linear | None = None

    def merge_gate_up(self) -> None:
        """Concatenate ``gate_proj`` and ``up_proj`` into ``gate_up_proj`` (one GEMM reading ``x`` once).

        Call after the weights are loaded; idempotent. The originals are removed to free memory.

        An act-order ``down_proj`` (a :class:`~anna_core.layers.wq_linear.WQLinear` with an input column order
        ``perm``) with a quantized int4 / int8 ``gate_up_proj``: the gate and up rows are reordered by ``perm`` so
        ``act(gate) * up`` comes out in ``down_proj``'s order, and ``down_proj`` drops its column order (the same
        values; its GEMV reads its input contiguously).
        """
        if self.gate_up_proj is not None:
            return
        from anna_core.layers.linear import merge_linears  # quantized parts merge quantized

        self.gate_up_proj = merge_linears([self.gate_proj, self.up_proj])
        del self.gate_proj, self.up_proj
        down, gate_up = self.down_proj, self.gate_up_proj
        if (isinstance(down, WQLinear) and down.perm is not None and isinstance(gate_up, WQLinear)
                and gate_up.scheme != "fp8"):
            perm = down.take_input_perm()
            gate_up.permute_outputs(torch.cat([perm, perm + self.intermediate]))

    def unmerged_weights(self) -> dict[str, torch.Tensor]:
        """The checkpoint-layout weights, merged or not: ``{"gate_proj.weight": [I, H], "up_proj.weight":
        [I, H], "down_proj.weight": [H, I]}``, each a view of this module's parameters (detached, same
        storage: no copy), in their dtype and on their device. After :meth:`merge_gate_up` the first two
        are the row halves of ``gate_up_proj.weight``."""
        if self.gate_up_proj is None:
            gate, up = self.gate_proj.weight.detach(), self.up_proj.weight.detach()
        else:
            gate, up = self.gate_up_proj.weight.detach().split(self.intermediate)
        return {"gate_proj.weight": gate, "up_proj.weight": up, "down_proj.weight": self.down_proj.weight.detach()}

    def forward(self, x: torch.Tensor, pre_norm: tuple[Any, torch.Tensor | None] | None = None,
                post_norm: tuple[Any, torch.Tensor, Any] | None = None):
        """x: ``[T, H]`` -> ``[T, H]``.

        With ``post_norm = (norm, residual, next_norm)`` (sandwich norms, Gemma), ``x`` is the previous
        block's output: the block computes ``mlp(next_norm(residual + norm(x)))`` and returns ``(output,
        residual + norm(x))``; after :meth:`merge_gate_up` with ``ops`` the previous block's tail, the gate/up
        projection and the gated product are one op (``post_norm_residual_linear``, via
        :meth:`~anna_core.layers.norm.RMSNorm.post_add_linear`).

        With ``pre_norm = (norm, residual)`` (an :class:`~anna_core.layers.norm.RMSNorm` and the
        residual stream, or None in a first block), ``x`` is the previous block's output: the block
        computes ``mlp(norm(x + residual))`` and returns ``(output, x + residual)``, the add fused
        into the norm (``add_rms_norm``); after :meth:`merge_gate_up` with ``ops`` the add, norm,
        gate/up projection and gated product are one op (``add_rms_norm_linear_act_mul``), so the
        block is two launches at decode where the kernels fuse them.
        """
        if post_norm is not None:
            norm, residual, next_norm = post_norm
            if self.gate_up_proj is not None and self.ops is not None:
                h, new_residual = norm.post_add_linear(x, residual, None, next_norm, self.gate_up_proj, self.activation)
                return self.down_proj(h), new_residual
            y, new_residual = norm.post_add(x, residual, next_norm=next_norm)
            return self(y), new_residual
        if pre_norm is not None:
            norm, residual = pre_norm
            if self.gate_up_proj is not None and self.ops is not None:
                h, new_residual = norm.add_norm_linear_act_mul(x, residual, self.gate_up_proj, self.activation)
                return self.down_proj(h), new_residual
            y, new_residual = norm.add_and_norm(x, residual)
            return self(y), new_residual
        if self.gate_up_proj is None:
            return self.down_proj(self._act(self.gate_proj(x)) * self.up_proj(x))
        if self.ops is not None and not isinstance(self.gate_up_proj, WQLinear):
            return self.down_proj(self.ops.linear_act_mul(x, self.gate_up_proj.weight, self.activation))
        gate, up = self.gate_up_proj(x).split(self.intermediate, dim=-1)  # [T, I] each
        return self.down_proj(self._act(gate) * up)

    def _act(self, gate: torch.Tensor) -> torch.Tensor:
        return F.silu(gate) if self.activation == "silu" else F.gelu(gate, approximate="tanh")
