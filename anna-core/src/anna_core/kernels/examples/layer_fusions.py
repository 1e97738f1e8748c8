"""The sample inputs of the fused layer ops: attention pre-processing (with M-RoPE rows and ``k_eq_v``), with
its attention, and the gated DeltaNet decode and prefill from their projections."""

from __future__ import annotations

from typing import Any

import torch

from anna_core.kernels.contracts import OpExample
from anna_core.kernels.examples.attention import paged_batch
from anna_core.kernels.examples.sample_gen import EPS, SampleGen, as_dtype


def qk_norm_rope_cache(device: Any, dtype: Any) -> list[OpExample]:
    r = SampleGen(24, device, as_dtype(dtype))
    d = 32
    out = []
    for rotated, zc in ((d, False), (d // 2, True)):  # whole and partial rotary
        out.append(OpExample((r.randn(5, 4, d), r.randn(5, 2, d), r.randn(5, 2, d), r.randn(d), r.randn(d), EPS, zc,
                              r.ints([0, 1, 2, 7, 30]), r.inv_freq(rotated), r.randn(3, 4, 2, d),
                              r.randn(3, 4, 2, d), r.ints([0, 1, 2, 7, 11])), shape={"head_dim": d}))
    # M-RoPE: three position rows that differ (an image's t / h / w); each frequency's row as
    # layers.rotary.mrope_axis_of_frequency gives it for mrope_section [4, 2, 2] and [6, 5, 5], interleaved (Qwen3.5)
    for rotated, axis in ((d // 2, [0, 1, 2, 0, 1, 2, 0, 0]), (d, [0, 1, 2] * 5 + [0])):
        axis = r.ints(axis)
        out.append(OpExample((r.randn(5, 4, d), r.randn(5, 2, d), r.randn(5, 2, d), r.randn(d), r.randn(d), EPS, True,
                              r.ints([[4, 5, 5, 5, 9], [4, 5, 5, 6, 9], [4, 5, 6, 5, 9]]), r.inv_freq(rotated),
                              r.randn(3, 4, 2, d), r.randn(3, 4, 2, d), r.ints([0, 1, 2, 7, 11]), axis),
                             shape={"head_dim": d, "position_rows": 3}))
    return out


def qkv_norm_rope_cache(device: Any, dtype: Any) -> list[OpExample]:
    r = SampleGen(27, device, as_dtype(dtype))
    d = 32
    out = []
    for rotated, zc in ((d, False), (d // 2, True)):  # whole and partial rotary
        k = r.randn(5, 2, d)
        v = r.randn(5, 2, d) if zc else k  # k_eq_v: v is k's rows
        out.append(OpExample((r.randn(5, 4, d), k, v, r.randn(d), r.randn(d), EPS, zc, r.ints([0, 1, 2, 7, 30]),
                              r.inv_freq(rotated), r.randn(3, 4, 2, d), r.randn(3, 4, 2, d), r.ints([0, 1, 2, 7, 11])),
                             shape={"head_dim": d}))
    return out


def q_norm_rope(device: Any, dtype: Any) -> list[OpExample]:
    r = SampleGen(25, device, as_dtype(dtype))
    return [OpExample((r.randn(4, 2, 32), r.randn(32), EPS, zc, r.ints([0, 3, 4, 19]), r.inv_freq(rotated)),
                      shape={"head_dim": 32}) for rotated, zc in ((32, False), (16, True))]


def _new_positions(q_lens: list[int], ctx: list[int], device: Any) -> torch.Tensor:
    """int64 ``[sum(q_lens)]``: the positions of each sequence's new tokens, the last ``q_lens[i]`` of its
    ``ctx[i]``."""
    return torch.cat([torch.arange(c - n, c) for n, c in zip(q_lens, ctx, strict=True)]).to(device)


def q_norm_rope_attention(device: Any, dtype: Any) -> list[OpExample]:
    r = SampleGen(28, device, as_dtype(dtype))
    out = []
    cases = [([1, 1], [7, 13], None, 32, False),  # decodes, whole rotary
             ([6, 1, 3], [6, 11, 9], 4, 16, True)]  # a prompt, a decode, a chunk; window; partial rotary
    for q_lens, ctx, window, rotated, zc in cases:
        q, k_cache, v_cache, cu, seq_lens, tables = paged_batch(r, q_lens, ctx, 4, 2, 32)
        positions = _new_positions(q_lens, ctx, r.device)
        out.append(OpExample((q, r.randn(32), EPS, zc, positions, r.inv_freq(rotated), k_cache, v_cache, cu, seq_lens,
                              tables, 32 ** -0.5, window), shape={"head_dim": 32}))
    return out


def _new_slots(tables: torch.Tensor, q_lens: list[int], positions: torch.Tensor, block: int) -> torch.Tensor:
    """int64 ``[sum(q_lens)]``: the cache slots of each sequence's new tokens (``positions``) through its block table
    (blocks of ``block`` positions)."""
    rows = tables.cpu()[torch.repeat_interleave(torch.arange(len(q_lens)), torch.tensor(q_lens))]
    at = positions.cpu()
    return (rows.gather(1, (at // block)[:, None])[:, 0].long() * block + at % block).to(tables.device)


def qk_norm_rope_cache_attention(device: Any, dtype: Any) -> list[OpExample]:
    r = SampleGen(30, device, as_dtype(dtype))
    out = []
    # (q_lens, ctx, h_q, h_kv, window, rotated dims, zero_centered, block): decodes with whole rotary (GQA 2:1); a
    # prompt, a decode and a chunk with a window and partial rotary; the code predictor's pattern at GQA 4:1 and one
    # block a sequence (its first pass: 2 queries at positions 0, 1; a later pass: 1 query at position p)
    cases = [([1, 1], [7, 13], 4, 2, None, 32, False, 4),
             ([6, 1, 3], [6, 11, 9], 4, 2, 4, 16, True, 4),
             ([2, 2, 2], [2, 2, 2], 8, 2, None, 32, False, 16),
             ([1, 1, 1], [5, 5, 5], 8, 2, None, 16, False, 16)]
    for q_lens, ctx, h_q, h_kv, window, rotated, zc, block in cases:
        q, k_cache, v_cache, cu, seq_lens, tables = paged_batch(r, q_lens, ctx, h_q, h_kv, 32, block)
        positions = _new_positions(q_lens, ctx, r.device)
        slots = _new_slots(tables, q_lens, positions, block)
        out.append(OpExample((q, r.randn(q.shape[0], h_kv, 32), r.randn(q.shape[0], h_kv, 32), r.randn(32),
                              r.randn(32), EPS, zc, positions, r.inv_freq(rotated), k_cache, v_cache, slots, cu,
                              seq_lens, tables, 32 ** -0.5, window), shape={"head_dim": 32}))
    return out


def qkv_norm_rope_cache_attention(device: Any, dtype: Any) -> list[OpExample]:
    r = SampleGen(29, device, as_dtype(dtype))
    out = []
    cases = [([1, 1], [7, 13], None, 32, False, False),  # decodes, whole rotary
             ([6, 1, 3], [6, 11, 9], 4, 16, True, True)]  # a prompt, a decode, a chunk; window; partial; k_eq_v
    for q_lens, ctx, window, rotated, zc, k_eq_v in cases:
        q, k_cache, v_cache, cu, seq_lens, tables = paged_batch(r, q_lens, ctx, 4, 2, 32)
        positions = _new_positions(q_lens, ctx, r.device)
        slots = _new_slots(tables, q_lens, positions, 4)
        k = r.randn(q.shape[0], 2, 32)
        v = k if k_eq_v else r.randn(q.shape[0], 2, 32)
        out.append(OpExample((q, k, v, r.randn(32), r.randn(32), EPS, zc, positions, r.inv_freq(rotated), k_cache,
                              v_cache, slots, cu, seq_lens, tables, 32 ** -0.5, window), shape={"head_dim": 32}))
    return out


def _gdn_gates(r: SampleGen, rows: int, h_v: int) -> tuple[torch.Tensor, ...]:
    wide = r.randn(rows, 2 * h_v + 1)  # a, b: strided column views of one projection
    neg_a = -torch.rand(h_v, generator=r.gen).add(0.5).to(r.device)
    return wide[:, :h_v], wide[:, h_v:2 * h_v], neg_a, r.randn(h_v)


def fused_gdn_decode(device: Any, dtype: Any) -> list[OpExample]:
    r = SampleGen(26, device, as_dtype(dtype))
    h_k, h_v, d_k, d_v, batch = 1, 2, 16, 16, 3
    channels = 2 * h_k * d_k + h_v * d_v
    a, b, neg_a, dt_bias = _gdn_gates(r, batch, h_v)
    return [OpExample((r.randn(batch, channels), r.randn(channels, 4), r.randn(4, channels, 3), r.randn(batch, h_v * d_v),
                       a, b, neg_a, dt_bias, r.randn(d_v), EPS, r.randn(4, h_v, d_k, d_v, dtype=torch.float32, scale=0.1),
                       r.ints([2, 0, 3]), d_k ** -0.5, h_k), shape={"head_k_dim": d_k, "head_v_dim": d_v})]


def fused_gdn_prefill(device: Any, dtype: Any) -> list[OpExample]:
    r = SampleGen(27, device, as_dtype(dtype))
    h_k, h_v, d_k, d_v = 1, 2, 16, 16
    lens = [6, 3]
    rows = sum(lens)
    a, b, neg_a, dt_bias = _gdn_gates(r, rows, h_v)
    return [OpExample((r.randn(rows, 2 * h_k * d_k + h_v * d_v), a, b, neg_a, dt_bias, r.ints([0, 6, 9], torch.int32),
                       r.randn(3, h_v, d_k, d_v, dtype=torch.float32, scale=0.1), r.ints([1, 2]), d_k ** -0.5, h_k, d_k,
                       d_v), shape={"head_k_dim": d_k, "head_v_dim": d_v})]
