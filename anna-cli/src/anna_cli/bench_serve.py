"""``anna bench-serve``: load-test any OpenAI-compatible server and report latency and throughput."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import click

from anna_cli.bench_report import format_table
from anna_cli.loadgen import ENDPOINTS, SCENARIOS, resolve_config, run_benchmark


def _scenario_help() -> str:
    parts = []
    for name, knobs in SCENARIOS.items():
        parts.append(f"{name} ({', '.join(f'{k}={v}' for k, v in knobs.items())})")
    return "Preset knobs; explicit options override them. " + "; ".join(parts) + "."


@click.command("bench-serve")
@click.option("--base-url", required=True, help="Server URL, e.g. http://127.0.0.1:8000 (a trailing /v1 is fine).")
@click.option("--model", default=None, help="Model name to request (default: the first of GET /v1/models).")
@click.option("--api-key", default=None, help="Sent as 'Authorization: Bearer KEY'.")
@click.option("--endpoint", type=click.Choice(ENDPOINTS), default=None,
              help="/v1/completions or /v1/chat/completions [default: completions; chat with --image-size].")
@click.option("--scenario", type=click.Choice(sorted(SCENARIOS)), default=None, help=_scenario_help())
@click.option("--num-requests", type=int, default=None, help="Requests to send [default: 100].")
@click.option("--concurrency", type=int, default=None,
              help="Most requests in flight at once [default: 1 unless --request-rate is given, then unbounded].")
@click.option("--request-rate", type=float, default=None,
              help="Poisson arrivals at this many requests/s (inf: all at once) [default: all at once].")
@click.option("--input-len", type=int, default=None,
              help="Prompt tokens per request (the unique part when --prefix-len is set) [default: 128].")
@click.option("--output-len", type=int, default=None,
              help="Generated tokens per request, sent as max_tokens with ignore_eos [default: 128].")
@click.option("--prefix-len", type=int, default=None,
              help="Prompt tokens every request shares before its unique part [default: 0].")
@click.option("--range-ratio", type=float, default=None,
              help="Draw lengths uniformly from [len*(1-r), len*(1+r)] [default: 0].")
@click.option("--prompt-token-ids/--text-prompts", default=False, show_default=True,
              help="Send random token ids as the prompt (no tokenizer needed; completions only) or text.")
@click.option("--vocab-size", type=int, default=None,
              help="Random token ids are drawn from [1, vocab-size) [default: 10000].")
@click.option("--duration-s", type=float, default=None,
              help="Send nothing after this many seconds and cancel what still streams [default: 600].")
@click.option("--request-timeout-s", type=float, default=None,
              help="Longest wait for any one response chunk [default: 600].")
@click.option("--image-size", default=None, metavar="WxH",
              help="Chat only: every request also carries a random WxH PNG image (a data: URI; a new image per "
                   "request, so no cache helps) before its text.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seeds prompts, lengths and arrivals.")
@click.option("--ignore-eos/--no-ignore-eos", default=True, show_default=True,
              help="Ask the server to generate exactly max_tokens (a vLLM/Anna extension).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON instead of a table.")
@click.option("--output", "output", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the JSON report to this file.")
def bench_serve(base_url: str, scenario: str | None, concurrency: int | None, request_rate: float | None,
                as_json: bool, output: Path | None, **options: Any) -> None:
    """Stream requests to an OpenAI-compatible server and report TTFT, ITL, latency and throughput."""
    try:
        cfg = resolve_config(base_url, scenario, concurrency=concurrency, request_rate=request_rate, **options)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    try:
        report = asyncio.run(run_benchmark(cfg))
    except (ValueError, OSError) as exc:
        raise click.ClickException(str(exc)) from exc
    except Exception as exc:  # httpx errors reaching the server before any request (e.g. GET /v1/models)
        if type(exc).__module__.startswith("httpx"):
            raise click.ClickException(f"{type(exc).__name__}: {exc}") from exc
        raise
    text = json.dumps(report, indent=2)
    if output is not None:
        output.write_text(text + "\n")
    click.echo(text if as_json else format_table(report))
    if report["requests"]["succeeded"] == 0:
        raise click.exceptions.Exit(1)
