"""Act-order GPTQ and pre-quantized MoE experts on the GPU (issue 29), through ``load_model`` in bfloat16 (the
Triton ``wq_linear`` / ``moe_experts_wq`` kernels where their probes accept):

* ``act_order``: the tiny random Qwen3.5 at hidden 256 (every projection of K > 128 scattered by a random
  ``g_idx``, shared by q/k/v and gate/up), against its dense oracle (the dequantized weights) in bfloat16 and
  float32: ``rel_err_vs_f32`` should stay within about 2.5x ``bf16_oracle_rel_err``; ``greedy_equal`` of 16;
  ``gathering_layers`` (WQLinears with a ``perm``; down_proj's is folded into gate/up);
* ``moe_gptq``: a tiny Qwen3.5-MoE (H = I = 128) with GPTQ int4 experts stacked into ``moe_experts_wq``: the same
  figures, ``weights`` as /healthz shows them;
* ``gather_cost``: microseconds per call (CUDA graph replay) of an int4 WQLinear at the Qwen3.5-9B shapes
  (gate/up [24576, 4096], down [4096, 12288], o_proj [4096, 4096]) for M = 1 and 32 rows: without a column order
  (``plain_us``), with an act-order one read inside the GEMV (``perm_fused_us``, what the layer runs) and with the
  former ``index_select`` before the plain GEMV (``gather_gemv_us``); ``fused_overhead`` / ``gather_overhead``
  are those over ``plain_us``;
* ``norm_cost``: the same three for ``add_rms_norm_wq_linear`` (residual add + RMSNorm + GEMV, SiLU-gated for
  gate/up) at widths where the norm prologue is fused (K <= 2048: Qwen3.5-2B's gate/up [12288, 2048] and q/k/v
  [4096, 2048], Gemma 4 E2B's gate/up [12288, 1536]): ``gather_gemv_us`` is the former act-order path (the
  ``add_rms_norm`` op, the ``index_select``, the GEMV, the SiLU product: four launches for one).
  ``fused_vs_gather_rel`` (max difference over max value) checks the compiled kernels: expect below ~1e-2.

    timeout 300 python3 tools/gpu_experiments/prequant_actorder_moe_check.py   # $OUT/prequant_actorder_moe.json (~90-180 s)
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


def _layers(ops, n: int, k: int):
    """``(plain, act-order)`` int4 WQLinears of one random ``[n, k]`` weight, and the act-order one's ``perm``."""
    from anna_core.layers.wq_linear import WQLinear
    from anna_core.weights.gpu_quant import QuantizedWeight, quantize

    w = quantize(torch.randn(n, k, device="cuda").mul_(k**-0.5), "int4", torch.bfloat16)
    perm = torch.randperm(k, device="cuda")
    return WQLinear(w, None, ops), WQLinear(QuantizedWeight(w.qweight, w.scale, w.zero, "int4", perm), None, ops), perm


def _row(name: str, runs) -> dict:
    """Median microseconds per CUDA graph replay of ``runs`` = (plain, act-order fused, former gather path)."""
    from triton.testing import do_bench_cudagraph

    us = [do_bench_cudagraph(fn, rep=50, return_mode="median") * 1e3 for fn in runs]
    fused, former = (fn() for fn in runs[1:])
    fused, former = (y[0] if isinstance(y, tuple) else y for y in (fused, former))
    row = {"plain_us": round(us[0], 2), "perm_fused_us": round(us[1], 2), "gather_gemv_us": round(us[2], 2),
           "fused_overhead": round(us[1] / us[0], 3), "gather_overhead": round(us[2] / us[0], 3),
           # the two act-order paths compute the same product (bfloat16 outputs: a few ulps of summation order)
           "fused_vs_gather_rel": round(((fused.float() - former.float()).abs().max()
                                         / former.float().abs().max()).item(), 5)}
    print(name, row, flush=True)
    return row


def _linear_runs(plain, permuted, perm, x) -> tuple:
    return lambda: plain(x), lambda: permuted(x), lambda: plain(x.index_select(-1, perm))


def _norm_runs(ops, plain, permuted, perm, x, res, nw, act) -> tuple:
    def former():
        h, new_residual = ops.add_rms_norm(x, res, nw, 1e-6, True)
        y = plain(h.index_select(-1, perm))
        return (y if act is None else ops.silu_and_mul(y)), new_residual

    return (lambda: plain.add_norm(x, res, nw, 1e-6, True, act), lambda: permuted.add_norm(x, res, nw, 1e-6, True, act),
            former)


def _gather_cost(ops) -> dict:
    out = {}
    for name, (n, k) in {"gate_up": (24576, 4096), "down": (4096, 12288), "o_proj": (4096, 4096)}.items():
        plain, permuted, perm = _layers(ops, n, k)
        for m in (1, 32):
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            out[f"{name} M={m}"] = _row(f"gather_cost {name} M={m}", _linear_runs(plain, permuted, perm, x))
    return out


def _norm_cost(ops) -> dict:
    """``add_rms_norm_wq_linear`` (the layer's ``add_norm``) at norm-prologue widths: plain, act-order fused, and the
    former act-order path (``add_rms_norm``, ``index_select``, the GEMV, the gated product)."""
    out = {}
    shapes = {"2B gate_up": (12288, 2048, "silu"), "2B qkv": (4096, 2048, None), "E2B gate_up": (12288, 1536, "silu")}
    for name, (n, k, act) in shapes.items():
        plain, permuted, perm = _layers(ops, n, k)
        nw = torch.randn(k, device="cuda", dtype=torch.bfloat16)
        for m in (1, 8):
            x, res = (torch.randn(m, k, device="cuda", dtype=torch.bfloat16) for _ in range(2))
            out[f"{name} M={m}"] = _row(f"norm_cost {name} M={m}", _norm_runs(ops, plain, permuted, perm, x, res, nw,
                                                                              act))
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
        from anna_core.kernels.registry import KernelRegistry, bind_ops

        ops = bind_ops(KernelRegistry.from_plugins(), "cuda", torch.bfloat16)
        for key, bench in (("gather_cost", _gather_cost), ("norm_cost", _norm_cost)):
            try:
                results[key] = bench(ops)
            except Exception as exc:
                results[key], failed = {"error": f"{type(exc).__name__}: {exc}"}, True
    (out / "prequant_actorder_moe.json").write_text(json.dumps(results, indent=1))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
