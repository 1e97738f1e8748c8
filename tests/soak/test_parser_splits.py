"""Hypothesis tests of the output parsers and the SSE framing on random splits of real outputs.

A real output is built the way the model writes it (a reasoning block, an answer, tool calls in the family's
markup with arguments drawn by hypothesis-jsonschema from the tool's parameter schemas), then cut at random
points into the deltas a stream would bring. Properties: the streamed parse equals the whole parse (as the
server sends both), each call streams as OpenAI's phases (id and name first, then argument pieces that join
to JSON), and the parsed calls are the calls written. The drivers (``run_tool_parser``, ``run_reasoning_parser``,
``parse_stream``, which chains both as the server does) are :mod:`anna_core.testing.parser_streams`, which the
family conformance suite runs on each family's declared samples. The SSE frames of random payloads, concatenated and
cut at random byte offsets, decode to the same payloads in the ``openai`` client's decoder and in httpx's
line reader (``aiter_lines``, which splits on every line break ``str.splitlines`` knows).
"""

from __future__ import annotations

import json
from typing import Any

import httpx
from anna_core.parsers.json_calls import JsonToolCallParser
from anna_core.parsers.qwen3_coder import Qwen3CoderToolParser
from anna_core.parsers.think import ThinkReasoningParser
from anna_core.server.sse import DONE, sse_event
from anna_core.testing.parser_streams import parse_stream, run_reasoning_parser, run_tool_parser
from anna_gemma4.reasoning import Gemma4ReasoningParser
from anna_gemma4.tool_calls import END as G_END
from anna_gemma4.tool_calls import START as G_START
from anna_gemma4.tool_calls import STR as G_STR
from anna_gemma4.tool_calls import Gemma4ToolParser
from hypothesis import given
from hypothesis import strategies as st
from hypothesis_jsonschema import from_schema
from openai._streaming import SSEDecoder

from tests.soak.conftest import examples
from tests.soak.protocol_strategies import SPECIAL

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "days": {"type": "integer"}, "temp": {"type": "number"},
        "metric": {"type": "boolean"}, "hours": {"type": "array", "items": {"type": "integer"}, "maxItems": 3},
        "unit": {"enum": ["C", "F"]}}}}},
    {"type": "function", "function": {"name": "noop", "parameters": {"type": "object", "properties": {}}}},
]
# Argument strings are raw text in both markups: these make a value that cannot be told from markup.
_MARKUP = ("<", ">", "{", "}", ",", ":", '"', "\\")


@st.composite
def cuts(draw, text: str) -> list[str]:
    """``text`` cut at random points (sometimes every character)."""
    if len(text) > 1 and draw(st.integers(0, 9)) == 0:
        return list(text)
    points = sorted(draw(st.sets(st.integers(1, max(1, len(text) - 1)), max_size=12))) if len(text) > 1 else []
    return [text[a:b] for a, b in zip([0, *points], [*points, len(text)])]


@st.composite
def tool_arguments(draw, tool: dict[str, Any]) -> dict[str, Any]:
    """Arguments of ``tool``: each property's value drawn from its schema, plain text for strings."""
    props = tool["function"]["parameters"]["properties"]
    keys = draw(st.lists(st.sampled_from(sorted(props)), unique=True)) if props else []
    args = {}
    for k in keys:
        if props[k].get("type") == "string":
            args[k] = draw(st.text(st.characters(codec="utf-8", exclude_characters=_MARKUP), min_size=1, max_size=12)
                           .map(str.strip).filter(bool))
        else:
            args[k] = draw(from_schema(props[k]))
    return args


calls_to_write = st.lists(st.sampled_from(TOOLS).flatmap(lambda t: tool_arguments(t).map(
    lambda a: (t["function"]["name"], a))), max_size=3)
prose = st.lists(st.sampled_from(["Let me think.", "ok", " ", "\n", "42", "é", "<b>", "a < b", "{x}"])
                 | st.text(max_size=8), max_size=5).map("".join)


# -- Qwen3.5: <think> and Qwen3-Coder XML calls --------------------------------------------------------

def qwen_call(name: str, args: dict[str, Any]) -> str:
    params = "".join(f"<parameter={k}>\n{v if isinstance(v, str) else json.dumps(v)}\n</parameter>\n"
                     for k, v in args.items())
    return f"<tool_call>\n<function={name}>\n{params}</function>\n</tool_call>"


@examples(ci=150)
@given(data=st.data(), before=prose, calls=calls_to_write)
def test_qwen3_coder_calls_stream_as_they_parse_whole(data, before, calls):
    text = before + "\n\n" + "\n".join(qwen_call(n, a) for n, a in calls)
    whole = run_tool_parser(Qwen3CoderToolParser(tools=TOOLS), [text])
    streamed = run_tool_parser(Qwen3CoderToolParser(tools=TOOLS), data.draw(cuts(text)))
    assert streamed == whole
    assert whole[1] == [{"name": n, "arguments": a} for n, a in calls]
    if calls:
        assert whole[0] == before.strip() or whole[0] == before.rstrip()


@examples(ci=150)
@given(data=st.data(), prefilled=st.booleans(), reasoning=prose, answer=prose, closed=st.booleans(),
       call=st.booleans())
def test_think_reasoning_streams_as_it_parses_whole(data, prefilled, reasoning, answer, closed, call):
    text = ("" if prefilled else "<think>") + reasoning + ("\n</think>\n\n" if closed else "") + answer
    if call:
        text += qwen_call("noop", {})
    prompt = [1, 10] if prefilled else [1]

    def run(chunks):
        p = ThinkReasoningParser()
        p.open_id, p.end_token_id = 10, 11
        p.start(prompt, ("<tool_call>",))
        return run_reasoning_parser(p, chunks)

    whole = run([text])
    assert run(data.draw(cuts(text))) == whole
    if closed and "<think>" not in reasoning + answer and "</think>" not in reasoning and "<tool_call>" not in reasoning:
        assert whole[0].strip() == reasoning.strip()


