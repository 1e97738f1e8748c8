"""Named and required ``tool_choice`` through the real HTTP server and engine with the official
``openai`` client, with the Qwen3.5 tool-call parser and without one (JSON under the tools'
schemas), over scripted token streams in the real Qwen3.5 vocabulary.

The scripts often answer something else than the grammar allows (prose, the wrong function, a
value of the wrong type): what comes back is what the grammar let through, and its arguments must
validate against the tool's schema with ``jsonschema``.
"""

from __future__ import annotations

import json

import jsonschema
import openai
import pytest
from openai.lib.streaming.chat import ChatCompletionStreamState

from tests.server.scripted_server import MODEL

pytestmark = pytest.mark.slow

WEATHER_SCHEMA = {"type": "object", "properties": {
    "city": {"type": "string", "enum": ["Paris", "Tokyo", "Lima"]},
    "days": {"type": "integer", "minimum": 1, "maximum": 7},
    "metric": {"type": "boolean"}}, "required": ["city", "days"], "additionalProperties": False}
TIME_SCHEMA = {"type": "object", "properties": {"zone": {"type": "string", "enum": ["UTC", "CET"]}},
               "required": ["zone"], "additionalProperties": False}
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather forecast",
                                            "parameters": WEATHER_SCHEMA}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": TIME_SCHEMA}}
SCHEMAS = {"get_weather": WEATHER_SCHEMA, "get_time": TIME_SCHEMA}
NAMED_WEATHER = {"type": "function", "function": {"name": "get_weather"}}

XML_WEATHER = ("<tool_call>\n<function=get_weather>\n<parameter=city>\nTokyo\n</parameter>\n"
               "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>")
XML_TIME = "<tool_call>\n<function=get_time>\n<parameter=zone>\nCET\n</parameter>\n</function>\n</tool_call>"


@pytest.fixture
def no_parser(scripted):
    """The scripted server without a tool-call parser (as the default model is served)."""
    saved, scripted.state.tool_call_parser = scripted.state.tool_call_parser, None
    yield scripted
    scripted.state.tool_call_parser = saved


def _ask(server, name, text, *, stream=False, **kw):
    marker = server.script(name, text)
    return server.client().chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": f"Go {marker}"}], temperature=0, stream=stream,
        extra_body={"chat_template_kwargs": {"enable_thinking": False}}, **kw)


def _streamed(server, name, text, **kw):
    """(tool calls of the stream as dicts, finish reasons, content, the SDK's own accumulation)."""
    chunks = list(_ask(server, name, text, stream=True, **kw))
    state = ChatCompletionStreamState()
    calls: dict[int, dict] = {}
    content, finish = "", []
    for chunk in chunks:
        state.handle_chunk(chunk)
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        content += delta.content or ""
        if chunk.choices[0].finish_reason:
            finish.append(chunk.choices[0].finish_reason)
        for tc in delta.tool_calls or []:
            if tc.index not in calls:  # OpenAI's shape: the first delta of a call names it, arguments empty
                assert tc.id.startswith("call_") and tc.type == "function" and tc.function.name
                assert tc.function.arguments == ""
                calls[tc.index] = {"id": tc.id, "name": tc.function.name, "arguments": ""}
            else:  # later deltas: argument fragments only
                assert tc.id is None and tc.type is None and tc.function.name is None
                calls[tc.index]["arguments"] += tc.function.arguments
    return [calls[i] for i in sorted(calls)], finish, content, state.get_final_completion()


def _checked(calls):
    """(name, arguments) of each call, after validating the arguments against the tool's schema."""
    out = []
    for call in calls:
        name = call.function.name if hasattr(call, "function") else call["name"]
        args = json.loads(call.function.arguments if hasattr(call, "function") else call["arguments"])
        jsonschema.validate(args, SCHEMAS[name])
        out.append((name, args))
    return out


