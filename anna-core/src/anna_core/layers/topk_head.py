"""The LM head's top ``k`` logits through the ``lm_head_topk`` op, for a dense or a quantized head (what a model's
``compute_topk`` calls; :attr:`~anna_core.model.ModelCapabilities.topk_head`)."""

from __future__ import annotations

from typing import Any

import torch

from anna_core.layers.wq_linear import WQLinear


def head_topk(ops: Any, hidden: torch.Tensor, head: torch.Tensor | WQLinear, k: int,
              softcap: float | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``lm_head_topk`` of ``hidden`` ``[N, H]`` over ``head``: a dense ``[V, H]`` weight of hidden's dtype (an
    ``lm_head.weight``, or the tied embedding's) or a bias-free :class:`WQLinear` (``--lm-head-quant``, or a
    pre-quantized head; an act-order head's ``perm`` gathers ``hidden``'s columns first).

    Returns:
        ``(values [N, k] float32, indices [N, k] int64, logsumexp [N] float32)`` (the op's contract).

    Raises:
        ValueError: the op's argument checks (e.g. ``k`` above 64 or the vocabulary).
    """
    if isinstance(head, WQLinear):
        if head.bias is not None:
            raise ValueError("lm_head_topk: an LM head with a bias is not supported")
        if head.perm is not None:  # act-order GPTQ: the weight's columns are stored in ``perm``'s order
            hidden = hidden.index_select(-1, head.perm)
        op = ops.get("lm_head_topk", scheme=head.scheme)
        return op(hidden, head.qweight, head.scale, head.zero, head.scheme, k, softcap)
    return ops.get("lm_head_topk", scheme="none")(hidden, head, None, None, "none", k, softcap)
