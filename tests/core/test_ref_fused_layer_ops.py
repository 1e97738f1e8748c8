"""The references of the fused layer ops (qk_norm_rope_cache, fused_gdn_decode, fused_gdn_prefill) are
bit-identical to the unfused paths of the layers that call them."""

import pytest
import torch
import torch.nn.functional as F
from anna_core.kernels.reference import conv1d, gated_delta_rule, norms, paged_attention
from anna_core.kernels.reference.gdn_fused import fused_gdn_decode, fused_gdn_prefill
from anna_core.kernels.reference.qk_norm_rope import qk_norm_rope_cache
from anna_core.layers.rotary import RotaryEmbedding

H_K, H_V, D_K, D_V, W, POOL = 1, 2, 8, 4, 4, 5


def _l2(x):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).sum(-1, keepdim=True) + 1e-6)).to(x.dtype)


def _prepare(c, a, b, neg_a, dt_bias):
    t = c.shape[0]
    qk, v = torch.split(c, [2 * H_K * D_K, H_V * D_V], dim=-1)
    qk = _l2(qk.reshape(t, 2 * H_K, D_K))
    g = neg_a * F.softplus(a.float() + dt_bias.float())
    return qk[:, :H_K], qk[:, H_K:], v.reshape(t, H_V, D_V), g, torch.sigmoid(b.float())


def _layer_inputs(rows, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    channels = 2 * H_K * D_K + H_V * D_V
    merged = torch.randn(rows, channels + H_V * D_V + 2 * H_V, generator=gen).to(dtype)
    qkv, z, b, a = torch.split(merged, [channels, H_V * D_V, H_V, H_V], dim=-1)  # strided views, as the layer's
    params = dict(conv_w=torch.randn(channels, W, generator=gen).to(dtype), neg_a=-torch.rand(H_V, generator=gen),
                  dt_bias=torch.randn(H_V, generator=gen), norm_w=torch.randn(D_V, generator=gen).to(dtype),
                  states=torch.randn(POOL, H_V, D_K, D_V, generator=gen),
                  conv_states=torch.randn(POOL, channels, W - 1, generator=gen).to(dtype))
    return qkv, z, b, a, params


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_fused_gdn_decode_is_the_unfused_layer_step(dtype):
    qkv, z, b, a, p = _layer_inputs(3, dtype, seed=1)
    slots = torch.tensor([4, 0, 2])
    mine_s, mine_c = p["states"].clone(), p["conv_states"].clone()
    got = fused_gdn_decode(qkv, p["conv_w"], mine_c, z, a, b, p["neg_a"], p["dt_bias"], p["norm_w"], 1e-6, mine_s,
                           slots, D_K ** -0.5, H_K)
    c = conv1d.causal_conv1d_update(qkv, p["conv_w"], None, p["conv_states"], slots, "silu")
    q, k, v, g, beta = _prepare(c, a, b, p["neg_a"], p["dt_bias"])
    o = gated_delta_rule.gated_delta_rule_decode(q, k, v, g, beta, p["states"], slots, D_K ** -0.5)
    want = norms.gated_rms_norm(o, z.reshape(3, H_V, D_V), p["norm_w"], 1e-6).reshape(3, H_V * D_V)
    assert got.dtype == dtype and got.shape == (3, H_V * D_V)
    assert torch.equal(got, want)
    assert torch.equal(mine_s, p["states"]) and torch.equal(mine_c, p["conv_states"])
    with pytest.raises(ValueError, match="fused_gdn_decode: qkv must have"):
        fused_gdn_decode(qkv[:, 1:], p["conv_w"], mine_c, z, a, b, p["neg_a"], p["dt_bias"], p["norm_w"], 1e-6,
                         mine_s, slots, 1.0, H_K)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_fused_gdn_prefill_is_the_unfused_layer_prefill(dtype):
    qkv, _, b, a, p = _layer_inputs(9, dtype, seed=2)
    cu = torch.tensor([0, 4, 9], dtype=torch.int32)
    slots = torch.tensor([3, 1])
    mine = p["states"].clone()
    got = fused_gdn_prefill(qkv, a, b, p["neg_a"], p["dt_bias"], cu, mine, slots, D_K ** -0.5, H_K, D_K, D_V)
    q, k, v, g, beta = _prepare(qkv, a, b, p["neg_a"], p["dt_bias"])
    want = gated_delta_rule.gated_delta_rule_prefill(q, k, v, g, beta, cu, p["states"], slots, D_K ** -0.5)
    assert got.shape == (9, H_V, D_V) and torch.equal(got, want) and torch.equal(mine, p["states"])
    with pytest.raises(ValueError, match="fused_gdn_prefill: slots must be"):
        fused_gdn_prefill(qkv, a, b, p["neg_a"], p["dt_bias"], cu, mine, slots[:1], 1.0, H_K, D_K, D_V)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("rotary_dim", [8, 16])
def test_qk_norm_rope_cache_is_norms_rotary_and_cache_write(dtype, rotary_dim):
    gen = torch.Generator().manual_seed(rotary_dim)
    t, h_q, h_kv, dim = 4, 4, 2, 16
    q = torch.randn(t, h_q, 2 * dim, generator=gen).to(dtype)[..., :dim]  # the query half of q+gate
    k, v = torch.randn(2, t, h_kv, dim, generator=gen).to(dtype)
    qw, kw = torch.randn(2, dim, generator=gen).to(dtype)
    positions = torch.tensor([0, 5, 9, 300])
    rope = RotaryEmbedding(dim, rotary_dim, {"rope_theta": 10000.0})
    slots = torch.tensor([7, 1, 2, 12])
    caches = [torch.zeros(4, 4, h_kv, dim, dtype=dtype) for _ in range(4)]
    got = qk_norm_rope_cache(q, k, v, qw, kw, 1e-6, True, positions, rope._tables(q.device)[0], caches[0], caches[1],
                             slots)
    want_q, want_k = rope(positions, norms.rms_norm(q, qw, 1e-6, True), norms.rms_norm(k, kw, 1e-6, True))
    paged_attention.reshape_and_cache(want_k, v, caches[2], caches[3], slots)
    assert got.is_contiguous() and torch.equal(got, want_q)
    assert torch.equal(caches[0], caches[2]) and torch.equal(caches[1], caches[3])
    with pytest.raises(ValueError, match="qk_norm_rope_cache: weights must be"):
        qk_norm_rope_cache(q, k, v, qw[:-1], kw, 1e-6, True, positions, rope._inv_freq, caches[0], caches[1], slots)
