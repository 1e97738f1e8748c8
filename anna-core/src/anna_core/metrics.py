"""Serving metrics of one engine: request latencies, throughput, cache use, for ``/healthz`` and ``/metrics``.

One :class:`EngineMetrics` per engine (no module globals): the engine thread reports events
(``on_request_arrived``, ``on_first_token``, ``on_token``, ``on_request_finished``, ...) and the
server thread reads :meth:`EngineMetrics.snapshot` (JSON for ``/healthz``),
:meth:`EngineMetrics.prometheus_text` (``GET /metrics``) or :meth:`EngineMetrics.summary_line`
(the periodic log line). Every method takes one lock, so both threads may call at any time.

Times are seconds on one monotonic clock, ``time.perf_counter`` unless another ``clock`` is
given (the engine stamps its requests with the same clock). Event methods take ``t=None`` to
mean "now".

Two kinds of figures:

* lifetime counters and histograms (Prometheus exposition via ``prometheus_client``, each
  instance with its own ``CollectorRegistry``; metric names start with ``anna_``);
* sliding-window figures for people: TTFT / ITL / end-to-end percentiles over the most recent
  samples (``window_requests`` requests, ``window_itl`` inter-token gaps) and tokens/s over the
  last ``window_s`` seconds.

Percentiles interpolate linearly between the closest ranks (the "linear" / type-7 definition that
``numpy.percentile`` uses by default): for sorted samples ``x[0..n-1]`` the p-th percentile is
``x[k] + (x[k+1] - x[k]) * f`` where ``k + f = p / 100 * (n - 1)``.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from anna_core.errors import InvalidRequestError

PERCENTILES = (50, 95, 99)
#: ``Content-Type`` of :meth:`EngineMetrics.prometheus_text` (for ``GET /metrics``).
PROMETHEUS_CONTENT_TYPE = CONTENT_TYPE_LATEST

# Bucket upper bounds in seconds.
TTFT_BUCKETS = (0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
ITL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.03, 0.04, 0.05, 0.075, 0.1, 0.2, 0.5, 1.0, 2.5)
E2E_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0)


def percentile(samples: Sequence[float], p: float) -> float | None:
    """The p-th percentile (0 <= p <= 100) of ``samples`` with linear interpolation; ``None`` if empty.

    Raises:
        InvalidRequestError: ``p`` outside [0, 100].
    """
    if not 0 <= p <= 100:
        raise InvalidRequestError(f"percentile must be within [0, 100], got {p}")
    if not samples:
        return None
    xs = sorted(samples)
    rank = p / 100 * (len(xs) - 1)
    lo = int(rank)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (rank - lo)


def _percentiles_ms(samples: Iterable[float]) -> dict[str, float | None]:
    xs = sorted(samples)
    out: dict[str, float | None] = {}
    for p in PERCENTILES:
        v = percentile(xs, p)
        out[f"p{p}"] = None if v is None else round(v * 1000.0, 3)
    out["mean"] = round(sum(xs) / len(xs) * 1000.0, 3) if xs else None
    out["count"] = len(xs)
    return out


class _Live:
    """Timing of one unfinished request."""

    __slots__ = ("arrival", "first_token", "last_token")

    def __init__(self, arrival: float | None) -> None:
        self.arrival = arrival
        self.first_token: float | None = None
        self.last_token: float | None = None


class _RateWindow:
    """Token counts of the last ``span_s`` seconds, in time bins of ``span_s / 600`` (bounded memory)."""

    def __init__(self, span_s: float) -> None:
        self._span = span_s
        self._bin = span_s / 600
        self._bins: deque[list[float]] = deque()  # [bin start time, tokens]
        self._sum = 0

    def add(self, t: float, n: int) -> None:
        if self._bins and 0 <= t - self._bins[-1][0] < self._bin:
            self._bins[-1][1] += n
        else:
            self._bins.append([t, n])
        self._sum += n
        self.total(t)

    def total(self, now: float) -> int:
        """Tokens counted after ``now - span_s``."""
        horizon = now - self._span
        while self._bins and self._bins[0][0] <= horizon:
            self._sum -= self._bins.popleft()[1]
        return self._sum


class EngineMetrics:
    """Metrics of one engine (thread-safe).

    Per request the engine calls ``on_request_arrived``, ``on_first_token``, ``on_token`` for
    each later token and ``on_request_finished`` exactly once whatever the outcome (stop, length,
    abort, error), which also releases the request's bookkeeping.

    Args:
        clock: the clock the event times come from (seconds, monotonic).
        window_requests: how many recent TTFT / end-to-end samples the percentiles cover.
        window_itl: how many recent inter-token gaps the ITL percentiles cover.
        window_s: the span of the tokens/s figures (seconds).

    Raises:
        InvalidRequestError: a window is not positive.
    """

    def __init__(self, *, clock: Callable[[], float] = time.perf_counter, window_requests: int = 1000,
                 window_itl: int = 10000, window_s: float = 60.0) -> None:
        if window_requests < 1 or window_itl < 1 or not window_s > 0:
            raise InvalidRequestError("metrics windows must be positive")
        self._clock = clock
        self._lock = threading.Lock()
        self._window_s = float(window_s)
        self._started = clock()
        self._live: dict[str, _Live] = {}
        self._ttft: deque[float] = deque(maxlen=window_requests)
        self._e2e: deque[float] = deque(maxlen=window_requests)
        self._itl: deque[float] = deque(maxlen=window_itl)
        self._gen_window = _RateWindow(self._window_s)  # generated tokens, as they come out
        self._prompt_window = _RateWindow(self._window_s)  # prompt tokens, as their requests finish
        self._gauges = {"running": 0, "waiting": 0, "kv_blocks_used": 0, "kv_blocks_total": 0,
                        "state_slots_used": 0, "state_slots_total": 0}
        self._totals = {"arrived": 0, "finished": 0, "prompt_tokens": 0, "generation_tokens": 0,
                        "cached_tokens": 0, "preemptions": 0, "rejected_429": 0, "refused_memory": 0,
                        "step_failures": 0,
                        "prefix_hit_tokens": 0, "prefix_queried_tokens": 0}
        self._finished_by_reason: dict[str, int] = {}
        self._build_prometheus()

    # ---- Prometheus -------------------------------------------------------------------------

    def _build_prometheus(self) -> None:
        r = self.registry = CollectorRegistry(auto_describe=True)
        self._g = {
            "running": Gauge("anna_requests_running", "Requests being computed", registry=r),
            "waiting": Gauge("anna_requests_waiting", "Requests queued for admission", registry=r),
            "kv_blocks_used": Gauge("anna_kv_blocks_used", "Paged KV cache blocks in use", registry=r),
            "kv_blocks_total": Gauge("anna_kv_blocks_capacity", "Paged KV cache blocks in the pool", registry=r),
            "state_slots_used": Gauge("anna_state_slots_used", "Recurrent-state slots in use", registry=r),
            "state_slots_total": Gauge("anna_state_slots_capacity", "Recurrent-state slots in the pool", registry=r),
        }
        Gauge("anna_prefix_cache_hit_rate", "Prompt tokens served from the prefix cache / tokens looked up",
              registry=r).set_function(lambda: self._hit_rate() or 0.0)
        Gauge("anna_prompt_throughput_tokens_per_second", "Prompt tokens/s over the recent window",
              registry=r).set_function(lambda: self._rates()[0])
        Gauge("anna_generation_throughput_tokens_per_second", "Generated tokens/s over the recent window",
              registry=r).set_function(lambda: self._rates()[1])
        self._c_arrived = Counter("anna_requests_received", "Requests added to the engine", registry=r)
        self._c_finished = Counter("anna_requests_finished", "Requests finished, by finish reason",
                                   ["finish_reason"], registry=r)
        self._c_prompt = Counter("anna_prompt_tokens", "Prompt tokens of finished requests", registry=r)
        self._c_gen = Counter("anna_generation_tokens", "Generated tokens", registry=r)
        self._c_cached = Counter("anna_cached_prompt_tokens", "Prompt tokens of finished requests served from cache",
                                 registry=r)
        self._c_preempt = Counter("anna_preemptions", "Requests preempted (to be recomputed)", registry=r)
        self._c_429 = Counter("anna_requests_rejected", "Requests rejected with HTTP 429 (queue full)", registry=r)
        self._c_memory = Counter("anna_requests_refused_memory",
                                 "Requests refused by memory admission, by HTTP status (400: never fits, 503: later)",
                                 ["status"], registry=r)
        self._c_step_failed = Counter("anna_step_failures", "Engine steps that failed, by kind (oom, device, other)",
                                      ["kind"], registry=r)
        self._g_degraded = Gauge("anna_engine_degraded", "1 while the engine is degraded (takes no requests)",
                                 registry=r)
        self._c_hit = Counter("anna_prefix_cache_hit_tokens", "Prompt tokens found in the prefix cache", registry=r)
        self._c_query = Counter("anna_prefix_cache_queried_tokens", "Prompt tokens looked up in the prefix cache",
                                registry=r)
        self._h_ttft = Histogram("anna_time_to_first_token_seconds", "Arrival to first generated token",
                                 buckets=TTFT_BUCKETS, registry=r)
        self._h_itl = Histogram("anna_inter_token_latency_seconds", "Gap between consecutive generated tokens",
                                buckets=ITL_BUCKETS, registry=r)
        self._h_e2e = Histogram("anna_e2e_request_latency_seconds", "Arrival to finish of a request",
                                buckets=E2E_BUCKETS, registry=r)

    def prometheus_text(self) -> bytes:
        """The metrics in Prometheus text exposition format (``text/plain; version=0.0.4``)."""
        return generate_latest(self.registry)

    # ---- events (engine thread) ---------------------------------------------------------------

    def _now(self, t: float | None) -> float:
        return self._clock() if t is None else float(t)

    def on_request_arrived(self, request_id: str, t: float | None = None) -> None:
        """A request entered the engine at time ``t``."""
        t = self._now(t)
        with self._lock:
            self._live[request_id] = _Live(t)
            self._totals["arrived"] += 1
        self._c_arrived.inc()

    def on_first_token(self, request_id: str, t: float | None = None) -> None:
        """The first generated token of ``request_id`` came out at ``t`` (records TTFT; counts 1 token).

        Call :meth:`on_token` (not this) for every later token. A second call for the same
        request (e.g. after preemption and recompute) is ignored: TTFT is measured once.
        """
        t = self._now(t)
        with self._lock:
            ttft = self._first_token_locked(request_id, t)
        if ttft is not False:
            self._c_gen.inc()
            if ttft is not None:
                self._h_ttft.observe(ttft)

    def _first_token_locked(self, request_id: str, t: float) -> float | None | bool:
        """TTFT (``None`` if the arrival is unknown), or ``False`` if the first token was already seen."""
        live = self._live.setdefault(request_id, _Live(None))
        if live.first_token is not None:
            return False
        live.first_token = live.last_token = t
        self._count_generated(t, 1)
        if live.arrival is None:
            return None
        ttft = max(t - live.arrival, 0.0)
        self._ttft.append(ttft)
        return ttft

    def on_token(self, request_id: str, t: float | None = None, num_tokens: int = 1) -> None:
        """``num_tokens`` more tokens of ``request_id`` came out at ``t`` (records ITL).

        The gap since the previous token, divided by ``num_tokens``, is one ITL sample per token.
        For a request with no first token yet, the first of them counts as its first token (TTFT).
        """
        if num_tokens < 1:
            return
        t = self._now(t)
        ttft: float | None | bool = False
        with self._lock:
            live = self._live.get(request_id)
            if live is None or live.first_token is None:
                ttft = self._first_token_locked(request_id, t)
                live = self._live[request_id]
                num_tokens -= 1
            gap = 0.0
            if num_tokens:
                gap = max(t - live.last_token, 0.0) / num_tokens
                live.last_token = t
                self._itl.extend([gap] * num_tokens)
                self._count_generated(t, num_tokens)
        if ttft is not False:
            self._c_gen.inc()
            if ttft is not None:
                self._h_ttft.observe(ttft)
        if num_tokens:
            for _ in range(num_tokens):
                self._h_itl.observe(gap)
            self._c_gen.inc(num_tokens)

    def on_request_finished(self, request_id: str, t: float | None, prompt_tokens: int, completion_tokens: int,
                            cached_tokens: int, finish_reason: str | None) -> None:
        """``request_id`` finished at ``t`` (any reason: stop, length, abort, error, ...).

        Records its end-to-end latency (arrival to ``t``) and counts its prompt and cached tokens.
        Generated tokens are counted as they come (:meth:`on_first_token` / :meth:`on_token`);
        ``completion_tokens`` is only used when no token events were reported for the request.
        """
        t = self._now(t)
        reason = finish_reason or "unknown"
        with self._lock:
            live = self._live.pop(request_id, None)
            e2e = None if live is None or live.arrival is None else max(t - live.arrival, 0.0)
            if e2e is not None:
                self._e2e.append(e2e)
            untracked = completion_tokens if (live is None or live.first_token is None) else 0
            if untracked > 0:
                self._count_generated(t, untracked)
            self._prompt_window.add(t, prompt_tokens)
            tot = self._totals
            tot["finished"] += 1
            tot["prompt_tokens"] += prompt_tokens
            tot["cached_tokens"] += cached_tokens
            self._finished_by_reason[reason] = self._finished_by_reason.get(reason, 0) + 1
        if e2e is not None:
            self._h_e2e.observe(e2e)
        if untracked > 0:
            self._c_gen.inc(untracked)
        self._c_finished.labels(finish_reason=reason).inc()
        self._c_prompt.inc(prompt_tokens)
        self._c_cached.inc(cached_tokens)

    def on_preemption(self) -> None:
        """One running request was preempted (its cache freed, to be recomputed)."""
        with self._lock:
            self._totals["preemptions"] += 1
        self._c_preempt.inc()

    def on_rejected_429(self) -> None:
        """One request was refused with HTTP 429 because the waiting queue was full."""
        with self._lock:
            self._totals["rejected_429"] += 1
        self._c_429.inc()

    def on_refused_memory(self, status: int) -> None:
        """One request was refused by memory admission (``status`` 400: it never fits; 503: it fits later). Safe
        from any thread."""
        with self._lock:
            self._totals["refused_memory"] += 1
        self._c_memory.labels(status=str(status)).inc()

    def on_step_failed(self, kind: str, degraded: bool) -> None:
        """A step failed (:func:`anna_core.engine.faults.classify_failure` ``kind``); ``degraded``: the engine is
        degraded now."""
        with self._lock:
            self._totals["step_failures"] += 1
        self._c_step_failed.labels(kind=kind).inc()
        self._g_degraded.set(1 if degraded else 0)

    def on_prefix_cache_lookup(self, hit_tokens: int, total_tokens: int) -> None:
        """A prompt of ``total_tokens`` tokens was looked up; ``hit_tokens`` of them were cached."""
        with self._lock:
            self._totals["prefix_hit_tokens"] += hit_tokens
            self._totals["prefix_queried_tokens"] += total_tokens
        self._c_hit.inc(hit_tokens)
        self._c_query.inc(total_tokens)

    def set_gauges(self, running: int, waiting: int, kv_blocks_used: int, kv_blocks_total: int,
                   slots_used: int, slots_total: int) -> None:
        """The engine's current occupancy (call once per step)."""
        values = {"running": running, "waiting": waiting, "kv_blocks_used": kv_blocks_used,
                  "kv_blocks_total": kv_blocks_total, "state_slots_used": slots_used,
                  "state_slots_total": slots_total}
        with self._lock:
            self._gauges.update(values)
        for name, value in values.items():
            self._g[name].set(value)

    # ---- windows (call with the lock held) ----------------------------------------------------

    def _count_generated(self, t: float, n: int) -> None:
        self._totals["generation_tokens"] += n
        self._gen_window.add(t, n)

    def _rates(self) -> tuple[float, float]:
        with self._lock:
            return self._rates_locked(self._clock())

    def _rates_locked(self, now: float) -> tuple[float, float]:
        """(prompt tokens/s, generated tokens/s) over the last ``window_s`` seconds (or since start)."""
        span = min(self._window_s, now - self._started)
        if span <= 0:
            return 0.0, 0.0
        return self._prompt_window.total(now) / span, self._gen_window.total(now) / span

    def _hit_rate(self) -> float | None:
        queried = self._totals["prefix_queried_tokens"]
        return None if queried == 0 else self._totals["prefix_hit_tokens"] / queried

    # ---- reading (server thread) --------------------------------------------------------------

    def snapshot(self, now: float | None = None) -> dict[str, Any]:
        """JSON-ready figures for ``/healthz``: occupancy, cache, latency percentiles (ms), tokens/s, counts.

        Percentiles and the hit rate are ``None`` while there is no sample.
        """
        with self._lock:
            now = self._clock() if now is None else now
            prompt_tps, gen_tps = self._rates_locked(now)
            g, tot = self._gauges, self._totals
            hit_rate = self._hit_rate()
            return {
                "requests": {"running": g["running"], "waiting": g["waiting"], "received": tot["arrived"],
                             "finished": tot["finished"], "finished_by_reason": dict(self._finished_by_reason),
                             "rejected_429": tot["rejected_429"], "refused_memory": tot["refused_memory"],
                             "preemptions": tot["preemptions"]},
                "step_failures": tot["step_failures"],
                "kv_blocks": {"used": g["kv_blocks_used"], "total": g["kv_blocks_total"]},
                "state_slots": {"used": g["state_slots_used"], "total": g["state_slots_total"]},
                "prefix_cache": {"hit_tokens": tot["prefix_hit_tokens"],
                                 "queried_tokens": tot["prefix_queried_tokens"],
                                 "hit_rate": None if hit_rate is None else round(hit_rate, 6)},
                "latency_ms": {"ttft": _percentiles_ms(self._ttft), "itl": _percentiles_ms(self._itl),
                               "e2e": _percentiles_ms(self._e2e)},
                "throughput": {"window_s": self._window_s, "prompt_tokens_per_s": round(prompt_tps, 3),
                               "generation_tokens_per_s": round(gen_tps, 3)},
                "tokens": {"prompt": tot["prompt_tokens"], "generated": tot["generation_tokens"],
                           "cached": tot["cached_tokens"]},
            }

    def summary_line(self, now: float | None = None) -> str:
        """One log line (for ``--metrics-log-interval-seconds``)."""
        s = self.snapshot(now)
        req, lat, thr = s["requests"], s["latency_ms"], s["throughput"]

        def ms(v: float | None) -> str:
            return "-" if v is None else f"{v:.1f}"

        hit = s["prefix_cache"]["hit_rate"]
        return (
            f"running={req['running']} waiting={req['waiting']} "
            f"kv_blocks={s['kv_blocks']['used']}/{s['kv_blocks']['total']} "
            f"state_slots={s['state_slots']['used']}/{s['state_slots']['total']} "
            f"prefix_hit={'-' if hit is None else f'{hit * 100:.1f}%'} "
            f"prompt_tps={thr['prompt_tokens_per_s']:.1f} gen_tps={thr['generation_tokens_per_s']:.1f} "
            f"ttft_ms p50={ms(lat['ttft']['p50'])} p99={ms(lat['ttft']['p99'])} "
            f"itl_ms p50={ms(lat['itl']['p50'])} p99={ms(lat['itl']['p99'])} "
            f"finished={req['finished']} preemptions={req['preemptions']} rejected_429={req['rejected_429']}"
        )
