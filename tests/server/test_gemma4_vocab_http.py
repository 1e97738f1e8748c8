"""Gemma 4 reasoning and tool calls through the real HTTP server and engine on the real Gemma 4
vocabulary (llama.cpp's ggml-vocab-gemma-4.gguf): the scripted model emits the ids of realistic
model output encoded by that tokenizer (every tag one id), one token per step, so every answer
reaches the parsers as many small deltas; each case is asked streamed and not. The chat template
is the GGUF's own, rendered with ``chat_template_kwargs.enable_thinking``."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.gemma4.vocab_files import gemma4_tokenizer
from tests.server.scripted_server import API_KEY, MODEL

pytest.importorskip("anna_gemma4")
pytestmark = pytest.mark.slow

S = '<|"|>'
TAG_IDS = {"<|channel>": 100, "<channel|>": 101, "<|tool_call>": 48, "<tool_call|>": 49, S: 52}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}}}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {
        "zone": {"type": "string"}}}}},
    {"type": "function", "function": {"name": "run_sql", "parameters": {"type": "object", "properties": {
        "query": {"type": "string"}, "limit": {"type": "integer"}, "opts": {"type": "object"}}}}},
]


@pytest.fixture(scope="module")
def gemma():
    from anna_gemma4.reasoning import Gemma4ReasoningParser
    from anna_gemma4.tokenizer import stop_token_ids
    from anna_gemma4.tool_calls import Gemma4ToolParser

    from tests.server.scripted_server import ScriptedServer

    tok = gemma4_tokenizer()
    eos = stop_token_ids(tok)
    server = ScriptedServer(tokenizer=tok, vocab_size=262144, eos_token_ids=[eos[1], eos[0]], family="gemma4",
                            reasoning_parser=Gemma4ReasoningParser, tool_call_parser=Gemma4ToolParser)
    yield server
    server.close()


def _script(server, name: str, text: str) -> str:
    ids = server.tokenizer.encode(text)
    for tag, tid in TAG_IDS.items():  # each tag is one token of the real vocabulary
        assert ids.count(tid) == text.count(tag), tag
    assert server.tokenizer.decode(ids, skip_special_tokens=False) == text
    return server.script(name, ids=ids)


def _ask(server, name: str, text: str, *, thinking: bool, stream: bool):
    marker = _script(server, f"{name}-{'stream' if stream else 'whole'}", text)
    return server.client().chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": f"Go {marker}"}], temperature=0, tools=TOOLS,
        stream=stream, extra_body={"chat_template_kwargs": {"enable_thinking": thinking}})


def _both(server, name: str, text: str, *, thinking: bool) -> tuple[dict, dict]:
    """The non-streamed message and the streamed one rebuilt from its deltas, as plain dicts; the
    streamed one also records its deltas."""
    whole = _ask(server, name, text, thinking=thinking, stream=False).choices[0]
    msg = whole.message
    calls = [{"id": c.id, "name": c.function.name, "arguments": json.loads(c.function.arguments)}
             for c in msg.tool_calls or []]
    a = {"reasoning": getattr(msg, "reasoning_content", None), "content": msg.content, "calls": calls,
         "finish": whole.finish_reason}

    chunks = [c for c in _ask(server, name, text, thinking=thinking, stream=True) if c.choices]
    deltas = [c.choices[0].delta for c in chunks]
    streamed: dict[int, dict] = {}
    for d in deltas:
        for tc in d.tool_calls or []:
            call = streamed.setdefault(tc.index, {"id": None, "name": None, "arguments": ""})
            call["id"] = call["id"] or tc.id
            call["name"] = call["name"] or (tc.function.name if tc.function else None)
            call["arguments"] += (tc.function.arguments or "") if tc.function else ""
    b = {"reasoning": "".join(getattr(d, "reasoning_content", None) or "" for d in deltas) or None,
         "content": "".join(d.content or "" for d in deltas) or None,
         "calls": [{**c, "arguments": json.loads(c["arguments"])} for _, c in sorted(streamed.items())],
         "finish": chunks[-1].choices[0].finish_reason, "deltas": deltas}
    return a, b


def _same(a: dict, b: dict) -> None:
    """The streamed answer ``b`` equals the non-streamed ``a`` (call ids aside, which both have)."""
    def strip(m: dict) -> dict:
        return {**{k: v for k, v in m.items() if k != "deltas"}, "calls": _no_ids(m["calls"])}

    assert strip(b) == strip(a)
    assert all(call["id"] for call in a["calls"] + b["calls"])


def _no_ids(calls: list[dict]) -> list[dict]:
    return [{k: v for k, v in c.items() if k != "id"} for c in calls]


def test_reasoning_block_then_content(gemma):
    text = "<|channel>thought\nThe user asks for 6*7, i.e. 42.\n<channel|>The answer is **42**."
    a, b = _both(gemma, "think", text, thinking=True)
    assert a == {"reasoning": "The user asks for 6*7, i.e. 42.", "content": "The answer is **42**.", "calls": [],
                 "finish": "stop"}
    _same(a, b)
    kinds = ["r" if getattr(d, "reasoning_content", None) else "c" for d in b["deltas"]
             if getattr(d, "reasoning_content", None) or d.content]
    assert kinds == sorted(kinds, reverse=True) and kinds.count("r") > 5 and kinds.count("c") > 3


def test_thinking_off_answers_after_the_prefilled_empty_channel(gemma):
    a, b = _both(gemma, "nothink", "The answer is 42.", thinking=False)
    assert a == {"reasoning": None, "content": "The answer is 42.", "calls": [], "finish": "stop"}
    _same(a, b)


def test_tool_call_with_delimited_strings_holding_braces_quotes_commas(gemma):
    query = 'SELECT "name", \'{x}\' FROM t WHERE a = "1,2" AND b: {c};'
    text = (f"<|tool_call>call:run_sql{{query:{S}{query}{S},limit:10,"
            f"opts:{{dry_run:true,tags:[{S}a, b{S},{S}}}{{\"{S}]}}}}<tool_call|>")
    a, b = _both(gemma, "sql", text, thinking=False)
    args = {"query": query, "limit": 10, "opts": {"dry_run": True, "tags": ["a, b", '}{"']}}
    assert _no_ids(a["calls"]) == [{"name": "run_sql", "arguments": args}]
    assert (a["content"], a["reasoning"], a["finish"]) == (None, None, "tool_calls")
    _same(a, b)


def test_two_calls_after_some_content(gemma):
    text = (f"Checking both.<|tool_call>call:get_weather{{city:{S}Rome{S}}}<tool_call|>"
            f"<|tool_call>call:get_time{{zone:{S}Europe/Rome{S}}}<tool_call|>")
    a, b = _both(gemma, "two", text, thinking=False)
    assert _no_ids(a["calls"]) == [{"name": "get_weather", "arguments": {"city": "Rome"}},
                                   {"name": "get_time", "arguments": {"zone": "Europe/Rome"}}]
    assert a["calls"][0]["id"] != a["calls"][1]["id"]
    assert (a["content"], a["finish"]) == ("Checking both.", "tool_calls")
    _same(a, b)


def test_call_split_across_many_deltas(gemma):
    city = "Llanfairpwllgwyngyll, {Wales}: \"the long one\""
    text = f"One moment.<|tool_call>call:get_weather{{city:{S}{city}{S}}}<tool_call|>"
    call_ids = gemma.tokenizer.encode(text[text.index("<|tool_call>"):])
    assert len(call_ids) > 25  # the call reaches the server as that many one-token steps
    a, b = _both(gemma, "long", text, thinking=True)
    assert _no_ids(a["calls"]) == [{"name": "get_weather", "arguments": {"city": city}}]
    assert (a["content"], a["reasoning"], a["finish"]) == ("One moment.", None, "tool_calls")
    _same(a, b)
    # the call's deltas come after the content, as one name delta and one arguments delta
    pieces = [tc for d in b["deltas"] for tc in d.tool_calls or []]
    assert [(p.function.name, p.function.arguments) for p in pieces] == [
        ("get_weather", ""), (None, json.dumps({"city": city}))]
    assert not any(tag in (d.content or "") for d in b["deltas"] for tag in TAG_IDS)


def test_call_inside_the_thought_channel_stays_reasoning(gemma):
    sketch = f"<|tool_call>call:get_weather{{city:{S}Rome{S}}}<tool_call|>"
    text = f"<|channel>thought\nI could call {sketch} but I know it.\n<channel|>It is sunny in Rome."
    a, b = _both(gemma, "sketch", text, thinking=True)
    assert a == {"reasoning": f"I could call {sketch} but I know it.", "content": "It is sunny in Rome.",
                 "calls": [], "finish": "stop"}
    _same(a, b)

    text = f"<|channel>thought\nMaybe {sketch}?\n<channel|>{sketch}"
    a, b = _both(gemma, "sketch-then-call", text, thinking=True)
    assert (a["reasoning"], a["content"], a["finish"]) == (f"Maybe {sketch}?", None, "tool_calls")
    assert _no_ids(a["calls"]) == [{"name": "get_weather", "arguments": {"city": "Rome"}}]
    _same(a, b)


@pytest.mark.parametrize("thinking", [False, True])
def test_tokenize_renders_the_gguf_template(gemma, thinking):
    """/tokenize renders a chat body exactly as /v1/chat/completions does: OpenAI-style history (the
    call's arguments a JSON string) through the GGUF's template."""
    from tests.gemma4.test_vocab_template import MESSAGES, expected
    from tests.gemma4.test_vocab_template import TOOLS as TEMPLATE_TOOLS

    history = [dict(m) for m in MESSAGES]
    history[2] = {**history[2], "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather",
                                                           "arguments": json.dumps({"city": "Rome", "days": 2})}}]}
    body = {"model": MODEL, "messages": history, "tools": TEMPLATE_TOOLS,
            "chat_template_kwargs": {"enable_thinking": thinking}}
    r = httpx.post(f"{gemma.base_url}/tokenize", json=body, headers={"Authorization": f"Bearer {API_KEY}"})
    assert r.status_code == 200, r.text
    ids = r.json()["tokens"]
    assert gemma.tokenizer.decode(ids, skip_special_tokens=False) == expected(thinking)
    assert ids[:2] == [2, 105] and ids[-1] == (107 if thinking else 101)
