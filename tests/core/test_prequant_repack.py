"""Repacking one pre-quantized linear into Anna's layouts (:mod:`anna_core.weights.prequant`, issue 29): the
dense weight of the repacked layer equals ``(q - z) * s`` computed from the codes before packing
(:mod:`anna_core.testing.prequant_checkpoints` packs them by the formats' rules), for GPTQ v1 / v2, group sizes
128, 256 and -1, and AWQ; mis-shaped tensors and configs are errors."""

from __future__ import annotations

import pytest
import torch
from anna_core.errors import ModelLoadError
from anna_core.testing.prequant_checkpoints import awq_tensors, gptq_tensors, rtn_int4
from anna_core.weights.gpu_quant import dequantize
from anna_core.weights.prequant import (
    PrequantConfig,
    UnsupportedQuantizationError,
    read_quantization_config,
    repack,
)


def _codes(n, k, group, min_zero, sym=False):
    w = torch.randn(n, k, generator=torch.Generator().manual_seed(n + k))
    q, z, s = rtn_int4(w, group, sym, torch.Generator().manual_seed(0), min_zero)
    reps = q.shape[0] // z.shape[0]
    dense = ((q - z.repeat_interleave(reps, 0)).float() * s.float().repeat_interleave(reps, 0)).t()  # [N, K]
    return q, z, s, dense


@pytest.mark.parametrize(("layout", "group", "v1"), [("gptq", 128, True), ("gptq", 256, False), ("gptq", -1, True),
                                                     ("awq", 128, False), ("awq", 256, False)])
def test_repacked_weight_dequantizes_to_the_codes_weight(layout, group, v1):
    n, k = 48, 512
    q, z, s, dense = _codes(n, k, group, 1 if v1 else 0)
    tensors = gptq_tensors(q, z, s, group, v1) if layout == "gptq" else awq_tensors(q, z, s)
    cfg = PrequantConfig(method=layout, layout=layout, group_size=group, zero_offset=1 if v1 else 0)
    w = repack("layers.0.proj", tensors, cfg, torch.float32)
    assert w.scheme == "int4" and w.shape == (n, k) and w.scale.shape == (n, k // 128)
    assert torch.allclose(dequantize(w.qweight, w.scale, w.zero, "int4"), dense, rtol=0, atol=1e-6)


def test_gptq_v1_offset_matters():
    q, z, s, dense = _codes(16, 128, 128, 1)
    cfg_v2 = PrequantConfig(method="gptq", layout="gptq", zero_offset=0)  # reading v1 data as v2 is off by one step
    w = repack("p", gptq_tensors(q, z, s, 128, True), cfg_v2, torch.float32)
    diff = dequantize(w.qweight, w.scale, w.zero, "int4") - dense
    assert torch.allclose(diff, s.float().t().expand(16, 128), atol=1e-6)


def test_mis_shaped_and_missing_tensors_are_load_errors():
    q, z, s, _ = _codes(16, 256, 128, 1)
    t = gptq_tensors(q, z, s, 128, True)
    cfg = PrequantConfig(method="gptq", layout="gptq", zero_offset=1)
    with pytest.raises(ModelLoadError, match=r"p.scales: shape \[2, 8\], expected \[2, 16\]"):
        repack("p", {**t, "scales": t["scales"][:, :8]}, cfg, torch.float32)
    with pytest.raises(ModelLoadError, match=r"missing tensors \['p.qzeros'\]"):
        repack("p", {k: v for k, v in t.items() if k != "qzeros"}, cfg, torch.float32)
    with pytest.raises(ModelLoadError, match="must be int32"):
        repack("p", {**t, "qweight": t["qweight"].float()}, cfg, torch.float32)


def test_configs():
    assert read_quantization_config({}) is None
    nested = read_quantization_config({"text_config": {"quantization_config": {
        "quant_method": "awq", "bits": 4, "group_size": 128, "version": "GEMM", "modules_to_not_convert": ["visual"]}}})
    assert (nested.layout, nested.kind, nested.skip, nested.zero_offset) == ("awq", "int4-awq", ("visual",), 0)
    gptq = read_quantization_config({"quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": -1}})
    assert (gptq.zero_offset, gptq.group_size, gptq.scheme) == (1, -1, "int4")
    ar = read_quantization_config({"quantization_config": {"quant_method": "intel/auto-round", "bits": 4,
                                                           "group_size": 128, "packing_format": "auto_round:gptqmodel"}})
    assert (ar.method, ar.layout, ar.zero_offset) == ("intel/auto-round", "gptq", 0)
    with pytest.raises(UnsupportedQuantizationError, match="extra_config gives 'model.layers.0.mlp.down_proj' 8 bits"):
        read_quantization_config({"quantization_config": {
            "quant_method": "auto-round", "bits": 4, "group_size": 128,
            "extra_config": {"model.layers.0.mlp.down_proj": {"bits": 8}, "lm_head": {"bits": 16}}}})
    with pytest.raises(UnsupportedQuantizationError, match="'gptq': per-module 'dynamic'"):
        read_quantization_config({"quantization_config": {"quant_method": "gptq", "bits": 4, "dynamic": {"x": {}}}})


