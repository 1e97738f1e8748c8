"""EngineMetrics: exact percentiles, rates, hit rate, Prometheus text and thread safety."""

from __future__ import annotations

import json
import threading

import pytest
from anna_core.errors import InvalidRequestError
from anna_core.metrics import EngineMetrics, percentile


class FakeClock:
    def __init__(self, t: float = 0.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_percentile_linear_interpolation():
    xs = [15.0, 20.0, 35.0, 40.0, 50.0]  # unsorted input is sorted first
    assert percentile(list(reversed(xs)), 50) == 35.0
    assert percentile(xs, 0) == 15.0 and percentile(xs, 100) == 50.0
    assert percentile(xs, 95) == pytest.approx(48.0)  # rank 3.8 -> 40 + 0.8 * 10
    assert percentile(xs, 25) == 20.0
    assert percentile(list(range(1, 101)), 99) == pytest.approx(99.01)
    assert percentile([], 50) is None
    with pytest.raises(InvalidRequestError):
        percentile(xs, 101)


def _run_requests(m: EngineMetrics) -> None:
    # Ten requests arriving at t = i; the first token after (i + 1) * 10 + 5 ms, then 4 tokens
    # 18 ms apart, except request 9 whose last gap is 200 ms. (Values sit inside histogram buckets,
    # away from the bounds, so float rounding cannot move them.)
    for i in range(10):
        rid = f"r{i}"
        t0 = float(i)
        m.on_request_arrived(rid, t0)
        t = t0 + (i + 1) * 0.010 + 0.005
        m.on_first_token(rid, t)
        for k in range(4):
            t += 0.200 if (i == 9 and k == 3) else 0.018
            m.on_token(rid, t)
        m.on_request_finished(rid, t + 0.001, prompt_tokens=100, completion_tokens=5, cached_tokens=32,
                              finish_reason="length" if i % 2 else "stop")


def test_latency_percentiles_exact():
    m = EngineMetrics(clock=FakeClock())
    _run_requests(m)
    snap = m.snapshot(now=10.0)
    ttft = snap["latency_ms"]["ttft"]
    # TTFT samples 15, 25, ..., 105 ms: p50 = 60, p95 (rank 8.55) = 100.5, p99 (rank 8.91) = 104.1
    assert ttft["count"] == 10
    assert ttft["p50"] == pytest.approx(60.0)
    assert ttft["p95"] == pytest.approx(100.5)
    assert ttft["p99"] == pytest.approx(104.1)
    assert ttft["mean"] == pytest.approx(60.0)
    itl = snap["latency_ms"]["itl"]
    # 40 gaps: 39 of 18 ms and one of 200 ms -> p50 = p95 = 18; p99 rank 38.61 -> 18 + 0.61 * 182
    assert itl["count"] == 40
    assert itl["p50"] == pytest.approx(18.0)
    assert itl["p95"] == pytest.approx(18.0)
    assert itl["p99"] == pytest.approx(129.02)
    assert itl["mean"] == pytest.approx((39 * 18 + 200) / 40)
    e2e = snap["latency_ms"]["e2e"]
    # e2e of request i < 9: TTFT + 4 * 18 + 1 = 10 * i + 88 ms; request 9: 105 + 3 * 18 + 200 + 1 = 360 ms
    assert e2e["count"] == 10
    assert e2e["p50"] == pytest.approx(133.0)  # (128 + 138) / 2
    assert e2e["p95"] == pytest.approx(168 + 0.55 * (360 - 168))
    assert e2e["mean"] == pytest.approx((sum(10 * i + 88 for i in range(9)) + 360) / 10)
    req = snap["requests"]
    assert req["finished"] == 10 and req["received"] == 10
    assert req["finished_by_reason"] == {"stop": 5, "length": 5}
    assert snap["tokens"] == {"prompt": 1000, "generated": 50, "cached": 320}
    json.dumps(snap)  # JSON-ready


def test_sliding_window_keeps_recent_requests_only():
    m = EngineMetrics(clock=FakeClock(), window_requests=3, window_itl=2)
    for i, ttft in enumerate([1.0, 2.0, 3.0, 4.0, 5.0]):
        m.on_request_arrived(str(i), 0.0)
        m.on_first_token(str(i), ttft)
        m.on_token(str(i), ttft + 0.5 * (i + 1))
    snap = m.snapshot(now=10.0)
    assert snap["latency_ms"]["ttft"]["count"] == 3
    assert snap["latency_ms"]["ttft"]["p50"] == pytest.approx(4000.0)  # window holds 3, 4, 5 s
    assert snap["latency_ms"]["itl"]["count"] == 2
    assert snap["latency_ms"]["itl"]["p50"] == pytest.approx(2250.0)  # window holds 2.0 and 2.5 s


def test_first_token_measured_once_and_multi_token_steps():
    m = EngineMetrics(clock=FakeClock())
    m.on_request_arrived("a", 1.0)
    m.on_first_token("a", 1.5)
    m.on_first_token("a", 9.0)  # e.g. recompute after preemption: ignored
    m.on_token("a", 2.1, num_tokens=3)  # three tokens in one step: three gaps of 200 ms
    m.on_request_arrived("b", 1.0)
    m.on_token("b", 1.25)  # no first token yet: this is it
    snap = m.snapshot(now=3.0)
    assert snap["latency_ms"]["ttft"]["count"] == 2
    assert snap["latency_ms"]["ttft"]["p50"] == pytest.approx(375.0)  # 250 and 500 ms
    assert snap["latency_ms"]["itl"]["count"] == 3
    assert snap["latency_ms"]["itl"]["p99"] == pytest.approx(200.0)
    assert snap["tokens"]["generated"] == 5


def test_throughput_over_recent_window():
    clock = FakeClock(0.0)
    m = EngineMetrics(clock=clock, window_s=10.0)
    assert m.snapshot(now=0.0)["throughput"]["generation_tokens_per_s"] == 0.0
    m.on_request_arrived("old", 0.5)
    m.on_first_token("old", 1.0)
    m.on_token("old", 2.0, num_tokens=9)  # 10 tokens in [1, 2]
    m.on_request_finished("old", 2.0, prompt_tokens=40, completion_tokens=10, cached_tokens=0,
                          finish_reason="stop")
    thr = m.snapshot(now=5.0)["throughput"]
    assert thr["generation_tokens_per_s"] == pytest.approx(10 / 5.0)  # engine up 5 s < window
    assert thr["prompt_tokens_per_s"] == pytest.approx(40 / 5.0)
    m.on_request_arrived("new", 15.0)
    m.on_first_token("new", 15.5)
    m.on_token("new", 16.0, num_tokens=19)  # 20 tokens in [15.5, 16]
    thr = m.snapshot(now=20.0)["throughput"]  # window (10, 20]: only the new request's tokens
    assert thr["generation_tokens_per_s"] == pytest.approx(20 / 10.0)
    assert thr["prompt_tokens_per_s"] == 0.0
    assert m.snapshot(now=30.0)["throughput"]["generation_tokens_per_s"] == 0.0
    assert m.snapshot(now=30.0)["tokens"]["generated"] == 30  # lifetime count stays


def test_gauges_hit_rate_and_counts():
    m = EngineMetrics(clock=FakeClock())
    snap = m.snapshot(now=0.0)
    assert snap["prefix_cache"]["hit_rate"] is None
    assert snap["latency_ms"]["ttft"]["p50"] is None
    m.on_prefix_cache_lookup(hit_tokens=48, total_tokens=64)
    m.on_prefix_cache_lookup(hit_tokens=0, total_tokens=64)
    m.set_gauges(running=3, waiting=7, kv_blocks_used=12, kv_blocks_total=100, slots_used=3, slots_total=8)
    for _ in range(2):
        m.on_preemption()
    for _ in range(5):
        m.on_rejected_429()
    snap = m.snapshot(now=1.0)
    assert snap["prefix_cache"] == {"hit_tokens": 48, "queried_tokens": 128, "hit_rate": 0.375}
    assert snap["kv_blocks"] == {"used": 12, "total": 100}
    assert snap["state_slots"] == {"used": 3, "total": 8}
    assert snap["requests"]["running"] == 3 and snap["requests"]["waiting"] == 7
    assert snap["requests"]["preemptions"] == 2 and snap["requests"]["rejected_429"] == 5
    line = m.summary_line(now=1.0)
    assert "\n" not in line
    for part in ("running=3", "waiting=7", "kv_blocks=12/100", "state_slots=3/8", "prefix_hit=37.5%",
                 "preemptions=2", "rejected_429=5", "ttft_ms p50=-"):
        assert part in line


def test_prometheus_text_has_expected_lines():
    m = EngineMetrics(clock=FakeClock())
    _run_requests(m)
    m.on_prefix_cache_lookup(hit_tokens=16, total_tokens=64)
    m.set_gauges(running=2, waiting=1, kv_blocks_used=5, kv_blocks_total=50, slots_used=2, slots_total=4)
    m.on_preemption()
    m.on_rejected_429()
    text = m.prometheus_text().decode()
    lines = set(text.splitlines())
    for expected in (
        "anna_requests_running 2.0",
        "anna_requests_waiting 1.0",
        "anna_kv_blocks_used 5.0",
        "anna_kv_blocks_capacity 50.0",
        "anna_state_slots_used 2.0",
        "anna_state_slots_capacity 4.0",
        "anna_prefix_cache_hit_rate 0.25",
        "anna_prefix_cache_hit_tokens_total 16.0",
        "anna_prefix_cache_queried_tokens_total 64.0",
        "anna_preemptions_total 1.0",
        "anna_requests_rejected_total 1.0",
        "anna_requests_received_total 10.0",
        'anna_requests_finished_total{finish_reason="stop"} 5.0',
        'anna_requests_finished_total{finish_reason="length"} 5.0',
        "anna_prompt_tokens_total 1000.0",
        "anna_generation_tokens_total 50.0",
        "anna_cached_prompt_tokens_total 320.0",
        "# TYPE anna_time_to_first_token_seconds histogram",
        "anna_time_to_first_token_seconds_count 10.0",
        'anna_time_to_first_token_seconds_bucket{le="0.04"} 3.0',  # 15, 25, 35 ms
        'anna_time_to_first_token_seconds_bucket{le="+Inf"} 10.0',
        "anna_inter_token_latency_seconds_count 40.0",
        'anna_inter_token_latency_seconds_bucket{le="0.02"} 39.0',
        "anna_e2e_request_latency_seconds_count 10.0",
        'anna_e2e_request_latency_seconds_bucket{le="0.25"} 9.0',
    ):
        assert expected in lines, expected
    assert all(line.startswith(("# ", "anna_")) for line in lines if line)


def test_instances_do_not_share_state():
    a, b = EngineMetrics(clock=FakeClock()), EngineMetrics(clock=FakeClock())
    a.on_preemption()
    assert b.snapshot(now=0.0)["requests"]["preemptions"] == 0
    assert "anna_preemptions_total 0.0" in b.prometheus_text().decode().splitlines()


def test_bad_windows_rejected():
    with pytest.raises(InvalidRequestError):
        EngineMetrics(window_s=0)


def test_concurrent_writer_and_readers():
    m = EngineMetrics()
    n_requests, n_tokens = 200, 20
    errors: list[BaseException] = []

    def engine() -> None:
        for i in range(n_requests):
            m.on_request_arrived(str(i))
            m.on_first_token(str(i))
            for _ in range(n_tokens - 1):
                m.on_token(str(i))
            m.on_request_finished(str(i), None, 10, n_tokens, 0, "length")

    def reader() -> None:
        try:
            for _ in range(50):
                json.dumps(m.snapshot())
                m.prometheus_text()
                m.summary_line()
        except BaseException as exc:  # noqa: BLE001 - surfaced by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=engine)] + [threading.Thread(target=reader) for _ in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    snap = m.snapshot()
    assert snap["tokens"]["generated"] == n_requests * n_tokens
    assert snap["requests"]["finished"] == n_requests
    assert snap["latency_ms"]["itl"]["count"] == n_requests * (n_tokens - 1)
    assert f"anna_generation_tokens_total {float(n_requests * n_tokens)}" in m.prometheus_text().decode()
