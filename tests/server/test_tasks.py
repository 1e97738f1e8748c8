"""The served task decides the routes: a family whose task is not ``generate`` gets its own (the test
``echo`` task, :mod:`tests.server.echo_task`), the health and model routes stay, the OpenAI text routes
are not there."""

from __future__ import annotations

from anna_core.plugins import make_plugin_manager
from anna_core.registry import resolve
from anna_core.server.app import create_app
from anna_core.server.state import ServerState
from litestar.testing import TestClient

from tests.server.echo_task import TASK, load


def echo_state() -> ServerState:
    state = ServerState(model_name="echo-model", info={"family": "echo_test", "task": TASK.name})
    loaded = load(None, device="cpu", dtype=None, load_format="auto", kernels=None)
    engine = resolve(TASK.engine)(loaded, None, None)
    state.set_ready(resolve(TASK.serving)(engine), None, max_model_len=engine.max_model_len)
    return state


def test_the_echo_task_serves_its_own_routes_and_not_the_openai_ones():
    state = echo_state()
    with TestClient(create_app(state, pm=make_plugin_manager(load_entry_points=False), task=TASK)) as client:
        r = client.post("/v1/echo", json={"text": "hello"})
        assert r.status_code == 200 and r.json() == {"text": "olleh", "model": "echo-model"}
        assert client.post("/v1/echo", json={"text": "x", "model": "other"}).status_code == 404
        for path in ("/v1/chat/completions", "/v1/completions", "/tokenize", "/detokenize"):
            assert client.post(path, json={"model": "echo-model", "prompt": "hi"}).status_code == 404, path
        assert client.get("/health").json() == {"status": "ready"}
        assert [m["id"] for m in client.get("/v1/models").json()["data"]] == ["echo-model"]
        healthz = client.get("/healthz").json()
        assert healthz["task"] == "echo" and healthz["family"] == "echo_test"
        assert healthz["engine"] == {"served": 1, "warmed_up": False} and healthz["metrics"] is None
        assert client.get("/metrics").status_code == 200


def test_while_loading_the_task_routes_answer_503():
    state = ServerState(model_name="echo-model")
    with TestClient(create_app(state, pm=make_plugin_manager(load_entry_points=False), task=TASK)) as client:
        assert client.post("/v1/echo", json={"text": "hello"}).status_code == 503
        assert client.get("/health").status_code == 503


def test_the_default_task_is_generate(state):
    with TestClient(create_app(state, pm=make_plugin_manager(load_entry_points=False))) as client:
        assert client.post("/v1/echo", json={"text": "hello"}).status_code == 404
        assert client.post("/tokenize", json={"prompt": "hi"}).status_code == 200
