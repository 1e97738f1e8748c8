"""The OpenAI routes over a scripted fake engine: bodies, SSE framing, usage, errors, headers."""

from __future__ import annotations

import json
import logging

import pytest
from anna_core.server.app import create_app
from litestar.testing import TestClient

from tests.server.conftest import MODEL, SCRIPT, FakeEngine, make_state

CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "Hello"}]}


def sse_payloads(text: str) -> list:
    """Decode an SSE body into JSON payloads (``"[DONE]"`` kept as a string); checks the framing."""
    assert text.endswith("\n\n")
    frames = text.split("\n\n")[:-1]
    out = []
    for frame in frames:
        assert frame.startswith("data: "), frame
        data = frame[len("data: "):]
        out.append(data if data == "[DONE]" else json.loads(data))
    return out


def rendered_ids(tokenizer, messages, **kwargs):
    return tokenizer.encode(tokenizer.apply_chat_template(messages, **kwargs))


def test_models_lists_the_served_model_with_max_model_len(client):
    body = client.get("/v1/models").json()
    assert body["object"] == "list"
    assert [m["id"] for m in body["data"]] == [MODEL]
    assert body["data"][0]["max_model_len"] == 256


def test_chat_non_streaming_text_usage_and_prompt(client, engine, tiny_tokenizer):
    r = client.post("/v1/chat/completions", json=CHAT)
    assert r.status_code == 200
    body = r.json()
    assert body["object"] == "chat.completion" and body["id"].startswith("chatcmpl-")
    choice = body["choices"][0]
    assert choice["message"] == {"role": "assistant", "content": SCRIPT}
    assert choice["finish_reason"] == "stop"
    prompt_ids = rendered_ids(tiny_tokenizer, CHAT["messages"])
    n_out = len(tiny_tokenizer.encode(SCRIPT))
    assert body["usage"] == {"prompt_tokens": len(prompt_ids), "completion_tokens": n_out,
                             "total_tokens": len(prompt_ids) + n_out}
    (_, sent_ids, params), = engine.calls
    assert sent_ids == prompt_ids  # rendered with the checkpoint's template, no extra special tokens
    assert params.max_tokens == 256 - len(prompt_ids)  # no max_tokens: whatever the context leaves


def test_chat_max_tokens_cuts_with_length(client, tiny_tokenizer):
    body = client.post("/v1/chat/completions", json={**CHAT, "max_completion_tokens": 3}).json()
    ids = tiny_tokenizer.encode(SCRIPT)[:3]
    assert body["choices"][0]["message"]["content"] == tiny_tokenizer.decode(ids)
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"]["completion_tokens"] == 3


def test_stop_strings_reach_the_engine_and_cut_the_text(client, engine):
    body = client.post("/v1/chat/completions", json={**CHAT, "stop": "world"}).json()
    assert body["choices"][0]["message"]["content"] == "Hello, "
    assert body["choices"][0]["finish_reason"] == "stop"
    assert engine.calls[0][2].stop == ["world"]


def test_content_parts_are_flattened_for_the_template(client, engine):
    parts = {"model": MODEL, "messages": [{"role": "user", "content": [{"type": "text", "text": "Hel"},
                                                                        {"type": "text", "text": "lo"}]}]}
    client.post("/v1/chat/completions", json=parts)
    client.post("/v1/chat/completions", json={"model": MODEL, "messages": [{"role": "user", "content": "Hel\nlo"}]})
    assert engine.calls[0][1] == engine.calls[1][1]


def test_enable_thinking_server_default_and_request_override(tiny_tokenizer, engine):
    state = make_state(tiny_tokenizer, engine, enable_thinking=False)
    with TestClient(create_app(state)) as c:
        c.post("/v1/chat/completions", json=CHAT)
        c.post("/v1/chat/completions", json={**CHAT, "chat_template_kwargs": {"enable_thinking": True}})
    off, on = (tiny_tokenizer.decode(call[1], skip_special_tokens=False) for call in engine.calls)
    assert off.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert on.endswith("<|im_start|>assistant\n<think>\n")


