"""``anna serve`` (the real CLI in a subprocess) serves a family whose task is not ``generate``: the test
``echo`` task's routes come from ``register_tasks``; no code branches on the family's name."""

from __future__ import annotations

import httpx
import pytest

from tests.integration.conftest import kill, start_server
from tests.server.echo_task import write_checkpoint

pytestmark = [pytest.mark.slow, pytest.mark.integration]


@pytest.fixture(scope="module")
def echo_server(tmp_path_factory):
    folder = write_checkpoint(tmp_path_factory.mktemp("echo-ckpt"))
    server = start_server(["--model-dir", str(folder), "--model-name", "echo"], tmp_path_factory.mktemp("echo-serve"),
                          folder, module="tests.integration.echo_task_serve")
    yield server
    kill(server)


def test_serve_mounts_the_task_routes_of_the_loaded_family(echo_server):
    url = echo_server.base_url
    r = httpx.post(f"{url}/v1/echo", json={"text": "anna serve"}, timeout=10)
    assert r.status_code == 200 and r.json() == {"text": "evres anna", "model": "echo"}
    chat = httpx.post(f"{url}/v1/chat/completions", timeout=10,
                      json={"model": "echo", "messages": [{"role": "user", "content": "hi"}]})
    assert chat.status_code == 404
    assert [m["id"] for m in httpx.get(f"{url}/v1/models", timeout=10).json()["data"]] == ["echo"]
    healthz = httpx.get(f"{url}/healthz", timeout=10).json()
    assert (healthz["status"], healthz["family"], healthz["task"]) == ("ready", "echo_test", "echo")
    assert healthz["engine"] == {"served": 1, "warmed_up": True}  # built with serve's RunnerConfig


def test_sigterm_drains_and_shuts_the_task_client_down(echo_server):
    assert echo_server.stop(timeout=30) == 0
    log = echo_server.log()
    assert "task echo" in log and "drained; shutting down" in log
