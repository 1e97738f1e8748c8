"""A checkpoint quantized by AutoRound itself (issue 29): ``tests/qwen35/fixtures/autoround`` holds a tiny random
Qwen3.5 quantized by AutoRound 0.16.1 (round-to-nearest, 4 bits, group 128, symmetric), exported as its default
``auto_round`` format (``packing_format: auto_round:auto_gptq``, ``gptq/``) and, from the same quantization, as
its ``fake`` format (``fake/``: each quantized linear holds AutoRound's dequantized weight ``(q - z) * s``, rounded
to bfloat16 as the export writes it). ``tools/prequant/make_autoround_fixture.py`` wrote both.

The oracle is AutoRound's own dequantization: Anna's repacked int4 weights, dequantized and rounded to bfloat16,
must equal the fake export's weights bit for bit, and Anna serving the packed checkpoint must give the fake
checkpoint's logits within that bfloat16 rounding of the weights (greedy tokens equal).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from anna_core.kernels.registry import KernelRegistry
from anna_core.layers.wq_linear import WQLinear, weight_kinds
from anna_core.model_dir import inspect_model_dir
from anna_core.testing.runner import prefill_logits, simple_greedy
from anna_core.weights.gpu_quant import dequantize
from anna_core.weights.prequant import quantized_prefixes, read_quantization_config, repack
from safetensors.torch import load_file

from tests.qwen35.conftest import rel_err

FIXTURE = Path(__file__).parent / "fixtures" / "autoround"


def _load(path: Path):
    from anna_qwen35.loader import load

    return load(inspect_model_dir(path), device=torch.device("cpu"), dtype=torch.float32,
                kernels=KernelRegistry.from_plugins(), layout_cache=False).model


def test_repacked_weights_equal_autorounds_own_dequantization():
    cfg = read_quantization_config(json.loads((FIXTURE / "gptq" / "config.json").read_text()))
    assert (cfg.method, cfg.layout, cfg.zero_offset) == ("auto-round", "gptq", 1)
    packed = load_file(str(FIXTURE / "gptq" / "model.safetensors"))
    fake = load_file(str(FIXTURE / "fake" / "model.safetensors"))
    prefixes = quantized_prefixes(list(packed), cfg)
    assert len(prefixes) == 13  # every projection but the DeltaNet's in_proj_a / in_proj_b (kept at 16 bits)
    for prefix in prefixes:
        w = repack(prefix, {s: packed[f"{prefix}.{s}"] for s in ("qweight", "qzeros", "scales")}, cfg, torch.float32)
        ours = dequantize(w.qweight, w.scale, w.zero, w.scheme)
        assert torch.equal(ours.to(torch.bfloat16), fake[f"{prefix}.weight"]), prefix


def test_autoround_checkpoint_gives_the_logits_of_its_fake_export():
    model, oracle = _load(FIXTURE / "gptq"), _load(FIXTURE / "fake")
    assert any(isinstance(m, WQLinear) for m in model.modules())
    assert "int4-gptq" in weight_kinds(model)["linear"]
    ids = list(range(3, 40))
    got, want = prefill_logits(model, ids), prefill_logits(oracle, ids)
    # the fake export rounds each weight to bfloat16 (relative 2**-9), Anna serves the exact (q - z) * s
    assert rel_err(got, want) < 0.03
    prompt = [5, 17, 33, 9, 60]
    assert simple_greedy(model, prompt, 16) == simple_greedy(oracle, prompt, 16)
