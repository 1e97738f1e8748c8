"""TurboQuant's changes of basis around the attention kernel (issue 30): the old row-parallel launches (a copy of the
module before the change, tools/gpu_experiments/tq_basis_old.py) against the new row x column ones
(:mod:`anna_xpu_kernels.turboquant_basis`), each op captured in a CUDA graph.

Run from the repository root on a CUDA machine (PYTHONPATH set to the packages' src folders, or the wheels
installed)::

    timeout 110 python3 tools/gpu_experiments/tq_basis_micro.py [--shapes 9B,E4B-global,E4B-sliding] [--batches 32,1]

(``--cpu-smoke``, with ``TRITON_INTERPRET=1``: the same cases at head dims 64 / 128 through Triton's interpreter,
wall-clock times, to check the script itself without a GPU.)

Shapes (``name: q heads, head dim, sliding window``): the Qwen3.5-9B full attention (16, 256), Gemma 4 E4B's global
layers (8, 512) and sliding layers (8, 256, window 512), at batch 32 and 1 with 4k context; the split count is the
one the attention plans at that shape (:func:`anna_xpu_kernels.turboquant_launch.launch_settings`, else
:func:`anna_xpu_kernels.attention_plan.default_num_splits` for this GPU).

Per shape and batch, one line per op and form: the median us per call (CUDA-event timing of graph replays, 20 calls
per graph), the launches per call, and max |new - old| and max |new - float64 torch| of the results:

* ``query``: ``rotate_queries`` of a bf16 query with the QJL stage (``q_r`` and ``q_s``; old: one launch, new: two);
  also without QJL (``query-noqjl``);
* ``output``: ``merge_and_rotate_back`` of the planned splits' workspace to bf16 (old: one launch, new: one).

The new form is timed at its default settings (``basis_launch``: marked ``*``) and at every other column chunk width
of ``turboquant_basis.LAUNCHES`` (for tuning ``basis_launch``'s rule). Lines also go to ``$OUT/tq_basis_micro.log``
when ``OUT`` is set.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from graph_timing import chain_time_us  # noqa: E402

CTX = 4096
SHAPES = {"9B": (16, 4, 256, None), "E4B-global": (8, 2, 512, None), "E4B-sliding": (8, 2, 256, 512)}
"""name: (q heads, kv heads, head dim, sliding window)."""
SMOKE_DIMS = {256: 64, 512: 128}
_LOG: list[str] = []


def _say(line: str) -> None:
    print(line, flush=True)
    _LOG.append(line)
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "tq_basis_micro.log"), "a") as f:
            f.write(line + "\n")


def _graph_us(fn, device: str, calls: int = 20, samples: int = 15) -> float:
    """Median us per call of ``fn``: ``calls`` calls captured in one CUDA graph, replayed ``samples`` times
    (:func:`graph_timing.chain_time_us`, the scripts' shared timer); on the CPU one interpreted call, wall clock."""
    if device == "cpu":
        fn()
        t = time.perf_counter()
        fn()
        return (time.perf_counter() - t) * 1e6
    return chain_time_us([fn], reps=calls, replays=samples)


def _planned_splits(batch: int, h_q: int, h_kv: int, dim: int, window: int | None, device: str) -> int:
    from anna_xpu_kernels._triton import next_pow2
    from anna_xpu_kernels.attention_plan import plan_attention
    from anna_xpu_kernels.turboquant_launch import TurboQuantTuning, launch_settings

    launch = launch_settings(TurboQuantTuning(), True, max(16, next_pow2(dim)), window is not None, "auto")
    cu = torch.arange(batch + 1, dtype=torch.int32, device=device)
    return plan_attention(cu, batch, batch, h_q, h_kv, dim, CTX, 16, launch.splits).splits


def _diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.double() - b.double()).abs().max().item()


