"""Argument checks for kernel ops, shared by the torch references and kernel plugins.

Every check raises ``ValueError("<op>: <message>")`` naming the offending argument and its shape;
``op`` is the name of the kernel op (see :mod:`anna_core.kernels.ops` for the contracts checked
here). Checks that would read tensor values (a device-to-host sync) are opt-in or separate:
:func:`num_sequences` only looks at shapes, :func:`sequence_lengths` reads ``cu_seqlens``.

Kernel plugins (for instance ``anna-xpu-kernels``) call these so a bad argument gets the same
error from every implementation of an op.
"""

from __future__ import annotations

import torch

CONV_ACTIVATIONS = (None, "silu")
"""Activations the causal conv1d ops accept."""

GATED_ACTIVATIONS = ("silu", "gelu_tanh")
"""Activations of the gated MLP ops (``act_mul_linear``, ``linear_act_mul``, ``add_rms_norm_linear_act_mul``):
``"silu"`` (SwiGLU: ``silu(gate) * up``) and ``"gelu_tanh"`` (GeGLU with torch's
``gelu(approximate="tanh")``, as Gemma's MLP)."""


def require(cond: bool, op: str, message: str) -> None:
    """Raise ``ValueError("<op>: <message>")`` unless ``cond`` holds."""
    if not cond:
        raise ValueError(f"{op}: {message}")


def check_gated_activation(op: str, activation: str) -> None:
    """Check ``activation`` is one of :data:`GATED_ACTIVATIONS`.

    Raises:
        ValueError: another value.
    """
    require(activation in GATED_ACTIVATIONS, op, f"activation must be one of {GATED_ACTIVATIONS}, got {activation!r}")


def require_dims(op: str, **tensors: tuple[torch.Tensor, int]) -> None:
    """Check each named tensor, given as ``name=(tensor, ndim)``, has ``ndim`` dimensions."""
    for name, (tensor, ndim) in tensors.items():
        if tensor.dim() != ndim:  # the message is built only on failure (decode calls this per layer)
            raise ValueError(f"{op}: {name} must have {ndim} dims, got shape {tuple(tensor.shape)}")


def num_sequences(op: str, cu_seqlens: torch.Tensor, name: str = "cu_seqlens") -> int:
    """``B`` for a ``[B+1]`` offsets tensor, from its shape only (no device sync).

    Raises:
        ValueError: ``cu_seqlens`` is not 1-D with at least one entry.
    """
    require(cu_seqlens.dim() == 1 and cu_seqlens.shape[0] >= 1, op,
            f"{name} must be 1-D [B+1], got shape {tuple(cu_seqlens.shape)}")
    return cu_seqlens.shape[0] - 1


def sequence_lengths(op: str, cu_seqlens: torch.Tensor, total: int, name: str = "cu_seqlens") -> list[int]:
    """Host list of per-sequence lengths from ``cu_seqlens`` ``[B+1]``, validated against ``total`` rows.

    Reads ``cu_seqlens`` on the host (a device sync on accelerators).

    Raises:
        ValueError: ``cu_seqlens`` is not 1-D, does not start at 0, decreases, or does not end at ``total``.
    """
    num_sequences(op, cu_seqlens, name)
    cu = cu_seqlens.tolist()
    require(cu[0] == 0 and cu[-1] == total, op,
            f"{name} must start at 0 and end at the token count {total}, got {cu[0]}..{cu[-1]}")
    lens = [b - a for a, b in zip(cu[:-1], cu[1:])]
    require(all(n >= 0 for n in lens), op, f"{name} must be non-decreasing")
    return lens


def check_slots(op: str, slots: torch.Tensor, batch: int, pool_size: int, *, host_check: bool) -> None:
    """Check ``slots`` is ``[batch]``; with ``host_check`` also (device sync) that indices are distinct
    and lie in ``[0, pool_size)``."""
    require(slots.dim() == 1 and slots.shape[0] == batch, op,
            f"slots must be [B]={batch}, got shape {tuple(slots.shape)}")
    if host_check and batch:
        values = slots.tolist()
        require(len(set(values)) == len(values), op, f"slots must be distinct, got {values}")
        require(min(values) >= 0 and max(values) < pool_size, op,
                f"slots must lie in [0, {pool_size}), got {values}")


