"""Reasoning and tool-call parsing through the real HTTP server and engine, with the official
``openai`` client, over scripted token streams in the real Qwen3.5 vocabulary."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from tests.server.scripted_server import API_KEY, MODEL

pytestmark = pytest.mark.slow

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
    "city": {"type": "string"}, "days": {"type": "integer"}, "temp": {"type": "number"},
    "metric": {"type": "boolean"}, "opts": {"type": "object"}, "hours": {"type": "array"}}}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {
    "zone": {"type": "string"}}}}}

CALL_WEATHER = ("<tool_call>\n<function=get_weather>\n<parameter=city>\nSão Paulo\n</parameter>\n"
                "<parameter=days>\n3\n</parameter>\n<parameter=temp>\n21.5\n</parameter>\n"
                "<parameter=metric>\ntrue\n</parameter>\n<parameter=opts>\n{\"unit\": \"C\", \"n\": [1, 2]}\n"
                "</parameter>\n<parameter=hours>\n[9, 12]\n</parameter>\n</function>\n</tool_call>")
WEATHER_ARGS = {"city": "São Paulo", "days": 3, "temp": 21.5, "metric": True, "opts": {"unit": "C", "n": [1, 2]},
                "hours": [9, 12]}
CALL_TIME = "<tool_call>\n<function=get_time>\n<parameter=zone>\nUTC\n</parameter>\n</function>\n</tool_call>"


def _ask(scripted, name, text, **kw):
    marker = scripted.script(name, text)
    messages = kw.pop("messages", None) or [{"role": "user", "content": f"Go {marker}"}]
    return scripted.client().chat.completions.create(model=MODEL, messages=messages, temperature=0, **kw)


def _stream(scripted, name, text, **kw):
    chunks = list(_ask(scripted, name, text, stream=True, **kw))
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    reasoning = "".join(getattr(d, "reasoning_content", None) or "" for d in deltas)
    content = "".join(d.content or "" for d in deltas)
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    return chunks, deltas, reasoning, content, finish


def _streamed_calls(deltas):
    calls: dict[int, dict] = {}
    for d in deltas:
        for tc in d.tool_calls or []:
            if tc.index not in calls:  # the first delta of a call names it
                assert tc.id and tc.type == "function" and tc.function.name and tc.function.arguments == ""
                calls[tc.index] = {"id": tc.id, "name": tc.function.name, "arguments": ""}
            else:
                assert tc.id is None and tc.function.name is None
                calls[tc.index]["arguments"] += tc.function.arguments
    return [calls[i] for i in sorted(calls)]


def test_reasoning_then_answer_streaming_and_not(scripted):
    text = "Let me think 🙂.\n</think>\n\nThe answer is 42."
    r = _ask(scripted, "think1", text)
    msg = r.choices[0].message
    assert (msg.reasoning_content, msg.content, r.choices[0].finish_reason) == ("Let me think 🙂.", "The answer is 42.",
                                                                                "stop")
    assert msg.model_extra["reasoning"] == msg.reasoning_content  # the newer vLLM name too
    _, deltas, reasoning, content, finish = _stream(scripted, "think1", text)
    assert (reasoning, content, finish) == (msg.reasoning_content, msg.content, ["stop"])
    assert all(getattr(d, "reasoning", None) == getattr(d, "reasoning_content", None) for d in deltas)


def test_cut_off_reasoning_stays_reasoning(scripted):
    r = _ask(scripted, "cut", "One two three four five six seven\n</think>\n\nAnswer", max_tokens=4)
    msg = r.choices[0].message
    assert r.choices[0].finish_reason == "length"
    assert msg.reasoning_content == "One two three four" and msg.content == ""
    _, _, reasoning, content, finish = _stream(scripted, "cut", "One two three four five six seven\n</think>\n\nAnswer",
                                               max_tokens=4)
    assert (reasoning, content, finish) == ("One two three four", "", ["length"])


def test_thinking_off_everything_is_content(scripted):
    marker = scripted.script("nothink", "Plain answer.")
    r = scripted.client().chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": marker}], temperature=0,
        extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    msg = r.choices[0].message
    assert msg.content == "Plain answer." and getattr(msg, "reasoning_content", None) is None


def test_reasoning_format_none_keeps_think_text_inline(scripted):
    scripted.state.reasoning_format = "none"
    try:
        r = _ask(scripted, "inline", "Hmm.\n</think>\n\nYes.")
    finally:
        scripted.state.reasoning_format = "deepseek"
    msg = r.choices[0].message
    assert msg.content == "Hmm.\n</think>\n\nYes." and getattr(msg, "reasoning_content", None) is None


def test_one_call_with_every_parameter_type(scripted):
    text = "Checking.\n</think>\n\nLet me look.\n\n" + CALL_WEATHER
    r = _ask(scripted, "call1", text, tools=[WEATHER, TIME])
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.reasoning_content == "Checking." and choice.message.content == "Let me look."
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.function.name == "get_weather" and call.id.startswith("call_")
    assert json.loads(call.function.arguments) == WEATHER_ARGS
    _, deltas, reasoning, content, finish = _stream(scripted, "call1", text, tools=[WEATHER, TIME])
    (streamed,) = _streamed_calls(deltas)
    assert streamed["name"] == "get_weather" and streamed["arguments"] == call.function.arguments
    assert (reasoning, content, finish) == ("Checking.", "Let me look.", ["tool_calls"])


def test_parallel_calls_stream_in_phases(scripted):
    text = "Two lookups.\n</think>\n\n" + CALL_WEATHER + "\n" + CALL_TIME
    r = _ask(scripted, "par", text, tools=[WEATHER, TIME])
    calls = r.choices[0].message.tool_calls
    assert [c.function.name for c in calls] == ["get_weather", "get_time"]
    assert json.loads(calls[1].function.arguments) == {"zone": "UTC"}
    assert r.choices[0].message.content is None
    _, deltas, _, content, finish = _stream(scripted, "par", text, tools=[WEATHER, TIME])
    streamed = _streamed_calls(deltas)
    assert [s["arguments"] for s in streamed] == [c.function.arguments for c in calls]
    assert len({s["id"] for s in streamed}) == 2 and content == "" and finish == ["tool_calls"]


def test_tool_call_inside_unterminated_think_ends_reasoning(scripted):
    r = _ask(scripted, "thinkcall", "I should call it.\n" + CALL_TIME, tools=[TIME])
    msg = r.choices[0].message
    assert msg.reasoning_content == "I should call it." and msg.tool_calls[0].function.name == "get_time"
    assert r.choices[0].finish_reason == "tool_calls"


def test_cut_off_tool_call_closes_its_arguments(scripted):
    text = "</think>\n\n" + CALL_WEATHER
    n = len(scripted.tokenizer.encode(text[:text.index("<parameter=temp>")]))
    r = _ask(scripted, "cutcall", text, tools=[WEATHER], max_tokens=n)
    choice = r.choices[0]
    assert choice.finish_reason == "length"
    assert json.loads(choice.message.tool_calls[0].function.arguments) == {"city": "São Paulo", "days": 3}
    _, deltas, _, _, finish = _stream(scripted, "cutcall", text, tools=[WEATHER], max_tokens=n)
    assert _streamed_calls(deltas)[0]["arguments"] == choice.message.tool_calls[0].function.arguments
    assert finish == ["length"]


def test_tool_choice_none_leaves_markup_as_content(scripted):
    r = _ask(scripted, "nonecall", "</think>\n\n" + CALL_TIME, tools=[TIME], tool_choice="none")
    assert r.choices[0].message.tool_calls is None and r.choices[0].message.content == CALL_TIME


def test_required_tool_choice_is_enforced_by_the_grammar(scripted):
    # The script answers in prose first; the grammar only lets the call through.
    text = "</think>\n\nI would rather chat about the weather today.\n" + CALL_TIME
    r = _ask(scripted, "required", text, tools=[WEATHER, TIME], tool_choice="required")
    choice = r.choices[0]
    assert choice.message.content is None and choice.finish_reason == "tool_calls"
    assert [c.function.name for c in choice.message.tool_calls] == ["get_time"]
    free = _ask(scripted, "required", text, tools=[WEATHER, TIME])  # auto: the prose comes through
    assert free.choices[0].message.content.startswith("I would rather chat")


def test_named_tool_choice_forces_that_function_and_finishes_stop(scripted):
    text = "</think>\n\n" + CALL_WEATHER.replace("get_weather", "get_time")  # the script calls the other one
    r = _ask(scripted, "named", text, tools=[WEATHER, TIME],
             tool_choice={"type": "function", "function": {"name": "get_weather"}})
    choice = r.choices[0]
    assert choice.finish_reason == "stop"
    assert [c.function.name for c in choice.message.tool_calls] == ["get_weather"]


def _render(scripted, body):
    r = httpx.post(f"{scripted.base_url}/tokenize", json=body, headers={"Authorization": f"Bearer {API_KEY}"})
    assert r.status_code == 200, r.text
    return scripted.tokenizer.decode(r.json()["tokens"], skip_special_tokens=False)


def test_history_reasoning_tool_calls_and_results_round_trip_through_the_template(scripted):
    messages = [
        {"role": "developer", "content": [{"type": "text", "text": "Be brief."}]},
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": None, "reasoning": "Need the tool.",
         "tool_calls": [{"id": "call_1", "type": "function",
                         "function": {"name": "get_time", "arguments": "{\"zone\": \"UTC\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "12:00"},
    ]
    text = _render(scripted, {"model": MODEL, "messages": messages, "tools": [TIME]})
    assert text.startswith("<|im_start|>system\nBe brief.\n\n# Tools")
    assert "<think>\nNeed the tool.\n</think>\n\n" + CALL_TIME + "<|im_end|>" in text
    assert "<|im_start|>user\n<tool_response>\n12:00\n</tool_response><|im_end|>\n<|im_start|>assistant\n<think>\n" in text


def test_assistant_last_message_is_continued(scripted):
    text = _render(scripted, {"model": MODEL, "messages": [{"role": "user", "content": "Hi"},
                                                           {"role": "assistant", "content": "Hel"}]})
    assert text.endswith("<|im_start|>assistant\nHel")


def test_api_key_guards_v1_but_not_health(scripted):
    with pytest.raises(openai.AuthenticationError) as err:
        scripted.client(api_key="wrong").models.list()
    assert err.value.status_code == 401 and err.value.body["code"] == "invalid_api_key"
    assert httpx.get(f"{scripted.base_url}/healthz").status_code == 200
    assert httpx.post(f"{scripted.base_url}/tokenize", json={"prompt": "x"}).status_code == 401
    assert [m.id for m in scripted.client().models.list().data] == [MODEL]


def test_parallel_tool_calls_false_gives_at_most_one_call_in_auto_mode(scripted):
    text = "Two lookups.\n</think>\n\n" + CALL_WEATHER + "\n" + CALL_TIME
    r = _ask(scripted, "nopar", text, tools=[WEATHER, TIME], parallel_tool_calls=False)
    choice = r.choices[0]
    assert [c.function.name for c in choice.message.tool_calls] == ["get_weather"]
    assert json.loads(choice.message.tool_calls[0].function.arguments) == WEATHER_ARGS
    assert choice.finish_reason == "tool_calls"
    assert r.usage.completion_tokens < len(scripted.tokenizer.encode(text))  # generation stopped at the call
    _, deltas, _, content, finish = _stream(scripted, "nopar", text, tools=[WEATHER, TIME], parallel_tool_calls=False)
    assert [s["name"] for s in _streamed_calls(deltas)] == ["get_weather"] and finish == ["tool_calls"]


@pytest.mark.parametrize("raw", ["1e400", "-1e400", "NaN", "Infinity", "[1, 1e400]"])
def test_qwen3_coder_values_json_cannot_hold_stay_strings(raw):
    # Regression (soak-and-fuzz suite): a forced call's number 1e400 came out as `{"b": Infinity}`, not JSON.
    from anna_core.parsers.qwen3_coder import Qwen3CoderToolParser, convert_value

    schema = {"type": "array"} if raw.startswith("[") else {"type": "number"}
    assert convert_value(raw, schema) == raw and convert_value(raw, {}) == raw
    p = Qwen3CoderToolParser(tools=[{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"b": schema}}}}])
    _, calls = p.feed(f"<tool_call>\n<function=f>\n<parameter=b>\n{raw}\n</parameter>\n</function>\n</tool_call>")
    args = "".join(c.arguments for c in calls) + "".join(c.arguments for c in p.finish()[1])
    assert json.loads(args, parse_constant=lambda c: pytest.fail(f"non-JSON {c}")) == {"b": raw}

