"""Pre-quantized Qwen3.5 checkpoints (issue 29): GPTQ (v1 and v2 zero points, group 128 and -1, sym and asym),
AWQ GEMM, FP8 with 128x128 block scales and AutoRound's GPTQ / AWQ exports, loaded without dequantizing.

Each fixture checkpoint is the tiny random Qwen3.5 (hidden 128) with its projections quantized by round-to-nearest
and packed by the formats' documented rules (:mod:`anna_core.testing.prequant_checkpoints`, written from those
rules independently of the repacking code under test). The oracle is the same checkpoint with every quantized
projection replaced by its dequantized weight ``(q - z) * s`` (``q * s`` for fp8), computed from the codes, zero
points and scales before packing:
Anna's logits on the quantized checkpoint must equal the dense oracle's (float32: up to the order of float
rounding, since Anna's int4 layout stores ``-z * s`` instead of ``z``), and the greedy tokens must match.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from anna_core.errors import ModelLoadError
from anna_core.kernels.registry import KernelRegistry
from anna_core.layers.wq_linear import WQLinear, weight_kinds
from anna_core.model_dir import inspect_model_dir
from anna_core.testing.prequant_checkpoints import CASES, GPTQ, build_prequant
from anna_core.testing.runner import prefill_logits, simple_greedy
from anna_core.weights.prequant import UnsupportedQuantizationError
from safetensors.torch import load_file, save_file

from tests.qwen35.conftest import rel_err


def _load(path, *, dtype=torch.float32, weight_quant="auto", cache=False, **options):
    from anna_qwen35.loader import load

    return load(inspect_model_dir(path), device=torch.device("cpu"), dtype=dtype, kernels=KernelRegistry.from_plugins(),
                weight_quant=weight_quant, layout_cache=cache, **options)


@pytest.fixture(scope="module")
def tiny128(anna_tiny_qwen35_factory):
    return anna_tiny_qwen35_factory(layout="text", tie=False, hidden_size=128)


@pytest.fixture(scope="module")
def prompt(long_prompt):
    return long_prompt[:12]


KINDS = {"gptq": "int4-gptq", "awq": "int4-awq", "fp8": "fp8-block"}


@pytest.mark.parametrize("case", list(CASES))
def test_prequantized_logits_equal_dequantized_oracle(tiny128, prompt, tmp_path, case):
    qc, build = CASES[case]
    quant_dir, dense_dir, prefixes = build_prequant(tiny128, tmp_path, qc, **build)
    assert prefixes
    loaded = _load(quant_dir)
    oracle = _load(dense_dir).model
    model = loaded.model
    wq = {n: m for n, m in model.named_modules() if isinstance(m, WQLinear)}
    assert wq and all(m.kind == KINDS[build["layout"]] for m in wq.values())
    # the DeltaNet's qkv / z stay quantized beside its dense b / a (too narrow to pack)
    assert any(n.endswith("linear_attn.in_proj_all") for n in wq)
    kinds = weight_kinds(model)
    assert KINDS[build["layout"]] in kinds["linear"].split("+") and kinds["lm_head"] == "float32"
    ids = prompt + list(range(3, 23))
    got, want = prefill_logits(model, ids), prefill_logits(oracle, ids)
    assert rel_err(got, want) < 1e-4
    assert simple_greedy(model, prompt, 16) == simple_greedy(oracle, prompt, 16)
    # and the dense oracle is not the unquantized model: the quantization did change the logits
    assert rel_err(prefill_logits(_load(tiny128).model, ids), want) > 1e-3


def test_prequantized_bf16_within_bf16_rounding(tiny128, prompt, tmp_path):
    """In bfloat16 the int4 layout rounds the scale and ``-z * s`` to bfloat16 (relative 2**-9 each): on this tiny
    random model (which amplifies every rounding; measured: the dense oracle in bfloat16 is 3.8% off its float32
    logits, the GPTQ checkpoint in bfloat16 6.5%) the GPTQ load stays within 2.5x the bfloat16 oracle's own
    error, and its greedy tokens follow the float32 oracle's as far as the bfloat16 oracle's do."""
    quant_dir, dense_dir, _ = build_prequant(tiny128, tmp_path, GPTQ, layout="gptq")
    model, oracle = _load(quant_dir, dtype=torch.bfloat16).model, _load(dense_dir, dtype=torch.bfloat16).model
    exact = _load(dense_dir).model
    ids = prompt + list(range(3, 23))
    want = prefill_logits(exact, ids)
    bf16_error = rel_err(prefill_logits(oracle, ids), want)
    assert rel_err(prefill_logits(model, ids), want) < 2.5 * bf16_error
    ref = simple_greedy(exact, prompt, 8)
    agree = [sum(a == b for a, b in zip(simple_greedy(m, prompt, 8), ref)) for m in (model, oracle)]
    assert agree[0] >= agree[1] - 1, agree


def test_weight_quant_none_dequantizes(tiny128, prompt, tmp_path):
    quant_dir, dense_dir, _ = build_prequant(tiny128, tmp_path, CASES["awq"][0], layout="awq")
    model = _load(quant_dir, weight_quant="none").model
    assert not any(isinstance(m, WQLinear) for m in model.modules())
    ids = prompt[:8]
    assert rel_err(prefill_logits(model, ids), prefill_logits(_load(dense_dir).model, ids)) < 1e-4


@pytest.mark.parametrize("scheme", ["int8", "int4", "fp8"])
def test_weight_quant_scheme_of_prequantized_is_refused(tiny128, tmp_path, scheme):
    """fp8 on the CPU included: the advice is auto / none, not int8 / int4 (which are refused too)."""
    quant_dir, _, _ = build_prequant(tiny128, tmp_path, GPTQ, layout="gptq")
    with pytest.raises(ModelLoadError, match="already quantized \\(gptq\\); --weight-quant auto serves it as it is"):
        _load(quant_dir, weight_quant=scheme)


def _with_config(src: Path, dst: Path, qc: dict) -> Path:
    shutil.copytree(src, dst)
    config = json.loads((dst / "config.json").read_text())
    (dst / "config.json").write_text(json.dumps({**config, "quantization_config": qc}))
    return dst


@pytest.mark.parametrize(("qc", "match"), [
    ({"quant_method": "bitsandbytes", "load_in_4bit": True}, "'bitsandbytes' is not supported"),
    ({**GPTQ, "bits": 8}, "'gptq': 8-bit"),
    ({**GPTQ, "bits": 3}, "'gptq': 3-bit"),
    ({**GPTQ, "group_size": 64}, "'gptq': group_size 64"),
    ({**GPTQ, "checkpoint_format": "marlin"}, "checkpoint_format 'marlin'"),
    ({"quant_method": "awq", "bits": 4, "group_size": 128, "version": "gemv"}, "'awq': version 'gemv'"),
    ({"quant_method": "fp8", "activation_scheme": "dynamic"}, "'fp8': quantization_config.weight_block_size must be"),
    ({"quant_method": "exl2"}, "'exl2' is not supported"),
    ({"quant_method": "auto-round", "bits": 4, "packing_format": "auto_round:llm_compressor"},
     "packing_format 'auto_round:llm_compressor'"),
])
def test_unsupported_quantization_configs_fail_naming_the_method(tiny128, tmp_path, qc, match):
    path = _with_config(tiny128, tmp_path / "ckpt", qc)
    with pytest.raises(UnsupportedQuantizationError, match=match):
        _load(path)


ACT_ORDER = {**GPTQ, "desc_act": True}


@pytest.fixture(scope="module")
def tiny256(anna_tiny_qwen35_factory):
    """Hidden 256: every projection has two or more groups, so act-order scatters all of them."""
    return anna_tiny_qwen35_factory(layout="text", tie=False, hidden_size=256)


def test_act_order_gptq_logits_equal_dequantized_oracle(tiny256, prompt, tmp_path):
    """desc_act with a scattered g_idx (one random column order per input, as GPTQ writes q/k/v and gate/up with
    one Hessian): loaded without dequantizing, each layer gathering its input columns; merged q/k/v and gate/up
    keep one shared order."""
    quant_dir, dense_dir, prefixes = build_prequant(tiny256, tmp_path, ACT_ORDER, layout="gptq", act_order="shared")
    tensors = load_file(str(quant_dir / "model.safetensors"))
    scattered = [p for p in prefixes if not torch.equal(tensors[f"{p}.g_idx"].long(),
                                                         torch.arange(tensors[f"{p}.g_idx"].numel()) // 128)]
    assert len(scattered) > 10 and scattered == [p for p in prefixes if tensors[f"{p}.g_idx"].numel() > 128]
    model, oracle = _load(quant_dir).model, _load(dense_dir).model
    wq = {n: m for n, m in model.named_modules() if isinstance(m, WQLinear)}
    assert wq and all(m.kind == "int4-gptq" for m in wq.values())
    # every layer reading more than one group gathers its input, but down_proj: its order is folded into gate_up's rows
    assert all((m.perm is not None) == (m.in_features > 128 and not n.endswith("down_proj")) for n, m in wq.items())
    assert {"gate_up_proj", "qkv_proj", "in_proj_all"} <= {n.rpartition(".")[2] for n in wq}  # merged, quantized
    ids = prompt + list(range(3, 23))
    want = prefill_logits(oracle, ids)
    assert rel_err(prefill_logits(model, ids), want) < 1e-4
    assert simple_greedy(model, prompt, 16) == simple_greedy(oracle, prompt, 16)
    assert rel_err(prefill_logits(_load(tiny256).model, ids), want) > 1e-3
    dense = _load(quant_dir, weight_quant="none").model  # --weight-quant none undoes the column order
    assert rel_err(prefill_logits(dense, ids), want) < 1e-4


def test_act_order_parts_of_different_orders_merge_dense(tiny256, prompt, tmp_path, caplog):
    """q/k/v (or gate/up) with different column orders cannot share one quantized weight: they merge dense (a
    warning gives the parts and the memory) and still give the oracle's logits. The DeltaNet's input projections
    merge in runs instead, each act-order part quantized with its own order."""
    quant_dir, dense_dir, _ = build_prequant(tiny256, tmp_path, ACT_ORDER, layout="gptq", act_order="each")
    with caplog.at_level("INFO", "anna"):
        model = _load(quant_dir).model
    assert ("merging 3 quantized projections of different layouts ([256, 256] int4-gptq act-order, [64, 256] "
            "int4-gptq act-order, [64, 256] int4-gptq act-order): dequantized to torch.float32, 0.38 MiB instead of "
            "0.06 MiB") in caplog.text
    assert not any(isinstance(m, WQLinear) for n, m in model.named_modules() if n.endswith(("qkv_proj", "gate_up_proj")))
    assert any(isinstance(m, WQLinear) and m.perm is not None for m in model.modules())  # o_proj, down_proj, ...
    for layer in (m for n, m in model.named_modules() if n.endswith("linear_attn")):
        qkv, z, ba = layer.in_proj_all, *layer.in_proj_rest  # b / a (4 rows) stay dense in this checkpoint
        assert all(isinstance(m, WQLinear) and m.perm is not None for m in (qkv, z)) and not torch.equal(qkv.perm, z.perm)
        assert not isinstance(ba, WQLinear) and ba.out_features == 8
    ids = prompt[:8]
    assert rel_err(prefill_logits(model, ids), prefill_logits(_load(dense_dir).model, ids)) < 1e-4


def _in_projections(model):
    """Each DeltaNet layer's merged input projections: ``[in_proj_all, *in_proj_rest]``."""
    return [[m.in_proj_all, *m.in_proj_rest] for n, m in model.named_modules() if n.endswith("linear_attn")]


