"""OpenAI request parsing and response bodies for ``/v1/chat/completions``, ``/v1/completions``
and ``/v1/models``.

Requests are parsed from the decoded JSON body by hand (not by a schema library) so each error
names the offending field in OpenAI's ``param`` and reads well. Rules:

- a field of the wrong type or out of range raises :class:`InvalidRequestError` (HTTP 400);
- a field OpenAI or vLLM defines that Anna does not implement is accepted only at its neutral
  value (``store=false``, ``modalities=["text"]`` ...); any other value is a 400 naming the
  field, never silently dropped;
- a field nobody defines is ignored and reported in ``unknown_fields`` (the route logs one
  warning per field name).

Tools, ``tool_choice`` and ``response_format`` are validated in :mod:`anna_core.server.tools`.
Response bodies are built in :mod:`anna_core.server.responses`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import attrs

from anna_core.engine.sampling_params import MAX_LOGPROBS, StructuredOutput
from anna_core.errors import InvalidRequestError
from anna_core.server.tools import ToolSetup, parse_response_format, parse_tools

# Sampling fields passed straight into SamplingParams when the client sets them.
_SAMPLING_NUMBERS = ("temperature", "top_p", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty")
_SAMPLING_INTS = ("top_k", "seed", "min_tokens")
_SAMPLING_BOOLS = ("ignore_eos", "skip_special_tokens", "include_stop_str_in_output")

MAX_N = 16

_COMMON_FIELDS = frozenset(
    ("model", "max_tokens", "stream", "stream_options", "stop", "stop_token_ids", "user", "n", "logit_bias",
     "service_tier")
    + _SAMPLING_NUMBERS + _SAMPLING_INTS + _SAMPLING_BOOLS
)
CHAT_FIELDS = _COMMON_FIELDS | {
    "messages", "max_completion_tokens", "chat_template_kwargs", "add_generation_prompt",
    "continue_final_message", "tools", "tool_choice", "parallel_tool_calls", "response_format",
    "logprobs", "top_logprobs", "store", "metadata", "functions", "function_call", "modalities", "audio",
    "prediction", "web_search_options", "reasoning_effort", "include_reasoning", "mm_processor_kwargs",
}
COMPLETION_FIELDS = _COMMON_FIELDS | {"prompt", "echo", "suffix", "best_of", "logprobs", "return_token_ids"}

# Known fields Anna does not implement: accepted only when the value is neutral.
_NEUTRAL: dict[str, Callable[[Any], bool]] = {
    "store": lambda v: v is None or v is False,
    "functions": lambda v: not v,
    "function_call": lambda v: v is None or v == "none",
    "modalities": lambda v: v is None or v == ["text"],
    "audio": lambda v: v is None,
    "prediction": lambda v: v is None,
    "web_search_options": lambda v: v is None,
    "reasoning_effort": lambda v: v is None,
    "service_tier": lambda v: v is None or v in ("auto", "default"),
}
_NEUTRAL_HINT = {
    "functions": "use 'tools'", "function_call": "use 'tool_choice'",
    "reasoning_effort": "use chat_template_kwargs.enable_thinking",
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
        n: independent choices per prompt.
    """

    model: str | None
    max_tokens: int | None
    stream: bool
    include_usage: bool
    sampling: dict[str, Any]
    unknown_fields: tuple[str, ...]
    n: int