def test_sampling_defaults_merge_request_over_server_over_checkpoint(tiny_tokenizer, engine):
    state = make_state(tiny_tokenizer, engine, checkpoint_sampling={"temperature": 0.6, "top_k": 20, "top_p": 0.95},
                       server_sampling={"temperature": 0.3}, max_completion_tokens=7)
    with TestClient(create_app(state)) as c:
        c.post("/v1/chat/completions", json={**CHAT, "top_p": 0.5, "seed": 3, "repetition_penalty": 1.1})
    params = engine.calls[0][2]
    assert (params.temperature, params.top_k, params.top_p) == (0.3, 20, 0.5)
    assert (params.seed, params.repetition_penalty, params.max_tokens) == (3, 1.1, 7)


@pytest.mark.parametrize("include_usage", [True, False])
def test_chat_streaming_framing_and_include_usage(client, tiny_tokenizer, include_usage):
    req = {**CHAT, "stream": True, "stream_options": {"include_usage": include_usage}}
    r = client.post("/v1/chat/completions", json=req)
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    payloads = sse_payloads(r.text)
    assert payloads[-1] == "[DONE]"
    chunks = payloads[:-1]
    assert len({c["id"] for c in chunks}) == 1 and all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    if include_usage:
        *chunks, usage_chunk = chunks
        assert usage_chunk["choices"] == []
        n_prompt = len(rendered_ids(tiny_tokenizer, CHAT["messages"]))
        n_out = len(tiny_tokenizer.encode(SCRIPT))
        assert usage_chunk["usage"] == {"prompt_tokens": n_prompt, "completion_tokens": n_out,
                                        "total_tokens": n_prompt + n_out}
        assert all(c["usage"] is None for c in chunks)
    else:
        assert all("usage" not in c for c in chunks)
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == SCRIPT
    assert [c["choices"][0]["finish_reason"] for c in chunks][-1] == "stop"
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])


class _OneShotEngine(FakeEngine):
    """Answers ``text`` in one output (the fake's per-token decoding garbles multi-byte characters)."""

    def __init__(self, tokenizer, text: str):
        super().__init__(tokenizer)
        self.text = text

    async def generate(self, request_id, prompt_token_ids, params):
        from anna_core.engine.outputs import RequestOutput, Usage

        yield RequestOutput(request_id=request_id, prompt_token_ids=list(prompt_token_ids), text=self.text,
                            token_ids=[5], delta_text=self.text, delta_token_ids=[5], finished=True,
                            finish_reason="stop", usage=Usage(len(prompt_token_ids), 1))


def test_streamed_frames_stay_one_line_for_splitlines_readers(tiny_tokenizer):
    # Regression (soak-and-fuzz suite): U+0085 / U+2028 / U+2029 went out raw, and httpx's iter_lines
    # (str.splitlines) cut the frame's JSON at them.
    import httpx

    text = "a\u2028b\u2029c\x85d"
    state = make_state(tiny_tokenizer, _OneShotEngine(tiny_tokenizer, text))
    with TestClient(create_app(state), raise_server_exceptions=False) as c:
        r = c.post("/v1/chat/completions", json={**CHAT, "stream": True})
    lines = [ln for ln in httpx.Response(200, content=r.content).iter_lines() if ln]
    chunks = [json.loads(ln.removeprefix("data: ")) for ln in lines[:-1]]
    assert lines[-1] == "data: [DONE]" and all(ln.startswith("data: ") for ln in lines)
    assert "".join(ch["choices"][0]["delta"].get("content", "") for ch in chunks) == text


