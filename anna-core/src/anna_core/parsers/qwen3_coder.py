"""Qwen3.5 / Qwen3-Coder XML function calls -> OpenAI ``tool_calls``.

The model writes each call as::

    <tool_call>
    <function=get_weather>
    <parameter=city>
    Paris
    </parameter>
    <parameter=days>
    3
    </parameter>
    </function>
    </tool_call>

Parameter values are raw text (one newline after the opening and before the closing tag is
markup). Each value is converted to the type the tool's JSON schema declares for that parameter:
``string`` keeps the text; ``integer`` / ``number`` parse as JSON numbers; ``boolean`` takes
``true`` / ``false``; ``object`` / ``array`` parse as JSON (falling back to a Python literal);
``null`` takes ``null``/``none``; an undeclared parameter is JSON when it parses, else text; a
string the schema pins (``enum`` / ``const``) loses the whitespace around it. A value that does
not convert stays a string.

Streaming follows OpenAI: a call's first delta carries ``index``, ``id``, ``type`` and the function
name as soon as ``<function=NAME>`` is complete; each complete parameter appends an
``arguments`` fragment (``{"city": "Paris"``, then ``, "days": 3``), and ``</function>`` appends
``}``; the fragments concatenate to ``json.dumps`` of the arguments. Output cut inside a call
closes it with the parameters completed so far. Text before the first call is content;
whitespace around and between calls is dropped.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

from anna_core.engine.sampling_params import StructuredOutput
from anna_core.parsers.base import CallSpacing, ToolCallDelta, new_call_id, partial_tag_len
from anna_core.parsers.structural_tags import forced_tool_calls

START, END = "<tool_call>", "</tool_call>"
FUNC_END = "</function>"
PARAM_END = "</parameter>"
_FUNC = re.compile(r"\s*<function=([^>\n]+)>")
_PARAM = re.compile(r"\s*<parameter=([^>\n]+)>")


def _types(schema: Any) -> list[str]:
    if not isinstance(schema, dict):
        return []
    t = schema.get("type")
    if isinstance(t, str):
        return [t]
    if isinstance(t, list):
        return [x for x in t if isinstance(x, str)]
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list):
            return [x for sub in schema[key] for x in _types(sub)]
    if "enum" in schema:
        return ["string"] if all(isinstance(v, str) for v in schema["enum"]) else []
    return []


def _pinned_strings(schema: Any) -> list[str]:
    """The strings of a schema's ``enum`` / ``const`` (empty when it pins none)."""
    if not isinstance(schema, dict):
        return []
    values = list(schema["enum"]) if isinstance(schema.get("enum"), list) else []
    if "const" in schema:
        values.append(schema["const"])
    return [v for v in values if isinstance(v, str)]


def convert_value(raw: str, schema: Any) -> Any:
    """``raw`` parameter text as the type ``schema`` declares (see the module doc); a value JSON cannot
    hold (``1e400``, ``NaN``: Python reads them as non-finite floats) stays the string ``raw``."""
    value = _convert(raw, schema)
    try:
        json.dumps(value, allow_nan=False)
    except ValueError:
        return raw
    return value


def _convert(raw: str, schema: Any) -> Any:
    allowed = _pinned_strings(schema)
    if allowed and raw not in allowed and raw.strip() in allowed:
        return raw.strip()  # the grammar lets whitespace surround a pinned value
    types = _types(schema)
    if not types:
        try:
            return json.loads(raw)
        except ValueError:
            return raw
    text = raw.strip()
    for t in types:
        if t == "string":
            return raw
        if t in ("integer", "number"):
            try:
                value = json.loads(text)
            except ValueError:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            if t == "integer" and isinstance(value, float):
                if not value.is_integer():
                    continue
                value = int(value)
            return value
        if t == "boolean" and text.lower() in ("true", "false"):
            return text.lower() == "true"
        if t == "null" and text.lower() in ("null", "none"):
            return None
        if t in ("object", "array"):
            want = dict if t == "object" else list
            for parse in (json.loads, ast.literal_eval):
                try:
                    value = parse(text)
                except (ValueError, SyntaxError):
                    continue
                if isinstance(value, want):
                    return value
    return raw


def _fragment(first: bool, key: str, value: Any) -> str:
    return ("{" if first else ", ") + json.dumps(key, ensure_ascii=False) + ": " + json.dumps(value, ensure_ascii=False)


