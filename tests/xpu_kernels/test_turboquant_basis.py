"""The TurboQuant attention's changes of basis (anna_xpu_kernels.turboquant_basis) against torch, on the CPU through
Triton's interpreter, and the launches one attention call makes."""

import pytest
import torch
from anna_core.kv_quant.layout import TurboQuantLayout
from anna_core.kv_quant.tables import TurboQuantTables

from tests.xpu_kernels._interp import require_triton_interpreter

require_triton_interpreter()

from anna_xpu_kernels import turboquant as tq  # noqa: E402
from anna_xpu_kernels import turboquant_basis as basis  # noqa: E402

from tests.xpu_kernels._launches import LaunchCounter  # noqa: E402
from tests.xpu_kernels._turboquant_data import batch as _batch  # noqa: E402


def _tables(d):
    return TurboQuantTables.build(TurboQuantLayout(4), d, "cpu")


@pytest.mark.parametrize("d,with_qjl", [(40, True), (64, False), (160, True)])
def test_query_projections_match_torch(d, with_qjl):
    """17 rows (a partial block of 16), strided heads, a head dim that is no power of two (40, 160)."""
    t = _tables(d)
    q = torch.randn(17, 6, d, generator=torch.Generator().manual_seed(d))[:, ::2]  # [T, 3, D], head stride 2D
    q_r, q_s = basis.rotate_queries(q, t.rotation, t.qjl, with_qjl)
    want_r = q @ t.rotation.T
    torch.testing.assert_close(q_r, want_r, rtol=1e-5, atol=1e-5)
    assert q_r.is_contiguous() and q_s.is_contiguous()
    if with_qjl:
        torch.testing.assert_close(q_s, want_r @ t.qjl.T, rtol=1e-5, atol=1e-4)
    else:
        assert q_s is q_r


@pytest.mark.parametrize("splits,dtype", [(None, torch.float32), (3, torch.float32), (5, torch.bfloat16)])
def test_merge_and_rotation_back_match_torch(splits, dtype):
    d, t_, h = 48, 7, 3
    g = torch.Generator().manual_seed(7)
    rot = _tables(d).rotation
    o = torch.randn(t_, h, d, generator=g)
    if splits is None:
        want = o @ rot
        ws = None
    else:
        m = torch.randn(splits, t_, h, generator=g) * 3
        m[1, 0, 0] = float("-inf")  # a split that saw no key
        m[:, 1, 2] = float("-inf")  # a row no split saw
        lsum = torch.rand(splits, t_, h, generator=g) * torch.isfinite(m)
        acc = torch.randn(splits, t_, h, 64, generator=g)  # rows padded to 64 as the kernel's workspace
        w = torch.where(torch.isfinite(m), torch.exp2(m - torch.where(torch.isfinite(m.amax(0)), m.amax(0), 0.0)), 0.0)
        total = (w * lsum).sum(0)
        merged = (w[..., None] * acc[..., :d]).sum(0) / torch.where(total > 0, total, 1.0)[..., None]
        want = merged @ rot
        ws = (m, lsum, acc)
    got = basis.merge_and_rotate_back(o, ws, splits or 1, rot, dtype)
    assert got.dtype == dtype
    torch.testing.assert_close(got, want.to(dtype), **({"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {}))


@pytest.mark.parametrize("splits", [None, 2])
def test_attention_is_three_launches(splits):
    """The query projections, the attention kernel and the merge with the rotation back (torch took three more: the
    cast to float32, the two projections' matmuls; the rotation back and the cast; seven with splits)."""
    args = _batch(4, 64, 4, 2)
    dec = (args[0][:3].bfloat16(), *args[1:3], torch.arange(4, dtype=torch.int32), *args[4:])
    with LaunchCounter() as c:
        tq.paged_attention_turboquant(*dec, num_splits=splits)
    assert dict(c.launches) == {"triton:_tq_query_kernel": 1, "triton:_tq_attention_kernel": 1,
                                "triton:_tq_output_kernel": 1}
