"""The quantized-weight GEMV (issue 29) at the decode shapes of a Qwen3.5 model, against the bf16 GEMV: per weight
shape, row count and scheme, the time per call with a cold L2 (graph replays,
:func:`anna_xpu_kernels.gemv_tuning.cold_time_ms`; the first call of a shape autotunes), the bytes it must read
over that time (effective GB/s), which kernel ran, and its largest difference from the float32 reference (relative
to the largest output); then one decode step's GEMV time per scheme (each shape times its uses) with the LM head
dense and with it quantized, and the speed-up over bf16. Also checks the fused ``add_rms_norm_wq_linear`` (norm +
gate/up + SiLU) at the MLP's shape against its reference.

    python3 tools/gpu_experiments/wq_gemv_bench.py [--model Qwen3.5-9B] [--rows 1,8] [--schemes int4,int8,fp8]

Each line is printed (flushed) as soon as it is measured, and a failing measurement prints its error and the run
goes on, so a time-out still leaves every finished line in the log.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from anna_core.kernels.reference import wq_linear as ref
from anna_core.weights.gpu_quant import quantize
from anna_xpu_kernels import gemv, wq_gemv, wq_gemv_decode
from anna_xpu_kernels.gemv_tuning import cold_time_ms
from anna_xpu_kernels.microbench_linear import decode_gemv_shapes


def _err(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got.float() - want.float()).abs().max() / want.float().abs().max()).item()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="Qwen3.5-9B")
    ap.add_argument("--rows", default="1,8")
    ap.add_argument("--schemes", default="int4,int8,fp8")
    args = ap.parse_args()
    schemes = args.schemes.split(",")
    cfg = json.loads((Path("tests/qwen35/reference_configs") / args.model / "config.json").read_text())
    text = cfg.get("text_config") or cfg
    shapes = decode_gemv_shapes(text)
    gen = torch.Generator(device="cuda").manual_seed(0)
    print(torch.cuda.get_device_name(), args.model, "rows", args.rows, flush=True)
    for m in (int(r) for r in args.rows.split(",")):
        body = {s: 0.0 for s in ("bf16", *schemes)}  # every shape but the LM head, times its uses
        head = {s: float("nan") for s in ("bf16", *schemes)}
        for shape in shapes:
            start = time.time()
            w = torch.randn(shape.n, shape.k, device="cuda", generator=gen, dtype=torch.bfloat16) * 0.02
            x = torch.randn(m, shape.k, device="cuda", generator=gen, dtype=torch.bfloat16)
            t_dense = cold_time_ms(lambda x=x, w=w: gemv.linear(x, w, None))
            is_head = shape.names == "lm_head"
            if is_head:
                head["bf16"] = t_dense
            else:
                body["bf16"] += t_dense * shape.count
            dense_gbps = w.numel() * 2 / (t_dense * 1e-3) / 1e9
            line = (f"M={m} {shape.names:15s} [{shape.n:6d}, {shape.k:5d}] x{shape.count:2d} | bf16 {t_dense * 1e3:7.1f} us "
                    f"{dense_gbps:5.0f} GB/s")
            for scheme in schemes:
                try:
                    q = quantize(w, scheme, torch.bfloat16)
                    qargs = (q.qweight, q.scale, q.zero, scheme)
                    kernel = "decode" if wq_gemv_decode.takes(x, q.qweight, scheme) else "tiled"
                    t = cold_time_ms(lambda x=x, a=qargs: wq_gemv.wq_linear(x, *a, None))
                    err = _err(wq_gemv.wq_linear(x, *qargs, None), ref.wq_linear(x, *qargs, None))
                    if is_head:
                        head[scheme] = t
                    else:
                        body[scheme] += t * shape.count
                    line += (f" | {scheme} {t * 1e3:7.1f} us {q.nbytes / (t * 1e-3) / 1e9:5.0f} GB/s "
                             f"x{t_dense / t:4.2f} {kernel} err {err:.1e}")
                except Exception as exc:  # noqa: BLE001  (a failed scheme must not hide the others)
                    line += f" | {scheme} FAILED {type(exc).__name__}: {str(exc)[:200]}"
                    body[scheme] = float("nan")
            print(line + f" ({time.time() - start:.0f} s)", flush=True)
            del w
            torch.cuda.empty_cache()
        for quant_head in (False, True):
            total = {s: body[s] + (head[s] if quant_head or s == "bf16" else head["bf16"]) for s in body}
            print(f"M={m} one step's GEMVs, LM head {'quantized' if quant_head else 'bf16'}: "
                  + ", ".join(f"{s} {v:.3f} ms" for s, v in total.items())
                  + " | speed-up " + ", ".join(f"{s} x{total['bf16'] / total[s]:.2f}" for s in schemes), flush=True)
    hidden, inter = text["hidden_size"], text["intermediate_size"]
    for scheme in schemes:
        try:
            w = torch.randn(2 * inter, hidden, device="cuda", generator=gen, dtype=torch.bfloat16) * 0.02
            q = quantize(w, scheme, torch.bfloat16)
            x, r = (torch.randn(1, hidden, device="cuda", generator=gen, dtype=torch.bfloat16) for _ in range(2))
            nw = torch.randn(hidden, device="cuda", generator=gen, dtype=torch.bfloat16) * 0.1
            call = (x, r, nw, 1e-6, True, q.qweight, q.scale, q.zero, scheme, "silu")
            (y, res), (y_ref, res_ref) = wq_gemv.add_rms_norm_wq_linear(*call), ref.add_rms_norm_wq_linear(*call)
            t = cold_time_ms(lambda c=call: wq_gemv.add_rms_norm_wq_linear(*c))
            print(f"add_rms_norm_wq_linear {scheme} gate_up+silu [{2 * inter}, {hidden}]: {t * 1e3:.1f} us, "
                  f"err {_err(y, y_ref):.1e}, residual equal {torch.equal(res, res_ref)}", flush=True)
        except Exception as exc:  # noqa: BLE001
            print(f"add_rms_norm_wq_linear {scheme} FAILED {type(exc).__name__}: {str(exc)[:300]}", flush=True)


if __name__ == "__main__":
    main()
