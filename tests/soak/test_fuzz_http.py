"""Property-based fuzzing of the HTTP API of a live ``anna serve`` (tiny random Qwen3.5, its reasoning and
tool-call parsers on).

Each example posts one body drawn from :mod:`tests.soak.protocol_strategies` and asserts: no 5xx; a 4xx is an
OpenAI error object; a 200 stream ends with ``[DONE]`` and carries no ``server_error`` event; a 200 plain
answer is a completion whose choices all end with a finish reason other than ``error``; and the server still
answers ``/health`` with 200. Raw bodies (not JSON, NaN, lone surrogates, wrong content types), the tokenize
routes, and random methods, paths and ``Host`` / ``Origin`` / ``Content-Type`` headers get the same checks; a
``json_schema`` answer that ran to its end must follow its schema. After all examples the server must be at
rest (as after the soak).
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import jsonschema
import pytest
from anna_core.server import protocol
from anna_core.testing.soak import at_rest, wait_at_rest
from hypothesis import event as note_event
from hypothesis import given
from hypothesis import strategies as st

from tests.integration.conftest import start_server
from tests.soak import protocol_strategies as ps
from tests.soak.conftest import MAX_MODEL_LEN, MODEL_NAME, examples

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PATHS = {"chat": "/v1/chat/completions", "completion": "/v1/completions"}


@pytest.fixture(scope="module")
def server(tiny_qwen35_dir, tmp_path_factory):
    """The served model with a default completion limit of 16 tokens, so a body without one stays quick."""
    s = start_server(["--model-dir", str(tiny_qwen35_dir), "--model-name", MODEL_NAME,
                      "--max-model-len", str(MAX_MODEL_LEN), "--max-completion-tokens", "16"],
                     tmp_path_factory.mktemp("fuzz-log"), tiny_qwen35_dir)
    yield s
    s.kill()


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.base_url, timeout=120) as c:
        yield c


def check_answer(http: httpx.Client, server, path: str, content: bytes,
                 headers: dict[str, str] | None = None) -> httpx.Response:
    """Post ``content`` and check the answer and the server's health; returns the response (body read)."""
    r = http.post(path, content=content, headers={"content-type": "application/json", **(headers or {})})
    note_event(f"{path} {r.status_code}")
    log = lambda: server.log()[-3000:]  # noqa: E731
    assert r.status_code < 500, f"{r.status_code} for {content[:2000]!r}: {r.text[:1000]}\n{log()}"
    if r.status_code >= 400:
        error = r.json()["error"]
        assert isinstance(error["message"], str) and error["type"], r.text
    elif r.headers["content-type"].startswith("text/event-stream"):
        assert r.text.endswith("data: [DONE]\n\n"), r.text[-500:]
        for frame in r.text.split("\n\n")[:-2]:
            assert frame.startswith("data: "), frame
            event = json.loads(frame[6:])
            assert event.get("error", {}).get("type") != "server_error", f"{event} for {content[:2000]!r}\n{log()}"
    elif path.startswith("/v1/"):
        body = r.json()
        assert body["object"] in ("chat.completion", "text_completion")
        assert all(c["finish_reason"] in ("stop", "length", "tool_calls") for c in body["choices"]), body
    assert server.proc.poll() is None, log()
    assert http.get("/health").status_code == 200, log()
    return r


def test_every_protocol_field_has_a_strategy():
    for endpoint, known in (("chat", protocol.CHAT_FIELDS), ("completion", protocol.COMPLETION_FIELDS)):
        assert set(ps.field_strategies(endpoint, MODEL_NAME)) == set(known), endpoint


@examples(ci=200)
@given(body=ps.bodies("chat", MODEL_NAME))
def test_fuzz_chat_completions(http, server, body):
    check_answer(http, server, PATHS["chat"], json.dumps(body).encode())


@examples(ci=120)
@given(body=ps.bodies("completion", MODEL_NAME))
def test_fuzz_completions(http, server, body):
    check_answer(http, server, PATHS["completion"], json.dumps(body).encode())


raw_bodies = st.one_of(
    st.binary(max_size=64),
    st.text(max_size=64).map(str.encode),
    st.sampled_from([b"", b"{", b"null", b"[]", b'{"messages": NaN}', b'{"prompt": "a", "temperature": NaN}',
                     b'{"prompt": "a", "max_tokens": 1e400}', b'{"prompt": "a", "n": 1.0}',
                     b'{"prompt": "a", "max_tokens": 99999999999999999999999}', b'\xff\xfe{"prompt": 1}',
                     b'{"prompt": "a"}' * 2, b'{"prompt": "\\ud800"}', b'{"messages": [{"role": "user", "content": "\\udfff"}]}']),
)


