"""Bounds checked on a request before any CPU-heavy work starts on it.

A Python thread cannot be stopped, so work moved off the event loop (grammar compilation,
chat-template rendering, tokenization) is bounded by its input instead:

- a JSON schema (``response_format.json_schema.schema``, a tool's ``function.parameters``) may
  nest at most :data:`MAX_SCHEMA_DEPTH` objects / arrays deep and take at most
  :data:`MAX_SCHEMA_BYTES` of JSON; xgrammar's conversion grows much faster than linearly with the
  depth (a schema 900 levels deep took over a minute), so both are refused with a 400 naming the
  field and the limit before anything is compiled;
- a text prompt (a completion's ``prompt``, or the chat template's rendering of ``messages``) may
  have at most ``max_model_len * MAX_CHARS_PER_TOKEN`` characters: no tokenizer packs more
  characters into a token on ordinary text, so a longer prompt could never fit the context and is
  refused (``context_length_exceeded``) without tokenizing it.
"""

from __future__ import annotations

import json
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
        InvalidRequestError: deeper than :data:`MAX_SCHEMA_DEPTH` or larger than
            :data:`MAX_SCHEMA_BYTES` (the message states the limit).
    """
    depth = json_depth(schema)
    if depth > MAX_SCHEMA_DEPTH:
        raise InvalidRequestError(f"{what} nests {depth} objects / arrays deep; this server accepts at most "
                                  f"{MAX_SCHEMA_DEPTH}", param=param)
    text = json.dumps(schema, ensure_ascii=False, separators=(",", ":"))
    size = len(text.encode("utf-8"))
    if size > MAX_SCHEMA_BYTES:
        raise InvalidRequestError(f"{what} is {size} bytes of JSON; this server accepts at most "
                                  f"{MAX_SCHEMA_BYTES} bytes ({MAX_SCHEMA_BYTES // 1024} KiB)", param=param)
    return text


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
            f"characters, more than any prompt of {max_model_len} tokens holds (this server tokenizes at most "
            f"{MAX_CHARS_PER_TOKEN} characters per token of context: {limit}). Shorten the prompt.",
            param=param, code="context_length_exceeded")
