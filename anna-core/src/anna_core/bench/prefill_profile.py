"""``python -m anna_core.bench.prefill_profile``: where a prefill's time goes (TTFT diagnosis).

Loads one model with random weights, sets the engine up as ``anna bench`` does, then

1. times single-prompt prefills of several lengths, each length twice (a first call that costs more
   than the second means compiling or autotuning; cost not proportional to the length means host
   work), with the device synchronised around each step;
2. profiles one prefill of the longest length under ``torch.profiler`` and prints the device
   kernels and the host ops that cost most, plus the device-busy fraction of the step.

3. with ``--decode-batch N``, runs ``N`` streams of graph-replayed decode steps under ``cProfile``
   and prints the host functions that cost most per step (the engine's Python between replays);
4. with ``--host-prefill``, runs one more prefill of the longest length under ``cProfile`` and prints
   the host functions that cost most (where a host-bound prefill spends its Python time);
5. with ``--host-issue``, times the host's issue of one eager prefill's forward pass and whether it
   waits for the device inside (:func:`host_issue`).

A single prompt of at most 2048 tokens replays a captured prefill graph on a GPU
(:mod:`anna_core.engine.prefill_graphs`): its TTFT is device time, and it makes no eager forward pass.

Run with ``TRITON_PRINT_AUTOTUNING=1`` to see every autotuning event in the log.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from torch.autograd import DeviceType

from anna_core.bench.engine_bench import (
    BenchSettings,
    build_engine,
    random_prompts,
    timed_run,
)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-dir", type=Path, required=True)
    ap.add_argument("--lengths", default="512,2048,1000,2048,512,1000")
    ap.add_argument("--rows", type=int, default=18)
    ap.add_argument("--decode-batch", type=int, default=0)
    ap.add_argument("--host-prefill", action="store_true", help="cProfile one prefill of the longest length")
    ap.add_argument("--host-issue", action="store_true",
                    help="time the host's issue of one prefill's forward pass (device idle, then kept busy)")
    args = ap.parse_args(argv)
    from anna_core.loading import load_model

    lengths = [int(x) for x in args.lengths.split(",")]
    loaded = load_model(args.model_dir, device="auto", dtype="bf16", load_format="dummy")
    s = BenchSettings(model_dir=args.model_dir, batch_size=1, input_len=max(lengths), output_len=2)
    t = time.perf_counter()
    engine = build_engine(loaded, s)
    print(f"setup {time.perf_counter() - t:.1f} s", flush=True)
    vocab = int(loaded.model.vocab_size)
    for i, n in enumerate(lengths):
        torch.cuda.synchronize()
        res = timed_run(engine, random_prompts(vocab, 1, n, 77 + i), 2, f"len{i}")
        print(f"prefill {n:5d} tokens: TTFT {res['ttft_s'] * 1e3:8.1f} ms  (eager steps so far "
              f"{engine.runner.num_eager_steps})", flush=True)
    from torch.profiler import ProfilerActivity, profile

    n = max(lengths)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t = time.perf_counter()
        res = timed_run(engine, random_prompts(vocab, 1, n, 999), 2, "prof")
        torch.cuda.synchronize()
        wall = time.perf_counter() - t
    events = prof.key_averages()
    # kernels, copies and fills only: an op's row also carries its kernels' time
    dev_total = sum(e.self_device_time_total for e in events if e.device_type == DeviceType.CUDA) / 1e3
    print(f"\nprofiled prefill of {n}: TTFT {res['ttft_s'] * 1e3:.1f} ms (profiler on), wall {wall * 1e3:.1f} ms, "
          f"device kernel time {dev_total:.1f} ms", flush=True)
    print(events.table(sort_by="self_device_time_total", row_limit=args.rows), flush=True)
    print(events.table(sort_by="self_cpu_time_total", row_limit=args.rows), flush=True)
    if args.host_prefill:
        host_prefill_profile(engine, vocab, n, args.rows)
    if args.host_issue:
        host_issue(engine, vocab, n)
    if args.decode_batch:
        host_profile(loaded, args.model_dir, args.decode_batch, args.rows)
    return 0


def host_issue(engine, vocab: int, length: int, busy_ms: float = 400.0) -> None:
    """The host's time to issue one ``length``-token prefill's forward pass (model call entered to
    returned), twice: with the device idle, then with ``busy_ms`` of device sleep queued first. With the
    device idle it is the host's work plus any wait at a host sync; TTFT cannot be shorter. If the
    second pass takes longer than the first by more than half the sleep, it waited for the device
    inside (a host sync; the eager prefill of several prompts builds fla's chunk indices from a host
    copy of ``cu_seqlens``). A prefill that replays a captured graph makes no eager forward pass."""
    model = engine.runner.model
    spans: list[float] = []
    pre = model.register_forward_pre_hook(lambda *a: spans.append(time.perf_counter()))
    post = model.register_forward_hook(lambda *a: spans.append(time.perf_counter()))
    idle = None
    try:
        for busy in (False, True):
            spans.clear()
            torch.cuda.synchronize()
            if busy:
                torch.cuda._sleep(int(busy_ms * 1.98e6))  # cycles at an H200's 1980 MHz (longer when clocked lower)
            res = timed_run(engine, random_prompts(vocab, 1, length, 777 + busy), 2, f"issue{int(busy)}")
            if len(spans) < 2:
                print(f"a {length}-token prefill made no eager forward pass (it replayed a captured prefill graph): "
                      f"TTFT {res['ttft_s'] * 1e3:.1f} ms{' after the device sleep' if busy else ''}", flush=True)
                continue
            fwd = (spans[1] - spans[0]) * 1e3
            if not busy:
                idle = fwd
                print(f"host issue of a {length}-token prefill's forward pass, device idle: {fwd:.1f} ms "
                      f"(TTFT {res['ttft_s'] * 1e3:.1f} ms)", flush=True)
            elif idle is not None:
                waited = fwd - idle > 0.5 * busy_ms
                print(f"the same with {busy_ms:.0f} ms of device sleep queued first: {fwd:.1f} ms (the forward pass "
                      f"{'waited for the device inside' if waited else 'did not wait for the device'})", flush=True)
    finally:
        pre.remove()
        post.remove()


def host_prefill_profile(engine, vocab: int, length: int, rows: int) -> None:
    """cProfile of one ``length``-token prefill (and its first token), sorted by own time, then by
    cumulative time (which of Anna's or fla's functions the host time sits under)."""
    import cProfile
    import pstats

    prof = cProfile.Profile()
    torch.cuda.synchronize()
    prof.enable()
    res = timed_run(engine, random_prompts(vocab, 1, length, 4242), 2, "hostprefill")
    prof.disable()
    print(f"\nhost profile of one {length}-token prefill: TTFT {res['ttft_s'] * 1e3:.1f} ms (cProfile on)", flush=True)
    stats = pstats.Stats(prof)
    stats.sort_stats("tottime").print_stats(rows)
    stats.sort_stats("cumulative").print_stats(rows)


def host_profile(loaded, model_dir: Path, batch: int, rows: int, steps: int = 48) -> None:
    """cProfile of ``steps`` decode steps of ``batch`` streams (graphs on), printed per step."""
    import cProfile
    import pstats

    from anna_core.engine.sampling_params import SamplingParams

    s = BenchSettings(model_dir=model_dir, batch_size=batch, input_len=128, output_len=steps + 8)
    engine = build_engine(loaded, s)
    params = SamplingParams(max_tokens=steps + 8, temperature=0.0, ignore_eos=True)
    for i, p in enumerate(random_prompts(int(loaded.model.vocab_size), batch, 128, 5)):
        engine.add_request(f"host-{i}", p, params)
    for _ in range(4):
        engine.step()
    prof = cProfile.Profile()
    torch.cuda.synchronize()
    t = time.perf_counter()
    prof.enable()
    for _ in range(steps):
        engine.step()
    prof.disable()
    wall = (time.perf_counter() - t) / steps
    print(f"\nhost profile: {batch} streams, {wall * 1e3:.2f} ms per decode step (graph steps "
          f"{engine.runner.num_graph_steps})", flush=True)
    pstats.Stats(prof).sort_stats("tottime").print_stats(rows)


if __name__ == "__main__":
    raise SystemExit(main())
