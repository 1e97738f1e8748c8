"""The moe_experts contract and its torch reference: found through the registry, exactly the eager loop the
Qwen3.5 MoE and Gemma 4 experts ran before the op (transformers' rounding), and clear errors."""

import pytest
import torch
import torch.nn.functional as F
from anna_core.kernels import KernelRegistry, bind_ops
from anna_core.kernels.ops import CORE_OPS, OPS
from anna_core.kernels.reference.moe import moe_experts


def _loop(x, gate_up, down, weights, experts, activation):
    """The models' former grouped loop (and transformers'): stable sort by expert, two GEMMs per expert hit,
    weighted rows rounded to x's dtype and index_add_-ed in expert order."""
    k = experts.shape[1]
    flat = experts.reshape(-1)
    order = torch.argsort(flat, stable=True)
    counts = torch.bincount(flat, minlength=gate_up.shape[0]).tolist()
    out, start = torch.zeros_like(x), 0
    for e, n in enumerate(counts):
        if n == 0:
            continue
        picks = order[start:start + n]
        start += n
        tokens = picks // k
        gate, up = F.linear(x[tokens], gate_up[e]).chunk(2, dim=-1)
        act = F.silu(gate) if activation == "silu" else F.gelu(gate, approximate="tanh")
        y = F.linear(act * up, down[e])
        out.index_add_(0, tokens, (y * weights.reshape(-1)[picks, None]).to(out.dtype))
    return out


def _inputs(t, e, k, hidden, inter, dtype, weights_dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(t, hidden, generator=gen).to(dtype)
    gate_up = (torch.randn(e, 2 * inter, hidden, generator=gen) * 0.2).to(dtype)
    down = (torch.randn(e, hidden, inter, generator=gen) * 0.2).to(dtype)
    probs, ids = torch.topk(torch.randn(t, e, generator=gen).softmax(-1), k)
    return x, gate_up, down, (probs / probs.sum(-1, keepdim=True)).to(weights_dtype), ids


def test_the_registry_finds_the_op_and_its_reference():
    assert "moe_experts" in OPS and OPS["moe_experts"].parameters == [
        "x", "gate_up", "down", "weights", "expert_ids", "activation"]
    ops = bind_ops(KernelRegistry(CORE_OPS), torch.device("cpu"), torch.float32)
    assert ops.get("moe_experts") is moe_experts and ops.moe_experts is moe_experts
    assert ops.registry.chosen() == {"moe_experts": "reference"}


@pytest.mark.parametrize("activation", ["silu", "gelu_tanh"])
@pytest.mark.parametrize("dtype, weights_dtype", [(torch.float32, torch.float32), (torch.bfloat16, torch.bfloat16),
                                                  (torch.bfloat16, torch.float32)])  # Qwen3.5: x's dtype, Gemma 4: fp32
def test_reference_is_the_former_model_loop_bit_for_bit(activation, dtype, weights_dtype):
    args = _inputs(37, 8, 3, 32, 24, dtype, weights_dtype)
    got = moe_experts(*args, activation)
    assert got.dtype == dtype and got.shape == (37, 32)
    assert torch.equal(got, _loop(*args, activation))
    ids32 = args[4].to(torch.int32)
    assert torch.equal(moe_experts(*args[:4], ids32, activation), got)


def test_each_token_is_its_experts_weighted_sum():
    x, gate_up, down, weights, ids = _inputs(4, 6, 2, 16, 8, torch.float64, torch.float64)
    got = moe_experts(x, gate_up, down, weights, ids, "gelu_tanh")
    for t in range(4):
        want = torch.zeros(16, dtype=torch.float64)
        for k in range(2):
            e = ids[t, k]
            gate, up = (gate_up[e] @ x[t]).chunk(2)
            want += weights[t, k] * (down[e] @ (F.gelu(gate, approximate="tanh") * up))
        torch.testing.assert_close(got[t], want)
    assert moe_experts(x[:0], gate_up, down, weights[:0], ids[:0], "silu").shape == (0, 16)


def test_bad_arguments_are_clear_errors():
    x, gate_up, down, weights, ids = _inputs(3, 4, 2, 16, 8, torch.float32, torch.float32)
    with pytest.raises(ValueError, match="moe_experts: expert_ids must lie in \\[0, E=4\\): 0 below, 1 at or above"):
        moe_experts(x, gate_up, down, weights, torch.tensor([[0, 1], [2, 4], [3, 1]]), "silu")
    with pytest.raises(ValueError, match="1 below"):
        moe_experts(x, gate_up, down, weights, torch.tensor([[0, 1], [2, -1], [3, 1]]), "silu")
    with pytest.raises(ValueError, match="moe_experts: gate_up must be"):
        moe_experts(x, gate_up[:, :, :8], down, weights, ids, "silu")
    with pytest.raises(ValueError, match="moe_experts: gate_up .* must have x's dtype"):
        moe_experts(x, gate_up.double(), down, weights, ids, "silu")
    with pytest.raises(ValueError, match="moe_experts: expert_ids must be \\[T=3, K>=1\\]"):
        moe_experts(x, gate_up, down, weights, ids[:2], "silu")
    with pytest.raises(ValueError, match="moe_experts: weights must match"):
        moe_experts(x, gate_up, down, weights[:, :1], ids, "silu")
    with pytest.raises(ValueError, match="moe_experts: x must have 2 dims"):
        moe_experts(x[0], gate_up, down, weights, ids, "silu")
    with pytest.raises(ValueError, match="moe_experts: activation must be one of"):
        moe_experts(x, gate_up, down, weights, ids, "gelu")
