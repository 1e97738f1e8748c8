"""Issue 29 on a GPU: the FP8 decode GEMV with its codes converted in hardware (``ANNA_WQ_FP8_CVT=1``,
:func:`anna_xpu_kernels.wq_gemv_decode.native_fp8`, the default on sm_89+ since this check) against the
shift-and-mask decode (``ANNA_WQ_FP8_CVT=0``).

At the decode shapes of a Qwen3.5 model (random bf16 weights quantized to FP8 e4m3 with 128 x 128 block scales),
for each row count: with the same launch configuration (a 16 x 1024 tile, no split and two splits) both decodes'
outputs must be **equal bit for bit** (each code's exact value either way, the same sums in the same order); then
the time per call with a cold L2 of each through ``wq_linear`` (graph replays,
:func:`anna_xpu_kernels.gemv_tuning.cold_time_ms`; each autotunes on first use, so the two may pick different
tiles: their largest difference is printed, not required to be zero), then one decode step's FP8 GEMVs (each shape
times its uses, the LM head included) off and on. Also the fused ``add_rms_norm_wq_linear`` (norm + gate/up + SiLU)
off and on. Exits 1 when an equal-configuration pair differs.

    python3 tools/gpu_experiments/wq_fp8_cvt_check.py [--model Qwen3.5-9B] [--rows 1,2,8]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch
from anna_core.weights.gpu_quant import quantize
from anna_xpu_kernels import wq_gemv, wq_gemv_decode
from anna_xpu_kernels._env import WQ_FP8_CVT_ENV
from anna_xpu_kernels.gemv import Prologue
from anna_xpu_kernels.gemv_epilogue import NO_EPILOGUE
from anna_xpu_kernels.gemv_tuning import cold_time_ms
from anna_xpu_kernels.microbench_linear import decode_gemv_shapes


def _both(fn):
    """``(out_off, out_on, ms_off, ms_on)`` of ``fn()`` with the hardware conversion off, then on."""
    outs, times = [], []
    for on in (False, True):
        os.environ[WQ_FP8_CVT_ENV] = "1" if on else "0"
        outs.append(fn())
        times.append(cold_time_ms(fn))
    os.environ.pop(WQ_FP8_CVT_ENV, None)
    return outs[0], outs[1], times[0], times[1]


def _exact(x, q, n: int, k: int) -> bool:
    """Both decodes at fixed configurations (no split, and two splits where K holds two tiles): equal outputs."""
    same = True
    for cfg in (wq_gemv_decode.WqConfig(16, 1024, 1), wq_gemv_decode.WqConfig(16, 1024, 2)):
        if k < cfg.block_k * cfg.split_k:
            continue
        outs = []
        for on in ("0", "1"):
            os.environ[WQ_FP8_CVT_ENV] = on
            outs.append(wq_gemv_decode.launch(x, q.qweight, q.scale, q.zero, "fp8", None, n, k, Prologue(),
                                              NO_EPILOGUE, config=cfg))
        same &= torch.equal(*outs)
    os.environ.pop(WQ_FP8_CVT_ENV, None)
    return same


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="Qwen3.5-9B")
    ap.add_argument("--rows", default="1,2,8")
    args = ap.parse_args()
    cfg = json.loads((Path("tests/qwen35/reference_configs") / args.model / "config.json").read_text())
    text = cfg.get("text_config") or cfg
    gen = torch.Generator(device="cuda").manual_seed(0)
    os.environ[WQ_FP8_CVT_ENV] = "1"
    print(torch.cuda.get_device_name(), args.model, "native_fp8:", wq_gemv_decode.native_fp8(torch.device("cuda")),
          flush=True)
    ok = True
    for m in (int(r) for r in args.rows.split(",")):
        step = [0.0, 0.0]
        for shape in decode_gemv_shapes(text):
            w = torch.randn(shape.n, shape.k, device="cuda", generator=gen, dtype=torch.bfloat16) * 0.02
            x = torch.randn(m, shape.k, device="cuda", generator=gen, dtype=torch.bfloat16)
            q = quantize(w, "fp8", torch.bfloat16)
            a = (q.qweight, q.scale, q.zero, "fp8")
            exact = _exact(x, q, shape.n, shape.k)
            ok &= exact
            y0, y1, t0, t1 = _both(lambda x=x, a=a: wq_gemv.wq_linear(x, *a, None))
            step[0] += t0 * shape.count
            step[1] += t1 * shape.count
            print(f"M={m} {shape.names:15s} [{shape.n:6d}, {shape.k:5d}] x{shape.count:2d} | shifts {t0 * 1e3:7.1f} us, "
                  f"cvt {t1 * 1e3:7.1f} us (x{t0 / t1:4.2f}, {q.nbytes / (t1 * 1e-3) / 1e9:5.0f} GB/s) | same config equal "
                  f"{exact}, tuned max diff {(y0.float() - y1.float()).abs().max().item():.2e}", flush=True)
            del w, q
            torch.cuda.empty_cache()
        print(f"M={m} one step's FP8 GEMVs (LM head included): shifts {step[0]:.3f} ms, cvt {step[1]:.3f} ms "
              f"(x{step[0] / step[1]:.3f})", flush=True)
    hidden, inter = text["hidden_size"], text["intermediate_size"]
    w = torch.randn(2 * inter, hidden, device="cuda", generator=gen, dtype=torch.bfloat16) * 0.02
    q = quantize(w, "fp8", torch.bfloat16)
    x, r = (torch.randn(1, hidden, device="cuda", generator=gen, dtype=torch.bfloat16) for _ in range(2))
    nw = torch.randn(hidden, device="cuda", generator=gen, dtype=torch.bfloat16) * 0.1
    call = (x, r, nw, 1e-6, True, q.qweight, q.scale, q.zero, "fp8", "silu")
    y0, y1, t0, t1 = _both(lambda: wq_gemv.add_rms_norm_wq_linear(*call))
    print(f"add_rms_norm_wq_linear fp8 gate_up+silu [{2 * inter}, {hidden}]: shifts {t0 * 1e3:.1f} us, cvt "
          f"{t1 * 1e3:.1f} us, output max diff {(y0[0].float() - y1[0].float()).abs().max().item():.2e}, residuals "
          f"equal {torch.equal(y0[1], y1[1])}", flush=True)
    print("wq_fp8_cvt_check: " + ("ok" if ok else "FAILED (outputs differ at one configuration)"), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
