"""The one-launch TurboQuant cache write (anna_xpu_kernels.turboquant_write) against the torch reference, on the CPU
through Triton's interpreter: norms within float32 rounding, every code and sign bit equal except where the
reference's rotated coordinate lies within float32 rounding of a decision boundary (or its projection of zero)."""

import functools

import pytest
import torch
from anna_core.kernels.reference import turboquant as ref

from tests.xpu_kernels._interp import require_triton_interpreter

require_triton_interpreter()

from anna_xpu_kernels import turboquant_write as tw  # noqa: E402

from tests.xpu_kernels._launches import LaunchCounter  # noqa: E402
from tests.xpu_kernels._turboquant_data import filled as _filled  # noqa: E402

TIE = 1e-6
"""How near a decision boundary (in the unit rotated basis, whose coordinates are about D^-1/2) a reference
coordinate may take the other code: float32 rounding of the norm and the D-term dot stays well below it here."""


def _fields(rows, d, bits, key):
    """``(norms [N, 1 or 2], codes [N, D], signs [N, D] or None)`` of quantized rows ``[N, row_bytes]``."""
    norms = 2 if key else 1
    code_bits = bits - 1 if key else bits
    f = rows[:, :4 * norms].contiguous().view(torch.float32)
    codes = ref.unpack_planes(rows[:, 4 * norms:4 * norms + code_bits * d // 8], code_bits, d)
    signs = ref.unpack_planes(rows[:, 4 * norms + code_bits * d // 8:4 * norms + bits * d // 8], 1, d) if key else None
    return f, codes, signs


def _near_boundary(x, rotation, centroids):
    """``[N, D]``: where the reference's unit rotated coordinate is within TIE of a boundary between centroids."""
    _, y = ref._unit_rotated(x, rotation)
    bounds = (centroids[1:] + centroids[:-1]) / 2
    return ((y[..., None] - bounds).abs() < TIE).any(-1)


def _check_write(bits, d, key_qjl, n, h_kv, write):
    """``write(k, v, k_cache, v_cache, slots, *tables)`` of ``n`` tokens of ``h_kv`` heads (bfloat16) against the
    reference (module docstring); the cache's other slots stay untouched."""
    k, v, kc, vc, slots, tables = _filled(bits, d, 3, 4, h_kv, seed=bits + d, key_qjl=key_qjl)
    rotation, qjl, kcent, vcent = tables
    k, v = k[:n].bfloat16(), v[:n].bfloat16()
    kc2, vc2 = kc.clone(), vc.clone()
    ref.turboquant_cache_write(k, v, kc, vc, slots[:n], *tables)
    write(k, v, kc2, vc2, slots[:n], *tables)
    rows = h_kv * n
    for a, b in ((kc, kc2), (vc, vc2)):  # other slots untouched
        assert torch.equal(a.view(-1, h_kv, a.shape[-1])[slots[n:]], b.view(-1, h_kv, b.shape[-1])[slots[n:]])
    for cache, got_cache, x, cent, key in ((kc, kc2, k, kcent, key_qjl), (vc, vc2, v, vcent, False)):
        want = _fields(cache.view(-1, h_kv, cache.shape[-1])[slots[:n]].view(rows, -1), d, bits, key)
        got = _fields(got_cache.view(-1, h_kv, cache.shape[-1])[slots[:n]].view(rows, -1), d, bits, key)
        torch.testing.assert_close(got[0], want[0], rtol=2e-6, atol=0)
        tie = _near_boundary(x.reshape(rows, d), rotation, cent)
        assert torch.equal(got[1][~tie], want[1][~tie])
        assert tie.float().mean() < 1e-3  # the exemption covers few coordinates
        if key:
            y = ref._unit_rotated(x.reshape(rows, d), rotation)[1]
            r = y - cent[ref._nearest(y, cent)]
            zero = (r @ qjl.T).abs() < TIE * r.norm(dim=-1, keepdim=True)
            assert torch.equal(got[2][~zero], want[2][~zero])


@pytest.mark.parametrize("bits,d,key_qjl", [(4, 64, True), (3, 40, True), (2, 16, True), (3, 32, False),
                                            (4, 512, True)])
def test_the_write_matches_the_reference(bits, d, key_qjl):
    # 9 tokens of 2 heads: 18 rows, a full program of 16 and a partial one
    _check_write(bits, d, key_qjl, 9, 2, tw.turboquant_cache_write)


@pytest.mark.parametrize("bits,d,key_qjl", [(4, 256, True), (3, 256, True), (2, 256, True), (4, 256, False),
                                            (4, 64, True), (3, 128, True), (2, 128, False), (3, 40, True),
                                            (2, 16, True), (4, 512, True), (3, 512, False)])
def test_the_columns_write_matches_the_reference(bits, d, key_qjl):
    """``columns`` (a program per 16 rows, 64-column chunk and keys / values; the QJL signs summed by the last chunk
    to arrive) equals the reference as ``chain`` does: 2 / 3 / 4 bits, with and without QJL, head dims 16 to 512
    (40: one chunk of 64, masked), 18 rows (a partial row block) over 3 KV heads."""
    write = functools.partial(tw.write_with, "columns")
    _check_write(bits, d, key_qjl, 6, 3, write)


@pytest.mark.parametrize("n,h_kv,d,block_o", [(1, 1, 256, 64), (11, 3, 128, 32), (7, 4, 128, 16)])
def test_the_columns_write_at_other_rows_and_chunks(n, h_kv, d, block_o):
    """One row (a lone partial row block), 33 and 28 rows (three / two row blocks, each with its own arrival counter)
    in 4 and 8 chunks."""
    write = functools.partial(tw.write_with, "columns", block_o=block_o)
    _check_write(4, d, True, n, h_kv, write)


def test_the_columns_write_equals_the_chain_but_for_the_sign_sums():
    """Both launches compute the norms and each 64-column chunk of ``y`` with the same products, so their norms and
    codes are the same bits; ``S r`` and ``gamma`` sum the same products in another order (signs may flip only at a
    projection of zero)."""
    k, v, kc, vc, slots, tables = _filled(3, 128, 3, 4, 2, seed=5)
    k, v = k[:9].bfloat16(), v[:9].bfloat16()
    kc2, vc2 = kc.clone(), vc.clone()
    tw.write_with("chain", k, v, kc, vc, slots[:9], *tables)
    tw.write_with("columns", k, v, kc2, vc2, slots[:9], *tables)
    assert torch.equal(vc, vc2)
    rows, rows2 = kc.view(-1, kc.shape[-1]), kc2.view(-1, kc.shape[-1])
    code_end = 8 + 2 * 128 // 8
    assert torch.equal(rows[:, :4], rows2[:, :4]) and torch.equal(rows[:, 8:code_end], rows2[:, 8:code_end])
    torch.testing.assert_close(rows[:, 4:8].contiguous().view(torch.float32),
                               rows2[:, 4:8].contiguous().view(torch.float32), rtol=1e-6, atol=0)
    assert (rows[:, code_end:] != rows2[:, code_end:]).float().mean() < 1e-2


def test_the_columns_write_reads_nothing_on_the_host():
    """Graph-capturable: no ``.item()``, no shape from tensor values (its workspace and counters come from the row
    count)."""
    from anna_core.testing.host_reads import NoHostReads

    k, v, kc, vc, slots, tables = _filled(4, 64, 3, 4, 2, seed=2)
    k, v = k[:5].bfloat16(), v[:5].bfloat16()
    with torch.inference_mode(), NoHostReads():
        tw.write_with("columns", k, v, kc, vc, slots[:5], *tables)


def test_the_columns_write_leaves_its_counters_at_zero():
    k, v, kc, vc, slots, tables = _filled(3, 64, 3, 4, 4, seed=1)
    tw.write_with("columns", k[:9].bfloat16(), v[:9].bfloat16(), kc, vc, slots[:9], *tables)  # 36 rows: 3 blocks
    counters = tw.write_with.counters.get(k.device, 3)
    assert counters.numel() >= 3 and not counters.any()


def test_the_write_path_follows_the_switch(monkeypatch):
    from anna_xpu_kernels._env import TURBOQUANT_WRITE_ENV, turboquant_write_requested

    monkeypatch.delenv(TURBOQUANT_WRITE_ENV, raising=False)
    assert turboquant_write_requested() == "auto"
    assert tw.write_path("auto", 128) == ("columns" if 128 <= tw.COLUMNS_MAX_ROWS else "chain")
    assert tw.write_path("auto", tw.COLUMNS_MAX_ROWS + 1) == "chain"
    assert tw.write_path("chain", 1) == "chain" and tw.write_path("columns", 10 ** 6) == "columns"
    monkeypatch.setenv(TURBOQUANT_WRITE_ENV, " Columns ")
    assert turboquant_write_requested() == "columns"
    k, v, kc, vc, slots, tables = _filled(4, 64, 3, 4, 2, seed=0)
    k, v = k[:5].bfloat16(), v[:5].bfloat16()
    tw.turboquant_cache_write(k, v, kc, vc, slots[:5], *tables)  # the first call allocates the counter pool
    with LaunchCounter() as c:
        tw.turboquant_cache_write(k, v, kc, vc, slots[:5], *tables)
    assert dict(c.launches) == {"triton:_tq_write_columns_kernel": 1}
    monkeypatch.setenv(TURBOQUANT_WRITE_ENV, "colums")
    with pytest.raises(ValueError, match="ANNA_TURBOQUANT_WRITE must be one of"):
        tw.turboquant_cache_write(k, v, kc, vc, slots[:5], *tables)
    with pytest.raises(ValueError, match="write path must be one of"):
        tw.write_with("rows", k, v, kc, vc, slots[:5], *tables)


def test_the_write_is_one_launch(monkeypatch):
    monkeypatch.delenv("ANNA_TURBOQUANT_WRITE", raising=False)
    k, v, kc, vc, slots, tables = _filled(4, 64, 3, 4, 2, seed=0)
    k, v = k[:5].bfloat16(), v[:5].bfloat16()
    with LaunchCounter() as c:
        tw.turboquant_cache_write(k, v, kc, vc, slots[:5], *tables)
    assert dict(c.launches) == {"triton:_tq_write_kernel": 1}
