"""The one-launch gated DeltaNet prefill preparation (q / k L2 norms, v, g, beta) vs the torch ops of the
layer's unfused path, under Triton's interpreter."""

import pytest
import torch
import torch.nn.functional as F

from tests.xpu_kernels._interp import require_triton_interpreter, tol

require_triton_interpreter()

from anna_xpu_kernels.gdn_prefill_prep import block_tokens, gdn_prefill_prep

DTYPES = [torch.float32, torch.bfloat16]
G_TOL = {"atol": 1e-7, "rtol": 1e-5}  # g is float32 in both; only exp / log1p evaluation differs (a few ulps)


def _l2(x):
    """``anna_qwen35.gated_deltanet.l2_normalize``: float32 math, rounded to x's dtype."""
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).sum(-1, keepdim=True) + 1e-6)).to(x.dtype)


def _reference(qkv, a, b, neg_a, dt_bias, h_k, d_k, d_v):
    """The torch ops of ``GatedDeltaNet._mix`` after the prefill conv, beta rounded to qkv's dtype."""
    n, h_v = a.shape
    qk, v = torch.split(qkv, [2 * h_k * d_k, h_v * d_v], dim=-1)
    qk = _l2(qk.reshape(n, 2 * h_k, d_k))
    g = neg_a * F.softplus(a.float() + dt_bias.float())
    beta = torch.sigmoid(b.float()).to(qkv.dtype)
    return qk[:, :h_k], qk[:, h_k:], v.reshape(n, h_v, d_v), g, beta


def _inputs(gen, n, h_k, h_v, d_k, d_v, dtype):
    """qkv, a, b as column slices of one wider tensor (row strides > their widths), as in the model."""
    conv_dim = 2 * h_k * d_k + h_v * d_v
    merged = (torch.randn(n, conv_dim + 2 * h_v + 3, generator=gen) * 2).to(dtype)
    qkv, b, a = torch.split(merged[:, :-3], [conv_dim, h_v, h_v], dim=-1)
    a.mul_(8)  # softplus over both branches (x > 20 and x << 0) once dt_bias is added
    if n > 1:
        a[0, 0], a[1, -1] = 30.0, -40.0
    neg_a = -torch.rand(h_v, generator=gen) * 4 - 0.1
    dt_bias = torch.randn(h_v, generator=gen)
    return qkv, a, b, neg_a, dt_bias


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("n", [1, 5, 33])  # 33: three token blocks of 16, the last partial
@pytest.mark.parametrize("h_k,h_v,d_k,d_v", [(2, 4, 16, 16), (2, 6, 24, 20)])  # 3 v heads per k head, odd dims
def test_matches_the_unfused_ops(poison_outputs, dtype, n, h_k, h_v, d_k, d_v):
    gen = torch.Generator().manual_seed(n * 100 + d_k)
    qkv, a, b, neg_a, dt_bias = _inputs(gen, n, h_k, h_v, d_k, d_v, dtype)
    assert qkv.stride(0) > qkv.shape[1] and a.stride(0) > h_v and b.stride(0) > h_v  # strided views
    before = [t.clone() for t in (qkv, a, b)]
    got = gdn_prefill_prep(qkv, a, b, neg_a, dt_bias, h_k, d_k, d_v)
    want = _reference(qkv, a, b, neg_a, dt_bias, h_k, d_k, d_v)
    shapes = [(n, h_k, d_k), (n, h_k, d_k), (n, h_v, d_v), (n, h_v), (n, h_v)]
    for name, t, w, shape in zip(["q", "k", "v", "g", "beta"], got, want, shapes):
        assert t.shape == shape and t.dtype == w.dtype and t.is_contiguous(), name
        assert not t.isnan().any(), f"{name} has unwritten (NaN-poisoned) elements"
    q, k, v, g, beta = got
    assert g.dtype == torch.float32 and beta.dtype == dtype
    torch.testing.assert_close(q, want[0], **tol(dtype))
    torch.testing.assert_close(k, want[1], **tol(dtype))
    assert torch.equal(v, want[2])
    torch.testing.assert_close(g, want[3], **G_TOL)
    torch.testing.assert_close(beta, want[4], **tol(dtype))
    if n > 1:
        assert g[0, 0] == neg_a[0] * (a[0, 0].float() + dt_bias[0])  # above the threshold softplus is x
        assert 0 > g[1, -1] > -1e-15  # far below zero: tiny, not rounded to 0 or noise
    assert all(torch.equal(x, y) for x, y in zip((qkv, a, b), before))  # inputs are not written


