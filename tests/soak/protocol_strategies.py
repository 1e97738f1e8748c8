"""Hypothesis strategies for ``/v1/chat/completions`` and ``/v1/completions`` bodies, built from the request
protocol (:mod:`anna_core.server.protocol`).

Every field the protocol knows (``CHAT_FIELDS``, ``COMPLETION_FIELDS``) has a strategy here, so a field added
there fails ``test_every_protocol_field_has_a_strategy`` until it is fuzzed too. The scalar and array fields have a JSON
Schema of the values OpenAI's API documents for them (a little wider: out-of-range numbers, unknown enum
values), from which hypothesis-jsonschema draws; the sampling fields take their schema from the protocol's own
lists (``_SAMPLING_NUMBERS`` ...). Messages, prompts, tools and ``response_format`` have hand-made strategies:
text laced with the chat template's and the parsers' markup, and random JSON Schemas (some unusable) for tool
parameters and structured output. A body is the required field plus any subset of the others, each value
well-typed or, now and then, any JSON value at all, and sometimes a field nobody defines.
"""

from __future__ import annotations

from typing import Any

from anna_core.server import protocol
from hypothesis import strategies as st
from hypothesis_jsonschema import from_schema

SPECIAL = ["<think>", "</think>", "<tool_call>", "</tool_call>", "<function=add>", "</function>",
           "<parameter=a>", "</parameter>", "<|im_start|>", "<|im_end|>", "<|endoftext|>", "{", "}", "\n",
           "\u00e9", "\U0001f600", "\x00", "\ud7ff", "1e400", "NaN"]

json_scalars = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False,
                                                                                      allow_infinity=False) | st.text(max_size=12)
any_json = st.recursive(json_scalars, lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c,
                                                                                          max_size=4), max_leaves=8)
texts = st.one_of(st.text(max_size=60), st.lists(st.sampled_from(SPECIAL) | st.text(max_size=6), max_size=8).map("".join))
nonempty_texts = st.text(min_size=1, max_size=60) | st.lists(st.sampled_from(SPECIAL), min_size=1, max_size=8).map("".join)
names = st.sampled_from(["add", "get_weather", "x", "a-b.c", "bad name", ""])

_NUMBER = {"type": "number", "minimum": -5, "maximum": 5}
_SCALAR_SCHEMAS: dict[str, dict[str, Any]] = {
    **{name: _NUMBER for name in protocol.SAMPLING_NUMBERS},
    **{name: {"type": "integer", "minimum": -5, "maximum": 600} for name in protocol.SAMPLING_INTS},
    **{name: {"type": "boolean"} for name in protocol.SAMPLING_BOOLS},
    "max_tokens": {"type": "integer", "minimum": -1, "maximum": 40},
    "max_completion_tokens": {"type": "integer", "minimum": -1, "maximum": 40},
    "stream": {"type": "boolean"},
    "stop": {"anyOf": [{"type": "string", "maxLength": 4}, {"type": "array", "items": {"type": "string", "maxLength": 4},
                                                           "maxItems": 4}]},
    "stop_token_ids": {"type": "array", "items": {"type": "integer", "minimum": -1, "maximum": 1000}, "maxItems": 4},
    "user": {"type": "string", "maxLength": 8},
    "n": {"type": "integer", "minimum": -1, "maximum": 18},
    "service_tier": {"enum": ["auto", "default", "flex", None]},
    "add_generation_prompt": {"type": "boolean"},
    "continue_final_message": {"type": "boolean"},
    "parallel_tool_calls": {"type": "boolean"},
    "top_logprobs": {"type": "integer", "minimum": -1, "maximum": 25},
    "store": {"type": ["boolean", "null"]},
    "functions": {"type": "array", "maxItems": 1},
    "function_call": {"enum": ["none", "auto", None]},
    "modalities": {"type": "array", "items": {"enum": ["text", "audio"]}, "maxItems": 2},
    "reasoning_effort": {"enum": ["low", "medium", "high", None]},
    "include_reasoning": {"type": "boolean"},
    "echo": {"type": "boolean"},
    "suffix": {"type": "string", "maxLength": 4},
    "best_of": {"type": "integer", "minimum": 0, "maximum": 5},
    "return_token_ids": {"type": "boolean"},
}
CHAT_SCHEMAS = {**_SCALAR_SCHEMAS, "logprobs": {"type": "boolean"}}
COMPLETION_SCHEMAS = {**_SCALAR_SCHEMAS, "logprobs": {"type": "integer", "minimum": -1, "maximum": 25}}


