"""Qwen3's JSON tool calls (:mod:`anna_core.parsers.qwen3_json`): calls parsed whole and streamed, bodies that are
not calls kept as content, output cut inside a call, and the forced-``tool_choice`` grammar (xgrammar's ``qwen_3``
structural tag) accepting the calls and refusing anything else. The family's own samples run in
``tests/qwen3/test_qwen3_conformance.py``."""

from __future__ import annotations

import json

import pytest
from anna_core.parsers.qwen3_json import Qwen3JsonToolParser, parse_call

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"],
    "additionalProperties": False}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {
    "type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"], "additionalProperties": False}}}
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}\n</tool_call>'


def run(chunks: list[str]) -> tuple[str, list[dict]]:
    parser = Qwen3JsonToolParser()
    content, calls = "", []
    for chunk in chunks:
        text, deltas = parser.feed(chunk)
        content += text
        calls += deltas
    text, deltas = parser.finish()
    content += text
    calls += deltas
    joined: dict[int, dict] = {}
    for d in calls:
        call = joined.setdefault(d.index, {"id": d.id, "name": d.name, "arguments": ""})
        call["arguments"] += d.arguments
    assert all(c["id"].startswith("call_") and len(c["id"]) == 29 for c in joined.values())
    return content, [{"name": c["name"], "arguments": json.loads(c["arguments"])} for c in joined.values()]


def test_a_call_parses_whole_and_streamed_at_every_cut():
    text = "Checking.\n\n" + CALL
    want = ("Checking.", [{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}])
    assert run([text]) == want
    for cut in range(1, len(text)):
        assert run([text[:cut], text[cut:]]) == want, cut
    assert run(list(text)) == want


def test_the_first_delta_names_the_call_and_the_next_carries_its_arguments():
    parser = Qwen3JsonToolParser()
    content, deltas = parser.feed(CALL)
    assert content == "" and parser.num_calls == 1
    assert [(d.index, d.name, d.arguments) for d in deltas] == [
        (0, "get_weather", ""), (0, None, '{"city": "Paris", "days": 3}')]


@pytest.mark.parametrize("body, want", [
    ('{"name": "f", "arguments": {"a": [1, {"b": null}]}}', ("f", '{"a": [1, {"b": null}]}')),
    ('{"name": " f ", "arguments": "{\\"a\\": 1}"}', ("f", '{"a": 1}')),  # arguments sent JSON-encoded
    ('{"name": "f", "parameters": {"a": "é"}}', ("f", '{"a": "é"}')),
    ('{"name": "f"}', ("f", "{}")),
    ('{"name": "f", "arguments": [1]}', None),
    ('{"name": "", "arguments": {}}', None),
    ('{"arguments": {}}', None),
    ('{"name": "f", "arguments": {"a": 1}', None),  # cut short
    ("get_weather(city='Paris')", None),
])
def test_parse_call(body, want):
    assert parse_call(body) == want


def test_a_body_that_is_not_a_call_is_content_verbatim():
    text = 'A: <tool_call>\n["not", "a", "call"]\n</tool_call> B ' + CALL
    content, calls = run([text])
    assert content == 'A: <tool_call>\n["not", "a", "call"]\n</tool_call> B'
    assert [c["name"] for c in calls] == ["get_weather"]


def test_output_cut_inside_a_call():
    whole_body = CALL.removesuffix("\n</tool_call>")  # the object complete, its closing tag never came
    assert run([whole_body]) == ("", [{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}])
    half = CALL[:30]
    assert run([half]) == (half, [])  # not yet a call: what the model wrote comes back as content


def test_text_between_and_after_calls():
    text = CALL + "\n\n" + CALL.replace("Paris", "Oslo") + "\n\nDone."
    content, calls = run([text])
    assert content == "Done." and [c["arguments"]["city"] for c in calls] == ["Paris", "Oslo"]


@pytest.fixture(scope="module")
def tokenizer_info(tmp_path_factory):
    import xgrammar
    from anna_core.testing.checkpoints import build_tiny_tokenizer

    return xgrammar.TokenizerInfo.from_huggingface(build_tiny_tokenizer(tmp_path_factory.mktemp("tok")))


def _accepts(tokenizer_info, spec, text: str) -> bool:
    import xgrammar

    assert spec.kind == "structural_tag"
    matcher = xgrammar.GrammarMatcher(xgrammar.GrammarCompiler(tokenizer_info).compile_structural_tag(spec.spec))
    return matcher.accept_string(text) and matcher.is_completed()


def test_required_grammar_takes_one_or_more_calls_and_nothing_else(tokenizer_info):
    parser = Qwen3JsonToolParser()
    required = parser.grammar([WEATHER, TIME], None, parallel=True)
    time_call = '<tool_call>\n{"name": "get_time", "arguments": {"zone": "UTC"}}\n</tool_call>'
    assert _accepts(tokenizer_info, required, time_call)
    assert _accepts(tokenizer_info, required, time_call + "\n" + time_call)
    assert not _accepts(tokenizer_info, required, "I would rather chat.")
    assert not _accepts(tokenizer_info, required, time_call.replace('"UTC"', "3"))  # the schema types the arguments
    single = parser.grammar([WEATHER, TIME], None, parallel=False)
    assert _accepts(tokenizer_info, single, time_call)
    assert not _accepts(tokenizer_info, single, time_call + "\n" + time_call)
    # what the grammar lets through parses back into the call
    assert run([time_call]) == ("", [{"name": "get_time", "arguments": {"zone": "UTC"}}])


def test_named_grammar_forces_that_function(tokenizer_info):
    named = Qwen3JsonToolParser().grammar([WEATHER, TIME], "get_weather", parallel=True)
    assert _accepts(tokenizer_info, named, '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n'
                                           "</tool_call>")
    assert not _accepts(tokenizer_info, named, '<tool_call>\n{"name": "get_time", "arguments": {"zone": "UTC"}}\n'
                                               "</tool_call>")


def test_grammar_refuses_unknown_functions_and_no_tools():
    parser = Qwen3JsonToolParser()
    with pytest.raises(ValueError, match="names function 'nope', which is not among the tools"):
        parser.grammar([WEATHER], "nope", parallel=True)
    with pytest.raises(ValueError, match="needs at least one tool"):
        parser.grammar([], None, parallel=True)



def test_calls_that_are_not_strict_json_stay_content():
    # NaN / Infinity are not JSON (re-emitting them would hand clients invalid arguments); nesting past the stack
    # must not raise mid-stream
    from anna_core.parsers.qwen3_json import parse_call

    assert parse_call('{"name": "f", "arguments": {"x": NaN}}') is None
    assert parse_call('{"name": "f", "arguments": "{\\"x\\": Infinity}"}') is None
    assert parse_call('{"name": "f", "arguments": ' + "[" * 100000 + "]" * 100000 + "}") is None
    assert parse_call('{"name": "f", "arguments": {"x": 1.5}}') == ("f", '{"x": 1.5}')
