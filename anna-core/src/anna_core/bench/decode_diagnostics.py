"""The optional looks inside a benchmark's decode step: the kernel timeline of its captured graph
(``--timeline``) and a per-component profile of eager decode steps (``--profile``).

Both run after the timed runs, on the same engine; a diagnostic that cannot run says why in the report and the
other measurements stand.
"""

from __future__ import annotations

from typing import Any

from anna_core.bench.bench_settings import BenchSettings
from anna_core.bench.timed_runs import random_prompts
from anna_core.errors import AnnaError


def decode_timeline(engine: Any, s: BenchSettings, vocab: int) -> dict[str, Any]:
    """``{"timeline": rows, "timeline_source": "served" | "padded"}`` of the captured graph this run's
    decode steps replayed (the logits graph with ``--logprobs``): traced over steps the engine serves
    (:func:`~anna_core.bench.timeline.served_timeline`), or over back-to-back replays with padding
    rows when the served trace cannot be split (``timeline_served_error`` says why); or
    ``{"timeline_error": why}`` (no CUDA graph, or a trace that does not split into replays): the
    other measurements stand either way."""
    from anna_core.bench.timeline import graph_timeline

    graphs = engine.runner.graphs
    if graphs is None or engine.runner.device.type != "cuda" or graphs.bucket_for(s.batch_size) is None:
        return {"timeline_error": "needs a CUDA device with captured decode graphs"}
    mode = "logits" if s.logprobs is not None else "greedy"
    try:
        padded = graph_timeline(graphs, graphs.bucket_for(s.batch_size), engine.runner.accel, mode)
    except AnnaError as exc:
        return {"timeline_error": str(exc)}
    try:
        served = served_decode_timeline(engine, s, vocab, [r["name"] for r in padded])
    except AnnaError as exc:
        return {"timeline": padded, "timeline_source": "padded", "timeline_served_error": str(exc)}
    return {"timeline": served, "timeline_source": "served"}


SERVED_TIMELINE_STEPS = 12
"""Decode steps ``--timeline`` traces while the engine serves a batch."""


def served_decode_timeline(engine: Any, s: BenchSettings, vocab: int, names: list[str]) -> list[dict[str, Any]]:
    """Trace :data:`SERVED_TIMELINE_STEPS` served decode steps of a fresh batch and split out the captured
    step ``names``. The prompts have the decode phase's mean context (``input_len + output_len / 2``) as far
    as the benchmark's length limit allows; tracing starts once every request has its first token (the
    prefill may take several steps) and one more step is in flight, so every traced step decodes the
    whole batch.

    Raises:
        AnnaError: the prefill did not finish within its step bound, or a request failed.
    """
    from anna_core.bench.timeline import served_timeline
    from anna_core.engine.sampling_params import SamplingParams

    steps = SERVED_TIMELINE_STEPS
    total = s.input_len + s.output_len
    prompt_len = s.input_len + s.output_len // 2
    # the prefill budget is input_len tokens per request and step: longer prompts take several steps and
    # the requests may get their first token up to that many steps apart, so each asks for that many more
    for _ in range(2):
        prefill_steps = -(-prompt_len // s.input_len)
        max_tokens = min(steps + 8 + prefill_steps, total - 1)
        prompt_len = max(1, min(prompt_len, total - max_tokens))
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True, logprobs=s.logprobs)
    waiting = {f"timeline-{i}" for i in range(s.batch_size)}
    try:
        for i, p in enumerate(random_prompts(vocab, s.batch_size, prompt_len, s.seed * 1000 + 777)):
            engine.add_request(f"timeline-{i}", p, params)
        bound = 8 + 2 * prefill_steps
        for _ in range(bound):
            for o in engine.step():
                if o.error:
                    raise AnnaError(f"timeline request {o.request_id} failed: {o.error}")
                if o.delta_token_ids:
                    waiting.discard(o.request_id)
            if not waiting:
                break
        if waiting:
            raise AnnaError(f"{len(waiting)} timeline requests had no token after {bound} steps")
        engine.step()  # the next decode step in flight (asynchronous scheduling)
        return served_timeline(engine.step, steps, names, engine.runner.accel.synchronize)
    finally:
        while engine.has_unfinished():
            engine.step()


def profile_decode(engine: Any, vocab: int, s: BenchSettings) -> dict[str, float]:
    """Per-component ms of ``s.profile_steps`` eager decode steps at this batch size (after a prefill)."""
    from anna_core.bench.profile import profile_steps
    from anna_core.engine.sampling_params import SamplingParams

    params = SamplingParams(max_tokens=s.profile_steps + 2, temperature=0.0, ignore_eos=True)
    for i, p in enumerate(random_prompts(vocab, s.batch_size, s.input_len, 4242)):
        engine.add_request(f"prof-{i}", p, params)
    engine.step()  # prefill, not profiled

    def run() -> int:
        n = 0
        while engine.has_unfinished() and n < s.profile_steps:
            engine.step()
            n += 1
        return n

    try:
        return profile_steps(engine.runner, run)
    finally:
        while engine.has_unfinished():
            engine.step()
