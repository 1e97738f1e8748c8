"""Gemma 4 function calls -> OpenAI ``tool_calls``.

The model writes each call as::

    <|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:3}<tool_call|>

The arguments are an object whose keys are bare identifiers and whose strings are delimited by
``<|"|>`` ... ``<|"|>`` (raw text: it may hold braces, quotes, commas, colons, newlines); other
values are JSON literals (numbers, ``true`` / ``false`` / ``null``) or nested objects and arrays in
the same syntax. For robustness a key or string may also be a JSON ``"..."`` string, a trailing
comma is allowed, and ``True`` / ``False`` / ``None`` are read as their JSON twins.

Streaming: a call is parsed once it is complete (its ``<tool_call|>`` arrives, outside strings);
then its first delta carries ``index``, ``id`` and the function name, and a second one the whole
``arguments`` (``json.dumps`` of the object). A call that does not parse -- malformed, or cut off
by the end of the output -- is left in the content as it was written, and an output that ends
right after a complete call body without ``<tool_call|>`` (a stop on that token) still counts it.
Text before the first call is content; whitespace around and between calls is dropped, text after
a call is content. A thinking channel (``<|channel>`` ... ``<channel|>``) left in the text (no
reasoning parser, or ``--reasoning-format none``) is content, calls inside it included.

``tool_choice`` ``required`` / a named function (constrained decoding) is not supported yet:
:meth:`Gemma4ToolParser.grammar` raises ``ValueError``.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from anna_core.engine.sampling_params import StructuredOutput
from anna_core.parsers.base import CallSpacing, ToolCallDelta, find_first, new_call_id, partial_tag_len

START, END = "<|tool_call>", "<tool_call|>"
STR = '<|"|>'
CH_OPEN, CH_CLOSE = "<|channel>", "<channel|>"
CALL = "call:"

_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_KEY = re.compile(r"[^\s:{}\[\],<\"]+")
_NAME = re.compile(r"[^\s{}<>]+")
_LITERALS = {"true": True, "false": False, "null": None, "True": True, "False": False, "None": None}
_JSON = json.JSONDecoder()


class _Malformed(ValueError):
    pass


def _ws(s: str, i: int) -> int:
    while i < len(s) and s[i].isspace():
        i += 1
    return i


def _string(s: str, i: int) -> tuple[str, int] | None:
    """A ``<|"|>`` or JSON string at ``i`` (None when none starts there)."""
    if s.startswith(STR, i):
        end = s.find(STR, i + len(STR))
        if end < 0:
            raise _Malformed("unterminated string")
        return s[i + len(STR):end], end + len(STR)
    if s.startswith('"', i):
        try:
            return _JSON.raw_decode(s, i)
        except ValueError as exc:
            raise _Malformed("bad JSON string") from exc
    return None


def parse_value(s: str, i: int = 0) -> tuple[Any, int]:
    """The value written at ``s[i:]`` in Gemma's call syntax and the index after it.

    Raises:
        ValueError: no well-formed value starts there.
    """
    i = _ws(s, i)
    if i >= len(s):
        raise _Malformed("value expected")
    found = _string(s, i)
    if found is not None:
        return found
    c = s[i]
    if c == "{":
        return _object(s, i + 1)
    if c == "[":
        return _array(s, i + 1)
    m = _NUMBER.match(s, i)
    if m and not (m.end() < len(s) and (s[m.end()].isalnum() or s[m.end()] in "_.")):
        number = json.loads(m.group())
        if number in (math.inf, -math.inf):  # 1e400: JSON arguments cannot hold it
            raise _Malformed(f"number out of range: {m.group()[:20]}")
        return number, m.end()
    m = _WORD.match(s, i)
    if m and m.group() in _LITERALS:
        return _LITERALS[m.group()], m.end()
    raise _Malformed(f"unexpected {s[i:i + 10]!r}")


def _object(s: str, i: int) -> tuple[dict[str, Any], int]:
    out: dict[str, Any] = {}
    while True:
        i = _ws(s, i)
        if s.startswith("}", i):
            return out, i + 1
        found = _string(s, i)
        if found is None:
            m = _KEY.match(s, i)
            if m is None:
                raise _Malformed("key expected")
            found = m.group(), m.end()
        key, i = found
        i = _ws(s, i)
        if not s.startswith(":", i):
            raise _Malformed("':' expected")
        out[key], i = parse_value(s, i + 1)
        i = _ws(s, i)
        if s.startswith(",", i):
            i += 1
        elif not s.startswith("}", i):
            raise _Malformed("',' or '}' expected")


def _array(s: str, i: int) -> tuple[list[Any], int]:
    out: list[Any] = []
    while True:
        i = _ws(s, i)
        if s.startswith("]", i):
            return out, i + 1
        value, i = parse_value(s, i)
        out.append(value)
        i = _ws(s, i)
        if s.startswith(",", i):
            i += 1
        elif not s.startswith("]", i):
            raise _Malformed("',' or ']' expected")


def parse_call(body: str) -> tuple[str, dict[str, Any]] | None:
    """``(name, arguments)`` of a call's text between ``<|tool_call>`` and ``<tool_call|>``
    (None when it is not one well-formed call)."""
    i = _ws(body, 0)
    if not body.startswith(CALL, i):
        return None
    m = _NAME.match(body, _ws(body, i + len(CALL)))
    if m is None:
        return None
    i = _ws(body, m.end())
    if not body.startswith("{", i):
        return None
    try:
        args, i = _object(body, i + 1)
    except (ValueError, RecursionError):
        return None
    if body[i:].strip():
        return None
    return m.group(), args


