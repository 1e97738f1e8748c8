"""TurboQuant KV caches (anna_core.kv_quant, the turboquant ops' reference): the codebook and quantizers against
the distortions of Zandieh et al., arXiv 2504.19874 (Theorems 1 and 2), the attention output's error against
unquantized K/V, the sizing of the pool under a fixed budget, and the flag resolution."""

import math

import pytest
import torch
from anna_core.cache_spec import CacheSpec, FullAttentionSpec, RecurrentStateSpec, SlidingWindowSpec
from anna_core.engine.cache_allocator import allocate_caches, group_block_caps, plan_num_blocks
from anna_core.errors import AnnaError
from anna_core.kernels.reference import turboquant as tq
from anna_core.kernels.reference.paged_attention import paged_attention, reshape_and_cache
from anna_core.kv_quant.codebook import lloyd_max_codebook, mse_per_vector
from anna_core.kv_quant.layout import TurboQuantLayout
from anna_core.kv_quant.settings import resolve_kv_quant
from anna_core.kv_quant.tables import TurboQuantTables
from anna_core.testing.turboquant_cases import ring_prefill, shared_block_batch

# The paper's D_mse (Theorem 1, its table of b = 1..4) and D_prod * d (Theorem 2) of unit vectors.
PAPER_MSE = {1: 0.36, 2: 0.117, 3: 0.03, 4: 0.009}
PAPER_PROD_D = {2: 0.56, 3: 0.18, 4: 0.047}


@pytest.mark.parametrize("bits", [1, 2, 3, 4])
def test_lloyd_max_codebook_reaches_the_papers_mse(bits):
    # measured at D=256: 0.3621, 0.1167, 0.03426, 0.00942 (the paper rounds to 0.36, 0.117, 0.03, 0.009)
    c = lloyd_max_codebook(256, bits)
    assert torch.all(c[1:] > c[:-1]) and torch.allclose(c, -c.flip(0), atol=1e-9)  # sorted, symmetric
    assert mse_per_vector(256, c) == pytest.approx(PAPER_MSE[bits], rel=0.15)
    if bits == 2:  # close to the Gaussian's Lloyd-Max levels +-0.453, +-1.510 in units of 1/sqrt(D)
        assert (c * 16).tolist() == pytest.approx([-1.51, -0.453, 0.453, 1.51], abs=0.01)


def test_bit_planes_round_trip():
    idx = torch.randint(0, 16, (5, 32), generator=torch.Generator().manual_seed(0))
    packed = tq.pack_planes(idx, 4)
    assert packed.shape == (5, 16) and packed.dtype == torch.uint8
    assert torch.equal(tq.unpack_planes(packed, 4, 32), idx)
    # plane p holds bit p of coordinate j at bit j % 8 of byte j // 8
    one = torch.zeros(1, 16, dtype=torch.int64)
    one[0, 9] = 2
    assert tq.pack_planes(one, 2).tolist() == [[0, 0, 0, 2]]


def _unit(n, d, seed):
    x = torch.randn(n, d, generator=torch.Generator().manual_seed(seed))
    return x / x.norm(dim=-1, keepdim=True)


@pytest.mark.parametrize("bits", [2, 3, 4])
def test_values_have_the_mse_and_keys_the_unbiased_inner_products_of_the_paper(bits):
    d, n = 128, 4000
    layout = TurboQuantLayout(bits)
    t = TurboQuantTables.build(layout, d, "cpu")
    x, y = _unit(n, d, 1) * 3.0, _unit(n, d, 2)  # norms are stored: a scale changes nothing
    v = tq.dequantize_values(tq.quantize_values(x, t.rotation, t.value_centroids, layout.value_row_bytes(d)),
                             t.rotation, t.value_centroids)
    k = tq.dequantize_keys(tq.quantize_keys(x, t.rotation, t.qjl, t.key_centroids, layout.key_row_bytes(d)),
                           t.rotation, t.qjl, t.key_centroids)
    # measured: value MSE 0.116 / 0.0342 / 0.00936; key inner-product variance * d 0.545 / 0.176 / 0.0527
    assert ((x - v) ** 2).sum(-1).mean().item() / 9 == pytest.approx(PAPER_MSE[bits], rel=0.2)
    err = ((k - x) * y).sum(-1) / 3
    assert (err ** 2).mean().item() * d == pytest.approx(PAPER_PROD_D[bits], rel=0.2)
    assert abs(err.mean().item()) < 4 * err.std().item() / math.sqrt(n)  # unbiased (Theorem 2)


