"""The official ``openai`` client against a live ``anna serve`` (tiny random Qwen3.5, CPU).

Random weights give arbitrary text, so the tests compare the server with itself under different
conditions (streamed vs. not, batched vs. alone, with vs. without a stop string) and check counts
against the tokenizer. Greedy sampling and ``ignore_eos`` make every output deterministic.

The last test sends SIGTERM and checks the drain; it must stay last in this module.
"""

from __future__ import annotations

import asyncio
import signal
import threading
import time

import httpx
import openai
import pytest

from tests.integration.conftest import MAX_MODEL_LEN, MODEL_NAME

pytestmark = [pytest.mark.integration, pytest.mark.slow]

GREEDY = {"temperature": 0.0, "extra_body": {"ignore_eos": True}}
MESSAGES = [{"role": "user", "content": "Hello, how are you today?"}]


@pytest.fixture(scope="module")
def client(live_server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{live_server.base_url}/v1", api_key="unused", max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def tokenizer(live_server):
    from anna_core.tokenizer import Tokenizer

    return Tokenizer.from_pretrained(live_server.model_dir)


def test_models_endpoint(client):
    models = client.models.list().data
    assert [m.id for m in models] == [MODEL_NAME]
    assert models[0].model_extra["max_model_len"] == MAX_MODEL_LEN


def test_chat_non_streaming_usage(client, tokenizer):
    r = client.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, max_tokens=8, **GREEDY)
    prompt = tokenizer.encode(tokenizer.apply_chat_template(MESSAGES))
    assert r.object == "chat.completion" and r.model == MODEL_NAME
    assert r.choices[0].finish_reason == "length"
    assert r.choices[0].message.role == "assistant" and isinstance(r.choices[0].message.content, str)
    assert (r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens) == (len(prompt), 8, len(prompt) + 8)


def test_chat_streaming_matches_non_streaming(client):
    plain = client.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, max_tokens=10, **GREEDY)
    chunks = list(client.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, max_tokens=10, stream=True,
                                                 stream_options={"include_usage": True}, **GREEDY))
    usage_chunk = chunks[-1]
    assert usage_chunk.choices == [] and usage_chunk.usage.completion_tokens == 10
    assert usage_chunk.usage.prompt_tokens == plain.usage.prompt_tokens
    text = "".join(c.choices[0].delta.content or "" for c in chunks[:-1])
    assert text == plain.choices[0].message.content
    assert chunks[-2].choices[0].finish_reason == "length"


def test_completion_streaming_and_not(client, tokenizer):
    prompt = "The quick brown fox"
    plain = client.completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=6, **GREEDY)
    assert plain.object == "text_completion" and plain.choices[0].finish_reason == "length"
    assert (plain.usage.prompt_tokens, plain.usage.completion_tokens) == (len(tokenizer.encode(prompt)), 6)
    chunks = list(client.completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=6, stream=True, **GREEDY))
    assert "".join(c.choices[0].text for c in chunks) == plain.choices[0].text
    assert chunks[-1].choices[0].finish_reason == "length"


def test_stop_string_cuts_output(client):
    base = client.completions.create(model=MODEL_NAME, prompt="Hello, world!", max_tokens=24, **GREEDY)
    text = base.choices[0].text
    # a stop string made of printable ASCII from the middle of the output, first occurring there
    starts = [i for i in range(1, len(text) - 1)
              if text[i:i + 2].isascii() and text[i:i + 2].isprintable() and text.find(text[i:i + 2]) == i]
    if not starts:
        pytest.skip(f"no ASCII stop-string candidate in the random output {text!r}")
    stop = text[starts[0]:starts[0] + 2]
    cut = client.completions.create(model=MODEL_NAME, prompt="Hello, world!", max_tokens=24, stop=[stop], **GREEDY)
    assert cut.choices[0].text == text[:starts[0]]
    assert cut.choices[0].finish_reason == "stop"
    assert cut.usage.completion_tokens < 24


