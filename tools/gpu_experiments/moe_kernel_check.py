"""The Triton ``moe_experts`` op on a CUDA GPU at the released MoE shapes: errors vs the torch reference,
times of each path (the few-token GEMVs and the grouped GEMMs) against the weight-bytes roofline, no host
sync, and CUDA graph capture / replay.

Shapes (routed experts of one layer, bf16): Qwen3.5-35B-A3B (E=256, K=8, H=2048, I=512, SwiGLU) and
Gemma 4 26B-A4B (E=128, K=8, H=2816, I=704, GeGLU), T = 1, 2, 4, 8, 32, 512, 2048 tokens with random
top-k routing. Self-contained (random weights, no network). Run from the repository root::

    PYTHONPATH=anna-core/src:anna-xpu-kernels/src python3 tools/gpu_experiments/moe_kernel_check.py [--quick]

The first line gives the roofline: the device's bandwidth in a 256 MiB copy. Then one line per case:

* ``check <model> T=<t> bf16 <path>``, for the decode path (:mod:`anna_xpu_kernels.moe_decode`, forced, at
  T <= 4) and the grouped GEMMs (forced), ``(auto)`` marking the one the op dispatches to: max |err| of
  the path and of the bf16 torch reference, each against a float32 evaluation of the same (bf16) inputs,
  relative to the output's largest magnitude; ``ok`` when the path's error is within twice the
  reference's (+1e-3). Then the time per call from graph replays with the L2 flushed before each call
  (``cold``: weights from memory, as in a decode step) and with a warm L2 (``warm``), the stage split of
  the warm time (grouped: alignment, gate/up GEMM, down GEMM, sum over K; decode: gate/up GEMV, down GEMV
  with the sum), the bandwidth of the chosen experts' weights (bytes of the distinct experts the tokens
  picked / cold time: at T=1 the kernels' effective weight bandwidth), its share of the roofline and the
  roofline's time for those bytes, the arithmetic rate, and the tiles the autotuner picked (``/dN``: the
  decode kernels' tiles loaded ahead).
* ``check <model> T=<t>: auto takes <path>``, the decode path's cold time over the grouped path's, the
  reference's time (eager).
* ``sync``: an eager call under ``torch.cuda.set_sync_debug_mode("error")`` (raises on any host sync).
* ``graph``: the op captured in a ``torch.cuda.CUDAGraph``, replayed: equal to the eager result, and
  after new routing is copied into the captured inputs, equal to the eager result of the new routing
  (T = 1 and 4 run the decode path).

Exits 1 if any line reports a failure. ``--quick``: T = 1, 2, 4 and 32 only, fewer timing repetitions.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback

import torch

SHAPES = {  # name: (E, K, H, I, activation)
    "qwen3.5-35b-a3b": (256, 8, 2048, 512, "silu"),
    "gemma4-26b-a4b": (128, 8, 2816, 704, "gelu_tanh"),
}
TOKENS = (1, 2, 4, 8, 32, 512, 2048)
DTYPE = torch.bfloat16
DEVICE = "cuda"


def _inputs(e, k, h, i, t, seed):
    gen = torch.Generator(device=DEVICE).manual_seed(seed)

    def randn(*size):
        return torch.randn(*size, device=DEVICE, generator=gen)

    x = randn(t, h).to(DTYPE)
    gate_up = (randn(e, 2 * i, h) * h**-0.5).to(DTYPE)
    down = (randn(e, h, i) * i**-0.5).to(DTYPE)
    return x, gate_up, down, *_routing(e, k, t, seed + 1)


def _routing(e, k, t, seed):
    gen = torch.Generator(device=DEVICE).manual_seed(seed)
    probs, ids = torch.topk(torch.randn(t, e, device=DEVICE, generator=gen).softmax(-1), k)
    return probs / probs.sum(-1, keepdim=True), ids


def _rel(got, want):
    return (got.float() - want.float()).abs().max().item() / (want.float().abs().max().item() or 1.0)


def _warm_us(fn, reps):
    """Median device microseconds per call from CUDA graph replays (no host launch overhead, warm L2)."""
    from triton.testing import do_bench_cudagraph

    return do_bench_cudagraph(fn, rep=reps, return_mode="median") * 1e3


def _stages(moe, moe_align, x, gate_up, down, weights, ids, activation):
    """The grouped path's four stages as thunks (the calls :func:`anna_xpu_kernels.moe.moe_experts` makes)."""
    t, k = ids.shape
    blocks = moe_align.align(ids, gate_up.shape[0], moe_align.block_m_for(t * k, gate_up.shape[0]))
    h = moe.gate_up_act(x, gate_up, blocks, activation)
    flat = weights.reshape(-1).contiguous()
    out = moe.down_weighted(h, down, flat, blocks)
    return {
        "align": lambda: moe_align.align(ids, gate_up.shape[0], blocks.block_m),
        "gate_up": lambda: moe.gate_up_act(x, gate_up, blocks, activation),
        "down": lambda: moe.down_weighted(h, down, flat, blocks),
        "sum": lambda: out.view(t, k, -1).sum(1),
    }, blocks.block_m


