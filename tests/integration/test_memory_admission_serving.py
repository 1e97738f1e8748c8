"""``anna serve --max-estimated-usage-ratio``: an oversized request is refused (400) before it runs, a small one
is served, and ``/healthz`` counts the refusal (a live server over the tiny random Qwen3.5)."""

from __future__ import annotations

import httpx
import pytest

from tests.integration.conftest import kill, start_server

pytestmark = pytest.mark.slow

CAP_GIB = 4
# capacity = 4 GiB x ratio = 2.5 MiB: room for the tiny model's weights (~1 MiB) and a short request, not for the
# KV of a 4096-token sequence (~4 MiB)
RATIO = 2.5 / (CAP_GIB * 1024)


@pytest.fixture(scope="module")
def admission_server(tiny_qwen35_dir, tmp_path_factory):
    server = start_server(["--model-dir", str(tiny_qwen35_dir), "--model-name", "tiny", "--max-model-len", "4096",
                           "--max-device-memory-gib", str(CAP_GIB), "--snapshot-memory-mib", "16",
                           "--max-estimated-usage-ratio", f"{RATIO:.8f}"],
                          tmp_path_factory.mktemp("admission-serve"), tiny_qwen35_dir)
    yield server
    kill(server)


def test_an_oversized_request_is_refused_before_it_runs(admission_server):
    url = admission_server.base_url
    body = {"model": "tiny", "prompt": "Hello", "temperature": 0}
    steps = httpx.get(f"{url}/healthz", timeout=10).json()["engine"]["steps"]
    big = httpx.post(f"{url}/v1/completions", json=body | {"max_tokens": 4000}, timeout=30)
    assert big.status_code == 400, big.text
    error = big.json()["error"]
    assert error["type"] == "invalid_request_error" and error["code"] == "insufficient_memory"
    health = httpx.get(f"{url}/healthz", timeout=10).json()
    assert health["engine"]["steps"] == steps and health["engine"]["memory_admission"]["refused_400"] == 1
    small = httpx.post(f"{url}/v1/completions", json=body | {"max_tokens": 4}, timeout=30)
    assert small.status_code == 200, small.text
    assert httpx.get(f"{url}/health", timeout=10).status_code == 200
