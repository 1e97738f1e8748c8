"""``python -m anna_core.bench.all``: every issue-5 target in one process, in under 10 minutes.

Targets (bf16, random weights at the released shapes, token-id prompts; ``--configs`` is the folder
holding ``Qwen3.5-0.8B/``, ``Qwen3.5-2B/``, ``Qwen3.5-9B/`` config-only folders):

* 9B, batch 1, 512-token prompt, 256 new tokens: decode >= 200 tok/s (>= 74% of the roofline),
  with ``--profile`` and the HF transformers (+ fla) side by side on the same weights (>= 15x);
* 9B, batch 32: >= 4500 output tok/s in total;
* 9B, one 2048-token prompt: TTFT <= 90 ms;
* 2B, batch 1: >= 700 tok/s; 0.8B, batch 1: >= 1000 tok/s;
* the kernel microbenchmark (``anna_xpu_kernels.microbench``) when that module exists.

Each target's report is printed as it finishes; a summary table comes last and everything is
written as JSON to ``--out``. A target that fails is recorded with its error and the rest go on.
Set ``TRITON_CACHE_DIR`` to a saved cache to skip recompiling the Triton kernels.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import attrs

from anna_core.bench.engine_bench import BenchSettings, run_bench
from anna_core.bench.report import format_report


@attrs.frozen
class Target:
    name: str
    model: str
    batch_size: int
    input_len: int
    output_len: int
    metric: str
    goal: float
    higher_is_better: bool = True
    profile: bool = False
    compare_hf: bool = False
    prefix_caching: bool = False


TARGETS = (
    Target("9B b=1 decode", "Qwen3.5-9B", 1, 512, 256, "decode_tokens_per_s_per_stream", 200.0, profile=True,
           compare_hf=True),
    Target("9B b=32 total", "Qwen3.5-9B", 32, 512, 256, "decode_tokens_per_s_total", 4500.0, profile=True),
    Target("9B TTFT 2048", "Qwen3.5-9B", 1, 2048, 4, "ttft_ms", 90.0, higher_is_better=False),
    # the same with prefix caching on, as `anna serve` runs: the prefill also snapshots the recurrent state
    Target("9B TTFT 2048 +prefix cache", "Qwen3.5-9B", 1, 2048, 4, "ttft_ms", 90.0, higher_is_better=False,
           prefix_caching=True),
    Target("2B b=1 decode", "Qwen3.5-2B", 1, 512, 256, "decode_tokens_per_s_per_stream", 700.0, profile=True),
    Target("0.8B b=1 decode", "Qwen3.5-0.8B", 1, 512, 256, "decode_tokens_per_s_per_stream", 1000.0, profile=True),
)


def _free(device: str) -> None:
    gc.collect()
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except Exception as exc:  # noqa: BLE001 - best effort between targets
        print(f"could not free device memory: {exc}", file=sys.stderr)


def run_all(configs: Path, *, device: str, dtype: str, runs: int, warmup: int, hf_output_len: int,
            only: list[str] | None, cuda_graph: bool, compile_mode: str,
            compare_hf: bool = True, async_scheduling: bool = True,
            disable_kernels: tuple[str, ...] = (), timeline: bool = False) -> list[dict[str, Any]]:
    """Run the targets (grouped by model so each model loads once); returns one record per target."""
    from anna_core.loading import load_model

    records = []
    loaded_name, loaded = None, None
    for t in TARGETS:
        if only and not any(o in t.name for o in only):
            continue
        rec: dict[str, Any] = {"target": t.name, "metric": t.metric, "goal": t.goal}
        start = time.perf_counter()
        try:
            if loaded_name != t.model:
                loaded = None
                _free(device)
                loaded = load_model(configs / t.model, device=device, dtype=dtype, load_format="dummy",
                                    disable_kernels=disable_kernels)
                loaded_name = t.model
            s = BenchSettings(model_dir=configs / t.model, device=device, dtype=dtype, batch_size=t.batch_size,
                              input_len=t.input_len, output_len=t.output_len, warmup=warmup, runs=runs,
                              profile=t.profile, compare_hf=t.compare_hf and compare_hf, hf_output_len=hf_output_len,
                              cuda_graph=cuda_graph, compile_mode=compile_mode, async_scheduling=async_scheduling,
                              prefix_caching=t.prefix_caching, disable_kernels=disable_kernels, timeline=timeline)
            report = run_bench(s, loaded)
            value = report[t.metric]
            rec.update(value=value, met=value >= t.goal if t.higher_is_better else value <= t.goal, report=report)
            print(f"\n== {t.name}\n{format_report(report)}", flush=True)
        except Exception as exc:  # noqa: BLE001 - record and go on with the other targets
            rec.update(error=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc())
            print(f"\n== {t.name}: FAILED {rec['error']}\n{rec['traceback']}", flush=True)
        rec["wall_s"] = time.perf_counter() - start
        records.append(rec)
        _free(device)
    return records


def run_microbench(timeout_s: float) -> dict[str, Any]:
    """``python -m anna_xpu_kernels.microbench`` in a subprocess, when the module exists."""
    if importlib.util.find_spec("anna_xpu_kernels.microbench") is None:
        return {"skipped": "anna_xpu_kernels.microbench not installed"}
    try:
        proc = subprocess.run([sys.executable, "-m", "anna_xpu_kernels.microbench"], capture_output=True, text=True,
                              timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout_s:.0f} s"}
    print("\n== kernel microbench\n" + proc.stdout[-6000:] + proc.stderr[-2000:], flush=True)
    return {"returncode": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr[-4000:]}


def summary(records: list[dict[str, Any]]) -> str:
    lines = [f"{'target':<27} {'metric':<32} {'goal':>8} {'value':>10}  status"]
    for r in records:
        if "error" in r:
            lines.append(f"{r['target']:<27} {r['metric']:<32} {r['goal']:>8.0f} {'-':>10}  ERROR {r['error'][:60]}")
            continue
        rep = r["report"]
        extra = f" roofline {100 * rep['roofline_fraction']:.0f}%"
        if "hf" in rep:
            extra += f", {rep['hf']['speedup']:.1f}x HF{'+fla' if rep['hf']['fla'] else ''}"
        lines.append(f"{r['target']:<27} {r['metric']:<32} {r['goal']:>8.0f} {r['value']:>10.1f}  "
                     f"{'MET' if r['met'] else 'MISSED'}{extra}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", type=Path, default=Path("tests/qwen35/reference_configs"))
    ap.add_argument("--device", default="auto")
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--hf-output-len", type=int, default=128)
    ap.add_argument("--only", action="append", help="run targets whose name contains this (repeatable)")
    ap.add_argument("--no-cuda-graph", action="store_true")
    ap.add_argument("--compile-mode", default="none")
    ap.add_argument("--no-async-scheduling", action="store_true")
    ap.add_argument("--disable-kernel", action="append", default=[], help="OP:NAME or NAME (repeatable)")
    ap.add_argument("--microbench-timeout", type=float, default=150.0)
    ap.add_argument("--skip-microbench", action="store_true")
    ap.add_argument("--skip-hf", action="store_true", help="leave out the HF transformers side by side")
    ap.add_argument("--out", type=Path, default=None, help="write all records as JSON here")
    ap.add_argument("--timeline", action="store_true",
                    help="also trace one captured decode step per target, kernel by kernel (anna_core.bench.timeline)")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    records = run_all(args.configs, device=args.device, dtype=args.dtype, runs=args.runs, warmup=args.warmup,
                      hf_output_len=args.hf_output_len, only=args.only, cuda_graph=not args.no_cuda_graph,
                      compile_mode=args.compile_mode, compare_hf=not args.skip_hf,
                      async_scheduling=not args.no_async_scheduling, disable_kernels=tuple(args.disable_kernel),
                      timeline=args.timeline)
    micro = {"skipped": "--skip-microbench"} if args.skip_microbench else run_microbench(args.microbench_timeout)
    if args.out:
        args.out.write_text(json.dumps({"targets": records, "microbench": micro,
                                        "wall_s": time.perf_counter() - t0}, indent=1, default=str))
    print("\n" + summary(records) + f"\n(total {time.perf_counter() - t0:.0f} s)", flush=True)
    return 0 if all(r.get("met") for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
