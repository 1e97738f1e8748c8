"""Bounds checked on a request before any CPU-heavy work starts on it.

A Python thread cannot be stopped, so work moved off the event loop (grammar compilation,
chat-template rendering, tokenization) is bounded by its input instead:

- a JSON schema (``response_format.json_schema.schema``, a tool's ``function.parameters``) may
  nest at most :data:`MAX_SCHEMA_DEPTH` objects / arrays deep and take at most
  :data:`MAX_SCHEMA_BYTES` of JSON; xgrammar's conversion grows much faster than linearly with the
  depth (a schema 900 levels deep took over a minute), so both are refused with a 400 naming the
  field and the limit before anything is compiled; so is a regular expression that unrolls to more
  than :data:`MAX_PATTERN_EXPANSION` characters (counted repetitions);
- a text prompt (a completion's ``prompt``, or the chat template's rendering of ``messages``) may
  have at most ``max_model_len * MAX_CHARS_PER_TOKEN`` characters: no tokenizer packs more
  characters into a token on ordinary text, so a longer prompt could never fit the context and is
  refused (``context_length_exceeded``) without tokenizing it.
"""

from __future__ import annotations

import json
import re
from typing import Any

from anna_core.errors import InvalidRequestError

MAX_SCHEMA_DEPTH = 64
"""Most objects / arrays nested in one JSON schema (the schema object itself is depth 1)."""

MAX_SCHEMA_BYTES = 64 * 1024
"""Most bytes of one JSON schema, written as compact JSON."""

MAX_CHARS_PER_TOKEN = 16
"""Characters per token a prompt may average before it is refused untokenized (ordinary text
averages 3-5; the bound is generous so that only prompts that cannot fit are refused)."""


