"""Filled TurboQuant caches and attention batches shared by the TurboQuant kernel tests (torch reference only)."""

import torch
from anna_core.kernels.reference import turboquant as ref
from anna_core.kv_quant.layout import TurboQuantLayout
from anna_core.kv_quant.tables import TurboQuantTables


def filled(bits, d, n_blocks, bs, h_kv, seed, key_qjl=True):
    """``(k, v, k_cache, v_cache, slots, tables)``: random K/V ``[n_blocks * bs, h_kv, d]``, zeroed caches of the
    layout, a random slot permutation and the tables' ``args``."""
    g = torch.Generator().manual_seed(seed)
    layout = TurboQuantLayout(bits, key_qjl=key_qjl)
    tables = TurboQuantTables.build(layout, d, "cpu").args
    k_cache = torch.zeros(n_blocks, bs, h_kv, layout.key_row_bytes(d), dtype=torch.uint8)
    v_cache = torch.zeros(n_blocks, bs, h_kv, layout.value_row_bytes(d), dtype=torch.uint8)
    n = n_blocks * bs
    k, v = torch.randn(n, h_kv, d, generator=g), torch.randn(n, h_kv, d, generator=g)
    slots = torch.randperm(n, generator=g)
    return k, v, k_cache, v_cache, slots, tables


def batch(bits, d, h_q, h_kv, key_qjl=True, ring=False, seed=0):
    """A decode, a fresh prompt and a chunk over a cached prefix (block size 4) over a filled cache; with ``ring``
    a residual ring of 4 positions (sequence 0 holds all of its newest, sequence 1 two and a stale one, sequence 2
    only an earlier owner's)."""
    bs, seq_lens, q_lens = 4, [13, 6, 21], [1, 6, 5]
    k, v, kc, vc, slots, tables = filled(bits, d, 16, bs, h_kv, seed=d + seed, key_qjl=key_qjl)
    ref.turboquant_cache_write(k, v, kc, vc, torch.arange(16 * bs), *tables)
    g = torch.Generator().manual_seed(seed)
    order = torch.randperm(16, generator=g)
    block_tables = torch.stack([order[:6], order[6:12], order[10:16]]).to(torch.int32)
    q = torch.randn(sum(q_lens), h_q, d, generator=g)
    cu = torch.tensor([0, 1, 7, 12], dtype=torch.int32)
    args = (q, kc, vc, cu, torch.tensor(seq_lens, dtype=torch.int32), block_tables, d ** -0.5, None, *tables)
    if ring:
        pos = torch.tensor([[12, 9, 10, 11], [4, 5, 2, 3], [16, 17, 18, 15], [-1] * 4], dtype=torch.int32)
        args += (torch.randn(4, 4, h_kv, d, generator=g), torch.randn(4, 4, h_kv, d, generator=g), pos,
                 torch.tensor([0, 1, 3]))
    return args
