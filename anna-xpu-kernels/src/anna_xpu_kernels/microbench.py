"""Kernel microbenchmark: every op of anna-xpu-kernels vs the torch reference (and vs fla where both exist).

Run on a CUDA machine::

    python -m anna_xpu_kernels.microbench [--batch-sizes 1,32] [--context 1024] [--prefill-len 2048]

Shapes are those of Qwen3.5-9B decode: gated DeltaNet with H_k=16, H_v=32, K=V=128 (conv dim 8192,
width 4), full attention with head_dim 256, 16 query / 4 KV heads, hidden size 4096. For each
(op, shape, implementation) it prints the median time per call (``triton.testing.do_bench``), the
achieved bandwidth (bytes the op must move / time) and the largest absolute difference from the torch
reference on the output (and on the updated state for state ops). fla-core's kernels do not run under
Triton's interpreter, so this is where their errors against the reference are measured.

``--smoke`` runs tiny shapes (CPU with ``ANNA_TRITON_INTERPRET=1`` works) to check the script itself.
``--only linear`` runs only the decode GEMV cases (Triton vs cuBLAS at the Qwen3.5 0.8B/2B/9B weight
shapes, :mod:`anna_xpu_kernels.microbench_linear`); ``--only moe`` only the routed-experts cases
(``moe_experts`` at the Qwen3.5-35B-A3B and Gemma 4 26B-A4B shapes, ``--moe-tokens 1,2,4,32,2048``,
:mod:`anna_xpu_kernels.microbench_moe`) and the router cases (``moe_route`` at the same models' ``E`` / ``K``
and tokens); ``--only ops`` the other ops.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import attrs

DEFAULT_MOE_TOKENS = (1, 2, 4, 32, 2048)
"""Tokens of the ``moe_experts`` cases (:data:`anna_xpu_kernels.microbench_moe.DEFAULT_TOKENS`)."""


@attrs.frozen
class Shapes:
    hidden: int = 4096
    h_k: int = 16
    h_v: int = 32
    d_k: int = 128
    d_v: int = 128
    conv_width: int = 4
    h_q: int = 16
    h_kv: int = 4
    head_dim: int = 256
    intermediate: int = 12288
    gemma_hidden: int = 2816  # Gemma 4 26B-A4B's width: its MoE layers' fused norms (rms_norm_pair, dual_post_norm_residual)

    @property
    def conv_dim(self) -> int:
        return 2 * self.h_k * self.d_k + self.h_v * self.d_v


QWEN35_9B = Shapes()
SMOKE = Shapes(hidden=64, h_k=2, h_v=4, d_k=16, d_v=16, h_q=4, h_kv=2, head_dim=32, intermediate=96,
               gemma_hidden=48)


@attrs.frozen
class Row:
    op: str
    shape: str
    impl: str
    us: float | None
    gbps: float | None
    err: str


def _timer(device) -> Callable[[Callable[[], Any]], float]:
    """Median microseconds per call of a thunk."""
    if device.type == "cuda":
        from triton.testing import do_bench

        return lambda fn: do_bench(fn, warmup=25, rep=100, return_mode="median") * 1e3

    def cpu_time(fn):
        fn()
        start = time.perf_counter()
        fn()
        return (time.perf_counter() - start) * 1e6

    return cpu_time


def _err(got, want) -> str:
    """Largest absolute difference, and relative to the largest reference magnitude."""
    diff = (got.float() - want.float()).abs().max().item()
    scale = want.float().abs().max().item() or 1.0
    return f"{diff:.2e} (rel {diff / scale:.1e})"


def _bench_op(rows, timer, op, shape, nbytes, impls, base, state_index=None):
    """Run every implementation on fresh copies of the inputs ``base``; compare to the reference; time it."""
    import torch

    want_state = None
    want = None
    for name, fn in impls.items():
        if fn is None:
            continue
        args = [a.clone() if isinstance(a, torch.Tensor) else a for a in base]
        try:
            out = fn(*args)
            if name == "reference":
                want = out.clone()  # timing below calls fn again on the same (in-place updated) arguments
                want_state = args[state_index].clone() if state_index is not None else None
                err = "-"
            else:
                err = f"out {_err(out, want)}"
                if state_index is not None:
                    err += f", state {_err(args[state_index], want_state)}"
            us = timer(functools.partial(fn, *args))
        except Exception as exc:  # noqa: BLE001 -- report and keep going: one broken implementation should not hide the rest
            rows.append(Row(op, shape, name, None, None, f"failed: {type(exc).__name__}: {exc}"[:120]))
            continue
        rows.append(Row(op, shape, name, us, nbytes / (us * 1e-6) / 1e9, err))


def _fla_gated_rms_norm(x, z, weight, eps):
    from fla.modules.norm.fused_norm_gate import rms_norm_gated

    return rms_norm_gated(x, z, weight, None, activation="swish", eps=eps)


def _fla_rms_norm(x, weight_plus_one, eps, zero_centered):
    from fla.modules.norm.layernorm import rms_norm

    return rms_norm(x, weight_plus_one, None, eps=eps)


def _fla_decode(q, k, v, g, beta, states, slots, scale):
    """fla's fused recurrent step with the slot states gathered and scattered around it."""
    from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule

    o, final = fused_recurrent_gated_delta_rule(
        q.unsqueeze(1), k.unsqueeze(1), v.unsqueeze(1), g=g.unsqueeze(1), beta=beta.unsqueeze(1), scale=scale,
        initial_state=states.index_select(0, slots), output_final_state=True)
    states.index_copy_(0, slots, final.to(states.dtype))
    return o[:, 0]


