"""GPU experiment (sixth session, call 3; BENCHMARKS.md): the ``anna bench --logprobs 5`` run of call 1
(three sequential 256-token greedy requests, prompt seeds 0..2, 2B dummy weights) with and without
logprobs, each request's first 16 served tokens against Anna's eager greedy loop. Run from the
repository root on the GPU machine: ``python3 tools/gpu_experiments/logprobs_repro.py``."""
from pathlib import Path

from anna_core.bench.engine_bench import BenchSettings, build_engine, random_prompts, timed_run
from anna_core.loading import load_model
from anna_core.testing.runner import simple_greedy_batch

cfg = Path("tests/qwen35/reference_configs/Qwen3.5-2B")
loaded = load_model(cfg, device="cuda", dtype="bf16", load_format="dummy")
vocab = loaded.model.vocab_size
for lp in (5, None, 5):
    engine = build_engine(loaded, BenchSettings(model_dir=cfg, batch_size=1, input_len=512, output_len=256, logprobs=lp))
    for r in range(3):
        prompts = random_prompts(vocab, 1, 512, r)
        res = timed_run(engine, prompts, 256, f"run{r}", lp)
        eager = simple_greedy_batch(loaded.model, prompts, 16)[0]
        served = res["tokens"][0][:16]
        first = next((i for i, (a, b) in enumerate(zip(served, eager)) if a != b), None)
        print(f"lp={lp} run {r}: first diff {first}\n  served {served}\n  eager  {eager}", flush=True)
    del engine