def test_a_prequantized_checkpoint_under_tensor_parallelism_is_a_load_error(tmp_path):
    from anna_core.distributed.sharding import ShardReader
    from anna_core.distributed.state import SINGLE
    from anna_core.weights.prequant import read_quantization_config
    from anna_core.weights.prequant_loader import load_checkpoint

    cfg = read_quantization_config({"quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 128,
                                                            "sym": True, "desc_act": False}})
    with pytest.raises(ModelLoadError, match="tensor parallelism of a pre-quantized checkpoint"):
        load_checkpoint(torch.nn.Linear(4, 4), tmp_path, {}, cfg, None, device=torch.device("cpu"),
                        dtype=torch.float32, shards=ShardReader((), SINGLE))


GPTQ = {"quant_method": "gptq", "bits": 4, "group_size": 128}


@pytest.mark.parametrize(("qc", "message"), [
    ({**GPTQ, "group_size": None}, r"'gptq': quantization_config.group_size must be an integer, got None"),
    ({**GPTQ, "group_size": "abc"}, r"quantization_config.group_size must be an integer, got 'abc' \(str\)"),
    ({**GPTQ, "group_size": 128.0}, r"group_size must be an integer, got 128.0 \(float\)"),
    ({**GPTQ, "bits": "4"}, r"quantization_config.bits must be an integer, got '4' \(str\)"),
    ({**GPTQ, "bits": True}, r"quantization_config.bits must be an integer, got True"),
    ({"quant_method": "gptq", "group_size": 128}, r"'gptq': quantization_config has no bits"),
    ({**GPTQ, "bits": 8}, r"'gptq': 8-bit weights are not supported \(4 only\)"),
    ({**GPTQ, "checkpoint_format": None}, r"quantization_config.checkpoint_format must be a string, got None"),
    ({**GPTQ, "modules_to_not_convert": "lm_head"}, r"modules_to_not_convert must be a list of strings or null"),
    ({"quant_method": "awq", "w_bit": 4, "q_group_size": "128"}, r"'awq': quantization_config.q_group_size must be"),
    ({"quant_method": "awq", "bits": 4, "version": 2}, r"quantization_config.version must be a string, got 2"),
    ({"quant_method": "awq", "bits": 4, "zero_point": "false"}, r"quantization_config.zero_point must be true or"),
    ({"quant_method": "fp8", "weight_block_size": 128}, r"'fp8': quantization_config.weight_block_size must be a list "
                                                        r"of two integers \(\[128, 128\]\), got 128 \(int\)"),
    ({"quant_method": "fp8", "weight_block_size": ["128", "128"]}, r"weight_block_size must be a list of two integers"),
    ({"quant_method": "fp8", "weight_block_size": [64, 64]}, r"weight_block_size \[64, 64\] is not supported"),
    ({"quant_method": "fp8", "weight_block_size": [128, 128], "fmt": None}, r"quantization_config.fmt must be a"),
    ({"quant_method": "auto-round", "bits": 4, "extra_config": {"model.layers.0.mlp.up_proj": {"bits": "8"}}},
     r"quantization_config.extra_config\['model.layers.0.mlp.up_proj'\].bits must be an integer, got '8'"),
    ({"quant_method": "auto-round", "bits": 4, "extra_config": ["lm_head"]}, r"extra_config must be an object"),
    ({"quant_method": "auto-round", "bits": 4, "extra_config": {"lm_head": 16}}, r"extra_config\['lm_head'\] must be"),
    ({"quant_method": "auto-round", "bits": 4, "packing_format": None}, r"packing_format must be a string, got None"),
    ({"quant_method": None, "bits": 4}, r"^quantization_config.quant_method must be a string, got None"),
    ({"bits": 4}, r"^quantization_config has no quant_method$"),
])
def test_malformed_configs_are_errors_naming_the_field(qc, message):
    """Each malformed field is an UnsupportedQuantizationError (a ModelLoadError) naming it, not a TypeError or
    ValueError from deep inside the parser."""
    with pytest.raises(UnsupportedQuantizationError, match=message):
        read_quantization_config({"quantization_config": qc})


