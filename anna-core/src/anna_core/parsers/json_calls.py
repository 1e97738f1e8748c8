"""Forced tool calls for a model without a tool-call format: JSON generated under the tools' schemas.

When ``tool_choice`` is ``required`` or names a function and the server has no tool-call parser
(``--tool-call-parser``), the call is generated as plain JSON by constrained decoding, as vLLM does:

- a named function: the output *is* the call's arguments, generated under the function's
  ``parameters`` schema (:func:`calls_schema` returns that schema);
- ``required``: the output is a JSON array of ``{"name": NAME, "parameters": ARGUMENTS}`` objects,
  each matching one tool (``anyOf`` over the tools, the name fixed by ``const``); at least one
  item, at most one when ``parallel_tool_calls`` is false.

:class:`JsonToolCallParser` turns either output into OpenAI tool calls, streaming as OpenAI does:
a call's first delta carries ``index``, ``id``, ``type`` and the function name (for ``required``,
as soon as the ``name`` string is complete), later deltas the arguments' JSON text as it arrives;
the fragments concatenate to the generated arguments text. Output cut before a call's arguments
end leaves them incomplete (the finish reason is then ``length``). In an array, text outside the
array that is not whitespace is content (the grammar leaves none).
"""

from __future__ import annotations

import json
from typing import Any

from anna_core.engine.sampling_params import StructuredOutput
from anna_core.parsers.base import ToolCallDelta, new_call_id

_EMPTY_PARAMETERS = {"type": "object", "properties": {}}


def _functions(tools: list[dict[str, Any]], function: str | None) -> list[dict[str, Any]]:
    fns = [t["function"] for t in tools]
    if function is not None:
        fns = [f for f in fns if f["name"] == function]
        if not fns:
            raise ValueError(f"tool_choice names function {function!r}, which is not among the tools")
    if not fns:
        raise ValueError("tool_choice needs at least one tool")
    return fns


def calls_schema(tools: list[dict[str, Any]], function: str | None, parallel: bool) -> dict[str, Any]:
    """The JSON schema the output follows (see the module doc).

    Args:
        tools: validated OpenAI function tools (``{"type": "function", "function": {...}}``).
        function: the named function, or None for ``required``.
        parallel: ``required`` may return several calls.

    Raises:
        ValueError: ``function`` is not among ``tools``, or there are no tools.
    """
    fns = _functions(tools, function)
    if function is not None:
        return fns[0].get("parameters") or _EMPTY_PARAMETERS
    defs: dict[str, Any] = {}
    items = [{"type": "object",
              "properties": {"name": {"const": f["name"]},
                             "parameters": _hoist_definitions(f.get("parameters") or _EMPTY_PARAMETERS, f"t{i}_", defs)},
              "required": ["name", "parameters"], "additionalProperties": False} for i, f in enumerate(fns)]
    schema: dict[str, Any] = {"type": "array", "items": {"anyOf": items}, "minItems": 1}
    if defs:
        schema["$defs"] = defs
    if not parallel:
        schema["maxItems"] = 1
    return schema


_DEF_KEYS = ("$defs", "definitions")


def _hoist_definitions(parameters: dict[str, Any], prefix: str, defs: dict[str, Any]) -> dict[str, Any]:
    """``parameters`` for nesting inside the combined schema: its ``$defs`` / ``definitions`` move to the
    root's ``$defs`` under ``prefix`` (``defs`` collects them), and its local ``$ref``s follow them, since
    ``#/...`` pointers resolve from the root of the document they are in (a pydantic model's schema
    refers to its ``#/$defs/...``)."""
    local = {}
    for key in _DEF_KEYS:
        if isinstance(parameters.get(key), dict):
            local.update({name: (key, value) for name, value in parameters[key].items()})
    if not local:
        return parameters

    def rewrite(node: Any) -> Any:
        if isinstance(node, dict):
            out = {}
            for k, v in node.items():
                if k in _DEF_KEYS and node is parameters:
                    continue
                if k == "$ref" and isinstance(v, str):
                    for key in _DEF_KEYS:
                        head = f"#/{key}/"
                        if v.startswith(head) and v[len(head):].split("/")[0] in local:
                            v = f"#/$defs/{prefix}{v[len(head):]}"
                            break
                out[k] = rewrite(v)
            return out
        if isinstance(node, list):
            return [rewrite(v) for v in node]
        return node

    for name, (_, value) in local.items():
        defs[f"{prefix}{name}"] = rewrite(value)
    return rewrite(parameters)