def _decode_stages(moe_decode, x, gate_up, down, weights, ids, activation):
    """The decode path's two launches as thunks (the calls :func:`anna_xpu_kernels.moe_decode.experts` makes)."""
    k = ids.shape[1]
    flat_ids, flat_w = ids.reshape(-1).contiguous(), weights.reshape(-1).contiguous()
    h = moe_decode.gate_up_act(x, gate_up, flat_ids, k, activation)
    return {
        "gate_up": lambda: moe_decode.gate_up_act(x, gate_up, flat_ids, k, activation),
        "down+sum": lambda: moe_decode.down_sum(h, down, flat_w, flat_ids, k),
    }


def _tiles(kernel) -> str:
    """The autotuner's pick for the kernel's last launch, ``BLOCK_N x BLOCK_K / warps / stages`` (``/dN``:
    the decode kernels' tiles loaded ahead)."""
    try:
        config = kernel.best_config
        depth = f"/d{config.kwargs['DEPTH']}" if "DEPTH" in config.kwargs else ""
        return (f"{config.kwargs['BLOCK_N']}x{config.kwargs['BLOCK_K']}/w{config.num_warps}/s{config.num_stages}"
                f"{depth}")
    except (AttributeError, KeyError):  # another Triton version: the line still prints
        return "?"


def _roofline_gbs() -> float:
    """The device's bandwidth in a 256 MiB copy (GB/s): the roofline of the weight streams."""
    from anna_xpu_kernels.microbench_moe import copy_gbs

    return copy_gbs(torch.device(DEVICE))


def check_case(name, e, k, h, i, activation, t, reps, roofline):
    from anna_core.kernels.reference.moe import moe_experts as reference
    from anna_xpu_kernels import gemv_tuning, moe, moe_align, moe_decode

    x, gate_up, down, weights, ids = _inputs(e, k, h, i, t, seed=t)
    want = reference(x, gate_up, down, weights, ids, activation)
    truth = reference(x.float(), gate_up.float(), down.float(), weights, ids, activation)
    err_ref = _rel(want, truth)
    experts_hit = int(ids.unique().numel())
    nbytes = experts_hit * 3 * h * i * x.element_size()
    flops = 2 * t * k * 3 * h * i
    auto = "decode" if moe_decode.takes(t, k, e) else "grouped"
    paths = ("decode", "grouped") if t <= moe_decode.MAX_TOKENS else ("grouped",)
    ok = True
    times = {}
    for path in paths:
        got = moe.moe_experts(x, gate_up, down, weights, ids, activation, path=path)
        err_tri = _rel(got, truth)
        path_ok = err_tri <= 2 * err_ref + 1e-3 and bool(torch.isfinite(got).all())
        ok = ok and path_ok
        call = lambda path=path: moe.moe_experts(x, gate_up, down, weights, ids, activation, path=path)  # noqa: E731
        cold = gemv_tuning.cold_time_ms(call) * 1e3
        warm = _warm_us(call, reps)
        times[path] = cold
        if path == "grouped":
            stages, block_m = _stages(moe, moe_align, x, gate_up, down, weights, ids, activation)
            split = f"BLOCK_M {block_m}: " + " ".join(f"{s} {_warm_us(fn, reps):.1f}" for s, fn in stages.items())
            tiles = f"gate_up {_tiles(moe._moe_gate_up_kernel)} down {_tiles(moe._moe_down_kernel)}"
        else:
            stages = _decode_stages(moe_decode, x, gate_up, down, weights, ids, activation)
            split = " ".join(f"{s} {_warm_us(fn, reps):.1f}" for s, fn in stages.items())
            tiles = (f"gate_up {_tiles(moe_decode._decode_gate_up_kernel)}"
                     f" down {_tiles(moe_decode._decode_down_kernel)}")
        gbs = nbytes / (cold * 1e-6) / 1e9
        print(f"check {name} T={t} bf16 {path}{' (auto)' if path == auto else ''}: rel err triton {err_tri:.2e}"
              f" ref {err_ref:.2e} {'ok' if path_ok else 'MISMATCH'} | {cold:.1f} us cold, {warm:.1f} us warm"
              f" ({split} us) | {experts_hit} experts, {nbytes / 1e6:.1f} MB: {gbs:.0f} GB/s cold"
              f" = {100 * gbs / roofline:.0f}% of {roofline:.0f} GB/s (roofline {nbytes / roofline / 1e3:.1f} us),"
              f" {flops / (cold * 1e-6) / 1e12:.1f} TFLOP/s | tiles {tiles}", flush=True)
    from triton.testing import do_bench

    ref_us = do_bench(lambda: reference(x, gate_up, down, weights, ids, activation), warmup=2, rep=reps) * 1e3
    vs = (f", decode / grouped {times['decode'] / times['grouped']:.2f}" if len(times) == 2 else "")
    print(f"check {name} T={t}: auto takes {auto}{vs}, reference {ref_us:.0f} us (eager)", flush=True)
    return ok


