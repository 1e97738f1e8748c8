"""Serving load generator for any OpenAI-compatible server (``anna bench-serve``); no anna-core import.

Requests stream (SSE) from ``/v1/completions`` or ``/v1/chat/completions`` under a concurrency cap
and/or Poisson arrivals at a given rate. Per request it measures, on the client's monotonic clock
(``time.perf_counter``):

* TTFT: request sent to the first chunk that carries output;
* ITL: gaps between consecutive output-carrying chunks (a chunk usually holds one token; when a
  server batches several tokens into one chunk the gap covers all of them);
* TPOT: ``(e2e - ttft) / (output_tokens - 1)``;
* end-to-end latency: request sent to the end of the stream.

Output tokens come from the stream's final ``usage`` (``stream_options.include_usage``), or are
the number of output-carrying chunks when a server sends no usage. Lengths are fixed by sending
``max_tokens`` with ``ignore_eos: true``. Token-id prompts need no tokenizer; text prompts are
random common words, about one token each, so their lengths are approximate. With ``image_size`` (chat only)
each user message starts with a random PNG image of that size, sent as a ``data:`` URI ``image_url`` part.

The run is bounded: ``num_requests`` requests at most, and nothing is sent after ``duration_s``;
requests still streaming then are cancelled and counted as such. Only the given URL is contacted
(proxy environment variables are ignored).
"""

from __future__ import annotations

import asyncio
import base64
import json
import math
import random
import struct
import time
import zlib
from dataclasses import dataclass
from typing import Any

import httpx

from anna_cli.bench_report import RequestResult, summarize

ENDPOINTS = ("completions", "chat")
MAX_REQUESTS = 100_000

#: Knob values a ``--scenario`` sets; explicit options override them.
SCENARIOS: dict[str, dict[str, Any]] = {
    "concurrent-short": {"input_len": 128, "output_len": 128, "concurrency": 64, "num_requests": 256},
    "single-long": {"input_len": 4096, "output_len": 512, "concurrency": 1, "num_requests": 4},
    "mixed": {"input_len": 512, "output_len": 128, "range_ratio": 0.9, "concurrency": 16, "num_requests": 128},
    "repeated-system-prompt": {"prefix_len": 1024, "input_len": 32, "output_len": 64, "concurrency": 16,
                               "num_requests": 128},
    "image-chat": {"endpoint": "chat", "image_size": "1024x1024", "input_len": 32, "output_len": 128,
                   "concurrency": 4, "num_requests": 32},
}

# ~1 token each in common BPE vocabularies (with the leading space the join adds).
_WORDS_TEXT = (
    "the of and to in is was for on are with as at be by this have from or had not but what all were when we "
    "there can an your which their said if do will each about how up out them then she many some so these "
    "would other into has more her two like him see time could no make than first been its who now people my "
    "made over did down only way find use may water long little very after words called just where most know"
)
_WORDS = _WORDS_TEXT.split()


