"""Pre-quantized checkpoints on the GPU (issue 29): each format of :mod:`anna_core.testing.prequant_checkpoints`
(GPTQ v1 / v2 / group -1, AWQ, FP8 block, AutoRound) written over the tiny random Qwen3.5 (hidden 128), loaded on
CUDA in bfloat16 through ``load_model`` (the ``wq_linear`` ops: the Triton kernels where their probes accept),
against the same checkpoint with the dequantized weights (the dense oracle) in bfloat16 and in float32:

* ``rel_err_vs_f32``: max |logits - oracle float32| / max |oracle float32| over a 32-token prefill, next to
  ``bf16_oracle_rel_err`` (the bfloat16 oracle's own error): the first should stay within about 2.5x the second
  (the CPU test's bound: scale and -z*s rounded to bfloat16);
* ``greedy_equal``: of 16 greedy tokens (decode steps of one row: the GEMV path), how many equal the bfloat16
  oracle's;
* ``load_s`` of a cold and a warm load (the layout cache under ``$OUT/cache``: the second must say ``hit``);
* ``kernels``: the wq_linear implementations chosen, and ``weights`` (what /healthz shows).

    timeout 300 python3 tools/gpu_experiments/prequant_check.py   # writes $OUT/prequant_check.json (~60-120 s)
    python3 tools/gpu_experiments/prequant_check.py cpu             # the same on the CPU (a smoke run)
"""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

import torch


def main() -> None:
    device = sys.argv[1] if len(sys.argv) > 1 else "cuda"
    out = Path(os.environ.get("OUT", "."))
    os.environ["ANNA_CACHE_DIR"] = str(out / "cache")
    logging.basicConfig(level=logging.WARNING)
    from anna_core.kernels.registry import chosen_kernels
    from anna_core.layers.wq_linear import weight_kinds
    from anna_core.loading import load_model
    from anna_core.testing.checkpoints import build_tiny_qwen35
    from anna_core.testing.prequant_checkpoints import CASES, build_prequant
    from anna_core.testing.runner import prefill_logits, simple_greedy

    work = Path(tempfile.mkdtemp())
    src = build_tiny_qwen35(work / "src", layout="text", tie=False, hidden_size=128)
    gen = torch.Generator().manual_seed(1234)
    ids = torch.randint(3, 320, (32,), generator=gen).tolist()
    results = {"device": torch.cuda.get_device_name() if device == "cuda" else device, "cases": {}}
    for name, (qc, build) in CASES.items():
        quant_dir, dense_dir, _ = build_prequant(src, work / name, qc, **build)
        row: dict = {}
        try:
            exact = prefill_logits(load_model(dense_dir, device=device, dtype="fp32").model, ids)
            oracle = load_model(dense_dir, device=device, dtype="bf16").model
            oracle_logits = prefill_logits(oracle, ids)
            oracle_tokens = simple_greedy(oracle, ids[:12], 16)
            loads = []
            for _ in range(2):
                t0 = time.perf_counter()
                model = load_model(quant_dir, device=device, dtype="bf16").model
                if device == "cuda":
                    torch.cuda.synchronize()
                loads.append(round(time.perf_counter() - t0, 3))
            logits = prefill_logits(model, ids)
            tokens = simple_greedy(model, ids[:12], 16)
            scale = exact.abs().max().item()
            row.update(
                rel_err_vs_f32=round((logits - exact).abs().max().item() / scale, 5),
                bf16_oracle_rel_err=round((oracle_logits - exact).abs().max().item() / scale, 5),
                greedy_equal=sum(a == b for a, b in zip(tokens, oracle_tokens)),
                load_s=loads,
                cache_entries=len(list((out / "cache" / "quant-layouts").glob("*"))),
                kernels={k: v for k, v in chosen_kernels(model).items() if "wq" in k},
                weights=weight_kinds(model),
            )
        except Exception as exc:  # one broken case must not hide the others
            row["error"] = f"{type(exc).__name__}: {exc}"
        results["cases"][name] = row
        print(name, json.dumps(row), flush=True)
    (out / "prequant_check.json").write_text(json.dumps(results, indent=1))
    sys.exit(1 if any("error" in r for r in results["cases"].values()) else 0)


if __name__ == "__main__":
    main()
