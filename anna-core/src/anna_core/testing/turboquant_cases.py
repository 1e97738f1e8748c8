"""TurboQuant attention cases shared by the CPU reference's tests and the Triton kernel's (tests of different
distributions, which cannot import each other): two decodes over one quantized cache sharing a block, each with its
own residual ring; a prompt prefilled in chunks over a residual ring (the per-query window)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from anna_core.kernels.reference import turboquant as ref
from anna_core.kv_quant.layout import TurboQuantLayout
from anna_core.kv_quant.residual import ResidualRing, rotated_rows, write_residual
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


def ring_prefill(attend: Callable[..., torch.Tensor], chunk: int, n: int = 20, r: int = 6, d: int = 16, bs: int = 4,
                 window: int | None = None) -> tuple[torch.Tensor, tuple]:
    """Attention outputs ``[n, 4, d]`` float32 of a prompt of ``n`` random tokens (4 query heads, 2 KV heads) over a
    4-bit TurboQuant cache of ``bs``-token blocks with a residual ring of ``r``, prefilled in chunks of ``chunk``
    through ``attend`` (a ``paged_attention_turboquant``) as :class:`~anna_core.layers.attention.PagedAttention` runs
    a ring: the chunk's quantized rows and its first position's ring row written, the attention with the chunk's own
    rows (``new_k`` / ``new_v``), the rest of the ring written. Also returns ``(q, k, v, k_cache, v_cache,
    block_tables, tables)``. The cache writes are the reference's (CPU)."""
    g = torch.Generator().manual_seed(5)
    q, k, v = torch.randn(n, 4, d, generator=g), torch.randn(n, 2, d, generator=g), torch.randn(n, 2, d, generator=g)
    layout = TurboQuantLayout(4, residual_len=r)
    t = TurboQuantTables.build(layout, d, "cpu")
    nb = -(-n // bs)
    kq = torch.zeros(nb, bs, 2, layout.key_row_bytes(d), dtype=torch.uint8)
    vq = torch.zeros(nb, bs, 2, layout.value_row_bytes(d), dtype=torch.uint8)
    ring = ResidualRing.empty(1, 2, r, 2, d, "cpu", torch.float32)  # slot 0 and the scratch
    table, slots, out = torch.arange(nb, dtype=torch.int32)[None], torch.tensor([0]), []
    for s in range(0, n, chunk):
        e = min(n, s + chunk)
        ref.turboquant_cache_write(k[s:e], v[s:e], kq, vq, torch.arange(s, e), *t.args)
        cu, lens = torch.tensor([0, e - s], dtype=torch.int32), torch.tensor([e], dtype=torch.int32)
        new = rotated_rows(k[s:e], v[s:e], t.rotation, torch.float32)
        args = (k[s:e], v[s:e], ring, 0, t.rotation, slots, cu, lens)
        write_residual(*args, part="first", rotated=new)
        out.append(attend(q[s:e], kq, vq, cu, lens, table, d ** -0.5, window, *t.args,
                          ring.k[0], ring.v[0], ring.pos, slots, None, *new).float())
        write_residual(*args, part="rest", rotated=new)
    return torch.cat(out), (q, k, v, kq, vq, table, t)