def json_schemas(max_leaves: int = 6) -> st.SearchStrategy[dict[str, Any]]:
    """Small JSON Schemas, mostly usable, some not (an unknown type, a bad pattern, a dangling ``$ref``)."""
    leaf = st.fixed_dictionaries(
        {"type": st.sampled_from(["string", "integer", "number", "boolean", "null", "bogus"])},
        optional={"description": st.text(max_size=8), "enum": st.lists(json_scalars, min_size=1, max_size=3),
                  "minLength": st.integers(-1, 4), "maxLength": st.integers(0, 6), "minimum": st.integers(-9, 9),
                  "maximum": st.integers(-9, 9), "pattern": st.sampled_from(["^[a-z]+$", "[", "\\d{2}", "(a|b)*"]),
                  "format": st.sampled_from(["date", "email", "uuid", "date-time"])},
    ) | st.sampled_from([{}, {"$ref": "#/$defs/missing"}, {"const": 1}, {"type": ["string", "null"]}])
    keys = st.text(st.characters(codec="utf-8"), min_size=1, max_size=6) | st.sampled_from(["a", "b", "city"])

    def extend(children: st.SearchStrategy) -> st.SearchStrategy:
        props = st.dictionaries(keys, children, max_size=3)
        return (st.fixed_dictionaries({"type": st.just("object"), "properties": props},
                                      optional={"required": st.lists(keys, max_size=2),
                                                "additionalProperties": st.booleans()})
                | st.fixed_dictionaries({"type": st.just("array"), "items": children},
                                        optional={"minItems": st.integers(0, 3), "maxItems": st.integers(0, 3)})
                | st.builds(lambda xs: {"anyOf": xs}, st.lists(children, min_size=1, max_size=3)))

    return st.recursive(leaf, extend, max_leaves=max_leaves)


def enforceable(schema: Any) -> Any:
    """``schema`` without the parts xgrammar's JSON Schema grammar does not enforce (found by
    ``test_structured_output_follows_its_schema``): a ``required`` key the ``properties`` leave undefined
    (it emits ``{}`` for ``{"properties": {}, "required": ["a"]}``), any keyword beside ``enum`` / ``const``
    (the enum alone decides: ``null`` for ``{"type": "string", "enum": [null]}``, ``0`` for
    ``{"minimum": 1, "enum": [0]}``), a ``pattern`` beside a ``format`` (the format alone decides)."""
    if isinstance(schema, list):
        return [enforceable(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: enforceable(v) for k, v in schema.items()}
    if isinstance(out.get("required"), list):
        out["required"] = [k for k in out["required"] if k in (out.get("properties") or {})]
    if "enum" in out or "const" in out:
        out = {k: v for k, v in out.items() if k in ("enum", "const", "description")}
    if "format" in out:
        out.pop("pattern", None)
    return out


object_schemas = st.builds(lambda props, req: {"type": "object", "properties": props, "required": req},
                           st.dictionaries(st.sampled_from(["a", "b", "city", "n"]), json_schemas(4), max_size=3),
                           st.lists(st.sampled_from(["a", "b", "city"]), max_size=2, unique=True))

tools = st.lists(st.fixed_dictionaries(
    {"type": st.sampled_from(["function", "function", "code_interpreter"]),
     "function": st.fixed_dictionaries({"name": names}, optional={"description": st.text(max_size=8),
                                                                  "parameters": object_schemas | json_schemas(3),
                                                                  "strict": st.booleans()})}),
    max_size=3)
tool_choices = st.sampled_from(["none", "auto", "required", "any"]) | st.fixed_dictionaries(
    {"type": st.sampled_from(["function", "tool"]), "function": st.fixed_dictionaries({"name": names})})
response_formats = st.one_of(
    st.fixed_dictionaries({"type": st.sampled_from(["text", "json_object", "yaml"])}),
    st.fixed_dictionaries({"type": st.just("json_schema"),
                           "json_schema": st.fixed_dictionaries({"name": st.text(max_size=6)},
                                                                optional={"schema": json_schemas() | any_json,
                                                                          "strict": st.booleans()})}))

tool_calls = st.lists(st.fixed_dictionaries(
    {"type": st.just("function"),
     "function": st.fixed_dictionaries({"name": names}, optional={
         "arguments": st.sampled_from(['{"a": 1}', "{", "", "[]", '"x"']) | st.dictionaries(st.text(max_size=3), json_scalars,
                                                                                          max_size=2)})},
    optional={"id": st.text(max_size=8)}), max_size=2)
content_parts = st.lists(st.fixed_dictionaries({"type": st.sampled_from(["text", "text", "image_url", "video_url"])},
                                               optional={"text": texts}), max_size=3)
messages = st.lists(st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "developer", "user", "user", "assistant", "tool", "bot"])},
    optional={"content": texts | content_parts | st.none(), "tool_calls": tool_calls | st.none(),
              "tool_call_id": st.text(max_size=8), "reasoning_content": texts, "name": st.text(max_size=4)}),
    min_size=1, max_size=4)
