"""The Python API's speed against ``anna bench``'s, in one process (issue "fast by default").

    python -m anna_core.bench.llm_path --model-dir tests/qwen35/reference_configs/Qwen3.5-9B

1. ``anna bench``'s figures (:func:`anna_core.bench.engine_bench.run_bench`, dummy weights): batch-1 decode
   tokens/s of a ``--input-len`` prompt, and the TTFT of one ``--ttft-len`` prompt, prefix caching off and on,
   and both again with ``--serve-defaults`` (the engine ``anna serve`` and ``LLM`` build by default).
2. The same through ``LLM(model_dir, load_format="dummy", ...)`` with its defaults, as a user writes it:
   decode tokens/s of one request = ``(n - 1) / (finished - first_token)`` from its ``RequestOutput.metrics``
   (``n`` = ``--output-len`` tokens), and TTFT = ``first_token - arrival`` of a fresh ``--ttft-len`` prompt;
   medians over ``--runs`` after one warm-up request each.

Prints one line per figure and the ratios; ``--out`` writes them as JSON. Also prints the copy bandwidth
measured in the process (BENCHMARKS.md records it with every figure).
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any


def _prompt(vocab: int, n: int, seed: int) -> list[int]:
    import torch

    return torch.randint(0, vocab, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def _free() -> None:
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def bench_figures(model_dir: Path, device: str, dtype: str, input_len: int, output_len: int, ttft_len: int,
                  runs: int) -> dict[str, float]:
    """``anna bench``'s decode tokens/s and TTFTs (prefix caching off / on), one model load."""
    from anna_core.bench.engine_bench import BenchSettings, run_bench
    from anna_core.loading import load_model

    loaded = load_model(model_dir, device=device, dtype=dtype, load_format="dummy")
    common = {"model_dir": model_dir, "device": device, "dtype": dtype, "runs": runs}
    decode = run_bench(BenchSettings(input_len=input_len, output_len=output_len, **common), loaded)
    ttft = run_bench(BenchSettings(input_len=ttft_len, output_len=2, **common), loaded)
    ttft_pc = run_bench(BenchSettings(input_len=ttft_len, output_len=2, prefix_caching=True, **common), loaded)
    _free()
    served = run_bench(BenchSettings(input_len=input_len, output_len=output_len, serve_defaults=True, **common), loaded)
    _free()
    ttft_served = run_bench(BenchSettings(input_len=ttft_len, output_len=2, serve_defaults=True, **common), loaded)
    return {"decode_tokens_per_s": decode["decode_tokens_per_s_per_stream"], "ttft_ms": ttft["ttft_ms"],
            "ttft_prefix_caching_ms": ttft_pc["ttft_ms"], "copy_bandwidth_gbps": decode["copy_bandwidth_gbps"],
            "graph_replay_ms": decode.get("graph_replay_ms", float("nan")),
            "serve_defaults_decode_tokens_per_s": served["decode_tokens_per_s_per_stream"],
            "serve_defaults_ttft_ms": ttft_served["ttft_ms"]}


