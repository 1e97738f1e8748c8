"""GPU experiment (seventh session; BENCHMARKS.md): where a served decode step's time goes beyond the
graph replay (ITL above the replay alone at 9B batch 32).

Runs ``anna bench``'s engine loop (greedy, token-id prompts) on a dummy model, then traces a further
run with the profiler (CPU + CUDA activity) and reports: device idle gaps between kernels / copies
(count, total per step, the largest with the kernels around them), the host interval between
consecutive ``cudaGraphLaunch`` calls, and the engine's host time per ``step()`` call. Run from the
repository root on the GPU machine:
``python3 tools/gpu_experiments/serve_loop_gaps.py MODEL_DIR BATCH [OUT_DIR]``."""
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from anna_core.bench.engine_bench import BenchSettings, build_engine, random_prompts, timed_run
from anna_core.loading import load_model
from torch.profiler import ProfilerActivity, profile


def main(model_dir, batch, out_dir=None):
    loaded = load_model(Path(model_dir), device="cuda", dtype="bf16", load_format="dummy")
    s = BenchSettings(model_dir=Path(model_dir), batch_size=batch, input_len=512, output_len=64)
    engine = build_engine(loaded, s)
    vocab = loaded.model.vocab_size
    timed_run(engine, random_prompts(vocab, batch, 512, 1), 64, "w")
    graphs = engine.runner.graphs
    replay_ms = graphs.time_replay(graphs.bucket_for(batch))
    # host time of step() calls, no profiler
    step_times = []
    orig = engine.step

    def timed_step():
        t = time.perf_counter()
        r = orig()
        step_times.append(time.perf_counter() - t)
        return r

    engine.step = timed_step
    res = timed_run(engine, random_prompts(vocab, batch, 512, 2), 64, "a")
    itl = statistics.median(res["itl_s"]) * 1e3
    print(f"batch {batch}: ITL median {itl:.3f} ms, replay alone {replay_ms:.3f} ms; step() wall median "
          f"{statistics.median(step_times) * 1e3:.3f} ms over {len(step_times)} calls")
    engine.step = orig
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        timed_run(engine, random_prompts(vocab, batch, 512, 3), 40, "p")
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.json"
        prof.export_chrome_trace(str(path))
        trace = json.loads(path.read_text())
        if out_dir:
            import gzip
            Path(out_dir).mkdir(parents=True, exist_ok=True)
            with gzip.open(Path(out_dir) / f"serve_loop_b{batch}.json.gz", "wt") as f:
                json.dump(trace, f)
    ev = trace["traceEvents"]
    dev = sorted((e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and "dur" in e),
                 key=lambda e: e["ts"])
    launches = sorted(e["ts"] for e in ev if e.get("name") == "cudaGraphLaunch")
    # the decode part: from the first graph launch on
    t0 = launches[0] if launches else dev[0]["ts"]
    dev = [e for e in dev if e["ts"] >= t0]
    if not dev:
        print("no device activity traced")
        return
    gaps = []
    end = dev[0]["ts"] + dev[0]["dur"]
    for prev, e in zip(dev, dev[1:]):
        if e["ts"] - end > 3.0:
            gaps.append((e["ts"] - end, prev["name"][:60], e["name"][:60], e.get("cat")))
        end = max(end, e["ts"] + e["dur"])
    span = end - dev[0]["ts"]
    n = max(1, len(launches))
    print(f"{len(launches)} graph launches; device span {span / 1e3:.2f} ms = {span / n / 1e3:.3f} ms per launch; "
          f"idle gaps > 3 us: {len(gaps)}, total {sum(g[0] for g in gaps) / 1e3:.3f} ms "
          f"({sum(g[0] for g in gaps) / n:.1f} us per launch)")
    cadence = [b - a for a, b in zip(launches, launches[1:])]
    if cadence:
        print(f"host interval between graph launches: median {statistics.median(cadence) / 1e3:.3f} ms, "
              f"min {min(cadence) / 1e3:.3f}, max {max(cadence) / 1e3:.3f}")
    by_kind = {}
    for g in gaps:
        k = (g[1], g[2], g[3])
        c, t = by_kind.get(k, (0, 0.0))
        by_kind[k] = (c + 1, t + g[0])
    for (a, b, cat), (c, t) in sorted(by_kind.items(), key=lambda kv: -kv[1][1])[:12]:
        print(f"  {c:4d} gaps, {t / c:8.1f} us avg: after {a} -> before {b} ({cat})")
    outside = {}
    for e in dev:
        if e.get("cat") != "kernel" or e.get("args", {}).get("graph id") is None:
            outside[e["name"][:70]] = outside.get(e["name"][:70], 0.0) + e["dur"]
    print("device work not from a graph (us total):")
    for k, v in sorted(outside.items(), key=lambda kv: -kv[1])[:12]:
        print(f"  {v:9.1f}  {k}")
    host = {}
    for e in ev:
        if e.get("cat") == "cpu_op" or e.get("cat") == "cuda_runtime":
            host[e["name"][:60]] = host.get(e["name"][:60], 0.0) + e.get("dur", 0.0)
    print("host ops / runtime calls (us total):")
    for k, v in sorted(host.items(), key=lambda kv: -kv[1])[:15]:
        print(f"  {v:9.1f}  {k}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else None)
