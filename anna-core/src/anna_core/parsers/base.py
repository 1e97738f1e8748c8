"""What output parsers produce, the two parser interfaces, and a tag scanner for streamed text.

A *reasoning parser* splits generated text into reasoning and answer; a *tool-call parser* turns
the answer's function-call markup into OpenAI ``tool_calls``. Both are fed text deltas as the
engine streams them (``feed``) and flushed once at the end (``finish``); a non-streamed response
feeds the whole text once, so both paths give the same result by construction. Parsers are
created per response choice (they hold state) by factories registered through the
``register_output_parsers`` hook (:mod:`anna_core.parsers.loading`).
"""

from __future__ import annotations

import uuid
from typing import Any, Protocol

import attrs

from anna_core.engine.sampling_params import StructuredOutput


@attrs.define
class ToolCallDelta:
    """A piece of one tool call.

    The first piece of call ``index`` carries ``id`` and ``name`` (and ``arguments == ""``); later
    pieces carry only ``arguments`` fragments, which concatenate to the call's JSON arguments.
    """

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


@attrs.define
class ParsedDelta:
    """Parsed output added by one ``feed`` / ``finish`` call."""

    reasoning: str = ""
    content: str = ""
    tool_calls: list[ToolCallDelta] = attrs.field(factory=list)

    def __bool__(self) -> bool:
        return bool(self.reasoning or self.content or self.tool_calls)

    def extend(self, other: ParsedDelta) -> None:
        self.reasoning += other.reasoning
        self.content += other.content
        self.tool_calls.extend(other.tool_calls)


class ReasoningParser(Protocol):
    """Splits text into ``(kind, text)`` segments, ``kind`` ``"reasoning"`` or ``"content"``.

    ``interrupt_tags``: markup that ends an unterminated reasoning block and belongs to the
    answer (a tool-call start tag). ``end_token_id``: the token that closes reasoning (grammars
    for structured output start after it), or None.
    """

    end_token_id: int | None

    def start(self, prompt_token_ids: list[int], interrupt_tags: tuple[str, ...] = ()) -> None: ...

    @property
    def in_reasoning(self) -> bool: ...

    def feed(self, text: str) -> list[tuple[str, str]]: ...

    def finish(self) -> list[tuple[str, str]]: ...


class ToolCallParser(Protocol):
    """Turns answer text into content plus :class:`ToolCallDelta` pieces.

    ``start_tag``: the markup that opens a call (a reasoning parser ends reasoning there), or
    ``""`` for a format without one. ``grammar`` returns the constrained-decoding spec that forces
    ``tool_choice`` ``required`` (``function`` None: one call of any tool, several when
    ``parallel``) or the named ``function`` (one call): a
    :class:`~anna_core.engine.sampling_params.StructuredOutput`, or an xgrammar EBNF text (taken as
    ``StructuredOutput("grammar", text)``); it raises ``ValueError`` for tools it cannot force.
    """

    start_tag: str

    def feed(self, text: str) -> tuple[str, list[ToolCallDelta]]: ...

    def finish(self) -> tuple[str, list[ToolCallDelta]]: ...

    @property
    def num_calls(self) -> int: ...

    def grammar(self, tools: list[dict[str, Any]], function: str | None, parallel: bool,
                reasoning_open: bool) -> StructuredOutput | str: ...


def new_call_id() -> str:
    """A fresh OpenAI-style tool-call id (``call_`` + 24 hex digits)."""
    return f"call_{uuid.uuid4().hex[:24]}"


def partial_tag_len(text: str, tags: tuple[str, ...] | list[str]) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of one of ``tags``
    (text that must be held back until the next delta shows whether a tag starts there)."""
    best = 0
    for tag in tags:
        for k in range(min(len(tag) - 1, len(text)), best, -1):
            if text.endswith(tag[:k]):
                best = k
                break
    return best


def find_first(text: str, tags: tuple[str, ...] | list[str]) -> tuple[int, str | None]:
    """``(index, tag)`` of the earliest occurrence of any tag in ``text`` (``(-1, None)`` if none)."""
    best, found = -1, None
    for tag in tags:
        i = text.find(tag)
        if i >= 0 and (best < 0 or i < best):
            best, found = i, tag
    return best, found


class CallSpacing:
    """The content around a tool-call parser's calls: whitespace between and after calls is markup
    (dropped), whitespace before a possible call waits in :attr:`held` until it is known whether a call
    follows (dropped then) or more content does (emitted then). One per parser instance.

    Attributes:
        held: trailing whitespace not emitted yet.
        text_after_call: content was emitted after the latest call.
    """

    def __init__(self) -> None:
        self.held = ""
        self.text_after_call = False

    def emit(self, content: list[str], text: str, num_calls: int, *, hold: bool = True) -> None:
        """Append ``text`` (after :attr:`held`) to ``content``: whitespace right after a call dropped, trailing
        whitespace held unless ``hold`` is False (text emitted verbatim, e.g. a malformed call)."""
        text = self.held + text
        if num_calls and not self.text_after_call:
            text = text.lstrip()  # whitespace between and after calls is markup
        kept = text.rstrip() if hold else text
        if kept:
            content.append(kept)
            self.text_after_call = num_calls > 0
        self.held = text[len(kept):]

    def call_started(self) -> str:
        """A call opens: the held whitespace is markup; returns it (for a call that turns out malformed)."""
        held, self.held = self.held, ""
        return held

    def call_ended(self) -> None:
        """A call was emitted: whitespace after it is markup again."""
        self.text_after_call = False

    def flush(self, rest: str, num_calls: int) -> str:
        """The content left at the end of the output: :attr:`held` plus ``rest``, whitespace after the last
        call dropped."""
        rest, self.held = self.held + rest, ""
        if num_calls:
            rest = rest.rstrip() if self.text_after_call else rest.strip()
        return rest
