"""The request fields that constrain the output to a grammar, as one :class:`StructuredOutput`.

Three spellings are read, at most one per request (two set is a 400 naming both):

- OpenAI's ``response_format`` (``json_object`` / ``json_schema``; :func:`anna_core.server.tools.parse_response_format`);
- vLLM's ``structured_outputs`` object (vLLM 0.10.2 on): exactly one of ``json`` (a schema, as an object or JSON
  text), ``regex``, ``choice`` (a list of strings), ``grammar`` (xgrammar's EBNF, the GBNF dialect with a ``root``
  rule; a grammar without ``::=`` is read as Lark, as vLLM does), ``json_object: true`` or ``structural_tag`` (JSON
  text: xgrammar's form with a ``format``, or vLLM's older ``{"type": "structural_tag", "structures": [{"begin",
  "schema", "end"}], "triggers": [...]}``); a key set to anything but null counts; its other keys are vLLM's backend
  switches, accepted at their neutral values only;
- vLLM's older top-level ``guided_json``, ``guided_regex``, ``guided_choice``, ``guided_grammar`` (one of them), with
  ``guided_decoding_backend`` / ``guided_whitespace_pattern`` accepted only when unset (``guided_decoding_backend``
  may also name ``xgrammar`` or ``auto``, what Anna runs).

A choice becomes a grammar whose root is one of the strings, exactly. Schemas (a structural tag as a whole too) and
regular expressions pass the bounds of :mod:`anna_core.server.limits` before anything compiles; the grammar itself
compiles when the engine validates the request (a compile error is a 400 naming the field).
"""

from __future__ import annotations

import json
from typing import Any

from anna_core.engine.sampling_params import StructuredOutput
from anna_core.errors import InvalidRequestError
from anna_core.server.json_fields import field_error
from anna_core.server.limits import MAX_PATTERN_EXPANSION, MAX_SCHEMA_BYTES, check_schema, pattern_expansion
from anna_core.server.request_body import check_text
from anna_core.server.tools import parse_response_format

GUIDED_FIELDS = ("guided_json", "guided_regex", "guided_choice", "guided_grammar")
"""vLLM's older constraint fields (one grammar each)."""

STRUCTURED_FIELDS = frozenset(("response_format", "structured_outputs", "guided_decoding_backend",
                               "guided_whitespace_pattern") + GUIDED_FIELDS)
"""Every body field this module reads."""

_KINDS = ("json", "regex", "choice", "grammar", "json_object", "structural_tag")
_BACKEND_SWITCHES = {  # structured_outputs keys that tune vLLM's backends: accepted at their neutral value only
    "disable_fallback": (None, False), "disable_any_whitespace": (None, False, True),
    "disable_additional_properties": (None, False), "whitespace_pattern": (None,), "backend": (None, "auto", "xgrammar"),
}
MAX_CHOICES = 1024
"""Most strings in one ``choice``."""


def parse_structured(body: dict[str, Any]) -> StructuredOutput | None:
    """The grammar the body asks for (None: free text).

    Raises:
        InvalidRequestError: two constraint fields set, an unknown ``structured_outputs`` key or kind, a value of
            the wrong type, a backend switch Anna does not implement, or a schema / pattern / grammar over the
            bounds of :mod:`anna_core.server.limits`.
    """
    backend = body.get("guided_decoding_backend")
    if backend not in (None, "auto", "xgrammar"):
        raise field_error(f"'guided_decoding_backend' = {backend!r} is not supported (Anna runs xgrammar)",
                          "guided_decoding_backend")
    if body.get("guided_whitespace_pattern") is not None:
        raise field_error("'guided_whitespace_pattern' is not supported by this server", "guided_whitespace_pattern")
    sources = [name for name in ("response_format", "structured_outputs", *GUIDED_FIELDS)
               if body.get(name) is not None and not (name == "response_format" and _is_text(body[name]))]
    if len(sources) > 1:
        raise field_error(f"set one output constraint, not {' and '.join(repr(s) for s in sources)}", sources[1])
    if not sources or sources[0] == "response_format":
        return parse_response_format(body)
    name = sources[0]
    if name == "structured_outputs":
        return _structured_outputs(body[name])
    return _grammar(name[len("guided_"):], body[name], name)


def _is_text(value: Any) -> bool:
    return isinstance(value, dict) and value.get("type") == "text"


