"""The fused gated-DeltaNet decode step (conv update included) vs the composition of the torch reference
ops, over consecutive steps (interpreter; programs run sequentially there, so the last-arriver
handshake is checked for its logic, not for races: see the module docs of gdn_decode_fused)."""

import pytest
import torch
import torch.nn.functional as F
from anna_core.kernels.reference import conv1d as ref_conv
from anna_core.kernels.reference import gated_delta_rule as ref
from anna_core.kernels.reference import gdn_fused as ref_fused
from anna_core.kernels.reference import norms as ref_norms

from tests.xpu_kernels._interp import require_triton_interpreter, tol

require_triton_interpreter()

import triton
from anna_xpu_kernels import gdn_decode_fused as gdf
from anna_xpu_kernels.gdn_decode_fused import choose_splits, choose_sub_v, fusable, fused_gdn_decode

POOL = 6
EPS = 1e-6
WIDTH = 4


def _l2(x):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).sum(-1, keepdim=True) + 1e-6)).to(x.dtype)


def _unfused(raw, conv_w, conv_states, z, a, b, neg_a, dt_bias, w, states, slots, scale, h_k, d_k, d_v):
    """The layer's separate-op decode path: conv update, L2 norms, gating, decode, gated norm."""
    batch, h_v = a.shape
    key_dim = h_k * d_k
    qkv = ref_conv.causal_conv1d_update(raw, conv_w, None, conv_states, slots, "silu")
    qk, v = torch.split(qkv, [2 * key_dim, h_v * d_v], dim=-1)
    qk = _l2(qk.reshape(batch, 2 * h_k, d_k))
    q, k = qk[:, :h_k], qk[:, h_k:]
    g = neg_a * F.softplus(a.float() + dt_bias.float())
    beta = torch.sigmoid(b.float())
    o = ref.gated_delta_rule_decode(q, k, v.reshape(batch, h_v, d_v), g, beta, states, slots, scale)
    return ref_norms.gated_rms_norm(o, z.reshape(batch, h_v, d_v), w, EPS).reshape(batch, h_v * d_v)


