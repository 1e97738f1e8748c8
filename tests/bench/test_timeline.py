"""The graph-replay timeline's trace parsing and per-kernel accounting (no GPU: synthetic traces)."""

from __future__ import annotations

import pytest
from anna_core.bench.timeline import (
    KernelSpan,
    by_kernel,
    exposed_times,
    find_steps,
    format_timeline,
    kernels_from_trace,
    split_replays,
    step_table,
)
from anna_core.errors import AnnaError


def _trace(events):
    return {"traceEvents": events}


def _k(name, ts, dur, grid=(1, 1, 1)):
    return {"cat": "kernel", "name": name, "ts": ts, "dur": dur,
            "args": {"grid": list(grid), "block": [64, 1, 1], "registers per thread": 40,
                     "est. achieved occupancy %": 50}}


def test_kernels_from_trace_keeps_kernels_only_sorted():
    trace = _trace([_k("b", 10.0, 2.0), {"cat": "cuda_runtime", "name": "cudaGraphLaunch", "ts": 0, "dur": 5},
                    _k("a", 1.0, 3.0, (4, 2, 1)), {"cat": "gpu_memcpy", "name": "Memcpy HtoD", "ts": 0, "dur": 1}])
    spans = kernels_from_trace(trace)
    assert [s.name for s in spans] == ["a", "b"]
    assert spans[0].grid == (4, 2, 1) and spans[0].block == (64, 1, 1) and spans[0].registers == 40
    assert spans[0].end == 4.0


def test_split_replays_checks_counts_and_names():
    spans = [KernelSpan(n, float(i), 1.0) for i, n in enumerate("abcabc")]
    steps = split_replays(spans, 2)
    assert [[s.name for s in st] for st in steps] == [["a", "b", "c"], ["a", "b", "c"]]
    with pytest.raises(AnnaError, match="do not split"):
        split_replays(spans, 4)
    with pytest.raises(AnnaError, match="no device kernels"):
        split_replays([], 3)
    with pytest.raises(AnnaError, match="different kernels"):
        split_replays([KernelSpan(n, float(i), 1.0) for i, n in enumerate("abcacb")], 2)


def test_exposed_time_counts_only_what_extends_the_step():
    # a: 0-10; b overlaps a (PDL) and ends at 12; c lies inside b; d starts after a 3 us gap
    step = [KernelSpan("a", 0.0, 10.0), KernelSpan("b", 8.0, 4.0), KernelSpan("c", 9.0, 2.0),
            KernelSpan("d", 15.0, 5.0)]
    assert exposed_times([step]) == [[10.0, 2.0, 0.0, 8.0]]  # the gap before d is charged to d
    assert sum(exposed_times([step])[0]) == step[-1].end - step[0].start


def test_step_table_medians_over_replays_without_the_first():
    steps = [[KernelSpan("a", 0.0, 100.0), KernelSpan("b", 100.0, 1.0)],  # cold first replay
             [KernelSpan("a", 101.0, 4.0), KernelSpan("b", 105.0, 2.0)],
             [KernelSpan("a", 107.0, 6.0), KernelSpan("b", 113.0, 2.0)],
             [KernelSpan("a", 115.0, 5.0), KernelSpan("b", 120.0, 3.0)]]
    rows = step_table(steps)
    assert [r["name"] for r in rows] == ["a", "b"]
    assert rows[0]["dur_us"] == 5.0 and rows[1]["dur_us"] == 2.0
    assert rows[0]["exposed_us"] == 5.0  # 4, 6, 5 (each starts at the previous replay's end)
    summary = by_kernel(rows + [dict(rows[1], index=2)])
    assert summary[0]["name"] == "a" and summary[1]["launches"] == 2 and summary[1]["dur_us"] == 4.0
    text = format_timeline(rows, replay_ms=0.007)
    assert "2 kernels" in text and "timed replay (padding rows) 7.0 us" in text


def test_find_steps_takes_whole_step_windows_and_skips_other_kernels():
    names = list("abc")
    # a partial step at the start (a step already in flight), eager work between steps, a partial step at the end
    seq = "bc" + "abc" + "xy" + "abc" + "abc" + "ab"
    spans = [KernelSpan(n, float(i), 1.0) for i, n in enumerate(seq)]
    steps = find_steps(spans, names)
    assert [[s.name for s in st] for st in steps] == [names] * 3
    assert [st[0].start for st in steps] == [2.0, 7.0, 10.0]
    assert find_steps(spans, []) == [] and find_steps(spans[:2], names) == []