@dataclass
class BenchConfig:
    """One benchmark run; see ``anna bench-serve --help`` for each knob.

    ``input_len`` is the unique part of each prompt (tokens); ``prefix_len`` tokens shared by every
    request come before it. ``range_ratio`` r draws each request's input and output lengths
    uniformly from ``[len * (1 - r), len * (1 + r)]``. ``concurrency=None`` means no cap;
    ``request_rate=None`` (or ``inf``) sends every request at once.
    """

    base_url: str
    model: str | None = None
    api_key: str | None = None
    endpoint: str = "completions"
    scenario: str | None = None
    num_requests: int = 100
    concurrency: int | None = None
    request_rate: float | None = None
    input_len: int = 128
    output_len: int = 128
    prefix_len: int = 0
    range_ratio: float = 0.0
    prompt_token_ids: bool = False
    vocab_size: int = 10_000
    duration_s: float = 600.0
    request_timeout_s: float = 600.0
    seed: int = 0
    ignore_eos: bool = True
    image_size: str | None = None

    def validate(self) -> None:
        """Raises ``ValueError`` with a clear message for a knob out of range."""
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"--base-url must start with http:// or https://, got {self.base_url!r}")
        if self.endpoint not in ENDPOINTS:
            raise ValueError(f"--endpoint must be one of {ENDPOINTS}, got {self.endpoint!r}")
        if not 1 <= self.num_requests <= MAX_REQUESTS:
            raise ValueError(f"--num-requests must be within [1, {MAX_REQUESTS}], got {self.num_requests}")
        if self.concurrency is not None and self.concurrency < 1:
            raise ValueError(f"--concurrency must be >= 1, got {self.concurrency}")
        if self.request_rate is not None and not self.request_rate > 0:
            raise ValueError(f"--request-rate must be > 0, got {self.request_rate}")
        if self.input_len < 1 or self.output_len < 1 or self.prefix_len < 0:
            raise ValueError("--input-len and --output-len must be >= 1 and --prefix-len >= 0")
        if not 0 <= self.range_ratio < 1:
            raise ValueError(f"--range-ratio must be within [0, 1), got {self.range_ratio}")
        if self.prompt_token_ids and self.endpoint == "chat":
            raise ValueError("--prompt-token-ids needs --endpoint completions (chat messages are text)")
        if self.vocab_size < 2:
            raise ValueError(f"--vocab-size must be >= 2, got {self.vocab_size}")
        if not self.duration_s > 0 or not self.request_timeout_s > 0:
            raise ValueError("--duration-s and --request-timeout-s must be > 0")
        if self.image_size is not None:
            image_dims(self.image_size)
            if self.endpoint != "chat":
                raise ValueError("--image-size needs --endpoint chat (images are chat content parts)")


MAX_IMAGE_SIDE = 8192


def image_dims(text: str) -> tuple[int, int]:
    """``"1024x768"`` -> ``(1024, 768)``; raises ``ValueError`` unless both sides are in ``[1, 8192]``."""
    w, sep, h = text.lower().partition("x")
    if not sep or not w.strip().isdigit() or not h.strip().isdigit() or not (
            1 <= int(w) <= MAX_IMAGE_SIDE and 1 <= int(h) <= MAX_IMAGE_SIDE):
        raise ValueError(f"--image-size must be WIDTHxHEIGHT with sides in [1, {MAX_IMAGE_SIDE}], got {text!r}")
    return int(w), int(h)


def random_png_data_uri(width: int, height: int, seed: int) -> str:
    """A ``data:image/png;base64,...`` URI of a ``width x height`` RGB image of seeded random pixels (an
    uncompressed-filter PNG written with zlib; no imaging library needed)."""
    pixels = random.Random(seed).randbytes(3 * width * height)
    rows = b"".join(b"\x00" + pixels[3 * width * y:3 * width * (y + 1)] for y in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB, no interlace
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows, 1)) + chunk(b"IEND", b"")
    return "data:image/png;base64," + base64.b64encode(png).decode()


def resolve_config(base_url: str, scenario: str | None = None, **options: Any) -> BenchConfig:
    """A validated config: defaults, then the scenario's values, then every option that is not ``None``.

    With neither a concurrency nor a request rate from the scenario or the options, requests go one
    at a time (``concurrency=1``); a rate alone leaves the concurrency unbounded.

    Raises:
        ValueError: unknown scenario or a knob out of range.
    """
    values: dict[str, Any] = {}
    if scenario is not None:
        if scenario not in SCENARIOS:
            raise ValueError(f"unknown scenario {scenario!r}; choose from {sorted(SCENARIOS)}")
        values.update(SCENARIOS[scenario])
    values.update({k: v for k, v in options.items() if v is not None})
    if values.get("endpoint") is None:
        values["endpoint"] = "chat" if values.get("image_size") else "completions"
    if values.get("concurrency") is None and values.get("request_rate") is None:
        values["concurrency"] = 1
    if values.get("request_rate") == math.inf:
        values["request_rate"] = None
    cfg = BenchConfig(base_url=base_url, scenario=scenario, **values)
    cfg.validate()
    return cfg


