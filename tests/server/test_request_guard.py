"""Local-server hygiene (issue 21): Host and Origin rules for loopback and wildcard binds, JSON
routes require application/json, /healthz detail only with the API key."""

from __future__ import annotations

import pytest
from anna_core.server.app import create_app
from anna_core.server.request_guard import RequestGuard, host_name, is_loopback_bind
from litestar.testing import TestClient

from tests.server.conftest import MODEL, FakeEngine, make_state

CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}


@pytest.fixture
def serve(tiny_tokenizer):
    """A client of an app whose state has ``RequestGuard.for_bind(bind, ...)`` and the given fields."""
    clients = []

    def make(bind: str = "127.0.0.1", hosts=(), origins=(), **state_fields):
        state = make_state(tiny_tokenizer, FakeEngine(tiny_tokenizer),
                           request_guard=RequestGuard.for_bind(bind, hosts, origins), **state_fields)
        client = TestClient(create_app(state), base_url="http://127.0.0.1:8000", raise_server_exceptions=False)
        client.__enter__()
        clients.append(client)
        return client

    yield make
    for c in clients:
        c.__exit__(None, None, None)


def test_host_names_and_binds():
    assert host_name("[::1]:8000") == "::1" and host_name("LocalHost:80") == "localhost"
    assert host_name("127.0.0.1") == "127.0.0.1" and host_name("example.com.") == "example.com"
    assert is_loopback_bind("127.0.0.1") and is_loopback_bind("localhost") and is_loopback_bind("::1")
    assert not is_loopback_bind("0.0.0.0") and not is_loopback_bind("::")


@pytest.mark.parametrize("host", ["localhost", "localhost:8000", "127.0.0.1:1234", "[::1]:8000", "[::1]"])
def test_a_loopback_bind_serves_loopback_host_names(serve, host):
    c = serve("127.0.0.1")
    assert c.get("/health", headers={"host": host}).status_code == 200
    assert c.post("/v1/chat/completions", json=CHAT, headers={"host": host}).status_code == 200


@pytest.mark.parametrize("path", ["/health", "/healthz", "/v1/models"])
def test_a_loopback_bind_refuses_other_host_names(serve, path):
    r = serve("127.0.0.1").get(path, headers={"host": "evil.example:8000"})  # DNS rebinding
    assert r.status_code == 403
    err = r.json()["error"]
    assert err["code"] == "host_not_allowed" and "--allowed-hosts" in err["message"]


def test_allowed_hosts_extend_a_loopback_bind(serve):
    c = serve("127.0.0.1", hosts=["myhost.lan"])
    assert c.get("/health", headers={"host": "myhost.lan:8000"}).status_code == 200
    assert c.get("/health", headers={"host": "localhost"}).status_code == 200
    assert c.get("/health", headers={"host": "other.lan"}).status_code == 403
    assert serve("127.0.0.1", hosts=["*"]).get("/health", headers={"host": "other.lan"}).status_code == 200


@pytest.mark.parametrize("bind", ["0.0.0.0", "::"])
def test_a_wildcard_bind_serves_any_host_unless_allowed_hosts_are_given(serve, bind):
    assert serve(bind).get("/health", headers={"host": "gpu-box.example:8000"}).status_code == 200
    limited = serve(bind, hosts=["gpu-box.example"])
    assert limited.get("/health", headers={"host": "gpu-box.example:8000"}).status_code == 200
    assert limited.get("/health", headers={"host": "evil.example"}).status_code == 403


@pytest.mark.parametrize("bind", ["127.0.0.1", "0.0.0.0"])
def test_requests_with_an_origin_are_refused_unless_allowed(serve, bind):
    c = serve(bind)
    r = c.post("/v1/chat/completions", json=CHAT, headers={"origin": "https://evil.example"})
    assert r.status_code == 403 and r.json()["error"]["code"] == "origin_not_allowed"
    allowed = serve(bind, origins=["http://localhost:3000"])
    assert allowed.post("/v1/chat/completions", json=CHAT,
                        headers={"origin": "http://localhost:3000"}).status_code == 200
    assert allowed.post("/v1/chat/completions", json=CHAT,
                        headers={"origin": "http://localhost:3001"}).status_code == 403


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", None])
@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions", "/tokenize"])
def test_json_routes_need_application_json(serve, engine, content_type, path):
    import json

    headers = {"content-type": content_type} if content_type else {}
    body = json.dumps(CHAT if path == "/v1/chat/completions" else {"model": MODEL, "prompt": "Hi", "max_tokens": 2})
    c = serve("0.0.0.0")
    r = c.post(path, content=body, headers=headers)
    assert r.status_code == 415, r.text
    assert r.json()["error"]["code"] == "unsupported_media_type"
    ok = c.post(path, content=body, headers={"content-type": "application/json; charset=utf-8"})
    assert ok.status_code == 200


def test_healthz_detail_needs_the_api_key_when_one_is_set(serve):
    c = serve("127.0.0.1", api_key="sekret", info={"model_dir": "/home/me/models/tiny", "family": "qwen35",
                                                   "device": "cpu"})
    anon = c.get("/healthz").json()
    assert anon["model_dir"] is None and anon["memory"] == {} and anon["status"] == "ready"
    authed = c.get("/healthz", headers={"authorization": "Bearer sekret"}).json()
    assert authed["model_dir"] == "/home/me/models/tiny"
    assert c.get("/health").status_code == 200  # always open
    assert serve("127.0.0.1", info={"model_dir": "/m"}).get("/healthz").json()["model_dir"] == "/m"  # no key
