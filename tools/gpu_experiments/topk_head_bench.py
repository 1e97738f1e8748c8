"""The fused top-k LM head (``lm_head_topk``, issue 29) against the full head on a GPU: microseconds of the head
GEMV + ``torch.topk`` (what a step without the fused head runs: the registry's ``linear`` / ``wq_linear`` kernel,
the float32 cast, Gemma's soft-cap, then the top 64) and of the fused op, at Qwen3.5-9B's head (hidden 4096,
vocab 248,320) and Gemma 4 E4B's (2560 x 262,144, soft-capped at 30), T = 1 and 32 rows, bf16 / int4 / fp8
weights (int8 with ``--schemes``). Random weights; no checkpoint needed.

Run from the repository root with the Anna wheels installed (or PYTHONPATH set to the packages' src folders)::

    timeout 200 python3 tools/gpu_experiments/topk_head_bench.py [--rows 1,32] [--schemes none,int4,fp8]
        [--heads qwen35-9b,gemma4-e4b] [--iters 50]

Each case is timed as a captured CUDA graph replayed ``--iters`` times (median of per-replay events; eager when a
capture fails, said in ``timing``), so host launch costs are excluded on both sides. Per case it prints one JSON
line and appends it to ``$OUT/topk_head_bench.jsonl`` (when ``OUT`` is set): ``full_us``, ``fused_us``,
``speedup`` (full / fused), ``fused_gbps`` and ``full_gbps`` (the head's weight bytes over the time), ``weight_mb``
and the agreement of the fused op with the full path on that input (``ids_equal``: fraction of rows whose 64
ids match exactly, ``max_value_diff``, ``max_lse_diff``; a few differing rows are near-ties whose GEMV sums round
differently). What to look for: ``speedup`` >= 1 everywhere (the fused head skips writing and re-reading the
[T, V] float32 logits and the top-k over them), largest at T = 32; ``fused_gbps`` near the device's memory
bandwidth at T = 1.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch

HEADS = {"qwen35-9b": (4096, 248320, None), "gemma4-e4b": (2560, 262144, 30.0)}
K = 64


def _time(fn, iters: int) -> tuple[float, str]:
    """Median microseconds of one call of ``fn`` (graph replay when it captures)."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    run, how = fn, "eager"
    try:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        run, how = graph.replay, "cuda graph"
    except Exception as exc:  # noqa: BLE001 - time it eagerly then
        how = f"eager (capture failed: {type(exc).__name__}: {str(exc)[:120]})"
        torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) * 1e3)
    return statistics.median(times), how


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", default="1,32")
    p.add_argument("--schemes", default="none,int4,fp8")
    p.add_argument("--heads", default=",".join(HEADS))
    p.add_argument("--iters", type=int, default=50)
    args = p.parse_args()

    from anna_core.kernels.reference.lm_head_topk import lm_head_topk as reference
    from anna_core.kernels.registry import KernelRegistry, bind_ops
    from anna_core.weights.gpu_quant import quantize

    device, dtype = torch.device("cuda"), torch.bfloat16
    registry = KernelRegistry.from_plugins()
    ops = bind_ops(registry, device, dtype)
    out_path = os.path.join(os.environ["OUT"], "topk_head_bench.jsonl") if os.environ.get("OUT") else None
    print(json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__}), flush=True)
    gen = torch.Generator(device=device).manual_seed(0)
    for head in args.heads.split(","):
        hidden_size, vocab, cap = HEADS[head]
        dense = torch.randn(vocab, hidden_size, device=device, generator=gen, dtype=dtype) * 0.02
        for scheme in args.schemes.split(","):
            if scheme == "none":
                weight = (dense, None, None)
            else:
                q = quantize(dense, scheme, dtype)
                weight = (q.qweight, q.scale, q.zero)
            nbytes = sum(t.numel() * t.element_size() for t in weight if t is not None)
            fused_op = ops.get("lm_head_topk", scheme=scheme)
            gemv = ops.get("linear") if scheme == "none" else ops.get("wq_linear", scheme=scheme)
            for rows in (int(r) for r in args.rows.split(",")):
                x = torch.randn(rows, hidden_size, device=device, generator=gen, dtype=dtype)

                def full(x=x, weight=weight, scheme=scheme, gemv=gemv, cap=cap):
                    y = gemv(x, weight[0], None) if scheme == "none" else gemv(x, *weight, scheme, None)
                    logits = y.float()
                    if cap is not None:
                        logits = torch.tanh(logits / cap) * cap
                    return logits.topk(K, dim=-1)

                def fused(x=x, weight=weight, scheme=scheme, fused_op=fused_op, cap=cap):
                    return fused_op(x, *weight, scheme, K, cap)

                t0 = time.perf_counter()
                full_us, full_how = _time(full, args.iters)
                fused_us, fused_how = _time(fused, args.iters)
                values, indices, lse = fused()
                want = reference(x, *weight, scheme, K, cap)
                line = {
                    "head": head, "hidden": hidden_size, "vocab": vocab, "softcap": cap, "scheme": scheme,
                    "rows": rows, "k": K, "weight_mb": nbytes / 1e6, "full_us": full_us, "fused_us": fused_us,
                    "speedup": full_us / fused_us, "full_gbps": nbytes / full_us / 1e3,
                    "fused_gbps": nbytes / fused_us / 1e3,
                    "ids_equal": (indices == want[1]).all(dim=1).float().mean().item(),
                    "max_value_diff": (values - want[0]).abs().max().item(),
                    "max_lse_diff": (lse - want[2]).abs().max().item(),
                    "timing": {"full": full_how, "fused": fused_how}, "case_s": time.perf_counter() - t0,
                }
                print(json.dumps(line), flush=True)
                if out_path:
                    with open(out_path, "a") as f:
                        f.write(json.dumps(line) + "\n")
            del weight
        del dense
        torch.cuda.empty_cache()
    print(json.dumps({"kernels": registry.chosen()}), flush=True)


if __name__ == "__main__":
    main()