def test_completion_non_streaming_and_streaming(client, engine, tiny_tokenizer):
    body = client.post("/v1/completions", json={"model": MODEL, "prompt": "Hello", "max_tokens": 4}).json()
    assert body["object"] == "text_completion"
    assert body["choices"][0]["text"] == tiny_tokenizer.decode(tiny_tokenizer.encode(SCRIPT)[:4])
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"]["prompt_tokens"] == len(tiny_tokenizer.encode("Hello"))
    r = client.post("/v1/completions", json={"model": MODEL, "prompt": [5, 6, 7], "stream": True,
                                             "stream_options": {"include_usage": True}})
    payloads = sse_payloads(r.text)
    assert payloads[-1] == "[DONE]" and payloads[-2]["choices"] == []
    assert payloads[-2]["usage"]["prompt_tokens"] == 3
    assert "".join(p["choices"][0]["text"] for p in payloads[:-2]) == SCRIPT
    assert engine.calls[1][1] == [5, 6, 7]


def test_unknown_model_is_404_model_not_found(client):
    r = client.post("/v1/chat/completions", json={**CHAT, "model": "gpt-4o"})
    assert r.status_code == 404
    err = r.json()["error"]
    assert err["code"] == "model_not_found" and err["type"] == "invalid_request_error" and "gpt-4o" in err["message"]
    assert set(err) == {"message", "type", "param", "code"}


