"""Act-order GPTQ and pre-quantized MoE experts on the GPU (issue 29), through ``load_model`` in bfloat16 (the
Triton ``wq_linear`` / ``moe_experts_wq`` kernels where their probes accept):

* ``act_order``: the tiny random Qwen3.5 at hidden 256 (every projection of K > 128 scattered by a random
  ``g_idx``, shared by q/k/v and gate/up), against its dense oracle (the dequantized weights) in bfloat16 and
  float32: ``rel_err_vs_f32`` should stay within about 2.5x ``bf16_oracle_rel_err``; ``greedy_equal`` of 16;
  ``gathering_layers`` (WQLinears with a ``perm``; down_proj's is folded into gate/up);
* ``moe_gptq``: a tiny Qwen3.5-MoE (H = I = 128) with GPTQ int4 experts stacked into ``moe_experts_wq``: the same
  figures, ``weights`` as /healthz shows them;
* ``gather_cost``: microseconds per call (CUDA graph replay) of an int4 WQLinear at the Qwen3.5-9B shapes
  (gate/up [24576, 4096], down [4096, 12288], o_proj [4096, 4096]) for M = 1 and 32 rows, without and with an
  act-order column order (the ``index_select`` before the GEMV): the overhead the gather adds.

    timeout 300 python3 tools/gpu_experiments/prequant_actorder_moe_check.py   # $OUT/prequant_actorder_moe.json (~60-120 s)
    python3 tools/gpu_experiments/prequant_actorder_moe_check.py cpu            # a smoke run on the CPU (no timings)
"""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
from pathlib import Path

import torch


def _compare(quant_dir: Path, dense_dir: Path, device: str, ids: list[int]) -> dict:
    from anna_core.kernels.registry import chosen_kernels
    from anna_core.layers.wq_linear import WQLinear, weight_kinds
    from anna_core.loading import load_model
    from anna_core.testing.runner import prefill_logits, simple_greedy

    exact = prefill_logits(load_model(dense_dir, device=device, dtype="fp32").model, ids)
    oracle = load_model(dense_dir, device=device, dtype="bf16").model
    model = load_model(quant_dir, device=device, dtype="bf16", family_options={"layout_cache": False}).model
    scale = exact.abs().max().item()
    tokens, want = simple_greedy(model, ids[:12], 16), simple_greedy(oracle, ids[:12], 16)
    return {
        "rel_err_vs_f32": round((prefill_logits(model, ids) - exact).abs().max().item() / scale, 5),
        "bf16_oracle_rel_err": round((prefill_logits(oracle, ids) - exact).abs().max().item() / scale, 5),
        "greedy_equal": sum(a == b for a, b in zip(tokens, want)),
        "gathering_layers": sum(isinstance(m, WQLinear) and m.perm is not None for m in model.modules()),
        "kernels": {k: v for k, v in chosen_kernels(model).items() if "wq" in k},
        "weights": weight_kinds(model),
    }


def _gather_cost() -> dict:
    from anna_core.kernels.registry import KernelRegistry, bind_ops
    from anna_core.layers.wq_linear import WQLinear
    from anna_core.weights.gpu_quant import QuantizedWeight, quantize
    from triton.testing import do_bench_cudagraph

    ops = bind_ops(KernelRegistry.from_plugins(), "cuda", torch.bfloat16)
    out = {}
    for name, (n, k) in {"gate_up": (24576, 4096), "down": (4096, 12288), "o_proj": (4096, 4096)}.items():
        w = quantize(torch.randn(n, k, device="cuda").mul_(k**-0.5), "int4", torch.bfloat16)
        perm = torch.randperm(k, device="cuda")
        plain = WQLinear(w, None, ops)
        gathering = WQLinear(QuantizedWeight(w.qweight, w.scale, w.zero, "int4", perm), None, ops)
        for m in (1, 32):
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            us = [do_bench_cudagraph(lambda layer=layer, x=x: layer(x), rep=50, return_mode="median") * 1e3
                  for layer in (plain, gathering)]
            out[f"{name} M={m}"] = {"plain_us": round(us[0], 2), "perm_us": round(us[1], 2),
                                    "overhead": round(us[1] / us[0], 3)}
            print("gather_cost", name, m, out[f"{name} M={m}"], flush=True)
    return out


def main() -> None:
    device = sys.argv[1] if len(sys.argv) > 1 else "cuda"
    out = Path(os.environ.get("OUT", "."))
    out.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(level=logging.WARNING)
    from anna_core.testing.checkpoints import build_tiny_qwen35
    from anna_core.testing.prequant_checkpoints import GPTQ, build_prequant
    from anna_qwen35.tiny import build_tiny_qwen35_moe

    work = Path(tempfile.mkdtemp())
    ids = torch.randint(3, 320, (32,), generator=torch.Generator().manual_seed(1234)).tolist()
    results: dict = {"device": torch.cuda.get_device_name() if device == "cuda" else device}
    failed = False
    cases = {
        "act_order": lambda: build_prequant(build_tiny_qwen35(work / "src256", tie=False, hidden_size=256),
                                            work / "ao", {**GPTQ, "desc_act": True}, layout="gptq",
                                            act_order="shared"),
        "moe_gptq": lambda: build_prequant(build_tiny_qwen35_moe(work / "moe", hidden_size=128,
                                                                 moe_intermediate_size=128),
                                           work / "moeq", GPTQ, layout="gptq"),
    }
    for name, build in cases.items():
        try:
            quant_dir, dense_dir, _ = build()
            row = _compare(quant_dir, dense_dir, device, ids)
        except Exception as exc:  # one broken case must not hide the others
            row, failed = {"error": f"{type(exc).__name__}: {exc}"}, True
        results[name] = row
        print(name, json.dumps(row), flush=True)
    if device == "cuda":
        try:
            results["gather_cost"] = _gather_cost()
        except Exception as exc:
            results["gather_cost"], failed = {"error": f"{type(exc).__name__}: {exc}"}, True
    (out / "prequant_actorder_moe.json").write_text(json.dumps(results, indent=1))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
