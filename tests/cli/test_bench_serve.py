"""``anna bench-serve`` against a scripted OpenAI-compatible SSE server on loopback."""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import statistics
import threading
import time
from typing import Any

import pytest
from anna_cli.bench_report import percentile
from anna_cli.loadgen import (
    BenchConfig,
    api_root,
    arrival_offsets,
    build_requests,
    resolve_config,
    run_benchmark,
)
from anna_cli.main import build_cli
from anna_core.plugins import make_plugin_manager
from click.testing import CliRunner

TTFT_S = 0.06
ITL_S = 0.015


class FakeOpenAIServer:
    """A raw-asyncio HTTP/1.1 server streaming scripted SSE chunks, in a background thread.

    Each streamed request waits ``ttft_s``, then emits ``max_tokens`` tokens ``tokens_per_chunk``
    per chunk, ``itl_s`` apart, then a usage chunk (if asked and ``send_usage``) and ``[DONE]``.
    Requests whose arrival index is in ``fail_indices`` get HTTP 500. It records request bodies,
    arrival times and the most requests in flight at once.
    """

    def __init__(self, *, ttft_s: float = TTFT_S, itl_s: float = ITL_S, tokens_per_chunk: int = 1,
                 send_usage: bool = True, fail_indices: tuple[int, ...] = (), model: str = "fake-model"):
        self.ttft_s, self.itl_s, self.tokens_per_chunk = ttft_s, itl_s, tokens_per_chunk
        self.send_usage, self.fail_indices, self.model = send_usage, set(fail_indices), model
        self.bodies: list[dict[str, Any]] = []
        self.paths: list[str] = []
        self.arrivals: list[float] = []
        self.headers: list[dict[str, str]] = []
        self.in_flight = self.max_in_flight = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._ready = threading.Event()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()

    def __enter__(self):
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    async def _shutdown(self) -> None:
        self._server.close()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            method, path, _ = (await reader.readline()).decode().split(" ", 2)
            headers = {}
            while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
                key, value = line.decode().split(":", 1)
                headers[key.strip().lower()] = value.strip()
            body = await reader.readexactly(int(headers.get("content-length", 0)))
            if method == "GET" and path == "/v1/models":
                payload = json.dumps({"object": "list", "data": [{"id": self.model, "object": "model"}]}).encode()
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
                             + f"Content-Length: {len(payload)}\r\n\r\n".encode() + payload)
            elif method == "POST" and path in ("/v1/completions", "/v1/chat/completions"):
                await self._stream(writer, path, headers, json.loads(body))
            else:
                writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def _stream(self, writer: asyncio.StreamWriter, path: str, headers: dict[str, str],
                      body: dict[str, Any]) -> None:
        index = len(self.bodies)
        self.bodies.append(body)
        self.paths.append(path)
        self.headers.append(headers)
        self.arrivals.append(time.perf_counter())
        if index in self.fail_indices:
            msg = b'{"error":{"message":"scripted failure"}}'
            writer.write(b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\n"
                         + f"Content-Length: {len(msg)}\r\nConnection: close\r\n\r\n".encode() + msg)
            return
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n")
            chat = path.endswith("chat/completions")
            if chat:  # a role-only first chunk carries no output and must not count as the first token
                self._event(writer, {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
            await writer.drain()
            await asyncio.sleep(self.ttft_s)
            n, sent = body["max_tokens"], 0
            while sent < n:
                k = min(self.tokens_per_chunk, n - sent)
                text = "".join(f" t{sent + j}" for j in range(k))
                choice = {"index": 0, "delta": {"content": text}} if chat else {"index": 0, "text": text}
                self._event(writer, {"choices": [choice]})
                await writer.drain()
                sent += k
                if sent < n:
                    await asyncio.sleep(self.itl_s)
            if self.send_usage and body.get("stream_options", {}).get("include_usage"):
                prompt = body.get("prompt", [])
                usage = {"prompt_tokens": len(prompt) if isinstance(prompt, list) else 0, "completion_tokens": n,
                         "total_tokens": n, "prompt_tokens_details": {"cached_tokens": 16}}
                self._event(writer, {"choices": [], "usage": usage})
            writer.write(b"data: [DONE]\n\n")
        finally:
            self.in_flight -= 1

    @staticmethod
    def _event(writer: asyncio.StreamWriter, obj: dict[str, Any]) -> None:
        writer.write(b"data: " + json.dumps(obj).encode() + b"\n\n")


def _run(cfg: BenchConfig) -> dict[str, Any]:
    return asyncio.run(run_benchmark(cfg))


def test_counts_tokens_and_real_timings():
    with FakeOpenAIServer() as server:
        cfg = resolve_config(server.url, num_requests=6, concurrency=3, input_len=20, output_len=5,
                             prompt_token_ids=True, seed=1)
        report = _run(cfg)
    assert report["model"] == "fake-model"  # from GET /v1/models
    assert report["requests"] == {"total": 6, "succeeded": 6, "failed": 0, "cancelled": 0, "not_sent": 0}
    assert report["output_tokens"] == 30
    assert report["prompt_tokens"] == 120
    assert report["cached_prompt_tokens"] == 6 * 16
    assert server.max_in_flight == 3
    for body in server.bodies:
        assert body["model"] == "fake-model" and body["max_tokens"] == 5 and body["ignore_eos"] is True
        assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
        assert len(body["prompt"]) == 20 and all(isinstance(t, int) and 1 <= t < 10_000 for t in body["prompt"])
    # Timings are measured, so they cannot be below the scripted delays.
    ttft, itl, e2e, tpot = report["ttft_ms"], report["itl_ms"], report["e2e_ms"], report["tpot_ms"]
    assert TTFT_S * 1000 <= ttft["p50"] <= ttft["p95"] <= ttft["p99"] < TTFT_S * 1000 + 2000
    assert ITL_S * 1000 * 0.9 <= itl["p50"] <= itl["p99"]
    assert e2e["p50"] >= (TTFT_S + 4 * ITL_S) * 1000
    assert tpot["p50"] >= ITL_S * 1000 * 0.9
    assert report["duration_s"] >= 2 * (TTFT_S + 4 * ITL_S)  # two waves of three
    assert report["requests_per_s"] == pytest.approx(6 / report["duration_s"])
    assert report["output_tokens_per_s"] == pytest.approx(30 / report["duration_s"])


def test_itl_percentiles_come_from_chunk_gaps():
    # One slow request stream: ITL gaps of 40 ms; TTFT 10 ms.
    with FakeOpenAIServer(ttft_s=0.01, itl_s=0.04) as server:
        report = _run(resolve_config(server.url, num_requests=2, input_len=4, output_len=6, seed=0))
    assert report["requests"]["succeeded"] == 2
    assert 40.0 <= report["itl_ms"]["p50"] < 1000.0
    assert 10.0 <= report["ttft_ms"]["p50"] < report["itl_ms"]["p50"]  # TTFT < one ITL here
    assert server.max_in_flight == 1  # default: one request at a time


def test_usage_vs_chunk_counting():
    with FakeOpenAIServer(tokens_per_chunk=2, ttft_s=0.0, itl_s=0.0) as server:
        report = _run(resolve_config(server.url, num_requests=2, output_len=6, input_len=3, concurrency=2))
    assert report["output_tokens"] == 12  # from usage, although only 3 chunks per request came
    with FakeOpenAIServer(tokens_per_chunk=2, send_usage=False, ttft_s=0.0, itl_s=0.0) as server:
        report = _run(resolve_config(server.url, num_requests=2, output_len=6, input_len=3, concurrency=2))
    assert report["output_tokens"] == 6  # no usage: one token per output chunk
    assert report["prompt_tokens"] == 0


def test_failures_are_counted_and_reported():
    with FakeOpenAIServer(ttft_s=0.0, itl_s=0.0, fail_indices=(1, 3)) as server:
        report = _run(resolve_config(server.url, num_requests=5, output_len=2, input_len=2, model="m"))
    assert report["requests"]["succeeded"] == 3 and report["requests"]["failed"] == 2
    assert report["output_tokens"] == 6
    (error, count), = report["errors"].items()
    assert count == 2 and error.startswith("HTTP 500") and "scripted failure" in error


def test_chat_endpoint_with_shared_system_prompt():
    with FakeOpenAIServer(ttft_s=0.02, itl_s=0.0) as server:
        cfg = resolve_config(server.url, "repeated-system-prompt", endpoint="chat", num_requests=4,
                             concurrency=4, prefix_len=50, input_len=5, output_len=3, api_key="sekret")
        report = _run(cfg)
    assert report["requests"]["succeeded"] == 4 and report["output_tokens"] == 12
    assert report["ttft_ms"]["p50"] >= 20.0  # the role-only chunk did not count as the first token
    assert set(server.paths) == {"/v1/chat/completions"}
    assert all(h["authorization"] == "Bearer sekret" for h in server.headers)
    systems = {body["messages"][0]["content"] for body in server.bodies}
    users = [body["messages"][1]["content"] for body in server.bodies]
    assert len(systems) == 1 and len(next(iter(systems)).split()) == 50
    assert len(set(users)) == 4 and all(len(u.split()) == 5 for u in users)


def test_image_chat_sends_a_new_random_png_per_request():
    import base64
    import io

    from PIL import Image

    with FakeOpenAIServer(ttft_s=0.0, itl_s=0.0) as server:
        cfg = resolve_config(server.url, "image-chat", image_size="24x16", num_requests=3, concurrency=3,
                             input_len=4, output_len=2)
        report = _run(cfg)
    assert cfg.endpoint == "chat" and report["requests"]["succeeded"] == 3
    pictures = []
    for body in server.bodies:
        image, text = body["messages"][0]["content"]
        assert text["type"] == "text" and len(text["text"].split()) == 4
        header, payload = image["image_url"]["url"].split(",", 1)
        assert header == "data:image/png;base64"
        picture = Image.open(io.BytesIO(base64.b64decode(payload)))
        picture.load()  # a valid PNG (CRCs, zlib stream)
        assert picture.size == (24, 16) and picture.mode == "RGB"
        pictures.append(picture.tobytes())
    assert len(set(pictures)) == 3 and len(set(pictures[0])) > 100  # random, and new per request
    with pytest.raises(ValueError, match="--endpoint chat"):
        resolve_config(server.url, image_size="8x8", endpoint="completions")
    with pytest.raises(ValueError, match="WIDTHxHEIGHT"):
        resolve_config(server.url, image_size="8x0")


def test_repeated_system_prompt_token_ids_share_prefix():
    cfg = resolve_config("http://127.0.0.1:1", "repeated-system-prompt", prompt_token_ids=True, num_requests=8)
    specs = build_requests(cfg, random.Random(cfg.seed))
    prefix = specs[0].prompt[:1024]
    assert all(len(s.prompt) == 1024 + 32 and s.prompt[:1024] == prefix for s in specs)
    assert len({tuple(s.prompt[1024:]) for s in specs}) == 8
    assert build_requests(cfg, random.Random(cfg.seed))[5].prompt == specs[5].prompt  # seeded


def test_duration_bound_cancels_and_stops_sending():
    with FakeOpenAIServer(ttft_s=5.0) as server:
        t0 = time.perf_counter()
        report = _run(resolve_config(server.url, num_requests=10, concurrency=2, output_len=2, input_len=2,
                                     duration_s=0.3))
        elapsed = time.perf_counter() - t0
    assert elapsed < 3.0
    assert report["requests"] == {"total": 10, "succeeded": 0, "failed": 0, "cancelled": 2, "not_sent": 8}
    assert len(server.bodies) == 2


def test_poisson_arrivals():
    rng = random.Random(7)
    offsets = arrival_offsets(4000, 50.0, rng)
    gaps = [b - a for a, b in itertools.pairwise(offsets)]
    assert offsets[0] == 0.0 and all(g >= 0 for g in gaps)
    assert statistics.mean(gaps) == pytest.approx(1 / 50.0, rel=0.05)
    assert statistics.stdev(gaps) == pytest.approx(1 / 50.0, rel=0.1)  # exponential: stdev = mean
    assert arrival_offsets(5, 50.0, random.Random(7)) == offsets[:5]
    assert arrival_offsets(3, None, rng) == [0.0, 0.0, 0.0]


def test_request_rate_spreads_sends():
    with FakeOpenAIServer(ttft_s=0.0, itl_s=0.0) as server:
        cfg = resolve_config(server.url, num_requests=5, request_rate=10.0, output_len=1, input_len=2, seed=3)
        report = _run(cfg)
    rng = random.Random(3)
    build_requests(cfg, rng)
    offsets = arrival_offsets(5, 10.0, rng)
    assert report["requests"]["succeeded"] == 5
    seen = [t - server.arrivals[0] for t in server.arrivals]
    assert seen[-1] >= offsets[-1] - offsets[0] - 0.02
    assert report["config"]["concurrency"] is None  # a rate alone: no concurrency cap


def test_config_precedence_and_validation():
    cfg = resolve_config("http://h:1", "concurrent-short", input_len=7)
    assert (cfg.input_len, cfg.output_len, cfg.concurrency, cfg.num_requests) == (7, 128, 64, 256)
    assert resolve_config("http://h:1").concurrency == 1
    assert resolve_config("http://h:1", request_rate=float("inf")).request_rate is None
    for bad in ({"endpoint": "chat", "prompt_token_ids": True}, {"num_requests": 0}, {"range_ratio": 1.0},
                {"concurrency": 0}, {"request_rate": -1.0}):
        with pytest.raises(ValueError):
            resolve_config("http://h:1", **bad)
    with pytest.raises(ValueError, match="unknown scenario"):
        resolve_config("http://h:1", "nope")
    assert api_root("http://h:1/") == "http://h:1/v1" and api_root("http://h:1/v1") == "http://h:1/v1"
    assert percentile([3.0, 1.0, 2.0, 4.0], 50) == 2.5 and percentile([], 99) is None
    mixed = resolve_config("http://h:1", "mixed", num_requests=50)
    lens = [s.input_len for s in build_requests(mixed, random.Random(0))]
    assert min(lens) >= int(512 * 0.1) and max(lens) <= int(512 * 1.9) and len(set(lens)) > 10


def _cli():
    return build_cli(make_plugin_manager({"anna_cli"}))


def test_cli_command_registered_through_plugin_and_json_output(tmp_path):
    out = tmp_path / "bench.json"
    with FakeOpenAIServer(ttft_s=0.01, itl_s=0.0) as server:
        result = CliRunner().invoke(_cli(), ["bench-serve", "--base-url", server.url + "/v1", "--num-requests", "3",
                                             "--concurrency", "3", "--input-len", "8", "--output-len", "4",
                                             "--prompt-token-ids", "--json", "--output", str(out)])
        assert result.exit_code == 0, result.output
        report = json.loads(result.output)
        assert report["requests"]["succeeded"] == 3 and report["output_tokens"] == 12
        assert json.loads(out.read_text()) == report
        assert "api_key" not in report["config"]
        table = CliRunner().invoke(_cli(), ["bench-serve", "--base-url", server.url, "--num-requests", "2",
                                            "--output-len", "2", "--input-len", "2"])
    assert table.exit_code == 0, table.output
    assert "TTFT p50 / p95 / p99 (ms)" in table.output and "succeeded / total" in table.output
    bad = CliRunner().invoke(_cli(), ["bench-serve", "--base-url", "http://127.0.0.1:1", "--endpoint", "chat",
                                      "--prompt-token-ids"])
    assert bad.exit_code == 2 and "--prompt-token-ids" in bad.output
