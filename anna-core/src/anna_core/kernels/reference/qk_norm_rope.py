"""An attention layer's pre-processing composed of the unfused references: the per-head RMSNorm of q
and k (Zhang & Sennrich, 2019), rotary embedding (Su et al., "RoFormer", 2021; NeoX ``rotate_half``
halves on the first ``R`` dims) and the paged-cache write of the new keys and values (``qkv_norm_rope_cache``:
the values normalised per head by a weightless RMSNorm first, Gemma 4).

The rotary math is :class:`anna_core.layers.rotary.RotaryEmbedding`'s: angles ``position * inv_freq`` in
float32, both halves rotated in float32 and rounded to the activation dtype once, the dims past ``R`` passed
through. With multi-row positions (M-RoPE, ``[rows, T]``) frequency ``f`` takes its position from row
``rope_axis[f]`` (``anna_core.layers.rotary.mrope_axis_of_frequency`` of the config's ``mrope_section``).
"""

from __future__ import annotations

import torch

from anna_core.kernels.checks import require
from anna_core.kernels.reference.norms import rms_norm
from anna_core.kernels.reference.paged_attention import paged_attention, reshape_and_cache


def check_qk_norm_rope_cache(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_weight: torch.Tensor,
                             k_weight: torch.Tensor, eps: float, zero_centered: bool, positions: torch.Tensor,
                             inv_freq: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                             slot_mapping: torch.Tensor, rope_axis: torch.Tensor | None = None) -> None:
    """Check the arguments of :func:`qk_norm_rope_cache` (shapes only, no device sync).

    Raises:
        ValueError: ``"qk_norm_rope_cache: ..."`` when q is not ``[T, H_q, D]``, k / v not one
            ``[T, H_kv, D]`` shape, a weight not ``[D]``, inv_freq not ``[R/2]`` with ``0 < R <= D``,
            slot_mapping not ``[T]``, positions neither ``[T]`` without ``rope_axis`` nor ``[rows, T]`` with a
            ``[R/2]`` integer ``rope_axis``, or the caches not ``[num_blocks, block_size, H_kv, D]``.
    """
    qk_norm_rope_shapes("qk_norm_rope_cache", q, k, v, q_weight, k_weight, positions, inv_freq, k_cache, v_cache,
                        slot_mapping, rope_axis)


def qk_norm_rope_shapes(op: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_weight: torch.Tensor,
                        k_weight: torch.Tensor, positions: torch.Tensor, inv_freq: torch.Tensor, k_cache: torch.Tensor,
                        v_cache: torch.Tensor, slot_mapping: torch.Tensor, rope_axis: torch.Tensor | None) -> None:
    """The shape checks of :func:`check_qk_norm_rope_cache` with errors named ``op`` (shared by the ops built on
    the same arguments and by kernels that add their own layout checks).

    Raises:
        ValueError: ``"<op>: ..."`` as :func:`check_qk_norm_rope_cache`.
    """
    require(q.dim() == 3 and k.dim() == 3 and k.shape == v.shape, op,
            f"q must be [T, H_q, D] and k, v one [T, H_kv, D] shape, got {tuple(q.shape)}, {tuple(k.shape)}, "
            f"{tuple(v.shape)}")
    total, _, dim = q.shape
    require(k.shape[0] == total and k.shape[2] == dim, op, "q and k must share T and D")
    require(tuple(q_weight.shape) == (dim,) and tuple(k_weight.shape) == (dim,), op, f"weights must be [{dim}]")
    require(inv_freq.dim() == 1 and 0 < 2 * inv_freq.shape[0] <= dim, op, f"inv_freq must be [rotary_dim/2 <= {dim // 2}]")
    require(tuple(slot_mapping.shape) == (total,), op, f"slot_mapping must be [T={total}]")
    if rope_axis is None:
        require(positions.dim() == 1 and positions.shape[0] == total, op,
                f"positions must be [T={total}] (or [rows, T] with rope_axis)")
    else:
        require(positions.dim() == 2 and positions.shape[1] == total, op,
                f"positions must be [rows, T={total}] with rope_axis, got {tuple(positions.shape)}")
        require(tuple(rope_axis.shape) == tuple(inv_freq.shape) and not rope_axis.is_floating_point(), op,
                f"rope_axis must be integer [R/2={inv_freq.shape[0]}], got {tuple(rope_axis.shape)} {rope_axis.dtype}")
    require(tuple(k_cache.shape[2:]) == tuple(k.shape[1:]) and k_cache.shape == v_cache.shape, op,
            f"caches must be [num_blocks, block_size, {k.shape[1]}, {dim}], got {tuple(k_cache.shape)}")


