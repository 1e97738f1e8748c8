"""Default-model CPU benchmark: Anna vs HF transformers (and optionally llama.cpp) on the same GGUF, side by side.

    python -m anna_core.bench.gguf_cpu [--gguf PATH] [--new-tokens 64] [--threads 2]
        [--weight-quant auto,none,auto+compile] [--repeats 3] [--no-hf] [--llama-cpp]

Times, in one process: load (file -> ready to generate, tokenizer included) and greedy decode
tokens/s for a fixed chat prompt, for Anna (``anna_core.LLM``, once per ``--weight-quant`` mode: ``auto``
keeps the GGUF's quantized matrices quantized, ``none`` dequantizes them to float32; ``+compile`` adds the
runner's ``compile_mode="default"``: a tied ``Q8_0`` head computed from its codes and, for a Llama model, the
one-sequence decode step as one compiled function, both compiled at load: ``load_s`` includes inductor's compile,
minutes the first time, seconds once its on-disk cache holds it) and for HF
transformers (``AutoModelForCausalLM.from_pretrained(gguf_file=...)``, float32, ``generate``). The Anna
modes' timed runs are interleaved (``--repeats`` rounds, medians reported: on a shared machine one run
says little). Each mode reports the weight bytes one decode step streams
(:func:`anna_core.bench.roofline.weight_bytes`). Without ``--gguf`` it uses the embedded default model.

``--llama-cpp`` adds llama.cpp (llama-cpp-python, never a dependency of Anna: build it with
``bash tools/build_llama_cpp.sh``) decoding the same GGUF from the same prompt ids with ``--threads`` threads,
greedy, EOS banned by a logit bias so it decodes the full length, decode time only (first token to last),
its runs interleaved with Anna's. Without llama_cpp installed the option is refused before anything loads.
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


def load_anna(gguf: Path, mode: str) -> tuple[Any, float]:
    """An ``LLM`` for ``mode``: a ``--weight-quant`` value, with ``+compile`` the runner's ``compile_mode``
    ``default`` (on the CPU: a tied Q8_0 head computed from its int8 codes in one compiled loop, and a Llama
    model's one-sequence decode step compiled whole)."""
    from anna_core import LLM, SamplingParams

    weight_quant, _, extra = mode.partition("+")
    if extra not in ("", "compile"):
        raise ValueError(f"mode {mode!r}: a --weight-quant value, optionally with +compile")
    t0 = time.perf_counter()
    llm = LLM(gguf, device="cpu", dtype="fp32", enable_prefix_caching=False, prompt_cache_size=0,
              weight_quant=weight_quant, compile_mode="default" if extra else "none")
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
            "text": out.text[:80], "prompt_token_ids": list(out.prompt_token_ids)}


class LlamaCppUnavailable(RuntimeError):
    """``--llama-cpp`` without llama-cpp-python installed."""


LLAMA_CPP_BUILD = "bash tools/build_llama_cpp.sh"


def import_llama_cpp() -> Any:
    """The ``llama_cpp`` module.

    Raises:
        LlamaCppUnavailable: it is not installed (the message gives the build command).
    """
    try:
        import llama_cpp
    except ImportError as exc:
        raise LlamaCppUnavailable(
            f"--llama-cpp needs llama-cpp-python, which is not installed ({exc}); it is never a dependency of Anna: "
            f"build it from its sdist into a cached wheel and install that with `{LLAMA_CPP_BUILD}`") from exc
    return llama_cpp


class LlamaCppBench:
    """llama.cpp decoding a GGUF through llama-cpp-python: greedy, EOS banned, decode time only.

    Args:
        module: the ``llama_cpp`` module (:func:`import_llama_cpp`; tests pass a fake).
        gguf: the model file.
        threads: llama.cpp's threads for decode and prompt (``n_threads``, ``n_threads_batch``).
        n_ctx: its context length (prompt + new tokens must fit).
    """

    def __init__(self, module: Any, gguf: Path, threads: int, n_ctx: int = 1024):
        self.module = module
        self.threads = threads
        self.version = module.__version__
        t0 = time.perf_counter()
        self.llm = module.Llama(model_path=str(gguf), n_threads=threads, n_threads_batch=threads, n_ctx=n_ctx,
                                verbose=False)
        self.load_s = time.perf_counter() - t0
        self.eos = int(self.llm.token_eos())

    def ban_eos(self, input_ids: Any, scores: Any) -> Any:
        """The logit bias: EOS at minus infinity, so every run decodes its full length."""
        scores[self.eos] = float("-inf")
        return scores

    def run(self, prompt_ids: list[int], new_tokens: int) -> dict[str, Any]:
        """Decode ``new_tokens`` greedy tokens after ``prompt_ids`` (no prefix reuse: the context is reset);
        ``decode_tok_s`` counts the tokens after the first over the time from the first to the last."""
        self.llm.reset()  # n_tokens = 0: generate's prefix match finds nothing, the prompt is evaluated afresh
        processors = self.module.LogitsProcessorList([self.ban_eos])
        t0 = time.perf_counter()
        first = last = t0
        tokens: list[int] = []
        for token in self.llm.generate(prompt_ids, temp=0.0, reset=True, logits_processor=processors):
            last = time.perf_counter()
            if not tokens:
                first = last
            tokens.append(int(token))
            if len(tokens) >= new_tokens:
                break
        if self.eos in tokens:
            raise RuntimeError("llama.cpp sampled EOS although its logit was banned")
        return {"ttft_s": first - t0, "decode_tok_s": (len(tokens) - 1) / max(last - first, 1e-9),
                "tokens": len(tokens)}