def _same_as_streamed(reply, name, text, server, **kw):
    streamed, finish, content, final = _streamed(server, name, text, **kw)
    message = reply.choices[0].message
    assert [(c["name"], c["arguments"]) for c in streamed] == [
        (c.function.name, c.function.arguments) for c in message.tool_calls]
    assert finish == [reply.choices[0].finish_reason] and content == ""
    sdk = final.choices[0].message.tool_calls  # the openai SDK's accumulation of the same stream
    assert [(c.function.name, c.function.arguments) for c in sdk] == [(c["name"], c["arguments"]) for c in streamed]


# -- without a tool-call parser: JSON under the schemas ------------------------------------------


def test_named_choice_without_parser_generates_the_arguments_under_the_schema(no_parser):
    text = '{"city": "Lima", "days": 4}'
    r = _ask(no_parser, "j-named", text, tools=[TIME, WEATHER], tool_choice=NAMED_WEATHER)
    choice = r.choices[0]
    assert choice.finish_reason == "stop" and choice.message.content is None
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_")
    assert _checked([call]) == [("get_weather", {"city": "Lima", "days": 4})]
    assert call.function.arguments == text  # the generated JSON text is the arguments
    _same_as_streamed(r, "j-named", text, no_parser, tools=[TIME, WEATHER], tool_choice=NAMED_WEATHER)


def test_named_choice_without_parser_overrides_prose_and_wrong_types(no_parser):
    # The script writes prose, then arguments that break the schema: the grammar lets neither through.
    text = 'Sure! {"city": "Berlin", "days": "three", "wind": 1}'
    r = _ask(no_parser, "j-wrong", text, tools=[WEATHER], tool_choice=NAMED_WEATHER, max_tokens=64)
    choice = r.choices[0]
    assert choice.finish_reason == "stop" and choice.message.content is None
    [(name, args)] = _checked(choice.message.tool_calls)
    assert name == "get_weather" and set(args) >= {"city", "days"}
    _same_as_streamed(r, "j-wrong", text, no_parser, tools=[WEATHER], tool_choice=NAMED_WEATHER, max_tokens=64)


def test_required_choice_without_parser_returns_every_call_of_the_array(no_parser):
    text = ('[{"name": "get_time", "parameters": {"zone": "UTC"}}, '
            '{"name": "get_weather", "parameters": {"city": "Paris", "days": 2, "metric": true}}]')
    r = _ask(no_parser, "j-req", text, tools=[WEATHER, TIME], tool_choice="required")
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    assert _checked(choice.message.tool_calls) == [
        ("get_time", {"zone": "UTC"}), ("get_weather", {"city": "Paris", "days": 2, "metric": True})]
    assert len({c.id for c in choice.message.tool_calls}) == 2
    _same_as_streamed(r, "j-req", text, no_parser, tools=[WEATHER, TIME], tool_choice="required")


def test_required_choice_without_parser_forces_a_call_instead_of_prose(no_parser):
    text = "I would rather chat. " + '[{"name": "get_time", "parameters": {"zone": "CET"}}]'
    r = _ask(no_parser, "j-prose", text, tools=[WEATHER, TIME], tool_choice="required", max_tokens=64)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    calls = _checked(choice.message.tool_calls)
    assert calls and all(name in SCHEMAS for name, _ in calls)
    _same_as_streamed(r, "j-prose", text, no_parser, tools=[WEATHER, TIME], tool_choice="required", max_tokens=64)


def test_required_choice_without_parser_and_parallel_false_gives_one_call(no_parser):
    text = ('[{"name": "get_time", "parameters": {"zone": "UTC"}}, '
            '{"name": "get_time", "parameters": {"zone": "CET"}}]')
    r = _ask(no_parser, "j-one", text, tools=[WEATHER, TIME], tool_choice="required", parallel_tool_calls=False)
    assert _checked(r.choices[0].message.tool_calls) == [("get_time", {"zone": "UTC"})]
    assert r.choices[0].finish_reason == "tool_calls"


def test_auto_choice_without_parser_is_a_400_that_says_why(no_parser):
    with pytest.raises(openai.BadRequestError) as err:
        _ask(no_parser, "j-auto", "x", tools=[WEATHER])
    assert err.value.status_code == 400 and err.value.body["param"] == "tool_choice"
    assert "--tool-call-parser" in err.value.body["message"] and "'required'" in err.value.body["message"]


