"""GPU experiment (eighteenth session; BENCHMARKS.md): the long-row one-wave GEMV
(anna_xpu_kernels.gemv_persistent_long) against the tiled GEMV (autotuned) for one activation row at the
decode down projections wider than the one-load kernel's MAX_K, timed in PDL chains of distinct weights
captured in one graph (graph_timing.chain_time_us), with launch shapes swept. Prints one line per
(shape, kernel): microseconds per call and the weight bytes over that time. Run from the repository root on
the GPU machine: ``python3 tools/gpu_experiments/gemv_long_chain.py``."""
import torch
from anna_xpu_kernels import gemv, gemv_persistent_long
from graph_timing import chain_time_us

# (name, N, K): Gemma 4 E4B / E2B (double-wide) / 31B and Qwen3.5-9B / 27B down projections
SHAPES = [("E4B down", 2560, 10240), ("E2B wide down", 1536, 12288), ("9B down", 4096, 12288),
          ("27B down", 5120, 17408), ("31B down", 5376, 21504)]
SWEEP = [(2, None, 4, 4), (2, None, 4, 2), (2, None, 4, 8), (4, None, 4, 4), (2, 1024, 2, 8)]
CHAIN = 8  # distinct weights per chain (more than the 60 MB of L2 together)


def main() -> None:
    torch.manual_seed(0)
    real_shape, real_takes = gemv_persistent_long.launch_shape, gemv_persistent_long.takes
    for name, n, k in SHAPES:
        ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * k ** -0.5 for _ in range(CHAIN)]
        x = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
        ref = [w.float() @ x.float().T for w in ws[:1]][0].T
        gbytes = n * k * 2 / 1e9
        results = []
        gemv_persistent_long.takes = lambda *a: False  # the tiled kernel, autotuned
        y = gemv.linear(x, ws[0], None)
        err_tiled = (y.float() - ref).abs().max().item()
        results.append(("tiled", chain_time_us([lambda w=w, x=x: gemv.linear(x, w, None) for w in ws]), err_tiled))
        gemv_persistent_long.takes = lambda *a: True  # every swept shape, also past the limits chosen from it
        for bn, kc, warps, per_sm in SWEEP:
            gemv_persistent_long.launch_shape = (lambda kk, bn=bn, kc=kc, warps=warps, per_sm=per_sm:
                                                 (bn, kc or real_shape(kk)[1], warps, per_sm))
            y = gemv.linear(x, ws[0], None)
            err = (y.float() - ref).abs().max().item()
            label = f"long bn{bn} kc{kc or real_shape(k)[1]} w{warps} x{per_sm}"
            results.append((label, chain_time_us([lambda w=w, x=x: gemv.linear(x, w, None) for w in ws]), err))
        gemv_persistent_long.launch_shape, gemv_persistent_long.takes = real_shape, real_takes
        for label, us, err in results:
            print(f"{name:14s} N={n:5d} K={k:5d} {label:26s} {us:7.2f} us  {gbytes / us * 1e3:5.2f} TB/s  "
                  f"max err {err:.3g}", flush=True)
        del ws
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
