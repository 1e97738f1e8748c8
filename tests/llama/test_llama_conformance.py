"""anna-llama passes the family conformance suite (:mod:`anna_core.testing.conformance`) on a tiny random
Llama checkpoint built with transformers (the family's own ``tiny_checkpoint`` builder)."""

from anna_core.testing.conformance import FamilyConformance
from anna_llama.tiny import build_tiny_checkpoint


class TestLlamaConformance(FamilyConformance):
    family = "llama"

    def build_checkpoint(self, path):
        build_tiny_checkpoint(path, attention_bias=True, seed=5)


def test_the_live_server_fixture_serves_the_familys_tiny_checkpoint(live_server, tiny_checkpoint):
    import httpx

    server = live_server(tiny_checkpoint("llama", seed=5), model_name="tiny-llama", max_model_len=128)
    body = {"model": "tiny-llama", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}
    answer = httpx.post(f"{server.base_url}/v1/chat/completions", json=body, timeout=60)
    assert answer.status_code == 200, answer.text
    assert answer.json()["usage"]["completion_tokens"] >= 1
    assert httpx.get(f"{server.base_url}/healthz", timeout=10).json()["family"] == "llama"
