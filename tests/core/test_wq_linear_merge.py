"""Merging accelerator-quantized projections (:meth:`WQLinear.merged` through ``merge_linears``: pre-quantized
q/k/v and gate/up parts) and :func:`weight_kinds` (``/healthz``'s ``weights``)."""

from __future__ import annotations

import pytest
import torch
from anna_core.kernels.registry import KernelRegistry, bind_ops
from anna_core.layers.linear import merge_linears
from anna_core.layers.wq_linear import WQLinear, dequantize_linears, weight_kinds
from anna_core.weights.gpu_quant import QuantizedWeight, dequantize, quantize
from torch import nn

OPS = bind_ops(KernelRegistry.from_plugins(), "cpu", torch.float32)


def _wq(n, k, scheme, seed, kind=None, bias=False):
    w = torch.randn(n, k, generator=torch.Generator().manual_seed(seed))
    b = torch.randn(n, generator=torch.Generator().manual_seed(seed + 100)) if bias else None
    return WQLinear(quantize(w, scheme, torch.float32), b, OPS, kind=kind)


def _dense_weight(m):
    return dequantize(m.qweight, m.scale, m.zero, m.scheme)


def test_int4_parts_merge_into_one_quantized_layer_with_the_same_outputs():
    parts = [_wq(64, 256, "int4", 0, "int4-gptq", bias=True), _wq(24, 256, "int4", 1, "int4-gptq", bias=True)]
    merged = merge_linears(parts)
    assert isinstance(merged, WQLinear) and merged.kind == "int4-gptq" and merged.out_features == 88
    x = torch.randn(3, 256, generator=torch.Generator().manual_seed(5))
    want = torch.cat([p(x) for p in parts], dim=-1)
    assert torch.allclose(merged(x), want, rtol=1e-5, atol=1e-5)


def test_fp8_parts_off_the_block_grid_merge_dense_with_equal_values():
    parts = [_wq(100, 128, "fp8", 0, "fp8-block"), _wq(128, 128, "fp8", 1, "fp8-block")]
    assert WQLinear.merged(parts) is None  # 100 rows do not end on a 128-row scale block
    merged = merge_linears(parts)
    assert type(merged) is nn.Linear and merged.weight.dtype == torch.float32
    assert torch.equal(merged.weight, torch.cat([_dense_weight(p) for p in parts]))
    aligned = merge_linears([_wq(128, 128, "fp8", 0), _wq(100, 128, "fp8", 1)])  # only the last may be ragged
    assert isinstance(aligned, WQLinear) and aligned.scale.shape == (2, 1)


def test_mixed_kinds_and_dense_parts_merge_dense():
    assert WQLinear.merged([_wq(64, 128, "int4", 0, "int4-gptq"), _wq(64, 128, "int4", 1, "int4-awq")]) is None
    dense = nn.Linear(128, 8, bias=False)
    merged = merge_linears([_wq(64, 128, "int4", 0), dense])
    assert type(merged) is nn.Linear and merged.weight.shape == (72, 128)
    assert torch.equal(merged.weight[64:], dense.weight.detach())


def test_weight_kinds_and_dequantize_linears():
    class Toy(nn.Module):
        def __init__(self):
            super().__init__()
            self.model = nn.Module()
            self.model.embed_tokens = nn.Embedding(10, 128).to(torch.bfloat16)
            self.model.layers = nn.ModuleList([_wq(64, 128, "int4", 0, "int4-awq"), nn.Linear(128, 4)])

    toy = Toy()
    assert weight_kinds(toy) == {"linear": "float32+int4-awq", "lm_head": "bfloat16"}  # a tied head: the embedding's
    toy.lm_head = _wq(10, 128, "fp8", 3, "fp8-block")
    assert weight_kinds(toy)["lm_head"] == "fp8-block"
    assert dequantize_linears(toy.model, torch.float32) == 1
    assert weight_kinds(toy)["linear"] == "float32"


def test_a_task_model_that_is_not_a_module_has_no_weight_kinds():
    from anna_core.layers.wq_linear import weight_kinds

    class Reverser:  # a task family's "model" (tests/server/echo_task.py): /healthz must still build
        def __call__(self, text: str) -> str:
            return text[::-1]

    assert weight_kinds(Reverser()) == {}


def test_act_order_down_proj_order_folds_into_gate_up_rows():
    """An act-order down_proj (input column order ``perm``): merging gate/up reorders their rows by ``perm``, so
    down_proj no longer gathers, and the MLP's output is unchanged."""
    from anna_core.layers.mlp import SwiGLUMLP
    from anna_core.weights.gpu_quant import QuantizedWeight

    hidden, inter = 128, 256
    mlp = SwiGLUMLP(hidden, inter, OPS)
    mlp.gate_proj, mlp.up_proj = _wq(inter, hidden, "int4", 0), _wq(inter, hidden, "int4", 1)
    down = quantize(torch.randn(hidden, inter, generator=torch.Generator().manual_seed(2)), "int4", torch.float32)
    perm = torch.randperm(inter, generator=torch.Generator().manual_seed(3))
    mlp.down_proj = WQLinear(QuantizedWeight(down.qweight, down.scale, down.zero, "int4", perm), None, OPS)
    x = torch.randn(5, hidden, generator=torch.Generator().manual_seed(4))
    want = mlp(x)  # unmerged: down_proj gathers h[..., perm]
    mlp.merge_gate_up()
    assert mlp.down_proj.perm is None and isinstance(mlp.gate_up_proj, WQLinear)
    assert torch.allclose(mlp(x), want, rtol=1e-5, atol=1e-5)
    norm_w = torch.rand(hidden, generator=torch.Generator().manual_seed(6)) + 0.5
    from anna_core.layers.norm import RMSNorm

    norm = RMSNorm(hidden, 1e-6, OPS)
    norm.weight = nn.Parameter(norm_w, requires_grad=False)
    res = torch.randn(5, hidden, generator=torch.Generator().manual_seed(7))
    got, _ = mlp(x, pre_norm=(norm, res))
    assert torch.allclose(got, mlp(norm(x + res)), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="fp8 scales cover 128-row blocks"):
        _wq(128, 128, "fp8", 0).permute_outputs(torch.arange(128))


