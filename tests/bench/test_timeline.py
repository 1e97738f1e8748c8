"""The graph-replay timeline's trace parsing and per-kernel accounting (no GPU: synthetic traces)."""

from __future__ import annotations

import pytest
from anna_core.bench.timeline import (
    KernelSpan,
    by_kernel,
    exposed_times,
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
    assert "2 kernels" in text and "timed replay 7.0 us" in text