def api_root(base_url: str) -> str:
    """``http://host:port`` or ``http://host:port/v1`` -> ``http://host:port/v1``."""
    root = base_url.rstrip("/")
    return root if root.endswith("/v1") else root + "/v1"


def arrival_offsets(n: int, rate: float | None, rng: random.Random) -> list[float]:
    """Send times (s after start) of ``n`` requests: a Poisson process of ``rate`` requests/s
    (exponential gaps, the first request at 0), or all at 0 when ``rate`` is ``None``."""
    if rate is None or math.isinf(rate):
        return [0.0] * n
    out, t = [], 0.0
    for _ in range(n):
        out.append(t)
        t += rng.expovariate(rate)
    return out


@dataclass
class RequestSpec:
    index: int
    prompt: str | list[int]  # completions prompt, or the chat user message
    system: str | None  # chat only: the shared prefix as a system message
    input_len: int  # nominal prompt tokens (prefix + unique part)
    output_len: int


def _length(rng: random.Random, n: int, ratio: float) -> int:
    if ratio == 0:
        return n
    return rng.randint(max(1, int(n * (1 - ratio))), max(1, int(n * (1 + ratio))))


def build_requests(cfg: BenchConfig, rng: random.Random) -> list[RequestSpec]:
    """The ``cfg.num_requests`` prompts of a run (deterministic for a given ``rng`` seed)."""

    def tokens(n: int) -> list[int]:
        return [rng.randrange(1, cfg.vocab_size) for _ in range(n)]

    def text(n: int) -> str:
        return " ".join(rng.choice(_WORDS) for _ in range(n))

    make = tokens if cfg.prompt_token_ids else text
    prefix = make(cfg.prefix_len) if cfg.prefix_len else None
    specs = []
    for i in range(cfg.num_requests):
        n_in = _length(rng, cfg.input_len, cfg.range_ratio)
        n_out = _length(rng, cfg.output_len, cfg.range_ratio)
        unique = make(n_in)
        system = None
        if prefix is None:
            prompt = unique
        elif cfg.endpoint == "chat":
            prompt, system = unique, prefix
        else:
            prompt = prefix + unique if cfg.prompt_token_ids else f"{prefix} {unique}"
        specs.append(RequestSpec(i, prompt, system, cfg.prefix_len + n_in, n_out))
    return specs


def request_body(cfg: BenchConfig, model: str, spec: RequestSpec) -> dict[str, Any]:
    """The JSON body of one streamed request."""
    body: dict[str, Any] = {"model": model, "max_tokens": spec.output_len, "stream": True,
                            "stream_options": {"include_usage": True}}
    if cfg.ignore_eos:
        body["ignore_eos"] = True
    if cfg.endpoint == "chat":
        messages = [] if spec.system is None else [{"role": "system", "content": spec.system}]
        content: Any = spec.prompt
        if cfg.image_size is not None:  # a new image per request (seeded by the run's seed and the index)
            uri = random_png_data_uri(*image_dims(cfg.image_size), cfg.seed * MAX_REQUESTS + spec.index)
            content = [{"type": "image_url", "image_url": {"url": uri}}, {"type": "text", "text": spec.prompt}]
        body["messages"] = messages + [{"role": "user", "content": content}]
    else:
        body["prompt"] = spec.prompt
        if cfg.prompt_token_ids:
            body["return_token_ids"] = True  # count output even when the server has no tokenizer
    return body


def _chunk_has_output(obj: dict[str, Any], endpoint: str) -> bool:
    for choice in obj.get("choices") or []:
        if endpoint == "chat":
            delta = choice.get("delta") or {}
            if delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning") \
                    or delta.get("tool_calls"):
                return True
        elif choice.get("text") or choice.get("token_ids"):  # token ids: a server without a tokenizer
            return True
    return False


