"""The sample inputs of the paged KV-cache ops: ragged batches over scattered cache blocks (a fresh prompt, a
decode, a chunk over a cached prefix), plain and TurboQuant-quantized caches."""

from __future__ import annotations

from typing import Any

import torch

from anna_core.kernels.contracts import OpExample
from anna_core.kernels.examples.sample_gen import SampleGen, as_dtype


def reshape_and_cache(device: Any, dtype: Any) -> list[OpExample]:
    r = SampleGen(14, device, as_dtype(dtype))
    return [OpExample((r.randn(5, 2, 16), r.randn(5, 2, 16), r.randn(6, 4, 2, 16), r.randn(6, 4, 2, 16),
                       r.ints([0, 1, 2, 9, 22])))]


def paged_batch(r: SampleGen, q_lens: list[int], seq_lens: list[int], h_q: int, h_kv: int, d: int, block: int = 4):
    blocks_per_seq = [(n + block - 1) // block for n in seq_lens]
    width = max(blocks_per_seq)
    total = sum(blocks_per_seq) + 1
    order = torch.randperm(total, generator=r.gen).tolist()  # tables over scattered blocks
    tables, at = [], 0
    for n in blocks_per_seq:
        tables.append(order[at:at + n] + [0] * (width - n))
        at += n
    cu = [0]
    for n in q_lens:
        cu.append(cu[-1] + n)
    return (r.randn(sum(q_lens), h_q, d), r.randn(total, block, h_kv, d), r.randn(total, block, h_kv, d),
            r.ints(cu, torch.int32), r.ints(seq_lens, torch.int32), r.ints(tables, torch.int32))


def paged_attention(device: Any, dtype: Any) -> list[OpExample]:
    r = SampleGen(15, device, as_dtype(dtype))
    mixed = paged_batch(r, [6, 1, 3], [6, 11, 9], 4, 2, 16)  # a fresh prompt, a decode, a chunk over a cached prefix
    decode = paged_batch(r, [1, 1], [7, 13], 2, 1, 32)
    return [OpExample((*mixed, 16 ** -0.5, None), shape={"head_dim": 16}),
            OpExample((*mixed, 16 ** -0.5, 4), shape={"head_dim": 16}),
            OpExample((*decode, 32 ** -0.5, None), shape={"head_dim": 32})]


def _turboquant_tables(bits: int, d: int, device: Any, key_qjl: bool = True) -> tuple:
    from anna_core.kv_quant.layout import TurboQuantLayout
    from anna_core.kv_quant.tables import TurboQuantTables

    layout = TurboQuantLayout(bits, key_qjl=key_qjl)
    return layout, TurboQuantTables.build(layout, d, device).args


def _turboquant_cache(r: SampleGen, bits: int, d: int, n_blocks: int, block: int, h_kv: int, key_qjl: bool = True) -> tuple:
    """Quantized caches filled with the reference's rows of random K/V, and the tables."""
    from anna_core.kernels.reference.turboquant import turboquant_cache_write

    layout, tables = _turboquant_tables(bits, d, r.device, key_qjl)
    k_cache = torch.zeros(n_blocks, block, h_kv, layout.key_row_bytes(d), dtype=torch.uint8, device=r.device)
    v_cache = torch.zeros(n_blocks, block, h_kv, layout.value_row_bytes(d), dtype=torch.uint8, device=r.device)
    n = n_blocks * block
    turboquant_cache_write(r.randn(n, h_kv, d), r.randn(n, h_kv, d), k_cache, v_cache,
                           torch.arange(n, device=r.device), *tables)
    return k_cache, v_cache, tables


def turboquant_cache_write(device: Any, dtype: Any) -> list[OpExample]:
    r = SampleGen(31, device, as_dtype(dtype))
    out = []
    for bits, d, key_qjl in ((4, 16, True), (3, 32, True), (2, 16, True), (3, 16, False)):  # last: keys as values
        layout, tables = _turboquant_tables(bits, d, r.device, key_qjl)
        k_cache = torch.zeros(6, 4, 2, layout.key_row_bytes(d), dtype=torch.uint8, device=r.device)
        v_cache = torch.zeros(6, 4, 2, layout.value_row_bytes(d), dtype=torch.uint8, device=r.device)
        out.append(OpExample((r.randn(5, 2, d), r.randn(5, 2, d), k_cache, v_cache, r.ints([0, 1, 2, 9, 22]),
                              *tables)))
    return out


def paged_attention_turboquant(device: Any, dtype: Any) -> list[OpExample]:
    r = SampleGen(32, device, as_dtype(dtype))
    out = []
    for bits, q_lens, seq_lens, h_q, h_kv, d, window, key_qjl in (
            (4, [6, 1, 3], [6, 11, 9], 4, 2, 16, None, True),  # a fresh prompt, a decode, a chunk over a cached prefix
            (3, [6, 1, 3], [6, 11, 9], 4, 2, 16, 4, True),
            (2, [1, 1], [7, 13], 2, 1, 32, None, True),
            (4, [6, 1, 3], [6, 11, 9], 4, 2, 16, None, False)):  # keys quantized as values
        q, k, _, cu, lens, tables = paged_batch(r, q_lens, seq_lens, h_q, h_kv, d)
        k_cache, v_cache, tq = _turboquant_cache(r, bits, d, k.shape[0], k.shape[1], h_kv, key_qjl)
        out.append(OpExample((q, k_cache, v_cache, cu, lens, tables, d ** -0.5, window, *tq), shape={"head_dim": d}))
    # a residual ring of 4 positions: sequence 0 (slot 2) holds all of its newest, sequence 1 (slot 0) two of them
    # and a stale position, sequence 2 (slot 1) only an earlier owner's
    q, k, _, cu, lens, tables = paged_batch(r, [6, 1, 3], [6, 11, 9], 4, 2, 16)
    k_cache, v_cache, tq = _turboquant_cache(r, 4, 16, k.shape[0], k.shape[1], 2)
    pos = r.ints([[8, 9, 10, 3], [12, 13, 14, 15], [4, 5, 2, 3], [-1, -1, -1, -1]], torch.int32)
    ring = (r.randn(4, 4, 2, 16), r.randn(4, 4, 2, 16), pos, r.ints([2, 0, 1]))
    out.append(OpExample((q, k_cache, v_cache, cu, lens, tables, 16 ** -0.5, None, *tq, *ring), shape={"head_dim": 16}))
    # sequence 0 a padded prefill of 4 real rows and 2 padding rows, its ring holding positions 0..3: its newest
    # positions are 0..3 (valid_lens), all read from the ring (seq_lens would have read 0 and 1 quantized)
    pos = r.ints([[8, 9, 10, 3], [12, 13, 14, 15], [0, 1, 2, 3], [-1, -1, -1, -1]], torch.int32)
    padded = (*ring[:2], pos, ring[3], r.ints([4, 11, 9], torch.int32))
    out.append(OpExample((q, k_cache, v_cache, cu, lens, tables, 16 ** -0.5, None, *tq, *padded),
                         shape={"head_dim": 16}))
    # the per-query window (new_k / new_v: the step's own rows) over the ring before the step: sequence 0 (slot 2,
    # a fresh prompt) holds only a stale position past its start; sequence 1 (slot 0, a decode at 10) holds 7..9
    # and 6, outside its window; sequence 2 (slot 1, a chunk at 6..8) holds 4, 5 and 2, not 3
    for bits, window in ((4, None), (3, 3)):
        q, k, _, cu, lens, tables = paged_batch(r, [6, 1, 3], [6, 11, 9], 4, 2, 16)
        k_cache, v_cache, tq = _turboquant_cache(r, bits, 16, k.shape[0], k.shape[1], 2)
        pos = r.ints([[8, 9, 6, 7], [4, 5, 2, -1], [-1, -1, 8, -1], [-1, -1, -1, -1]], torch.int32)
        ring = (r.randn(4, 4, 2, 16), r.randn(4, 4, 2, 16), pos, r.ints([2, 0, 1]), None)
        new = (r.randn(10, 2, 16), r.randn(10, 2, 16))
        out.append(OpExample((q, k_cache, v_cache, cu, lens, tables, 16 ** -0.5, window, *tq, *ring, *new),
                             shape={"head_dim": 16}))
    return out
