"""Results of ``anna bench-serve``: per-request measurements, the summary report and its table.

Percentiles (:func:`anna_core.metrics.percentile`) interpolate linearly between the closest ranks
(numpy's default "linear" method): for sorted samples ``x[0..n-1]`` the p-th percentile is
``x[k] + (x[k+1] - x[k]) * f`` with ``k + f = p / 100 * (n - 1)``. Latencies are reported in milliseconds, over successful requests.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from anna_core.metrics import percentile

if TYPE_CHECKING:
    from anna_cli.loadgen import BenchConfig


@dataclass
class RequestResult:
    """What one request measured (times in seconds on the client's ``time.perf_counter``)."""

    index: int
    ok: bool = False
    error: str | None = None
    cancelled: bool = False
    sent_at_s: float | None = None  # after the run's start
    ttft_s: float | None = None
    e2e_s: float | None = None
    itl_s: list[float] = field(default_factory=list)
    chunks: int = 0
    output_tokens: int = 0
    prompt_tokens: int | None = None
    cached_tokens: int | None = None


def _stats_ms(samples: list[float]) -> dict[str, float | None]:
    out: dict[str, float | None] = {f"p{p}": None if (v := percentile(samples, p)) is None else v * 1000.0
                                    for p in (50, 95, 99)}
    out["mean"] = sum(samples) / len(samples) * 1000.0 if samples else None
    return out


def summarize(cfg: BenchConfig, model: str, results: list[RequestResult], elapsed_s: float) -> dict[str, Any]:
    """The JSON-ready report: counts, throughput and latency percentiles (ms) of successful requests."""
    ok = [r for r in results if r.ok]
    failed = [r for r in results if r.error is not None]
    out_tokens = sum(r.output_tokens for r in ok)
    prompt_tokens = sum(r.prompt_tokens or 0 for r in ok)
    tpot = [(r.e2e_s - r.ttft_s) / (r.output_tokens - 1) for r in ok
            if r.output_tokens > 1 and r.e2e_s is not None and r.ttft_s is not None]
    knobs = asdict(cfg)
    knobs.pop("api_key")
    return {
        "config": knobs,
        "model": model,
        "requests": {"total": len(results), "succeeded": len(ok), "failed": len(failed),
                     "cancelled": sum(r.cancelled for r in results),
                     "not_sent": sum(r.sent_at_s is None for r in results)},
        "duration_s": elapsed_s,
        "requests_per_s": len(ok) / elapsed_s if elapsed_s > 0 else 0.0,
        "output_tokens": out_tokens,
        "output_tokens_per_s": out_tokens / elapsed_s if elapsed_s > 0 else 0.0,
        "prompt_tokens": prompt_tokens,
        "cached_prompt_tokens": sum(r.cached_tokens or 0 for r in ok),
        "ttft_ms": _stats_ms([r.ttft_s for r in ok if r.ttft_s is not None]),
        "itl_ms": _stats_ms([gap for r in ok for gap in r.itl_s]),
        "tpot_ms": _stats_ms(tpot),
        "e2e_ms": _stats_ms([r.e2e_s for r in ok if r.e2e_s is not None]),
        "errors": dict(Counter(r.error for r in failed).most_common(5)),
    }


def format_table(report: dict[str, Any]) -> str:
    """The report as an aligned two-column text table."""
    cfg, req = report["config"], report["requests"]
    rows: list[tuple[str, str]] = [
        ("scenario", str(cfg["scenario"] or "-")),
        ("model", report["model"]),
        ("endpoint", cfg["endpoint"]),
        ("concurrency / rate", f"{cfg['concurrency'] or 'unbounded'} / {cfg['request_rate'] or 'all at once'}"),
        ("input / output len", f"{cfg['prefix_len'] + cfg['input_len']} / {cfg['output_len']}"),
        ("succeeded / total", f"{req['succeeded']} / {req['total']}"),
        ("failed / cancelled / not sent", f"{req['failed']} / {req['cancelled']} / {req['not_sent']}"),
        ("duration (s)", f"{report['duration_s']:.2f}"),
        ("requests/s", f"{report['requests_per_s']:.2f}"),
        ("output tokens", str(report["output_tokens"])),
        ("output tokens/s", f"{report['output_tokens_per_s']:.1f}"),
        ("cached prompt tokens", str(report["cached_prompt_tokens"])),
    ]
    for key, label in (("ttft_ms", "TTFT"), ("itl_ms", "ITL"), ("tpot_ms", "TPOT"), ("e2e_ms", "E2E")):
        stats = report[key]
        rows.append((f"{label} p50 / p95 / p99 (ms)", " / ".join(
            "-" if stats[p] is None else f"{stats[p]:.1f}" for p in ("p50", "p95", "p99"))))
    for error, count in report["errors"].items():
        rows.append((f"error x{count}", error))
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)
