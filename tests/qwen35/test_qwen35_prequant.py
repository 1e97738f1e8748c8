"""Pre-quantized Qwen3.5 checkpoints (issue 29): GPTQ (v1 and v2 zero points, group 128 and -1, sym and asym),
AWQ GEMM, FP8 with 128x128 block scales and AutoRound's GPTQ / AWQ exports, loaded without dequantizing.

Each fixture checkpoint is the tiny random Qwen3.5 (hidden 128) with its projections quantized here, by
round-to-nearest, and packed by the formats' documented rules (written in this file from those rules, not with
Anna's code). The oracle is the same checkpoint with every quantized projection replaced by its dequantized
weight ``(q - z) * s`` (``q * s`` for fp8), computed here from the codes, zero points and scales before packing:
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
from anna_core.testing.runner import prefill_logits, simple_greedy
from anna_core.weights.prequant import UnsupportedQuantizationError
from safetensors.torch import load_file, save_file

from tests.qwen35.conftest import rel_err

AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]  # AutoAWQ's GEMM packing: nibble j of a word holds column 8c + AWQ_ORDER[j]


def _load(path, *, dtype=torch.float32, weight_quant="auto", cache=False):
    from anna_qwen35.loader import load

    return load(inspect_model_dir(path), device=torch.device("cpu"), dtype=dtype, kernels=KernelRegistry.from_plugins(),
                weight_quant=weight_quant, layout_cache=cache)


def _rtn_int4(w: torch.Tensor, group: int, sym: bool, gen: torch.Generator, min_zero: int):
    """Round-to-nearest 4-bit codes of w ``[N, K]``: ``(q [K, N] int, z [G, N] int, s [G, N] float16)``, with
    ``w ~ (q - z) * s`` per group of ``group`` input columns (-1: one group) and zero points in ``[min_zero, 15]``
    (GPTQ v1 stores ``z - 1`` in 4 bits, so it cannot hold a zero point of 0), some set to ``min_zero``."""
    n, k = w.shape
    g = k if group == -1 else group
    wg = w.float().t().reshape(k // g, g, n)  # [G, g, N]
    if sym:
        s = (wg.abs().amax(1) / 7.5).to(torch.float16).float()
        z = torch.full_like(s, 8)
    else:
        lo, hi = wg.amin(1), wg.amax(1)
        s = ((hi - lo) / 15).to(torch.float16).float()
        z = torch.round(-lo / s).clamp(min_zero, 15)
        z = torch.where(torch.rand(z.shape, generator=gen) < 0.1, torch.full_like(z, min_zero), z)
    q = torch.round(wg / s[:, None] + z[:, None]).clamp(0, 15)
    return q.reshape(k, n).long(), z.long(), s.to(torch.float16)


def _pack_words(codes: torch.Tensor) -> torch.Tensor:
    """``[..., 8]`` codes in 0..15 -> ``[...]`` int32, code j in bits 4j..4j+3."""
    word = torch.zeros(codes.shape[:-1], dtype=torch.int64)
    for j in range(8):
        word |= codes[..., j].long() << (4 * j)
    return torch.where(word >= 2**31, word - 2**32, word).to(torch.int32)


def _gptq_tensors(q, z, s, group, v1):
    k, n = q.shape
    qweight = _pack_words(q.reshape(k // 8, 8, n).permute(0, 2, 1))  # rows 8i..8i+7 in one word
    stored = (z - 1) if v1 else z  # the v1 format's historical offset
    qzeros = _pack_words(stored.reshape(z.shape[0], n // 8, 8))
    g_idx = torch.zeros(k, dtype=torch.int32) if group == -1 else torch.arange(k, dtype=torch.int32) // group
    return {"qweight": qweight, "qzeros": qzeros, "scales": s, "g_idx": g_idx}


def _awq_tensors(q, z, s):
    k, n = q.shape
    order = torch.tensor(AWQ_ORDER)
    qweight = _pack_words(q.reshape(k, n // 8, 8)[..., order])
    qzeros = _pack_words(z.reshape(z.shape[0], n // 8, 8)[..., order])
    return {"qweight": qweight, "qzeros": qzeros, "scales": s}


def _fp8_tensors(w):
    n, k = w.shape
    nb, kb = -(-n // 128), -(-k // 128)
    pad = torch.zeros(nb * 128, kb * 128)
    pad[:n, :k] = w.float()
    blocks = pad.view(nb, 128, kb, 128)
    scale = blocks.abs().amax((1, 3)) / 448
    q = (blocks / scale[:, None, :, None]).to(torch.float8_e4m3fn)
    deq = (q.float() * scale[:, None, :, None]).reshape(nb * 128, kb * 128)[:n, :k]
    return {"weight": q.reshape(nb * 128, kb * 128)[:n, :k].contiguous(), "weight_scale_inv": scale}, deq


def _quantizable(name: str, w: torch.Tensor, layout: str) -> bool:
    if ".layers." not in name or not name.endswith("proj.weight") and not name.endswith(("in_proj_qkv.weight",
                                                                                          "in_proj_z.weight")):
        return False
    if w.dim() != 2:
        return False
    n, k = w.shape
    return layout == "fp8" or (k % 128 == 0 and n % 8 == 0)


def build_prequant(src: Path, dst: Path, qc: dict, *, layout: str, group: int = 128, sym: bool = False,
                   v1: bool = True) -> tuple[Path, Path, list[str]]:
    """``(quantized checkpoint, dense oracle checkpoint, quantized tensor prefixes)`` from the tiny ``src``."""
    gen = torch.Generator().manual_seed(0)
    quant_dir, dense_dir = dst / "quant", dst / "dense"
    for d in (quant_dir, dense_dir):
        shutil.copytree(src, d)
        for f in d.glob("*.safetensors*"):
            f.unlink()
    tensors = load_file(str(src / "model.safetensors"))
    quant, dense, prefixes = {}, {}, []
    for name, w in tensors.items():
        if not _quantizable(name, w, layout):
            quant[name] = dense[name] = w
            continue
        prefix = name[: -len(".weight")]
        prefixes.append(prefix)
        if layout == "fp8":
            parts, deq = _fp8_tensors(w)
        else:
            q, z, s = _rtn_int4(w, group, sym, gen, 1 if layout == "gptq" and v1 else 0)
            deq = ((q - z.repeat_interleave(q.shape[0] // z.shape[0], 0)).float()
                   * s.float().repeat_interleave(q.shape[0] // s.shape[0], 0)).t()
            parts = _gptq_tensors(q, z, s, group, v1) if layout == "gptq" else _awq_tensors(q, z, s)
        quant.update({f"{prefix}.{k}": v for k, v in parts.items()})
        dense[name] = deq.to(w.dtype).contiguous()
    save_file(quant, str(quant_dir / "model.safetensors"))
    save_file(dense, str(dense_dir / "model.safetensors"))
    config = json.loads((src / "config.json").read_text())
    (quant_dir / "config.json").write_text(json.dumps({**config, "quantization_config": qc}))
    return quant_dir, dense_dir, prefixes


@pytest.fixture(scope="module")
def tiny128(anna_tiny_qwen35_factory):
    return anna_tiny_qwen35_factory(layout="text", tie=False, hidden_size=128)


@pytest.fixture(scope="module")
def prompt(long_prompt):
    return long_prompt[:12]


GPTQ = {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False, "sym": False}
CASES = {
    "gptq-v1-asym": (GPTQ, dict(layout="gptq")),
    "gptq-v1-sym-g-1": ({**GPTQ, "sym": True, "group_size": -1}, dict(layout="gptq", group=-1, sym=True)),
    "gptq-v2": ({**GPTQ, "checkpoint_format": "gptq_v2"}, dict(layout="gptq", v1=False)),
    "awq": ({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"},
            dict(layout="awq")),
    "fp8": ({"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128],
             "modules_to_not_convert": ["lm_head"]}, dict(layout="fp8")),
    "autoround-gptq": ({"quant_method": "auto-round", "bits": 4, "group_size": 128, "sym": True,
                        "packing_format": "auto_round:auto_gptq"}, dict(layout="gptq", sym=True)),
    "autoround-awq": ({"quant_method": "auto-round", "bits": 4, "group_size": 128, "sym": False,
                       "packing_format": "auto_round:auto_awq"}, dict(layout="awq")),
}
KINDS = {"gptq": "int4-gptq", "awq": "int4-awq", "fp8": "fp8-block"}


@pytest.mark.parametrize("case", list(CASES))
def test_prequantized_logits_equal_dequantized_oracle(tiny128, prompt, tmp_path, case):
    qc, build = CASES[case]
    quant_dir, dense_dir, prefixes = build_prequant(tiny128, tmp_path, qc, **build)
    assert prefixes
    loaded = _load(quant_dir)
    oracle = _load(dense_dir).model
    model = loaded.model
    wq = [m for m in model.modules() if isinstance(m, WQLinear)]
    assert wq and all(m.kind == KINDS[build["layout"]] for m in wq)
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


def test_weight_quant_scheme_of_prequantized_is_refused(tiny128, tmp_path):
    quant_dir, _, _ = build_prequant(tiny128, tmp_path, GPTQ, layout="gptq")
    with pytest.raises(ModelLoadError, match="already quantized \\(gptq\\)"):
        _load(quant_dir, weight_quant="int8")


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
    ({"quant_method": "fp8", "activation_scheme": "dynamic"}, "'fp8': weight_block_size None"),
    ({"quant_method": "exl2"}, "'exl2' is not supported"),
    ({"quant_method": "auto-round", "bits": 4, "packing_format": "auto_round:llm_compressor"},
     "packing_format 'auto_round:llm_compressor'"),
])
def test_unsupported_quantization_configs_fail_naming_the_method(tiny128, tmp_path, qc, match):
    path = _with_config(tiny128, tmp_path / "ckpt", qc)
    with pytest.raises(UnsupportedQuantizationError, match=match):
        _load(path)


def test_act_order_g_idx_is_a_clear_load_error(tiny128, tmp_path):
    quant_dir, _, prefixes = build_prequant(tiny128, tmp_path, {**GPTQ, "desc_act": True}, layout="gptq")
    path = quant_dir / "model.safetensors"
    tensors = load_file(str(path))
    prefix = next(p for p in prefixes if tensors[f"{p}.g_idx"].max() > 0)  # a layer of several groups (K > 128)
    g_idx = tensors[f"{prefix}.g_idx"]
    tensors[f"{prefix}.g_idx"] = g_idx[torch.randperm(g_idx.numel(), generator=torch.Generator().manual_seed(1))]
    save_file(tensors, str(path))
    with pytest.raises(ModelLoadError, match="g_idx is not k // group_size"):
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