@pytest.mark.parametrize(("body", "param", "needle"), [
    ({"model": MODEL}, "messages", "messages"),
    ({**CHAT, "temperature": "hot"}, "temperature", "number"),
    ({**CHAT, "temperature": 500}, "temperature", "temperature"),
    ({**CHAT, "max_tokens": 0}, "max_tokens", "at least 1"),
    ({**CHAT, "n": 17}, "n", "at most 16"),
    ({**CHAT, "store": True}, "store", "not supported"),
    ({**CHAT, "stop": [1]}, "stop", "stop"),
    ({**CHAT, "stream_options": {"include_usage": True}}, "stream_options", "stream"),
    ({"model": MODEL, "messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role", "role"),
    ({"model": MODEL, "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
     "messages[0].content[0].image_url.url", "image_url"),
    ({"model": MODEL, "messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}]},
     "messages[0].content[0].type", "input_audio"),
    ({"model": MODEL, "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]}, "messages", "text only"),
    ({"model": MODEL, "messages": [{"role": "user", "content": [{"type": "video_url", "video_url": {"url": ""}}]}]},
     "messages[0].content[0].video_url.url", "video_url"),
    ({"model": MODEL, "messages": [{"role": "user", "content": [
        {"type": "video_url", "video_url": {"url": "data:video/mp4;base64,AAAA"}}]}]}, "messages", "text only"),
    ({**CHAT, "chat_template_kwargs": {"tokenize": True}}, "chat_template_kwargs", "tokenize"),
])
def test_bad_bodies_are_400_in_openai_shape(client, body, param, needle):
    r = client.post("/v1/chat/completions", json=body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and err["param"] == param and needle in err["message"]


def test_invalid_json_and_non_object_bodies_are_400(client):
    r = client.post("/v1/completions", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400 and "not valid JSON" in r.json()["error"]["message"]
    assert client.post("/v1/completions", json=[1, 2]).status_code == 400


def test_prompt_plus_max_tokens_beyond_context_states_both_numbers(client, tiny_tokenizer):
    r = client.post("/v1/completions", json={"model": MODEL, "prompt": "Hello", "max_tokens": 1000})
    assert r.status_code == 400
    n_prompt = len(tiny_tokenizer.encode("Hello"))
    msg = r.json()["error"]["message"]
    assert "256" in msg and f"{n_prompt} in the prompt" in msg and "1000" in msg
    assert r.json()["error"]["param"] == "max_tokens"


def test_unknown_fields_are_ignored_with_one_warning_per_name(client, caplog):
    with caplog.at_level(logging.WARNING, logger="anna.server"):
        for _ in range(2):
            assert client.post("/v1/chat/completions", json={**CHAT, "vendor_x": 1, "vendor_y": {}}).status_code == 200
    warned = [rec.getMessage() for rec in caplog.records if "unknown request field" in rec.getMessage()]
    assert len(warned) == 2 and any("vendor_x" in w for w in warned) and any("vendor_y" in w for w in warned)


def test_x_request_id_echoed_or_generated_on_every_response(client):
    r = client.post("/v1/chat/completions", json=CHAT, headers={"X-Request-Id": "abc-123"})
    assert r.headers["x-request-id"] == "abc-123"
    r2 = client.post("/v1/chat/completions", json={**CHAT, "stream": True})
    assert len(r2.headers["x-request-id"]) == 32
    assert client.get("/no/such/route").headers["x-request-id"]
    bad = client.post("/v1/chat/completions", json={"model": MODEL}, headers={"x-request-id": "e1"})
    assert bad.status_code == 400 and bad.headers["x-request-id"] == "e1"


def test_internal_errors_are_500_without_traceback(tiny_tokenizer):
    engine = FakeEngine(tiny_tokenizer, fail_with=RuntimeError("secret detail in /some/path.py"))
    with TestClient(create_app(make_state(tiny_tokenizer, engine)), raise_server_exceptions=False) as c:
        r = c.post("/v1/chat/completions", json=CHAT)
    assert r.status_code == 500
    assert r.json()["error"]["type"] == "server_error"
    assert "secret" not in r.text and "Traceback" not in r.text


def test_health_ready_loading_draining(tiny_tokenizer, engine):
    from anna_core.server.state import ServerState

    loading = ServerState(model_name=MODEL)
    with TestClient(create_app(loading)) as c:
        assert c.get("/health").status_code == 503 and c.get("/health").json()["status"] == "loading"
        r = c.post("/v1/chat/completions", json=CHAT)
        assert r.status_code == 503 and r.json()["error"]["code"] == "service_unavailable"
        loading.set_ready(engine, tiny_tokenizer, max_model_len=128)
        assert c.get("/health").status_code == 200
        assert c.post("/v1/chat/completions", json=CHAT).status_code == 200
        loading.draining = True
        assert c.get("/health").json() == {"status": "draining"}
        r = c.post("/v1/chat/completions", json=CHAT)
        assert r.status_code == 503 and r.json()["error"]["code"] == "service_unavailable"
        assert r.headers["x-request-id"]


def test_healthz_reports_model_device_kernels_and_engine(client):
    client.post("/v1/chat/completions", json=CHAT)
    body = client.get("/healthz").json()
    assert body["model"] == MODEL and body["family"] == "qwen35" and body["device"] == "cpu"
    assert body["dtype"] == "float32" and body["kernels"] == {"rms_norm": "reference"}
    assert body["weights"] == {"linear": "int4-gptq", "lm_head": "float32"}
    assert body["engine"]["requests_served"] == 1 and body["uptime_s"] >= 0
    assert body["memory"]["total_bytes"] > 0


@pytest.mark.parametrize("stream", [False, True])
def test_engine_refusal_is_an_http_status_even_when_streaming(tiny_tokenizer, stream):
    from anna_core.errors import EngineDeadError, InvalidRequestError

    for exc, status in ((InvalidRequestError("prompt token id 999 is outside the vocabulary", param="prompt"), 400),
                        (EngineDeadError("the engine stopped"), 503)):
        engine = FakeEngine(tiny_tokenizer, fail_with=exc)
        with TestClient(create_app(make_state(tiny_tokenizer, engine))) as c:
            r = c.post("/v1/completions", json={"model": MODEL, "prompt": [5], "stream": stream})
        assert r.status_code == status and r.json()["error"]["message"] == str(exc)


def test_queue_full_is_429_with_retry_after(tiny_tokenizer):
    from anna_core.errors import QueueFullError

    engine = FakeEngine(tiny_tokenizer, fail_with=QueueFullError("the engine's waiting queue is full", retry_after_s=7))
    with TestClient(create_app(make_state(tiny_tokenizer, engine)), raise_server_exceptions=False) as c:
        for stream in (False, True):
            r = c.post("/v1/chat/completions", json={**CHAT, "stream": stream})
            assert r.status_code == 429 and r.headers["retry-after"] == "7"
            assert r.json()["error"]["code"] == "rate_limit_exceeded"


def test_metrics_content_type_has_exactly_one_charset(client):
    r = client.get("/metrics")
    assert r.status_code == 200
    assert r.headers.get_list("content-type") == ["text/plain; version=1.0.0; charset=utf-8"]


def _with_queue_limit(engine: FakeEngine, limit: int) -> FakeEngine:
    from types import SimpleNamespace

    from anna_core.engine.config import EngineConfig

    engine.engine = SimpleNamespace(config=EngineConfig(max_waiting_requests=limit))  # as AsyncEngine.engine
    return engine


def test_n_beyond_the_waiting_queue_limit_is_400_stating_both_numbers(tiny_tokenizer):
    engine = _with_queue_limit(FakeEngine(tiny_tokenizer), 2)
    with TestClient(create_app(make_state(tiny_tokenizer, engine))) as c:
        r = c.post("/v1/chat/completions", json={**CHAT, "n": 3})
        assert r.status_code == 400, r.text
        err = r.json()["error"]
        assert err["param"] == "n" and "n is 3" in err["message"] and "at most 2 waiting" in err["message"]
        r = c.post("/v1/completions", json={"model": MODEL, "prompt": ["a", "b"], "n": 2, "max_tokens": 1})
        assert r.status_code == 400 and "make 4 choices" in r.json()["error"]["message"]
        assert engine.calls == []
        assert len(c.post("/v1/chat/completions", json={**CHAT, "n": 2}).json()["choices"]) == 2
    unbounded = _with_queue_limit(FakeEngine(tiny_tokenizer), 0)
    with TestClient(create_app(make_state(tiny_tokenizer, unbounded))) as c:
        assert len(c.post("/v1/chat/completions", json={**CHAT, "n": 5, "max_tokens": 1}).json()["choices"]) == 5


def test_retrieve_model_serves_the_model_object_or_404(client):
    listed = client.get("/v1/models").json()["data"][0]
    r = client.get(f"/v1/models/{MODEL}")
    assert r.status_code == 200 and r.json() == listed and listed["max_model_len"] == 256
    missing = client.get("/v1/models/gpt-4o")
    assert missing.status_code == 404
    err = missing.json()["error"]
    assert err["code"] == "model_not_found" and err["param"] == "model" and "'gpt-4o'" in err["message"]
    assert client.get("/v1/models/%ED%A0%80").status_code == 404  # undecodable id: a 404, not a 500


def test_retrieve_model_with_a_slash_in_its_id(tiny_tokenizer, engine):
    with TestClient(create_app(make_state(tiny_tokenizer, engine, model_name="org/tiny"))) as c:
        for path in ("/v1/models/org/tiny", "/v1/models/org%2Ftiny"):
            r = c.get(path)
            assert r.status_code == 200 and r.json()["id"] == "org/tiny"
        assert c.get("/v1/models/tiny").status_code == 404


def test_while_loading_max_model_len_is_null_and_503s_say_when_to_retry():
    from anna_core.server.state import ServerState

    loading = ServerState(model_name=MODEL)
    with TestClient(create_app(loading)) as c:
        assert c.get("/v1/models").json()["data"][0]["max_model_len"] is None
        assert c.get(f"/v1/models/{MODEL}").json()["max_model_len"] is None
        assert c.get("/healthz").json()["max_model_len"] is None
        for r in (c.post("/v1/chat/completions", json=CHAT), c.post("/tokenize", json={"prompt": "hi"}),
                  c.get("/health")):
            assert r.status_code == 503 and int(r.headers["retry-after"]) >= 1
        loading.load_error = "no weights"  # a failed load will not get better: no Retry-After
        r = c.post("/v1/chat/completions", json=CHAT)
        assert r.status_code == 503 and "retry-after" not in r.headers
