"""The Gemma 4 MoE layer's feed-forward block runs as fused ops (so the fusion cannot silently regress):
after the attention tail, one ``rms_norm_pair`` (the router's and the experts' input norms of ``h``), the
MLP, the router projection, ``moe_route``, ``moe_experts`` and one ``dual_post_norm_residual`` (both
post norms, their sum, the post-feed-forward norm, the residual add, the layer scalar, the next norm),
with no torch arithmetic between them. Counted through the model's kernel registry and a dispatch mode."""

from __future__ import annotations

import torch
from anna_core.testing.runner import prefill_logits
from torch.utils._python_dispatch import TorchDispatchMode

from tests.gemma4.conftest import load_anna
from tests.gemma4.kernel_ops import KernelOpCalls

MOE_TAIL = ["post_norm_residual", "rms_norm_pair", "linear_act_mul", "linear", "linear", "moe_route", "moe_experts",
            "dual_post_norm_residual"]
"""What an MoE layer issues from its attention's tail (``post_norm_residual``) to its end on the torch references
(with an accelerated ``post_norm_residual_norm_pair`` its first two are that one op:
``tests/xpu_kernels/test_gemma_fused_ops.py``)."""

VIEWS = {"view", "reshape", "unsqueeze", "squeeze", "slice", "select", "expand", "t", "transpose", "_unsafe_view",
         "detach", "alias", "split_with_sizes", "split"}


class _Recorder(TorchDispatchMode):
    """Records ``("op", name)`` for each kernel op call and ``("aten", name)`` for each torch op run outside one."""

    def __init__(self, events: list[tuple[str, str]], calls: KernelOpCalls):
        super().__init__()
        self.events, self.calls = events, calls

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not self.calls.depth:
            self.events.append(("aten", func.overloadpacket.__name__))
        return func(*args, **(kwargs or {}))


def _record_moe_layers(model) -> list[list[tuple[str, str]]]:
    """Patch ``model`` so each MoE layer's forward records its events; returns the (growing) list of them."""
    per_call, active = [], [False]

    def on_op(op: str) -> None:
        if active[0]:
            per_call[-1].append(("op", op))

    calls = KernelOpCalls(model.ops.registry, on_op)
    for layer in model.modules():
        if getattr(layer, "has_moe", False):
            def forward(*args, _orig=layer.forward, **kwargs):
                per_call.append([])
                active[0] = True
                try:
                    with _Recorder(per_call[-1], calls):
                        return _orig(*args, **kwargs)
                finally:
                    active[0] = False

            layer.forward = forward
    return per_call


def test_moe_layer_feed_forward_runs_as_fused_ops(gemma4_factory):
    model = load_anna(gemma4_factory(variant="moe")).model
    moe_layers = sum(bool(getattr(m, "has_moe", False)) for m in model.modules())
    per_call = _record_moe_layers(model)
    with torch.no_grad():
        prefill_logits(model, [5, 17, 33, 101], chunk_size=2)  # a prefill chunk, then a decode-sized step
    assert moe_layers > 0 and len(per_call) == 2 * moe_layers
    for events in per_call:
        ops = [name for kind, name in events if kind == "op"]
        assert ops[ops.index("post_norm_residual"):] == MOE_TAIL
        # no torch arithmetic between the fused ops of the feed-forward block (the unfused block had 2 muls,
        # 4 norms and an add there)
        first = events.index(("op", "post_norm_residual"))
        loose = {name for kind, name in events[first:] if kind == "aten"} - VIEWS
        assert not loose, loose


def test_router_follows_transformers_rounding(gemma4_factory):
    """The fused router input (``rms_norm_pair``) rounds as transformers' ``Gemma4TextRouter``: in float32 its
    weights and experts match HF's router, in bf16 its input is HF's after each rounding (the norm, ``* scale``,
    ``* hidden ** -0.5``); the only difference left is HF's ``pow(ms, -0.5)`` against ``rsqrt(ms)`` before the
    first rounding (at most one bf16 ulp, on a few elements)."""
    from anna_core.testing.oracle import hf_model

    path = gemma4_factory(variant="moe")
    gen = torch.Generator().manual_seed(3)
    for dtype in (torch.float32, torch.bfloat16):
        hf = next(m for m in hf_model(path, dtype).modules() if type(m).__name__ == "Gemma4TextRouter")
        layer = next(m for m in load_anna(path, dtype=dtype).model.modules() if getattr(m, "has_moe", False))
        assert torch.equal(layer.router.scale, hf.scale)
        h = (4 * torch.randn(256, hf.hidden_size, generator=gen)).to(dtype)
        with torch.no_grad():
            want_x = hf.norm(h) * hf.scale * hf.scalar_root_size
            _, got_x = layer.ops.rms_norm_pair(h, layer.pre_feedforward_layernorm_2.weight, layer.router.norm.eps,
                                               False, layer.router.scale, layer.router.root_scale)
            expert_input, router_input = layer.router.inputs(h, layer.pre_feedforward_layernorm_2)
            weights, experts = layer.router(router_input)
            _, want_w, want_e = hf(h)
        assert torch.equal(expert_input, layer.pre_feedforward_layernorm_2(h)) and torch.equal(router_input, got_x)
        if dtype == torch.float32:
            torch.testing.assert_close(got_x, want_x, rtol=1e-6, atol=0)
            assert torch.equal(experts, want_e)
            torch.testing.assert_close(weights, want_w, rtol=1e-5, atol=1e-6)
        else:
            off = got_x != want_x
            assert off.float().mean() < 0.02  # pow against rsqrt only
            ulp = torch.finfo(torch.bfloat16).eps * want_x.float().abs()
            assert ((got_x.float() - want_x.float()).abs() <= ulp)[off].all()
