"""The TurboQuant attention's changes of basis (anna_xpu_kernels.turboquant_basis) against torch, on the CPU through
Triton's interpreter, their launch settings, and the launches one attention call makes."""

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


def _rotation(d, seed):
    """A random orthogonal ``[D, D]`` float32 (the tables' own rotation takes seconds to build at 512)."""
    g = torch.Generator().manual_seed(seed)
    return torch.linalg.qr(torch.randn(d, d, generator=g, dtype=torch.float64))[0].float()


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


@pytest.mark.parametrize("d,tokens,heads,width,dtype", [
    (64, 3, 7, 16, torch.float32), (256, 5, 4, 32, torch.bfloat16), (512, 1, 8, 64, torch.float32),
    (512, 3, 6, 16, torch.bfloat16)])
def test_query_projections_over_column_chunks(d, tokens, heads, width, dtype):
    """Row counts not a multiple of 16 (21, 20, 8, 18 rows) over several column chunks (every chunk width, the
    defaults' reduction slices), float32 and bf16 queries (the interpreter's products are exact: the tolerance is
    float32 summation order)."""
    g = torch.Generator().manual_seed(d + tokens)
    rot, qjl = _rotation(d, 1), torch.randn(d, d, generator=g)
    q = torch.randn(tokens, heads, d, generator=g).to(dtype)
    launch = basis.LAUNCHES[width]._replace(block_k=min(basis.LAUNCHES[width].block_k, d))
    q_r, q_s = basis.rotate_queries(q, rot, qjl, True, launch)
    want_r = q.double() @ rot.double().T
    torch.testing.assert_close(q_r.double(), want_r, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(q_s.double(), q_r.double() @ qjl.double().T, rtol=1e-5, atol=1e-3)


def _splits_workspace(splits, t_, h, width, g):
    """``(m, l, acc)`` of ``splits`` splits (one empty split of row 0, no split of row (1, last head)) and the
    merged rows they give (torch, float64)."""
    m = torch.randn(splits, t_, h, generator=g) * 3
    m[min(1, splits - 1), 0, 0] = float("-inf")  # a split that saw no key
    m[:, min(1, t_ - 1), h - 1] = float("-inf")  # a row no split saw
    lsum = torch.rand(splits, t_, h, generator=g) * torch.isfinite(m)
    acc = torch.randn(splits, t_, h, width, generator=g)
    md = m.double()
    top = md.amax(0)
    w = torch.where(torch.isfinite(md), torch.exp2(md - torch.where(torch.isfinite(top), top, 0.0)), 0.0)
    total = (w * lsum.double()).sum(0)
    merged = (w[..., None] * acc.double()).sum(0) / torch.where(total > 0, total, 1.0)[..., None]
    return (m, lsum, acc), merged


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
        ws, merged = _splits_workspace(splits, t_, h, 64, g)  # rows padded to 64 as the kernel's workspace
        want = merged[..., :d].float() @ rot
    got = basis.merge_and_rotate_back(o, ws, splits or 1, rot, dtype)
    assert got.dtype == dtype
    torch.testing.assert_close(got, want.to(dtype), **({"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {}))


@pytest.mark.parametrize("d,tokens,heads,splits,width,dtype", [
    (64, 3, 7, None, 16, torch.float32),   # 21 rows, 4 column chunks, no splits
    (64, 2, 5, 1, 32, torch.float32),      # a workspace of one split
    (256, 5, 4, 3, 32, torch.bfloat16),    # 20 rows, 8 chunks
    (256, 2, 3, 8, 64, torch.float32),     # 8 splits: one merge step per slice
    (512, 1, 8, 11, 16, torch.float32),    # 11 splits: two merge steps per slice (8 + 3), 32 chunks
    (512, 2, 9, 2, 64, torch.bfloat16),    # 18 rows, 8 chunks
])
def test_merge_and_rotation_back_over_column_chunks(d, tokens, heads, splits, width, dtype):
    """Every column chunk's program merges its rows' splits itself, slice by slice (row counts not a multiple of 16,
    1 to 11 splits, one empty split and one row no split saw), float32 (exact products under the interpreter) and
    bf16 results."""
    g = torch.Generator().manual_seed(d + (splits or 0))
    rot = _rotation(d, 2)
    o = torch.randn(tokens, heads, d, generator=g)
    if splits is None:
        ws, merged = None, o.double()
    else:
        ws, merged = _splits_workspace(splits, tokens, heads, d, g)
        o = torch.full_like(o, float("nan"))  # not read with a workspace
    launch = basis.LAUNCHES[width]._replace(block_k=min(basis.LAUNCHES[width].block_k, d))
    got = basis.merge_and_rotate_back(o, ws, splits or 1, rot, dtype, launch)
    want = merged @ rot.double()
    assert got.dtype == dtype and got.shape == (tokens, heads, d)
    if dtype == torch.float32:
        torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)
    else:
        torch.testing.assert_close(got, want.to(dtype))


@pytest.mark.parametrize("rows,dim,want", [
    (512, 256, (64, 32, 8)),   # the 9B at batch 32: 32 row blocks x 4 chunks
    (256, 512, (64, 32, 8)),   # E4B global at batch 32: 16 x 8
    (256, 256, (32, 64, 8)),   # E4B sliding at batch 32: 16 x 8
    (16, 256, (16, 128, 8)),   # the 9B at batch 1: 1 x 16
    (8, 512, (16, 128, 8)),    # E4B global at batch 1: 1 x 32
    (8192, 64, (64, 32, 8)),   # a prefill chunk
    (3, 40, (16, 64, 8)),      # a head dim of 40: slices capped at its padded 64
])
def test_launch_takes_narrower_chunks_for_fewer_rows(rows, dim, want):
    assert tuple(basis.basis_launch(rows, dim)) == want


def test_launch_settings_are_checked():
    q = torch.randn(2, 2, 64)
    rot = torch.eye(64)
    with pytest.raises(ValueError, match="block_o must be a power of two from 16"):
        basis.rotate_queries(q, rot, rot, False, basis.BasisLaunch(24, 32, 4))
    with pytest.raises(ValueError, match="block_k must be a power of two from 16"):
        basis.merge_and_rotate_back(q, None, 1, rot, torch.float32, basis.BasisLaunch(16, 8, 4))


@pytest.mark.parametrize("splits,key_qjl", [(None, True), (2, True), (2, False)])
def test_attention_launches(splits, key_qjl):
    """The query projections (a second launch for QJL keys' ``q_s``), the attention kernel and the merge with the
    rotation back (torch took three more: the cast to float32, the two projections' matmuls; the rotation back and
    the cast; seven with splits)."""
    args = _batch(4, 64, 4, 2, key_qjl=key_qjl)
    dec = (args[0][:3].bfloat16(), *args[1:3], torch.arange(4, dtype=torch.int32), *args[4:])
    with LaunchCounter() as c:
        tq.paged_attention_turboquant(*dec, num_splits=splits)
    assert dict(c.launches) == {"triton:_tq_query_kernel": 2 if key_qjl else 1, "triton:_tq_attention_kernel": 1,
                                "triton:_tq_output_kernel": 1}