def test_fp8_quantized_in_proj_b_a_stay_quantized(tiny128, prompt, tmp_path):
    """An FP8 checkpoint that quantizes the DeltaNet's narrow ``in_proj_b`` / ``in_proj_a`` (``H_v`` = 4 rows, one
    partial 128-row scale block each): merging all four input projections would need them dequantized (the rows of
    ``z`` and ``b`` end inside a scale block); they merge in runs instead, every part FP8: ``[qkv, z]``, ``[b]``,
    ``[a]`` (hidden 128: ``qkv`` 128 rows, ``z`` 64), a third of the dense float32 bytes, with the logits of the
    dequantized weights."""
    quant_dir, dense_dir, prefixes = build_prequant(tiny128, tmp_path, CASES["fp8"][0], layout="fp8", narrow=True)
    assert sum(p.endswith(("in_proj_b", "in_proj_a")) for p in prefixes) == 4  # 2 DeltaNet layers
    model, oracle = _load(quant_dir).model, _load(dense_dir).model
    runs = _in_projections(model)
    assert len(runs) == 2
    for parts in runs:
        assert all(isinstance(m, WQLinear) and m.scheme == "fp8" and m.kind == "fp8-block" for m in parts)
        assert [m.out_features for m in parts] == [128 + 64, 4, 4]
        quantized = sum(b.numel() * b.element_size() for m in parts for b in m.buffers())
        assert quantized < sum(m.in_features * m.out_features for m in parts) * 4 / 3  # fp8 codes + block scales
    ids = prompt + list(range(3, 23))
    want = prefill_logits(oracle, ids)
    assert rel_err(prefill_logits(model, ids), want) < 1e-4
    assert simple_greedy(model, prompt, 16) == simple_greedy(oracle, prompt, 16)
    assert rel_err(prefill_logits(_load(tiny128).model, ids), want) > 1e-3