token_ids = st.lists(st.integers(-1, 400) | st.integers(0, 2**40), min_size=0, max_size=12)
prompts = st.one_of(texts, token_ids, st.lists(texts, max_size=3), st.lists(token_ids, max_size=3))

_regexes = st.sampled_from([r"\d{3}", "(yes|no)", "[a-z]{1,8}", "(", "a{5000}", "", "x*"]) | st.text(max_size=6)
_choices = st.lists(st.sampled_from(["yes", "no", 'say "hi"', "a\\b", "🙂", ""]) | st.text(max_size=5), max_size=3)
_grammars = st.sampled_from(['root ::= "yes" | "no"', "root ::= undefined_rule", 'root ::= [a-z]+', ""]) | st.text(
    max_size=8)

# Objects: hand-made (hypothesis-jsonschema's object strategy breaks on current hypothesis releases).
_maybe_object = st.none() | st.dictionaries(st.text(max_size=4), json_scalars, max_size=2)
_SPECIAL_STRATEGIES = {
    "messages": messages, "tools": tools, "tool_choice": tool_choices, "response_format": response_formats,
    "prompt": prompts,
    "stream_options": st.fixed_dictionaries({}, optional={"include_usage": st.booleans() | json_scalars}),
    "logit_bias": st.dictionaries(st.from_regex(r"\A-?[0-9]{1,6}\Z") | st.text(max_size=3),
                                  st.floats(-150, 150) | st.booleans(), max_size=3),
    "chat_template_kwargs": st.fixed_dictionaries({}, optional={
        "enable_thinking": st.booleans(), "tools": st.just([]), "foo": json_scalars}),
    "metadata": st.dictionaries(st.text(max_size=4), st.text(max_size=4), max_size=2),
    "audio": _maybe_object, "prediction": _maybe_object, "web_search_options": _maybe_object,
    "mm_processor_kwargs": _maybe_object | st.fixed_dictionaries({}, optional={
        "max_pixels": st.integers(-1, 10**6) | json_scalars, "min_pixels": st.integers(-1, 10**4)}),
    # vLLM's constraint fields and extras
    "structured_outputs": st.fixed_dictionaries({}, optional={
        "json": json_schemas(3) | st.text(max_size=8), "regex": _regexes, "choice": _choices,
        "grammar": _grammars, "json_object": st.booleans() | json_scalars, "structural_tag": st.text(max_size=8),
        "backend": st.sampled_from(["auto", "xgrammar", "outlines"]), "disable_any_whitespace": st.booleans(),
        "whitespace_pattern": st.none() | st.text(max_size=2), "foo": json_scalars}),
    "guided_json": json_schemas(3) | st.text(max_size=8), "guided_regex": _regexes, "guided_choice": _choices,
    "guided_grammar": _grammars, "guided_decoding_backend": st.sampled_from(["auto", "xgrammar", "outlines"]),
    "guided_whitespace_pattern": st.none() | st.text(max_size=2),
    "allowed_token_ids": st.lists(st.integers(-1, 400) | st.integers(0, 2**40), max_size=4),
    "bad_words": st.lists(st.text(max_size=6), max_size=3),
    "truncate_prompt_tokens": st.integers(-3, 5000), "prompt_logprobs": st.none() | st.integers(-1, 3),
    "use_beam_search": st.booleans() | st.none(),
}


def field_strategies(endpoint: str, model: str) -> dict[str, st.SearchStrategy]:
    """One strategy per field of ``endpoint`` (``"chat"`` or ``"completion"``), keyed by field name."""
    known = protocol.CHAT_FIELDS if endpoint == "chat" else protocol.COMPLETION_FIELDS
    schemas = CHAT_SCHEMAS if endpoint == "chat" else COMPLETION_SCHEMAS
    out = {}
    for name in sorted(known):
        if name == "model":
            out[name] = st.sampled_from([model, model, model, "no-such-model"])
        elif name in _SPECIAL_STRATEGIES:
            out[name] = _SPECIAL_STRATEGIES[name]
        elif name in schemas:
            out[name] = from_schema(schemas[name])
    return out


def loose_bodies(endpoint: str, model: str) -> st.SearchStrategy[Any]:
    """Request bodies for ``endpoint``: the required field, any subset of the others (each value well-typed or,
    one time in five, any JSON value), maybe a field nobody defines; now and then not an object at all.
    Most are refused (a 400 naming a field): they fuzz the validation."""
    fields = field_strategies(endpoint, model)
    required = "messages" if endpoint == "chat" else "prompt"
    loose = {name: st.one_of(s, s, s, s, any_json) for name, s in fields.items() if name != required}
    body = st.fixed_dictionaries({required: fields[required]}, optional={"xyz_unknown": any_json, **loose})
    return st.one_of(*[body] * 12, any_json)


