"""Output parsers on scripted streams: feed a completion to a family's reasoning and tool-call parsers whole and
cut into pieces, chained the way the server chains them, and compare.

The server starts a fresh reasoning parser per choice on the prompt's ids, with the tool-call parser's start tag
as an interrupt (:func:`anna_core.server.prepare.new_reasoning_parser`), feeds each text delta to it and each
``content`` segment it returns to the tool-call parser (:class:`anna_core.server.choices.ChatChoice`); a
non-streamed response feeds the final text once. :func:`parse_stream` does the same on a list of chunks, and
:func:`check_sample` asserts that a :class:`ParserSample` parses whole to what it declares and to the same
reasoning, content and calls however it is cut: at every position, one character at a time, at seeded random
points, and, for a sample given as token ids, one token at a time through the engine's incremental detokenizer.

The failures are ``AssertionError`` s naming the sample and the pieces, so these helpers serve pytest tests
(:class:`~anna_core.testing.conformance.FamilyConformance` and the hypothesis tests of ``tests/soak``) and any
other test runner.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import attrs


def _ids_or_text(value: Any) -> str | tuple[int, ...]:
    return value if isinstance(value, str) else tuple(value)


def _check_calls(instance: Any, attribute: Any, value: tuple[dict[str, Any], ...]) -> None:
    for call in value:
        if not (isinstance(call, dict) and set(call) == {"name", "arguments"} and isinstance(call["name"], str)
                and isinstance(call["arguments"], dict)):
            raise ValueError(f"ParserSample.tool_calls: each call is {{'name': str, 'arguments': dict}}, got {call!r}")


def _check_output(instance: Any, attribute: Any, value: str | tuple[int, ...]) -> None:
    if not value:
        raise ValueError("ParserSample.output is empty: give the completion's text or its token ids")
    if not isinstance(value, str) and not all(isinstance(t, int) and t >= 0 for t in value):
        raise ValueError(f"ParserSample.output: a text or a sequence of token ids, got {value!r}")


@attrs.frozen
class ParserSample:
    """One completion as a model writes it, and what the family's parsers must make of it.

    Attributes:
        output: the generated text, or the generated token ids (decoded by the family's tokenizer as the engine
            decodes them, one token at a time, special tokens skipped as a request does by default).
        reasoning: the reasoning content expected (``""``: none).
        content: the answer content expected, without the tool calls' markup.
        tool_calls: the calls expected, in order, each ``{"name": str, "arguments": dict}`` (the arguments as
            parsed from the JSON the parser streams).
        prompt: the end of the prompt the output continues, as text (encoded with the family's tokenizer) or
            token ids: the reasoning parser decides from it whether the output starts inside a reasoning block
            (a chat template that pre-fills ``<think>`` or ``<|channel>``). Default: an empty prompt.
        tools: the request's tools (OpenAI ``{"type": "function", "function": {...}}`` records) given to the
            tool-call parser, whose parameter schemas may decide how an argument's text is typed.
        name: a label for failure messages (default: the sample's position).

    Raises:
        ValueError: an empty ``output``, ids that are not non-negative ints, a malformed expected call.
    """

    output: str | tuple[int, ...] = attrs.field(converter=_ids_or_text, validator=_check_output)
    reasoning: str = ""
    content: str = ""
    tool_calls: tuple[dict[str, Any], ...] = attrs.field(default=(), converter=tuple, validator=_check_calls)
    prompt: str | tuple[int, ...] = attrs.field(default=(), converter=_ids_or_text)
    tools: tuple[dict[str, Any], ...] = attrs.field(default=(), converter=tuple)
    name: str = ""


@attrs.frozen
class Parsed:
    """What the parsers made of one output: reasoning and content joined, tool calls joined from their deltas."""

    reasoning: str
    content: str
    tool_calls: tuple[dict[str, Any], ...]


def _not_json(constant: str) -> None:
    raise AssertionError(f"tool-call arguments hold {constant}, which JSON does not have")


def collect_calls(deltas: Iterable[Any]) -> list[dict[str, Any]]:
    """Join :class:`~anna_core.parsers.base.ToolCallDelta` pieces as an OpenAI client does, checking OpenAI's
    phases: a call's first piece carries its index (the next one), an ``id`` starting ``call_``, its name and
    empty arguments; later pieces carry only argument text for the latest call, which joins to a JSON object.

    Returns:
        ``[{"name": ..., "arguments": <the parsed JSON>}, ...]``.

    Raises:
        AssertionError: a piece out of phase, or arguments that are not JSON (``NaN`` and ``Infinity`` included).
    """
    out: list[dict[str, Any]] = []
    for d in deltas:
        if d.name is not None:
            if not (d.index == len(out) and d.id and d.id.startswith("call_") and d.arguments == ""):
                raise AssertionError(f"a call's first piece must carry index {len(out)}, an id 'call_...', its "
                                     f"name and no arguments, got {d!r}")
            out.append({"name": d.name, "arguments": ""})
        else:
            if not (d.id is None and out and d.index == len(out) - 1):
                raise AssertionError(f"an argument piece must carry only index {len(out) - 1} and text, got {d!r}")
            out[d.index]["arguments"] += d.arguments
    calls = []
    for c in out:
        try:
            arguments = json.loads(c["arguments"], parse_constant=_not_json)
        except json.JSONDecodeError as exc:
            raise AssertionError(f"the arguments of call {c['name']!r} are not JSON: {c['arguments']!r}") from exc
        calls.append({"name": c["name"], "arguments": arguments})
    return calls


def run_tool_parser(parser: Any, chunks: Iterable[str]) -> tuple[str, list[dict[str, Any]]]:
    """Feed ``chunks`` to a tool-call parser, then finish it: ``(content, calls)`` (calls as :func:`collect_calls`)."""
    content, deltas = "", []
    for chunk in chunks:
        text, calls = parser.feed(chunk)
        content, deltas = content + text, deltas + calls
    text, calls = parser.finish()
    return content + text, collect_calls(deltas + calls)


def run_reasoning_parser(parser: Any, chunks: Iterable[str]) -> tuple[str, str]:
    """Feed ``chunks`` to a started reasoning parser, then finish it: ``(reasoning, content)``.

    Raises:
        AssertionError: a segment of another kind than ``reasoning`` / ``content``, or an empty one.
    """
    segments = [s for chunk in chunks for s in parser.feed(chunk)] + parser.finish()
    bad = [s for s in segments if s[0] not in ("reasoning", "content") or not s[1]]
    if bad:
        raise AssertionError(f"a reasoning parser returns non-empty ('reasoning' | 'content', text) segments, got {bad}")
    return "".join(t for k, t in segments if k == "reasoning"), "".join(t for k, t in segments if k == "content")


def parse_stream(chunks: Iterable[str], *, reasoning: Any = None, tool: Any = None,
                 prompt_ids: Sequence[int] = ()) -> Parsed:
    """Parse one output fed as ``chunks`` through fresh parsers chained as the server chains them.

    Args:
        chunks: the output's text deltas, in order.
        reasoning: a new reasoning parser (not started: it is started here on ``prompt_ids``, with the tool-call
            parser's start tag as an interrupt), or None.
        tool: a new tool-call parser fed the reasoning parser's content segments (or every chunk without a
            reasoning parser), or None.
        prompt_ids: the prompt's token ids.
    """
    if reasoning is not None:
        start_tag = tool.start_tag if tool is not None else ""
        reasoning.start(list(prompt_ids), (start_tag,) if start_tag else ())
    thought, content, deltas = "", "", []

    def route(segments: list[tuple[str, str]]) -> None:
        nonlocal thought, content, deltas
        for kind, text in segments:
            if kind == "reasoning":
                thought += text
            elif tool is None:
                content += text
            else:
                text, calls = tool.feed(text)
                content, deltas = content + text, deltas + calls

    for chunk in chunks:
        route(reasoning.feed(chunk) if reasoning is not None else [("content", chunk)])
    if reasoning is not None:
        route(reasoning.finish())
    if tool is not None:
        text, calls = tool.finish()
        content, deltas = content + text, deltas + calls
    return Parsed(thought, content, tuple(collect_calls(deltas)))


def splits(text: str, *, random_splits: int = 64, seed: int = 0) -> Iterator[list[str]]:
    """``text`` cut into pieces: in two at every position, one character at a time, then ``random_splits`` times
    at seeded random points (a few to many)."""
    for i in range(1, len(text)):
        yield [text[:i], text[i:]]
    if len(text) > 2:
        yield list(text)
    rng = random.Random(seed)
    for _ in range(random_splits if len(text) > 2 else 0):
        points = sorted(rng.sample(range(1, len(text)), rng.randint(2, min(len(text) - 1, 24))))
        yield [text[a:b] for a, b in zip([0, *points], [*points, len(text)])]


def token_deltas(tokenizer: Any, prompt_ids: Sequence[int], output_ids: Sequence[int]) -> list[str]:
    """The text deltas the engine streams for ``output_ids``: one token at a time through
    :class:`~anna_core.engine.detokenizer.IncrementalDetokenizer` (special tokens skipped), then its flush."""
    from anna_core.engine.detokenizer import IncrementalDetokenizer

    detok = IncrementalDetokenizer(tokenizer, list(prompt_ids))
    deltas = [detok.push([t]) for t in output_ids] + [detok.flush()]
    return [d for d in deltas if d]


def check_sample(sample: ParserSample, *, reasoning: Callable[[], Any] | None, tool: Callable[..., Any] | None,
                 tokenizer: Any = None, random_splits: int = 64, label: str = "") -> Parsed:
    """Assert that ``sample`` parses whole to what it declares, and streamed in pieces to the same.

    Args:
        sample: the completion and its expected reasoning, content and calls.
        reasoning: makes a new reasoning parser (``functools.partial(factory, tokenizer)``), or None (the family has
            none).
        tool: makes a new tool-call parser given the sample's ``tools=`` (``functools.partial(factory, tokenizer)``),
            or None.
        tokenizer: the family's :class:`~anna_core.tokenizer.Tokenizer` (needed for a prompt given as text and an
            output given as ids).
        random_splits: how many seeded random cuts to try besides every two-piece cut and one character at a time.
        label: how failure messages name the sample (default: ``sample.name``).

    Returns:
        The whole parse.

    Raises:
        ValueError: a text prompt or an id output without a tokenizer, or neither parser given.
        AssertionError: the whole parse differs from the sample's expectation, or a streamed parse from the
            whole parse (the message shows the pieces).
    """
    if reasoning is None and tool is None:
        raise ValueError("check_sample needs a reasoning parser, a tool-call parser or both")
    label = label or sample.name or "sample"
    text_prompt = isinstance(sample.prompt, str) and bool(sample.prompt)
    if (text_prompt or not isinstance(sample.output, str)) and tokenizer is None:
        raise ValueError(f"{label}: a prompt given as text and an output given as token ids need the tokenizer")
    prompt_ids = tokenizer.encode(sample.prompt) if text_prompt else list(sample.prompt)
    stream = [sample.output] if isinstance(sample.output, str) else token_deltas(tokenizer, prompt_ids, sample.output)
    text = "".join(stream)

    def parse(chunks: list[str]) -> Parsed:
        return parse_stream(chunks, reasoning=reasoning() if reasoning is not None else None,
                            tool=tool(tools=list(sample.tools)) if tool is not None else None,
                            prompt_ids=prompt_ids)

    whole = parse([text])
    want = Parsed(sample.reasoning, sample.content, sample.tool_calls)
    if whole != want:
        raise AssertionError(f"{label}: the parsers made of the whole output {text!r}\n  {whole}\n"
                             f"but the sample declares\n  {want}")
    tries = [stream] if len(stream) > 1 else []
    for chunks in [*tries, *splits(text, random_splits=random_splits)]:
        got = parse(chunks)
        if got != whole:
            raise AssertionError(f"{label}: streamed as {chunks!r} the parsers gave\n  {got}\n"
                                 f"but the whole output gives\n  {whole}")
    return whole