def test_act_order_layout_cache_round_trip(tiny256, prompt, tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("ANNA_CACHE_DIR", str(tmp_path / "cache"))
    quant_dir, dense_dir, prefixes = build_prequant(tiny256, tmp_path, ACT_ORDER, layout="gptq", act_order="shared")
    ids = prompt[:8]
    first = prefill_logits(_load(quant_dir, cache=True).model, ids)
    (entry,) = (tmp_path / "cache" / "quant-layouts").iterdir()
    tensors = load_file(str(quant_dir / "model.safetensors"))
    assert json.loads((entry / "entry.json").read_text())["permuted"] == [
        p for p in prefixes if tensors[f"{p}.g_idx"].numel() > 128]
    with caplog.at_level("INFO", "anna.weights"):
        model = _load(quant_dir, cache=True).model
    assert f"layout cache: {len(prefixes)} int4-gptq layers read from {entry}" in caplog.text
    assert sum(m.perm is not None for m in model.modules() if isinstance(m, WQLinear)) > 5
    second = prefill_logits(model, ids)
    assert torch.equal(first, second)
    assert rel_err(second, prefill_logits(_load(dense_dir).model, ids)) < 1e-4


def test_act_order_g_idx_of_wrong_groups_is_a_load_error(tiny256, tmp_path):
    quant_dir, _, prefixes = build_prequant(tiny256, tmp_path, ACT_ORDER, layout="gptq", act_order="shared")
    path = quant_dir / "model.safetensors"
    tensors = load_file(str(path))
    prefix = next(p for p in prefixes if tensors[f"{p}.g_idx"].max() > 0)  # a layer of several groups (K > 128)
    g_idx = tensors[f"{prefix}.g_idx"]
    g_idx[torch.nonzero(g_idx == 0)[0]] = 1  # one row moved from group 0 to group 1
    save_file(tensors, str(path))
    with pytest.raises(ModelLoadError, match=f"{prefix}.g_idx: group 0 holds 127 input rows, expected 128"):
        _load(quant_dir)


def test_missing_quantized_tensor_is_a_load_error(tiny128, tmp_path):
    quant_dir, _, prefixes = build_prequant(tiny128, tmp_path, GPTQ, layout="gptq")
    path = quant_dir / "model.safetensors"
    tensors = load_file(str(path))
    del tensors[f"{prefixes[0]}.scales"]
    save_file(tensors, str(path))
    with pytest.raises(ModelLoadError, match=f"missing tensors \\['{prefixes[0]}.scales'\\]"):
        _load(quant_dir)


def test_layout_cache_second_load_reads_the_entry(tiny128, prompt, tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("ANNA_CACHE_DIR", str(tmp_path / "cache"))
    quant_dir, _, prefixes = build_prequant(tiny128, tmp_path, CASES["autoround-gptq"][0], layout="gptq", sym=True)
    ids = prompt[:8]
    first = prefill_logits(_load(quant_dir, cache=True).model, ids)
    (entry,) = (tmp_path / "cache" / "quant-layouts").iterdir()
    assert not list(quant_dir.glob("*layout*"))
    with caplog.at_level("INFO", "anna.weights"):
        second = prefill_logits(_load(quant_dir, cache=True).model, ids)
    assert f"layout cache: {len(prefixes)} int4-gptq layers read from {entry}" in caplog.text
    assert torch.equal(first, second)


def test_zero_biases_of_exporters_are_ignored_and_others_refused(tiny128, prompt, tmp_path):
    """GPTQ exporters write a ``bias`` for every quantized layer, zeros where the model has none: ignored; a
    non-zero one has no place in the model: a load error naming it."""
    quant_dir, dense_dir, prefixes = build_prequant(tiny128, tmp_path, GPTQ, layout="gptq")
    path = quant_dir / "model.safetensors"
    tensors = load_file(str(path))
    for prefix in prefixes:
        tensors[f"{prefix}.bias"] = torch.zeros(tensors[f"{prefix}.scales"].shape[1], dtype=torch.float16)
    save_file(tensors, str(path))
    ids = prompt[:8]
    assert rel_err(prefill_logits(_load(quant_dir).model, ids), prefill_logits(_load(dense_dir).model, ids)) < 1e-4
    tensors[f"{prefixes[0]}.bias"][3] = 0.5
    save_file(tensors, str(path))
    with pytest.raises(ModelLoadError, match=f"{prefixes[0]}.bias: a non-zero bias"):
        _load(quant_dir)


def test_fp8_weight_without_scales_is_a_load_error(tiny128, tmp_path):
    quant_dir, _, prefixes = build_prequant(tiny128, tmp_path, CASES["fp8"][0], layout="fp8")
    path = quant_dir / "model.safetensors"
    tensors = load_file(str(path))
    del tensors[f"{prefixes[0]}.weight_scale_inv"]
    save_file(tensors, str(path))
    with pytest.raises(ModelLoadError, match="float8 tensors without a weight_scale_inv"):
        _load(quant_dir)


def test_load_model_serves_a_prequantized_checkpoint(tiny128, tmp_path, monkeypatch):
    """Through ``load_model`` (what ``anna serve`` / ``generate`` / ``LLM`` call): the family option turns the
    layout cache off, and the default keeps it under ``ANNA_CACHE_DIR``."""
    from anna_core.loading import load_model

    monkeypatch.setenv("ANNA_CACHE_DIR", str(tmp_path / "cache"))
    quant_dir, _, _ = build_prequant(tiny128, tmp_path, CASES["fp8"][0], layout="fp8")
    loaded = load_model(quant_dir, device="cpu", family_options={"layout_cache": False})
    assert "fp8-block" in weight_kinds(loaded.model)["linear"] and not (tmp_path / "cache").exists()
    load_model(quant_dir, device="cpu")
    assert len(list((tmp_path / "cache" / "quant-layouts").iterdir())) == 1


@pytest.fixture(scope="module")
def tiny_moe128(tmp_path_factory):
    """A tiny Qwen3.5 MoE (per-expert tensors, as transformers saves them) with H = I = 128: int4 groups fit."""
    from anna_qwen35.tiny import build_tiny_qwen35_moe

    return build_tiny_qwen35_moe(tmp_path_factory.mktemp("moe128"), hidden_size=128, moe_intermediate_size=128)


@pytest.mark.parametrize("case", ["gptq-v1-asym", "awq"])
def test_prequantized_moe_experts_load_into_the_expert_quant_layout(tiny_moe128, prompt, tmp_path, case):
    """GPTQ / AWQ int4 routed experts (one quantized gate/up/down per expert) are stacked into ``--expert-quant
    int4``'s layout (``moe_experts_wq``) without dequantizing, and give the dense oracle's logits."""
    from anna_core.layers.wq_experts import WQExperts

    qc, build = CASES[case]
    quant_dir, dense_dir, prefixes = build_prequant(tiny_moe128, tmp_path, qc, **build)
    assert any(".mlp.experts.7.down_proj" in p for p in prefixes)
    model, oracle = _load(quant_dir).model, _load(dense_dir).model
    experts = [m for m in model.modules() if isinstance(m, WQExperts)]
    assert len(experts) == 4 and all(m.scheme == "int4" and m.gate_up_q.shape == (8, 256, 64) for m in experts)
    kind = KINDS[build["layout"]]
    assert weight_kinds(model)["experts"] == kind and kind in weight_kinds(model)["linear"]
    ids = prompt + list(range(3, 23))
    want = prefill_logits(oracle, ids)
    assert rel_err(prefill_logits(model, ids), want) < 1e-4
    assert simple_greedy(model, prompt, 16) == simple_greedy(oracle, prompt, 16)
    assert rel_err(prefill_logits(_load(tiny_moe128).model, ids), want) > 1e-3


def test_prequantized_moe_experts_under_offload_auto_stay_on_the_device(tiny_moe128, tmp_path):
    """``--offload-mode auto`` (the default) with a memory cap the dense experts would not fit: pre-quantized experts
    are weighed as the quantized experts they are, so no offload is planned (offload refuses them) and they load
    stacked on the device; ``--offload-mode experts`` is still refused by name."""
    from anna_core.engine.offload import OffloadConfig
    from anna_core.layers.wq_experts import WQExperts

    quant_dir, _, _ = build_prequant(tiny_moe128, tmp_path, GPTQ, layout="gptq")
    model = _load(quant_dir, offload=OffloadConfig("auto"), max_device_bytes=4 << 20).model
    assert sum(isinstance(m, WQExperts) for m in model.modules()) == 4
    with pytest.raises(ModelLoadError, match="expert offload of pre-quantized MoE experts is not supported"):
        _load(quant_dir, offload=OffloadConfig("experts"))


def test_prequantized_moe_experts_none_dequantizes(tiny_moe128, prompt, tmp_path):
    quant_dir, dense_dir, _ = build_prequant(tiny_moe128, tmp_path, GPTQ, layout="gptq")
    model = _load(quant_dir, weight_quant="none").model
    assert weight_kinds(model)["experts"] == "float32"
    ids = prompt[:8]
    assert rel_err(prefill_logits(model, ids), prefill_logits(_load(dense_dir).model, ids)) < 1e-4


def test_prequantized_fp8_moe_experts_are_a_load_error(tiny_moe128, tmp_path):
    quant_dir, _, _ = build_prequant(tiny_moe128, tmp_path, CASES["fp8"][0], layout="fp8")
    with pytest.raises(ModelLoadError, match="model.layers.0.mlp.experts: pre-quantized MoE routed experts in fp8 "
                                             "are not supported"):
        _load(quant_dir)
