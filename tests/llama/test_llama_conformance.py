"""anna-llama passes the family conformance suite (:mod:`anna_core.testing.conformance`) on a tiny random
Llama checkpoint built with transformers."""

from anna_core.testing.checkpoints import build_tiny_tokenizer
from anna_core.testing.conformance import FamilyConformance

from tests.llama.conftest import build_tiny_llama


class TestLlamaConformance(FamilyConformance):
    family = "llama"

    def build_checkpoint(self, path):
        build_tiny_llama(path, vocab_size=322, tie=False, attention_bias=True, seed=5)
        build_tiny_tokenizer(path)


def test_the_live_server_fixture_serves_the_family(live_server, tmp_path):
    import httpx

    build_tiny_llama(tmp_path, vocab_size=322, tie=False, seed=5)
    build_tiny_tokenizer(tmp_path)
    server = live_server(tmp_path, model_name="tiny-llama", max_model_len=128)
    body = {"model": "tiny-llama", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}
    answer = httpx.post(f"{server.base_url}/v1/chat/completions", json=body, timeout=60)
    assert answer.status_code == 200, answer.text
    assert answer.json()["usage"]["completion_tokens"] >= 1
    assert httpx.get(f"{server.base_url}/healthz", timeout=10).json()["family"] == "llama"
