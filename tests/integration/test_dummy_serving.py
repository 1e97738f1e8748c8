"""Benchmark serving path: ``anna serve --load-format dummy`` on a config-only folder (no tokenizer)
driven by ``anna bench-serve --prompt-token-ids`` -- the set-up of the GPU serving benchmark."""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import pytest

from tests.bench.tiny_config import write_tiny_qwen35_config
from tests.integration.conftest import kill, start_server

pytestmark = [pytest.mark.slow, pytest.mark.integration]


@pytest.fixture(scope="module")
def dummy_server(tmp_path_factory):
    folder = write_tiny_qwen35_config(tmp_path_factory.mktemp("dummy-cfg"))
    server = start_server(["--model-dir", str(folder), "--load-format", "dummy", "--model-name", "dummy"],
                          tmp_path_factory.mktemp("dummy-serve"), folder)
    yield server
    kill(server)


def test_streamed_token_ids_without_a_tokenizer(dummy_server):
    body = {"model": "dummy", "prompt": [1, 2, 3, 4], "max_tokens": 5, "ignore_eos": True, "stream": True,
            "temperature": 0}
    ids: list[int] = []
    with httpx.stream("POST", f"{dummy_server.base_url}/v1/completions", json=body, timeout=60) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: {"):
                for choice in json.loads(line[6:])["choices"]:
                    ids += choice.get("token_ids", [])
    assert len(ids) == 5
    full = httpx.post(f"{dummy_server.base_url}/v1/completions", json={**body, "stream": False}, timeout=60).json()
    assert full["choices"][0]["token_ids"] == ids  # greedy: streamed ids equal the non-streamed ones
    assert full["usage"]["completion_tokens"] == 5


def test_bench_serve_counts_every_request(dummy_server):
    out = subprocess.run(
        [sys.executable, "-m", "anna_cli.main", "bench-serve", "--base-url", dummy_server.base_url,
         "--prompt-token-ids", "--vocab-size", "200", "--num-requests", "8", "--concurrency", "4",
         "--input-len", "16", "--output-len", "6", "--json"],
        capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    report = json.loads(out.stdout)
    assert report["requests"]["succeeded"] == 8 and report["requests"]["failed"] == 0, report
    assert report["output_tokens"] == 8 * 6


def test_logprobs_without_a_tokenizer_name_the_token_ids(dummy_server):
    body = {"model": "dummy", "prompt": [1, 2, 3], "max_tokens": 3, "ignore_eos": True, "temperature": 0, "logprobs": 2}
    r = httpx.post(f"{dummy_server.base_url}/v1/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert choice["logprobs"]["tokens"] == [f"token_id:{t}" for t in choice["token_ids"]]