def _structured_outputs(value: Any) -> StructuredOutput:
    if not isinstance(value, dict):
        raise field_error("'structured_outputs' must be an object", "structured_outputs")
    unknown = sorted(set(value) - set(_KINDS) - set(_BACKEND_SWITCHES))
    if unknown:
        raise field_error(f"'structured_outputs' has unknown keys {unknown}; it takes one of {list(_KINDS)}",
                          "structured_outputs")
    for key, neutral in _BACKEND_SWITCHES.items():
        if value.get(key) not in neutral:
            raise field_error(f"'structured_outputs.{key}' = {value[key]!r} is not supported by this server",
                              "structured_outputs")
    kinds = [k for k in _KINDS if value.get(k) is not None]
    if len(kinds) != 1:
        raise field_error(f"'structured_outputs' must set exactly one of {list(_KINDS)}, got {kinds or 'none'}",
                          "structured_outputs")
    kind = kinds[0]
    param = f"structured_outputs.{kind}"
    if kind == "json_object":
        if value[kind] is not True:
            raise field_error(f"'{param}' must be true", param)
        return StructuredOutput("json_object", param="structured_outputs")
    if kind == "structural_tag":
        tag = _json_text(_text(value[kind], param), param)
        if not isinstance(tag, dict):
            raise field_error(f"'{param}' must be a JSON object", param)
        check_schema(tag, param, f"the {param}")  # the schemas inside it: depth, size, patterns
        if "structures" in tag:
            _check_legacy_tag(tag, param)
        return StructuredOutput("structural_tag", json.dumps(tag), param="structured_outputs")
    return _grammar(kind, value[kind], param)


def _check_legacy_tag(tag: dict[str, Any], param: str) -> None:
    """vLLM's older structural tag: ``structures`` (``{"begin", "schema", "end"}`` each) and ``triggers``."""
    structures, triggers = tag.get("structures"), tag.get("triggers")
    ok = (isinstance(structures, list) and structures and isinstance(triggers, list) and triggers
          and all(isinstance(t, str) and t for t in triggers)
          and all(isinstance(s, dict) and isinstance(s.get("begin"), str) and isinstance(s.get("end"), str)
                  and isinstance(s.get("schema"), dict) for s in structures))
    if not ok:
        raise field_error(f"'{param}' with 'structures' needs a non-empty list of {{begin, schema, end}} objects and "
                          "a non-empty list of 'triggers' strings", param)


def _json_text(text: str, param: str) -> Any:
    """JSON text inside a field, decoded; its strings valid Unicode."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise field_error(f"'{param}' is nested too deeply", param) from None
    except ValueError:
        raise field_error(f"'{param}' is not valid JSON", param) from None
    try:
        check_text(value)
    except InvalidRequestError:
        raise field_error(f"'{param}' holds a string that is not valid Unicode (a lone surrogate escape)",
                          param) from None
    return value


def _text(value: Any, param: str) -> str:
    if not isinstance(value, str) or not value:
        raise field_error(f"'{param}' must be a non-empty string", param)
    if len(value.encode("utf-8")) > MAX_SCHEMA_BYTES:
        raise field_error(f"'{param}' is over {MAX_SCHEMA_BYTES} bytes; this server accepts at most that", param)
    return value


def _grammar(kind: str, value: Any, param: str) -> StructuredOutput:
    """``json`` / ``regex`` / ``choice`` / ``grammar`` of ``param`` as a grammar (``param``: the field, for errors
    and for the compile error's ``param``)."""
    field = param.split(".")[0]
    if kind == "json":
        schema = _json_text(value, param) if isinstance(value, str) else value
        if not isinstance(schema, dict):
            raise field_error(f"'{param}' must be a JSON schema object", param)
        check_schema(schema, param, f"the {param} schema")
        return StructuredOutput("json_schema", json.dumps(schema), param=field)
    if kind == "regex":
        pattern = _text(value, param)
        if pattern_expansion(pattern) > MAX_PATTERN_EXPANSION:
            raise field_error(f"'{param}' unrolls to more than {MAX_PATTERN_EXPANSION} characters; this server "
                              f"accepts at most that", param)
        return StructuredOutput("regex", pattern, param=field)
    if kind == "choice":
        if (not isinstance(value, list) or not value or len(value) > MAX_CHOICES
                or not all(isinstance(c, str) and c for c in value)):
            raise field_error(f"'{param}' must be an array of 1 to {MAX_CHOICES} non-empty strings", param)
        rule = " | ".join(json.dumps(c, ensure_ascii=False) for c in dict.fromkeys(value))
        return StructuredOutput("grammar", _text(f"root ::= {rule}", param), param=field)
    return StructuredOutput("grammar", _text(value, param), param=field)