@examples(ci=100)
@given(data=st.data(), text=st.lists(st.sampled_from(SPECIAL) | st.text(max_size=5), max_size=12).map("".join),
       prefilled=st.booleans())
def test_qwen_parsers_on_markup_soup(data, text, prefilled):
    """Any text laced with the markup: the streamed parse equals the whole parse (no crash, nothing lost)."""
    def run(chunks):
        r = ThinkReasoningParser()
        r.open_id, r.end_token_id = 10, 11
        r.start([10] if prefilled else [], ("<tool_call>",))
        return run_reasoning_parser(r, chunks), run_tool_parser(Qwen3CoderToolParser(tools=TOOLS), chunks)

    assert run(data.draw(cuts(text))) == run([text])


# -- forced tool choice without a markup: JSON calls ------------------------------------------------------

@examples(ci=120)
@given(data=st.data(), calls=calls_to_write.filter(bool), named=st.booleans(), indent=st.sampled_from([None, 1]))
def test_json_calls_stream_as_they_parse_whole(data, calls, named, indent):
    if named:
        function, text = calls[0][0], json.dumps(calls[0][1], indent=indent, ensure_ascii=False)
        written = [{"name": calls[0][0], "arguments": calls[0][1]}]
    else:
        function = None
        text = json.dumps([{"name": n, "parameters": a} for n, a in calls], indent=indent, ensure_ascii=False)
        written = [{"name": n, "arguments": a} for n, a in calls]
    whole = run_tool_parser(JsonToolCallParser(function), [text])
    assert run_tool_parser(JsonToolCallParser(function), data.draw(cuts(text))) == whole
    assert whole == ("", written)


# -- Gemma 4: the thinking channel and <|tool_call> calls ---------------------------------------------------

def gemma_value(v: Any) -> str:
    if isinstance(v, str):
        return f"{G_STR}{v}{G_STR}"
    if isinstance(v, list):
        return "[" + ",".join(gemma_value(x) for x in v) + "]"
    return json.dumps(v)


def gemma_call(name: str, args: dict[str, Any]) -> str:
    return f"{G_START}call:{name}{{" + ",".join(f"{k}:{gemma_value(v)}" for k, v in args.items()) + f"}}{G_END}"


class _GemmaTokenizer:
    unk_token_id = 0

    def convert_tokens_to_ids(self, token: str) -> int:
        return {"<|channel>": 100, "<channel|>": 101}.get(token, 0)


@examples(ci=120)
@given(data=st.data(), thought=prose, before=prose, calls=calls_to_write)
def test_gemma4_output_streams_as_it_parses_whole(data, thought, before, calls):
    text = f"thought\n{thought}<channel|>{before} " + "".join(gemma_call(n, a) for n, a in calls)

    def run(chunks):
        r = Gemma4ReasoningParser(_GemmaTokenizer())
        r.start([1, 100], (G_START,))
        reasoning, content = run_reasoning_parser(r, chunks)
        return reasoning, run_tool_parser(Gemma4ToolParser(tools=TOOLS), [content])

    def run_streamed(chunks):  # the server feeds the tool parser the reasoning parser's content deltas
        parsed = parse_stream(chunks, reasoning=Gemma4ReasoningParser(_GemmaTokenizer()),
                              tool=Gemma4ToolParser(tools=TOOLS), prompt_ids=[1, 100])
        return parsed.reasoning, (parsed.content, list(parsed.tool_calls))

    whole = run([text])
    assert run_streamed(data.draw(cuts(text))) == whole
    assert whole[1][1] == [{"name": n, "arguments": a} for n, a in calls]


# -- SSE framing ------------------------------------------------------------------------------------------

payload_text = st.text(max_size=20) | st.sampled_from(["\n", "\r\n", "\r", "data: x", "\u2028", "\u2029", "\x85",
                                                       "\x0b", "\x1c", "\U0001f600", "é\n\n"])
payloads = st.lists(st.fixed_dictionaries({"choices": st.lists(st.fixed_dictionaries(
    {"index": st.integers(0, 3), "delta": st.fixed_dictionaries({}, optional={"content": payload_text,
                                                                               "reasoning_content": payload_text})}),
    max_size=2)}), min_size=1, max_size=5)


def byte_cuts(data, stream: bytes) -> list[bytes]:
    points = sorted(data.draw(st.sets(st.integers(1, len(stream) - 1), max_size=10)))
    return [stream[a:b] for a, b in zip([0, *points], [*points, len(stream)])]


@examples(ci=150)
@given(data=st.data(), events=payloads)
def test_sse_frames_decode_at_any_byte_split(data, events):
    stream = b"".join(sse_event(e) for e in events) + DONE
    chunks = byte_cuts(data, stream)
    openai_events = [s.data for s in SSEDecoder().iter_bytes(iter(chunks))]
    assert openai_events[-1] == "[DONE]" and [json.loads(d) for d in openai_events[:-1]] == events

    response = httpx.Response(200, content=iter(chunks), headers={"content-type": "text/event-stream"})
    lines = [line for line in response.iter_lines() if line]  # what `async for line in r.aiter_lines()` sees
    assert lines[-1] == "data: [DONE]"
    assert [json.loads(line.removeprefix("data: ")) for line in lines[:-1]] == events