class Gemma4ToolParser:
    """Streaming parser of Gemma 4's tool calls (one instance per response choice).

    Args:
        tokenizer: unused (the markup is matched on text); kept for the factory signature.
        tools: unused (the call syntax types its values).
    """

    start_tag = START
    end_tag = END

    def __init__(self, tokenizer: Any = None, tools: list[dict[str, Any]] | None = None):
        self._buf = ""
        self._state = "text"  # text | call | channel
        self._index = -1
        self._spacing = CallSpacing()
        self._call_space = ""  # the whitespace dropped before the open call (back if it is malformed)
        self._scan = 0  # how far the open call's text has been scanned for its end tag
        self._in_str = False  # the scan is inside a <|"|> string

    @property
    def num_calls(self) -> int:
        return self._index + 1

    def feed(self, text: str) -> tuple[str, list[ToolCallDelta]]:
        self._buf += text
        content: list[str] = []
        calls: list[ToolCallDelta] = []
        while getattr(self, f"_step_{self._state}")(content, calls):
            pass
        return "".join(content), calls

    def finish(self) -> tuple[str, list[ToolCallDelta]]:
        """Flush: held text becomes content; a complete call body without its end tag is a call,
        any other unfinished call is content."""
        content: list[str] = []
        calls: list[ToolCallDelta] = []
        if self._state == "call":
            parsed = parse_call(self._buf)
            if parsed is not None:
                self._emit(parsed, calls)
            else:
                self._content(content, self._call_space + START + self._buf)
        elif self._state == "channel":
            content.append(self._buf)
        else:
            content.append(self._spacing.flush(self._buf, self.num_calls))
        self._buf, self._spacing.held, self._state = "", "", "text"
        return "".join(content), calls

    # -- helpers -------------------------------------------------------------------------------

    def _emit(self, parsed: tuple[str, dict[str, Any]], calls: list[ToolCallDelta]) -> None:
        self._index += 1
        calls.append(ToolCallDelta(self._index, id=new_call_id(), name=parsed[0]))
        calls.append(ToolCallDelta(self._index, arguments=json.dumps(parsed[1], ensure_ascii=False)))
        self._spacing.call_ended()

    def _content(self, content: list[str], text: str) -> None:
        """Emit ``text`` as content verbatim (a malformed call, a channel)."""
        self._spacing.emit(content, text, self.num_calls, hold=False)

    # -- states: each returns whether to step again --------------------------------------------

    def _step_text(self, content: list[str], calls: list[ToolCallDelta]) -> bool:
        idx, tag = find_first(self._buf, (START, CH_OPEN))
        if tag is None:
            body = self._buf[:len(self._buf) - partial_tag_len(self._buf, (START, CH_OPEN))]
        else:
            body = self._buf[:idx]
        self._buf = self._buf[len(body):]
        self._spacing.emit(content, body, self.num_calls)
        if tag == START:
            self._buf = self._buf[len(START):]
            self._call_space = self._spacing.call_started()
            self._state, self._scan, self._in_str = "call", 0, False
            return True
        if tag == CH_OPEN:  # a thinking channel is content, calls inside it too
            self._content(content, CH_OPEN)
            self._buf = self._buf[len(CH_OPEN):]
            self._state = "channel"
            return True
        return False

    def _step_channel(self, content: list[str], calls: list[ToolCallDelta]) -> bool:
        idx = self._buf.find(CH_CLOSE)
        if idx < 0:
            emit = self._buf[:len(self._buf) - partial_tag_len(self._buf, (CH_CLOSE,))]
            self._buf = self._buf[len(emit):]
            if emit:
                content.append(emit)
            return False
        content.append(self._buf[:idx + len(CH_CLOSE)])
        self._buf = self._buf[idx + len(CH_CLOSE):]
        self._state = "text"
        return True

    def _step_call(self, content: list[str], calls: list[ToolCallDelta]) -> bool:
        buf, i = self._buf, self._scan
        while i < len(buf):
            if buf.startswith(STR, i):
                self._in_str = not self._in_str
                i += len(STR)
            elif not self._in_str and buf.startswith(END, i):
                body, self._buf = buf[:i], buf[i + len(END):]
                parsed = parse_call(body)
                if parsed is not None:
                    self._emit(parsed, calls)
                else:  # malformed: the text stays content
                    self._content(content, self._call_space + START + body + END)
                self._state = "text"
                return True
            elif len(buf) - i < len(END) and (STR.startswith(buf[i:]) or END.startswith(buf[i:])):
                break  # maybe a tag: wait for the next delta
            else:
                i += 1
        self._scan = i
        return False

    # -- constrained decoding ------------------------------------------------------------------

    def grammar(self, tools: list[dict[str, Any]], function: str | None, parallel: bool,
                reasoning_open: bool = False) -> StructuredOutput:
        """Not supported yet for Gemma 4's call syntax.

        Raises:
            ValueError: always (the server answers 400 for ``tool_choice`` required / named).
        """
        raise ValueError("tool_choice 'required' or a named function is not supported yet with the gemma4 "
                         "tool-call parser; use 'auto'")
