"""The fused gated-DeltaNet decode step vs the composition of the torch reference ops (interpreter)."""

import pytest
import torch
import torch.nn.functional as F
from anna_core.kernels.reference import gated_delta_rule as ref
from anna_core.kernels.reference import norms as ref_norms

from tests.xpu_kernels._interp import require_triton_interpreter, tol

require_triton_interpreter()

from anna_xpu_kernels import gated_delta_rule
from anna_xpu_kernels.gdn_decode_fused import fusable, fused_gdn_decode

POOL = 5
EPS = 1e-6


def _l2(x):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).sum(-1, keepdim=True) + 1e-6)).to(x.dtype)


def _unfused(qkv, z, a, b, neg_a, dt_bias, w, states, slots, scale, h_k, d_k, d_v):
    batch, h_v = a.shape
    key_dim = h_k * d_k
    qk, v = torch.split(qkv, [2 * key_dim, h_v * d_v], dim=-1)
    qk = _l2(qk.reshape(batch, 2 * h_k, d_k))
    q, k = qk[:, :h_k], qk[:, h_k:]
    g = neg_a * F.softplus(a.float() + dt_bias.float())
    beta = torch.sigmoid(b.float())
    o = ref.gated_delta_rule_decode(q, k, v.reshape(batch, h_v, d_v), g, beta, states, slots, scale)
    return ref_norms.gated_rms_norm(o, z.reshape(batch, h_v, d_v), w, EPS).reshape(batch, h_v * d_v)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("h_k,h_v,d_k,d_v", [(2, 4, 16, 32), (1, 1, 24, 16)])
def test_fused_step_matches_the_unfused_layer(poison_outputs, dtype, h_k, h_v, d_k, d_v):
    gen = torch.Generator().manual_seed(h_k * 100 + d_k)
    batch = 3
    conv_dim = 2 * h_k * d_k + h_v * d_v
    merged = torch.randn(batch, conv_dim + h_v * d_v + 2 * h_v + 3, generator=gen).to(dtype)  # strided rows
    qkv, z, b, a = torch.split(merged[:, :-3], [conv_dim, h_v * d_v, h_v, h_v], dim=-1)
    neg_a = -torch.rand(h_v, generator=gen) * 4
    dt_bias = torch.randn(h_v, generator=gen)
    w = (1 + 0.3 * torch.randn(d_v, generator=gen)).to(dtype)
    states = torch.randn(POOL, h_v, d_k, d_v, generator=gen) * 0.5
    slots = torch.tensor([4, 1, 2])
    mine, theirs = states.clone(), states.clone()
    got = fused_gdn_decode(qkv, z, a, b, neg_a, dt_bias, w, EPS, mine, slots, d_k ** -0.5, h_k)
    want = _unfused(qkv, z, a, b, neg_a, dt_bias, w, theirs, slots, d_k ** -0.5, h_k, d_k, d_v)
    assert got.dtype == dtype and got.shape == (batch, h_v * d_v)
    if dtype == torch.float32:
        torch.testing.assert_close(got, want, **tol(dtype))
    else:
        # q, k and o are each rounded to bf16 (toward zero in the interpreter, to nearest in torch), and the
        # gated norm amplifies those roundings: both must be as close to the float32 layer as each other.
        up = [t.float() for t in (qkv, z, a, b, neg_a, dt_bias, w)]
        truth = _unfused(*up, states.clone(), slots, d_k ** -0.5, h_k, d_k, d_v)

        def rel(x):
            return ((x.float() - truth).norm() / truth.norm()).item()

        assert rel(got) < max(2 * rel(want), 5e-3), (rel(got), rel(want))
    # q, k are rounded to the activation dtype inside (the interpreter rounds bf16 toward zero, torch to nearest)
    torch.testing.assert_close(mine, theirs, **tol(dtype))
    assert torch.equal(mine[[0, 3]], states[[0, 3]])


def test_fused_step_is_exposed_on_the_decode_op_and_bounded():
    assert gated_delta_rule.gated_delta_rule_decode.fused_step is fused_gdn_decode
    assert fusable(128, 128) and not fusable(256, 128)


def test_fused_step_bad_arguments_are_clear_errors():
    states = torch.zeros(2, 2, 16, 16)
    qkv = torch.zeros(1, 2 * 16 + 2 * 16)
    with pytest.raises(ValueError, match="columns"):
        fused_gdn_decode(qkv[:, :-1], torch.zeros(1, 32), torch.zeros(1, 2), torch.zeros(1, 2), torch.zeros(2),
                         torch.zeros(2), torch.ones(16), EPS, states, torch.tensor([0]), 0.25, 1)
    with pytest.raises(ValueError, match="too large"):
        big = torch.zeros(1, 1, 256, 128)
        fused_gdn_decode(torch.zeros(1, 2 * 256 + 128), torch.zeros(1, 128), torch.zeros(1, 1), torch.zeros(1, 1),
                         torch.zeros(1), torch.zeros(1), torch.ones(128), EPS, big, torch.tensor([0]), 0.25, 1)
