"""vLLM's constraint fields (``structured_outputs``, ``guided_json`` / ``guided_regex`` / ``guided_choice`` /
``guided_grammar``) on both completion routes, through the ``openai`` client against the scripted-model server: the
output follows the grammar even where the script disagrees; conflicting or unsupported fields, and vLLM's other
output-changing extras Anna does not implement, are 400s naming the field (they were dropped silently before)."""

from __future__ import annotations

import json
import re

import jsonschema
import openai
import pytest

from tests.server.scripted_server import MODEL

pytestmark = pytest.mark.slow

NO_THINK = {"chat_template_kwargs": {"enable_thinking": False}}
SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 6}, "ok": {"type": "boolean"}},
          "required": ["name", "ok"], "additionalProperties": False}
SCRIPT = 'The color is: Red. {"name": "Ann", "ok": "yes"} Call 555-1234 now.'


def _chat(scripted, **extra):
    marker = scripted.script("structured", SCRIPT)
    r = scripted.client().chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": marker}], temperature=0, max_tokens=60,
        extra_body={**NO_THINK, **extra})
    return r.choices[0].message.content


def _completion(scripted, **extra):
    marker = scripted.script("structured", SCRIPT)
    r = scripted.client().completions.create(model=MODEL, prompt=marker, temperature=0, max_tokens=60,
                                             extra_body=extra)
    return r.choices[0].text


def test_the_script_is_free_text_without_a_constraint(scripted):
    assert _chat(scripted).startswith("The color is")


@pytest.mark.parametrize("route", [_chat, _completion])
@pytest.mark.parametrize("spelling", ["guided", "structured_outputs"])
def test_choice_regex_json_and_grammar_constrain_the_output(scripted, route, spelling):
    def ask(kind, value):
        return route(scripted, **({f"guided_{kind}": value} if spelling == "guided"
                                  else {"structured_outputs": {kind: value}}))

    choices = ["red", 'say "blue"', "grün 🙂"]
    assert ask("choice", choices) in choices
    assert re.fullmatch(r"\d{3}-\d{4}", ask("regex", r"\d{3}-\d{4}"))
    for schema in (SCHEMA, json.dumps(SCHEMA)):  # an object, or JSON text (vLLM takes both)
        value = json.loads(ask("json", schema))
        jsonschema.validate(value, SCHEMA)
    assert ask("grammar", 'root ::= "yes" | "no" | "maybe"') in ("yes", "no", "maybe")


def test_structured_outputs_json_object(scripted):
    marker = scripted.script("jobj_so", '{"ok": true}')
    r = scripted.client().chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": marker}], temperature=0, max_tokens=40,
        extra_body={**NO_THINK, "structured_outputs": {"json_object": True}})
    assert json.loads(r.choices[0].message.content) == {"ok": True}


@pytest.mark.parametrize(("extra", "param", "message"), [
    ({"guided_choice": ["a"], "guided_regex": "a"}, "guided_choice", "set one output constraint"),
    ({"response_format": {"type": "json_object"}, "guided_json": SCHEMA}, "guided_json", "set one output constraint"),
    ({"structured_outputs": {"regex": "a", "choice": ["a"]}}, "structured_outputs", "exactly one of"),
    ({"structured_outputs": {"regexp": "a"}}, "structured_outputs", "unknown keys ['regexp']"),
    ({"structured_outputs": {"regex": "a", "whitespace_pattern": " "}}, "structured_outputs", "whitespace_pattern"),
    ({"structured_outputs": "a"}, "structured_outputs", "must be an object"),
    ({"guided_choice": []}, "guided_choice", "array of 1 to"),
    ({"guided_choice": ["a", 3]}, "guided_choice", "array of 1 to"),
    ({"guided_json": "{not json"}, "guided_json", "not valid JSON"),
    ({"guided_regex": "(ab"}, "guided_regex", "cannot compile the regex"),
    ({"guided_regex": "a{5000}"}, "guided_regex", "unrolls to more than"),
    ({"guided_grammar": "root ::= undefined_rule"}, "guided_grammar", "cannot compile the grammar"),
    ({"guided_decoding_backend": "outlines", "guided_regex": "a"}, "guided_decoding_backend", "xgrammar"),
    ({"guided_whitespace_pattern": " ", "guided_regex": "a"}, "guided_whitespace_pattern", "not supported"),
    ({"allowed_token_ids": [1, 2]}, "allowed_token_ids", "not supported"),
    ({"bad_words": ["Red"]}, "bad_words", "not supported"),
    ({"prompt_logprobs": 1}, "prompt_logprobs", "not supported"),
    ({"truncate_prompt_tokens": 8}, "truncate_prompt_tokens", "not supported"),
    ({"use_beam_search": True}, "use_beam_search", "not supported"),
])
@pytest.mark.parametrize("route", [_chat, _completion])
def test_conflicting_bad_or_unimplemented_fields_are_400s_naming_the_field(scripted, route, extra, param, message):
    with pytest.raises(openai.BadRequestError) as err:
        route(scripted, **extra)
    assert err.value.body["param"] == param and message in err.value.body["message"], err.value.body


def test_neutral_values_of_the_unimplemented_extras_are_accepted(scripted):
    text = _chat(scripted, allowed_token_ids=None, bad_words=[], use_beam_search=False, guided_decoding_backend="xgrammar",
                 structured_outputs={"choice": ["red", "blue"], "disable_any_whitespace": True, "backend": "auto"})
    assert text in ("red", "blue")


def test_a_constraint_with_a_forced_tool_choice_is_a_400(scripted):
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    with pytest.raises(openai.BadRequestError) as err:
        _chat(scripted, tools=[tool], tool_choice="required", guided_choice=["a"])
    assert err.value.body["param"] == "guided_choice"
