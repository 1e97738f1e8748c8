"""GPU experiment (seventh session; BENCHMARKS.md): the fused gated-DeltaNet decode step at the Qwen3.5-9B
shape (H_k 16, H_v 32, K = V = 128, conv width 4) swept over value splits ``NV``, sub-chunk width and warps.

Each configuration is timed as a CUDA graph of 24 launches (one per GDN layer of the 9B model, each on
its own state pool, so no layer's state is in L2 from the previous one) without PDL, as in the batch-32
step where cuBLAS GEMMs sit between these launches. Reports µs per launch and the state bandwidth
(float32 state read + write) against the copy bandwidth measured in the same process, and checks each
configuration's output and state against the first one (the same input every time). Run from the repository root on the GPU machine:
``python3 tools/gpu_experiments/gdn_decode_sweep.py [batch ...]`` (default 32)."""
import os
import sys

os.environ["ANNA_TRITON_PDL"] = "0"

import torch
import triton
from anna_core.bench.roofline import copy_bandwidth
from anna_core.device import accelerator
from anna_xpu_kernels import gdn_decode_fused as gdf
from graph_timing import chain_time_us

DEV = torch.device("cuda" if torch.cuda.is_available() else "cpu")  # cpu: TRITON_INTERPRET=1 dry run, no timing
H_K, H_V, D, W = 16, 32, 128, 4
LAYERS = 24 if DEV.type == "cuda" else 1
CONV = 2 * H_K * D + H_V * D
CONFIGS = [  # (NV, sub-chunk width, warps[, maxnreg]); the first is the output check's reference
    (1, 128, 4), (1, 64, 4), (1, 64, 8), (1, 32, 4), (1, 32, 8), (1, 16, 4), (1, 16, 8),
    (2, 32, 4), (2, 64, 8), (1, 32, 4, 128), (1, 64, 4, 168),
    # many thin one- or two-warp programs (fla's fused recurrent kernel's shape): K reductions inside a warp
    (4, 32, 1), (4, 32, 2), (8, 16, 1), (8, 16, 2), (16, 8, 1), (16, 8, 2),
]
# Variants measured and removed (BENCHMARKS.md, seventh session): calls 1-2 unrolled the sub-chunk loop
# (every load hoisted: 242 registers), also with two sub-chunks in flight or o formed from the old state
# in one pass; call 4 compared that with the loop the kernel now has.


def registers(kern, seen: set) -> str:
    """Registers / spills of the kernel variant this configuration compiled (Triton 3.6 internals), or
    "" when it compiled none (the same variant ran at an earlier batch)."""
    try:
        cache = kern.device_caches[torch.cuda.current_device()][0]
        new = [k for key, k in cache.items() if key not in seen]
        seen.update(cache)
        return " ".join(f"regs {k.n_regs} spills {k.n_spills}" for k in new)
    except Exception as exc:  # noqa: BLE001 (informational only)
        return f"(registers unknown: {exc})"


class _WithOptions:
    """The kernel launched with extra compile options (the launcher looks the kernel up at call time)."""

    def __init__(self, kern, **options):
        self.kern, self.options = kern, options

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.kern[grid](*args, **{**kwargs, **self.options})


def layer_inputs(batch, gen):
    raw = torch.randn(batch, CONV + H_V * D + 2 * H_V, device=DEV, generator=gen).to(torch.bfloat16)
    qkv, z, b, a = torch.split(raw, [CONV, H_V * D, H_V, H_V], dim=-1)
    return dict(qkv=qkv, z=z, a=a, b=b,
                conv_states=torch.randn(batch, CONV, W - 1, device=DEV, generator=gen).to(torch.bfloat16),
                states=0.1 * torch.randn(batch, H_V, D, D, device=DEV, generator=gen),
                slots=torch.randperm(batch, device=DEV, generator=gen))


def main(batches):
    gen = torch.Generator(device=DEV).manual_seed(0)
    conv_w = (0.5 * torch.randn(CONV, W, device=DEV, generator=gen)).to(torch.bfloat16)
    neg_a = -torch.rand(H_V, device=DEV, generator=gen) * 4
    dt_bias = torch.randn(H_V, device=DEV, generator=gen)
    norm_w = torch.ones(D, device=DEV, dtype=torch.bfloat16)
    bw = copy_bandwidth(accelerator(DEV)) if DEV.type == "cuda" else 1e12
    print(f"copy bandwidth {bw / 1e9:.0f} GB/s; {DEV} triton {triton.__version__}")
    kern = gdf._fused_gdn_decode_kernel
    seen = set()
    for batch in batches:
        layers = [layer_inputs(batch, gen) for _ in range(LAYERS)]
        state_bytes = 2 * batch * H_V * D * D * 4
        auto_nv = gdf.choose_splits(batch * H_V, D, D)
        print(f"\n== batch {batch}: {batch * H_V} rows, choose_splits -> NV={auto_nv}; state traffic "
              f"{state_bytes / 1e6:.1f} MB per launch = {state_bytes / bw * 1e6:.1f} us at copy bandwidth")

        def call(L, nv, sub):
            return gdf.fused_gdn_decode(L["qkv"], conv_w, L["conv_states"], L["z"], L["a"], L["b"], neg_a, dt_bias,
                                        norm_w, 1e-6, L["states"], L["slots"], D ** -0.5, H_K, num_v_splits=nv,
                                        sub_v=sub)

        first = {k: v.clone() for k, v in layers[0].items()}  # layer 0 before any launch: the check's input
        ref = None
        results = []
        for nv, sub, warps, *cap in CONFIGS:
            if batch * H_V * nv > 16384 or sub > D // nv:
                continue
            gdf._fused_gdn_decode_kernel = _WithOptions(kern, num_warps=warps, maxnreg=cap[0] if cap else None)
            L0 = {k: v.clone() for k, v in first.items()}
            try:
                y = call(L0, nv, sub)
            except Exception as exc:  # noqa: BLE001 (report and go on with the next configuration)
                print(f"NV={nv} sub={sub} warps={warps} {cap}: FAILED {type(exc).__name__}: {exc}"[:400])
                continue
            if DEV.type == "cuda":
                torch.cuda.synchronize()
            if ref is None:
                ref = (y.float(), L0["states"].clone(), L0["conv_states"].clone())
            err = max((y.float() - ref[0]).abs().max().item(), (L0["states"] - ref[1]).abs().max().item())
            conv_ok = torch.equal(L0["conv_states"], ref[2])
            if DEV.type == "cpu":
                print(f"NV={nv} sub={sub} warps={warps} {cap}: max|diff| {err:.2e} conv {conv_ok}")
                continue
            us = chain_time_us([lambda L=L, nv=nv, sub=sub: call(L, nv, sub) for L in layers], reps=1, replays=7)
            tag = ",".join(f"maxnreg={c}" for c in cap) or "-"
            results.append((us, nv, sub, warps, tag))
            print(f"NV={nv} sub={sub:3d} warps={warps:2d} {tag:24s}: {us:7.2f} us/launch  "
                  f"{state_bytes / us / 1e3:6.0f} GB/s ({state_bytes / us / 1e3 / (bw / 1e9) * 100:4.1f}% copy)"
                  f"  max|diff| {err:.2e} conv {'=' if conv_ok else 'DIFF'}  {registers(kern, seen)}", flush=True)
        gdf._fused_gdn_decode_kernel = kern
        results.sort()
        print("best:", ", ".join(f"NV={nv} sub={sub} w={w} {t} {us:.2f}us" for us, nv, sub, w, t in results[:6]))
        del layers
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [32])