def check_conv1d(op: str, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                 conv_states: torch.Tensor, activation: str | None) -> int:
    """Check the causal conv1d arguments against ``x`` ``[N, C]`` (already checked 2-D); returns ``W``.

    Raises:
        ValueError: ``weight`` is not ``[C, W >= 1]``, ``bias`` not ``[C]`` or None, ``conv_states``
            not ``[S, C, W-1]``, or ``activation`` not in :data:`CONV_ACTIVATIONS`.
    """
    channels = x.shape[1]
    require(weight.dim() == 2 and weight.shape[0] == channels and weight.shape[1] >= 1, op,
            f"weight must be [C={channels}, W], got {tuple(weight.shape)}")
    width = weight.shape[1]
    require(bias is None or tuple(bias.shape) == (channels,), op,
            f"bias must be [C={channels}] or None, got {None if bias is None else tuple(bias.shape)}")
    require(conv_states.dim() == 3 and tuple(conv_states.shape[1:]) == (channels, width - 1), op,
            f"conv_states must be [S, {channels}, {width - 1}], got {tuple(conv_states.shape)}")
    require(activation in CONV_ACTIVATIONS, op, f"activation must be one of {CONV_ACTIVATIONS}, got {activation!r}")
    return width


def check_gated_delta_rule(op: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
                           beta: torch.Tensor, states: torch.Tensor) -> tuple[int, int]:
    """Check the gated delta rule arguments; returns ``(H_k, H_v // H_k)``.

    Expects q, k ``[N, H_k, K]``, v ``[N, H_v, V]``, g and beta ``[N, H_v]``, states
    ``[S, H_v, K, V]`` float32 (dims of q, k, v already checked).

    Raises:
        ValueError: any shape disagrees, ``H_v`` is not a positive multiple of ``H_k``, or states
            are not float32.
    """
    require(q.shape == k.shape, op, f"q and k must have the same shape, got {tuple(q.shape)} and {tuple(k.shape)}")
    n, h_k, d_k = q.shape
    h_v, d_v = v.shape[1], v.shape[2]
    require(v.shape[0] == n, op, f"v has {v.shape[0]} rows, q has {n}")
    require(h_k > 0 and h_v % h_k == 0, op, f"H_v={h_v} must be a positive multiple of H_k={h_k}")
    require(tuple(g.shape) == (n, h_v), op, f"g must be [{n}, {h_v}], got {tuple(g.shape)}")
    require(tuple(beta.shape) == (n, h_v), op, f"beta must be [{n}, {h_v}], got {tuple(beta.shape)}")
    check_recurrent_states(op, states, h_v, d_k, d_v)
    return h_k, h_v // h_k


def check_recurrent_states(op: str, states: torch.Tensor, h_v: int, d_k: int, d_v: int) -> None:
    """Check a gated delta rule state pool: ``[S, H_v, K, V]`` float32.

    Raises:
        ValueError: another shape or dtype.
    """
    require(states.dim() == 4 and tuple(states.shape[1:]) == (h_v, d_k, d_v) and states.dtype == torch.float32, op,
            f"states must be float32 [S, {h_v}, {d_k}, {d_v}], got {tuple(states.shape)} {states.dtype}")


def check_paged_attention(op: str, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                          seq_lens: torch.Tensor, block_tables: torch.Tensor, sliding_window: int | None,
                          batch: int) -> None:
    """Check paged attention arguments (dims already checked) for ``batch`` sequences.

    Raises:
        ValueError: the caches differ in shape, q's head dim differs from the cache's, ``H_q`` is not a
            multiple of ``H_kv``, the window is below 1, or seq_lens / block_tables lack ``batch`` rows.
    """
    h_kv, dim = k_cache.shape[2], k_cache.shape[3]
    h_q = q.shape[1]
    if (k_cache.shape == v_cache.shape and q.shape[2] == dim and h_q % h_kv == 0
            and (sliding_window is None or sliding_window >= 1) and seq_lens.shape[0] == batch
            and block_tables.shape[0] == batch):
        return  # the messages below are built only on failure (decode calls this once per layer)
    require(k_cache.shape == v_cache.shape, op, "k_cache and v_cache must have the same shape")
    require(q.shape[2] == dim, op, f"q head dim {q.shape[2]} differs from the cache's {dim}")
    require(h_q % h_kv == 0, op, f"H_q={h_q} must be a multiple of H_kv={h_kv}")
    require(sliding_window is None or sliding_window >= 1, op, f"sliding_window must be >= 1, got {sliding_window}")
    require(seq_lens.shape[0] == batch and block_tables.shape[0] == batch, op,
            f"seq_lens {tuple(seq_lens.shape)} and block_tables {tuple(block_tables.shape)} must have B={batch} rows")
