"""OpenAI request parsing and response bodies for ``/v1/chat/completions``, ``/v1/completions``
and ``/v1/models``.

Requests are parsed from the decoded JSON body by hand (not by a schema library) so each error
names the offending field in OpenAI's ``param`` and reads well. Rules:

- a field of the wrong type or out of range raises :class:`InvalidRequestError` (HTTP 400);
- a field OpenAI or vLLM defines that Anna does not implement yet is accepted only at its
  neutral value (``n=1``, ``tools=[]`` ...); any other value is a 400 naming the field, never
  silently dropped;
- a field nobody defines is ignored and reported in ``unknown_fields`` (the route logs one
  warning per field name).

Responses are plain JSON-ready dicts built by the ``*_body`` / ``*_chunk`` functions below.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from anna_core.errors import InvalidRequestError

# Sampling fields passed straight into SamplingParams when the client sets them.
_SAMPLING_NUMBERS = ("temperature", "top_p", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty")
_SAMPLING_INTS = ("top_k", "seed", "min_tokens")
_SAMPLING_BOOLS = ("ignore_eos", "skip_special_tokens", "include_stop_str_in_output")

_COMMON_FIELDS = frozenset(
    ("model", "max_tokens", "stream", "stream_options", "stop", "stop_token_ids", "user", "n", "logit_bias")
    + _SAMPLING_NUMBERS + _SAMPLING_INTS + _SAMPLING_BOOLS
)
CHAT_FIELDS = _COMMON_FIELDS | {
    "messages", "max_completion_tokens", "chat_template_kwargs", "add_generation_prompt",
    "continue_final_message", "tools", "tool_choice", "parallel_tool_calls", "response_format",
    "logprobs", "top_logprobs", "store", "metadata",
}
COMPLETION_FIELDS = _COMMON_FIELDS | {"prompt", "echo", "suffix", "best_of", "logprobs"}

# Known fields not implemented yet: accepted only when the value is neutral.
_NEUTRAL: dict[str, Callable[[Any], bool]] = {
    "n": lambda v: v is None or v == 1,
    "best_of": lambda v: v is None or v == 1,
    "logit_bias": lambda v: not v,
    "logprobs": lambda v: v is None or v is False,
    "top_logprobs": lambda v: v is None or v == 0,
    "tools": lambda v: not v,
    "tool_choice": lambda v: v is None or v in ("none", "auto"),
    "response_format": lambda v: v is None or (isinstance(v, dict) and v.get("type") == "text"),
    "echo": lambda v: v is None or v is False,
    "suffix": lambda v: v is None or v == "",
}

_ROLES = frozenset(("system", "developer", "user", "assistant", "tool"))
# chat_template_kwargs may not override what the server itself passes to the template.
_RESERVED_TEMPLATE_KWARGS = frozenset(
    ("messages", "conversation", "tools", "tokenize", "add_generation_prompt", "continue_final_message",
     "return_dict", "chat_template")
)


def _type_name(value: Any) -> str:
    return {bool: "boolean", int: "integer", float: "number", str: "string", list: "array",
            dict: "object", type(None): "null"}.get(type(value), type(value).__name__)


def _fail(message: str, param: str) -> InvalidRequestError:
    return InvalidRequestError(message, param=param)


def _int(body: dict[str, Any], name: str, minimum: int | None = None) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(f"'{name}' must be an integer, got {_type_name(value)}", name)
    if minimum is not None and value < minimum:
        raise _fail(f"'{name}' must be at least {minimum}, got {value}", name)
    return value


def _number(body: dict[str, Any], name: str) -> float | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _fail(f"'{name}' must be a number, got {_type_name(value)}", name)
    return float(value)


def _bool(body: dict[str, Any], name: str) -> bool | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, bool):
        raise _fail(f"'{name}' must be a boolean, got {_type_name(value)}", name)
    return value


def _dict(body: dict[str, Any], name: str) -> dict[str, Any] | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _fail(f"'{name}' must be an object, got {_type_name(value)}", name)
    return value


def _stop(body: dict[str, Any]) -> list[str]:
    value = body.get("stop")
    if value is None:
        return []
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(s, str) for s in items):
        raise _fail("'stop' must be a string or an array of strings", "stop")
    if any(s == "" for s in items):
        raise _fail("'stop' strings must not be empty", "stop")
    return list(items)


def _int_list(body: dict[str, Any], name: str) -> list[int]:
    value = body.get(name)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in value):
        raise _fail(f"'{name}' must be an array of integers", name)
    return list(value)


@attrs.frozen
class _Common:
    """Fields shared by chat and text completions.

    Attributes:
        model: requested model name (None: the served model).
        max_tokens: requested completion limit (None: the server decides).
        stream: answer with server-sent events.
        include_usage: ``stream_options.include_usage``: a final chunk carries usage.
        sampling: SamplingParams fields the client set explicitly (vLLM names).
        unknown_fields: body keys nobody defines (ignored).
    """

    model: str | None
    max_tokens: int | None
    stream: bool
    include_usage: bool
    sampling: dict[str, Any]
    unknown_fields: tuple[str, ...]


def _parse_common(body: Any, known: frozenset[str], max_tokens_names: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise _fail(f"the request body must be a JSON object, got {_type_name(body)}", None)  # type: ignore[arg-type]
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise _fail(f"'model' must be a string, got {_type_name(model)}", "model")
    for name, neutral in _NEUTRAL.items():
        if name in known and not neutral(body.get(name)):
            raise _fail(f"'{name}' = {body.get(name)!r} is not supported by this server yet", name)
    max_tokens = None
    for name in max_tokens_names:  # the first one set wins (max_completion_tokens over max_tokens)
        max_tokens = _int(body, name, minimum=1)
        if max_tokens is not None:
            break
    stream = bool(_bool(body, "stream"))
    options = _dict(body, "stream_options") or {}
    include_usage = options.get("include_usage", False)
    if not isinstance(include_usage, bool):
        raise _fail("'stream_options.include_usage' must be a boolean", "stream_options")
    if options and not stream:
        raise _fail("'stream_options' is only allowed when 'stream' is true", "stream_options")
    if body.get("user") is not None and not isinstance(body["user"], str):
        raise _fail("'user' must be a string", "user")
    sampling: dict[str, Any] = {}
    for name in _SAMPLING_NUMBERS:
        sampling[name] = _number(body, name)
    for name in _SAMPLING_INTS:
        sampling[name] = _int(body, name)
    for name in _SAMPLING_BOOLS:
        sampling[name] = _bool(body, name)
    sampling = {k: v for k, v in sampling.items() if v is not None}
    stop = _stop(body)
    if stop:
        sampling["stop"] = stop
    stop_ids = _int_list(body, "stop_token_ids")
    if stop_ids:
        sampling["stop_token_ids"] = stop_ids
    return dict(
        model=model,
        max_tokens=max_tokens,
        stream=stream,
        include_usage=include_usage,
        sampling=sampling,
        unknown_fields=tuple(sorted(k for k in body if k not in known)),
    )


def _flatten_content(content: Any, where: str) -> str | None:
    """A message's content as one string: text parts joined by newlines."""
    if content is None or isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise _fail(f"'{where}' must be a string or an array of content parts", where)
    texts = []
    for j, part in enumerate(content):
        if not isinstance(part, dict):
            raise _fail(f"'{where}[{j}]' must be an object", f"{where}[{j}]")
        if part.get("type") != "text":
            raise _fail(f"content part type {part.get('type')!r} is not supported; only 'text' parts are",
                        f"{where}[{j}].type")
        if not isinstance(part.get("text"), str):
            raise _fail(f"'{where}[{j}].text' must be a string", f"{where}[{j}].text")
        texts.append(part["text"])
    return "\n".join(texts)


