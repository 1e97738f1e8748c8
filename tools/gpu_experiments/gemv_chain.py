"""GPU experiment (sixth session, call 3; BENCHMARKS.md): decode GEMV designs timed in PDL chains of
distinct weights captured in one graph, at the Qwen3.5-2B shapes.

``current``: the tiled GEMV (anna_xpu_kernels.gemv) with the configurations the autotuner picked;
``persist``: the prototype of anna_xpu_kernels.gemv_persistent (the same one-wave body without the
prologues, epilogue and bias), swept over BLOCK_N, warps and programs per multiprocessor. Kept as the
exact script behind the recorded numbers. Run from the repository root on the GPU machine:
``python3 tools/gpu_experiments/gemv_chain.py``."""
import sys

import torch
import triton
import triton.language as tl
from anna_xpu_kernels import gemv, pdl
from anna_xpu_kernels.gemv_tuning import GemvConfig
from graph_timing import chain_time_us
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

DEV = "cuda"
SMS = torch.cuda.get_device_properties(0).multi_processor_count


@triton.jit
def persist_gemv(x_ptr, w_ptr, y_ptr, N, K, stride_w, n_blocks, BN: tl.constexpr, KP: tl.constexpr,
                 USE_PDL: tl.constexpr):
    if USE_PDL:
        gdc_launch_dependents()
    pid = tl.program_id(0)
    G = tl.num_programs(0)
    r = tl.arange(0, BN)
    kk = tl.arange(0, KP)
    k_ok = kk < K
    rows = tl.minimum(pid * BN + r, N - 1).to(tl.int64)
    w_cur = tl.load(w_ptr + rows[:, None] * stride_w + kk[None, :], mask=k_ok[None, :] & (pid < n_blocks),
                    other=0.0, eviction_policy="evict_first")
    if USE_PDL:
        gdc_wait()
    x = tl.load(x_ptr + kk, mask=k_ok, other=0.0).to(tl.float32)
    for rb in range(pid, n_blocks, G):
        nrows = tl.minimum((rb + G) * BN + r, N - 1).to(tl.int64)
        w_next = tl.load(w_ptr + nrows[:, None] * stride_w + kk[None, :], mask=k_ok[None, :] & (rb + G < n_blocks),
                         other=0.0, eviction_policy="evict_first")
        acc = tl.sum(w_cur.to(tl.float32) * x[None, :], axis=1)
        out_rows = rb * BN + r
        tl.store(y_ptr + out_rows, acc.to(y_ptr.dtype.element_ty), mask=out_rows < N)
        w_cur = w_next


def persist(x, w, bn, warps, per_sm):
    n, k = w.shape
    y = torch.empty((1, n), dtype=x.dtype, device=x.device)
    n_blocks = triton.cdiv(n, bn)
    grid = (min(n_blocks, SMS * per_sm),)
    persist_gemv[grid](x, w, y, n, k, w.stride(0), n_blocks, BN=bn, KP=triton.next_power_of_2(k),
                       num_warps=warps, **pdl.launch_options(x))
    return y


def current(x, w, cfg):
    return gemv.launch(x, w, None, cfg, gemv.Prologue())


def main():
    torch.manual_seed(0)
    shapes = {"in_proj": (8224, 2048), "out": (2048, 2048), "gate_up": (12288, 2048), "down": (2048, 6144)}
    cur_cfg = {"in_proj": GemvConfig(16, 256, 1, False, 4, 3), "out": GemvConfig(4, 512, 1, False, 2, 3),
               "gate_up": GemvConfig(8, 512, 1, False, 4, 3), "down": GemvConfig(8, 512, 2, False, 4, 3)}
    x = {k: torch.randn(1, s[1], device=DEV, dtype=torch.bfloat16) for k, s in shapes.items()}
    ws = {}
    for name, (n, k) in shapes.items():
        copies = max(4, min(16, -(-400_000_000 // (n * k * 2))))
        ws[name] = [torch.randn(n, k, device=DEV, dtype=torch.bfloat16) / k ** 0.5 for _ in range(copies)]
    # correctness of the persistent kernel
    for name in shapes:
        ref = torch.nn.functional.linear(x[name], ws[name][0]).float()
        got = persist(x[name], ws[name][0], 2, 2, 4).float()
        print(f"check {name}: max |persist - F.linear| {(got - ref).abs().max().item():.3e}", flush=True)
    results = {}
    for name, (n, k) in shapes.items():
        mb = n * k * 2 / 1e6
        t = chain_time_us([lambda w=w, nm=name: current(x[nm], w, cur_cfg[nm]) for w in ws[name]])
        results[(name, "current")] = t
        print(f"{name} {mb:.1f} MB current {cur_cfg[name]}: {t:.2f} us ({mb / t:.2f} TB/s)", flush=True)
        for bn in (1, 2, 4, 8):
            for warps in (1, 2, 4):
                for per_sm in (2, 4, 8):
                    if bn * triton.next_power_of_2(k) // (32 * warps) > 256:
                        continue
                    try:
                        t = chain_time_us([lambda w=w, nm=name, bn=bn, warps=warps, per_sm=per_sm: persist(x[nm], w, bn, warps, per_sm)
                                          for w in ws[name]])
                    except Exception as exc:  # noqa: BLE001
                        print(f"  persist bn={bn} warps={warps} per_sm={per_sm}: failed {type(exc).__name__}")
                        continue
                    results[(name, bn, warps, per_sm)] = t
                    print(f"  persist bn={bn} warps={warps} per_sm={per_sm}: {t:.2f} us ({mb / t:.2f} TB/s)", flush=True)
    # a layer's four projections in sequence, 6 layers with their own weights
    best = {}
    for name in shapes:
        cands = [(t, key) for key, t in results.items() if key[0] == name and key[1] != "current"]
        best[name] = min(cands)[1] if cands else None
        print(f"best persist {name}: {best[name]} {min(cands)[0]:.2f} us vs current {results[(name, 'current')]:.2f}")
    order = ["in_proj", "out", "gate_up", "down"]
    layers = [{nm: ws[nm][i % len(ws[nm])] for nm in order} for i in range(6)]
    cur_calls = [lambda nm=nm, L=L: current(x[nm], L[nm], cur_cfg[nm]) for L in layers for nm in order]
    per_calls = [lambda nm=nm, L=L: persist(x[nm], L[nm], *best[nm][1:]) for L in layers for nm in order]
    mix_calls = [lambda nm=nm, L=L: (persist(x[nm], L[nm], *best[nm][1:]) if nm != "out" else current(x[nm], L[nm], cur_cfg[nm]))
                 for L in layers for nm in order]
    mb = sum(shapes[nm][0] * shapes[nm][1] * 2 for nm in order) / 1e6
    for tag, calls in (("current", cur_calls), ("persist", per_calls), ("persist but out", mix_calls),
                       ("current", cur_calls), ("persist", per_calls)):
        t = chain_time_us(calls, reps=2) * 4
        print(f"layer chain {tag}: {t:.2f} us per layer ({mb / t:.2f} TB/s)", flush=True)


if __name__ == "__main__":
    sys.exit(main())
