"""Request bodies whose strings are not valid Unicode (lone UTF-16 surrogates from ``\\ud800``
escapes) are a 400 naming the field -- never a 500 from the tokenizer or the JSON encoder."""

from __future__ import annotations

import pytest

from tests.server.conftest import MODEL

CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "Hello"}]}


def _post_raw(client, path: str, raw: str):
    """``raw`` is sent as is, so its ``\\ud800`` escapes reach the server's JSON decoder."""
    return client.post(path, content=raw.encode(), headers={"content-type": "application/json"})


@pytest.mark.parametrize(("path", "raw", "param"), [
    ("/v1/completions", '{"prompt": "a\\ud800b", "max_tokens": 2}', "prompt"),
    ("/v1/completions", '{"prompt": ["ok", "x\\udfff"], "max_tokens": 2}', "prompt[1]"),
    ("/v1/chat/completions", '{"messages": [{"role": "user", "content": "hi \\ud83d"}]}', "messages[0].content"),
    ("/v1/chat/completions",
     '{"messages": [{"role": "user", "content": [{"type": "text", "text": "\\ude00"}]}]}',
     "messages[0].content[0].text"),
    ("/v1/chat/completions", '{"model": "\\ud800", "messages": [{"role": "user", "content": "hi"}]}', "model"),
    ("/tokenize", '{"prompt": "a\\ud800b"}', "prompt"),
    ("/v1/completions", '{"prompt": "ok", "logit_bias": {"\\ud800": 1}}', "logit_bias"),
])
def test_lone_surrogates_are_400_naming_the_field(client, engine, path, raw, param):
    r = _post_raw(client, path, raw)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and err["param"] == param
    assert "surrogate" in err["message"] and "\\ud" not in err["message"].lower()
    assert engine.calls == []


def test_a_paired_surrogate_escape_is_ordinary_text(client, engine):
    r = _post_raw(client, "/v1/completions", '{"prompt": "smile \\ud83d\\ude00", "max_tokens": 2}')
    assert r.status_code == 200, r.text
    assert len(engine.calls) == 1


def test_too_deeply_nested_json_is_400(client):
    r = _post_raw(client, "/v1/completions", "[" * 100_000 + "]" * 100_000)
    assert r.status_code == 400 and "nested" in r.json()["error"]["message"]


def test_error_messages_are_always_encodable():
    from anna_core.server.errors import ModelNotFoundError, error_body

    err = error_body(str(ModelNotFoundError("a\ud800", MODEL)), "invalid_request_error", "x\udc00")["error"]
    err["message"].encode("utf-8")
    err["param"].encode("utf-8")
    assert "'a\\ud800'" in err["message"] and err["param"] == "x\\udc00"
