"""Write the AutoRound fixture of tests/qwen35/fixtures/autoround (issue 29): a tiny random Qwen3.5 quantized by
AutoRound itself (round-to-nearest, ``iters=0``, no calibration data), exported twice from the same quantization:

* ``gptq/``: AutoRound's default export (``format="auto_round"``: ``quant_method: auto-round``, packing
  ``auto_round:auto_gptq``), the checkpoint Anna loads without dequantizing;
* ``fake/``: its ``format="fake"`` export, the same model with each quantized linear holding its dequantized
  weight ``(q - z) * s`` as AutoRound computes it: the oracle the test compares Anna's logits with.

Run (a separate venv, never the project's; CPU torch at the pin of .ci/constraints-cpu.txt)::

    python3 -m venv /tmp/arenv
    /tmp/arenv/bin/pip install torch==2.13.0 transformers==5.24.0 auto-round==0.16.1
    /tmp/arenv/bin/python tools/prequant/make_autoround_fixture.py tests/qwen35/fixtures/autoround

AutoRound 0.16.1 exports in bfloat16 (the fake export's weights are ``(q - z) * s`` rounded to bfloat16). The
random weights come from a fixed seed. Notes: without ``disable_opt_rtn=True`` its RTN asks for calibration data
(a tokenizer and a data set); an asymmetric scheme exports as ``auto_round:auto_awq``, whose packing fails in
0.16.1 (``TypeError: WQLinear_GEMM.__init__() got an unexpected keyword argument 'weight_dtype'``), so the fixture
is symmetric (``auto_round:auto_gptq``).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import torch


def tiny_qwen35(path: Path) -> None:
    """A tiny random ``Qwen3_5ForCausalLM`` (hidden 128, 2 layers: one gated DeltaNet, one full attention) in
    float16, saved with ``save_pretrained`` in ``path``."""
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    config = Qwen3_5TextConfig(
        vocab_size=128, hidden_size=128, intermediate_size=128, num_hidden_layers=2,
        layer_types=["linear_attention", "full_attention"], num_attention_heads=4, num_key_value_heads=2,
        head_dim=32, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=32,
        linear_value_head_dim=32, linear_conv_kernel_dim=4, tie_word_embeddings=False, initializer_range=0.1,
        max_position_embeddings=512, rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                      "partial_rotary_factor": 0.25},
        bos_token_id=1, eos_token_id=2, pad_token_id=0,
    )
    config.architectures = ["Qwen3_5ForCausalLM"]
    torch.manual_seed(0)
    model = Qwen3_5ForCausalLM(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith(("dt_bias", "A_log")):
                p.copy_(torch.rand_like(p) * 0.5 + 0.75 if "norm" in name else torch.rand_like(p))
    model.to(torch.float16).save_pretrained(path)


def main(out: Path) -> None:
    from auto_round import AutoRound

    out = out.resolve()
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)  # AutoRound writes its work space under the current folder
        src = Path(tmp) / "src"
        tiny_qwen35(src)
        ar = AutoRound(str(src), scheme="W4A16", iters=0, disable_opt_rtn=True,
                       device_map="cpu", sym=True, group_size=128)
        ar.quantize_and_save(str(Path(tmp) / "export"), format="auto_round,fake")
        exported = sorted(p for p in (Path(tmp) / "export").rglob("config.json"))
        print("exported:", exported)
        for cfg in exported:
            qc = json.loads(cfg.read_text()).get("quantization_config", {})
            print(cfg.parent, json.dumps(qc)[:400])
        out.mkdir(parents=True, exist_ok=True)
        for cfg in exported:
            folder = cfg.parent
            name = "fake" if "fake" in str(folder).lower() else "gptq"
            dst = out / name
            shutil.rmtree(dst, ignore_errors=True)
            dst.mkdir()
            for f in folder.iterdir():
                if f.suffix in (".json", ".safetensors") and "tokenizer" not in f.name:
                    shutil.copy(f, dst / f.name)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