class JsonToolCallParser:
    """Streaming parser of the JSON output of a forced tool choice (one instance per choice).

    Args:
        function: the named function (the output is its arguments), or None for ``required``
            (the output is an array of ``{"name", "parameters"}`` objects).
    """

    start_tag = ""  # a call has no opening markup
    end_tag = None

    def __init__(self, function: str | None = None):
        self.function = function
        self._index = -1
        # required: a scanner of the array; depth counts the brackets open outside strings
        self._depth = 0
        self._in_string = False
        self._escape = False
        self._item: str | None = None  # raw text of the array item being read (depth >= 2)
        self._key_start = -1  # where the key being read starts in the item (-1: none)
        self._key: str | None = None  # the last complete key
        self._expect_value = False  # a ':' was read: the next non-space character starts a value
        self._value: tuple[str | None, int, str] | None = None  # (key, start, first char) being read
        self._name: str | None = None
        self._args: tuple[int, int | None] | None = None  # the parameters' span in the item
        self._sent = 0  # characters of the parameters already sent

    @property
    def num_calls(self) -> int:
        return self._index + 1

    def grammar(self, tools: list[dict[str, Any]], function: str | None, parallel: bool,
                reasoning_open: bool = False) -> StructuredOutput:
        """The JSON schema of :func:`calls_schema` as a constrained-decoding spec.

        Raises:
            ValueError: see :func:`calls_schema`.
        """
        return StructuredOutput("json_schema", json.dumps(calls_schema(tools, function, parallel)))

    def feed(self, text: str) -> tuple[str, list[ToolCallDelta]]:
        """``(content, call pieces)`` for the next piece of output text (see the module doc)."""
        if self.function is not None:
            return "", self._feed_arguments(text)
        content: list[str] = []
        calls: list[ToolCallDelta] = []
        for c in text:
            self._step(c, content, calls)
        self._send_arguments(calls)
        return "".join(content), calls

    def finish(self) -> tuple[str, list[ToolCallDelta]]:
        """Flush: a named call that produced no text at all still gets its header."""
        if self.function is not None and self._index < 0:
            self._index = 0
            return "", [ToolCallDelta(0, id=new_call_id(), name=self.function)]
        return "", []

    # -- a named function: the whole output is the arguments ------------------------------------

    def _feed_arguments(self, text: str) -> list[ToolCallDelta]:
        calls = []
        if self._index < 0:
            text = text.lstrip()
            if not text:
                return []
            self._index = 0
            calls.append(ToolCallDelta(0, id=new_call_id(), name=self.function))
        if text:
            calls.append(ToolCallDelta(0, arguments=text))
        return calls

    # -- required: an array of {"name", "parameters"} objects --------------------------------------

    def _step(self, c: str, content: list[str], calls: list[ToolCallDelta]) -> None:
        if self._item is None:
            if c == "{" and self._depth == 1 and not self._in_string:
                self._item, self._depth = c, 2
            elif c in "[]" and not self._in_string:
                self._depth += 1 if c == "[" else -1
            elif self._depth == 0 and not c.isspace():
                content.append(c)
            return
        i = len(self._item)
        self._item += c
        if self._in_string:
            if self._escape:
                self._escape = False
            elif c == "\\":
                self._escape = True
            elif c == '"':
                self._in_string = False
                if self._depth == 2:
                    self._closed_at_item_level(i + 1, calls)
            return
        if self._depth == 2 and self._value is not None and self._value[2] not in '{["' and (c in ",}" or c.isspace()):
            self._end_value(i, calls)  # a scalar value ends before this character
        if self._depth == 2 and self._expect_value and not c.isspace():
            self._expect_value = False
            self._value = (self._key, i, c)
        if c == '"':
            self._in_string = True
            if self._depth == 2 and self._value is None:
                self._key_start = i
        elif c in "{[":
            self._depth += 1
        elif c in "}]":
            self._depth -= 1
            if self._depth == 2:
                self._closed_at_item_level(i + 1, calls)
            elif self._depth == 1:
                self._end_item(calls)
        elif c == ":" and self._depth == 2:
            self._expect_value = True

    def _closed_at_item_level(self, end: int, calls: list[ToolCallDelta]) -> None:
        """A string or bracket closed at the item's level: it ended a key or a value."""
        if self._value is not None:
            self._end_value(end, calls)
        elif self._key_start >= 0:
            self._key = _loads(self._item[self._key_start:end])
            self._key_start = -1

    def _end_value(self, end: int, calls: list[ToolCallDelta]) -> None:
        key, start, _ = self._value
        self._value = None
        if key == "parameters":
            self._args = (start, end)
        elif key == "name" and self._name is None:
            name = _loads(self._item[start:end])
            if isinstance(name, str):
                self._name, self._index = name, self._index + 1
                calls.append(ToolCallDelta(self._index, id=new_call_id(), name=name))
        self._send_arguments(calls)

    def _send_arguments(self, calls: list[ToolCallDelta]) -> None:
        """Send the parameters' text read so far (once the call is named)."""
        if self._name is None or self._item is None:
            return
        if self._args is not None:
            start, end = self._args
        elif self._value is not None and self._value[0] == "parameters":
            start, end = self._value[1], len(self._item)
        else:
            return
        piece = self._item[start + self._sent:end]
        if piece:
            self._sent += len(piece)
            calls.append(ToolCallDelta(self._index, arguments=piece))

    def _end_item(self, calls: list[ToolCallDelta]) -> None:
        self._send_arguments(calls)
        if self._name is not None and not self._sent:
            calls.append(ToolCallDelta(self._index, arguments="{}"))
        self._item, self._key, self._value, self._name, self._args, self._sent = None, None, None, None, None, 0
        self._key_start, self._expect_value = -1, False


def _loads(raw: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return None