def llm_figures(model_dir: Path, device: str, dtype: str, input_len: int, output_len: int, ttft_len: int,
                runs: int, options: dict[str, Any] | None = None) -> dict[str, float]:
    """Decode tokens/s and TTFT through ``LLM`` with its defaults, or ``options`` (see the module doc)."""
    from anna_core import LLM, SamplingParams

    t0 = time.perf_counter()
    llm = LLM(model_dir, device=device, dtype=dtype, load_format="dummy", **(options or {}))
    start_s = time.perf_counter() - t0
    vocab = llm.engine.model.vocab_size
    params = SamplingParams(temperature=0.0, max_tokens=output_len, ignore_eos=True)
    decode, ttft = [], []
    for r in range(runs + 1):
        [out] = llm.generate(_prompt(vocab, input_len, 7000 + r), params)
        m = out.metrics
        if r:
            decode.append((len(out.token_ids) - 1) / (m["finished"] - m["first_token"]))
    one = SamplingParams(temperature=0.0, max_tokens=2, ignore_eos=True)
    for r in range(runs + 1):
        [out] = llm.generate(_prompt(vocab, ttft_len, 8000 + r), one)
        if r:
            ttft.append((out.metrics["first_token"] - out.metrics["arrival"]) * 1e3)
    runner = llm.engine.runner
    return {"decode_tokens_per_s": statistics.median(decode), "ttft_ms": statistics.median(ttft),
            "start_s": start_s, "graphs_captured": float(runner.graphs is not None),
            "prefill_graph_steps": float(runner.num_prefill_graph_steps), "eager_steps": float(runner.num_eager_steps)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m anna_core.bench.llm_path", description=__doc__.split("\n")[0])
    parser.add_argument("--model-dir", type=Path, required=True)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bf16")
    parser.add_argument("--input-len", type=int, default=512)
    parser.add_argument("--output-len", type=int, default=256)
    parser.add_argument("--ttft-len", type=int, default=2048)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--also", action="append", default=[], metavar="KEY=VALUE[,KEY=VALUE]",
                        help="Also measure LLM with these keyword arguments (ints as ints, true / false as booleans), e.g. "
                             "max_model_len=4096 or enable_prefix_caching=false; "
                             "repeatable.")
    a = parser.parse_args(argv)
    bench = bench_figures(a.model_dir, a.device, a.dtype, a.input_len, a.output_len, a.ttft_len, a.runs)
    _free()
    llm = llm_figures(a.model_dir, a.device, a.dtype, a.input_len, a.output_len, a.ttft_len, a.runs)
    _free()
    variants = {}
    for spec in a.also:
        options = {k: int(v) if v.lstrip("-").isdigit() else {"true": True, "false": False}.get(v.lower(), v)
                   for k, v in (kv.split("=", 1) for kv in spec.split(","))}
        variants[spec] = llm_figures(a.model_dir, a.device, a.dtype, a.input_len, a.output_len, a.ttft_len, a.runs,
                                     options)
        _free()
    result: dict[str, Any] = {"model": str(a.model_dir), "bench": bench, "llm": llm,
                              "decode_ratio": llm["decode_tokens_per_s"] / bench["decode_tokens_per_s"],
                              "ttft_ratio": llm["ttft_ms"] / bench["ttft_ms"],
                              "ttft_ratio_vs_prefix_caching": llm["ttft_ms"] / bench["ttft_prefix_caching_ms"],
                              "decode_ratio_vs_serve_defaults": llm["decode_tokens_per_s"]
                              / bench["serve_defaults_decode_tokens_per_s"],
                              "ttft_ratio_vs_serve_defaults": llm["ttft_ms"] / bench["serve_defaults_ttft_ms"],
                              "variants": variants}
    print(f"copy bandwidth {bench['copy_bandwidth_gbps']:.0f} GB/s")
    print(f"anna bench: decode {bench['decode_tokens_per_s']:.1f} tok/s (replay {bench['graph_replay_ms']:.3f} ms), "
          f"TTFT {a.ttft_len} {bench['ttft_ms']:.1f} ms (prefix caching on: {bench['ttft_prefix_caching_ms']:.1f} ms)")
    print(f"anna bench --serve-defaults: decode {bench['serve_defaults_decode_tokens_per_s']:.1f} tok/s, "
          f"TTFT {a.ttft_len} {bench['serve_defaults_ttft_ms']:.1f} ms")
    print(f"LLM:        decode {llm['decode_tokens_per_s']:.1f} tok/s, TTFT {a.ttft_len} {llm['ttft_ms']:.1f} ms, "
          f"constructed in {llm['start_s']:.1f} s (graphs {bool(llm['graphs_captured'])}, "
          f"{int(llm['prefill_graph_steps'])} prefill-graph steps, {int(llm['eager_steps'])} eager steps)")
    print(f"LLM / bench: decode {result['decode_ratio']:.3f}, TTFT {result['ttft_ratio']:.3f} "
          f"(vs prefix caching on: {result['ttft_ratio_vs_prefix_caching']:.3f}); vs --serve-defaults: decode "
          f"{result['decode_ratio_vs_serve_defaults']:.3f}, TTFT {result['ttft_ratio_vs_serve_defaults']:.3f}")
    for spec, v in variants.items():
        print(f"LLM({spec}): decode {v['decode_tokens_per_s']:.1f} tok/s, TTFT {a.ttft_len} {v['ttft_ms']:.1f} ms, "
              f"constructed in {v['start_s']:.1f} s")
    if a.out is not None:
        a.out.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
