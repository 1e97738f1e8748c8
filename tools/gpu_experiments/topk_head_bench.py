"""The fused top-k LM head (``lm_head_topk``, issue 29) against the full head on a GPU, at Qwen3.5-9B's head (hidden
4096, vocab 248,320) and Gemma 4 E4B's (2560 x 262,144, soft-capped at 30), T = 1 and 32 rows, bf16 / int4 / fp8
weights (int8 with ``--schemes``). Random weights; no checkpoint needed. Per case, microseconds and GB/s (the head's
weight bytes over the time) of:

* ``full_argmax``: the full head's GEMV (the registry's ``linear`` / ``wq_linear``), the float32 cast, the soft-cap,
  ``argmax`` (a greedy step without the fused head);
* ``full_topk``: the same GEMV, cast and soft-cap, then ``torch.topk(64)`` and ``logsumexp`` (a top-k / logprobs
  step without it);
* ``one_pass``: the one-pass kernel as its autotuner chose (``one_pass_config``; ``one_pass_tuning``: the
  autotuner's cold-L2 milliseconds per candidate, when it tuned in this process; ``one_pass_configs_agree``:
  per candidate, ``[ids_equal, max_value_diff]`` against the reference, as below);
* ``gemv_select``: the full head's GEMV, then the Triton selection;
* ``op``: the op as the registry binds it, with the implementation its tuner chose (``op_impl``);
* ``select_<chunk>``: the Triton selection alone on the head's logits, per chunk width (``topk_select.CHUNK``).

Run from the repository root with the Anna wheels installed (or PYTHONPATH set to the packages' src folders)::

    timeout 200 python3 tools/gpu_experiments/topk_head_bench.py [--rows 1,32] [--schemes none,int4,fp8]
        [--heads qwen35-9b,gemma4-e4b] [--iters 50]

Each variant is timed as a captured CUDA graph replayed ``--iters`` times (median of per-replay events; eager when a
capture fails, said in ``timing``), so host launch costs are excluded. One JSON line per case, also appended to
``$OUT/topk_head_bench.jsonl`` when ``OUT`` is set, with the op's agreement with the reference (``ids_equal``:
fraction of rows whose 64 ids match exactly -- a few differing rows are near-ties whose GEMV sums round
differently --, ``max_value_diff``, ``max_lse_diff``). What to look for: ``op_us <= full_argmax_us`` at T = 1 and
``op_us < full_topk_us`` everywhere (the rule for making the fused head the default).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch

HEADS = {"qwen35-9b": (4096, 248320, None), "gemma4-e4b": (2560, 262144, 30.0)}
K = 64


def _time(fn, iters: int) -> tuple[float, str]:
    """Median microseconds of one call of ``fn`` (graph replay when it captures)."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    run, how = fn, "eager"
    try:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        run, how = graph.replay, "cuda graph"
    except Exception as exc:  # noqa: BLE001 - time it eagerly then
        how = f"eager (capture failed: {type(exc).__name__}: {str(exc)[:120]})"
        torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) * 1e3)
    return statistics.median(times), how


def _tuning_of(kernel) -> dict[str, float] | None:
    """The one-pass autotuner's milliseconds per candidate of its last tuning in this process (None: cached)."""
    timings = getattr(kernel._topk_head_kernel, "configs_timings", None)
    if not timings:
        return None
    return {f"{c.kwargs['BLOCK_N']}x{c.kwargs['BLOCK_K']}x{c.kwargs['SUB_TILES']} w{c.num_warps} s{c.num_stages}":
            (t[0] if isinstance(t, list) else t) for c, t in timings.items()}