def _parse_messages(value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not value:
        raise _fail("'messages' must be a non-empty array", "messages")
    out = []
    for i, msg in enumerate(value):
        where = f"messages[{i}]"
        if not isinstance(msg, dict):
            raise _fail(f"'{where}' must be an object", where)
        role = msg.get("role")
        if role not in _ROLES:
            raise _fail(f"'{where}.role' must be one of {sorted(_ROLES)}, got {role!r}", f"{where}.role")
        content = _flatten_content(msg.get("content"), f"{where}.content")
        if content is None and not (role == "assistant" and msg.get("tool_calls")):
            raise _fail(f"'{where}.content' is required", f"{where}.content")
        out.append({**msg, "content": content})
    return out


@attrs.frozen
class ChatCompletionRequest(_Common):
    """A parsed ``POST /v1/chat/completions`` body.

    Attributes:
        messages: messages with text content flattened to strings (other keys kept for the template).
        chat_template_kwargs: extra variables for the chat template (``enable_thinking`` ...).
        add_generation_prompt: end the prompt with the assistant header (default True).
        continue_final_message: continue the last (assistant) message instead of starting one.
    """

    messages: list[dict[str, Any]] = attrs.field(factory=list)
    chat_template_kwargs: dict[str, Any] = attrs.field(factory=dict)
    add_generation_prompt: bool = True
    continue_final_message: bool = False

    @classmethod
    def from_json(cls, body: Any) -> ChatCompletionRequest:
        """Parse and validate a decoded JSON body.

        Raises:
            InvalidRequestError: a field is missing, mistyped, out of range or unsupported.
        """
        common = _parse_common(body, CHAT_FIELDS, ("max_completion_tokens", "max_tokens"))
        kwargs = _dict(body, "chat_template_kwargs") or {}
        reserved = sorted(_RESERVED_TEMPLATE_KWARGS & set(kwargs))
        if reserved:
            raise _fail(f"'chat_template_kwargs' may not set {reserved}", "chat_template_kwargs")
        add_gen = _bool(body, "add_generation_prompt")
        cont = bool(_bool(body, "continue_final_message"))
        if cont and add_gen:
            raise _fail("'continue_final_message' and 'add_generation_prompt' cannot both be true",
                        "continue_final_message")
        messages = _parse_messages(body.get("messages"))
        if cont and messages[-1]["role"] != "assistant":
            raise _fail("'continue_final_message' needs an assistant message last", "continue_final_message")
        return cls(
            **common,
            messages=messages,
            chat_template_kwargs=dict(kwargs),
            add_generation_prompt=not cont if add_gen is None else add_gen,
            continue_final_message=cont,
        )


@attrs.frozen
class CompletionRequest(_Common):
    """A parsed ``POST /v1/completions`` body.

    Attributes:
        prompt: the prompt text, or the prompt as token ids.
    """

    prompt: str | list[int] = ""

    @classmethod
    def from_json(cls, body: Any) -> CompletionRequest:
        """Parse and validate a decoded JSON body.

        Raises:
            InvalidRequestError: a field is missing, mistyped, out of range or unsupported.
        """
        common = _parse_common(body, COMPLETION_FIELDS, ("max_tokens",))
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
            prompt = prompt[0]  # a batch of one prompt
        if isinstance(prompt, list):
            if not prompt or not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in prompt):
                raise _fail("'prompt' must be a string, an array of token ids, or an array of one of those "
                            "(several prompts per request are not supported yet)", "prompt")
        elif not isinstance(prompt, str):
            raise _fail("'prompt' is required and must be a string or an array of token ids", "prompt")
        return cls(**common, prompt=prompt)


