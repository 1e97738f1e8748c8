"""Gemma 4's per-layer-input block at batch 1 on a GPU: ``post_norm_residual_gated_linear`` in one launch
(:mod:`anna_xpu_kernels.gated_block`, at several launch shapes) against the two kernels it replaces
(``post_norm_residual_linear``'s one-wave GEMV, then ``gated_linear``), each timed as a chain of 8 distinct layers'
weights replayed in one CUDA graph (what a served decode step pays per layer, PDL between the launches), and checked
against the torch reference.

Run from the repository root (PYTHONPATH set to the packages' src folders, or the wheels installed)::

    python3 tools/gpu_experiments/gated_block_bench.py [--reps 10]

Prints one line per shape: the unfused pair's µs per layer, then ``G_SUB/BLOCK_G/BLOCK_N:us`` per fused launch shape
(``*``: launch_shape's default), each with its largest error against the float32 reference. ``--check-only`` runs
the checks alone (e.g. on the CPU under Triton's interpreter).
"""

from __future__ import annotations

import argparse

import torch
from graph_timing import chain_time_us

SHAPES = {"E2B": (1536, 256), "E4B": (2560, 256)}
"""``(hidden K = N, per-layer input P)`` of each shape."""
LAYERS = 8


def _graph_time(fn, reps: int) -> float:
    """Microseconds per call of ``fn`` replayed ``reps`` times inside one CUDA graph
    (:func:`graph_timing.chain_time_us`, the scripts' shared timer)."""
    return chain_time_us([fn], reps=reps)


def _bench(name: str, k: int, p: int, reps: int, device: str, timed: bool) -> str:
    """One shape's line: the unfused pair's and each fused launch shape's µs per layer (``timed``), errors."""
    from anna_core.kernels.reference import fused_linear as ref
    from anna_xpu_kernels import fused_linear, gated_block

    dtype = torch.bfloat16
    gen = torch.Generator(device=device).manual_seed(0)

    def randn(*shape, scale=1.0):
        return (scale * torch.randn(*shape, generator=gen, device=device)).to(dtype)

    x, residual = randn(1, k, scale=3), randn(1, k, scale=3)
    layers = [(randn(k, scale=0.3) + 1, randn(p, k, scale=0.05), randn(1, p), randn(k, p, scale=0.05))
              for _ in range(LAYERS)]

    def unfused():
        for w, gw, up, lw in layers:
            gate, _ = fused_linear.post_norm_residual_linear(x, residual, w, 1e-6, False, None, None, gw)
            fused_linear.gated_linear(gate, up, lw, "gelu_tanh")

    def fused(shape):
        def run():
            for w, gw, up, lw in layers:
                gated_block.post_norm_residual_gated_linear(x, residual, w, 1e-6, False, None, gw, up, lw,
                                                            "gelu_tanh", shape=shape)
        return run

    w, gw, up, lw = layers[0]
    f32 = [t.float() for t in (x, residual, w, gw, up, lw)]
    want, _ = ref.post_norm_residual_gated_linear(*f32[:3], 1e-6, False, None, *f32[3:], "gelu_tanh")
    gate, _ = fused_linear.post_norm_residual_linear(x, residual, w, 1e-6, False, None, None, gw)
    err = (fused_linear.gated_linear(gate, up, lw, "gelu_tanh").float() - want).abs().max().item()
    t = f"{_graph_time(unfused, reps) / LAYERS:.2f}" if timed else "-"
    line = f"{name}: unfused pair {t} us/layer (err {err:.2g}) | fused"
    default = gated_block.launch_shape(k, p, k)
    for shape in sorted({default, (4, 16, 256), (4, 8, 512), (4, 32, 512), (2, 8, 256), (8, 16, 1024)}):
        got, _ = gated_block.post_norm_residual_gated_linear(x, residual, w, 1e-6, False, None, gw, up, lw,
                                                             "gelu_tanh", shape=shape)
        err = (got.float() - want).abs().max().item()
        t = f"{_graph_time(fused(shape), reps) / LAYERS:.2f}" if timed else "-"
        line += f" {'/'.join(map(str, shape))}:{t}{'*' if shape == default else ''} (err {err:.2g})"
    return line


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--check-only", action="store_true",
                        help="no timing, on the CPU (set ANNA_TRITON_INTERPRET=1 TRITON_INTERPRET=1): the errors only")
    args = parser.parse_args()
    device = "cpu" if args.check_only else "cuda"
    for name, (k, p) in SHAPES.items():
        print(_bench(name, k, p, args.reps, device, timed=not args.check_only), flush=True)


if __name__ == "__main__":
    main()
