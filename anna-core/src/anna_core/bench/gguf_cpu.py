"""Default-model CPU benchmark: Anna vs HF transformers on the same GGUF, side by side.

    python -m anna_core.bench.gguf_cpu [--gguf PATH] [--new-tokens 64] [--threads 2]
        [--weight-quant auto,none] [--repeats 3] [--no-hf]

Times, in one process: load (file -> ready to generate, tokenizer included) and greedy decode
tokens/s for a fixed chat prompt, for Anna (``anna_core.LLM``, once per ``--weight-quant`` mode: ``auto``
keeps the GGUF's quantized matrices quantized, ``none`` dequantizes them to float32) and for HF
transformers (``AutoModelForCausalLM.from_pretrained(gguf_file=...)``, float32, ``generate``). The Anna
modes' timed runs are interleaved (``--repeats`` rounds, medians reported: on a shared machine one run
says little). Each mode reports the weight bytes one decode step streams
(:func:`anna_core.bench.roofline.weight_bytes`). Without ``--gguf`` it uses the embedded default model.
Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path
from typing import Any

import torch

PROMPT = [{"role": "user", "content": "What is the capital of France? Answer in one sentence, then explain why."}]


def load_anna(gguf: Path, weight_quant: str) -> tuple[Any, float]:
    from anna_core import LLM, SamplingParams

    t0 = time.perf_counter()
    llm = LLM(gguf, device="cpu", dtype="fp32", enable_prefix_caching=False, prompt_cache_size=0,
              weight_quant=weight_quant)
    load_s = time.perf_counter() - t0
    llm.chat(PROMPT, SamplingParams(temperature=0, max_tokens=2))  # warm-up
    return llm, load_s


def time_anna(llm: Any, new_tokens: int) -> dict[str, Any]:
    from anna_core import SamplingParams

    params = SamplingParams(temperature=0, max_tokens=new_tokens, ignore_eos=True)
    t0 = time.perf_counter()
    [out] = llm.chat(PROMPT, params)
    total_s = time.perf_counter() - t0
    ttft = out.metrics.get("first_token", 0.0) - out.metrics.get("arrival", 0.0)
    decode_s = max(total_s - ttft, 1e-9)
    return {"ttft_s": ttft, "decode_tok_s": (len(out.token_ids) - 1) / decode_s, "tokens": len(out.token_ids),
            "text": out.text[:80]}


def bench_anna(gguf: Path, new_tokens: int, modes: list[str] | None = None, repeats: int = 1) -> dict[str, Any]:
    """Per ``--weight-quant`` mode: load time, medians of ``repeats`` interleaved decode runs, every run's
    tok/s and the weight bytes a decode step streams."""
    import statistics

    from anna_core.bench.roofline import weight_bytes

    modes = modes or ["auto"]
    loaded = {m: load_anna(gguf, m) for m in modes}
    runs: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
    for _ in range(repeats):
        for m in modes:
            runs[m].append(time_anna(loaded[m][0], new_tokens))
    report = {}
    for m in modes:
        llm, load_s = loaded[m]
        tok_s = [r["decode_tok_s"] for r in runs[m]]
        report[m] = {"load_s": round(load_s, 2), "ttft_s": round(statistics.median(r["ttft_s"] for r in runs[m]), 3),
                     "decode_tok_s": round(statistics.median(tok_s), 2), "runs_tok_s": [round(t, 2) for t in tok_s],
                     "tokens": runs[m][-1]["tokens"], "weight_bytes_per_token": weight_bytes(llm.loaded.model),
                     "text": runs[m][-1]["text"]}
    return report


def bench_hf(gguf: Path, new_tokens: int) -> dict[str, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    t0 = time.perf_counter()
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    load_s = time.perf_counter() - t0
    ids = tok.apply_chat_template(PROMPT, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    kwargs = {"do_sample": False, "eos_token_id": None, "pad_token_id": tok.eos_token_id}
    with torch.inference_mode():
        model.generate(**ids, max_new_tokens=2, min_new_tokens=2, **kwargs)  # warm-up
        t0 = time.perf_counter()
        model.generate(**ids, max_new_tokens=1, min_new_tokens=1, **kwargs)
        ttft = time.perf_counter() - t0
        t0 = time.perf_counter()
        out = model.generate(**ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens, **kwargs)
        total_s = time.perf_counter() - t0
    n = out.shape[1] - ids["input_ids"].shape[1]
    return {"load_s": round(load_s, 2), "ttft_s": round(ttft, 3),
            "decode_tok_s": round((n - 1) / max(total_s - ttft, 1e-9), 2), "tokens": int(n)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gguf", type=Path, default=None, help="GGUF file (default: the embedded default model)")
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--weight-quant", default="auto,none",
                    help="comma-separated --weight-quant modes to time (auto: kept quantized; none: dequantized)")
    ap.add_argument("--repeats", type=int, default=3, help="interleaved timed runs per mode (medians reported)")
    ap.add_argument("--no-hf", action="store_true", help="skip HF transformers")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    gguf = args.gguf
    if gguf is None:
        from anna_core.default_model import resolve_default_model

        gguf, _ = resolve_default_model()
    report = {"gguf": str(gguf), "machine": platform.processor() or platform.machine(),
              "threads": torch.get_num_threads(), "torch": torch.__version__,
              "anna": bench_anna(Path(gguf), args.new_tokens, args.weight_quant.split(","), args.repeats)}
    if not args.no_hf:
        report["hf"] = bench_hf(Path(gguf), args.new_tokens)
        report["decode_speedup"] = {m: round(r["decode_tok_s"] / report["hf"]["decode_tok_s"], 2)
                                    for m, r in report["anna"].items()}
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
