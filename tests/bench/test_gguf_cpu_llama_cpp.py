"""``python -m anna_core.bench.gguf_cpu --llama-cpp``: refused at once without llama-cpp-python; with it, the
llama.cpp runs decode the same prompt ids greedily with EOS banned and time the decode only (a fake llama_cpp
module stands in: the real one is never a dependency and never built in CI)."""

from __future__ import annotations

import builtins
import math
from pathlib import Path

import numpy as np
import pytest
from anna_core.bench import gguf_cpu

EOS = 2
VOCAB = 8


class FakeLlama:
    """llama_cpp.Llama's surface the bench uses. Its model prefers EOS after every token, so a run that did not
    ban it would stop (the bench raises); each decode step takes ``step_s`` on the fake clock."""

    instances: list[FakeLlama] = []

    def __init__(self, model_path: str, n_threads: int, n_threads_batch: int, n_ctx: int, verbose: bool):
        self.kwargs = {"model_path": model_path, "n_threads": n_threads, "n_threads_batch": n_threads_batch,
                       "n_ctx": n_ctx, "verbose": verbose}
        self.resets = 0
        self.prompts: list[list[int]] = []
        FakeLlama.instances.append(self)

    def token_eos(self) -> int:
        return EOS

    def reset(self) -> None:
        self.resets += 1

    def generate(self, tokens, temp, reset, logits_processor):
        assert temp == 0.0 and reset
        self.prompts.append(list(tokens))
        ids = list(tokens)
        while True:
            scores = np.arange(VOCAB, dtype=np.float32)
            scores[EOS] = 100.0  # EOS wins unless banned
            for processor in logits_processor:
                scores = processor(np.array(ids, dtype=np.intc), scores)
            token = int(np.argmax(scores))
            ids.append(token)
            yield token


class _Module:
    __version__ = "0.0-fake"
    Llama = FakeLlama
    LogitsProcessorList = list


def test_llama_cpp_missing_is_refused_before_anything_loads(monkeypatch, capsys):
    real_import = builtins.__import__

    def no_llama_cpp(name, *args, **kwargs):
        if name == "llama_cpp":
            raise ImportError("No module named 'llama_cpp'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_llama_cpp)
    monkeypatch.setattr(gguf_cpu, "bench_anna", lambda *a, **k: pytest.fail("Anna loaded before the check"))
    with pytest.raises(gguf_cpu.LlamaCppUnavailable, match="tools/build_llama_cpp.sh"):
        gguf_cpu.import_llama_cpp()
    with pytest.raises(SystemExit) as exc:
        gguf_cpu.main(["--llama-cpp", "--no-hf"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "llama-cpp-python" in err and "bash tools/build_llama_cpp.sh" in err


def test_llama_cpp_run_bans_eos_and_times_decode_only(monkeypatch):
    FakeLlama.instances.clear()
    clock = iter(float(t) for t in [0.0, 5.0, 5.5, 6.0, 6.5, 7.0])  # start, then one reading per token
    monkeypatch.setattr(gguf_cpu.time, "perf_counter", lambda: next(clock))
    bench = gguf_cpu.LlamaCppBench.__new__(gguf_cpu.LlamaCppBench)
    bench.module, bench.threads, bench.version = _Module(), 2, "0.0-fake"
    bench.llm, bench.eos, bench.load_s = FakeLlama("m.gguf", 2, 2, 64, False), EOS, 0.0
    result = bench.run([1, 5, 3], new_tokens=5)
    assert result["tokens"] == 5
    assert result["ttft_s"] == 5.0  # prompt + first token: not in the decode figure
    assert math.isclose(result["decode_tok_s"], 4 / 2.0)  # 4 tokens after the first, in 2 s
    llm = FakeLlama.instances[-1]
    assert llm.prompts == [[1, 5, 3]] and llm.resets == 1


def test_llama_cpp_is_built_with_the_threads_and_interleaved(monkeypatch, tmp_path: Path):
    FakeLlama.instances.clear()
    bench = gguf_cpu.LlamaCppBench(_Module(), tmp_path / "m.gguf", threads=2, n_ctx=512)
    assert FakeLlama.instances[0].kwargs == {"model_path": str(tmp_path / "m.gguf"), "n_threads": 2,
                                             "n_threads_batch": 2, "n_ctx": 512, "verbose": False}
    order: list[str] = []

    def fake_time_anna(llm, new_tokens):
        order.append(f"anna:{llm}")
        return {"ttft_s": 0.1, "decode_tok_s": 50.0, "tokens": new_tokens, "text": "", "prompt_token_ids": [7, 8]}

    real_run = bench.run

    def run(prompt_ids, new_tokens):
        order.append("llama.cpp")
        return real_run(prompt_ids, new_tokens)

    monkeypatch.setattr(bench, "run", run)
    monkeypatch.setattr(gguf_cpu, "time_anna", fake_time_anna)
    monkeypatch.setattr("anna_core.bench.roofline.weight_bytes", lambda model: 0)
    report = _bench(monkeypatch, bench)
    assert order == ["anna:auto", "anna:none", "llama.cpp"] * 2
    assert FakeLlama.instances[0].prompts == [[7, 8], [7, 8]]  # Anna's prompt ids
    assert report["llama.cpp"]["tokens"] == 4 and report["llama.cpp"]["threads"] == 2
    assert len(report["llama.cpp"]["runs_tok_s"]) == 2


def _bench(monkeypatch, bench):
    class Loaded:  # what bench_anna reads of an LLM: llm.loaded.model
        model = None

    class FakeLLM(str):
        loaded = Loaded()

    monkeypatch.setattr(gguf_cpu, "load_anna", lambda gguf, mode: (FakeLLM(mode), 1.0))
    return gguf_cpu.bench_anna(Path("m.gguf"), 4, ["auto", "none"], repeats=2, llama_cpp=bench)
