"""Decode attention on a GPU: time of the Triton paged attention (kernel + split merge) per ``num_splits``,
at batch-1/batch-few decode shapes of Gemma 4 and Qwen3.5, inside a CUDA graph (what a served decode step
pays), against the split count the kernel's heuristic picks.

Run from the repository root (PYTHONPATH set to the packages' src folders)::

    python3 tools/gpu_experiments/attention_splits_sweep.py [--reps 20] [--only E4B,9B] [--splits 8,16,32,64]

Prints one line per shape: the heuristic's pick and its time, then ``splits:us`` for each tried count (the
fastest marked ``*``). With ``--fused 8,16,32`` a second line per shape times the split merge inside the attention
launch (``ANNA_ATTENTION_FUSED_MERGE``: no merge kernel) at those split counts (``f<splits>:us``; the shape rule
``FUSED_MERGE_KEYS_PER_SPLIT`` lifted, so long key runs are timed too), each checked against the reference like the
others.
"""

from __future__ import annotations

import argparse

import torch
from graph_timing import chain_time_us

# name: (batch, h_q, h_kv, head_dim, context, window)
SHAPES = {
    "E2B sliding ctx640": (1, 8, 1, 256, 640, 512),
    "E2B global ctx640": (1, 8, 1, 512, 640, None),
    "E2B global ctx2176": (1, 8, 1, 512, 2176, None),
    "E4B sliding ctx640": (1, 8, 2, 256, 640, 512),
    "E4B global ctx2176": (1, 8, 2, 512, 2176, None),
    "26B sliding ctx2176": (1, 16, 8, 256, 2176, 1024),
    "26B global ctx2176": (1, 16, 2, 512, 2176, None),
    "31B sliding ctx2176": (1, 32, 16, 256, 2176, 1024),
    "31B global ctx2176": (1, 32, 4, 512, 2176, None),
    "Qwen 9B ctx640": (1, 16, 4, 256, 640, None),
    "Qwen 9B ctx2176": (1, 16, 4, 256, 2176, None),
    "Qwen 35B ctx2176": (1, 16, 2, 256, 2176, None),
    "E2B sliding b4 ctx640": (4, 8, 1, 256, 640, 512),
}


def _graph_time(fn, reps: int) -> float:
    """Microseconds per call of ``fn`` replayed ``reps`` times inside one CUDA graph
    (:func:`graph_timing.chain_time_us`, the scripts' shared timer)."""
    return chain_time_us([fn], reps=reps)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--only", default="", help="comma-separated substrings of the shape names to run")
    parser.add_argument("--splits", default="1,2,4,8,16,32,64", help="comma-separated split counts to time")
    parser.add_argument("--fused", default="", help="split counts to time with the fused (in-launch) merge")
    args = parser.parse_args()
    fused_counts = [int(n) for n in args.fused.split(",") if n]
    only = [o for o in args.only.split(",") if o]
    split_counts = [int(n) for n in args.splits.split(",")]
    from anna_core.kernels.reference import paged_attention as rpa
    from anna_xpu_kernels import paged_attention as pa

    pa.FUSED_MERGE_KEYS_PER_SPLIT = 1 << 30  # time the fused merge at every split count, long key runs included

    dev, dtype, block_size = "cuda", torch.bfloat16, 16
    for name, (b, h_q, h_kv, dim, ctx, window) in SHAPES.items():
        if only and not any(o in name for o in only):
            continue
        blocks = -(-ctx // block_size)
        n_blocks = b * blocks + 1
        k = torch.randn(n_blocks, block_size, h_kv, dim, device=dev, dtype=dtype)
        v = torch.randn_like(k)
        tables = torch.randperm(n_blocks, device=dev)[: b * blocks].view(b, blocks).to(torch.int32)
        q = torch.randn(b, h_q, dim, device=dev, dtype=dtype)
        cu = torch.arange(0, b + 1, device=dev, dtype=torch.int32)
        seq = torch.full((b,), ctx, device=dev, dtype=torch.int32)
        call = (q, k, v, cu, seq, tables, dim ** -0.5, window)
        want = rpa.paged_attention(*call).float()
        auto = _graph_time(lambda c=call: pa.paged_attention_splits(*c, num_splits=None), args.reps)
        results = {}
        for splits in split_counts:
            got = pa.paged_attention_splits(*call, num_splits=splits).float()
            err = (got - want).abs().max().item()
            if err > 3e-2:
                results[splits] = f"ERR {err:.3g}"
                continue
            results[splits] = _graph_time(lambda s=splits, c=call: pa.paged_attention_splits(*c, num_splits=s),
                                          args.reps)
        times = {s: t for s, t in results.items() if isinstance(t, float)}
        best = min(times, key=times.get)
        cells = " ".join(f"{s}:{t:.2f}{'*' if s == best else ''}" if isinstance(t, float) else f"{s}:{t}"
                         for s, t in results.items())
        print(f"{name:24s} auto {auto:6.2f} us | {cells}", flush=True)
        fused = []
        for splits in fused_counts:
            got = pa.paged_attention_splits(*call, num_splits=splits, fused_merge=splits).float()
            err = (got - want).abs().max().item()
            if err > 3e-2:
                fused.append(f"f{splits}:ERR {err:.3g}")
                continue
            t = _graph_time(lambda s=splits, c=call: pa.paged_attention_splits(*c, num_splits=s, fused_merge=s),
                            args.reps)
            fused.append(f"f{splits}:{t:.2f}")
        if fused:
            print(f"{'':24s} fused merge     | {' '.join(fused)}", flush=True)


if __name__ == "__main__":
    main()
