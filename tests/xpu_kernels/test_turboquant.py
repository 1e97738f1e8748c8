"""TurboQuant KV cache kernels (anna_xpu_kernels.turboquant) against the torch reference, on the CPU through Triton's
interpreter: attention (decode, prefill over a cached prefix, windows, forced splits, GQA, a head dim that is no
power of two, two column chunks, a head dim of 512) within float32 rounding (the write:
tests/xpu_kernels/test_turboquant_write.py)."""

import pytest
import torch
from anna_core.kernels.reference import turboquant as ref
from anna_core.testing.turboquant_cases import shared_block_batch

from tests.xpu_kernels._interp import require_triton_interpreter

require_triton_interpreter()

from anna_xpu_kernels import turboquant as tq  # noqa: E402

from tests.xpu_kernels._turboquant_data import batch as _batch  # noqa: E402
from tests.xpu_kernels._turboquant_data import filled as _filled  # noqa: E402


@pytest.mark.parametrize("bits,d,h_q,h_kv,window,splits,key_qjl,lookup", [
    (4, 64, 4, 2, None, None, True, "gather"), (3, 64, 4, 1, 7, None, True, "select"),
    (4, 40, 2, 2, None, 3, True, "shuffle"), (2, 16, 8, 2, 5, 2, True, "select"), (3, 32, 4, 2, None, 2, False, "gather"),
    (2, 32, 4, 2, None, None, True, "shuffle")])  # 2- and 4-entry codebooks: the shuffle takes the selects