def run_case(name: str, batch: int, device: str) -> None:
    import tq_basis_old as old
    from anna_xpu_kernels import turboquant_basis as new

    h_q, h_kv, dim, window = SHAPES[name]
    if device == "cpu":
        dim = SMOKE_DIMS[dim]
    splits = _planned_splits(batch, h_q, h_kv, dim, window, device) if device == "cuda" else 4
    g = torch.Generator(device=device).manual_seed(dim + batch)
    rot = torch.linalg.qr(torch.randn(dim, dim, device=device, dtype=torch.float64, generator=g))[0].float()
    qjl = torch.randn(dim, dim, device=device, generator=g)
    q = torch.randn(batch, h_q, dim, device=device, generator=g).bfloat16()
    m = torch.randn(splits, batch, h_q, device=device, generator=g) * 3
    lsum = torch.rand(splits, batch, h_q, device=device, generator=g) + 0.5
    acc = torch.randn(splits, batch, h_q, dim, device=device, generator=g)
    o = torch.randn(batch, h_q, dim, device=device, generator=g)
    ws = (m, lsum, acc) if splits > 1 else None
    rows = batch * h_q
    default = new.basis_launch(rows, dim)
    _say(f"== {name} batch {batch}: {rows} rows, head dim {dim}, {splits} splits; new default {tuple(default)}")

    # float64 references
    want_r = q.double() @ rot.double().T
    want_s = want_r @ qjl.double().T
    if ws is None:
        merged = o.double()
    else:
        w = torch.exp2(m.double() - m.double().amax(0))
        merged = (w[..., None] * acc.double()).sum(0) / (w * lsum.double()).sum(0)[..., None]
    want_o = merged @ rot.double()

    pad = max(16, 1 << (dim - 1).bit_length())
    launches = [(default, "*")] + [(lw._replace(block_o=min(lw.block_o, pad), block_k=min(lw.block_k, pad)), "")
                                   for lw in new.LAUNCHES.values() if min(lw.block_o, pad) != default.block_o]

    for qjl_on, op in ((True, "query"), (False, "query-noqjl")):
        old_r, old_s = old.rotate_queries(q, rot, qjl, qjl_on)
        us = _graph_us(lambda qjl_on=qjl_on: old.rotate_queries(q, rot, qjl, qjl_on), device)
        err = max(_diff(old_r, want_r), _diff(old_s, want_s) if qjl_on else 0.0)
        _say(f"{name:12s} b{batch:<3d} {op:12s} old           {us:8.2f} us  1 launch   max|ref| {err:.2e}")
        for launch, mark in launches:
            r, s = new.rotate_queries(q, rot, qjl, qjl_on, launch)
            us = _graph_us(lambda launch=launch, qjl_on=qjl_on: new.rotate_queries(q, rot, qjl, qjl_on, launch),
                           device)
            vs_old = max(_diff(r, old_r), _diff(s, old_s) if qjl_on else 0.0)
            err = max(_diff(r, want_r), _diff(s, want_s) if qjl_on else 0.0)
            n = 2 if qjl_on else 1
            form = f"new{mark:1s} o{launch.block_o:<3d}w{launch.num_warps}"
            _say(f"{name:12s} b{batch:<3d} {op:12s} {form} {us:8.2f} us  "
                 f"{n} launch{'es' if n > 1 else '  '} max|old| {vs_old:.2e}  max|ref| {err:.2e}")

    old_out = old.merge_and_rotate_back(o.clone(), ws, splits, rot, torch.bfloat16)
    o_old = o.clone()  # the old merge overwrites its rows with the merged ones
    us = _graph_us(lambda: old.merge_and_rotate_back(o_old, ws, splits, rot, torch.bfloat16), device)
    _say(f"{name:12s} b{batch:<3d} {'output':12s} old           {us:8.2f} us  1 launch   max|ref| "
         f"{_diff(old_out, want_o):.2e}")
    for launch, mark in launches:
        got = new.merge_and_rotate_back(o, ws, splits, rot, torch.bfloat16, launch)
        us = _graph_us(lambda launch=launch: new.merge_and_rotate_back(o, ws, splits, rot, torch.bfloat16, launch),
                       device)
        form = f"new{mark:1s} o{launch.block_o:<3d}w{launch.num_warps}"
        _say(f"{name:12s} b{batch:<3d} {'output':12s} {form} {us:8.2f} us  "
             f"1 launch   max|old| {_diff(got, old_out):.2e}  max|ref| {_diff(got, want_o):.2e}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shapes", default="9B,E4B-global,E4B-sliding")
    parser.add_argument("--batches", default="32,1")
    parser.add_argument("--cpu-smoke", action="store_true", help="interpreted, small head dims (TRITON_INTERPRET=1)")
    args = parser.parse_args(argv)
    device = "cpu" if args.cpu_smoke else "cuda"
    if device == "cuda":
        _say(f"device {torch.cuda.get_device_name()} ({torch.cuda.get_device_properties(0).multi_processor_count} SMs)")
    for name in args.shapes.split(","):
        for batch in (int(b) for b in args.batches.split(",")):
            try:
                run_case(name, batch, device)
            except Exception as e:  # noqa: BLE001 (report it and go on to the next shape)
                _say(f"{name} b{batch}: FAILED {type(e).__name__}: {e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
