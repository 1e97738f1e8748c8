"""Reference gated delta rule: chunked varlen prefill and decode vs a naive per-token recurrence and HF."""

import pytest
import torch
import torch.nn.functional as F
from anna_core.kernels.reference import gated_delta_rule as gdr
from anna_core.kernels.reference.gated_delta_rule import gated_delta_rule_decode, gated_delta_rule_prefill

H_K, K_DIM, V_DIM = 2, 16, 8
TOL = {torch.float32: (2e-5, 2e-5), torch.bfloat16: (3e-2, 3e-2)}


def naive(q, k, v, g, beta, state, scale):
    """Per-token recurrence for one sequence: q, k ``[L, Hk, K]``, v ``[L, Hv, V]``, state ``[Hv, K, V]``."""
    rep = v.shape[1] // q.shape[1]
    q = q.float().repeat_interleave(rep, 1) * scale
    k = k.float().repeat_interleave(rep, 1)
    v, g, beta, s = v.float(), g.float(), beta.float(), state.clone()
    outs = []
    for t in range(q.shape[0]):
        s = s * g[t].exp()[:, None, None]
        pred = torch.einsum("hkv,hk->hv", s, k[t])
        u = beta[t][:, None] * (v[t] - pred)
        s = s + k[t][:, :, None] * u[:, None, :]
        outs.append(torch.einsum("hkv,hk->hv", s, q[t]))
    return (torch.stack(outs) if outs else v.new_empty(v.shape)), s


