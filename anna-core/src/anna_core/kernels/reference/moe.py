"""Routed experts of a mixture-of-experts block (the expert MLPs, after the router has chosen).

Each of the ``T`` tokens has ``K`` (expert, weight) choices. Expert ``e`` is a gated MLP stored as
stacked tensors (the layout transformers holds in memory for Qwen3.5 MoE and Gemma 4)::

    gate_up[e]: [2I, H]  (gate rows, then up rows)      down[e]: [H, I]
    y[t] = sum_k weights[t, k] * down[e_tk] @ act_and_mul(gate_up[e_tk] @ x[t], activation)

The reference groups the (token, choice) pairs by expert (a stable sort), runs each expert that was
chosen as two GEMMs over its tokens and adds its weighted rows into the output with ``index_add_``, in
expert order: exactly the eager loop of transformers' ``Qwen3_5MoeExperts`` / ``Gemma4TextExperts``, so
the CPU path matches the HF models' rounding. It reads the per-expert counts on the host once per call
(the loop needs them), which is cheap on a CPU and fine for eager accelerator runs, but it cannot be
captured in a CUDA graph; accelerated implementations of the op must not sync (see the contract in
:mod:`anna_core.kernels.ops`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from anna_core.kernels.checks import check_gated_activation, require, require_dims
from anna_core.kernels.reference.activations import act_and_mul

_OP = "moe_experts"
INDEX_DTYPES = (torch.int32, torch.int64)
"""dtypes ``expert_ids`` may have."""


def check_moe_experts(x: torch.Tensor, gate_up: torch.Tensor, down: torch.Tensor, weights: torch.Tensor,
                      expert_ids: torch.Tensor, activation: str) -> None:
    """Check the arguments of :func:`moe_experts` (shapes and dtypes only, no device sync).

    Raises:
        ValueError: ``"moe_experts: ..."`` unless x is ``[T, H]``; gate_up ``[E, 2I, H]`` and down
            ``[E, H, I]`` of x's dtype (``E, I >= 1``); weights ``[T, K]`` float32 or of x's dtype and
            expert_ids ``[T, K]`` int32 / int64 (``K >= 1``); activation one of
            :data:`~anna_core.kernels.checks.GATED_ACTIVATIONS`.
    """
    check_gated_activation(_OP, activation)
    require_dims(_OP, x=(x, 2), gate_up=(gate_up, 3), down=(down, 3), weights=(weights, 2),
                 expert_ids=(expert_ids, 2))
    t, hidden = x.shape
    num_experts, two_inter, _ = gate_up.shape
    inter = two_inter // 2
    require(num_experts >= 1 and two_inter >= 2 and two_inter % 2 == 0 and gate_up.shape[2] == hidden, _OP,
            f"gate_up must be [E, 2I, H={hidden}] (gate rows, then up rows), got {tuple(gate_up.shape)}")
    require(tuple(down.shape) == (num_experts, hidden, inter), _OP,
            f"down must be [E={num_experts}, H={hidden}, I={inter}], got {tuple(down.shape)}")
    require(gate_up.dtype == x.dtype and down.dtype == x.dtype, _OP,
            f"gate_up ({gate_up.dtype}) and down ({down.dtype}) must have x's dtype {x.dtype}")
    require(expert_ids.shape[0] == t and expert_ids.shape[1] >= 1, _OP,
            f"expert_ids must be [T={t}, K>=1], got {tuple(expert_ids.shape)}")
    require(expert_ids.dtype in INDEX_DTYPES, _OP, f"expert_ids must be int32 or int64, got {expert_ids.dtype}")
    require(weights.shape == expert_ids.shape, _OP,
            f"weights must match expert_ids' shape {tuple(expert_ids.shape)}, got {tuple(weights.shape)}")
    require(weights.dtype in (torch.float32, x.dtype), _OP,
            f"weights must be float32 or x's dtype {x.dtype}, got {weights.dtype}")


def moe_experts(x: torch.Tensor, gate_up: torch.Tensor, down: torch.Tensor, weights: torch.Tensor,
                expert_ids: torch.Tensor, activation: str) -> torch.Tensor:
    """Each token's weighted sum of its chosen experts' gated MLPs.

    Args:
        x: ``[T, H]`` float activations.
        gate_up: ``[E, 2I, H]`` of x's dtype: expert ``e``'s merged gate/up projection (gate rows first).
        down: ``[E, H, I]`` of x's dtype: expert ``e``'s down projection.
        weights: ``[T, K]`` float32 or x's dtype: the routing weight of each choice.
        expert_ids: ``[T, K]`` int32 / int64 in ``[0, E)``: the chosen experts (distinct per token, as a
            top-k router gives them; repeats are summed like distinct choices).
        activation: ``"silu"`` (SwiGLU experts) or ``"gelu_tanh"`` (GeGLU).

    Returns:
        ``[T, H]`` in x's dtype: per expert ``e`` chosen by pairs ``(t, k)``,
        ``h = act_and_mul(linear(x[t], gate_up[e]), activation)`` (the projection rounded to x's dtype,
        then the activation and product rounded as :func:`~anna_core.kernels.reference.activations.act_and_mul`
        rounds them), ``y = linear(h, down[e])`` rounded to x's dtype, the term ``y * weights[t, k]``
        computed in float32 and rounded to x's dtype, and the terms added into a zero output in
        ascending expert order, each addition rounded to x's dtype (``index_add_``).

    Raises:
        ValueError: bad shapes or dtypes (:func:`check_moe_experts`), or an expert id outside ``[0, E)``
            (checked here after the host read of the counts).
    """
    check_moe_experts(x, gate_up, down, weights, expert_ids, activation)
    return routed_sum(x, weights, expert_ids, gate_up.shape[0], _OP,
                      lambda e, rows: F.linear(act_and_mul(F.linear(rows, gate_up[e]), activation), down[e]))


def routed_sum(x: torch.Tensor, weights: torch.Tensor, expert_ids: torch.Tensor, num_experts: int, op: str,
               expert: Callable[[int, torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """The routing shared by the ``moe_experts`` references: the ``(token, choice)`` pairs grouped by expert in
    ascending order, ``y = expert(e, x[tokens])`` (``[n, H]`` in x's dtype) per expert with pairs, and the terms
    ``y * weights[t, k]`` (float32, rounded to x's dtype) added into a zero ``[T, H]`` output (``index_add_``).

    Raises:
        ValueError: an expert id outside ``[0, num_experts)`` (after one host read of the counts), named by ``op``.
    """
    out = torch.zeros(x.shape, dtype=x.dtype, device=x.device)
    if x.shape[0] == 0:
        return out
    top_k = expert_ids.shape[1]
    flat = expert_ids.reshape(-1).long()  # [T*K]: pair j is token j // K
    # one host read: bins 1..E count the experts, bin 0 ids below 0, bin E+1 ids of E or more
    counts = torch.bincount(flat.clamp(-1, num_experts) + 1, minlength=num_experts + 2).tolist()
    require(counts[0] == 0 and counts[-1] == 0, op,
            f"expert_ids must lie in [0, E={num_experts}): {counts[0]} below, {counts[-1]} at or above")
    order = torch.argsort(flat, stable=True)
    flat_weights = weights.reshape(-1)
    start = 0
    for e, n in enumerate(counts[1:-1]):
        if n == 0:
            continue
        pairs = order[start:start + n]
        start += n
        tokens = pairs // top_k
        y = expert(e, x[tokens])  # [n, H]
        out.index_add_(0, tokens, (y * flat_weights[pairs, None]).to(out.dtype))
    return out