def test_a_zero_row_stays_zero():
    layout = TurboQuantLayout(4)
    t = TurboQuantTables.build(layout, 16, "cpu")
    rows = tq.quantize_keys(torch.zeros(2, 16), t.rotation, t.qjl, t.key_centroids, layout.key_row_bytes(16))
    assert torch.equal(tq.dequantize_keys(rows, t.rotation, t.qjl, t.key_centroids), torch.zeros(2, 16))


def _attention_error(bits, d, window, n=256, h_q=4, h_kv=2, seed=0, key_qjl=True):
    """Relative L2 error of one decode query's attention output over n quantized tokens."""
    g = torch.Generator().manual_seed(seed)
    layout, bs = TurboQuantLayout(bits, key_qjl=key_qjl), 16
    t = TurboQuantTables.build(layout, d, "cpu")
    nb = n // bs + 1
    k, v = torch.randn(n, h_kv, d, generator=g), torch.randn(n, h_kv, d, generator=g)
    q = torch.randn(1, h_q, d, generator=g)
    kq = torch.zeros(nb, bs, h_kv, layout.key_row_bytes(d), dtype=torch.uint8)
    vq = torch.zeros(nb, bs, h_kv, layout.value_row_bytes(d), dtype=torch.uint8)
    kf, vf = torch.zeros(nb, bs, h_kv, d), torch.zeros(nb, bs, h_kv, d)
    order = torch.randperm(nb, generator=g)  # scattered blocks
    slots = (order[:n // bs, None] * bs + torch.arange(bs)).reshape(-1)
    tq.turboquant_cache_write(k, v, kq, vq, slots, *t.args)
    reshape_and_cache(k, v, kf, vf, slots)
    args = (torch.tensor([0, 1], dtype=torch.int32), torch.tensor([n], dtype=torch.int32),
            order[None].to(torch.int32), d ** -0.5, window)
    want = paged_attention(q, kf, vf, *args)
    got = tq.paged_attention_turboquant(q, kq, vq, *args, *t.args)
    return ((got - want).norm() / want.norm()).item()


@pytest.mark.parametrize("bits,bound", [(4, 0.3), (3, 0.6)])
@pytest.mark.parametrize("d", [128, 256])
def test_attention_output_error_against_unquantized_kv(bits, bound, d):
    # Random q, K, V (near-uniform attention over 256 tokens, the hard case: the output is a small mean of many
    # values). Measured relative errors (full context / 128-token window): 4 bits 0.220 / 0.257 (D=128), 0.253 /
    # 0.211 (D=256); 3 bits 0.426 / 0.553, 0.487 / 0.345. About 2/3 of it comes from the keys' QJL stage (its variance; MSE-only keys of the same
    # bits measured 0.135 at 4 bits, D=128).
    assert _attention_error(bits, d, None) < bound
    assert _attention_error(bits, d, 128, seed=1) < bound


def test_reference_attention_matches_attention_over_the_reconstructed_cache():
    # a prefill chunk over a cached prefix and a decode, with a window: the op is paged_attention over the
    # dequantized rows of the blocks the batch reads
    from anna_core.kernels.examples import paged_attention_turboquant as examples

    for ex in [e for e in examples("cpu", torch.float32) if len(e.args) == 12]:  # those without a residual ring
        q, kq, vq, cu, lens, tables, scale, window, rot, qjl, kc, vc = ex.args
        d = q.shape[-1]
        shape = (*kq.shape[:3], d)
        if kc.numel() < vc.numel():  # keys with the QJL stage
            k = tq.dequantize_keys(kq.view(-1, kq.shape[-1]), rot, qjl, kc).view(shape)
        else:  # keys quantized as values
            k = tq.dequantize_values(kq.view(-1, kq.shape[-1]), rot, kc).view(shape)
        v = tq.dequantize_values(vq.view(-1, vq.shape[-1]), rot, vc).view(shape)
        torch.testing.assert_close(tq.paged_attention_turboquant(*ex.args),
                                   paged_attention(q, k, v, cu, lens, tables, scale, window), rtol=1e-5, atol=1e-5)


def _qwen35_9b_shape():  # tests/qwen35/reference_configs/Qwen3.5-9B: 8 full-attention layers of 4 KV heads x 256
    return CacheSpec((FullAttentionSpec(layers=range(3, 32, 4), num_kv_heads=4, head_dim=256),
                      RecurrentStateSpec(layers=[i for i in range(32) if i % 4 != 3], conv_shape=(8192, 3),
                                         state_shape=(32, 128, 128))))


def _gemma4_shape():  # a Gemma 4 31B-like shape: sliding layers of 16 x 256, global layers of 4 x 512
    return CacheSpec((SlidingWindowSpec(layers=range(50), num_kv_heads=16, head_dim=256, window=1024),
                      FullAttentionSpec(layers=range(50, 60), num_kv_heads=4, head_dim=512)))


@pytest.mark.parametrize("shape", [_qwen35_9b_shape, _gemma4_shape])
def test_the_pool_holds_3x_the_tokens_at_4_bits_and_4x_at_3_bits(shape):
    spec, budget, bs = shape(), 8 << 30, 16
    caps = group_block_caps(spec, bs, 1 << 20, 4096, 8192)
    full = [i for i, g in enumerate(spec.attention_groups) if not isinstance(spec.groups[g], SlidingWindowSpec)][0]

    def tokens(layout):
        return plan_num_blocks(spec.with_kv_quant(layout), bs, torch.bfloat16, budget, caps)[full] * bs

    base = tokens(None)
    # measured: Qwen3.5-9B shape 3.82x / 5.02x / 7.31x (4 / 3 / 2 bits), Gemma 4 shape 3.83x / 5.04x / 7.35x
    assert tokens(TurboQuantLayout(4)) >= 3 * base
    assert tokens(TurboQuantLayout(3)) >= 4 * base
    assert tokens(TurboQuantLayout(2)) >= 5 * base


def test_quantized_groups_allocate_uint8_rows_with_their_tables_and_the_recurrent_group_is_unchanged():
    spec = _qwen35_9b_shape().with_kv_quant(TurboQuantLayout(3))
    small = CacheSpec((FullAttentionSpec(layers=[0, 1], num_kv_heads=2, head_dim=32),
                       RecurrentStateSpec(layers=[2], conv_shape=(8, 3), state_shape=(2, 4, 4)))).with_kv_quant(
        TurboQuantLayout(3))
    assert spec.groups[1].kind == "recurrent" and spec.groups[0].quant == TurboQuantLayout(3)
    caches = allocate_caches(small, num_blocks=3, block_size=4, num_slots=2, device="cpu", dtype=torch.bfloat16)
    att = caches.attention(0)
    # 3 bits at D=32: keys 8 + 3 * 4 = 20 bytes, values 4 + 3 * 4 = 16 bytes (bf16: 64 each)
    assert att.k[0].shape == (4, 4, 2, 20) and att.v[0].shape == (4, 4, 2, 16) and att.k[0].dtype == torch.uint8
    assert att.quant.key_centroids.numel() == 4 and att.quant.value_centroids.numel() == 8
    assert caches.state(1).conv[0].dtype == torch.bfloat16
    with pytest.raises(AnnaError, match="multiple of 8"):
        CacheSpec((FullAttentionSpec(layers=[0], num_kv_heads=1, head_dim=4),)).with_kv_quant(TurboQuantLayout(4))


def test_mode_resolution_and_auto_tiers():
    assert resolve_kv_quant("none", None, num_params=10**10, supported=True) is None
    assert resolve_kv_quant("turboquant", None, num_params=1, supported=True) == TurboQuantLayout(4)
    assert resolve_kv_quant("turboquant", 2, num_params=1, supported=True) == TurboQuantLayout(2)
    assert resolve_kv_quant("auto", None, num_params=10**9, supported=True) is None  # small: left alone
    assert resolve_kv_quant("auto", None, num_params=9 * 10**9, supported=True) == TurboQuantLayout(4, 128)
    assert resolve_kv_quant("auto", None, num_params=30 * 10**9, supported=True) == TurboQuantLayout(3, 128)
    assert resolve_kv_quant("auto", 4, num_params=30 * 10**9, supported=True) == TurboQuantLayout(4, 128)
    assert resolve_kv_quant("auto", None, num_params=30 * 10**9, supported=False) is None
    with pytest.raises(AnnaError, match="quantized_kv"):
        resolve_kv_quant("turboquant", 4, num_params=1, supported=False)
    with pytest.raises(AnnaError, match="must be one of"):
        resolve_kv_quant("fp8", None, num_params=1, supported=True)
    with pytest.raises(AnnaError, match="bits"):
        resolve_kv_quant("turboquant", 5, num_params=1, supported=True)


def test_the_residual_ring_keeps_each_sequences_newest_positions_rotated():
    from anna_core.kv_quant.residual import ResidualRing, reset_slots, token_positions, write_residual

    d, r = 8, 4
    rot = TurboQuantTables.build(TurboQuantLayout(4), d, "cpu").rotation
    ring = ResidualRing.empty(1, 3, r, 1, d, "cpu", torch.float32)  # 2 slots and the scratch
    # sequence 0 (slot 1): a 6-token prefill chunk from position 0; sequence 1 (slot 0): a decode at position 9
    cu, lens, slots = torch.tensor([0, 6, 7], dtype=torch.int32), torch.tensor([6, 10], dtype=torch.int32), torch.tensor([1, 0])
    assert [t.tolist() for t in token_positions(cu, lens, 7)] == [[0] * 6 + [1], [0, 1, 2, 3, 4, 5, 9]]
    k = torch.randn(7, 1, d, generator=torch.Generator().manual_seed(0))
    write_residual(k, -k, ring, 0, rot, slots, cu, lens)
    assert ring.pos[1].tolist() == [4, 5, 2, 3] and ring.pos[0].tolist() == [-1, 9, -1, -1]
    torch.testing.assert_close(ring.k[0][1, 0, 0], k[4, 0] @ rot.T)  # position 4 at ring index 0, rotated
    torch.testing.assert_close(ring.v[0][0, 1, 0], -k[6, 0] @ rot.T)
    reset_slots(ring, torch.tensor([1]))
    assert ring.pos[1].tolist() == [-1] * 4 and ring.pos[0].tolist() == [-1, 9, -1, -1]


def test_an_owner_holds_its_prefill_rows_for_its_readers_until_the_last_has_attended():
    # KV sharing over a ring: the group's last owning layer (layer 1, two readers) holds a prefill step's rows
    # instead of writing them; the second reader to attend gets them back to write, the first nothing; a decode
    # step (None) holds nothing, so its readers read the ring alone
    spec = FullAttentionSpec(layers=[0, 1], num_kv_heads=1, head_dim=8, shared={2: 1, 3: 1})
    caches = allocate_caches(CacheSpec((spec,)).with_kv_quant(TurboQuantLayout(4, residual_len=4)), num_blocks=2,
                             block_size=4, num_slots=1, device="cpu", dtype=torch.float32)
    ring = caches.attention(0).residual
    assert ring.readers == [0, 2]
    rows = torch.ones(3, 1, 8), torch.zeros(3, 1, 8)
    ring.hold(1, rows)
    assert ring.held[1].k is rows[0] and ring.release(1) is None
    last = ring.release(1)
    assert last is not None and last.v is rows[1] and not ring.held and ring.release(1) is None
    ring.hold(1, rows)
    ring.hold(1, None)
    assert not ring.held
    # the last owning layer's "rest" write updates the ring's positions, so only it may have readers
    with pytest.raises(AnnaError, match="last owning layer"):
        FullAttentionSpec(layers=[0, 1], num_kv_heads=1, head_dim=8, shared={2: 0},
                          quant=TurboQuantLayout(4, residual_len=4))
    assert FullAttentionSpec(layers=[0, 1], num_kv_heads=1, head_dim=8, shared={2: 0},
                             quant=TurboQuantLayout(4)).quant == TurboQuantLayout(4)  # no ring: any owner


def test_residual_resolution_and_its_bytes_come_out_of_the_budget():
    assert resolve_kv_quant("turboquant", 3, num_params=1, supported=True, residual_len=64) == TurboQuantLayout(3, 64)
    assert resolve_kv_quant("auto", None, num_params=9 * 10**9, supported=True) == TurboQuantLayout(4, 128)
    assert resolve_kv_quant("auto", None, num_params=9 * 10**9, supported=True, residual_len=0) == TurboQuantLayout(4)
    with pytest.raises(AnnaError, match="residual"):
        resolve_kv_quant("turboquant", 4, num_params=1, supported=True, residual_len=-1)
    group = _qwen35_9b_shape().with_kv_quant(TurboQuantLayout(4, 128)).groups[0]
    # 8 layers x 128 positions x (K + V) x 4 heads x 256 x 2 bytes, plus 128 int32 positions: 4 MiB per slot
    assert group.residual_bytes_per_slot(torch.bfloat16) == 8 * 128 * 2 * 4 * 256 * 2 + 128 * 4


def test_the_ring_skips_the_padding_of_a_padded_prefill():
    from anna_core.kv_quant.residual import ResidualRing, write_residual

    d, r = 8, 4
    rot = torch.eye(d)
    ring = ResidualRing.empty(1, 2, r, 1, d, "cpu", torch.float32)
    k = torch.arange(8.0)[:, None, None].expand(8, 1, d).contiguous()  # row t holds t
    # a prompt of 5 real tokens padded to 8 rows: positions 1..4 kept, 5..7 are padding
    write_residual(k, k, ring, 0, rot, torch.tensor([0]), torch.tensor([0, 8], dtype=torch.int32),
                   torch.tensor([8], dtype=torch.int32), valid_lens=torch.tensor([5], dtype=torch.int32))
    assert ring.pos[0].tolist() == [4, 1, 2, 3] and ring.k[0][0, :, 0, 0].tolist() == [4.0, 1.0, 2.0, 3.0]


def test_keys_without_the_qjl_stage_trade_bias_for_less_error():
    # Same bytes per key row (bits code bits instead of bits - 1 and a sign plane, one norm less). Measured at D=128,
    # full context: 4 bits 0.220 -> 0.139, 3 bits 0.426 -> 0.268.
    layout = TurboQuantLayout(4, key_qjl=False)
    assert layout.key_bits == 4 and layout.key_row_bytes(128) == layout.value_row_bytes(128) == 68
    for bits in (4, 3):
        assert _attention_error(bits, 128, None, key_qjl=False) < 0.75 * _attention_error(bits, 128, None)


def test_the_conformance_suite_compares_written_caches_as_decoded_rows():
    """``turboquant_cache_write``'s ``OpContract.compare``: a norm rounded differently in its last bit passes, a
    different code does not; other arguments are compared exactly."""
    from anna_core.kernels.ops import CORE_OPS
    from anna_core.registry import resolve

    contract = next(c for c in CORE_OPS if c.name == "turboquant_cache_write")
    compare = resolve(contract.compare)
    layout = TurboQuantLayout(4)
    d, h = 32, 2
    tables = TurboQuantTables.build(layout, d, "cpu").args
    g = torch.Generator().manual_seed(3)
    k, v = torch.randn(3, h, d, generator=g), torch.randn(3, h, d, generator=g)
    k_cache = torch.zeros(2, 4, h, layout.key_row_bytes(d), dtype=torch.uint8)
    v_cache = torch.zeros(2, 4, h, layout.value_row_bytes(d), dtype=torch.uint8)
    slots = torch.tensor([1, 4, 6])
    tq.turboquant_cache_write(k, v, k_cache, v_cache, slots, *tables)
    args = (k, v, k_cache, v_cache, slots, *tables)
    ulp = k_cache.clone()
    norm = ulp.view(-1, h, ulp.shape[-1])[4, 0, :4].view(torch.float32)
    norm.copy_(torch.nextafter(norm, torch.tensor(math.inf)))  # the key's norm one float32 ulp up
    compare("k_cache", "k_cache", ulp, k_cache, args, 1e-4)
    flipped = v_cache.clone()
    flipped.view(-1, h, flipped.shape[-1])[6, 1, 4] ^= 1  # one value code's lowest bit
    with pytest.raises(AssertionError, match="decoded"):
        compare("v_cache", "v_cache", flipped, v_cache, args, 1e-4)
    with pytest.raises(AssertionError):
        compare("slot_mapping", "slot_mapping", slots + 1, slots, args, 1e-4)


def test_a_shared_block_takes_the_ring_rows_of_its_own_reader_only():
    # The ring holds rows of one sequence: sequence 1 reads positions 4..6 of the shared block 1 quantized (its ring
    # never saw them) also when sequence 0, whose ring holds them, is in the same batch (the reference once
    # reconstructed each block once per batch and laid every ring's rows over it)
    q, kq, vq, lens, tables, args, ring = shared_block_batch()
    cu = torch.arange(3, dtype=torch.int32)
    both = tq.paged_attention_turboquant(q, kq, vq, cu, lens, tables, 0.25, None, *args, *ring, torch.tensor([0, 1]))
    for i in range(2):
        alone = tq.paged_attention_turboquant(q[i:i + 1], kq, vq, cu[:2], lens[i:i + 1], tables[i:i + 1], 0.25, None,
                                              *args, *ring, torch.tensor([i]))
        torch.testing.assert_close(both[i:i + 1], alone, rtol=1e-6, atol=1e-6)
    no_ring = tq.paged_attention_turboquant(q, kq, vq, cu, lens, tables, 0.25, None, *args)
    assert not torch.allclose(both[0], no_ring[0], atol=1e-3)  # sequence 0 did read its ring


def test_the_reference_attention_over_a_ring_reads_nothing_on_the_host_that_a_capture_sees():
    # a captured decode step holds the op on the CPU (anna_core.testing.fake_graphs): no .item(), no value-dependent
    # shapes (unique, nonzero, boolean masks)
    from anna_core.testing.host_reads import NoHostReads

    q, kq, vq, lens, tables, args, ring = shared_block_batch()
    cu = torch.arange(3, dtype=torch.int32)
    with torch.inference_mode(), NoHostReads():
        tq.paged_attention_turboquant(q, kq, vq, cu, lens, tables, 0.25, None, *args, *ring, torch.tensor([0, 1]))


def test_a_padded_prefills_real_rows_read_the_ring_as_the_unpadded_prompts():
    # the ring's window ends at each sequence's real length (valid_lens), not at seq_lens: sequence 0, a prompt of 4
    # real rows padded to 6 whose ring holds positions 0..3, attends as the 4-token prompt alone; read from seq_lens
    # (6 - 4 = 2 on) its positions 0 and 1 came out quantized
    from anna_core.kernels.examples import paged_attention_turboquant as examples

    ex = [e for e in examples("cpu", torch.float32) if len(e.args) == 17][0]
    q, kq, vq, cu, lens, tables, scale, window, *quant = ex.args[:12]
    rk, rv, pos, slots, valid = ex.args[12:]
    assert lens.tolist() == [6, 11, 9] and valid.tolist() == [4, 11, 9] and pos[slots[0]].tolist() == [0, 1, 2, 3]
    got = tq.paged_attention_turboquant(*ex.args)
    alone = tq.paged_attention_turboquant(q[:4], kq, vq, torch.tensor([0, 4], dtype=torch.int32), valid[:1],
                                          tables[:1], scale, window, *quant, rk, rv, pos, slots[:1])
    torch.testing.assert_close(got[:4], alone, rtol=1e-6, atol=1e-6)
    by_seq_lens = tq.paged_attention_turboquant(*ex.args[:16])  # the other sequences' real lengths are their seq_lens
    torch.testing.assert_close(got[6:], by_seq_lens[6:], rtol=0, atol=0)
    assert (got[:4] - by_seq_lens[:4]).abs().max() > 1e-3
    with pytest.raises(ValueError, match="valid_lens"):
        tq.paged_attention_turboquant(*ex.args[:16], valid[:2])


@pytest.mark.parametrize("window", [None, 5])
def test_the_ring_window_is_per_query_so_chunking_does_not_change_the_output(window):
    # chunks shorter (1: decode-like, 4) and longer (9) than the ring of 6, against the prompt prefilled whole
    whole, (q, k, v, kq, vq, table, t) = ring_prefill(tq.paged_attention_turboquant, 20, window=window)
    for chunk in (1, 4, 9):
        torch.testing.assert_close(ring_prefill(tq.paged_attention_turboquant, chunk, window=window)[0], whole,
                                   rtol=0, atol=2e-6)
    # the rule itself: query p reads its newest 6 keys exactly and the rest quantized, checked on the last query
    # against attention over those keys built by hand (exact = float32 K/V; quantized = the reference's rows)
    n, r, d = 20, 6, 16
    kd = tq.dequantize_keys(kq.view(-1, kq.shape[-1]), t.rotation, t.qjl, t.key_centroids).view(-1, 2, d)[:n]
    vd = tq.dequantize_values(vq.view(-1, vq.shape[-1]), t.rotation, t.value_centroids).view(-1, 2, d)[:n]
    kk, vv = kd.clone(), vd.clone()
    kk[n - r:], vv[n - r:] = k[n - r:], v[n - r:]
    first = 0 if window is None else n - window
    s = torch.einsum("hd,khd->hk", q[-1].view(2, 2, d).reshape(4, d), kk.repeat_interleave(2, 1)[first:]) * d ** -0.5
    want = torch.einsum("hk,khd->hd", s.softmax(-1), vv.repeat_interleave(2, 1)[first:])
    torch.testing.assert_close(whole[-1], want, rtol=1e-5, atol=1e-5)
    # an early query of the whole prompt: query 9 reads 4..9 exactly, 0..3 quantized (not the prompt's last 6)
    kk, vv = kd.clone(), vd.clone()
    kk[4:10], vv[4:10] = k[4:10], v[4:10]
    first = 0 if window is None else 10 - window
    s = torch.einsum("hd,khd->hk", q[9], kk[first:10].repeat_interleave(2, 1)) * d ** -0.5
    want = torch.einsum("hk,khd->hd", s.softmax(-1), vv[first:10].repeat_interleave(2, 1))
    torch.testing.assert_close(whole[9], want, rtol=1e-5, atol=1e-5)


def test_the_per_query_window_needs_both_new_rows_and_a_ring():
    q, kq, vq, lens, tables, targs, (rk, rv, pos) = shared_block_batch()
    cu = torch.tensor([0, 1, 2], dtype=torch.int32)
    new = torch.zeros(2, 2, 16)
    with pytest.raises(ValueError, match="together"):
        tq.paged_attention_turboquant(q, kq, vq, cu, lens, tables, 0.25, None, *targs, rk, rv, pos,
                                      torch.tensor([0, 1]), None, new, None)
    with pytest.raises(ValueError, match="need a residual ring"):
        tq.paged_attention_turboquant(q, kq, vq, cu, lens, tables, 0.25, None, *targs, None, None, None, None, None,
                                      new, new)
    with pytest.raises(ValueError, match=r"\[T, H_kv, D\]"):
        tq.paged_attention_turboquant(q, kq, vq, cu, lens, tables, 0.25, None, *targs, rk, rv, pos,
                                      torch.tensor([0, 1]), None, new[:1], new[:1])
