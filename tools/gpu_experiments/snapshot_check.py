"""In-pass recurrent-state snapshots on the GPU (fla's chunked rule, captured prefills), against the path that
cuts a prompt at every snapshot boundary: the snapshots' differences, a prefix hit's tokens against a cold
engine's, two prompts in one eager pass, and the TTFT of a 2048-token prompt both ways. The noise floor of
the snapshot differences is the same cut path with another chunk length.

    python tools/gpu_experiments/snapshot_check.py --model-dir tests/qwen35/reference_configs/Qwen3.5-2B
"""

from __future__ import annotations

import argparse
import time

import torch
from anna_core.engine.config import EngineConfig
from anna_core.engine.llm_engine import LLMEngine
from anna_core.engine.model_runner import RunnerConfig
from anna_core.engine.prefix_cache import extend_hashes
from anna_core.engine.sampling_params import SamplingParams
from anna_core.loading import load_model
from anna_core.testing.engine_run import run_to_completion

GREEDY = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True)


def engine(loaded, *, in_pass: bool, caching: bool = True, kv_gib: float = 4.0, interval: int = 256) -> LLMEngine:
    loaded.model.state_checkpoints = in_pass  # read when the engine is built
    cfg = EngineConfig(max_num_seqs=4, max_model_len=4096, max_prefill_tokens=4096, enable_prefix_caching=caching,
                       prompt_cache_size=0, kv_cache_memory_gib=kv_gib, snapshot_memory_mib=2048.0,
                       snapshot_interval=interval)
    e = LLMEngine.from_loaded(loaded, cfg)
    e.runner.setup(RunnerConfig(cuda_graph=True), max_model_len=e.max_model_len, max_num_seqs=4,
                   max_prefill_tokens=e.longest_one_step_prompt())
    return e


def snapshots(e: LLMEngine, prompt: list[int]) -> dict[int, list[torch.Tensor]]:
    bs, iv = e.config.block_size, e.config.snapshot_interval
    hashes = extend_hashes([], lambda a, b: prompt[a:b], len(prompt) // bs, bs)
    out = {}
    for pos in range(iv, len(prompt) + 1, iv):
        idx = e.scheduler.snapshots.get(hashes[pos // bs - 1])
        if idx is not None:
            out[pos] = [t[idx].float().clone() for t in e.snapshot_store.conv + e.snapshot_store.recurrent]
    return out


def compare(name: str, got: dict, want: dict) -> None:
    worst = 0.0
    for pos in sorted(set(want) & set(got)):
        for a, b in zip(got[pos], want[pos]):
            worst = max(worst, ((a - b).abs().max() / b.abs().max().clamp(min=1e-6)).item())
    print(f"{name}: snapshots at {sorted(got)} (cut path: {sorted(want)}); largest |diff| / max|state| {worst:.2e}",
          flush=True)


def tokens(e: LLMEngine, prompts: list[list[int]], tag: str) -> list[list[int]]:
    return [o.token_ids for o in run_to_completion(e, prompts, GREEDY, prefix=tag)]


def ttft(e: LLMEngine, prompt: list[int], tag: str) -> float:
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    e.add_request(tag, prompt, SamplingParams(max_tokens=1, temperature=0.0, ignore_eos=True))
    while e.has_unfinished():
        e.step()
    return (time.perf_counter() - t0) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model-dir", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--kv-gib", type=float, default=4.0)
    args = ap.parse_args()
    loaded = load_model(args.model_dir, device=args.device, dtype=args.dtype, load_format="dummy")
    vocab = loaded.model.vocab_size
    gen = torch.Generator().manual_seed(0)
    draw = lambda n: torch.randint(0, vocab, (n,), generator=gen).tolist()  # noqa: E731
    one, cut, cold = (engine(loaded, in_pass=i, caching=c, kv_gib=args.kv_gib)
                      for i, c in ((True, True), (False, True), (True, False)))
    p = draw(2000)
    t_one, t_cut = tokens(one, [p], "a"), tokens(cut, [p], "a")
    print(f"2000-token prompt: prefill graph steps {one.runner.num_prefill_graph_steps}, eager steps "
          f"{one.runner.num_eager_steps} (cut path: {cut.runner.num_eager_steps} eager); greedy tokens equal: "
          f"{t_one == t_cut}", flush=True)
    compare("one graph pass", snapshots(one, p), snapshots(cut, p))
    # the noise floor: the same cut path with chunks of 512 instead of 256 (only the GEMM and attention
    # shapes differ; in bfloat16 that alone moves the states)
    cut512 = engine(loaded, in_pass=False, kv_gib=args.kv_gib, interval=512)
    tokens(cut512, [p], "n")
    compare("noise floor: cut at 512 vs cut at 256", snapshots(cut512, p), snapshots(cut, p))
    del cut512
    q = p[:1100] + draw(300)
    [hit] = run_to_completion(one, [q], GREEDY, prefix="hit")
    want = tokens(cold, [q], "c")[0]
    agree = next((i for i, (x, y) in enumerate(zip(hit.token_ids, want)) if x != y), len(want))
    print(f"prefix hit: {hit.num_cached_tokens} cached tokens, first {agree}/{len(want)} greedy tokens equal a cold "
          f"engine's", flush=True)
    [old] = run_to_completion(cut, [q], GREEDY, prefix="hit")  # the same hit on the cut path, for comparison
    agree_old = next((i for i, (x, y) in enumerate(zip(old.token_ids, want)) if x != y), len(want))
    print(f"the same hit on the cut path: {old.num_cached_tokens} cached tokens, first {agree_old}/{len(want)} "
          f"equal the cold engine's; in-pass and cut hits agree on the first "
          f"{next((i for i, (x, y) in enumerate(zip(hit.token_ids, old.token_ids)) if x != y), len(want))}", flush=True)
    a, b = draw(1000), draw(700)
    tokens(one, [a, b], "two")
    tokens(cut, [a], "ca")
    tokens(cut, [b], "cb")
    compare("two prompts, one eager pass (1000 tokens)", snapshots(one, a), snapshots(cut, a))
    compare("two prompts, one eager pass (700 tokens)", snapshots(one, b), snapshots(cut, b))
    for label, e in (("in-pass snapshots (graph)", one), ("cut at every boundary (eager)", cut)):
        times = [ttft(e, draw(2048), f"t{label[:3]}{i}") for i in range(4)]
        print(f"TTFT 2048 tokens, prefix caching on, {label}: {', '.join(f'{t:.1f}' for t in times)} ms", flush=True)


if __name__ == "__main__":
    main()
