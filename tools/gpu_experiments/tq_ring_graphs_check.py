"""Issue 30 on a GPU: TurboQuant residual rings (--kv-cache-residual-len) under captured decode and prefill graphs, with the
Triton kernels and real CUDA graphs (the CPU tests use the torch reference and a fake graph device).

For the tiny Qwen3.5 and Gemma 4 checkpoints (built here, random weights, float32), 4-bit TurboQuant with a 16-position
ring, it prints per case the tokens' agreement and the largest logprob difference:

  batch3/4, batch5/8   3 requests in decode bucket 4 and 5 in bucket 8 (padding rows), finishing at different steps:
                       graphs against eager (cuda_graph off), and each request alone (graphs, bucket 1)
  chunks 16 vs 8       a 40-token prompt run twice (the second a prefix hit, resuming at 16) with 16- and with 8-token
                       chunks: the miss's and the hit's tokens the same either way (the per-query ring window)
  prefill bB/R         prompts of 40 and 150 tokens replaying the 128 and 192 buckets' prefill graphs (padding rows;
                       the ring window ends at the prompt's real length) at B = 3, 4 bits and R = 16, 128: tokens
                       against eager, and the prefill-graph replays counted (expected 2)
  prompt cache         the 40-token prompt twice: the repeat a prompt-cache hit (its ring restored), the miss's tokens

Expected: every "tokens equal" True and logprob differences at float32 rounding (<= 1e-4; a padded prefill's rows may
round a coordinate at a code boundary the other way: up to ~1e-3 measured on the CPU at 3 bits). Exit status 1 when
tokens differ or a prefill case replays fewer than 2 prefill graphs. Run from the repository root with the Anna wheels installed:

    timeout 280 python3 tools/gpu_experiments/tq_ring_graphs_check.py 2>&1 | tee $OUT/tq_ring_graphs.log

(~90-150 s on a fresh machine: Triton compiles the TurboQuant kernels per shape; ``--only-prefill`` runs the
prefill-graph cases alone). ``--device cpu`` runs the same
on the CPU over the fake graph device (a local sanity check).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch
from anna_core import SamplingParams
from anna_core.engine.config import EngineConfig
from anna_core.engine.llm_engine import LLMEngine
from anna_core.engine.model_runner import RunnerConfig
from anna_core.loading import load_model
from anna_core.testing.checkpoints import build_tiny_qwen35
from anna_core.testing.engine_run import run_to_completion
from anna_gemma4.tiny import build_tiny_gemma4


def engine(loaded, device: str, *, graphs: bool, max_seqs: int, bits: int = 4, residual: int = 16,
           **config) -> LLMEngine:
    cfg = EngineConfig(block_size=16, num_blocks=64, max_num_seqs=max_seqs, max_model_len=256,
                       kv_cache_quantization="turboquant", kv_cache_quant_bits=bits, kv_cache_residual_len=residual,
                       **{"max_prefill_tokens": 256, "prompt_cache_size": 0, **config})
    e = LLMEngine.from_loaded(loaded, cfg)
    if device == "cpu":
        from anna_core.testing.fake_graphs import FakeGraphAccelerator

        e.runner.accel = FakeGraphAccelerator()
    e.runner.setup(RunnerConfig(cuda_graph=graphs, warmup=False), max_model_len=256, max_num_seqs=max_seqs)
    if graphs and e.runner.graphs is None:
        print("  decode graphs NOT captured:", e.runner.graph_report()["decode"]["why_not"])
    return e


def run(e: LLMEngine, prompts, params):
    lps: dict[str, list[float]] = {}
    outs = run_to_completion(e, prompts, params, on_output=lambda o: lps.setdefault(o.request_id, []).extend(
        x.logprob for x in o.logprobs))
    return [o.token_ids for o in outs], [lps.get(o.request_id, []) for o in outs], [o.num_cached_tokens for o in outs]


def diff(a: list[list[float]], b: list[list[float]]) -> float:
    return max((abs(x - y) for u, v in zip(a, b) for x, y in zip(u, v)), default=0.0)


def check(name: str, loaded, device: str) -> bool:
    ok = True
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(3, 320, (n,), generator=gen).tolist() for n in (21, 9, 35, 14, 27)]
    for n, max_seqs in ((3, 4), (5, 8)):
        params = [SamplingParams(temperature=0.0, max_tokens=m, ignore_eos=True, logprobs=1)
                  for m in (12, 18, 6, 15, 9)][:n]
        t0 = time.perf_counter()
        # no prefix caching: a request re-run alone would resume from a hit, whose first queries read the positions
        # before its hit point quantized (the per-query ring window): not the batched miss
        want = run(engine(loaded, device, graphs=False, max_seqs=max_seqs, enable_prefix_caching=False), prompts[:n],
                   params)
        g = engine(loaded, device, graphs=True, max_seqs=max_seqs, enable_prefix_caching=False)
        steps = g.runner.num_graph_steps
        got = run(g, prompts[:n], params)
        replays = g.runner.num_graph_steps - steps
        alone = [run(g, [p], [q]) for p, q in zip(prompts[:n], params)]
        same = got[0] == want[0]
        same_alone = [a[0][0] for a in alone] == want[0]
        ok &= same and same_alone
        print(f"{name} batch{n}/{max_seqs}: graph replays {replays}, tokens equal to eager {same} (logprob diff "
              f"{diff(got[1], want[1]):.2e}), alone {same_alone} (logprob diff "
              f"{diff([a[1][0] for a in alone], want[1]):.2e})  [{time.perf_counter() - t0:.1f} s]")
    prompt = prompts[2] + prompts[4][:5]  # 40 tokens
    p = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True, logprobs=1)
    runs = []
    for chunk in (16, 8):  # the ring's window is per query: the same tokens whatever the chunks
        e = engine(loaded, device, graphs=True, max_seqs=4, enable_prefix_caching=True, snapshot_interval=16,
                   max_prefill_tokens=32, prefill_chunk_size=chunk)
        runs.append((run(e, [prompt], [p]), run(e, [prompt], [p])))
    (miss, hit), (miss8, hit8) = runs
    same = miss8[0] == miss[0] and hit8[0] == hit[0]
    ok &= same
    print(f"{name} chunks 16 vs 8: cached {miss[2][0]} then {hit[2][0]} (expected 0 then 16), miss and hit tokens "
          f"equal {same} (logprob diff {diff(miss8[1], miss[1]):.2e} / {diff(hit8[1], hit[1]):.2e}); hit vs miss "
          f"(quantization noise of the hit's first 15 queries, not checked): tokens equal {hit[0] == miss[0]}, "
          f"logprob diff {diff(hit[1], miss[1]):.2e}")
    return ok


def check_prefill(name: str, loaded, device: str) -> bool:
    ok = True
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(3, 320, (n,), generator=gen).tolist() for n in (21, 9, 35, 14, 27)]
    p = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True, logprobs=1)
    cases = [prompts[2] + prompts[4][:5], (prompts[2] * 5)[:150]]  # 40 tokens (bucket 128), 150 (bucket 192)
    for bits in (4, 3):
        for residual in (16, 128):
            t0 = time.perf_counter()
            # no prefix caching: the 150-token prompt shares 35 tokens with the 40-token one, and a hit's cached blocks
            # hold K/V computed while the other prompt's ring covered them (other values than a miss's, graphs or not)
            kw = dict(max_seqs=4, bits=bits, residual=residual, enable_prefix_caching=False)
            want = [run(engine(loaded, device, graphs=False, **kw), [c], [p]) for c in cases]
            g = engine(loaded, device, graphs=True, **kw)
            report = g.runner.graph_report()["prefill"]
            got = [run(g, [c], [p]) for c in cases]
            same = [a[0] == b[0] for a, b in zip(got, want)]
            replays = g.runner.num_prefill_graph_steps
            ok &= all(same) and replays == 2 and report["captured"]
            print(f"{name} prefill b{bits}/R{residual}: captured {report['captured']} {report['prompt_lengths']} "
                  f"({report['why_not']}), prefill-graph replays {replays} (expected 2), tokens equal to eager "
                  f"{same} (logprob diff {max(diff(a[1], b[1]) for a, b in zip(got, want)):.2e})  "
                  f"[{time.perf_counter() - t0:.1f} s]")
    # an exact repeat from the prompt cache computes nothing: its slot's ring is restored from the entry
    greedy = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)  # (logprobs requests keep no entry)
    e = engine(loaded, device, graphs=True, max_seqs=4, prompt_cache_size=8)
    miss, hit = run(e, [cases[0]], [greedy]), run(e, [cases[0]], [greedy])
    same = hit[0] == miss[0] and hit[2] == [len(cases[0])]
    ok &= same
    print(f"{name} prompt cache: cached {miss[2][0]} then {hit[2][0]} (expected 0 then {len(cases[0])}), tokens "
          f"equal {hit[0] == miss[0]}")
    return ok


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--only-prefill", action="store_true", help="the prefill-graph cases alone")
    args = ap.parse_args()
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for name, build in (("qwen35", build_tiny_qwen35), ("gemma4", build_tiny_gemma4)):
            path = build(Path(tmp) / name)
            loaded = load_model(path, device=args.device, dtype="fp32")
            if not args.only_prefill:
                ok &= check(name, loaded, args.device)
            ok &= check_prefill(name, loaded, args.device)
    print("ALL OK" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
