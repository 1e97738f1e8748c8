"""The Triton ``moe_experts_wq`` op (``--expert-quant``) on a CUDA GPU at the released MoE shapes: error vs the
float32 torch reference, time per call against the bf16 ``moe_experts`` op, CUDA graph capture / replay.

Shapes (one layer's routed experts, bf16 activations, random weights quantized round-to-nearest):
Qwen3.5-35B-A3B (E=256, K=8, H=2048, I=512, SwiGLU) and Gemma 4 26B-A4B (E=128, K=8, H=2816, I=704, GeGLU; no
int4: I is not a multiple of 128). Run from the repository root (or with the wheels installed)::

    PYTHONPATH=anna-core/src:anna-xpu-kernels/src python3 tools/gpu_experiments/expert_quant_check.py [--quick]

One line per case: ``check <model> <scheme> T=<t> <path>``: max |err| relative to the output's largest value
against the reference (float32 dequantization and products; ``ok`` within 3e-2, bf16 roundings), microseconds per
call from CUDA graph replays (warm L2) of the quantized op and of the bf16 ``moe_experts`` on the dense weights,
and their ratio. Then ``graph``: the decode path captured and replayed after new routing equals its eager result.
Exits 1 on any failure. ``--tiny``: small shapes on the CPU interpreter (ANNA_TRITON_INTERPRET=1), to check the
script itself.
"""

from __future__ import annotations

import argparse
import sys

import torch

SHAPES = {  # name: (E, K, H, I, activation)
    "qwen3.5-35b-a3b": (256, 8, 2048, 512, "silu"),
    "gemma4-26b-a4b": (128, 8, 2816, 704, "gelu_tanh"),
}


def _rel(got, want):
    return (got.float() - want.float()).abs().max().item() / (want.float().abs().max().item() or 1.0)


def _us(fn, device):
    if device == "cpu":
        return float("nan")
    from triton.testing import do_bench_cudagraph

    return do_bench_cudagraph(fn, rep=50, return_mode="median") * 1e3


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--tiny", action="store_true")
    args = parser.parse_args()
    from anna_core.kernels.reference.moe_wq import moe_experts_wq as reference
    from anna_core.weights.gpu_quant import quantizable, quantize_stacked
    from anna_xpu_kernels import moe, moe_wq

    device = "cpu" if args.tiny else "cuda"
    shapes = {"tiny": (8, 2, 128, 128, "silu")} if args.tiny else SHAPES
    tokens = (1, 4) if args.tiny else ((1, 8, 512) if args.quick else (1, 2, 4, 8, 32, 512, 2048))
    failed = False
    for name, (e, k, h, i, act) in shapes.items():
        gen = torch.Generator(device=device).manual_seed(0)
        gate_up = torch.randn(e, 2 * i, h, device=device, generator=gen).mul_(h**-0.5).bfloat16()
        down = torch.randn(e, h, i, device=device, generator=gen).mul_(i**-0.5).bfloat16()
        for scheme in ("int4", "int8", "fp8"):
            if not (quantizable((2 * i, h), scheme) and quantizable((h, i), scheme)):
                print(f"check {name} {scheme}: skipped (H={h}, I={i} not multiples of 128)")
                continue
            qg, qd = quantize_stacked(gate_up, scheme, torch.bfloat16), quantize_stacked(down, scheme, torch.bfloat16)
            weights_q = (qg.qweight, qg.scale, qg.zero, qd.qweight, qd.scale, qd.zero)
            for t in tokens:
                x = torch.randn(t, h, device=device, generator=gen).bfloat16()
                probs, ids = torch.topk(torch.randn(t, e, device=device, generator=gen).softmax(-1), k)
                rw = probs / probs.sum(-1, keepdim=True)
                try:
                    got = moe_wq.moe_experts_wq(x, *weights_q, rw, ids, act, scheme)
                    want = reference(x.float(), *weights_q, rw, ids, act, scheme)
                    err = _rel(got, want)
                    path = "decode" if t * k <= e else "grouped"
                    quant_us = _us(lambda: moe_wq.moe_experts_wq(x, *weights_q, rw, ids, act, scheme), device)  # noqa: B023
                    dense_us = _us(lambda: moe.moe_experts(x, gate_up, down, rw, ids, act), device)  # noqa: B023
                    ok = err <= 3e-2
                    failed |= not ok
                    print(f"check {name} {scheme} T={t} {path}: err {err:.2e} {'ok' if ok else 'FAIL'}  "
                          f"{quant_us:.1f} us vs bf16 {dense_us:.1f} us ({dense_us / quant_us:.2f}x)", flush=True)
                except Exception as exc:  # noqa: BLE001 - report and go on to the next case
                    failed = True
                    print(f"check {name} {scheme} T={t}: FAIL {type(exc).__name__}: {exc}"[:400], flush=True)
            if device == "cuda":
                failed |= not _graph(moe_wq, name, scheme, weights_q, e, k, h, act, gen)
    return 1 if failed else 0


def _graph(moe_wq, name, scheme, weights_q, e, k, h, act, gen) -> bool:
    """The decode path captured at T=1, replayed with new routing copied into its inputs."""
    x = torch.randn(1, h, device="cuda", generator=gen).bfloat16()
    probs, ids = torch.topk(torch.randn(1, e, device="cuda", generator=gen).softmax(-1), k)
    try:
        moe_wq.moe_experts_wq(x, *weights_q, probs, ids, act, scheme)  # compiled and tuned before capture
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = moe_wq.moe_experts_wq(x, *weights_q, probs, ids, act, scheme)
        new_probs, new_ids = torch.topk(torch.randn(1, e, device="cuda", generator=gen).softmax(-1), k)
        probs.copy_(new_probs)
        ids.copy_(new_ids)
        graph.replay()
        eager = moe_wq.moe_experts_wq(x, *weights_q, probs, ids, act, scheme)
        ok = torch.equal(out, eager)
    except Exception as exc:  # noqa: BLE001
        print(f"graph {name} {scheme}: FAIL {type(exc).__name__}: {exc}"[:400])
        return False
    print(f"graph {name} {scheme}: replay after new routing {'equals' if ok else 'DIFFERS from'} eager")
    return ok


if __name__ == "__main__":
    sys.exit(main())
