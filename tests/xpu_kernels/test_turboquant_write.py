"""The one-launch TurboQuant cache write (anna_xpu_kernels.turboquant_write) against the torch reference, on the CPU
through Triton's interpreter: norms within float32 rounding, every code and sign bit equal except where the
reference's rotated coordinate lies within float32 rounding of a decision boundary (or its projection of zero)."""

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


@pytest.mark.parametrize("bits,d,key_qjl", [(4, 64, True), (3, 40, True), (2, 16, True), (3, 32, False),
                                            (4, 512, True)])
def test_the_write_matches_the_reference(bits, d, key_qjl):
    k, v, kc, vc, slots, tables = _filled(bits, d, 3, 4, 2, seed=bits, key_qjl=key_qjl)
    rotation, qjl, kcent, vcent = tables
    n = 9  # 18 rows: a full program of 16 and a partial one
    k, v = k[:n].bfloat16(), v[:n].bfloat16()
    kc2, vc2 = kc.clone(), vc.clone()
    ref.turboquant_cache_write(k, v, kc, vc, slots[:n], *tables)
    tw.turboquant_cache_write(k, v, kc2, vc2, slots[:n], *tables)
    for a, b in ((kc, kc2), (vc, vc2)):  # other slots untouched
        assert torch.equal(a.view(-1, 2, a.shape[-1])[slots[n:]], b.view(-1, 2, b.shape[-1])[slots[n:]])
    for cache, got_cache, x, cent, key in ((kc, kc2, k, kcent, key_qjl), (vc, vc2, v, vcent, False)):
        want = _fields(cache.view(-1, 2, cache.shape[-1])[slots[:n]].view(2 * n, -1), d, bits, key)
        got = _fields(got_cache.view(-1, 2, cache.shape[-1])[slots[:n]].view(2 * n, -1), d, bits, key)
        torch.testing.assert_close(got[0], want[0], rtol=2e-6, atol=0)
        tie = _near_boundary(x.reshape(2 * n, d), rotation, cent)
        assert torch.equal(got[1][~tie], want[1][~tie])
        assert tie.float().mean() < 1e-3  # the exemption covers few coordinates
        if key:
            y = ref._unit_rotated(x.reshape(2 * n, d), rotation)[1]
            r = y - cent[ref._nearest(y, cent)]
            zero = (r @ qjl.T).abs() < TIE * r.norm(dim=-1, keepdim=True)
            assert torch.equal(got[2][~zero], want[2][~zero])


def test_the_write_is_one_launch():
    k, v, kc, vc, slots, tables = _filled(4, 64, 3, 4, 2, seed=0)
    k, v = k[:5].bfloat16(), v[:5].bfloat16()
    with LaunchCounter() as c:
        tw.turboquant_cache_write(k, v, kc, vc, slots[:5], *tables)
    assert dict(c.launches) == {"triton:_tq_write_kernel": 1}
