"""The router of a mixture-of-experts block after its gate projection: which ``K`` of ``E`` experts serve
each token, and with what weight.

Per token row of logits ``[E]``::

    p = softmax(logits) in float32
    (p_1 >= ... >= p_K), (e_1, ..., e_K) = the K largest of p (equal values: the lower expert index first)
    w_k = p_k / (p_1 + ... + p_K)                        float32
    w_k = w_k * float32(expert_scale[e_k])               only with an expert_scale (Gemma 4)
    weights = w rounded to weights_dtype; expert_ids = e (int64)

This is, rounding included, what transformers' ``Qwen3_5MoeTopKRouter`` (weights in the logits' dtype)
and ``Gemma4TextRouter`` (times ``per_expert_scale``, float32 weights) compute, and what both families
ran before the op. The only difference is the choice among equal probabilities, which ``torch.topk``
leaves unspecified (on the CPU it does not take the lower index): here the ranking key of expert ``e`` is
``(bits(p_e), E - 1 - e)`` packed into one int64, which orders as ``(p_e, -e)`` because the bit patterns
of non-negative floats order as their values. ``topk`` on the keys is then exact and unique, and the
chosen probabilities are exactly ``torch.topk``'s values. It costs a few small ops more than the former
routers' ``topk`` (one CPU thread, E = 256, K = 8: about 20 us more per call at one token, about the same
at 2048).

The reference neither reads anything on the host nor shapes anything by the values, so a step using it
can be captured as a graph.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from anna_core.kernels.checks import require, require_dims

_OP = "moe_route"


def check_moe_route(logits: torch.Tensor, top_k: int, expert_scale: torch.Tensor | None,
                    weights_dtype: torch.dtype) -> None:
    """Check the arguments of :func:`moe_route` (shapes and dtypes only, no device sync).

    Raises:
        ValueError: ``"moe_route: ..."`` unless logits is a floating-point ``[T, E]`` with ``E >= 1``;
            top_k an int in ``[1, E]``; expert_scale None or a floating-point ``[E]``; weights_dtype
            ``torch.float32`` or logits' dtype.
    """
    require_dims(_OP, logits=(logits, 2))
    require(logits.is_floating_point(), _OP, f"logits must be a float tensor, got {logits.dtype}")
    num_experts = logits.shape[1]
    require(num_experts >= 1, _OP, f"logits must be [T, E] with E >= 1, got {tuple(logits.shape)}")
    require(isinstance(top_k, int) and not isinstance(top_k, bool) and 1 <= top_k <= num_experts, _OP,
            f"top_k must be an int in [1, E={num_experts}], got {top_k!r}")
    if expert_scale is not None:
        require(tuple(expert_scale.shape) == (num_experts,) and expert_scale.is_floating_point(), _OP,
                f"expert_scale must be a float [E={num_experts}] or None, got {tuple(expert_scale.shape)} "
                f"{expert_scale.dtype}")
    require(weights_dtype in (torch.float32, logits.dtype), _OP,
            f"weights_dtype must be torch.float32 or logits' dtype {logits.dtype}, got {weights_dtype!r}")


def top_k_lowest_index(probs: torch.Tensor, top_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``top_k`` largest entries of each row, equal values in ascending index order.

    Args:
        probs: ``[T, E]`` float32, every entry non-negative (or NaN: a NaN of the sign bit 0 ranks above
            every number, as in ``torch.topk``; one of sign bit 1 below them).
        top_k: ``K`` in ``[1, E]``.

    Returns:
        ``(values [T, K] float32 descending, ids [T, K] int64)``: values are exactly ``torch.topk(probs,
        K).values``; among equal values (also at the ``K``-th place) the lower index comes first.
    """
    num_experts = probs.shape[-1]
    rank_of_index = torch.arange(num_experts - 1, -1, -1, device=probs.device)  # E-1-e: lower index ranks higher
    keys = (probs.view(torch.int32).to(torch.int64) << 32) | rank_of_index
    ids = (num_experts - 1) - (torch.topk(keys, top_k, dim=-1).values & 0xFFFFFFFF)
    return probs.gather(-1, ids), ids


def moe_route(logits: torch.Tensor, top_k: int, expert_scale: torch.Tensor | None,
              weights_dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-``K`` softmax routing, renormalised, optionally scaled per expert (see the module docstring).

    Args:
        logits: ``[T, E]`` router logits, any float dtype and strides.
        top_k: experts per token ``K`` (``1 <= K <= E``).
        expert_scale: ``[E]`` any float dtype (taken in float32), or None.
        weights_dtype: ``torch.float32`` or logits' dtype.

    Returns:
        ``(weights [T, K] weights_dtype, expert_ids [T, K] int64)``, the experts in descending probability
        (equal probabilities: the lower index first). Rows with a NaN probability (a NaN or +inf logit, or
        every logit -inf) get NaN weights and unspecified ids.

    Raises:
        ValueError: bad shapes, dtypes or ``top_k`` (:func:`check_moe_route`).
    """
    check_moe_route(logits, top_k, expert_scale, weights_dtype)
    probs = F.softmax(logits, dim=-1, dtype=torch.float32)  # [T, E]
    weights, expert_ids = top_k_lowest_index(probs, top_k)
    weights = weights / weights.sum(dim=-1, keepdim=True)
    if expert_scale is not None:
        weights = weights * expert_scale[expert_ids].to(torch.float32)
    return weights.to(weights_dtype), expert_ids