def check_sync(name, e, k, h, i, activation, t):
    from anna_xpu_kernels import moe

    args = _inputs(e, k, h, i, t, seed=100 + t)
    moe.moe_experts(*args, activation)  # compiled and tuned before the check
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        moe.moe_experts(*args, activation)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    print(f"sync {name} T={t}: no host sync in an eager call ok", flush=True)
    return True


def check_graph(name, e, k, h, i, activation, t):
    from anna_xpu_kernels import moe

    x, gate_up, down, weights, ids = _inputs(e, k, h, i, t, seed=200 + t)
    eager = moe.moe_experts(x, gate_up, down, weights, ids, activation)  # warm-up: compiled and tuned
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        moe.moe_experts(x, gate_up, down, weights, ids, activation)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = moe.moe_experts(x, gate_up, down, weights, ids, activation)
    graph.replay()
    torch.cuda.synchronize()
    same = torch.equal(static_out, eager)
    new_weights, new_ids = _routing(e, k, t, seed=300 + t)  # other experts, other counts: same graph
    weights.copy_(new_weights)
    ids.copy_(new_ids)
    x.copy_(torch.randn_like(x))
    graph.replay()
    torch.cuda.synchronize()
    again = moe.moe_experts(x, gate_up, down, weights, ids, activation)
    rerouted = torch.equal(static_out, again)
    diff = (static_out.float() - again.float()).abs().max().item()
    ok = same and rerouted
    print(f"graph {name} T={t}: replay == eager {same}, after rerouting replay == eager {rerouted}"
          f" (max |diff| {diff:.1e}) {'ok' if ok else 'MISMATCH'}", flush=True)
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="T = 1, 2, 4 and 32 only, fewer timing repetitions")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device: this check needs a GPU", file=sys.stderr)
        return 2
    tokens = (1, 2, 4, 32) if args.quick else TOKENS
    reps = 20 if args.quick else 100
    roofline = _roofline_gbs()
    print(f"# moe_experts on {torch.cuda.get_device_name()}, torch {torch.__version__}; roofline {roofline:.0f} GB/s"
          f" (a 256 MiB copy)", flush=True)
    t0 = time.time()
    failed = 0
    with torch.inference_mode():
        for name, (e, k, h, i, activation) in SHAPES.items():
            for t in tokens:
                try:
                    failed += not check_case(name, e, k, h, i, activation, t, reps, roofline)
                except Exception as exc:  # noqa: BLE001 -- report and go on with the next case
                    failed += 1
                    print(f"check {name} T={t}: FAILED {type(exc).__name__}: {exc}", flush=True)
                    traceback.print_exc(file=sys.stderr)
                torch.cuda.empty_cache()
            for t in (1, 4, 32) if args.quick else (1, 4, 32, 2048):  # T = 1, 4: the decode path
                for check in (check_sync, check_graph):
                    try:
                        failed += not check(name, e, k, h, i, activation, t)
                    except Exception as exc:  # noqa: BLE001
                        failed += 1
                        print(f"{check.__name__[6:]} {name} T={t}: FAILED {type(exc).__name__}: {exc}", flush=True)
                        traceback.print_exc(file=sys.stderr)
                    torch.cuda.empty_cache()
            print(f"-- {name} done, {time.time() - t0:.0f} s", flush=True)
    print(f"# {'all ok' if not failed else f'{failed} case(s) FAILED'}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