def test_attention_matches_the_reference(bits, d, h_q, h_kv, window, splits, key_qjl, lookup):
    bs, seq_lens, q_lens = 4, [13, 6, 21], [1, 6, 5]  # a decode, a fresh prompt, a chunk over a cached prefix
    k, v, kc, vc, slots, tables = _filled(bits, d, 16, bs, h_kv, seed=d, key_qjl=key_qjl)
    ref.turboquant_cache_write(k, v, kc, vc, torch.arange(16 * bs), *tables)
    g = torch.Generator().manual_seed(1)
    order = torch.randperm(16, generator=g)
    block_tables = torch.stack([order[:6], order[6:12], order[10:16]]).to(torch.int32)
    q = torch.randn(sum(q_lens), h_q, d, generator=g)
    cu = torch.tensor([0, 1, 7, 12], dtype=torch.int32)
    args = (q, kc, vc, cu, torch.tensor(seq_lens, dtype=torch.int32), block_tables, d ** -0.5, window, *tables)
    want = ref.paged_attention_turboquant(*args)
    exact = tq.TurboQuantTuning(dot="ieee", lookup=lookup)
    torch.testing.assert_close(tq.paged_attention_turboquant(*args, num_splits=splits, tuning=exact), want,
                               rtol=2e-5, atol=2e-5)
    # a decode-only batch takes the DECODE path
    dec = (q[:3], kc, vc, torch.arange(4, dtype=torch.int32), args[4], block_tables, d ** -0.5, window, *tables)
    torch.testing.assert_close(tq.paged_attention_turboquant(*dec, num_splits=splits, tuning=exact),
                               ref.paged_attention_turboquant(*dec), rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("splits", [None, 2])
def test_attention_reads_the_residual_ring_as_the_reference(splits):
    """With a ring, with a ring and a padded prefill's real length (``valid_lens``: the ring's window ends there,
    not at ``seq_lens``), and with the step's own rows (``new_k`` / ``new_v``: the per-query window)."""
    from anna_core.kernels.examples import paged_attention_turboquant as examples

    ringed = [e for e in examples("cpu", torch.float32) if len(e.args) >= 16]
    assert [len(e.args) for e in ringed] == [16, 17, 19, 19]  # 19: the per-query window (new_k, new_v)
    for ex in ringed:
        torch.testing.assert_close(tq.paged_attention_turboquant(*ex.args, num_splits=splits,
                                                                 tuning=tq.TurboQuantTuning(dot="ieee")),
                                   ref.paged_attention_turboquant(*ex.args), rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("d_chunks,window", [(1, None), (2, None), (1, 5)])
def test_padding_rows_stay_out_of_the_ring_window_as_in_the_reference(d_chunks, window):
    """A padded one-sequence prefill (12 real rows of a 20-row bucket) beside a decode: the ring (8 positions) holds
    the prompt's positions 4..11 and a stale 16 (a padding position, never read from the ring); its real rows equal
    the unpadded 12-token prompt's, and everything the reference's (the ring's tiles start at valid_len - R)."""
    q, kc, vc, _, _, tables, scale, _, *quant = _batch(4, 64, 4, 2, seed=3)
    g = torch.Generator().manual_seed(4)
    q = torch.randn(21, 4, 64, generator=g)
    cu, lens, valid = (torch.tensor(x, dtype=torch.int32) for x in ([0, 1, 21], [13, 20], [13, 12]))
    rk, rv = torch.randn(2, 3, 8, 2, 64, generator=g)
    pos = torch.tensor([[8, 9, 10, 11, 12, 5, 6, 7], [16, 9, 10, 11, 4, 5, 6, 7], [-1] * 8], dtype=torch.int32)
    slots = torch.tensor([0, 1])
    args = (q, kc, vc, cu, lens, tables[:2], scale, window, *quant, rk, rv, pos, slots, valid)
    exact = tq.TurboQuantTuning(dot="ieee", d_chunks=d_chunks)
    want = ref.paged_attention_turboquant(*args)
    for splits in (None, 3):
        torch.testing.assert_close(tq.paged_attention_turboquant(*args, num_splits=splits, tuning=exact), want,
                                   rtol=2e-5, atol=2e-5)
    alone = tq.paged_attention_turboquant(q[1:13], kc, vc, torch.tensor([0, 12], dtype=torch.int32), valid[1:],
                                          tables[1:2], scale, window, *quant, rk, rv, pos, slots[1:], tuning=exact)
    torch.testing.assert_close(want[1:13], alone, rtol=2e-5, atol=2e-5)
    overstated = tq.paged_attention_turboquant(*args[:-1], tuning=exact)  # the window from seq_lens: 12..19
    assert (overstated[1:13] - want[1:13]).abs().max() > 1e-3


@pytest.mark.parametrize("bits,d,key_qjl", [(4, 64, True), (3, 40, True), (3, 32, False)])
def test_bf16_dots_add_a_small_fraction_of_the_quantization_error(bits, d, key_qjl):
    """A bf16 query takes bf16 dot operands (tensor cores on a GPU; the interpreter rounds the operands toward zero,
    unit roundoff 2^-7, twice a GPU's; both outputs are rounded to bf16). Bound, from measurement (0.02-0.12 of it
    on these cases): the kernel's distance to the reference is at most a fifth of the reference's distance to
    unquantized attention."""
    from anna_core.kernels.reference.paged_attention import paged_attention

    bs, h_q, h_kv = 4, 4, 2
    k, v, kc, vc, slots, tables = _filled(bits, d, 16, bs, h_kv, seed=d, key_qjl=key_qjl)
    ref.turboquant_cache_write(k, v, kc, vc, torch.arange(16 * bs), *tables)
    g = torch.Generator().manual_seed(1)
    block_tables = torch.randperm(16, generator=g)[:15].view(3, 5).to(torch.int32)
    lens = torch.tensor([13, 20, 17], dtype=torch.int32)
    k_blocks, v_blocks = k.view(16, bs, h_kv, d).bfloat16(), v.view(16, bs, h_kv, d).bfloat16()
    for cu in (torch.tensor([0, 1, 2, 3]), torch.tensor([0, 1, 7, 12])):  # decode, then a prefill over a prefix
        cu = cu.to(torch.int32)
        q = torch.randn(int(cu[-1]), h_q, d, generator=g).bfloat16()
        args = (q, kc, vc, cu, lens, block_tables, d ** -0.5, None, *tables)
        want = ref.paged_attention_turboquant(*args).float()
        quant_err = (want - paged_attention(q, k_blocks, v_blocks, cu, lens, block_tables, d ** -0.5, None)
                     .float()).abs().max()
        err = (tq.paged_attention_turboquant(*args).float() - want).abs().max()
        assert 0 < err <= 0.2 * quant_err, (err, quant_err)


@pytest.mark.parametrize("bits,d,key_qjl,ring", [(4, 64, True, False), (3, 40, True, True), (3, 64, False, True)])
def test_two_column_chunks_match_the_reference(bits, d, key_qjl, ring):
    """The head dim in two column chunks (the default above 256, forced here on small heads; 40: a second chunk of
    one byte per plane) gives the reference's attention, with and without a residual ring."""
    args = _batch(bits, d, 4, 2, key_qjl=key_qjl, ring=ring)
    want = ref.paged_attention_turboquant(*args)
    for splits in (None, 2):
        got = tq.paged_attention_turboquant(*args, num_splits=splits, tuning=tq.TurboQuantTuning(dot="ieee",
                                                                                                 d_chunks=2))
        torch.testing.assert_close(got, want, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("bits", [4, 3])
def test_head_dim_512_matches_the_reference(bits):
    """Gemma 4's global layers: head dim 512, 8 query heads on 2 KV heads, the default chunking and lookup (decode
    and prefill, split and not), float32 and bf16 dots."""
    args = _batch(bits, 512, 8, 2, seed=bits)
    want = ref.paged_attention_turboquant(*args)
    torch.testing.assert_close(tq.paged_attention_turboquant(*args, tuning=tq.TurboQuantTuning(dot="ieee")), want,
                               rtol=2e-5, atol=2e-5)
    dec = (args[0][:3], *args[1:3], torch.arange(4, dtype=torch.int32), *args[4:])
    torch.testing.assert_close(tq.paged_attention_turboquant(*dec, num_splits=2,
                                                             tuning=tq.TurboQuantTuning(dot="ieee")),
                               ref.paged_attention_turboquant(*dec), rtol=2e-5, atol=2e-5)


def test_column_chunks_need_16_wide_chunks():
    args = _batch(4, 16, 2, 1)
    with pytest.raises(ValueError, match="d_chunks"):
        tq.paged_attention_turboquant(*args, tuning=tq.TurboQuantTuning(d_chunks=2))
    with pytest.raises(ValueError, match="d_chunks"):
        tq.TurboQuantTuning(d_chunks=4)


@pytest.mark.parametrize("d_chunks", [1, 2])
def test_a_ring_under_a_sliding_window_matches_the_reference(d_chunks):
    """The ring's tiles (from seq_len - R on: the second key loop) with a window that starts inside them."""
    args = list(_batch(4, 64, 4, 2, ring=True, seed=5))
    args[7] = 3  # sliding_window: the decode sees positions 10..12, the ring holds 9..12 of sequence 0
    want = ref.paged_attention_turboquant(*args)
    for splits in (None, 3):
        got = tq.paged_attention_turboquant(*args, num_splits=splits,
                                            tuning=tq.TurboQuantTuning(dot="ieee", d_chunks=d_chunks))
        torch.testing.assert_close(got, want, rtol=2e-5, atol=2e-5)


def test_a_step_over_rings_reads_nothing_on_the_host():
    """What a captured decode step, a prefill over a cached prefix and a captured padded prefill run in a quantized
    group with a residual ring: the write, each sequence's real length (:func:`anna_core.layers.padding.valid_lens`),
    the ring's write (:func:`anna_core.kv_quant.residual.write_residual`) and the attention, under
    :class:`~anna_core.testing.host_reads.NoHostReads` (no ``.item()``, no value-dependent shapes), making no tensor
    from host data; the attention equals the reference's."""
    from anna_core.kv_quant.residual import ResidualRing, write_residual
    from anna_core.layers.padding import valid_lens
    from anna_core.testing.host_reads import NoHostReads, OpCounts
    from anna_xpu_kernels import turboquant_write as tw

    q, kc, vc, cu, lens, tables, scale, window, *quant = _batch(4, 64, 4, 2)
    rk, rv, pos, slots = _batch(4, 64, 4, 2, ring=True)[12:]
    ring = ResidualRing(k=[rk.clone()], v=[rv.clone()], pos=pos.clone(), length=4)
    k, v = torch.randn(2, q.shape[0], 2, 64, generator=torch.Generator().manual_seed(9))
    decode = (q[:3], kc, vc, torch.arange(4, dtype=torch.int32), lens, tables, scale, window)
    prefill = (q, kc, vc, cu, lens, tables, scale, window)  # a decode, a fresh prompt, a chunk over a cached prefix
    # one prompt of 7 real rows padded to a bucket of 12 (ForwardBatch.num_valid)
    padded = (q[:12], kc, vc, torch.tensor([0, 12], dtype=torch.int32),
              torch.tensor([12], dtype=torch.int32), tables[1:2], scale, window)
    for args, n, ring_slots, num_valid in ((decode, 3, slots, None), (prefill, q.shape[0], slots, None),
                                           (padded, 12, slots[1:2], torch.tensor([7]))):
        mapping = (tables[:, 1].long() * 4)[:1].expand(n)  # any rows: the write's output is not compared here
        want = ref.paged_attention_turboquant(*args, *quant, ring.k[0], ring.v[0], ring.pos, ring_slots,
                                              valid_lens(args[4], n, num_valid))
        with torch.inference_mode(), NoHostReads(), OpCounts() as counts:
            tw.turboquant_cache_write(k[:n], v[:n], kc.clone(), vc.clone(), mapping, *quant)
            valid = valid_lens(args[4], n, num_valid)
            write_residual(k[:n], v[:n], ResidualRing(k=[rk.clone()], v=[rv.clone()], pos=pos.clone(), length=4), 0,
                           quant[0], ring_slots, args[3], args[4], valid)
            got = tq.paged_attention_turboquant(*args, *quant, ring.k[0], ring.v[0], ring.pos, ring_slots, valid,
                                                tuning=tq.TurboQuantTuning(dot="ieee"))
        assert counts.syncs == 0, counts.ops
        torch.testing.assert_close(got, want, rtol=2e-5, atol=2e-5)


def test_a_shared_block_takes_the_ring_rows_of_its_own_reader_only():
    """Two decodes sharing block 1 (a prefix hit), the first one's ring holding positions in it: each output equals
    the sequence's alone (the kernel reads a sequence's own ring slot), and the reference's."""
    q, kq, vq, lens, tables, args, ring = shared_block_batch()
    cu = torch.arange(3, dtype=torch.int32)
    exact = tq.TurboQuantTuning(dot="ieee")
    both = tq.paged_attention_turboquant(q, kq, vq, cu, lens, tables, 0.25, None, *args, *ring, torch.tensor([0, 1]),
                                         tuning=exact)
    torch.testing.assert_close(both, ref.paged_attention_turboquant(q, kq, vq, cu, lens, tables, 0.25, None, *args,
                                                                    *ring, torch.tensor([0, 1])), rtol=2e-5, atol=2e-5)
    for i in range(2):
        alone = tq.paged_attention_turboquant(q[i:i + 1], kq, vq, cu[:2], lens[i:i + 1], tables[i:i + 1], 0.25, None,
                                              *args, *ring, torch.tensor([i]), tuning=exact)
        torch.testing.assert_close(both[i:i + 1], alone, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("d,d_chunks,window,splits", [(32, 1, None, None), (64, 2, 5, 2)])
def test_a_prompt_prefilled_in_chunks_over_a_ring_matches_the_reference(d, d_chunks, window, splits):
    """The per-query window on the kernel's multi-query path: a 20-token prompt over a ring of 6 prefilled whole and
    in chunks shorter (4) and longer (9) than the ring, each chunk against the reference (the chunks that read the
    ring as it stood before them, and their own rows); the outputs do not depend on the chunking."""
    from anna_core.testing.turboquant_cases import ring_prefill

    def attend(*args):
        return tq.paged_attention_turboquant(*args, num_splits=splits,
                                             tuning=tq.TurboQuantTuning(dot="ieee", d_chunks=d_chunks))

    whole = ring_prefill(ref.paged_attention_turboquant, 20, window=window, d=d)[0]
    for chunk in (20, 4, 9):
        torch.testing.assert_close(ring_prefill(attend, chunk, window=window, d=d)[0], whole, rtol=2e-5, atol=2e-5)