def json_depth(value: Any) -> int:
    """How many objects / arrays nest in the decoded JSON ``value`` (0 for a scalar), computed
    iteratively so that any depth is safe."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return deepest


def check_schema(schema: Any, param: str, what: str) -> str:
    """Refuse a JSON schema that is too deep or too large to compile safely; return it as JSON.

    Args:
        schema: the decoded schema.
        param: the request field it came from (the error's ``param``).
        what: how the message names it (``"the response_format schema"``, ``"the parameters of
            function 'f'"``).

    Raises:
        InvalidRequestError: deeper than :data:`MAX_SCHEMA_DEPTH`, larger than :data:`MAX_SCHEMA_BYTES`, or
            with a pattern over :data:`MAX_PATTERN_EXPANSION` (the message states the limit).
    """
    depth = json_depth(schema)
    if depth > MAX_SCHEMA_DEPTH:
        raise InvalidRequestError(f"{what} nest {depth} objects / arrays deep; this server accepts at most "
                                  f"{MAX_SCHEMA_DEPTH}", param=param)
    text = json.dumps(schema, ensure_ascii=False, separators=(",", ":"))
    size = len(text.encode("utf-8"))
    if size > MAX_SCHEMA_BYTES:
        raise InvalidRequestError(f"{what} is {size} bytes of JSON; this server accepts at most "
                                  f"{MAX_SCHEMA_BYTES} bytes ({MAX_SCHEMA_BYTES // 1024} KiB)", param=param)
    _check_patterns(schema, param, what)
    return text


MAX_PATTERN_EXPANSION = 4096
"""Most characters a schema's regular expression (``pattern``, ``patternProperties`` keys) may stand for once
its counted repetitions are expanded: xgrammar unrolls ``x{n}`` into ``n`` copies, so a 47-byte pattern
``[a-z]{50000}`` took minutes to compile; nested counts multiply (``(a{100}){100}`` is 10,000)."""

_QUANT = re.compile(r"\{(\d+)(?:,(\d*))?\}")


def pattern_expansion(pattern: str) -> int:
    """An upper bound on how many characters ``pattern`` unrolls to: each atom counts 1, a counted
    repetition multiplies the atom (or group) before it by its largest count (an open ``{n,}`` by ``n + 1``),
    alternatives take their largest branch. ``*``, ``+`` and ``?`` do not unroll and count once."""
    stack: list[list[int]] = [[0, 0]]  # per open group: [best alternative so far, current alternative]
    last = 0  # size of the atom or group just closed (what a quantifier applies to)
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\":
            i += 2
            last = 1
            stack[-1][1] += 1
            continue
        if c == "[":  # a character class is one atom
            j = i + 1
            if j < n and pattern[j] == "^":
                j += 1
            if j < n and pattern[j] == "]":
                j += 1
            while j < n and pattern[j] != "]":
                j += 2 if pattern[j] == "\\" else 1
            i = j + 1
            last = 1
            stack[-1][1] += 1
            continue
        if c == "(":
            stack.append([0, 0])
            i += 1
            continue
        if c == ")" and len(stack) > 1:
            best, cur = stack.pop()
            last = max(best, cur)
            stack[-1][1] += last
            i += 1
            continue
        if c == "|":
            stack[-1][0] = max(stack[-1][0], stack[-1][1])
            stack[-1][1] = 0
            i += 1
            continue
        m = _QUANT.match(pattern, i) if c == "{" else None
        if m is not None:
            low, high = _count(m.group(1)), m.group(2)
            count = low + 1 if high == "" else _count(high) if high is not None else low
            stack[-1][1] += last * (count - 1)
            last *= count
            i = m.end()
            continue
        last = 1 if c not in "*+?" else last
        if c not in "*+?":
            stack[-1][1] += 1
        i += 1
    while len(stack) > 1:  # unbalanced: close what is open
        best, cur = stack.pop()
        stack[-1][1] += max(best, cur)
    return max(stack[0])


def _count(digits: str) -> int:
    """A repetition count, capped far above :data:`MAX_PATTERN_EXPANSION` (a count of more than nine digits, or
    one past Python's digit limit for ``int()``, counts as 10**9)."""
    return int(digits) if len(digits) <= 9 else 10**9


def _check_patterns(schema: Any, param: str, what: str) -> None:
    stack = [schema]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            patterns = [item["pattern"]] if isinstance(item.get("pattern"), str) else []
            if isinstance(item.get("patternProperties"), dict):
                patterns += [k for k in item["patternProperties"] if isinstance(k, str)]
            for p in patterns:
                size = pattern_expansion(p)
                if size > MAX_PATTERN_EXPANSION:
                    raise InvalidRequestError(
                        f"{what} has a pattern that unrolls to {size} characters ({p[:40]!r}...); this server accepts "
                        f"at most {MAX_PATTERN_EXPANSION} (counted repetitions such as {{n}} are unrolled)",
                        param=param)
            stack.extend(v for v in item.values() if isinstance(v, (dict, list)))
        elif isinstance(item, list):
            stack.extend(v for v in item if isinstance(v, (dict, list)))


def max_prompt_chars(max_model_len: int) -> int:
    """The longest text prompt (characters) that is tokenized for a context of ``max_model_len``."""
    return max_model_len * MAX_CHARS_PER_TOKEN


def check_prompt_chars(num_chars: int, max_model_len: int, param: str) -> None:
    """Refuse a text prompt too long to fit the context whatever its tokens, before tokenizing it.

    Raises:
        InvalidRequestError: ``context_length_exceeded``, ``param`` as given (``prompt`` /
            ``messages``).
    """
    limit = max_prompt_chars(max_model_len)
    if max_model_len > 0 and num_chars > limit:
        raise InvalidRequestError(
            f"This model's maximum context length is {max_model_len} tokens and the prompt has {num_chars} "
            f"characters; this server tokenizes prompts of at most {MAX_CHARS_PER_TOKEN} characters per token of "
            f"context ({limit} characters). Shorten the prompt.",
            param=param, code="context_length_exceeded")