def _configs_agree(kernel, x, weight, scheme, cap, vocab, want) -> dict[str, list[float]]:
    """Per one-pass configuration the autotuner may pick for this shape (compiled by its tuning already), against
    the reference ``want``: the fraction of rows whose 64 ids are equal (near-ties aside, 1.0) and the largest value
    difference."""
    dot = x.shape[0] > kernel.CUDA_CORE_ROWS[scheme]
    out = {}
    for cfg in kernel.DOT_SPACE if dot else kernel.CUDA_CORE_SPACE:
        if scheme != "none" and cfg.block_k % 128:
            continue
        values, ids, _ = kernel.one_pass(x, *weight, scheme, K, cap, vocab, config=cfg)
        out[f"{cfg.block_n}x{cfg.block_k}x{cfg.sub_tiles} w{cfg.num_warps} s{cfg.num_stages}"] = [
            (ids == want[1]).all(dim=1).float().mean().item(), (values - want[0]).abs().max().item()]
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", default="1,32")
    p.add_argument("--schemes", default="none,int4,fp8")
    p.add_argument("--heads", default=",".join(HEADS))
    p.add_argument("--iters", type=int, default=50)
    args = p.parse_args()

    from anna_core.kernels.reference.lm_head_topk import lm_head_topk as reference
    from anna_core.kernels.registry import KernelRegistry, bind_ops
    from anna_core.weights.gpu_quant import quantize
    from anna_xpu_kernels import lm_head_topk as kernel
    from anna_xpu_kernels import topk_select as select

    device, dtype = torch.device("cuda"), torch.bfloat16
    registry = KernelRegistry.from_plugins()
    ops = bind_ops(registry, device, dtype)
    out_path = os.path.join(os.environ["OUT"], "topk_head_bench.jsonl") if os.environ.get("OUT") else None
    print(json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__}), flush=True)
    gen = torch.Generator(device=device).manual_seed(0)
    for head in args.heads.split(","):
        hidden_size, vocab, cap = HEADS[head]
        dense = torch.randn(vocab, hidden_size, device=device, generator=gen, dtype=dtype) * 0.02
        for scheme in args.schemes.split(","):
            if scheme == "none":
                weight = (dense, None, None)
            else:
                q = quantize(dense, scheme, dtype)
                weight = (q.qweight, q.scale, q.zero)
            nbytes = sum(t.numel() * t.element_size() for t in weight if t is not None)
            op = ops.get("lm_head_topk", scheme=scheme)
            gemv = ops.get("linear") if scheme == "none" else ops.get("wq_linear", scheme=scheme)
            for rows in (int(r) for r in args.rows.split(",")):
                x = torch.randn(rows, hidden_size, device=device, generator=gen, dtype=dtype)

                def logits(x=x, weight=weight, scheme=scheme, gemv=gemv, cap=cap):
                    y = gemv(x, weight[0], None) if scheme == "none" else gemv(x, *weight, scheme, None)
                    y = y.float()
                    return torch.tanh(y / cap) * cap if cap is not None else y

                def full_topk(logits=logits):
                    y = logits()
                    return y.topk(K, dim=-1), torch.logsumexp(y, dim=-1)

                variants = {
                    "full_argmax": lambda logits=logits: logits().argmax(dim=-1),
                    "full_topk": full_topk,
                    "one_pass": lambda x=x, w=weight, s=scheme, c=cap, v=vocab: kernel.one_pass(x, *w, s, K, c, v),
                    "gemv_select": lambda x=x, w=weight, s=scheme, c=cap: kernel.gemv_select(x, *w, s, K, c),
                    "op": lambda x=x, w=weight, s=scheme, c=cap, op=op: op(x, *w, s, K, c),
                }
                t0 = time.perf_counter()
                line = {"head": head, "hidden": hidden_size, "vocab": vocab, "softcap": cap, "scheme": scheme,
                        "rows": rows, "k": K, "weight_mb": nbytes / 1e6, "timing": {}}
                for name, fn in variants.items():
                    try:
                        us, how = _time(fn, args.iters)
                    except Exception as exc:  # noqa: BLE001 - report and go on with the other variants
                        line[f"{name}_error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
                        continue
                    line[f"{name}_us"] = us
                    line[f"{name}_gbps"] = nbytes / us / 1e3
                    line["timing"][name] = how
                    if name == "one_pass":
                        c = kernel._topk_head_kernel.best_config
                        line["one_pass_config"] = {**c.kwargs, "num_warps": c.num_warps, "num_stages": c.num_stages}
                        line["one_pass_tuning"] = _tuning_of(kernel)
                        line["one_pass_configs_agree"] = _configs_agree(kernel, x, weight, scheme, cap, vocab,
                                                                        reference(x, *weight, scheme, K, cap))
                line["op_impl"] = {str(k[1:]): v for k, v in kernel.lm_head_topk.tuner.choices.items()}
                head_logits = gemv(x, weight[0], None) if scheme == "none" else gemv(x, *weight, scheme, None)
                for chunk in (1024, 2048, 4096):  # the selection alone, per chunk width (topk_select.CHUNK)
                    us, _ = _time(lambda y=head_logits, c=chunk, cap=cap: select.topk_of_logits(y, K, cap, chunk=c),
                                  args.iters)
                    line[f"select_{chunk}_us"] = us
                values, indices, lse = variants["op"]()
                want = reference(x, *weight, scheme, K, cap)
                line.update({
                    "ids_equal": (indices == want[1]).all(dim=1).float().mean().item(),
                    "max_value_diff": (values - want[0]).abs().max().item(),
                    "max_lse_diff": (lse - want[2]).abs().max().item(),
                    "gemv_select_ids_equal": (variants["gemv_select"]()[1] == want[1]).all(dim=1).float().mean().item(),
                    "case_s": time.perf_counter() - t0,
                })
                print(json.dumps(line), flush=True)
                if out_path:
                    with open(out_path, "a") as f:
                        f.write(json.dumps(line) + "\n")
            del weight
        del dense
        torch.cuda.empty_cache()
    print(json.dumps({"kernels": registry.chosen()}), flush=True)


if __name__ == "__main__":
    main()