@examples(ci=60)
@given(path=st.sampled_from([*PATHS.values(), "/tokenize", "/detokenize"]), content=raw_bodies,
       content_type=st.sampled_from(["application/json", "text/plain", "application/json; charset=latin-1"]))
def test_fuzz_raw_bodies(http, server, path, content, content_type):
    check_answer(http, server, path, content, {"content-type": content_type})


header_text = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7e), max_size=24).map(str.strip)  # h11 refuses edge spaces


@examples(ci=60)
@given(method=st.sampled_from(["GET", "POST", "PUT", "DELETE", "OPTIONS", "HEAD", "PATCH"]),
       path=st.sampled_from(["/v1/chat/completions", "/v1/completions", "/v1/models", "/v1/models/tiny-qwen35",
                             "/v1/embeddings", "/tokenize", "/healthz", "/metrics", "/v1/", "/v1/../health",
                             "/%ff", "/v1/chat/completions?stream=true"])
       | header_text.map(lambda t: "/" + t.lstrip("/")),  # not "//host...": httpx would read an authority
       headers=st.fixed_dictionaries({}, optional={
           "host": st.sampled_from(["localhost", "127.0.0.1:1", "[::1]", "evil.example", "", "a:b:c"]) | header_text,
           "origin": st.sampled_from(["null", "http://localhost", "https://evil.example"]) | header_text,
           "content-type": st.sampled_from(["application/json", "application/JSON; charset=utf-8", "text/plain",
                                            "multipart/form-data", ""]) | header_text,
           "authorization": header_text, "accept": header_text, "content-encoding": st.just("gzip")}),
       body=st.sampled_from([b"", b'{"prompt": "a", "max_tokens": 2}',
                             b'{"messages": [{"role": "user", "content": "a"}], "max_tokens": 2}']))
def test_fuzz_methods_paths_and_headers(http, server, method, path, headers, body):
    r = http.request(method, path, content=body or None, headers=headers)
    note_event(f"{method} {r.status_code}")
    assert r.status_code < 500, f"{method} {path} {headers} {body!r}: {r.status_code} {r.text[:500]}"
    assert server.proc.poll() is None and http.get("/health").status_code == 200, server.log()[-3000:]


@examples(ci=40)
@given(body=st.fixed_dictionaries(
    {"prompt": ps.texts, "add_special_tokens": st.booleans() | ps.any_json},
    optional={"return_token_strs": ps.any_json, "messages": ps.messages, "tools": ps.tools}) | ps.any_json,
    path=st.sampled_from(["/tokenize", "/detokenize"]), tokens=ps.token_ids)
def test_fuzz_tokenize(http, server, body, path, tokens):
    if path == "/detokenize" and isinstance(body, dict):
        body = {"tokens": tokens}
    check_answer(http, server, path, json.dumps(body).encode())


@examples(ci=15)
@given(schema=ps.object_schemas, stream=st.booleans(), seed=st.integers(0, 2**31))
def test_structured_output_follows_its_schema(http, server, schema, stream, seed):
    schema = ps.enforceable(schema)
    body: dict[str, Any] = {
        "messages": [{"role": "user", "content": "Answer in JSON."}], "max_tokens": 64, "seed": seed,
        "stream": stream, "chat_template_kwargs": {"enable_thinking": False},
        "response_format": {"type": "json_schema", "json_schema": {"name": "out", "schema": schema}}}
    r = check_answer(http, server, PATHS["chat"], json.dumps(body).encode())
    if r.status_code != 200:
        return
    if stream:
        events = [json.loads(f[6:]) for f in r.text.split("\n\n")[:-2]]
        content = "".join(c["delta"].get("content") or "" for e in events for c in e["choices"])
        finish = [c["finish_reason"] for e in events for c in e["choices"] if c.get("finish_reason")][-1]
    else:
        choice = r.json()["choices"][0]
        content, finish = choice["message"]["content"], choice["finish_reason"]
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError:  # e.g. a bad pattern xgrammar ignored beside a format: nothing to check against
        return
    if finish == "stop":  # the grammar ran to its end: the answer is a JSON value under the schema
        # strict=False: xgrammar's JSON strings admit raw control characters (JSON wants them escaped)
        jsonschema.validate(json.loads(content, strict=False), schema)


def test_the_server_is_at_rest_after_the_fuzzing(server):
    figures = wait_at_rest(server.base_url, 30)
    assert not any(figures.values()), f"{figures}\n{server.log()[-3000:]}"
    assert at_rest(httpx.get(f"{server.base_url}/healthz").json()) == figures
