"""Reference causal depthwise conv1d (prefill/update with state slots) and the RMS norms."""

import pytest
import torch
import torch.nn.functional as F
from anna_core.kernels.reference.conv1d import causal_conv1d_prefill, causal_conv1d_update
from anna_core.kernels.reference.norms import gated_rms_norm, rms_norm

C, W = 6, 4


def cu(lens):
    return torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32)


def params(seed, with_bias=True):
    gen = torch.Generator().manual_seed(seed)
    weight = torch.randn(C, W, generator=gen)
    bias = torch.randn(C, generator=gen) if with_bias else None
    return weight, bias


@pytest.mark.parametrize("activation", ["silu", None])
@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_conv_prefill_matches_torch_conv1d(activation, with_bias, dtype):
    lens = [1, 5, 2, 9, 0]
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(sum(lens), C, generator=gen).to(dtype)
    weight, bias = params(1, with_bias)
    states = torch.randn(8, C, W - 1, generator=gen).to(dtype)
    slots = torch.tensor([2, 0, 7, 4, 6])
    before = states.clone()
    y = causal_conv1d_prefill(x, weight, bias, cu(lens), states, slots, activation)
    assert y.dtype == dtype
    offs = cu(lens).tolist()
    for i, slot in enumerate(slots.tolist()):
        seq = torch.cat([before[slot], x[offs[i] : offs[i + 1]].T], dim=1).float()  # [C, W-1+L]
        ref = F.conv1d(F.pad(seq, (1, 0))[None], weight[:, None], bias, groups=C)[0, :, 1:].T  # pad: L may be 0
        if activation == "silu":
            ref = F.silu(ref)
        tol = 1e-5 if dtype == torch.float32 else 2e-2
        torch.testing.assert_close(y[offs[i] : offs[i + 1]].float(), ref, atol=tol, rtol=tol)
        assert torch.equal(states[slot], seq[:, -(W - 1) :].to(dtype))
    assert torch.equal(states[[1, 3, 5]], before[[1, 3, 5]])


def test_conv_fresh_state_equals_zero_padded_conv():
    x = torch.randn(7, C)
    weight, bias = params(2)
    states = torch.zeros(1, C, W - 1)
    y = causal_conv1d_prefill(x, weight, bias, cu([7]), states, torch.tensor([0]), "silu")
    ref = F.silu(F.conv1d(x.T[None], weight[:, None], bias, padding=W - 1, groups=C)[0, :, :7].T)
    torch.testing.assert_close(y, ref, atol=1e-5, rtol=1e-5)


def test_conv_update_continues_prefill():
    lens, steps = [3, 10], 4
    x = torch.randn(sum(lens) + 2 * steps, C)
    weight, bias = params(3)
    whole = torch.zeros(4, C, W - 1)
    split = torch.zeros(4, C, W - 1)
    slots = torch.tensor([3, 1])
    full_lens = [n + steps for n in lens]
    offs = cu(full_lens).tolist()
    y_whole = causal_conv1d_prefill(x, weight, bias, cu(full_lens), whole, slots, "silu")
    rows = torch.cat([torch.arange(offs[i], offs[i] + lens[i]) for i in range(2)])
    y_pre = causal_conv1d_prefill(x[rows], weight, bias, cu(lens), split, slots, "silu")
    torch.testing.assert_close(y_pre, y_whole[rows])
    for step in range(steps):
        rows = torch.tensor([offs[i] + lens[i] + step for i in range(2)])
        y = causal_conv1d_update(x[rows], weight, bias, split, slots, "silu")
        torch.testing.assert_close(y, y_whole[rows], atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(split, whole)


def test_conv_bad_inputs_raise():
    weight, bias = params(0)
    with pytest.raises(ValueError, match="conv_states"):
        causal_conv1d_update(torch.randn(1, C), weight, bias, torch.zeros(2, C, W), torch.tensor([0]), "silu")
    with pytest.raises(ValueError, match="activation"):
        causal_conv1d_update(torch.randn(1, C), weight, bias, torch.zeros(2, C, W - 1), torch.tensor([0]), "gelu")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("zero_centered", [False, True])
def test_rms_norm_formula(dtype, zero_centered):
    x = (torch.randn(3, 5, 16) * 3).to(dtype)
    weight = torch.randn(16) * 0.1
    y = rms_norm(x, weight, 1e-6, zero_centered)
    xf = x.double()
    ref = xf / torch.sqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * ((1 + weight) if zero_centered else weight).double()
    assert y.dtype == dtype and y.shape == x.shape
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    torch.testing.assert_close(y.double(), ref, atol=tol, rtol=tol)


def test_gated_rms_norm_formula_and_hf():
    from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5RMSNormGated

    x, z = torch.randn(4, 32), torch.randn(4, 32)
    weight = torch.randn(32)
    y = gated_rms_norm(x, z, weight, 1e-6)
    ref = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * weight * z * torch.sigmoid(z)
    torch.testing.assert_close(y, ref, atol=1e-5, rtol=1e-5)
    hf = Qwen3_5RMSNormGated(32, eps=1e-6)
    with torch.no_grad():
        hf.weight.copy_(weight)
        torch.testing.assert_close(y, hf(x, z), atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="weight"):
        gated_rms_norm(x, z, torch.ones(31), 1e-6)