def make_inputs(n, h_v, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    q = F.normalize(torch.randn(n, H_K, K_DIM, generator=gen), dim=-1).to(dtype)
    k = F.normalize(torch.randn(n, H_K, K_DIM, generator=gen), dim=-1).to(dtype)
    v = torch.randn(n, h_v, V_DIM, generator=gen).to(dtype)
    g = -torch.rand(n, h_v, generator=gen) * 0.5  # float32 log decay
    beta = torch.rand(n, h_v, generator=gen).to(dtype)
    return q, k, v, g, beta


def cu(lens):
    return torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("h_v", [H_K, 2 * H_K])
@pytest.mark.parametrize("lens", [[1], [64], [150], [3, 64, 129, 1, 65, 0]])
@pytest.mark.parametrize("per_pass", [None, 1])
def test_prefill_matches_naive_recurrence(dtype, h_v, lens, per_pass, monkeypatch):
    if per_pass is not None:  # materialise one scan step's chunk-local terms at a time
        monkeypatch.setattr(gdr, "_CHUNK_HEADS_PER_PASS", per_pass)
    n = sum(lens)
    q, k, v, g, beta = make_inputs(n, h_v, dtype, seed=len(lens) + n)
    states = torch.randn(9, h_v, K_DIM, V_DIM, generator=torch.Generator().manual_seed(1)) * 0.3
    slots = torch.tensor([8, 2, 5, 0, 3, 7][: len(lens)])
    before = states.clone()
    scale = K_DIM**-0.5
    out = gated_delta_rule_prefill(q, k, v, g, beta, cu(lens), states, slots, scale)
    assert out.shape == v.shape and out.dtype == dtype
    atol, rtol = TOL[dtype]
    offsets = cu(lens).tolist()
    for i, slot in enumerate(slots.tolist()):
        a, b = offsets[i], offsets[i + 1]
        ref_o, ref_s = naive(q[a:b], k[a:b], v[a:b], g[a:b], beta[a:b], before[slot], scale)
        if b > a:
            torch.testing.assert_close(out[a:b].float(), ref_o, atol=atol, rtol=rtol)
        torch.testing.assert_close(states[slot], ref_s, atol=2e-5, rtol=2e-5)
    untouched = [s for s in range(9) if s not in slots.tolist()]
    assert torch.equal(states[untouched], before[untouched])


def test_prefill_then_decode_equals_one_prefill():
    h_v, lens = 2 * H_K, [70, 5]
    extra = 3  # decode steps after the prefill
    total = [n + extra for n in lens]
    q, k, v, g, beta = make_inputs(sum(total), h_v, torch.float32, seed=7)
    scale = K_DIM**-0.5
    slots = torch.tensor([4, 1])
    init = torch.randn(6, h_v, K_DIM, V_DIM, generator=torch.Generator().manual_seed(2)) * 0.3

    whole = init.clone()
    out_whole = gated_delta_rule_prefill(q, k, v, g, beta, cu(total), whole, slots, scale)

    # Split: a prefill in two chunked calls (the first part cut at 40 tokens), then one-token decodes.
    offs = cu(total).tolist()
    split = init.clone()
    heads = [min(40, n) for n in lens]
    rows1 = torch.cat([torch.arange(offs[i], offs[i] + heads[i]) for i in range(2)])
    rows2 = torch.cat([torch.arange(offs[i] + heads[i], offs[i] + lens[i]) for i in range(2)])
    pieces = {}
    for rows, part_lens in ((rows1, heads), (rows2, [n - h for n, h in zip(lens, heads)])):
        o = gated_delta_rule_prefill(q[rows], k[rows], v[rows], g[rows], beta[rows], cu(part_lens), split, slots, scale)
        pieces.update({r: o[j] for j, r in enumerate(rows.tolist())})
    for step in range(extra):
        rows = torch.tensor([offs[i] + lens[i] + step for i in range(2)])
        o = gated_delta_rule_decode(q[rows], k[rows], v[rows], g[rows], beta[rows], split, slots, scale)
        pieces.update({r: o[j] for j, r in enumerate(rows.tolist())})
    out_split = torch.stack([pieces[r] for r in range(sum(total))])
    torch.testing.assert_close(out_split, out_whole, atol=2e-5, rtol=2e-5)
    torch.testing.assert_close(split, whole, atol=2e-5, rtol=2e-5)
    assert torch.equal(split[[0, 2, 3, 5]], init[[0, 2, 3, 5]])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_decode_matches_naive_step(dtype):
    h_v, batch = 2 * H_K, 3
    q, k, v, g, beta = make_inputs(batch, h_v, dtype, seed=11)
    states = torch.randn(5, h_v, K_DIM, V_DIM, generator=torch.Generator().manual_seed(3))
    slots = torch.tensor([4, 0, 2])
    before = states.clone()
    out = gated_delta_rule_decode(q, k, v, g, beta, states, slots, 0.25)
    assert out.dtype == dtype
    for i, slot in enumerate(slots.tolist()):
        ref_o, ref_s = naive(q[i : i + 1], k[i : i + 1], v[i : i + 1], g[i : i + 1], beta[i : i + 1], before[slot], 0.25)
        torch.testing.assert_close(out[i].float(), ref_o[0], atol=TOL[dtype][0], rtol=TOL[dtype][1])
        torch.testing.assert_close(states[slot], ref_s, atol=1e-5, rtol=1e-5)
    assert torch.equal(states[[1, 3]], before[[1, 3]])


def test_prefill_matches_hf_chunk_gated_delta_rule():
    from transformers.models.qwen3_5 import modeling_qwen3_5 as hf

    h_v, n = 2 * H_K, 100
    q, k, v, g, beta = make_inputs(n, h_v, torch.float32, seed=5)
    init = torch.randn(1, h_v, K_DIM, V_DIM, generator=torch.Generator().manual_seed(4)) * 0.3
    ref_o, ref_s = hf.torch_chunk_gated_delta_rule(
        q[None], k[None], v[None], g[None], beta[None], initial_state=init.clone(), output_final_state=True
    )
    states = torch.zeros(3, h_v, K_DIM, V_DIM)
    states[2] = init[0]
    out = gated_delta_rule_prefill(q, k, v, g, beta, cu([n]), states, torch.tensor([2]), K_DIM**-0.5)
    torch.testing.assert_close(out, ref_o[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(states[2], ref_s[0], atol=1e-5, rtol=1e-5)


def test_bad_inputs_raise():
    q, k, v, g, beta = make_inputs(4, 3, torch.float32, seed=0)  # H_v=3 not a multiple of H_k=2
    states = torch.zeros(2, 3, K_DIM, V_DIM)
    with pytest.raises(ValueError, match="multiple of H_k"):
        gated_delta_rule_prefill(q, k, v, g, beta, cu([4]), states, torch.tensor([0]), 1.0)
    q, k, v, g, beta = make_inputs(4, 2, torch.float32, seed=0)
    with pytest.raises(ValueError, match="float32"):
        gated_delta_rule_decode(q, k, v, g, beta, torch.zeros(4, 2, K_DIM, V_DIM, dtype=torch.bfloat16),
                                torch.arange(4), 1.0)
    with pytest.raises(ValueError, match="end at the token count"):
        gated_delta_rule_prefill(q, k, v, g, beta, cu([3]), torch.zeros(2, 2, K_DIM, V_DIM), torch.tensor([0]), 1.0)
    with pytest.raises(ValueError, match="distinct"):
        gated_delta_rule_prefill(q, k, v, g, beta, cu([2, 2]), torch.zeros(2, 2, K_DIM, V_DIM),
                                 torch.tensor([1, 1]), 1.0)
