"""HF parity of the Qwen3.5 MoE text stack: logits, greedy tokens, and the experts each token is routed to."""

from __future__ import annotations

import pytest
import torch
from anna_core.testing.oracle import hf_greedy, hf_model, hf_reference_logits
from anna_core.testing.runner import prefill_logits, simple_greedy

from tests.qwen35.conftest import load_anna, rel_err

TOL = 1e-4

VARIANTS = {
    "text-per-expert-e8-k2": dict(layout="text", num_experts=8, top_k=2),
    "text-fused-e16-k4": dict(layout="text", num_experts=16, top_k=4, fused=True),
    "vl-per-expert-e16-k4-tied": dict(layout="vl", num_experts=16, top_k=4, tie=True),
    "vl-fused-e8-k2": dict(layout="vl", num_experts=8, top_k=2, fused=True),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_prefill_logits_match_hf(tiny_moe_factory, prompt, variant):
    path = tiny_moe_factory(**VARIANTS[variant])
    anna = load_anna(path)
    ref = hf_reference_logits(path, prompt)
    mine = prefill_logits(anna.model, prompt)  # 40 tokens at once
    assert mine.shape == ref.shape == (40, 384)
    assert rel_err(mine, ref) <= TOL
    assert (mine.argmax(-1) == ref.argmax(-1)).all()
    # one token at a time (decode-sized moe_experts calls)
    assert rel_err(prefill_logits(anna.model, prompt[:12], chunk_size=1), ref[:12]) <= TOL


@pytest.mark.parametrize("variant", ["text-per-expert-e8-k2", "vl-fused-e8-k2", "text-fused-e16-k4"])
def test_greedy_32_tokens_match_hf_generate(tiny_moe_factory, prompt, variant):
    path = tiny_moe_factory(**VARIANTS[variant])
    anna = load_anna(path)
    expected = hf_greedy(path, prompt[:10], 32)
    assert len(set(expected)) > 3  # not a degenerate repetition
    assert simple_greedy(anna.model, prompt[:10], 32) == expected
    assert simple_greedy(anna.model, prompt[:10], 32, chunk_size=3, block_size=4) == expected


def _hf_routing(model, layers, ids):
    """Per layer: (experts [T, K], weights [T, K], the k-th minus (k+1)-th router logit [T]: the top-k choice
    is decided by the logits' order, so this margin says whether float32 rounding could flip it)."""
    out, handles = {}, []
    for i, layer in enumerate(layers):
        def hook(module, args, result, i=i):
            logits, weights, experts = result
            ranked = logits.float().sort(-1, descending=True).values
            k = experts.shape[-1]
            out[i] = (experts, weights, ranked[:, k - 1] - ranked[:, k])
        handles.append(layer.mlp.gate.register_forward_hook(hook))
    with torch.no_grad():
        model(input_ids=torch.tensor([ids]), use_cache=False)
    for h in handles:
        h.remove()
    return out


@pytest.mark.parametrize("variant", ["text-per-expert-e8-k2", "vl-per-expert-e16-k4-tied"])
def test_the_same_experts_as_hf_at_every_layer(tiny_moe_factory, prompt, variant):
    path = tiny_moe_factory(**VARIANTS[variant])
    hf = hf_model(path)
    text = hf.model.language_model if hasattr(hf.model, "language_model") else hf.model
    ref = _hf_routing(hf, text.layers, prompt)
    anna = load_anna(path)
    mine = {}
    for i, layer in enumerate(anna.model.model.layers):
        def recording(x, inner=layer.mlp.route, i=i):
            mine[i] = inner(x)
            return mine[i]
        layer.mlp.route = recording
    prefill_logits(anna.model, prompt)
    assert sorted(mine) == sorted(ref) == [0, 1, 2, 3]
    for i, (experts, weights, margin) in ref.items():
        assert margin.min() > 1e-4, f"layer {i}: the k-th/(k+1)-th choice is not decisive"
        my_weights, my_experts = mine[i]
        assert torch.equal(my_experts.sort(-1).values, experts.sort(-1).values), f"layer {i}"
        torch.testing.assert_close(my_weights, weights, atol=TOL, rtol=0)
    # the prompt uses many experts, not a few
    assert len(torch.unique(ref[0][0])) >= 6


def test_routed_experts_are_the_moe_experts_op(tiny_moe_factory):
    """The block's experts run anna-core's moe_experts op; per token it is its experts' SiLU-gated MLPs,
    weighted, in decode-sized and prefill-sized calls alike."""
    from anna_core.kernels.reference.moe import moe_experts

    anna = load_anna(tiny_moe_factory(**VARIANTS["text-fused-e16-k4"]))
    block = anna.model.model.layers[1].mlp
    experts_module = block.experts
    x = torch.randn(40, 64, generator=torch.Generator().manual_seed(3))
    weights, experts = block.route(x)
    got = experts_module(x, weights, experts)
    want = moe_experts(x, experts_module.gate_up_proj, experts_module.down_proj, weights, experts, "silu")
    assert torch.equal(got, want)
    for t in (5, 17):  # by hand, and alone (one token: a decode step's call)
        y = torch.zeros(64)
        for k in range(experts.shape[1]):
            e = experts[t, k]
            gate, up = (experts_module.gate_up_proj[e] @ x[t]).chunk(2)
            y += weights[t, k] * (experts_module.down_proj[e] @ (torch.nn.functional.silu(gate) * up))
        torch.testing.assert_close(got[t], y, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(experts_module(x[t:t + 1], weights[t:t + 1], experts[t:t + 1])[0], y,
                                   atol=1e-5, rtol=1e-5)
    assert anna.model.ops.registry.chosen()["moe_experts"] == "reference"
