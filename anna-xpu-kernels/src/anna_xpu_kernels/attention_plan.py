"""How a paged-attention kernel's grid covers a batch: GQA tiles, their numbering on the device, key splits and the
split workspace. Shared by :mod:`anna_xpu_kernels.paged_attention` and :mod:`anna_xpu_kernels.turboquant` (their
kernels read the same tile and split layout: that module's docstring describes it).

Nothing here reads a tensor's values on the host, so a launch planned here can be captured in a CUDA graph.
"""

from __future__ import annotations

import math

import attrs
import torch

from anna_xpu_kernels._triton import next_pow2, triton

MIN_KEYS_PER_SPLIT = 16
MAX_SPLITS = 64


def default_num_splits(device: torch.device, programs: int, max_keys: int) -> int:
    """Key partitions so that ``programs * splits`` covers about two waves of the GPU's multiprocessors
    (a power of two, at most :data:`MAX_SPLITS`, and no more than ``max_keys / 16``); 1 off a GPU."""
    if device.type == "cuda":
        sms = torch.cuda.get_device_properties(device).multi_processor_count
    elif device.type == "xpu":
        sms = getattr(torch.xpu.get_device_properties(device), "gpu_subslice_count", 64)
    else:
        return 1
    if programs >= sms:
        return 1
    want = min(math.ceil(2 * sms / programs), math.ceil(max_keys / MIN_KEYS_PER_SPLIT), MAX_SPLITS)
    return max(1, min(next_pow2(want), MAX_SPLITS))


@attrs.frozen
class AttentionPlan:
    """One launch's grid ``(n_tiles, H_kv, splits)`` and what its kernel reads to find its work.

    Attributes:
        batch, total: sequences and query rows (``T``).
        group: query heads per KV head (``H_q / H_kv``).
        decode: one query per sequence (tile ``i`` is sequence ``i``; ``tile_seq`` / ``tile_first`` unused).
        block_d: the head dim padded to a power of two (at least 16).
        block_q, block_m: queries per tile and the tile's rows (``block_q * group`` padded to a power of two,
            at least 16).
        n_tiles: a host-known upper bound of the tiles (idle ones find ``tile_seq >= batch``).
        cu: ``[B + 1]`` int32 query row offsets; tile_seq, tile_first: int32 ``[n_tiles]`` owning sequence of each
            tile and ``[B]`` first tile of each sequence (prefill only).
        splits: key partitions per tile (1: none, no workspace or merge).
    """

    batch: int
    total: int
    group: int
    decode: bool
    block_d: int
    block_q: int
    block_m: int
    n_tiles: int
    cu: torch.Tensor
    tile_seq: torch.Tensor
    tile_first: torch.Tensor
    splits: int

    def workspace(self, h_q: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
        """The split workspace ``(m, l, acc)``: float32 ``[splits, T, H_q]`` twice and ``[splits, T, H_q,
        block_d]`` (running max, sum and unnormalised output of every split), or None without splits."""
        if self.splits == 1:
            return None
        m_ws = torch.empty((self.splits, self.total, h_q), dtype=torch.float32, device=device)
        acc_ws = torch.empty((self.splits, self.total, h_q, self.block_d), dtype=torch.float32, device=device)
        return m_ws, torch.empty_like(m_ws), acc_ws


def plan_attention(cu_seqlens_q: torch.Tensor, batch: int, total: int, h_q: int, h_kv: int, head_dim: int,
                   max_keys: int, rows: int, num_splits: int | None, split_cap: int | None = None) -> AttentionPlan:
    """Plan a launch over ``batch`` sequences of ``total`` query rows.

    Args:
        cu_seqlens_q: ``[B + 1]`` query row offsets (any integer dtype; int32 is used as is).
        head_dim: the head dim (padded here); max_keys: the block table's width in keys (``max_blocks * block_size``).
        rows: query rows per prefill tile (``block_q = rows / group``; a decode tile holds one query).
        num_splits: key partitions per tile, or None: :func:`default_num_splits` for the device; clamped to
            ``[1, min(max_keys / 16, MAX_SPLITS)]``.
        split_cap: with ``num_splits`` None, at most this many (e.g. a merge inside the attention launch, whose
            serial cost grows with the split count); None: no cap.
    """
    group = h_q // h_kv
    decode = total == batch
    block_d = max(16, next_pow2(head_dim))
    block_q = 1 if decode else max(1, rows // group)
    block_m = max(16, next_pow2(block_q * group))
    block_q = block_m // group
    cu = cu_seqlens_q if cu_seqlens_q.dtype == torch.int32 else cu_seqlens_q.to(torch.int32)
    if decode:
        n_tiles = batch
        tile_seq = tile_first = cu
    else:
        tiles = (cu[1:] - cu[:-1] + block_q - 1) // block_q
        tile_end = torch.cumsum(tiles, 0, dtype=torch.int32)
        tile_first = tile_end - tiles
        # each sequence has >= 1 query and each tile >= 1 query
        n_tiles = min(total, (total - min(batch, total)) // block_q + min(batch, total))
        tile_seq = torch.searchsorted(tile_end, torch.arange(n_tiles, device=cu.device, dtype=torch.int32),
                                      right=True).to(torch.int32)
    splits = num_splits or min(default_num_splits(cu.device, n_tiles * h_kv, max_keys), split_cap or MAX_SPLITS)
    splits = max(1, min(splits, triton.cdiv(max(max_keys, 1), MIN_KEYS_PER_SPLIT), MAX_SPLITS))
    return AttentionPlan(batch=batch, total=total, group=group, decode=decode, block_d=block_d, block_q=block_q,
                         block_m=block_m, n_tiles=n_tiles, cu=cu, tile_seq=tile_seq, tile_first=tile_first,
                         splits=splits)
