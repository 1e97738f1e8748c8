"""Wide-head paged attention on a GPU (Gemma 4 global layers, head_dim 512): errors vs the torch reference,
times vs head_dim 256 at the same bytes, and a CUDA graph capture of a decode call.

Run from the repository root (PYTHONPATH set to the packages' src folders)::

    python3 tools/gpu_experiments/paged_attention_wide.py [--quick]

Prints one line per case: shape, Triton us/call, reference us/call, KV GB/s of the Triton kernel, max |err|.
"""

from __future__ import annotations

import argparse
import sys
import time

import torch


def _case(pa, rpa, *, b, q_len, ctx, h_q, h_kv, dim, dtype, window=None, block_size=16, splits=None, bench=True):
    dev = "cuda"
    blocks = -(-ctx // block_size)
    n_blocks = b * blocks + 1
    k = torch.randn(n_blocks, block_size, h_kv, dim, device=dev, dtype=dtype)
    v = torch.randn_like(k)
    tables = torch.randperm(n_blocks, device=dev)[: b * blocks].view(b, blocks).to(torch.int32)
    q = torch.randn(b * q_len, h_q, dim, device=dev, dtype=dtype)
    cu = torch.arange(0, b * q_len + 1, q_len, device=dev, dtype=torch.int32)
    seq = torch.full((b,), ctx, device=dev, dtype=torch.int32)
    args = (q, k, v, cu, seq, tables, dim ** -0.5, window)
    got = pa.paged_attention_splits(*args, num_splits=splits)
    want = rpa.paged_attention(*args)
    err = (got.float() - want.float()).abs().max().item()
    line = f"B={b} q={q_len} ctx={ctx} Hq={h_q} Hkv={h_kv} D={dim} {str(dtype)[6:]} win={window} splits={splits}"
    if bench:
        from triton.testing import do_bench

        t_tri = do_bench(lambda: pa.paged_attention_splits(*args, num_splits=splits), warmup=10, rep=50)
        t_ref = do_bench(lambda: rpa.paged_attention(*args), warmup=3, rep=20) if b * q_len <= 2048 else float("nan")
        kv_bytes = 2 * b * min(ctx, window or ctx) * h_kv * dim * k.element_size()
        line += f" | triton {t_tri * 1e3:.1f} us, ref {t_ref * 1e3:.1f} us, {kv_bytes / t_tri / 1e6:.0f} GB/s"
    print(f"{line} | max|err| {err:.2e}", flush=True)
    return err


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="correctness cases only, no timing")
    a = parser.parse_args()
    from anna_core.kernels.reference import paged_attention as rpa
    from anna_xpu_kernels import paged_attention as pa

    def refuse(*args):
        raise RuntimeError("reference fallback taken")

    pa._reference = refuse
    bf, bench = torch.bfloat16, not a.quick
    t0 = time.time()
    worst = 0.0
    # decode, E2B (8 q / 1 kv) and 31B (32 q / 4 kv) global layers, plus head_dim 256 at the same shapes
    for dim in (512, 256):
        for b, ctx in ((1, 1024), (1, 8192), (8, 4096), (32, 2048)):
            worst = max(worst, _case(pa, rpa, b=b, q_len=1, ctx=ctx, h_q=8, h_kv=1, dim=dim, dtype=bf, bench=bench))
            worst = max(worst, _case(pa, rpa, b=b, q_len=1, ctx=ctx, h_q=32, h_kv=4, dim=dim, dtype=bf, bench=bench))
        print(f"-- {time.time() - t0:.0f} s", flush=True)
    # prefill and chunked prefill, sliding window, fp32, forced splits
    for dim in (512, 256):
        worst = max(worst, _case(pa, rpa, b=1, q_len=2048, ctx=2048, h_q=8, h_kv=1, dim=dim, dtype=bf, bench=bench))
        worst = max(worst, _case(pa, rpa, b=4, q_len=512, ctx=1536, h_q=16, h_kv=2, dim=dim, dtype=bf, bench=bench))
    print(f"-- {time.time() - t0:.0f} s", flush=True)
    worst = max(worst, _case(pa, rpa, b=2, q_len=300, ctx=900, h_q=8, h_kv=2, dim=512, dtype=bf, window=512,
                             bench=False))
    worst = max(worst, _case(pa, rpa, b=3, q_len=1, ctx=700, h_q=8, h_kv=2, dim=512, dtype=torch.float32,
                             splits=7, bench=False))
    worst = max(worst, _case(pa, rpa, b=2, q_len=5, ctx=333, h_q=8, h_kv=1, dim=384, dtype=bf, splits=3,
                             bench=False))
    # graph capture of a decode call (E2B global layer, batch 4)
    dev = "cuda"
    k = torch.randn(65, 16, 1, 512, device=dev, dtype=bf)
    v = torch.randn_like(k)
    tables = torch.arange(64, device=dev, dtype=torch.int32).view(4, 16)
    q = torch.randn(4, 8, 512, device=dev, dtype=bf)
    cu = torch.arange(5, device=dev, dtype=torch.int32)
    seq = torch.tensor([5, 100, 200, 256], device=dev, dtype=torch.int32)
    args = (q, k, v, cu, seq, tables, 1.0, None)
    pa.paged_attention(*args)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = pa.paged_attention(*args)
    seq.copy_(torch.tensor([7, 50, 255, 3], device=dev, dtype=torch.int32))
    graph.replay()
    err = (out.float() - rpa.paged_attention(*args).float()).abs().max().item()
    print(f"graph capture + replay with new seq_lens: max|err| {err:.2e}", flush=True)
    worst = max(worst, err)
    print(f"worst max|err| {worst:.2e}; {time.time() - t0:.0f} s", flush=True)
    return 0 if worst < 5e-2 else 1


if __name__ == "__main__":
    sys.exit(main())