def bench_anna(gguf: Path, new_tokens: int, modes: list[str] | None = None, repeats: int = 1,
               llama_cpp: LlamaCppBench | None = None) -> dict[str, Any]:
    """Per ``--weight-quant`` mode: load time, medians of ``repeats`` interleaved decode runs, every run's
    tok/s and the weight bytes a decode step streams; with ``llama_cpp``, its runs interleaved with them
    (from the prompt ids Anna's warm-up tokenized) under ``"llama.cpp"``."""
    import statistics

    from anna_core.bench.roofline import weight_bytes

    modes = modes or ["auto"]
    loaded = {m: load_anna(gguf, m) for m in modes}
    runs: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
    llama_runs: list[dict[str, Any]] = []
    for _ in range(repeats):
        for m in modes:
            runs[m].append(time_anna(loaded[m][0], new_tokens))
        if llama_cpp is not None:
            llama_runs.append(llama_cpp.run(runs[modes[0]][-1]["prompt_token_ids"], new_tokens))
    report = {}
    if llama_cpp is not None:
        tok_s = [r["decode_tok_s"] for r in llama_runs]
        report["llama.cpp"] = {"load_s": round(llama_cpp.load_s, 2), "threads": llama_cpp.threads,
                               "ttft_s": round(statistics.median(r["ttft_s"] for r in llama_runs), 3),
                               "decode_tok_s": round(statistics.median(tok_s), 2),
                               "runs_tok_s": [round(t, 2) for t in tok_s], "tokens": llama_runs[-1]["tokens"],
                               "version": llama_cpp.version}
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
                    help="comma-separated --weight-quant modes to time (auto: kept quantized; none: dequantized; "
                         "auto+compile: kept quantized, the Q8_0 tied head from its codes and the batch-1 decode step, "
                         "compiled)")
    ap.add_argument("--repeats", type=int, default=3, help="interleaved timed runs per mode (medians reported)")
    ap.add_argument("--no-hf", action="store_true", help="skip HF transformers")
    ap.add_argument("--llama-cpp", action="store_true",
                    help=f"also time llama.cpp (llama-cpp-python; build it with `{LLAMA_CPP_BUILD}`), interleaved")
    args = ap.parse_args(argv)
    llama_cpp_module = None
    if args.llama_cpp:
        try:
            llama_cpp_module = import_llama_cpp()  # before anything loads: a missing module fails at once
        except LlamaCppUnavailable as exc:
            ap.error(str(exc))
    if args.threads:
        torch.set_num_threads(args.threads)
    gguf = args.gguf
    if gguf is None:
        from anna_core.default_model import resolve_default_model

        gguf, _ = resolve_default_model()
    llama_cpp = None
    if llama_cpp_module is not None:
        llama_cpp = LlamaCppBench(llama_cpp_module, Path(gguf), torch.get_num_threads(),
                                  n_ctx=max(1024, 256 + args.new_tokens))
    anna = bench_anna(Path(gguf), args.new_tokens, args.weight_quant.split(","), args.repeats, llama_cpp)
    report = {"gguf": str(gguf), "machine": platform.processor() or platform.machine(),
              "threads": torch.get_num_threads(), "torch": torch.__version__}
    if llama_cpp is not None:
        report["llama_cpp"] = anna.pop("llama.cpp")
        report["decode_vs_llama_cpp"] = {m: round(r["decode_tok_s"] / report["llama_cpp"]["decode_tok_s"], 2)
                                         for m, r in anna.items()}
    report["anna"] = anna
    if not args.no_hf:
        report["hf"] = bench_hf(Path(gguf), args.new_tokens)
        report["decode_speedup"] = {m: round(r["decode_tok_s"] / report["hf"]["decode_tok_s"], 2)
                                    for m, r in report["anna"].items()}
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