@pytest.mark.parametrize(("layout", "suffix", "dtype", "message"), [
    ("gptq", "scales", torch.int32, r"p.scales: dtype int32, expected float16 or bfloat16 or float32"),
    ("gptq", "scales", torch.uint8, r"p.scales: dtype uint8, expected float16"),
    ("gptq", "g_idx", torch.float32, r"p.g_idx: dtype float32, expected int32 or int64"),
    ("gptq", "qzeros", torch.int64, r"p: GPTQ qweight / qzeros must be int32"),
    ("awq", "scales", torch.int32, r"p.scales: dtype int32, expected float16"),
    ("awq", "qweight", torch.float16, r"p: AWQ qweight / qzeros must be int32"),
])
def test_quantized_tensors_of_the_wrong_dtype_are_load_errors(layout, suffix, dtype, message):
    """An int32 ``scales`` (same shape, so no shape check catches it) used to repack into garbage weights."""
    q, z, s, _ = _codes(16, 256, 128, 1)
    t = gptq_tensors(q, z, s, 128, True) if layout == "gptq" else awq_tensors(q, z, s)
    cfg = PrequantConfig(method=layout, layout=layout, zero_offset=1 if layout == "gptq" else 0)
    repack("p", t, cfg, torch.float32)  # the well-typed tensors load
    with pytest.raises(ModelLoadError, match=message):
        repack("p", {**t, suffix: t[suffix].to(dtype)}, cfg, torch.float32)


def test_fp8_scales_of_the_wrong_dtype_are_load_errors():
    cfg = PrequantConfig(method="fp8", layout="fp8", group_size=128)
    w = torch.randn(256, 128).to(torch.float8_e4m3fn)
    assert repack("p", {"weight": w, "weight_scale_inv": torch.ones(2, 1, dtype=torch.bfloat16)}, cfg,
                  torch.float32).scale.dtype == torch.float32
    with pytest.raises(ModelLoadError, match=r"p.weight_scale_inv: dtype int32, expected float16"):
        repack("p", {"weight": w, "weight_scale_inv": torch.ones(2, 1, dtype=torch.int32)}, cfg, torch.float32)
    with pytest.raises(ModelLoadError, match=r"p.weight: expected a 2-D float8_e4m3fn tensor, got torch.bfloat16"):
        repack("p", {"weight": w.bfloat16(), "weight_scale_inv": torch.ones(2, 1)}, cfg, torch.float32)


