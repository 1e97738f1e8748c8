"""Qwen3's JSON function calls -> OpenAI ``tool_calls``.

Qwen3 (the dense and MoE text models before Qwen3-Coder and Qwen3.5) writes each call as one JSON object between
tags, as its chat template shows the model::

    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}
    </tool_call>

A call is emitted once its closing tag arrives: a first delta with ``index``, ``id`` and the function name, then
one ``arguments`` delta with the arguments as JSON text (``json.dumps``; an ``arguments`` value that is itself a
JSON-encoded object is decoded first). A body that is not such an object — not JSON, no string ``name``, arguments
that are not an object — stays content, markup included, so nothing the model wrote is lost. Output cut inside a
call gives the call when its body is already a whole object, and content otherwise. Text before the first call is
content; whitespace around and between calls is dropped (:class:`~anna_core.parsers.base.CallSpacing`).
"""

from __future__ import annotations

import json
from typing import Any

from anna_core.engine.sampling_params import StructuredOutput
from anna_core.parsers.base import CallSpacing, ToolCallDelta, new_call_id, partial_tag_len
from anna_core.parsers.structural_tags import forced_tool_calls

START, END = "<tool_call>", "</tool_call>"


def parse_call(body: str) -> tuple[str, str] | None:
    """``(name, arguments JSON text)`` of one call's body, or None when it is not a call object.

    Args:
        body: the text between ``<tool_call>`` and ``</tool_call>``.
    """
    try:
        call = json.loads(body, parse_constant=_no_constant)
    except (ValueError, RecursionError):  # not JSON, NaN / Infinity (not JSON either), nested past the stack
        return None
    if not isinstance(call, dict) or not isinstance(call.get("name"), str) or not call["name"].strip():
        return None
    arguments = call.get("arguments", call.get("parameters", {}))
    if isinstance(arguments, str):  # arguments sent as a JSON-encoded object
        try:
            arguments = json.loads(arguments, parse_constant=_no_constant)
        except (ValueError, RecursionError):
            return None
    if not isinstance(arguments, dict):
        return None
    return call["name"].strip(), json.dumps(arguments, ensure_ascii=False)


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


class Qwen3JsonToolParser:
    """Streaming parser of Qwen3's JSON tool calls (one instance per response choice).

    Args:
        tokenizer: unused (the markup is matched on text); kept for the factory signature.
        tools: unused (JSON carries its own types); kept for the factory signature.
    """

    start_tag = START
    end_tag = END

    def __init__(self, tokenizer: Any = None, tools: list[dict[str, Any]] | None = None):
        self._buf = ""
        self._in_call = False
        self._held = ""  # whitespace held before the open call: content again if the call is malformed
        self._index = -1
        self._spacing = CallSpacing()

    @property
    def num_calls(self) -> int:
        return self._index + 1

    def feed(self, text: str) -> tuple[str, list[ToolCallDelta]]:
        self._buf += text
        content: list[str] = []
        calls: list[ToolCallDelta] = []
        while self._step(content, calls):
            pass
        return "".join(content), calls

    def finish(self) -> tuple[str, list[ToolCallDelta]]:
        """Flush: held text becomes content; a call cut off is emitted if its body is whole, else kept as content."""
        content: list[str] = []
        calls: list[ToolCallDelta] = []
        if self._in_call:
            self._close(self._buf, content, calls, closed=False)
            self._buf = ""
        rest = self._spacing.flush(self._buf, self.num_calls)
        self._buf, self._in_call = "", False
        return "".join(content) + rest, calls

    def _step(self, content: list[str], calls: list[ToolCallDelta]) -> bool:
        """Consume what the buffer decides; True when it changed state (call again)."""
        if not self._in_call:
            idx = self._buf.find(START)
            if idx < 0:
                body = self._buf[:len(self._buf) - partial_tag_len(self._buf, (START,))]
                self._buf = self._buf[len(body):]
                self._spacing.emit(content, body, self.num_calls)
                return False
            self._spacing.emit(content, self._buf[:idx], self.num_calls)
            self._held = self._spacing.call_started()
            self._buf = self._buf[idx + len(START):]
            self._in_call = True
            return True
        end = self._buf.find(END)
        if end < 0:
            return False
        self._close(self._buf[:end], content, calls, closed=True)
        self._buf = self._buf[end + len(END):]
        self._in_call = False
        return True

    def _close(self, body: str, content: list[str], calls: list[ToolCallDelta], *, closed: bool) -> None:
        """End the call whose body is ``body`` (``closed``: its ``</tool_call>`` arrived)."""
        parsed = parse_call(body)
        if parsed is None:  # not a call: the markup and body are content, verbatim
            text = self._held + START + body + (END if closed else "")
            self._spacing.emit(content, text, self.num_calls, hold=False)
            return
        name, arguments = parsed
        self._index += 1
        calls.append(ToolCallDelta(self._index, id=new_call_id(), name=name))
        calls.append(ToolCallDelta(self._index, arguments=arguments))
        self._spacing.call_ended()

    # -- constrained decoding ------------------------------------------------------------------

    def grammar(self, tools: list[dict[str, Any]], function: str | None, parallel: bool,
                reasoning_open: bool = False) -> StructuredOutput:
        """xgrammar's structural tag for Qwen3's JSON calls (``xgrammar.get_model_structural_tag``, model
        ``qwen_3``): one call of the named ``function``, or of any of ``tools`` (one or more when ``parallel``),
        each call's arguments under its function's JSON schema. ``reasoning_open`` is unused: the engine starts
        the grammar after ``</think>``.

        Raises:
            ValueError: ``function`` is not among ``tools``, or there are no tools.
        """
        return forced_tool_calls("qwen_3", tools, function, parallel)