def _parse_common(body: Any, known: frozenset[str], max_tokens_names: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise _fail(f"the request body must be a JSON object, got {_type_name(body)}", None)  # type: ignore[arg-type]
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise _fail(f"'model' must be a string, got {_type_name(model)}", "model")
    for name, neutral in _NEUTRAL.items():
        if name in known and not neutral(body.get(name)):
            hint = f" ({_NEUTRAL_HINT[name]})" if name in _NEUTRAL_HINT else ""
            raise _fail(f"'{name}' = {body.get(name)!r} is not supported by this server{hint}", name)
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
    if any(t < 0 for t in stop_ids):
        raise _fail(f"'stop_token_ids' entries must be token ids (>= 0), got {min(stop_ids)}", "stop_token_ids")
    if stop_ids:
        sampling["stop_token_ids"] = stop_ids
    bias = _logit_bias(body)
    if bias:
        sampling["logit_bias"] = bias
    n = _int(body, "n", minimum=1)
    if n is not None and n > MAX_N:
        raise _fail(f"'n' must be at most {MAX_N}, got {n}", "n")
    return {
        "model": model, "max_tokens": max_tokens, "stream": stream, "include_usage": include_usage,
        "sampling": sampling, "unknown_fields": tuple(sorted(k for k in body if k not in known)), "n": n or 1,
    }


def _logit_bias(body: dict[str, Any]) -> dict[int, float]:
    value = _dict(body, "logit_bias")
    if not value:
        return {}
    out = {}
    for key, bias in value.items():
        try:
            tid = int(key)
        except (TypeError, ValueError):
            raise _fail(f"'logit_bias' keys must be token ids, got {key!r}", "logit_bias") from None
        if tid < 0 or isinstance(bias, bool) or not isinstance(bias, (int, float)) or not -100 <= bias <= 100:
            raise _fail(f"'logit_bias[{key}]' must be a number in [-100, 100] for a token id >= 0", "logit_bias")
        out[tid] = float(bias)
    return out


MEDIA_PARTS = {"image_url": "image", "video_url": "video"}
"""Content part types that carry a medium, and the part the chat template sees for each."""


def _flatten_content(content: Any, where: str, media_urls: dict[str, list[str]]) -> str | list[dict[str, Any]] | None:
    """A message's content for the chat template: text parts joined by newlines into one string; a message with
    ``image_url`` / ``video_url`` parts keeps its parts in order as ``{"type": "text", "text": ...}`` /
    ``{"type": "image"}`` / ``{"type": "video"}`` (the template writes the model's placeholders), the URLs appended
    to ``media_urls["image"]`` / ``media_urls["video"]``."""
    if content is None or isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise _fail(f"'{where}' must be a string or an array of content parts", where)
    parts: list[dict[str, Any]] = []
    for j, part in enumerate(content):
        here = f"{where}[{j}]"
        if not isinstance(part, dict):
            raise _fail(f"'{here}' must be an object", here)
        kind = part.get("type")
        if kind in MEDIA_PARTS:
            media_urls[MEDIA_PARTS[kind]].append(_media_url(part.get(kind), f"{here}.{kind}"))
            parts.append({"type": MEDIA_PARTS[kind]})
            continue
        if kind != "text":
            raise _fail(f"content part type {kind!r} is not supported; only 'text', 'image_url' and 'video_url' "
                        "parts are", f"{here}.type")
        if not isinstance(part.get("text"), str):
            raise _fail(f"'{here}.text' must be a string", f"{here}.text")
        parts.append({"type": "text", "text": part["text"]})
    if any(p["type"] != "text" for p in parts):
        return parts
    return "\n".join(p["text"] for p in parts)


def _media_url(value: Any, where: str) -> str:
    """The URL of an ``image_url`` / ``video_url`` part: ``{"url": ..., "detail": ...}`` (``detail`` accepted, not
    used) or a bare string."""
    if isinstance(value, dict):
        detail = value.get("detail", "auto")
        if detail not in ("auto", "low", "high"):
            raise _fail(f"'{where}.detail' must be 'auto', 'low' or 'high', got {detail!r}", f"{where}.detail")
        value = value.get("url")
        where += ".url"
    if not isinstance(value, str) or not value:
        raise _fail(f"'{where}' must be a non-empty string (a data: URI or an http(s) URL)", where)
    return value


def _parse_messages(value: Any) -> tuple[list[dict[str, Any]], dict[str, list[str]]]:
    """The messages and the URLs of their media by modality (``{"image": [...], "video": [...]}``), in order."""
    if not isinstance(value, list) or not value:
        raise _fail("'messages' must be a non-empty array", "messages")
    out: list[dict[str, Any]] = []
    media_urls: dict[str, list[str]] = {"image": [], "video": []}
    for i, msg in enumerate(value):
        where = f"messages[{i}]"
        if not isinstance(msg, dict):
            raise _fail(f"'{where}' must be an object", where)
        role = msg.get("role")
        if role not in _ROLES:
            raise _fail(f"'{where}.role' must be one of {sorted(_ROLES)}, got {role!r}", f"{where}.role")
        content = _flatten_content(msg.get("content"), f"{where}.content", media_urls)
        if content is None and role != "assistant":
            raise _fail(f"'{where}.content' is required", f"{where}.content")
        parsed = {**msg, "content": content}
        if role == "assistant":
            parsed.update(_assistant_fields(msg, where))
            if parsed["content"] is None:  # beside tool calls: templates concatenate content, as vLLM renders it
                parsed["content"] = ""
            if not parsed.get("tool_calls"):  # null or []: a plain turn
                parsed.pop("tool_calls", None)
        elif role == "tool" and not isinstance(msg.get("tool_call_id"), str):
            # as the OpenAI API: a tool result names the call it answers
            raise _fail(f"'{where}.tool_call_id' must be the id (a string) of the call this message answers",
                        f"{where}.tool_call_id")
        out.append(parsed)
    return out, media_urls


def _assistant_fields(msg: dict[str, Any], where: str) -> dict[str, Any]:
    """Reasoning under both names and tool calls with object arguments, as chat templates expect."""
    fields: dict[str, Any] = {}
    reasoning = msg.get("reasoning_content", msg.get("reasoning"))
    if reasoning is not None:
        if not isinstance(reasoning, str):
            raise _fail(f"'{where}.reasoning_content' must be a string", f"{where}.reasoning_content")
        fields["reasoning_content"] = fields["reasoning"] = reasoning
    calls = msg.get("tool_calls")
    if not calls and isinstance(calls, (list, type(None))):
        if msg.get("content") is None and reasoning is None:
            raise _fail(f"'{where}.content' is required", f"{where}.content")
        return fields
    if not isinstance(calls, list):
        raise _fail(f"'{where}.tool_calls' must be an array", f"{where}.tool_calls")
    parsed = []
    for j, call in enumerate(calls):
        here = f"{where}.tool_calls[{j}]"
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise _fail(f"'{here}.function.name' must be a string", f"{here}.function")
        args = fn.get("arguments", "{}")
        if isinstance(args, str):
            try:
                args = json.loads(args) if args.strip() else {}
            except ValueError:
                raise _fail(f"'{here}.function.arguments' must be a JSON object", f"{here}.function.arguments") from None
        if not isinstance(args, dict):
            raise _fail(f"'{here}.function.arguments' must be a JSON object", f"{here}.function.arguments")
        parsed.append({"id": call.get("id"), "type": "function", "function": {"name": fn["name"], "arguments": args}})
    fields["tool_calls"] = parsed
    return fields


@attrs.frozen
class ChatCompletionRequest(_Common):
    """A parsed ``POST /v1/chat/completions`` body.

    Attributes:
        messages: messages with text content flattened to strings (a message with media keeps its parts as
            ``{"type": "text", "text"}`` / ``{"type": "image"}`` / ``{"type": "video"}``; other keys kept for the
            template; assistant reasoning under ``reasoning_content`` and ``reasoning``, tool-call
            arguments as objects, an assistant's missing or null ``content`` as ``""``, a null or
            empty ``tool_calls`` left out).
        chat_template_kwargs: extra variables for the chat template (``enable_thinking`` ...).
        add_generation_prompt: end the prompt with the assistant header (default True).
        continue_final_message: continue the last (assistant) message instead of starting one
            (default: True when the last message is the assistant's).
        tools: tools, ``tool_choice`` and ``parallel_tool_calls``.
        response_format: the grammar for ``json_object`` / ``json_schema`` (None: free text).
        include_reasoning: return the reasoning (vLLM's ``include_reasoning``, default True).
        image_urls: the URLs of the messages' ``image_url`` parts, in order (earlier turns included).
        video_urls: the URLs of the messages' ``video_url`` parts, in order (earlier turns included).
        mm_processor_kwargs: settings for the model's media processor (vLLM's name; Qwen3.5: ``min_pixels``,
            ``max_pixels`` for images, ``fps`` and ``max_frames`` for videos), checked by the processor.
    """

    messages: list[dict[str, Any]] = attrs.field(factory=list)
    chat_template_kwargs: dict[str, Any] = attrs.field(factory=dict)
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    tools: ToolSetup = attrs.field(factory=ToolSetup)
    response_format: StructuredOutput | None = None
    include_reasoning: bool = True
    image_urls: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    video_urls: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    mm_processor_kwargs: dict[str, Any] = attrs.field(factory=dict)

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
        cont = _bool(body, "continue_final_message")
        if cont and add_gen:
            raise _fail("'continue_final_message' and 'add_generation_prompt' cannot both be true",
                        "continue_final_message")
        messages, media_urls = _parse_messages(body.get("messages"))
        if cont is None:
            cont = add_gen is None and messages[-1]["role"] == "assistant"
        if cont and messages[-1]["role"] != "assistant":
            raise _fail("'continue_final_message' needs an assistant message last", "continue_final_message")
        logprobs = _bool(body, "logprobs")
        top = _int(body, "top_logprobs", minimum=0)
        if top is not None and top > MAX_LOGPROBS:
            raise _fail(f"'top_logprobs' must be at most {MAX_LOGPROBS}, got {top}", "top_logprobs")
        if top and not logprobs:
            raise _fail("'top_logprobs' needs 'logprobs': true", "top_logprobs")
        if logprobs:
            common["sampling"]["logprobs"] = top or 0
        tools = parse_tools(body)
        response_format = parse_response_format(body)
        if response_format is not None and tools.forced:
            raise _fail("'response_format' cannot be combined with a forced 'tool_choice'", "response_format")
        include_reasoning = _bool(body, "include_reasoning")
        return cls(
            **common,
            messages=messages,
            chat_template_kwargs=dict(kwargs),
            add_generation_prompt=not cont if add_gen is None else add_gen,
            continue_final_message=cont,
            tools=tools,
            response_format=response_format,
            include_reasoning=True if include_reasoning is None else include_reasoning,
            image_urls=media_urls["image"],
            video_urls=media_urls["video"],
            mm_processor_kwargs=dict(_dict(body, "mm_processor_kwargs") or {}),
        )


def _prompt_item(item: Any) -> str | list[int] | None:
    if isinstance(item, str):
        return item
    if isinstance(item, list) and item and all(isinstance(t, int) and not isinstance(t, bool) and t >= 0
                                               for t in item):
        return list(item)
    return None


@attrs.frozen
class CompletionRequest(_Common):
    """A parsed ``POST /v1/completions`` body.

    Attributes:
        prompts: one or more prompts, each text or token ids (choice ``i * n + j`` is prompt ``i``'s
            ``j``-th sample).
        echo: prepend the prompt to each choice's text.
        return_token_ids: each choice (and each streamed chunk) also carries the generated
            ``token_ids`` (vLLM's extra); always on for a model served without a tokenizer.
    """

    prompts: list[str | list[int]] = attrs.field(factory=list)
    echo: bool = False
    return_token_ids: bool = False

    @property
    def prompt(self) -> str | list[int]:
        """The first prompt."""
        return self.prompts[0]

    @classmethod
    def from_json(cls, body: Any) -> CompletionRequest:
        """Parse and validate a decoded JSON body.

        Raises:
            InvalidRequestError: a field is missing, mistyped, out of range or unsupported.
        """
        common = _parse_common(body, COMPLETION_FIELDS, ("max_tokens",))
        raw = body.get("prompt")
        single = _prompt_item(raw)
        if single is not None:
            prompts = [single]
        elif isinstance(raw, list) and raw and all(_prompt_item(p) is not None for p in raw):
            prompts = [_prompt_item(p) for p in raw]
        else:
            raise _fail("'prompt' is required: a string, an array of token ids, or an array of those", "prompt")
        if len(prompts) * common["n"] > MAX_N * 4:
            raise _fail(f"at most {MAX_N * 4} choices per request (prompts x n)", "prompt")
        best_of = _int(body, "best_of", minimum=1)
        if best_of is not None and best_of != common["n"]:
            raise _fail("'best_of' other than 'n' is not supported (every sample is returned)", "best_of")
        suffix = body.get("suffix")
        if suffix is not None and not isinstance(suffix, str):
            raise _fail("'suffix' must be a string", "suffix")
        if suffix:
            raise _fail("'suffix' (fill-in-the-middle) is not supported by this model's completions API", "suffix")
        logprobs = _int(body, "logprobs", minimum=0)
        if logprobs is not None:
            if logprobs > MAX_LOGPROBS:
                raise _fail(f"'logprobs' must be at most {MAX_LOGPROBS}, got {logprobs}", "logprobs")
            common["sampling"]["logprobs"] = logprobs
        echo = bool(_bool(body, "echo"))
        if echo and logprobs is not None:
            raise _fail("'echo' with 'logprobs' is not supported (prompt logprobs are not computed)", "echo")
        return cls(**common, prompts=prompts, echo=echo, return_token_ids=bool(_bool(body, "return_token_ids")))