# -- with the Qwen3.5 parser: XML calls under the schemas ----------------------------------------


def test_named_choice_with_parser_returns_only_that_call(scripted):
    text = "Let me check.\n" + XML_WEATHER  # the prose is not let through
    r = _ask(scripted, "x-named", text, tools=[TIME, WEATHER], tool_choice=NAMED_WEATHER, max_tokens=256)
    choice = r.choices[0]
    assert choice.finish_reason == "stop" and choice.message.content is None
    assert _checked(choice.message.tool_calls) == [("get_weather", {"city": "Tokyo", "days": 3})]
    _same_as_streamed(r, "x-named", text, scripted, tools=[TIME, WEATHER], tool_choice=NAMED_WEATHER, max_tokens=256)


def test_required_choice_with_parser_returns_schema_valid_calls(scripted):
    text = "I would rather chat.\n" + XML_WEATHER + "\n" + XML_TIME
    r = _ask(scripted, "x-req", text, tools=[WEATHER, TIME], tool_choice="required")
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    assert _checked(choice.message.tool_calls) == [("get_weather", {"city": "Tokyo", "days": 3}),
                                                   ("get_time", {"zone": "CET"})]
    _same_as_streamed(r, "x-req", text, scripted, tools=[WEATHER, TIME], tool_choice="required")


# -- invalid schemas --------------------------------------------------------------------------------


@pytest.mark.parametrize("with_parser", [True, False])
@pytest.mark.parametrize("tool_choice", ["required", {"type": "function", "function": {"name": "broken"}}])
def test_an_unusable_parameters_schema_is_a_400_naming_the_tool(scripted, with_parser, tool_choice):
    broken = {"type": "function", "function": {"name": "broken", "parameters": {
        "type": "object", "properties": {"n": {"type": "integer", "minimum": "one"}}}}}
    saved = scripted.state.tool_call_parser
    if not with_parser:
        scripted.state.tool_call_parser = None
    try:
        with pytest.raises(openai.BadRequestError) as err:
            _ask(scripted, "x-broken", "x", tools=[TIME, broken], tool_choice=tool_choice)
    finally:
        scripted.state.tool_call_parser = saved
    body = err.value.body
    assert err.value.status_code == 400 and body["type"] == "invalid_request_error"
    assert body["param"] == "tools[1].function.parameters"
    assert "'broken'" in body["message"] and "must be a number" in body["message"]


def test_parameters_that_are_not_an_object_schema_are_a_400(no_parser):
    scalar = {"type": "function", "function": {"name": "say", "parameters": {"type": "string", "maxLength": 5}}}
    with pytest.raises(openai.BadRequestError) as err:
        _ask(no_parser, "x-scalar", "x", tools=[scalar], tool_choice={"type": "function", "function": {"name": "say"}})
    assert err.value.status_code == 400 and err.value.body["param"] == "tools[0].function.parameters"
    assert "type 'object'" in err.value.body["message"]


def test_required_choice_follows_a_pydantic_schema_with_defs(no_parser):
    """A tool schema with ``$defs`` (every ``openai.pydantic_function_tool`` has them) nested into the
    required-choice array: its ``$ref``s still resolve, and the call follows them."""
    located = {"type": "function", "function": {"name": "locate", "parameters": {
        "type": "object", "$defs": {"Loc": {"type": "object", "properties": {"city": {"type": "string"}},
                                            "required": ["city"], "additionalProperties": False}},
        "properties": {"loc": {"$ref": "#/$defs/Loc"}}, "required": ["loc"], "additionalProperties": False}}}
    text = '[{"name": "locate", "parameters": {"loc": {"city": "Oslo"}}}]'
    r = _ask(no_parser, "j-defs", text, tools=[located], tool_choice="required", parallel_tool_calls=False)
    [call] = r.choices[0].message.tool_calls
    assert call.function.name == "locate"
    args = json.loads(call.function.arguments)
    jsonschema.validate(args, located["function"]["parameters"])
    assert args == {"loc": {"city": "Oslo"}}