async def stream_request(client: httpx.AsyncClient, url: str, body: dict[str, Any], endpoint: str,
                         result: RequestResult) -> None:
    """Send one streamed request and fill ``result`` with its timings and token counts."""
    start = time.perf_counter()
    last: float | None = None
    usage: dict[str, Any] | None = None
    try:
        async with client.stream("POST", url, json=body) as resp:
            if resp.status_code != 200:
                text = (await resp.aread())[:300].decode(errors="replace")
                result.error = f"HTTP {resp.status_code}: {text}"
                return
            async for line in resp.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                now = time.perf_counter()
                obj = json.loads(data)
                if obj.get("error"):
                    result.error = f"stream error: {json.dumps(obj['error'])[:300]}"
                    return
                if obj.get("usage"):
                    usage = obj["usage"]
                if _chunk_has_output(obj, endpoint):
                    if last is None:
                        result.ttft_s = now - start
                    else:
                        result.itl_s.append(now - last)
                    last = now
                    result.chunks += 1
    except (httpx.HTTPError, json.JSONDecodeError) as exc:
        result.error = f"{type(exc).__name__}: {exc}"
        return
    result.e2e_s = time.perf_counter() - start
    if usage is not None:
        result.prompt_tokens = usage.get("prompt_tokens")
        details = usage.get("prompt_tokens_details") or {}
        result.cached_tokens = details.get("cached_tokens")
    result.output_tokens = int(usage["completion_tokens"]) if usage and "completion_tokens" in usage \
        else result.chunks
    if result.chunks == 0:
        result.error = "the stream ended without output"
        return
    result.ok = True


async def first_model(client: httpx.AsyncClient, root: str) -> str:
    """The first model id of ``GET {root}/models``.

    Raises:
        ValueError: the server answers no model.
    """
    resp = await client.get(f"{root}/models")
    resp.raise_for_status()
    data = resp.json().get("data") or []
    if not data:
        raise ValueError(f"{root}/models lists no model; pass --model")
    return str(data[0]["id"])


async def run_benchmark(cfg: BenchConfig) -> dict[str, Any]:
    """Run the benchmark described by ``cfg`` and return :func:`summarize`'s report."""
    cfg.validate()
    rng = random.Random(cfg.seed)
    root = api_root(cfg.base_url)
    url = f"{root}/chat/completions" if cfg.endpoint == "chat" else f"{root}/completions"
    headers = {"Authorization": f"Bearer {cfg.api_key}"} if cfg.api_key else {}
    limits = httpx.Limits(max_connections=cfg.concurrency, max_keepalive_connections=cfg.concurrency)
    async with httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(cfg.request_timeout_s), limits=limits,
                                 trust_env=False) as client:
        model = cfg.model or await first_model(client, root)
        specs = build_requests(cfg, rng)
        offsets = arrival_offsets(len(specs), cfg.request_rate, rng)
        results = [RequestResult(s.index) for s in specs]
        gate = asyncio.Semaphore(cfg.concurrency or len(specs))
        t0 = time.perf_counter()

        async def one(spec: RequestSpec, offset: float) -> None:
            result = results[spec.index]
            try:
                await asyncio.sleep(max(0.0, t0 + offset - time.perf_counter()))
                async with gate:
                    result.sent_at_s = time.perf_counter() - t0
                    await stream_request(client, url, request_body(cfg, model, spec), cfg.endpoint, result)
            except asyncio.CancelledError:
                if result.sent_at_s is not None and not result.ok and result.error is None:
                    result.cancelled = True
                raise

        tasks = [asyncio.create_task(one(s, o)) for s, o in zip(specs, offsets)]
        _, pending = await asyncio.wait(tasks, timeout=cfg.duration_s)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        elapsed = time.perf_counter() - t0
    return summarize(cfg, model, results, elapsed)