# In range: bodies of these fields alone are mostly served (200), so they fuzz generation, grammars and parsers.
_IN_RANGE: dict[str, st.SearchStrategy] = {
    "temperature": st.sampled_from([0.0, 0.5, 1.0]) | st.floats(0, 2), "top_p": st.floats(0.01, 1),
    "min_p": st.floats(0, 1), "presence_penalty": st.floats(-2, 2), "frequency_penalty": st.floats(-2, 2),
    "repetition_penalty": st.floats(0.5, 2), "top_k": st.integers(-1, 50), "seed": st.integers(0, 2**31),
    "min_tokens": st.integers(0, 4), "max_tokens": st.integers(1, 24), "n": st.integers(1, 4),
    "stream": st.booleans(), "stream_options": st.just({"include_usage": True}), "ignore_eos": st.booleans(),
    "skip_special_tokens": st.booleans(), "include_stop_str_in_output": st.booleans(),
    "stop": st.lists(st.sampled_from(["a", "the", "\n", "</think>", "<tool_call>", "}"]), max_size=2),
    "stop_token_ids": st.lists(st.integers(0, 383), max_size=2),
    "logit_bias": st.dictionaries(st.integers(0, 383).map(str), st.floats(-100, 100), max_size=3),
    "allowed_token_ids": st.lists(st.integers(0, 383), min_size=1, max_size=6),
    "bad_words": st.lists(st.sampled_from(["a", "the", "Hi", "color is", "}"]), max_size=2),
    "truncate_prompt_tokens": st.sampled_from([-1, 1, 4, 16, 64]),
}
_IN_RANGE_CHAT = {
    "messages": st.lists(st.fixed_dictionaries({"role": st.sampled_from(["system", "user"]), "content": texts}),
                         min_size=1, max_size=3).map(lambda m: [*m, {"role": "user", "content": "Hi"}]),
    "chat_template_kwargs": st.fixed_dictionaries({"enable_thinking": st.booleans()}),
    "tools": st.lists(st.fixed_dictionaries({"type": st.just("function"), "function": st.fixed_dictionaries(
        {"name": st.sampled_from(["add", "get_weather", "x"]), "parameters": object_schemas})}),
        min_size=1, max_size=2, unique_by=lambda t: t["function"]["name"]),
    "tool_choice": st.sampled_from(["auto", "required", "none"]),
    "parallel_tool_calls": st.booleans(),
    "response_format": st.one_of(st.just({"type": "json_object"}), st.builds(
        lambda s: {"type": "json_schema", "json_schema": {"name": "out", "schema": s}}, object_schemas)),
    "logprobs": st.just(True), "top_logprobs": st.integers(0, 5), "include_reasoning": st.booleans(),
    "guided_choice": st.lists(st.sampled_from(["yes", "no", 'say "hi"', "🙂"]), min_size=1, max_size=3),
    "structured_outputs": st.sampled_from([{"regex": r"\d{3}"}, {"choice": ["a", "b"]}, {"json_object": True},
                                           {"grammar": 'root ::= "yes" | "no"'}]),
}
_IN_RANGE_COMPLETION = {
    "prompt": st.one_of(nonempty_texts, st.lists(st.integers(0, 383), min_size=1, max_size=12),
                        st.lists(nonempty_texts, min_size=1, max_size=3)),
    "echo": st.booleans(), "logprobs": st.integers(0, 5), "return_token_ids": st.booleans(),
}


def served_bodies(endpoint: str, model: str) -> st.SearchStrategy[dict[str, Any]]:
    """Bodies for ``endpoint`` with every field in range (a few combinations still make a 400: ``echo`` with
    ``logprobs``, ``response_format`` with a forced ``tool_choice`` or with a ``guided_choice`` /
    ``structured_outputs``, a schema xgrammar cannot use, ``truncate_prompt_tokens`` through media)."""
    extra = _IN_RANGE_CHAT if endpoint == "chat" else _IN_RANGE_COMPLETION
    required = "messages" if endpoint == "chat" else "prompt"
    optional = {k: v for k, v in {**_IN_RANGE, **extra}.items() if k != required}
    return st.fixed_dictionaries({"model": st.just(model), required: extra[required]}, optional=optional).map(
        lambda b: b if b.get("stream") else {k: v for k, v in b.items() if k != "stream_options"})


def bodies(endpoint: str, model: str) -> st.SearchStrategy[Any]:
    """Half :func:`served_bodies`, half :func:`loose_bodies`."""
    return st.one_of(served_bodies(endpoint, model), loose_bodies(endpoint, model))