def test_merge_linear_runs_keep_each_quantized_part_quantized():
    """Parts that cannot all share one quantized weight merge in greedy runs of consecutive parts (FP8: a part whose
    rows end inside a 128-row scale block closes its run; act-order parts of another column order start one; dense
    parts merge with dense ones), the runs' outputs concatenated being the parts' outputs."""
    from anna_core.layers.linear import merge_linear_runs
    from anna_core.weights.gpu_quant import QuantizedWeight

    fp8 = [_wq(256, 128, "fp8", 0), _wq(64, 128, "fp8", 1), _wq(4, 128, "fp8", 2), _wq(4, 128, "fp8", 3)]
    runs = merge_linear_runs(fp8)
    assert [(m.out_features, n) for m, n in runs] == [(320, 2), (4, 1), (4, 1)]
    assert all(isinstance(m, WQLinear) and m.scheme == "fp8" for m, _ in runs)
    assert runs[1][0] is fp8[2] and runs[2][0] is fp8[3]  # a run of one part is that part
    x = torch.randn(3, 128, generator=torch.Generator().manual_seed(5))
    want = torch.cat([p(x) for p in fp8], dim=-1)
    assert torch.allclose(torch.cat([m(x) for m, _ in runs], dim=-1), want, rtol=1e-5, atol=1e-5)

    def act_order(seed, perm_seed):
        w = quantize(torch.randn(64, 256, generator=torch.Generator().manual_seed(seed)), "int4", torch.float32)
        perm = torch.randperm(256, generator=torch.Generator().manual_seed(perm_seed))
        return WQLinear(QuantizedWeight(w.qweight, w.scale, w.zero, "int4", perm), None, OPS)

    dense = [nn.Linear(256, 4, bias=False), nn.Linear(256, 4, bias=False)]
    parts = [act_order(0, 10), act_order(1, 10), act_order(2, 11), *dense]  # two orders, then dense b / a
    runs = merge_linear_runs(parts)
    assert [n for _, n in runs] == [2, 1, 2]
    assert isinstance(runs[0][0], WQLinear) and torch.equal(runs[0][0].perm, parts[0].perm)
    assert runs[1][0] is parts[2] and type(runs[2][0]) is nn.Linear
    x = torch.randn(2, 256, generator=torch.Generator().manual_seed(6))
    want = torch.cat([p(x) for p in parts], dim=-1)
    assert torch.allclose(torch.cat([m(x) for m, _ in runs], dim=-1), want, rtol=1e-5, atol=1e-5)


def test_fused_topk_head_of_an_act_order_head_equals_its_full_logits():
    """An act-order GPTQ LM head (columns stored in ``perm``'s order): ``head_topk`` gives the top logits and the
    log-normaliser of the layer's own full logits (``x[..., perm] @ w^T``), not of the unpermuted input."""
    from anna_core.layers.topk_head import head_topk

    w = quantize(torch.randn(96, 256, generator=torch.Generator().manual_seed(5)), "int4", torch.float32)
    perm = torch.randperm(256, generator=torch.Generator().manual_seed(6))
    head = WQLinear(QuantizedWeight(w.qweight, w.scale, w.zero, "int4", perm), None, OPS)
    x = torch.randn(3, 256, generator=torch.Generator().manual_seed(7))
    logits = head(x).float()
    values, ids, lse = head_topk(OPS, x, head, 8)
    want_values, want_ids = logits.topk(8, dim=-1)
    torch.testing.assert_close(values, want_values)
    assert torch.equal(ids, want_ids)
    torch.testing.assert_close(lse, logits.logsumexp(-1))


def test_a_layer_without_act_order_calls_kernels_written_to_the_older_contract():
    """``perm`` joined the ``wq_linear`` / ``add_rms_norm_wq_linear`` contracts as a trailing optional argument: a
    layer without act-order calls the op without it, so a third-party kernel written to the older signatures (no
    ``perm``) keeps serving every other quantized model."""
    calls = []

    class OldOps:
        def get(self, name, **facts):
            if name == "wq_linear":
                def wq(x, qweight, scale, zero, scheme, bias):  # the pre-act-order signature
                    calls.append(name)
                    return OPS.get(name, **facts)(x, qweight, scale, zero, scheme, bias)
                return wq

            def fused(x, residual, norm_weight, eps, zero_centered, qweight, scale, zero, scheme, activation=None):
                calls.append(name)
                return OPS.get(name, **facts)(x, residual, norm_weight, eps, zero_centered, qweight, scale, zero,
                                              scheme, activation)
            return fused

    w = quantize(torch.randn(32, 128, generator=torch.Generator().manual_seed(11)), "int4", torch.float32)
    old, layer = WQLinear(w, None, OldOps()), WQLinear(w, None, OPS)
    x = torch.randn(2, 128, generator=torch.Generator().manual_seed(12))
    torch.testing.assert_close(old(x), layer(x))
    got, _ = old.add_norm(x, None, torch.ones(128), 1e-6, False)
    want, _ = layer.add_norm(x, None, torch.ones(128), 1e-6, False)
    torch.testing.assert_close(got, want)
    assert calls == ["wq_linear", "add_rms_norm_wq_linear"]
