"""The JSON tool calls of a forced tool choice without a tool-call parser: the schema the output is
generated under, and the streaming parser fed the output in every kind of split."""

from __future__ import annotations

import json
import random

import jsonschema
import pytest
from anna_core.parsers.json_calls import JsonToolCallParser, calls_schema

TOOLS = [{"type": "function", "function": {"name": "get_time", "parameters": {
    "type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]}}},
         {"type": "function", "function": {"name": "ping"}}]  # no parameters: an empty object

ARRAY = ('[{"name": "get_time", "parameters": {"zone": "U\\"T}C", "n": [1, {"a": "]"}]}}, '
         '{"name": "ping", "parameters": {}}, {"parameters": {"zone": "CET"}, "name": "get_time"}, {"name": "ping"}]')
EXPECTED = [("get_time", '{"zone": "U\\"T}C", "n": [1, {"a": "]"}]}'), ("ping", "{}"),
            ("get_time", '{"zone": "CET"}'), ("ping", "{}")]


def _parse(text: str, function: str | None, sizes: list[int]) -> tuple[str, list[tuple[str, str]]]:
    parser = JsonToolCallParser(function)
    calls: dict[int, list[str]] = {}
    content, pos = "", 0
    pieces = []
    for size in sizes:
        pieces.append(text[pos:pos + size])
        pos += size
    pieces.append(text[pos:])
    for piece in [*pieces, None]:
        more, deltas = parser.feed(piece) if piece is not None else parser.finish()
        content += more
        for d in deltas:
            if d.name is not None:  # a call's first delta: id and name, no arguments yet
                assert d.index == len(calls) and d.id.startswith("call_") and d.arguments == ""
                calls[d.index] = [d.name, ""]
            else:
                calls[d.index][1] += d.arguments
    assert parser.num_calls == len(calls)
    return content, [(name, args) for name, args in calls.values()]


@pytest.mark.parametrize("seed", range(12))
def test_required_array_parses_the_same_in_any_split(seed):
    rng = random.Random(seed)
    sizes = [rng.randint(1, 1 + seed) for _ in range(len(ARRAY))]
    assert _parse(ARRAY, None, sizes) == ("", EXPECTED)


def test_named_output_is_the_arguments_in_any_split():
    text = '{"zone": "UTC"}'
    for size in (1, 2, 5, 100):
        assert _parse(text, "get_time", [size] * len(text)) == ("", [("get_time", text)])
    assert _parse("", "get_time", []) == ("", [("get_time", "")])  # named even when nothing came


def test_text_outside_the_array_is_content():
    assert _parse('Sorry. [{"name": "ping", "parameters": {}}]', None, [3, 4, 5]) == ("Sorry.", [("ping", "{}")])


def test_calls_schema_matches_vllm_shapes():
    named = calls_schema(TOOLS, "get_time", parallel=True)
    assert named == TOOLS[0]["function"]["parameters"]
    assert calls_schema(TOOLS, "ping", parallel=True) == {"type": "object", "properties": {}}
    array = calls_schema(TOOLS, None, parallel=True)
    jsonschema.validate(json.loads(ARRAY.replace(', {"name": "ping"}]', "]")), array)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate([{"name": "get_time", "parameters": {}}], array)  # zone is required
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate([], array)
    one = calls_schema(TOOLS, None, parallel=False)
    jsonschema.validate([{"name": "ping", "parameters": {}}], one)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate([{"name": "ping", "parameters": {}}] * 2, one)
    with pytest.raises(ValueError, match="not among the tools"):
        calls_schema(TOOLS, "nope", parallel=True)


def test_a_grammar_that_does_not_compile_names_its_request_field_without_xgrammars_log_prefix():
    from anna_core.engine.logits_processors import LogitsProcessors
    from anna_core.engine.sampling_params import StructuredOutput
    from anna_core.errors import InvalidRequestError

    from tests.core._engine_fakes import build_tokenizer

    tok = build_tokenizer()
    processors = LogitsProcessors(tok, len(tok.hf), [0])
    bad = '{"type": "object", "properties": {"x": {"$ref": "#/$defs/Missing"}}}'
    for param in ("tools", "response_format"):
        with pytest.raises(InvalidRequestError) as err:
            processors.compile(StructuredOutput("json_schema", bad, param=param))
        assert err.value.param == param
        message = str(err.value)
        assert "cannot compile the json schema" in message and ".cc:" not in message and "Missing" in message
