"""The quantized-weight GEMV (issue 29) at the decode shapes of a Qwen3.5 model, against the bf16 GEMV: per
weight shape, scheme and row count, the time per call with a cold L2 (graph replays,
:func:`anna_xpu_kernels.gemv_tuning.cold_time_ms`), the bytes it must read over that time, and its largest
difference from the float32 reference (relative to the largest output); then one decode step's GEMV time per
scheme (each shape times its uses; the LM head dense unless ``--head``). Also checks the fused
``add_rms_norm_wq_linear`` (norm + gate/up + SiLU) at the MLP's shape against its reference.

    python3 tools/gpu_experiments/wq_gemv_bench.py [--model Qwen3.5-9B] [--rows 1,32] [--head]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from anna_core.kernels.reference import wq_linear as ref
from anna_core.weights.gpu_quant import quantize
from anna_xpu_kernels import gemv, wq_gemv
from anna_xpu_kernels.gemv_tuning import cold_time_ms
from anna_xpu_kernels.microbench_linear import decode_gemv_shapes

SCHEMES = ("int4", "int8", "fp8")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="Qwen3.5-9B")
    ap.add_argument("--rows", default="1,32")
    ap.add_argument("--head", action="store_true", help="quantize the LM head in the step total too")
    args = ap.parse_args()
    cfg = json.loads((Path("tests/qwen35/reference_configs") / args.model / "config.json").read_text())
    shapes = decode_gemv_shapes(cfg.get("text_config") or cfg)
    gen = torch.Generator(device="cuda").manual_seed(0)
    print(torch.cuda.get_device_name(), "rows", args.rows)
    for m in (int(r) for r in args.rows.split(",")):
        step = {s: 0.0 for s in ("bf16", *SCHEMES)}
        for shape in shapes:
            w = torch.randn(shape.n, shape.k, device="cuda", generator=gen, dtype=torch.bfloat16) * 0.02
            x = torch.randn(m, shape.k, device="cuda", generator=gen, dtype=torch.bfloat16)
            t_dense = cold_time_ms(lambda x=x, w=w: gemv.linear(x, w, None))
            step["bf16"] += t_dense * shape.count
            line = f"M={m:3d} {shape.names:18s} [{shape.n:6d}, {shape.k:5d}] x{shape.count:2d}  bf16 {t_dense * 1e3:7.1f} us"
            for scheme in SCHEMES:
                q = quantize(w, scheme, torch.bfloat16)
                args_q = (q.qweight, q.scale, q.zero, scheme)
                t = cold_time_ms(lambda x=x, a=args_q: wq_gemv.wq_linear(x, *a, None))
                head = shape.names == "lm_head" and not args.head
                step[scheme] += (t_dense if head else t) * shape.count
                got, want = wq_gemv.wq_linear(x, *args_q, None).float(), ref.wq_linear(x, *args_q, None).float()
                err = ((got - want).abs().max() / want.abs().max()).item()
                gbps = q.nbytes / (t * 1e-3) / 1e9
                line += f" | {scheme} {t * 1e3:7.1f} us {gbps:6.0f} GB/s x{t_dense / t:4.2f} err {err:.1e}"
            print(line, flush=True)
        print(f"M={m} step GEMVs (LM head {'quantized' if args.head else 'bf16'}): "
              + ", ".join(f"{k} {v:.3f} ms" for k, v in step.items())
              + " | speed-up " + ", ".join(f"{s} x{step['bf16'] / step[s]:.2f}" for s in SCHEMES), flush=True)
    hidden, inter = (cfg.get("text_config") or cfg)["hidden_size"], (cfg.get("text_config") or cfg)["intermediate_size"]
    for scheme in SCHEMES:
        w = torch.randn(2 * inter, hidden, device="cuda", generator=gen, dtype=torch.bfloat16) * 0.02
        q = quantize(w, scheme, torch.bfloat16)
        x, r = (torch.randn(1, hidden, device="cuda", generator=gen, dtype=torch.bfloat16) for _ in range(2))
        nw = torch.randn(hidden, device="cuda", generator=gen, dtype=torch.bfloat16) * 0.1
        call = (x, r, nw, 1e-6, True, q.qweight, q.scale, q.zero, scheme, "silu")
        (y, res), (y_ref, res_ref) = wq_gemv.add_rms_norm_wq_linear(*call), ref.add_rms_norm_wq_linear(*call)
        err = ((y.float() - y_ref.float()).abs().max() / y_ref.float().abs().max()).item()
        t = cold_time_ms(lambda c=call: wq_gemv.add_rms_norm_wq_linear(*c))
        print(f"add_rms_norm_wq_linear {scheme} gate_up+silu [{2 * inter}, {hidden}]: {t * 1e3:.1f} us, "
              f"err {err:.1e}, residual equal {torch.equal(res, res_ref)}")


if __name__ == "__main__":
    main()