def test_served_timeline_needs_enough_steps(monkeypatch):
    from anna_core.bench import timeline

    seq = "abc" * 4
    calls = []
    monkeypatch.setattr(timeline, "trace_replays",
                        lambda step, n, sync: calls.append(n) or [KernelSpan(c, float(i), 1.0) for i, c in enumerate(seq)])
    rows = timeline.served_timeline(lambda: None, 4, list("abc"), lambda: None)
    assert calls == [4] and [r["name"] for r in rows] == list("abc")
    assert rows[0]["exposed_us"] == 1.0  # back-to-back: each kernel adds its own microsecond
    with pytest.raises(AnnaError, match="4 launches of the captured step, fewer than 5"):
        timeline.served_timeline(lambda: None, 4, list("abc"), lambda: None, min_steps=5)


class _FakeEngine:
    """Records requests; has unfinished work until ``left`` steps ran."""

    def __init__(self):
        self.requests, self.steps, self.left = [], 0, 0
        self.runner = type("R", (), {"accel": type("A", (), {"synchronize": staticmethod(lambda: None)})()})()

    def add_request(self, rid, prompt, params):
        self.requests.append((rid, len(prompt), params.max_tokens))
        self.left = params.max_tokens + 1

    def step(self):
        self.steps += 1
        self.left -= 1
        return [type("Out", (), {"request_id": r[0], "error": None, "delta_token_ids": [1]})() for r in self.requests]

    def has_unfinished(self):
        return self.left > 0


@pytest.mark.parametrize("input_len,output_len,prompt_len,max_tokens", [
    (512, 256, 640, 22),  # the decode phase's mean context (a 2-step prefill)
    (2048, 4, 2030, 21),  # the TTFT target: as long as the length limit allows
    (8, 3, 1, 10),  # tiny: both shrink to fit
    (8, 256, 136, 37),  # a 17-step prefill: 17 more tokens each, for the requests' skew
])
def test_served_timeline_requests_fit_the_benchmarks_length_limit(monkeypatch, input_len, output_len, prompt_len,
                                                                  max_tokens):
    from anna_core.bench import engine_bench, timeline

    traced = []
    monkeypatch.setattr(timeline, "served_timeline", lambda step, n, names, sync: traced.append((n, names)) or ["row"])
    engine = _FakeEngine()
    s = engine_bench.BenchSettings(model_dir="x", batch_size=2, input_len=input_len, output_len=output_len)
    assert engine_bench.served_decode_timeline(engine, s, 100, ["k"]) == ["row"]
    assert [r[1:] for r in engine.requests] == [(prompt_len, max_tokens)] * 2
    assert prompt_len + max_tokens <= input_len + output_len
    assert traced == [(engine_bench.SERVED_TIMELINE_STEPS, ["k"])] and not engine.has_unfinished()


@pytest.mark.parametrize("input_len,output_len", [(16, 128), (8, 256)])
def test_served_timeline_traces_only_steps_that_decode_the_whole_batch(tmp_path, monkeypatch, input_len, output_len):
    """On a real (tiny, CPU) engine: even when the prompts take several prefill steps (longer than the
    per-step prefill budget), every traced step delivers a token to every request."""
    import torch
    from anna_core.bench import engine_bench, timeline
    from anna_core.loading import load_model

    from tests.bench.tiny_config import write_tiny_qwen35_config

    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    model_dir = write_tiny_qwen35_config(tmp_path)
    loaded = load_model(model_dir, device="cpu", dtype="fp32", load_format="dummy")
    s = engine_bench.BenchSettings(model_dir=model_dir, device="cpu", dtype="fp32", batch_size=2,
                                   input_len=input_len, output_len=output_len)
    engine = engine_bench.build_engine(loaded, s)
    traced = []

    def fake_served(step, n, names, sync):
        for _ in range(n):
            traced.append(sum(1 for o in step() if o.delta_token_ids))
        return ["row"]

    monkeypatch.setattr(timeline, "served_timeline", fake_served)
    assert engine_bench.served_decode_timeline(engine, s, 256, ["k"]) == ["row"]
    assert not engine.has_unfinished()
    assert traced == [2] * engine_bench.SERVED_TIMELINE_STEPS, traced
