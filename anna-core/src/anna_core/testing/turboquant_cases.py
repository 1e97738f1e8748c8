"""A TurboQuant attention batch shared by the CPU reference's tests and the Triton kernel's (tests of different
distributions, which cannot import each other): two decodes over one quantized cache sharing a block, each with its
own residual ring."""

from __future__ import annotations

import torch

from anna_core.kernels.reference import turboquant as ref
from anna_core.kv_quant.layout import TurboQuantLayout
from anna_core.kv_quant.tables import TurboQuantTables


def shared_block_batch():
    """Two decodes over one quantized cache of 4-token blocks, block 1 shared (a prefix hit): sequence 0 (slot 0,
    10 positions, blocks 0 1 2) computed positions 4..7 and its ring of 8 holds 2..9; sequence 1 (slot 1, 8
    positions, blocks 3 1) took block 1 from the prefix cache and its ring holds only 7.

    Returns:
        ``(q [2, 4, 16], k_cache, v_cache, seq_lens [2] int32, block_tables [2, 3] int32, tables' args,
        (ring_k [3, 8, 2, 16], ring_v, ring_positions [3, 8] int32))``: the arguments of
        ``paged_attention_turboquant`` for two decodes (float32, CPU)."""
    d, bs, h_kv = 16, 4, 2
    layout = TurboQuantLayout(4, residual_len=8)
    t = TurboQuantTables.build(layout, d, "cpu")
    g = torch.Generator().manual_seed(3)
    kq = torch.zeros(5, bs, h_kv, layout.key_row_bytes(d), dtype=torch.uint8)
    vq = torch.zeros(5, bs, h_kv, layout.value_row_bytes(d), dtype=torch.uint8)
    k, v = torch.randn(20, h_kv, d, generator=g), torch.randn(20, h_kv, d, generator=g)
    ref.turboquant_cache_write(k, v, kq, vq, torch.arange(20), *t.args)
    rk, rv = torch.randn(3, 8, h_kv, d, generator=g), torch.randn(3, 8, h_kv, d, generator=g)
    pos = torch.tensor([[8, 9, 2, 3, 4, 5, 6, 7], [-1, -1, -1, -1, -1, -1, -1, 7], [-1] * 8], dtype=torch.int32)
    q = torch.randn(2, 4, d, generator=g)
    return q, kq, vq, torch.tensor([10, 8], dtype=torch.int32), torch.tensor([[0, 1, 2], [3, 1, 0]], dtype=torch.int32), \
        t.args, (rk, rv, pos)
