"""The affine map of ``nn.Linear``: ``y = x @ weight^T + bias`` (torch's ``F.linear``)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from anna_core.kernels.checks import require


def check_linear(op: str, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
    """Check ``x`` ``[..., K]``, ``weight`` ``[N, K]`` and ``bias`` ``[N]`` or None, all of x's dtype (no sync).

    Raises:
        ValueError: any of the above does not hold.
    """
    require(weight.dim() == 2, op, f"weight must be [N, K], got shape {tuple(weight.shape)}")
    n, k = weight.shape
    require(x.dim() >= 1 and x.shape[-1] == k, op, f"x must be [M, K={k}], got shape {tuple(x.shape)}")
    require(x.dtype == weight.dtype, op, f"x ({x.dtype}) and weight ({weight.dtype}) must share one dtype")
    require(bias is None or tuple(bias.shape) == (n,), op,
            f"bias must be [N={n}] or None, got {None if bias is None else tuple(bias.shape)}")
    require(bias is None or bias.dtype == x.dtype, op, f"bias ({bias.dtype if bias is not None else None}) "
            f"must have x's dtype ({x.dtype})")


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``x @ weight^T + bias`` through ``F.linear`` (cuBLAS / oneDNN / MKL on their devices).

    Args:
        x: ``[M, K]`` (or ``[..., K]``); weight: ``[N, K]``, x's dtype; bias: ``[N]`` or None.

    Returns:
        ``[M, N]`` (or ``[..., N]``) in x's dtype.

    Raises:
        ValueError: shapes or dtypes disagree (see :func:`check_linear`).
    """
    check_linear("linear", x, weight, bias)
    return F.linear(x, weight, bias)


def check_linear_soft_cap(x: torch.Tensor, weight: torch.Tensor, cap: float) -> None:
    """Check the arguments of :func:`linear_soft_cap` (no sync).

    Raises:
        ValueError: ``"linear_soft_cap: ..."`` as :func:`check_linear` (no bias), or ``cap`` not positive.
    """
    check_linear("linear_soft_cap", x, weight, None)
    require(cap > 0, "linear_soft_cap", f"cap must be positive, got {cap}")


def check_linear_soft_cap_argmax(x: torch.Tensor, weight: torch.Tensor, cap: float) -> None:
    """Check the arguments of :func:`linear_soft_cap_argmax` (no sync).

    Raises:
        ValueError: ``"linear_soft_cap_argmax: ..."`` as :func:`check_linear_soft_cap`, or a weight of no rows.
    """
    check_linear("linear_soft_cap_argmax", x, weight, None)
    require(cap > 0, "linear_soft_cap_argmax", f"cap must be positive, got {cap}")
    require(weight.shape[0] > 0, "linear_soft_cap_argmax", "weight must have at least one row (the vocabulary)")


def linear_soft_cap(x: torch.Tensor, weight: torch.Tensor, cap: float) -> torch.Tensor:
    """An LM head with final-logit soft-capping (Gemma 2 / 3 / 4: ``final_logit_softcapping``).

    Args:
        x: ``[M, K]`` (or ``[..., K]``); weight: ``[N, K]`` of x's dtype; cap: the soft cap (a positive Python float).

    Returns:
        ``[..., N]`` float32: ``tanh(float(x @ weight^T) / cap) * cap``, the projection rounded to x's dtype first.

    Raises:
        ValueError: see :func:`check_linear_soft_cap`.
    """
    check_linear_soft_cap(x, weight, cap)
    return torch.tanh(linear(x, weight, None).float() / cap) * cap


def linear_soft_cap_argmax(x: torch.Tensor, weight: torch.Tensor, cap: float) -> torch.Tensor:
    """Greedy sampling's ids from a soft-capped LM head: each row's first largest column of
    :func:`linear_soft_cap`'s logits (``torch.argmax``'s choice among equal values).

    Args:
        x: ``[M, K]`` (or ``[..., K]``); weight: ``[N, K]`` of x's dtype, ``N >= 1``; cap: a positive Python float.

    Returns:
        ``[M]`` (or ``[...]``) int64.

    Raises:
        ValueError: see :func:`check_linear_soft_cap_argmax`.
    """
    check_linear_soft_cap_argmax(x, weight, cap)
    return torch.argmax(linear_soft_cap(x, weight, cap), dim=-1)