def _inputs(gen, batch, h_k, h_v, d_k, d_v, dtype):
    conv_dim = 2 * h_k * d_k + h_v * d_v
    merged = torch.randn(batch, conv_dim + h_v * d_v + 2 * h_v + 3, generator=gen).to(dtype)  # strided rows
    return torch.split(merged[:, :-3], [conv_dim, h_v * d_v, h_v, h_v], dim=-1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("h_k,h_v,d_k,d_v,splits,sub_v", [
    (2, 4, 16, 32, 1, None), (2, 4, 16, 32, 2, None), (1, 2, 16, 32, 4, None), (2, 2, 16, 32, 2, None),
    (1, 1, 24, 16, 1, None), (1, 1, 16, 24, 2, None),
    (2, 4, 16, 32, 1, 16), (1, 1, 16, 64, 1, 16), (2, 4, 16, 64, 2, 16),
])
def test_fused_step_matches_the_unfused_layer_over_steps(poison_outputs, dtype, h_k, h_v, d_k, d_v, splits, sub_v):
    gen = torch.Generator().manual_seed(h_k * 100 + h_v * 10 + d_k + splits)
    batch = 3
    conv_dim = 2 * h_k * d_k + h_v * d_v
    conv_w = (0.5 * torch.randn(conv_dim, WIDTH, generator=gen)).to(dtype)
    neg_a = -torch.rand(h_v, generator=gen) * 4
    dt_bias = torch.randn(h_v, generator=gen)
    w = (1 + 0.3 * torch.randn(d_v, generator=gen)).to(dtype)
    states = torch.randn(POOL, h_v, d_k, d_v, generator=gen) * 0.5
    conv_states = torch.randn(POOL, conv_dim, WIDTH - 1, generator=gen).to(dtype)
    slots = torch.tensor([4, 1, 2])  # non-contiguous, unsorted
    mine, theirs = states.clone(), states.clone()
    conv_mine, conv_theirs = conv_states.clone(), conv_states.clone()
    truth_states, truth_conv = states.clone(), conv_states.float()
    for _ in range(3):
        raw, z, b, a = _inputs(gen, batch, h_k, h_v, d_k, d_v, dtype)
        got = fused_gdn_decode(raw, conv_w, conv_mine, z, a, b, neg_a, dt_bias, w, EPS, mine, slots, d_k ** -0.5, h_k,
                               num_v_splits=splits, sub_v=sub_v)
        want = _unfused(raw, conv_w, conv_theirs, z, a, b, neg_a, dt_bias, w, theirs, slots, d_k ** -0.5, h_k, d_k, d_v)
        assert got.dtype == dtype and got.shape == (batch, h_v * d_v)
        if dtype == torch.float32:
            torch.testing.assert_close(got, want, **tol(dtype))
        else:
            # q, k, v and o are each rounded to bf16 (toward zero in the interpreter, to nearest in torch), and
            # the gated norm amplifies those roundings: both must be as close to the float32 layer as each other.
            up = [t.float() for t in (raw, conv_w)] + [truth_conv] + [t.float() for t in (z, a, b, neg_a, dt_bias, w)]
            truth = _unfused(*up, truth_states, slots, d_k ** -0.5, h_k, d_k, d_v)

            def rel(x, truth=truth):
                return ((x.float() - truth).norm() / truth.norm()).item()

            assert rel(got) < max(2 * rel(want), 5e-3), (rel(got), rel(want))
        torch.testing.assert_close(mine, theirs, **tol(dtype))
        torch.testing.assert_close(conv_mine, conv_theirs, atol=0, rtol=0)  # the state holds raw inputs: exact
    assert torch.equal(mine[[0, 3, 5]], states[[0, 3, 5]]) and torch.equal(conv_mine[[0, 3, 5]], conv_states[[0, 3, 5]])
    counters = fused_gdn_decode.counters.get(raw.device, batch * h_k)
    assert not counters.any()  # left at zero for the next launch


@pytest.mark.parametrize("h_k,h_v,d_v,splits,sub_v", [
    (1, 1, 48, 1, 16), (2, 4, 64, 1, 32), (1, 2, 64, 2, 16), (1, 1, 80, 1, 16), (2, 4, 128, 1, 32),
])
def test_sub_chunks_give_the_same_step_as_whole_chunks(poison_outputs, h_k, h_v, d_v, splits, sub_v):
    """Updating a program's value columns in sub-chunks (the next one's state loaded during the update) is
    the same arithmetic per column: output, state and conv state equal the whole-chunk step exactly."""
    gen = torch.Generator().manual_seed(7 + d_v + sub_v)
    d_k, batch = 16, 2
    conv_dim = 2 * h_k * d_k + h_v * d_v
    conv_w = (0.5 * torch.randn(conv_dim, WIDTH, generator=gen)).to(torch.bfloat16)
    neg_a, dt_bias = -torch.rand(h_v, generator=gen) * 4, torch.randn(h_v, generator=gen)
    w = (1 + 0.3 * torch.randn(d_v, generator=gen)).to(torch.bfloat16)
    states = torch.randn(POOL, h_v, d_k, d_v, generator=gen) * 0.5
    conv_states = torch.randn(POOL, conv_dim, WIDTH - 1, generator=gen).to(torch.bfloat16)
    slots = torch.tensor([3, 0])
    outs = []
    for sub in (None, sub_v):
        st, cs = states.clone(), conv_states.clone()
        gen.manual_seed(99)
        for _ in range(2):
            raw, z, b, a = _inputs(gen, batch, h_k, h_v, d_k, d_v, torch.bfloat16)
            y = fused_gdn_decode(raw, conv_w, cs, z, a, b, neg_a, dt_bias, w, EPS, st, slots, d_k ** -0.5, h_k,
                                 num_v_splits=splits, sub_v=sub)
        outs.append((y, st, cs))
    for got, want in zip(outs[1], outs[0]):
        assert torch.equal(got, want)


def test_split_choice_fills_the_gpu_and_keeps_wide_chunks():
    assert choose_splits(16, 128, 128) == 8  # 0.8B batch 1: 128 programs, 16-wide chunks
    assert choose_splits(32, 128, 128) == 8 and choose_splits(64, 128, 128) == 4
    assert choose_splits(128, 128, 128) == 2 and choose_splits(256, 128, 128) == 1
    assert choose_splits(1024, 128, 128) == 1  # 9B batch 32
    assert choose_splits(1024, 256, 256) == 4  # a [256, 64] tile at most
    assert choose_splits(1, 16, 24) == 2


def test_sub_chunks_only_for_grids_of_many_whole_heads():
    assert choose_sub_v(1024, 128, 1) == 64  # 9B batch 32
    assert choose_sub_v(256, 128, 1) == 64 and choose_sub_v(255, 128, 1) == 128
    assert choose_sub_v(1024, 256, 1) == 64
    assert choose_sub_v(128, 64, 2) == 64  # split heads: the chunk is already narrow
    assert choose_sub_v(1024, 64, 1) == 64 and choose_sub_v(1024, 16, 1) == 16


def test_launches_are_not_autotuned():
    # a per-process autotuner pick (1 warp at 16 rows) made whole 2B decode steps 11% slower: every
    # launch runs with the measured NUM_WARPS instead
    assert not isinstance(gdf._fused_gdn_decode_kernel, triton.runtime.autotuner.Autotuner)
    assert gdf.NUM_WARPS == 4


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_fused_step_matches_the_op_reference(poison_outputs, dtype):
    """The Triton kernel against the ``fused_gdn_decode`` op's torch reference (anna-core)."""
    gen = torch.Generator().manual_seed(11)
    batch, h_k, h_v, d_k, d_v = 2, 1, 2, 16, 32
    conv_dim = 2 * h_k * d_k + h_v * d_v
    conv_w = (0.5 * torch.randn(conv_dim, WIDTH, generator=gen)).to(dtype)
    neg_a, dt_bias = -torch.rand(h_v, generator=gen) * 4, torch.randn(h_v, generator=gen)
    w = (1 + 0.3 * torch.randn(d_v, generator=gen)).to(dtype)
    states = torch.randn(POOL, h_v, d_k, d_v, generator=gen) * 0.5
    conv_states = torch.randn(POOL, conv_dim, WIDTH - 1, generator=gen).to(dtype)
    slots = torch.tensor([5, 0])
    mine, theirs, conv_mine, conv_theirs = states.clone(), states.clone(), conv_states.clone(), conv_states.clone()
    raw, z, b, a = _inputs(gen, batch, h_k, h_v, d_k, d_v, dtype)
    got = fused_gdn_decode(raw, conv_w, conv_mine, z, a, b, neg_a, dt_bias, w, EPS, mine, slots, d_k ** -0.5, h_k)
    want = ref_fused.fused_gdn_decode(raw, conv_w, conv_theirs, z, a, b, neg_a, dt_bias, w, EPS, theirs, slots,
                                      d_k ** -0.5, h_k)
    t = tol(dtype) if dtype == torch.float32 else {"atol": 6e-2, "rtol": 6e-2}  # bf16: four roundings, gated norm
    torch.testing.assert_close(got, want, **t)
    torch.testing.assert_close(mine, theirs, **tol(dtype))
    assert torch.equal(conv_mine, conv_theirs)


def test_registered_as_the_fused_gdn_decode_op_for_fusable_heads(monkeypatch):
    from anna_core.kernels import KernelRegistry, ProbeRequest
    from anna_core.plugins import make_plugin_manager

    assert fusable(128, 128) and fusable(256, 256) and not fusable(512, 128)
    monkeypatch.setenv("ANNA_TRITON_INTERPRET", "1")
    registry = KernelRegistry.from_plugins(make_plugin_manager({"anna_xpu_kernels"}))

    def chosen(**shape):
        return registry.get("fused_gdn_decode", ProbeRequest("cpu", "bfloat16", shape))

    assert chosen(head_k_dim=128, head_v_dim=128) is fused_gdn_decode
    assert chosen(head_k_dim=256, head_v_dim=256) is fused_gdn_decode
    # heads the kernel cannot fuse, or a lookup without the facts: the op's reference (the unfused composition)
    assert chosen(head_k_dim=512, head_v_dim=128) is ref_fused.fused_gdn_decode
    assert chosen(head_k_dim=128) is ref_fused.fused_gdn_decode
    off = KernelRegistry.from_plugins(make_plugin_manager({"anna_xpu_kernels"}), disabled=["fused_gdn_decode:triton"])
    assert off.get("fused_gdn_decode", ProbeRequest("cpu", "bfloat16", {"head_k_dim": 128, "head_v_dim": 128})) \
        is ref_fused.fused_gdn_decode


def test_fused_step_bad_arguments_are_clear_errors():
    states = torch.zeros(2, 2, 16, 16)
    qkv = torch.zeros(1, 2 * 16 + 2 * 16)
    conv_w, conv_s = torch.zeros(64, WIDTH), torch.zeros(2, 64, WIDTH - 1)
    rest = (torch.zeros(1, 32), torch.zeros(1, 2), torch.zeros(1, 2), torch.zeros(2), torch.zeros(2), torch.ones(16),
            EPS, states, torch.tensor([0]), 0.25, 1)
    with pytest.raises(ValueError, match="columns"):
        fused_gdn_decode(qkv[:, :-1], conv_w, conv_s, *rest)
    with pytest.raises(ValueError, match="conv_states"):
        fused_gdn_decode(qkv, conv_w, conv_s[:, :, :2], *rest)
    with pytest.raises(ValueError, match="num_v_splits"):
        fused_gdn_decode(qkv, conv_w, conv_s, *rest, num_v_splits=3)
    with pytest.raises(ValueError, match="sub_v"):
        fused_gdn_decode(qkv, conv_w, conv_s, *rest, sub_v=8)
    with pytest.raises(ValueError, match="sub_v"):
        fused_gdn_decode(qkv, conv_w, conv_s, *rest, sub_v=12)
    with pytest.raises(ValueError, match="too large"):
        big = torch.zeros(1, 1, 512, 128)
        fused_gdn_decode(torch.zeros(1, 2 * 512 + 128), torch.zeros(1152, WIDTH), torch.zeros(1, 1152, WIDTH - 1),
                         torch.zeros(1, 128), torch.zeros(1, 1), torch.zeros(1, 1), torch.zeros(1), torch.zeros(1),
                         torch.ones(128), EPS, big, torch.tensor([0]), 0.25, 1)