def _reference_fused_prefill(qkv, a, b, neg_a, dt_bias, cu_seqlens, states, slots, scale, h_k, d_k, d_v):
    """The gated DeltaNet layer's unfused prefill after its conv (torch ops + the reference rule), the
    reference of ``fla_prefill.fused_prefill``: beta rounded to the activation dtype as fla gets it."""
    import torch
    import torch.nn.functional as F
    from anna_core.kernels.reference import gated_delta_rule as rgdr

    t, h_v = a.shape
    qk, v = qkv.split([2 * h_k * d_k, h_v * d_v], dim=-1)
    qk = qk.reshape(t, 2 * h_k, d_k).float()
    qk = (qk * torch.rsqrt(qk.pow(2).sum(-1, keepdim=True) + 1e-6)).to(qkv.dtype)
    g = neg_a * F.softplus(a.float() + dt_bias.float())
    beta = torch.sigmoid(b.float()).to(qkv.dtype)
    return rgdr.gated_delta_rule_prefill(qk[:, :h_k], qk[:, h_k:], v.reshape(t, h_v, d_v), g, beta, cu_seqlens,
                                         states, slots, scale)


def _have_fla() -> bool:
    from anna_xpu_kernels.probes import fla_available

    return fla_available()


def run(device, dtype, shapes: Shapes, batch_sizes, context: int, prefill_len: int, block_size: int) -> list[Row]:
    import torch
    import torch.nn.functional as F
    from anna_core.kernels.reference import activations as ract
    from anna_core.kernels.reference import conv1d as rconv
    from anna_core.kernels.reference import gated_delta_rule as rgdr
    from anna_core.kernels.reference import norms as rnorm
    from anna_core.kernels.reference import paged_attention as rpa

    from anna_xpu_kernels import (
        activations,
        conv1d,
        gated_delta_rule,
        norms,
        paged_attention,
    )

    fla = _have_fla() and device.type == "cuda"
    fla_prefill = fla_fused_prefill = None
    if fla:
        from anna_xpu_kernels.fla_prefill import fused_prefill as fla_fused_prefill
        from anna_xpu_kernels.fla_prefill import gated_delta_rule_prefill as fla_prefill
    timer = _timer(device)
    es = torch.finfo(dtype).bits // 8
    rows: list[Row] = []
    s = shapes

    def randn(*shape, dt=dtype):
        return torch.randn(*shape, device=device, dtype=torch.float32).to(dt)

    for b in batch_sizes:
        pool = 2 * b + 1
        slots = torch.randperm(pool, device=device)[:b]

        # --- norms -------------------------------------------------------------------------------
        nbytes = 2 * b * s.hidden * es
        w = randn(s.hidden, dt=torch.float32) * 0.1
        _bench_op(rows, timer, "rms_norm (zero-centred)", f"[{b}, {s.hidden}]", nbytes,
                  {"reference": rnorm.rms_norm, "triton": norms.rms_norm,
                   "fla": (lambda x, w_, e, z: _fla_rms_norm(x, w_ + 1.0, e, z)) if fla else None},
                  [randn(b, s.hidden), w, 1e-6, True])
        nbytes = 3 * b * s.h_v * s.d_v * es
        wv = randn(s.d_v, dt=torch.float32)
        _bench_op(rows, timer, "gated_rms_norm", f"[{b}, {s.h_v}, {s.d_v}]", nbytes,
                  {"reference": rnorm.gated_rms_norm, "triton": norms.gated_rms_norm,
                   "fla": _fla_gated_rms_norm if fla else None},
                  [randn(b, s.h_v, s.d_v), randn(b, s.h_v, s.d_v), wv, 1e-6])
        # add_rms_norm: timed with both outputs, compared on y (which normalises the new residual)
        _bench_op(rows, timer, "add_rms_norm (zero-centred)", f"[{b}, {s.hidden}]", 4 * b * s.hidden * es,
                  {"reference": lambda *a: rnorm.add_rms_norm(*a)[0], "triton": lambda *a: norms.add_rms_norm(*a)[0]},
                  [randn(b, s.hidden), randn(b, s.hidden), w, 1e-6, True])

        # Gemma 4's MoE layer: one launch each vs the unfused chain ("unfused": Triton norms + torch ops,
        # 4, 2 and 4 launches), compared on the router input / the next layer's normalised input
        g = s.gemma_hidden
        wg = randn(g, dt=torch.float32) * 0.1 + 1.0

        def pair_unfused(x, w_, e, z, sw, f, ones=torch.ones(g, device=device, dtype=dtype)):
            return norms.rms_norm(x, ones, e, False) * sw * f

        _bench_op(rows, timer, "rms_norm_pair (router + experts' input)", f"[{b}, {g}]", 3 * b * g * es,
                  {"reference": lambda *a: rnorm.rms_norm_pair(*a)[1], "triton": lambda *a: norms.rms_norm_pair(*a)[1],
                   "unfused": pair_unfused},
                  [randn(b, g), wg, 1e-6, False, randn(g) * 0.1 + 1.0, g ** -0.5])

        def tail_unfused(x, r, w_, e, z, nw, pw, sw, f):  # 2 launches: post_norm_residual, rms_norm_pair
            return norms.rms_norm_pair(norms.post_norm_residual(x, r, w_, e, z, None, nw)[1], pw, e, z, sw, f)[1]

        _bench_op(rows, timer, "post_norm_residual_norm_pair (MoE attention tail)", f"[{b}, {g}]", 6 * b * g * es,
                  {"reference": lambda *a: rnorm.post_norm_residual_norm_pair(*a)[2],
                   "triton": lambda *a: norms.post_norm_residual_norm_pair(*a)[2], "unfused": tail_unfused},
                  [randn(b, g), randn(b, g), wg, 1e-6, False, wg, wg, randn(g) * 0.1 + 1.0, g ** -0.5])

        def dual_unfused(x1, w1, x2, w2, r, w_, e, z, sc, nw):
            m = norms.rms_norm(x1, w1, e, z) + norms.rms_norm(x2, w2, e, z)
            return norms.post_norm_residual(m, r, w_, e, z, sc, nw)[0]

        _bench_op(rows, timer, "dual_post_norm_residual (MoE tail)", f"[{b}, {g}]", 5 * b * g * es,
                  {"reference": lambda *a: rnorm.dual_post_norm_residual(*a)[0],
                   "triton": lambda *a: norms.dual_post_norm_residual(*a)[0], "unfused": dual_unfused},
                  [randn(b, g), wg, randn(b, g), wg, randn(b, g), wg, 1e-6, False, randn(1), wg])

        # --- gated activations (MLP SwiGLU, attention output gate) ---------------------------------
        _bench_op(rows, timer, "silu_and_mul", f"[{b}, 2x{s.intermediate}]", 3 * b * s.intermediate * es,
                  {"reference": ract.silu_and_mul, "triton": activations.silu_and_mul},
                  [randn(b, 2 * s.intermediate)])
        d = s.head_dim  # the gate is read in place from q_gate[..., D:] (cloning the view would compact it)
        _bench_op(rows, timer, "sigmoid_mul (strided gate)", f"[{b}, {s.h_q}, {d}]", 3 * b * s.h_q * d * es,
                  {"reference": lambda o, qg, d=d: ract.sigmoid_mul(o, qg[..., d:]),
                   "triton": lambda o, qg, d=d: activations.sigmoid_mul(o, qg[..., d:])},
                  [randn(b, s.h_q, d), randn(b, s.h_q, 2 * d)])

        # --- conv1d update -----------------------------------------------------------------------
        c, width = s.conv_dim, s.conv_width
        conv_w = randn(c, width, dt=torch.float32)
        nbytes = b * c * es * (2 + 2 * (width - 1)) + c * width * 4
        _bench_op(rows, timer, "causal_conv1d_update", f"B={b} C={c} W={width}", nbytes,
                  {"reference": rconv.causal_conv1d_update, "triton": conv1d.causal_conv1d_update},
                  [randn(b, c), conv_w, None, randn(pool, c, width - 1), slots, "silu"], state_index=3)

        # --- gated delta rule decode -------------------------------------------------------------
        nbytes = 2 * b * s.h_v * s.d_k * s.d_v * 4 + b * (2 * s.h_k * s.d_k + 2 * s.h_v * s.d_v) * es

        gdr_args = [F.normalize(randn(b, s.h_k, s.d_k, dt=torch.float32), dim=-1).to(dtype),
                    F.normalize(randn(b, s.h_k, s.d_k, dt=torch.float32), dim=-1).to(dtype),
                    randn(b, s.h_v, s.d_v), -torch.rand(b, s.h_v, device=device),
                    torch.rand(b, s.h_v, device=device).to(dtype),
                    randn(pool, s.h_v, s.d_k, s.d_v, dt=torch.float32) * 0.1, slots, s.d_k ** -0.5]
        _bench_op(rows, timer, "gated_delta_rule_decode", f"B={b} Hk={s.h_k} Hv={s.h_v} K=V={s.d_k}", nbytes,
                  {"reference": rgdr.gated_delta_rule_decode, "triton": gated_delta_rule.gated_delta_rule_decode,
                   "fla (fused_recurrent)": _fla_decode if fla else None}, gdr_args, state_index=5)

        # --- paged attention decode --------------------------------------------------------------
        blocks_per_seq = -(-context // block_size)
        n_blocks = b * blocks_per_seq
        tables = torch.randperm(n_blocks, device=device).view(b, blocks_per_seq).to(torch.int32)
        nbytes = 2 * b * context * s.h_kv * s.head_dim * es + 2 * b * s.h_q * s.head_dim * es
        _bench_op(rows, timer, "paged_attention (decode)",
                  f"B={b} ctx={context} Hq={s.h_q} Hkv={s.h_kv} D={s.head_dim} bs={block_size}", nbytes,
                  {"reference": rpa.paged_attention, "triton": paged_attention.paged_attention},
                  [randn(b, s.h_q, s.head_dim), randn(n_blocks, block_size, s.h_kv, s.head_dim),
                           randn(n_blocks, block_size, s.h_kv, s.head_dim),
                           torch.arange(b + 1, device=device, dtype=torch.int32),
                           torch.full((b,), context, device=device, dtype=torch.int32), tables,
                           s.head_dim ** -0.5, None])

    # --- prefill ops: one long prompt and a varlen batch of four ---------------------------------
    for lens in ([prefill_len], [prefill_len // 4] * 4):
        t, b = sum(lens), len(lens)
        cu = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), device=device, dtype=torch.int32)
        pool = 2 * b + 1
        slots = torch.randperm(pool, device=device)[:b]
        c, width = s.conv_dim, s.conv_width
        conv_w = randn(c, width, dt=torch.float32)
        _bench_op(rows, timer, "causal_conv1d_prefill", f"T={t} B={b} C={c}", 2 * t * c * es,
                  {"reference": rconv.causal_conv1d_prefill, "triton": conv1d.causal_conv1d_prefill},
                  [randn(t, c), conv_w, None, cu, randn(pool, c, width - 1), slots, "silu"], state_index=4)
        nbytes = t * (2 * s.h_k * s.d_k + 2 * s.h_v * s.d_v) * es + 2 * b * s.h_v * s.d_k * s.d_v * 4
        _bench_op(rows, timer, "gated_delta_rule_prefill", f"T={t} B={b} Hk={s.h_k} Hv={s.h_v} K=V={s.d_k}", nbytes,
                  {"reference": rgdr.gated_delta_rule_prefill, "fla (chunk)": fla_prefill},
                  [F.normalize(randn(t, s.h_k, s.d_k, dt=torch.float32), dim=-1).to(dtype),
                           F.normalize(randn(t, s.h_k, s.d_k, dt=torch.float32), dim=-1).to(dtype),
                           randn(t, s.h_v, s.d_v), -torch.rand(t, s.h_v, device=device) * 0.5,
                           torch.rand(t, s.h_v, device=device).to(dtype), cu,
                           randn(pool, s.h_v, s.d_k, s.d_v, dt=torch.float32) * 0.1, slots, s.d_k ** -0.5],
                  state_index=6)
        ab = randn(t, 2 * s.h_v + 5)  # a and b: column views of a wider projection, as in the model
        _bench_op(rows, timer, "gdn prefill (L2 norms, gates + rule)",
                  f"T={t} B={b} Hk={s.h_k} Hv={s.h_v} K=V={s.d_k}", nbytes,
                  {"reference": _reference_fused_prefill, "fla (fused prep + chunk)": fla_fused_prefill},
                  [randn(t, c), ab[:, : s.h_v], ab[:, s.h_v: 2 * s.h_v], -torch.rand(s.h_v, device=device) * 2,
                   randn(s.h_v, dt=torch.float32), cu, randn(pool, s.h_v, s.d_k, s.d_v, dt=torch.float32) * 0.1,
                   slots, s.d_k ** -0.5, s.h_k, s.d_k, s.d_v], state_index=6)
        blocks_per_seq = -(-max(lens) // block_size)
        n_blocks = b * blocks_per_seq
        tables = torch.randperm(n_blocks, device=device).view(b, blocks_per_seq).to(torch.int32)
        nbytes = 2 * t * s.h_kv * s.head_dim * es + 2 * t * s.h_q * s.head_dim * es
        _bench_op(rows, timer, "paged_attention (prefill)", f"T={t} B={b} Hq={s.h_q} Hkv={s.h_kv} D={s.head_dim}",
                  nbytes, {"reference": rpa.paged_attention, "triton": paged_attention.paged_attention},
                  [randn(t, s.h_q, s.head_dim), randn(n_blocks, block_size, s.h_kv, s.head_dim),
                           randn(n_blocks, block_size, s.h_kv, s.head_dim), cu,
                           torch.tensor(lens, device=device, dtype=torch.int32), tables, s.head_dim ** -0.5, None])
    return rows


def format_table(rows: list[Row]) -> str:
    header = ("op", "shape", "impl", "us/call", "GB/s", "max |err| vs reference")
    cells = [header] + [
        (r.op, r.shape, r.impl, "-" if r.us is None else f"{r.us:.1f}", "-" if r.gbps is None else f"{r.gbps:.1f}",
         r.err) for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = ["  ".join(col.ljust(w) for col, w in zip(row, widths)) for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m anna_xpu_kernels.microbench", description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda", help="cuda (default) or xpu; cpu only with --smoke")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    parser.add_argument("--batch-sizes", default="1,32", help="decode batch sizes, comma separated")
    parser.add_argument("--context", type=int, default=1024, help="decode context length per sequence")
    parser.add_argument("--prefill-len", type=int, default=2048, help="tokens of the prefill cases")
    parser.add_argument("--block-size", type=int, default=16, help="KV cache block size")
    parser.add_argument("--only", choices=["ops", "linear", "moe"], default=None, help="run only these cases")
    parser.add_argument("--configs", default="tests/qwen35/reference_configs",
                        help="folder of the Qwen3.5 <model>/config.json files for the linear cases")
    parser.add_argument("--linear-rows", default="1,4,32", help="activation rows M of the linear cases")
    parser.add_argument("--moe-tokens", default=",".join(map(str, DEFAULT_MOE_TOKENS)),
                        help="tokens T of the moe_experts and moe_route cases")
    parser.add_argument("--smoke", action="store_true", help="tiny shapes, to check the script (CPU: set "
                        "ANNA_TRITON_INTERPRET=1)")
    args = parser.parse_args(argv)
    if args.device == "cpu" and os.environ.get("ANNA_TRITON_INTERPRET") != "1":
        print("CPU runs need ANNA_TRITON_INTERPRET=1 (Triton's interpreter) and --smoke", file=sys.stderr)
        return 2

    import torch

    device = torch.device(args.device)
    backend = getattr(torch, device.type, None)
    if device.type != "cpu" and (backend is None or not backend.is_available()):
        print(f"no {device.type} device available; this benchmark needs a GPU", file=sys.stderr)
        return 2
    dtype = getattr(torch, args.dtype)
    shapes = SMOKE if args.smoke else QWEN35_9B
    batch_sizes = [int(b) for b in args.batch_sizes.split(",") if b]
    context, prefill_len = (24, 32) if args.smoke else (args.context, args.prefill_len)
    block_size = 4 if args.smoke else args.block_size
    torch.manual_seed(0)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else device.type
    if args.only in (None, "ops"):
        with torch.inference_mode():
            rows = run(device, dtype, shapes, batch_sizes, context, prefill_len, block_size)
        print(f"# anna-xpu-kernels microbenchmark on {name}, {args.dtype}, "
              f"shapes {'smoke' if args.smoke else 'Qwen3.5-9B'}")
        print(format_table(rows))
    if args.only in (None, "linear"):
        from pathlib import Path

        from anna_xpu_kernels import microbench_linear as mbl

        models = mbl.SMOKE_MODELS if args.smoke else mbl.load_models(Path(args.configs), mbl.DEFAULT_MODELS)
        with torch.inference_mode():
            lines = mbl.run_linear(device, dtype, models, [int(m) for m in args.linear_rows.split(",") if m],
                                   _timer(device))
        print(f"# linear (decode GEMV) on {name}, {args.dtype}: Triton GEMV vs F.linear")
        print("\n".join(lines))
        fused = mbl.SMOKE_FUSED if args.smoke else mbl.load_models(Path(args.configs), mbl.DEFAULT_MODELS,
                                                                   mbl.decode_fused_shapes)
        with torch.inference_mode():
            lines = mbl.run_fused(device, dtype, fused, _timer(device))
        print(f"# fused GEMV on {name}, {args.dtype}: one launch vs add_rms_norm / silu_and_mul + GEMV "
              f"(silu_mul_out: GEMV + silu_and_mul)")
        print("\n".join(lines))
    if args.only in (None, "moe"):
        from anna_xpu_kernels import microbench_moe as mbm

        tokens = mbm.SMOKE_TOKENS if args.smoke else [int(t) for t in args.moe_tokens.split(",") if t]
        with torch.inference_mode():
            lines = mbm.run_moe(device, dtype, mbm.SMOKE_MODELS if args.smoke else mbm.MODELS, tokens, _timer(device))
        print(f"# moe_experts on {name}, {args.dtype}: Triton as dispatched, grouped GEMMs forced, decode GEMVs "
              f"forced (graph replays, cold L2) vs the torch reference (eager)")
        print("\n".join(lines))
        with torch.inference_mode():
            lines = mbm.run_route(device, dtype, mbm.SMOKE_ROUTERS if args.smoke else mbm.ROUTERS, tokens,
                                  _timer(device))
        print(f"# moe_route on {name}, {args.dtype}: the former torch router, the op's torch reference and the "
              f"Triton kernel (graph replays, cold L2)")
        print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