@pytest.mark.parametrize("layout", ["gptq", "awq", "fp8"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_scales_are_load_errors(layout, bad):
    """A NaN or infinite scale would dequantize a whole group into garbage: the load names the tensor."""
    if layout == "fp8":
        t = {"weight": torch.randn(256, 128).to(torch.float8_e4m3fn), "weight_scale_inv": torch.ones(2, 1)}
        cfg, name = PrequantConfig(method="fp8", layout="fp8", group_size=128), "weight_scale_inv"
    else:
        q, z, s, _ = _codes(16, 256, 128, 1)
        t = gptq_tensors(q, z, s, 128, True) if layout == "gptq" else awq_tensors(q, z, s)
        cfg, name = PrequantConfig(method=layout, layout=layout, zero_offset=1 if layout == "gptq" else 0), "scales"
    repack("p", t, cfg, torch.float32)  # finite scales load
    broken = t[name].clone()
    broken.view(-1)[-1] = bad
    with pytest.raises(ModelLoadError, match=rf"p.{name}: 1 of {broken.numel()} values are NaN or infinite"):
        repack("p", {**t, name: broken}, cfg, torch.float32)


@pytest.mark.parametrize("code", [0x7F, 0xFF])
def test_fp8_nan_codes_are_load_errors(code):
    """e4m3fn's only non-finite codes (the largest finite magnitude, 0x7E / 0xFE = +-448, loads)."""
    cfg = PrequantConfig(method="fp8", layout="fp8", group_size=128)
    w = torch.randn(256, 128).to(torch.float8_e4m3fn)
    w.view(torch.uint8)[3, :2] = torch.tensor([0x7E, 0xFE], dtype=torch.uint8)
    repack("p", {"weight": w, "weight_scale_inv": torch.ones(2, 1)}, cfg, torch.float32)
    w.view(torch.uint8)[7, 5] = code
    with pytest.raises(ModelLoadError, match=r"p.weight: 1 of 32768 float8_e4m3fn codes are NaN"):
        repack("p", {"weight": w, "weight_scale_inv": torch.ones(2, 1)}, cfg, torch.float32)


def _act_order(n, k, group, seed=0):
    from anna_core.testing.prequant_checkpoints import act_order_int4

    w = torch.randn(n, k, generator=torch.Generator().manual_seed(seed))
    perm = torch.randperm(k, generator=torch.Generator().manual_seed(seed + 1))
    q, z, s, g_idx = act_order_int4(w, perm, group, False, torch.Generator().manual_seed(0), 1)
    g = g_idx.long()
    dense = ((q - z[g]).float() * s.float()[g]).t()  # W[n, k] = (q[k, n] - z[g_idx[k], n]) * s[g_idx[k], n]
    return gptq_tensors(q, z, s, group, True, g_idx), dense


@pytest.mark.parametrize("group", [128, 256])
def test_act_order_gptq_repacks_with_its_column_order(group):
    """An act-order g_idx (scattered groups): the repacked weight keeps a ``perm``; its stored columns are the dense
    weight's in that order, so ``x[..., perm] @ stored^T`` is ``x @ W^T``."""
    from anna_core.weights.prequant import act_order_perm

    tensors, dense = _act_order(40, 512, group)
    cfg = PrequantConfig(method="gptq", layout="gptq", group_size=group, zero_offset=1)
    w = repack("p", tensors, cfg, torch.float32)
    assert w.perm is not None and w.perm.dtype == torch.int64 and torch.equal(w.perm.sort().values, torch.arange(512))
    assert torch.equal(tensors["g_idx"][w.perm].long(), torch.arange(512) // group)  # groups contiguous once sorted
    stored = dequantize(w.qweight, w.scale, w.zero, "int4")
    assert torch.allclose(stored, dense[:, w.perm], rtol=0, atol=1e-6)
    x = torch.randn(3, 512, generator=torch.Generator().manual_seed(9))
    assert torch.allclose(x[:, w.perm] @ stored.T, x @ dense.T, rtol=1e-5, atol=1e-4)
    trivial = torch.arange(512, dtype=torch.int32) // group
    assert act_order_perm("p", trivial, group) is None  # desc_act with static groups: no permutation


def test_inconsistent_g_idx_is_a_load_error_naming_the_tensor():
    tensors, _ = _act_order(16, 256, 128)
    cfg = PrequantConfig(method="gptq", layout="gptq", group_size=128, zero_offset=1)
    g_idx = tensors["g_idx"].clone()
    g_idx[g_idx == 0] = torch.tensor([1] + [0] * 127, dtype=torch.int32)  # group 1 gets 129 rows, group 0 127
    with pytest.raises(ModelLoadError, match=r"layers.3.mlp.down_proj.g_idx: group 0 holds 127 input rows, expected "
                                             r"128 \(group_size 128\)"):
        repack("layers.3.mlp.down_proj", {**tensors, "g_idx": g_idx}, cfg, torch.float32)
    with pytest.raises(ModelLoadError, match=r"p.g_idx: group indices in \[0, 2\], expected \[0, 1\]"):
        repack("p", {**tensors, "g_idx": torch.where(g_idx == 1, 2, g_idx)}, cfg, torch.float32)
    with pytest.raises(ModelLoadError, match=r"p.g_idx: shape \[128\], expected \[256\]"):
        repack("p", {**tensors, "g_idx": tensors["g_idx"][:128]}, cfg, torch.float32)
    with pytest.raises(ModelLoadError, match=r"p.g_idx: dtype float32"):
        repack("p", {**tensors, "g_idx": tensors["g_idx"].float()}, cfg, torch.float32)


def test_wq_linear_with_a_perm_gathers_its_input_fuses_norms_merges_and_dequantizes():
    from anna_core.kernels.reference.norms import add_rms_norm
    from anna_core.kernels.registry import KernelRegistry, bind_ops
    from anna_core.layers.wq_linear import WQLinear

    ops = bind_ops(KernelRegistry.from_plugins(), "cpu", torch.float32)
    cfg = PrequantConfig(method="gptq", layout="gptq", group_size=128, zero_offset=1)
    (ta, da), (tb, db) = _act_order(64, 256, 128, seed=0), _act_order(64, 256, 128, seed=0)
    tb = {**tb, "scales": tb["scales"] * 2}  # same column order (seed), other values
    layer_a, layer_b = (WQLinear(repack("p", t, cfg, torch.float32), None, ops) for t in (ta, tb))
    db = db * 2
    x, res = (torch.randn(3, 256, generator=torch.Generator().manual_seed(i)) for i in range(2))
    nw = torch.rand(256, generator=torch.Generator().manual_seed(2)) + 0.5
    assert torch.allclose(layer_a(x), x @ da.T, rtol=1e-5, atol=1e-4)
    assert torch.equal(layer_a.dense(torch.float32).weight, da)
    y, h = layer_a.add_norm(x, res, nw, 1e-6, False)
    normed, want_h = add_rms_norm(x, res, nw, 1e-6, False)
    assert torch.equal(h, want_h) and torch.allclose(y, normed @ da.T, rtol=1e-5, atol=1e-4)
    merged = WQLinear.merged([layer_a, layer_b])
    assert merged is not None and torch.equal(merged.perm, layer_a.perm)
    y, _ = merged.add_norm(x, res, nw, 1e-6, False, "silu")
    gate, up = normed @ da.T, normed @ db.T
    assert torch.allclose(y, torch.nn.functional.silu(gate) * up, rtol=1e-4, atol=1e-4)
    other = WQLinear(repack("p", _act_order(64, 256, 128, seed=5)[0], cfg, torch.float32), None, ops)
    assert WQLinear.merged([layer_a, other]) is None  # another column order: they cannot share one weight


def test_stack_experts_refuses_what_moe_experts_wq_cannot_take():
    """Pre-quantized routed experts stack into ``--expert-quant int4``'s layout only as plain int4: act-order
    experts (a column order each), fp8 ones and mismatched shapes are load errors naming the layer."""
    from anna_core.layers.wq_experts import stack_experts
    from anna_core.weights.gpu_quant import QuantizedWeight, quantize

    cfg = PrequantConfig(method="gptq", layout="gptq", group_size=128, zero_offset=1)
    act_order = repack("p", _act_order(256, 256, 128)[0], cfg, torch.float32)
    plain = quantize(torch.randn(256, 256), "int4", torch.float32)
    with pytest.raises(ModelLoadError, match=r"layers.1.mlp.experts: act-order \(desc_act\) MoE routed experts"):
        stack_experts("layers.1.mlp.experts", [plain], [plain], [act_order], "silu", None, 2, "int4-gptq")
    fp8 = quantize(torch.randn(256, 256), "fp8")
    with pytest.raises(ModelLoadError, match="experts in fp8 are not supported"):
        stack_experts("e", [fp8], [fp8], [fp8], "silu", None, 2, "fp8-block")
    narrow = quantize(torch.randn(128, 256), "int4", torch.float32)
    with pytest.raises(ModelLoadError, match="the experts' gate_proj differ in shape"):
        stack_experts("e", [plain, narrow], [plain, plain], [plain, plain], "silu", None, 2, "int4-gptq")
    with pytest.raises(ModelLoadError, match="1 gate, 1 up, 2 down"):
        stack_experts("e", [plain], [plain], [plain, plain], "silu", None, 2, "int4-gptq")
    up = QuantizedWeight(plain.qweight, plain.scale * 2, plain.zero, "int4")
    stacked = stack_experts("e", [plain, plain], [up, up], [plain, plain], "silu", None, 2, "int4-gptq")
    assert stacked.gate_up_q.shape == (2, 512, 128) and stacked.kind == "int4-gptq"
    assert torch.equal(stacked.gate_up_scale[1, 256:], plain.scale * 2)  # each expert's up rows follow its gate rows