def test_low_precision_dt_bias_and_small_heads(poison_outputs):
    gen = torch.Generator().manual_seed(7)
    qkv, a, b, neg_a, dt_bias = _inputs(gen, 9, 1, 2, 16, 16, torch.float32)
    qkv = qkv * 1e-3  # sum(x^2) ~ 6e-5: the 1e-6 eps shows in the norms
    dt_bias = dt_bias.bfloat16()
    q, k, _, g, _ = gdn_prefill_prep(qkv, a, b, neg_a, dt_bias, 1, 16, 16)
    want = _reference(qkv, a, b, neg_a, dt_bias, 1, 16, 16)
    torch.testing.assert_close(q, want[0], **tol(torch.float32))
    torch.testing.assert_close(k, want[1], **tol(torch.float32))
    assert (q.norm(dim=-1) < 0.999).all()  # the eps is added, not dropped
    torch.testing.assert_close(g, neg_a * F.softplus(a + dt_bias.float()), **G_TOL)


def test_nan_decay_input_stays_nan():
    """A NaN in ``a`` gives a NaN decay, not a finite one (the clamp before exp must not swallow it)."""
    qkv, a, b, neg_a, dt_bias = _inputs(torch.Generator().manual_seed(10), 3, 1, 2, 16, 16, torch.float32)
    a = a.clone()
    a[1, 0] = float("nan")
    g = gdn_prefill_prep(qkv, a, b, neg_a, dt_bias, 1, 16, 16)[3]
    assert torch.isnan(g[1, 0]) and torch.isfinite(g[[0, 2]]).all() and torch.isfinite(g[1, 1])


def test_no_tokens_gives_empty_outputs():
    qkv, a, b, neg_a, dt_bias = _inputs(torch.Generator().manual_seed(8), 0, 2, 4, 16, 8, torch.bfloat16)
    q, k, v, g, beta = gdn_prefill_prep(qkv, a, b, neg_a, dt_bias, 2, 16, 8)
    assert (q.shape, k.shape, v.shape, g.shape, beta.shape) == ((0, 2, 16), (0, 2, 16), (0, 4, 8), (0, 4), (0, 4))
    assert (g.dtype, beta.dtype) == (torch.float32, torch.bfloat16)


def test_block_tokens_bounds_the_tile():
    assert block_tokens(128, 128) == 16 and block_tokens(256, 128) == 8 and block_tokens(16, 24) == 16
    assert block_tokens(4096, 8) == 1


def test_bad_arguments_are_clear_errors():
    qkv, a, b, neg_a, dt_bias = _inputs(torch.Generator().manual_seed(9), 3, 2, 4, 16, 8, torch.float32)

    def call(**kw):
        args = {"qkv": qkv, "a": a, "b": b, "neg_a": neg_a, "dt_bias": dt_bias, "num_k_heads": 2, "head_k_dim": 16,
                "head_v_dim": 8}
        return gdn_prefill_prep(**{**args, **kw})

    with pytest.raises(ValueError, match=r"gdn_prefill_prep: qkv must have 2\*H_k\*K \+ H_v\*V = 100 columns .*, got 96"):
        call(head_v_dim=9)
    with pytest.raises(ValueError, match="gdn_prefill_prep: H_v=4 must be a positive multiple of H_k=3"):
        call(num_k_heads=3)
    with pytest.raises(ValueError, match="gdn_prefill_prep: a and b must have qkv's dtype"):
        call(a=a.bfloat16())
    with pytest.raises(ValueError, match="gdn_prefill_prep: neg_a must be float32"):
        call(neg_a=neg_a.bfloat16())
    with pytest.raises(ValueError, match="gdn_prefill_prep: qkv must be one of"):
        call(qkv=qkv.to(torch.int32), a=a.to(torch.int32), b=b.to(torch.int32))
    with pytest.raises(ValueError, match=r"gdn_prefill_prep: a and b must be \[T=3, H_v\]"):
        call(b=b[:2])
    with pytest.raises(ValueError, match=r"gdn_prefill_prep: neg_a and dt_bias must be \[H_v=4\]"):
        call(dt_bias=dt_bias[:3])
    with pytest.raises(ValueError, match="gdn_prefill_prep: qkv must have 2 dims"):
        call(qkv=qkv.unsqueeze(0))
    with pytest.raises(ValueError, match="gdn_prefill_prep: num_k_heads, head_k_dim and head_v_dim must be positive"):
        call(num_k_heads=0)
    with pytest.raises(ValueError, match="gdn_prefill_prep: b needs unit stride along its last dim"):
        call(b=torch.randn(4, 3).t())
