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


def check_turboquant_tables(op: str, head_dim: int, rotation: torch.Tensor, qjl: torch.Tensor,
                            key_centroids: torch.Tensor, value_centroids: torch.Tensor) -> tuple[int, int]:
    """Check a TurboQuant group's tables for heads of ``head_dim``; returns ``(key_bits, value_bits)`` (the
    keys' code bits, the QJL sign not counted). Keys have the QJL stage when they have half the values' centroids
    (:func:`keys_have_qjl`), else they are quantized as values.

    Raises:
        ValueError: rotation or qjl not float32 ``[D, D]``, centroid counts that are not ``2 ** (bits - 1)`` (or
            ``2 ** bits``) / ``2 ** bits`` for a bits of 2, 3 or 4, or a head dim that is not a multiple of 8.
    """
    require(head_dim % 8 == 0 and head_dim >= 8, op, f"head dim must be a multiple of 8, got {head_dim}")
    for name, t in (("rotation", rotation), ("qjl", qjl)):
        require(t.dtype == torch.float32 and tuple(t.shape) == (head_dim, head_dim), op,
                f"{name} must be float32 [{head_dim}, {head_dim}], got {t.dtype} {tuple(t.shape)}")
    n_k, n_v = key_centroids.numel(), value_centroids.numel()
    require(key_centroids.dtype == value_centroids.dtype == torch.float32, op, "centroids must be float32")
    require(n_v in (4, 8, 16) and n_k in (n_v, n_v // 2), op,
            f"value_centroids must have 4, 8 or 16 entries and key_centroids as many or half, got {n_v} and {n_k}")
    return n_k.bit_length() - 1, n_v.bit_length() - 1


def keys_have_qjl(key_bits: int, value_bits: int) -> bool:
    """Whether keys of ``key_bits`` code bits beside values of ``value_bits`` carry the QJL stage (one bit fewer)."""
    return key_bits < value_bits


def turboquant_row_bytes(head_dim: int, key_bits: int, value_bits: int) -> tuple[int, int]:
    """``(key_row_bytes, value_row_bytes)`` of the layout in :mod:`anna_core.kv_quant.layout`."""
    pad = lambda n: -(-n // 4) * 4  # noqa: E731
    value = pad(4 + value_bits * head_dim // 8)
    return (pad(8 + (key_bits + 1) * head_dim // 8) if keys_have_qjl(key_bits, value_bits) else value), value


def check_turboquant_caches(op: str, k_cache: torch.Tensor, v_cache: torch.Tensor, head_dim: int, key_bits: int,
                            value_bits: int) -> None:
    """Check quantized caches: ``uint8`` ``[N, block_size, H_kv, row_bytes]`` of one block geometry, contiguous,
    rows as wide as the layout says.

    Raises:
        ValueError: another dtype, dims, geometry or row width, or a non-contiguous cache.
    """
    require(k_cache.dim() == 4 and v_cache.dim() == 4, op, "k_cache and v_cache must have 4 dims")
    require(k_cache.dtype == v_cache.dtype == torch.uint8, op,
            f"quantized caches must be uint8, got {k_cache.dtype} and {v_cache.dtype}")
    require(k_cache.shape[:3] == v_cache.shape[:3], op, "k_cache and v_cache must have the same blocks and heads")
    kb, vb = turboquant_row_bytes(head_dim, key_bits, value_bits)
    require(k_cache.shape[3] == kb and v_cache.shape[3] == vb, op,
            f"rows of {kb} (keys) and {vb} (values) bytes expected at head dim {head_dim}, got "
            f"{k_cache.shape[3]} and {v_cache.shape[3]}")
    require(k_cache.is_contiguous() and v_cache.is_contiguous(), op, "caches must be contiguous")


def check_turboquant_write(op: str, k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                           slot_mapping: torch.Tensor, rotation: torch.Tensor, qjl: torch.Tensor,
                           key_centroids: torch.Tensor, value_centroids: torch.Tensor) -> tuple[int, int, int, int, int]:
    """The arguments of ``turboquant_cache_write`` (every implementation's): ``k`` / ``v`` ``[T, H_kv, D]`` alike,
    the tables (:func:`check_turboquant_tables`), the caches (:func:`check_turboquant_caches`) with ``H_kv`` heads,
    ``slot_mapping`` ``[T]``.

    Returns:
        ``(T, H_kv, D, key_bits, value_bits)``.

    Raises:
        ValueError: any of those checks.
    """
    require_dims(op, k=(k, 3), v=(v, 3), slot_mapping=(slot_mapping, 1))
    require(k.shape == v.shape, op, f"k and v must match, got {tuple(k.shape)} and {tuple(v.shape)}")
    t, h, d = k.shape
    kbits, vbits = check_turboquant_tables(op, d, rotation, qjl, key_centroids, value_centroids)
    check_turboquant_caches(op, k_cache, v_cache, d, kbits, vbits)
    require(k_cache.shape[2] == h, op, f"cache has {k_cache.shape[2]} heads, k has {h}")
    require(slot_mapping.shape[0] == t, op, f"slot_mapping has {slot_mapping.shape[0]} entries for {t} tokens")
    return t, h, d, kbits, vbits