def test_unknown_model_is_404(client):
    with pytest.raises(openai.NotFoundError) as info:
        client.chat.completions.create(model="no-such-model", messages=MESSAGES, max_tokens=2)
    assert info.value.status_code == 404
    assert info.value.body["code"] == "model_not_found"


def test_bad_body_is_400(client):
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, temperature=-1)
    assert info.value.body["param"] == "temperature" and info.value.body["type"] == "invalid_request_error"
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model=MODEL_NAME, prompt="Hello", max_tokens=MAX_MODEL_LEN)
    assert str(MAX_MODEL_LEN) in info.value.body["message"] and info.value.body["param"] == "max_tokens"
    for stream in (False, True):  # the engine's own check (token ids beyond the vocabulary)
        with pytest.raises(openai.BadRequestError) as info:
            client.completions.create(model=MODEL_NAME, prompt=[1, 10**6], max_tokens=2, stream=stream)
        assert info.value.body["param"] == "prompt" and "vocabulary" in info.value.body["message"]


def test_eight_concurrent_streams_match_sequential_outputs(live_server, client):
    prompts = [f"Request number {i}: tell me about {word}" for i, word in
               enumerate(["cats", "dogs", "the sea", "numbers", "tokens", "models", "streams", "Anna"])]
    lengths = [6 + 2 * i for i in range(8)]  # different lengths: requests leave the batch at different steps
    alone = [client.completions.create(model=MODEL_NAME, prompt=p, max_tokens=n, **GREEDY).choices[0].text
             for p, n in zip(prompts, lengths)]

    async def stream_all() -> list[tuple[str, str | None, int]]:
        aclient = openai.AsyncOpenAI(base_url=f"{live_server.base_url}/v1", api_key="unused", max_retries=0,
                                     timeout=120)

        async def one(prompt: str, n: int) -> tuple[str, str | None, int]:
            stream = await aclient.completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=n, stream=True,
                                                      stream_options={"include_usage": True}, **GREEDY)
            text, finish, used = "", None, -1
            async for chunk in stream:
                if chunk.choices:
                    text += chunk.choices[0].text
                    finish = chunk.choices[0].finish_reason or finish
                if chunk.usage is not None:
                    used = chunk.usage.completion_tokens
            return text, finish, used

        try:
            return await asyncio.gather(*(one(p, n) for p, n in zip(prompts, lengths)))
        finally:
            await aclient.close()

    results = asyncio.run(stream_all())
    assert [r[0] for r in results] == alone
    assert [r[1] for r in results] == ["length"] * 8
    assert [r[2] for r in results] == lengths


def test_cancel_half_of_100_streams_keeps_serving_and_frees_everything(live_server, client):
    """Cancel 50 of 100 streaming requests mid-way: the rest finish, then every block and slot is free."""

    async def run() -> list[tuple[int, str | None]]:
        aclient = openai.AsyncOpenAI(base_url=f"{live_server.base_url}/v1", api_key="unused", max_retries=0,
                                     timeout=120)

        async def one(i: int) -> tuple[int, str | None]:
            stream = await aclient.completions.create(model=MODEL_NAME, prompt=f"Stream {i} says", max_tokens=12,
                                                      stream=True, **GREEDY)
            chunks, finish = 0, None
            async for chunk in stream:
                chunks += bool(chunk.choices and chunk.choices[0].text)
                finish = (chunk.choices[0].finish_reason if chunk.choices else None) or finish
                if i % 2 == 0 and chunks == 2 and finish is None:
                    await stream.close()  # the client goes away mid-stream
                    break
            return chunks, finish

        try:
            return await asyncio.gather(*(one(i) for i in range(100)))
        finally:
            await aclient.close()

    results = asyncio.run(run())
    # a client that reads slowly (a loaded machine) gets several tokens per chunk, so count finishes, not chunks
    assert all(finish == "length" for _, finish in results[1::2])  # the others ran to their 12 tokens
    cancelled = [chunks for chunks, finish in results[0::2] if finish is None]
    assert cancelled and all(c == 2 for c in cancelled)
    # the server still answers, and once idle holds no block or slot
    assert client.completions.create(model=MODEL_NAME, prompt="Still there?", max_tokens=3, **GREEDY).choices[0].text
    deadline = time.monotonic() + 30
    while True:
        engine = httpx.get(f"{live_server.base_url}/healthz").json()["engine"]
        if engine["running"] == 0 and engine["waiting"] == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert engine["running"] == 0 and engine["waiting"] == 0
    assert engine["kv_blocks_used"] == 0 and engine["state_slots_used"] == 0


