"""Gemma 4's output parsers through the real HTTP server and engine (the scripted model, Qwen3.5
vocabulary: Gemma's tags are plain text there, so the output opens its thinking channel itself)."""

from __future__ import annotations

import json

import pytest

from tests.server.scripted_server import MODEL

pytest.importorskip("anna_gemma4")
pytestmark = pytest.mark.slow

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
    "city": {"type": "string"}, "days": {"type": "integer"}}}}}]
S = '<|"|>'
TEXT = (f"<|channel>thought\nMaybe <|tool_call>call:get_weather{{city:{S}Rome{S}}}<tool_call|> first?\n<channel|>\n"
        f"Checking. <|tool_call>call:get_weather{{city:{S}São Paulo, {{BR}}: \"x\"{S},days:3}}<tool_call|>")


@pytest.fixture
def gemma(scripted, monkeypatch):
    from anna_gemma4.reasoning import Gemma4ReasoningParser
    from anna_gemma4.tool_calls import Gemma4ToolParser

    monkeypatch.setattr(scripted.state, "reasoning_parser", Gemma4ReasoningParser)
    monkeypatch.setattr(scripted.state, "tool_call_parser", Gemma4ToolParser)
    return scripted


def _ask(server, name, **kw):
    marker = server.script(name, TEXT)
    return server.client().chat.completions.create(model=MODEL, messages=[{"role": "user", "content": f"Go {marker}"}],
                                                   temperature=0, tools=TOOLS, **kw)


def test_gemma4_parsers_streamed_and_not(gemma):
    expected_args = {"city": 'São Paulo, {BR}: "x"', "days": 3}
    msg = _ask(gemma, "gemma4-whole").choices[0]
    assert msg.finish_reason == "tool_calls"
    assert msg.message.reasoning_content == f"Maybe <|tool_call>call:get_weather{{city:{S}Rome{S}}}<tool_call|> first?"
    assert msg.message.content == "Checking."
    (call,) = msg.message.tool_calls
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == expected_args

    chunks = [c for c in _ask(gemma, "gemma4-stream", stream=True) if c.choices]
    deltas = [c.choices[0].delta for c in chunks]
    assert "".join(getattr(d, "reasoning_content", None) or "" for d in deltas) == msg.message.reasoning_content
    assert "".join(d.content or "" for d in deltas) == "Checking."
    pieces = [tc for d in deltas for tc in d.tool_calls or []]
    assert pieces[0].id and pieces[0].function.name == "get_weather" and pieces[0].function.arguments == ""
    assert json.loads("".join(p.function.arguments for p in pieces[1:])) == expected_args
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_gemma4_forced_tool_choice_is_a_400(gemma):
    import openai

    with pytest.raises(openai.BadRequestError, match="not supported yet"):
        _ask(gemma, "gemma4-forced", tool_choice="required")
