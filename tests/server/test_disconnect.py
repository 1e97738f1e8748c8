"""A client that goes away aborts its engine request (raw ASGI, so the disconnect is exact)."""

from __future__ import annotations

import asyncio
import json

import pytest
from anna_core.server.app import create_app

from tests.server.conftest import MODEL, FakeEngine, make_state


async def _call(app, body: dict, disconnect_after: float) -> list[dict]:
    """POST ``body`` to /v1/chat/completions; the client disconnects after ``disconnect_after`` s."""
    sent: list[dict] = []
    raw = json.dumps(body).encode()
    messages = [{"type": "http.request", "body": raw, "more_body": False}]

    async def receive():
        if messages:
            return messages.pop(0)
        await asyncio.sleep(disconnect_after)
        return {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
             "scheme": "http", "path": "/v1/chat/completions", "raw_path": b"/v1/chat/completions",
             "query_string": b"", "root_path": "", "headers": [(b"content-type", b"application/json")],
             "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 8000), "state": {}}
    await asyncio.wait_for(app(scope, receive, send), timeout=10)
    return sent


@pytest.mark.parametrize("stream", [False, True])
def test_disconnect_aborts_the_engine_request(tiny_tokenizer, stream):
    engine = FakeEngine(tiny_tokenizer, step_delay=0.05)  # ~20 tokens: 1 s if nobody aborts
    state = make_state(tiny_tokenizer, engine)
    app = create_app(state)
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "stream": stream}
    asyncio.run(_call(app, body, disconnect_after=0.2))
    (request_id, _, _), = engine.calls
    assert engine.aborted == [request_id]
    assert engine.completed == []
    assert state.in_flight == 0


def test_finished_requests_are_not_aborted(tiny_tokenizer):
    engine = FakeEngine(tiny_tokenizer)
    app = create_app(make_state(tiny_tokenizer, engine))
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "stream": True}
    sent = asyncio.run(_call(app, body, disconnect_after=0.3))
    assert sent[0]["status"] == 200
    assert engine.aborted == [] and len(engine.completed) == 1