# ----------------------------------------------------------------------------- responses


def usage_body(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def chat_completion_body(
    request_id: str, created: int, model: str, text: str, finish_reason: str | None, usage: dict[str, int]
) -> dict[str, Any]:
    return {
        "id": request_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "logprobs": None,
            "finish_reason": finish_reason,
        }],
        "usage": usage,
    }


def chat_chunk(
    request_id: str, created: int, model: str, delta: dict[str, Any] | None, finish_reason: str | None = None,
    *, usage: dict[str, int] | None = None, include_usage: bool = False,
) -> dict[str, Any]:
    """One ``chat.completion.chunk``; ``delta=None`` gives the usage-only chunk (empty choices)."""
    chunk: dict[str, Any] = {"id": request_id, "object": "chat.completion.chunk", "created": created, "model": model}
    chunk["choices"] = [] if delta is None else [
        {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
    ]
    if include_usage:
        chunk["usage"] = usage
    return chunk


def completion_body(
    request_id: str, created: int, model: str, text: str, finish_reason: str | None, usage: dict[str, int]
) -> dict[str, Any]:
    return {
        "id": request_id,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}],
        "usage": usage,
    }


def completion_chunk(
    request_id: str, created: int, model: str, text: str | None, finish_reason: str | None = None,
    *, usage: dict[str, int] | None = None, include_usage: bool = False,
) -> dict[str, Any]:
    """One streamed ``text_completion``; ``text=None`` gives the usage-only chunk (empty choices)."""
    chunk: dict[str, Any] = {"id": request_id, "object": "text_completion", "created": created, "model": model}
    chunk["choices"] = [] if text is None else [
        {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
    ]
    if include_usage:
        chunk["usage"] = usage
    return chunk


def model_list_body(model: str, created: int, max_model_len: int) -> dict[str, Any]:
    return {
        "object": "list",
        "data": [{"id": model, "object": "model", "created": created, "owned_by": "anna",
                  "root": model, "parent": None, "max_model_len": max_model_len}],
    }