def _cos_sin(positions: torch.Tensor, inv_freq: torch.Tensor,
             rope_axis: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin ``[T, R/2]`` float32 of ``[T]`` positions, or of ``[rows, T]`` ones with each frequency's row."""
    if rope_axis is None:
        pos = positions.to(torch.float32)[:, None]  # [T, 1]
    else:
        pos = positions.to(torch.float32).t().index_select(1, rope_axis.to(device=positions.device, dtype=torch.long))
    angles = pos * inv_freq[None, :]
    return torch.cos(angles), torch.sin(angles)


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x ``[T, N, D]`` rotated on its first ``2 * cos.shape[-1]`` dims (cos, sin ``[T, R/2]`` float32)."""
    half = cos.shape[-1]
    cos, sin = cos[:, None, :], sin[:, None, :]
    x1 = x[..., :half].float()
    x2 = x[..., half : 2 * half].float()
    rot = torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).to(x.dtype)
    if 2 * half == x.shape[-1]:
        return rot
    return torch.cat((rot, x[..., 2 * half :]), dim=-1)


def qk_norm_rope_cache(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_weight: torch.Tensor,
                       k_weight: torch.Tensor, eps: float, zero_centered: bool, positions: torch.Tensor,
                       inv_freq: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                       slot_mapping: torch.Tensor, rope_axis: torch.Tensor | None = None) -> torch.Tensor:
    """Normalise and rotate q and k per head, store k and v into the paged cache; returns the new q.

    Args:
        q: ``[T, H_q, D]``; k, v: ``[T, H_kv, D]``; q_weight, k_weight: ``[D]`` RMSNorm weights;
            eps; zero_centered: weights stored as offsets from 1.
        positions: ``[T]`` int64 token positions, or ``[rows, T]`` (M-RoPE: t / h / w) with ``rope_axis``;
            inv_freq: ``[R/2]`` float32 inverse frequencies.
        k_cache, v_cache: ``[num_blocks, block_size, H_kv, D]`` contiguous, written at ``slot_mapping``
            (``[T]`` int64).
        rope_axis: ``[R/2]`` int64, the position row driving each frequency (multi-row positions only).

    Returns:
        ``[T, H_q, D]`` contiguous in q's dtype: ``rope(rms_norm(q))``.

    Raises:
        ValueError: inconsistent shapes (:func:`check_qk_norm_rope_cache`, and ``reshape_and_cache``'s).
    """
    check_qk_norm_rope_cache(q, k, v, q_weight, k_weight, eps, zero_centered, positions, inv_freq, k_cache, v_cache,
                             slot_mapping, rope_axis)
    cos, sin = _cos_sin(positions, inv_freq.to(device=q.device, dtype=torch.float32), rope_axis)
    q = _rope(rms_norm(q, q_weight, eps, zero_centered), cos, sin)
    k = _rope(rms_norm(k, k_weight, eps, zero_centered), cos, sin)
    reshape_and_cache(k, v, k_cache, v_cache, slot_mapping)
    return q.contiguous()


def check_qkv_norm_rope_cache(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_weight: torch.Tensor,
                              k_weight: torch.Tensor, eps: float, zero_centered: bool, positions: torch.Tensor,
                              inv_freq: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                              slot_mapping: torch.Tensor) -> None:
    """Check the arguments of :func:`qkv_norm_rope_cache`: those of :func:`check_qk_norm_rope_cache` with 1-D
    positions (no ``rope_axis``).

    Raises:
        ValueError: as :func:`check_qk_norm_rope_cache`.
    """
    check_qk_norm_rope_cache(q, k, v, q_weight, k_weight, eps, zero_centered, positions, inv_freq, k_cache, v_cache,
                             slot_mapping)

def qkv_norm_rope_cache(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_weight: torch.Tensor,
                        k_weight: torch.Tensor, eps: float, zero_centered: bool, positions: torch.Tensor,
                        inv_freq: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                        slot_mapping: torch.Tensor) -> torch.Tensor:
    """:func:`qk_norm_rope_cache` with the values normalised per head first by an RMSNorm without weight
    (Gemma 4's value norm): ``v = rms_norm(v, ones, eps, False)`` (float32, rounded to v's dtype), then
    ``qk_norm_rope_cache`` of the same arguments. Returns the new q ``[T, H_q, D]``; writes the caches.

    Raises:
        ValueError: inconsistent shapes (:func:`check_qk_norm_rope_cache`).
    """
    check_qk_norm_rope_cache(q, k, v, q_weight, k_weight, eps, zero_centered, positions, inv_freq, k_cache, v_cache,
                             slot_mapping)
    v = rms_norm(v, torch.ones(v.shape[-1], dtype=v.dtype, device=v.device), eps, False)
    return qk_norm_rope_cache(q, k, v, q_weight, k_weight, eps, zero_centered, positions, inv_freq, k_cache, v_cache,
                              slot_mapping)


def q_norm_rope(q: torch.Tensor, weight: torch.Tensor, eps: float, zero_centered: bool, positions: torch.Tensor,
                inv_freq: torch.Tensor) -> torch.Tensor:
    """:func:`qk_norm_rope_cache`'s query path alone (no K/V, no cache).

    Args:
        q: ``[T, H, D]``; weight: ``[D]``; eps, zero_centered: the norm's; positions: ``[T]`` int64;
            inv_freq: ``[R/2]`` float32 (``0 < R <= D``).

    Returns:
        ``[T, H, D]`` contiguous in q's dtype: ``rope(rms_norm(q))``.

    Raises:
        ValueError: q not ``[T, H, D]``, weight not ``[D]``, inv_freq or positions of the wrong shape.
    """
    op = "q_norm_rope"
    require(q.dim() == 3, op, f"q must be [T, H, D], got {tuple(q.shape)}")
    total, _, dim = q.shape
    require(tuple(weight.shape) == (dim,), op, f"weight must be [{dim}]")
    require(inv_freq.dim() == 1 and 0 < 2 * inv_freq.shape[0] <= dim, op, f"inv_freq must be [rotary_dim/2 <= {dim // 2}]")
    require(positions.dim() == 1 and positions.shape[0] == total, op, f"positions must be [T={total}]")
    angles = positions.to(torch.float32)[:, None] * inv_freq.to(device=q.device, dtype=torch.float32)[None, :]
    return _rope(rms_norm(q, weight, eps, zero_centered), torch.cos(angles), torch.sin(angles)).contiguous()


def q_norm_rope_attention(q: torch.Tensor, weight: torch.Tensor, eps: float, zero_centered: bool,
                          positions: torch.Tensor, inv_freq: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                          cu_seqlens_q: torch.Tensor, seq_lens: torch.Tensor, block_tables: torch.Tensor, scale: float,
                          sliding_window: int | None) -> torch.Tensor:
    """Attention of the normalised, rotated queries over a cache the layer does not write (a KV-shared layer):
    ``paged_attention(q_norm_rope(q, weight, eps, zero_centered, positions, inv_freq), k_cache, v_cache,
    cu_seqlens_q, seq_lens, block_tables, scale, sliding_window)``.

    Args:
        q: ``[T, H_q, D]`` raw queries (unit stride along D); weight ``[D]``; eps, zero_centered: the q norm's;
            positions ``[T]`` int64; inv_freq ``[R/2]`` float32; the rest as ``paged_attention``.

    Returns:
        ``[T, H_q, D]`` in q's dtype.

    Raises:
        ValueError: as :func:`q_norm_rope` and ``paged_attention``.
    """
    return paged_attention(q_norm_rope(q, weight, eps, zero_centered, positions, inv_freq), k_cache, v_cache,
                           cu_seqlens_q, seq_lens, block_tables, scale, sliding_window)


def qk_norm_rope_cache_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_weight: torch.Tensor,
                                 k_weight: torch.Tensor, eps: float, zero_centered: bool, positions: torch.Tensor,
                                 inv_freq: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                                 slot_mapping: torch.Tensor, cu_seqlens_q: torch.Tensor, seq_lens: torch.Tensor,
                                 block_tables: torch.Tensor, scale: float, sliding_window: int | None) -> torch.Tensor:
    """An attention layer with q and k norms (no value norm) from its projections to its attention output:
    ``qk_norm_rope_cache(q, k, v, ...)`` (writes the new keys and values), then ``paged_attention`` of the new q.

    Args:
        q, k, v, q_weight, k_weight, eps, zero_centered, positions, inv_freq, k_cache, v_cache, slot_mapping: as
            :func:`qk_norm_rope_cache` (positions ``[T]`` int64: one row); cu_seqlens_q, seq_lens, block_tables,
            scale, sliding_window: as ``paged_attention``.

    Returns:
        ``[T, H_q, D]`` in q's dtype.

    Raises:
        ValueError: as :func:`qk_norm_rope_cache` (positions of more than one row too) and ``paged_attention``.
    """
    q = qk_norm_rope_cache(q, k, v, q_weight, k_weight, eps, zero_centered, positions, inv_freq, k_cache, v_cache,
                           slot_mapping)
    return paged_attention(q, k_cache, v_cache, cu_seqlens_q, seq_lens, block_tables, scale, sliding_window)


def qkv_norm_rope_cache_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_weight: torch.Tensor,
                                  k_weight: torch.Tensor, eps: float, zero_centered: bool, positions: torch.Tensor,
                                  inv_freq: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                                  slot_mapping: torch.Tensor, cu_seqlens_q: torch.Tensor, seq_lens: torch.Tensor,
                                  block_tables: torch.Tensor, scale: float, sliding_window: int | None) -> torch.Tensor:
    """An attention layer with q, k and v norms (Gemma 4) from its projections to its attention output:
    ``qkv_norm_rope_cache(q, k, v, ...)`` (writes the new keys and values), then ``paged_attention`` of the new q.

    Args:
        q, k, v, q_weight, k_weight, eps, zero_centered, positions, inv_freq, k_cache, v_cache, slot_mapping: as
            :func:`qkv_norm_rope_cache`; cu_seqlens_q, seq_lens, block_tables, scale, sliding_window: as
            ``paged_attention``.

    Returns:
        ``[T, H_q, D]`` in q's dtype.

    Raises:
        ValueError: as :func:`qkv_norm_rope_cache` and ``paged_attention``.
    """
    q = qkv_norm_rope_cache(q, k, v, q_weight, k_weight, eps, zero_centered, positions, inv_freq, k_cache, v_cache,
                            slot_mapping)
    return paged_attention(q, k_cache, v_cache, cu_seqlens_q, seq_lens, block_tables, scale, sliding_window)
