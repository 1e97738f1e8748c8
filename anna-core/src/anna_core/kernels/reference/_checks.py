"""Argument checks shared by the reference kernels (raise ``ValueError`` with a clear message)."""

from __future__ import annotations

import torch


def require(cond: bool, op: str, message: str) -> None:
    """Raise ``ValueError("<op>: <message>")`` unless ``cond`` holds."""
    if not cond:
        raise ValueError(f"{op}: {message}")


def require_dims(op: str, **tensors: tuple[torch.Tensor, int]) -> None:
    """Check each named tensor has the given number of dimensions."""
    for name, (tensor, ndim) in tensors.items():
        require(tensor.dim() == ndim, op, f"{name} must have {ndim} dims, got shape {tuple(tensor.shape)}")


def sequence_lengths(op: str, cu_seqlens: torch.Tensor, total: int) -> list[int]:
    """Host list of per-sequence lengths from ``cu_seqlens`` ``[B+1]``, validated against ``total`` rows.

    Raises:
        ValueError: ``cu_seqlens`` is not 1-D, does not start at 0, decreases, or does not end at ``total``.
    """
    require(cu_seqlens.dim() == 1 and cu_seqlens.numel() >= 1, op,
            f"cu_seqlens must be 1-D [B+1], got shape {tuple(cu_seqlens.shape)}")
    cu = cu_seqlens.tolist()
    require(cu[0] == 0 and cu[-1] == total, op,
            f"cu_seqlens must start at 0 and end at the token count {total}, got {cu[0]}..{cu[-1]}")
    lens = [b - a for a, b in zip(cu[:-1], cu[1:])]
    require(all(n >= 0 for n in lens), op, "cu_seqlens must be non-decreasing")
    return lens


def check_slots(op: str, slots: torch.Tensor, batch: int, pool_size: int, *, host_check: bool) -> None:
    """Check ``slots`` is ``[batch]``; with ``host_check`` also that indices are distinct and in the pool."""
    require(slots.dim() == 1 and slots.shape[0] == batch, op,
            f"slots must be [B]={batch}, got shape {tuple(slots.shape)}")
    if host_check and batch:
        values = slots.tolist()
        require(len(set(values)) == len(values), op, f"slots must be distinct, got {values}")
        require(min(values) >= 0 and max(values) < pool_size, op,
                f"slots must lie in [0, {pool_size}), got {values}")