class Qwen3CoderToolParser:
    """Streaming parser of Qwen3.5's XML tool calls (one instance per response choice).

    Args:
        tokenizer: unused (the markup is matched on text); kept for the factory signature.
        tools: the request's OpenAI ``tools`` (their JSON schemas type the parameters).
    """

    start_tag = START
    end_tag = END

    def __init__(self, tokenizer: Any = None, tools: list[dict[str, Any]] | None = None):
        self.schemas: dict[str, dict[str, Any]] = {}
        for tool in tools or []:
            fn = tool.get("function", {}) if isinstance(tool, dict) else {}
            if isinstance(fn.get("name"), str):
                params = fn.get("parameters") or {}
                self.schemas[fn["name"]] = params.get("properties", {}) if isinstance(params, dict) else {}
        self._buf = ""
        self._state = "text"  # text | head | params | tail
        self._index = -1
        self._function = ""
        self._nparams = 0
        self._spacing = CallSpacing()

    @property
    def num_calls(self) -> int:
        return self._index + 1

    def feed(self, text: str) -> tuple[str, list[ToolCallDelta]]:
        self._buf += text
        content: list[str] = []
        calls: list[ToolCallDelta] = []
        while True:
            before = (self._state, len(self._buf))
            getattr(self, f"_step_{self._state}")(content, calls)
            if (self._state, len(self._buf)) == before:
                break
        return "".join(content), calls

    def finish(self) -> tuple[str, list[ToolCallDelta]]:
        """Flush: held text becomes content; an unfinished call is closed."""
        content, calls = "", []
        if self._state == "text":
            content = self._spacing.flush(self._buf, self.num_calls)
        elif self._state == "head":
            self._index -= 1  # the call never named its function: drop it
        elif self._state == "params":
            calls.append(ToolCallDelta(self._index, arguments="}" if self._nparams else "{}"))
        self._buf, self._spacing.held, self._state = "", "", "text"
        return content, calls

    # -- states --------------------------------------------------------------------------------

    def _step_text(self, content: list[str], calls: list[ToolCallDelta]) -> None:
        idx = self._buf.find(START)
        if idx < 0:
            body = self._buf[:len(self._buf) - partial_tag_len(self._buf, (START,))]
            self._buf = self._buf[len(body):]
        else:
            body = self._buf[:idx]
            self._buf = self._buf[idx + len(START):]
        self._spacing.emit(content, body, self.num_calls)
        if idx >= 0:
            self._spacing.call_started()
            self._state = "head"

    def _step_head(self, content: list[str], calls: list[ToolCallDelta]) -> None:
        m = _FUNC.match(self._buf)
        if m is None:
            if END in self._buf:  # a call without a function: skip it
                self._buf = self._buf[self._buf.index(END) + len(END):]
                self._state = "text"
            return
        self._index += 1
        self._function = m.group(1).strip()
        self._nparams = 0
        calls.append(ToolCallDelta(self._index, id=new_call_id(), name=self._function))
        self._buf = self._buf[m.end():]
        self._state = "params"

    def _step_params(self, content: list[str], calls: list[ToolCallDelta]) -> None:
        m = _PARAM.match(self._buf)
        if m is not None:
            end = self._buf.find(PARAM_END, m.end())
            if end < 0:
                return
            raw = self._buf[m.end():end]
            raw = raw.removeprefix("\n")
            raw = raw.removesuffix("\n")
            name = m.group(1).strip()
            value = convert_value(raw, self.schemas.get(self._function, {}).get(name))
            calls.append(ToolCallDelta(self._index, arguments=_fragment(self._nparams == 0, name, value)))
            self._nparams += 1
            self._buf = self._buf[end + len(PARAM_END):]
            return
        stripped = self._buf.lstrip()
        if stripped.startswith((FUNC_END, END)):
            calls.append(ToolCallDelta(self._index, arguments="}" if self._nparams else "{}"))
            tag = FUNC_END if stripped.startswith(FUNC_END) else ""
            self._buf = stripped[len(tag):]
            self._state = "tail"
            return
        lt = stripped.find("<")
        if lt > 0:  # stray text inside a function: skip it
            self._buf = stripped[lt:]
        elif lt < 0:
            self._buf = ""

    def _step_tail(self, content: list[str], calls: list[ToolCallDelta]) -> None:
        stripped = self._buf.lstrip()
        if stripped.startswith(END):
            self._buf = stripped[len(END):]
            self._state = "text"
            self._spacing.call_ended()
        elif stripped and not END.startswith(stripped[:len(END)]):
            self._buf = stripped
            self._state = "text"  # tolerate a missing </tool_call>
            self._spacing.call_ended()

    # -- constrained decoding ------------------------------------------------------------------

    def grammar(self, tools: list[dict[str, Any]], function: str | None, parallel: bool,
                reasoning_open: bool = False) -> StructuredOutput:
        """xgrammar's structural tag for Qwen3.5's XML calls (``xgrammar.get_model_structural_tag``,
        model ``qwen_3_5``): one call of the named ``function``, or of any of ``tools`` (one or
        more separated by newlines when ``parallel``, and nothing else). Each call's parameters
        follow the function's JSON schema (names, types, required ones, in the schema's order).
        ``reasoning_open`` is unused: the engine starts the grammar after ``</think>``.

        Raises:
            ValueError: ``function`` is not among ``tools``, or there are no tools.
        """
        return forced_tool_calls("qwen_3_5", tools, function, parallel)