def test_repeated_prompt_reports_cached_tokens_and_hit_rate(live_server, client):
    prompt = "Once upon a time " * 20  # several KV blocks
    first = client.completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=3, **GREEDY)
    again = client.completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=3, **GREEDY)
    assert again.choices[0].text == first.choices[0].text
    assert again.usage.prompt_tokens_details.cached_tokens > 0
    metrics = httpx.get(f"{live_server.base_url}/healthz").json()["metrics"]
    assert metrics["prefix_cache"]["hit_rate"] > 0


def test_metrics_on_healthz_and_prometheus(live_server):
    metrics = httpx.get(f"{live_server.base_url}/healthz").json()["metrics"]
    assert metrics["requests"]["finished"] > 0
    assert metrics["latency_ms"]["ttft"]["p50"] > 0 and metrics["latency_ms"]["itl"]["p95"] > 0
    assert metrics["tokens"]["generated"] > 0
    r = httpx.get(f"{live_server.base_url}/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    assert "anna_time_to_first_token_seconds_bucket" in r.text
    assert "anna_kv_blocks_used" in r.text


def test_health_healthz_and_request_id(live_server):
    assert httpx.get(f"{live_server.base_url}/health").json() == {"status": "ready"}
    body = httpx.get(f"{live_server.base_url}/healthz").json()
    assert body["model"] == MODEL_NAME and body["family"] == "qwen35"
    assert body["device"] == "cpu" and body["dtype"] == "float32" and body["max_model_len"] == MAX_MODEL_LEN
    assert body["kernels"].get("paged_attention") == "reference"  # chosen by the requests above
    assert body["engine"]["tokens_generated"] > 0 and body["uptime_s"] > 0
    r = httpx.get(f"{live_server.base_url}/v1/models", headers={"X-Request-Id": "trace-42"})
    assert r.headers["x-request-id"] == "trace-42"
    assert httpx.get(f"{live_server.base_url}/nowhere").headers["x-request-id"]


def test_sigterm_drains_in_flight_requests_then_exits_zero(live_server):
    """Runs last: stops the session's server."""
    result: dict = {}
    first_chunk = threading.Event()
    max_tokens = MAX_MODEL_LEN - 8  # as long as the context allows: seconds on the tiny model

    def long_request() -> None:
        with httpx.stream("POST", f"{live_server.base_url}/v1/completions", timeout=120,
                          json={"model": MODEL_NAME, "prompt": "Hello", "max_tokens": max_tokens,
                                "ignore_eos": True, "temperature": 0, "stream": True}) as r:
            parts = []
            for part in r.iter_text():
                parts.append(part)
                first_chunk.set()
            result["text"] = "".join(parts)

    worker = threading.Thread(target=long_request)
    worker.start()
    assert first_chunk.wait(timeout=60)  # the request is in flight
    live_server.proc.send_signal(signal.SIGTERM)
    time.sleep(0.1)
    assert httpx.get(f"{live_server.base_url}/health").status_code == 503
    refused = httpx.post(f"{live_server.base_url}/v1/completions", json={"model": MODEL_NAME, "prompt": "x"})
    assert refused.status_code == 503 and refused.json()["error"]["code"] == "service_unavailable"
    assert worker.is_alive(), "the in-flight request ended before the drain could be observed"
    worker.join(timeout=120)
    assert result["text"].rstrip().endswith("data: [DONE]")
    assert '"finish_reason":"length"' in result["text"]
    assert live_server.proc.wait(timeout=60) == 0
