"""``moe_experts_wq``: the routed experts of a mixture-of-experts block with their weights quantized
(``--expert-quant int4|int8|fp8``), each expert's ``gate_up [2I, H]`` and ``down [H, I]`` in a
:mod:`anna_core.weights.gpu_quant` layout, stacked over the ``E`` experts.

The reference is :func:`~anna_core.kernels.reference.moe.moe_experts` with each chosen expert's two
projections run as :func:`~anna_core.kernels.reference.wq_linear.wq_linear` runs them: the expert's weight
dequantized to float32 (only the experts some pair chose, one at a time), the product in float32 and rounded
once to x's dtype; the activation, the weighting and the sum in expert order as ``moe_experts``. For float32
activations it therefore equals ``moe_experts`` on the dequantized float32 weights. Like that reference it
reads the per-expert counts on the host (the CPU path; accelerated implementations must not sync).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from anna_core.kernels.checks import check_gated_activation, require, require_dims
from anna_core.kernels.reference.activations import act_and_mul
from anna_core.kernels.reference.moe import INDEX_DTYPES, routed_sum
from anna_core.kernels.reference.wq_linear import check_wq_weight
from anna_core.weights.gpu_quant import SCHEMES, dequantize

_OP = "moe_experts_wq"


def _check_stacked(name: str, qweight: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor | None,
                   scheme: str) -> tuple[int, int, int]:
    require(scheme in SCHEMES, _OP, f"scheme must be one of {SCHEMES}, got {scheme!r}")
    require_dims(_OP, **{f"{name}_q": (qweight, 3), f"{name}_scale": (scale, 2 if scheme == "int8" else 3)})
    num_experts = qweight.shape[0]
    require(num_experts >= 1 and scale.shape[0] == num_experts
            and (zero is None or (zero.dim() == 3 and zero.shape[0] == num_experts)), _OP,
            f"{name}: qweight, scale and zero must be stacked over the same E >= 1 experts, got "
            f"{tuple(qweight.shape)}, {tuple(scale.shape)}, {None if zero is None else tuple(zero.shape)}")
    n, k = check_wq_weight(f"{_OP} ({name})", qweight[0], scale[0], None if zero is None else zero[0], scheme)
    return num_experts, n, k


def check_moe_experts_wq(x: torch.Tensor, gate_up_q: torch.Tensor, gate_up_scale: torch.Tensor,
                         gate_up_zero: torch.Tensor | None, down_q: torch.Tensor, down_scale: torch.Tensor,
                         down_zero: torch.Tensor | None, weights: torch.Tensor, expert_ids: torch.Tensor,
                         activation: str, scheme: str) -> None:
    """Check the arguments of :func:`moe_experts_wq` (shapes and dtypes only, no device sync).

    Raises:
        ValueError: ``"moe_experts_wq: ..."`` unless x is a float ``[T, H]``; gate_up and down are stacked
            quantized weights of ``scheme`` (each expert's tensors as
            :func:`~anna_core.kernels.reference.wq_linear.check_wq_weight` wants them, with a leading ``E``) of
            dense shapes ``[E, 2I, H]`` and ``[E, H, I]``; weights ``[T, K]`` float32 or of x's dtype and
            expert_ids ``[T, K]`` int32 / int64 (``K >= 1``); activation one of
            :data:`~anna_core.kernels.checks.GATED_ACTIVATIONS`.
    """
    check_gated_activation(_OP, activation)
    require_dims(_OP, x=(x, 2), weights=(weights, 2), expert_ids=(expert_ids, 2))
    require(x.is_floating_point(), _OP, f"x must be a float tensor, got {x.dtype}")
    t, hidden = x.shape
    num_experts, two_inter, k_up = _check_stacked("gate_up", gate_up_q, gate_up_scale, gate_up_zero, scheme)
    require(two_inter >= 2 and two_inter % 2 == 0 and k_up == hidden, _OP,
            f"gate_up must be [E, 2I, H={hidden}] (gate rows, then up rows), got [E={num_experts}, {two_inter}, {k_up}]")
    e_down, n_down, k_down = _check_stacked("down", down_q, down_scale, down_zero, scheme)
    require((e_down, n_down, k_down) == (num_experts, hidden, two_inter // 2), _OP,
            f"down must be [E={num_experts}, H={hidden}, I={two_inter // 2}], got [{e_down}, {n_down}, {k_down}]")
    require(expert_ids.shape[0] == t and expert_ids.shape[1] >= 1, _OP,
            f"expert_ids must be [T={t}, K>=1], got {tuple(expert_ids.shape)}")
    require(expert_ids.dtype in INDEX_DTYPES, _OP, f"expert_ids must be int32 or int64, got {expert_ids.dtype}")
    require(weights.shape == expert_ids.shape, _OP,
            f"weights must match expert_ids' shape {tuple(expert_ids.shape)}, got {tuple(weights.shape)}")
    require(weights.dtype in (torch.float32, x.dtype), _OP,
            f"weights must be float32 or x's dtype {x.dtype}, got {weights.dtype}")


def moe_experts_wq(x: torch.Tensor, gate_up_q: torch.Tensor, gate_up_scale: torch.Tensor,
                   gate_up_zero: torch.Tensor | None, down_q: torch.Tensor, down_scale: torch.Tensor,
                   down_zero: torch.Tensor | None, weights: torch.Tensor, expert_ids: torch.Tensor, activation: str,
                   scheme: str) -> torch.Tensor:
    """Each token's weighted sum of its chosen experts' gated MLPs, the experts' weights quantized.

    Args:
        x: ``[T, H]`` float activations.
        gate_up_q, gate_up_scale, gate_up_zero: the stacked quantized ``[E, 2I, H]`` merged gate/up projections
            (gate rows first): each expert's ``(qweight, scale, zero)`` of ``scheme``
            (:mod:`anna_core.weights.gpu_quant`) with a leading ``E``; zero None unless int4.
        down_q, down_scale, down_zero: the stacked quantized ``[E, H, I]`` down projections, likewise.
        weights: ``[T, K]`` float32 or x's dtype: the routing weight of each choice.
        expert_ids: ``[T, K]`` int32 / int64 in ``[0, E)``.
        activation: ``"silu"`` or ``"gelu_tanh"``.
        scheme: ``"int4"``, ``"int8"`` or ``"fp8"``.

    Returns:
        ``[T, H]`` in x's dtype: per expert ``e`` chosen by pairs ``(t, k)``, ``g = x[t] @ w_gate_up[e]^T`` in
        float32 rounded to x's dtype, ``h = act_and_mul(g, activation)``, ``y = h @ w_down[e]^T`` in float32
        rounded to x's dtype, the term ``y * weights[t, k]`` in float32 rounded to x's dtype, the terms added
        into a zero output in ascending expert order (``index_add_``), ``w`` the dequantized weights.

    Raises:
        ValueError: bad shapes or dtypes (:func:`check_moe_experts_wq`), or an expert id outside ``[0, E)``.
    """
    check_moe_experts_wq(x, gate_up_q, gate_up_scale, gate_up_zero, down_q, down_scale, down_zero, weights,
                         expert_ids, activation, scheme)

    def expert(e: int, rows: torch.Tensor) -> torch.Tensor:
        w_gate_up = dequantize(gate_up_q[e], gate_up_scale[e], None if gate_up_zero is None else gate_up_zero[e],
                               scheme, torch.float32)
        h = act_and_mul(F.linear(rows.float(), w_gate_up).to(x.dtype), activation)  # [n, I]
        w_down = dequantize(down_q[e], down_scale[e], None if down_zero is None else down_zero[e], scheme,
                            torch.float32)
        return F.linear(h.float(), w_down).to(x.dtype)  # [n, H]

    return routed_sum(x, weights, expert_ids, gate_up_q.shape[0], _OP, expert)
